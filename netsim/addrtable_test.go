package netsim

import (
	"math/rand/v2"
	"testing"
)

// addr4Table agrees with a Go map through random sets, updates and deletions, with
// keys drawn from a small range so that runs collide, wrap around the table's end and
// are cut by deletions (the backward shift) while the table grows.
func TestAddr4TableMatchesMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ifaces := []*Iface{{}, {}, {}}
	ports := []*podPort{{}, {}}
	for round := range 40 {
		var tab addr4Table
		want := map[uint32]addrEntry{}
		keys := 4 + round*8 // key range: from a few to a few hundred
		for op := range 3000 {
			k := r.Uint32N(uint32(keys)) * 0x01000001 // spread over the address space
			var e addrEntry
			switch r.IntN(4) {
			case 0: // delete
			case 1:
				e.port = ports[r.IntN(len(ports))]
			default:
				e.local = ifaces[r.IntN(len(ifaces))]
			}
			tab.set(k, e)
			if e == (addrEntry{}) {
				delete(want, k)
			} else {
				want[k] = e
			}
			if tab.n != len(want) {
				t.Fatalf("round %d op %d: %d entries, want %d", round, op, tab.n, len(want))
			}
			if op%97 == 0 {
				for i := range uint32(keys) {
					k := i * 0x01000001
					if got := tab.get(k); got != want[k] {
						t.Fatalf("round %d op %d: get(%#x) = %v, want %v", round, op, k, got, want[k])
					}
				}
			}
		}
	}
	var empty addr4Table
	if e := empty.get(7); e != (addrEntry{}) {
		t.Errorf("empty table: %v", e)
	}
	empty.del(7) // no panic on an empty table
}
