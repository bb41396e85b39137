package emulator

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// checkChainList checks a table's chunked chain list against want (the chains in
// order) and its own invariants: chunk starts add up, no chunk is empty or over
// chainChunkSize, the accessors agree, and Chain finds each chain by name.
func checkChainList(t *rapid.T, tb *Table, want []*Chain, what string) {
	l := &tb.chains
	if got := tb.Chains(); !slices.Equal(got, want) {
		t.Fatalf("%s: chains %v, want %v", what, chainNames(got), chainNames(want))
	}
	if tb.NumChains() != len(want) {
		t.Fatalf("%s: NumChains %d, want %d", what, tb.NumChains(), len(want))
	}
	n := 0
	for i, c := range tb.AllChains() {
		if i != n || c != want[i] || tb.ChainAt(i) != c {
			t.Fatalf("%s: AllChains/ChainAt at %d disagree with the model", what, i)
		}
		if tb.Chain(c.Name) != c {
			t.Fatalf("%s: Chain(%q) is not the chain at %d", what, c.Name, i)
		}
		n++
	}
	if n != len(want) {
		t.Fatalf("%s: AllChains yielded %d chains, want %d", what, n, len(want))
	}
	if len(l.chunks) == 0 {
		if len(l.start) != 0 {
			t.Fatalf("%s: empty list with starts %v", what, l.start)
		}
		return
	}
	if len(l.start) != len(l.chunks)+1 || l.start[0] != 0 {
		t.Fatalf("%s: %d chunks, starts %v", what, len(l.chunks), l.start)
	}
	for k, ch := range l.chunks {
		if len(ch.chains) == 0 || len(ch.chains) > chainChunkSize {
			t.Fatalf("%s: chunk %d holds %d chains", what, k, len(ch.chains))
		}
		if int(l.start[k+1]-l.start[k]) != len(ch.chains) {
			t.Fatalf("%s: chunk %d: starts %d..%d for %d chains", what, k, l.start[k], l.start[k+1], len(ch.chains))
		}
	}
	// Deletions merge small chunks: the index stays within about 4× the fewest
	// chunks that could hold the chains.
	if limit := 4*((len(want)+chainChunkSize-1)/chainChunkSize) + 1; len(l.chunks) > limit {
		t.Fatalf("%s: %d chains in %d chunks (more than %d)", what, len(want), len(l.chunks), limit)
	}
}

func chainNames(cs []*Chain) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

// TestChainListProperty: a table's chunked chain list, through random sequences of
// chains added, deleted, replaced by a new version and renamed, with new versions
// taken (cow) along the way, holds the chains a plain slice holds after the same
// operations, in the same order; and every earlier version still holds what it held
// when the next was taken.
func TestChainListProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tb, _ := NewTable(TableNAT)
		model := tb.Chains()
		next := 0
		newName := func() string { next++; return fmt.Sprintf("C%d", next) }
		// A long table from the start in some cases, so that chunks fill up.
		for range rapid.SampledFrom([]int{0, 10, 300, 1000}).Draw(t, "initial") {
			model = append(model, tb.AddChain(newName()))
		}
		type version struct {
			t    *Table
			want []*Chain
		}
		var versions []version
		users := func() []int {
			var is []int
			for i, c := range model {
				if !c.Builtin {
					is = append(is, i)
				}
			}
			return is
		}
		for step := range rapid.IntRange(1, 200).Draw(t, "steps") {
			what := fmt.Sprintf("step %d", step)
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op <= 1:
				model = append(model, tb.AddChain(newName()))
			case op <= 4: // delete, one or a run (emptying whole chunks)
				us := users()
				if len(us) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(us)-1).Draw(t, "delete")
				run := rapid.SampledFrom([]int{1, 1, 1, 50, 300}).Draw(t, "run")
				for _, pos := range slices.Backward(us[i:min(len(us), i+run)]) {
					tb.removeChain(model[pos].Name)
					model = slices.Delete(model, pos, pos+1)
				}
			case op <= 6: // replace by a new version, as a restore that changes a chain does
				i := rapid.IntRange(0, len(model)-1).Draw(t, "replace")
				c := model[i]
				nc := &Chain{Name: c.Name, Builtin: c.Builtin, Policy: c.Policy}
				tb.replaceChain(c, nc)
				model[i] = nc
			case op == 7: // rename, as -E does: a new version under the new name
				us := users()
				if len(us) == 0 {
					continue
				}
				i := us[rapid.IntRange(0, len(us)-1).Draw(t, "rename")]
				c := model[i]
				nc := &Chain{Name: c.Name}
				tb.replaceChain(c, nc)
				tb.setIndex(nc.Name, nil)
				nc.Name = newName()
				tb.setIndex(nc.Name, nc)
				model[i] = nc
			default: // a new version: the one before must not change from here on
				versions = append(versions, version{tb, slices.Clone(model)})
				tb = tb.cow()
			}
			checkChainList(t, tb, model, what)
		}
		for i, v := range versions {
			checkChainList(t, v.t, v.want, fmt.Sprintf("version %d", i))
		}
	})
}
