package netsim

import (
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// frame is an IP packet on its way from one netstack to another: its bytes, and the pooled
// netstack buffer holding them when they were copied out of a stack. The datapath reads and
// rewrites the bytes in place; the stack that finally receives the packet takes the buffer
// over without copying. A frame without a buffer (built by the datapath itself, or a copy)
// is copied into the receiving stack.
//
// Whoever hands a frame on gives it away: once delivered, its bytes belong to the receiving
// stack, which recycles them. A frame goes to at most one stack; anything that sends the
// same bytes twice (a duplicating link) copies them first.
type frame struct {
	b []byte
	v *buffer.View // nil: b is ordinary memory
	// sumsOK: b's IP and TCP checksums are right. Set only on the segments a pod's link
	// cuts (stackLink.segment), whose checksums netsim computed itself; carried with the
	// bytes through the datapath (Packet.sumsOK), whose only writers of a packet's bytes
	// (SetSrc, SetDst, NAT, the TTL) update every checksum incrementally, so that a
	// right checksum stays right. GRO then need not sum the payload again
	// (injectBatched). A frame built any other way leaves it false and is checked.
	sumsOK bool
	// mss, when not 0: b is a train, a GSO super-packet carried whole, whose segments
	// are cut at mss (train.go).
	mss uint16
}

func plainFrame(b []byte) frame { return frame{b: b} }

// payload returns a netstack buffer with the frame's bytes: the frame's own pooled buffer
// when it still holds exactly those bytes, else a copy.
//
// A frame longer than splitHeadAt+splitHeadMin goes in as two views: its first
// splitHeadAt bytes (the IP and transport headers of any ordinary packet) copied into a
// small view of their own, then the rest of its buffer. Netstack's IP layer keeps a
// reference to the network header's view while it handles a packet and then reads the
// header again, and a view whose memory is shared is copied whole before it is read
// (buffer.PullUp's copy-on-write): with one view that is the whole frame, a 64 KiB train
// cleared and copied once more per delivery; with the header on its own, 128 bytes.
func (f frame) payload() buffer.Buffer {
	if v := f.v; v != nil && v.Size() == len(f.b) && len(f.b) > 0 && &v.AsSlice()[0] == &f.b[0] {
		if len(f.b) < splitHeadAt+splitHeadMin {
			return buffer.MakeWithView(v)
		}
		b := buffer.MakeWithView(buffer.NewViewWithData(f.b[:splitHeadAt]))
		v.TrimFront(splitHeadAt)
		b.Append(v)
		return b
	}
	return buffer.MakeWithData(f.b)
}

const (
	splitHeadAt  = 128 // a netstack chunk size: the head view is full, Append adds no bytes to it
	splitHeadMin = 512
)

// stackLink is the link endpoint between a netstack (a pod's or a node's host stack) and
// the datapath. Outbound packets are copied out into pooled buffers and handed to out as
// frames; inbound frames are injected with inject. It plays the part of a veth.
type stackLink struct {
	mtu      uint32
	loopback bool // report CapabilityLoopback (a host stack's lo)
	gso      bool // host GSO for the stack's TCP: the link cuts its segments (see segment)
	gro      bool // merge batched TCP segments on receipt (see injectBatched)
	trains   bool // hand GSO packets on whole, as trains (train.go)
	// noTrains (nil: false) says whether the next hop would cut trains at once
	// (Node.noTrains): one made then costs a copy of the super-packet for nothing.
	noTrains *atomic.Bool
	out      func(frame) // called on the writer's goroutine; must not block

	// dispatcher is read once per inbound packet, without a lock (an RWMutex's read lock
	// is a write to a line every delivering goroutine shares).
	dispatcher atomic.Pointer[stack.NetworkDispatcher]
	closed     atomic.Bool
	groState   atomic.Pointer[groState] // made by the first batched delivery
	// rxValidated: the packet being delivered had its checksums checked by GRO (see
	// groDispatcher).
	rxValidated atomic.Bool
}

var _ stack.LinkEndpoint = (*stackLink)(nil)

func newStackLink(mtu uint32, out func(frame)) *stackLink {
	return &stackLink{mtu: mtu, out: out}
}

// inject delivers an IP packet into the stack, which takes the frame's buffer over.
func (l *stackLink) inject(f frame) {
	if l.closed.Load() {
		return
	}
	dp := l.dispatcher.Load()
	if dp == nil || *dp == nil || len(f.b) == 0 {
		return
	}
	if gs := l.groState.Load(); gs != nil {
		// Segments held for a batch go first.
		gs.mu.Lock()
		if gs.held {
			gs.held = false
			gs.g.Flush()
		}
		l.deliver(*dp, f)
		gs.mu.Unlock()
		return
	}
	l.deliver(*dp, f)
}

func (l *stackLink) deliver(d stack.NetworkDispatcher, f frame) {
	proto := header.IPv4ProtocolNumber
	if f.b[0]>>4 == 6 {
		proto = header.IPv6ProtocolNumber
	}
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: f.payload()})
	d.DeliverNetworkPacket(proto, pkt)
	pkt.DecRef()
}

