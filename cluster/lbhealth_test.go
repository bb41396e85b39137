package cluster

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"
	corev1 "k8s.io/api/core/v1"
)

// healthProxy is miniProxy plus a health check server: an HTTP server on the node's host
// network at each health check node port, 200 while the store puts a ready endpoint of
// the service on the node (as of the last sync), 503 otherwise. It stands in for
// kube-proxy's, so the load balancer's checks are tested on their own.
type healthProxy struct {
	*miniProxy
	mu     sync.Mutex
	lns    map[uint16]net.Listener
	status map[uint16]int
}

func healthProxyFactory(n *Node) (Proxy, error) {
	p, err := miniProxyFactory(n)
	if err != nil {
		return nil, err
	}
	return &healthProxy{miniProxy: p.(*miniProxy), lns: map[uint16]net.Listener{}, status: map[uint16]int{}}, nil
}

func (p *healthProxy) ServesHealthCheckNodePorts() bool { return true }

func (p *healthProxy) Sync() error {
	if err := p.miniProxy.Sync(); err != nil {
		return err
	}
	want := map[uint16]int{}
	for _, svc := range p.n.Cluster().Store().ListServices() {
		if port := healthCheckPort(svc); port != 0 {
			want[port] = 503
			if p.n.healthy(svc) {
				want[port] = 200
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for port, ln := range p.lns {
		if _, ok := want[port]; !ok {
			ln.Close()
			delete(p.lns, port)
		}
	}
	for port := range want {
		if p.lns[port] != nil {
			continue
		}
		ln, err := p.n.HostNet().Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			return err
		}
		p.lns[port] = ln
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.mu.Lock()
			st := p.status[port]
			p.mu.Unlock()
			w.WriteHeader(st)
			fmt.Fprintf(w, "%d from %s for %s", st, p.n.Name(), r.Header.Get("User-Agent"))
		}))
	}
	p.status = want
	return nil
}

func localLBService() *corev1.Service {
	return myService(service.LoadBalancer(), service.ExternalTrafficPolicy(corev1.ServiceExternalTrafficPolicyLocal))
}

func lbHealthOf(t *testing.T, c *Cluster, node string) NodeHealth {
	t.Helper()
	hs, ok := c.LoadBalancerHealth("default", "my-service")
	if !ok {
		t.Fatal("no load balancer")
	}
	for _, h := range hs {
		if h.Node == node {
			return h
		}
	}
	t.Fatalf("no %s in %+v", node, hs)
	return NodeHealth{}
}

// The load balancer asks each node over the network, from the health checker's address:
// the requests cross the node's datapath (its trace says so) and show in captures.
func TestLoadBalancerHealthCheckOverTheNetwork(t *testing.T) {
	c := kubeCluster(t, Config{Proxy: healthProxyFactory})
	if _, err := c.AddExternalHost("client", netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	var checker, eth0 bytes.Buffer
	stop1, err := c.Capture("external/"+HealthCheckerName, &checker)
	if err != nil {
		t.Fatal(err)
	}
	stop2, _ := c.Capture("node-b/eth0", &eth0)
	if err := c.Apply(localLBService()); err != nil {
		t.Fatal(err)
	}
	mustCreatePod(t, c, webPod("web-0", "node-b"))
	c.CheckLoadBalancers()
	stop1()
	stop2()
	h := c.ExternalHost(HealthCheckerName)
	if h == nil || h.IP() != netip.MustParseAddr("35.191.0.1") {
		t.Fatalf("health checker host: %+v", h)
	}
	for _, buf := range []*bytes.Buffer{&checker, &eth0} {
		if !bytes.Contains(buf.Bytes(), []byte("GET /healthz HTTP/1.1")) || !bytes.Contains(buf.Bytes(), []byte("User-Agent: GoogleHC/1.0")) || !bytes.Contains(buf.Bytes(), []byte("200 from node-b")) {
			t.Errorf("capture lacks the health check exchange (%d bytes)", buf.Len())
		}
	}
	svc, _ := c.Store().GetService("default", "my-service")
	for _, tc := range []struct {
		node   string
		health bool
		status int
	}{{"node-a", false, 503}, {"node-b", true, 200}, {"node-c", false, 503}} {
		got := lbHealthOf(t, c, tc.node)
		if got.Healthy != tc.health || got.Source != "health-check" || !got.Checked || got.Last.Status != tc.status ||
			got.Last.Target != netip.AddrPortFrom(c.Node(tc.node).IP(), uint16(svc.Spec.HealthCheckNodePort)) {
			t.Errorf("%s: %+v", tc.node, got)
		}
		if tr := got.Last.Trace.String(); !strings.Contains(tr, "delivered to the node's host stack") || !strings.Contains(tr, "35.191.0.1") {
			t.Errorf("%s: the request's trace:\n%s", tc.node, tr)
		}
	}
	lb, _ := c.LoadBalancerIP("default", "my-service")
	for port := uint16(41000); port < 41010; port++ {
		r, _ := c.ProbeOne(netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(lb, 80), SrcPort: port, Mode: netsim.ProbeConnect})
		if r.Result != netsim.ResultConnected || r.Node != "node-b" {
			t.Errorf("via the load balancer: %s", r.Outcome)
		}
	}
}

