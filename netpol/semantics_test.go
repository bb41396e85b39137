package netpol

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func mustIndex(t *testing.T, pols []*networkingv1.NetworkPolicy, nss []Namespace, pods []Pod) *Index {
	t.Helper()
	ix, err := NewIndex(pols, nss, pods)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func pod(ns, name, ip string, labels ...string) Pod {
	p := Pod{Namespace: ns, Name: name, Labels: map[string]string{}}
	for i := 0; i+1 < len(labels); i += 2 {
		p.Labels[labels[i]] = labels[i+1]
	}
	if ip != "" {
		p.IPs = []netip.Addr{netip.MustParseAddr(ip)}
	}
	return p
}

// agree checks Index.Verdict, Index.Allowed and Reference all give want.
func agree(t *testing.T, ix *Index, pols []*networkingv1.NetworkPolicy, nss []Namespace, pods []Pod, src, dst Peer, port uint16, proto corev1.Protocol, want bool) Verdict {
	t.Helper()
	v := ix.Verdict(src, dst, port, proto)
	a := ix.Allowed(src, dst, port, proto)
	r := Reference(pols, nss, pods, src, dst, port, proto)
	if v.Allowed != want || a != want || r != want {
		t.Errorf("%s -> %s %s/%d: Verdict %v (%s), Allowed %v, Reference %v; want %v", src, dst, proto, port, v.Allowed, v.Reason, a, r, want)
	}
	return v
}

func TestDecisionText(t *testing.T) {
	pols := []*networkingv1.NetworkPolicy{
		policy("default", "deny-all", nil, ingressRules()),
		policy("default", "allow-client", sel("app", "web"), ingressRules(
			in(peers(podPeer(sel("app", "other")))),
			in(peers(podPeer(sel("app", "client"))), port("", 80)))),
	}
	pods := []Pod{pod("default", "web", "10.244.0.10", "app", "web"), pod("default", "client", "10.244.0.11", "app", "client"), pod("default", "other", "10.244.0.12")}
	ix := mustIndex(t, pols, nil, pods)
	web, client, other := ix.Pods()[2], ix.Pods()[0], ix.Pods()[1]

	v := agree(t, ix, pols, nil, pods, PodPeer(client), PodPeer(web), 80, tcp, true)
	if v.Egress == nil || v.Egress.Isolated || !v.Egress.Allowed {
		t.Errorf("egress decision %+v", v.Egress)
	}
	d := v.Ingress
	if d == nil || !d.Isolated || d.Rule == nil || d.Rule.Index != 1 || d.Rule.Policy != (PolicyRef{"default", "allow-client"}) {
		t.Fatalf("ingress decision %+v", d)
	}
	if got, want := d.String(), "pod default/web ingress allowed by default/allow-client ingress rule 1: from: [podSelector: {app: client}] ports: [TCP/80]"; got != want {
		t.Errorf("allowed text\n got %s\nwant %s", got, want)
	}
	if got, want := v.Egress.String(), "pod default/client is not isolated for egress: allowed"; got != want {
		t.Errorf("not isolated text\n got %s\nwant %s", got, want)
	}

	v = agree(t, ix, pols, nil, pods, PodPeer(other), PodPeer(web), 80, tcp, false)
	if got, want := v.Ingress.String(), "pod default/web is isolated for ingress (policies: default/allow-client, default/deny-all); no rule allows it"; got != want {
		t.Errorf("denied text\n got %s\nwant %s", got, want)
	}
	if v.Ingress.Rule != nil || !strings.Contains(v.Reason, "denied: pod default/web is isolated for ingress") || !strings.Contains(v.Reason, "pod default/other (10.244.0.12) -> pod default/web (10.244.0.10) TCP/80") {
		t.Errorf("reason %q", v.Reason)
	}
	// Port 81 from the client: rule 1 wants 80, rule 0 another pod.
	agree(t, ix, pols, nil, pods, PodPeer(client), PodPeer(web), 81, tcp, false)
	// UDP/80 is not TCP/80.
	agree(t, ix, pols, nil, pods, PodPeer(client), PodPeer(web), 80, udp, false)
	if got := ix.Selecting(Ingress, web); len(got) != 2 || got[0].Name != "allow-client" {
		t.Errorf("Selecting sorted: %v", got)
	}
	if got := ix.Selecting(Egress, web); len(got) != 0 {
		t.Errorf("egress selecting %v", got)
	}
}

func TestRuleText(t *testing.T) {
	r := in(peers(
		nsPodPeer(sel("team", "a"), &metav1.LabelSelector{}),
		podPeer(&metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}, MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}},
			{Key: "env", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"prod"}},
			{Key: "k", Operator: metav1.LabelSelectorOpExists},
			{Key: "gone", Operator: metav1.LabelSelectorOpDoesNotExist},
		}}),
		ipPeer("10.0.0.0/8", "10.1.0.0/16", "10.2.0.0/16")),
		port(udp, 53), portRange("", 8000, 8080), namedPort(tcp, "http"), protoOnly(sctp))
	want := "from: [namespaceSelector: {team: a} podSelector: {}, podSelector: {app: x, tier in (a,b), env notin (prod), k, !gone}, ipBlock: 10.0.0.0/8 except [10.1.0.0/16, 10.2.0.0/16]] ports: [UDP/53, TCP/8000-8080, TCP/http, SCTP]"
	if got := RuleText(Ingress, &r, nil); got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
	e := out(nil)
	if got := RuleText(Egress, nil, &e); got != "to: any ports: any" {
		t.Errorf("empty egress rule: %s", got)
	}
	e = out([]networkingv1.NetworkPolicyPeer{}, []networkingv1.NetworkPolicyPort{}...)
	if got := RuleText(Egress, nil, &e); got != "to: any ports: any" {
		t.Errorf("empty lists: %s", got)
	}
}

