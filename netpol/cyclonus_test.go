package netpol

import (
	"net/netip"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Cases from a public policy-conformance generator: mattfenwick/cyclonus,
// pkg/generator/conflictcases.go (commit 2858a9aa4623a4d5e7cbba576c0aa96e6dc217ed),
// ConflictTestCases: "allow/deny conflict 1" to "16", each a set of
// policies around source x/pod=b and destination y/pod=c, built as its
// Netpol.NetworkPolicySpec builds them (policyTypes from the directions
// given, a direction with no rules a deny). Cyclonus computes expectations
// with its own matcher at run time rather than listing them; the tables
// here are the v1 semantics worked out by hand for each case (pods, plus an
// outside address 203.0.113.9), with AllowDNS off.

// cyclonus peer sets (conflictcases.go).
var (
	cyExplicitAllowAll = []networkingv1.NetworkPolicyPeer(nil) // one rule {}: everything
	cyAllowAllByPod    = peers(nsPeer(&metav1.LabelSelector{}))
	cyAllowAllByIP     = peers(ipPeer("0.0.0.0/0"))
	cyDenyAllByIP      = peers(ipPeer("0.0.0.0/31"))
	cyDenyAllByPod     = peers(nsPeer(sel("this-will-never-happen", "qrs123")))
)

// cyNetpol is cyclonus' Netpol: a nil direction is absent, a non-nil
// direction with no rules denies, rules are peer lists (ports absent).
type cyNetpol struct {
	name, ns string
	pod      string // target matchLabels pod=...
	ingress  *[][]networkingv1.NetworkPolicyPeer
	egress   *[][]networkingv1.NetworkPolicyPeer
}

func rules(rs ...[]networkingv1.NetworkPolicyPeer) *[][]networkingv1.NetworkPolicyPeer { return &rs }

func (c cyNetpol) policy() *networkingv1.NetworkPolicy {
	p := policy(c.ns, c.name, sel("pod", c.pod))
	if c.ingress != nil {
		p.Spec.PolicyTypes = append(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
		for _, r := range *c.ingress {
			p.Spec.Ingress = append(p.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: r})
		}
	}
	if c.egress != nil {
		p.Spec.PolicyTypes = append(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		for _, r := range *c.egress {
			p.Spec.Egress = append(p.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: r})
		}
	}
	return p
}

func TestCyclonusConflictCases(t *testing.T) {
	src := func(name string, in, eg *[][]networkingv1.NetworkPolicyPeer) cyNetpol {
		return cyNetpol{name: name, ns: "x", pod: "b", ingress: in, egress: eg}
	}
	dst := func(name string, in, eg *[][]networkingv1.NetworkPolicyPeer) cyNetpol {
		return cyNetpol{name: name, ns: "y", pod: "c", ingress: in, egress: eg}
	}
	deny := rules()
	outside := netip.MustParseAddr("203.0.113.9")
	type ext struct {
		pod      string // x/b
		toPod    bool   // outside -> pod (ingress) when true, pod -> outside (egress) when false
		want     bool
		describe string
	}
	cases := []struct {
		name     string
		policies []cyNetpol
		want     func(w *world) *reach
		outside  []ext
	}{
		{"allow/deny conflict 1 (AllowAllIngressDenyAllEgress)",
			[]cyNetpol{src("deny-all-egress", nil, deny), dst("allow-all-ingress", rules(cyExplicitAllowAll), nil)},
			func(w *world) *reach { return w.all(true).expectAllEgress("x/b", false) },
			[]ext{{"x/b", false, false, "x/b egress denied"}, {"y/c", true, true, "y/c ingress allows all"}}},
		{"allow/deny conflict 2 (AllowAllEgressDenyAllIngress)",
			[]cyNetpol{src("allow-all-egress", nil, rules(cyExplicitAllowAll)), dst("deny-all-ingress", deny, nil)},
			func(w *world) *reach { return w.all(true).expectAllIngress("y/c", false) },
			[]ext{{"x/b", false, true, ""}, {"y/c", true, false, ""}}},
		{"allow/deny conflict 3 (DenyAllEgressAllowAllEgress)",
			[]cyNetpol{src("deny-all-egress", nil, deny), src("allow-all-egress", nil, rules(cyExplicitAllowAll))},
			func(w *world) *reach { return w.all(true) },
			[]ext{{"x/b", false, true, ""}}},
		{"allow/deny conflict 4 (DenyAllIngressAllowAllIngress)",
			[]cyNetpol{dst("deny-all-ingress", deny, nil), dst("allow-all-ingress", rules(cyExplicitAllowAll), nil)},
			func(w *world) *reach { return w.all(true) },
			[]ext{{"y/c", true, true, ""}}},
		{"allow/deny conflict 5 (DenyAllEgressAllowAllEgressByPod)",
			[]cyNetpol{src("deny-all-egress", nil, deny), src("allow-all-egress-by-pod", nil, rules(cyAllowAllByPod))},
			func(w *world) *reach { return w.all(true) },
			[]ext{{"x/b", false, false, "namespaceSelector {} matches pods only"}}},
		{"allow/deny conflict 6 (DenyAllEgressAllowAllEgressByIP)",
			[]cyNetpol{src("deny-all-egress", nil, deny), src("allow-all-egress-by-ip", nil, rules(cyAllowAllByIP))},
			func(w *world) *reach { return w.all(true) }, // 0.0.0.0/0 matches pod addresses too
			[]ext{{"x/b", false, true, ""}}},
		{"allow/deny conflict 7 (DenyAllEgressByIPAllowAllEgressByPod)",
			[]cyNetpol{src("deny-all-egress-by-ip", nil, rules(cyDenyAllByIP)), src("allow-all-egress-by-pod", nil, rules(cyAllowAllByPod))},
			func(w *world) *reach { return w.all(true) },
			[]ext{{"x/b", false, false, ""}}},
		{"allow/deny conflict 8 (DenyAllEgressByPodAllowAllEgressByIP)",
			[]cyNetpol{src("deny-all-egress-by-pod", nil, rules(cyDenyAllByPod)), src("allow-all-egress-by-ip", nil, rules(cyAllowAllByIP))},
			func(w *world) *reach { return w.all(true) },
			[]ext{{"x/b", false, true, ""}}},
		// Cases 9-12 put the ingress policies on the source x/b, as cyclonus does.
		{"allow/deny conflict 9 (DenyAllIngressAllowAllIngressByPod)",
			[]cyNetpol{src("deny-all-ingress", deny, nil), src("allow-all-ingress-by-pod", rules(cyAllowAllByPod), nil)},
			func(w *world) *reach { return w.all(true) },
			[]ext{{"x/b", true, false, ""}}},
		{"allow/deny conflict 10 (DenyAllIngressAllowAllIngressByIP)",
			[]cyNetpol{src("deny-all-ingress", deny, nil), src("allow-all-ingress-by-ip", rules(cyAllowAllByIP), nil)},
			func(w *world) *reach { return w.all(true) },
			[]ext{{"x/b", true, true, ""}}},
		{"allow/deny conflict 11 (DenyAllIngressByIPAllowAllIngressByPod)",
			[]cyNetpol{src("deny-all-ingress-by-ip", rules(cyDenyAllByIP), nil), src("allow-all-ingress-by-pod", rules(cyAllowAllByPod), nil)},
			func(w *world) *reach { return w.all(true) },
			[]ext{{"x/b", true, false, ""}}},
		{"allow/deny conflict 12 (DenyAllIngressByPodAllowAllIngressByIP)",
			[]cyNetpol{src("deny-all-ingress-by-pod", rules(cyDenyAllByPod), nil), src("allow-all-ingress-by-ip", rules(cyAllowAllByIP), nil)},
			func(w *world) *reach { return w.all(true) },
			[]ext{{"x/b", true, true, ""}}},
		{"allow/deny conflict 13 (DenyAllEgressByIP)",
			[]cyNetpol{src("deny-all-egress-by-ip", nil, rules(cyDenyAllByIP))},
			func(w *world) *reach { return w.all(true).expectAllEgress("x/b", false) },
			[]ext{{"x/b", false, false, ""}}},
		{"allow/deny conflict 14 (DenyAllEgressByPod)",
			[]cyNetpol{src("deny-all-egress-by-ip", nil, rules(cyDenyAllByPod))},
			func(w *world) *reach { return w.all(true).expectAllEgress("x/b", false) },
			[]ext{{"x/b", false, false, ""}}},
		{"allow/deny conflict 15 (DenyAllIngressByIP)",
			[]cyNetpol{src("deny-all-ingress-by-ip", rules(cyDenyAllByIP), nil)},
			func(w *world) *reach { return w.all(true).expectAllIngress("x/b", false) },
			[]ext{{"x/b", true, false, ""}}},
		{"allow/deny conflict 16 (DenyAllIngressByPod)",
			[]cyNetpol{src("deny-all-ingress-by-ip", rules(cyDenyAllByPod), nil)},
			func(w *world) *reach { return w.all(true).expectAllIngress("x/b", false) },
			[]ext{{"x/b", true, false, ""}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			for _, p := range c.policies {
				w.setPolicy(p.policy())
			}
			w.check("", 80, tcp, c.want(w))
			for _, e := range c.outside {
				pod := PodPeer(w.pod(e.pod))
				a, b := pod, IPPeer(outside)
				if e.toPod {
					a, b = b, a
				}
				v := w.ix.Verdict(a, b, 80, tcp)
				ref := Reference(w.policies, w.namespaces, w.pods, a, b, 80, tcp)
				if v.Allowed != e.want || ref != e.want {
					t.Errorf("%s -> %s: Index %v (%s), Reference %v, want %v %s", a, b, v.Allowed, v.Reason, ref, e.want, e.describe)
				}
			}
		})
	}
}
