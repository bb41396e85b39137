package netsim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// staticDNAT is the test's stand-in for a proxy mode: a NAT handler that DNATs a VIP
// to backends in round robin (or by Chance ladder when ladder is set).
type staticDNAT struct {
	vip      netip.AddrPort
	backends []netip.AddrPort
	ladder   bool
	next     int
}

func (d *staticDNAT) Handle(ctx *Context, p *Packet) Verdict {
	if p.Dst != d.vip.Addr() || p.DstPort != d.vip.Port() || p.Proto == netfilter.ProtoICMP {
		return VerdictContinue
	}
	if len(d.backends) == 0 {
		return RejectVerdict(netfilter.RejectPortUnreachable, "no endpoints")
	}
	var b netip.AddrPort
	if d.ladder {
		b = d.backends[len(d.backends)-1]
		for i := 0; i < len(d.backends)-1; i++ {
			if ctx.Chance(1 / float64(len(d.backends)-i)) {
				b = d.backends[i]
				break
			}
		}
	} else {
		b = d.backends[d.next%len(d.backends)]
		if !ctx.DryRun() {
			d.next++
		}
	}
	return DNATTo(b, "to "+b.String())
}

// masqOffNode masquerades traffic to a VIP's backends that leaves toward another node, a
// small KUBE-POSTROUTING.
func attachDNAT(c *Network, d *staticDNAT) {
	for _, n := range c.Nodes() {
		n.AddHandler(HandlerSpec{Name: "test-dnat", Hook: netfilter.Prerouting, Priority: netfilter.PriorityNATDst, NAT: true, Handler: d})
		n.AddHandler(HandlerSpec{Name: "test-dnat", Hook: netfilter.Output, Priority: netfilter.PriorityNATDst, NAT: true, Handler: d})
	}
}

