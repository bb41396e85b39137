package netpol

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"pgregory.net/rapid"
)

// Generators over a small vocabulary, so that selectors often match.

var (
	genNS     = rapid.SampledFrom([]string{"x", "y", "z"})
	genKey    = rapid.SampledFrom([]string{"app", "tier", "ns"})
	genValue  = rapid.SampledFrom([]string{"a", "b", "c"})
	genProto  = rapid.SampledFrom([]corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP})
	genPort   = rapid.SampledFrom([]uint16{53, 80, 81, 8080})
	genPName  = rapid.SampledFrom([]string{"http", "dns", "alt"})
	extAddrs  = []netip.Addr{netip.MustParseAddr("192.168.0.1"), netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("10.0.0.1")}
	genPrefix = rapid.SampledFrom([]string{"10.0.0.0/8", "10.244.0.0/16", "10.244.1.0/24", "0.0.0.0/0", "192.168.0.0/16", "203.0.113.9/32", "10.244.2.3/32"})
)

func genLabels(t *rapid.T, label string) map[string]string {
	n := rapid.IntRange(0, 2).Draw(t, label+"-n")
	if n == 0 && rapid.Bool().Draw(t, label+"-nil") {
		return nil
	}
	m := map[string]string{}
	for i := 0; i < n; i++ {
		m[genKey.Draw(t, label+"-k")] = genValue.Draw(t, label+"-v")
	}
	return m
}

func genSelector(t *rapid.T, label string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{}
	switch rapid.IntRange(0, 3).Draw(t, label+"-kind") {
	case 0: // empty
	case 1:
		s.MatchLabels = genLabels(t, label+"-ml")
	default:
		if rapid.Bool().Draw(t, label+"-withml") {
			s.MatchLabels = genLabels(t, label+"-ml")
		}
		for i, n := 0, rapid.IntRange(1, 2).Draw(t, label+"-nexpr"); i < n; i++ {
			op := rapid.SampledFrom([]metav1.LabelSelectorOperator{
				metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist,
			}).Draw(t, label+"-op")
			e := metav1.LabelSelectorRequirement{Key: genKey.Draw(t, label+"-ek"), Operator: op}
			if op == metav1.LabelSelectorOpIn || op == metav1.LabelSelectorOpNotIn {
				e.Values = rapid.SliceOfNDistinct(genValue, 1, 2, rapid.ID[string]).Draw(t, label+"-vals")
			}
			s.MatchExpressions = append(s.MatchExpressions, e)
		}
	}
	return s
}

func genPeer(t *rapid.T) networkingv1.NetworkPolicyPeer {
	switch rapid.IntRange(0, 3).Draw(t, "peer-kind") {
	case 0:
		return networkingv1.NetworkPolicyPeer{PodSelector: genSelector(t, "peer-pod")}
	case 1:
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: genSelector(t, "peer-ns")}
	case 2:
		return networkingv1.NetworkPolicyPeer{PodSelector: genSelector(t, "peer-pod"), NamespaceSelector: genSelector(t, "peer-ns")}
	}
	b := &networkingv1.IPBlock{CIDR: genPrefix.Draw(t, "cidr")}
	if rapid.Bool().Draw(t, "except") {
		cidr := netip.MustParsePrefix(b.CIDR)
		for _, e := range []string{"10.244.1.0/24", "10.244.1.11/32", "10.0.0.0/9", "192.168.0.0/24", "10.244.2.0/25"} {
			ep := netip.MustParsePrefix(e)
			if cidr.Contains(ep.Addr()) && ep.Bits() > cidr.Bits() && rapid.Bool().Draw(t, "except-"+e) {
				b.Except = append(b.Except, e)
			}
		}
	}
	return networkingv1.NetworkPolicyPeer{IPBlock: b}
}

func genPorts(t *rapid.T) []networkingv1.NetworkPolicyPort {
	n := rapid.IntRange(0, 2).Draw(t, "nports")
	var out []networkingv1.NetworkPolicyPort
	for i := 0; i < n; i++ {
		var p networkingv1.NetworkPolicyPort
		if rapid.Bool().Draw(t, "with-proto") {
			pr := genProto.Draw(t, "proto")
			p.Protocol = &pr
		}
		switch rapid.IntRange(0, 3).Draw(t, "port-kind") {
		case 0: // protocol only
		case 1:
			p.Port = &intstr.IntOrString{IntVal: int32(genPort.Draw(t, "port"))}
		case 2:
			lo := int32(genPort.Draw(t, "port"))
			end := lo + int32(rapid.IntRange(0, 8000).Draw(t, "range"))
			p.Port, p.EndPort = &intstr.IntOrString{IntVal: lo}, &end
		case 3:
			p.Port = &intstr.IntOrString{Type: intstr.String, StrVal: genPName.Draw(t, "pname")}
		}
		out = append(out, p)
	}
	return out
}

