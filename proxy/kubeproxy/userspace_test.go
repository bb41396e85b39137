package kubeproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/userspace"
	"github.com/clusterlab/clusterlab/service"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func userspaceCluster(t testing.TB, uc UserspaceConfig) *cluster.Cluster {
	t.Helper()
	c, err := cluster.New(cluster.Config{Seed: 11, Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}, Proxy: Factory(Options{Mode: Userspace, ModeConfig: uc})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, err := range c.Errors() {
			t.Errorf("cluster error: %v", err)
		}
		c.Close()
	})
	return c
}

// nodeAddrs is every address of a node: "the node's address" a backend may see is its
// IP, or its bridge address when the endpoint is one of its own pods.
func usNodeAddrs(n *cluster.Node) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, i := range n.Interfaces() {
		for _, p := range i.Addrs {
			out[p.Addr()] = true
		}
	}
	return out
}

func usLastDecision(t *testing.T, n *cluster.Node) userspace.Decision {
	t.Helper()
	ds := UserspaceDecisions(n)
	if len(ds) == 0 {
		t.Fatalf("no decisions on %s", n.Name())
	}
	return ds[len(ds)-1]
}

func usPodIP(t *testing.T, c *cluster.Cluster, key string) netip.Addr {
	t.Helper()
	ns, name, _ := strings.Cut(key, "/")
	p := c.Pod(ns, name)
	if p == nil {
		t.Fatalf("no pod %s", key)
	}
	return p.IP()
}

// listenerOf returns a node's listener for a service port name.
func usListener(t *testing.T, n *cluster.Node, svc, port string) userspace.Listener {
	t.Helper()
	for _, l := range UserspaceProxier(n, corev1.IPv4Protocol).Listeners() {
		if l.Service.Name == svc && l.Service.Port == port {
			return l
		}
	}
	t.Fatalf("%s: no listener for %s:%s", n.Name(), svc, port)
	return userspace.Listener{}
}

func TestUserspaceModeClusterIPTCP(t *testing.T) {
	c := userspaceCluster(t, UserspaceConfig{})
	if err := c.Apply(service.NewService("default/my-service", service.Selector("app=MyApp"), service.Port("http", 80, 9376))); err != nil {
		t.Fatal(err)
	}
	backends(t, c)
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	nodeA := c.Node("node-a")
	px := UserspaceProxier(nodeA, corev1.IPv4Protocol)
	l := usListener(t, nodeA, "my-service", "http")
	order := px.Balancer().Endpoints(l.Service)
	if len(order) != 3 {
		t.Fatalf("endpoints %v", order)
	}
	vip := vipOf(t, c, "my-service", 80)
	if len(l.Portals) != 1 || l.Portals[0] != vip {
		t.Errorf("listener portals %v, want %v", l.Portals, vip)
	}
	addrs := usNodeAddrs(nodeA)
	for i := 0; i < 9; i++ {
		w := ask(t, client.Net(), vip.String())
		d := usLastDecision(t, nodeA)
		if d.Endpoint != order[i%3] || d.Attempts[0].Reason != userspace.ReasonRoundRobin {
			t.Errorf("connection %d: %s; want %s by round robin", i, d, order[i%3])
		}
		if !strings.HasPrefix(order[i%3], usPodIP(t, c, w.Pod).String()+":") {
			t.Errorf("connection %d answered by %s, decision says %s", i, w.Pod, d.Endpoint)
		}
		seen := netip.MustParseAddrPort(w.Client)
		if !addrs[seen.Addr()] || seen != d.Source {
			t.Errorf("backend saw %v; want a node-a address, the decision's source %v", seen, d.Source)
		}
		if d.Client.Addr() != client.IP() || d.Listener.Port() != l.Port {
			t.Errorf("decision's client %v / listener %v", d.Client, d.Listener)
		}
	}

	// The datapath's view: REDIRECT to the listener on the node, and the note.
	r, err := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, Mode: netsim.ProbeConnect, Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Result != netsim.ResultConnected || r.Node != "node-a" || r.Pod != "" || r.Addr.Port() != l.Port || r.ReplyFrom != vip {
		t.Errorf("probe: %s; want connected to node-a's listener :%d, replies from %v", r.Outcome, l.Port, vip)
	}
	trace := r.Trace.String()
	for _, want := range []string{
		"-j REDIRECT --to-ports " + fmt.Sprint(l.Port),
		"redirected to the userspace proxy listener for default/my-service:http at :" + fmt.Sprint(l.Port) + "/tcp (the client asked for " + vip.String() + ")",
		"the proxy would connect to " + order[0],
	} {
		if !strings.Contains(trace, want) {
			t.Errorf("trace lacks %q:\n%s", want, trace)
		}
	}
}

