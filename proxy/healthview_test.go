package proxy

import (
	"fmt"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"
)

// TestPropHealthView: across a sequence of Updates, HealthView of the newest view (asked
// twice, the second answer memoized) and of older views (whose maps later Updates
// changed in place) is what HealthCheckNodePorts and LocalReadyEndpoints compute from
// the view's maps at the time of asking.
func TestPropHealthView(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tr := NewChangeTracker(corev1.IPv4Protocol, NodeConfig{Name: testNodeName})
		var old []*SyncState
		check := func(when string, st *SyncState) {
			ports, local := st.HealthView()
			if want := st.Services.HealthCheckNodePorts(); !maps.Equal(ports, want) {
				t.Fatalf("%s: ports %v, want %v", when, ports, want)
			}
			if want := st.Endpoints.LocalReadyEndpoints(); !maps.Equal(local, want) {
				t.Fatalf("%s: local %v, want %v", when, local, want)
			}
		}
		steps := rapid.IntRange(1, 12).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			var svcs []*corev1.Service
			var slices []*discoveryv1.EndpointSlice
			for k := 0; k < 3; k++ {
				if !rapid.Bool().Draw(t, "svc") {
					continue
				}
				lb := rapid.Bool().Draw(t, "lbLocal")
				svcs = append(svcs, svc("ns", fmt.Sprintf("s%d", k), func(s *corev1.Service) {
					s.Spec.ClusterIP = fmt.Sprintf("172.30.0.%d", 10+k)
					s.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}
					if lb {
						s.Spec.Type = corev1.ServiceTypeLoadBalancer
						s.Spec.Ports[0].NodePort = int32(30080 + k)
						s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
						s.Spec.HealthCheckNodePort = int32(32000 + rapid.IntRange(0, 2).Draw(t, "hc"))
					}
				}))
				n := rapid.IntRange(0, 4).Draw(t, "endpoints")
				slices = append(slices, slice("ns", fmt.Sprintf("s%d", k), 1, func(s *discoveryv1.EndpointSlice) {
					s.Ports = []discoveryv1.EndpointPort{port("http", 8080, corev1.ProtocolTCP)}
					for e := 0; e < n; e++ {
						node := rapid.SampledFrom([]string{testNodeName, "other"}).Draw(t, "node")
						s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
							Addresses:  []string{fmt.Sprintf("10.0.%d.%d", k, rapid.IntRange(1, 3).Draw(t, "ip"))},
							NodeName:   ptr.To(node),
							Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(rapid.Bool().Draw(t, "ready"))},
						})
					}
				}))
			}
			st, err := tr.Update(svcs, slices)
			if err != nil {
				t.Fatal(err)
			}
			newestFirst := rapid.Bool().Draw(t, "newestFirst")
			if newestFirst {
				check(fmt.Sprintf("step %d", i), st)
			}
			for j, o := range old {
				check(fmt.Sprintf("step %d, older view %d", i, j), o)
			}
			check(fmt.Sprintf("step %d, newest", i), st)
			check(fmt.Sprintf("step %d, newest again", i), st)
			old = append(old, st)
		}
	})
}
