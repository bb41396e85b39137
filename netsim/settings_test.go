package netsim

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// kubeLikeNAT is a small kube-proxy: DNAT a VIP to backends; mark hairpin and
// off-node traffic for masquerade (as KUBE-SEP's -s EP -j KUBE-MARK-MASQ and
// KUBE-SVC's ! -s podCIDR rule do); masquerade marked packets in POSTROUTING. It can
// also DNAT node-local "NodePort" traffic to 127.0.0.1.
type kubeLikeNAT struct {
	vip      netip.AddrPort
	nodePort uint16
	backend  netip.AddrPort
}

const masqMark = 0x4000

func (k *kubeLikeNAT) attach(n *Node) {
	dnat := HandlerFunc(func(ctx *Context, p *Packet) Verdict {
		hit := p.Dst == k.vip.Addr() && p.DstPort == k.vip.Port()
		if k.nodePort != 0 && ctx.IsLocalAddr(p.Dst) && p.DstPort == k.nodePort {
			hit = true
			p.Mark |= masqMark
		}
		if !hit {
			return VerdictContinue
		}
		if p.Src == k.backend.Addr() {
			p.Mark |= masqMark // hairpin
		}
		return DNATTo(k.backend, "")
	})
	n.AddHandler(HandlerSpec{Name: "kube-services", Hook: netfilter.Prerouting, Priority: netfilter.PriorityNATDst, NAT: true, Handler: dnat})
	n.AddHandler(HandlerSpec{Name: "kube-services", Hook: netfilter.Output, Priority: netfilter.PriorityNATDst, NAT: true, Handler: dnat})
	n.AddHandler(HandlerSpec{Name: "kube-postrouting", Hook: netfilter.Postrouting, Priority: netfilter.PriorityNATSrc, NAT: true, Handler: HandlerFunc(func(ctx *Context, p *Packet) Verdict {
		if p.Mark&masqMark == 0 {
			return VerdictContinue
		}
		return MasqueradeVerdict(true, "marked for masquerade")
	})})
}

// ctRecorder records the conntrack state of packets at a hook.
type ctRecorder struct{ states []netfilter.CtState }

func (r *ctRecorder) Handle(ctx *Context, p *Packet) Verdict {
	r.states = append(r.states, p.CtState)
	return VerdictContinue
}

func TestHairpinMasqueradeAndHairpinMode(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-a", "default/web", 8080)
	vip := netip.MustParseAddrPort("10.96.0.80:80")
	k := &kubeLikeNAT{vip: vip, backend: netip.AddrPortFrom(web.IP(), 8080)}
	k.attach(c.Node("node-a"))

	// Real traffic: the pod reaches itself through its Service and sees the bridge
	// address as the client (masqueraded).
	w, err := ask(t, web.Net(), vip.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(w.Client, "10.244.0.1:") || w.Pod != "default/web" {
		t.Errorf("hairpin reply %+v: want the pod itself, seeing the bridge address 10.244.0.1", w)
	}
	r, _ := c.ProbeOne(Probe{From: "pod:default/web", Proto: netfilter.ProtoTCP, Dst: vip, Mode: ProbeConnect})
	if r.Result != ResultConnected || r.SeenSrc.Addr() != netip.MustParseAddr("10.244.0.1") {
		t.Errorf("hairpin probe with hairpin mode on: %s", r.Outcome)
	}
	c.Node("node-a").UpdateSettings(func(s *NodeSettings) { s.Hairpin = false })
	r, _ = c.ProbeOne(Probe{From: "pod:default/web", Proto: netfilter.ProtoTCP, Dst: vip, Mode: ProbeConnect})
	if r.Result != ResultDropped || !strings.Contains(r.Reason, "hairpin") {
		t.Errorf("hairpin probe with hairpin mode off: %s, want dropped by the bridge", r.Outcome)
	}
}

func TestRouteLocalnetForLocalhostNodePort(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-a", "default/web", 8080)
	k := &kubeLikeNAT{vip: netip.MustParseAddrPort("10.96.0.81:80"), nodePort: 30080, backend: netip.AddrPortFrom(web.IP(), 8080)}
	k.attach(c.Node("node-a"))
	lo := netip.MustParseAddrPort("127.0.0.1:30080")
	r, _ := c.ProbeOne(Probe{From: "node:node-a", Proto: netfilter.ProtoTCP, Dst: lo, Mode: ProbeConnect})
	if r.Result != ResultDropped || !strings.Contains(r.Reason, "route_localnet") {
		t.Errorf("localhost NodePort with route_localnet=0: %s, want dropped as a martian", r.Outcome)
	}
	c.Node("node-a").UpdateSettings(func(s *NodeSettings) { s.RouteLocalnet = true })
	r, _ = c.ProbeOne(Probe{From: "node:node-a", Proto: netfilter.ProtoTCP, Dst: lo, Mode: ProbeConnect})
	if r.Result != ResultConnected || r.Pod != "default/web" || r.SeenSrc.Addr() != netip.MustParseAddr("10.244.0.1") || r.ReplyFrom != lo {
		t.Errorf("localhost NodePort with route_localnet=1: %s", r.Outcome)
	}
	// And real traffic from the node's host network.
	w, err := ask(t, c.Node("node-a").HostNet(), lo.String())
	if err != nil {
		t.Fatal(err)
	}
	if w.Pod != "default/web" {
		t.Errorf("real localhost NodePort traffic reached %+v", w)
	}
}

func TestIPForwardOff(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	startPod(t, c, "node-a", "default/client")
	c.Node("node-a").UpdateSettings(func(s *NodeSettings) { s.IPForward = false })
	r, _ := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(web.IP(), 8080)})
	if r.Result != ResultDropped || !strings.Contains(r.Reason, "ip_forward") || r.Node != "node-a" {
		t.Errorf("ip_forward=0: %s", r.Outcome)
	}
}

