package netsim

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
)

// dropInvalid is a FORWARD filter handler that drops packets conntrack found INVALID,
// as `-m conntrack --ctstate INVALID -j DROP` does.
var dropInvalid = HandlerFunc(func(ctx *Context, p *Packet) Verdict {
	if p.CtState == netfilter.CtInvalid {
		return VerdictDrop
	}
	return VerdictContinue
})

// handshake completes a TCP handshake client -> dst (through the VIP when dst is one)
// by injection and returns node-a's conntrack entry.
func handshake(t *testing.T, c *Network, src, dst netip.AddrPort, server string) Conn {
	t.Helper()
	syn, err := c.InjectCrafted("pod:default/client", BuildTCP(TCPSegment{Src: src, Dst: dst, Flags: netfilter.TCPSyn, Seq: 1000, WindowScale: -1}))
	if err != nil || syn.Result != ResultDelivered {
		t.Fatalf("SYN: %v %v", syn.Outcome, err)
	}
	if st, ok := syn.StateAt("node-a"); !ok || st != netfilter.CtNew {
		t.Fatalf("SYN conntrack states %v, want NEW at node-a", syn.States)
	}
	conns := c.Node("node-a").Conntrack().List(CtFilter{Proto: netfilter.ProtoTCP, OrigSrcPort: src.Port()})
	if len(conns) != 1 {
		t.Fatalf("entries after SYN: %v", conns)
	}
	sa, _ := ConnSegment(conns[0], true, netfilter.TCPSyn|netfilter.TCPAck, 5000, 1001, 0)
	if r, err := c.InjectCrafted(server, BuildTCP(sa)); err != nil || r.Result != ResultDelivered || r.Addr != src {
		t.Fatalf("SYN-ACK: %v %v", r.Outcome, err)
	}
	ack, _ := ConnSegment(conns[0], false, netfilter.TCPAck, 1001, 5001, 0)
	r, err := c.InjectCrafted("pod:default/client", BuildTCP(ack))
	if err != nil || r.Result != ResultDelivered {
		t.Fatalf("ACK: %v %v", r.Outcome, err)
	}
	if st, _ := r.StateAt("node-a"); st != netfilter.CtEstablished {
		t.Fatalf("ACK conntrack states %v, want ESTABLISHED", r.States)
	}
	conns = c.Node("node-a").Conntrack().List(CtFilter{Proto: netfilter.ProtoTCP, OrigSrcPort: src.Port()})
	if len(conns) != 1 || conns[0].TCPState != TCPEstablished {
		t.Fatalf("entry after the handshake: %v", conns)
	}
	return conns[0]
}

