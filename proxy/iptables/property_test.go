package iptables

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/internal/rapiddraw"
)

// genCluster draws a small cluster: up to five Services of every type and policy, and
// EndpointSlices (also for Services that do not exist) with random conditions and nodes.
func genCluster(t *rapid.T) ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	var services []*corev1.Service
	var slices []*discoveryv1.EndpointSlice
	types := []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer}
	ports := []corev1.ServicePort{{Name: "p80", Port: 80, Protocol: corev1.ProtocolTCP}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}
	for i := 0; i < 5; i++ {
		name := fmt.Sprintf("svc%d", i)
		if rapid.Bool().Draw(t, "exists") {
			typ := rapid.SampledFrom(types).Draw(t, "type")
			s := mkService("ns", name, fmt.Sprintf("172.30.0.%d", 10+i), nil)
			s.Spec.Type = typ
			n := rapid.IntRange(1, 2).Draw(t, "ports")
			for j := 0; j < n; j++ {
				p := ports[j]
				if typ != corev1.ServiceTypeClusterIP {
					p.NodePort = int32(30000 + 10*i + j)
				}
				s.Spec.Ports = append(s.Spec.Ports, p)
			}
			if rapid.Bool().Draw(t, "etpLocal") {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = int32(32000 + i)
			}
			if rapid.Bool().Draw(t, "itpLocal") {
				s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
			}
			if rapid.Bool().Draw(t, "affinity") {
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			}
			if rapid.Bool().Draw(t, "externalIP") {
				s.Spec.ExternalIPs = []string{fmt.Sprintf("192.168.99.%d", i)}
			}
			if typ == corev1.ServiceTypeLoadBalancer && rapid.Bool().Draw(t, "ingress") {
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("1.2.3.%d", i)}}
				if rapid.Bool().Draw(t, "ranges") {
					s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/25", "192.168.0.0/24"}
				}
			}
			services = append(services, s)
		}
		nSlices := rapid.IntRange(0, 2).Draw(t, "slices")
		for k := 0; k < nSlices; k++ {
			sl := mkSlice("ns", name, k, "p80", 8080, corev1.ProtocolTCP)
			sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: ptr.To("dns"), Port: ptr.To[int32](5353), Protocol: ptr.To(corev1.ProtocolUDP)})
			nEps := rapid.IntRange(0, 4).Draw(t, "endpoints")
			for e := 0; e < nEps; e++ {
				sl.Endpoints = append(sl.Endpoints, drawEndpoint(t, i))
			}
			slices = append(slices, sl)
		}
	}
	return services, slices
}

// drawEndpoint draws an endpoint of Service i: one of six addresses, on this node,
// another or none, ready, serving-terminating, terminating or not ready.
func drawEndpoint(t *rapid.T, i int) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.0.%d.%d", i, rapid.IntRange(1, 6).Draw(t, "host"))}}
	rapiddraw.EndpointPlacement(t, &ep, testNodeName)
	return ep
}

// Property: whatever sequence of states a node goes through, partial syncs leave it
// exactly as one full sync of the last state leaves a fresh node, and every restore is
// accepted by the fake (no jump to a missing chain, no busy chain deleted).
func TestPartialSyncsConverge(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		cfg := upstreamConfig(corev1.IPv4Protocol)
		ipt := newFakeIPT()
		p, err := NewProxier(ipt, nil, cfg)
		if err != nil {
			rt.Fatal(err)
		}
		steps := rapid.IntRange(1, 5).Draw(rt, "steps")
		var services []*corev1.Service
		var slices []*discoveryv1.EndpointSlice
		for s := 0; s < steps; s++ {
			services, slices = genCluster(rt)
			if _, err := p.Sync(ctx, services, slices); err != nil {
				rt.Fatalf("step %d: %v", s, err)
			}
		}
		fresh := newFakeIPT()
		fp, _ := NewProxier(fresh, nil, cfg)
		if _, err := fp.Sync(ctx, services, slices); err != nil {
			rt.Fatal(err)
		}
		for _, table := range []string{TableFilter, TableNAT} {
			a, _ := fresh.Save(ctx, table)
			b, _ := ipt.Save(ctx, table)
			if !bytes.Equal(a, b) {
				rt.Fatalf("%s differs after %d syncs:\nfresh:\n%s\nsynced:\n%s", table, steps, a, b)
			}
		}
	})
}

// Property: the output does not depend on the order of the input lists, and is
// internally consistent.
func TestRenderDeterministic(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		services, slices := genCluster(rt)
		cfg := upstreamConfig(corev1.IPv4Protocol)
		a, err := Render(services, slices, cfg, RenderOptions{})
		if err != nil {
			rt.Fatal(err)
		}
		r := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 1))
		r.Shuffle(len(services), func(i, j int) { services[i], services[j] = services[j], services[i] })
		r.Shuffle(len(slices), func(i, j int) { slices[i], slices[j] = slices[j], slices[i] })
		b, err := Render(services, slices, cfg, RenderOptions{})
		if err != nil {
			rt.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			rt.Fatalf("output depends on input order")
		}
		if err := checkRuleJumps(string(a)); err != nil {
			rt.Fatalf("%v\n%s", err, a)
		}
	})
}
