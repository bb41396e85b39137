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

// walkFuzzMaxPaths bounds FuzzWalk's all-branches walks.
const walkFuzzMaxPaths = 64

// walkFuzzAddr maps a fuzzed byte to an address the seed rulesets name often
// (kube-proxy's service, pod and node ranges) or a raw one.
func walkFuzzAddr(sel uint8, raw uint32) netip.Addr {
	switch sel % 6 {
	case 0:
		return netip.AddrFrom4([4]byte{10, 96, byte(raw >> 8), byte(raw)})
	case 1:
		return netip.AddrFrom4([4]byte{10, 244, byte(raw >> 8), byte(raw)})
	case 2:
		return netip.AddrFrom4([4]byte{192, 168, 0, byte(raw)})
	case 3:
		return netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	return netip.AddrFrom4([4]byte{byte(raw >> 24), byte(raw >> 16), byte(raw >> 8), byte(raw)})
}

// FuzzWalk: a fuzzed ruleset walked with a fuzzed packet, single-path and all
// branches. Nothing panics; every path's work is bounded (a path that would evaluate
// more than MaxSteps rules stops with an UNKNOWN outcome that says so); the
// paths' probabilities, each unmodelled match's assumption counted as a fair coin,
// sum to 1 (≤ 1 when the exploration was cut at MaxPaths, which the result says);
// and the same input walks to the same result twice.
func FuzzWalk(f *testing.F) {
	var seeds [][]byte
	for _, pattern := range []string{"../../../testdata/iptables/normalise/*.rules", "../../../testdata/iptables/dumps/*", "../../../testdata/generator/*.golden", "../../../testdata/realdumps/*/iptables-save*"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil && len(b) < 64<<10 {
				seeds = append(seeds, b)
			}
		}
	}
	seeds = append(seeds,
		[]byte("*nat\n:X - [0:0]\n:Y - [0:0]\n-A PREROUTING -p tcp -j X\n-A X -m statistic --mode random --probability 0.3 -j Y\n-A X -m statistic --mode random --probability 0.5 -j DNAT --to-destination 10.244.0.2:80\n-A X -j DNAT --to-destination 10.244.0.3:80\n-A Y -m set --match-set S dst -j RETURN\n-A Y -j DNAT --to-destination 10.244.0.4:80\nCOMMIT\n"),
		[]byte("*filter\n:A - [0:0]\n:B - [0:0]\n-A FORWARD -g A\n-A A -j B\n-A A -j B\n-A B -m recent --rcheck --name x -j DROP\nCOMMIT\n"),
	)
	for i, b := range seeds {
		f.Add(b, uint8(i%3), uint8(i), uint32(0x0a600001), uint8(i+1), uint32(0x0af40102), uint16(40000), uint16(80), uint8(i%4), uint32(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, proto, srcSel uint8, src uint32, dstSel uint8, dst uint32, sport, dport uint16, from uint8, mark uint32) {
		e, err := Load(data, IPv4, "fuzz")
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
		in.AllBranches, in.MaxPaths = true, walkFuzzMaxPaths
		all, err := e.Walk(in)
		if err != nil {
			t.Fatalf("all branches: %v", err)
		}
		checkWalkResult(t, all, walkFuzzMaxPaths)
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
		// A rule evaluation is a step, and so at most is the end of the chain it
		// jumped to; a few more for hooks, routing and the verdict.
		if len(o.Trace.Steps) > 2*maxSteps+32 {
			t.Fatalf("a path of %d trace steps (bound %d rule evaluations)", len(o.Trace.Steps), maxSteps)
		}
		w := o.Probability
		for _, c := range o.choices {
			if c.P == 1 && c.N == 2 {
				w /= 2 // an assumption: both values explored
			}
		}
		if o.Probability < 0 || o.Probability > 1+1e-9 || math.IsNaN(o.Probability) {
			t.Fatalf("path probability %v", o.Probability)
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

// doublingJumps is a filter table whose FORWARD jumps to C0, and each Ci jumps to
// Ci+1 twice: no loop (iptables-restore takes it), but 2^n rule evaluations for a
// packet that matches every rule; statistic adds a coin at the bottom.
func doublingJumps(n int, statistic bool) []byte {
	var b []byte
	b = append(b, "*filter\n"...)
	for i := 0; i <= n; i++ {
		b = append(b, fmt.Sprintf(":C%d - [0:0]\n", i)...)
	}
	b = append(b, "-A FORWARD -j C0\n"...)
	for i := 0; i < n; i++ {
		b = append(b, fmt.Sprintf("-A C%d -j C%d\n-A C%d -j C%d\n", i, i+1, i, i+1)...)
	}
	if statistic {
		b = append(b, fmt.Sprintf("-A C%d -m statistic --mode random --probability 0.5 -j MARK --set-xmark 0x1/0x1\n", n)...)
	}
	b = append(b, "COMMIT\n"...)
	return b
}

// TestWalkBoundedWork: a ruleset whose jumps double at every level (2^40 rule
// evaluations) is walked to an UNKNOWN outcome decided by "limit" after MaxSteps rule
// evaluations, in both walk modes, instead of running away; a ruleset within the
// bound walks as before.
func TestWalkBoundedWork(t *testing.T) {
	in := WalkInput{Packet: *pkt("tcp 10.0.0.1:5 10.0.0.2:80"), MaxSteps: 5000}
	e, err := Load(doublingJumps(40, false), IPv4, "doubling")
	if err != nil {
		t.Fatal(err)
	}
	for _, all := range []bool{false, true} {
		in.AllBranches = all
		res, err := e.Walk(in)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Outcomes) != 1 {
			t.Fatalf("all=%v: %d outcomes", all, len(res.Outcomes))
		}
		o := res.Outcomes[0]
		if o.Verdict != "UNKNOWN" || o.DecidedBy != "limit" || o.Probability != 1 {
			t.Fatalf("all=%v: %s decided by %s, p=%v; want UNKNOWN by limit", all, o.Verdict, o.DecidedBy, o.Probability)
		}
		if n := len(o.Trace.Steps); n > 2*in.MaxSteps+16 {
			t.Fatalf("all=%v: %d trace steps for a bound of %d", all, n, in.MaxSteps)
		}
		if !strings.Contains(o.Trace.String(), "more than 5000 rule evaluations") {
			t.Fatalf("the trace does not say why it stopped:\n%.2000s", o.Trace.String())
		}
	}
	// 2^8 evaluations: within the bound, ACCEPT by policy, 2^256 statistic outcomes
	// cut at MaxPaths.
	e, err = Load(doublingJumps(8, true), IPv4, "small")
	if err != nil {
		t.Fatal(err)
	}
	in.AllBranches, in.MaxPaths = true, 64
	res, err := e.Walk(in)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || len(res.Paths) != 64 {
		t.Fatalf("truncated=%v after %d paths", res.Truncated, len(res.Paths))
	}
	for _, o := range res.Outcomes {
		if o.Verdict != "ACCEPT" || o.DecidedBy == "limit" {
			t.Fatalf("%s by %s", o.Verdict, o.DecidedBy)
		}
	}
	checkWalkResult(t, res, 64)
}