// askUDP sends one datagram from a fresh socket and reads the answer.
func usAskUDP(t *testing.T, conn net.Conn) netsim.Whoami {
	t.Helper()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1024)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("udp read: %v", err)
	}
	w, err := netsim.ParseWhoami(string(buf[:n]))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func usDialUDP(t *testing.T, n *netsim.Net, addr netip.AddrPort) net.Conn {
	t.Helper()
	conn, err := n.Dial("udp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestUserspaceModeClusterIPUDP(t *testing.T) {
	c := userspaceCluster(t, UserspaceConfig{UDPIdleTimeout: 30 * time.Second})
	if err := c.Apply(service.NewService("default/dns", service.Selector("app=MyApp"), service.UDPPort("dns", 53, 53))); err != nil {
		t.Fatal(err)
	}
	backends(t, c)
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	nodeA := c.Node("node-a")
	px := UserspaceProxier(nodeA, corev1.IPv4Protocol)
	l := usListener(t, nodeA, "dns", "dns")
	order := px.Balancer().Endpoints(l.Service)
	vip := vipOf(t, c, "dns", 53)
	addrs := usNodeAddrs(nodeA)
	// Each socket is a new client address: a new session, the next endpoint.
	for i := 0; i < 6; i++ {
		conn := usDialUDP(t, client.Net(), vip)
		w := usAskUDP(t, conn)
		d := usLastDecision(t, nodeA)
		if d.Protocol != corev1.ProtocolUDP || d.Endpoint != order[i%3] || !strings.HasPrefix(d.Endpoint, usPodIP(t, c, w.Pod).String()+":") {
			t.Errorf("datagram %d answered by %s; decision %s; want %s", i, w.Pod, d, order[i%3])
		}
		seen := netip.MustParseAddrPort(w.Client)
		if !addrs[seen.Addr()] || seen != d.Source {
			t.Errorf("backend saw %v; want a node-a address, the decision's source %v", seen, d.Source)
		}
		// More datagrams from the same socket stay in the session: same backend, same
		// source, no new decision.
		n := len(UserspaceDecisions(nodeA))
		for k := 0; k < 2; k++ {
			if w2 := usAskUDP(t, conn); w2.Pod != w.Pod || w2.Client != w.Client {
				t.Errorf("same client, datagram %d: %+v, want %+v", k+2, w2, w)
			}
		}
		if m := len(UserspaceDecisions(nodeA)); m != n {
			t.Errorf("%d new decisions within a session", m-n)
		}
	}
	if s := px.Sessions(); len(s) != 6 {
		t.Errorf("%d sessions, want 6", len(s))
	}
}

func TestUserspaceModeUDPSessionsTimeOut(t *testing.T) {
	c := userspaceCluster(t, UserspaceConfig{UDPIdleTimeout: 30 * time.Second})
	if err := c.Apply(service.NewService("default/dns", service.Selector("app=MyApp"), service.UDPPort("dns", 53, 53))); err != nil {
		t.Fatal(err)
	}
	backends(t, c)
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	nodeA := c.Node("node-a")
	px := UserspaceProxier(nodeA, corev1.IPv4Protocol)
	order := px.Balancer().Endpoints(usListener(t, nodeA, "dns", "dns").Service)
	conn := usDialUDP(t, client.Net(), vipOf(t, c, "dns", 53))
	first := usAskUDP(t, conn)
	c.Clock().Advance(20 * time.Second)
	if w := usAskUDP(t, conn); w.Client != first.Client {
		t.Errorf("after 20 s idle: %+v, want the same session (%s)", w, first.Client)
	}
	if s := px.Sessions(); len(s) != 1 || s[0].Client.Addr() != client.IP() {
		t.Fatalf("sessions: %+v", s)
	}
	// 30 s without a datagram: the session ends on the virtual clock.
	c.Clock().Advance(30 * time.Second)
	if s := px.Sessions(); len(s) != 0 {
		t.Fatalf("sessions after 30 s idle: %+v", s)
	}
	w := usAskUDP(t, conn)
	d := usLastDecision(t, nodeA)
	if len(UserspaceDecisions(nodeA)) != 2 || d.Endpoint != order[1] || w.Client == first.Client {
		t.Errorf("after the timeout: %+v, decision %s; want a new session to %s", w, d, order[1])
	}
}

func TestUserspaceModeAffinity(t *testing.T) {
	c := userspaceCluster(t, UserspaceConfig{})
	svc := service.NewService("default/sticky", service.Selector("app=MyApp"), service.Port("http", 80, 9376))
	svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(int32(60))}}
	if err := c.Apply(svc); err != nil {
		t.Fatal(err)
	}
	backends(t, c)
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	nodeA := c.Node("node-a")
	vip := vipOf(t, c, "sticky", 80)
	first := ask(t, client.Net(), vip.String())
	for i := 0; i < 5; i++ {
		c.Clock().Advance(50 * time.Second)
		w := ask(t, client.Net(), vip.String())
		d := usLastDecision(t, nodeA)
		if w.Pod != first.Pod || d.Attempts[0].Reason != userspace.ReasonAffinity {
			t.Fatalf("connection %d, 50 s after the previous: %s (%s), want %s by affinity", i, w.Pod, d, first.Pod)
		}
	}
	// Another client has its own entry.
	other, err := c.CreatePod(service.NewPod("default/other", service.OnNode("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	if w := ask(t, other.Net(), vip.String()); w.Pod == first.Pod {
		t.Errorf("another client got %s too; round robin should have moved on", w.Pod)
	}
	// 60 s idle: the entry has expired on the virtual clock.
	c.Clock().Advance(60 * time.Second)
	w := ask(t, client.Net(), vip.String())
	d := usLastDecision(t, nodeA)
	if w.Pod == first.Pod || d.Attempts[0].Reason != userspace.ReasonRoundRobin {
		t.Errorf("after the timeout: %s (%s), want the next endpoint by round robin", w.Pod, d)
	}
}

// A pod is killed while the client's node has not synced: the userspace proxy's dial
// to it fails and the next endpoint takes the connection; the iptables mode, on the
// same cluster, sends a third of new connections into the void.
func TestUserspaceModeRetriesDeadEndpoint(t *testing.T) {
	killWeb1 := func(c *cluster.Cluster) (*netsim.Pod, string) { return usKillWeb1(t, c) }
	ipt := newCluster(t, IPTables)
	killWeb1(ipt)
	vip := vipOf(t, ipt, "my-service", 80)
	rs, err := ipt.Probe(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, AllBranches: true})
	if err != nil {
		t.Fatal(err)
	}
	lost := 0.0
	for _, r := range rs {
		if r.Result != netsim.ResultDelivered {
			lost += r.Probability
		}
	}
	if lost < 0.33 || lost > 0.34 {
		t.Errorf("iptables mode with a stale endpoint: %v lost, want 1/3: %v", lost, rs)
	}

	c := userspaceCluster(t, UserspaceConfig{})
	client, dead := killWeb1(c)
	nodeA := c.Node("node-a")
	vip = vipOf(t, c, "my-service", 80)
	order := UserspaceProxier(nodeA, corev1.IPv4Protocol).Balancer().Endpoints(usListener(t, nodeA, "my-service", "http").Service)
	// Round robin, where the dead endpoint's turn also uses the next one's.
	want := 0
	for i, idx := 0, 0; i < 9; i++ {
		if order[idx] == dead {
			want++
			idx = (idx + 1) % 3
		}
		idx = (idx + 1) % 3
	}
	if want == 0 {
		t.Fatalf("node-a's proxier has no endpoint %s (%v): it synced", dead, order)
	}
	retries := 0
	for i := 0; i < 9; i++ {
		w := ask(t, client.Net(), vip.String())
		if w.Pod == "default/web-1" {
			t.Fatalf("the killed pod answered")
		}
		d := usLastDecision(t, nodeA)
		if d.Retries() > 0 {
			retries++
			if d.Attempts[0].Endpoint != dead || d.Attempts[0].Err == "" || d.Endpoint == dead {
				t.Errorf("retry: %s", d)
			}
		}
	}
	if retries != want {
		t.Errorf("%d of 9 connections retried, want %d (the dead endpoint's turns in %v)", retries, want, order)
	}
	// Once the node syncs, the dead endpoint is gone and nothing is retried.
	nodeA.ResumeProxy()
	c.SyncProxies()
	n := len(UserspaceDecisions(nodeA))
	for i := 0; i < 4; i++ {
		ask(t, client.Net(), vip.String())
	}
	for _, d := range UserspaceDecisions(nodeA)[n:] {
		if d.Retries() != 0 {
			t.Errorf("after the sync: %s", d)
		}
	}
}

