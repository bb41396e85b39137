package kubeproxy

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/service"
	corev1 "k8s.io/api/core/v1"
)

func newCluster(t *testing.T, mode Mode) *cluster.Cluster {
	t.Helper()
	c, err := cluster.New(cluster.Config{Seed: 11, Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}, Proxy: Factory(Options{Mode: mode})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func backends(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	for i, node := range []string{"node-a", "node-b", "node-c"} {
		pod := service.NewPod(fmt.Sprintf("default/web-%d", i), service.Labels("app=MyApp"), service.ContainerPort("http", 9376, corev1.ProtocolTCP), service.ContainerPort("dns", 53, corev1.ProtocolUDP), service.OnNode(node))
		if _, err := c.CreatePod(pod); err != nil {
			t.Fatal(err)
		}
	}
}

func vipOf(t *testing.T, c *cluster.Cluster, name string, port uint16) netip.AddrPort {
	svc, ok := c.Store().GetService("default", name)
	if !ok {
		t.Fatalf("no service %s", name)
	}
	return netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), port)
}

func ask(t *testing.T, n *netsim.Net, addr string) netsim.Whoami {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := n.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintln(conn, "hi")
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	w, err := netsim.ParseWhoami(line)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestIPTablesModeClusterIP(t *testing.T) {
	c := newCluster(t, IPTables)
	if err := c.Apply(service.NewService("default/my-service", service.Selector("app=MyApp"), service.Port("", 80, 9376))); err != nil {
		t.Fatal(err)
	}
	backends(t, c)
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	vip := vipOf(t, c, "my-service", 80)
	seen := map[string]int{}
	for i := 0; i < 30; i++ {
		w := ask(t, client.Net(), vip.String())
		seen[w.Pod]++
		if !strings.HasPrefix(w.Client, client.IP().String()+":") {
			t.Errorf("a pod-to-service connection was masqueraded: backend saw %s", w.Client)
		}
	}
	if len(seen) != 3 {
		t.Errorf("30 connections reached %v, want all three backends", seen)
	}
	rs, err := c.Probe(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, AllBranches: true, Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("all branches: %v", rs)
	}
	for _, r := range rs {
		if r.Probability < 0.333 || r.Probability > 0.334 {
			t.Errorf("%s with probability %f, want 1/3", r.Outcome, r.Probability)
		}
	}
	rules := rs[0].Trace.Find(netsim.StepRule)
	var chains []string
	for _, s := range rules {
		if s.Matched != nil && *s.Matched {
			chains = append(chains, s.Chain)
		}
	}
	joined := strings.Join(chains, " ")
	for _, want := range []string{"PREROUTING", "KUBE-SERVICES", "KUBE-SVC-", "KUBE-SEP-"} {
		if !strings.Contains(joined, want) {
			t.Errorf("trace's matched chains %q lack %s", joined, want)
		}
	}
}

func TestIPTablesModeNodePortLBAndPolicies(t *testing.T) {
	c := newCluster(t, IPTables)
	ext, err := c.AddExternalHost("client", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(service.NewService("default/lb", service.Selector("app=MyApp"), service.Port("http", 80, 9376), service.LoadBalancer())); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreatePod(service.NewPod("default/web-0", service.Labels("app=MyApp"), service.ContainerPort("http", 9376, corev1.ProtocolTCP), service.OnNode("node-b"))); err != nil {
		t.Fatal(err)
	}
	svc, _ := c.Store().GetService("default", "lb")
	np := uint16(svc.Spec.Ports[0].NodePort)
	// eTP Cluster through node-a: masqueraded to node-a's address.
	r, _ := c.ProbeOne(netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(c.Node("node-a").IP(), np), Mode: netsim.ProbeConnect})
	if r.Result != netsim.ResultConnected || r.Pod != "default/web-0" || r.SeenSrc.Addr() != c.Node("node-a").IP() {
		t.Errorf("NodePort via node-a: %s", r.Outcome)
	}
	lbIP, _ := c.LoadBalancerIP("default", "lb")
	w := ask(t, ext.Net(), netip.AddrPortFrom(lbIP, 80).String())
	if w.Pod != "default/web-0" {
		t.Errorf("through the load balancer: %+v", w)
	}
	// eTP Local: the client's address survives; node-a (no endpoint) drops NodePort traffic.
	local := svc.DeepCopy()
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	if _, err := c.Store().Update(local); err != nil {
		t.Fatal(err)
	}
	r, _ = c.ProbeOne(netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(c.Node("node-b").IP(), np), Mode: netsim.ProbeConnect})
	if r.Result != netsim.ResultConnected || r.SeenSrc.Addr() != ext.IP() {
		t.Errorf("eTP Local on the endpoint's node: %s, want the client's own address", r.Outcome)
	}
	r, _ = c.ProbeOne(netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(c.Node("node-a").IP(), np)})
	if r.Result != netsim.ResultDropped || r.Node != "node-a" {
		t.Errorf("eTP Local on a node without endpoints: %s, want dropped at node-a", r.Outcome)
	}
	for i := 0; i < 5; i++ {
		r, _ = c.ProbeOne(netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(lbIP, 80), Mode: netsim.ProbeConnect})
		if r.Result != netsim.ResultConnected || r.Node != "node-b" || r.SeenSrc.Addr() != ext.IP() {
			t.Errorf("LB with eTP Local: %s", r.Outcome)
		}
	}
}

