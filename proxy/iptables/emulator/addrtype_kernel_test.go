package emulator

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/netfilter"
	kp "github.com/clusterlab/clusterlab/proxy/iptables"
)

// addrtypeDiffRules are ip6tables -m addrtype --dst-type tests, each a counting rule
// (no target) on UDP to port addrtypeDiffPort in filter OUTPUT; the last rule counts
// every such packet, so a packet the kernel never sent is told apart.
var addrtypeDiffRules = []string{
	"-m addrtype --dst-type UNICAST",
	"-m addrtype --dst-type LOCAL",
	"-m addrtype --dst-type UNICAST,LOCAL",
	"-m addrtype --dst-type MULTICAST",
	"-m addrtype --dst-type MULTICAST,LOCAL",
	"-m addrtype --dst-type MULTICAST,UNICAST",
	"-m addrtype ! --dst-type UNICAST",
	"-m addrtype ! --dst-type LOCAL",
	"-m addrtype ! --dst-type UNICAST,LOCAL",
	"-m addrtype ! --dst-type MULTICAST,LOCAL",
	"-m addrtype --dst-type UNSPEC",
	"",
}

const addrtypeDiffPort = 9

// TestKernelDifferentialAddrType6 sends a UDP datagram from a node namespace to local,
// loopback, remote and multicast IPv6 addresses, and checks that the kernel's
// ip6tables addrtype rules that count it are exactly the ones the emulator matches
// for the same packet (LOCAL and UNICAST together for a local address, the any-bit
// rule under negation). Root only; skipped elsewhere.
func TestKernelDifferentialAddrType6(t *testing.T) {
	kernel.RequireHarness(t)
	for _, b := range []kernel.Backend{kernel.BackendNFT, kernel.BackendLegacy} {
		t.Run(string(b), func(t *testing.T) {
			kernel.RequireTools(t, "ip6tables-"+string(b)+"-restore", "ip6tables-"+string(b)+"-save")
			addrtypeDifferential6(t, b)
		})
	}
}

func addrtypeDifferential6(t *testing.T, backend kernel.Backend) {
	h, err := kernel.NewHarness(kernel.HarnessConfig{Prefix: "clat", IPv6: true, Backend: backend,
		Pods: []kernel.PodConfig{{Name: "pod"}}, PodPorts: []uint16{}, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("harness close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node := h.Nodes[0]
	local, err := h.LocalAddrs(node.Netns)
	if err != nil {
		t.Fatal(err)
	}

	var text strings.Builder
	text.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for _, r := range addrtypeDiffRules {
		fmt.Fprintf(&text, "-A OUTPUT -p udp -m udp --dport %d %s\n", addrtypeDiffPort, r)
	}
	text.WriteString("COMMIT\n")
	if err := node.IPTables6.Restore(ctx, []byte(text.String()), kp.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	emu := load(t, IPv6, text.String())
	env := NewStaticEnv(1, local...)

	dsts := []struct {
		name string
		addr netip.Addr
	}{
		{"node address", node.IP6},
		{"pod gateway (local on another interface)", node.Gateway6},
		{"loopback", netip.IPv6Loopback()},
		{"pod (remote unicast)", h.Pod("pod").IP6},
		{"external (remote unicast)", h.ExternalIP6},
		{"global-scope multicast", netip.MustParseAddr("ff0e::1:3")},
	}
	before := outputCounts(ctx, t, node.IPTables6)
	for _, d := range dsts {
		t.Run(d.name, func(t *testing.T) {
			h.Dial(node.Netns, "udp", netip.AddrPortFrom(d.addr, addrtypeDiffPort))
			after := outputCounts(ctx, t, node.IPTables6)
			defer func() { before = after }()
			if after[len(after)-1] == before[len(before)-1] {
				t.Skipf("the kernel sent no datagram to %s", d.addr)
			}
			var kernelHit []string
			for i := range after {
				if after[i] != before[i] {
					kernelHit = append(kernelHit, strconv.Itoa(i+1))
				}
			}
			tr := &Trace{}
			pkt := &Packet{Proto: netfilter.ProtoUDP, Src: d.addr, Dst: d.addr, SrcPort: 40000, DstPort: addrtypeDiffPort, OutIface: "eth0", TTL: 64}
			emu.EvalTable(env, TableFilter, netfilter.Output, pkt, tr)
			var emuHit []string
			for _, l := range strings.Split(matchedLines(tr), ",") {
				if n, err := strconv.Atoi(l); err == nil {
					emuHit = append(emuHit, strconv.Itoa(n-4)) // the rules start on line 5
				}
			}
			if k, e := strings.Join(kernelHit, ","), strings.Join(emuHit, ","); k != e {
				t.Errorf("%s: rules the kernel counted %s, the emulator matched %s (rules: %q)", d.addr, k, e, addrtypeDiffRules)
			}
		})
	}
}

// outputCounts returns the packet counters of filter OUTPUT's rules, in order.
func outputCounts(ctx context.Context, t *testing.T, ipt *kernel.IPTables) []uint64 {
	t.Helper()
	out, err := ipt.SaveCounters(ctx, "filter")
	if err != nil {
		t.Fatal(err)
	}
	var counts []uint64
	for _, line := range strings.Split(string(out), "\n") {
		pkts, rest, ok := strings.Cut(strings.TrimPrefix(line, "["), ":")
		if !ok || !strings.HasPrefix(line, "[") || !strings.Contains(rest, "-A OUTPUT ") {
			continue
		}
		n, err := strconv.ParseUint(pkts, 10, 64)
		if err != nil {
			t.Fatalf("counter in %q: %v", line, err)
		}
		counts = append(counts, n)
	}
	if len(counts) != len(addrtypeDiffRules) {
		t.Fatalf("%d OUTPUT rules in the kernel's save, want %d:\n%s", len(counts), len(addrtypeDiffRules), out)
	}
	return counts
}
