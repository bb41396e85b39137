package kubeproxy

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
	"github.com/clusterlab/clusterlab/service"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

var updateIPVS = flag.Bool("update-ipvs", false, "rewrite testdata/ipvsmode/netsim-*.golden")

// The IPVS-mode tests mirror the iptables-mode ones (kubeproxy_test.go, whose helpers
// cluster, backends, vipOf and ask they use) on the same three-node cluster.

// ipvsCluster is the three-node cluster with the IPVS mode and a scheduler.
func ipvsCluster(t *testing.T, sched string) *cluster.Cluster {
	t.Helper()
	return ipvsClusterWith(t, sched, nil)
}

func ipvsClusterWith(t *testing.T, sched string, adjust func(*cluster.Config)) *cluster.Cluster {
	t.Helper()
	cfg := cluster.Config{Seed: 11, Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}},
		Proxy: Factory(Options{Mode: IPVS, Scheduler: sched})}
	if adjust != nil {
		adjust(&cfg)
	}
	c, err := cluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// session is a long-lived whoami connection.
type session struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dialSession(t *testing.T, n *netsim.Net, addr string) *session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := n.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &session{t: t, conn: conn, r: bufio.NewReader(conn)}
}

// ask sends a line and returns the reply, or the error.
func (s *session) ask(msg string) (netsim.Whoami, error) {
	s.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(s.conn, msg); err != nil {
		return netsim.Whoami{}, err
	}
	line, err := s.r.ReadString('\n')
	if err != nil {
		return netsim.Whoami{}, err
	}
	return netsim.ParseWhoami(line)
}

// close half-closes the connection and reads to the server's end of it, so that both
// FINs have crossed the nodes (and the IPVS entry is in TIME_WAIT) when it returns.
func (s *session) close() {
	s.t.Helper()
	s.conn.SetDeadline(time.Now().Add(10 * time.Second))
	cw, ok := s.conn.(interface{ CloseWrite() error })
	if !ok {
		s.t.Fatalf("%T cannot half-close", s.conn)
	}
	if err := cw.CloseWrite(); err != nil {
		s.t.Fatal(err)
	}
	for {
		if _, err := s.r.ReadByte(); err != nil {
			break
		}
	}
	s.conn.Close()
}

// askClosed is one whoami exchange on a new connection, closed on both sides before it
// returns.
func askClosed(t *testing.T, n *netsim.Net, addr string) netsim.Whoami {
	t.Helper()
	s := dialSession(t, n, addr)
	w, err := s.ask("hi")
	if err != nil {
		t.Fatal(err)
	}
	s.close()
	return w
}

func podIPs(t *testing.T, c *cluster.Cluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range c.Pods() {
		out[p.IP().String()] = p.Namespace() + "/" + p.Name()
	}
	return out
}

// Round robin over three backends is exact: connections cycle through the real servers
// in the kernel's list order (the most recently added first), and no pod-to-service
// connection is masqueraded.
func TestIPVSModeClusterIPRoundRobin(t *testing.T) {
	c := ipvsCluster(t, "rr")
	if err := c.Apply(service.NewService("default/my-service", service.Selector("app=MyApp"), service.Port("", 80, 9376))); err != nil {
		t.Fatal(err)
	}
	backends(t, c)
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	vip := vipOf(t, c, "my-service", 80)
	model := IPVSModel(c.Node("node-a"))
	rss, err := model.GetRealServers(&ipvs.VirtualServer{Address: vip.Addr(), Port: vip.Port(), Protocol: "TCP"})
	if err != nil || len(rss) != 3 {
		t.Fatalf("real servers: %v %v", rss, err)
	}
	pods := podIPs(t, c)
	for i := 0; i < 9; i++ {
		w := askClosed(t, client.Net(), vip.String())
		want := pods[rss[i%3].Address.String()]
		if w.Pod != want {
			t.Errorf("connection %d went to %s, want %s (round robin in list order)", i, w.Pod, want)
		}
		if !strings.HasPrefix(w.Client, client.IP().String()+":") {
			t.Errorf("a pod-to-service connection was masqueraded: backend saw %s", w.Client)
		}
	}
	// Every connection was seen to its end by the model: nine entries, none active.
	after, _ := model.GetRealServers(&ipvs.VirtualServer{Address: vip.Addr(), Port: vip.Port(), Protocol: "TCP"})
	for _, rs := range after {
		if rs.ActiveConn != 0 || rs.InactiveConn != 3 {
			t.Errorf("%s: active %d inactive %d, want 0 and 3 (closed connections in TIME_WAIT)", rs.Address, rs.ActiveConn, rs.InactiveConn)
		}
	}
	var states []string
	for _, e := range model.Connections() {
		states = append(states, e.State)
	}
	if got := strings.Join(states, " "); strings.Count(got, "TIME_WAIT") != 9 {
		t.Errorf("connection entries after nine closed connections: %s", got)
	}
}