func TestHostNetworkAndAddresses(t *testing.T) {
	node := "192.168.0.5"
	hn := pod("kube-system", "agent", node, "app", "agent")
	hn.HostNetwork = true
	pods := []Pod{pod("default", "web", "10.244.0.10", "app", "web"), pod("default", "client", "10.244.0.11", "app", "client"), hn}
	pols := []*networkingv1.NetworkPolicy{
		// Would select the hostNetwork pod if it were a pod for policy.
		policy("kube-system", "deny-all", nil, ingressRules(), egressRules()),
		policy("default", "web", sel("app", "web"), ingressRules(
			in(peers(nsPeer(&metav1.LabelSelector{}))),       // every pod, no address
			in(peers(ipPeer("192.168.0.0/24")), port("", 9)), // nodes, port 9 only
		)),
	}
	ix := mustIndex(t, pols, nil, pods)
	ps := ix.Pods()
	agent, client, web := ps[2], ps[0], ps[1]
	if agent.Key() != "kube-system/agent" || ix.PodByIP(netip.MustParseAddr(node)) != nil {
		t.Fatalf("pods %v / PodByIP of a hostNetwork pod", ps)
	}
	if ix.PodByIP(netip.MustParseAddr("10.244.0.10")) != web {
		t.Error("PodByIP")
	}
	if len(ix.Selecting(Ingress, agent)) != 0 {
		t.Error("a policy selects a hostNetwork pod")
	}
	// The hostNetwork pod as a source is its node address: namespaceSelector
	// {} does not match it, the ipBlock does (on port 9).
	agree(t, ix, pols, nil, pods, PodPeer(agent), PodPeer(web), 80, tcp, false)
	agree(t, ix, pols, nil, pods, PodPeer(agent), PodPeer(web), 9, tcp, true)
	agree(t, ix, pols, nil, pods, Peer{Pod: agent}, PodPeer(web), 9, tcp, true)
	agree(t, ix, pols, nil, pods, PodPeer(client), PodPeer(web), 80, tcp, true)
	// Into the hostNetwork pod: not isolated, despite deny-all.
	v := agree(t, ix, pols, nil, pods, PodPeer(client), PodPeer(agent), 80, tcp, true)
	if v.Ingress != nil {
		t.Errorf("ingress decision for a hostNetwork destination: %+v", v.Ingress)
	}
	// A bare pod address is that pod.
	agree(t, ix, pols, nil, pods, IPPeer(netip.MustParseAddr("10.244.0.11")), PodPeer(web), 80, tcp, true)
	agree(t, ix, pols, nil, pods, IPPeer(netip.MustParseAddr("10.244.0.99")), PodPeer(web), 80, tcp, false)
	// Outside to outside: no policy applies.
	v = agree(t, ix, pols, nil, pods, IPPeer(netip.MustParseAddr("1.1.1.1")), IPPeer(netip.MustParseAddr("8.8.8.8")), 53, udp, true)
	if v.Egress != nil || v.Ingress != nil || !strings.Contains(v.Reason, "no policy applies") {
		t.Errorf("%+v", v)
	}
}