func TestRPFilter(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	startPod(t, c, "node-a", "default/client")
	spoofed := netip.MustParseAddr("10.244.2.77") // node-c's pod range, sent from node-a's bridge
	p := Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(web.IP(), 8080), Src: spoofed}
	if r, _ := c.ProbeOne(p); r.Result != ResultDelivered {
		t.Errorf("rp_filter=0: %s, want delivered", r.Outcome)
	}
	c.Node("node-a").UpdateSettings(func(s *NodeSettings) { s.RPFilter = 2 })
	if r, _ := c.ProbeOne(p); r.Result != ResultDelivered {
		t.Errorf("rp_filter=2 (loose): %s, want delivered (a route back exists)", r.Outcome)
	}
	c.Node("node-a").UpdateSettings(func(s *NodeSettings) { s.RPFilter = 1 })
	if r, _ := c.ProbeOne(p); r.Result != ResultDropped || !strings.Contains(r.Reason, "rp_filter strict") {
		t.Errorf("rp_filter=1: %s, want dropped (the route back leaves eth0, not cbr0)", r.Outcome)
	}
}

// ctRig is a client pod on node-a and a web pod on node-b (port 8080), with the
// conntrack states node-a's FORWARD sees recorded, for TCP segments injected by hand.
type ctRig struct {
	t        *testing.T
	c        *Network
	rec      *ctRecorder
	cli, srv netip.AddrPort // the client's address (port 41000) and the server's
}

func newCtRig(t *testing.T) *ctRig {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	client := startPod(t, c, "node-a", "default/client")
	rec := &ctRecorder{}
	c.Node("node-a").AddHandler(HandlerSpec{Name: "rec", Hook: netfilter.Forward, Priority: netfilter.PriorityFilter, Handler: rec})
	return &ctRig{t: t, c: c, rec: rec, cli: netip.AddrPortFrom(client.IP(), 41000), srv: netip.AddrPortFrom(web.IP(), 8080)}
}

// seg is a segment from the client (or, fromServer, from the server) with the given
// flags, sequence and acknowledgement numbers, window and payload size, no window
// scale option unless ws >= 0.
func (r *ctRig) seg(fromServer bool, flags uint8, seq, ack uint32, win uint16, ws int8, payload int) (string, TCPSegment) {
	s := TCPSegment{Src: r.cli, Dst: r.srv, Flags: flags, Seq: seq, Ack: ack, Window: win, WindowScale: ws, Payload: make([]byte, payload)}
	if fromServer {
		s.Src, s.Dst = r.srv, r.cli
		return "pod:default/web", s
	}
	return "pod:default/client", s
}

// deliver injects the segment and fails the test unless it is delivered.
func (r *ctRig) deliver(from string, s TCPSegment) {
	r.t.Helper()
	if res, err := r.c.Inject(from, BuildTCP(s), false); err != nil || res.Result != ResultDelivered {
		r.t.Fatalf("%s %s: %v %v", from, TCPFlagString(s.Flags), res.Outcome, err)
	}
}

// states injects the segment and returns the conntrack states node-a's FORWARD saw.
func (r *ctRig) states(from string, s TCPSegment) []netfilter.CtState {
	r.t.Helper()
	r.rec.states = nil
	if _, err := r.c.Inject(from, BuildTCP(s), false); err != nil {
		r.t.Fatal(err)
	}
	return r.rec.states
}

func TestTCPBeLiberalAndInvalid(t *testing.T) {
	r := newCtRig(t)
	// A handshake by hand (a connect probe would close the connection afterwards).
	r.deliver(r.seg(false, netfilter.TCPSyn, 1000, 0, 0, -1, 0))
	r.deliver(r.seg(true, netfilter.TCPSyn|netfilter.TCPAck, 5000, 1001, 0, -1, 0))
	r.deliver(r.seg(false, netfilter.TCPAck, 1001, 5001, 0, -1, 0))
	entries := r.c.Node("node-a").Conntrack().List(CtFilter{Proto: netfilter.ProtoTCP, OrigDst: r.srv.Addr(), OrigSrcPort: 41000})
	if len(entries) != 1 || entries[0].TCPState != TCPEstablished {
		t.Fatalf("conntrack after handshake: %v", entries)
	}
	from, bad := r.seg(false, netfilter.TCPAck, 0x80000000, 1, 0, -1, 0)
	if st := r.states(from, bad); len(st) != 1 || st[0] != netfilter.CtInvalid {
		t.Errorf("out-of-window ACK: conntrack states %v, want [INVALID]", st)
	}
	r.c.Node("node-a").UpdateSettings(func(s *NodeSettings) { s.Conntrack.TCPBeLiberal = true })
	if st := r.states(from, bad); len(st) != 1 || st[0] != netfilter.CtEstablished {
		t.Errorf("out-of-window ACK with tcp_be_liberal=1: %v, want [ESTABLISHED]", st)
	}
}