// Each scheduler's choice, as the trace states it, is where the connection lands; the
// hashing schedulers keep one client on one backend (sh, dh) or spread its ports (mh
// with mh-port, as kube-proxy sets it).
func TestIPVSModeSchedulers(t *testing.T) {
	for _, sched := range []string{"rr", "wrr", "lc", "wlc", "sed", "nq", "sh", "dh", "mh", "fo", "lblc"} {
		t.Run(sched, func(t *testing.T) {
			c := ipvsCluster(t, sched)
			if err := c.Apply(service.NewService("default/my-service", service.Selector("app=MyApp"), service.Port("", 80, 9376))); err != nil {
				t.Fatal(err)
			}
			backends(t, c)
			if _, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a"))); err != nil {
				t.Fatal(err)
			}
			vip := vipOf(t, c, "my-service", 80)
			pods := podIPs(t, c)
			seen := map[string]int{}
			for i := 0; i < 6; i++ {
				r, err := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, SrcPort: uint16(41000 + i), Mode: netsim.ProbeConnect, Trace: true})
				if err != nil {
					t.Fatal(err)
				}
				if r.Result != netsim.ResultConnected {
					t.Fatalf("probe %d: %s", i, r.Outcome)
				}
				var chose string
				for _, s := range r.Trace.Find(netsim.StepNote) {
					if i := strings.Index(s.Detail, "scheduler "+sched+" chose "); i >= 0 {
						chose = strings.Fields(s.Detail[i+len("scheduler "+sched+" chose "):])[0]
						chose = strings.TrimSuffix(chose, ":")
					}
				}
				ap, err := netip.ParseAddrPort(chose)
				if err != nil {
					t.Fatalf("probe %d: no scheduler decision in the trace:\n%s", i, r.Trace)
				}
				if pods[ap.Addr().String()] != r.Pod {
					t.Errorf("probe %d: the trace says %s chose %s, the connection reached %s", i, sched, chose, r.Pod)
				}
				seen[r.Pod]++
			}
			switch sched {
			case "sh", "dh", "fo":
				if len(seen) != 1 {
					t.Errorf("%s spread one client over %v, want one backend", sched, seen)
				}
			case "rr", "wrr", "lc", "wlc", "mh":
				if len(seen) < 2 {
					t.Errorf("%s sent six connections to %v, want a spread", sched, seen)
				}
			}
		})
	}
}

