package netsim

import (
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// stackLink is the link endpoint between a netstack (a pod's or a node's host stack) and
// the datapath. Outbound packets are copied out as plain byte slices and handed to out;
// inbound packets are injected with inject. It plays the part of a veth.
type stackLink struct {
	mtu      uint32
	loopback bool         // report CapabilityLoopback (a host stack's lo)
	out      func([]byte) // called on the writer's goroutine; must not block

	mu         sync.RWMutex
	dispatcher stack.NetworkDispatcher
	closed     atomic.Bool

	txPackets, rxPackets atomic.Uint64
}

var _ stack.LinkEndpoint = (*stackLink)(nil)

func newStackLink(mtu uint32, out func([]byte)) *stackLink {
	return &stackLink{mtu: mtu, out: out}
}

// inject delivers an IP packet into the stack.
func (l *stackLink) inject(b []byte) {
	if l.closed.Load() {
		return
	}
	l.mu.RLock()
	d := l.dispatcher
	l.mu.RUnlock()
	if d == nil || len(b) == 0 {
		return
	}
	proto := header.IPv4ProtocolNumber
	if b[0]>>4 == 6 {
		proto = header.IPv6ProtocolNumber
	}
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(b)})
	l.rxPackets.Add(1)
	d.DeliverNetworkPacket(proto, pkt)
	pkt.DecRef()
}

func (l *stackLink) close() { l.closed.Store(true) }

// WritePackets implements stack.LinkEndpoint.
func (l *stackLink) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	if l.closed.Load() {
		return 0, &tcpip.ErrClosedForSend{}
	}
	n := 0
	for _, pkt := range pkts.AsSlice() {
		b := make([]byte, 0, pkt.Size())
		for _, s := range pkt.AsSlices() {
			b = append(b, s...)
		}
		l.txPackets.Add(1)
		l.out(b)
		n++
	}
	return n, nil
}

// Attach implements stack.LinkEndpoint.
func (l *stackLink) Attach(d stack.NetworkDispatcher) {
	l.mu.Lock()
	l.dispatcher = d
	l.mu.Unlock()
}

// IsAttached implements stack.LinkEndpoint.
func (l *stackLink) IsAttached() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.dispatcher != nil
}

func (l *stackLink) MTU() uint32       { return l.mtu }
func (l *stackLink) SetMTU(mtu uint32) { l.mtu = mtu }
func (l *stackLink) Capabilities() stack.LinkEndpointCapabilities {
	if l.loopback {
		return stack.CapabilityLoopback
	}
	return 0
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