func TestPartitionAndNodeDeath(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	startPod(t, c, "node-a", "default/client")
	dst := netip.AddrPortFrom(web.IP(), 8080)
	if err := c.Partition([]string{"node-a"}, []string{"node-b", "node-c"}); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: dst}); r.Result != ResultDropped || !strings.Contains(r.Reason, "partition") {
		t.Errorf("partitioned: %s", r.Outcome)
	}
	c.Heal()
	if r, _ := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: dst, Mode: ProbeConnect}); r.Result != ResultConnected {
		t.Errorf("healed: %s", r.Outcome)
	}
	if err := c.KillNode("node-b"); err != nil {
		t.Fatal(err)
	}
	if web.Alive() {
		t.Error("a pod of a dead node is still alive")
	}
	if r, _ := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: dst}); r.Result != ResultDropped || !strings.Contains(r.Reason, "down") {
		t.Errorf("dead node: %s", r.Outcome)
	}
}

func TestLinkLossInProbesAndAllBranches(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	startPod(t, c, "node-a", "default/client")
	c.Node("node-a").Uplink().SetFaults(LinkFaults{Loss: 0.25})
	rs, err := c.Probe(Probe{From: "pod:default/client", Proto: netfilter.ProtoUDP, Dst: netip.AddrPortFrom(web.IP(), 8080), AllBranches: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Result != ResultDelivered || rs[0].Probability != 0.75 || rs[1].Result != ResultDropped || rs[1].Probability != 0.25 {
		t.Errorf("all branches with 25%% loss: %v", rs)
	}
	lost := 0
	for i := 0; i < 400; i++ {
		r, _ := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoUDP, Dst: netip.AddrPortFrom(web.IP(), 8080)})
		if r.Result == ResultDropped {
			lost++
		}
	}
	if lost < 60 || lost > 140 {
		t.Errorf("lost %d of 400 probes at 25%% loss", lost)
	}
}

func TestRealTrafficWithLossAndLatency(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	client := startPod(t, c, "node-a", "default/client")
	c.Node("node-a").Uplink().SetFaults(LinkFaults{Loss: 0.1, Latency: 5 * time.Millisecond})
	start := c.Clock().Now()
	for i := 0; i < 5; i++ {
		if _, err := ask(t, client.Net(), netip.AddrPortFrom(web.IP(), 8080).String()); err != nil {
			t.Fatalf("request %d with 10%% loss: %v", i, err)
		}
	}
	if el := c.Clock().Since(start); el < 5*2*5*time.Millisecond {
		t.Errorf("5 exchanges over a 5 ms link took %v of virtual time", el)
	}
	if sent, _ := c.Node("node-a").Uplink().Counters(); sent == 0 {
		t.Error("uplink carried nothing")
	}
}

func TestDuplicationAndReordering(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	sink := startPod(t, c, "node-b", "default/sink")
	client := startPod(t, c, "node-a", "default/client")
	pc, err := sink.Net().ListenPacket("udp", ":9000")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	c.Node("node-a").Uplink().SetFaults(LinkFaults{Duplicate: 1})
	conn, err := client.Net().Dial("udp", netip.AddrPortFrom(sink.IP(), 9000).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("x"))
	pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 100)
	for i := 0; i < 2; i++ {
		if _, _, err := pc.ReadFrom(buf); err != nil {
			t.Fatalf("copy %d of a duplicated datagram: %v", i+1, err)
		}
	}
	c.Node("node-a").Uplink().SetFaults(LinkFaults{Reorder: 0.5, ReorderBy: 20 * time.Millisecond})
	const n = 40
	for i := 0; i < n; i++ {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(i))
		conn.Write(b[:])
	}
	var got []uint32
	for len(got) < n {
		k, _, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("after %d datagrams: %v", len(got), err)
		}
		if k == 4 {
			got = append(got, binary.BigEndian.Uint32(buf))
		}
	}
	inversions := 0
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			inversions++
		}
	}
	if inversions == 0 {
		t.Errorf("no reordering seen with 50%% reorder: %v", got)
	}
}

func TestKilledPodSocketsDie(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	client := startPod(t, c, "node-a", "default/client")
	addr := netip.AddrPortFrom(web.IP(), 8080)
	conn, err := client.Net().DialContext(ctxT(t), "tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ln, err := web.Net().Listen("tcp", ":9090")
	if err != nil {
		t.Fatal(err)
	}
	c.StopPod("default", "web")
	if _, err := ln.Accept(); err == nil {
		t.Error("a killed pod's listener still accepts")
	}
	// A new connection to the dead pod's address: the node finds nobody on the bridge and
	// answers host unreachable.
	_, err = client.Net().DialContext(ctxT(t), "tcp", addr.String())
	if !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Errorf("dial a deleted pod's IP: %v, want EHOSTUNREACH", err)
	}
}

