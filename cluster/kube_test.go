package cluster

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"
	corev1 "k8s.io/api/core/v1"
)

// miniProxy is a test proxy built on the store: ClusterIP and NodePort DNAT in round
// robin over ready endpoints (only local ones for externalTrafficPolicy Local), with
// masquerade for NodePort traffic of Cluster-policy services. It stands in for a real
// proxy mode so that the cluster's store wiring is tested on its own.
type miniProxy struct {
	n     *Node
	mu    sync.Mutex
	vips  map[netfilter.Tuple][]netip.AddrPort // proto, dst, dport → endpoints
	nps   map[[2]uint16][]netip.AddrPort
	masq  map[[2]uint16]bool
	rr    map[string]int
	syncs int
}

func miniProxyFactory(n *Node) (Proxy, error) {
	p := &miniProxy{n: n}
	dnat := netsim.HandlerFunc(p.dnat)
	n.AddHandler(netsim.HandlerSpec{Name: "mini-proxy", Hook: netfilter.Prerouting, Priority: netfilter.PriorityNATDst, NAT: true, Handler: dnat})
	n.AddHandler(netsim.HandlerSpec{Name: "mini-proxy", Hook: netfilter.Output, Priority: netfilter.PriorityNATDst, NAT: true, Handler: dnat})
	n.AddHandler(netsim.HandlerSpec{Name: "mini-proxy-masq", Hook: netfilter.Postrouting, Priority: netfilter.PriorityNATSrc, NAT: true, Handler: netsim.HandlerFunc(func(ctx *netsim.Context, pk *netsim.Packet) netsim.Verdict {
		if pk.Mark&masqMark != 0 {
			return netsim.MasqueradeVerdict(false, "")
		}
		return netsim.VerdictContinue
	})})
	return p, nil
}

func (p *miniProxy) Sync() error {
	st := p.n.Cluster().Store()
	vips := map[netfilter.Tuple][]netip.AddrPort{}
	nps := map[[2]uint16][]netip.AddrPort{}
	masq := map[[2]uint16]bool{}
	for _, svc := range st.ListServices() {
		for _, sp := range svc.Spec.Ports {
			proto := protoOf(sp.Protocol)
			var eps, local []netip.AddrPort
			for _, sl := range st.EndpointSlicesFor(svc.Namespace, svc.Name) {
				var port int32
				for _, x := range sl.Ports {
					if x.Name != nil && *x.Name == sp.Name && x.Port != nil {
						port = *x.Port
					}
				}
				for _, ep := range sl.Endpoints {
					if port == 0 || ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
						continue
					}
					ap := netip.AddrPortFrom(netip.MustParseAddr(ep.Addresses[0]), uint16(port))
					eps = append(eps, ap)
					if ep.NodeName != nil && *ep.NodeName == p.n.Name() {
						local = append(local, ap)
					}
				}
			}
			for _, ip := range svc.Spec.ClusterIPs {
				if a, err := netip.ParseAddr(ip); err == nil {
					vips[netfilter.Tuple{Proto: proto, Dst: a, DstPort: uint16(sp.Port)}] = eps
				}
			}
			if sp.NodePort != 0 {
				k := [2]uint16{uint16(proto), uint16(sp.NodePort)}
				if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
					nps[k] = local
				} else {
					nps[k] = eps
					masq[k] = true
				}
			}
		}
	}
	p.mu.Lock()
	p.vips, p.nps, p.masq = vips, nps, masq
	if p.rr == nil {
		p.rr = map[string]int{}
	}
	p.syncs++
	p.mu.Unlock()
	return nil
}

func (p *miniProxy) dnat(ctx *netsim.Context, pk *netsim.Packet) netsim.Verdict {
	p.mu.Lock()
	defer p.mu.Unlock()
	eps, ok := p.vips[netfilter.Tuple{Proto: pk.Proto, Dst: pk.Dst, DstPort: pk.DstPort}]
	key := fmt.Sprint(pk.Dst, pk.DstPort)
	if !ok && ctx.IsLocalAddr(pk.Dst) {
		k := [2]uint16{uint16(pk.Proto), pk.DstPort}
		eps, ok = p.nps[k]
		if ok && p.masq[k] {
			pk.Mark |= masqMark
		}
		key = fmt.Sprint("np", pk.DstPort)
	}
	if !ok {
		return netsim.VerdictContinue
	}
	if len(eps) == 0 {
		return netsim.RejectVerdict(netfilter.RejectPortUnreachable, "no endpoints")
	}
	i := p.rr[key]
	if !ctx.DryRun() {
		p.rr[key]++
	}
	return netsim.DNATTo(eps[i%len(eps)], "")
}

