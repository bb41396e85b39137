package netsim

import (
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Trains: a pod's GSO super-packet carried through the datapath whole.
//
// The segments a pod's link cuts from one GSO send (gro.go) differ only in sequence
// number, lengths, checksums and, on the last, PSH: every hook, rule and conntrack entry
// on their way treats them alike unless something it reads differs between them. A
// train is such a super-packet handed on uncut, with its MSS (frame.mss,
// Packet.trainMSS): a node passes it through its datapath once, answering for all its
// segments at once, when it can do so exactly; otherwise the train is cut where it stands
// into the very segments the link would have cut, and those go on one by one. What a
// train's pass does is what its segments' passes, one after the other, would have done:
//
//   - conntrack walks the segments' sequence numbers through its TCP state machine and
//     window tracking one by one (on a copy of the entry), counts every segment's packet
//     and bytes, and the train goes on only when no segment changes what the hooks see
//     of the entry (state, status), so that each segment's hooks would see the same;
//   - a handler answers for the train only as a TrainHandler (the iptables emulator:
//     when its flow cache holds the traversal of both of the train's shapes, the mid
//     segments' flags and the last's, with the same outcome; the nftables evaluator's
//     base chains, when one evaluation per shape draws no random number, updates no
//     set and meets the same outcome; IPVS's forward handler, when its entry sends
//     the connection's packets to the real server it is bound to); any other handler the
//     train meets, a handler's no, a verdict other than Continue, a connection's first
//     packet (NAT handlers), an untracked or related packet, a route that does not
//     forward (local delivery, no route, no neighbour, hairpin off), a TTL that would
//     expire, rp_filter, a martian: the train is cut at the node's entry, before
//     anything was changed (the pass peeks first and commits at the end);
//   - NAT and the TTL rewrite the one header;
//   - the node's counters, conntrack's and the handlers' advance by the segment count
//     and the segments' bytes.
//
// Trains are not made, or are cut before they are seen, while anything would observe
// single segments: a capture anywhere in the cluster (pcap shows the segments), a flow
// trace or traced packet, packets held together (HoldTogether), a link with faults or
// packets held back, the fabric's NAT, replay mode, a queue with less room than the
// train's segments. The receiving pod takes the train whole, as the one segment its
// link's GRO would have merged the segments into (stackLink.injectTrain), after what
// the GRO holds; with a capture running or a faulty veth it takes the cut segments
// through GRO one by one, as before. Config.NoTrains cuts every GSO packet at
// the link, as before trains (the differential test compares the two).

// Train describes a train's segments to a TrainHandler: Segments segments (at least
// two), all but the last of IP length Len with TCP flags Flags (the header's flags
// without PSH), the last of IP length LastLen with the header's own flags
// (Packet.TCPFlags). Sequence numbers, lengths and checksums aside, every segment is
// the Packet the handler is shown.
type Train struct {
	Segments     int
	Len, LastLen int
	Flags        uint8
}

// TrainHandler is a Handler that can answer for every segment of a train at once.
// PeekTrain returns the verdict each of t's segments would get from Handle, one after
// the other, and ok, or ok false when it cannot tell or they would differ; it changes
// nothing but p's Mark (set as each segment's Handle would), since the datapath may
// still cut the train and run its segments through Handle. When the whole train's pass
// goes ahead the node calls CommitTrain, under the same lock and before any other
// packet, to apply what the last PeekTrain answered for (counters advanced by the
// segments). A train meets each handler at most once per node pass. Idle(p), for a
// TrainHandler that is also an IdleHandler, answers for every segment of a train whose
// header p is.
type TrainHandler interface {
	Handler
	PeekTrain(ctx *Context, p *Packet, t Train) (v Verdict, ok bool)
	CommitTrain()
}

// trainFlags are the TCP flags a train's segments may carry: an ACK, and PSH on the last.
const trainFlags = netfilter.TCPAck | netfilter.TCPPsh

// trainRun is a node's state for the train its datapath is passing (under the node's lock).
type trainRun struct {
	shape   Train
	mss     int
	hdr     int // header bytes before the payload
	conn    *Conn
	nc      Conn // the entry as the segments leave it, committed at the end
	commits []TrainHandler
}

// trainGeometry returns the header length and segment count of train bytes b cut at
// mss, or ok false when b is not a train's (an IPv4 or IPv6 TCP packet whose payload is
// more than one MSS, whose IP length is its size, with only trainFlags set).
func trainGeometry(b []byte, mss int) (l3, hdr, segs int, ok bool) {
	if mss <= 0 || len(b) < header.IPv4MinimumSize {
		return 0, 0, 0, false
	}
	switch b[0] >> 4 {
	case 4:
		l3 = int(b[0]&0x0f) * 4
		if l3 < header.IPv4MinimumSize || b[9] != uint8(header.TCPProtocolNumber) ||
			int(binary.BigEndian.Uint16(b[2:4])) != len(b) || binary.BigEndian.Uint16(b[6:8])&0x3fff != 0 {
			return 0, 0, 0, false
		}
	case 6:
		l3 = header.IPv6MinimumSize
		if len(b) < l3 || b[6] != uint8(header.TCPProtocolNumber) || int(binary.BigEndian.Uint16(b[4:6])) != len(b)-l3 {
			return 0, 0, 0, false
		}
	default:
		return 0, 0, 0, false
	}
	if len(b) < l3+header.TCPMinimumSize {
		return 0, 0, 0, false
	}
	hdr = l3 + int(b[l3+12]>>4)*4
	flags := b[l3+13]
	if hdr < l3+header.TCPMinimumSize || hdr > len(b) || len(b)-hdr <= mss || flags&^trainFlags != 0 || flags&netfilter.TCPAck == 0 {
		return 0, 0, 0, false
	}
	return l3, hdr, (len(b) - hdr + mss - 1) / mss, true
}

// trainPacket hands a GSO packet on as a train when it is one (trainGeometry) and
// reports whether it did.
func (l *stackLink) trainPacket(pkt *stack.PacketBuffer, g stack.GSO) bool {
	// The header first, so that a packet within the MSS is not copied here;
	// trainGeometry checks the rest on the copy.
	var hb [maxSegHeaders]byte
	vl, off := pkt.AsViewList()
	c := viewCursor{e: vl.Front(), off: off}
	b := hb[:c.read(hb[:min(pkt.Size(), len(hb))])]
	size := pkt.Size()
	if len(b) < header.IPv4MinimumSize || size > 0xffff {
		return false
	}
	var l3 int
	switch b[0] >> 4 {
	case 4:
		l3 = int(b[0]&0x0f) * 4
	case 6:
		l3 = header.IPv6MinimumSize
	default:
		return false
	}
	if len(b) < l3+header.TCPMinimumSize || size-(l3+int(b[l3+12]>>4)*4) <= int(g.MSS) {
		return false
	}
	v := copyOut(pkt)
	if _, _, _, ok := trainGeometry(v.AsSlice(), int(g.MSS)); !ok {
		l.segment(v, g)
		return true
	}
	l.out(frame{b: v.AsSlice(), v: v, mss: g.MSS})
	return true
}

// cutTrain cuts train frame f into the segments the pod's link would have cut (gro.go
// outSegment: lengths, sequence numbers, PSH on the last only, fresh IP and TCP
// checksums) from its bytes as they are now, hands each to each, and releases f's
// buffer. A frame that is not a train's is handed on as it is.
func cutTrain(f frame, each func(frame)) {
	b := f.b
	l3, hdr, _, ok := trainGeometry(b, int(f.mss))
	if !ok {
		f.mss = 0
		each(f)
		return
	}
	mss := int(f.mss)
	for off := hdr; off < len(b); off += mss {
		n := min(mss, len(b)-off)
		sv := buffer.NewView(hdr + n)
		sv.Write(b[:hdr])
		sv.Write(b[off : off+n])
		each(cutSegment(sv, b[:hdr], l3, off-hdr, off+n == len(b)))
	}
	if f.v != nil {
		f.v.Release()
	}
}

// trainBlocked reports whether something in the cluster observes single segments now
// (a capture, a flow trace, replay mode): trains are cut first.
func (c *Network) trainBlocked() bool {
	return c.caps.n.Load() != 0 || c.flowTracers.Load() != nil || c.cfg.Replay
}

// passN is pass for a train of n segments: each is counted.
func (l *Link) passN(dir, n int) bool {
	if l == nil {
		return true
	}
	if l.clean.Load() {
		l.fast[dir].n.Add(uint64(n))
		return true
	}
	return false
}

// trainSegments returns the number of segments of train frame f (1 for another frame).
func (f frame) segments() int {
	if f.mss == 0 {
		return 1
	}
	if _, _, n, ok := trainGeometry(f.b, int(f.mss)); ok {
		return n
	}
	return 1
}

// handleTrain runs a train that came in from a pod's port through the node (handle's
// part for trains): whole when it can, else cut at the node's entry into segments that
// go through handle one by one.
func (n *Node) handleTrain(it queued, pk *Packet, t time.Time) {
	g := pk.gro
	cut := func() {
		n.trains[1].Add(1)
		cutTrain(it.data, func(s frame) {
			*pk = Packet{gro: g}
			n.handle(queued{data: s, from: it.from}, pk, t)
		})
	}
	if it.from.kind != fromPort || it.from.trace != nil || n.gather.Load() != nil || n.cluster.trainBlocked() {
		cut()
		return
	}
	if err := pk.parse(it.data.b); err != nil {
		cut()
		return
	}
	pk.view, pk.trainMSS = it.data.v, it.data.mss
	env := n.packetEnv(nil)
	env.t = t
	eg, ok := n.trainIngress(pk, n.bridge, it.from.port, env)
	if !ok {
		cut()
		return
	}
	n.trains[0].Add(1)
	n.executeTrain(eg, env.t)
}

// trainFromUplink is fromUplinkPacket for a train.
func (n *Node) trainFromUplink(pk *Packet, tr *Trace, t time.Time) {
	if tr == nil && n.gather.Load() == nil && !n.cluster.trainBlocked() {
		env := n.packetEnv(nil)
		env.t = t
		if eg, ok := n.trainIngress(pk, n.uplink, nil, env); ok {
			n.trains[0].Add(1)
			n.executeTrain(eg, env.t)
			return
		}
	}
	n.trains[1].Add(1)
	cutTrain(pk.frame(), func(s frame) {
		var sp Packet
		if sp.parse(s.b) != nil {
			atomic.AddUint64(&n.hot.stats.Dropped, 1)
			return
		}
		sp.view, sp.sumsOK, sp.gro = s.v, s.sumsOK, pk.gro
		n.fromUplinkPacket(&sp, tr, t)
	})
}

// trainIngress is ingress for a train: the pass of all its segments at once, or ok
// false with nothing changed (pk's header and fields as they came).
func (n *Node) trainIngress(pk *Packet, in *Iface, port *podPort, env *penv) (egress, bool) {
	l3, hdr, segs, ok := trainGeometry(pk.Data, int(pk.trainMSS))
	if !ok || pk.Proto != netfilter.ProtoTCP || pk.l4off != l3 {
		return egress{}, false
	}
	var saved [maxSegHeaders]byte
	copy(saved[:], pk.Data[:hdr])
	savedPk := *pk
	n.mu.Lock()
	defer n.mu.Unlock()
	tr := &n.train
	mss := int(pk.trainMSS)
	tr.mss, tr.hdr, tr.conn = mss, hdr, nil
	tr.commits = tr.commits[:0]
	tr.shape = Train{Segments: segs, Len: hdr + mss, LastLen: len(pk.Data) - (segs-1)*mss,
		Flags: pk.TCPFlags &^ netfilter.TCPPsh}
	eg, ok := n.trainPassLocked(pk, in, port, env, tr)
	if !ok {
		copy(pk.Data[:hdr], saved[:hdr])
		*pk = savedPk
		clear(tr.commits)
		return egress{}, false
	}
	// Commit: nothing above changed the node's state.
	*tr.conn = tr.nc
	for i, h := range tr.commits {
		h.CommitTrain()
		tr.commits[i] = nil
	}
	n.countNLocked(&n.hot.stats.Received, segs)
	n.countNLocked(&n.hot.stats.Forwarded, segs)
	return eg, true
}

func (n *Node) countNLocked(c *uint64, k int) { atomic.StoreUint64(c, *c+uint64(k)) }

// trainPassLocked is ingress's forwarding pass (PREROUTING, routing, FORWARD,
// POSTROUTING) for a train, peeking only.
func (n *Node) trainPassLocked(pk *Packet, in *Iface, port *podPort, env *penv, tr *trainRun) (egress, bool) {
	s := &n.settings
	if s.RPFilter != 0 || !s.IPForward || isLoopback(pk.Src) || isLoopback(pk.Dst) || n.addrLocked(pk.Src).local != nil {
		return egress{}, false
	}
	pk.InIface, pk.OutIface = in.Name, ""
	if port != nil {
		pk.inPort = port
	}
	if !n.trainHookLocked(netfilter.Prerouting, pk, env, tr) {
		return egress{}, false
	}
	rt := n.routeLocked(pk.Dst)
	if rt.kind != routeBridge && rt.kind != routeUplink || pk.TTL <= 1 {
		return egress{}, false
	}
	pk.OutIface = rt.iface.Name
	pk.decTTL()
	if !n.trainHookLocked(netfilter.Forward, pk, env, tr) || !n.trainHookLocked(netfilter.Postrouting, pk, env, tr) {
		return egress{}, false
	}
	if tr.conn == nil {
		return egress{}, false
	}
	if rt.kind == routeBridge {
		if pk.inPort == rt.port && !s.Hairpin {
			return egress{}, false
		}
		return egress{kind: egPod, pk: pk, port: rt.port}, true
	}
	return egress{kind: egUplink, pk: pk}, true
}

// trainHookLocked is runHookLocked for a train: the same steps in the same order, each
// answering for every segment, or false.
func (n *Node) trainHookLocked(h netfilter.Hook, pk *Packet, env *penv, tr *trainRun) bool {
	if n.bare[h] {
		for _, b := range hookBuiltins[h] {
			if !n.trainBuiltinLocked(h, b.kind, pk, env, tr) {
				return false
			}
		}
		return true
	}
	plan := n.plans[h]
	for i := range plan {
		st := &plan[i]
		if st.spec == nil {
			if !n.trainBuiltinLocked(h, st.builtin, pk, env, tr) {
				return false
			}
			continue
		}
		th, ok := st.spec.Handler.(TrainHandler)
		if !ok {
			return false
		}
		if st.idle != nil && st.idle.Idle(pk) {
			continue
		}
		for _, o := range tr.commits {
			if o == th {
				return false // met twice: its stash holds one answer
			}
		}
		v, ok := th.PeekTrain(n.context(h, st.spec.Name, env), pk, tr.shape)
		if !ok || v.Kind != Continue {
			return false
		}
		tr.commits = append(tr.commits, th)
	}
	return true
}

func (n *Node) trainBuiltinLocked(h netfilter.Hook, kind int, pk *Packet, env *penv, tr *trainRun) bool {
	switch kind {
	case stepConntrack:
		return n.trainConntrackLocked(pk, env, tr)
	case stepNAT:
		c := pk.Conn
		if c == nil || pk.CtState == netfilter.CtRelated {
			return false
		}
		dstManip := h == netfilter.Prerouting || h == netfilter.Output
		done := netfilter.StatusSrcNATDone
		if dstManip {
			done = netfilter.StatusDstNATDone
		}
		if !c.Has(done) && !pk.CtReply {
			return false // a first packet: the NAT handlers decide
		}
		n.applyNATLocked(pk, dstManip, env)
	case stepConfirm:
		return !pk.ctCreated
	}
	return true
}

// trainConntrackLocked is the conntrack hook for a train: its entry must exist, and
// every segment, walked through the TCP state machine and window tracking in turn on a
// copy of the entry (tr.nc), must be valid and leave the entry's state and status as
// they were.
func (n *Node) trainConntrackLocked(pk *Packet, env *penv, tr *trainRun) bool {
	if pk.Conn != nil || pk.notrack {
		return false
	}
	now := env.now(n)
	t := n.ct
	t.gcLocked(now) // what the first segment's lookup would do; the others' find nothing more
	r, ok := t.lookupPacketLocked(pk, now)
	if !ok {
		return false
	}
	c := r.c
	dir := 0
	if r.reply {
		dir = 1
	}
	tr.nc = *c
	nc := &tr.nc
	seq, ack, win := pk.TCPSeq()
	sh := &tr.shape
	seg := tcpSeg{flags: sh.Flags, ack: ack, win: win}
	for i := range sh.Segments {
		seg.seq = seq + uint32(i*tr.mss)
		seg.seqLen = uint32(sh.Len - tr.hdr)
		if i == sh.Segments-1 {
			seg.flags, seg.seqLen = pk.TCPFlags, uint32(sh.LastLen-tr.hdr)
		}
		_, valid, reopen := t.tcpSegmentLocked(nc, dir, pk, seg, now)
		if !valid || reopen || nc.Status != c.Status || nc.TCPState != c.TCPState {
			return false
		}
	}
	nc.Packets[dir] += uint64(sh.Segments)
	nc.Bytes[dir] += uint64((sh.Segments-1)*sh.Len + sh.LastLen)
	state := netfilter.CtEstablished
	if !r.reply && !c.Has(netfilter.StatusSeenReply) {
		state = netfilter.CtNew
	}
	pk.Conn, pk.CtReply, pk.CtState = c, r.reply, state
	tr.conn = c
	return true
}

// executeTrain carries out a train's egress: into a pod whole, as the one segment its
// link's GRO would have merged its segments into (stackLink.injectTrain), when nothing
// captures and the veth is clean, else cut into its segments just before the pod's
// link (each through the bridge's capture, the veth and GRO as before); over the
// cluster network, whole (fabric.trainFromNode).
func (n *Node) executeTrain(eg egress, t time.Time) {
	pk := eg.pk
	switch eg.kind {
	case egPod:
		g, port := pk.gro, eg.port
		if g != nil && port.pod != nil && n.cluster.caps.n.Load() == 0 {
			if _, _, segs, ok := trainGeometry(pk.Data, int(pk.trainMSS)); ok && port.link.passN(1, segs) {
				if port.pod.receiveTrain(pk.frame(), g) {
					n.trains[2].Add(1)
					return
				}
				// Counted on the link already: cut without counting again.
				cutTrain(pk.frame(), func(s frame) { port.pod.receiveBatched(s, g) })
				return
			}
		}
		cutTrain(pk.frame(), func(s frame) {
			n.capture(n.bridge.Name, s.b)
			if g != nil && port.pod != nil && port.link.pass(1) {
				port.pod.receiveBatched(s, g)
				return
			}
			port.link.sendBack(n.cluster, s, port.toPod)
		})
	case egUplink:
		if n.cluster.caps.n.Load() != 0 {
			n.cutToFabric(pk, nil, t)
			return
		}
		n.cluster.fabric.fromNode(n, pk, nil, t)
	}
}

// cutToFabric cuts a train leaving the node over the cluster network and sends its
// segments one by one (as execute sends a packet: the uplink's capture, the fabric).
func (n *Node) cutToFabric(pk *Packet, tr *Trace, t time.Time) {
	cutTrain(pk.frame(), func(s frame) {
		var sp Packet
		if sp.parse(s.b) != nil {
			return
		}
		sp.view, sp.sumsOK, sp.gro = s.v, s.sumsOK, pk.gro
		n.capture(n.uplink.Name, s.b)
		n.cluster.fabric.fromNode(n, &sp, tr, t)
	})
}

// trainFromNode is fromNode for a train: whole to the next node when nothing on the way
// acts per segment (the fabric's NAT, a faulty uplink, another kind of hop), else cut
// and sent on segment by segment.
func (f *fabric) trainFromNode(n *Node, pk *Packet, tr *Trace, t time.Time) {
	if f.nat.Load() == nil && !f.c.cfg.Replay {
		d := f.route(n.name, pk.Dst)
		if d.kind == hopNode && !d.node.down.Load() {
			if _, _, segs, ok := trainGeometry(pk.Data, int(pk.trainMSS)); ok && n.uplinkLink.passN(0, segs) {
				d.node.fromUplinkPacket(pk, tr, t)
				return
			}
		}
	}
	cutTrain(pk.frame(), func(s frame) {
		var sp Packet
		if sp.parse(s.b) != nil {
			return
		}
		sp.view, sp.sumsOK, sp.gro = s.v, s.sumsOK, pk.gro
		f.fromNode(n, &sp, tr, t)
	})
}

// TrainCounts returns how many trains the node passed whole and how many it cut at its
// entry (tests and benchmarks read them).
func (n *Node) TrainCounts() (whole, cut uint64) { return n.trains[0].Load(), n.trains[1].Load() }

// TrainsIntoPods returns how many trains the node delivered into its pods whole
// (tests and benchmarks read it).
func (n *Node) TrainsIntoPods() uint64 { return n.trains[2].Load() }
