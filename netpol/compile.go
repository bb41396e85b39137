package netpol

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// compiled is a policy with its selectors parsed and its defaulting applied.
type compiled struct {
	ref    PolicyRef
	pol    *networkingv1.NetworkPolicy
	podSel labels.Selector
	types  [2]bool // by Direction
	rules  [2][]cRule
}

// cRule is one ingress or egress rule.
type cRule struct {
	index    int
	text     string
	allPeers bool // from/to empty or absent
	peers    []cPeer
	allPorts bool // ports empty or absent
	ports    []cPort
}

// cPeer is one from/to entry.
type cPeer struct {
	block  *cBlock
	nsSel  labels.Selector // nil: the policy's own namespace
	podSel labels.Selector // nil: every pod (of the namespaces nsSel picks)
}

type cBlock struct {
	cidr   netip.Prefix
	except []netip.Prefix
}

// cPort is one ports entry.
type cPort struct {
	proto    corev1.Protocol
	anyPort  bool
	num, end int32 // end == num without endPort
	name     string
}

// EffectivePolicyTypes returns spec.policyTypes with the API server's
// defaulting applied: when it is empty, Ingress, and Egress as well when
// spec.egress has rules.
func EffectivePolicyTypes(spec *networkingv1.NetworkPolicySpec) []networkingv1.PolicyType {
	if len(spec.PolicyTypes) > 0 {
		return spec.PolicyTypes
	}
	t := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if len(spec.Egress) > 0 {
		t = append(t, networkingv1.PolicyTypeEgress)
	}
	return t
}

// protoOf defaults an empty protocol to TCP.
func protoOf(p *corev1.Protocol) corev1.Protocol {
	if p == nil || *p == "" {
		return corev1.ProtocolTCP
	}
	return *p
}

func selectorOf(s *metav1.LabelSelector, path string) (labels.Selector, error) {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return sel, nil
}

// compile parses a policy. It rejects what the index cannot evaluate
// (invalid selectors, CIDRs, ports); full API validation is service's.
func compile(p *networkingv1.NetworkPolicy) (*compiled, error) {
	ns := p.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	c := &compiled{ref: PolicyRef{ns, p.Name}, pol: p}
	where := fmt.Sprintf("NetworkPolicy %s/%s", ns, p.Name)
	var err error
	if c.podSel, err = selectorOf(&p.Spec.PodSelector, where+": spec.podSelector"); err != nil {
		return nil, err
	}
	for _, t := range EffectivePolicyTypes(&p.Spec) {
		switch t {
		case networkingv1.PolicyTypeIngress:
			c.types[Ingress] = true
		case networkingv1.PolicyTypeEgress:
			c.types[Egress] = true
		default:
			return nil, fmt.Errorf("%s: spec.policyTypes: unsupported value %q", where, t)
		}
	}
	for i := range p.Spec.Ingress {
		r := &p.Spec.Ingress[i]
		cr, err := compileRule(fmt.Sprintf("%s: spec.ingress[%d]", where, i), "from", r.From, r.Ports)
		if err != nil {
			return nil, err
		}
		cr.index, cr.text = i, RuleText(Ingress, r, nil)
		c.rules[Ingress] = append(c.rules[Ingress], cr)
	}
	for i := range p.Spec.Egress {
		r := &p.Spec.Egress[i]
		cr, err := compileRule(fmt.Sprintf("%s: spec.egress[%d]", where, i), "to", r.To, r.Ports)
		if err != nil {
			return nil, err
		}
		cr.index, cr.text = i, RuleText(Egress, nil, r)
		c.rules[Egress] = append(c.rules[Egress], cr)
	}
	return c, nil
}