// NodePort and LoadBalancer through IPVS: eTP Cluster masquerades to the node; eTP Local
// keeps the client's address; on a node without a local endpoint the IPVS mode still
// sends external traffic to the cluster endpoints (k8s #97081) unmasqueraded, so the
// reply does not come back through that node and the connection fails.
func TestIPVSModeNodePortLBAndPolicies(t *testing.T) {
	c := ipvsClusterWith(t, "rr", func(cfg *cluster.Config) { cfg.LoadBalancerMode = "vip" })
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
	r, _ := c.ProbeOne(netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(c.Node("node-a").IP(), np), Mode: netsim.ProbeConnect})
	if r.Result != netsim.ResultConnected || r.Pod != "default/web-0" || r.SeenSrc.Addr() != c.Node("node-a").IP() {
		t.Errorf("NodePort via node-a: %s", r.Outcome)
	}
	lbIP, _ := c.LoadBalancerIP("default", "lb")
	w := ask(t, ext.Net(), netip.AddrPortFrom(lbIP, 80).String())
	if w.Pod != "default/web-0" {
		t.Errorf("through the load balancer: %+v", w)
	}
	// The LB IP is bound to every node's kube-ipvs0.
	if !c.Node("node-c").IsLocalAddr(lbIP) {
		t.Errorf("LB IP %s is not bound on node-c", lbIP)
	}

	local := svc.DeepCopy()
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	if _, err := c.Store().Update(local); err != nil {
		t.Fatal(err)
	}
	r, _ = c.ProbeOne(netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(c.Node("node-b").IP(), np), Mode: netsim.ProbeConnect})
	if r.Result != netsim.ResultConnected || r.SeenSrc.Addr() != ext.IP() {
		t.Errorf("eTP Local on the endpoint's node: %s, want the client's own address", r.Outcome)
	}
	r, _ = c.ProbeOne(netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(c.Node("node-a").IP(), np), Mode: netsim.ProbeConnect})
	if r.Result == netsim.ResultConnected {
		t.Errorf("eTP Local on a node without endpoints connected: %s", r.Outcome)
	}
	if got := IPVSModel(c.Node("node-a")).Rules(); !strings.Contains(got, fmt.Sprintf("-a -t %s:%d -r %s:9376", c.Node("node-a").IP(), np, c.Pods()[0].IP())) {
		t.Errorf("node-a's NodePort virtual server lacks the cluster endpoint (fallback):\n%s", got)
	}
	for i := 0; i < 5; i++ {
		r, _ = c.ProbeOne(netsim.Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(lbIP, 80), Mode: netsim.ProbeConnect})
		if r.Result != netsim.ResultConnected || r.Node != "node-b" || r.SeenSrc.Addr() != ext.IP() {
			t.Errorf("LB with eTP Local: %s", r.Outcome)
		}
	}
}

// ClientIP affinity is IPVS persistence: a client stays on one backend while its
// template lives (the timeout, extended while connections it controls live), then the
// scheduler picks again.
func TestIPVSModeSessionAffinity(t *testing.T) {
	c := ipvsCluster(t, "rr")
	timeout := int32(60)
	svc := service.NewService("default/sticky", service.Selector("app=MyApp"), service.Port("", 80, 9376))
	svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout}}
	if err := c.Apply(svc); err != nil {
		t.Fatal(err)
	}
	backends(t, c)
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	vip := vipOf(t, c, "sticky", 80)
	if rules := IPVSModel(c.Node("node-a")).Rules(); !strings.Contains(rules, fmt.Sprintf("-A -t %s -s rr -p 60", vip)) {
		t.Fatalf("the virtual server is not persistent with the affinity timeout:\n%s", rules)
	}
	first := askClosed(t, client.Net(), vip.String()).Pod
	for i := 0; i < 5; i++ {
		if w := askClosed(t, client.Net(), vip.String()); w.Pod != first {
			t.Errorf("connection %d within the timeout went to %s, first to %s", i, w.Pod, first)
		}
	}
	c.Clock().Advance(5 * time.Minute)
	second := askClosed(t, client.Net(), vip.String()).Pod
	if second == first {
		t.Errorf("after the template expired the client stayed on %s", first)
	}
	// The trace of the next connection names the new template. (A probe leaves its
	// connection established, which would keep the template alive: it comes last.)
	r, _ := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, Mode: netsim.ProbeConnect, Trace: true})
	if r.Pod != second || !strings.Contains(r.Trace.String(), "persistence template of "+client.IP().String()+" sent it to ") {
		t.Errorf("probe within the new template's timeout: %s\n%s", r.Outcome, r.Trace)
	}
}

