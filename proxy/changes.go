package proxy

import (
	"fmt"
	"reflect"

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
type ChangeTracker struct {
	family corev1.IPFamily
	node   NodeConfig

	services  map[types.NamespacedName]ServicePortMap
	objects   map[types.NamespacedName]*corev1.Service
	slices    map[types.NamespacedName][]*discoveryv1.EndpointSlice
	endpoints map[types.NamespacedName]EndpointsMap
}

// NewChangeTracker returns a tracker for the node and family.
func NewChangeTracker(family corev1.IPFamily, node NodeConfig) *ChangeTracker {
	return &ChangeTracker{
		family:    family,
		node:      node,
		services:  map[types.NamespacedName]ServicePortMap{},
		objects:   map[types.NamespacedName]*corev1.Service{},
		slices:    map[types.NamespacedName][]*discoveryv1.EndpointSlice{},
		endpoints: map[types.NamespacedName]EndpointsMap{},
	}
}

// Family returns the tracker's IP family.
func (t *ChangeTracker) Family() corev1.IPFamily { return t.family }

// Update takes the complete current lists and returns the new view and its changes. On
// error (an object that does not parse) the tracker is left as it was. Objects the
// node's proxy does not watch (NodeConfig.Watches: the service-proxy-name and headless
// labels) are left out first, as kube-proxy's informers leave them out: an object that
// gains such a label is deleted from the view, and one that loses it is added.
//
// Objects are treated as immutable, as informer caches treat them: an object passed
// again as the same pointer is taken to be unchanged, so a change must come as a new
// object (a copy), not as an edit in place. Different pointers are compared by value.
func (t *ChangeTracker) Update(services []*corev1.Service, slices []*discoveryv1.EndpointSlice) (*SyncState, error) {
	// What the node's proxy does not watch (NodeConfig.WatchSelector) does not exist for it.
	services, slices = t.node.watched(services, slices)
	// Services.
	newServices := make(map[types.NamespacedName]ServicePortMap, len(services))
	newObjects := make(map[types.NamespacedName]*corev1.Service, len(services))
	for _, svc := range services {
		if svc == nil {
			continue
		}
		nn := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
		if _, dup := newServices[nn]; dup {
			return nil, fmt.Errorf("service %s: listed twice", nn)
		}
		newObjects[nn] = svc
		if old, ok := t.services[nn]; ok && t.objects[nn] == svc {
			newServices[nn] = old
			continue
		}
		m, err := ServicePortsForService(svc, t.family)
		if err != nil {
			return nil, err
		}
		t.node.selectServicePorts(m, []*corev1.Service{svc})
		newServices[nn] = m // nil for unproxied Services: kept so duplicates are caught
	}
	// EndpointSlices.
	groups, err := groupSlices(slices, t.family)
	if err != nil {
		return nil, err
	}
	newEndpoints := make(map[types.NamespacedName]EndpointsMap, len(groups))
	newSlices := make(map[types.NamespacedName][]*discoveryv1.EndpointSlice, len(groups))
	endpointsChanged := map[types.NamespacedName]bool{}
	for nn, list := range groups {
		if old, ok := t.slices[nn]; ok && sameSlices(old, list) {
			newEndpoints[nn] = t.endpoints[nn]
			newSlices[nn] = old
			continue
		}
		m, err := endpointsForService(nn, list, &t.node)
		if err != nil {
			return nil, err
		}
		newEndpoints[nn] = m
		newSlices[nn] = list
		endpointsChanged[nn] = true
	}
	for nn := range t.slices {
		if _, ok := groups[nn]; !ok {
			endpointsChanged[nn] = true
		}
	}

	st := &SyncState{
		Services:         make(ServicePortMap),
		Endpoints:        make(EndpointsMap),
		ServicesChanged:  map[types.NamespacedName]bool{},
		EndpointsChanged: endpointsChanged,
		Node:             &t.node,
	}
	for nn, m := range newServices {
		for k, v := range m {
			st.Services[k] = v
		}
		if old := t.services[nn]; !(len(old) == 0 && len(m) == 0) && !sameServicePorts(old, m) {
			st.ServicesChanged[nn] = true
		}
	}
	for nn, old := range t.services {
		if _, ok := newServices[nn]; !ok && len(old) > 0 {
			st.ServicesChanged[nn] = true
		}
	}
	for _, m := range newEndpoints {
		for k, v := range m {
			st.Endpoints[k] = v
		}
	}

	// Stale UDP state, for conntrack cleanup.
	for nn := range st.ServicesChanged {
		for spn, sp := range t.services[nn] {
			if _, still := newServices[nn][spn]; !still && sp.Protocol == corev1.ProtocolUDP {
				st.DeletedUDPServicePorts = append(st.DeletedUDPServicePorts, sp)
			}
		}
	}
	for nn := range endpointsChanged {
		oldMap, newMap := t.endpoints[nn], newEndpoints[nn]
		for spn, oldList := range oldMap {
			if spn.Protocol != corev1.ProtocolUDP {
				continue
			}
			for _, ep := range oldList {
				if !ep.Serving {
					continue
				}
				if !hasServing(newMap[spn], ep.String()) {
					st.DeletedUDPEndpoints = append(st.DeletedUDPEndpoints, ServiceEndpoint{Endpoint: ep.String(), ServicePortName: spn})
				}
			}
		}
		for spn, newList := range newMap {
			if spn.Protocol != corev1.ProtocolUDP {
				continue
			}
			if t.node.newlyActive(oldMap[spn], newList) {
				st.NewlyActiveUDPServices = append(st.NewlyActiveUDPServices, spn)
			}
		}
	}
	sortStale(st)

	// Commit.
	t.services = newServices
	t.objects = newObjects
	t.slices = newSlices
	t.endpoints = newEndpoints
	return st, nil
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
