package emulator

import (
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
)

// tieScript has two output base chains of the same priority, t1's created first, and
// a later one counting which mark the first of them set.
const tieScript = `add table ip t1
add chain ip t1 c { type filter hook output priority 0; }
add rule ip t1 c meta mark 0 meta mark set 1
add table ip t2
add chain ip t2 c { type filter hook output priority 0; }
add rule ip t2 c meta mark 0 meta mark set 2
add table ip t3
add chain ip t3 c { type filter hook output priority 10; }
add rule ip t3 c meta mark 1 counter
add rule ip t3 c meta mark 2 counter
`

// TestEqualPriorityLaterFirst: of base chains of equal priority the one registered
// last runs first, as the kernel's nf_hook_entries_grow inserts a hook before the
// first of equal or higher priority (TestEqualPriorityKernel checks a kernel).
func TestEqualPriorityLaterFirst(t *testing.T) {
	e, err := Load([]byte(tieScript), "tie.nft")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, bc := range e.BaseChains(netfilter.Output) {
		got = append(got, bc.Table)
	}
	if len(got) != 3 || got[0] != "t2" || got[1] != "t1" || got[2] != "t3" {
		t.Errorf("output base chains in order %v, want [t2 t1 t3]", got)
	}
}
