package alloc

import (
	"fmt"
	"math/rand/v2"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// Allocators is a cluster's set of service allocators: one ClusterIP
// allocator per configured family (in --service-cluster-ip-range order, the
// first being the primary family) and the node port allocator. Transactions
// (Begin) and repair passes (NewRepairer) work over it.
type Allocators struct {
	// ClusterIPs holds at most one allocator per family, primary first.
	ClusterIPs []*IPAllocator
	// NodePorts allocates nodePorts and healthCheckNodePorts; may be nil
	// when the cluster has no node port range.
	NodePorts *PortAllocator
}

// NewAllocators builds allocators for one or two service CIDRs (of
// different families, primary first) and a node port range. Each allocator
// gets its own source derived from rng (nil means DefaultSeed), so the
// sequence of one does not depend on how often another was used.
func NewAllocators(cidrs []netip.Prefix, ports PortRange, rng *rand.Rand) (*Allocators, error) {
	if len(cidrs) == 0 || len(cidrs) > 2 {
		return nil, fmt.Errorf("service CIDRs: want one or two, got %d", len(cidrs))
	}
	if rng == nil {
		rng = defaultRand()
	}
	sub := func() *rand.Rand { return rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())) }
	out := &Allocators{}
	for i, c := range cidrs {
		a, err := NewIPAllocator(c, sub())
		if err != nil {
			return nil, fmt.Errorf("service CIDR %d: %w", i, err)
		}
		if i == 1 && a.Family() == out.ClusterIPs[0].Family() {
			return nil, fmt.Errorf("service CIDRs %s and %s: a dual-stack cluster needs one IPv4 and one IPv6 range", cidrs[0], c)
		}
		out.ClusterIPs = append(out.ClusterIPs, a)
	}
	np, err := NewPortAllocator(ports, sub())
	if err != nil {
		return nil, fmt.Errorf("node port range: %w", err)
	}
	out.NodePorts = np
	return out, nil
}

// ForFamily returns the ClusterIP allocator of family, or nil.
func (a *Allocators) ForFamily(family corev1.IPFamily) *IPAllocator {
	for _, ipa := range a.ClusterIPs {
		if ipa.Family() == family {
			return ipa
		}
	}
	return nil
}

// ForIP returns the ClusterIP allocator of ip's family, or nil.
func (a *Allocators) ForIP(ip netip.Addr) *IPAllocator {
	return a.ForFamily(FamilyOf(ip))
}

// PrimaryFamily returns the family of the first service CIDR ("" when none).
func (a *Allocators) PrimaryFamily() corev1.IPFamily {
	if len(a.ClusterIPs) == 0 {
		return ""
	}
	return a.ClusterIPs[0].Family()
}

// DualStack reports whether both families are configured.
func (a *Allocators) DualStack() bool {
	return a.ForFamily(corev1.IPv4Protocol) != nil && a.ForFamily(corev1.IPv6Protocol) != nil
}

// FamilyOf returns "IPv4" for an IPv4 (or IPv4-mapped) address, "IPv6" for
// another valid address and "" for the zero Addr.
func FamilyOf(ip netip.Addr) corev1.IPFamily {
	if !ip.IsValid() {
		return ""
	}
	if ip.Unmap().Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}