func TestNamedPortsAndRanges(t *testing.T) {
	web := pod("default", "web", "10.244.0.10", "app", "web")
	web.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}}
	client := pod("default", "client", "10.244.0.11", "app", "client")
	pods := []Pod{web, client}
	pols := []*networkingv1.NetworkPolicy{
		policy("default", "in", sel("app", "web"), ingressRules(in(nil, namedPort("", "http"), namedPort(udp, "dns")))),
		policy("default", "out", sel("app", "client"), egressRules(out(nil, namedPort("", "http"), portRange(tcp, 9000, 9100)))),
	}
	ix := mustIndex(t, pols, nil, pods)
	c, w := ix.Pods()[0], ix.Pods()[1]
	ext := IPPeer(netip.MustParseAddr("203.0.113.1"))
	for _, tc := range []struct {
		src, dst Peer
		port     uint16
		proto    corev1.Protocol
		want     bool
	}{
		{PodPeer(c), PodPeer(w), 8080, tcp, true}, // named port http resolves at web (both directions)
		{PodPeer(c), PodPeer(w), 80, tcp, false},  // http is 8080 here
		{PodPeer(c), PodPeer(w), 53, udp, false},  // ingress allows dns, egress does not
		{ext, PodPeer(w), 53, udp, true},          // from outside: only ingress applies
		{ext, PodPeer(w), 53, tcp, false},         // dns is UDP
		{PodPeer(c), ext, 8080, tcp, false},       // a named port matches no address
		{PodPeer(c), ext, 9000, tcp, true},        // range start
		{PodPeer(c), ext, 9100, tcp, true},        // range end, inclusive
		{PodPeer(c), ext, 9101, tcp, false},       // past it
		{PodPeer(c), ext, 9050, udp, false},       // range is TCP
		{ext, PodPeer(c), 1234, sctp, true},       // client not isolated for ingress
	} {
		agree(t, ix, pols, nil, pods, tc.src, tc.dst, tc.port, tc.proto, tc.want)
	}
}

func TestIPBlocks(t *testing.T) {
	web := pod("default", "web", "fd00::10", "app", "web")
	pods := []Pod{web}
	pols := []*networkingv1.NetworkPolicy{
		policy("default", "v6", sel("app", "web"), ingressRules(in(peers(ipPeer("fd00:1::/32", "fd00:1:2::/48"), ipPeer("10.0.0.0/8", "10.1.0.0/16"))))),
	}
	ix := mustIndex(t, pols, nil, pods)
	w := ix.Pods()[0]
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"fd00:1::1", true}, {"fd00:1:2::1", false}, {"fd00:2::1", false},
		{"10.2.3.4", true}, {"10.1.3.4", false}, {"::ffff:10.2.3.4", true}, {"11.0.0.1", false},
	} {
		agree(t, ix, pols, nil, pods, IPPeer(netip.MustParseAddr(tc.addr)), PodPeer(w), 80, tcp, tc.want)
	}
}

