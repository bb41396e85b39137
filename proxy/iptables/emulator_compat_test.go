package iptables_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
)

// Every restore text the generator's golden files hold must load into the emulator
// (its parser is the consumer of this package's output) on a node without kube-proxy
// rules, and what the emulator then saves must load again and save the same.
func TestGoldenFilesLoadIntoEmulator(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/generator/*.golden")
	partial, _ := filepath.Glob("../../testdata/generator/partial/1-*.golden")
	files = append(files, partial...)
	if len(files) == 0 {
		t.Fatal("no golden files")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			fam := emulator.IPv4
			if strings.Contains(path, "ipv6") {
				fam = emulator.IPv6
			}
			e := emulator.New(fam)
			if err := e.Restore(context.Background(), data, iptables.RestoreOptions{NoFlush: true, Counters: true}); err != nil {
				t.Fatalf("emulator rejects the generated text: %v", err)
			}
			saved, err := e.Save(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			again, err := emulator.Load(saved, fam, "saved")
			if err != nil {
				t.Fatalf("emulator rejects its own dump: %v\n%s", err, saved)
			}
			resaved, _ := again.Save(context.Background())
			if string(resaved) != string(saved) {
				t.Errorf("save → load → save is not stable")
			}
		})
	}
}

func svc(ns, name, ip string, port int32, proto corev1.Protocol) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, ClusterIP: ip,
			Ports: []corev1.ServicePort{{Name: "p", Port: port, Protocol: proto, NodePort: 30000 + port}},
		},
	}
}

func eps(ns, name string, port int32, proto corev1.Protocol, ips ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("p"), Port: ptr.To(port), Protocol: ptr.To(proto)}},
	}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}})
	}
	return s
}

// A Proxier writing to the emulator: full sync with jump insertion, partial syncs that
// add, change and delete services (stale chains deleted), all accepted.
func TestProxierOnEmulator(t *testing.T) {
	ctx := context.Background()
	e := emulator.New(emulator.IPv4)
	cfg := iptables.Config{Node: proxy.NodeConfig{Name: "test-node", ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}
	p, err := iptables.NewProxier(e, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := svc("ns", "a", "172.30.0.1", 80, corev1.ProtocolTCP)
	b := svc("ns", "b", "172.30.0.2", 53, corev1.ProtocolUDP)
	steps := []struct {
		services []*corev1.Service
		slices   []*discoveryv1.EndpointSlice
	}{
		{[]*corev1.Service{a, b}, []*discoveryv1.EndpointSlice{eps("ns", "a", 8080, corev1.ProtocolTCP, "10.0.0.1", "10.0.0.2")}},
		{[]*corev1.Service{a, b}, []*discoveryv1.EndpointSlice{eps("ns", "a", 8080, corev1.ProtocolTCP, "10.0.0.2"), eps("ns", "b", 53, corev1.ProtocolUDP, "10.0.1.1")}},
		{[]*corev1.Service{b}, []*discoveryv1.EndpointSlice{eps("ns", "b", 53, corev1.ProtocolUDP, "10.0.1.1")}},
		{nil, nil},
	}
	for i, s := range steps {
		res, err := p.Sync(ctx, s.services, s.slices)
		if err != nil {
			t.Fatalf("step %d: %v\n%s", i, err, res.Data)
		}
	}
	saved, _ := e.Save(ctx, iptables.TableNAT)
	for _, line := range strings.Split(string(saved), "\n") {
		if strings.HasPrefix(line, ":KUBE-SVC-") || strings.HasPrefix(line, ":KUBE-SEP-") || strings.HasPrefix(line, ":KUBE-EXT-") {
			t.Errorf("stale chain left after every service went: %s", line)
		}
	}
	if !strings.Contains(string(saved), `-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`) {
		t.Errorf("jump rule missing:\n%s", saved)
	}
}
