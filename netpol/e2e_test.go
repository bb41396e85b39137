package netpol

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Truth tables from the upstream Kubernetes network-policy e2e suite,
// kubernetes/kubernetes test/e2e/network/netpol/network_policy.go (read at
// commit 008b3652959ca58af8be3fb5b6ecfe9ae7638282): each case is one of its
// f.It cases, named as there, with its policies and its expected
// reachability written with the same ExpectPeer / ExpectAllIngress /
// ExpectAllEgress / Expect steps. The model is upstream's: namespaces
// x, y, z × pods a, b, c (upstream cases create a subset of these pods; the
// other pods' rows follow from the same expectations). Loopback pairs are
// ignored as upstream does. Every pair is also checked against Reference.

const (
	tcp  = corev1.ProtocolTCP
	udp  = corev1.ProtocolUDP
	sctp = corev1.ProtocolSCTP
)

type e2eStep struct {
	what   string
	before func(w *world) // updates applied before this check
	port   uint16
	proto  corev1.Protocol
	want   func(w *world) *reach
}

func TestUpstreamE2E(t *testing.T) {
	notIn := metav1.LabelSelectorOpNotIn
	inOp := metav1.LabelSelectorOpIn
	cases := []struct {
		name  string
		setup func(w *world)
		steps []e2eStep
	}{
		{
			name:  "should support a 'default-deny-ingress' policy",
			setup: func(w *world) { w.setPolicy(policy("x", "deny-ingress", nil, ingressRules())) },
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach { return w.all(true).expectPeer("", "x/", false) }}},
		},
		{
			name:  "should support a 'default-deny-all' policy",
			setup: func(w *world) { w.setPolicy(policy("x", "deny-all", nil, ingressRules(), egressRules())) },
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach {
				return w.all(true).expectPeer("", "x/", false).expectPeer("x/", "", false)
			}}},
		},
		{
			name: "should enforce policy to allow traffic from pods within server namespace based on PodSelector",
			setup: func(w *world) {
				w.setPolicy(policy("x", "x-a-allows-x-b", sel("pod", "a"), ingressRules(in(peers(podPeer(sel("pod", "b")))))))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach {
				return w.all(true).expectAllIngress("x/a", false).expect("x/b", "x/a", true)
			}}},
		},
		{
			name: "should enforce policy to allow ingress traffic for a target",
			setup: func(w *world) {
				w.setPolicy(policy("x", "deny-all", nil, ingressRules()))
				w.setPolicy(policy("x", "allow-all-to-a", sel("pod", "a"), ingressRules(in(peers(nsPodPeer(sel(), sel()))))))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach {
				return w.all(true).expectAllIngress("x/a", true).expectAllIngress("x/b", false).expectAllIngress("x/c", false)
			}}},
		},
		{
			name: "should enforce policy to allow ingress traffic from pods in all namespaces",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-from-another-ns", sel("pod", "a"), ingressRules(in(peers(nsPeer(sel()))))))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach { return w.all(true) }}},
		},
		{
			name: "should enforce policy to allow traffic only from a different namespace, based on NamespaceSelector",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-client-a-via-ns-selector", sel("pod", "a"), ingressRules(in(peers(nsPeer(sel(NamespaceNameLabel, "y")))))))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach {
				return w.all(true).expectPeer("x/", "x/a", false).expectPeer("z/", "x/a", false)
			}}},
		},
		{
			name: "should enforce policy based on PodSelector with MatchExpressions",
			setup: func(w *world) {
				w.setPolicy(policy("x", "x-a-allows-x-b", sel("pod", "a"), ingressRules(in(peers(podPeer(expr("pod", inOp, "b")))))))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach {
				return w.all(true).expectAllIngress("x/a", false).expect("x/b", "x/a", true)
			}}},
		},
		{
			name: "should enforce policy based on NamespaceSelector with MatchExpressions",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-ns-y-match-selector", sel("pod", "a"), ingressRules(in(peers(nsPeer(expr(NamespaceNameLabel, inOp, "y")))))))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach {
				return w.all(true).expectPeer("x/", "x/a", false).expectPeer("z/", "x/a", false)
			}}},
		},
		{
			name: "should enforce policy based on PodSelector or NamespaceSelector",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-ns-y-match-selector", sel("pod", "a"), ingressRules(in(peers(
					nsPeer(expr(NamespaceNameLabel, notIn, "x")), podPeer(sel("pod", "b")))))))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach {
				return w.all(true).expect("x/a", "x/a", false).expect("x/c", "x/a", false)
			}}},
		},
		{
			name: "should enforce policy based on PodSelector and NamespaceSelector",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-ns-y-podselector-and-nsselector", sel("pod", "a"), ingressRules(in(peers(
					nsPodPeer(expr(NamespaceNameLabel, notIn, "x"), sel("pod", "b")))))))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach {
				return w.all(true).expectAllIngress("x/a", false).expect("y/b", "x/a", true).expect("z/b", "x/a", true)
			}}},
		},
		{
			name: "should enforce policy based on Multiple PodSelectors and NamespaceSelectors",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-ns-y-z-pod-b-c", sel("pod", "a"), ingressRules(in(peers(
					nsPodPeer(expr(NamespaceNameLabel, notIn, "x"), expr("pod", inOp, "b", "c")))))))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach {
				// Upstream creates only x/a, x/b, y/a, y/b, y/c; with z's pods
				// present, z/a is as y/a.
				return w.all(true).expectPeer("x/", "x/a", false).expect("y/a", "x/a", false).expect("z/a", "x/a", false)
			}}},
		},
		{
			name: "should enforce policy based on any PodSelectors",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-ns-x-pod-b-c", sel("pod", "a"), ingressRules(in(peers(podPeer(sel("pod", "b")), podPeer(sel("pod", "c")))))))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach {
				return w.all(true).expectAllIngress("x/a", false).expect("x/b", "x/a", true).expect("x/c", "x/a", true)
			}}},
		},
		{
			name: "should enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and NamespaceSelector",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-ns-y-pod-a-via-namespace-pod-selector", sel("pod", "a"), ingressRules(in(peers(
					nsPodPeer(sel(NamespaceNameLabel, "y"), sel("pod", "a")))))))
			},
			steps: []e2eStep{
				{port: 80, proto: tcp, want: func(w *world) *reach {
					return w.all(true).expectAllIngress("x/a", false).expect("y/a", "x/a", true)
				}},
				// The UDP and SCTP variants of the case ("using UDP", "using SCTP").
				{port: 80, proto: udp, want: func(w *world) *reach {
					return w.all(true).expectAllIngress("x/a", false).expect("y/a", "x/a", true)
				}},
				{port: 80, proto: sctp, want: func(w *world) *reach {
					return w.all(true).expectAllIngress("x/a", false).expect("y/a", "x/a", true)
				}},
			},
		},
		{
			name: "should enforce policy based on Ports",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-client-a-via-ns-selector", sel("pod", "a"), ingressRules(in(peers(
					nsPeer(sel(NamespaceNameLabel, "y"))), port(tcp, 81)))))
			},
			steps: []e2eStep{{port: 81, proto: tcp, want: func(w *world) *reach {
				return w.all(true).expectPeer("x/", "x/a", false).expectPeer("y/", "x/a", true).expectPeer("z/", "x/a", false)
			}}},
		},
		{
			name: "should enforce multiple, stacked policies with overlapping podSelectors",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-client-a-via-ns-selector", sel("pod", "a"), ingressRules(in(peers(
					nsPeer(sel(NamespaceNameLabel, "y"))), port(tcp, 81)))))
			},
			steps: []e2eStep{
				{what: "port 81", port: 81, proto: tcp, want: func(w *world) *reach {
					return w.all(true).expectPeer("x/", "x/a", false).expectPeer("y/", "x/a", true).expectPeer("z/", "x/a", false)
				}},
				{what: "port 80", port: 80, proto: tcp, want: func(w *world) *reach { return w.all(true).expectAllIngress("x/a", false) }},
				{what: "port 80 after adding a policy for it", port: 80, proto: tcp,
					before: func(w *world) {
						w.setPolicy(policy("x", "allow-client-a-via-ns-selector-80", sel("pod", "a"), ingressRules(in(peers(
							nsPeer(sel(NamespaceNameLabel, "y"))), port(tcp, 80)))))
					},
					want: func(w *world) *reach {
						return w.all(true).expectPeer("x/", "x/a", false).expectPeer("y/", "x/a", true).expectPeer("z/", "x/a", false)
					}},
			},
		},
		{
			name:  "should support allow-all policy",
			setup: func(w *world) { w.setPolicy(policy("x", "allow-all", sel(), ingressRules(in(nil)))) },
			steps: []e2eStep{
				{port: 80, proto: tcp, want: func(w *world) *reach { return w.all(true) }},
				{port: 81, proto: tcp, want: func(w *world) *reach { return w.all(true) }},
			},
		},
		{
			name: "should allow ingress access on one named port",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-all", sel(), ingressRules(in(nil, namedPort("", "serve-81-tcp")))))
			},
			steps: []e2eStep{
				{port: 81, proto: tcp, want: func(w *world) *reach { return w.all(true) }},
				{port: 80, proto: tcp, want: func(w *world) *reach { return w.all(true).expectPeer("", "x/", false) }},
			},
		},
		{
			name: "should allow ingress access from namespace on one named port",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-client-a-via-ns-selector-80", sel("pod", "a"), ingressRules(in(peers(
					nsPeer(sel(NamespaceNameLabel, "y"))), namedPort(tcp, "serve-80-tcp")))))
			},
			steps: []e2eStep{
				{port: 80, proto: tcp, want: func(w *world) *reach {
					return w.all(true).expectPeer("x/", "x/a", false).expectPeer("z/", "x/a", false)
				}},
				{port: 81, proto: tcp, want: func(w *world) *reach { return w.all(true).expectAllIngress("x/a", false) }},
			},
		},
		{
			name: "should allow egress access on one named port",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-egress", sel(), egressRules(out(nil, namedPort("", "serve-80-tcp")))))
			},
			steps: []e2eStep{
				{port: 80, proto: tcp, want: func(w *world) *reach { return w.all(true) }},
				{port: 81, proto: tcp, want: func(w *world) *reach { return w.all(true).expectPeer("x/", "", false) }},
			},
		},
		{
			name:  "should enforce updated policy",
			setup: func(w *world) { w.setPolicy(policy("x", "allow-all-mutate-to-deny-all", sel(), ingressRules(in(nil)))) },
			steps: []e2eStep{
				{port: 81, proto: tcp, want: func(w *world) *reach { return w.all(true) }},
				{what: "after update to deny all", port: 81, proto: tcp,
					before: func(w *world) { w.setPolicy(policy("x", "allow-all-mutate-to-deny-all", sel(), ingressRules())) },
					want:   func(w *world) *reach { return w.all(true).expectPeer("", "x/", false) }},
			},
		},
		{
			name: "should allow ingress access from updated namespace",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-client-a-via-ns-selector", sel("pod", "a"), ingressRules(in(peers(nsPeer(sel("ns2", "updated")))))))
			},
			steps: []e2eStep{
				{port: 80, proto: tcp, want: func(w *world) *reach { return w.all(true).expectAllIngress("x/a", false) }},
				{what: "after labelling y ns2=updated", port: 80, proto: tcp,
					before: func(w *world) { w.setNamespaceLabels("y", map[string]string{"ns": "y", "ns2": "updated"}) },
					want: func(w *world) *reach {
						return w.all(true).expectAllIngress("x/a", false).expectPeer("y/", "", true)
					}},
			},
		},
		{
			name: "should allow ingress access from updated pod",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-client-a-via-pod-selector", sel("pod", "a"), ingressRules(in(peers(podPeer(sel("pod", "b", "pod2", "updated")))))))
			},
			steps: []e2eStep{
				{port: 80, proto: tcp, want: func(w *world) *reach { return w.all(true).expectAllIngress("x/a", false) }},
				{what: "after labelling x/b pod2=updated", port: 80, proto: tcp,
					before: func(w *world) { w.setPodLabels("x", "b", map[string]string{"pod": "b", "pod2": "updated"}) },
					want: func(w *world) *reach {
						return w.all(true).expectAllIngress("x/a", false).expect("x/b", "x/a", true)
					}},
			},
		},
		{
			name: "should deny ingress from pods on other namespaces",
			setup: func(w *world) {
				w.setPolicy(policy("x", "deny-empty-policy", sel(), ingressRules(in(peers(podPeer(sel()))))))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach {
				return w.all(true).expectPeer("y/", "x/", false).expectPeer("z/", "x/", false)
			}}},
		},
		{
			name: "should deny ingress access to updated pod",
			setup: func(w *world) {
				w.setPolicy(policy("x", "deny-ingress-via-label-selector", sel("target", "isolated"), ingressRules()))
			},
			steps: []e2eStep{
				{port: 80, proto: tcp, want: func(w *world) *reach { return w.all(true) }},
				{what: "after labelling x/a target=isolated", port: 80, proto: tcp,
					before: func(w *world) { w.setPodLabels("x", "a", map[string]string{"pod": "a", "target": "isolated"}) },
					want:   func(w *world) *reach { return w.all(true).expectAllIngress("x/a", false) }},
			},
		},
		{
			name:  "should deny egress from pods based on PodSelector",
			setup: func(w *world) { w.setPolicy(policy("x", "deny-egress-pod-a", sel("pod", "a"), egressRules())) },
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach { return w.all(true).expectAllEgress("x/a", false) }}},
		},
		{
			name:  "should deny egress from all pods in a namespace",
			setup: func(w *world) { w.setPolicy(policy("x", "deny-egress-ns-x", sel(), egressRules())) },
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach { return w.all(true).expectPeer("x/", "", false) }}},
		},
		{
			name: "should work with Ingress, Egress specified together",
			setup: func(w *world) {
				p := policy("x", "allow-client-a-via-pod-selector", sel("pod", "a"), ingressRules(in(peers(podPeer(sel("pod", "b"))))))
				p.Spec.Egress = append(p.Spec.Egress, out(nil, port("", 80)))
				p.Spec.PolicyTypes = []networkingPolicyType{egressType, ingressType}
				w.setPolicy(p)
			},
			steps: []e2eStep{
				{port: 80, proto: tcp, want: func(w *world) *reach {
					return w.all(true).expectAllIngress("x/a", false).expect("x/b", "x/a", true)
				}},
				{port: 81, proto: tcp, want: func(w *world) *reach {
					return w.all(true).expectAllIngress("x/a", false).expectAllEgress("x/a", false).expect("x/b", "x/a", true)
				}},
			},
		},
		{
			name: "should support denying of egress traffic on the client side (even if the server explicitly allows this traffic)",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-to-ns-y-pod-a", sel("pod", "a"), egressRules(out(peers(nsPodPeer(sel(NamespaceNameLabel, "y"), sel("pod", "a")))))))
				ing := ingressRules(in(peers(nsPodPeer(sel(NamespaceNameLabel, "x"), sel("pod", "a")))))
				w.setPolicy(policy("y", "allow-from-xa-on-ya-match-selector", sel("pod", "a"), ing))
				w.setPolicy(policy("y", "allow-from-xa-on-yb-match-selector", sel("pod", "b"), ing))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach {
				return w.all(true).expectPeer("x/a", "", false).expectPeer("", "y/a", false).
					expectPeer("x/a", "y/a", true).expectPeer("", "y/b", false)
			}}},
		},
		{
			name: "should enforce egress policy allowing traffic to a server in a different namespace based on PodSelector and NamespaceSelector",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-to-ns-y-pod-a", sel("pod", "a"), egressRules(out(peers(nsPodPeer(sel(NamespaceNameLabel, "y"), sel("pod", "a")))))))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach {
				return w.all(true).expectAllEgress("x/a", false).expect("x/a", "y/a", true)
			}}},
		},
		{
			name: "should enforce ingress policy allowing any port traffic to a server on a specific protocol",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-ingress-by-proto", sel("pod", "a"), ingressRules(in(nil, protoOnly(tcp)))))
			},
			steps: []e2eStep{
				{port: 80, proto: tcp, want: func(w *world) *reach { return w.all(true) }},
				{port: 80, proto: udp, want: func(w *world) *reach { return w.all(true).expectPeer("", "x/a", false) }},
			},
		},
		{
			name: "should enforce multiple ingress policies with ingress allow-all policy taking precedence",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-ingress-port-80", sel(), ingressRules(in(nil, port("", 80)))))
			},
			steps: []e2eStep{
				{port: 81, proto: tcp, want: func(w *world) *reach { return w.all(true).expectPeer("", "x/", false) }},
				{what: "after allow-all", port: 81, proto: tcp,
					before: func(w *world) { w.setPolicy(policy("x", "allow-ingress", sel(), ingressRules(in(nil)))) },
					want:   func(w *world) *reach { return w.all(true) }},
			},
		},
		{
			name: "should enforce multiple egress policies with egress allow-all policy taking precedence",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-egress-port-80", sel(), egressRules(out(nil, port("", 80)))))
			},
			steps: []e2eStep{
				{port: 81, proto: tcp, want: func(w *world) *reach { return w.all(true).expectPeer("x/", "", false) }},
				{what: "after allow-all", port: 81, proto: tcp,
					before: func(w *world) { w.setPolicy(policy("x", "allow-egress", sel(), egressRules(out(nil)))) },
					want:   func(w *world) *reach { return w.all(true) }},
			},
		},
		{
			name:  "should stop enforcing policies after they are deleted",
			setup: func(w *world) { w.setPolicy(policy("x", "deny-all", nil, ingressRules(), egressRules())) },
			steps: []e2eStep{
				{port: 80, proto: tcp, want: func(w *world) *reach {
					return w.all(true).expectPeer("x/", "", false).expectPeer("", "x/", false)
				}},
				{what: "after deleting", port: 80, proto: tcp,
					before: func(w *world) { w.deletePolicy("x", "deny-all") },
					want:   func(w *world) *reach { return w.all(true) }},
			},
		},
		{
			name: "should allow egress access to server in CIDR block",
			setup: func(w *world) {
				// y/b's address as a /32: ipBlock matches pod addresses (see doc.go).
				w.setPolicy(policy("x", "allow-client-a-via-cidr-egress-rule", sel("pod", "a"), egressRules(out(peers(
					ipPeer(w.pod("y/b").IPs[0].String()+"/32"))))))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach {
				return w.all(true).expectAllEgress("x/a", false).expect("x/a", "y/b", true)
			}}},
		},
		{
			name: "should enforce except clause while egress access to server in CIDR block",
			setup: func(w *world) {
				// upstream's makeLargeCIDRForIP: the /4 around the address.
				w.setPolicy(policy("x", "allow-client-a-via-cidr-egress-rule", sel("pod", "a"), egressRules(out(peers(
					ipPeer("0.0.0.0/4", w.pod("x/b").IPs[0].String()+"/32"))))))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach {
				return w.all(true).expect("x/a", "x/b", false)
			}}},
		},
		{
			name: "should ensure an IP overlapping both IPBlock.CIDR and IPBlock.Except is allowed",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-client-a-via-cidr-egress-rule", sel("pod", "a"), egressRules(out(peers(
					ipPeer("0.0.0.0/4", w.pod("x/b").IPs[0].String()+"/32"))))))
			},
			steps: []e2eStep{
				{port: 80, proto: tcp, want: func(w *world) *reach { return w.all(true).expect("x/a", "x/b", false) }},
				{what: "after replacing it with one allowing x/b's /32", port: 80, proto: tcp,
					before: func(w *world) {
						w.setPolicy(policy("x", "allow-client-a-via-cidr-egress-rule", sel("pod", "a"), egressRules(out(peers(
							ipPeer(w.pod("x/b").IPs[0].String()+"/32"))))))
					},
					want: func(w *world) *reach { return w.all(true).expectAllEgress("x/a", false).expect("x/a", "x/b", true) }},
			},
		},
		{
			name: "should enforce policies to check ingress and egress policies can be controlled independently based on PodSelector",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-egress-for-target", sel("pod", "a"), egressRules(out(nil))))
			},
			steps: []e2eStep{
				{port: 80, proto: tcp, want: func(w *world) *reach { return w.all(true) }},
				{what: "after denying ingress", port: 80, proto: tcp,
					before: func(w *world) {
						w.setPolicy(policy("x", "deny-ingress-via-label-selector", sel("pod", "a"), ingressRules()))
					},
					want: func(w *world) *reach { return w.all(true).expectAllIngress("x/a", false) }},
			},
		},
		{
			name: "should not mistakenly treat 'protocol: SCTP' as 'protocol: TCP', even if the plugin doesn't support SCTP",
			setup: func(w *world) {
				w.setPolicy(policy("x", "deny-ingress", nil, ingressRules()))
				w.setPolicy(policy("x", "allow-only-sctp-ingress-on-port-81", sel("pod", "a"), ingressRules(in(nil, port(sctp, 81)))))
			},
			steps: []e2eStep{
				{port: 81, proto: tcp, want: func(w *world) *reach { return w.all(true).expectPeer("", "x/", false) }},
				{what: "(SCTP itself is allowed to x/a)", port: 81, proto: sctp, want: func(w *world) *reach {
					return w.all(true).expectPeer("", "x/", false).expectAllIngress("x/a", true)
				}},
			},
		},
		{
			name: "should properly isolate pods that are selected by a policy allowing SCTP, even if the plugin doesn't support SCTP",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-only-sctp-ingress-on-port-80", sel("pod", "a"), ingressRules(in(nil, port(sctp, 80)))))
			},
			steps: []e2eStep{{port: 81, proto: tcp, want: func(w *world) *reach { return w.all(true).expectAllIngress("x/a", false) }}},
		},
		{
			name: "should not allow access by TCP when a policy specifies only UDP",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-only-udp-ingress-on-port-81", sel("pod", "a"), ingressRules(in(nil, port(udp, 81)))))
			},
			steps: []e2eStep{{port: 81, proto: tcp, want: func(w *world) *reach { return w.all(true).expectAllIngress("x/a", false) }}},
		},
		{
			name: "should enforce policy to allow traffic based on NamespaceSelector with MatchLabels using default ns label",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-client-a-via-ns-selector-for-immutable-ns-label", sel("pod", "a"), ingressRules(in(peers(nsPeer(sel(corev1.LabelMetadataName, "y")))))))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach {
				return w.all(true).expectPeer("x/", "x/a", false).expectPeer("z/", "x/a", false)
			}}},
		},
		{
			name: "should enforce policy based on NamespaceSelector with MatchExpressions using default ns label",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-ns-y-match-selector-for-immutable-ns-label", sel("pod", "a"), egressRules(out(peers(nsPeer(expr(corev1.LabelMetadataName, notIn, "y")))))))
			},
			steps: []e2eStep{{port: 80, proto: tcp, want: func(w *world) *reach { return w.all(true).expectPeer("x/a", "y/", false) }}},
		},
		// "NetworkPolicy between server and client using UDP" / "using SCTP".
		{
			name:  "using UDP and SCTP: should support a 'default-deny-ingress' policy",
			setup: func(w *world) { w.setPolicy(policy("x", "deny-all", nil, ingressRules())) },
			steps: []e2eStep{
				{port: 80, proto: udp, want: func(w *world) *reach { return w.all(true).expectPeer("", "x/", false) }},
				{port: 80, proto: sctp, want: func(w *world) *reach { return w.all(true).expectPeer("", "x/", false) }},
			},
		},
		{
			name: "using UDP: should enforce policy based on Ports",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-ingress-on-port-81-ns-x", sel("pod", "a"), ingressRules(in(peers(nsPeer(sel(NamespaceNameLabel, "y"))), port(udp, 81)))))
			},
			steps: []e2eStep{
				{port: 81, proto: udp, want: func(w *world) *reach {
					return w.all(true).expectPeer("x/", "x/a", false).expectPeer("z/", "x/a", false)
				}},
				{what: "(TCP is not allowed by a UDP rule)", port: 81, proto: tcp, want: func(w *world) *reach { return w.all(true).expectAllIngress("x/a", false) }},
			},
		},
		{
			name: "using SCTP: should enforce policy based on Ports",
			setup: func(w *world) {
				w.setPolicy(policy("x", "allow-ingress-on-port-81-ns-x", sel("pod", "a"), ingressRules(in(peers(nsPeer(sel(NamespaceNameLabel, "y"))), port(sctp, 81)))))
			},
			steps: []e2eStep{{port: 81, proto: sctp, want: func(w *world) *reach {
				return w.all(true).expectPeer("x/", "x/a", false).expectPeer("z/", "x/a", false)
			}}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			c.setup(w)
			for _, s := range c.steps {
				if s.before != nil {
					s.before(w)
				}
				w.check(s.what, s.port, s.proto, s.want(w))
			}
		})
	}
}

type networkingPolicyType = networkingv1.PolicyType

const (
	ingressType = networkingv1.PolicyTypeIngress
	egressType  = networkingv1.PolicyTypeEgress
)
