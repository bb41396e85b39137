package dns

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestRing: a ring lists the last cap items added, oldest first.
func TestRing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.IntRange(1, 8).Draw(t, "cap")
		r := ring[int]{cap: capacity}
		var all []int
		for i, n := 0, rapid.IntRange(0, 40).Draw(t, "n"); i < n; i++ {
			if rapid.IntRange(0, 9).Draw(t, "op") == 0 {
				r.reset()
				all = nil
				continue
			}
			r.add(i)
			all = append(all, i)
		}
		want := all[max(0, len(all)-capacity):]
		if got := r.list(); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("list %v, want %v", got, want)
		}
	})
}
