package emulator

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
)

// kpHash is kube-proxy's chain-name hash: base32(sha256(readable))[:8].
func kpHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(sum[:])[:8]
}

func svcIP(i int) string { return fmt.Sprintf("172.30.%d.%d", i/250, i%250+1) }
func epIP(i, j int) string {
	n := 128<<16 + i*16 + j
	return fmt.Sprintf("10.%d.%d.%d", n>>16, (n>>8)&255, n&255)
}

// genKubeProxyListing writes an `nft list ruleset` of kube-proxy 1.37's layout for
// nSvc ClusterIP services with nEp endpoints each (every 10th with a NodePort, the
// first endpoint of each local): a synthetic stand-in for a big node's dump.
func genKubeProxyListing(nSvc, nEp int) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	list := func(items []string) string { return strings.Join(items, ",\n\t\t\t     ") }
	var cips, sips, nps, hairpin []string
	for i := 0; i < nSvc; i++ {
		name := fmt.Sprintf("ns%d/svc%d/tcp/p80", i%50, i)
		chain := "service-" + kpHash(name) + "-" + name
		cips = append(cips, svcIP(i))
		sips = append(sips, fmt.Sprintf("%s . tcp . 80 : goto %s", svcIP(i), chain))
		if i%10 == 0 {
			nps = append(nps, fmt.Sprintf("tcp . %d : goto external-%s-%s", 30000+i/10, kpHash(name), name))
		}
		hairpin = append(hairpin, fmt.Sprintf("%s . %s . tcp . 80", epIP(i, 0), epIP(i, 0)))
	}
	w("table ip kube-proxy {\n\tcomment \"rules for kube-proxy\"\n")
	w("\tset cluster-ips {\n\t\ttype ipv4_addr\n\t\tcomment \"Active ClusterIPs\"\n\t\telements = { %s }\n\t}\n\n", list(cips))
	w("\tset nodeport-ips {\n\t\ttype ipv4_addr\n\t\tcomment \"IPs that accept NodePort traffic\"\n\t\telements = { 192.168.0.2 }\n\t}\n\n")
	w("\tset hairpin-connections {\n\t\ttype ipv4_addr . ipv4_addr . inet_proto . inet_service\n\t\tcomment \"service hairpin connections\"\n\t\telements = { %s }\n\t}\n\n", list(hairpin))
	for _, m := range []struct{ name, typ string }{{"firewall-ips", "ipv4_addr . inet_proto . inet_service"}, {"no-endpoint-nodeports", "inet_proto . inet_service"}, {"no-endpoint-services", "ipv4_addr . inet_proto . inet_service"}} {
		w("\tmap %s {\n\t\ttype %s : verdict\n\t}\n\n", m.name, m.typ)
	}
	w("\tmap service-ips {\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n\t\tcomment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\"\n\t\telements = { %s }\n\t}\n\n", list(sips))
	w("\tmap service-nodeports {\n\t\ttype inet_proto . inet_service : verdict\n\t\tcomment \"NodePort traffic\"\n\t\telements = { %s }\n\t}\n\n", list(nps))
	w(kp137Chains)
	for i := 0; i < nSvc; i++ {
		name := fmt.Sprintf("ns%d/svc%d/tcp/p80", i%50, i)
		h := kpHash(name)
		var m []string
		for j := 0; j < nEp; j++ {
			m = append(m, fmt.Sprintf("%d : %s . 80", j, epIP(i, j)))
		}
		w("\n\tchain service-%s-%s {\n\t\tmeta l4proto tcp dnat ip to numgen random mod %d map { %s }\n\t}\n", h, name, nEp, strings.Join(m, ", "))
		if i%10 == 0 {
			w("\n\tchain external-%s-%s {\n\t\tmeta mark set meta mark | 0x00004000 comment \"masquerade\"\n\t\tgoto service-%s-%s\n\t}\n", h, name, h, name)
		}
	}
	w("}\n")
	return b.String()
}

// kp137Chains are kube-proxy 1.37's fixed chains, as nft lists them.
const kp137Chains = `	chain filter-prerouting-pre-dnat {
		type filter hook prerouting priority dstnat - 10; policy accept;
		ct state new jump firewall-check
	}

	chain filter-output-pre-dnat {
		type filter hook output priority -110; policy accept;
		ct state new jump firewall-check
	}

	chain filter-input {
		type filter hook input priority filter; policy accept;
		ct state new jump nodeport-endpoints-check
		ct state new jump service-endpoints-check
	}

	chain filter-forward {
		type filter hook forward priority filter; policy accept;
		ct state new jump service-endpoints-check
		ct state new jump cluster-ips-check
	}

	chain filter-output {
		type filter hook output priority filter; policy accept;
		ct state new jump service-endpoints-check
		ct state new jump cluster-ips-check
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

	chain services {
		ip daddr @cluster-ips ip saddr != 10.0.0.0/8 meta mark set meta mark | 0x00004000 comment "masquerade clusterIP traffic from outside cluster"
		ip daddr . meta l4proto . th dport vmap @service-ips
		ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports
	}

	chain masquerading {
		meta mark & 0x00004000 != 0x00000000 meta mark set meta mark ^ 0x00004000 masquerade fully-random
		ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random
	}

	chain service-endpoints-check {
		ip daddr . meta l4proto . th dport vmap @no-endpoint-services
	}

	chain nodeport-endpoints-check {
		ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports
	}

	chain cluster-ips-check {
		ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"
		ip daddr 172.30.0.0/16 drop comment "Drop traffic to unallocated ClusterIPs"
	}

	chain firewall-check {
		ip daddr . meta l4proto . th dport vmap @firewall-ips
	}

	chain reject-chain {
		comment "helper for @no-endpoint-services / @no-endpoint-nodeports"
		reject
	}
`

