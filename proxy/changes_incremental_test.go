package proxy

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"
)

// refTracker is the ChangeTracker as it was before it became incremental: every
// Update rebuilds the whole view from the lists. TestChangeTrackerIncremental checks
// the incremental tracker against it.
type refTracker struct {
	family corev1.IPFamily
	node   NodeConfig

	services  map[types.NamespacedName]ServicePortMap
	objects   map[types.NamespacedName]*corev1.Service
	slices    map[types.NamespacedName][]*discoveryv1.EndpointSlice
	endpoints map[types.NamespacedName]EndpointsMap
}

// NewrefTracker returns a tracker for the node and family.
func newRefTracker(family corev1.IPFamily, node NodeConfig) *refTracker {
	return &refTracker{
		family:    family,
		node:      node,
		services:  map[types.NamespacedName]ServicePortMap{},
		objects:   map[types.NamespacedName]*corev1.Service{},
		slices:    map[types.NamespacedName][]*discoveryv1.EndpointSlice{},
		endpoints: map[types.NamespacedName]EndpointsMap{},
	}
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
func (t *refTracker) Update(services []*corev1.Service, slices []*discoveryv1.EndpointSlice) (*SyncState, error) {
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

// TestChangeTrackerIncremental runs random sequences of lists through the incremental
// ChangeTracker and through refTracker (the whole view rebuilt on every Update): the
// same failures, views, changed sets and stale UDP state. The lists keep, copy (equal objects under new pointers),
// replace, move, drop, add and duplicate entries; some objects are not watched (another
// proxy's label, headless), of the other family, unlabelled or do not parse.
func TestChangeTrackerIncremental(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		node := NodeConfig{Name: testNodeName}
		inc := NewChangeTracker(corev1.IPv4Protocol, node)
		ref := newRefTracker(corev1.IPv4Protocol, node)
		var services []*corev1.Service
		var slices []*discoveryv1.EndpointSlice
		steps := rapid.IntRange(1, 12).Draw(rt, "steps")
		for step := 0; step < steps; step++ {
			services = editList(rt, fmt.Sprint("svc", step), services, genService, func(s *corev1.Service) *corev1.Service { return s.DeepCopy() }, renameObject[corev1.Service])
			slices = editList(rt, fmt.Sprint("slice", step), slices, genSlice, func(s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice { return s.DeepCopy() }, renameObject[discoveryv1.EndpointSlice])
			got, gotErr := inc.Update(services, slices)
			want, wantErr := ref.Update(services, slices)
			// With several bad objects in one list the two may name different ones
			// first (the reference reads slice groups in map order).
			if (gotErr == nil) != (wantErr == nil) {
				rt.Fatalf("step %d: error %v, reference %v", step, gotErr, wantErr)
			}
			if gotErr != nil {
				continue
			}
			if g, w := dumpState(got), dumpState(want); g != w {
				rt.Fatalf("step %d: view\n%s\nreference\n%s", step, g, w)
			}
		}
	})
}

// dumpState prints a SyncState, values compared through reflect.DeepEqual's view.
func dumpState(st *SyncState) string {
	s := fmt.Sprintf("changed %s | %s\n", changedNames(st.ServicesChanged), changedNames(st.EndpointsChanged))
	for _, n := range st.Services.SortedNames() {
		s += fmt.Sprintf("svc %s %+v\n", n, *st.Services[n])
	}
	names := make([]ServicePortName, 0, len(st.Endpoints))
	for n := range st.Endpoints {
		names = append(names, n)
	}
	sortNames(names)
	for _, n := range names {
		s += fmt.Sprintf("eps %s:", n)
		for _, e := range st.Endpoints[n] {
			s += fmt.Sprintf(" %+v", *e)
		}
		s += "\n"
	}
	for _, sp := range st.DeletedUDPServicePorts {
		s += fmt.Sprintf("deleted udp port %+v\n", *sp)
	}
	s += fmt.Sprintf("deleted udp eps %v\nnewly active %v\n", st.DeletedUDPEndpoints, st.NewlyActiveUDPServices)
	return s
}

// editList returns a new list made from the old one: each entry kept, copied,
// replaced or dropped, then new entries inserted, entries duplicated or moved.
func editList[T any](rt *rapid.T, label string, old []*T, gen func(*rapid.T, string) *T, cp func(*T) *T, rename func(dst, src *T)) []*T {
	out := make([]*T, 0, len(old)+4)
	for i, x := range old {
		switch rapid.IntRange(0, 9).Draw(rt, fmt.Sprintf("%s-op%d", label, i)) {
		case 0:
			// dropped
		case 1:
			out = append(out, cp(x))
		case 2:
			out = append(out, gen(rt, fmt.Sprintf("%s-new%d", label, i)))
		default:
			out = append(out, x)
		}
	}
	for i, n := 0, rapid.IntRange(0, 4).Draw(rt, label+"-adds"); i < n; i++ {
		at := rapid.IntRange(0, len(out)).Draw(rt, fmt.Sprintf("%s-at%d", label, i))
		var x *T
		if len(out) > 0 && rapid.IntRange(0, 5).Draw(rt, fmt.Sprintf("%s-dup%d", label, i)) == 0 {
			x = out[rapid.IntRange(0, len(out)-1).Draw(rt, fmt.Sprintf("%s-dupof%d", label, i))]
		} else if rapid.IntRange(0, 9).Draw(rt, fmt.Sprintf("%s-nil%d", label, i)) == 0 {
			x = nil
		} else if src := out[rapid.IntRange(0, len(out)).Draw(rt, fmt.Sprintf("%s-namesake%d", label, i))%max(len(out), 1):]; len(src) > 0 && src[0] != nil && rapid.Bool().Draw(rt, fmt.Sprintf("%s-rename%d", label, i)) {
			// A new object named as one already listed.
			x = gen(rt, fmt.Sprintf("%s-add%d", label, i))
			rename(x, src[0])
		} else {
			x = gen(rt, fmt.Sprintf("%s-add%d", label, i))
		}
		out = append(out[:at], append([]*T{x}, out[at:]...)...)
	}
	if len(out) > 1 && rapid.IntRange(0, 4).Draw(rt, label+"-swap") == 0 {
		i := rapid.IntRange(0, len(out)-1).Draw(rt, label+"-swapi")
		j := rapid.IntRange(0, len(out)-1).Draw(rt, label+"-swapj")
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// renameObject gives dst src's namespace and name.
func renameObject[T any](dst, src *T) {
	d, s := any(dst).(metav1.Object), any(src).(metav1.Object)
	d.SetNamespace(s.GetNamespace())
	d.SetName(s.GetName())
}

var incNames = []string{"a", "b", "c", "d", "e"}

func genLabels(rt *rapid.T, label string) map[string]string {
	l := map[string]string{}
	switch rapid.IntRange(0, 9).Draw(rt, label+"-watch") {
	case 0:
		l[LabelServiceProxyName] = "other"
	case 1:
		l[LabelHeadless] = ""
	}
	return l
}

func genService(rt *rapid.T, label string) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{
		Namespace: rapid.SampledFrom([]string{"ns1", "ns2"}).Draw(rt, label+"-ns"),
		Name:      rapid.SampledFrom(incNames).Draw(rt, label+"-name"),
		Labels:    genLabels(rt, label),
	}}
	ip := fmt.Sprintf("172.30.0.%d", rapid.IntRange(1, 3).Draw(rt, label+"-ip"))
	switch rapid.IntRange(0, 9).Draw(rt, label+"-ipkind") {
	case 0:
		ip = corev1.ClusterIPNone
	case 1:
		ip = "not-an-ip"
	case 2:
		ip = "fd00::1"
	}
	s.Spec.ClusterIP = ip
	s.Spec.ClusterIPs = []string{ip}
	for i, n := 0, rapid.IntRange(0, 2).Draw(rt, label+"-ports"); i < n; i++ {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{
			Name:     fmt.Sprint("p", i),
			Port:     int32(rapid.IntRange(80, 81).Draw(rt, fmt.Sprintf("%s-port%d", label, i))),
			Protocol: rapid.SampledFrom([]corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}).Draw(rt, fmt.Sprintf("%s-proto%d", label, i)),
		})
	}
	return s
}