// TestInjectCraftedSegments: segments with chosen flags, sequence numbers and windows
// on a DNATed connection's tuple, from both sides: an in-window one is ESTABLISHED and
// delivered (translated back to the VIP for the server's side), an out-of-window one is
// INVALID and dropped by the INVALID rule (the decision), unless tcp_be_liberal is set.
func TestInjectCraftedSegments(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	startPod(t, c, "node-a", "default/client")
	vip := netip.MustParseAddrPort("10.96.0.80:80")
	(&kubeLikeNAT{vip: vip, backend: netip.AddrPortFrom(web.IP(), 8080)}).attach(c.Node("node-a"))
	c.Node("node-a").AddHandler(HandlerSpec{Name: "drop-invalid", Hook: netfilter.Forward, Priority: netfilter.PriorityFilter, Handler: dropInvalid})
	client := c.Pod("default", "client")
	src := netip.AddrPortFrom(client.IP(), 41000)
	conn := handshake(t, c, src, vip, "pod:default/web")
	if conn.Reply.Src != web.IP() || conn.NextSeq(false) != 1001 || conn.NextSeq(true) != 5001 {
		t.Fatalf("entry %v: reply tuple %v, next seq %d/%d", conn.Orig, conn.Reply, conn.NextSeq(false), conn.NextSeq(true))
	}
	// From the server's side, in the window: ESTABLISHED, translated back from the VIP.
	seg, _ := ConnSegment(conn, true, netfilter.TCPAck|netfilter.TCPPsh, conn.NextSeq(true), 1001, 1000)
	seg.Payload = []byte("hello")
	r, err := c.InjectCrafted("pod:default/web", BuildTCP(seg))
	if err != nil || r.Result != ResultDelivered || r.Pod != "default/client" || r.SeenSrc != vip || r.Decision != nil {
		t.Fatalf("in-window data from the server: %v %v (decision %v)", r.Outcome, err, r.Decision)
	}
	if st, _ := r.StateAt("node-a"); st != netfilter.CtEstablished {
		t.Errorf("in-window data: states %v", r.States)
	}
	// From the client's side, far outside the window: INVALID, dropped by the rule.
	bad, _ := ConnSegment(conn, false, netfilter.TCPAck, 0x80000000, 5001, 1000)
	r, err = c.InjectCrafted("pod:default/client", BuildTCP(bad))
	if err != nil || r.Result != ResultDropped {
		t.Fatalf("out-of-window ACK: %v %v", r.Outcome, err)
	}
	if st, _ := r.StateAt("node-a"); st != netfilter.CtInvalid {
		t.Errorf("out-of-window ACK: states %v, want INVALID", r.States)
	}
	if r.Decision == nil || r.Decision.Handler != "drop-invalid" || r.Decision.Hook != "FORWARD" {
		t.Errorf("out-of-window ACK: decision %+v\n%s", r.Decision, r.Trace)
	}
	c.Node("node-a").UpdateSettings(func(s *NodeSettings) { s.Conntrack.TCPBeLiberal = true })
	r, _ = c.InjectCrafted("pod:default/client", BuildTCP(bad))
	if st, _ := r.StateAt("node-a"); st != netfilter.CtEstablished || r.Result != ResultDelivered || r.Decision != nil {
		t.Errorf("out-of-window ACK with tcp_be_liberal: %v states %v decision %v", r.Outcome, r.States, r.Decision)
	}
	if _, err := ConnSegment(Conn{Orig: netfilter.Tuple{Proto: netfilter.ProtoUDP}}, false, 0, 0, 0, 0); err == nil {
		t.Error("ConnSegment on a UDP entry: no error")
	}
}

// TestInjectICMPErrorRelated: an ICMP error the server sends about a reply of a DNATed
// connection is RELATED at the client's node and reaches the client with its quoted
// packet and source translated back to the VIP.
func TestInjectICMPErrorRelated(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	startPod(t, c, "node-a", "default/client")
	vip := netip.MustParseAddrPort("10.96.0.80:80")
	(&kubeLikeNAT{vip: vip, backend: netip.AddrPortFrom(web.IP(), 8080)}).attach(c.Node("node-a"))
	client := c.Pod("default", "client")
	src := netip.AddrPortFrom(client.IP(), 41001)
	conn := handshake(t, c, src, vip, "pod:default/web")
	// The segment the server received (after DNAT), quoted in a fragmentation-needed.
	quoted := BuildTCP(TCPSegment{Src: netip.AddrPortFrom(conn.Reply.Dst, conn.Reply.DstPort), Dst: netip.AddrPortFrom(web.IP(), 8080),
		Flags: netfilter.TCPAck, Seq: 1001, Ack: 5001, Payload: make([]byte, 1400), WindowScale: -1})
	icmp := BuildICMPError(web.IP(), quoted, 3, 4)
	r, err := c.InjectCrafted("pod:default/web", icmp)
	if err != nil || r.Result != ResultDelivered || r.Pod != "default/client" {
		t.Fatalf("fragmentation needed: %v %v\n%s", r.Outcome, err, r.Trace)
	}
	if st, _ := r.StateAt("node-a"); st != netfilter.CtRelated {
		t.Errorf("fragmentation needed: states %v, want RELATED at node-a", r.States)
	}
	if r.SeenSrc.Addr() != vip.Addr() {
		t.Errorf("fragmentation needed seen from %v, want the VIP %v (translated back)", r.SeenSrc, vip.Addr())
	}
}