// usKillWeb1 makes my-service (80 -> 9376) with web-0..2 on node-a..c and a client pod
// on node-a, pauses node-a's proxy and kills web-1: node-a still balances over its
// address, which is returned with the client.
func usKillWeb1(t *testing.T, c *cluster.Cluster) (*netsim.Pod, string) {
	t.Helper()
	if err := c.Apply(service.NewService("default/my-service", service.Selector("app=MyApp"), service.Port("http", 80, 9376))); err != nil {
		t.Fatal(err)
	}
	backends(t, c)
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	c.Node("node-a").PauseProxy()
	dead := usPodIP(t, c, "default/web-1").String() + ":9376"
	if err := c.DeletePod("default", "web-1", 0); err != nil {
		t.Fatal(err)
	}
	return client, dead
}

// A traced packet stops at the proxy's listener, but its trace shows what the proxier
// last did for that client and service: the dead endpoint it tried, the failed dial
// and the retry that took the connection. A client the proxier never served gets no
// such notes.
func TestUserspaceModeTraceShowsRetries(t *testing.T) {
	c := userspaceCluster(t, UserspaceConfig{})
	client, dead := usKillWeb1(t, c)
	other, err := c.CreatePod(service.NewPod("default/other", service.OnNode("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	nodeA := c.Node("node-a")
	vip := vipOf(t, c, "my-service", 80)
	var retried userspace.Decision
	for i := 0; i < 3 && retried.Seq == 0; i++ { // round robin over three: one turn is the dead one's
		ask(t, client.Net(), vip.String())
		if d := usLastDecision(t, nodeA); d.Retries() > 0 {
			retried = d
		}
	}
	if retried.Seq == 0 {
		t.Fatalf("no connection was retried: %v", UserspaceDecisions(nodeA))
	}
	trace := func(from string) string {
		t.Helper()
		rs, err := c.Probe(netsim.Probe{From: from, Proto: netfilter.ProtoTCP, Dst: vip, Trace: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 1 || rs[0].Trace == nil {
			t.Fatalf("want one traced outcome, got %v", rs)
		}
		return rs[0].Trace.String()
	}
	text := trace("pod:" + client.Key())
	if testing.Verbose() {
		t.Logf("trace:\n%s", text)
	}
	for _, w := range []string{
		fmt.Sprintf("the proxier's last decision for client %v on default/my-service:http (#%d)", client.IP(), retried.Seq),
		"2 attempt(s), 1 retry(ies)",
		"attempt 1: tried " + dead + " (round robin",
		"the dial failed: ",
		"attempt 2: retried with " + retried.Endpoint + " (round robin",
		"the dial succeeded",
		"→ " + retried.Endpoint + " took the connection, seeing the client as " + retried.Source.String(),
	} {
		if !strings.Contains(text, w) {
			t.Errorf("the trace lacks %q:\n%s", w, text)
		}
	}
	if text := trace("pod:" + other.Key()); strings.Contains(text, "last decision") || !strings.Contains(text, "redirected to the userspace proxy listener") {
		t.Errorf("a client the proxier never served: want the listener note and no decision:\n%s", text)
	}
}

func TestUserspaceModeNodePortAndHost(t *testing.T) {
	c := userspaceCluster(t, UserspaceConfig{})
	ext, err := c.AddExternalHost("client", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(service.NewService("default/web", service.Selector("app=MyApp"), service.Port("http", 80, 9376), service.NodePort())); err != nil {
		t.Fatal(err)
	}
	backends(t, c)
	svc, _ := c.Store().GetService("default", "web")
	np := uint16(svc.Spec.Ports[0].NodePort)
	nodeA := c.Node("node-a")
	l := usListener(t, nodeA, "web", "http")
	if l.NodePort != np {
		t.Errorf("listener node port %d, want %d", l.NodePort, np)
	}
	addrs := usNodeAddrs(nodeA)
	seen := map[string]bool{}
	for i := 0; i < 6; i++ {
		w := ask(t, ext.Net(), netip.AddrPortFrom(nodeA.IP(), np).String())
		seen[w.Pod] = true
		d := usLastDecision(t, nodeA)
		if src := netip.MustParseAddrPort(w.Client); !addrs[src.Addr()] || d.Client.Addr() != ext.IP() {
			t.Errorf("via the node port: backend saw %v, decision %s", src, d)
		}
	}
	if len(seen) != 3 {
		t.Errorf("node port reached %v", seen)
	}
	// The node's own processes: KUBE-PORTALS-HOST DNATs to the node IP.
	w := ask(t, nodeA.HostNet(), vipOf(t, c, "web", 80).String())
	if d := usLastDecision(t, nodeA); d.Listener != netip.AddrPortFrom(nodeA.IP(), l.Port) || !strings.HasPrefix(d.Endpoint, usPodIP(t, c, w.Pod).String()+":") {
		t.Errorf("from the node: %+v, decision %s", w, d)
	}
	// ... and its own node port.
	ask(t, nodeA.HostNet(), netip.AddrPortFrom(nodeA.IP(), np).String())
	// The node port itself is held by the proxy.
	if !nodeA.HostNet().Listening(netfilter.ProtoTCP, np) {
		t.Error("node port not held open on the node")
	}
}

func TestUserspaceModeNoEndpoints(t *testing.T) {
	decided := make(chan userspace.Decision, 16)
	c := userspaceCluster(t, UserspaceConfig{OnDecision: func(node string, d userspace.Decision) { decided <- d }})
	if err := c.Apply(
		service.NewService("default/empty", service.Selector("app=nothing"), service.Port("http", 80, 9376)),
		service.NewService("default/empty-dns", service.Selector("app=nothing"), service.UDPPort("dns", 53, 53)),
	); err != nil {
		t.Fatal(err)
	}
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	nodeA := c.Node("node-a")
	// TCP: the proxy accepts (the handshake is with the proxy) and closes at once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := client.Net().DialContext(ctx, "tcp", vipOf(t, c, "empty", 80).String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintln(conn, "hi")
	line, err := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if line != "" || !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(fmt.Sprint(err), "reset") {
		t.Errorf("service without endpoints: read %q, %v; want the connection closed without an answer", line, err)
	}
	d := <-decided
	if d.Endpoint != "" || d.Err != userspace.ErrMissingEndpoints.Error() {
		t.Errorf("decision: %s", d)
	}
	// UDP: the datagram is dropped, no session is made.
	udp := usDialUDP(t, client.Net(), vipOf(t, c, "empty-dns", 53))
	udp.Write([]byte("hi\n"))
	select {
	case d := <-decided:
		if d.Protocol != corev1.ProtocolUDP || d.Err != userspace.ErrMissingEndpoints.Error() {
			t.Errorf("UDP decision: %s", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no decision for the UDP datagram")
	}
	if s := UserspaceProxier(nodeA, corev1.IPv4Protocol).Sessions(); len(s) != 0 {
		t.Errorf("sessions: %+v", s)
	}
	// The datapath's view, beside the iptables mode's REJECT on the same Service.
	p := netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vipOf(t, c, "empty", 80), Mode: netsim.ProbeConnect}
	if r, _ := c.ProbeOne(p); r.Result != netsim.ResultConnected || r.Node != "node-a" {
		t.Errorf("userspace mode, no endpoints: %s; want connected to the proxy listener", r.Outcome)
	}
	ipt := newCluster(t, IPTables)
	if err := ipt.Apply(service.NewService("default/empty", service.Selector("app=nothing"), service.Port("http", 80, 9376))); err != nil {
		t.Fatal(err)
	}
	if _, err := ipt.CreatePod(service.NewPod("default/client", service.OnNode("node-a"))); err != nil {
		t.Fatal(err)
	}
	p.Dst = vipOf(t, ipt, "empty", 80)
	if r, _ := ipt.ProbeOne(p); r.Result != netsim.ResultRefused {
		t.Errorf("iptables mode, no endpoints: %s; want refused", r.Outcome)
	}
}

func TestUserspaceModeHealthAndChanges(t *testing.T) {
	c := userspaceCluster(t, UserspaceConfig{})
	if err := c.Apply(service.NewService("default/web", service.Selector("app=MyApp"), service.Port("http", 80, 9376))); err != nil {
		t.Fatal(err)
	}
	backends(t, c)
	nodeA := c.Node("node-a")
	p := userspaceOf(nodeA)
	if got := p.hs.localEndpoints("default", "web"); got != 1 {
		t.Errorf("local endpoints for the health server: %d, want 1", got)
	}
	if err := c.DeletePod("default", "web-0", 0); err != nil {
		t.Fatal(err)
	}
	if got := p.hs.localEndpoints("default", "web"); got != 0 {
		t.Errorf("local endpoints for the health server without a local endpoint: %d", got)
	}
	old := usListener(t, nodeA, "web", "http")
	svc, _ := c.Store().GetService("default", "web")
	svc = svc.DeepCopy()
	svc.Spec.Ports[0].Port = 8080
	if _, err := c.Store().Update(svc); err != nil {
		t.Fatal(err)
	}
	nl := usListener(t, nodeA, "web", "http")
	if nl.Port == old.Port || nodeA.HostNet().Listening(netfilter.ProtoTCP, old.Port) {
		t.Errorf("port change: listener %d → %d, old still listening: %v", old.Port, nl.Port, nodeA.HostNet().Listening(netfilter.ProtoTCP, old.Port))
	}
	saved, _ := UserspaceEmulator(nodeA, corev1.IPv4Protocol).Save(context.Background(), "nat")
	if !strings.Contains(string(saved), fmt.Sprintf("--dport 8080 -j REDIRECT --to-ports %d", nl.Port)) || strings.Contains(string(saved), fmt.Sprintf("--to-ports %d\n", old.Port)) {
		t.Errorf("rules after the change:\n%s", saved)
	}
	if err := c.Store().Delete("Service", "default", "web"); err != nil {
		t.Fatal(err)
	}
	for _, l := range UserspaceProxier(nodeA, corev1.IPv4Protocol).Listeners() {
		if l.Service.Name == "web" {
			t.Errorf("listener of a deleted service: %+v", l)
		}
	}
	if UserspaceProxier(c.Node("node-b"), corev1.IPv6Protocol) != nil || Emulator(nodeA, netip.Addr{}) != nil {
		t.Error("accessors of other modes/families returned something")
	}
	_ = proxy.ProtoTCP
}

func TestUserspaceModeLoadBalancer(t *testing.T) {
	for _, lbMode := range []string{"nodeport", "vip"} {
		t.Run(lbMode, func(t *testing.T) {
			c, err := cluster.New(cluster.Config{Seed: 11, LoadBalancerMode: lbMode, Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}}, Proxy: Factory(Options{Mode: Userspace})})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ext, err := c.AddExternalHost("client", netip.Addr{})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Apply(service.NewService("default/lb", service.Selector("app=MyApp"), service.Port("http", 80, 9376), service.LoadBalancer())); err != nil {
				t.Fatal(err)
			}
			for i, node := range []string{"node-a", "node-b"} {
				if _, err := c.CreatePod(service.NewPod(fmt.Sprintf("default/web-%d", i), service.Labels("app=MyApp"), service.ContainerPort("http", 9376, corev1.ProtocolTCP), service.OnNode(node))); err != nil {
					t.Fatal(err)
				}
			}
			lbIP, ok := c.LoadBalancerIP("default", "lb")
			if !ok {
				t.Fatal("no load-balancer IP")
			}
			// In vip mode the node gets packets for the load-balancer IP, which has its own
			// portal rules; in nodeport mode the load balancer sends to the node port (and
			// its ingress has ipMode Proxy, which gets no rules).
			l := usListener(t, c.Node("node-a"), "lb", "http")
			if has := slicesContains(l.Portals, netip.AddrPortFrom(lbIP, 80)); has != (lbMode == "vip") {
				t.Errorf("listener portals %v; load-balancer IP %v among them: %v", l.Portals, lbIP, has)
			}
			seen := map[string]bool{}
			for i := 0; i < 6; i++ {
				w := ask(t, ext.Net(), netip.AddrPortFrom(lbIP, 80).String())
				seen[w.Pod] = true
				src := netip.MustParseAddrPort(w.Client).Addr()
				if src == ext.IP() {
					t.Errorf("backend saw the client's own address %v through the userspace proxy", src)
				}
			}
			if len(seen) != 2 {
				t.Errorf("through the load balancer: %v", seen)
			}
			var total int
			for _, n := range c.Nodes() {
				for _, d := range UserspaceDecisions(n) {
					total++
					if d.Client.Addr() != ext.IP() {
						t.Errorf("%s: decision %s, want client %v", n.Name(), d, ext.IP())
					}
				}
			}
			if total != 6 {
				t.Errorf("%d decisions over the nodes, want 6", total)
			}
		})
	}
}

func slicesContains(list []netip.AddrPort, x netip.AddrPort) bool {
	for _, y := range list {
		if y == x {
			return true
		}
	}
	return false
}

func TestUserspaceModeDualStack(t *testing.T) {
	c, err := cluster.New(cluster.Config{Seed: 11,
		NodeCIDRs:    []netip.Prefix{netip.MustParsePrefix("172.18.0.0/16"), netip.MustParsePrefix("fd00:18::/64")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:10:96::/108")},
		Nodes:        []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}}, Proxy: Factory(Options{Mode: Userspace})})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Apply(service.NewService("default/web", service.Selector("app=MyApp"), service.Port("http", 80, 9376), service.UDPPort("dns", 53, 53), service.DualStack())); err != nil {
		t.Fatal(err)
	}
	for i, node := range []string{"node-a", "node-b"} {
		if _, err := c.CreatePod(service.NewPod(fmt.Sprintf("default/web-%d", i), service.Labels("app=MyApp"), service.ContainerPort("http", 9376, corev1.ProtocolTCP), service.ContainerPort("dns", 53, corev1.ProtocolUDP), service.OnNode(node))); err != nil {
			t.Fatal(err)
		}
	}
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	svc, _ := c.Store().GetService("default", "web")
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("cluster IPs %v", svc.Spec.ClusterIPs)
	}
	nodeA := c.Node("node-a")
	px6 := UserspaceProxier(nodeA, corev1.IPv6Protocol)
	if px6 == nil || UserspaceEmulator(nodeA, corev1.IPv6Protocol) == nil {
		t.Fatal("no IPv6 proxier")
	}
	addrs := usNodeAddrs(nodeA)
	for _, ip := range svc.Spec.ClusterIPs {
		vip := netip.AddrPortFrom(netip.MustParseAddr(ip), 80)
		for i := 0; i < 2; i++ {
			w := ask(t, client.Net(), vip.String())
			src := netip.MustParseAddrPort(w.Client).Addr()
			if !addrs[src] || src.Is6() != vip.Addr().Is6() {
				t.Errorf("%v: backend saw %v, want a node-a address of the family", vip, src)
			}
		}
		// The built-in UDP server listens on IPv4 only (netsim's wildcard UDP socket is
		// per family), so UDP is checked over IPv4.
		if vip.Addr().Is4() {
			conn := usDialUDP(t, client.Net(), netip.AddrPortFrom(vip.Addr(), 53))
			if w := usAskUDP(t, conn); !addrs[netip.MustParseAddrPort(w.Client).Addr()] {
				t.Errorf("%v udp: backend saw %v", vip, w.Client)
			}
		}
	}
	if n := len(px6.Decisions()); n != 2 {
		t.Errorf("%d IPv6 decisions, want 2", n)
	}
	saved, _ := UserspaceEmulator(nodeA, corev1.IPv6Protocol).Save(context.Background(), "nat")
	if !strings.Contains(string(saved), "-d "+svc.Spec.ClusterIPs[1]+"/128 -p tcp") {
		t.Errorf("ip6tables nat:\n%s", saved)
	}
}
