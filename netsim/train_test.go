package netsim

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// trainCounter is a TrainHandler that counts what it sees per direction, TCP flags and
// conntrack state (packets and bytes), and marks every packet: what its Handle counts for
// a train's segments one by one, its PeekTrain and CommitTrain must count at once.
type trainCounter struct {
	counts  map[string][2]uint64
	pending []string // PeekTrain's keys and amounts for CommitTrain
	pend    [][2]uint64
	peeks   int
}

func (h *trainCounter) key(p *Packet, flags uint8) string {
	return fmt.Sprintf("%s>%s flags=%#x ct=%s reply=%v", p.Src, p.Dst, flags, p.CtState, p.CtReply)
}

func (h *trainCounter) add(k string, pkts, bytes uint64) {
	v := h.counts[k]
	h.counts[k] = [2]uint64{v[0] + pkts, v[1] + bytes}
}

func (h *trainCounter) Handle(ctx *Context, p *Packet) Verdict {
	h.add(h.key(p, p.TCPFlags), 1, uint64(len(p.Data)))
	p.Mark = 7
	return VerdictContinue
}

func (h *trainCounter) PeekTrain(ctx *Context, p *Packet, t Train) (Verdict, bool) {
	h.peeks++
	h.pending = append(h.pending[:0], h.key(p, t.Flags), h.key(p, p.TCPFlags))
	h.pend = append(h.pend[:0], [2]uint64{uint64(t.Segments - 1), uint64((t.Segments - 1) * t.Len)}, [2]uint64{1, uint64(t.LastLen)})
	p.Mark = 7
	return VerdictContinue, true
}

func (h *trainCounter) CommitTrain() {
	for i, k := range h.pending {
		h.add(k, h.pend[i][0], h.pend[i][1])
	}
}

// trainWorld is a two-node network whose pods' deliveries are recorded instead of
// going into their stacks, driven one frame at a time on the test's goroutine.
type trainWorld struct {
	c              *Network
	client, server *Pod
	vip, backend   netip.AddrPort
	got            map[string][][]byte // frames delivered, per pod
	counters       []*trainCounter
	pcap           map[string]*bytes.Buffer
	tracer         *FlowTracer
}

type trainVariant struct {
	trains     bool
	plainAtB   bool // a handler that is no TrainHandler at node-b's FORWARD
	capture    bool
	trace      bool
	uplinkLoss float64
}

func newTrainWorld(t *testing.T, v trainVariant) *trainWorld {
	c := newTestCluster(t, Config{Seed: 37, ManualClock: true, NoTrains: !v.trains, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	w := &trainWorld{c: c, got: map[string][][]byte{}, pcap: map[string]*bytes.Buffer{}}
	var err error
	if w.server, err = c.StartPod("node-b", "default", "server", nil, false); err != nil {
		t.Fatal(err)
	}
	if w.client, err = c.StartPod("node-a", "default", "client", nil, false); err != nil {
		t.Fatal(err)
	}
	w.backend = netip.AddrPortFrom(w.server.IP(), 8080)
	w.vip = netip.MustParseAddrPort("10.96.0.7:80")
	attachDNAT(c, &staticDNAT{vip: w.vip, backends: []netip.AddrPort{w.backend}})
	for _, n := range c.Nodes() {
		h := &trainCounter{counts: map[string][2]uint64{}}
		w.counters = append(w.counters, h)
		n.AddHandler(HandlerSpec{Name: "count", Hook: netfilter.Forward, Handler: h})
	}
	if v.plainAtB {
		h := &trainCounter{counts: map[string][2]uint64{}}
		w.counters = append(w.counters, h)
		c.Node("node-b").AddHandler(HandlerSpec{Name: "plain", Hook: netfilter.Forward, Priority: 5, Handler: HandlerFunc(h.Handle)})
	}
	for _, p := range []*Pod{w.client, w.server} {
		key := p.key()
		node := p.node
		port := p.port
		p.port.toPod = func(f frame) { w.got[key] = append(w.got[key], append([]byte(nil), f.b...)) }
		port.toNode = func(f frame) {
			node.handle(queued{data: f, from: queueSource{kind: fromPort, port: port}}, new(Packet), time.Time{})
		}
	}
	if v.capture {
		for _, pt := range []string{"node-a/cbr0", "node-a/eth0", "node-b/eth0", "node-b/cbr0", "pod/default/client", "pod/default/server"} {
			b := new(bytes.Buffer)
			if _, err := c.Capture(pt, b); err != nil {
				t.Fatal(err)
			}
			w.pcap[pt] = b
		}
	}
	if v.trace {
		w.tracer = c.TraceFlows(FlowFilter{Limit: 100000})
	}
	if v.uplinkLoss > 0 {
		c.Node("node-a").uplinkLink.SetFaults(LinkFaults{Loss: v.uplinkLoss})
	}
	return w
}

// send hands b to pod p's link as its stack hands a TCP packet over: with GSO at mss
// when b's payload exceeds it.
func (w *trainWorld) send(p *Pod, b []byte, mss int) {
	v := buffer.NewViewWithData(append([]byte(nil), b...))
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithView(v)})
	defer pkt.DecRef()
	if mss > 0 {
		pkt.GSOOptions = stack.GSO{Type: stack.GSOTCPv4, MSS: uint16(mss), NeedsCsum: false}
	}
	l := &stackLink{out: p.stackOpts.out, trains: !w.c.cfg.NoTrains}
	l.WritePackets(pktList(pkt))
}