func TestIPTablesModeNoEndpointsAndStaleUDP(t *testing.T) {
	c := newCluster(t, IPTables)
	if err := c.Apply(service.NewService("default/dns", service.Selector("app=MyApp"), service.UDPPort("dns", 53, 53))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a"))); err != nil {
		t.Fatal(err)
	}
	vip := vipOf(t, c, "dns", 53)
	p := netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoUDP, Dst: vip, SrcPort: 40053, Mode: netsim.ProbeConnect}
	r, _ := c.ProbeOne(p)
	if r.Result != netsim.ResultRefused {
		t.Errorf("UDP service without endpoints: %s, want refused (REJECT)", r.Outcome)
	}
	backends(t, c)
	// kube-proxy clears conntrack entries of a UDP service that gains endpoints, so the
	// same client port reaches a backend at once.
	r, _ = c.ProbeOne(p)
	if r.Result != netsim.ResultReplied || !strings.HasPrefix(r.Pod, "default/web-") {
		t.Errorf("after endpoints appeared: %s", r.Outcome)
	}
}

// A node's kube-proxy flags come from the cluster as it runs, defaults included: the
// cluster CIDR (--cluster-cidr, which local-traffic detection reads), the node's IPs,
// pod CIDRs, labels and every local address.
func TestNodeConfigFor(t *testing.T) {
	c := newCluster(t, IPTables)
	cfg := NodeConfigFor(c.Node("node-b"))
	if len(cfg.ClusterCIDRs) != 1 || cfg.ClusterCIDRs[0].String() != "10.244.0.0/16" {
		t.Errorf("cluster CIDRs %v, want the default 10.244.0.0/16", cfg.ClusterCIDRs)
	}
	if cfg.Name != "node-b" || len(cfg.IPs) != 1 || cfg.IPs[0].String() != "172.18.0.3" || len(cfg.PodCIDRs) != 1 || cfg.PodCIDRs[0].String() != "10.244.1.0/24" {
		t.Errorf("node: %+v", cfg)
	}
	if cfg.Labels["kubernetes.io/hostname"] != "node-b" || cfg.DetectLocalMode != proxy.LocalModeClusterCIDR || len(cfg.Addresses) < 3 {
		t.Errorf("labels %v, detect-local %s, addresses %v", cfg.Labels, cfg.DetectLocalMode, cfg.Addresses)
	}
}

// A node's proxy name (cluster.NodeConfig.ProxyName) reaches its proxy's NodeConfig,
// and a name that is not a label value stops the proxy from starting.
func TestNodeConfigForProxyName(t *testing.T) {
	c, err := cluster.New(cluster.Config{Seed: 11, Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b", ProxyName: "my-proxy"}}, Proxy: Factory(Options{Mode: IPTables})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if got := NodeConfigFor(c.Node("node-a")).ProxyName; got != "" {
		t.Errorf("node-a's proxy name %q, want kube-proxy's", got)
	}
	if got := NodeConfigFor(c.Node("node-b")).ProxyName; got != "my-proxy" {
		t.Errorf("node-b's proxy name %q, want my-proxy", got)
	}
	_, err = cluster.New(cluster.Config{Nodes: []cluster.NodeConfig{{Name: "node-a", ProxyName: "my proxy"}}, Proxy: Factory(Options{Mode: IPTables})})
	if err == nil || !strings.Contains(err.Error(), "proxyName") {
		t.Errorf("a proxy name with a space: %v, want an error naming proxyName", err)
	}
}
