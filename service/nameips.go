package service

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/clusterlab/clusterlab/alloc"
)

// NameDerivedClusterIPs gives each Service of objs that the API server would give
// cluster IPs (type ClusterIP, NodePort or LoadBalancer without spec.clusterIP) the
// addresses derived from its namespace and name: the API server's random scan of the
// range's dynamic band, seeded by "namespace/name/family", among the addresses not
// taken (those of taken, and the cluster IPs the objects give). So every command that
// reads the same manifests (clusterlab run, trace, generate and dns serve) gives a
// Service the same address, and it keeps it when other Services come and go (unless
// two draw the same address: the later in namespace/name order takes the next draw).
//
// cidrs are the service ranges, at most one per family; a Service gets its
// ipFamilies (IPv4 by default), both families for PreferDualStack and
// RequireDualStack when both ranges are there, and only those it has a range for.
// It returns the objects (a changed Service is a copy) and a note per Service given
// addresses or left without.
func NameDerivedClusterIPs(objs []runtime.Object, cidrs []netip.Prefix, taken []netip.Addr) ([]runtime.Object, []string) {
	var notes []string
	used := map[netip.Addr]bool{}
	for _, a := range taken {
		used[a.Unmap()] = true
	}
	out := append([]runtime.Object(nil), objs...)
	var need []int
	for i, o := range out {
		svc, ok := o.(*corev1.Service)
		if !ok {
			continue
		}
		for _, s := range alloc.ClusterIPsOf(svc) {
			if ip, err := netip.ParseAddr(s); err == nil {
				used[ip.Unmap()] = true
			}
		}
		if NeedsClusterIP(svc) {
			need = append(need, i)
		}
	}
	if len(need) == 0 {
		return out, nil
	}
	key := func(i int) string {
		s := out[i].(*corev1.Service)
		return NamespaceOrDefault(s.Namespace) + "/" + s.Name
	}
	sort.SliceStable(need, func(a, b int) bool { return key(need[a]) < key(need[b]) })
	pcg := rand.NewPCG(0, 0)
	allocators := map[corev1.IPFamily]*alloc.IPAllocator{}
	for _, cidr := range cidrs {
		a, err := alloc.NewIPAllocator(cidr, rand.New(pcg))
		if err != nil {
			notes = append(notes, fmt.Sprintf("service range %s: %v", cidr, err))
			continue
		}
		for ip := range used {
			_ = a.Allocate(ip) // addresses outside the range need no reservation
		}
		allocators[a.Family()] = a
	}
	for _, i := range need {
		svc := out[i].(*corev1.Service).DeepCopy()
		ns := NamespaceOrDefault(svc.Namespace)
		var ips []string
		for _, fam := range FamiliesFor(svc, len(allocators) > 1) {
			a := allocators[fam]
			if a == nil {
				notes = append(notes, fmt.Sprintf("service %s/%s has no clusterIP in the manifests and the cluster has no %s service range: no %s address", ns, svc.Name, fam, fam))
				continue
			}
			h := fnv.New64a()
			fmt.Fprintf(h, "%s/%s/%s", ns, svc.Name, fam)
			seed := h.Sum64()
			pcg.Seed(seed, seed^0x646e732073657276) // "dns serv"
			ip, err := a.AllocateNext()
			if err != nil {
				notes = append(notes, fmt.Sprintf("service %s/%s has no clusterIP in the manifests and none is free in %s: it has no address", ns, svc.Name, a.CIDR()))
				continue
			}
			ips = append(ips, ip.String())
		}
		if len(ips) == 0 {
			continue
		}
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ips[0], ips
		svc.Spec.IPFamilies = nil
		for _, s := range ips {
			svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, alloc.FamilyOf(netip.MustParseAddr(s)))
		}
		out[i] = svc
		notes = append(notes, fmt.Sprintf("service %s/%s has no clusterIP in the manifests: given %s (derived from its name, as every clusterlab command gives it)", ns, svc.Name, strings.Join(ips, ", ")))
	}
	return out, notes
}

// NamespaceOrDefault is ns, or "default" for an object that names no namespace.
func NamespaceOrDefault(ns string) string {
	if ns == "" {
		return corev1.NamespaceDefault
	}
	return ns
}

// NeedsClusterIP reports whether a Service would be given cluster IPs by the API
// server but has none.
func NeedsClusterIP(svc *corev1.Service) bool {
	switch svc.Spec.Type {
	case "", corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
	default:
		return false
	}
	return svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) == 0
}

// FamiliesFor is the families a Service without cluster IPs gets: its ipFamilies, else
// IPv4; in a dual-stack cluster RequireDualStack and PreferDualStack add the missing
// family; SingleStack (the default) keeps the first.
func FamiliesFor(svc *corev1.Service, dualStack bool) []corev1.IPFamily {
	var fams []corev1.IPFamily
	seen := map[corev1.IPFamily]bool{}
	for _, f := range svc.Spec.IPFamilies {
		if (f == corev1.IPv4Protocol || f == corev1.IPv6Protocol) && !seen[f] {
			seen[f] = true
			fams = append(fams, f)
		}
	}
	if len(fams) == 0 {
		fams = []corev1.IPFamily{corev1.IPv4Protocol}
	}
	dual := false
	if p := svc.Spec.IPFamilyPolicy; p != nil {
		dual = *p == corev1.IPFamilyPolicyRequireDualStack || *p == corev1.IPFamilyPolicyPreferDualStack
	}
	if dual && dualStack && len(fams) == 1 {
		if fams[0] == corev1.IPv4Protocol {
			fams = append(fams, corev1.IPv6Protocol)
		} else {
			fams = append(fams, corev1.IPv4Protocol)
		}
	}
	if (!dual || !dualStack) && len(fams) > 1 {
		fams = fams[:1]
	}
	return fams
}
