package kernel

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/proxy/iptables"
)

// benchRuleset is a kube-proxy-shaped nat table for n services with two endpoints each
// (KUBE-SERVICES dispatch, KUBE-SVC ladder, KUBE-SEP DNAT), in restore syntax.
func benchRuleset(n int) []byte {
	var b strings.Builder
	b.WriteString("*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n")
	for i := range n {
		fmt.Fprintf(&b, ":KUBE-SVC-%016d - [0:0]\n:KUBE-SEP-%016dA - [0:0]\n:KUBE-SEP-%016dB - [0:0]\n", i, i, i)
	}
	b.WriteString("-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\n")
	for i := range n {
		vip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		fmt.Fprintf(&b, "-A KUBE-SERVICES -m comment --comment \"ns/svc%d:p80 cluster IP\" -m tcp -p tcp -d %s --dport 80 -j KUBE-SVC-%016d\n", i, vip, i)
		fmt.Fprintf(&b, "-A KUBE-SVC-%016d -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-%016dA\n", i, i)
		fmt.Fprintf(&b, "-A KUBE-SVC-%016d -j KUBE-SEP-%016dB\n", i, i)
		fmt.Fprintf(&b, "-A KUBE-SEP-%016dA -m tcp -p tcp -j DNAT --to-destination 10.244.0.2:8080\n", i)
		fmt.Fprintf(&b, "-A KUBE-SEP-%016dB -m tcp -p tcp -j DNAT --to-destination 10.244.0.3:8080\n", i)
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String())
}

// BenchmarkIPTablesRestore times one full iptables-restore --noflush of n services
// (5n+2 rules) into a harness node, per backend.
func BenchmarkIPTablesRestore(b *testing.B) {
	RequireHarness(b)
	for _, backend := range []Backend{BackendNFT, BackendLegacy} {
		for _, n := range []int{100, 1000} {
			b.Run(fmt.Sprintf("%s/services=%d", backend, n), func(b *testing.B) {
				RequireTools(b, "iptables-"+string(backend)+"-restore")
				h, err := NewHarness(HarnessConfig{Backend: backend, Pods: []PodConfig{{Name: "a"}}, PodPorts: []uint16{}})
				if err != nil {
					b.Fatal(err)
				}
				defer h.Close()
				data := benchRuleset(n)
				ctx := context.Background()
				b.ResetTimer()
				for range b.N {
					if err := h.IPTables.Restore(ctx, data, iptables.RestoreOptions{NoFlush: true}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkIPTablesSave times iptables-save -t nat of the 1000-service ruleset.
func BenchmarkIPTablesSave(b *testing.B) {
	RequireHarness(b)
	RequireTools(b, "iptables-nft-restore")
	h, err := NewHarness(HarnessConfig{Pods: []PodConfig{{Name: "a"}}, PodPorts: []uint16{}})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	ctx := context.Background()
	if err := h.IPTables.Restore(ctx, benchRuleset(1000), iptables.RestoreOptions{NoFlush: true}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := h.IPTables.Save(ctx, "nat"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKernelConnect times one client connection through the real kernel from the
// external namespace to a Service VIP DNATed (50/50) to two pods, answer included,
// with 10 and 1000 services in KUBE-SERVICES ahead of the one dialled (iptables
// evaluates KUBE-SERVICES linearly).
func BenchmarkKernelConnect(b *testing.B) {
	RequireHarness(b)
	RequireTools(b, "iptables-nft-restore")
	for _, n := range []int{10, 1000} {
		for _, proto := range []string{"tcp", "udp"} {
			b.Run(fmt.Sprintf("%s/services=%d", proto, n), func(b *testing.B) {
				h, err := NewHarness(HarnessConfig{})
				if err != nil {
					b.Fatal(err)
				}
				defer h.Close()
				ctx := context.Background()
				rules := strings.ReplaceAll(string(benchRuleset(n)), "-m tcp -p tcp ", "")
				rules = strings.ReplaceAll(rules, "--dport 80 ", "")
				rules = strings.ReplaceAll(rules, "10.244.0.2:8080", h.Pods[0].IP.String())
				rules = strings.ReplaceAll(rules, "10.244.0.3:8080", h.Pods[1].IP.String())
				rules += "*nat\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n"
				if err := h.IPTables.Restore(ctx, []byte(rules), iptables.RestoreOptions{NoFlush: true}); err != nil {
					b.Fatal(err)
				}
				last := n - 1
				dst := netip.MustParseAddrPort(fmt.Sprintf("10.96.%d.%d:8080", last/250, last%250+1))
				if r := h.Dial(h.External, proto, dst); r.Outcome != Answered {
					b.Fatalf("warm-up: %v", r)
				}
				b.ResetTimer()
				for range b.N {
					if r := h.Dial(h.External, proto, dst); r.Outcome != Answered {
						b.Fatalf("dial: %v", r)
					}
				}
			})
		}
	}
}

// BenchmarkNewHarness times building and closing the default harness (two pods, one
// node, external client).
func BenchmarkNewHarness(b *testing.B) {
	RequireHarness(b)
	RequireTools(b, "iptables-nft-restore")
	for range b.N {
		h, err := NewHarness(HarnessConfig{})
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseConntrack times parsing 1000 `conntrack -L -o extended` lines.
func BenchmarkParseConntrack(b *testing.B) {
	var sb strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&sb, "ipv4     2 tcp      6 431999 ESTABLISHED src=192.168.77.100 dst=10.96.%d.%d sport=%d dport=80 src=10.244.0.2 dst=192.168.77.100 sport=8080 dport=%d [ASSURED] mark=0 use=1\n", i/250, i%250, 30000+i, 30000+i)
	}
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		if _, err := ParseConntrack(data); err != nil {
			b.Fatal(err)
		}
	}
}
