package kubeproxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"

	corev1 "k8s.io/api/core/v1"
)

// hcPayload is the service health check's JSON.
type hcPayload struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

// localLB makes a cluster of the mode with a LoadBalancer Service default/lb
// (externalTrafficPolicy Local) whose only endpoint runs on node-b, and an external host
// "client". It returns the health check node port and the load balancer's address.
func localLB(t *testing.T, cfg cluster.Config) (*cluster.Cluster, *netsim.ExternalHost, uint16, netip.Addr) {
	t.Helper()
	if cfg.Seed == 0 {
		cfg.Seed = 11
	}
	cfg.Nodes = []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}
	c, err := cluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ext, err := c.AddExternalHost("client", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(service.NewService("default/lb", service.Selector("app=MyApp"), service.Port("http", 80, 9376), service.LoadBalancer(),
		service.ExternalTrafficPolicy(corev1.ServiceExternalTrafficPolicyLocal))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreatePod(service.NewPod("default/web-0", service.Labels("app=MyApp"), service.ContainerPort("http", 9376, corev1.ProtocolTCP), service.OnNode("node-b"))); err != nil {
		t.Fatal(err)
	}
	svc, _ := c.Store().GetService("default", "lb")
	if svc.Spec.HealthCheckNodePort == 0 {
		t.Fatal("no health check node port")
	}
	lbIP, ok := c.LoadBalancerIP("default", "lb")
	if !ok {
		t.Fatal("no load balancer")
	}
	return c, ext, uint16(svc.Spec.HealthCheckNodePort), lbIP
}

// get does an HTTP GET from a network inside the simulation.
func get(t *testing.T, n *netsim.Net, url string) (*http.Response, string) {
	t.Helper()
	resp, err := n.HTTPClient().Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: body: %v", url, err)
	}
	return resp, string(body)
}

// lbNodes probes the load balancer from the client with a dozen new flows and returns
// the nodes that took them (or why they were dropped). (The load balancer keeps a flow
// it has seen on its node: each call uses new source ports.)
func lbNodes(t *testing.T, c *cluster.Cluster, lbIP netip.Addr) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	lbNodesPort += 12
	for port := lbNodesPort; port < lbNodesPort+12; port++ {
		r, err := c.ProbeOne(netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(lbIP, 80), SrcPort: port, Mode: netsim.ProbeConnect})
		if err != nil {
			t.Fatal(err)
		}
		if r.Result == netsim.ResultConnected {
			out[r.Node] = true
		} else {
			out[r.Result+": "+r.Reason] = true
		}
	}
	return out
}

var lbNodesPort = uint16(40000)

func healthOf(t *testing.T, c *cluster.Cluster, node string) cluster.NodeHealth {
	t.Helper()
	hs, ok := c.LoadBalancerHealth("default", "lb")
	if !ok {
		t.Fatal("no load balancer health")
	}
	for _, h := range hs {
		if h.Node == node {
			return h
		}
	}
	t.Fatalf("no health of %s in %+v", node, hs)
	return cluster.NodeHealth{}
}

