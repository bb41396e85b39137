package netpol

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Reference is the direct evaluation of the semantics with no index: it
// loops over every policy and parses every selector for each question. It
// is what property tests hold Index (and the datapath) to. Same inputs as
// Index.Verdict; a bare address that is a (non-hostNetwork) pod's counts as
// that pod. Policies with unparsable selectors or CIDRs select nothing.
func Reference(policies []*networkingv1.NetworkPolicy, namespaces []Namespace, pods []Pod, src, dst Peer, port uint16, proto corev1.Protocol) bool {
	resolve := func(p Peer) Peer {
		if p.Pod != nil || !p.IP.IsValid() {
			return p
		}
		for i := range pods {
			if pods[i].HostNetwork {
				continue
			}
			for _, a := range pods[i].IPs {
				if a.Unmap() == p.IP.Unmap() {
					return Peer{Pod: &pods[i], IP: p.IP}
				}
			}
		}
		return p
	}
	src, dst = resolve(src), resolve(dst)
	nsLabels := func(name string) labels.Set {
		for _, n := range namespaces {
			if n.Name == name {
				l := labels.Set{}
				for k, v := range n.Labels {
					l[k] = v
				}
				l[NamespaceNameLabel] = name
				return l
			}
		}
		return labels.Set{NamespaceNameLabel: name}
	}
	if p := src.pod(); p != nil && !refAllowed(policies, nsLabels, Egress, p, dst, port, proto) {
		return false
	}
	if p := dst.pod(); p != nil && !refAllowed(policies, nsLabels, Ingress, p, src, port, proto) {
		return false
	}
	return true
}

func refSelector(s *metav1.LabelSelector) labels.Selector {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return labels.Nothing()
	}
	return sel
}

func refHasType(spec *networkingv1.NetworkPolicySpec, t networkingv1.PolicyType) bool {
	types := spec.PolicyTypes
	if len(types) == 0 { // the API server's defaulting
		types = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(spec.Egress) > 0 {
			types = append(types, networkingv1.PolicyTypeEgress)
		}
	}
	for _, x := range types {
		if x == t {
			return true
		}
	}
	return false
}

// refAllowed: is the pod not isolated for dir, or does some rule of some
// policy selecting it allow the peer?
func refAllowed(policies []*networkingv1.NetworkPolicy, nsLabels func(string) labels.Set, dir Direction, pod *Pod, peer Peer, port uint16, proto corev1.Protocol) bool {
	isolated := false
	for _, p := range policies {
		ns := p.Namespace
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		if ns != pod.Namespace || pod.HostNetwork || !refHasType(&p.Spec, dir.policyType()) ||
			!refSelector(&p.Spec.PodSelector).Matches(labels.Set(pod.Labels)) {
			continue
		}
		isolated = true
		if dir == Ingress {
			for _, r := range p.Spec.Ingress {
				if refPeers(ns, r.From, peer, nsLabels) && refPorts(r.Ports, port, proto, pod) {
					return true
				}
			}
		} else {
			for _, r := range p.Spec.Egress {
				if refPeers(ns, r.To, peer, nsLabels) && refPorts(r.Ports, port, proto, peer.pod()) {
					return true
				}
			}
		}
	}
	return !isolated
}

func refPeers(policyNS string, peers []networkingv1.NetworkPolicyPeer, peer Peer, nsLabels func(string) labels.Set) bool {
	if len(peers) == 0 {
		return true
	}
	for _, pe := range peers {
		if pe.IPBlock != nil {
			a := peer.addr()
			cidr, err := netip.ParsePrefix(pe.IPBlock.CIDR)
			if err != nil || !a.IsValid() || !cidr.Masked().Contains(a.Unmap()) {
				continue
			}
			excepted := false
			for _, e := range pe.IPBlock.Except {
				ep, err := netip.ParsePrefix(e)
				if err == nil && ep.Masked().Contains(a.Unmap()) {
					excepted = true
				}
			}
			if !excepted {
				return true
			}
			continue
		}
		pod := peer.pod()
		if pod == nil || (pe.PodSelector == nil && pe.NamespaceSelector == nil) {
			continue
		}
		if pe.NamespaceSelector == nil && pod.Namespace != policyNS {
			continue
		}
		if pe.NamespaceSelector != nil && !refSelector(pe.NamespaceSelector).Matches(nsLabels(pod.Namespace)) {
			continue
		}
		if pe.PodSelector != nil && !refSelector(pe.PodSelector).Matches(labels.Set(pod.Labels)) {
			continue
		}
		return true
	}
	return false
}

func refPorts(ports []networkingv1.NetworkPolicyPort, port uint16, proto corev1.Protocol, target *Pod) bool {
	if len(ports) == 0 {
		return true
	}
	for _, po := range ports {
		pr := corev1.ProtocolTCP
		if po.Protocol != nil && *po.Protocol != "" {
			pr = *po.Protocol
		}
		if pr != proto {
			continue
		}
		if po.Port == nil {
			return true
		}
		if po.Port.Type == intstr.String {
			if target == nil {
				continue
			}
			for _, c := range target.Ports {
				cp := c.Protocol
				if cp == "" {
					cp = corev1.ProtocolTCP
				}
				if c.Name == po.Port.StrVal && cp == proto && c.ContainerPort == int32(port) {
					return true
				}
			}
			continue
		}
		lo, hi := po.Port.IntVal, po.Port.IntVal
		if po.EndPort != nil {
			hi = *po.EndPort
		}
		if int32(port) >= lo && int32(port) <= hi {
			return true
		}
	}
	return false
}
