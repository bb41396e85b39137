package emulator

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/internal/difffuzz"
	"github.com/clusterlab/clusterlab/kernel"
	kp "github.com/clusterlab/clusterlab/proxy/iptables"
)

// fzDefaultCases is how many cases the differential fuzzer draws in a plain `go test`;
// CLUSTERLAB_DIFFFUZZ=N asks for N from a random seed instead.
const fzDefaultCases = 120

// TestKernelDiffFuzz is the differential fuzzer: rapid draws a small ruleset (filter
// and nat, user chains, addresses with prefixes and !, tcp/udp ports and multiport,
// addrtype, mark and MARK, comment, conntrack states, ACCEPT, DROP, RETURN, jumps and
// gotos, DNAT, SNAT, MASQUERADE, REJECT of every type, policies) and a packet (a TCP
// SYN or a UDP datagram from the client pod, the external host or the node), loads
// the ruleset into a real node namespace and into the emulator, sends the packet for
// real, and holds what the client saw (which namespace answered and the source it saw,
// refused, unreachable, timeout, EPERM) to what the emulator's walk predicts. A
// ruleset one side refuses and the other loads is a difference too.
//
// A plain `go test` runs fzDefaultCases cases from the fixed seed (35-45 s on two busy cores);
// CLUSTERLAB_DIFFFUZZ=N runs N from a random seed, printed (-rapid.seed=S replays it).
// rapid shrinks a difference to a minimal case, which is written to
// testdata/difffuzz as a regression case (TestDiffFuzzRegressions replays it) before
// the test fails. The cases already there are replayed through the kernel first.
// CLUSTERLAB_DIFFFUZZ_BACKEND=legacy runs it against iptables-legacy. Root only
// (network namespaces, iptables, conntrack); skipped elsewhere. The driver, topology
// and kernel side are internal/difffuzz's.
func TestKernelDiffFuzz(t *testing.T) {
	kernel.RequireHarness(t)
	backend := kernel.Backend(os.Getenv("CLUSTERLAB_DIFFFUZZ_BACKEND"))
	if backend == "" {
		backend = kernel.BackendNFT
	}
	kernel.RequireTools(t, "iptables-"+string(backend)+"-restore", "conntrack")
	k := difffuzz.NewKernel(t, backend, false)
	difffuzz.Run(t, k, difffuzz.Fuzzer{
		Name: "TestKernelDiffFuzz (" + string(backend) + " backend)", CaseDir: fzCaseDir,
		Backend: string(backend), Backends: fzBackends, Cases: fzDefaultCases,
		Draw: func(rt *rapid.T) (difffuzz.Packet, string) {
			p := genFzPacket(rt)
			return p, genFzRuleset(rt, p)
		},
		Predict: func(rs string, p difffuzz.Packet) (string, string, string, error) {
			o, err := fzWalk(rs, p)
			if err != nil {
				return "load error", "", "", err
			}
			tag := ""
			if o.DNATDestination != nil {
				tag += "/dnat"
			}
			if o.Masqueraded {
				tag += "/snat"
			}
			return fzExpect(o, p), tag, fzPath(o), nil
		},
		Load: func(ctx context.Context, rs string) error {
			return k.Node.IPTables.Restore(ctx, []byte(rs), kp.RestoreOptions{})
		},
		IsLoadError: kernel.IsRestoreError,
	})
}

// fzPath is the rules an outcome's path matched, for a failure message.
func fzPath(o *Outcome) string {
	var b []string
	for _, r := range o.MatchedRules {
		b = append(b, fmt.Sprintf("%s %s: %s", r.Hook, r.Table, r.Rule))
	}
	return fmt.Sprintf("%s (%s)", strings.Join(b, "; "), o.Packet)
}
