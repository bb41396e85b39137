package dns

import (
	"fmt"
	"net/netip"

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

	out, fillNotes := service.NameDerivedClusterIPs(objs, []netip.Prefix{ServeServiceCIDRv4, ServeServiceCIDRv6}, nil)
	notes = append(notes, fillNotes...)

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

func nsOrDefault(ns string) string { return service.NamespaceOrDefault(ns) }
