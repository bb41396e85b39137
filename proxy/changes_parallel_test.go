package proxy

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"
)

// TestParallelEndpointsSameView: an Update computing the changed Services' endpoints
// in several goroutines (computeEndpoints) gives the view one computing them in order
// gives, sync after sync, and the same error for a slice with a bad address.
func TestParallelEndpointsSameView(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 40).Draw(rt, "services")
		var svcs []*corev1.Service
		var slices []*discoveryv1.EndpointSlice
		for i := range n {
			name := fmt.Sprintf("s%d", i)
			svcs = append(svcs, svc("ns", name, func(s *corev1.Service) {
				s.Spec.ClusterIP = fmt.Sprintf("172.30.0.%d", i+1)
				s.Spec.Ports = []corev1.ServicePort{{Name: "p", Port: 80}, {Name: "q", Port: 53, Protocol: corev1.ProtocolUDP}}
			}))
			for k := rapid.IntRange(0, 2).Draw(rt, "slices"); k > 0; k-- {
				slices = append(slices, slice("ns", name, k, func(s *discoveryv1.EndpointSlice) {
					s.Ports = []discoveryv1.EndpointPort{port("p", 8080, corev1.ProtocolTCP), port("q", 53, corev1.ProtocolUDP)}
					for e := rapid.IntRange(0, 5).Draw(rt, "endpoints"); e > 0; e-- {
						s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
							Addresses:  []string{fmt.Sprintf("10.0.%d.%d", i, rapid.IntRange(1, 6).Draw(rt, "ip"))},
							NodeName:   ptr.To(rapid.SampledFrom([]string{testNodeName, "other"}).Draw(rt, "node")),
							Conditions: discoveryv1.EndpointConditions{Terminating: ptr.To(rapid.Bool().Draw(rt, "terminating"))},
							Hints:      &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z"}}},
						})
					}
				}))
			}
		}
		serial := NewChangeTracker(corev1.IPv4Protocol, NodeConfig{Name: testNodeName})
		parallel := NewChangeTracker(corev1.IPv4Protocol, NodeConfig{Name: testNodeName})
		update := func(tr *ChangeTracker, min int) (*SyncState, error) {
			old := parallelEndpointsMin
			parallelEndpointsMin = min
			defer func() { parallelEndpointsMin = old }()
			return tr.Update(svcs, slices)
		}
		for k := range 3 {
			if k > 0 && len(slices) > 0 {
				// Change some slices: a new endpoint, and now and then a bad address.
				for c := rapid.IntRange(1, 3).Draw(rt, "changes"); c > 0; c-- {
					i := rapid.IntRange(0, len(slices)-1).Draw(rt, "changed")
					s := slices[i].DeepCopy()
					ip := fmt.Sprintf("10.9.%d.%d", k, c)
					if rapid.IntRange(0, 9).Draw(rt, "bad") == 0 {
						ip = "10.9.x"
					}
					s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}})
					slices[i] = s
				}
			}
			sst, serr := update(serial, 1<<30)
			pst, perr := update(parallel, 1)
			if fmt.Sprint(serr) != fmt.Sprint(perr) {
				rt.Fatalf("sync %d: error in order %v, in parallel %v", k, serr, perr)
			}
			if serr != nil {
				return
			}
			if !reflect.DeepEqual(sst.Endpoints, pst.Endpoints) || !reflect.DeepEqual(sst.EndpointsChanged, pst.EndpointsChanged) ||
				!reflect.DeepEqual(sst.ServicesChanged, pst.ServicesChanged) {
				rt.Fatalf("sync %d: the views differ:\nin order: %v %v\nparallel: %v %v", k, sst.Endpoints, sst.EndpointsChanged, pst.Endpoints, pst.EndpointsChanged)
			}
		}
	})
}
