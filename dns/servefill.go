package dns

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/clusterlab/clusterlab/alloc"
	"github.com/clusterlab/clusterlab/service"
)

// The service ranges `dns serve` allocates from for Services that have no
// cluster IP in the manifests: kube-apiserver's default IPv4 range and kind's
// default IPv6 one.
var (
	ServeServiceCIDRv4 = netip.MustParsePrefix("10.96.0.0/12")
	ServeServiceCIDRv6 = netip.MustParsePrefix("fd00:10:96::/112")
)

// completeObjects fills in what an API server and its controllers would have
// added to hand-written manifests, so that `dns serve` answers for them as a
// cluster would, and returns one note per change:
//
//   - a Service of type ClusterIP, NodePort or LoadBalancer without
//     spec.clusterIP gets cluster IPs (IPv4 unless spec.ipFamilies says
//     otherwise, both families for PreferDualStack and RequireDualStack, as
//     in a dual-stack cluster) from ServeServiceCIDRv4 /
//     ServeServiceCIDRv6. The choice is the API server's random scan of the
//     dynamic band, seeded by the Service's namespace and name, so a Service
//     keeps its address across reloads while no other takes it; addresses
//     given in the manifests are never handed out. Cluster IPs given in the
//     manifests are served as they are.
//   - a Service with a selector and neither an EndpointSlice nor an Endpoints
//     object for it in the manifests gets the EndpointSlices the EndpointSlice
//     controller would write for the manifests' Pods (ready, hostname and
//     subdomain, named target ports). Pods it cannot take (an object the API
//     server would reject) are left out with a note.
//
// The objects given are not modified: changed Services are copies.
func completeObjects(objs []runtime.Object) ([]runtime.Object, []string) {
	var notes []string
	taken := map[netip.Addr]bool{}
	haveEndpoints := map[string]bool{}
	var pods []*corev1.Pod
	for _, o := range objs {
		switch v := o.(type) {
		case *corev1.Service:
			for _, s := range alloc.ClusterIPsOf(v) {
				if ip, err := netip.ParseAddr(s); err == nil {
					taken[ip.Unmap()] = true
				}
			}
		case *discoveryv1.EndpointSlice:
			if n := v.Labels[discoveryv1.LabelServiceName]; n != "" {
				haveEndpoints[svcKey(nsOrDefault(v.Namespace), n)] = true
			}
		case *corev1.Endpoints:
			haveEndpoints[svcKey(nsOrDefault(v.Namespace), v.Name)] = true
		case *corev1.Pod:
			pods = append(pods, v)
		}
	}

	// Services that need addresses, in namespace/name order.
	out := append([]runtime.Object(nil), objs...)
	var need []int
	for i, o := range out {
		if svc, ok := o.(*corev1.Service); ok && needsClusterIP(svc) {
			need = append(need, i)
		}
	}
	sort.SliceStable(need, func(a, b int) bool {
		x, y := out[need[a]].(*corev1.Service), out[need[b]].(*corev1.Service)
		return svcKey(nsOrDefault(x.Namespace), x.Name) < svcKey(nsOrDefault(y.Namespace), y.Name)
	})
	if len(need) > 0 {
		pcg := rand.NewPCG(0, 0)
		allocators := map[corev1.IPFamily]*alloc.IPAllocator{}
		for fam, cidr := range map[corev1.IPFamily]netip.Prefix{corev1.IPv4Protocol: ServeServiceCIDRv4, corev1.IPv6Protocol: ServeServiceCIDRv6} {
			a, err := alloc.NewIPAllocator(cidr, rand.New(pcg))
			if err != nil {
				panic(err) // constant, valid ranges
			}
			for ip := range taken {
				_ = a.Allocate(ip) // addresses outside the range need no reservation
			}
			allocators[fam] = a
		}
		for _, i := range need {
			svc := out[i].(*corev1.Service).DeepCopy()
			ns := nsOrDefault(svc.Namespace)
			var ips []string
			for _, fam := range familiesFor(svc) {
				h := fnv.New64a()
				fmt.Fprintf(h, "%s/%s/%s", ns, svc.Name, fam)
				seed := h.Sum64()
				pcg.Seed(seed, seed^0x646e732073657276) // "dns serv"
				ip, err := allocators[fam].AllocateNext()
				if err != nil {
					notes = append(notes, fmt.Sprintf("service %s/%s has no clusterIP in the manifests and none is free in %s: it has no address", ns, svc.Name, allocators[fam].CIDR()))
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
			notes = append(notes, fmt.Sprintf("service %s/%s has no clusterIP in the manifests: serving it at %s (allocated)", ns, svc.Name, strings.Join(ips, ", ")))
		}
	}

	// EndpointSlices for selector services the manifests give none for.
	var selectorSvcs []*corev1.Service
	for _, o := range out {
		svc, ok := o.(*corev1.Service)
		if !ok || svc.Spec.Selector == nil || svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		if !haveEndpoints[svcKey(nsOrDefault(svc.Namespace), svc.Name)] {
			selectorSvcs = append(selectorSvcs, svc)
		}
	}
	if len(selectorSvcs) == 0 {
		return out, notes
	}
	st, err := service.NewStore(service.Config{})
	if err != nil {
		return out, append(notes, fmt.Sprintf("endpoints not derived from pods: %v", err))
	}
	for _, p := range pods {
		if _, err := st.Create(p); err != nil {
			notes = append(notes, fmt.Sprintf("pod %s/%s left out of the derived endpoints: %v", nsOrDefault(p.Namespace), p.Name, err))
		}
	}
	for _, svc := range selectorSvcs {
		c := svc.DeepCopy()
		c.Namespace = nsOrDefault(c.Namespace)
		service.Default(c)
		n := 0
		for _, sl := range st.DesiredEndpointSlices(c) {
			out = append(out, sl)
			n += len(sl.Endpoints)
		}
		notes = append(notes, fmt.Sprintf("service %s/%s has no EndpointSlice in the manifests: %d endpoints derived from the pods that match its selector", c.Namespace, c.Name, n))
	}
	return out, notes
}

func nsOrDefault(ns string) string {
	if ns == "" {
		return corev1.NamespaceDefault
	}
	return ns
}

// needsClusterIP reports whether a Service would have been given cluster IPs
// by the API server but has none in the manifests.
func needsClusterIP(svc *corev1.Service) bool {
	switch svc.Spec.Type {
	case "", corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
	default:
		return false
	}
	return svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) == 0
}

// familiesFor is the families a Service without cluster IPs gets in a
// dual-stack cluster whose primary family is IPv4: its ipFamilies, else
// IPv4; RequireDualStack and PreferDualStack add the missing family,
// SingleStack (the default) keeps the first.
func familiesFor(svc *corev1.Service) []corev1.IPFamily {
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
	if dual && len(fams) == 1 {
		if fams[0] == corev1.IPv4Protocol {
			fams = append(fams, corev1.IPv6Protocol)
		} else {
			fams = append(fams, corev1.IPv4Protocol)
		}
	}
	if !dual && len(fams) > 1 {
		fams = fams[:1]
	}
	return fams
}