func newTestCluster(t testing.TB, cfg Config) *Network {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func startPod(t testing.TB, c *Network, node, key string, serve ...uint16) *Pod {
	t.Helper()
	ns, name, _ := strings.Cut(key, "/")
	p, err := c.StartPod(node, ns, name, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range serve {
		if err := p.Serve(netfilter.ProtoTCP, port); err != nil {
			t.Fatal(err)
		}
		if err := p.Serve(netfilter.ProtoUDP, port); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func threeNodes() Config {
	return Config{Seed: 1, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ask dials addr over TCP from n, sends a line and parses the whoami reply.
func ask(t testing.TB, n *Net, addr string) (Whoami, error) {
	t.Helper()
	return askCtx(ctxT(t), n, addr)
}

// askCtx is ask without a testing.TB (for goroutines that outlive a check).
func askCtx(ctx context.Context, n *Net, addr string) (Whoami, error) {
	conn, err := n.DialContext(ctx, "tcp", addr)
	if err != nil {
		return Whoami{}, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(conn, "hello"); err != nil {
		return Whoami{}, err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return Whoami{}, err
	}
	return ParseWhoami(line)
}

func TestTopologyAddresses(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	want := map[string][2]string{"node-a": {"172.18.0.2", "10.244.0.0/24"}, "node-b": {"172.18.0.3", "10.244.1.0/24"}, "node-c": {"172.18.0.4", "10.244.2.0/24"}}
	for name, w := range want {
		n := c.Node(name)
		if got := n.IP().String(); got != w[0] {
			t.Errorf("%s IP = %s, want %s", name, got, w[0])
		}
		if got := n.PodCIDRs()[0].String(); got != w[1] {
			t.Errorf("%s pod CIDR = %s, want %s", name, got, w[1])
		}
	}
	p1 := startPod(t, c, "node-b", "default/one")
	p2 := startPod(t, c, "node-b", "default/two")
	if p1.IP().String() != "10.244.1.2" || p2.IP().String() != "10.244.1.3" {
		t.Errorf("pod IPs %s %s, want 10.244.1.2 10.244.1.3 (host-local order after the gateway)", p1.IP(), p2.IP())
	}
}

func TestPodToPodTCPAcrossNodes(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	server := startPod(t, c, "node-b", "default/server", 8080)
	client := startPod(t, c, "node-a", "default/client")
	w, err := ask(t, client.Net(), netip.AddrPortFrom(server.IP(), 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	if w.Pod != "default/server" || w.Node != "node-b" || !strings.HasPrefix(w.Client, client.IP().String()+":") || w.Msg != "hello" {
		t.Errorf("reply %+v: want server on node-b seeing the client's own address", w)
	}
}

func TestDNATToBackendsAcrossNodes(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	vip := netip.MustParseAddrPort("10.96.0.50:80")
	var backends []netip.AddrPort
	for i, node := range []string{"node-a", "node-b", "node-c"} {
		p := startPod(t, c, node, fmt.Sprintf("default/web-%d", i), 8080)
		backends = append(backends, netip.AddrPortFrom(p.IP(), 8080))
	}
	attachDNAT(c, &staticDNAT{vip: vip, backends: backends})
	client := startPod(t, c, "node-a", "default/client")
	seen := map[string]int{}
	for i := 0; i < 6; i++ {
		w, err := ask(t, client.Net(), vip.String())
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		seen[w.Pod]++
		if !strings.HasPrefix(w.Client, client.IP().String()+":") {
			t.Errorf("backend saw %s, want the client's pod IP (no masquerade configured)", w.Client)
		}
		found := false
		for _, b := range backends {
			found = found || w.Local == b.String()
		}
		if !found {
			t.Errorf("backend was reached on %s, want one of the backends' own addresses %v", w.Local, backends)
		}
	}
	for i := 0; i < 3; i++ {
		if seen[fmt.Sprintf("default/web-%d", i)] != 2 {
			t.Errorf("round robin over 6 requests: %v, want 2 each", seen)
			break
		}
	}
	// Conntrack on the client's node holds DNATed entries whose reply tuple names a backend.
	var dnat int
	for _, e := range c.Node("node-a").Conntrack().Entries() {
		if e.Orig.Dst == vip.Addr() && e.Has(netfilter.StatusDstNAT) {
			dnat++
			if e.Reply.SrcPort != 8080 {
				t.Errorf("entry %s: reply source port %d, want 8080", e.String(), e.Reply.SrcPort)
			}
		}
	}
	if dnat != 6 {
		t.Errorf("node-a has %d DNAT entries for the VIP, want 6:\n%v", dnat, c.Node("node-a").Conntrack().Entries())
	}
}

func TestRejectIsConnectionRefused(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	attachDNAT(c, &staticDNAT{vip: netip.MustParseAddrPort("10.96.0.51:80")})
	client := startPod(t, c, "node-a", "default/client")
	_, err := client.Net().DialContext(ctxT(t), "tcp", "10.96.0.51:80")
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial a VIP without endpoints: %v, want ECONNREFUSED", err)
	}
}

func TestUDPThroughDNAT(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	server := startPod(t, c, "node-c", "default/dns", 53)
	attachDNAT(c, &staticDNAT{vip: netip.MustParseAddrPort("10.96.0.10:53"), backends: []netip.AddrPort{netip.AddrPortFrom(server.IP(), 53)}})
	client := startPod(t, c, "node-a", "default/client")
	conn, err := client.Net().DialContext(ctxT(t), "udp", "10.96.0.10:53")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("query")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	k, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ParseWhoami(string(buf[:k]))
	if err != nil {
		t.Fatal(err)
	}
	if w.Pod != "default/dns" || w.Msg != "query" {
		t.Errorf("reply %+v", w)
	}
}

func TestProbeOutcomes(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	_ = startPod(t, c, "node-a", "default/client")
	vip := netip.MustParseAddrPort("10.96.0.60:80")
	attachDNAT(c, &staticDNAT{vip: vip, backends: []netip.AddrPort{netip.AddrPortFrom(web.IP(), 8080)}})
	attachDNAT(c, &staticDNAT{vip: netip.MustParseAddrPort("10.96.0.61:80")})

	r, err := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, Mode: ProbeConnect, Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Result != ResultConnected || r.Pod != "default/web" || r.ReplyFrom != vip || r.Addr.Port() != 8080 {
		t.Errorf("connect to VIP: %s\n%s", r.Outcome, r.Trace)
	}
	if len(r.Trace.Find(StepNAT)) == 0 || len(r.Trace.Find(StepConntrack)) == 0 {
		t.Errorf("trace lacks NAT or conntrack steps:\n%s", r.Trace)
	}
	// Each node tracks the flow in its own table: metadata does not cross the wire.
	if es := c.Node("node-b").Conntrack().List(CtFilter{Proto: netfilter.ProtoTCP, OrigDst: web.IP()}); len(es) != 1 || es[0].TCPState != TCPClose {
		t.Errorf("node-b tracks %v for the probe's flow, want one entry, closed by the probe's RST", es)
	}
	r, _ = c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.MustParseAddrPort("10.96.0.61:80"), Mode: ProbeConnect})
	if r.Result != ResultRefused || r.ReplyFrom.Addr() != netip.MustParseAddr("10.244.0.1") {
		t.Errorf("no endpoints: %s, want refused by ICMP from the node's bridge address", r.Outcome)
	}
	r, _ = c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(web.IP(), 9999), Mode: ProbeConnect})
	if r.Result != ResultRefused || !strings.Contains(r.Reason, "nothing listens") {
		t.Errorf("closed port: %s", r.Outcome)
	}
	r, _ = c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.MustParseAddrPort("10.96.0.99:80")})
	if r.Result != ResultDropped || !strings.Contains(r.Reason, "no route") {
		t.Errorf("VIP nobody DNATs: %s, want dropped for lack of a route", r.Outcome)
	}
	r, _ = c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoUDP, Dst: netip.AddrPortFrom(web.IP(), 8080), Mode: ProbeConnect})
	if r.Result != ResultReplied || r.Pod != "default/web" {
		t.Errorf("udp exchange: %s", r.Outcome)
	}
}