func kubeCluster(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if cfg.Proxy == nil {
		cfg.Proxy = miniProxyFactory
	}
	if len(cfg.Nodes) == 0 {
		cfg.Nodes = threeNodes().Nodes
	}
	if cfg.Seed == 0 {
		cfg.Seed = 7
	}
	return newTestCluster(t, cfg)
}

func mustCreatePod(t testing.TB, c *Cluster, pod *corev1.Pod) *netsim.Pod {
	t.Helper()
	p, err := c.CreatePod(pod)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func webPod(name, node string) *corev1.Pod {
	return service.NewPod("default/"+name, service.Labels("app=MyApp"), service.ContainerPort("http", 9376, corev1.ProtocolTCP), service.OnNode(node))
}

func TestNodesRegistered(t *testing.T) {
	c := kubeCluster(t, Config{Nodes: []NodeConfig{{Name: "node-a", Zone: "zone-1"}, {Name: "node-b"}}})
	n, ok := c.Store().GetNode("node-a")
	if !ok {
		t.Fatal("node-a is not in the store")
	}
	if n.Spec.PodCIDR != "10.244.0.0/24" || n.Labels[corev1.LabelTopologyZone] != "zone-1" || n.Status.Addresses[0].Address != "172.18.0.2" {
		t.Errorf("node object: podCIDR %s labels %v addresses %v", n.Spec.PodCIDR, n.Labels, n.Status.Addresses)
	}
	if _, ok := c.Store().GetService("default", "kubernetes"); !ok {
		t.Error("the store has no master service")
	}
}

func TestPodsFromStore(t *testing.T) {
	c := kubeCluster(t, Config{})
	p := mustCreatePod(t, c, webPod("web-1", "node-b"))
	obj, _ := c.Store().GetPod("default", "web-1")
	if obj.Status.Phase != corev1.PodRunning || obj.Status.PodIP != p.IP().String() || obj.Status.HostIP != "172.18.0.3" {
		t.Errorf("pod status: phase %s podIP %s (network %s) hostIP %s", obj.Status.Phase, obj.Status.PodIP, p.IP(), obj.Status.HostIP)
	}
	if !p.Net().Listening(netfilter.ProtoTCP, 9376) {
		t.Error("the kubelet did not start the built-in server on the container port")
	}
	// Unscheduled pods go to the emptiest node, in order.
	var nodes []string
	for i := 0; i < 3; i++ {
		q := mustCreatePod(t, c, service.NewPod(fmt.Sprintf("default/free-%d", i)))
		nodes = append(nodes, q.Node().Name())
	}
	if strings.Join(nodes, ",") != "node-a,node-c,node-a" && strings.Join(nodes, ",") != "node-a,node-c,node-b" {
		t.Errorf("scheduled onto %v", nodes)
	}
	// A pod whose dump carries an IP in its node's range keeps it.
	q := mustCreatePod(t, c, service.NewPod("default/dumped", service.OnNode("node-c"), service.PodIP("10.244.2.77")))
	if q.IP().String() != "10.244.2.77" {
		t.Errorf("pod from a dump got %s, want its recorded 10.244.2.77", q.IP())
	}
}

// The Kubernetes Services docs' example: my-service on port 80 → targetPort 9376 of the
// pods labelled app=MyApp.
func myService(opts ...service.Option) *corev1.Service {
	return service.NewService("default/my-service", append([]service.Option{service.Selector("app=MyApp"), service.Port("", 80, 9376)}, opts...)...)
}

func TestServiceTrafficFollowsTheStore(t *testing.T) {
	c := kubeCluster(t, Config{})
	if err := c.Apply(myService()); err != nil {
		t.Fatal(err)
	}
	for i, node := range []string{"node-a", "node-b", "node-c"} {
		mustCreatePod(t, c, webPod(fmt.Sprintf("web-%d", i), node))
	}
	client := mustCreatePod(t, c, service.NewPod("default/client", service.OnNode("node-a")))
	svc, _ := c.Store().GetService("default", "my-service")
	vip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
	seen := map[string]bool{}
	for i := 0; i < 6; i++ {
		w, err := ask(t, client.Net(), vip.String())
		if err != nil {
			t.Fatal(err)
		}
		seen[w.Pod] = true
	}
	if len(seen) != 3 {
		t.Fatalf("backends seen: %v", seen)
	}
	// Delete one pod at once: after the sync nobody reaches it.
	if err := c.DeletePod("default", "web-1", 0); err != nil {
		t.Fatal(err)
	}
	if c.Pod("default", "web-1") != nil {
		t.Fatal("deleted pod still runs")
	}
	for i := 0; i < 6; i++ {
		r, _ := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, Mode: netsim.ProbeConnect})
		if r.Result != netsim.ResultConnected || r.Pod == "default/web-1" {
			t.Errorf("after deleting web-1: %s", r.Outcome)
		}
	}
}

