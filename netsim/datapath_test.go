package netsim

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// REJECT --reject-with tcp-reset answers a SYN with a RST from the address the client
// dialled (nf_send_reset), and the client's connect fails with "connection refused"; the
// default reject answers ICMP port unreachable instead.
func TestRejectTCPResetIsConnectionRefused(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080, 8081, 8082)
	client := startPod(t, c, "node-a", "default/client")
	for _, n := range c.Nodes() {
		n.AddHandler(HandlerSpec{Name: "reject", Hook: netfilter.Forward, Priority: netfilter.PriorityFilter, Handler: HandlerFunc(func(_ *Context, pk *Packet) Verdict {
			switch pk.DstPort {
			case 8081:
				return RejectVerdict(netfilter.RejectTCPReset, "port 8081 is closed")
			case 8082:
				return RejectVerdict(netfilter.RejectPortUnreachable, "port 8082 is closed")
			}
			return VerdictContinue
		})})
	}
	rst := netip.AddrPortFrom(web.IP(), 8081)
	r, err := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: rst, Mode: ProbeConnect, Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Result != ResultRefused || r.ReplyFrom != rst {
		t.Errorf("tcp-reset: %s, want refused with a RST from %s", r.Outcome, rst)
	}
	var rstSeen bool
	for _, s := range r.Trace.Steps {
		if strings.Contains(s.Packet, fmt.Sprintf("tcp %s -> ", rst)) && strings.Contains(s.Packet, "[R") {
			rstSeen = true
		}
	}
	if !rstSeen || !strings.Contains(r.Trace.String(), "REJECT tcp-reset") {
		t.Errorf("trace lacks the REJECT tcp-reset and its RST:\n%s", r.Trace)
	}
	icmp := netip.AddrPortFrom(web.IP(), 8082)
	if r, _ := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: icmp, Mode: ProbeConnect}); r.Result != ResultRefused || !r.ReplyFrom.IsValid() || r.ReplyFrom.Port() != 0 {
		t.Errorf("icmp-port-unreachable: %s, want refused by an ICMP error", r.Outcome)
	}
	for _, addr := range []netip.AddrPort{rst, icmp} {
		_, err := client.Net().DialContext(ctxT(t), "tcp", addr.String())
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("dial %s: %v, want ECONNREFUSED", addr, err)
		}
	}
	// Other ports of the same pod are not affected.
	if w, err := ask(t, client.Net(), netip.AddrPortFrom(web.IP(), 8080).String()); err != nil || w.Pod != "default/web" {
		t.Errorf("port 8080: %+v %v", w, err)
	}
}

// SNAT --to-source and MASQUERADE keep a flow's source port when it is free and choose
// another when a second flow would get the same tuple (the kernel's
// nf_nat_l4proto_unique_tuple): two pods on node-a connecting from the same port to the
// same external server.
func TestSNATAndMasqueradePickAnotherPortOnClash(t *testing.T) {
	for _, tc := range []struct {
		name string
		snat bool
	}{{"MASQUERADE", false}, {"SNAT", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, threeNodes())
			ext, err := c.AddExternalHost("server", netip.Addr{})
			if err != nil {
				t.Fatal(err)
			}
			startPod(t, c, "node-a", "default/one")
			startPod(t, c, "node-a", "default/two")
			node := c.Node("node-a")
			to := node.IP()
			if tc.snat {
				// SNAT to the node's address before the CNI's own masquerade.
				to = netip.MustParseAddr("172.18.0.200")
				node.AddHandler(HandlerSpec{Name: "snat", Hook: netfilter.Postrouting, Priority: netfilter.PriorityNATSrc - 1, NAT: true, Handler: HandlerFunc(func(_ *Context, pk *Packet) Verdict {
					if pk.Dst == ext.IP() {
						return Verdict{Kind: NAT, NAT: NATAction{Kind: netfilter.SNAT, Addr: to}, Reason: "to-source " + to.String()}
					}
					return VerdictContinue
				})})
			}
			dst := netip.AddrPortFrom(ext.IP(), 80)
			var seen []netip.AddrPort
			for _, from := range []string{"pod:default/one", "pod:default/two"} {
				r, err := c.ProbeOne(Probe{From: from, Proto: netfilter.ProtoTCP, Dst: dst, SrcPort: 40000, Trace: true})
				if err != nil {
					t.Fatal(err)
				}
				if r.Result != ResultDelivered || r.External != "server" || r.SeenSrc.Addr() != to {
					t.Fatalf("%s: %s, want delivered from %s\n%s", from, r.Outcome, to, r.Trace)
				}
				if !strings.Contains(r.Trace.String(), tc.name) {
					t.Errorf("trace lacks %s:\n%s", tc.name, r.Trace)
				}
				seen = append(seen, r.SeenSrc)
			}
			if seen[0].Port() != 40000 {
				t.Errorf("the first flow's free port was changed: %s", seen[0])
			}
			if seen[1].Port() == 40000 || seen[1].Port() < 1024 {
				t.Errorf("the second flow got %s, want another port (>= 1024) than the first's %s", seen[1], seen[0])
			}
			// Both bindings are in conntrack, each with its own reply tuple.
			conns := node.Conntrack().List(CtFilter{Proto: netfilter.ProtoTCP, OrigDst: ext.IP()})
			if len(conns) != 2 {
				t.Fatalf("%d entries, want 2", len(conns))
			}
			ports := map[uint16]bool{}
			for _, cn := range conns {
				if cn.Orig.SrcPort != 40000 || cn.Reply.Dst != to || !cn.Has(netfilter.StatusSrcNAT) {
					t.Errorf("entry %s", cn.String())
				}
				ports[cn.Reply.DstPort] = true
			}
			if !ports[seen[0].Port()] || !ports[seen[1].Port()] {
				t.Errorf("reply ports %v, want %s and %s", ports, seen[0], seen[1])
			}
		})
	}
}