func (l *stackLink) close() { l.closed.Store(true) }

// WritePackets implements stack.LinkEndpoint: each packet is copied once, into a pooled
// buffer that travels with it to the receiving stack.
func (l *stackLink) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	if l.closed.Load() {
		return 0, &tcpip.ErrClosedForSend{}
	}
	n := 0
	for _, pkt := range pkts.AsSlice() {
		if pkt.GSOOptions.Type != stack.GSONone {
			if !l.trains || l.noTrains != nil && l.noTrains.Load() || !l.trainPacket(pkt, pkt.GSOOptions) {
				l.segmentPacket(pkt, pkt.GSOOptions)
			}
		} else {
			v := copyOut(pkt)
			l.out(frame{b: v.AsSlice(), v: v})
		}
		n++
	}
	return n, nil
}

// copyOut copies an outbound packet into a pooled buffer of its exact size. (pkt.ToView
// sizes the buffer by everything the packet reserved, header room included, which pushes
// 64 KiB packets past the largest pool into fresh heap memory, and netstack then copies
// such a buffer once more on receipt.)
func copyOut(pkt *stack.PacketBuffer) *buffer.View {
	v := buffer.NewView(pkt.Size())
	vl, off := pkt.AsViewList()
	for e := vl.Front(); e != nil; e = e.Next() {
		b := e.AsSlice()
		if off >= len(b) {
			off -= len(b)
			continue
		}
		v.Write(b[off:])
		off = 0
	}
	return v
}

// Attach implements stack.LinkEndpoint.
func (l *stackLink) Attach(d stack.NetworkDispatcher) {
	l.dispatcher.Store(&d)
}

// IsAttached implements stack.LinkEndpoint.
func (l *stackLink) IsAttached() bool {
	dp := l.dispatcher.Load()
	return dp != nil && *dp != nil
}

func (l *stackLink) MTU() uint32       { return l.mtu }
func (l *stackLink) SetMTU(mtu uint32) { l.mtu = mtu }
func (l *stackLink) Capabilities() stack.LinkEndpointCapabilities {
	if l.loopback {
		return stack.CapabilityLoopback
	}
	if l.rxValidated.Load() {
		return stack.CapabilityRXChecksumOffload
	}
	return 0
}

// GSOMaxSize implements stack.GSOEndpoint.
func (l *stackLink) GSOMaxSize() uint32 { return stack.GVisorGSOMaxSize }

// SupportedGSO implements stack.GSOEndpoint: with offload on, host GSO (TCP hands the
// link segments of up to 64 KiB with a partial checksum; segment cuts them into the
// packets TCP would have sent; see gro.go).
func (l *stackLink) SupportedGSO() stack.SupportedGSO {
	if l.gso {
		return stack.HostGSOSupported
	}
	return stack.GSONotSupported
}

func (l *stackLink) MaxHeaderLength() uint16                 { return 0 }
func (l *stackLink) LinkAddress() tcpip.LinkAddress          { return "" }
func (l *stackLink) SetLinkAddress(tcpip.LinkAddress)        {}
func (l *stackLink) Wait()                                   {}
func (l *stackLink) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }
func (l *stackLink) AddHeader(*stack.PacketBuffer)           {}
func (l *stackLink) ParseHeader(*stack.PacketBuffer) bool    { return true }
func (l *stackLink) Close()                                  { l.close() }
func (l *stackLink) SetOnCloseAction(func())                 {}
