package emulator

import "testing"

// resolveJumps uses a jump's parse-time hint (JumpTarget.to) only while it is still
// the table's chain of that name: a hint to a replaced chain, or to one whose position
// another chain now holds, is looked up by name instead.
func TestResolveJumpsStaleHint(t *testing.T) {
	tb, err := NewTable(TableFilter)
	if err != nil {
		t.Fatal(err)
	}
	a := tb.AddChain("A")
	b := tb.AddChain("B")
	c := tb.AddChain("C")
	old := &Chain{Name: "B", pos: c.pos} // a replaced version of B, its position now C's
	gone := &Chain{Name: "B", pos: int32(tb.NumChains() + 5)}
	renamed := &Chain{Name: "Z", pos: b.pos}
	for _, tc := range []struct {
		name string
		hint *Chain
	}{{"none", nil}, {"current", b}, {"replaced", old}, {"out of range", gone}, {"other name", renamed}} {
		if tc.hint == renamed {
			continue // below
		}
		a.Rules = []*Rule{{Spec: &Spec{Target: &JumpTarget{Chain: "B", to: tc.hint}}}}
		g := resolveJumps(tb)
		if got := g.dst[g.start[a.pos]]; got != b.pos {
			t.Errorf("%s hint: jump resolved to chain %d, want B at %d", tc.name, got, b.pos)
		}
	}
	// B renamed Z: the hint's chain is at its position, but under another name, and
	// the table has no chain B.
	tb.setChainAt(int(b.pos), renamed)
	tb.setIndex("B", nil)
	a.Rules = []*Rule{{Spec: &Spec{Target: &JumpTarget{Chain: "B", to: renamed}}}}
	if g := resolveJumps(tb); g.dst[g.start[a.pos]] != -1 {
		t.Errorf("a hint to a chain of another name resolved to %d, want -1 (no chain B)", g.dst[g.start[a.pos]])
	}
}

// No rule keeps a hint after its restore: rules outlive it (later versions share
// them), and a hint would keep the chains of its version alive.
func TestRestoreDropsHints(t *testing.T) {
	text := "*filter\n:A - [0:0]\n:B - [0:0]\n-A A -j B\n-A A -s 10.0.0.0/8,10.1.0.0/16 -g B\n-A INPUT -j A\nCOMMIT\n"
	rs, err := Restore(NewRuleset(IPv4), []byte(text), RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	jumps := 0
	for _, tb := range rs.Tables {
		for _, c := range tb.AllChains() {
			for _, r := range c.Rules {
				if j, ok := r.Target.(*JumpTarget); ok {
					jumps++
					if j.to != nil {
						t.Errorf("%s: jump to %s keeps its hint after the restore", c.Name, j.Chain)
					}
				}
			}
		}
	}
	if jumps != 4 {
		t.Fatalf("%d jumps, want 4", jumps)
	}
}