// Every mode serves the health check node port on the node's host network, as kube-proxy
// does: 200 and one local endpoint on the endpoint's node, 503 elsewhere, the JSON and
// headers of pkg/proxy/healthcheck; /healthz on 10256; the cloud load balancer checks
// over the network and sends only to the node that passes.
func TestHealthCheckNodePortEveryMode(t *testing.T) {
	for _, mode := range []Mode{IPTables, IPVS, Userspace} {
		t.Run(string(mode), func(t *testing.T) {
			c, ext, hcPort, lbIP := localLB(t, cluster.Config{Proxy: Factory(Options{Mode: mode})})
			for _, tc := range []struct {
				node   string
				status int
				count  int
			}{{"node-a", 503, 0}, {"node-b", 200, 1}, {"node-c", 503, 0}} {
				url := fmt.Sprintf("http://%s/", netip.AddrPortFrom(c.Node(tc.node).IP(), hcPort))
				resp, body := get(t, ext.Net(), url)
				if resp.StatusCode != tc.status {
					t.Errorf("%s: status %d, want %d", tc.node, resp.StatusCode, tc.status)
				}
				for h, want := range map[string]string{"Content-Type": "application/json", "X-Content-Type-Options": "nosniff", "X-Load-Balancing-Endpoint-Weight": fmt.Sprint(tc.count)} {
					if got := resp.Header.Values(h); len(got) != 1 || got[0] != want {
						t.Errorf("%s: header %s: %q, want %q", tc.node, h, got, want)
					}
				}
				var p hcPayload
				if err := json.Unmarshal([]byte(body), &p); err != nil {
					t.Fatalf("%s: %v in %q", tc.node, err, body)
				}
				if p.Service.Namespace != "default" || p.Service.Name != "lb" || p.LocalEndpoints != tc.count || !p.ServiceProxyHealthy {
					t.Errorf("%s: payload %+v", tc.node, p)
				}
				want := fmt.Sprintf("{\n\t\"service\": {\n\t\t\"namespace\": \"default\",\n\t\t\"name\": \"lb\"\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": true\n}", tc.count)
				if body != want {
					t.Errorf("%s: body\n%s\nwant\n%s", tc.node, body, want)
				}
				// The proxy's own health.
				resp, body = get(t, ext.Net(), fmt.Sprintf("http://%s:%d/healthz", c.Node(tc.node).IP(), HealthzPort))
				if resp.StatusCode != 200 || !strings.Contains(body, `"nodeEligible": true`) || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
					t.Errorf("%s /healthz: %d %s", tc.node, resp.StatusCode, body)
				}
				h := healthOf(t, c, tc.node)
				if h.Source != "health-check" || !h.Checked || h.Healthy != (tc.status == 200) || h.Last.Status != tc.status || h.Last.Target != netip.AddrPortFrom(c.Node(tc.node).IP(), hcPort) {
					t.Errorf("%s: the load balancer's view: %+v", tc.node, h)
				}
				// The check crossed the node's rules like any packet.
				if want := fmt.Sprintf(`health check node port" -m tcp --dport %d -j ACCEPT => ACCEPT`, hcPort); mode == IPTables && !strings.Contains(h.Last.Trace.String(), want) {
					t.Errorf("%s: the check's trace lacks %q:\n%s", tc.node, want, h.Last.Trace)
				}
			}
			if got := lbNodes(t, c, lbIP); len(got) != 1 || !got["node-b"] {
				t.Errorf("load-balancer flows went to %v, want node-b only", got)
			}
			// Real traffic too.
			w := ask(t, ext.Net(), netip.AddrPortFrom(lbIP, 80).String())
			if w.Pod != "default/web-0" || mode != Userspace && !strings.HasPrefix(w.Client, ext.IP().String()+":") {
				t.Errorf("through the load balancer: %+v", w)
			}
			// The server goes with the service (or its policy).
			if got := HealthCheckNodePorts(c.Node("node-a")); got["default/lb"] != hcPort {
				t.Errorf("served health check node ports: %v", got)
			}
			svc, _ := c.Store().GetService("default", "lb")
			svc = svc.DeepCopy()
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
			if _, err := c.Store().Update(svc); err != nil {
				t.Fatal(err)
			}
			for _, n := range c.Nodes() {
				if n.HostNet().Listening(netfilter.ProtoTCP, hcPort) || len(HealthCheckNodePorts(n)) != 0 {
					t.Errorf("%s still serves the health check of a Cluster-policy service", n.Name())
				}
			}
			hs, _ := c.LoadBalancerHealth("default", "lb")
			for _, h := range hs {
				if !h.Healthy || h.Source != "policy" {
					t.Errorf("Cluster policy: %+v, want every node healthy by policy", h)
				}
			}
		})
	}
}