func TestPcapCapture(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	client := startPod(t, c, "node-a", "default/client")
	var buf, podBuf bytes.Buffer
	stop, err := c.Capture("node-a/eth0", &buf)
	if err != nil {
		t.Fatal(err)
	}
	stopPod, err := c.Capture("pod/default/client", &podBuf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ask(t, client.Net(), netip.AddrPortFrom(web.IP(), 8080).String()); err != nil {
		t.Fatal(err)
	}
	stop()
	stopPod()
	if pb := podBuf.Bytes(); len(pb) < 24+16+40 || binary.LittleEndian.Uint32(pb[20:]) != pcapLinkRaw {
		t.Errorf("pod veth capture: %d bytes", len(pb))
	} else if first, err := ParsePacket(pb[40 : 40+binary.LittleEndian.Uint32(pb[32:])]); err != nil || first.TCPFlags != netfilter.TCPSyn || first.Src != client.IP() || first.TTL != 64 {
		t.Errorf("the pod's capture should start with its SYN as it left the pod (TTL 64): %v %v", first, err)
	}
	b := buf.Bytes()
	if len(b) < 24 || binary.LittleEndian.Uint32(b) != pcapMagic || binary.LittleEndian.Uint32(b[20:]) != pcapLinkRaw {
		t.Fatalf("not a raw-IP pcap file: % x", b[:min(len(b), 24)])
	}
	var syn, synack bool
	for off := 24; off+16 <= len(b); {
		n := int(binary.LittleEndian.Uint32(b[off+8:]))
		pk, err := ParsePacket(b[off+16 : off+16+n])
		if err != nil {
			t.Fatalf("record at %d: %v", off, err)
		}
		if !pk.ChecksumsValid() {
			t.Errorf("captured packet with bad checksums: %s", pk)
		}
		syn = syn || pk.TCPFlags == netfilter.TCPSyn && pk.Src == client.IP()
		synack = synack || pk.TCPFlags == netfilter.TCPSyn|netfilter.TCPAck && pk.Src == web.IP()
		off += 16 + n
	}
	if !syn || !synack {
		t.Errorf("capture on node-a/eth0 lacks the handshake (syn %v, syn-ack %v)", syn, synack)
	}
}

func TestTraceJSON(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	startPod(t, c, "node-a", "default/client")
	attachDNAT(c, &staticDNAT{vip: netip.MustParseAddrPort("10.96.0.90:80"), backends: []netip.AddrPort{netip.AddrPortFrom(web.IP(), 8080)}})
	r, _ := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.MustParseAddrPort("10.96.0.90:80"), Trace: true})
	js, err := r.Trace.JSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"kind": "hook"`, `"hook": "PREROUTING"`, `"kind": "conntrack"`, `"verdict": "NEW"`, `"kind": "nat"`, `"kind": "route"`, `"node": "node-b"`, `"verdict": "DELIVERED"`} {
		if !bytes.Contains(js, []byte(want)) {
			t.Errorf("trace JSON lacks %s:\n%s", want, js)
		}
	}
	text := r.Trace.String()
	if !strings.Contains(text, "[node-a] PREROUTING") || !strings.Contains(text, "[node-b] POSTROUTING") {
		t.Errorf("trace text:\n%s", text)
	}
	_ = context.Background
	_ = fmt.Sprint
}

// An IPVS-like handler at INPUT: the VIP is local (bound to a dummy interface); the
// handler rewrites the destination and reroutes, and conntrack undoes it on replies.
func TestRewriteDstAndReroute(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	client := startPod(t, c, "node-a", "default/client")
	n := c.Node("node-a")
	n.AddInterface("kube-ipvs0")
	vip := netip.MustParseAddrPort("10.96.0.77:80")
	if err := n.AddAddress("kube-ipvs0", netip.PrefixFrom(vip.Addr(), 32)); err != nil {
		t.Fatal(err)
	}
	n.AddHandler(HandlerSpec{Name: "ipvs", Hook: netfilter.Input, Priority: netfilter.PriorityNATSrc - 2, Handler: HandlerFunc(func(ctx *Context, p *Packet) Verdict {
		if p.Dst != vip.Addr() || p.DstPort != vip.Port() || p.CtReply {
			return VerdictContinue
		}
		ctx.RewriteDst(p, netip.AddrPortFrom(web.IP(), 8080))
		return Verdict{Kind: Reroute, Reason: "virtual server"}
	})})
	w, err := ask(t, client.Net(), vip.String())
	if err != nil {
		t.Fatal(err)
	}
	if w.Pod != "default/web" || !strings.HasPrefix(w.Client, client.IP().String()) {
		t.Errorf("through the rewriting handler: %+v", w)
	}
	r, _ := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, Mode: ProbeConnect})
	if r.Result != ResultConnected || r.ReplyFrom != vip {
		t.Errorf("probe: %s", r.Outcome)
	}
	// A port the handler does not serve reaches the node's own stack: refused.
	r, _ = c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(vip.Addr(), 81), Mode: ProbeConnect})
	if r.Result != ResultRefused || r.Node != "node-a" {
		t.Errorf("VIP on another port: %s, want refused by node-a's stack", r.Outcome)
	}
}

// The node's own connections leave from its node IP, except toward its own pods, which it
// reaches from the bridge address (the kernel's routes: "10.244.0.0/24 dev cbr0 src
// 10.244.0.1", "default via ... src 172.18.0.2").
func TestHostSourceAddressSelection(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	local := startPod(t, c, "node-a", "default/local", 8080)
	remote := startPod(t, c, "node-b", "default/remote", 8080)
	n := c.Node("node-a")
	w, err := ask(t, n.HostNet(), netip.AddrPortFrom(local.IP(), 8080).String())
	if err != nil || !strings.HasPrefix(w.Client, "10.244.0.1:") {
		t.Errorf("node to its own pod: %+v %v, want the bridge address", w, err)
	}
	w, err = ask(t, n.HostNet(), netip.AddrPortFrom(remote.IP(), 8080).String())
	if err != nil || !strings.HasPrefix(w.Client, "172.18.0.2:") {
		t.Errorf("node to another node's pod: %+v %v, want the node IP", w, err)
	}
}

// The node's own connections take the source Linux's routes give them, in both
// families (netstack alone ignores IPv6 source hints and would pick the bridge address,
// the longest prefix match, for every fd00:10::/32 destination), and a VIP bound to a
// dummy interface is its own source, as a local destination is under Linux.
func TestHostSourceAddressSelectionDualStack(t *testing.T) {
	c := newTestCluster(t, dualStack())
	local := startPod(t, c, "node-a", "default/local", 8080)
	remote := startPod(t, c, "node-b", "default/remote", 8080)
	n := c.Node("node-a")
	gw, ip := map[bool]netip.Addr{}, map[bool]netip.Addr{}
	for _, i := range n.Interfaces() {
		for _, p := range i.Addrs {
			switch i.Name {
			case "cbr0":
				gw[p.Addr().Is4()] = p.Addr()
			case "eth0":
				ip[p.Addr().Is4()] = p.Addr()
			}
		}
	}
	for _, v4 := range []bool{true, false} {
		for _, tc := range []struct {
			pod  *Pod
			want netip.Addr
		}{{local, gw[v4]}, {remote, ip[v4]}} {
			var dst netip.Addr
			for _, a := range tc.pod.IPs() {
				if a.Is4() == v4 {
					dst = a
				}
			}
			w, err := ask(t, n.HostNet(), netip.AddrPortFrom(dst, 8080).String())
			if src, perr := netip.ParseAddrPort(w.Client); err != nil || perr != nil || src.Addr() != tc.want {
				t.Errorf("node to %s: %+v %v, want source %s", dst, w, err, tc.want)
			}
		}
	}
	// A VIP bound to a dummy interface, served by the node's own stack.
	n.AddInterface("kube-ipvs0")
	vip := netip.MustParsePrefix("10.96.0.77/32")
	if err := n.AddAddress("kube-ipvs0", vip); err != nil {
		t.Fatal(err)
	}
	if got := n.SourceFor(vip.Addr()); got != vip.Addr() {
		t.Errorf("SourceFor(a local VIP) = %s, want the VIP", got)
	}
	ln, err := n.HostNet().Listen("tcp", vip.Addr().String()+":81")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			accepted <- err.Error()
			return
		}
		accepted <- conn.RemoteAddr().String()
		conn.Close()
	}()
	conn, err := n.HostNet().DialContext(ctxT(t), "tcp", vip.Addr().String()+":81")
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if got := <-accepted; !strings.HasPrefix(got, vip.Addr().String()+":") {
		t.Errorf("the node's connection to its own VIP came from %s, want the VIP", got)
	}
}

func TestEgressMasquerade(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	ext, err := c.AddExternalHost("web", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := ServeWhoami(ext.Net(), "", "external", netfilter.ProtoTCP, 80)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	client := startPod(t, c, "node-b", "default/client")
	other := startPod(t, c, "node-a", "default/other", 8080)
	w, err := ask(t, client.Net(), netip.AddrPortFrom(ext.IP(), 80).String())
	if err != nil || !strings.HasPrefix(w.Client, "172.18.0.3:") {
		t.Errorf("pod to the outside: %+v %v, want node-b's IP", w, err)
	}
	if w, err := ask(t, client.Net(), netip.AddrPortFrom(other.IP(), 8080).String()); err != nil || !strings.HasPrefix(w.Client, client.IP().String()) {
		t.Errorf("pod to pod must keep its address: %+v %v", w, err)
	}
	c.Node("node-b").UpdateSettings(func(s *NodeSettings) { s.EgressMasquerade = false })
	r, _ := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(ext.IP(), 80), Mode: ProbeConnect})
	if r.Result != ResultConnected || r.SeenSrc.Addr() != client.IP() {
		t.Errorf("without egress masquerade: %s", r.Outcome)
	}
}

func dualStack() Config {
	return Config{Seed: 5, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}},
		NodeCIDRs:    []netip.Prefix{netip.MustParsePrefix("172.18.0.0/16"), netip.MustParsePrefix("fc00:f853:ccd:e793::/64")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")}}
}

func TestDualStackServersAndListeners(t *testing.T) {
	c := newTestCluster(t, dualStack())
	web := startPod(t, c, "node-b", "default/web", 8080)
	client := startPod(t, c, "node-a", "default/client")
	if len(web.IPs()) != 2 {
		t.Fatalf("pod IPs %v", web.IPs())
	}
	for _, ip := range web.IPs() {
		addr := netip.AddrPortFrom(ip, 8080).String()
		if w, err := ask(t, client.Net(), addr); err != nil || w.Pod != "default/web" {
			t.Errorf("tcp to %s: %+v %v", addr, w, err)
		}
		r, _ := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoUDP, Dst: netip.AddrPortFrom(ip, 8080), Mode: ProbeConnect})
		if r.Result != ResultReplied {
			t.Errorf("udp probe to %s: %s", addr, r.Outcome)
		}
		conn, err := client.Net().Dial("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		conn.Write([]byte("x"))
		buf := make([]byte, 200)
		k, err := conn.Read(buf)
		conn.Close()
		if err != nil || !strings.Contains(string(buf[:k]), "pod=default/web") {
			t.Errorf("udp to %s: %q %v", addr, buf[:k], err)
		}
	}
	// tcp6 and tcp4 listeners share a port, as IPV6_V6ONLY sockets do.
	l4, err := client.Net().Listen("tcp4", ":9000")
	if err != nil {
		t.Fatal(err)
	}
	defer l4.Close()
	l6, err := client.Net().Listen("tcp6", "[::]:9000")
	if err != nil {
		t.Fatalf("tcp6 beside tcp4 on one port: %v", err)
	}
	l6.Close()
}

func TestRouteExternalIP(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	if _, err := c.AddExternalHost("client", netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	eip := netip.MustParseAddrPort("192.0.2.50:80")
	p := Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: eip}
	if r, _ := c.ProbeOne(p); r.Result != ResultDropped || !strings.Contains(r.Reason, "no route") {
		t.Errorf("unrouted external IP: %s", r.Outcome)
	}
	if err := c.RouteExternalIP(eip.Addr(), "node-c"); err != nil {
		t.Fatal(err)
	}
	r, _ := c.ProbeOne(Probe{From: "external:client", Proto: netfilter.ProtoTCP, Dst: eip, Trace: true})
	if len(r.Trace.Find(StepHook)) == 0 || r.Trace.Find(StepHook)[0].Node != "node-c" {
		t.Errorf("routed external IP did not reach node-c: %s\n%s", r.Outcome, r.Trace)
	}
	if err := c.RouteExternalIP(c.Node("node-a").IP(), "node-b"); err == nil {
		t.Error("routing a node IP elsewhere was accepted")
	}
}

// Reroute from OUTPUT: the node's own traffic to a VIP, rewritten by a handler.
func TestRerouteAtOutput(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	vip := netip.MustParseAddrPort("10.96.0.78:80")
	n := c.Node("node-a")
	n.AddHandler(HandlerSpec{Name: "ipvs-out", Hook: netfilter.Output, Priority: netfilter.PriorityNATDst + 1, Handler: HandlerFunc(func(ctx *Context, p *Packet) Verdict {
		if p.Dst == vip.Addr() && p.DstPort == vip.Port() && !p.CtReply {
			ctx.RewriteDst(p, netip.AddrPortFrom(web.IP(), 8080))
			return Verdict{Kind: Reroute}
		}
		return VerdictContinue
	})})
	r, _ := c.ProbeOne(Probe{From: "node:node-a", Proto: netfilter.ProtoTCP, Dst: vip, Mode: ProbeConnect})
	if r.Result != ResultConnected || r.Pod != "default/web" || r.ReplyFrom != vip {
		t.Errorf("reroute at OUTPUT: %s", r.Outcome)
	}
}

// Routing finds addresses bound and unbound on the node's interfaces and pod IPs as
// their pods come and go, in both families (the datapath's address table follows the
// node's addresses and bridge ports).
func TestRoutingFollowsAddressesAndPods(t *testing.T) {
	c := newTestCluster(t, dualStack())
	n := c.Node("node-a")
	pod, err := c.StartPod("node-a", "default", "p", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	route := func(a netip.Addr) route {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.routeLocked(a)
	}
	n.AddInterface("kube-ipvs0")
	vips := []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00:96::10")}
	for _, vip := range vips {
		if rt := route(vip); rt.kind != routeUplink {
			t.Errorf("%s before it is bound: route %d, want the uplink", vip, rt.kind)
		}
		if err := n.AddAddress("kube-ipvs0", netip.PrefixFrom(vip, vip.BitLen())); err != nil {
			t.Fatal(err)
		}
		if rt := route(vip); rt.kind != routeLocal || rt.iface.Name != "kube-ipvs0" {
			t.Errorf("%s bound to kube-ipvs0: route %d via %s, want local", vip, rt.kind, ifaceName(rt.iface))
		}
		if err := n.RemoveAddress("kube-ipvs0", vip); err != nil {
			t.Fatal(err)
		}
		if rt := route(vip); rt.kind != routeUplink {
			t.Errorf("%s unbound: route %d, want the uplink", vip, rt.kind)
		}
	}
	for _, ip := range append(n.IPs(), n.gateway...) {
		if rt := route(ip); rt.kind != routeLocal {
			t.Errorf("node address %s: route %d, want local", ip, rt.kind)
		}
	}
	if len(pod.IPs()) != 2 {
		t.Fatalf("pod IPs %v, want one per family", pod.IPs())
	}
	for _, ip := range pod.IPs() {
		if rt := route(ip); rt.kind != routeBridge || rt.port != pod.port {
			t.Errorf("pod IP %s: route %d, want the pod's bridge port", ip, rt.kind)
		}
	}
	pod.kill()
	for _, ip := range pod.IPs() {
		if rt := route(ip); rt.kind != routeNoNeigh {
			t.Errorf("pod IP %s after the pod died: route %d, want no neighbour", ip, rt.kind)
		}
	}
}

// Handlers run in priority order among the built-in steps of their hook: before
// conntrack (raw), between conntrack and DNAT (mangle), after DNAT (filter), and in
// POSTROUTING before and after the SNAT step and after confirmation; a removed handler
// runs no more.
func TestHookOrderWithBuiltinSteps(t *testing.T) {
	c := newTestCluster(t, Config{Seed: 3, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	startPod(t, c, "node-a", "default/client")
	web := startPod(t, c, "node-b", "default/web")
	vip := netip.MustParseAddrPort("10.96.0.7:80")
	attachDNAT(c, &staticDNAT{vip: vip, backends: []netip.AddrPort{netip.AddrPortFrom(web.IP(), 8080)}})
	n := c.Node("node-a")
	var seen []string
	rec := func(name string) HandlerFunc {
		return func(ctx *Context, p *Packet) Verdict {
			confirmed := p.Conn != nil && p.Conn.Has(netfilter.StatusConfirmed)
			seen = append(seen, fmt.Sprintf("%s %s %s dst=%s confirmed=%v", name, ctx.Hook(), p.CtState, p.Dst, confirmed))
			return VerdictContinue
		}
	}
	var removes []func()
	for _, h := range []struct {
		name string
		hook netfilter.Hook
		prio int
	}{
		{"filter", netfilter.Prerouting, netfilter.PriorityFilter},
		{"raw", netfilter.Prerouting, netfilter.PriorityRaw},
		{"mangle", netfilter.Prerouting, netfilter.PriorityMangle},
		{"post-last", netfilter.Postrouting, 1<<30 + 1},
		{"post-filter", netfilter.Postrouting, netfilter.PriorityFilter},
		{"post-after-snat", netfilter.Postrouting, netfilter.PriorityNATSrc + 50},
	} {
		removes = append(removes, n.AddHandler(HandlerSpec{Name: h.name, Hook: h.hook, Priority: h.prio, Handler: rec(h.name)}))
	}
	probe := func() {
		seen = nil
		if _, err := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoUDP, Dst: vip, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	probe()
	want := []string{
		"raw PREROUTING UNTRACKED dst=10.96.0.7 confirmed=false",
		"mangle PREROUTING NEW dst=10.96.0.7 confirmed=false",
		"filter PREROUTING NEW dst=" + web.IP().String() + " confirmed=false",
		"post-filter POSTROUTING NEW dst=" + web.IP().String() + " confirmed=false",
		"post-after-snat POSTROUTING NEW dst=" + web.IP().String() + " confirmed=false",
		"post-last POSTROUTING NEW dst=" + web.IP().String() + " confirmed=true",
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("handlers ran as\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	removes[2]() // mangle
	removes[3]() // post-last
	probe()
	if len(seen) != 4 || strings.HasPrefix(seen[1], "mangle") || strings.HasPrefix(seen[3], "post-last") {
		t.Errorf("after removing two handlers, ran:\n%s", strings.Join(seen, "\n"))
	}
}

// runHookLocked runs the built-in steps of a hook without handlers (n.bare) in a fixed
// order; it must be hookBuiltins' order.
func TestBareHooksFollowTheBuiltinSteps(t *testing.T) {
	want := [netfilter.NumHooks][]int{
		netfilter.Prerouting:  {stepConntrack, stepNAT},
		netfilter.Input:       {stepNAT, stepConfirm},
		netfilter.Output:      {stepConntrack, stepNAT},
		netfilter.Postrouting: {stepNAT, stepConfirm},
	}
	for h := range netfilter.NumHooks {
		var got []int
		for _, b := range hookBuiltins[h] {
			got = append(got, b.kind)
		}
		if fmt.Sprint(got) != fmt.Sprint(want[h]) {
			t.Errorf("%s: built-in steps %v, but runHookLocked runs %v for a hook without handlers", netfilter.Hook(h), got, want[h])
		}
	}
}

// Destinations in Config.NonMasqueradeCIDRs (a cluster's service CIDRs) are reached with
// the pod's own address; others outside the cluster through the node's.
func TestNonMasqueradeCIDRs(t *testing.T) {
	cfg := threeNodes()
	cfg.ExternalCIDR = netip.MustParsePrefix("203.0.113.0/24")
	cfg.NonMasqueradeCIDRs = []netip.Prefix{netip.MustParsePrefix("203.0.113.128/25")}
	c := newTestCluster(t, cfg)
	startPod(t, c, "node-b", "default/client")
	for _, tc := range []struct {
		ip   string
		masq bool
	}{{"203.0.113.10", true}, {"203.0.113.200", false}} {
		ext, err := c.AddExternalHost("web-"+tc.ip, netip.MustParseAddr(tc.ip))
		if err != nil {
			t.Fatal(err)
		}
		r, _ := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(ext.IP(), 80), Mode: ProbePacket})
		want := c.Pod("default", "client").IP()
		if tc.masq {
			want = c.Node("node-b").IP()
		}
		if r.SeenSrc.Addr() != want {
			t.Errorf("to %s: seen from %s, want %s (%s)", tc.ip, r.SeenSrc, want, r.Outcome)
		}
	}
}

// OUTPUT sees the output interface of the node's own packet (the kernel routes a
// locally generated packet before OUTPUT), and keeps it for the whole hook after a
// DNAT there; the packet is routed again afterwards. Found by the iptables emulator's
// differential fuzzer against a kernel.
func TestOutputSeesOutInterface(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-a", "default/web", 8080)
	vip := netip.MustParseAddrPort("10.96.0.79:80")
	n := c.Node("node-a")
	var seen []string
	n.AddHandler(HandlerSpec{Name: "dnat-out", Hook: netfilter.Output, Priority: netfilter.PriorityNATDst, NAT: true, Handler: HandlerFunc(func(ctx *Context, p *Packet) Verdict {
		if p.Dst == vip.Addr() && p.DstPort == vip.Port() && !p.CtReply {
			seen = append(seen, "nat:"+p.OutIface)
			ctx.RewriteDst(p, netip.AddrPortFrom(web.IP(), 8080))
		}
		return VerdictContinue
	})})
	n.AddHandler(HandlerSpec{Name: "filter-out", Hook: netfilter.Output, Priority: netfilter.PriorityFilter, Handler: HandlerFunc(func(ctx *Context, p *Packet) Verdict {
		if p.Dst == web.IP() && !p.CtReply && len(seen) == 1 {
			seen = append(seen, "filter:"+p.OutIface)
		}
		return VerdictContinue
	})})
	r, _ := c.ProbeOne(Probe{From: "node:node-a", Proto: netfilter.ProtoTCP, Dst: vip, Mode: ProbeConnect})
	if r.Result != ResultConnected || r.Pod != "default/web" {
		t.Fatalf("DNAT at OUTPUT: %s", r.Outcome)
	}
	// The VIP routes out the uplink; after the DNAT to a local pod, filter OUTPUT still
	// sees the uplink, as the kernel keeps the first route's device for the hook.
	up := "eth0" // the uplink interface
	if len(seen) != 2 || seen[0] != "nat:"+up || seen[1] != "filter:"+up {
		t.Errorf("OUTPUT saw out interfaces %v, want [nat:%s filter:%s]", seen, up, up)
	}
}

// Window scaling in both directions, as the kernel's conntrack tracks it (tcp_new takes
// the first SYN's options; the answer decides whether both sides scale): after a
// handshake where both offer a window scale, a segment the server sends far beyond the
// client's unscaled window but inside its scaled one is ESTABLISHED, and so is the
// client's inside the server's; when the SYN-ACK offers none, neither side scales and
// the same server segment is INVALID. (Conntrack once dropped the client's scale at its
// SYN: every download through a Service of more than a window went INVALID.)
func TestConntrackWindowScaleBothWays(t *testing.T) {
	for _, tc := range []struct {
		name   string
		synAck int8
		want   netfilter.CtState
	}{
		{"both-scale", 7, netfilter.CtEstablished},
		{"answer-without-scale", -1, netfilter.CtInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCtRig(t)
			r.deliver(r.seg(false, netfilter.TCPSyn, 1000, 0, 64240, 7, 0))
			r.deliver(r.seg(true, netfilter.TCPSyn|netfilter.TCPAck, 5000, 1001, 64240, tc.synAck, 0))
			// The windows from here on are scaled (×128 where both scale): 1,000 is 128,000 bytes.
			r.deliver(r.seg(false, netfilter.TCPAck, 1001, 5001, 1000, -1, 0))
			r.deliver(r.seg(true, netfilter.TCPAck, 5001, 1001, 1000, -1, 0))
			for _, fromServer := range []bool{true, false} {
				seq, ack := uint32(1001+100000), uint32(5001)
				if fromServer {
					seq, ack = 5001+100000, 1001
				}
				from, s := r.seg(fromServer, netfilter.TCPAck, seq, ack, 1000, -1, 1000)
				if st := r.states(from, s); len(st) != 1 || st[0] != tc.want {
					t.Errorf("%s's segment 100,000 bytes into a 128,000-byte scaled window: conntrack states %v, want [%v]", from, st, tc.want)
				}
			}
		})
	}
}

// A connection conntrack picks up mid-stream (after `conntrack -F`, say) has lost its
// handshake, so its window scaling is unknown: the kernel's tcp_new marks both
// directions liberal ("We assume SACK and liberal window checking to handle window
// scaling"), and a server's segment far beyond the client's unscaled window is still
// ESTABLISHED. An entry made from a handshake is held to its windows: the same segment
// without the flush, but beyond the scaled window, is INVALID.
func TestConntrackMidStreamPickupIsLiberal(t *testing.T) {
	for _, flush := range []bool{true, false} {
		t.Run(fmt.Sprintf("flush=%v", flush), func(t *testing.T) {
			r := newCtRig(t)
			r.deliver(r.seg(false, netfilter.TCPSyn, 1000, 0, 64240, 7, 0))
			r.deliver(r.seg(true, netfilter.TCPSyn|netfilter.TCPAck, 5000, 1001, 64240, 7, 0))
			r.deliver(r.seg(false, netfilter.TCPAck, 1001, 5001, 100, -1, 0))
			if flush {
				if n := r.c.Node("node-a").Conntrack().Flush(); n != 1 {
					t.Fatalf("flushed %d entries", n)
				}
				// The client's next ACK makes the entry again, mid-stream.
				r.deliver(r.seg(false, netfilter.TCPAck, 1001, 5001, 100, -1, 0))
			}
			// A first segment from the server, acknowledged; then one 100,000 bytes on,
			// beyond the client's window (100 × 128 = 12,800 bytes scaled).
			r.deliver(r.seg(true, netfilter.TCPAck, 5001, 1001, 1000, -1, 1000))
			r.deliver(r.seg(false, netfilter.TCPAck, 1001, 6001, 100, -1, 0))
			want := netfilter.CtInvalid
			if flush {
				want = netfilter.CtEstablished
			}
			if st := r.states(r.seg(true, netfilter.TCPAck, 5001+100000, 1001, 1000, -1, 1000)); len(st) != 1 || st[0] != want {
				t.Errorf("server segment far out of the client's window: conntrack states %v, want [%v]", st, want)
			}
		})
	}
}
