package netpol

import (
	"fmt"
	"sort"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// RuleText renders a rule for traces (used by RuleRef.Text) as compact
// one-line text, e.g.
//
//	from: [podSelector: {app: client}] ports: [TCP/80]
//	to: [namespaceSelector: {team: a} podSelector: {}, ipBlock: 10.0.0.0/8 except [10.1.0.0/16]] ports: [UDP/53, TCP/8000-8080, TCP/http]
//	from: any ports: any
//
// Pass ing for an ingress rule or eg for an egress one (the other nil).
func RuleText(dir Direction, ing *networkingv1.NetworkPolicyIngressRule, eg *networkingv1.NetworkPolicyEgressRule) string {
	var b strings.Builder
	var peers []networkingv1.NetworkPolicyPeer
	var ports []networkingv1.NetworkPolicyPort
	word := "from"
	if dir == Egress {
		word = "to"
	}
	if ing != nil {
		peers, ports = ing.From, ing.Ports
	} else if eg != nil {
		peers, ports = eg.To, eg.Ports
	}
	b.WriteString(word + ": ")
	if len(peers) == 0 {
		b.WriteString("any")
	} else {
		b.WriteString("[")
		for i, p := range peers {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(peerText(p))
		}
		b.WriteString("]")
	}
	b.WriteString(" ports: ")
	if len(ports) == 0 {
		b.WriteString("any")
	} else {
		b.WriteString("[")
		for i, p := range ports {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(portText(p))
		}
		b.WriteString("]")
	}
	return b.String()
}

func peerText(p networkingv1.NetworkPolicyPeer) string {
	var parts []string
	if p.IPBlock != nil {
		s := "ipBlock: " + p.IPBlock.CIDR
		if len(p.IPBlock.Except) > 0 {
			s += " except [" + strings.Join(p.IPBlock.Except, ", ") + "]"
		}
		parts = append(parts, s)
	}
	if p.NamespaceSelector != nil {
		parts = append(parts, "namespaceSelector: "+SelectorText(p.NamespaceSelector))
	}
	if p.PodSelector != nil {
		parts = append(parts, "podSelector: "+SelectorText(p.PodSelector))
	}
	if len(parts) == 0 {
		return "{}"
	}
	return strings.Join(parts, " ")
}

func portText(p networkingv1.NetworkPolicyPort) string {
	proto := string(protoOf(p.Protocol))
	switch {
	case p.Port == nil:
		return proto
	case p.Port.Type == intstr.String:
		return proto + "/" + p.Port.StrVal
	case p.EndPort != nil:
		return fmt.Sprintf("%s/%d-%d", proto, p.Port.IntVal, *p.EndPort)
	}
	return fmt.Sprintf("%s/%d", proto, p.Port.IntVal)
}

// SelectorText renders a label selector as `{app: web, tier in (a,b), !x}`;
// the empty selector is `{}`.
func SelectorText(s *metav1.LabelSelector) string {
	if s == nil {
		return "{}"
	}
	var parts []string
	keys := make([]string, 0, len(s.MatchLabels))
	for k := range s.MatchLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, k+": "+s.MatchLabels[k])
	}
	for _, e := range s.MatchExpressions {
		switch e.Operator {
		case metav1.LabelSelectorOpIn:
			parts = append(parts, e.Key+" in ("+strings.Join(e.Values, ",")+")")
		case metav1.LabelSelectorOpNotIn:
			parts = append(parts, e.Key+" notin ("+strings.Join(e.Values, ",")+")")
		case metav1.LabelSelectorOpExists:
			parts = append(parts, e.Key)
		case metav1.LabelSelectorOpDoesNotExist:
			parts = append(parts, "!"+e.Key)
		default:
			parts = append(parts, fmt.Sprintf("%s %s (%s)", e.Key, e.Operator, strings.Join(e.Values, ",")))
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