// A node whose health port stops answering (a handler dropping the checks, as a firewall
// would) is taken out after UnhealthyThreshold failed checks, and back after
// HealthyThreshold passed ones. The failure says where the check was dropped.
func TestHealthCheckBlockedPort(t *testing.T) {
	c, _, hcPort, lbIP := localLB(t, cluster.Config{Proxy: Factory(Options{Mode: IPTables})})
	b := c.Node("node-b")
	remove := b.AddHandler(netsim.HandlerSpec{Name: "firewall", Hook: netfilter.Prerouting, Priority: netfilter.PriorityRaw, Handler: netsim.HandlerFunc(func(ctx *netsim.Context, pk *netsim.Packet) netsim.Verdict {
		if pk.Proto == netfilter.ProtoTCP && pk.DstPort == hcPort {
			return netsim.Verdict{Kind: netsim.Drop, Reason: "health port blocked"}
		}
		return netsim.VerdictContinue
	})})
	for i := 1; i <= 3; i++ {
		c.CheckLoadBalancers()
		h := healthOf(t, c, "node-b")
		if h.Failures != i || h.Healthy != (i < 3) || !strings.Contains(h.Last.Err, "dropped at node node-b") || !strings.Contains(h.Last.Err, "health port blocked") {
			t.Errorf("after %d blocked checks: %+v", i, h)
		}
		if h.Last.Trace == nil || !strings.Contains(h.Last.Trace.String(), "firewall") {
			t.Errorf("check %d: no trace of the drop: %v", i, h.Last.Trace)
		}
		if i < 3 {
			if got := lbNodes(t, c, lbIP); !got["node-b"] {
				t.Errorf("after %d failed checks the load balancer already left node-b: %v", i, got)
			}
		}
	}
	for k := range lbNodes(t, c, lbIP) {
		if !strings.Contains(k, "no healthy backend node") {
			t.Errorf("node-b out, no other node healthy: %s", k)
		}
	}
	remove()
	c.CheckLoadBalancers()
	if h := healthOf(t, c, "node-b"); !h.Healthy || h.Successes != 1 || !h.Last.OK {
		t.Errorf("after the port answers again: %+v", h)
	}
	if got := lbNodes(t, c, lbIP); len(got) != 1 || !got["node-b"] {
		t.Errorf("back: flows went to %v", got)
	}
}

// On the virtual clock: a partition between the node and the outside makes the periodic
// checks fail (8 s apart, each failing at its 1 s timeout) until the node is out; after
// the partition heals the next check brings it back. A kube-proxy that stopped syncing
// keeps answering what it last knew until an update has waited for its health timeout.
func TestHealthCheckOnTheClock(t *testing.T) {
	for _, mode := range []Mode{IPTables, IPVS, Userspace} {
		t.Run(string(mode), func(t *testing.T) {
			c, ext, hcPort, lbIP := localLB(t, cluster.Config{ManualClock: true, Proxy: Factory(Options{Mode: mode})})
			cfg := c.LoadBalancerHealthCheck()
			if cfg.Interval != 8*time.Second || cfg.Timeout != time.Second || cfg.HealthyThreshold != 1 || cfg.UnhealthyThreshold != 3 {
				t.Fatalf("defaults: %+v", cfg)
			}
			if err := c.Partition([]string{"node-b"}, []string{"external", "node-a", "node-c"}); err != nil {
				t.Fatal(err)
			}
			c.Clock().Advance(8*time.Second + time.Second) // the first round and its timeout
			if h := healthOf(t, c, "node-b"); !h.Healthy || h.Failures != 1 || !strings.Contains(h.Last.Err, "partition") {
				t.Errorf("one failed round: %+v", h)
			}
			c.Clock().Advance(16 * time.Second)
			if h := healthOf(t, c, "node-b"); h.Healthy || h.Failures != 3 {
				t.Errorf("three failed rounds: %+v", h)
			}
			c.Heal()
			c.Clock().Advance(8 * time.Second)
			if h := healthOf(t, c, "node-b"); !h.Healthy || !h.Last.OK {
				t.Errorf("after healing: %+v", h)
			}
			if got := lbNodes(t, c, lbIP); len(got) != 1 || !got["node-b"] {
				t.Errorf("after healing, flows went to %v", got)
			}

			// A hung kube-proxy on node-b: its endpoint goes, but it still answers 200.
			b := c.Node("node-b")
			b.PauseProxy()
			if err := c.DeletePod("default", "web-0", 0); err != nil {
				t.Fatal(err)
			}
			c.CheckLoadBalancers()
			if h := healthOf(t, c, "node-b"); !h.Healthy || !h.Last.OK || !strings.Contains(h.Last.Body, `"localEndpoints": 1`) {
				t.Errorf("a paused proxy answers what it last knew: %+v", h)
			}
			url := fmt.Sprintf("http://%s/", netip.AddrPortFrom(b.IP(), hcPort))
			done := make(chan string, 1)
			go func() {
				c.Clock().Advance(61 * time.Second) // past kube-proxy's health timeout
				done <- ""
			}()
			<-done
			resp, body := get(t, ext.Net(), url)
			if resp.StatusCode != 503 || !strings.Contains(body, `"serviceProxyHealthy": false`) || !strings.Contains(body, `"localEndpoints": 1`) {
				t.Errorf("after the health timeout: %d %s", resp.StatusCode, body)
			}
			resp, body = get(t, ext.Net(), fmt.Sprintf("http://%s:%d/healthz", b.IP(), HealthzPort))
			if resp.StatusCode != 503 {
				t.Errorf("/healthz of a hung proxy: %d %s", resp.StatusCode, body)
			}
			if h := healthOf(t, c, "node-b"); h.Healthy {
				t.Errorf("a hung proxy's node still takes flows: %+v", h)
			}
			b.ResumeProxy()
			resp, body = get(t, ext.Net(), url)
			if resp.StatusCode != 503 || !strings.Contains(body, `"localEndpoints": 0`) || !strings.Contains(body, `"serviceProxyHealthy": true`) {
				t.Errorf("after the sync: %d %s", resp.StatusCode, body)
			}
		})
	}
}