// A deleted pod's real server is terminated gracefully: weight 0 while its connection
// lives (which keeps working), new connections avoid it; once the pod is gone and the
// connection's entry has expired, the one-minute check deletes it.
func TestIPVSModeGracefulTermination(t *testing.T) {
	c := ipvsCluster(t, "rr")
	if err := c.Apply(service.NewService("default/web", service.Selector("app=MyApp"), service.Port("", 80, 9376))); err != nil {
		t.Fatal(err)
	}
	for i, node := range []string{"node-b", "node-c"} {
		pod := service.NewPod(fmt.Sprintf("default/web-%d", i), service.Labels("app=MyApp"), service.ContainerPort("http", 9376, corev1.ProtocolTCP), service.OnNode(node))
		if _, err := c.CreatePod(pod); err != nil {
			t.Fatal(err)
		}
	}
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	vip := vipOf(t, c, "web", 80)
	s := dialSession(t, client.Net(), vip.String())
	w, err := s.ask("hello")
	if err != nil {
		t.Fatal(err)
	}
	victim := w.Pod
	ns, name, _ := strings.Cut(victim, "/")
	if err := c.DeletePod(ns, name, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	model := IPVSModel(c.Node("node-a"))
	victimIP := ""
	for ip, p := range podIPs(t, c) {
		if p == victim {
			victimIP = ip
		}
	}
	listing := model.Listing(false)
	if !strings.Contains(listing, victimIP+":9376              Masq    0      1") {
		t.Errorf("the terminating pod's real server is not quiesced with its connection:\n%s", listing)
	}
	if got := IPVSProxier(c.Node("node-a"), corev1.IPv4Protocol).Terminating(); len(got) != 1 || !strings.HasSuffix(got[0], victimIP+":9376") {
		t.Errorf("terminating list: %v", got)
	}
	// The existing connection keeps working; new connections avoid the pod.
	for i := 0; i < 3; i++ {
		if w, err := s.ask(fmt.Sprint("again ", i)); err != nil || w.Pod != victim {
			t.Errorf("existing connection after the pod was deleted: %+v %v", w, err)
		}
		if w := askClosed(t, client.Net(), vip.String()); w.Pod == victim {
			t.Errorf("a new connection went to the terminating pod %s", victim)
		}
	}
	s.close()
	// Let the close's FIN exchange run through the stacks and IPVS before time jumps
	// (under load it had not, and the entry stayed ESTABLISHED with 15 minutes to go).
	c.Quiesce()
	// The grace period ends (the pod dies), the connection's entry expires (TIME_WAIT
	// 2 min); the next one-minute check deletes the real server.
	c.Clock().Advance(4 * time.Minute)
	listing = model.Listing(false)
	if strings.Contains(listing, victimIP) {
		t.Errorf("the terminated real server is still there:\n%s", listing)
	}
	if got := IPVSProxier(c.Node("node-a"), corev1.IPv4Protocol).Terminating(); len(got) != 0 {
		t.Errorf("terminating list after the check: %v", got)
	}
}

// A service without endpoints has a virtual server without real servers: IPVS answers
// with ICMP port unreachable (TCP too). A UDP client pinned to one port reaches a
// backend as soon as endpoints appear (kube-proxy clears the stale conntrack entries).
func TestIPVSModeNoEndpointsAndStaleUDP(t *testing.T) {
	c := ipvsCluster(t, "rr")
	if err := c.Apply(service.NewService("default/dns", service.Selector("app=MyApp"), service.UDPPort("dns", 53, 53), service.Port("tcp", 80, 9376))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a"))); err != nil {
		t.Fatal(err)
	}
	vip := vipOf(t, c, "dns", 53)
	r, _ := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(vip.Addr(), 80), Mode: netsim.ProbeConnect, Trace: true})
	if r.Result != netsim.ResultRefused || !strings.Contains(r.Trace.String(), "no destination available") {
		t.Errorf("TCP service without endpoints: %s, want refused by IPVS\n%s", r.Outcome, r.Trace)
	}
	p := netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoUDP, Dst: vip, SrcPort: 40053, Mode: netsim.ProbeConnect}
	r, _ = c.ProbeOne(p)
	if r.Result != netsim.ResultRefused {
		t.Errorf("UDP service without endpoints: %s, want refused", r.Outcome)
	}
	// A port the service does not have on its VIP is refused by KUBE-IPVS-FILTER.
	r, _ = c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(vip.Addr(), 22), Mode: netsim.ProbeConnect, Trace: true})
	if r.Result != netsim.ResultRefused || !strings.Contains(r.Trace.String(), "KUBE-IPVS-FILTER") {
		t.Errorf("VIP on a port it does not serve: %s\n%s", r.Outcome, r.Trace)
	}
	backends(t, c)
	r, _ = c.ProbeOne(p)
	if r.Result != netsim.ResultReplied || !strings.HasPrefix(r.Pod, "default/web-") {
		t.Errorf("after endpoints appeared: %s", r.Outcome)
	}
}