func compileRule(where, peersField string, peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort) (cRule, error) {
	var r cRule
	r.allPeers = len(peers) == 0
	for j, pe := range peers {
		path := fmt.Sprintf("%s.%s[%d]", where, peersField, j)
		var cp cPeer
		if pe.IPBlock != nil {
			if pe.PodSelector != nil || pe.NamespaceSelector != nil {
				return r, fmt.Errorf("%s: ipBlock may not be combined with other fields", path)
			}
			pfx, err := netip.ParsePrefix(pe.IPBlock.CIDR)
			if err != nil {
				return r, fmt.Errorf("%s.ipBlock.cidr: %w", path, err)
			}
			b := &cBlock{cidr: pfx.Masked()}
			for k, e := range pe.IPBlock.Except {
				ep, err := netip.ParsePrefix(e)
				if err != nil {
					return r, fmt.Errorf("%s.ipBlock.except[%d]: %w", path, k, err)
				}
				b.except = append(b.except, ep.Masked())
			}
			cp.block = b
		} else {
			if pe.PodSelector == nil && pe.NamespaceSelector == nil {
				return r, fmt.Errorf("%s: must specify a peer", path)
			}
			var err error
			if pe.PodSelector != nil {
				if cp.podSel, err = selectorOf(pe.PodSelector, path+".podSelector"); err != nil {
					return r, err
				}
			}
			if pe.NamespaceSelector != nil {
				if cp.nsSel, err = selectorOf(pe.NamespaceSelector, path+".namespaceSelector"); err != nil {
					return r, err
				}
			}
		}
		r.peers = append(r.peers, cp)
	}
	r.allPorts = len(ports) == 0
	for j, po := range ports {
		path := fmt.Sprintf("%s.ports[%d]", where, j)
		cp := cPort{proto: protoOf(po.Protocol)}
		switch {
		case po.Port == nil:
			cp.anyPort = true
		case po.Port.Type == intstr.String:
			cp.name = po.Port.StrVal
		default:
			cp.num, cp.end = po.Port.IntVal, po.Port.IntVal
			if po.EndPort != nil {
				cp.end = *po.EndPort
				if cp.end < cp.num {
					return r, fmt.Errorf("%s.endPort: must be greater than or equal to port", path)
				}
			}
		}
		r.ports = append(r.ports, cp)
	}
	return r, nil
}

// nsLabels returns a namespace's labels with the name label implied.
func nsLabels(name string, l map[string]string) labels.Set {
	s := make(labels.Set, len(l)+1)
	for k, v := range l {
		s[k] = v
	}
	s[NamespaceNameLabel] = name
	return s
}

// matchPeer reports whether a rule's from/to entry matches the peer, with
// nsLabelsOf giving a namespace's labels.
func (c *compiled) matchPeer(cp *cPeer, peer Peer, nsLabelsOf func(string) labels.Set) bool {
	if cp.block != nil {
		return cp.block.contains(peer.addr())
	}
	pod := peer.pod()
	if pod == nil {
		return false
	}
	if cp.nsSel == nil {
		if pod.Namespace != c.ref.Namespace {
			return false
		}
	} else if !cp.nsSel.Matches(nsLabelsOf(pod.Namespace)) {
		return false
	}
	return cp.podSel == nil || cp.podSel.Matches(labels.Set(pod.Labels))
}

func (b *cBlock) contains(a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	a = a.Unmap()
	if !b.cidr.Contains(a) {
		return false
	}
	for _, e := range b.except {
		if e.Contains(a) {
			return false
		}
	}
	return true
}

// matchPort reports whether a ports entry matches the destination port and
// protocol; target is the destination pod that named ports resolve against
// (nil when the destination is not a pod: a named port matches nothing).
func (cp *cPort) matchPort(port uint16, proto corev1.Protocol, target *Pod) bool {
	if cp.proto != proto {
		return false
	}
	switch {
	case cp.anyPort:
		return true
	case cp.name != "":
		return target != nil && namedPortIs(target, cp.name, port, proto)
	}
	return int32(port) >= cp.num && int32(port) <= cp.end
}

// namedPortIs reports whether the pod has a container port named name with
// that number and protocol.
func namedPortIs(p *Pod, name string, port uint16, proto corev1.Protocol) bool {
	return slices.ContainsFunc(p.Ports, func(c corev1.ContainerPort) bool {
		pr := c.Protocol
		if pr == "" {
			pr = corev1.ProtocolTCP
		}
		return c.Name == name && pr == proto && c.ContainerPort == int32(port)
	})
}

// allows returns the first rule of the direction that allows the connection
// for pod (the selected pod) with peer (the other end), or -1.
func (c *compiled) allows(dir Direction, pod *Pod, peer Peer, port uint16, proto corev1.Protocol, nsLabelsOf func(string) labels.Set) int {
	target := pod // ingress: named ports are the selected pod's
	if dir == Egress {
		target = peer.pod()
	}
	for i := range c.rules[dir] {
		r := &c.rules[dir][i]
		if !r.allPeers && !slices.ContainsFunc(r.peers, func(cp cPeer) bool { return c.matchPeer(&cp, peer, nsLabelsOf) }) {
			continue
		}
		if !r.allPorts && !slices.ContainsFunc(r.ports, func(cp cPort) bool { return cp.matchPort(port, proto, target) }) {
			continue
		}
		return i
	}
	return -1
}

// selects reports whether the policy selects the pod for the direction.
func (c *compiled) selects(dir Direction, pod *Pod) bool {
	return c.types[dir] && !pod.HostNetwork && pod.Namespace == c.ref.Namespace && c.podSel.Matches(labels.Set(pod.Labels))
}
