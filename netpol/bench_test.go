package netpol

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// benchCluster builds nsCount namespaces of podsPerNS pods (labels app,
// tier, with named container ports) and polPerNS policies per namespace of
// varied shapes: a default deny, matchLabels on app, In expressions on
// tier, Exists, NotIn, with pod, namespace and ipBlock peers and ports.
func benchCluster(nsCount, podsPerNS, polPerNS int) ([]*networkingv1.NetworkPolicy, []Namespace, []Pod) {
	var nss []Namespace
	var pods []Pod
	var pols []*networkingv1.NetworkPolicy
	for n := 0; n < nsCount; n++ {
		ns := fmt.Sprintf("ns-%d", n)
		nss = append(nss, Namespace{Name: ns, Labels: map[string]string{"team": fmt.Sprintf("t%d", n%10)}})
		for i := 0; i < podsPerNS; i++ {
			k := n*podsPerNS + i
			pods = append(pods, Pod{
				Namespace: ns, Name: fmt.Sprintf("pod-%d", i),
				Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%20), "tier": []string{"web", "db", "cache"}[i%3]},
				IPs:    []netip.Addr{netip.AddrFrom4([4]byte{10, byte(k >> 16), byte(k >> 8), byte(k)})},
				Node:   fmt.Sprintf("node-%d", k%50),
				Ports:  []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}},
			})
		}
		for j := 0; j < polPerNS; j++ {
			name := fmt.Sprintf("pol-%d", j)
			var p *networkingv1.NetworkPolicy
			switch j % 5 {
			case 0:
				p = policy(ns, name, nil, ingressRules())
			case 1:
				p = policy(ns, name, sel("app", fmt.Sprintf("app-%d", j%20)), ingressRules(in(peers(podPeer(sel("app", "client"))), port("", 8080))))
			case 2:
				p = policy(ns, name, expr("tier", "In", "web", "cache"), ingressRules(in(peers(nsPodPeer(sel("team", "t1"), sel("app", "app-1"))), namedPort("", "http"))))
			case 3:
				p = policy(ns, name, expr("app", "Exists"), egressRules(out(peers(ipPeer("10.0.0.0/8", "10.1.0.0/16")), portRange(corev1.ProtocolTCP, 8000, 9000))))
			case 4:
				p = policy(ns, name, expr("tier", "NotIn", "db"), egressRules(out(peers(nsPeer(sel())), port(corev1.ProtocolUDP, 53))))
			}
			pols = append(pols, p)
		}
	}
	return pols, nss, pods
}

// BenchmarkNewIndex: 1,000 policies over 10,000 pods (100 namespaces × 100
// pods, 10 policies each). The goal is under 1 s per build.
func BenchmarkNewIndex(b *testing.B) {
	pols, nss, pods := benchCluster(100, 100, 10)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := NewIndex(pols, nss, pods); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewIndexWarm is NewIndex plus the selection of every pod for
// both directions (what the first decision of each pod computes and caches).
func BenchmarkNewIndexWarm(b *testing.B) {
	pols, nss, pods := benchCluster(100, 100, 10)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ix, err := NewIndex(pols, nss, pods)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range ix.Pods() {
			ix.Selecting(Ingress, p)
		}
	}
}

// unrelatedWorld is one namespace "shop" with a server (app=web) selected by
// one policy allowing a client, and n policies that do not select it: half
// in its namespace selecting other apps, half in other namespaces.
func unrelatedWorld(tb testing.TB, n int) (*Index, *Pod, *Pod) {
	var pods []Pod
	pods = append(pods,
		Pod{Namespace: "shop", Name: "web", Labels: map[string]string{"app": "web"}, IPs: []netip.Addr{netip.MustParseAddr("10.244.0.10")}},
		Pod{Namespace: "shop", Name: "client", Labels: map[string]string{"app": "client"}, IPs: []netip.Addr{netip.MustParseAddr("10.244.0.11")}})
	pols := []*networkingv1.NetworkPolicy{
		policy("shop", "allow-client", sel("app", "web"), ingressRules(in(peers(podPeer(sel("app", "client"))), port("", 80)))),
	}
	for i := 0; i < n; i++ {
		ns := "shop"
		if i%2 == 1 {
			ns = fmt.Sprintf("other-%d", i%50)
		}
		var sl = sel("app", fmt.Sprintf("other-%d", i))
		if i%4 == 2 {
			sl = expr("app", "In", fmt.Sprintf("x-%d", i), fmt.Sprintf("y-%d", i))
		}
		pols = append(pols, policy(ns, fmt.Sprintf("unrelated-%d", i), sl, ingressRules(), egressRules()))
	}
	ix, err := NewIndex(pols, nil, pods)
	if err != nil {
		tb.Fatal(err)
	}
	ps := ix.Pods()
	return ix, ps[1], ps[0] // web, client (sorted: client, web)
}

// BenchmarkVerdictUnrelated: the cost of one connection's verdict does not
// grow with policies that do not select either end (10 vs 1,000). "cold"
// drops the pod's cached selection first (SetPod), so the index lookup
// itself is measured too.
func BenchmarkVerdictUnrelated(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("unrelated=%d/cached", n), func(b *testing.B) {
			ix, web, client := unrelatedWorld(b, n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if !ix.Verdict(PodPeer(client), PodPeer(web), 80, corev1.ProtocolTCP).Allowed {
					b.Fatal("denied")
				}
			}
		})
		b.Run(fmt.Sprintf("unrelated=%d/allowed", n), func(b *testing.B) {
			ix, web, client := unrelatedWorld(b, n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if !ix.Allowed(PodPeer(client), PodPeer(web), 80, corev1.ProtocolTCP) {
					b.Fatal("denied")
				}
			}
		})
		b.Run(fmt.Sprintf("unrelated=%d/cold", n), func(b *testing.B) {
			ix, web, client := unrelatedWorld(b, n)
			wp, cp := *web, *client
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ix.SetPod(wp)
				ix.SetPod(cp)
				ps := ix.Pods()
				if !ix.Verdict(PodPeer(ps[0]), PodPeer(ps[1]), 80, corev1.ProtocolTCP).Allowed {
					b.Fatal("denied")
				}
			}
		})
	}
}

// TestCandidatesIgnoreUnrelated: the policies the index even looks at for a
// pod are the same with 10 or 1,000 policies that cannot select it.
func TestCandidatesIgnoreUnrelated(t *testing.T) {
	count := func(n int) int {
		ix, web, _ := unrelatedWorld(t, n)
		seen := 0
		ix.byNS[web.Namespace].candidates(web.Labels, func(*compiled) { seen++ })
		return seen
	}
	if a, b := count(10), count(1000); a != b || a != 1 {
		t.Errorf("candidates looked at: %d with 10 unrelated policies, %d with 1000; want 1 and 1", a, b)
	}
}

// BenchmarkReferenceUnrelated is the same question asked of Reference, which
// loops over every policy: the cost the index avoids.
func BenchmarkReferenceUnrelated(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("unrelated=%d", n), func(b *testing.B) {
			ix, web, client := unrelatedWorld(b, n)
			pols := ix.Policies()
			pods := []Pod{*web, *client}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if !Reference(pols, nil, pods, PodPeer(client), PodPeer(web), 80, corev1.ProtocolTCP) {
					b.Fatal("denied")
				}
			}
		})
	}
}
