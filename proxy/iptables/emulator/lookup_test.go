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

// TestLookupDeclaredChains: a chain not yet looked up is found among the chains
// declared after the last one found (kube-proxy's order), and a declared chain that
// no longer stands for its name is not: -X without a chain deletes every empty one
// (A and B, still ahead of the lookups), -N makes a new A, and the rule after must land
// in the new A; a rename leaves B's old name to a new chain. Out of order, the index
// answers.
func TestLookupDeclaredChains(t *testing.T) {
	rs, err := Restore(NewRuleset(IPv4), []byte(`*filter
:A - [0:0]
:B - [0:0]
-X
-N A
-A A -j ACCEPT
COMMIT
`), RestoreOptions{File: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if a := rs.Table("filter").Chain("A"); a == nil || len(a.Rules) != 1 || a.Rules[0].String() != "-j ACCEPT" {
		t.Errorf("A made again after -X: %v, want one rule -j ACCEPT", a)
	}
	if b := rs.Table("filter").Chain("B"); b != nil {
		t.Errorf("B after -X: %v, want none", b)
	}

	rs, err = Restore(NewRuleset(IPv4), []byte(`*filter
:A - [0:0]
:B - [0:0]
:C - [0:0]
-E B D
-N B
-A A -j B
-A B -j C
-A D -j DROP
COMMIT
`), RestoreOptions{File: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ft := rs.Table("filter")
	oneRuleEach(t, ft, map[string]string{"A": "-j B", "B": "-j C", "D": "-j DROP"})
	if c := ft.Chain("C"); c == nil || len(c.Rules) != 0 {
		t.Errorf("chain C: %v, want an empty chain", c)
	}

	// Rules naming the declared chains in another order than declared.
	rs, err = Restore(NewRuleset(IPv4), []byte(`*filter
:A - [0:0]
:B - [0:0]
:C - [0:0]
:D - [0:0]
:E - [0:0]
:F - [0:0]
-A F -j E
-A E -j DROP
-A A -j F
-A C -j ACCEPT
-A B -j C
COMMIT
`), RestoreOptions{File: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ft = rs.Table("filter")
	oneRuleEach(t, ft, map[string]string{"F": "-j E", "E": "-j DROP", "A": "-j F", "C": "-j ACCEPT", "B": "-j C"})
}

// TestHoldsAfterDeletion: after -X removes a chain, the chains after it that the
// restore changed before sit one place earlier than they last knew; an incremental
// restore must still count them as the table's (Table.holds) and validate what it
// changed in them: here a loop.
func TestHoldsAfterDeletion(t *testing.T) {
	base, err := Restore(NewRuleset(IPv4), []byte("*filter\n:A - [0:0]\n:B - [0:0]\n:C - [0:0]\n:D - [0:0]\n-A D -j ACCEPT\nCOMMIT\n"), RestoreOptions{File: "base"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Restore(base, []byte("*filter\n-A C -j B\n-A B -j C\n-X A\nCOMMIT\n"), RestoreOptions{File: "next", NoFlush: true})
	if !errors.Is(err, ErrLoop) {
		t.Fatalf("a loop made after a deletion: %v, want ErrLoop", err)
	}
	next, err := Restore(base, []byte("*filter\n-A C -j B\n-A B -j D\n-X A\nCOMMIT\n"), RestoreOptions{File: "next", NoFlush: true})
	if err != nil {
		t.Fatal(err)
	}
	ft := next.Table("filter")
	oneRuleEach(t, ft, map[string]string{"B": "-j D", "C": "-j B", "D": "-j ACCEPT"})
	if ft.Chain("A") != nil {
		t.Error("A is still there after -X A")
	}
}

// oneRuleEach checks that each named chain of table t holds one rule, the one given.
func oneRuleEach(t *testing.T, table *Table, want map[string]string) {
	t.Helper()
	for name, rule := range want {
		if c := table.Chain(name); c == nil || len(c.Rules) != 1 || c.Rules[0].String() != rule {
			t.Errorf("chain %s: %v, want one rule %s", name, c, rule)
		}
	}
}
