package netpol

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Builders for policies in tests, after the upstream e2e suite's helpers
// (GenNetworkPolicyWithNameAndPodSelector, SetSpecIngressRules, ...).

type polOpt func(*networkingv1.NetworkPolicy)

func policy(ns, name string, podSel *metav1.LabelSelector, opts ...polOpt) *networkingv1.NetworkPolicy {
	p := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if podSel != nil {
		p.Spec.PodSelector = *podSel
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// ingressRules sets spec.ingress (an empty, non-nil list when no rules are
// given) and adds Ingress to policyTypes, like upstream's SetSpecIngressRules.
func ingressRules(rules ...networkingv1.NetworkPolicyIngressRule) polOpt {
	return func(p *networkingv1.NetworkPolicy) {
		p.Spec.Ingress = append([]networkingv1.NetworkPolicyIngressRule{}, rules...)
		p.Spec.PolicyTypes = append(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	}
}

// egressRules is ingressRules for egress.
func egressRules(rules ...networkingv1.NetworkPolicyEgressRule) polOpt {
	return func(p *networkingv1.NetworkPolicy) {
		p.Spec.Egress = append([]networkingv1.NetworkPolicyEgressRule{}, rules...)
		p.Spec.PolicyTypes = append(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
	}
}

func sel(kv ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func expr(key string, op metav1.LabelSelectorOperator, values ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

func podPeer(s *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: s}
}
func nsPeer(s *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: s}
}
func nsPodPeer(ns, pod *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: ns, PodSelector: pod}
}
func ipPeer(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}

func protoPtr(p corev1.Protocol) *corev1.Protocol { return &p }

// port: a numeric port; proto "" leaves the protocol out (TCP by default).
func port(proto corev1.Protocol, n int32) networkingv1.NetworkPolicyPort {
	pp := networkingv1.NetworkPolicyPort{Port: &intstr.IntOrString{IntVal: n}}
	if proto != "" {
		pp.Protocol = protoPtr(proto)
	}
	return pp
}

func portRange(proto corev1.Protocol, n, end int32) networkingv1.NetworkPolicyPort {
	pp := port(proto, n)
	pp.EndPort = &end
	return pp
}

func namedPort(proto corev1.Protocol, name string) networkingv1.NetworkPolicyPort {
	pp := networkingv1.NetworkPolicyPort{Port: &intstr.IntOrString{Type: intstr.String, StrVal: name}}
	if proto != "" {
		pp.Protocol = protoPtr(proto)
	}
	return pp
}

func protoOnly(proto corev1.Protocol) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: protoPtr(proto)}
}

func in(from []networkingv1.NetworkPolicyPeer, ports ...networkingv1.NetworkPolicyPort) networkingv1.NetworkPolicyIngressRule {
	return networkingv1.NetworkPolicyIngressRule{From: from, Ports: ports}
}
func out(to []networkingv1.NetworkPolicyPeer, ports ...networkingv1.NetworkPolicyPort) networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{To: to, Ports: ports}
}
func peers(p ...networkingv1.NetworkPolicyPeer) []networkingv1.NetworkPolicyPeer { return p }

// world is the upstream e2e model: namespaces x, y, z (each labelled
// ns=NAME besides kubernetes.io/metadata.name) with pods a, b, c (labelled
// pod=NAME), every pod serving ports 80 and 81 on TCP, UDP and SCTP with
// container ports named serve-PORT-PROTO as upstream's agnhost servers.
// It keeps the index and the plain lists (for Reference) in step.
type world struct {
	t          testing.TB
	policies   []*networkingv1.NetworkPolicy
	namespaces []Namespace
	pods       []Pod
	ix         *Index
}

func e2eModel() ([]Namespace, []Pod) {
	var nss []Namespace
	var pods []Pod
	for i, ns := range []string{"x", "y", "z"} {
		nss = append(nss, Namespace{Name: ns, Labels: map[string]string{"ns": ns}})
		for j, name := range []string{"a", "b", "c"} {
			p := Pod{
				Namespace: ns, Name: name, Labels: map[string]string{"pod": name},
				IPs:  []netip.Addr{netip.AddrFrom4([4]byte{10, 244, byte(i + 1), byte(j + 10)})},
				Node: fmt.Sprintf("node-%d", j+1),
			}
			for _, pr := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP} {
				for _, n := range []int32{80, 81} {
					p.Ports = append(p.Ports, corev1.ContainerPort{
						Name: fmt.Sprintf("serve-%d-%s", n, strings.ToLower(string(pr))), ContainerPort: n, Protocol: pr,
					})
				}
			}
			pods = append(pods, p)
		}
	}
	return nss, pods
}

func newWorld(t testing.TB, policies ...*networkingv1.NetworkPolicy) *world {
	t.Helper()
	nss, pods := e2eModel()
	w := &world{t: t, namespaces: nss, pods: pods}
	ix, err := NewIndex(nil, nss, pods)
	if err != nil {
		t.Fatal(err)
	}
	w.ix = ix
	for _, p := range policies {
		w.setPolicy(p)
	}
	return w
}

