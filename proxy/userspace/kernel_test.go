package userspace_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/userspace"
)

// The proxier on a real kernel: its listeners are sockets in a harness node namespace,
// its rules go to that namespace's iptables, and pods in their own namespaces reach
// Services through it. Root only.
func TestUserspaceOnKernel(t *testing.T) {
	kernel.RequireHarness(t)
	kernel.RequireTools(t, "iptables-nft-restore", "iptables-nft-save", "conntrack")
	h, err := kernel.NewHarness(kernel.HarnessConfig{Pods: []kernel.PodConfig{{Name: "pod0"}, {Name: "pod1"}, {Name: "client"}}})
	if err != nil {
		t.Fatalf("NewHarness: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("harness close: %v", err)
		}
	})
	node := h.Nodes[0]
	client := h.Pod("client")
	local, err := h.LocalAddrs(node.Netns)
	if err != nil {
		t.Fatal(err)
	}
	isLocal := map[netip.Addr]bool{}
	for _, a := range local {
		isLocal[a] = true
	}
	var decisions []userspace.Decision
	decided := make(chan userspace.Decision, 64)
	p, err := userspace.New(userspace.Config{
		Network:    node.Netns,
		IPTables:   node.IPTables,
		Conntrack:  node.Conntrack,
		Node:       proxy.NodeConfig{Name: "node0", IPs: []netip.Addr{node.IP}, Addresses: local},
		Seed:       1,
		OnDecision: func(d userspace.Decision) { decided <- d },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	next := func() userspace.Decision {
		t.Helper()
		select {
		case d := <-decided:
			decisions = append(decisions, d)
			return d
		case <-time.After(10 * time.Second):
			t.Fatal("no decision")
		}
		return userspace.Decision{}
	}

	pod0, pod1 := h.Pod("pod0"), h.Pod("pod1")
	dead := netip.AddrPortFrom(netip.MustParseAddr("10.244.0.99"), 8080) // no such pod: ARP fails
	web := kservice("web", "10.96.0.80", corev1.ProtocolTCP, 80, 30080)
	dns := kservice("dns", "10.96.0.10", corev1.ProtocolUDP, 53, 0)
	slices := []*discoveryv1.EndpointSlice{
		kslice("web", corev1.ProtocolTCP, pod0.IP, pod1.IP),
		kslice("dns", corev1.ProtocolUDP, pod0.IP, pod1.IP),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.Sync(ctx, []*corev1.Service{web, dns}, slices); err != nil {
		t.Fatal(err)
	}
	saved, err := node.IPTables.Save(ctx, "nat")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-j KUBE-PORTALS-CONTAINER", "-j KUBE-NODEPORT-HOST", "-d 10.96.0.80/32 -p tcp -m comment --comment \"default/web:http\" -m tcp --dport 80 -j REDIRECT --to-ports "} {
		if !strings.Contains(string(saved), want) {
			t.Errorf("kernel nat table lacks %q:\n%s", want, saved)
		}
	}

	name := map[string]string{
		netip.AddrPortFrom(pod0.IP, 8080).String(): "pod0",
		netip.AddrPortFrom(pod1.IP, 8080).String(): "pod1",
	}
	check := func(what string, r kernel.Result, d userspace.Decision) {
		t.Helper()
		if r.Outcome != kernel.Answered {
			t.Errorf("%s: %v (decision %s)", what, r, d)
			return
		}
		if r.Server != name[d.Endpoint] || r.Source != d.Source || !isLocal[r.Source.Addr()] {
			t.Errorf("%s: %v; decision %s; want the decision's endpoint, seeing a node address", what, r, d)
		}
	}
	vipTCP := netip.MustParseAddrPort("10.96.0.80:80")
	vipUDP := netip.MustParseAddrPort("10.96.0.10:53")
	for i := 0; i < 4; i++ {
		r := h.Dial(client.Netns, "tcp", vipTCP)
		check(fmt.Sprintf("tcp %d", i), r, next())
		r = h.Dial(client.Netns, "udp", vipUDP)
		d := next()
		check(fmt.Sprintf("udp %d", i), r, d)
		if d.Protocol != corev1.ProtocolUDP || d.Client.Addr() != client.IP {
			t.Errorf("udp decision: %s", d)
		}
	}
	// Round robin: the four TCP connections alternated.
	var got []string
	for _, d := range decisions {
		if d.Protocol == corev1.ProtocolTCP {
			got = append(got, name[d.Endpoint])
		}
	}
	if strings.Join(got, " ") != "pod0 pod1 pod0 pod1" && strings.Join(got, " ") != "pod1 pod0 pod1 pod0" {
		t.Errorf("TCP endpoints in order: %v, want alternating", got)
	}
	// The node's own processes (KUBE-PORTALS-HOST) and an outside client through the
	// node port (KUBE-NODEPORT-CONTAINER, KUBE-NODEPORT-NON-LOCAL).
	check("from the node", h.Dial(node.Netns, "tcp", vipTCP), next())
	r := h.Dial(h.External, "tcp", netip.AddrPortFrom(node.IP, 30080))
	d := next()
	check("external to the node port", r, d)
	if d.Client.Addr() != h.ExternalIP {
		t.Errorf("node port decision: client %v, want %v", d.Client, h.ExternalIP)
	}

	// A dead endpoint: its turns fail to connect and the next endpoint takes over.
	slices[0] = kslice("web", corev1.ProtocolTCP, pod0.IP, pod1.IP, dead.Addr())
	if _, err := p.Sync(ctx, []*corev1.Service{web, dns}, slices); err != nil {
		t.Fatal(err)
	}
	retried := 0
	for i := 0; i < 6; i++ {
		r := h.Dial(client.Netns, "tcp", vipTCP)
		d := next()
		check(fmt.Sprintf("tcp %d with a dead endpoint", i), r, d)
		if d.Retries() > 0 {
			retried++
			if d.Attempts[0].Endpoint != dead.String() || d.Attempts[0].Err == "" {
				t.Errorf("retry: %s", d)
			}
		}
	}
	if retried == 0 {
		t.Error("no connection was retried")
	}
	t.Logf("%d of 6 connections retried past %v", retried, dead)
}

func kservice(name, ip string, proto corev1.Protocol, port, nodePort int32) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip}, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			SessionAffinity: corev1.ServiceAffinityNone,
			Ports:           []corev1.ServicePort{{Name: portName(proto), Port: port, Protocol: proto}},
		},
	}
	if nodePort != 0 {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = nodePort
	}
	return s
}

func portName(p corev1.Protocol) string {
	if p == corev1.ProtocolUDP {
		return "dns"
	}
	return "http"
}

func kslice(svc string, proto corev1.Protocol, ips ...netip.Addr) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: svc + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName(proto)), Port: ptr.To(int32(8080)), Protocol: ptr.To(proto)}},
	}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}
