package emulator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/internal/difffuzz"
	"github.com/clusterlab/clusterlab/kernel"
)

// nfzDefaultCases is how many cases the differential fuzzer draws in a plain `go test`;
// CLUSTERLAB_DIFFFUZZ=N asks for N from a random seed instead.
const nfzDefaultCases = 80

// TestKernelNFTDiffFuzz is the nftables emulator's differential fuzzer: rapid draws a
// small ruleset (table ip a and/or inet b; filter base chains at every hook, two at
// input, priorities drawn; nat chains at prerouting, output, input and postrouting;
// policies; ip saddr/daddr with prefixes and !=, a named interval set, iifname/oifname,
// meta l4proto, tcp/udp/th ports with ranges and sets, a named port set, ct state (also
// ! and multi-bit !=), tcp flags in every spelling (implicit, ==, !=, !, V / M,
// & M == V), ct status NAT bits, meta mark set and mark matches, fib daddr type local, accept, drop, return,
// jump/goto, reject of every type, anonymous and named verdict maps, dnat to
// addr[:port], redirect [to :port], snat, masquerade; no numgen: its random pick is
// not the emulator's draw) and a packet (a TCP SYN or a UDP datagram
// from the client pod, the external host or the node), loads the ruleset with
// `nft -f` into a real node namespace and into the emulator, sends the packet for
// real, and holds what the client saw to what the emulator's walk predicts. A ruleset
// one side refuses and the other loads is a difference too.
//
// A plain `go test` runs nfzDefaultCases cases from the fixed seed; CLUSTERLAB_DIFFFUZZ=N
// runs N from a random seed (printed; -rapid.seed=S replays it). A difference is
// shrunk and written to testdata/difffuzz (TestNFTDiffFuzzRegressions replays it)
// before the test fails; the cases already there are replayed through the kernel
// first. Root only (network namespaces, nft, conntrack); skipped elsewhere.
func TestKernelNFTDiffFuzz(t *testing.T) {
	kernel.RequireHarness(t)
	kernel.RequireTools(t, "nft", "conntrack")
	k := difffuzz.NewKernel(t, kernel.BackendNFT, true)
	difffuzz.Run(t, k, difffuzz.Fuzzer{
		Name: "TestKernelNFTDiffFuzz", CaseDir: nfzCaseDir, Cases: nfzDefaultCases,
		Draw: func(rt *rapid.T) (difffuzz.Packet, string) {
			p := difffuzz.GenPacket(rt)
			return p, genNfzRuleset(rt, p)
		},
		Predict: func(rs string, p difffuzz.Packet) (string, string, string, error) {
			pred, o, err := nfzPredict(rs, p)
			if err != nil {
				return pred, "", "", err
			}
			tag := ""
			if o.DNATDestination != nil {
				tag += "/dnat"
			}
			if o.Masqueraded {
				tag += "/snat"
			}
			return pred, tag, nfzPath(o), nil
		},
		// One transaction: the old ruleset goes with the new one's load, or stays.
		Load: func(ctx context.Context, rs string) error {
			return k.Node.NFTables.ApplyScript(ctx, "flush ruleset\n"+rs)
		},
		IsLoadError: func(err error) bool {
			var ne *kernel.NFTError
			return errors.As(err, &ne) && ne.Err != nil && ne.Err.ExitCode == 1
		},
	})
}

// nfzPath is the rules an outcome's path matched, for a failure message.
func nfzPath(o *Outcome) string {
	var b []string
	for _, r := range o.MatchedRules {
		b = append(b, fmt.Sprintf("%s %s %s: %s", r.Hook, r.Table, r.Chain, r.Rule))
	}
	return fmt.Sprintf("%s (%s; %s by %s)", strings.Join(b, "; "), o.Packet, o.Verdict, o.DecidedBy)
}
