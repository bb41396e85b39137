package netsim

import (
	"encoding/binary"
	"sync"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	gvchecksum "gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/stack/gro"
)

// Segmentation offload. A pod's netstack sends and receives TCP as a Linux host with
// GSO and GRO on its veth does, with nothing the datapath sees changed:
//
//   - Send (GSO): the pod's link reports host GSO (stackLink.SupportedGSO), so TCP keeps
//     segments of up to 64 KiB in its send queue and hands each to the link as one IP
//     packet with a partial TCP checksum. The link cuts it (stackLink.segment) into the
//     packets TCP sends without offload: MSS-sized payloads, the sequence number advanced,
//     PSH only on the last (TCP clears it on a segment it splits at the MSS), the IP
//     header copied with its own total length and checksum (TCP's packets carry DF and
//     ID 0), full TCP checksums. Everything after the link, every hook, rule, conntrack
//     entry, fault and capture, sees exactly the MTU-sized packets of a plain path.
//     (gVisor's software GSO was not used: it puts the super-segment's PSH on every
//     packet.)
//   - Receive (GRO): packets a node's datapath goroutine delivers into a pod during one
//     batch of its queue go through gVisor's GRO (stack/gro, as fdbased links use it):
//     consecutive in-order TCP segments of one flow are merged into one segment before
//     the pod's TCP sees them, and everything held is handed up when the batch ends
//     (groBatch.flush). They have been through every hook, fault and the pod's capture
//     one by one before that. Only the receiving TCP's own work changes: it acknowledges
//     a merged segment once, as a Linux receiver behind GRO does (the number of ACKs a
//     netstack sends already depends on how many segments it finds queued at once).
//
// Config.NoOffload turns both off: every segment is built, sent and received alone.

// segment cuts a TCP packet of up to 64 KiB handed over with GSO options into the packets
// TCP sends without offload (see above) and hands them out; v holds the packet's bytes.
func (l *stackLink) segment(v *buffer.View, g stack.GSO) {
	b := v.AsSlice()
	var l3 int
	switch {
	case len(b) >= header.IPv4MinimumSize && b[0]>>4 == 4:
		l3 = int(b[0]&0x0f) * 4
	case len(b) >= header.IPv6MinimumSize && b[0]>>4 == 6:
		l3 = header.IPv6MinimumSize
	}
	if l3 == 0 || len(b) < l3+header.TCPMinimumSize {
		l.out(frame{b: b, v: v}) // not a packet TCP built; as it is
		return
	}
	thl := int(b[l3+12]>>4) * 4
	hdr := l3 + thl
	mss := int(g.MSS)
	if hdr > len(b) || mss <= 0 {
		l.out(frame{b: b, v: v})
		return
	}
	if len(b)-hdr <= mss {
		if g.NeedsCsum {
			setTCPChecksum(b, l3)
		}
		// The TCP checksum is netsim's; the IP header's is the stack's, checked here
		// (20-60 bytes) before the frame is marked right.
		ok := g.NeedsCsum && (b[0]>>4 == 6 || header.IPv4(b).IsChecksumValid())
		l.out(frame{b: b, v: v, sumsOK: ok})
		return
	}
	for off := hdr; off < len(b); off += mss {
		n := min(mss, len(b)-off)
		sv := buffer.NewView(hdr + n)
		sv.Write(b[:hdr])
		sv.Write(b[off : off+n])
		l.outSegment(sv, b[:hdr], l3, off-hdr, off+n == len(b))
	}
	v.Release()
}

// outSegment completes one cut segment and hands it out: sv holds the super-packet's
// headers (orig, l3 bytes of IP header) followed by the payload from byte at of the
// super-packet's payload; last: the super-packet's last segment.
func (l *stackLink) outSegment(sv *buffer.View, orig []byte, l3, at int, last bool) {
	l.out(cutSegment(sv, orig, l3, at, last))
}

// cutSegment completes one cut segment in sv (see outSegment) and returns it as a frame.
func cutSegment(sv *buffer.View, orig []byte, l3, at int, last bool) frame {
	s := sv.AsSlice()
	hdr := len(orig)
	n := len(s) - hdr
	if l3 == header.IPv6MinimumSize && s[0]>>4 == 6 {
		binary.BigEndian.PutUint16(s[4:], uint16(hdr-l3+n))
	} else {
		ip := header.IPv4(s)
		ip.SetTotalLength(uint16(hdr + n))
		ip.SetChecksum(0)
		ip.SetChecksum(^ip.CalculateChecksum())
	}
	binary.BigEndian.PutUint32(s[l3+4:], binary.BigEndian.Uint32(orig[l3+4:])+uint32(at))
	if !last {
		s[l3+13] = orig[l3+13] &^ (uint8(header.TCPFlagPsh) | uint8(header.TCPFlagFin))
	}
	setTCPChecksum(s, l3)
	return frame{b: s, v: sv, sumsOK: true}
}

