package proxy

import (
	"fmt"
	"reflect"
	"runtime"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ServiceEndpoint names one endpoint ("ip:port") of one service port.
type ServiceEndpoint struct {
	Endpoint        string
	ServicePortName ServicePortName
}

// SyncState is what a proxy mode needs for one sync: the current view of every service
// port and its endpoints, and what changed since the previous sync (kube-proxy's
// UpdateServiceMapResult and UpdateEndpointsMapResult).
type SyncState struct {
	// Services and Endpoints are the current view.
	Services  ServicePortMap
	Endpoints EndpointsMap
	// ServicesChanged holds the Services whose service ports (as ServicePort values)
	// were added, changed or removed. EndpointsChanged holds the Services with an
	// EndpointSlice of this family added, changed or removed (kube-proxy compares the
	// slice objects, so a change that leaves the endpoint list as it was still counts).
	ServicesChanged  map[types.NamespacedName]bool
	EndpointsChanged map[types.NamespacedName]bool
	// DeletedUDPServicePorts are UDP service ports of the previous view that are gone.
	DeletedUDPServicePorts []*ServicePort
	// DeletedUDPEndpoints are UDP endpoints that were serving in the previous view and
	// are no longer present and serving.
	DeletedUDPEndpoints []ServiceEndpoint
	// NewlyActiveUDPServices are UDP service ports that went from no serving endpoint
	// to at least one.
	NewlyActiveUDPServices []ServicePortName
	// Node is the node the view was built for; its release decides how stale UDP
	// entries are cleaned (StaleConntrackFilters). Nil means the newest release.
	Node *NodeConfig

	// tracker and seq: the ChangeTracker that built the view and the number of its
	// Update (from 1); nil and 0 for NewSyncState.
	tracker *ChangeTracker
	seq     uint64
}

// Source returns the ChangeTracker that built the view and which of its successful
// Updates did (counted from 1), or nil and 0 for a view from NewSyncState. A consumer
// that caches per-Service work may trust ServicesChanged and EndpointsChanged to name
// every Service that differs from the previous view only when the tracker is the same
// and the number is one more than the view its cache was built from.
func (s *SyncState) Source() (*ChangeTracker, uint64) { return s.tracker, s.seq }

// ServicePortsOf returns the names of the Service's ports in the view, sorted
// (ServicePortName.Less): from a ChangeTracker's view without looking at the other
// Services (valid, like the view, until the tracker's next Update), else by scanning
// Services.
func (s *SyncState) ServicePortsOf(nn types.NamespacedName) []ServicePortName {
	var names []ServicePortName
	if s.tracker != nil {
		if rec := s.tracker.svcs[nn]; rec != nil {
			for n := range rec.ports {
				names = append(names, n)
			}
		}
	} else {
		for n := range s.Services {
			if n.NamespacedName == nn {
				names = append(names, n)
			}
		}
	}
	sortNames(names)
	return names
}

// Changed reports whether the Service's service ports or endpoints changed.
func (s *SyncState) Changed(nn types.NamespacedName) bool {
	return s.ServicesChanged[nn] || s.EndpointsChanged[nn]
}

// NewSyncState builds the view of the lists for the node and family without change
// tracking (every Service counts as changed), for one-off rendering. Only the objects
// the node's proxy watches count (NodeConfig.Watches).
func NewSyncState(services []*corev1.Service, slices []*discoveryv1.EndpointSlice, family corev1.IPFamily, node NodeConfig) (*SyncState, error) {
	services, slices = node.watched(services, slices)
	sp, err := BuildServicePortMap(services, family)
	if err != nil {
		return nil, err
	}
	em, err := BuildEndpointsMap(slices, family, &node)
	if err != nil {
		return nil, err
	}
	node.selectServicePorts(sp, services)
	st := &SyncState{Services: sp, Endpoints: em, ServicesChanged: map[types.NamespacedName]bool{}, EndpointsChanged: map[types.NamespacedName]bool{}, Node: &node}
	for name := range sp {
		st.ServicesChanged[name.NamespacedName] = true
	}
	return st, nil
}

// ChangeTracker turns successive complete lists of Services and EndpointSlices into
// SyncStates for one node and one IP family, as kube-proxy's ServiceChangeTracker and
// EndpointsChangeTracker do from watch events. It keeps the previous view; the first
// Update reports everything as changed.
//
// The work of an Update grows with what changed, not with the cluster: the lists are
// compared with the previous ones entry by entry (pointer equality at the same index),
// only the objects that differ are looked up, parsed and merged, and the view's maps
// are kept from sync to sync, the changed Services' entries replaced.
type ChangeTracker struct {
	family corev1.IPFamily
	node   NodeConfig

	// svcIn and sliceIn are the previous Update's lists, as passed (before the watch
	// filter): an entry equal to the previous one at the same index is unchanged.
	svcIn   []*corev1.Service
	sliceIn []*discoveryv1.EndpointSlice
	// svcs and sliceRecs hold every watched object of the previous lists by
	// namespace/name; each object's idx is its index in svcIn / sliceIn.
	svcs      map[types.NamespacedName]*svcRec
	sliceRecs map[types.NamespacedName]*sliceRec
	// groups are the slices of this family of each Service, sorted by name;
	// endpoints their merged endpoints, per service port (a list: a Service has few
	// ports, and a map per Service cost 10,000 maps in a first Update).
	groups    map[types.NamespacedName][]*discoveryv1.EndpointSlice
	endpoints map[types.NamespacedName][]portEndpoints
	// viewServices and viewEndpoints are the view: every SyncState's Services and
	// Endpoints, changed in place by each Update.
	viewServices  ServicePortMap
	viewEndpoints EndpointsMap
	// seq counts the successful Updates.
	seq uint64

	// health memoizes HealthView for the view of Update seq health.seq.
	health struct {
		mu    sync.Mutex
		seq   uint64
		ports map[types.NamespacedName]uint16
		local map[types.NamespacedName]int
	}
}

// HealthView returns st.Services.HealthCheckNodePorts() and
// st.Endpoints.LocalReadyEndpoints(). While st is its tracker's newest view (its maps
// not changed since), they are computed once and the same maps returned to every
// caller: nodes that share a view (kube-proxy's shared rules) ask for them once each.
// The maps are read only.
func (st *SyncState) HealthView() (map[types.NamespacedName]uint16, map[types.NamespacedName]int) {
	t := st.tracker
	if t == nil || st.seq != t.seq {
		return st.Services.HealthCheckNodePorts(), st.Endpoints.LocalReadyEndpoints()
	}
	h := &t.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seq != st.seq || h.ports == nil {
		h.seq, h.ports, h.local = st.seq, st.Services.HealthCheckNodePorts(), st.Endpoints.LocalReadyEndpoints()
	}
	return h.ports, h.local
}

type svcRec struct {
	obj   *corev1.Service
	idx   int
	ports ServicePortMap // nil for unproxied Services
}

type sliceRec struct {
	obj *discoveryv1.EndpointSlice
	idx int
	svc types.NamespacedName
	ok  bool // of this family, with a service-name label
}

// NewChangeTracker returns a tracker for the node and family.
func NewChangeTracker(family corev1.IPFamily, node NodeConfig) *ChangeTracker {
	return &ChangeTracker{
		family:        family,
		node:          node,
		svcs:          map[types.NamespacedName]*svcRec{},
		sliceRecs:     map[types.NamespacedName]*sliceRec{},
		groups:        map[types.NamespacedName][]*discoveryv1.EndpointSlice{},
		endpoints:     map[types.NamespacedName][]portEndpoints{},
		viewServices:  ServicePortMap{},
		viewEndpoints: EndpointsMap{},
	}
}

// Family returns the tracker's IP family.
func (t *ChangeTracker) Family() corev1.IPFamily { return t.family }

// diffIndexes returns the indexes of cur whose entry differs from prev's at the same
// index, and prev's entries that are not at the same index in cur.
func diffIndexes[T comparable](prev, cur []T) (changed []int, gone []T) {
	var zero T
	for i, x := range cur {
		if i < len(prev) {
			if prev[i] == x {
				continue
			}
			if prev[i] != zero {
				gone = append(gone, prev[i])
			}
		}
		changed = append(changed, i)
	}
	for i := len(cur); i < len(prev); i++ {
		if prev[i] != zero {
			gone = append(gone, prev[i])
		}
	}
	return changed, gone
}

// commitRecs applies an Update's records to cur and returns it: the gone keys are
// deleted, the new records put in. A record replaced or gone is zeroed: it sits in a
// slab with others still in use and must not keep its objects alive. Into an empty map
// (a first Update) next is taken whole rather than copied (nothing is gone then).
func commitRecs[R any](cur, next map[types.NamespacedName]*R, gone map[types.NamespacedName]bool) map[types.NamespacedName]*R {
	if len(cur) == 0 {
		return next
	}
	var zero R
	for k := range gone {
		*cur[k] = zero
		delete(cur, k)
	}
	for k, rec := range next {
		if old := cur[k]; old != nil {
			*old = zero
		}
		cur[k] = rec
	}
	return cur
}

// Update takes the complete current lists and returns the new view and its changes. On
// error (an object that does not parse) the tracker is left as it was. Objects the
// node's proxy does not watch (NodeConfig.Watches: the service-proxy-name and headless
// labels) are left out first, as kube-proxy's informers leave them out: an object that
// gains such a label is deleted from the view, and one that loses it is added.
//
// Objects are treated as immutable, as informer caches treat them: an object passed
// again as the same pointer is taken to be unchanged, so a change must come as a new
// object (a copy), not as an edit in place. Different pointers are compared by value.
// The returned SyncState's Services and Endpoints are the tracker's own maps, as
// kube-proxy's ServicePortMap and EndpointsMap are: valid until the next Update, which
// changes them in place (copying 10,000 services' entries would cost more than the rest
// of a partial sync); callers must not modify them.
func (t *ChangeTracker) Update(services []*corev1.Service, slices []*discoveryv1.EndpointSlice) (*SyncState, error) {
	// Services: the entries that differ from the previous list's at the same index.
	svcIdx, svcGone := diffIndexes(t.svcIn, services)
	newSvcs := make(map[types.NamespacedName]*svcRec, len(svcIdx)) // watched Services at changed indexes
	var flags *selectFlags                                         // the node's selectFlags, asked once
	// The records come from one slab sized for the changed indexes (it never grows, so
	// the pointers stay valid).
	svcSlab := make([]svcRec, 0, len(svcIdx))
	for _, i := range svcIdx {
		svc := services[i]
		// What the node's proxy does not watch (NodeConfig.WatchSelector) does not exist for it.
		if svc == nil || !t.node.WatchesService(svc.Labels) {
			continue
		}
		nn := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
		if _, dup := newSvcs[nn]; dup {
			return nil, fmt.Errorf("service %s: listed twice", nn)
		}
		// The previous object of that name still at its index is listed too.
		if old, ok := t.svcs[nn]; ok && old.idx < len(services) && services[old.idx] == old.obj {
			return nil, fmt.Errorf("service %s: listed twice", nn)
		}
		svcSlab = append(svcSlab, svcRec{obj: svc, idx: i})
		rec := &svcSlab[len(svcSlab)-1]
		newSvcs[nn] = rec
		if old, ok := t.svcs[nn]; ok && old.obj == svc {
			rec.ports = old.ports // moved in the list, unchanged
			continue
		}
		m, err := ServicePortsForService(svc, t.family)
		if err != nil {
			return nil, err
		}
		if len(m) > 0 {
			if flags == nil {
				f := t.node.selectFlags()
				flags = &f
			}
			for _, sp := range m {
				flags.selectServicePort(sp, svc)
			}
		}
		rec.ports = m
	}
	goneSvcs := map[types.NamespacedName]bool{}
	for _, svc := range svcGone {
		nn := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
		if old, ok := t.svcs[nn]; ok && old.obj == svc {
			if _, again := newSvcs[nn]; !again {
				goneSvcs[nn] = true
			}
		}
	}

	// EndpointSlices, the same way.
	sliceIdx, sliceGone := diffIndexes(t.sliceIn, slices)
	want := AddressTypeForFamily(t.family)
	newSlices := make(map[types.NamespacedName]*sliceRec, len(sliceIdx))
	sliceSlab := make([]sliceRec, 0, len(sliceIdx))                // as svcSlab
	affected := make(map[types.NamespacedName]bool, len(sliceIdx)) // Services whose slices changed
	for _, i := range sliceIdx {
		s := slices[i]
		if s == nil || !t.node.WatchesEndpointSlice(s.Labels) {
			continue
		}
		key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		if _, dup := newSlices[key]; dup {
			return nil, fmt.Errorf("endpointslice %s: listed twice", key)
		}
		if old, ok := t.sliceRecs[key]; ok && old.idx < len(slices) && slices[old.idx] == old.obj {
			return nil, fmt.Errorf("endpointslice %s: listed twice", key)
		}
		sliceSlab = append(sliceSlab, sliceRec{obj: s, idx: i})
		rec := &sliceSlab[len(sliceSlab)-1]
		if s.AddressType == want {
			rec.svc, rec.ok = SliceService(s)
		}
		newSlices[key] = rec
		if old, ok := t.sliceRecs[key]; ok && old.obj == s {
			continue // moved in the list, unchanged
		}
		if rec.ok {
			affected[rec.svc] = true
		}
		if old, ok := t.sliceRecs[key]; ok && old.ok {
			affected[old.svc] = true
		}
	}
	goneSlices := map[types.NamespacedName]bool{}
	for _, s := range sliceGone {
		key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		if old, ok := t.sliceRecs[key]; ok && old.obj == s {
			if _, again := newSlices[key]; !again {
				goneSlices[key] = true
				if old.ok {
					affected[old.svc] = true
				}
			}
		}
	}
	added := make(map[types.NamespacedName][]*discoveryv1.EndpointSlice, len(affected))
	for _, rec := range newSlices {
		if rec.ok {
			added[rec.svc] = append(added[rec.svc], rec.obj)
		}
	}
	newGroups := make(map[types.NamespacedName][]*discoveryv1.EndpointSlice, len(affected))
	newEndpoints := make(map[types.NamespacedName][]portEndpoints, len(affected))
	endpointsChanged := make(map[types.NamespacedName]bool, len(affected))
	var jobs []endpointsJob // the Services whose endpoints are computed again
	for nn := range affected {
		old := t.groups[nn]
		list := added[nn] // a list of this Update's own: kept as it is when old is empty
		if len(old) > 0 {
			list = nil
			for _, s := range old {
				key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
				if _, changed := newSlices[key]; changed || goneSlices[key] {
					continue
				}
				list = append(list, s)
			}
			list = append(list, added[nn]...)
		}
		sortSlices(list)
		if len(old) > 0 && sameSlices(old, list) {
			continue
		}
		newGroups[nn] = list
		if len(list) == 0 {
			if len(old) > 0 {
				endpointsChanged[nn] = true
			}
			continue
		}
		jobs = append(jobs, endpointsJob{nn: nn, list: list})
	}
	if err := computeEndpoints(jobs, &t.node); err != nil {
		return nil, err
	}
	for _, j := range jobs {
		newEndpoints[j.nn] = j.eps
		endpointsChanged[j.nn] = true
	}

	// The new view: the previous one with the changed Services' entries replaced (no
	// error can happen from here on). A first Update sizes the maps it fills (and
	// takes this Update's maps as the tracker's: see Commit).
	if len(t.svcs) == 0 && len(newSvcs) > 0 {
		n := 0
		for _, rec := range newSvcs {
			n += len(rec.ports)
		}
		t.viewServices = make(ServicePortMap, n)
	}
	if len(t.sliceRecs) == 0 && len(newSlices) > 0 {
		n := 0
		for _, m := range newEndpoints {
			n += len(m)
		}
		t.viewEndpoints = make(EndpointsMap, n)
	}
	st := &SyncState{
		Services:         t.viewServices,
		Endpoints:        t.viewEndpoints,
		ServicesChanged:  make(map[types.NamespacedName]bool, len(newSvcs)),
		EndpointsChanged: endpointsChanged,
		Node:             &t.node,
		tracker:          t,
		seq:              t.seq + 1,
	}
	for nn, rec := range newSvcs {
		var old ServicePortMap
		if o, ok := t.svcs[nn]; ok {
			old = o.ports
		}
		if old, m := old, rec.ports; !(len(old) == 0 && len(m) == 0) && !sameServicePorts(old, m) {
			st.ServicesChanged[nn] = true
		}
		for k := range old {
			delete(st.Services, k)
		}
		for k, v := range rec.ports {
			st.Services[k] = v
		}
	}
	for nn := range goneSvcs {
		old := t.svcs[nn].ports
		if len(old) > 0 {
			st.ServicesChanged[nn] = true
		}
		for k := range old {
			delete(st.Services, k)
		}
	}
	for nn := range endpointsChanged {
		for _, pl := range t.endpoints[nn] {
			delete(st.Endpoints, pl.name)
		}
		for _, pl := range newEndpoints[nn] {
			st.Endpoints[pl.name] = pl.eps
		}
	}

	// Stale UDP state, for conntrack cleanup.
	for nn := range st.ServicesChanged {
		var now ServicePortMap
		if rec, ok := newSvcs[nn]; ok {
			now = rec.ports
		}
		for spn, sp := range t.svcs[nn].portsOrNil() {
			if _, still := now[spn]; !still && sp.Protocol == corev1.ProtocolUDP {
				st.DeletedUDPServicePorts = append(st.DeletedUDPServicePorts, sp)
			}
		}
	}
	for nn := range endpointsChanged {
		oldLists, newLists := t.endpoints[nn], newEndpoints[nn]
		for _, old := range oldLists {
			spn := old.name
			if spn.Protocol != corev1.ProtocolUDP {
				continue
			}
			for _, ep := range old.eps {
				if !ep.Serving {
					continue
				}
				if !hasServing(portEndpointsOf(newLists, spn), ep.String()) {
					st.DeletedUDPEndpoints = append(st.DeletedUDPEndpoints, ServiceEndpoint{Endpoint: ep.String(), ServicePortName: spn})
				}
			}
		}
		for _, cur := range newLists {
			spn := cur.name
			if spn.Protocol != corev1.ProtocolUDP {
				continue
			}
			if t.node.newlyActive(portEndpointsOf(oldLists, spn), cur.eps) {
				st.NewlyActiveUDPServices = append(st.NewlyActiveUDPServices, spn)
			}
		}
	}
	sortStale(st)

	// Commit. Into an empty map (a first Update) this Update's map is taken whole
	// rather than copied: nothing is gone then, and newEndpoints has no key outside
	// endpointsChanged.
	// The records replaced or gone are zeroed: they sit in a slab with others still in
	// use, and must not keep their objects alive.
	t.svcs = commitRecs(t.svcs, newSvcs, goneSvcs)
	t.sliceRecs = commitRecs(t.sliceRecs, newSlices, goneSlices)
	if len(t.groups) == 0 {
		t.groups = newGroups
	}
	for nn, list := range newGroups {
		if len(list) == 0 {
			delete(t.groups, nn)
		} else {
			t.groups[nn] = list
		}
	}
	if len(t.endpoints) == 0 {
		t.endpoints = newEndpoints
	} else {
		for nn := range endpointsChanged {
			if m, ok := newEndpoints[nn]; ok {
				t.endpoints[nn] = m
			} else {
				delete(t.endpoints, nn)
			}
		}
	}
	t.svcIn = append(t.svcIn[:0], services...)
	t.sliceIn = append(t.sliceIn[:0], slices...)
	t.seq = st.seq
	return st, nil
}

func (r *svcRec) portsOrNil() ServicePortMap {
	if r == nil {
		return nil
	}
	return r.ports
}

// portEndpointsOf returns the endpoints of the service port in lists, nil if none.
func portEndpointsOf(lists []portEndpoints, spn ServicePortName) []*Endpoint {
	for _, pl := range lists {
		if pl.name == spn {
			return pl.eps
		}
	}
	return nil
}

func sameSlices(a, b []*discoveryv1.EndpointSlice) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && !reflect.DeepEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

func sameServicePorts(a, b ServicePortMap) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || (v != w && !reflect.DeepEqual(v, w)) {
			return false
		}
	}
	return true
}