// A TCP connection's conntrack entry goes through the kernel's close states, each with
// its timeout on the virtual clock: FIN from the client FIN_WAIT (2 min), the server's
// ACK CLOSE_WAIT (1 h, kube-proxy's setting), its FIN LAST_ACK (30 s), the client's last
// ACK TIME_WAIT (2 min), after which the entry is gone.
func TestTCPConntrackCloseStates(t *testing.T) {
	c := newTestCluster(t, Config{Seed: 5, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}}})
	web := startPod(t, c, "node-a", "default/web", 80)
	client := startPod(t, c, "node-a", "default/client")
	cli := netip.AddrPortFrom(client.IP(), 40000)
	srv := netip.AddrPortFrom(web.IP(), 80)
	ct := c.Node("node-a").Conntrack()
	send := func(fromClient bool, flags uint8, seq, ack uint32) {
		t.Helper()
		seg := TCPSegment{Src: cli, Dst: srv, Flags: flags, Seq: seq, Ack: ack, WindowScale: -1}
		from := "pod:default/client"
		if !fromClient {
			seg.Src, seg.Dst, from = srv, cli, "pod:default/web"
		}
		r, err := c.Inject(from, BuildTCP(seg), false)
		if err != nil {
			t.Fatal(err)
		}
		if r.Result != ResultDelivered {
			t.Fatalf("%s %s: %s", from, TCPFlagString(flags), r.Outcome)
		}
	}
	state := func(want TCPState, timeout time.Duration) {
		t.Helper()
		conns := ct.List(CtFilter{Proto: netfilter.ProtoTCP, OrigSrcPort: 40000})
		if len(conns) != 1 {
			t.Fatalf("%d entries, want 1 in %s", len(conns), want)
		}
		cn := conns[0]
		if cn.TCPState != want {
			t.Fatalf("state %s, want %s", cn.TCPState, want)
		}
		if got := cn.Expires.Sub(c.Clock().Now()); got != timeout {
			t.Errorf("%s expires in %s, want %s", want, got, timeout)
		}
	}
	send(true, netfilter.TCPSyn, 1000, 0)
	state(TCPSynSent, 2*time.Minute)
	send(false, netfilter.TCPSyn|netfilter.TCPAck, 5000, 1001)
	state(TCPSynRecv, 60*time.Second)
	send(true, netfilter.TCPAck, 1001, 5001)
	state(TCPEstablished, 24*time.Hour)
	c.Clock().Advance(time.Hour) // an idle hour changes nothing
	state(TCPEstablished, 23*time.Hour)
	send(true, netfilter.TCPFin|netfilter.TCPAck, 1001, 5001)
	state(TCPFinWait, 2*time.Minute)
	send(false, netfilter.TCPAck, 5001, 1002)
	state(TCPCloseWait, time.Hour)
	send(false, netfilter.TCPFin|netfilter.TCPAck, 5001, 1002)
	state(TCPLastAck, 30*time.Second)
	send(true, netfilter.TCPAck, 1002, 5002)
	state(TCPTimeWait, 2*time.Minute)
	c.Clock().Advance(119 * time.Second)
	state(TCPTimeWait, time.Second)
	c.Clock().Advance(time.Second)
	if n := len(ct.List(CtFilter{Proto: netfilter.ProtoTCP, OrigSrcPort: 40000})); n != 0 {
		t.Errorf("%d entries after TIME_WAIT's 120 s, want none", n)
	}
	// A shorter setting takes effect, as sysctl nf_conntrack_tcp_timeout_time_wait does;
	// here the server's FIN also acknowledges the client's (FIN_WAIT straight to
	// LAST_ACK).
	c.Node("node-a").UpdateSettings(func(s *NodeSettings) { s.Conntrack.TCPTimeouts[TCPTimeWait] = 10 * time.Second })
	cli = netip.AddrPortFrom(client.IP(), 40001)
	send(true, netfilter.TCPSyn, 1000, 0)
	send(false, netfilter.TCPSyn|netfilter.TCPAck, 5000, 1001)
	send(true, netfilter.TCPAck, 1001, 5001)
	send(true, netfilter.TCPFin|netfilter.TCPAck, 1001, 5001)
	send(false, netfilter.TCPFin|netfilter.TCPAck, 5001, 1002)
	send(true, netfilter.TCPAck, 1002, 5002)
	conns := ct.List(CtFilter{Proto: netfilter.ProtoTCP, OrigSrcPort: 40001})
	if len(conns) != 1 || conns[0].TCPState != TCPTimeWait || conns[0].Expires.Sub(c.Clock().Now()) != 10*time.Second {
		t.Errorf("close with a 10 s TIME_WAIT: %v", conns)
	}
}