// TestInjectAnsweredByTheStack: the reset that kube-proxy's INVALID rule (Kubernetes
// 1.15, #74840) prevents. A server's segment outside conntrack's window is INVALID at
// the client's node, so it is not translated back from the pod's address to the VIP;
// the client's stack, which knows the connection only by the VIP, answers it with a
// RST to the pod. With a rule dropping INVALID packets nothing arrives and nothing is
// answered. A segment the receiving stack does know, sent outside its window (with
// tcp_be_liberal, so conntrack lets it through), gets its challenge ACK; after the
// client's RST the server's side is gone and a segment of it gets a RST.
func TestInjectAnsweredByTheStack(t *testing.T) {
	c := newTestCluster(t, Config{Seed: 1, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	web := startPod(t, c, "node-b", "default/web", 8080)
	client := startPod(t, c, "node-a", "default/client")
	vip := netip.MustParseAddrPort("10.96.0.80:80")
	(&kubeLikeNAT{vip: vip, backend: netip.AddrPortFrom(web.IP(), 8080)}).attach(c.Node("node-a"))
	nc, err := client.Net().DialFrom(ctxT(t), "tcp", 41000, vip.String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c.Quiesce()
	conns := c.Node("node-a").Conntrack().List(CtFilter{Proto: netfilter.ProtoTCP, OrigSrcPort: 41000})
	if len(conns) != 1 {
		t.Fatalf("entries: %v", conns)
	}
	conn := conns[0]
	stray, _ := ConnSegment(conn, true, netfilter.TCPAck|netfilter.TCPPsh, conn.NextSeq(true)+0x40000000, conn.NextSeq(false), 1000)
	stray.Payload = []byte("late")

	r, err := c.InjectAnswered("pod:default/web", BuildTCP(stray))
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := r.StateAt("node-a"); st != netfilter.CtInvalid || r.Result != ResultDelivered || r.SeenSrc.Addr() != web.IP() {
		t.Fatalf("stray segment: %v, states %v; want INVALID, delivered untranslated from %s", r.Outcome, r.States, web.IP())
	}
	wantRST := "tcp " + netip.AddrPortFrom(client.IP(), 41000).String() + " -> " + netip.AddrPortFrom(web.IP(), 8080).String() + " [R]"
	if !r.Delivered || len(r.Answers) != 1 || r.Answers[0] != wantRST {
		t.Errorf("the client's stack answered %q (delivered %v), want %q", r.Answers, r.Delivered, wantRST)
	}

	c.Node("node-a").AddHandler(HandlerSpec{Name: "drop-invalid", Hook: netfilter.Forward, Priority: netfilter.PriorityFilter, Handler: dropInvalid})
	r, err = c.InjectAnswered("pod:default/web", BuildTCP(stray))
	if err != nil || r.Result != ResultDropped || r.Delivered || len(r.Answers) != 0 {
		t.Errorf("with the INVALID rule: %v delivered %v answers %q err %v; want dropped, nothing answered", r.Outcome, r.Delivered, r.Answers, err)
	}

	// The client's RST reset the server's side: a segment of the connection now gets
	// a RST from the server. On a new connection, a client segment outside the
	// server's window (tcp_be_liberal lets it through conntrack) gets the server's
	// ACK of where it is.
	late, _ := ConnSegment(conn, false, netfilter.TCPAck, conn.NextSeq(false), conn.NextSeq(true), 1000)
	if r, err := c.InjectAnswered("pod:default/client", BuildTCP(late)); err != nil || len(r.Answers) != 1 || !strings.HasSuffix(r.Answers[0], "[R]") {
		t.Errorf("after the reset, the server answered %q (%v, %v), want a RST", r.Answers, r.Outcome, err)
	}
	nc2, err := client.Net().DialFrom(ctxT(t), "tcp", 41001, vip.String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	c.Quiesce()
	conn = c.Node("node-a").Conntrack().List(CtFilter{Proto: netfilter.ProtoTCP, OrigSrcPort: 41001})[0]
	c.Node("node-a").UpdateSettings(func(s *NodeSettings) { s.Conntrack.TCPBeLiberal = true })
	old, _ := ConnSegment(conn, false, netfilter.TCPAck|netfilter.TCPPsh, conn.NextSeq(false)+0x40000000, conn.NextSeq(true), 1000)
	old.Payload = []byte("x")
	r, err = c.InjectAnswered("pod:default/client", BuildTCP(old))
	if err != nil || r.Result != ResultDelivered || r.Pod != "default/web" {
		t.Fatalf("out-of-window segment with tcp_be_liberal: %v %v", r.Outcome, err)
	}
	if len(r.Answers) != 1 || !strings.HasSuffix(r.Answers[0], "[.]") {
		t.Errorf("the server's stack answered %q, want its challenge ACK", r.Answers)
	}
}