// A proxy that serves no health checks (miniProxy): the load balancer judges its nodes
// from the API, as before, and runs no health checker. A dead node is out.
func TestLoadBalancerHealthWithoutHealthServers(t *testing.T) {
	c := kubeCluster(t, Config{})
	if err := c.Apply(localLBService()); err != nil {
		t.Fatal(err)
	}
	mustCreatePod(t, c, webPod("web-0", "node-b"))
	c.CheckLoadBalancers()
	if got := lbHealthOf(t, c, "node-b"); !got.Healthy || got.Source != "api" {
		t.Errorf("node-b: %+v", got)
	}
	if got := lbHealthOf(t, c, "node-a"); got.Healthy || got.Source != "api" {
		t.Errorf("node-a: %+v", got)
	}
	if c.ExternalHost(HealthCheckerName) != nil {
		t.Error("a health checker runs with no node to ask")
	}
	if err := c.KillNode("node-b"); err != nil {
		t.Fatal(err)
	}
	if got := lbHealthOf(t, c, "node-b"); got.Healthy || got.Source != "down" {
		t.Errorf("dead node-b: %+v", got)
	}
}

// The thresholds are configurable; a drop of the request at the node fails the check at
// once; bad configurations are refused.
func TestLoadBalancerHealthCheckConfig(t *testing.T) {
	c := kubeCluster(t, Config{Proxy: healthProxyFactory})
	for _, bad := range []HealthCheckConfig{
		{Sources: []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")}},
		{Path: "healthz"},
		{Sources: []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
	} {
		if err := c.SetLoadBalancerHealthCheck(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if err := c.SetLoadBalancerHealthCheck(HealthCheckConfig{UnhealthyThreshold: 1, HealthyThreshold: 2, Sources: []netip.Addr{netip.MustParseAddr("192.0.2.10")}}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetLoadBalancerHealthCheck(HealthCheckConfig{Sources: []netip.Addr{netip.MustParseAddr("192.0.2.11")}}); err == nil {
		t.Error("the sources changed under a running health checker")
	}
	if err := c.Apply(localLBService()); err != nil {
		t.Fatal(err)
	}
	mustCreatePod(t, c, webPod("web-0", "node-b"))
	c.CheckLoadBalancers() // the sync's check passed once; HealthyThreshold is 2
	if got := lbHealthOf(t, c, "node-b"); !got.Healthy || got.Successes < 2 || got.Last.Body != "200 from node-b for GoogleHC/1.0" {
		t.Errorf("node-b: %+v", got)
	}
	remove := c.Node("node-b").AddHandler(netsim.HandlerSpec{Name: "deny-health", Hook: netfilter.Input, Priority: netfilter.PrioritySecurity, Handler: netsim.HandlerFunc(func(ctx *netsim.Context, pk *netsim.Packet) netsim.Verdict {
		if pk.Src == netip.MustParseAddr("192.0.2.10") {
			return netsim.Verdict{Kind: netsim.Drop, Reason: "no health checks"}
		}
		return netsim.VerdictContinue
	})})
	c.CheckLoadBalancers()
	got := lbHealthOf(t, c, "node-b")
	if got.Healthy || got.Failures != 1 || !strings.Contains(got.Last.Err, "dropped at node node-b") {
		t.Errorf("after one dropped check (UnhealthyThreshold 1): %+v", got)
	}
	lb, _ := c.LoadBalancerIP("default", "my-service")
	if r, _ := c.ProbeOne(netsim.Probe{From: "node:node-a", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(lb, 80), SrcPort: 42000}); r.Result != netsim.ResultDropped || !strings.Contains(r.Reason, "no healthy backend node") {
		t.Errorf("with no healthy node: %s", r.Outcome)
	}
	remove()
	c.CheckLoadBalancers()
	if got := lbHealthOf(t, c, "node-b"); got.Healthy {
		t.Errorf("healthy after one passed check (HealthyThreshold 2): %+v", got)
	}
	c.CheckLoadBalancers()
	if got := lbHealthOf(t, c, "node-b"); !got.Healthy {
		t.Errorf("not healthy after two passed checks: %+v", got)
	}
}

// Replay mode: the checks after a sync run as Run carries packets; CheckLoadBalancers
// inside Run waits for its own.
func TestLoadBalancerHealthCheckReplay(t *testing.T) {
	c := kubeCluster(t, Config{Replay: true, Proxy: healthProxyFactory})
	if err := c.Apply(localLBService()); err != nil {
		t.Fatal(err)
	}
	mustCreatePod(t, c, webPod("web-0", "node-b"))
	if err := c.Run(func() error { c.CheckLoadBalancers(); return nil }); err != nil {
		t.Fatal(err)
	}
	if got := lbHealthOf(t, c, "node-b"); !got.Healthy || !got.Last.OK {
		t.Errorf("node-b: %+v", got)
	}
	if got := lbHealthOf(t, c, "node-a"); got.Healthy || got.Last.Status != 503 {
		t.Errorf("node-a: %+v", got)
	}
}

// Close ends the health checks in flight before it tears the network down, and waits for
// their requests: none is left running after it, and none records a result (the
// connection the close aborted is not the node's failure). The check here is in flight
// for good: node-b's uplink loses every packet, and a check across a faulty link ends
// only at its timeout, on a manual clock that does not move.
func TestCloseEndsHealthChecksInFlight(t *testing.T) {
	c, err := New(Config{Seed: 7, Nodes: threeNodes().Nodes, ManualClock: true, Proxy: healthProxyFactory})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Apply(localLBService()); err != nil {
		t.Fatal(err)
	}
	mustCreatePod(t, c, webPod("web-0", "node-b"))
	before := lbHealthOf(t, c, "node-b")
	c.Node("node-b").Uplink().SetFaults(netsim.LinkFaults{Loss: 1})
	c.Clock().Advance(c.LoadBalancerHealthCheck().Interval) // a round of checks starts
	k := c.checker
	k.mu.Lock()
	inFlight := len(k.byTarget)
	k.mu.Unlock()
	if inFlight == 0 {
		t.Fatal("no health check in flight")
	}
	c.Close()
	if n := k.running.Load(); n != 0 {
		t.Errorf("%d health checks still running after Close", n)
	}
	if after := lbHealthOf(t, c, "node-b"); after.Last.Err != before.Last.Err || after.Failures != before.Failures {
		t.Errorf("a check ended by Close was recorded: before %+v, after %+v", before.Last, after.Last)
	}
}
