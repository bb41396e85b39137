package nftables

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// kube-proxy v1.37.2's Test_useLocalhostNodePortProxy vectors: an explicit loopback
// CIDR of the family in --nodeport-addresses (anywhere in the list) means kube-proxy
// serves TCP localhost NodePorts itself and rejects only UDP and SCTP.
func TestLocalhostNodePortProtocols(t *testing.T) {
	for _, tc := range []struct {
		family corev1.IPFamily
		npa    []string
		proxy  bool
	}{
		{corev1.IPv4Protocol, []string{"127.0.0.0/8"}, true},
		{corev1.IPv6Protocol, []string{"::1/128"}, true},
		{corev1.IPv4Protocol, []string{"::1/128"}, false},
		{corev1.IPv6Protocol, []string{"127.0.0.0/8"}, false},
		{corev1.IPv4Protocol, []string{"0.0.0.0/0"}, false},
		{corev1.IPv6Protocol, []string{"::/0"}, false},
		{corev1.IPv4Protocol, []string{"127.0.0.0/8", "0.0.0.0/0"}, true},
		{corev1.IPv4Protocol, []string{"0.0.0.0/0", "127.0.0.0/8"}, true},
		{corev1.IPv4Protocol, []string{"192.168.1.1/32"}, false},
		{corev1.IPv4Protocol, nil, false},
	} {
		cfg := upstreamConfig(tc.family)
		cfg.Node.NodePortAddresses = tc.npa
		cfg.LocalhostNodePorts = true
		r, err := resolve(cfg)
		if err != nil {
			t.Fatal(err)
		}
		want := []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}
		if tc.proxy {
			want = want[1:]
		}
		if !slices.Equal(r.rejectProtocols, want) {
			t.Errorf("%s %v: rejected %v, want %v", tc.family, tc.npa, r.rejectProtocols, want)
		}
	}
}

func nodePortService(ns, name, ip string, proto corev1.Protocol, port, nodePort int32) *corev1.Service {
	return makeService(ns, name, ip, "p", port, func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].Protocol, s.Spec.Ports[0].NodePort = proto, nodePort
	})
}

