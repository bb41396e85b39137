package service

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clusterlab/clusterlab/alloc"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Config configures a Store.
type Config struct {
	// ServiceCIDRs are the service cluster IP ranges, primary family first;
	// two ranges (one IPv4, one IPv6) make a dual-stack cluster. Default
	// [10.96.0.0/12].
	ServiceCIDRs []netip.Prefix
	// NodePortRange is the node port range. Default 30000-32767.
	NodePortRange alloc.PortRange
	// Seed seeds the allocators' randomness (math/rand/v2 PCG) and generated
	// names and UIDs.
	Seed uint64
	// Now is the clock for creation and deletion timestamps. Default: a fixed
	// epoch (2025-01-01T00:00:00Z) that nothing advances; a simulation passes
	// its virtual clock.
	Now func() time.Time
	// MaxEndpointsPerSlice caps the endpoints in one EndpointSlice made by
	// the EndpointSlice controller (kube-controller-manager
	// --max-endpoints-per-slice). Default 100. Mirrored slices are not
	// chunked: each holds up to MaxMirroredEndpointsPerSubset.
	MaxEndpointsPerSlice int
	// MasterService creates default/kubernetes (the first IP of the primary
	// range, port 443 "https" → 6443) as the apiserver does.
	MasterService bool
	// APIServerAddress, when valid (and MasterService is set), is published
	// as the endpoint of default/kubernetes (Endpoints and EndpointSlice
	// "kubernetes", as the apiserver's endpoint reconciler writes them).
	APIServerAddress netip.Addr
	// StrictNamespaces makes creating an object in a namespace that does not
	// exist an error (`namespaces "x" not found`), as on a real cluster. By
	// default the store creates the namespace on first use. Either way it
	// starts with "default" and "kube-system".
	StrictNamespaces bool
	// StrictNodes leaves out of EndpointSlices the pods whose node is not in
	// the store (unless the service publishes not-ready addresses), as the
	// EndpointSlice controller does. By default such pods are listed
	// (without a zone), so tests need not create Node objects.
	StrictNodes bool
	// DisableEndpointsController turns off the EndpointSlice and mirroring
	// controllers: slices are then only what clients write (replaying a
	// dump exactly as it was).
	DisableEndpointsController bool
}

// Default values.
var (
	DefaultServiceCIDR   = netip.MustParsePrefix("10.96.0.0/12")
	DefaultNodePortRange = alloc.PortRange{Base: 30000, Size: 2768}
	DefaultEpoch         = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Controller names written in endpointslice.kubernetes.io/managed-by.
const (
	EndpointSliceControllerName = "endpointslice-controller.k8s.io"
	MirroringControllerName     = "endpointslicemirroring-controller.k8s.io"
)

// EventType says what happened to an object.
type EventType string

// Event types.
const (
	Added    EventType = "Added"
	Modified EventType = "Modified"
	Deleted  EventType = "Deleted"
)

// Event is one committed change. Old is nil for Added, New is nil for
// Deleted. Objects are the store's read-only copies.
type Event struct {
	Type            EventType
	Kind            string
	Old, New        runtime.Object
	ResourceVersion uint64
}

// Object returns New, or Old for a deletion.
func (e Event) Object() runtime.Object {
	if e.New != nil {
		return e.New
	}
	return e.Old
}

func (e Event) String() string {
	return fmt.Sprintf("%s %s %s rv=%d", e.Type, e.Kind, ObjectKey(e.Object()), e.ResourceVersion)
}

// Store is the simulation's API server: it holds Services, Pods, Nodes,
// Namespaces, Endpoints and EndpointSlices; defaults, validates and
// allocates as kube-apiserver does; runs the EndpointSlice and
// EndpointSlice-mirroring controllers synchronously inside each mutation;
// and tells watchers about every committed change.
//
// Objects it returns are its own: treat them as read-only, and pass a copy
// (DeepCopy) to Update. It is safe for concurrent use.
type Store struct {
	cfg    Config
	allocs *alloc.Allocators

	mu      sync.Mutex
	pcg     *rand.PCG
	rng     *rand.Rand
	rv      uint64
	objs    map[string]map[string]map[string]runtime.Object  // kind → namespace → name → object
	created map[string]uint64                                // kind/ns/name → resourceVersion at creation
	slices  map[string]map[string]*discoveryv1.EndpointSlice // "ns/service-name label" → name → slice
	podsBy  map[string]map[string]*corev1.Pod                // "ns/key=value" of each pod label → name → pod
	// svcBy indexes the Services with a selector by "ns/key=value" of the selector's
	// first key (sorted; "ns/" for an empty selector) → name: the Services a pod's
	// change can concern are found from the pod's labels, not by a scan of the namespace.
	svcBy  map[string]map[string]struct{}
	podsOn map[string]map[string]*corev1.Pod // node name → "ns/name" → pod bound to it

	// Delivery: committed events wait in queue (commit order) until the
	// goroutine that is delivering (delivering) hands them to the watchers,
	// without holding mu.
	watchers   []*watcher
	queue      []delivery
	delivering bool
}

type watcher struct {
	fn        func(Event)
	since     uint64 // deliver only events committed after this resourceVersion
	cancelled atomic.Bool
}

type delivery struct {
	ev   Event
	only *watcher // nil: every watcher
}

// NewStore builds a store; see Config for the defaults.
func NewStore(cfg Config) (*Store, error) {
	if len(cfg.ServiceCIDRs) == 0 {
		cfg.ServiceCIDRs = []netip.Prefix{DefaultServiceCIDR}
	}
	if cfg.NodePortRange.Size == 0 {
		cfg.NodePortRange = DefaultNodePortRange
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return DefaultEpoch }
	}
	if cfg.MaxEndpointsPerSlice <= 0 {
		cfg.MaxEndpointsPerSlice = 100
	}
	pcg := rand.NewPCG(cfg.Seed, cfg.Seed^0x636c75737465726c) // "clusterl"
	rng := rand.New(pcg)
	allocs, err := alloc.NewAllocators(cfg.ServiceCIDRs, cfg.NodePortRange, rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())))
	if err != nil {
		return nil, fmt.Errorf("service store: %w", err)
	}
	s := &Store{
		cfg:     cfg,
		allocs:  allocs,
		pcg:     pcg,
		rng:     rng,
		objs:    map[string]map[string]map[string]runtime.Object{},
		created: map[string]uint64{},
		slices:  map[string]map[string]*discoveryv1.EndpointSlice{},
		podsBy:  map[string]map[string]*corev1.Pod{},
		svcBy:   map[string]map[string]struct{}{},
		podsOn:  map[string]map[string]*corev1.Pod{},
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem} {
		if _, err := s.createLocked(NewNamespace(ns)); err != nil {
			return nil, err
		}
	}
	if cfg.MasterService {
		if err := s.createMasterServiceLocked(); err != nil {
			return nil, fmt.Errorf("service store: master service: %w", err)
		}
	}
	s.queue = nil // nobody can watch yet
	return s, nil
}