func genSlice(rt *rapid.T, label string) *discoveryv1.EndpointSlice {
	l := genLabels(rt, label)
	if rapid.IntRange(0, 9).Draw(rt, label+"-unlabelled") != 0 {
		l[discoveryv1.LabelServiceName] = rapid.SampledFrom(incNames).Draw(rt, label+"-svc")
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: rapid.SampledFrom([]string{"ns1", "ns2"}).Draw(rt, label+"-ns"),
			Name:      fmt.Sprint("s", rapid.IntRange(0, 5).Draw(rt, label+"-name")),
			Labels:    l,
		},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	if rapid.IntRange(0, 9).Draw(rt, label+"-v6") == 0 {
		s.AddressType = discoveryv1.AddressTypeIPv6
	}
	for i, n := 0, rapid.IntRange(0, 2).Draw(rt, label+"-ports"); i < n; i++ {
		s.Ports = append(s.Ports, port(fmt.Sprint("p", i), 8080, rapid.SampledFrom([]corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}).Draw(rt, fmt.Sprintf("%s-proto%d", label, i))))
	}
	for i, n := 0, rapid.IntRange(0, 3).Draw(rt, label+"-eps"); i < n; i++ {
		ip := fmt.Sprintf("10.0.0.%d", rapid.IntRange(1, 4).Draw(rt, fmt.Sprintf("%s-ep%d", label, i)))
		if rapid.IntRange(0, 19).Draw(rt, fmt.Sprintf("%s-bad%d", label, i)) == 0 {
			ip = "bad"
		}
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{ip},
			Conditions: discoveryv1.EndpointConditions{
				Ready:       ptr.To(rapid.Bool().Draw(rt, fmt.Sprintf("%s-ready%d", label, i))),
				Serving:     ptr.To(rapid.Bool().Draw(rt, fmt.Sprintf("%s-serving%d", label, i))),
				Terminating: ptr.To(rapid.Bool().Draw(rt, fmt.Sprintf("%s-term%d", label, i))),
			},
			NodeName: ptr.To(rapid.SampledFrom([]string{testNodeName, "other"}).Draw(rt, fmt.Sprintf("%s-node%d", label, i))),
		})
	}
	return s
}