func TestSyncDelayLeavesStaleRules(t *testing.T) {
	c := kubeCluster(t, Config{ManualClock: true, SyncDelay: 2 * time.Second})
	c.Apply(myService())
	c.Clock().Advance(2 * time.Second)
	mustCreatePod(t, c, webPod("web-0", "node-b"))
	mustCreatePod(t, c, service.NewPod("default/client", service.OnNode("node-a")))
	svc, _ := c.Store().GetService("default", "my-service")
	vip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
	probe := netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, Mode: netsim.ProbeConnect}
	if r, _ := c.ProbeOne(probe); r.Result != netsim.ResultRefused {
		t.Errorf("before the proxies synced the new endpoint: %s, want refused (no endpoints yet)", r.Outcome)
	}
	c.Clock().Advance(2 * time.Second)
	if r, _ := c.ProbeOne(probe); r.Result != netsim.ResultConnected {
		t.Errorf("after the sync: %s", r.Outcome)
	}
	// Kill the only backend: until node-a's proxy syncs, it still DNATs to the dead IP.
	c.DeletePod("default", "web-0", 0)
	r, _ := c.ProbeOne(probe)
	if r.Result != netsim.ResultDropped || !strings.Contains(r.Reason, "no neighbour") {
		t.Errorf("stale rule to a deleted pod: %s, want dropped by node-b (nothing answers ARP)", r.Outcome)
	}
	c.Clock().Advance(2 * time.Second)
	if r, _ := c.ProbeOne(probe); r.Result != netsim.ResultRefused {
		t.Errorf("after the sync: %s, want refused", r.Outcome)
	}
}

func TestGracefulTermination(t *testing.T) {
	c := kubeCluster(t, Config{ManualClock: true})
	c.Apply(myService())
	mustCreatePod(t, c, webPod("web-0", "node-b"))
	if err := c.DeletePod("default", "web-0", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if c.Pod("default", "web-0") == nil {
		t.Fatal("a terminating pod's network died before its grace period")
	}
	slices := c.Store().EndpointSlicesFor("default", "my-service")
	term := false
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			term = term || ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
		}
	}
	if !term {
		t.Error("the endpoint of a terminating pod is not marked terminating")
	}
	c.Clock().Advance(31 * time.Second)
	if c.Pod("default", "web-0") != nil {
		t.Error("pod still runs after its grace period")
	}
	if _, ok := c.Store().GetPod("default", "web-0"); ok {
		t.Error("pod still in the store after its grace period")
	}
}

