package cluster

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"
	corev1 "k8s.io/api/core/v1"
)

// spec.loadBalancerIP is honoured: the load balancer takes that address (not the pool's
// next), publishes it in the Service's status, and answers on it.
func TestLoadBalancerIPHonoured(t *testing.T) {
	c := kubeCluster(t, Config{})
	ext, err := c.AddExternalHost("client", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	svc := myService(service.LoadBalancer())
	svc.Spec.LoadBalancerIP = "198.51.100.77"
	if err := c.Apply(svc); err != nil {
		t.Fatal(err)
	}
	mustCreatePod(t, c, webPod("web-0", "node-b"))
	got, _ := c.Store().GetService("default", "my-service")
	if ing := got.Status.LoadBalancer.Ingress; len(ing) != 1 || ing[0].IP != "198.51.100.77" {
		t.Fatalf("load balancer status: %+v, want 198.51.100.77", got.Status.LoadBalancer)
	}
	if ip, ok := c.LoadBalancerIP("default", "my-service"); !ok || ip != netip.MustParseAddr("198.51.100.77") {
		t.Errorf("LoadBalancerIP: %s %v", ip, ok)
	}
	w, err := ask(t, ext.Net(), "198.51.100.77:80")
	if err != nil || w.Pod != "default/web-0" {
		t.Errorf("traffic to the requested address: %+v %v", w, err)
	}
}

func lbOf(t *testing.T, c *Cluster) *loadBalancer {
	t.Helper()
	c.mu.Lock()
	lb := c.lbs["default/my-service"]
	c.mu.Unlock()
	if lb == nil {
		t.Fatal("no load balancer for default/my-service")
	}
	return lb
}

// lbTables returns how many flows the load balancer tracks, how many reply entries the
// cluster holds, and the counter the fabric tests.
func lbTables(lb *loadBalancer) (flows, replies int, counter int64) {
	lb.mu.Lock()
	flows = len(lb.flows)
	lb.mu.Unlock()
	lb.c.replies.mu.RLock()
	replies = len(lb.c.replies.m)
	lb.c.replies.mu.RUnlock()
	return flows, replies, lb.c.replies.n.Load()
}

func mustParsePacket(t *testing.T, b []byte) *netsim.Packet {
	t.Helper()
	pk, err := netsim.ParsePacket(b)
	if err != nil {
		t.Fatal(err)
	}
	return pk
}

// The load balancer's connection tracking forgets flows idle for the idle timeout on the
// virtual clock: a flow that keeps sending stays, idle ones go, and a reply to a
// forgotten flow is not un-NATed any more.
func TestLoadBalancerFlowsExpire(t *testing.T) {
	c := kubeCluster(t, Config{})
	if _, err := c.AddExternalHost("client", netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(myService(service.LoadBalancer())); err != nil {
		t.Fatal(err)
	}
	mustCreatePod(t, c, webPod("web-0", "node-b"))
	if c.cfg.LoadBalancerIdleTimeout != 60*time.Second {
		t.Fatalf("default idle timeout %s, want 60s", c.cfg.LoadBalancerIdleTimeout)
	}
	lbAddr := netip.AddrPortFrom(netip.MustParseAddr("198.51.100.1"), 80)
	probe := func(port uint16) netsim.ProbeResult {
		t.Helper()
		r, err := c.ProbeOne(netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: lbAddr, SrcPort: port, Mode: netsim.ProbeConnect})
		if err != nil {
			t.Fatal(err)
		}
		if r.Result != netsim.ResultConnected || r.ReplyFrom != lbAddr {
			t.Fatalf("probe from port %d: %s", port, r.Outcome)
		}
		return r
	}
	for i := range 20 {
		probe(40000 + uint16(i))
	}
	lb := lbOf(t, c)
	if f, r, n := lbTables(lb); f != 20 || r != 20 || n != 20 {
		t.Fatalf("after 20 flows: %d flows, %d reply entries, counter %d; want 20 each", f, r, n)
	}
	// A reply of flow 40000 as node-b sends it, to test the un-NAT directly.
	svc, _ := c.Store().GetService("default", "my-service")
	np := uint16(svc.Spec.Ports[0].NodePort)
	client := c.ExternalHost("client").IP()
	var node netip.Addr
	lb.mu.Lock()
	for tu, f := range lb.flows {
		if tu.SrcPort == 40000 {
			node = f.node.IP()
		}
	}
	lb.mu.Unlock()
	reply := func() *netsim.Packet {
		return mustParsePacket(t, netsim.BuildTCP(netsim.TCPSegment{Src: netip.AddrPortFrom(node, np), Dst: netip.AddrPortFrom(client, 40000), Flags: netfilter.TCPAck, WindowScale: -1}))
	}
	if pk := reply(); !c.replies.Rewrite(pk) || netip.AddrPortFrom(pk.Src, pk.SrcPort) != lbAddr {
		t.Fatalf("reply of a live flow not un-NATed: %s", pk)
	}
	c.Clock().Advance(40 * time.Second)
	probe(40001) // flow 40001 is refreshed
	c.Clock().Advance(40 * time.Second)
	if pk := reply(); c.replies.Rewrite(pk) {
		t.Errorf("reply of a flow idle 80 s was un-NATed: %s", pk)
	}
	probe(41000) // a new flow sweeps the table
	if f, r, n := lbTables(lb); f != 2 || r != 2 || n != 2 {
		t.Errorf("after the sweep: %d flows, %d reply entries, counter %d; want 2 each (40001 and 41000)", f, r, n)
	}
	lb.mu.Lock()
	_, ok := lb.flows[netfilter.Tuple{Proto: netfilter.ProtoTCP, Src: client, SrcPort: 40001, Dst: lbAddr.Addr(), DstPort: 80}]
	lb.mu.Unlock()
	if !ok {
		t.Error("the refreshed flow 40001 was forgotten")
	}
	// Real traffic still works, and a forgotten flow's port is placed anew.
	probe(40000)
	if _, err := New(Config{LoadBalancerIdleTimeout: -time.Second}); err == nil || !strings.Contains(err.Error(), "loadBalancerIdleTimeout") {
		t.Errorf("negative idle timeout: %v", err)
	}
}

// Removing the load balancer (the Service stops being a LoadBalancer) forgets its flows
// and their reply entries.
func TestLoadBalancerRemovalForgetsFlows(t *testing.T) {
	c := kubeCluster(t, Config{})
	if _, err := c.AddExternalHost("client", netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(myService(service.LoadBalancer())); err != nil {
		t.Fatal(err)
	}
	mustCreatePod(t, c, webPod("web-0", "node-b"))
	lbAddr := netip.AddrPortFrom(netip.MustParseAddr("198.51.100.1"), 80)
	for i := range 5 {
		r, _ := c.ProbeOne(netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: lbAddr, SrcPort: 40000 + uint16(i), Mode: netsim.ProbeConnect})
		if r.Result != netsim.ResultConnected {
			t.Fatalf("probe: %s", r.Outcome)
		}
	}
	lb := lbOf(t, c)
	if f, r, _ := lbTables(lb); f != 5 || r != 5 {
		t.Fatalf("%d flows, %d replies, want 5", f, r)
	}
	if err := c.Store().Delete(service.KindService, "default", "my-service"); err != nil {
		t.Fatal(err)
	}
	if f, r, n := lbTables(lb); f != 0 || r != 0 || n != 0 {
		t.Errorf("after removal: %d flows, %d reply entries, counter %d; want none", f, r, n)
	}
	if _, ok := c.LoadBalancerIP("default", "my-service"); ok {
		t.Error("the load balancer is still there")
	}
}

// Replies are found by their tuple: two load balancers with flows from the same client
// port each get their own replies back from their own ingress address.
func TestLoadBalancerRepliesByKey(t *testing.T) {
	c := kubeCluster(t, Config{})
	if _, err := c.AddExternalHost("client", netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(myService(service.LoadBalancer())); err != nil {
		t.Fatal(err)
	}
	other := myService(service.LoadBalancer())
	other.Name = "other"
	if err := c.Apply(other); err != nil {
		t.Fatal(err)
	}
	mustCreatePod(t, c, webPod("web-0", "node-b"))
	a1, _ := c.LoadBalancerIP("default", "my-service")
	a2, _ := c.LoadBalancerIP("default", "other")
	if a1 == a2 {
		t.Fatalf("both load balancers at %s", a1)
	}
	for i := range 10 {
		for _, a := range []netip.Addr{a1, a2} {
			dst := netip.AddrPortFrom(a, 80)
			r, _ := c.ProbeOne(netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: dst, SrcPort: 50000 + uint16(i), Mode: netsim.ProbeConnect})
			if r.Result != netsim.ResultConnected || r.ReplyFrom != dst || r.Pod != "default/web-0" {
				t.Errorf("via %s from port %d: %s", dst, 50000+i, r.Outcome)
			}
		}
	}
	if _, r, _ := lbTables(lbOf(t, c)); r != 20 {
		t.Errorf("%d reply entries, want 20", r)
	}
}

// A new connection (TCP SYN) on a reused 5-tuple whose node the health checks took out
// goes to a healthy node; packets of the flow that is already open stay on its node.
func TestLoadBalancerSYNLeavesUnhealthyNode(t *testing.T) {
	c := kubeCluster(t, Config{})
	ext, err := c.AddExternalHost("client", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(myService(service.LoadBalancer(), service.ExternalTrafficPolicy(corev1.ServiceExternalTrafficPolicyLocal))); err != nil {
		t.Fatal(err)
	}
	mustCreatePod(t, c, webPod("web-0", "node-a"))
	mustCreatePod(t, c, webPod("web-1", "node-b"))
	lbAddr := netip.AddrPortFrom(netip.MustParseAddr("198.51.100.1"), 80)
	p := netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: lbAddr, SrcPort: 45678, Mode: netsim.ProbeConnect}
	r, _ := c.ProbeOne(p)
	if r.Result != netsim.ResultConnected || (r.Node != "node-a" && r.Node != "node-b") {
		t.Fatalf("first connection: %s", r.Outcome)
	}
	first := c.Node(r.Node)
	// Pinned while healthy.
	if r2, _ := c.ProbeOne(p); r2.Node != first.Name() {
		t.Fatalf("same tuple, healthy node: went to %s, want %s", r2.Node, first.Name())
	}
	first.SetHealthChecker(func(ns, name string) int { return 503 })
	lb := lbOf(t, c)
	ack := mustParsePacket(t, netsim.BuildTCP(netsim.TCPSegment{Src: netip.AddrPortFrom(ext.IP(), 45678), Dst: lbAddr, Flags: netfilter.TCPAck, WindowScale: -1}))
	lb.mu.Lock()
	d := lb.decideLocked(ack)
	lb.mu.Unlock()
	if d.node != first {
		t.Errorf("an ACK of the open flow went to %v, want %s (flows a node has keep going)", d.node, first.Name())
	}
	r, _ = c.ProbeOne(p)
	if r.Result != netsim.ResultConnected || r.Node == first.Name() || r.Node == "" {
		t.Errorf("a new connection on the reused tuple: %s, want a node other than unhealthy %s", r.Outcome, first.Name())
	}
	if f, rep, _ := lbTables(lb); f != 1 || rep != 1 {
		t.Errorf("%d flows, %d reply entries after re-placing; want 1 each", f, rep)
	}
}