func hasServing(list []*Endpoint, s string) bool {
	for _, ep := range list {
		if ep.String() == s {
			return ep.Serving
		}
	}
	return false
}

func countServing(list []*Endpoint) int {
	n := 0
	for _, ep := range list {
		if ep.Serving {
			n++
		}
	}
	return n
}

// endpointsJob is one Service's endpoints to compute from its slices (list): eps, or
// err.
type endpointsJob struct {
	nn   types.NamespacedName
	list []*discoveryv1.EndpointSlice
	eps  []portEndpoints
	err  error
}

// parallelEndpointsMin is the least number of Services whose endpoints an Update
// computes in more than one goroutine (a first sync of a large cluster). A variable
// for tests.
var parallelEndpointsMin = 2048

// computeEndpoints computes each job's endpoints (portEndpointsForService, which
// depends only on the job's slices and the node), sharing many jobs among up to
// GOMAXPROCS goroutines. It returns the error of the first job in jobs that has one.
func computeEndpoints(jobs []endpointsJob, node *NodeConfig) error {
	run := func(jobs []endpointsJob) {
		for i := range jobs {
			j := &jobs[i]
			j.eps, j.err = portEndpointsForService(j.nn, j.list, node)
		}
	}
	if n := min(runtime.GOMAXPROCS(0), 8); n > 1 && len(jobs) >= parallelEndpointsMin {
		per := (len(jobs) + n - 1) / n
		var wg sync.WaitGroup
		for k := per; k < len(jobs); k += per {
			part := jobs[k:min(k+per, len(jobs))]
			wg.Go(func() { run(part) })
		}
		run(jobs[:per])
		wg.Wait()
	} else {
		run(jobs)
	}
	for _, j := range jobs {
		if j.err != nil {
			return j.err
		}
	}
	return nil
}