// kube-proxy v1.37.2's TestLocalhostNodePortReject, ...RejectAll and ...Proxy: the
// lines the dump must (and must not) have with the 1.37 gate on.
func TestLocalhostNodePortReject(t *testing.T) {
	tcpSvc := nodePortService("ns1", "svc-tcp", "172.30.0.41", corev1.ProtocolTCP, 80, 30080)
	udpSvc := nodePortService("ns2", "svc-udp", "172.30.0.42", corev1.ProtocolUDP, 53, 30053)
	sctpSvc := nodePortService("ns3", "svc-sctp", "172.30.0.43", corev1.ProtocolSCTP, 9, 30009)
	tcpEps := makeSlice("ns1", "svc-tcp", "p", 80, "10.180.0.1")
	const udpRule = `add rule ip kube-proxy localhost-nodeport-reject-udp counter name "localhost-nodeport-rejected-udp" reject`
	const sctpRule = `add rule ip kube-proxy localhost-nodeport-reject-sctp counter name "localhost-nodeport-rejected-sctp" reject`
	const tcpRule = `add rule ip kube-proxy localhost-nodeport-reject-tcp counter name "localhost-nodeport-rejected-tcp" reject`
	const check = "add rule ip kube-proxy nodeport-endpoints-check ip daddr 127.0.0.0/8 meta l4proto . th dport vmap @localhost-nodeport-reject-ports"
	for _, tc := range []struct {
		name     string
		npa      []string
		services []*corev1.Service
		slices   []*discoveryv1.EndpointSlice
		want     []string
		notWant  []string
	}{
		{"proxy serves TCP", []string{"127.0.0.0/8"}, []*corev1.Service{udpSvc}, nil,
			[]string{"add counter ip kube-proxy localhost-nodeport-rejected-udp", "add counter ip kube-proxy localhost-nodeport-rejected-sctp",
				udpRule, sctpRule, check, "add element ip kube-proxy localhost-nodeport-reject-ports { udp . 30053 : goto localhost-nodeport-reject-udp }"},
			[]string{"localhost-nodeport-rejected-tcp"}},
		{"reject all", nil, []*corev1.Service{tcpSvc, udpSvc, sctpSvc}, nil,
			[]string{"add counter ip kube-proxy localhost-nodeport-rejected-tcp", "add counter ip kube-proxy localhost-nodeport-rejected-udp",
				"add counter ip kube-proxy localhost-nodeport-rejected-sctp", tcpRule, udpRule, sctpRule, check,
				"add element ip kube-proxy localhost-nodeport-reject-ports { tcp . 30080 : goto localhost-nodeport-reject-tcp }",
				"add element ip kube-proxy localhost-nodeport-reject-ports { udp . 30053 : goto localhost-nodeport-reject-udp }",
				"add element ip kube-proxy localhost-nodeport-reject-ports { sctp . 30009 : goto localhost-nodeport-reject-sctp }"},
			nil},
		{"TCP dispatched normally", []string{testNodeIP + "/32", "127.0.0.0/8"}, []*corev1.Service{tcpSvc}, []*discoveryv1.EndpointSlice{tcpEps},
			[]string{"add counter ip kube-proxy localhost-nodeport-rejected-udp", "add counter ip kube-proxy localhost-nodeport-rejected-sctp",
				udpRule, sctpRule, check, "add element ip kube-proxy service-nodeports { tcp . 30080 : goto external-"},
			[]string{"localhost-nodeport-rejected-tcp", "localhost-nodeport-reject-ports { tcp ."}},
	} {
		cfg := upstreamConfig(corev1.IPv4Protocol)
		cfg.LocalhostNodePorts = true
		if tc.npa != nil {
			cfg.Node.NodePortAddresses = tc.npa
		}
		fake := newFake(corev1.IPv4Protocol)
		p, err := NewProxier(fake, nil, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Sync(context.Background(), tc.services, tc.slices); err != nil {
			t.Fatal(err)
		}
		dump := asUpstream(fake.Dump())
		for _, w := range tc.want {
			if !strings.Contains(dump, w) {
				t.Errorf("%s: dump lacks %q", tc.name, w)
			}
		}
		for _, w := range tc.notWant {
			if strings.Contains(dump, w) {
				t.Errorf("%s: dump has %q", tc.name, w)
			}
		}
	}
}

// kube-proxy v1.37.2's TestLoadBalancerIngressRouteTypeProxy: a load-balancer IP with
// ipMode Proxy gets no service-ips element; VIP or unset does.
func TestLoadBalancerIPModeProxy(t *testing.T) {
	for _, tc := range []struct {
		ip, lbIP string
		mode     *corev1.LoadBalancerIPMode
		want     bool
	}{
		{"10.20.30.41", "1.2.3.4", ptr.To(corev1.LoadBalancerIPModeProxy), false},
		{"10.20.30.42", "1.2.3.5", ptr.To(corev1.LoadBalancerIPModeVIP), true},
		{"10.20.30.43", "1.2.3.6", nil, true},
	} {
		svc := makeService("ns1", "svc1", tc.ip, "p80", 80, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.Ports[0].NodePort = 3001
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: tc.lbIP, IPMode: tc.mode}}
		})
		fake := newFake(corev1.IPv4Protocol)
		p, err := NewProxier(fake, nil, upstreamConfig(corev1.IPv4Protocol))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Sync(context.Background(), []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{makeSlice("ns1", "svc1", "p80", 80, "10.180.0.1")}); err != nil {
			t.Fatal(err)
		}
		if got := fake.Table.Maps[MapServiceIPs].FindElement(tc.lbIP, "tcp", "80") != nil; got != tc.want {
			t.Errorf("ipMode %v: element %v, want %v", tc.mode, got, tc.want)
		}
	}
}
