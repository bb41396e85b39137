package netpol

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// Direction is the direction a policy isolates a pod for.
type Direction uint8

const (
	Ingress Direction = iota
	Egress
)

// String returns "ingress" or "egress".
func (d Direction) String() string {
	switch d {
	case Ingress:
		return "ingress"
	case Egress:
		return "egress"
	}
	return fmt.Sprintf("direction(%d)", uint8(d))
}

// policyType returns the spec.policyTypes value of the direction.
func (d Direction) policyType() networkingv1.PolicyType {
	if d == Egress {
		return networkingv1.PolicyTypeEgress
	}
	return networkingv1.PolicyTypeIngress
}

// NamespaceNameLabel is the label the API server sets on every namespace to
// its name (immutable); namespaceSelectors commonly select on it.
const NamespaceNameLabel = "kubernetes.io/metadata.name"

// Namespace is a namespace with its labels. The label
// kubernetes.io/metadata.name=NAME is implied (the API server sets it on
// every namespace), and a namespace that is not given at all has that label
// only.
type Namespace struct {
	Name   string
	Labels map[string]string
}

// Pod is a pod as policy sees it.
type Pod struct {
	Namespace, Name string
	Labels          map[string]string
	IPs             []netip.Addr
	Node            string
	HostNetwork     bool
	Ports           []corev1.ContainerPort // for named ports: Name, ContainerPort, Protocol
}

// Key returns "NS/NAME".
func (p *Pod) Key() string { return p.Namespace + "/" + p.Name }

// Peer is one end of a connection: a pod, or an address that is no pod's (a
// node, an external host; hostNetwork pods count as their node's address,
// not as pods).
//
// For a pod, IP is the pod address the connection uses; when it is not set
// the pod's first address is meant. A Peer whose Pod has HostNetwork set is
// treated as the bare address IP (or the pod's first address): it is not a
// pod for policy.
type Peer struct {
	Pod *Pod
	IP  netip.Addr
}

// PodPeer returns the peer of a pod (nil for a hostNetwork pod's: use its
// address instead) at its first address.
func PodPeer(p *Pod) Peer {
	var a netip.Addr
	if len(p.IPs) > 0 {
		a = p.IPs[0]
	}
	if p.HostNetwork {
		return Peer{IP: a}
	}
	return Peer{Pod: p, IP: a}
}

// IPPeer returns the peer of an address that is no pod's.
func IPPeer(a netip.Addr) Peer { return Peer{IP: a} }

// pod returns the peer's pod when it is one for policy (not hostNetwork).
func (p Peer) pod() *Pod {
	if p.Pod == nil || p.Pod.HostNetwork {
		return nil
	}
	return p.Pod
}

// addr returns the peer's address: IP, or the pod's first address.
func (p Peer) addr() netip.Addr {
	if p.IP.IsValid() {
		return p.IP
	}
	if p.Pod != nil && len(p.Pod.IPs) > 0 {
		return p.Pod.IPs[0]
	}
	return netip.Addr{}
}

// String renders "pod NS/NAME (ADDR)" or "ADDR".
func (p Peer) String() string {
	if pod := p.pod(); pod != nil {
		if a := p.addr(); a.IsValid() {
			return "pod " + pod.Key() + " (" + a.String() + ")"
		}
		return "pod " + pod.Key()
	}
	if a := p.addr(); a.IsValid() {
		return a.String()
	}
	return "(no address)"
}

// PolicyRef names a NetworkPolicy.
type PolicyRef struct {
	Namespace, Name string
}

func (r PolicyRef) String() string { return r.Namespace + "/" + r.Name }

func refLess(a, b PolicyRef) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

// RuleRef names one rule of a policy.
type RuleRef struct {
	Policy    PolicyRef
	Direction Direction
	Index     int    // index in spec.ingress / spec.egress
	Text      string // the rule, compact one-line text (RuleText)
}

func (r RuleRef) String() string {
	return fmt.Sprintf("%s %s rule %d: %s", r.Policy, r.Direction, r.Index, r.Text)
}

// Decision is one direction's verdict for one pod.
type Decision struct {
	Direction Direction
	Pod       string      // NS/NAME of the pod whose policy decided
	Isolated  bool        // some policy selects the pod for this direction
	Allowed   bool        // not isolated, or some rule of a selecting policy allows
	Selecting []PolicyRef // policies selecting the pod for this direction, sorted
	Rule      *RuleRef    // the rule that allowed it (first by policy ns/name then index); nil if not allowed or not isolated
}

// String describes the decision for people.
func (d Decision) String() string {
	if !d.Isolated {
		return fmt.Sprintf("pod %s is not isolated for %s: allowed", d.Pod, d.Direction)
	}
	if d.Allowed && d.Rule != nil {
		return fmt.Sprintf("pod %s %s allowed by %s", d.Pod, d.Direction, d.Rule)
	}
	names := make([]string, len(d.Selecting))
	for i, r := range d.Selecting {
		names[i] = r.String()
	}
	return fmt.Sprintf("pod %s is isolated for %s (policies: %s); no rule allows it", d.Pod, d.Direction, strings.Join(names, ", "))
}

// Verdict is a connection's verdict: egress at the source pod (if a pod),
// ingress at the destination pod (if a pod). Port/proto are the
// destination's after DNAT.
type Verdict struct {
	Allowed bool
	Egress  *Decision // nil when the source is not a pod
	Ingress *Decision // nil when the destination is not a pod
	Reason  string
}

// sortRefs sorts policy references by namespace then name.
func sortRefs(rs []PolicyRef) {
	sort.Slice(rs, func(i, j int) bool { return refLess(rs[i], rs[j]) })
}

// verdictOf combines the two directions' decisions.
func verdictOf(src, dst Peer, port uint16, proto corev1.Protocol, eg, in *Decision) Verdict {
	v := Verdict{Allowed: true, Egress: eg, Ingress: in}
	conn := fmt.Sprintf("%s -> %s %s/%d", src, dst, proto, port)
	var parts []string
	for _, d := range []*Decision{eg, in} {
		if d == nil {
			continue
		}
		if !d.Allowed {
			v.Allowed = false
		}
		parts = append(parts, d.String())
	}
	switch {
	case len(parts) == 0:
		v.Reason = conn + ": neither end is a pod: no policy applies"
	case v.Allowed:
		v.Reason = conn + " allowed: " + strings.Join(parts, "; ")
	default:
		var denied []string
		for _, d := range []*Decision{eg, in} {
			if d != nil && !d.Allowed {
				denied = append(denied, d.String())
			}
		}
		v.Reason = conn + " denied: " + strings.Join(denied, "; ")
	}
	return v
}
