package emulator

import (
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

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

// A chain that exists empty and is declared again and filled with -A lines (kube-proxy's
// first sync into the chains its setup made) keeps its lines for the next version to
// reuse, as a chain created by the restore does.
func TestEmptyChainFilledKeepsLines(t *testing.T) {
	var b strings.Builder
	b.WriteString("*nat\n:KUBE-SERVICES - [0:0]\n")
	for i := range memoMinRules + 4 {
		fmt.Fprintf(&b, "-A KUBE-SERVICES -d 10.96.0.%d/32 -p tcp -m tcp --dport 80 -j ACCEPT\n", i+1)
	}
	b.WriteString("COMMIT\n")
	e := New(IPv4)
	restore := func(text string) *Chain {
		t.Helper()
		if err := e.RestoreText([]byte(text), RestoreOptions{NoFlush: true}); err != nil {
			t.Fatal(err)
		}
		return e.Ruleset().Chain(TableNAT, "KUBE-SERVICES")
	}
	restore("*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n")
	first := restore(b.String())
	if first.src == nil {
		t.Fatal("the chain filled from empty keeps no lines")
	}
	second := restore(b.String()) // its rules reuse the first's: the same Specs
	for i, r := range second.Rules {
		if r.Spec != first.Rules[i].Spec {
			t.Fatalf("rule %d was parsed again, not reused from the version filled from empty", i+1)
		}
	}
}

// mergeLayers is the layered index flattened, whichever layer is larger.
func TestMergeLayers(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		names := []string{"A", "B", "C", "D", "E", "F", "G", "H"}
		chains := map[string]*Chain{}
		for _, n := range names {
			chains[n] = &Chain{Name: n}
		}
		base, over := map[string]*Chain{}, map[string]*Chain{}
		for _, n := range names {
			switch rapid.IntRange(0, 5).Draw(t, "base "+n) {
			case 0, 1, 2:
				base[n] = chains[n]
			}
			switch rapid.IntRange(0, 5).Draw(t, "over "+n) {
			case 0, 1:
				over[n] = &Chain{Name: n}
			case 2:
				over[n] = nil // deleted in the upper layer
			}
		}
		want := map[string]*Chain{}
		for k, v := range base {
			want[k] = v
		}
		for k, v := range over {
			if v == nil {
				delete(want, k)
			} else {
				want[k] = v
			}
		}
		got := mergeLayers(base, over)
		if len(got) != len(want) {
			t.Fatalf("merged %d names, want %d (base %v, over %v)", len(got), len(want), base, over)
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("%s: %p, want %p", k, got[k], v)
			}
		}
	})
}
