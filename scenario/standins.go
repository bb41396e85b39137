package scenario

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/service"
)

// Endpoints of a dump whose Pods are not in it (cluster.endpoints).
//
// A `kubectl get -A -o yaml` dump of Services and EndpointSlices, without the Pods,
// describes where each Service's traffic goes; loaded as is, the simulated
// EndpointSlice controller would reconcile every slice of a selector Service to the
// Pods it knows, none, and the Service would lose its endpoints without a word. So
// each endpoint whose Pod is missing gets a stand-in pod that the controller derives
// the same endpoint from, and the report says so.

// endpointAddr is one endpoint of a Service in the manifests.
type endpointAddr struct {
	ip                  netip.Addr
	node, pod, hostname string
	ready, terminating  bool
	ports               []corev1.ContainerPort
}

// standIns applies cluster.endpoints to the loaded manifests: stand-in pods for the
// endpoints whose Pods are absent (keep), or the slices dropped (derive); the
// controller-managed slices and Endpoints of selector Services are dropped either way
// (the controller makes them anew). It returns the notes for the report.
func standIns(l *loaded, mode string, nodes []string) []string {
	var notes []string
	services := map[string]*corev1.Service{}
	pods := map[string]bool{}
	podIPs := map[netip.Addr]bool{}
	for _, o := range l.objects {
		switch v := o.(type) {
		case *corev1.Service:
			if len(v.Spec.Selector) > 0 && v.Spec.Type != corev1.ServiceTypeExternalName {
				services[nsName(v.Namespace, v.Name)] = v
			}
		case *corev1.Pod:
			pods[nsName(v.Namespace, v.Name)] = true
			for _, ip := range v.Status.PodIPs {
				if a, err := netip.ParseAddr(ip.IP); err == nil {
					podIPs[a] = true
				}
			}
		}
	}
	for _, w := range l.workloads {
		for _, p := range w.initial {
			pods[nsName(p.Namespace, p.Name)] = true
		}
	}
	if len(services) == 0 {
		return nil
	}
	byService := map[string][]endpointAddr{}
	hasSlices := map[string]bool{}
	var kept []runtime.Object
	for _, o := range l.objects {
		switch v := o.(type) {
		case *discoveryv1.EndpointSlice:
			key := nsName(v.Namespace, v.Labels[discoveryv1.LabelServiceName])
			if services[key] == nil || v.Labels[discoveryv1.LabelManagedBy] != "" && v.Labels[discoveryv1.LabelManagedBy] != "endpointslice-controller.k8s.io" {
				kept = append(kept, o)
				continue
			}
			hasSlices[key] = true
			var ports []corev1.ContainerPort
			for _, p := range v.Ports {
				cp := corev1.ContainerPort{Protocol: corev1.ProtocolTCP}
				if p.Name != nil {
					cp.Name = *p.Name
				}
				if p.Port != nil {
					cp.ContainerPort = *p.Port
				}
				if p.Protocol != nil {
					cp.Protocol = *p.Protocol
				}
				if cp.ContainerPort > 0 {
					ports = append(ports, cp)
				}
			}
			for _, e := range v.Endpoints {
				ea := endpointAddr{ready: e.Conditions.Ready == nil || *e.Conditions.Ready, terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
					ports: ports}
				if e.NodeName != nil {
					ea.node = *e.NodeName
				}
				if e.Hostname != nil {
					ea.hostname = *e.Hostname
				}
				if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
					ea.pod = e.TargetRef.Name
				}
				for _, a := range e.Addresses {
					if ip, err := netip.ParseAddr(a); err == nil {
						ea.ip = ip
						byService[key] = append(byService[key], ea)
					}
				}
			}
		case *corev1.Endpoints:
			key := nsName(v.Namespace, v.Name)
			if services[key] == nil {
				kept = append(kept, o)
				continue
			}
			for _, ss := range v.Subsets {
				var ports []corev1.ContainerPort
				for _, p := range ss.Ports {
					ports = append(ports, corev1.ContainerPort{Name: p.Name, ContainerPort: p.Port, Protocol: p.Protocol})
				}
				add := func(as []corev1.EndpointAddress, ready bool) {
					for _, a := range as {
						ip, err := netip.ParseAddr(a.IP)
						if err != nil {
							continue
						}
						ea := endpointAddr{ip: ip, ready: ready, ports: ports, hostname: a.Hostname}
						if a.NodeName != nil {
							ea.node = *a.NodeName
						}
						if a.TargetRef != nil && a.TargetRef.Kind == "Pod" {
							ea.pod = a.TargetRef.Name
						}
						byService[key+" endpoints"] = append(byService[key+" endpoints"], ea)
					}
				}
				add(ss.Addresses, true)
				add(ss.NotReadyAddresses, false)
			}
		default:
			kept = append(kept, o)
		}
	}
	l.objects = kept
	keys := make([]string, 0, len(byService))
	for k := range byService {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if mode == "derive" {
		for _, k := range keys {
			notes = append(notes, fmt.Sprintf("endpoints: %d endpoints of %s in the manifests ignored (cluster.endpoints: derive): the EndpointSlice controller derives them from the Pods", len(byService[k]), strings.TrimSuffix(k, " endpoints")))
		}
		return notes
	}
	inCluster := map[string]bool{}
	for _, n := range nodes {
		inCluster[n] = true
	}
	made := map[string]*corev1.Pod{}
	var order []string
	for _, k := range keys {
		key, isEndpoints := strings.CutSuffix(k, " endpoints")
		if isEndpoints && hasSlices[key] {
			continue // the slices say the same, and more
		}
		svc := services[key]
		stood := 0
		for _, ea := range byService[k] {
			podKey := nsName(svc.Namespace, ea.pod)
			if ea.pod != "" && pods[podKey] || podIPs[ea.ip] {
				continue // the Pod is in the manifests: the controller derives its endpoint
			}
			if ea.terminating {
				notes = append(notes, fmt.Sprintf("endpoints: %s's endpoint %s is terminating in the manifests: left out", key, ea.ip))
				continue
			}
			if !inCluster[ea.node] {
				where := "no nodeName"
				if ea.node != "" {
					where = "node " + ea.node + ", which is not in the cluster"
				}
				notes = append(notes, fmt.Sprintf("endpoints: %s's endpoint %s (%s) has %s: left out (name it in cluster.nodes to keep it)", key, ea.ip, orNone(ea.pod), where))
				continue
			}
			name := ea.pod
			if name == "" {
				name = "standin-" + strings.NewReplacer(".", "-", ":", "-").Replace(ea.ip.String())
				podKey = nsName(svc.Namespace, name)
			}
			p := made[podKey]
			if p == nil {
				p = &corev1.Pod{
					TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
					ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svc.Namespace, Labels: map[string]string{}, Annotations: map[string]string{}},
					Spec:       corev1.PodSpec{NodeName: ea.node, Hostname: ea.hostname, Containers: []corev1.Container{{Name: "stand-in", Image: "clusterlab/stand-in"}}},
					Status:     corev1.PodStatus{PodIP: ea.ip.String(), PodIPs: []corev1.PodIP{{IP: ea.ip.String()}}},
				}
				if !ea.ready {
					p.Annotations[cluster.AnnotationReady] = "false"
				}
				made[podKey] = p
				order = append(order, podKey)
			} else if !slices.ContainsFunc(p.Status.PodIPs, func(x corev1.PodIP) bool { return x.IP == ea.ip.String() }) {
				p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ea.ip.String()})
			}
			for k, v := range svc.Spec.Selector {
				p.Labels[k] = v
			}
			for _, cp := range ea.ports {
				if !slices.ContainsFunc(p.Spec.Containers[0].Ports, func(x corev1.ContainerPort) bool {
					return x.ContainerPort == cp.ContainerPort && x.Protocol == cp.Protocol
				}) {
					p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, cp)
				}
			}
			stood++
		}
		if stood > 0 {
			notes = append(notes, fmt.Sprintf("endpoints: %s keeps the %d endpoints the manifests give for Pods they do not have, each a stand-in pod at its address (cluster.endpoints: keep)", key, stood))
		}
	}
	for _, k := range order {
		p := made[k]
		if len(p.Annotations) == 0 {
			p.Annotations = nil
		}
		l.objects = append(l.objects, p)
		notes = append(notes, fmt.Sprintf("stand-in pod %s at %s on %s", k, p.Status.PodIP, p.Spec.NodeName))
	}
	return notes
}

func nsName(ns, name string) string { return service.NamespaceOrDefault(ns) + "/" + name }

func orNone(s string) string {
	if s == "" {
		return "no Pod named"
	}
	return "Pod " + s
}