// Revision is the store's resourceVersion counter: equal revisions of one store hold
// the same objects (a failed Apply restores the revision with the objects).
func (s *Store) Revision() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rv
}

// Config returns the store's configuration with defaults filled in.
func (s *Store) Config() Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// Allocators returns the store's allocators (for inspection and repair
// passes; allocate through the store, not directly).
func (s *Store) Allocators() *alloc.Allocators {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.allocs
}

// RestartAPIServer is kube-apiserver restarting, with new
// --service-cluster-ip-range and --service-node-port-range values (nil and
// the zero PortRange keep the current ones). The objects stay (they live in
// etcd) and watches resume with nothing to report: no object changed. The
// allocators' bitmaps live in etcd too, so with unchanged ranges they come
// back as they were; a changed range makes the repair controller's startup
// pass recompute the bitmap from the stored Services (kube-apiserver's
// "the IP range has changed"). What the pass finds that no longer fits is in
// the report: a Service whose cluster IP or node port is outside the new
// range keeps it (OutOfRange; the API server only logs an event asking for
// the Service to be recreated), and new allocations come from the new range
// around every value still in use. The IP families, primary first, cannot
// change (the kubernetes Service and every dual-stack Service depend on
// them); such a restart is an error and changes nothing.
func (s *Store) RestartAPIServer(cidrs []netip.Prefix, ports alloc.PortRange) (alloc.Report, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(cidrs) == 0 {
		cidrs = s.cfg.ServiceCIDRs
	}
	if ports.Size == 0 {
		ports = s.cfg.NodePortRange
	}
	if len(cidrs) != len(s.cfg.ServiceCIDRs) {
		return alloc.Report{}, fmt.Errorf("restart: --service-cluster-ip-range %v: the cluster has %d service IP families (%v); a restart cannot change them", cidrs, len(s.cfg.ServiceCIDRs), s.cfg.ServiceCIDRs)
	}
	for i, c := range cidrs {
		if c.Addr().Is4() != s.cfg.ServiceCIDRs[i].Addr().Is4() {
			return alloc.Report{}, fmt.Errorf("restart: --service-cluster-ip-range %v: range %d is %s, was %s: a restart cannot change the service IP families or their order", cidrs, i, prefixFamily(c), prefixFamily(s.cfg.ServiceCIDRs[i]))
		}
	}
	if slices.Equal(cidrs, s.cfg.ServiceCIDRs) && ports == s.cfg.NodePortRange {
		return alloc.Report{}, nil
	}
	allocs, err := alloc.NewAllocators(cidrs, ports, rand.New(rand.NewPCG(s.rng.Uint64(), s.rng.Uint64())))
	if err != nil {
		return alloc.Report{}, fmt.Errorf("restart: %w", err)
	}
	var svcs []*corev1.Service
	for _, byName := range s.objs[KindService] {
		for _, o := range byName {
			svcs = append(svcs, o.(*corev1.Service))
		}
	}
	rep := alloc.NewRepairer(allocs).Repair(svcs)
	s.allocs = allocs
	s.cfg.ServiceCIDRs = slices.Clone(cidrs)
	s.cfg.NodePortRange = ports
	// What the startup pass marked is what it is for: report what does not fit.
	var kept []alloc.Problem
	for _, p := range rep.Problems {
		if p.Kind != alloc.Missing {
			kept = append(kept, p)
		}
	}
	rep.Problems = kept
	return rep, nil
}