// maxSegHeaders is the most header bytes a segment can carry: an IPv4 header with options
// (60) or IPv6's fixed header (40), and a TCP header with options (60).
const maxSegHeaders = 60 + 60

// segmentPacket is segment for a packet still in the stack's buffer: it cuts the segments
// straight from the packet's views, so that the payload is copied once (into each
// segment's buffer) rather than twice (copyOut into a 64 KiB buffer, then into each
// segment's), and the 64 KiB buffer is neither cleared nor filled. The segments are
// byte for byte those of copyOut then segment (TestSegmentPacketSameAsCopy). A packet
// that is not cut (within the MSS, or not a TCP packet TCP built) goes that way.
func (l *stackLink) segmentPacket(pkt *stack.PacketBuffer, g stack.GSO) {
	size := pkt.Size()
	vl, off := pkt.AsViewList()
	var hb [maxSegHeaders]byte
	c := viewCursor{e: vl.Front(), off: off}
	hn := c.read(hb[:min(size, len(hb))])
	b := hb[:hn]
	var l3 int
	switch {
	case len(b) >= header.IPv4MinimumSize && b[0]>>4 == 4:
		l3 = int(b[0]&0x0f) * 4
	case len(b) >= header.IPv6MinimumSize && b[0]>>4 == 6:
		l3 = header.IPv6MinimumSize
	}
	mss := int(g.MSS)
	if l3 == 0 || len(b) < l3+header.TCPMinimumSize || mss <= 0 {
		l.segment(copyOut(pkt), g)
		return
	}
	hdr := l3 + int(b[l3+12]>>4)*4
	if hdr > len(b) || size-hdr <= mss {
		l.segment(copyOut(pkt), g)
		return
	}
	c = viewCursor{e: vl.Front(), off: off}
	c.skip(hdr)
	for at := 0; at < size-hdr; at += mss {
		n := min(mss, size-hdr-at)
		sv := buffer.NewView(hdr + n)
		sv.Write(b[:hdr])
		c.writeTo(sv, n)
		l.outSegment(sv, b[:hdr], l3, at, hdr+at+n == size)
	}
}

// viewCursor reads a view list from a position on.
type viewCursor struct {
	e   *buffer.View
	off int // into e's bytes
}

// read copies up to len(p) bytes into p and returns how many.
func (c *viewCursor) read(p []byte) int {
	n := 0
	for n < len(p) && c.e != nil {
		b := c.e.AsSlice()
		if c.off >= len(b) {
			c.e, c.off = c.e.Next(), 0
			continue
		}
		k := copy(p[n:], b[c.off:])
		n += k
		c.off += k
	}
	return n
}

// skip moves the cursor n bytes on.
func (c *viewCursor) skip(n int) { c.writeTo(nil, n) }

// writeTo appends the next n bytes to v (moves past them when v is nil).
func (c *viewCursor) writeTo(v *buffer.View, n int) {
	for n > 0 && c.e != nil {
		b := c.e.AsSlice()
		if c.off >= len(b) {
			c.e, c.off = c.e.Next(), 0
			continue
		}
		k := min(n, len(b)-c.off)
		if v != nil {
			v.Write(b[c.off : c.off+k])
		}
		n -= k
		c.off += k
	}
}

// setTCPChecksum computes the TCP checksum of an IPv4 or IPv6 packet whose TCP header
// starts at l3.
func setTCPChecksum(b []byte, l3 int) {
	tcp := header.TCP(b[l3:])
	var src, dst tcpip.Address
	if b[0]>>4 == 6 {
		ip := header.IPv6(b)
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	} else {
		ip := header.IPv4(b)
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	}
	tcp.SetChecksum(0)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(len(tcp)))
	xsum = gvchecksum.Checksum(tcp, xsum)
	tcp.SetChecksum(^xsum)
}

// groBatch is the set of pod links holding merged segments for one run of a node's
// datapath goroutine. Only that goroutine touches it.
type groBatch struct {
	links []*stackLink
}

// flush hands everything the batch's links hold to their stacks.
func (b *groBatch) flush() {
	for i, l := range b.links {
		l.groFlush()
		b.links[i] = nil
	}
	b.links = b.links[:0]
}

// groState is a link's receive offload state, made on its first batched packet.
type groState struct {
	mu   sync.Mutex
	g    gro.GRO
	held bool // packets wait in g for a flush
	// trusted counts the segments handed to GRO with their checksums known right
	// (frame.sumsOK), which GRO does not check again; tests read it.
	trusted uint64
	// trains counts the trains delivered whole (injectTrain); tests read it.
	trains uint64
}