func TestAllBranchesProbabilities(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	vip := netip.MustParseAddrPort("10.96.0.70:80")
	var backends []netip.AddrPort
	for i, node := range []string{"node-a", "node-b", "node-c"} {
		p := startPod(t, c, node, fmt.Sprintf("default/b%d", i), 8080)
		backends = append(backends, netip.AddrPortFrom(p.IP(), 8080))
	}
	attachDNAT(c, &staticDNAT{vip: vip, backends: backends, ladder: true})
	startPod(t, c, "node-a", "default/client")
	before := c.Node("node-a").Conntrack().Len()
	rs, err := c.Probe(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, AllBranches: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("got %d outcomes, want 3: %v", len(rs), rs)
	}
	for _, r := range rs {
		if r.Result != ResultDelivered || r.Probability < 0.3333 || r.Probability > 0.3334 {
			t.Errorf("outcome %s with probability %f, want delivered with 1/3", r.Outcome, r.Probability)
		}
	}
	if after := c.Node("node-a").Conntrack().Len(); after != before {
		t.Errorf("all-branches probe changed conntrack: %d entries, had %d", after, before)
	}
}

func TestConntrackTimeoutOnVirtualClock(t *testing.T) {
	c := newTestCluster(t, Config{Seed: 3, ManualClock: true})
	web := startPod(t, c, "node-a", "default/web", 53)
	startPod(t, c, "node-a", "default/client")
	dst := netip.AddrPortFrom(web.IP(), 53)
	if _, err := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoUDP, Dst: dst, SrcPort: 40000}); err != nil {
		t.Fatal(err)
	}
	ct := c.Node("node-a").Conntrack()
	f := CtFilter{Proto: netfilter.ProtoUDP, OrigDst: web.IP()}
	if n := len(ct.List(f)); n != 1 {
		t.Fatalf("%d UDP entries after one datagram, want 1", n)
	}
	c.Clock().Advance(29 * time.Second)
	if n := len(ct.List(f)); n != 1 {
		t.Fatalf("entry gone before the 30 s UDP timeout")
	}
	c.Clock().Advance(2 * time.Second)
	if n := len(ct.List(f)); n != 0 {
		t.Fatalf("entry still there after the 30 s UDP timeout")
	}
}