func (w *world) setPolicy(p *networkingv1.NetworkPolicy) {
	w.t.Helper()
	if err := w.ix.SetPolicy(p); err != nil {
		w.t.Fatal(err)
	}
	for i, q := range w.policies {
		if q.Namespace == p.Namespace && q.Name == p.Name {
			w.policies[i] = p
			return
		}
	}
	w.policies = append(w.policies, p)
}

func (w *world) deletePolicy(ns, name string) {
	w.ix.DeletePolicy(ns, name)
	for i, q := range w.policies {
		if q.Namespace == ns && q.Name == name {
			w.policies = append(w.policies[:i], w.policies[i+1:]...)
			return
		}
	}
}

func (w *world) setPodLabels(ns, name string, l map[string]string) {
	for i := range w.pods {
		if w.pods[i].Namespace == ns && w.pods[i].Name == name {
			w.pods[i].Labels = l
			w.ix.SetPod(w.pods[i])
			return
		}
	}
	w.t.Fatalf("no pod %s/%s", ns, name)
}

func (w *world) setNamespaceLabels(ns string, l map[string]string) {
	for i := range w.namespaces {
		if w.namespaces[i].Name == ns {
			w.namespaces[i].Labels = l
			w.ix.SetNamespace(w.namespaces[i])
			return
		}
	}
	w.t.Fatalf("no namespace %s", ns)
}

func (w *world) pod(key string) *Pod {
	for _, p := range w.ix.Pods() {
		if p.Key() == key {
			return p
		}
	}
	w.t.Fatalf("no pod %s", key)
	return nil
}

// reach is an expected truth table, after upstream's Reachability.
type reach struct {
	pods []string
	m    map[[2]string]bool
}

func newReach(pods []string, def bool) *reach {
	r := &reach{pods: pods, m: map[[2]string]bool{}}
	for _, a := range pods {
		for _, b := range pods {
			r.m[[2]string{a, b}] = def
		}
	}
	return r
}

// peerMatch matches "NS/NAME" against a pattern: "" any, "x/" namespace x,
// "x/a" the pod.
func peerMatch(pattern, pod string) bool {
	switch {
	case pattern == "":
		return true
	case strings.HasSuffix(pattern, "/"):
		return strings.HasPrefix(pod, pattern)
	}
	return pattern == pod
}

// expectPeer is upstream's ExpectPeer: every pair whose ends match the
// patterns gets the value.
func (r *reach) expectPeer(from, to string, v bool) *reach {
	for _, a := range r.pods {
		for _, b := range r.pods {
			if peerMatch(from, a) && peerMatch(to, b) {
				r.m[[2]string{a, b}] = v
			}
		}
	}
	return r
}

func (r *reach) expect(from, to string, v bool) *reach { return r.expectPeer(from, to, v) }
func (r *reach) expectAllIngress(to string, v bool) *reach {
	return r.expectPeer("", to, v)
}
func (r *reach) expectAllEgress(from string, v bool) *reach {
	return r.expectPeer(from, "", v)
}

// observe computes the truth table by Index.Verdict and checks Reference
// agrees on every pair.
func (w *world) observe(port uint16, proto corev1.Protocol) *reach {
	w.t.Helper()
	pods := w.ix.Pods()
	keys := make([]string, len(pods))
	for i, p := range pods {
		keys[i] = p.Key()
	}
	r := newReach(keys, false)
	for _, a := range pods {
		for _, b := range pods {
			v := w.ix.Verdict(PodPeer(a), PodPeer(b), port, proto)
			ref := Reference(w.policies, w.namespaces, w.pods, PodPeer(a), PodPeer(b), port, proto)
			if v.Allowed != ref {
				w.t.Errorf("%s -> %s %s/%d: Index says %v (%s), Reference %v", a.Key(), b.Key(), proto, port, v.Allowed, v.Reason, ref)
			}
			r.m[[2]string{a.Key(), b.Key()}] = v.Allowed
		}
	}
	return r
}

// String prints the table as the upstream e2e suite does: rows from,
// columns to, "." allowed, "X" denied.
func (r *reach) String() string {
	var b strings.Builder
	b.WriteString("-")
	for _, to := range r.pods {
		b.WriteString("\t" + to)
	}
	for _, from := range r.pods {
		b.WriteString("\n" + from)
		for _, to := range r.pods {
			if r.m[[2]string{from, to}] {
				b.WriteString("\t.")
			} else {
				b.WriteString("\tX")
			}
		}
	}
	return b.String()
}

// check compares the observed table with the expected one, ignoring
// loopback pairs as upstream does (ignoreLoopback: CNIs differ on them).
func (w *world) check(what string, port uint16, proto corev1.Protocol, want *reach) {
	w.t.Helper()
	got := w.observe(port, proto)
	wrong := 0
	for _, a := range got.pods {
		for _, b := range got.pods {
			if a != b && got.m[[2]string{a, b}] != want.m[[2]string{a, b}] {
				wrong++
			}
		}
	}
	if wrong > 0 {
		w.t.Errorf("%s %s/%d: %d pairs differ\nexpected:\n%s\nobserved:\n%s", what, proto, port, wrong, want, got)
	}
}

func (w *world) all(v bool) *reach {
	pods := w.ix.Pods()
	keys := make([]string, len(pods))
	for i, p := range pods {
		keys[i] = p.Key()
	}
	return newReach(keys, v)
}