func TestIndexUpdatesAndErrors(t *testing.T) {
	bad := policy("default", "bad", expr("app", metav1.LabelSelectorOpIn)) // In without values
	good := policy("", "deny", nil, ingressRules())                        // namespace "" is "default"
	pods := []Pod{pod("default", "web", "10.244.0.10", "app", "web"), pod("other", "c", "10.244.1.10", "app", "c")}
	ix, err := NewIndex([]*networkingv1.NetworkPolicy{bad, good}, nil, pods)
	if err == nil || !strings.Contains(err.Error(), "NetworkPolicy default/bad: spec.podSelector") {
		t.Errorf("error %v", err)
	}
	if ps := ix.Policies(); len(ps) != 1 || ps[0] != good {
		t.Fatalf("policies %v", ps)
	}
	web, c := ix.Pods()[0], ix.Pods()[1]
	if got := ix.Selecting(Ingress, web); len(got) != 1 || got[0] != (PolicyRef{"default", "deny"}) {
		t.Errorf("selecting %v", got)
	}
	// A failed SetPolicy changes nothing.
	replacement := policy("default", "deny", nil, ingressRules(in(peers(ipPeer("10.0.0.0/33")))))
	if err := ix.SetPolicy(replacement); err == nil {
		t.Error("bad CIDR accepted")
	}
	if ix.Allowed(PodPeer(c), PodPeer(web), 80, tcp) {
		t.Error("the failed replacement took effect")
	}
	// Namespace labels: a policy allowing team=a; other gains the label.
	ix.SetPolicy(policy("default", "team-a", sel("app", "web"), ingressRules(in(peers(nsPeer(sel("team", "a")))))))
	if ix.Allowed(PodPeer(c), PodPeer(web), 80, tcp) {
		t.Error("allowed before the label")
	}
	ix.SetNamespace(Namespace{Name: "other", Labels: map[string]string{"team": "a"}})
	if !ix.Allowed(PodPeer(c), PodPeer(web), 80, tcp) {
		t.Error("denied after the label")
	}
	ix.DeleteNamespace("other")
	if ix.Allowed(PodPeer(c), PodPeer(web), 80, tcp) {
		t.Error("allowed after the namespace's labels went")
	}
	// The implied name label works without the namespace being given.
	ix.SetPolicy(policy("default", "by-name", sel("app", "web"), ingressRules(in(peers(nsPeer(sel(NamespaceNameLabel, "other")))))))
	if !ix.Allowed(PodPeer(c), PodPeer(web), 80, tcp) {
		t.Error("kubernetes.io/metadata.name not implied")
	}
	// Relabel the pod out of the selecting policies; then delete the policies.
	ix.SetPod(pod("default", "web", "10.244.0.10", "app", "api"))
	web = ix.PodByIP(netip.MustParseAddr("10.244.0.10"))
	if got := ix.Selecting(Ingress, web); len(got) != 1 || got[0].Name != "deny" {
		t.Errorf("after relabel: %v", got)
	}
	ix.DeletePolicy("", "deny")
	if got := ix.Selecting(Ingress, web); len(got) != 0 {
		t.Errorf("after delete: %v", got)
	}
	ix.DeletePod("default", "web")
	if ix.PodByIP(netip.MustParseAddr("10.244.0.10")) != nil || len(ix.Pods()) != 1 {
		t.Error("pod not deleted")
	}
}

func TestMatrix(t *testing.T) {
	w := newWorld(t, policy("x", "deny", nil, ingressRules()))
	m := w.ix.Matrix(80, tcp)
	s := m.String()
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if len(lines) != 10 || lines[0] != "-\tx/a\tx/b\tx/c\ty/a\ty/b\ty/c\tz/a\tz/b\tz/c" {
		t.Fatalf("matrix:\n%s", s)
	}
	if lines[4] != "y/a\tX\tX\tX\t.\t.\t.\t.\t.\t." {
		t.Errorf("row y/a: %q", lines[4])
	}
}

