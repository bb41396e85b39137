package dns

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Source is the cluster data the server answers from: the same four lists the
// service store offers. The server never mutates what it gets.
type Source interface {
	ListServices() []*corev1.Service
	ListEndpointSlices() []*discoveryv1.EndpointSlice
	ListPods() []*corev1.Pod
	ListNamespaces() []*corev1.Namespace
}

// EndpointsLister is an optional extension of Source: legacy v1 Endpoints
// objects. They are used only for services that have no EndpointSlice at all
// (as the EndpointSlice mirroring controller would mirror them).
type EndpointsLister interface {
	ListEndpoints() []*corev1.Endpoints
}

// SyncReporter is an optional extension of Source. While HasSynced is false,
// answers that would be NXDOMAIN are SERVFAIL instead (CoreDNS does the same
// before its first API sync), so that clients retry rather than cache a
// negative answer.
type SyncReporter interface {
	HasSynced() bool
}

// StaticSource is a Source holding a fixed set of objects; Set replaces them
// all at once. It is what `clusterlab dns serve` serves from, and a fake with
// state for tests. Objects without a namespace are put in "default", as
// kubectl would.
type StaticSource struct {
	mu         sync.RWMutex
	services   []*corev1.Service
	slices     []*discoveryv1.EndpointSlice
	endpoints  []*corev1.Endpoints
	pods       []*corev1.Pod
	namespaces []*corev1.Namespace
	onChange   []func()
}

// NewStaticSource returns a source holding objs (see Set).
func NewStaticSource(objs ...runtime.Object) *StaticSource {
	s := &StaticSource{}
	s.Set(objs...)
	return s
}

// Set replaces the source's contents with the supported objects among objs
// (Service, EndpointSlice, Endpoints, Pod, Namespace; others are ignored) and
// notifies the functions registered with OnChange. Objects are deep-copied.
func (s *StaticSource) Set(objs ...runtime.Object) {
	var (
		svcs []*corev1.Service
		sls  []*discoveryv1.EndpointSlice
		eps  []*corev1.Endpoints
		pods []*corev1.Pod
		nss  []*corev1.Namespace
	)
	for _, o := range objs {
		switch v := o.(type) {
		case *corev1.Service:
			c := v.DeepCopy()
			defaultNamespace(&c.Namespace)
			svcs = append(svcs, c)
		case *discoveryv1.EndpointSlice:
			c := v.DeepCopy()
			defaultNamespace(&c.Namespace)
			sls = append(sls, c)
		case *corev1.Endpoints:
			c := v.DeepCopy()
			defaultNamespace(&c.Namespace)
			eps = append(eps, c)
		case *corev1.Pod:
			c := v.DeepCopy()
			defaultNamespace(&c.Namespace)
			pods = append(pods, c)
		case *corev1.Namespace:
			nss = append(nss, v.DeepCopy())
		}
	}
	s.mu.Lock()
	s.services, s.slices, s.endpoints, s.pods, s.namespaces = svcs, sls, eps, pods, nss
	fns := append([]func(){}, s.onChange...)
	s.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

// OnChange registers f to be called after every Set.
func (s *StaticSource) OnChange(f func()) {
	s.mu.Lock()
	s.onChange = append(s.onChange, f)
	s.mu.Unlock()
}

func defaultNamespace(ns *string) {
	if *ns == "" {
		*ns = corev1.NamespaceDefault
	}
}

// ListServices implements Source.
func (s *StaticSource) ListServices() []*corev1.Service {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]*corev1.Service(nil), s.services...)
}

// ListEndpointSlices implements Source.
func (s *StaticSource) ListEndpointSlices() []*discoveryv1.EndpointSlice {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]*discoveryv1.EndpointSlice(nil), s.slices...)
}

// ListEndpoints implements EndpointsLister.
func (s *StaticSource) ListEndpoints() []*corev1.Endpoints {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]*corev1.Endpoints(nil), s.endpoints...)
}

// ListPods implements Source.
func (s *StaticSource) ListPods() []*corev1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]*corev1.Pod(nil), s.pods...)
}

// ListNamespaces implements Source.
func (s *StaticSource) ListNamespaces() []*corev1.Namespace {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]*corev1.Namespace(nil), s.namespaces...)
}

var (
	_ Source          = (*StaticSource)(nil)
	_ EndpointsLister = (*StaticSource)(nil)
)
