package emulator

import (
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// walkFuzzAddr maps a fuzzed byte to an address kube-proxy's test rulesets name
// often (their service, pod and node ranges), loopback, or a raw one.
func walkFuzzAddr(sel uint8, raw uint32) netip.Addr {
	switch sel % 6 {
	case 0:
		return netip.AddrFrom4([4]byte{172, 30, byte(raw >> 8), byte(raw)})
	case 1:
		return netip.AddrFrom4([4]byte{10, 180, byte(raw >> 8), byte(raw)})
	case 2:
		return netip.AddrFrom4([4]byte{192, 168, 0, byte(raw)})
	case 3:
		return netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	return netip.AddrFrom4([4]byte{byte(raw >> 24), byte(raw >> 16), byte(raw >> 8), byte(raw)})
}

// FuzzWalk: a fuzzed ruleset (seeded from kube-proxy's nftables layouts and the
// listings) walked with a fuzzed packet, single-path and all branches. Nothing
// panics; every path's work is bounded (more than MaxSteps rule evaluations stop it
// with an UNKNOWN outcome decided by "limit"); the paths' probabilities, each
// unmodelled statement's assumption counted as a fair coin, sum to 1 (≤ 1 when cut at
// MaxPaths, which the result says); the same input walks to the same result twice.
func FuzzWalk(f *testing.F) {
	var seeds [][]byte
	for _, pattern := range []string{"testdata/kube-proxy/*.nft", "testdata/listing/*.nft", "../../../testdata/nftables/*.nft"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil {
				if strings.Contains(file, "kube-proxy/") {
					b = sortDump(b)
				}
				seeds = append(seeds, b)
			}
		}
	}
	seeds = append(seeds, []byte("table ip t {\n\tchain pre {\n\t\ttype nat hook prerouting priority -100; policy accept;\n\t\tjump a\n\t}\n\tchain a {\n\t\tnumgen random mod 3 vmap { 0 : goto b, 1 : jump b }\n\t\tdnat to 10.180.0.9:80\n\t}\n\tchain b {\n\t\tmeta cpu 1 accept\n\t\tdnat to 10.180.0.8:80\n\t}\n}\n"))
	for i, b := range seeds {
		f.Add(b, uint8(i%3), uint8(i), uint32(0xac1e0029), uint8(i+1), uint32(0x0ab40001), uint16(40000), uint16(80), uint8(i%4), uint32(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, proto, srcSel uint8, src uint32, dstSel uint8, dst uint32, sport, dport uint16, from uint8, mark uint32) {
		e, err := Load(data, "fuzz.nft")
		if err != nil {
			return
		}
		p := Packet{Proto: []uint8{6, 17, 1, 132}[proto%4], Src: walkFuzzAddr(srcSel, src), Dst: walkFuzzAddr(dstSel, dst),
			SrcPort: sport, DstPort: dport, TTL: 64, Len: 60, Mark: mark, ICMPType: 8}
		if p.Proto == 6 {
			p.TCPFlags = 0x02
		}
		in := WalkInput{Packet: p, From: From(from % 4), Local: []netip.Addr{netip.MustParseAddr("192.168.0.10")},
			IfaceAddrs: map[string]netip.Addr{"eth0": netip.MustParseAddr("192.168.0.10")}, OutIface: "eth0", MaxSteps: 1024}
		one, err := e.Walk(in)
		if err != nil {
			t.Fatalf("walk: %v", err)
		}
		if len(one.Outcomes) != 1 || one.Outcomes[0].Probability <= 0 || one.Outcomes[0].Probability > 1 {
			t.Fatalf("single walk: %d outcomes, probability %v", len(one.Outcomes), one.Outcomes[0].Probability)
		}
		in.AllBranches, in.MaxPaths = true, 64
		all, err := e.Walk(in)
		if err != nil {
			t.Fatalf("all branches: %v", err)
		}
		checkWalkResult(t, all, 64)
		again, _ := e.Walk(in)
		if a, b := walkSummary(all), walkSummary(again); !reflect.DeepEqual(a, b) {
			t.Fatalf("the same walk twice differs:\n%v\n%v", a, b)
		}
	})
}

// checkWalkResult holds an all-branches result to its invariants: bounded paths, each
// with bounded steps, whose probabilities (an assumption a fair coin) sum to 1, or at
// most 1 when cut at maxPaths, which it says.
func checkWalkResult(t *testing.T, res *WalkResult, maxPaths int) {
	t.Helper()
	if len(res.Paths) == 0 || len(res.Paths) > maxPaths {
		t.Fatalf("%d paths (max %d)", len(res.Paths), maxPaths)
	}
	if res.Truncated && len(res.Paths) != maxPaths {
		t.Fatalf("truncated at %d paths of %d", len(res.Paths), maxPaths)
	}
	maxSteps := res.Input.MaxSteps
	if maxSteps <= 0 {
		maxSteps = DefaultMaxWalkSteps
	}
	sum := 0.0
	for _, o := range res.Paths {
		// A rule evaluation is a step; a base chain adds two (its start and policy),
		// hooks, routing and the verdict a few more.
		if len(o.Trace.Steps) > 2*maxSteps+64 {
			t.Fatalf("a path of %d trace steps (bound %d rule evaluations)", len(o.Trace.Steps), maxSteps)
		}
		if o.Probability < 0 || o.Probability > 1+1e-9 || math.IsNaN(o.Probability) {
			t.Fatalf("path probability %v", o.Probability)
		}
		w := o.Probability
		for _, c := range o.choices {
			if c.P == 1 && c.N == 2 {
				w /= 2 // an assumption: both values explored
			}
		}
		sum += w
	}
	if res.Truncated {
		if sum > 1+1e-9 {
			t.Fatalf("a cut exploration's paths sum to %v > 1", sum)
		}
		return
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Fatalf("paths' probabilities sum to %v, not 1 (%d paths)", sum, len(res.Paths))
	}
}

// walkSummary is what a walk result shows, for comparing two walks.
func walkSummary(res *WalkResult) []string {
	var out []string
	for _, o := range res.Outcomes {
		out = append(out, fmt.Sprintf("%s %s %.12g %d", outcomeKey(o), o.Packet, o.Probability, o.Paths))
	}
	return out
}

// TestWalkBoundedWork: sixteen levels of chains, each jumping to the next ten times
// (10^16 rule evaluations; no loop, within the jump depth), walk to an UNKNOWN
// outcome decided by "limit" after MaxSteps rule evaluations instead of running away.
func TestWalkBoundedWork(t *testing.T) {
	var b strings.Builder
	b.WriteString("table ip t {\n\tchain fwd {\n\t\ttype filter hook forward priority 0; policy accept;\n\t\tjump c0\n\t}\n")
	for i := 0; i < 15; i++ {
		fmt.Fprintf(&b, "\tchain c%d {\n", i)
		for j := 0; j < 10; j++ {
			fmt.Fprintf(&b, "\t\tjump c%d\n", i+1)
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("\tchain c15 {\n\t\tmeta mark set 0x1\n\t}\n}\n")
	e, err := Load([]byte(b.String()), "tenfold.nft")
	if err != nil {
		t.Fatal(err)
	}
	for _, all := range []bool{false, true} {
		in := WalkInput{Packet: *tcp("10.0.0.2", "10.0.0.3", 80), MaxSteps: 5000, AllBranches: all}
		res, err := e.Walk(in)
		if err != nil {
			t.Fatal(err)
		}
		o := res.Outcomes[0]
		if len(res.Outcomes) != 1 || o.Verdict != "UNKNOWN" || o.DecidedBy != "limit" || o.Probability != 1 {
			t.Fatalf("all=%v: %d outcomes, %s decided by %s p=%v; want UNKNOWN by limit", all, len(res.Outcomes), o.Verdict, o.DecidedBy, o.Probability)
		}
		if !strings.Contains(o.Trace.String(), "more than 5000 rule evaluations") {
			t.Fatalf("the trace does not say why it stopped")
		}
		checkWalkResult(t, res, 4096)
	}
}
