package ipvs_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// genServices draws a small set of Services and EndpointSlices: ClusterIP, NodePort and
// LoadBalancer types, TCP/UDP/SCTP ports, affinity, traffic policies, external IPs,
// source ranges, endpoints on this node or others, ready or terminating.
func genServices(rt *rapid.T, tag string) ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	n := rapid.IntRange(0, 5).Draw(rt, tag+"services")
	var svcs []*corev1.Service
	var eps []*discoveryv1.EndpointSlice
	for i := 0; i < n; i++ {
		// Addresses and node ports follow the name, so that no two services share a
		// virtual server (the API server keeps cluster IPs and node ports unique; two
		// services on one external IP and port make kube-proxy flap between them).
		idx := rapid.IntRange(0, 6).Draw(rt, tag+"name")
		name := fmt.Sprintf("s%d", idx)
		if slices.ContainsFunc(svcs, func(s *corev1.Service) bool { return s.Name == name }) {
			continue
		}
		typ := rapid.SampledFrom([]corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer}).Draw(rt, tag+"type")
		proto := rapid.SampledFrom([]corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}).Draw(rt, tag+"proto")
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.ServiceSpec{
			Type:      typ,
			ClusterIP: fmt.Sprintf("10.96.0.%d", idx+1),
			Ports:     []corev1.ServicePort{{Name: "p", Port: int32(rapid.SampledFrom([]int{53, 80, 443}).Draw(rt, tag+"port")), Protocol: proto}},
		}}
		if typ != corev1.ServiceTypeClusterIP {
			s.Spec.Ports[0].NodePort = int32(30000 + idx)
			if rapid.Bool().Draw(rt, tag+"local") {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				if typ == corev1.ServiceTypeLoadBalancer {
					s.Spec.HealthCheckNodePort = int32(32000 + idx)
				}
			}
		}
		if typ == corev1.ServiceTypeLoadBalancer {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("198.51.100.%d", idx+1)}}
			if rapid.Bool().Draw(rt, tag+"ranges") {
				s.Spec.LoadBalancerSourceRanges = []string{rapid.SampledFrom([]string{"192.168.0.0/16", "203.0.113.0/24"}).Draw(rt, tag+"range")}
			}
		}
		if rapid.Bool().Draw(rt, tag+"extIP") {
			ext := fmt.Sprintf("198.18.0.%d", idx+1)
			if idx == 0 {
				ext = "192.168.99.11" // a node address: not bound to kube-ipvs0
			}
			s.Spec.ExternalIPs = []string{ext}
		}
		if rapid.Bool().Draw(rt, tag+"affinity") {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		}
		if rapid.Bool().Draw(rt, tag+"itp") {
			s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
		}
		svcs = append(svcs, s)
		es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("p"), Port: ptr.To(int32(8080)), Protocol: ptr.To(proto)}}}
		for k := range rapid.IntRange(0, 3).Draw(rt, tag+"endpoints") {
			ready := rapid.Bool().Draw(rt, tag+"ready")
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.244.%d.%d", k, rapid.IntRange(1, 3).Draw(rt, tag+"ep"))},
				NodeName:   ptr.To(rapid.SampledFrom([]string{"test-node", "node-b"}).Draw(rt, tag+"node")),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(true), Terminating: ptr.To(!ready)},
			})
		}
		eps = append(eps, es)
	}
	return svcs, eps
}

// normalisedState is the applied state with each set's members sorted (an incremental
// sync adds them in a different order than a fresh one).
func normalisedState(t *testing.T, h *modeHarness) string {
	var out []string
	var members []string
	flush := func() {
		slices.Sort(members)
		out = append(out, members...)
		members = nil
	}
	inSets := false
	for _, l := range strings.Split(h.state(t), "\n") {
		switch {
		case l == "# ipset save":
			inSets = true
			out = append(out, l)
		case strings.HasPrefix(l, "# "):
			flush()
			inSets = false
			out = append(out, l)
		case inSets && strings.HasPrefix(l, "add "):
			members = append(members, l)
		default:
			flush()
			out = append(out, l)
		}
	}
	flush()
	return strings.Join(out, "\n")
}

// Reconciliation converges: whatever a node was programmed for before, a sync of state B
// leaves exactly what a fresh node's first sync of B leaves (virtual servers and real
// servers, kube-ipvs0's addresses, ipsets, iptables rules), and a further sync of B
// changes nothing. (No traffic flows, so no real server waits for graceful termination.)
func TestProxierConverges(t *testing.T) {
	cfg := ipvs.ProxierConfig{Node: proxy.NodeConfig{Name: testNodeName, IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")},
		DetectLocalMode: proxy.LocalModeClusterCIDR, ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}}
	rapid.Check(t, func(rt *rapid.T) {
		cfg.Scheduler = rapid.SampledFrom([]string{"rr", "mh", "wlc"}).Draw(rt, "scheduler")
		a, aEps := genServices(rt, "a.")
		b, bEps := genServices(rt, "b.")
		ctx := context.Background()
		inc := newModeHarness(t, cfg, []string{"192.168.0.2"}, map[string]string{"eth1": "192.168.99.11"})
		for _, step := range []struct {
			s []*corev1.Service
			e []*discoveryv1.EndpointSlice
		}{{a, aEps}, {b, bEps}} {
			res, err := inc.px.Sync(ctx, step.s, step.e)
			if err != nil {
				rt.Fatal(err)
			}
			if len(res.Warnings) > 0 {
				rt.Fatalf("warnings: %v", res.Warnings)
			}
		}
		fresh := newModeHarness(t, cfg, []string{"192.168.0.2"}, map[string]string{"eth1": "192.168.99.11"})
		if _, err := fresh.px.Sync(ctx, b, bEps); err != nil {
			rt.Fatal(err)
		}
		got, want := normalisedState(t, inc), normalisedState(t, fresh)
		if got != want {
			rt.Fatalf("A then B differs from B alone:\n--- B alone\n%s\n--- A then B\n%s", want, got)
		}
		if len(inc.px.Terminating()) != 0 {
			rt.Fatalf("real servers terminating without connections: %v", inc.px.Terminating())
		}
		res, err := inc.px.Sync(ctx, b, bEps)
		if err != nil {
			rt.Fatal(err)
		}
		if n := res.SetEntriesAdded + res.SetEntriesDeleted + res.RealServersAdded + res.RealServersDeleted + res.VirtualServersAdded + res.VirtualServersDeleted + res.VirtualServersUpdated; n != 0 {
			rt.Fatalf("a repeated sync made %d changes: vs +%d ~%d -%d, rs +%d -%d, set entries +%d -%d", n,
				res.VirtualServersAdded, res.VirtualServersUpdated, res.VirtualServersDeleted, res.RealServersAdded, res.RealServersDeleted, res.SetEntriesAdded, res.SetEntriesDeleted)
		}
	})
}
