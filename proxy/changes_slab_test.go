package proxy

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestReplacedRecordsReleaseObjects checks that the records an Update replaces or
// drops keep nothing alive: they share a slab with records still in use, so a
// replaced Service's or EndpointSlice's record must be zeroed (its object and service
// ports released), while the records still in use keep theirs.
func TestReplacedRecordsReleaseObjects(t *testing.T) {
	tr := NewChangeTracker(corev1.IPv4Protocol, NodeConfig{Name: testNodeName})
	mk := func(name, ip string) *corev1.Service {
		return svc("ns", name, func(s *corev1.Service) {
			s.Spec.ClusterIP = ip
			s.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80}}
		})
	}
	mkSlice := func(name, ip string) *discoveryv1.EndpointSlice {
		return slice("ns", name, 1, func(s *discoveryv1.EndpointSlice) {
			s.Ports = []discoveryv1.EndpointPort{port("http", 80, corev1.ProtocolTCP)}
			s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{ip}}}
		})
	}
	a, b, c := mk("a", "172.30.0.1"), mk("b", "172.30.0.2"), mk("c", "172.30.0.3")
	sa, sb, sc := mkSlice("a", "10.0.0.1"), mkSlice("b", "10.0.0.2"), mkSlice("c", "10.0.0.3")
	if _, err := tr.Update([]*corev1.Service{a, b, c}, []*discoveryv1.EndpointSlice{sa, sb, sc}); err != nil {
		t.Fatal(err)
	}
	nn := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }
	sliceKey := func(s *discoveryv1.EndpointSlice) types.NamespacedName {
		return types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	}
	oldA, oldC, oldB := tr.svcs[nn("a")], tr.svcs[nn("c")], tr.svcs[nn("b")]
	oldSA, oldSC, oldSB := tr.sliceRecs[sliceKey(sa)], tr.sliceRecs[sliceKey(sc)], tr.sliceRecs[sliceKey(sb)]

	// a and its slice replaced (new objects), c and its slice gone, b unchanged.
	a2, sa2 := mk("a", "172.30.0.9"), mkSlice("a", "10.0.0.9")
	st, err := tr.Update([]*corev1.Service{a2, b}, []*discoveryv1.EndpointSlice{sa2, sb})
	if err != nil {
		t.Fatal(err)
	}
	for what, rec := range map[string]*svcRec{"replaced a": oldA, "gone c": oldC} {
		if rec.obj != nil || rec.ports != nil {
			t.Errorf("%s: the old service record still holds %v, %v", what, rec.obj, rec.ports)
		}
	}
	for what, rec := range map[string]*sliceRec{"replaced a": oldSA, "gone c": oldSC} {
		if rec.obj != nil {
			t.Errorf("%s: the old slice record still holds %v", what, rec.obj)
		}
	}
	if tr.svcs[nn("b")] != oldB || oldB.obj != b || len(oldB.ports) != 1 || tr.sliceRecs[sliceKey(sb)] != oldSB || oldSB.obj != sb {
		t.Errorf("b's records changed: %+v %+v", oldB, oldSB)
	}
	if rec := tr.svcs[nn("a")]; rec.obj != a2 || len(rec.ports) != 1 || tr.sliceRecs[sliceKey(sa2)].obj != sa2 {
		t.Errorf("a's new records: %+v", rec)
	}
	if len(st.Services) != 2 || len(st.Endpoints) != 2 || len(st.ServicePortsOf(nn("a"))) != 1 {
		t.Errorf("view: %d services, %d endpoint lists", len(st.Services), len(st.Endpoints))
	}
}