func genPeers(t *rapid.T) []networkingv1.NetworkPolicyPeer {
	switch rapid.IntRange(0, 3).Draw(t, "peers-kind") {
	case 0:
		return nil
	case 1:
		return []networkingv1.NetworkPolicyPeer{}
	}
	n := rapid.IntRange(1, 2).Draw(t, "npeers")
	out := make([]networkingv1.NetworkPolicyPeer, n)
	for i := range out {
		out[i] = genPeer(t)
	}
	return out
}

func genPolicy(t *rapid.T) *networkingv1.NetworkPolicy {
	p := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{
		Namespace: genNS.Draw(t, "pol-ns"), Name: rapid.SampledFrom([]string{"p1", "p2", "p3", "p4"}).Draw(t, "pol-name"),
	}}
	p.Spec.PodSelector = *genSelector(t, "pol-sel")
	switch rapid.IntRange(0, 3).Draw(t, "types") {
	case 1:
		p.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	case 2:
		p.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	case 3:
		p.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	}
	if rapid.Bool().Draw(t, "has-ingress") {
		p.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{}
		for i, n := 0, rapid.IntRange(0, 2).Draw(t, "ningress"); i < n; i++ {
			p.Spec.Ingress = append(p.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: genPeers(t), Ports: genPorts(t)})
		}
	}
	if rapid.Bool().Draw(t, "has-egress") {
		p.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{}
		for i, n := 0, rapid.IntRange(0, 2).Draw(t, "negress"); i < n; i++ {
			p.Spec.Egress = append(p.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: genPeers(t), Ports: genPorts(t)})
		}
	}
	return p
}

func genPod(t *rapid.T, i int) Pod {
	ns := genNS.Draw(t, "pod-ns")
	p := Pod{
		Namespace: ns, Name: rapid.SampledFrom([]string{"a", "b", "c", "d"}).Draw(t, "pod-name"),
		Labels:      genLabels(t, "pod-labels"),
		HostNetwork: rapid.IntRange(0, 9).Draw(t, "hostnet") == 0,
		Node:        "node-1",
	}
	// Addresses: 10.244.N.M, fixed by namespace and name so a replaced pod
	// keeps its address and no two pods share one.
	p.IPs = []netip.Addr{netip.AddrFrom4([4]byte{10, 244, ns[0] - 'x' + 1, p.Name[0] - 'a' + 10})}
	if p.HostNetwork {
		p.IPs = []netip.Addr{netip.MustParseAddr("192.168.0.1")} // the node's
	}
	for j, n := 0, rapid.IntRange(0, 2).Draw(t, "ncports"); j < n; j++ {
		pr := genProto.Draw(t, "cproto")
		if rapid.Bool().Draw(t, "cproto-empty") && pr == corev1.ProtocolTCP {
			pr = ""
		}
		p.Ports = append(p.Ports, corev1.ContainerPort{Name: genPName.Draw(t, "cname"), ContainerPort: int32(genPort.Draw(t, "cport")), Protocol: pr})
	}
	return p
}

// model is the plain state Reference reads.
type model struct {
	policies   []*networkingv1.NetworkPolicy
	namespaces []Namespace
	pods       []Pod
}

func (m *model) setPolicy(p *networkingv1.NetworkPolicy) {
	i := slices.IndexFunc(m.policies, func(q *networkingv1.NetworkPolicy) bool { return q.Namespace == p.Namespace && q.Name == p.Name })
	if i >= 0 {
		m.policies[i] = p
	} else {
		m.policies = append(m.policies, p)
	}
}

func (m *model) setPod(p Pod) {
	i := slices.IndexFunc(m.pods, func(q Pod) bool { return q.Key() == p.Key() })
	if i >= 0 {
		m.pods[i] = p
	} else {
		m.pods = append(m.pods, p)
	}
}