// TestSyntheticListing: the generator's output loads, round-trips, and DNATs.
func TestSyntheticListing(t *testing.T) {
	text := genKubeProxyListing(30, 3)
	e, err := Load([]byte(text), "synthetic.nft")
	if err != nil {
		t.Fatal(err)
	}
	if got := e.String(); normaliseListing(got) != normaliseListing(text) {
		t.Errorf("round trip:\n%s", lineDiff(normaliseListing(text), normaliseListing(got)))
	}
	res, err := e.Walk(WalkInput{Packet: *tcp("10.0.0.2", svcIP(7), 80), AllBranches: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outcomes) != 3 || *res.Outcomes[0].DNATDestination != epIP(7, 0)+":80" || res.Outcomes[0].Masqueraded {
		t.Errorf("walk:\n%s", res.Text())
	}
	// 1.36+ hairpin: a local endpoint reaching itself through its service is
	// masqueraded by the @hairpin-connections lookup after DNAT; the other branches
	// are not.
	res, err = e.Walk(WalkInput{Packet: *tcp(epIP(7, 0), svcIP(7), 80), AllBranches: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range res.Outcomes {
		self := *o.DNATDestination == epIP(7, 0)+":80"
		if o.Masqueraded != self {
			t.Errorf("hairpin: %s masqueraded=%v, want %v\n%s", *o.DNATDestination, o.Masqueraded, self, res.Text())
		}
		if self && o.MatchedRules[len(o.MatchedRules)-1].Element != epIP(7, 0)+" . "+epIP(7, 0)+" . tcp . 80" {
			t.Errorf("hairpin decided by %+v", o.MatchedRules[len(o.MatchedRules)-1])
		}
	}
	// From outside the pod network a ClusterIP is masqueraded through the mark.
	res, err = e.Walk(WalkInput{Packet: *tcp("203.0.113.2", svcIP(7), 80), AllBranches: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range res.Outcomes {
		if !o.Masqueraded || o.Mark != "0x0" {
			t.Errorf("external to ClusterIP: masqueraded=%v mark=%s, want true and the mark cleared", o.Masqueraded, o.Mark)
		}
	}
}

// BenchmarkLoadListing loads a 10,000-service × 10-endpoint listing; heap-MiB is the
// live heap after loading.
func BenchmarkLoadListing(b *testing.B) {
	for _, n := range []int{100, 10000} {
		text := []byte(genKubeProxyListing(n, 10))
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(text)))
			var e *Emulator
			for i := 0; i < b.N; i++ {
				var err error
				if e, err = Load(text, "bench.nft"); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
			runtime.KeepAlive(e)
		})
	}
}

// BenchmarkKernelLoad is the anchor: the real kernel loading the same listing with
// nft -f into a throwaway network namespace (root; skipped otherwise).
func BenchmarkKernelLoad(b *testing.B) {
	for _, n := range []int{100, 10000} {
		text := genKubeProxyListing(n, 10)
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			ns := newNetns(b)
			for i := 0; i < b.N; i++ {
				cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
				cmd.Stdin = strings.NewReader("flush ruleset\n" + text)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("nft -f: %v\n%s", err, out)
				}
			}
		})
	}
}

// BenchmarkProbe is a probe's cost through RunChain: the nat prerouting chain (a set
// lookup, a verdict map lookup, the numgen DNAT map) for a packet to a ClusterIP, at
// 100 and at 10,000 services; the ratio should stay near 1.
func BenchmarkProbe(b *testing.B) {
	for _, n := range []int{100, 10000} {
		e, err := Load([]byte(genKubeProxyListing(n, 10)), "bench.nft")
		if err != nil {
			b.Fatal(err)
		}
		var bc BaseChain
		for _, c := range e.BaseChains(netfilter.Prerouting) {
			if c.Type == "nat" {
				bc = c
			}
		}
		env := newTestEnv()
		pkts := make([]Packet, 64)
		for i := range pkts {
			pkts[i] = *tcp("10.0.0.2", svcIP((i*7919)%n), 80)
		}
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				q := pkts[i%len(pkts)]
				if v := e.RunChain(env, bc, &q, nil); !v.HasNAT {
					b.Fatal("not NATed")
				}
			}
		})
	}
}

var _ = netip.Addr{}

// BenchmarkPartialSync applies a kube-proxy-like partial sync (one new service: its
// chain, its rule, its cluster-ips and service-ips elements) to a loaded ruleset.
func BenchmarkPartialSync(b *testing.B) {
	for _, n := range []int{100, 10000} {
		e, err := Load([]byte(genKubeProxyListing(n, 10)), "bench.nft")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				name := fmt.Sprintf("service-NEWSVC%d-ns/new%d/tcp/p80", i, i)
				ip := fmt.Sprintf("172.31.%d.%d", (i/250)%250, i%250+1)
				script := fmt.Sprintf("add chain ip kube-proxy %s\nflush chain ip kube-proxy %s\nadd rule ip kube-proxy %s meta l4proto tcp dnat to 10.0.0.1:80\nadd element ip kube-proxy cluster-ips { %s }\nadd element ip kube-proxy service-ips { %s . tcp . 80 : goto %s }\n", name, name, name, ip, ip, name)
				if err := e.ApplyScript([]byte(script), "sync.nft"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