// /healthz fails on a node the cluster autoscaler is about to remove; the service health
// checks do not look at that.
func TestHealthzNodeEligible(t *testing.T) {
	c, ext, hcPort, _ := localLB(t, cluster.Config{Proxy: Factory(Options{Mode: IPTables})})
	obj, _ := c.Store().GetNode("node-b")
	obj = obj.DeepCopy()
	obj.Spec.Taints = append(obj.Spec.Taints, corev1.Taint{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectNoSchedule})
	if _, err := c.Store().Update(obj); err != nil {
		t.Fatal(err)
	}
	ip := c.Node("node-b").IP()
	resp, body := get(t, ext.Net(), fmt.Sprintf("http://%s:%d/healthz", ip, HealthzPort))
	if resp.StatusCode != 503 || !strings.Contains(body, `"nodeEligible": false`) {
		t.Errorf("/healthz of a node to be deleted: %d %s", resp.StatusCode, body)
	}
	resp, body = get(t, ext.Net(), fmt.Sprintf("http://%s:%d/livez", ip, HealthzPort))
	if resp.StatusCode != 200 {
		t.Errorf("/livez: %d %s", resp.StatusCode, body)
	}
	resp, _ = get(t, ext.Net(), fmt.Sprintf("http://%s:%d/", ip, hcPort))
	if resp.StatusCode != 200 {
		t.Errorf("service health check of the tainted node: %d", resp.StatusCode)
	}
}

// A node whose uplink loses every packet: the answers never come back, each periodic
// check fails at its timeout, and after three the node is out; once the link is clean
// the next check brings it back.
func TestHealthCheckLossyUplink(t *testing.T) {
	c, _, _, lbIP := localLB(t, cluster.Config{ManualClock: true, Proxy: Factory(Options{Mode: IPTables})})
	b := c.Node("node-b")
	b.Uplink().SetFaults(netsim.LinkFaults{Loss: 1})
	c.Clock().Advance(2*8*time.Second + time.Second)
	if h := healthOf(t, c, "node-b"); !h.Healthy || h.Failures != 2 || !strings.Contains(h.Last.Err, "timeout") {
		t.Errorf("after two lost rounds: %+v", h)
	}
	c.Clock().Advance(8 * time.Second)
	if h := healthOf(t, c, "node-b"); h.Healthy || h.Failures != 3 {
		t.Errorf("after three lost rounds: %+v", h)
	}
	for k := range lbNodes(t, c, lbIP) {
		if !strings.Contains(k, "no healthy backend node") {
			t.Errorf("node-b out: %s", k)
		}
	}
	b.Uplink().SetFaults(netsim.LinkFaults{})
	c.Clock().Advance(8 * time.Second)
	if h := healthOf(t, c, "node-b"); !h.Healthy || !h.Last.OK {
		t.Errorf("after the link is clean again: %+v", h)
	}
}