// A pod that reaches itself through its service is masqueraded by KUBE-LOOP-BACK
// (hairpin), so its replies come back through the node.
func TestIPVSModeHairpin(t *testing.T) {
	c := ipvsCluster(t, "rr")
	if err := c.Apply(service.NewService("default/self", service.Selector("app=self"), service.Port("", 80, 9376))); err != nil {
		t.Fatal(err)
	}
	pod, err := c.CreatePod(service.NewPod("default/solo", service.Labels("app=self"), service.ContainerPort("http", 9376, corev1.ProtocolTCP), service.OnNode("node-b")))
	if err != nil {
		t.Fatal(err)
	}
	w := ask(t, pod.Net(), vipOf(t, c, "self", 80).String())
	if w.Pod != "default/solo" || strings.HasPrefix(w.Client, pod.IP().String()+":") {
		t.Errorf("hairpin: %+v, want the pod itself seeing the node's bridge address", w)
	}
	gw := netip.MustParseAddrPort(w.Client).Addr()
	if !c.Node("node-b").IsLocalAddr(gw) {
		t.Errorf("hairpin source %s is not node-b's", gw)
	}
	sets, _ := IPVSEmulator(c.Node("node-b"), corev1.IPv4Protocol).SaveIPSets(context.Background())
	if !strings.Contains(string(sets), fmt.Sprintf("add KUBE-LOOP-BACK %s,tcp:9376,%s", pod.IP(), pod.IP())) {
		t.Errorf("KUBE-LOOP-BACK lacks the local endpoint:\n%s", sets)
	}
}

// A traced connection names the virtual service, the destinations the scheduler looked
// at, its choice and why, the reroute, and later packets' connection entry.
func TestIPVSModeTrace(t *testing.T) {
	c := ipvsCluster(t, "wlc")
	if err := c.Apply(service.NewService("default/my-service", service.Selector("app=MyApp"), service.Port("", 80, 9376))); err != nil {
		t.Fatal(err)
	}
	backends(t, c)
	if _, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a"))); err != nil {
		t.Fatal(err)
	}
	vip := vipOf(t, c, "my-service", 80)
	r, err := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, Mode: netsim.ProbeConnect, Trace: true})
	if err != nil || r.Result != netsim.ResultConnected {
		t.Fatalf("%s %v", r.Outcome, err)
	}
	tr := r.Trace.String()
	for _, want := range []string{
		"IPVS virtual service TCP " + vip.String() + " wlc for TCP ",
		"destinations in list order: ",
		"weight 1 active 0 inactive 0",
		"scheduler wlc chose ",
		"weighted least connections",
		"[entry TCP ",
		"SYN_RECV",
		"REROUTE",
		"KUBE-SERVICES",
	} {
		if !strings.Contains(tr, want) {
			t.Errorf("trace lacks %q:\n%s", want, tr)
		}
	}
	var hooks []string
	for _, s := range r.Trace.Find(netsim.StepHandler) {
		if s.Handler == "ipvs" {
			hooks = append(hooks, s.Hook+" "+s.Verdict)
		}
	}
	if len(hooks) == 0 || hooks[0] != "INPUT REROUTE" {
		t.Errorf("ipvs handler verdicts: %v", hooks)
	}
	// Probing all branches is a dry run: the model's table does not change.
	before := IPVSModel(c.Node("node-a")).ConnListing()
	rs, err := c.Probe(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, AllBranches: true})
	if err != nil || len(rs) != 1 || rs[0].Probability != 1 {
		t.Errorf("all branches: %v %v", rs, err)
	}
	if after := IPVSModel(c.Node("node-a")).ConnListing(); after != before {
		t.Errorf("a dry run changed the connection table:\n%s\n%s", before, after)
	}
}

// A connection idle past IPVS's TCP timeout (900 s) loses its IPVS entry while conntrack
// still has it: the next packet reaches the node's own stack and is reset.
func TestIPVSModeIdleTimeout(t *testing.T) {
	c := ipvsCluster(t, "rr")
	if err := c.Apply(service.NewService("default/web", service.Selector("app=MyApp"), service.Port("", 80, 9376))); err != nil {
		t.Fatal(err)
	}
	backends(t, c)
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	s := dialSession(t, client.Net(), vipOf(t, c, "web", 80).String())
	if _, err := s.ask("one"); err != nil {
		t.Fatal(err)
	}
	c.Quiesce() // the last ACKs are through before time jumps
	c.Clock().Advance(10 * time.Minute)
	if _, err := s.ask("two"); err != nil {
		t.Fatalf("within the IPVS timeout: %v", err)
	}
	c.Quiesce()
	c.Clock().Advance(16 * time.Minute)
	if w, err := s.ask("three"); err == nil || !strings.Contains(err.Error(), "reset") {
		t.Errorf("after 16 idle minutes: %+v %v, want the connection reset", w, err)
	}
}