func pktList(pkt *stack.PacketBuffer) stack.PacketBufferList {
	var l stack.PacketBufferList
	l.PushBack(pkt)
	return l
}

// run drives a fixed-seed exchange through the world: a handshake through the VIP, then
// data both ways in super-packets of random sizes and flags (some out of window), with
// ACKs between, and returns everything observable, rendered.
func (w *trainWorld) run(t *testing.T, seed uint64) string {
	r := rand.New(rand.NewPCG(seed, 24))
	cli := netip.AddrPortFrom(w.client.IP(), 40000)
	cseq, sseq := uint32(1000), uint32(5_000_000)
	syn := func(flags uint8, src, dst netip.AddrPort, seq, ack uint32) []byte {
		return BuildTCP(TCPSegment{Src: src, Dst: dst, Flags: flags, Seq: seq, Ack: ack, Window: 65535, WindowScale: 7, MSS: 1448, SACKPermitted: true})
	}
	w.send(w.client, syn(netfilter.TCPSyn, cli, w.vip, cseq, 0), 0)
	w.send(w.server, syn(netfilter.TCPSyn|netfilter.TCPAck, w.backend, cli, sseq, cseq+1), 0)
	cseq, sseq = cseq+1, sseq+1
	w.send(w.client, BuildTCP(TCPSegment{Src: cli, Dst: w.vip, Flags: netfilter.TCPAck, Seq: cseq, Ack: sseq, Window: 65535, WindowScale: -1}), 0)
	for range 120 {
		reply := r.IntN(4) == 0
		mss := 1448 - r.IntN(3)*100
		size := 1 + r.IntN(64000)
		if r.IntN(5) == 0 {
			size = 1 + r.IntN(2*mss)
		}
		payload := make([]byte, size)
		for i := range payload {
			payload[i] = byte(r.Uint32())
		}
		flags := uint8(netfilter.TCPAck)
		if r.IntN(2) == 0 {
			flags |= netfilter.TCPPsh
		}
		src, dst, seq, ack := cli, w.vip, cseq, sseq
		if reply {
			src, dst, seq, ack = w.backend, cli, sseq, cseq
		}
		if r.IntN(15) == 0 {
			seq += 1 << 30 // out of window: conntrack finds the segments INVALID
		} else if reply {
			sseq += uint32(size)
		} else {
			cseq += uint32(size)
		}
		w.send(podOf(w, reply), BuildTCP(TCPSegment{Src: src, Dst: dst, Flags: flags, Seq: seq, Ack: ack, Window: 65535, WindowScale: -1, Payload: payload}), mss)
		// The other side acknowledges.
		asrc, adst, aseq, aack := w.backend, cli, sseq, cseq
		if reply {
			asrc, adst, aseq, aack = cli, w.vip, cseq, sseq
		}
		w.send(podOf(w, !reply), BuildTCP(TCPSegment{Src: asrc, Dst: adst, Flags: netfilter.TCPAck, Seq: aseq, Ack: aack, Window: 65535, WindowScale: -1}), 0)
	}
	var out strings.Builder
	for _, k := range []string{"default/client", "default/server"} {
		fmt.Fprintf(&out, "delivered to %s: %d frames\n", k, len(w.got[k]))
		for _, f := range w.got[k] {
			fmt.Fprintf(&out, "  %x\n", f)
		}
	}
	for _, n := range w.c.Nodes() {
		fmt.Fprintf(&out, "%s stats %+v conntrack %+v\n", n.Name(), n.Stats(), n.Conntrack().Stats())
		for _, e := range n.Conntrack().Entries() {
			fmt.Fprintf(&out, "  ct %+v\n", e)
		}
		s, l := n.uplinkLink.Counters()
		fmt.Fprintf(&out, "  uplink sent %d lost %d\n", s, l)
	}
	for _, p := range []*Pod{w.client, w.server} {
		s, l := p.port.link.Counters()
		fmt.Fprintf(&out, "%s link sent %d lost %d\n", p.key(), s, l)
	}
	for i, h := range w.counters {
		for _, k := range sortedKeys(h.counts) {
			fmt.Fprintf(&out, "handler %d %s %v\n", i, k, h.counts[k])
		}
	}
	for _, pt := range sortedKeys(w.pcap) {
		fmt.Fprintf(&out, "pcap %s %x\n", pt, w.pcap[pt].Bytes())
	}
	if w.tracer != nil {
		for _, tr := range w.tracer.Traces() {
			fmt.Fprintf(&out, "trace %s\n", tr)
		}
	}
	return out.String()
}

