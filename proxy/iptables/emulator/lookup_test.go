package emulator

import (
	"errors"
	"testing"
)

// TestLookupForgetsChangedChains: the chains a restore keeps from its lookups (hit,
// jump, recent) are dropped when the chain a name stands for changes within the
// restore: a deleted chain is missing to the lines after, and a chain flushed into
// the transaction's copy takes the rules of the lines after (not the version before,
// which stays as it was).
func TestLookupForgetsChangedChains(t *testing.T) {
	// Deleted: the jump after -X finds no chain Y.
	_, err := Restore(NewRuleset(IPv4), []byte(`*filter
:X - [0:0]
:Y - [0:0]
-A X -j Y
-D X -j Y
-X Y
-A X -j Y
COMMIT
`), RestoreOptions{File: "t"})
	var pe *ParseError
	if !errors.Is(err, ErrChainNotFound) || !errors.As(err, &pe) || pe.Line != 7 {
		t.Fatalf("jump to a deleted chain: %v, want ErrChainNotFound at line 7", err)
	}

	// Flushed: Y of the version before is looked up (jump), then flushed by its
	// chain line (the transaction's copy replaces it), then appended to.
	base, err := Restore(NewRuleset(IPv4), []byte("*filter\n:X - [0:0]\n:Y - [0:0]\n-A Y -j DROP\nCOMMIT\n"), RestoreOptions{File: "base"})
	if err != nil {
		t.Fatal(err)
	}
	next, err := Restore(base, []byte("*filter\n-A X -j Y\n:Y - [0:0]\n-A Y -j ACCEPT\nCOMMIT\n"), RestoreOptions{File: "next", NoFlush: true})
	if err != nil {
		t.Fatal(err)
	}
	if y := next.Table("filter").Chain("Y"); y == nil || len(y.Rules) != 1 || y.Rules[0].String() != "-j ACCEPT" {
		t.Errorf("Y after the flush: %v, want one rule -j ACCEPT", y)
	}
	if y := base.Table("filter").Chain("Y"); len(y.Rules) != 1 || y.Rules[0].String() != "-j DROP" {
		t.Errorf("Y of the version before changed: %v", y.Rules)
	}
}
