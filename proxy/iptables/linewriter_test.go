package iptables

import (
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/proxy"
)

// The per-endpoint and per-VIP rules as the generator wrote them word by word (w and
// q) before it wrote them as pre-joined lines: the reference of
// TestLineWritersMatchWords.

func wordEndpointChains(g *generator, nc, nr *lineBuf, p *svcPlan) {
	proto := p.proto
	for i, ep := range p.c.AllReachable {
		epStr := ep.String()
		sep := p.info.epNames[i]
		g.declare(nc, sep, kindEndpoint)
		nr.w("-A", sep)
		if !g.largeCluster {
			nr.w("-m", "comment", "--comment", p.name)
		}
		nr.w("-s", ep.IPString(), "-j", ChainMarkMasq)
		nr.end()
		nr.w("-A", sep)
		if !g.largeCluster {
			nr.w("-m", "comment", "--comment", p.name)
		}
		if p.sp.SessionAffinity == corev1.ServiceAffinityClientIP {
			nr.w("-m", "recent", "--name", sep, "--set")
		}
		nr.w("-m", proto, "-p", proto, "-j", "DNAT", "--to-destination", epStr)
		nr.end()
	}
}

func wordEndpointRules(g *generator, nr *lineBuf, info *svcInfo, sp *proxy.ServicePort, chain string, eps []*proxy.Endpoint) {
	g.sepNames = info.chainsOf(eps, g.sepNames)
	if sp.SessionAffinity == corev1.ServiceAffinityClientIP {
		seconds := strconv.Itoa(sp.StickyMaxAgeSeconds)
		for i, ep := range eps {
			epStr := ep.String()
			sep := g.sepNames[i]
			nr.w("-A", chain)
			if !g.largeCluster {
				nr.w("-m", "comment", "--comment")
				nr.q(info.name, " -> ", epStr)
			}
			nr.w("-m", "recent", "--name", sep, "--rcheck", "--seconds", seconds, "--reap", "-j", sep)
			nr.end()
		}
	}
	n := len(eps)
	for i, ep := range eps {
		epStr := ep.String()
		nr.w("-A", chain)
		if !g.largeCluster {
			nr.w("-m", "comment", "--comment")
			nr.q(info.name, " -> ", epStr)
		}
		if i < n-1 {
			nr.w("-m", "statistic", "--mode", "random", "--probability", g.probs.get(n-i))
		}
		nr.w("-j", g.sepNames[i])
		nr.end()
	}
}

func wordVipRule(p *svcPlan, b *lineBuf, chain, why, dst, target string) {
	b.w("-A", chain, "-m", "comment", "--comment")
	b.q(p.name, why)
	b.w("-m", p.proto, "-p", p.proto, "-d", dst, "--dport", p.port, "-j", target)
	b.end()
}