// TestIndexMatchesReference: under random policies, pods, namespaces and
// updates, Index.Verdict equals Reference for every pair of pods and for
// addresses that are no pod's, and Decisions are consistent (the policies
// listed select the pod; a rule is named exactly when an isolated pod is
// allowed, and that rule does allow it).
func TestIndexMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var m model
		for _, ns := range []string{"x", "y", "z"} {
			if rapid.Bool().Draw(t, "ns-given") {
				m.namespaces = append(m.namespaces, Namespace{Name: ns, Labels: genLabels(t, "ns-labels")})
			}
		}
		for i, n := 0, rapid.IntRange(0, 6).Draw(t, "npods"); i < n; i++ {
			m.setPod(genPod(t, i))
		}
		for i, n := 0, rapid.IntRange(0, 4).Draw(t, "npolicies"); i < n; i++ {
			m.setPolicy(genPolicy(t))
		}
		ix, err := NewIndex(m.policies, m.namespaces, m.pods)
		if err != nil {
			t.Fatal(err)
		}
		check := func(step string) {
			var peers []Peer
			for i, p := range ix.Pods() {
				peers = append(peers, PodPeer(p))
				if i%2 == 0 && len(p.IPs) > 0 {
					peers = append(peers, IPPeer(p.IPs[0])) // a pod given by its address
				}
			}
			for _, a := range extAddrs {
				peers = append(peers, IPPeer(a))
			}
			for _, port := range []uint16{53, 80, 8080} {
				for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP} {
					for _, src := range peers {
						for _, dst := range peers {
							v := ix.Verdict(src, dst, port, proto)
							ref := Reference(m.policies, m.namespaces, m.pods, src, dst, port, proto)
							if a := ix.Allowed(src, dst, port, proto); v.Allowed != ref || a != ref {
								t.Fatalf("%s: %s -> %s %s/%d: Index %v (%s), Allowed %v, Reference %v", step, src, dst, proto, port, v.Allowed, v.Reason, a, ref)
							}
							for _, d := range []*Decision{v.Egress, v.Ingress} {
								if d == nil {
									continue
								}
								if d.Isolated != (len(d.Selecting) > 0) || (d.Rule != nil) != (d.Isolated && d.Allowed) {
									t.Fatalf("%s: inconsistent decision %+v", step, *d)
								}
								if d.Rule != nil && !slices.Contains(d.Selecting, d.Rule.Policy) {
									t.Fatalf("%s: rule of a policy not selecting: %+v", step, *d)
								}
							}
						}
					}
				}
			}
			// Selecting equals the brute-force list.
			for _, p := range ix.Pods() {
				for dir := Ingress; dir <= Egress; dir++ {
					var want []PolicyRef
					for _, pol := range ix.Policies() {
						c, _ := compile(pol)
						if c.selects(dir, p) {
							want = append(want, c.ref)
						}
					}
					if got := ix.Selecting(dir, p); !slices.Equal(got, want) {
						t.Fatalf("%s: Selecting(%s, %s) = %v, want %v", step, dir, p.Key(), got, want)
					}
				}
			}
		}
		check("initial")
		for i, n := 0, rapid.IntRange(0, 6).Draw(t, "nupdates"); i < n; i++ {
			step := ""
			switch rapid.IntRange(0, 5).Draw(t, "update") {
			case 0:
				p := genPolicy(t)
				m.setPolicy(p)
				if err := ix.SetPolicy(p); err != nil {
					t.Fatal(err)
				}
				step = "set policy " + p.Namespace + "/" + p.Name
			case 1:
				if len(m.policies) == 0 {
					continue
				}
				j := rapid.IntRange(0, len(m.policies)-1).Draw(t, "del-policy")
				p := m.policies[j]
				m.policies = slices.Delete(m.policies, j, j+1)
				ix.DeletePolicy(p.Namespace, p.Name)
				step = "delete policy " + p.Namespace + "/" + p.Name
			case 2:
				p := genPod(t, i)
				m.setPod(p)
				ix.SetPod(p)
				step = "set pod " + p.Key()
			case 3:
				if len(m.pods) == 0 {
					continue
				}
				j := rapid.IntRange(0, len(m.pods)-1).Draw(t, "del-pod")
				p := m.pods[j]
				m.pods = slices.Delete(m.pods, j, j+1)
				ix.DeletePod(p.Namespace, p.Name)
				step = "delete pod " + p.Key()
			case 4:
				n := Namespace{Name: genNS.Draw(t, "upd-ns"), Labels: genLabels(t, "upd-ns-labels")}
				j := slices.IndexFunc(m.namespaces, func(x Namespace) bool { return x.Name == n.Name })
				if j >= 0 {
					m.namespaces[j] = n
				} else {
					m.namespaces = append(m.namespaces, n)
				}
				ix.SetNamespace(n)
				step = fmt.Sprintf("set namespace %s %v", n.Name, n.Labels)
			case 5:
				name := genNS.Draw(t, "del-ns")
				m.namespaces = slices.DeleteFunc(m.namespaces, func(x Namespace) bool { return x.Name == name })
				ix.DeleteNamespace(name)
				step = "delete namespace " + name
			}
			check(step)
		}
	})
}
