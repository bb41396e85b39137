package kernel

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"
)

// benchNFTRuleset is a kube-proxy-shaped (1.36+ layout) `table ip kube-proxy` for n
// ClusterIP services with two endpoints each, epA and epB: the cluster-ips set, the
// service-ips verdict map, a service chain per service with one numgen DNAT map, and
// the nat base chains and masquerading. It starts with `add table` + `delete table`, so
// every load replaces the whole table atomically, as a full sync does.
func benchNFTRuleset(n int, epA, epB string) string {
	var b strings.Builder
	b.WriteString("add table ip kube-proxy\ndelete table ip kube-proxy\n")
	b.WriteString(`table ip kube-proxy {
	comment "rules for kube-proxy"
	set cluster-ips {
		type ipv4_addr
	}
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
	}
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}
	chain nat-output {
		type nat hook output priority -100; policy accept;
		jump services
	}
	chain nat-postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		jump masquerading
	}
	chain masquerading {
		meta mark & 0x4000 != 0 meta mark set meta mark ^ 0x4000 masquerade fully-random
	}
	chain services {
		ip daddr @cluster-ips ip saddr != 10.244.0.0/16 meta mark set meta mark | 0x4000
		ip daddr . meta l4proto . th dport vmap @service-ips
	}
}
`)
	for i := range n {
		vip := benchVIP(i)
		svc := fmt.Sprintf("service-%08d-ns/svc%d/tcp/p80", i, i)
		fmt.Fprintf(&b, "add chain ip kube-proxy %s\n", svc)
		fmt.Fprintf(&b, "add rule ip kube-proxy %s meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : %s . 8080 , 1 : %s . 8080 }\n", svc, epA, epB)
		fmt.Fprintf(&b, "add element ip kube-proxy cluster-ips { %s }\n", vip)
		fmt.Fprintf(&b, "add element ip kube-proxy service-ips { %s . tcp . 80 : goto %s }\n", vip, svc)
	}
	return b.String()
}

func benchVIP(i int) string { return fmt.Sprintf("10.96.%d.%d", i/250, i%250+1) }

// BenchmarkNFTablesApply times one full load (`nft -f -`, replacing the table) of n
// services into an empty namespace: the kernel anchor for the nftables generator's and
// parser's figures (the same ruleset shape, kube-proxy's layout).
func BenchmarkNFTablesApply(b *testing.B) {
	RequireTools(b, "nft")
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			nft, err := NewNFTables(context.Background(), NFTablesOptions{Family: knftables.IPv4Family, Netns: NewTestNetns(b)})
			if err != nil {
				b.Fatal(err)
			}
			script := benchNFTRuleset(n, "10.244.0.2", "10.244.0.3")
			b.SetBytes(int64(len(script)))
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				if err := nft.ApplyScript(ctx, script); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNFTablesListRuleset times `nft list ruleset` of 1000 services.
func BenchmarkNFTablesListRuleset(b *testing.B) {
	RequireTools(b, "nft")
	ctx := context.Background()
	nft, err := NewNFTables(ctx, NFTablesOptions{Netns: NewTestNetns(b)})
	if err != nil {
		b.Fatal(err)
	}
	if err := nft.ApplyScript(ctx, benchNFTRuleset(1000, "10.244.0.2", "10.244.0.3")); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := nft.ListRuleset(ctx, NFTListOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNFTablesConnect times one client connection through the real kernel from the
// external namespace to a Service VIP DNATed (numgen, 50/50) to two pods, answer
// included, with 10 and 1000 services in service-ips: a map lookup, so unlike
// KernelConnect (iptables, a linear KUBE-SERVICES) the count should not matter.
func BenchmarkNFTablesConnect(b *testing.B) {
	RequireHarness(b)
	RequireTools(b, "iptables-nft-restore", "nft")
	for _, n := range []int{10, 1000} {
		for _, proto := range []string{"tcp", "udp"} {
			b.Run(fmt.Sprintf("%s/services=%d", proto, n), func(b *testing.B) {
				h, err := NewHarness(HarnessConfig{NFTables: true})
				if err != nil {
					b.Fatal(err)
				}
				defer h.Close()
				script := benchNFTRuleset(n, h.Pods[0].IP.String(), h.Pods[1].IP.String())
				script = strings.ReplaceAll(script, "meta l4proto tcp dnat", "meta l4proto "+proto+" dnat")
				script = strings.ReplaceAll(script, ". tcp . 80 :", ". "+proto+" . 8080 :")
				if err := h.NFTables.ApplyScript(context.Background(), script); err != nil {
					b.Fatal(err)
				}
				dst := netip.MustParseAddrPort(benchVIP(n-1) + ":8080")
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
