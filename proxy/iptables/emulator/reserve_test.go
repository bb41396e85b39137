package emulator

import (
	"fmt"
	"strings"
	"testing"
)

// TestReserveLargeDeclarations: a NoFlush restore declaring thousands of chains into a
// table that holds few (a Proxier's first sync) sizes the chain index for them and makes
// it flat (no base layer); one declaring as many as the table holds (a full resync)
// keeps the layers. Either way every chain resolves, in the new version only, and the
// version before is unchanged.
func TestReserveLargeDeclarations(t *testing.T) {
	text := func(n int, rule string) []byte {
		var b strings.Builder
		b.WriteString("*nat\n")
		for i := range n {
			fmt.Fprintf(&b, ":C%05d - [0:0]\n", i)
		}
		for i := range n {
			fmt.Fprintf(&b, "-A C%05d %s\n", i, rule)
		}
		b.WriteString("COMMIT\n")
		return []byte(b.String())
	}
	const n = 5000
	// What a Proxier's first sync finds: a nat table holding its top-level chains.
	small, err := Restore(NewRuleset(IPv4), []byte("*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n"), RestoreOptions{File: "small"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := Restore(small, text(n, "-j ACCEPT"), RestoreOptions{File: "first", NoFlush: true})
	if err != nil {
		t.Fatal(err)
	}
	nat := first.Table("nat")
	if nat.base != nil {
		t.Errorf("after a first load of %d chains the index has a base layer of %d", n, len(nat.base))
	}
	if got := len(nat.byName); got != nat.NumChains() {
		t.Errorf("flat index holds %d names, the table %d chains", got, nat.NumChains())
	}
	if small.Table("nat").Chain("C00000") != nil || small.Table("nat").NumChains() != 5 {
		t.Errorf("the version before changed: %d chains", small.Table("nat").NumChains())
	}
	if nat.Chain("KUBE-SERVICES") == nil {
		t.Error("the first load lost KUBE-SERVICES")
	}

	second, err := Restore(first, text(n, "-j DROP"), RestoreOptions{File: "second", NoFlush: true})
	if err != nil {
		t.Fatal(err)
	}
	nat2 := second.Table("nat")
	if nat2.base == nil {
		t.Error("a resync of as many chains as the table holds dropped the base layer")
	}
	for i := range n {
		name := fmt.Sprintf("C%05d", i)
		c2, c1 := nat2.Chain(name), nat.Chain(name)
		if c2 == nil || len(c2.Rules) != 1 || c2.Rules[0].String() != "-j DROP" {
			t.Fatalf("%s in the second version: %v", name, c2)
		}
		if c1 == nil || len(c1.Rules) != 1 || c1.Rules[0].String() != "-j ACCEPT" {
			t.Fatalf("%s in the first version changed: %v", name, c1)
		}
	}
}