// ipvsadm -Ln of a node after syncing a small cluster.
func TestIPVSModeListing(t *testing.T) {
	c := ipvsCluster(t, "rr")
	if err := c.Apply(
		service.NewService("default/my-service", service.Selector("app=MyApp"), service.Port("http", 80, 9376), service.UDPPort("dns", 53, 53)),
		service.NewService("default/lb", service.Selector("app=MyApp"), service.Port("http", 80, 9376), service.LoadBalancer()),
	); err != nil {
		t.Fatal(err)
	}
	backends(t, c)
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	askClosed(t, client.Net(), vipOf(t, c, "my-service", 80).String())
	s := dialSession(t, client.Net(), vipOf(t, c, "my-service", 80).String())
	if _, err := s.ask("open"); err != nil {
		t.Fatal(err)
	}
	got := IPVSModel(c.Node("node-a")).Listing(false)
	golden := "../../testdata/ipvsmode/netsim-listing.golden"
	if *updateIPVS {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update-ipvs to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("ipvsadm -Ln of node-a differs from %s (-want +got):\n%s", golden, diff)
	}
}

// loadBalancerSourceRanges through the IPVS mode's sets: the cloud load balancer applies
// them to outside clients; on the nodes, where the LB IP is bound to kube-ipvs0,
// KUBE-PROXY-FIREWALL sends LB traffic to KUBE-SOURCE-RANGES-FIREWALL, which lets the
// ranges through and drops the rest (a pod's connection here) before IPVS sees it; the
// NodePort ignores the ranges.
func TestIPVSModeLBSourceRanges(t *testing.T) {
	c := ipvsClusterWith(t, "rr", func(cfg *cluster.Config) { cfg.LoadBalancerMode = "vip" })
	allowed, err := c.AddExternalHost("allowed", netip.MustParseAddr("203.0.113.10"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddExternalHost("blocked", netip.MustParseAddr("203.0.113.200")); err != nil {
		t.Fatal(err)
	}
	svc := service.NewService("default/lb", service.Selector("app=MyApp"), service.Port("http", 80, 9376), service.LoadBalancer())
	svc.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/25"}
	if err := c.Apply(svc); err != nil {
		t.Fatal(err)
	}
	backends(t, c)
	if _, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a"))); err != nil {
		t.Fatal(err)
	}
	lbIP, ok := c.LoadBalancerIP("default", "lb")
	if !ok {
		t.Fatal("no load-balancer IP")
	}
	if w := ask(t, allowed.Net(), netip.AddrPortFrom(lbIP, 80).String()); !strings.HasPrefix(w.Pod, "default/web-") {
		t.Errorf("allowed source: %+v", w)
	}
	r, _ := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(lbIP, 80), Mode: netsim.ProbeConnect, Trace: true})
	if r.Result != netsim.ResultDropped || r.Node != "node-a" || !strings.Contains(r.Trace.String(), "KUBE-SOURCE-RANGES-FIREWALL") {
		t.Errorf("pod outside the ranges to the LB IP: %s, want dropped on node-a by KUBE-SOURCE-RANGES-FIREWALL\n%s", r.Outcome, r.Trace)
	}
	r, _ = c.ProbeOne(netsim.Probe{From: "external:blocked", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(lbIP, 80), Mode: netsim.ProbeConnect})
	if r.Result != netsim.ResultDropped {
		t.Errorf("blocked outside source: %s, want dropped", r.Outcome)
	}
	// The node itself, outside the ranges: its connection to the VIP bound on
	// kube-ipvs0 leaves from the VIP (the kernel's source for a local destination; the
	// probe names it, as netsim's host stack would pick the node IP), IPVS schedules it
	// at LOCAL_OUT, and KUBE-IPVS-OUT-FILTER's -m ipvs rule drops it
	// (kubernetes#119656).
	for _, all := range []bool{false, true} {
		p := netsim.Probe{From: "node:node-a", Src: lbIP, Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(lbIP, 80), Trace: true, AllBranches: all}
		if !all {
			p.Mode = netsim.ProbeConnect
		}
		rs, err := c.Probe(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Result != netsim.ResultDropped || !strings.Contains(r.Trace.String(), "KUBE-IPVS-OUT-FILTER") || strings.Contains(r.Trace.String(), "not emulated") {
				t.Errorf("node-a (all branches %v) to its LB IP outside the ranges: %s, want dropped by KUBE-IPVS-OUT-FILTER's -m ipvs rule\n%s", all, r.Outcome, r.Trace)
			}
		}
	}
	got, _ := c.Store().GetService("default", "lb")
	np := uint16(got.Spec.Ports[0].NodePort)
	r, _ = c.ProbeOne(netsim.Probe{From: "external:blocked", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(c.Node("node-a").IP(), np), Mode: netsim.ProbeConnect})
	if r.Result != netsim.ResultConnected {
		t.Errorf("blocked source to the NodePort: %s, want connected (ranges apply to the LB IP only)", r.Outcome)
	}
}