// groEligible reports whether a frame is an IPv4 or IPv6 TCP segment without IP options
// or extension headers, the packets GRO merges. Anything else is delivered at once,
// after what the link holds (so that nothing overtakes held segments).
func groEligible(b []byte) bool {
	if len(b) < header.IPv4MinimumSize {
		return false
	}
	switch b[0] >> 4 {
	case 4:
		return b[0]&0x0f == 5 && b[9] == uint8(header.TCPProtocolNumber)
	case 6:
		return len(b) >= header.IPv6MinimumSize && b[6] == uint8(header.TCPProtocolNumber)
	}
	return false
}

// injectBatched delivers a frame into the stack as part of batch b: a TCP segment waits in
// the link's GRO until b is flushed (or GRO hands it up earlier: a flow's next segment
// does not follow on, a flag such as PSH or FIN, 64 KiB merged). b nil, or a link without
// offload: at once.
func (l *stackLink) injectBatched(f frame, b *groBatch) {
	if b == nil || !l.gro {
		l.inject(f)
		return
	}
	if l.closed.Load() || len(f.b) == 0 {
		return
	}
	dp := l.dispatcher.Load()
	if dp == nil || *dp == nil {
		return
	}
	gs := l.groStateFor(*dp)
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if !groEligible(f.b) {
		if gs.held {
			gs.held = false
			gs.g.Flush()
		}
		l.deliver(*dp, f)
		return
	}
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: f.payload()})
	// A segment netsim cut, whose checksums every later writer kept in step (see
	// frame.sumsOK), skips GRO's check of its IP and TCP checksums; any other is checked.
	if f.sumsOK {
		pkt.RXChecksumValidated = true
		gs.trusted++
	}
	pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	if f.b[0]>>4 == 6 {
		pkt.NetworkProtocolNumber = header.IPv6ProtocolNumber
	}
	gs.g.Enqueue(pkt)
	pkt.DecRef()
	if !gs.held {
		gs.held = true
		b.links = append(b.links, l)
	}
}

// groStateFor returns the link's GRO state, made on first use.
func (l *stackLink) groStateFor(d stack.NetworkDispatcher) *groState {
	gs := l.groState.Load()
	if gs == nil {
		gs = new(groState)
		gs.g.Init(true)
		gs.g.Dispatcher = groDispatcher{l: l, d: d}
		if !l.groState.CompareAndSwap(nil, gs) {
			gs = l.groState.Load()
		}
	}
	return gs
}

// injectTrain delivers a train (train.go) into the stack whole, as the one segment GRO
// would have merged its segments into (payloads joined in order, the first segment's
// header, the last's PSH), after whatever the link's GRO holds (so that nothing is
// overtaken). Its checksums are not checked (a train's TCP checksum is the partial sum
// GSO left; every writer since kept the IP header's right): the stack takes it as GRO's
// merged packets are taken, RXChecksumValidated. It reports false, having done nothing,
// for a link without GRO or a batch: the caller then cuts the train.
func (l *stackLink) injectTrain(f frame, b *groBatch) bool {
	if b == nil || !l.gro {
		return false
	}
	if l.closed.Load() || len(f.b) == 0 {
		return true
	}
	dp := l.dispatcher.Load()
	if dp == nil || *dp == nil {
		return true
	}
	gs := l.groStateFor(*dp)
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.held {
		gs.held = false
		gs.g.Flush()
	}
	proto := header.IPv4ProtocolNumber
	if f.b[0]>>4 == 6 {
		proto = header.IPv6ProtocolNumber
	}
	f.mss = 0
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: f.payload()})
	pkt.RXChecksumValidated = true
	l.rxValidated.Store(true)
	(*dp).DeliverNetworkPacket(proto, pkt)
	l.rxValidated.Store(false)
	pkt.DecRef()
	gs.trains++
	return true
}

// groDispatcher hands GRO's packets to the stack. A merged packet's IP and TCP checksums
// are not recomputed (GRO changes the IP total length and joins payloads): GRO checked
// every segment's checksums before merging it and marked the packet RXChecksumValidated,
// and a netstack NIC takes that mark from the link's capabilities, so the link reports
// CapabilityRXChecksumOffload while it delivers such a packet (and only then: a packet
// that failed GRO's check, a corrupted one, is still checked and dropped by the stack).
// All deliveries into a link with GRO state hold groState.mu, so the flag is not seen by
// another delivery.
type groDispatcher struct {
	l *stackLink
	d stack.NetworkDispatcher
}

func (g groDispatcher) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	if g.l.closed.Load() {
		return // the pod died with segments held
	}
	if pkt.RXChecksumValidated {
		g.l.rxValidated.Store(true)
		defer g.l.rxValidated.Store(false)
	}
	g.d.DeliverNetworkPacket(proto, pkt)
}

func (g groDispatcher) DeliverLinkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	g.d.DeliverLinkPacket(proto, pkt)
}

// groFlush hands up what the link's GRO holds.
func (l *stackLink) groFlush() {
	gs := l.groState.Load()
	if gs == nil {
		return
	}
	gs.mu.Lock()
	if gs.held {
		gs.held = false
		gs.g.Flush()
	}
	gs.mu.Unlock()
}