// TestConcurrentUse: decisions while policies, pods and namespaces change
// (run with -race).
func TestConcurrentUse(t *testing.T) {
	w := newWorld(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 200; i++ {
			if i%2 == 0 {
				w.ix.SetPolicy(policy("x", "deny", nil, ingressRules()))
			} else {
				w.ix.DeletePolicy("x", "deny")
			}
			w.ix.SetNamespace(Namespace{Name: "y", Labels: map[string]string{"i": string(rune('a' + i%26))}})
			w.ix.SetPod(Pod{Namespace: "z", Name: "d", Labels: map[string]string{"pod": "d"}, IPs: []netip.Addr{netip.MustParseAddr("10.244.3.99")}})
		}
	}()
	for i := 0; i < 200; i++ {
		for _, p := range w.ix.Pods() {
			w.ix.Verdict(PodPeer(p), IPPeer(netip.MustParseAddr("10.244.1.10")), 80, tcp)
		}
		w.ix.Matrix(80, tcp)
	}
	<-done
}

// TestDNSEgressAndClusterIPGotcha: a default-deny egress namespace that
// allows DNS to kube-dns's pods works for the connection policy sees (after
// kube-proxy's DNAT: the DNS pod's address and port 53); an ipBlock naming
// the kube-dns ClusterIP instead allows nothing, because policy never sees
// the ClusterIP.
func TestDNSEgressAndClusterIPGotcha(t *testing.T) {
	dnsPod := pod("kube-system", "coredns-1", "10.244.9.2", "k8s-app", "kube-dns")
	app := pod("shop", "app", "10.244.1.5", "app", "shop")
	pods := []Pod{dnsPod, app}
	nss := []Namespace{{Name: "kube-system"}, {Name: "shop"}}
	clusterIP := netip.MustParseAddr("10.96.0.10")
	kubeDNS := func() []networkingv1.NetworkPolicyPeer {
		return peers(nsPodPeer(sel(NamespaceNameLabel, "kube-system"), sel("k8s-app", "kube-dns")))
	}
	right := []*networkingv1.NetworkPolicy{
		policy("shop", "default-deny-egress", nil, egressRules()),
		policy("shop", "allow-dns", nil, egressRules(out(kubeDNS(), port(udp, 53), port(tcp, 53)))),
	}
	wrong := []*networkingv1.NetworkPolicy{
		policy("shop", "default-deny-egress", nil, egressRules()),
		policy("shop", "allow-dns-by-clusterip", nil, egressRules(out(peers(ipPeer(clusterIP.String()+"/32")), port(udp, 53)))),
	}
	ix := mustIndex(t, right, nss, pods)
	a, d := ix.Pods()[1], ix.Pods()[0]
	v := agree(t, ix, right, nss, pods, PodPeer(a), PodPeer(d), 53, udp, true)
	if v.Egress.Rule == nil || v.Egress.Rule.Policy.Name != "allow-dns" || v.Egress.Rule.Text != "to: [namespaceSelector: {kubernetes.io/metadata.name: kube-system} podSelector: {k8s-app: kube-dns}] ports: [UDP/53, TCP/53]" {
		t.Errorf("rule %+v", v.Egress.Rule)
	}
	agree(t, ix, right, nss, pods, PodPeer(a), PodPeer(d), 53, tcp, true)
	agree(t, ix, right, nss, pods, PodPeer(a), PodPeer(d), 80, tcp, false)
	agree(t, ix, right, nss, pods, PodPeer(a), IPPeer(netip.MustParseAddr("8.8.8.8")), 53, udp, false)

	ix = mustIndex(t, wrong, nss, pods)
	a, d = ix.Pods()[1], ix.Pods()[0]
	// After DNAT the destination is the DNS pod: the ClusterIP block does not match.
	v = agree(t, ix, wrong, nss, pods, PodPeer(a), PodPeer(d), 53, udp, false)
	if !strings.Contains(v.Reason, "pod shop/app is isolated for egress (policies: shop/allow-dns-by-clusterip, shop/default-deny-egress); no rule allows it") {
		t.Errorf("reason %q", v.Reason)
	}
	// Were the ClusterIP itself the destination (no DNAT), it would match.
	agree(t, ix, wrong, nss, pods, PodPeer(a), IPPeer(clusterIP), 53, udp, true)
}