// BenchmarkChangeTrackerPartial10kServices measures the tracker's Update after one
// Service's EndpointSlice changed, with 10,000 Services × 10 endpoints in place (the
// tracker's share of BenchmarkPartialSync10kServices in proxy/iptables).
func BenchmarkChangeTrackerPartial10kServices(b *testing.B) {
	services, slices := benchTrackerCluster()
	tr := NewChangeTracker(corev1.IPv4Protocol, NodeConfig{Name: testNodeName})
	if _, err := tr.Update(services, slices); err != nil {
		b.Fatal(err)
	}
	alt := append([]*discoveryv1.EndpointSlice(nil), slices...)
	alt[17] = slices[17].DeepCopy()
	alt[17].Endpoints = alt[17].Endpoints[1:]
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		in := slices
		if i%2 == 0 {
			in = alt
		}
		i++
		st, err := tr.Update(services, in)
		if err != nil {
			b.Fatal(err)
		}
		if len(st.EndpointsChanged) != 1 || len(st.Services) != 10000 {
			b.Fatalf("%d services changed, %d service ports", len(st.EndpointsChanged), len(st.Services))
		}
	}
}

// BenchmarkChangeTrackerFirst10kServices measures a new tracker's first Update of
// 10,000 Services × 10 endpoints (the tracker's share of a Proxier's first full sync).
func BenchmarkChangeTrackerFirst10kServices(b *testing.B) {
	services, slices := benchTrackerCluster()
	b.ReportAllocs()
	for b.Loop() {
		st, err := NewChangeTracker(corev1.IPv4Protocol, NodeConfig{Name: testNodeName}).Update(services, slices)
		if err != nil {
			b.Fatal(err)
		}
		if len(st.Services) != 10000 || len(st.Endpoints) != 10000 {
			b.Fatalf("%d service ports, %d endpoint lists", len(st.Services), len(st.Endpoints))
		}
	}
}

// benchTrackerCluster is 10,000 ClusterIP Services with one port and one
// EndpointSlice of 10 endpoints each.
func benchTrackerCluster() ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	var services []*corev1.Service
	var slices []*discoveryv1.EndpointSlice
	for i := range 10000 {
		name := fmt.Sprintf("svc%05d", i)
		ip := fmt.Sprintf("172.30.%d.%d", i/250, i%250+1)
		services = append(services, svc("ns", name, func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = ip, []string{ip}
			s.Spec.Ports = []corev1.ServicePort{{Name: "p", Port: 80, Protocol: corev1.ProtocolTCP}}
		}))
		slices = append(slices, slice("ns", name, 0, func(s *discoveryv1.EndpointSlice) {
			s.Ports = []discoveryv1.EndpointPort{port("p", 8080, corev1.ProtocolTCP)}
			for j := range 10 {
				s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1)}})
			}
		}))
	}
	return services, slices
}