func podOf(w *trainWorld, server bool) *Pod {
	if server {
		return w.server
	}
	return w.client
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

// Trains against the link's cut: the same fixed-seed exchange (a DNATed connection,
// 120 super-packets both ways of up to 64,000 bytes, some out of window, ACKs between)
// with trains and with every GSO packet cut at the link delivers the same frames byte
// for byte, and leaves the same node counters, conntrack statistics and entries (packets, bytes,
// state, window tracking, expiry), link counters, handler counts (per flags and
// conntrack state), pcap output and flow traces; with trains, the variants that allow
// them pass trains whole, and those that do not cut every one.
func TestTrainsSameAsCut(t *testing.T) {
	for _, v := range []struct {
		name         string
		v            trainVariant
		wholeA, cutB bool // trains pass node-a whole; node-b cuts them at its entry
	}{
		{name: "plain", v: trainVariant{}, wholeA: true},
		{name: "plain-handler-at-b", v: trainVariant{plainAtB: true}, wholeA: true, cutB: true},
		{name: "capture", v: trainVariant{capture: true}},
		{name: "trace", v: trainVariant{trace: true}},
		{name: "uplink-loss", v: trainVariant{uplinkLoss: 0.1}, wholeA: true},
	} {
		t.Run(v.name, func(t *testing.T) {
			cut := v.v
			withTrains := v.v
			withTrains.trains = true
			wc, wt := newTrainWorld(t, cut), newTrainWorld(t, withTrains)
			want, got := wc.run(t, 37), wt.run(t, 37)
			if got != want {
				gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
				for i := range min(len(gl), len(wl)) {
					if gl[i] != wl[i] {
						t.Fatalf("with trains, line %d:\n%.300s\nwant (cut at the link):\n%.300s", i, gl[i], wl[i])
					}
				}
				t.Fatalf("with trains %d lines, cut at the link %d", len(gl), len(wl))
			}
			wa, ca := wt.c.Node("node-a").TrainCounts()
			wb, cb := wt.c.Node("node-b").TrainCounts()
			t.Logf("node-a: %d whole, %d cut; node-b: %d whole, %d cut", wa, ca, wb, cb)
			if v.wholeA != (wa > 50) {
				t.Errorf("node-a passed %d trains whole, want many: %v", wa, v.wholeA)
			}
			if v.cutB && (wb != 0 || cb == 0) {
				t.Errorf("node-b passed %d trains whole and cut %d, want all cut", wb, cb)
			}
			if !v.wholeA && wa+wb+ca+cb != 0 && wa+wb != 0 {
				t.Errorf("trains passed whole (%d, %d) where they may not", wa, wb)
			}
			if x, _ := wc.c.Node("node-a").TrainCounts(); x != 0 {
				t.Errorf("NoTrains: node-a passed %d trains", x)
			}
		})
	}
}