func TestHostNetworkAndNodeLocal(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	n := c.Node("node-b")
	stop, err := ServeWhoami(n.HostNet(), "", "node-b", netfilter.ProtoTCP, 10250)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	client := startPod(t, c, "node-a", "default/client")
	w, err := ask(t, client.Net(), netip.AddrPortFrom(n.IP(), 10250).String())
	if err != nil {
		t.Fatal(err)
	}
	if w.Node != "node-b" || !strings.HasPrefix(w.Client, client.IP().String()) {
		t.Errorf("host network reply %+v", w)
	}
	// The node reaches itself over localhost through the datapath's lo.
	w, err = ask(t, c.Node("node-b").HostNet(), "127.0.0.1:10250")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(w.Client, "127.0.0.1:") {
		t.Errorf("localhost reply %+v", w)
	}
	_ = io.EOF
}

// An ICMP error about a DNATed packet is RELATED to its connection on the node that did
// the DNAT (the quoted packet's tuple, inverted, is the entry's reply tuple) and goes
// back translated: a UDP client of a VIP whose backend does not listen is refused, by
// the VIP, as under a kernel. (gVisor's UDP sockets do not report a port-unreachable
// error to a later read, as Linux's connected sockets do: probes see it, apps do not.)
func TestICMPErrorThroughDNAT(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	silent := startPod(t, c, "node-c", "default/silent") // listens on nothing
	vip := netip.MustParseAddrPort("10.96.0.10:53")
	attachDNAT(c, &staticDNAT{vip: vip, backends: []netip.AddrPort{netip.AddrPortFrom(silent.IP(), 5353)}})
	startPod(t, c, "node-a", "default/client")
	r, err := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoUDP, Dst: vip, Mode: ProbeConnect, Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Result != ResultRefused || r.ReplyFrom.Addr() != vip.Addr() {
		t.Fatalf("UDP to a VIP whose backend does not listen: %s, want refused with the error from the VIP\n%s", r.Outcome, r.Trace)
	}
	var related bool
	for _, s := range r.Trace.Find(StepConntrack) {
		related = related || s.Node == "node-a" && strings.HasPrefix(s.Verdict, "RELATED")
	}
	if !related {
		t.Errorf("node-a did not find the ICMP error RELATED to the DNATed flow:\n%s", r.Trace)
	}
}

// The acceptance test: three HTTP servers on three nodes, a client in a fourth
// pod, a test DNAT handler in between; replies, conntrack entries and the trace checked.
func TestHTTPThroughDNATAcrossThreeNodes(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	vip := netip.MustParseAddrPort("10.96.0.100:80")
	var backends []netip.AddrPort
	for i, node := range []string{"node-a", "node-b", "node-c"} {
		p := startPod(t, c, node, fmt.Sprintf("default/http-%d", i), 8080)
		backends = append(backends, netip.AddrPortFrom(p.IP(), 8080))
	}
	attachDNAT(c, &staticDNAT{vip: vip, backends: backends})
	client := startPod(t, c, "node-b", "default/client")
	hc := client.Net().HTTPClient()
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		resp, err := hc.Get("http://" + vip.String() + "/hello")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		w, err := ParseWhoami(string(body))
		if err != nil || resp.StatusCode != 200 || w.Msg != "/hello" || resp.Header.Get("X-Pod") != w.Pod {
			t.Fatalf("HTTP reply %d %q (%v)", resp.StatusCode, body, err)
		}
		seen[w.Pod] = true
	}
	if len(seen) != 3 {
		t.Errorf("three requests reached %v", seen)
	}
	ents := c.Node("node-b").Conntrack().List(CtFilter{Proto: netfilter.ProtoTCP, OrigDst: vip.Addr()})
	if len(ents) != 3 {
		t.Fatalf("node-b conntrack: %d entries for the VIP, want 3", len(ents))
	}
	targets := map[netip.Addr]bool{}
	for _, e := range ents {
		targets[e.Reply.Src] = true
		if !e.Has(netfilter.StatusDstNAT|netfilter.StatusAssured) || e.TCPState == TCPSynSent {
			t.Errorf("entry %s: want DNATed, assured, past SYN_SENT", e.String())
		}
	}
	if len(targets) != 3 {
		t.Errorf("conntrack replies expected from %v, want the three backends", targets)
	}
	r, _ := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, Mode: ProbeConnect, Trace: true})
	nat := r.Trace.Find(StepNAT)
	if r.Result != ResultConnected || len(nat) < 2 {
		t.Errorf("traced probe: %s with %d NAT steps\n%s", r.Outcome, len(nat), r.Trace)
	}
}