// Pods and nodes come and go while connections run: traffic between live pods never
// fails or hangs, and only the killed and removed places stop answering.
func TestLifecycleWhileTrafficRuns(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	webB := startPod(t, c, "node-b", "default/web-b", 8080)
	webC := startPod(t, c, "node-c", "default/web-c", 8080)
	victim := startPod(t, c, "node-b", "default/victim", 8080)
	var clients []*Pod
	for i := range 3 {
		clients = append(clients, startPod(t, c, "node-a", fmt.Sprintf("default/client-%d", i)))
	}
	const rounds = 25
	var wg sync.WaitGroup
	errs := make(chan error, len(clients)*rounds)
	started := make(chan struct{}, len(clients))
	for _, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				w, err := ask(t, cl.Net(), netip.AddrPortFrom(webB.IP(), 8080).String())
				if err == nil && w.Pod != "default/web-b" {
					err = fmt.Errorf("answered by %s", w.Pod)
				}
				if err != nil {
					errs <- fmt.Errorf("%s round %d: %w", cl.key(), i, err)
				}
				if i == 1 {
					started <- struct{}{}
				}
			}
		}()
	}
	for range clients {
		<-started // every client is mid-way when the churn begins
	}
	// Add a node with a pod; churn pods next to web-b; kill a pod; kill a node and remove
	// it.
	if _, err := c.AddNode(NodeConfig{Name: "node-d"}); err != nil {
		t.Fatal(err)
	}
	webD := startPod(t, c, "node-d", "default/web-d", 8080)
	for i := range 5 {
		p := startPod(t, c, "node-b", fmt.Sprintf("default/churn-%d", i), 8080)
		if w, err := ask(t, clients[0].Net(), netip.AddrPortFrom(p.IP(), 8080).String()); err != nil || w.Pod != p.key() {
			t.Errorf("churn pod %s: %+v %v", p.key(), w, err)
		}
		c.StopPod("default", p.name)
	}
	c.StopPod("default", "victim")
	if err := c.KillNode("node-c"); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveNode("node-c"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The new node's pod answers; the killed pod's address is unreachable; the removed
	// node's pod is gone with it.
	if w, err := ask(t, clients[1].Net(), netip.AddrPortFrom(webD.IP(), 8080).String()); err != nil || w.Pod != "default/web-d" {
		t.Errorf("pod on the added node: %+v %v", w, err)
	}
	if _, err := clients[1].Net().DialContext(ctxT(t), "tcp", netip.AddrPortFrom(victim.IP(), 8080).String()); !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Errorf("dial the killed pod: %v, want EHOSTUNREACH", err)
	}
	if webC.Alive() || victim.Alive() {
		t.Error("a killed pod is alive")
	}
	r, _ := c.ProbeOne(Probe{From: "pod:default/client-2", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(webC.IP(), 8080)})
	if r.Result != ResultDropped {
		t.Errorf("to the removed node's pod: %s", r.Outcome)
	}
	if c.Node("node-c") != nil {
		t.Error("node-c still in the cluster")
	}
}

// A probe's source names a pod as NAMESPACE/NAME or, in the default namespace, NAME
// alone; a source that names nothing running, or no kind, is an error naming it.
func TestProbeSourcePlaces(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	client := startPod(t, c, "node-a", "default/client")
	startPod(t, c, "node-c", "other/client2")
	dst := netip.AddrPortFrom(web.IP(), 8080)
	for _, from := range []string{"pod:default/client", "pod:client"} {
		r, err := c.ProbeOne(Probe{From: from, Proto: netfilter.ProtoTCP, Dst: dst, SrcPort: 40000})
		if err != nil {
			t.Fatalf("%s: %v", from, err)
		}
		if r.Result != ResultDelivered || r.SeenSrc.Addr() != client.IP() {
			t.Errorf("%s: %s from %v, want delivered from %v", from, r.Outcome, r.SeenSrc, client.IP())
		}
	}
	r, err := c.ProbeOne(Probe{From: "pod:other/client2", Proto: netfilter.ProtoTCP, Dst: dst, SrcPort: 40000})
	if err != nil || r.Result != ResultDelivered {
		t.Errorf("pod:other/client2: %v %v", r.Outcome, err)
	}
	for from, want := range map[string]string{
		"pod:client2":      "no running pod default/client2",
		"pod:default/nope": "no running pod default/nope",
		"pod:other/client": "no running pod other/client",
		"node:node-z":      `no node "node-z"`,
		"vm:x":             `unknown kind "vm"`,
		"default/client":   "want pod:NAMESPACE/NAME",
		"external:nowhere": `no external host "nowhere"`,
	} {
		if _, err := c.ProbeOne(Probe{From: from, Proto: netfilter.ProtoTCP, Dst: dst}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one with %q", from, err, want)
		}
	}
}
