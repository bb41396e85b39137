package service

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// CompleteObjects fills in what an API server and its controllers would have added to
// manifests (hand-written ones, or a `kubectl get -o yaml` dump), so that every
// clusterlab command that reads files (dns serve, generate, trace --manifests) sees the
// cluster a real one would have, and returns one note per change:
//
//   - a Service of type ClusterIP, NodePort or LoadBalancer without spec.clusterIP gets
//     the cluster IPs derived from its name in cidrs (NameDerivedClusterIPs: the same
//     address from every command); cluster IPs given in the manifests are kept;
//   - a Service with a selector and neither an EndpointSlice nor an Endpoints object for
//     it in the manifests gets the EndpointSlices the EndpointSlice controller would
//     write for the manifests' Pods (ready, hostname and subdomain, named target ports).
//     Pods it cannot take (an object the API server would reject) are left out with a
//     note. A Service whose EndpointSlices (or Endpoints) are in the manifests keeps
//     them as they are, whether or not the Pods behind them are there (a dump's state).
//
// The objects given are not modified: changed Services are copies.
func CompleteObjects(objs []runtime.Object, cidrs []netip.Prefix) ([]runtime.Object, []string) {
	var notes []string
	haveEndpoints := map[string]bool{}
	var pods []*corev1.Pod
	for _, o := range objs {
		switch v := o.(type) {
		case *discoveryv1.EndpointSlice:
			if n := v.Labels[discoveryv1.LabelServiceName]; n != "" {
				haveEndpoints[NamespaceOrDefault(v.Namespace)+"/"+n] = true
			}
		case *corev1.Endpoints:
			haveEndpoints[NamespaceOrDefault(v.Namespace)+"/"+v.Name] = true
		case *corev1.Pod:
			pods = append(pods, v)
		}
	}

	out, fillNotes := NameDerivedClusterIPs(objs, cidrs, nil)
	notes = append(notes, fillNotes...)

	// EndpointSlices for selector services the manifests give none for.
	var selectorSvcs []*corev1.Service
	for _, o := range out {
		svc, ok := o.(*corev1.Service)
		if !ok || svc.Spec.Selector == nil || svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		if !haveEndpoints[NamespaceOrDefault(svc.Namespace)+"/"+svc.Name] {
			selectorSvcs = append(selectorSvcs, svc)
		}
	}
	if len(selectorSvcs) == 0 {
		return out, notes
	}
	st, err := NewStore(Config{})
	if err != nil {
		return out, append(notes, fmt.Sprintf("endpoints not derived from pods: %v", err))
	}
	for _, p := range pods {
		if _, err := st.Create(p); err != nil {
			notes = append(notes, fmt.Sprintf("pod %s/%s left out of the derived endpoints: %v", NamespaceOrDefault(p.Namespace), p.Name, err))
		}
	}
	for _, svc := range selectorSvcs {
		c := svc.DeepCopy()
		c.Namespace = NamespaceOrDefault(c.Namespace)
		Default(c)
		n := 0
		for _, sl := range st.DesiredEndpointSlices(c) {
			out = append(out, sl)
			n += len(sl.Endpoints)
		}
		notes = append(notes, fmt.Sprintf("service %s/%s has no EndpointSlice in the manifests: %d endpoints derived from the pods that match its selector", c.Namespace, c.Name, n))
	}
	return out, notes
}