// A UDP client that keeps its port fails over when its backend is deleted: the real
// server goes at once (no graceful termination for UDP), kube-proxy clears the flow's
// conntrack entry, and IPVS expires the old connection entry on the next datagram
// (expire_nodest_conn) and schedules it afresh.
func TestIPVSModeUDPFailover(t *testing.T) {
	c := ipvsCluster(t, "rr")
	if err := c.Apply(service.NewService("default/dns", service.Selector("app=MyApp"), service.UDPPort("dns", 53, 53))); err != nil {
		t.Fatal(err)
	}
	backends(t, c)
	if _, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a"))); err != nil {
		t.Fatal(err)
	}
	p := netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoUDP, Dst: vipOf(t, c, "dns", 53), SrcPort: 45053, Mode: netsim.ProbeConnect}
	r, _ := c.ProbeOne(p)
	if r.Result != netsim.ResultReplied {
		t.Fatalf("first datagram: %s", r.Outcome)
	}
	first := r.Pod
	if again, _ := c.ProbeOne(p); again.Pod != first {
		t.Errorf("the same flow moved from %s to %s", first, again.Pod)
	}
	ns, name, _ := strings.Cut(first, "/")
	if err := c.DeletePod(ns, name, 0); err != nil {
		t.Fatal(err)
	}
	r, _ = c.ProbeOne(p)
	if r.Result != netsim.ResultReplied || r.Pod == first || r.Pod == "" {
		t.Errorf("after %s was deleted: %s", first, r.Outcome)
	}
}

// The node's own connections: to a ClusterIP (IPVS at OUTPUT; masqueraded, as the node's
// address is outside the cluster CIDR) and to its own NodePort (the node IP is a virtual
// server too).
func TestIPVSModeFromNode(t *testing.T) {
	c := ipvsCluster(t, "rr")
	if err := c.Apply(service.NewService("default/web", service.Selector("app=MyApp"), service.Port("http", 80, 9376), service.NodePort())); err != nil {
		t.Fatal(err)
	}
	backends(t, c)
	n := c.Node("node-a")
	pods := podIPs(t, c)
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		w := askClosed(t, n.HostNet(), vipOf(t, c, "web", 80).String())
		seen[w.Pod] = true
		src := netip.MustParseAddrPort(w.Client).Addr()
		if !n.IsLocalAddr(src) {
			t.Errorf("node-a's connection reached %s from %s, not from one of node-a's addresses", w.Pod, src)
		}
	}
	if len(seen) != 3 {
		t.Errorf("three connections from the node reached %v", seen)
	}
	svc, _ := c.Store().GetService("default", "web")
	np := svc.Spec.Ports[0].NodePort
	w := askClosed(t, n.HostNet(), fmt.Sprintf("%s:%d", n.IP(), np))
	if _, ok := pods[strings.Split(w.Local, ":")[0]]; !ok || !strings.HasPrefix(w.Pod, "default/web-") {
		t.Errorf("node-a to its own NodePort: %+v", w)
	}
}
