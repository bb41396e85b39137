package ipvs_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
	ipvsemu "github.com/clusterlab/clusterlab/proxy/ipvs/emulator"
)

// benchServices makes n ClusterIP services (port 80/TCP, every tenth a NodePort) with
// three endpoints each, one of them on this node.
func benchServices(n int) ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	svcs := make([]*corev1.Service, 0, n)
	slices := make([]*discoveryv1.EndpointSlice, 0, n)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc-%05d", i)
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: fmt.Sprintf("10.96.%d.%d", i/250, i%250+1),
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
		}
		if i%10 == 0 {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = int32(30000 + i/10)
		}
		svcs = append(svcs, s)
		slices = append(slices, benchSlice(name, i, 0))
	}
	return svcs, slices
}

func benchSlice(name string, i, gen int) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "bench", Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for k, node := range []string{"test-node", "node-b", "node-c"} {
		ip := fmt.Sprintf("10.%d.%d.%d", 100+k+gen, i/250, i%250+1)
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr.To(node)})
	}
	return es
}

func benchNode() proxy.NodeConfig {
	return proxy.NodeConfig{Name: "test-node", IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")},
		DetectLocalMode: proxy.LocalModeClusterCIDR, ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
}

// Sync time of the IPVS-mode proxier for 1,000 and 10,000 services (docs/PERFORMANCE.md,
// section proxy/kubeproxy ipvs), beside the iptables-mode proxier writing the same
// services into the emulator, in the same run. "full" is the first sync of a node
// (every virtual server, real server, VIP binding and set entry created);
// "one-endpoint" is a resync after one service's endpoints were replaced (the IPVS mode
// still reconciles every service; the iptables mode rewrites one service's chains).
//
//	go test ./proxy/ipvs/ -run '^$' -bench 'ProxierSync' -benchtime 5x -count 3
func BenchmarkProxierSync(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1000, 10000} {
		svcs, slices := benchServices(n)
		changed := make([]*discoveryv1.EndpointSlice, len(slices))
		copy(changed, slices)
		changed[n/2+1] = benchSlice(svcs[n/2+1].Name, n/2+1, 10) // a ClusterIP service: one virtual server

		newIPVS := func(b *testing.B) *ipvs.Proxier {
			nl := ipvs.NewFakeNetlink()
			nl.SetAddresses("eth0", netip.MustParseAddr("192.168.0.2"))
			emu := emulator.New(emulator.IPv4)
			px, err := ipvs.NewProxier(ipvs.Writers{IPVS: ipvsemu.MustNew(ipvsemu.Config{}), IPSets: emu, IPTables: emu, Netlink: nl}, ipvs.ProxierConfig{Node: benchNode()})
			if err != nil {
				b.Fatal(err)
			}
			return px
		}
		newIPT := func(b *testing.B) *iptables.Proxier {
			px, err := iptables.NewProxier(emulator.New(emulator.IPv4), nil, iptables.Config{Node: benchNode()})
			if err != nil {
				b.Fatal(err)
			}
			return px
		}
		b.Run(fmt.Sprintf("ipvs/services=%d/full", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				px := newIPVS(b)
				b.StartTimer()
				if _, err := px.Sync(ctx, svcs, slices); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("ipvs/services=%d/one-endpoint", n), func(b *testing.B) {
			px := newIPVS(b)
			if _, err := px.Sync(ctx, svcs, slices); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				in := changed
				if i%2 == 1 {
					in = slices
				}
				res, err := px.Sync(ctx, svcs, in)
				if err != nil {
					b.Fatal(err)
				}
				if res.RealServersAdded != 3 {
					b.Fatalf("resync added %d real servers, want 3", res.RealServersAdded)
				}
			}
		})
		b.Run(fmt.Sprintf("iptables/services=%d/full", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				px := newIPT(b)
				b.StartTimer()
				if _, err := px.Sync(ctx, svcs, slices); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("iptables/services=%d/one-endpoint", n), func(b *testing.B) {
			px := newIPT(b)
			if _, err := px.Sync(ctx, svcs, slices); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				in := changed
				if i%2 == 1 {
					in = slices
				}
				if _, err := px.Sync(ctx, svcs, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