// TestLineWritersMatchWords checks the pre-joined line writers (endpointChains,
// endpointRules, vipRule) against the word-by-word reference above: the same bytes,
// lines, declared chains, for random service ports (names, protocols, IPv4 and IPv6
// endpoints, ClientIP affinity and its timeout, subsets of endpoints for KUBE-SVC), in
// and out of large-cluster mode, into writing and discarding buffers.
func TestLineWritersMatchWords(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nn := types.NamespacedName{
			Namespace: rapid.StringMatching(`[a-z][a-z0-9-]{0,12}`).Draw(t, "ns"),
			Name:      rapid.StringMatching(`[a-z][a-z0-9-]{0,20}`).Draw(t, "name"),
		}
		proto := rapid.SampledFrom([]corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}).Draw(t, "proto")
		name := proxy.ServicePortName{NamespacedName: nn, Port: rapid.StringMatching(`[a-z0-9]{0,6}`).Draw(t, "port"), Protocol: proto}
		sp := &proxy.ServicePort{
			Name:      name,
			ClusterIP: netip.MustParseAddr("172.30.0.1"),
			Port:      rapid.IntRange(1, 65535).Draw(t, "portNum"),
			Protocol:  proto,
		}
		if rapid.Bool().Draw(t, "affinity") {
			sp.SessionAffinity = corev1.ServiceAffinityClientIP
			sp.StickyMaxAgeSeconds = rapid.IntRange(1, 86400).Draw(t, "seconds")
		}
		v6 := rapid.Bool().Draw(t, "v6")
		n := rapid.IntRange(0, 12).Draw(t, "endpoints")
		seen := map[string]bool{}
		var eps []*proxy.Endpoint
		for i := 0; i < n; i++ {
			var ip netip.Addr
			if v6 {
				ip = netip.MustParseAddr(fmt.Sprintf("fd00::%x", rapid.IntRange(1, 0xffff).Draw(t, "ip")))
			} else {
				ip = netip.MustParseAddr(fmt.Sprintf("10.%d.%d.%d", rapid.IntRange(0, 255).Draw(t, "a"), rapid.IntRange(0, 255).Draw(t, "b"), rapid.IntRange(0, 255).Draw(t, "c")))
			}
			ep := proxy.NewEndpoint(ip, rapid.IntRange(1, 65535).Draw(t, "epPort"))
			if !seen[ep.String()] {
				seen[ep.String()] = true
				eps = append(eps, ep)
			}
		}
		slicesSortEndpoints(eps)
		var cluster []*proxy.Endpoint
		for _, ep := range eps {
			if rapid.Bool().Draw(t, "inCluster") {
				cluster = append(cluster, ep)
			}
		}
		info := newSvcInfo(name)
		info.setEndpoints(eps)
		p := planService(info, sp, proxy.Categorized{Cluster: cluster, AllReachable: eps, HasAnyEndpoints: len(eps) > 0})
		large := rapid.Bool().Draw(t, "large")
		discard := rapid.Bool().Draw(t, "discard")

		write := func(ref bool) (nc, nr lineBuf, declared chainKinds) {
			g := newGenerator(nil)
			g.largeCluster = large
			nc.discard, nr.discard = discard, discard
			if ref {
				wordEndpointRules(g, &nr, info, sp, info.chains.Cluster, cluster)
				wordEndpointChains(g, &nc, &nr, &p)
				wordVipRule(&p, &nr, ChainServices, " cluster IP", p.clusterIP, info.chains.Cluster)
			} else {
				g.endpointRules(&nr, info, sp, info.chains.Cluster, cluster)
				g.endpointChains(&nc, &nr, &p)
				p.vipRule(&nr, ChainServices, " cluster IP", p.clusterIP, info.chains.Cluster)
			}
			return nc, nr, g.declared
		}
		wantNC, wantNR, wantDecl := write(true)
		gotNC, gotNR, gotDecl := write(false)
		if !bytes.Equal(gotNR.b, wantNR.b) || !bytes.Equal(gotNC.b, wantNC.b) {
			t.Fatalf("rules:\n%s\nwant:\n%s\nchains:\n%s\nwant:\n%s", gotNR.b, wantNR.b, gotNC.b, wantNC.b)
		}
		if gotNR.lines != wantNR.lines || gotNC.lines != wantNC.lines || gotNR.mid || gotNC.mid {
			t.Fatalf("lines %d/%d, want %d/%d (mid %v %v)", gotNC.lines, gotNR.lines, wantNC.lines, wantNR.lines, gotNC.mid, gotNR.mid)
		}
		if fmt.Sprint(gotDecl) != fmt.Sprint(wantDecl) {
			t.Fatalf("declared %v, want %v", gotDecl, wantDecl)
		}
	})
}

// slicesSortEndpoints sorts endpoints by string, as endpoint lists are.
func slicesSortEndpoints(eps []*proxy.Endpoint) {
	for i := 1; i < len(eps); i++ {
		for j := i; j > 0 && eps[j].String() < eps[j-1].String(); j-- {
			eps[j], eps[j-1] = eps[j-1], eps[j]
		}
	}
}