func prefixFamily(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

func (s *Store) now() metav1.Time { return metav1.NewTime(s.cfg.Now().UTC().Truncate(time.Second)) }

// --- watching --------------------------------------------------------------

// Watch calls fn for every change committed after it returns, in commit
// order. Callbacks run synchronously on the goroutine that made the change,
// after the store's lock is released, so fn may call back into the store;
// changes it makes are queued and delivered after the current event, never
// re-entrantly. (With concurrent writers, whichever goroutine is delivering
// delivers the others' events too.) cancel stops further calls.
func (s *Store) Watch(fn func(Event)) (cancel func()) {
	return s.watch(fn, false)
}

// WatchWithReplay is Watch preceded by one Added event per existing object
// (namespaces, nodes, services, endpoints, endpoint slices, pods; each kind
// sorted by namespace/name), delivered to fn alone before any later change:
// the list-then-watch of an informer, without a gap.
func (s *Store) WatchWithReplay(fn func(Event)) (cancel func()) {
	return s.watch(fn, true)
}

func (s *Store) watch(fn func(Event), replay bool) func() {
	s.mu.Lock()
	w := &watcher{fn: fn, since: s.rv}
	s.watchers = append(s.watchers, w)
	if replay {
		// The snapshot includes every committed change, so the watcher skips
		// queued events up to s.rv (since) and gets the replay first.
		var replayed []delivery
		for _, kind := range kindOrder {
			for _, obj := range s.listLocked(kind) {
				replayed = append(replayed, delivery{ev: Event{Type: Added, Kind: kind, New: obj, ResourceVersion: resourceVersionOf(obj)}, only: w})
			}
		}
		s.queue = append(replayed, s.queue...)
	}
	s.mu.Unlock()
	s.deliver()
	return func() {
		w.cancelled.Store(true)
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, x := range s.watchers {
			if x == w {
				s.watchers = append(s.watchers[:i:i], s.watchers[i+1:]...)
				break
			}
		}
	}
}

// kindOrder is the order of kinds in replays, Apply and namespace deletion (reversed).
var kindOrder = []string{KindNamespace, KindNode, KindService, KindEndpoints, KindEndpointSlice, KindPod, KindNetworkPolicy}

func resourceVersionOf(obj runtime.Object) uint64 {
	rv, _ := strconv.ParseUint(objectMeta(obj).ResourceVersion, 10, 64)
	return rv
}

// publish delivers committed events. Called with no lock held.
func (s *Store) publish() { s.deliver() }

func (s *Store) deliver() {
	s.mu.Lock()
	if s.delivering {
		s.mu.Unlock()
		return // an outer call on this (or another) goroutine is draining the queue
	}
	s.delivering = true
	finished := false
	defer func() {
		if !finished { // a callback panicked: let later changes be delivered
			s.mu.Lock()
			s.delivering = false
			s.mu.Unlock()
		}
	}()
	for len(s.queue) > 0 {
		d := s.queue[0]
		s.queue = s.queue[1:]
		var targets []*watcher
		if d.only != nil {
			targets = []*watcher{d.only}
		} else {
			for _, w := range s.watchers {
				if d.ev.ResourceVersion > w.since {
					targets = append(targets, w)
				}
			}
		}
		s.mu.Unlock()
		for _, w := range targets {
			if !w.cancelled.Load() {
				w.fn(d.ev)
			}
		}
		s.mu.Lock()
	}
	s.delivering = false
	finished = true
	s.mu.Unlock()
}

// --- reading ---------------------------------------------------------------

func (s *Store) get(kind, ns, name string) (runtime.Object, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[kind][ns][name]
	return o, ok
}

// GetService returns the stored Service (read-only).
func (s *Store) GetService(ns, name string) (*corev1.Service, bool) {
	o, ok := s.get(KindService, ns, name)
	if !ok {
		return nil, false
	}
	return o.(*corev1.Service), true
}

// GetPod returns the stored Pod (read-only).
func (s *Store) GetPod(ns, name string) (*corev1.Pod, bool) {
	o, ok := s.get(KindPod, ns, name)
	if !ok {
		return nil, false
	}
	return o.(*corev1.Pod), true
}

// GetNode returns the stored Node (read-only).
func (s *Store) GetNode(name string) (*corev1.Node, bool) {
	o, ok := s.get(KindNode, "", name)
	if !ok {
		return nil, false
	}
	return o.(*corev1.Node), true
}

// GetNamespace returns the stored Namespace (read-only).
func (s *Store) GetNamespace(name string) (*corev1.Namespace, bool) {
	o, ok := s.get(KindNamespace, "", name)
	if !ok {
		return nil, false
	}
	return o.(*corev1.Namespace), true
}

// GetEndpoints returns the stored core/v1 Endpoints (read-only).
func (s *Store) GetEndpoints(ns, name string) (*corev1.Endpoints, bool) {
	o, ok := s.get(KindEndpoints, ns, name)
	if !ok {
		return nil, false
	}
	return o.(*corev1.Endpoints), true
}

// GetEndpointSlice returns the stored EndpointSlice (read-only).
func (s *Store) GetEndpointSlice(ns, name string) (*discoveryv1.EndpointSlice, bool) {
	o, ok := s.get(KindEndpointSlice, ns, name)
	if !ok {
		return nil, false
	}
	return o.(*discoveryv1.EndpointSlice), true
}

// GetNetworkPolicy returns the stored NetworkPolicy (read-only).
func (s *Store) GetNetworkPolicy(ns, name string) (*networkingv1.NetworkPolicy, bool) {
	o, ok := s.get(KindNetworkPolicy, ns, name)
	if !ok {
		return nil, false
	}
	return o.(*networkingv1.NetworkPolicy), true
}

// Get returns any stored object by kind ("Service", ...), namespace and name.
func (s *Store) Get(kind, ns, name string) (runtime.Object, bool) { return s.get(kind, ns, name) }

// listLocked returns a kind's objects sorted by namespace/name.
func (s *Store) listLocked(kind string) []runtime.Object {
	var out []runtime.Object
	nss := make([]string, 0, len(s.objs[kind]))
	for ns := range s.objs[kind] {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	for _, ns := range nss {
		names := make([]string, 0, len(s.objs[kind][ns]))
		for n := range s.objs[kind][ns] {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			out = append(out, s.objs[kind][ns][n])
		}
	}
	return out
}

// List returns all objects of a kind, sorted by namespace/name.
func (s *Store) List(kind string) []runtime.Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listLocked(kind)
}

func listAs[T runtime.Object](s *Store, kind string) []T {
	objs := s.List(kind)
	out := make([]T, len(objs))
	for i, o := range objs {
		out[i] = o.(T)
	}
	return out
}

// ListServices returns all Services sorted by namespace/name (read-only).
func (s *Store) ListServices() []*corev1.Service { return listAs[*corev1.Service](s, KindService) }

// ListPods returns all Pods sorted by namespace/name (read-only).
func (s *Store) ListPods() []*corev1.Pod { return listAs[*corev1.Pod](s, KindPod) }

// ListNodes returns all Nodes sorted by name (read-only).
func (s *Store) ListNodes() []*corev1.Node { return listAs[*corev1.Node](s, KindNode) }

// ListNamespaces returns all Namespaces sorted by name (read-only).
func (s *Store) ListNamespaces() []*corev1.Namespace {
	return listAs[*corev1.Namespace](s, KindNamespace)
}

// ListEndpoints returns all core/v1 Endpoints sorted by namespace/name (read-only).
func (s *Store) ListEndpoints() []*corev1.Endpoints {
	return listAs[*corev1.Endpoints](s, KindEndpoints)
}

// ListEndpointSlices returns all EndpointSlices sorted by namespace/name (read-only).
func (s *Store) ListEndpointSlices() []*discoveryv1.EndpointSlice {
	return listAs[*discoveryv1.EndpointSlice](s, KindEndpointSlice)
}

// ListNetworkPolicies returns all NetworkPolicies sorted by namespace/name (read-only).
func (s *Store) ListNetworkPolicies() []*networkingv1.NetworkPolicy {
	return listAs[*networkingv1.NetworkPolicy](s, KindNetworkPolicy)
}

// EndpointSlicesFor returns the slices labelled kubernetes.io/service-name
// = service in namespace ns (whoever wrote them), sorted by name.
func (s *Store) EndpointSlicesFor(ns, service string) []*discoveryv1.EndpointSlice {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slicesForLocked(ns, service, "")
}

// slicesForLocked returns a service's slices, only those managed by
// managedBy when it is not "".
func (s *Store) slicesForLocked(ns, service, managedBy string) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, sl := range s.slices[ns+"/"+service] {
		if managedBy != "" && sl.Labels[discoveryv1.LabelManagedBy] != managedBy {
			continue
		}
		out = append(out, sl)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// indexSlice adds (add) or removes a slice in the by-service index.
func (s *Store) indexSlice(sl *discoveryv1.EndpointSlice, add bool) {
	key := sl.Namespace + "/" + sl.Labels[discoveryv1.LabelServiceName]
	if add {
		if s.slices[key] == nil {
			s.slices[key] = map[string]*discoveryv1.EndpointSlice{}
		}
		s.slices[key][sl.Name] = sl
		return
	}
	delete(s.slices[key], sl.Name)
	if len(s.slices[key]) == 0 {
		delete(s.slices, key)
	}
}

func (s *Store) rebuildSliceIndex() {
	s.slices = map[string]map[string]*discoveryv1.EndpointSlice{}
	for _, byName := range s.objs[KindEndpointSlice] {
		for _, o := range byName {
			s.indexSlice(o.(*discoveryv1.EndpointSlice), true)
		}
	}
	s.podsBy = map[string]map[string]*corev1.Pod{}
	s.podsOn = map[string]map[string]*corev1.Pod{}
	for _, byName := range s.objs[KindPod] {
		for _, o := range byName {
			s.indexPod(o.(*corev1.Pod), true)
		}
	}
	s.svcBy = map[string]map[string]struct{}{}
	for _, byName := range s.objs[KindService] {
		for _, o := range byName {
			s.indexService(o.(*corev1.Service), true)
		}
	}
}

// svcIndexKey is a Service's key in svcBy, "" for a Service without a selector.
func svcIndexKey(svc *corev1.Service) string {
	sel := svc.Spec.Selector
	if sel == nil {
		return ""
	}
	if len(sel) == 0 {
		return svc.Namespace + "/"
	}
	first := ""
	for k := range sel {
		if first == "" || k < first {
			first = k
		}
	}
	return svc.Namespace + "/" + first + "=" + sel[first]
}

// indexService adds a Service to (or removes it from) svcBy.
func (s *Store) indexService(svc *corev1.Service, add bool) {
	key := svcIndexKey(svc)
	if key == "" {
		return
	}
	if add {
		if s.svcBy[key] == nil {
			s.svcBy[key] = map[string]struct{}{}
		}
		s.svcBy[key][svc.Name] = struct{}{}
		return
	}
	delete(s.svcBy[key], svc.Name)
	if len(s.svcBy[key]) == 0 {
		delete(s.svcBy, key)
	}
}

// indexPod adds a pod to (or removes it from) the index of pods by namespace and
// label, which the EndpointSlice controller reads instead of every pod of the
// namespace.
func (s *Store) indexPod(p *corev1.Pod, add bool) {
	if node := p.Spec.NodeName; node != "" {
		key := p.Namespace + "/" + p.Name
		if add {
			if s.podsOn[node] == nil {
				s.podsOn[node] = map[string]*corev1.Pod{}
			}
			s.podsOn[node][key] = p
		} else {
			delete(s.podsOn[node], key)
			if len(s.podsOn[node]) == 0 {
				delete(s.podsOn, node)
			}
		}
	}
	for k, v := range p.Labels {
		key := p.Namespace + "/" + k + "=" + v
		if add {
			if s.podsBy[key] == nil {
				s.podsBy[key] = map[string]*corev1.Pod{}
			}
			s.podsBy[key][p.Name] = p
			continue
		}
		delete(s.podsBy[key], p.Name)
		if len(s.podsBy[key]) == 0 {
			delete(s.podsBy, key)
		}
	}
}

// podsSelectedLocked returns the pods of ns that a Service's selector (a label set,
// not empty) selects, in no order: those of its rarest label, matched whole.
func (s *Store) podsSelectedLocked(ns string, sel map[string]string) []*corev1.Pod {
	var best map[string]*corev1.Pod
	first := true
	for k, v := range sel {
		m := s.podsBy[ns+"/"+k+"="+v]
		if first || len(m) < len(best) {
			best, first = m, false
		}
	}
	var out []*corev1.Pod
	for _, p := range best {
		if selects(sel, p.Labels) {
			out = append(out, p)
		}
	}
	return out
}

// selects reports whether a label set selector (labels.SelectorFromSet) matches the
// labels: every key present with its value.
func selects(sel, lbls map[string]string) bool {
	for k, v := range sel {
		if lv, ok := lbls[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

// --- errors ----------------------------------------------------------------

var resources = map[string]schema.GroupResource{
	KindService:       {Resource: "services"},
	KindPod:           {Resource: "pods"},
	KindNode:          {Resource: "nodes"},
	KindNamespace:     {Resource: "namespaces"},
	KindEndpoints:     {Resource: "endpoints"},
	KindEndpointSlice: {Group: discoveryv1.GroupName, Resource: "endpointslices"},
	KindNetworkPolicy: {Group: networkingv1.GroupName, Resource: "networkpolicies"},
}

func notFound(kind, name string) error { return apierrors.NewNotFound(resources[kind], name) }

// --- writing ---------------------------------------------------------------

// Create stores a new object: it fills namespace "default" when a namespaced
// object has none, creates the namespace if needed (see
// Config.StrictNamespaces), defaults, allocates (Services), validates, and
// runs the controllers. It returns the stored copy. Unlike the real API
// server it keeps a given uid, creationTimestamp, deletionTimestamp and
// status, so objects from a cluster dump keep their state and
// cross-references.
func (s *Store) Create(obj runtime.Object) (runtime.Object, error) {
	s.mu.Lock()
	out, err := s.createLocked(obj)
	s.mu.Unlock()
	s.publish()
	return out, err
}

// Update replaces an existing object. A copy of obj is taken; status is
// kept from the stored object (use UpdateStatus). An empty
// metadata.resourceVersion means "whatever is stored"; a stale one is a
// Conflict. A change that changes nothing is not written and sends no event.
func (s *Store) Update(obj runtime.Object) (runtime.Object, error) {
	s.mu.Lock()
	out, err := s.updateLocked(obj, false)
	s.mu.Unlock()
	s.publish()
	return out, err
}

// UpdateStatus replaces the status of an existing Service (load-balancer
// ingress, as a cloud LB controller sets it), Pod (IPs, phase and
// conditions, as the network and kubelet set them), Node or Namespace;
// everything else is kept from the stored object.
func (s *Store) UpdateStatus(obj runtime.Object) (runtime.Object, error) {
	s.mu.Lock()
	out, err := s.updateLocked(obj, true)
	s.mu.Unlock()
	s.publish()
	return out, err
}

// Delete removes an object now. Deleting a Service releases its IPs and
// ports and removes its EndpointSlices and its Endpoints; deleting a
// Namespace removes everything in it ("default", "kube-system" and
// "kube-public" cannot be deleted).
func (s *Store) Delete(kind, namespace, name string) error {
	s.mu.Lock()
	err := s.deleteLocked(kind, namespace, name)
	s.mu.Unlock()
	s.publish()
	return err
}

// DeletePod starts a pod's graceful deletion: with grace > 0 the pod gets
// metadata.deletionTimestamp = now + grace (it is terminating: its endpoints
// turn not-ready and terminating) and stays until Delete; with grace <= 0 it
// is removed at once. Deleting a pod that is already terminating again does
// not move its deadline later.
func (s *Store) DeletePod(namespace, name string, grace time.Duration) error {
	s.mu.Lock()
	err := s.deletePodLocked(namespace, name, grace)
	s.mu.Unlock()
	s.publish()
	return err
}

func (s *Store) deletePodLocked(namespace, name string, grace time.Duration) error {
	o, ok := s.objs[KindPod][namespace][name]
	if !ok {
		return notFound(KindPod, name)
	}
	if grace <= 0 {
		return s.deleteLocked(KindPod, namespace, name)
	}
	old := o.(*corev1.Pod)
	deadline := metav1.NewTime(s.cfg.Now().UTC().Add(grace).Truncate(time.Second))
	if old.DeletionTimestamp != nil && !deadline.Before(old.DeletionTimestamp) {
		return nil
	}
	p := old.DeepCopy()
	p.DeletionTimestamp = &deadline
	secs := int64(grace / time.Second)
	p.DeletionGracePeriodSeconds = &secs
	s.commit(Modified, KindPod, old, p)
	s.afterChangeLocked(KindPod, old, p)
	return nil
}

// Apply creates or updates each object (by kind, namespace and name), all or
// nothing: if one fails, the store is left as it was and no event is sent.
// Objects are applied kinds first in this order — Namespace, Node, Service,
// Endpoints, EndpointSlice, Pod, NetworkPolicy — keeping the given order within a kind,
// so pods see the services applied with them (as Helm orders installs).
func (s *Store) Apply(objs ...runtime.Object) error {
	s.mu.Lock()
	err := s.applyLocked(objs, nil)
	s.mu.Unlock()
	s.publish()
	return err
}

// ApplyManifests is Apply for loaded manifests; an error names the file,
// line, document and field of the object that failed (see ManifestError).
func (s *Store) ApplyManifests(ms []Manifest) error {
	objs := make([]runtime.Object, len(ms))
	for i := range ms {
		objs[i] = ms[i].Object
	}
	s.mu.Lock()
	err := s.applyLocked(objs, ms)
	s.mu.Unlock()
	s.publish()
	return err
}

func (s *Store) applyLocked(objs []runtime.Object, ms []Manifest) error {
	order := make([]int, len(objs))
	for i := range order {
		order[i] = i
	}
	rank := map[string]int{}
	for i, k := range kindOrder {
		rank[k] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return rank[KindOf(objs[order[a]])] < rank[KindOf(objs[order[b]])] })

	saved := s.save()
	for _, i := range order {
		obj := objs[i]
		if KindOf(obj) == "" {
			s.restore(saved)
			return fmt.Errorf("apply: object %d: clusterlab does not handle %T", i, obj)
		}
		m := objectMeta(obj)
		ns := m.Namespace
		if ns == "" && IsNamespaced(KindOf(obj)) {
			ns = metav1.NamespaceDefault
		}
		var err error
		if _, exists := s.objs[KindOf(obj)][ns][m.Name]; exists && m.Name != "" {
			cp := obj.DeepCopyObject()
			cm := objectMeta(cp)
			// Apply: last writer wins; system fields stay the stored object's.
			cm.ResourceVersion, cm.UID, cm.CreationTimestamp = "", "", metav1.Time{}
			cm.DeletionTimestamp, cm.DeletionGracePeriodSeconds = nil, nil
			if _, err = s.updateLocked(cp, false); err == nil && hasStatus(cp) {
				_, err = s.updateLocked(cp, true)
			}
		} else {
			_, err = s.createLocked(obj)
		}
		if err != nil {
			s.restore(saved)
			if ms != nil {
				return ms[i].Annotate(err)
			}
			return fmt.Errorf("apply: object %d (%s): %w", i, describe(obj), err)
		}
	}
	return nil
}

// hasStatus reports whether an applied object carries a status to keep.
func hasStatus(obj runtime.Object) bool {
	switch o := obj.(type) {
	case *corev1.Pod:
		return !apiequality.Semantic.DeepEqual(o.Status, corev1.PodStatus{})
	case *corev1.Service:
		return len(o.Status.LoadBalancer.Ingress) > 0 || len(o.Status.Conditions) > 0
	case *corev1.Node:
		return !apiequality.Semantic.DeepEqual(o.Status, corev1.NodeStatus{})
	}
	return false
}

// savedState is what Apply restores on failure.
type savedState struct {
	rv       uint64
	rngState []byte
	objs     map[string]map[string]map[string]runtime.Object
	created  map[string]uint64
	pending  int
	ips      []alloc.Snapshot
	ports    alloc.Snapshot
}

func (s *Store) save() savedState {
	st := savedState{rv: s.rv, pending: len(s.queue), created: make(map[string]uint64, len(s.created))}
	st.rngState, _ = s.rngSource().MarshalBinary()
	st.objs = make(map[string]map[string]map[string]runtime.Object, len(s.objs))
	for k, byNS := range s.objs {
		st.objs[k] = make(map[string]map[string]runtime.Object, len(byNS))
		for ns, byName := range byNS {
			m := make(map[string]runtime.Object, len(byName))
			for n, o := range byName {
				m[n] = o
			}
			st.objs[k][ns] = m
		}
	}
	for k, v := range s.created {
		st.created[k] = v
	}
	for _, a := range s.allocs.ClusterIPs {
		st.ips = append(st.ips, a.Snapshot())
	}
	st.ports = s.allocs.NodePorts.Snapshot()
	return st
}

func (s *Store) restore(st savedState) {
	s.rv = st.rv
	_ = s.rngSource().UnmarshalBinary(st.rngState)
	s.objs = st.objs
	s.created = st.created
	s.rebuildSliceIndex()
	s.queue = s.queue[:st.pending] // nothing is delivered while mu is held
	for i, a := range s.allocs.ClusterIPs {
		if err := a.Restore(st.ips[i]); err != nil {
			panic(fmt.Sprintf("service store: restoring allocator: %v", err))
		}
	}
	if err := s.allocs.NodePorts.Restore(st.ports); err != nil {
		panic(fmt.Sprintf("service store: restoring node port allocator: %v", err))
	}
}

// rngSource returns the PCG behind s.rng, to snapshot it.
func (s *Store) rngSource() *rand.PCG { return s.pcg }

// --- internals ---------------------------------------------------------------

func createdKey(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

// commit stores (or, with obj == nil, removes) an object with a new
// resourceVersion and queues the event.
func (s *Store) commit(t EventType, kind string, old, obj runtime.Object) runtime.Object {
	s.rv++
	switch kind {
	case KindEndpointSlice:
		if old != nil {
			s.indexSlice(old.(*discoveryv1.EndpointSlice), false)
		}
		if obj != nil {
			s.indexSlice(obj.(*discoveryv1.EndpointSlice), true)
		}
	case KindPod:
		if old != nil {
			s.indexPod(old.(*corev1.Pod), false)
		}
		if obj != nil {
			s.indexPod(obj.(*corev1.Pod), true)
		}
	case KindService:
		if old != nil {
			s.indexService(old.(*corev1.Service), false)
		}
		if obj != nil {
			s.indexService(obj.(*corev1.Service), true)
		}
	}
	if obj != nil {
		m := objectMeta(obj)
		m.ResourceVersion = strconv.FormatUint(s.rv, 10)
		setTypeMeta(obj)
		byNS := s.objs[kind]
		if byNS == nil {
			byNS = map[string]map[string]runtime.Object{}
			s.objs[kind] = byNS
		}
		if byNS[m.Namespace] == nil {
			byNS[m.Namespace] = map[string]runtime.Object{}
		}
		byNS[m.Namespace][m.Name] = obj
		if t == Added {
			s.created[createdKey(kind, m.Namespace, m.Name)] = s.rv
		}
	} else {
		m := objectMeta(old)
		delete(s.objs[kind][m.Namespace], m.Name)
		if len(s.objs[kind][m.Namespace]) == 0 {
			delete(s.objs[kind], m.Namespace)
		}
		delete(s.created, createdKey(kind, m.Namespace, m.Name))
	}
	s.queue = append(s.queue, delivery{ev: Event{Type: t, Kind: kind, Old: old, New: obj, ResourceVersion: s.rv}})
	return obj
}

// newUID returns a deterministic, UUID-shaped uid.
func (s *Store) newUID() types.UID {
	a, b := s.rng.Uint64(), s.rng.Uint64()
	return types.UID(fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", a>>32, (a>>16)&0xffff, a&0xfff, (b>>48)&0xfff, b&0xffffffffffff))
}

// nameSuffix returns 5 characters as the API server's generateName does.
func (s *Store) nameSuffix() string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	for i := range b {
		b[i] = alphabet[s.rng.IntN(len(alphabet))]
	}
	return string(b)
}

func (s *Store) ensureNamespaceLocked(ns string) error {
	if _, ok := s.objs[KindNamespace][""][ns]; ok {
		return nil
	}
	if s.cfg.StrictNamespaces {
		return notFound(KindNamespace, ns)
	}
	_, err := s.createLocked(NewNamespace(ns))
	return err
}

func (s *Store) createLocked(in runtime.Object) (runtime.Object, error) {
	kind := KindOf(in)
	if kind == "" {
		return nil, fmt.Errorf("clusterlab does not handle %T", in)
	}
	obj := in.DeepCopyObject()
	m := objectMeta(obj)
	if IsNamespaced(kind) {
		if m.Namespace == "" {
			m.Namespace = metav1.NamespaceDefault
		}
	} else {
		m.Namespace = ""
	}
	if m.Name == "" && m.GenerateName != "" {
		for {
			m.Name = m.GenerateName + s.nameSuffix()
			if _, taken := s.objs[kind][m.Namespace][m.Name]; !taken {
				break
			}
		}
	}
	if _, exists := s.objs[kind][m.Namespace][m.Name]; exists && m.Name != "" {
		return nil, apierrors.NewAlreadyExists(resources[kind], m.Name)
	}
	if IsNamespaced(kind) && m.Name != "" {
		if ns, ok := s.objs[KindNamespace][""][m.Namespace]; ok && ns.(*corev1.Namespace).DeletionTimestamp != nil {
			return nil, apierrors.NewForbidden(resources[kind], m.Name, fmt.Errorf("unable to create new content in namespace %s because it is being terminated", m.Namespace))
		}
		if err := s.ensureNamespaceLocked(m.Namespace); err != nil {
			return nil, err
		}
	}
	m.ResourceVersion = ""
	if m.UID == "" {
		m.UID = s.newUID()
	}
	if m.CreationTimestamp.IsZero() {
		m.CreationTimestamp = s.now()
	}
	Default(obj)

	var tx *alloc.Tx
	if svc, ok := obj.(*corev1.Service); ok {
		var err error
		if tx, err = s.allocateCreate(svc); err != nil {
			return nil, err
		}
		defer tx.Revert() // no-op after Commit
	}
	if el := Validate(obj); len(el) > 0 {
		return nil, InvalidError(obj, el)
	}
	if err := s.checkEndpointAddressesLocked(obj); err != nil {
		return nil, err
	}
	canonicalize(obj)
	if tx != nil {
		tx.Commit()
	}
	s.commit(Added, kind, nil, obj)
	s.afterChangeLocked(kind, nil, obj)
	return obj, nil
}

func (s *Store) updateLocked(in runtime.Object, status bool) (runtime.Object, error) {
	kind := KindOf(in)
	if kind == "" {
		return nil, fmt.Errorf("clusterlab does not handle %T", in)
	}
	obj := in.DeepCopyObject()
	m := objectMeta(obj)
	if IsNamespaced(kind) {
		if m.Namespace == "" {
			m.Namespace = metav1.NamespaceDefault
		}
	} else {
		m.Namespace = ""
	}
	oldObj, ok := s.objs[kind][m.Namespace][m.Name]
	if !ok {
		return nil, notFound(kind, m.Name)
	}
	om := objectMeta(oldObj)
	switch m.ResourceVersion {
	case "":
		m.ResourceVersion = om.ResourceVersion
	case om.ResourceVersion:
	default:
		return nil, apierrors.NewConflict(resources[kind], m.Name,
			errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	}
	// System fields the client may have left out.
	if m.UID == "" {
		m.UID = om.UID
	}
	if m.CreationTimestamp.IsZero() {
		m.CreationTimestamp = om.CreationTimestamp
	}
	if m.DeletionTimestamp == nil {
		m.DeletionTimestamp, m.DeletionGracePeriodSeconds = om.DeletionTimestamp, om.DeletionGracePeriodSeconds
	}

	if status {
		if err := s.prepareStatusUpdate(kind, obj, oldObj); err != nil {
			return nil, err
		}
	} else {
		keepStatus(obj, oldObj)
	}
	Default(obj)

	var tx *alloc.Tx
	if svc, ok := obj.(*corev1.Service); ok && !status {
		var err error
		if tx, err = s.allocateUpdate(svc, oldObj.(*corev1.Service)); err != nil {
			return nil, err
		}
		defer tx.Revert()
	}
	var el field.ErrorList
	if status {
		el = validateStatusUpdate(obj, oldObj)
	} else {
		el = ValidateUpdate(obj, oldObj)
	}
	if len(el) > 0 {
		return nil, InvalidError(obj, el)
	}
	if err := s.checkEndpointAddressesLocked(obj); err != nil {
		return nil, err
	}
	canonicalize(obj)
	if unchanged(obj, oldObj) {
		return oldObj, nil // nothing changed: no write, no event (and nothing allocated)
	}
	if tx != nil {
		tx.Commit()
	}
	s.commit(Modified, kind, oldObj, obj)
	s.afterChangeLocked(kind, oldObj, obj)
	return obj, nil
}

// unchanged reports whether an update leaves the object as it was (semantic equality).
// A pod's status is compared first: a kubelet's status update differs there, and the
// walk over the whole object (its defaulted spec) would find that last.
func unchanged(obj, old runtime.Object) bool {
	if p, ok := obj.(*corev1.Pod); ok {
		if op, ok := old.(*corev1.Pod); ok && !apiequality.Semantic.DeepEqual(p.Status, op.Status) {
			return false
		}
	}
	return apiequality.Semantic.DeepEqual(obj, old)
}

// canonicalize normalizes a validated object as the API server's strategy
// does before storing it: Endpoints subsets are repacked (RepackSubsets).
func canonicalize(obj runtime.Object) {
	if ep, ok := obj.(*corev1.Endpoints); ok {
		ep.Subsets = RepackSubsets(ep.Subsets)
	}
}

// keepStatus copies the stored status into obj: the main resource does not
// write status.
func keepStatus(obj, old runtime.Object) {
	switch o := obj.(type) {
	case *corev1.Service:
		o.Status = *old.(*corev1.Service).Status.DeepCopy()
	case *corev1.Pod:
		o.Status = *old.(*corev1.Pod).Status.DeepCopy()
	case *corev1.Node:
		o.Status = *old.(*corev1.Node).Status.DeepCopy()
	case *corev1.Namespace:
		o.Status = *old.(*corev1.Namespace).Status.DeepCopy()
	}
}

// prepareStatusUpdate keeps everything but status from the stored object.
func (s *Store) prepareStatusUpdate(kind string, obj, old runtime.Object) error {
	meta := objectMeta(obj)
	rv := meta.ResourceVersion
	switch o := obj.(type) {
	case *corev1.Service:
		st := o.Status
		*o = *old.(*corev1.Service).DeepCopy()
		o.Status = st
	case *corev1.Pod:
		st := o.Status
		*o = *old.(*corev1.Pod).DeepCopy()
		o.Status = st
	case *corev1.Node:
		st := o.Status
		*o = *old.(*corev1.Node).DeepCopy()
		o.Status = st
	case *corev1.Namespace:
		st := o.Status
		*o = *old.(*corev1.Namespace).DeepCopy()
		o.Status = st
	default:
		return apierrors.NewMethodNotSupported(resources[kind], "updateStatus")
	}
	objectMeta(obj).ResourceVersion = rv
	return nil
}

func validateStatusUpdate(obj, old runtime.Object) field.ErrorList {
	switch o := obj.(type) {
	case *corev1.Service:
		return ValidateServiceStatus(o)
	case *corev1.Pod:
		return ValidatePodStatus(o)
	}
	return nil
}

func (s *Store) deleteLocked(kind, ns, name string) error {
	if !IsNamespaced(kind) {
		ns = ""
	} else if ns == "" {
		ns = metav1.NamespaceDefault
	}
	old, ok := s.objs[kind][ns][name]
	if !ok {
		if _, known := kinds[kind]; !known {
			return fmt.Errorf("clusterlab does not handle kind %q", kind)
		}
		return notFound(kind, name)
	}
	switch kind {
	case KindNamespace:
		switch name {
		case metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic:
			return apierrors.NewForbidden(resources[kind], name, errors.New("this namespace may not be deleted"))
		}
		// The namespace controller's work, done at once: contents first.
		for i := len(kindOrder) - 1; i >= 0; i-- {
			k := kindOrder[i]
			if !IsNamespaced(k) {
				continue
			}
			for _, o := range s.listInNamespaceLocked(k, name) {
				if err := s.deleteLocked(k, name, objectMeta(o).Name); err != nil && !apierrors.IsNotFound(err) {
					return err
				}
			}
		}
	case KindService:
		s.releaseService(old.(*corev1.Service))
	}
	s.commit(Deleted, kind, old, nil)
	s.afterChangeLocked(kind, old, nil)
	if kind == KindService {
		// The registry removes the service's Endpoints with it.
		if _, ok := s.objs[KindEndpoints][ns][name]; ok {
			return s.deleteLocked(KindEndpoints, ns, name)
		}
	}
	return nil
}

func (s *Store) listInNamespaceLocked(kind, ns string) []runtime.Object {
	names := make([]string, 0, len(s.objs[kind][ns]))
	for n := range s.objs[kind][ns] {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]runtime.Object, len(names))
	for i, n := range names {
		out[i] = s.objs[kind][ns][n]
	}
	return out
}

// checkEndpointAddressesLocked rejects hand-written Endpoints and
// EndpointSlices whose addresses are a Service's cluster IP: traffic to such
// an endpoint would loop back to the VIP. (A clusterlab rule; the real API
// server accepts them.) Slices made by the controllers are exempt.
func (s *Store) checkEndpointAddressesLocked(obj runtime.Object) error {
	var el field.ErrorList
	switch o := obj.(type) {
	case *corev1.Endpoints:
		for i, ss := range o.Subsets {
			for j, a := range ss.Addresses {
				if e := s.clusterIPUse(a.IP, field.NewPath("subsets").Index(i).Child("addresses").Index(j).Child("ip")); e != nil {
					el = append(el, e)
				}
			}
			for j, a := range ss.NotReadyAddresses {
				if e := s.clusterIPUse(a.IP, field.NewPath("subsets").Index(i).Child("notReadyAddresses").Index(j).Child("ip")); e != nil {
					el = append(el, e)
				}
			}
		}
	case *discoveryv1.EndpointSlice:
		switch o.Labels[discoveryv1.LabelManagedBy] {
		case EndpointSliceControllerName, MirroringControllerName:
			return nil
		}
		for i, ep := range o.Endpoints {
			for j, a := range ep.Addresses {
				if e := s.clusterIPUse(a, field.NewPath("endpoints").Index(i).Child("addresses").Index(j)); e != nil {
					el = append(el, e)
				}
			}
		}
	}
	return InvalidError(obj, el)
}

func (s *Store) clusterIPUse(ip string, p *field.Path) *field.Error {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return nil
	}
	a := s.allocs.ForIP(addr)
	if a == nil || !a.CIDR().Contains(addr) || !a.Has(addr) {
		return nil
	}
	for _, o := range s.listLocked(KindService) {
		svc := o.(*corev1.Service)
		for _, cip := range svc.Spec.ClusterIPs {
			if c, err := netip.ParseAddr(cip); err == nil && c == addr {
				return field.Invalid(p, ip, fmt.Sprintf("may not be the cluster IP of Service %q", ObjectKey(svc)))
			}
		}
	}
	return nil
}