func TestNodePortAndLoadBalancer(t *testing.T) {
	c := kubeCluster(t, Config{})
	ext, err := c.AddExternalHost("client", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(myService(service.LoadBalancer())); err != nil {
		t.Fatal(err)
	}
	mustCreatePod(t, c, webPod("web-0", "node-b"))
	svc, _ := c.Store().GetService("default", "my-service")
	if len(svc.Status.LoadBalancer.Ingress) != 1 || svc.Status.LoadBalancer.Ingress[0].IP != "198.51.100.1" {
		t.Fatalf("load balancer status: %+v", svc.Status.LoadBalancer)
	}
	np := uint16(svc.Spec.Ports[0].NodePort)
	// NodePort on a node without the pod: forwarded and masqueraded (eTP Cluster).
	w, err := ask(t, ext.Net(), netip.AddrPortFrom(c.Node("node-a").IP(), np).String())
	if err != nil {
		t.Fatal(err)
	}
	if w.Pod != "default/web-0" || !strings.HasPrefix(w.Client, "172.18.0.2:") {
		t.Errorf("NodePort via node-a: %+v, want web-0 seeing node-a's address", w)
	}
	// Through the load balancer.
	lb := netip.AddrPortFrom(netip.MustParseAddr("198.51.100.1"), 80)
	r, _ := c.ProbeOne(netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: lb, Mode: netsim.ProbeConnect, Trace: true})
	if r.Result != netsim.ResultConnected || r.ReplyFrom != lb {
		t.Errorf("via the load balancer: %s\n%s", r.Outcome, r.Trace)
	}
	w, err = ask(t, ext.Net(), lb.String())
	if err != nil || w.Pod != "default/web-0" {
		t.Errorf("real traffic via the load balancer: %+v %v", w, err)
	}
	// externalTrafficPolicy Local: only node-b has an endpoint; the LB sends only there,
	// and the client's address survives.
	local := svc.DeepCopy()
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	if _, err := c.Store().Update(local); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		r, _ := c.ProbeOne(netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: lb, Mode: netsim.ProbeConnect})
		if r.Result != netsim.ResultConnected || r.Node != "node-b" || r.SeenSrc.Addr() != ext.IP() {
			t.Errorf("eTP Local via the LB: %s, want node-b seeing the client %s", r.Outcome, ext.IP())
		}
	}
	// Source ranges.
	ranged := local.DeepCopy()
	cur, _ := c.Store().GetService("default", "my-service")
	ranged.ResourceVersion = cur.ResourceVersion
	ranged.Spec.HealthCheckNodePort = cur.Spec.HealthCheckNodePort
	ranged.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"}
	if _, err := c.Store().Update(ranged); err != nil {
		t.Fatal(err)
	}
	r, _ = c.ProbeOne(netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: lb})
	if r.Result != netsim.ResultDropped || !strings.Contains(r.Reason, "loadBalancerSourceRanges") {
		t.Errorf("client outside the source ranges: %s", r.Outcome)
	}
}

func TestProxyPauseAndErrors(t *testing.T) {
	c := kubeCluster(t, Config{})
	n := c.Node("node-a")
	before := n.ProxySyncs()
	n.PauseProxy()
	c.Apply(myService())
	if n.ProxySyncs() != before {
		t.Error("a paused proxy synced")
	}
	n.ResumeProxy()
	if n.ProxySyncs() != before+1 {
		t.Errorf("resume synced %d times, want once", n.ProxySyncs()-before)
	}
	if errs := c.Errors(); len(errs) != 0 {
		t.Errorf("background errors: %v", errs)
	}
}

func TestAddAndRemoveNodes(t *testing.T) {
	c := kubeCluster(t, Config{})
	c.Apply(myService())
	mustCreatePod(t, c, webPod("web-0", "node-a"))
	n, err := c.AddNode(NodeConfig{Name: "node-d"})
	if err != nil {
		t.Fatal(err)
	}
	if n.IP().String() != "172.18.0.5" || n.PodCIDRs()[0].String() != "10.244.3.0/24" {
		t.Errorf("new node: %s %v", n.IP(), n.PodCIDRs())
	}
	if _, ok := c.Store().GetNode("node-d"); !ok {
		t.Error("new node not registered")
	}
	client := mustCreatePod(t, c, service.NewPod("default/client", service.OnNode("node-d")))
	svc, _ := c.Store().GetService("default", "my-service")
	vip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
	if w, err := ask(t, client.Net(), vip.String()); err != nil || w.Pod != "default/web-0" {
		t.Errorf("from the new node: %+v %v", w, err)
	}
	mustCreatePod(t, c, webPod("web-1", "node-b"))
	if err := c.RemoveNode("node-a"); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Store().GetPod("default", "web-0"); ok {
		t.Error("a removed node's pod is still in the store")
	}
	for i := 0; i < 4; i++ {
		r, _ := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, Mode: netsim.ProbeConnect})
		if r.Result != netsim.ResultConnected || r.Pod != "default/web-1" {
			t.Errorf("after removing node-a: %s", r.Outcome)
		}
	}
}
