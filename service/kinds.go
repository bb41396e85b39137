package service

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The kinds clusterlab understands, spelled as in manifests.
const (
	KindService       = "Service"
	KindPod           = "Pod"
	KindNode          = "Node"
	KindNamespace     = "Namespace"
	KindEndpoints     = "Endpoints"
	KindEndpointSlice = "EndpointSlice"
	KindNetworkPolicy = "NetworkPolicy"
)

// kindInfo describes one supported kind.
type kindInfo struct {
	gvk        schema.GroupVersionKind
	namespaced bool
	newObj     func() runtime.Object
}

var kinds = map[string]kindInfo{
	KindService:       {corev1.SchemeGroupVersion.WithKind(KindService), true, func() runtime.Object { return &corev1.Service{} }},
	KindPod:           {corev1.SchemeGroupVersion.WithKind(KindPod), true, func() runtime.Object { return &corev1.Pod{} }},
	KindNode:          {corev1.SchemeGroupVersion.WithKind(KindNode), false, func() runtime.Object { return &corev1.Node{} }},
	KindNamespace:     {corev1.SchemeGroupVersion.WithKind(KindNamespace), false, func() runtime.Object { return &corev1.Namespace{} }},
	KindEndpoints:     {corev1.SchemeGroupVersion.WithKind(KindEndpoints), true, func() runtime.Object { return &corev1.Endpoints{} }},
	KindEndpointSlice: {discoveryv1.SchemeGroupVersion.WithKind(KindEndpointSlice), true, func() runtime.Object { return &discoveryv1.EndpointSlice{} }},
	KindNetworkPolicy: {networkingv1.SchemeGroupVersion.WithKind(KindNetworkPolicy), true, func() runtime.Object { return &networkingv1.NetworkPolicy{} }},
}

// supportedKinds lists the kinds for error messages, e.g.
// "v1 Endpoints, v1 Namespace, ..., discovery.k8s.io/v1 EndpointSlice".
func supportedKinds() string {
	var out []string
	for k, ki := range kinds {
		out = append(out, ki.gvk.GroupVersion().String()+" "+k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// KindOf returns the manifest kind of one of the supported objects ("Service",
// "Pod", ...), or "" for anything else.
func KindOf(obj runtime.Object) string {
	switch obj.(type) {
	case *corev1.Service:
		return KindService
	case *corev1.Pod:
		return KindPod
	case *corev1.Node:
		return KindNode
	case *corev1.Namespace:
		return KindNamespace
	case *corev1.Endpoints:
		return KindEndpoints
	case *discoveryv1.EndpointSlice:
		return KindEndpointSlice
	case *networkingv1.NetworkPolicy:
		return KindNetworkPolicy
	}
	return ""
}

// IsNamespaced reports whether objects of the kind live in a namespace.
func IsNamespaced(kind string) bool { return kinds[kind].namespaced }

// setTypeMeta fills apiVersion and kind of a supported object.
func setTypeMeta(obj runtime.Object) {
	k := KindOf(obj)
	if k == "" {
		return
	}
	obj.GetObjectKind().SetGroupVersionKind(kinds[k].gvk)
}

// objectMeta returns the metadata of a supported object, or nil.
func objectMeta(obj runtime.Object) *metav1.ObjectMeta {
	switch o := obj.(type) {
	case *corev1.Service:
		return &o.ObjectMeta
	case *corev1.Pod:
		return &o.ObjectMeta
	case *corev1.Node:
		return &o.ObjectMeta
	case *corev1.Namespace:
		return &o.ObjectMeta
	case *corev1.Endpoints:
		return &o.ObjectMeta
	case *discoveryv1.EndpointSlice:
		return &o.ObjectMeta
	case *networkingv1.NetworkPolicy:
		return &o.ObjectMeta
	}
	return nil
}

// ObjectKey returns "namespace/name" for namespaced objects and "name" for
// cluster-scoped ones.
func ObjectKey(obj runtime.Object) string {
	m := objectMeta(obj)
	if m == nil {
		return ""
	}
	if m.Namespace == "" {
		return m.Name
	}
	return m.Namespace + "/" + m.Name
}

// describe returns `Service "default/web"` for messages: the namespace
// "default" when the object has none, every byte of the input escaped (%q).
func describe(obj runtime.Object) string {
	k := KindOf(obj)
	if k == "" {
		return fmt.Sprintf("%T", obj)
	}
	key := ObjectKey(obj)
	if m := objectMeta(obj); m != nil && m.Namespace == "" && IsNamespaced(k) {
		key = metav1.NamespaceDefault + "/" + m.Name // the API server's default
	}
	return fmt.Sprintf("%s %q", k, key)
}

// splitKey splits "ns/name" (or "name", meaning namespace "default").
func splitKey(key string) (ns, name string) {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[:i], key[i+1:]
	}
	return metav1.NamespaceDefault, key
}
