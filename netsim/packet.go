package netsim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/clusterlab/clusterlab/netfilter"

	"gvisor.dev/gvisor/pkg/buffer"
)

// ProtoName returns the lower-case name of an IP protocol ("tcp", "udp", ...).
func ProtoName(p uint8) string {
	switch p {
	case netfilter.ProtoTCP:
		return "tcp"
	case netfilter.ProtoUDP:
		return "udp"
	case netfilter.ProtoSCTP:
		return "sctp"
	case netfilter.ProtoICMP:
		return "icmp"
	case netfilter.ProtoICMPv6:
		return "icmpv6"
	}
	return fmt.Sprintf("proto-%d", p)
}

// ParseProto is the inverse of ProtoName for tcp, udp, sctp, icmp and icmpv6.
func ParseProto(s string) (uint8, error) {
	switch s {
	case "tcp", "TCP":
		return netfilter.ProtoTCP, nil
	case "udp", "UDP":
		return netfilter.ProtoUDP, nil
	case "sctp", "SCTP":
		return netfilter.ProtoSCTP, nil
	case "icmp", "ICMP":
		return netfilter.ProtoICMP, nil
	case "icmpv6", "ICMPv6", "ipv6-icmp":
		return netfilter.ProtoICMPv6, nil
	}
	return 0, fmt.Errorf("unknown protocol %q (want tcp, udp, sctp, icmp or icmpv6)", s)
}

// Packet is an IP packet inside a node's datapath: the raw bytes plus the parsed header
// fields and the metadata the kernel keeps beside an skb (interfaces, mark, conntrack).
//
// Handlers read the fields freely. They change addresses and ports only through the
// datapath's NAT verdicts or through SetSrc/SetDst, which keep Data, the fields and every
// checksum in step (incrementally, as the kernel does). They never write Data otherwise:
// a segment a pod's link cut reaches the receiving pod without its checksums checked a
// second time on the strength of that (frame.sumsOK).
type Packet struct {
	// Data is the whole IP packet, header included.
	Data []byte

	IPv6             bool
	Proto            uint8
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16 // TCP, UDP, SCTP ports; for ICMP echo both hold the identifier
	TCPFlags         uint8  // TCP only
	ICMPType         uint8  // ICMP and ICMPv6 only
	ICMPCode         uint8
	TTL              uint8

	// Inner is the offending packet's header quoted in an ICMP error, parsed as far as
	// the quote allows (nil for other packets).
	Inner *Packet

	// InIface and OutIface are the interface names as iptables -i and -o see them; empty
	// where the kernel has none at the current hook (no input interface on locally
	// generated packets, no output interface before routing).
	InIface, OutIface string
	// Mark is the packet mark (skb->mark), set by MARK targets and read by mark matches.
	Mark uint32

	// Conn is the conntrack entry the packet belongs to, nil when untracked or invalid.
	Conn *Conn
	// CtState is the conntrack state as the conntrack match reports it.
	CtState netfilter.CtState
	// CtReply is true when the packet travels in the reply direction of Conn.
	CtReply bool

	inPort    *podPort     // the bridge port the packet came in on (hairpin check)
	view      *buffer.View // the pooled buffer Data sits in, handed on with it (see frame)
	gro       *groBatch    // the datapath goroutine's batch a delivery to a pod may join (gro.go)
	sumsOK    bool         // the IP and TCP checksums are known right (frame.sumsOK)
	trainMSS  uint16       // not 0: Data is a train's (frame.mss, train.go)
	notrack   bool         // raw-table NOTRACK
	ctCreated bool         // Conn was created for this packet and awaits confirmation

	l3len int // IP header length including IPv6 extension headers
	l4off int // offset of the transport header in Data; 0 when absent (fragment)
	frag  bool
}

// Errors ParsePacket returns.
var (
	ErrShortPacket = errors.New("packet too short")
	ErrBadVersion  = errors.New("not an IPv4 or IPv6 packet")
)

// ParsePacket parses an IPv4 or IPv6 packet. The returned Packet refers to b.
func ParsePacket(b []byte) (*Packet, error) {
	p := &Packet{}
	if err := p.parse(b); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Packet) parse(b []byte) error {
	p.Data = b
	p.CtState = netfilter.CtUntracked // no conntrack lookup yet
	if len(b) < 1 {
		return ErrShortPacket
	}
	switch b[0] >> 4 {
	case 4:
		if len(b) < 20 {
			return ErrShortPacket
		}
		ihl := int(b[0]&0x0f) * 4
		if ihl < 20 || len(b) < ihl {
			return fmt.Errorf("%w: IPv4 header length %d", ErrShortPacket, ihl)
		}
		p.IPv6 = false
		p.Proto = b[9]
		p.TTL = b[8]
		p.Src = netip.AddrFrom4([4]byte(b[12:16]))
		p.Dst = netip.AddrFrom4([4]byte(b[16:20]))
		p.l3len = ihl
		fragOff := binary.BigEndian.Uint16(b[6:8]) & 0x1fff
		p.frag = fragOff != 0
		if p.frag {
			p.l4off = 0
			return nil
		}
		p.l4off = ihl
	case 6:
		if len(b) < 40 {
			return ErrShortPacket
		}
		p.IPv6 = true
		p.TTL = b[7]
		p.Src = netip.AddrFrom16([16]byte(b[8:24]))
		p.Dst = netip.AddrFrom16([16]byte(b[24:40]))
		next, off := b[6], 40
		for {
			switch next {
			case 0, 43, 60: // hop-by-hop, routing, destination options
				if len(b) < off+8 {
					return ErrShortPacket
				}
				next, off = b[off], off+(int(b[off+1])+1)*8
				continue
			case 44: // fragment
				if len(b) < off+8 {
					return ErrShortPacket
				}
				if binary.BigEndian.Uint16(b[off+2:off+4])&0xfff8 != 0 {
					p.frag = true
				}
				next, off = b[off], off+8
				continue
			}
			break
		}
		if off > len(b) {
			return ErrShortPacket
		}
		p.Proto = next
		p.l3len = off
		if p.frag {
			p.l4off = 0
			return nil
		}
		p.l4off = off
	default:
		return ErrBadVersion
	}
	return p.parseL4()
}

func (p *Packet) parseL4() error {
	l4 := p.Data[p.l4off:]
	switch p.Proto {
	case netfilter.ProtoTCP:
		if len(l4) < 20 {
			return fmt.Errorf("%w: TCP header", ErrShortPacket)
		}
		p.SrcPort = binary.BigEndian.Uint16(l4[0:2])
		p.DstPort = binary.BigEndian.Uint16(l4[2:4])
		p.TCPFlags = l4[13]
	case netfilter.ProtoUDP, netfilter.ProtoSCTP:
		if len(l4) < 8 {
			return fmt.Errorf("%w: %s header", ErrShortPacket, ProtoName(p.Proto))
		}
		p.SrcPort = binary.BigEndian.Uint16(l4[0:2])
		p.DstPort = binary.BigEndian.Uint16(l4[2:4])
	case netfilter.ProtoICMP, netfilter.ProtoICMPv6:
		if len(l4) < 8 {
			return fmt.Errorf("%w: ICMP header", ErrShortPacket)
		}
		p.ICMPType, p.ICMPCode = l4[0], l4[1]
		if p.IsICMPError() {
			inner := &Packet{}
			// The quote may be truncated; keep what parses.
			if err := inner.parse(l4[8:]); err == nil || inner.Src.IsValid() {
				p.Inner = inner
			}
		} else if p.isICMPEcho() {
			id := binary.BigEndian.Uint16(l4[4:6])
			p.SrcPort, p.DstPort = id, id
		}
	}
	return nil
}

// IsICMPError reports whether the packet is an ICMP or ICMPv6 error message (destination
// unreachable, time exceeded, parameter problem, packet too big), which quotes the packet
// that caused it.
func (p *Packet) IsICMPError() bool {
	switch p.Proto {
	case netfilter.ProtoICMP:
		return p.ICMPType == 3 || p.ICMPType == 11 || p.ICMPType == 12 || p.ICMPType == 4
	case netfilter.ProtoICMPv6:
		return p.ICMPType < 128
	}
	return false
}

func (p *Packet) isICMPEcho() bool {
	switch p.Proto {
	case netfilter.ProtoICMP:
		return p.ICMPType == 8 || p.ICMPType == 0
	case netfilter.ProtoICMPv6:
		return p.ICMPType == 128 || p.ICMPType == 129
	}
	return false
}

// hasPorts reports whether the packet has port fields conntrack and NAT can use.
func (p *Packet) hasPorts() bool {
	if p.l4off == 0 {
		return false
	}
	switch p.Proto {
	case netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoSCTP:
		return true
	}
	return p.isICMPEcho()
}

// Payload returns the transport payload (after the TCP/UDP header), or nil.
func (p *Packet) Payload() []byte {
	if p.l4off == 0 {
		return nil
	}
	l4 := p.Data[p.l4off:]
	switch p.Proto {
	case netfilter.ProtoTCP:
		off := int(l4[12]>>4) * 4
		if off > len(l4) {
			return nil
		}
		return l4[off:]
	case netfilter.ProtoUDP:
		return l4[8:]
	}
	return nil
}

// TCPSeq returns the TCP sequence and acknowledgement numbers and the window.
func (p *Packet) TCPSeq() (seq, ack uint32, win uint16) {
	if p.Proto != netfilter.ProtoTCP || p.l4off == 0 {
		return 0, 0, 0
	}
	l4 := p.Data[p.l4off:]
	return binary.BigEndian.Uint32(l4[4:8]), binary.BigEndian.Uint32(l4[8:12]), binary.BigEndian.Uint16(l4[14:16])
}

// tcpDataLen is the number of sequence numbers a TCP segment uses (payload, SYN, FIN).
func (p *Packet) tcpSeqLen() uint32 {
	n := uint32(len(p.Payload()))
	if p.TCPFlags&netfilter.TCPSyn != 0 {
		n++
	}
	if p.TCPFlags&netfilter.TCPFin != 0 {
		n++
	}
	return n
}

// Clone returns a deep copy of the packet with its own Data.
func (p *Packet) Clone() *Packet {
	q := *p
	q.Data = append([]byte(nil), p.Data...)
	q.view = nil
	if p.Inner != nil {
		// Re-parse so the inner packet refers to the new bytes.
		_ = q.parse(q.Data)
	}
	return &q
}

// String is a one-line summary, as tcpdump would print it.
func (p *Packet) String() string {
	switch {
	case p.Proto == netfilter.ProtoTCP:
		return fmt.Sprintf("tcp %s -> %s [%s]", netip.AddrPortFrom(p.Src, p.SrcPort), netip.AddrPortFrom(p.Dst, p.DstPort), TCPFlagString(p.TCPFlags))
	case p.Proto == netfilter.ProtoUDP || p.Proto == netfilter.ProtoSCTP:
		return fmt.Sprintf("%s %s -> %s", ProtoName(p.Proto), netip.AddrPortFrom(p.Src, p.SrcPort), netip.AddrPortFrom(p.Dst, p.DstPort))
	case p.IsICMPError() && p.Inner != nil:
		return fmt.Sprintf("%s %s -> %s type %d code %d (for %s)", ProtoName(p.Proto), p.Src, p.Dst, p.ICMPType, p.ICMPCode, p.Inner)
	case p.Proto == netfilter.ProtoICMP || p.Proto == netfilter.ProtoICMPv6:
		return fmt.Sprintf("%s %s -> %s type %d code %d", ProtoName(p.Proto), p.Src, p.Dst, p.ICMPType, p.ICMPCode)
	}
	return fmt.Sprintf("%s %s -> %s", ProtoName(p.Proto), p.Src, p.Dst)
}

// TCPFlagString renders TCP flags the way tcpdump does: S, S., P., F., R, ...
func TCPFlagString(f uint8) string {
	s := ""
	if f&netfilter.TCPSyn != 0 {
		s += "S"
	}
	if f&netfilter.TCPFin != 0 {
		s += "F"
	}
	if f&netfilter.TCPRst != 0 {
		s += "R"
	}
	if f&netfilter.TCPPsh != 0 {
		s += "P"
	}
	if f&netfilter.TCPAck != 0 {
		s += "."
	}
	if s == "" {
		s = "none"
	}
	return s
}

// resetMeta forgets what one node knew about the packet (conntrack, mark, interfaces)
// when it crosses a wire to another host, as an skb's metadata does not travel.
func (p *Packet) resetMeta() {
	p.Conn, p.CtState, p.CtReply, p.ctCreated = nil, netfilter.CtUntracked, false, false
	p.Mark, p.notrack, p.inPort = 0, false, nil
	p.InIface, p.OutIface = "", ""
}

// frame hands the packet's bytes on, with the pooled buffer they sit in.
func (p *Packet) frame() frame {
	return frame{b: p.Data, v: p.view, sumsOK: p.sumsOK, mss: p.trainMSS}
}

// SetNoTrack exempts the packet from connection tracking (the raw table's CT --notrack).
// It only has an effect before the conntrack hook, i.e. at PriorityRaw.
func (p *Packet) SetNoTrack() { p.notrack = true }

// SetSrc rewrites the source address and port (port ignored when the protocol has none),
// updating the IP header checksum and the transport checksum incrementally.
func (p *Packet) SetSrc(addr netip.Addr, port uint16) {
	p.rewrite(true, addr, port)
}

// SetDst rewrites the destination address and port like SetSrc.
func (p *Packet) SetDst(addr netip.Addr, port uint16) {
	p.rewrite(false, addr, port)
}

func (p *Packet) rewrite(src bool, addr netip.Addr, port uint16) {
	if addr.Is4() && !p.IPv6 {
		p.rewrite4(src, addr, port)
		return
	}
	p.rewriteAny(src, addr, port)
}

// rewrite4 is rewrite for an IPv4 packet and address: the same rewrite and checksum
// updates as rewriteAny, on 32-bit words.
func (p *Packet) rewrite4(src bool, addr netip.Addr, port uint16) {
	b := p.Data
	addrOff := 16
	if src {
		addrOff = 12
	}
	a4 := addr.As4()
	old, nw := binary.BigEndian.Uint32(b[addrOff:]), binary.BigEndian.Uint32(a4[:])
	portOff := -1
	if p.l4off != 0 {
		switch p.Proto {
		case netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoSCTP:
			portOff = p.l4off
			if !src {
				portOff += 2
			}
		}
		if csOff := p.l4ChecksumOffset(); csOff >= 0 {
			cs := binary.BigEndian.Uint16(b[csOff:])
			if !(p.Proto == netfilter.ProtoUDP && cs == 0) {
				if p.Proto != netfilter.ProtoICMP { // ICMPv4 has no pseudo header
					cs = csumUpdate32(cs, old, nw)
				}
				if portOff >= 0 {
					cs = csumUpdate16(cs, binary.BigEndian.Uint16(b[portOff:]), port)
				}
				if p.Proto == netfilter.ProtoUDP && cs == 0 {
					cs = 0xffff
				}
				binary.BigEndian.PutUint16(b[csOff:], cs)
			}
		}
	}
	binary.BigEndian.PutUint16(b[10:12], csumUpdate32(binary.BigEndian.Uint16(b[10:12]), old, nw))
	binary.BigEndian.PutUint32(b[addrOff:], nw)
	if portOff >= 0 {
		binary.BigEndian.PutUint16(b[portOff:], port)
	}
	if src {
		p.Src = addr
		if portOff >= 0 {
			p.SrcPort = port
		}
	} else {
		p.Dst = addr
		if portOff >= 0 {
			p.DstPort = port
		}
	}
}

// rewriteAny is rewrite for any family.
func (p *Packet) rewriteAny(src bool, addr netip.Addr, port uint16) {
	if addr.Is4() == p.IPv6 {
		panic(fmt.Sprintf("netsim: rewriting %s packet with address %s", map[bool]string{false: "IPv4", true: "IPv6"}[p.IPv6], addr))
	}
	b := p.Data
	var addrOff int
	switch {
	case !p.IPv6 && src:
		addrOff = 12
	case !p.IPv6:
		addrOff = 16
	case src:
		addrOff = 8
	default:
		addrOff = 24
	}
	old := addr.AsSlice() // same length as the field
	copy(old, b[addrOff:])
	newA := addr.AsSlice()
	portOff := -1
	if p.hasPorts() && !p.isICMPEcho() {
		portOff = p.l4off
		if !src {
			portOff += 2
		}
	}
	// Transport checksum covers the pseudo header (addresses) and the ports.
	if p.l4off != 0 {
		if csOff := p.l4ChecksumOffset(); csOff >= 0 {
			cs := binary.BigEndian.Uint16(b[csOff:])
			skip := p.Proto == netfilter.ProtoUDP && !p.IPv6 && cs == 0
			if !skip {
				if p.Proto != netfilter.ProtoICMP { // ICMPv4 has no pseudo header
					cs = csumUpdate(cs, old, newA)
				}
				if portOff >= 0 {
					var op, np [2]byte
					copy(op[:], b[portOff:portOff+2])
					binary.BigEndian.PutUint16(np[:], port)
					cs = csumUpdate(cs, op[:], np[:])
				}
				if p.Proto == netfilter.ProtoUDP && cs == 0 {
					cs = 0xffff
				}
				binary.BigEndian.PutUint16(b[csOff:], cs)
			}
		}
	}
	if !p.IPv6 {
		cs := binary.BigEndian.Uint16(b[10:12])
		binary.BigEndian.PutUint16(b[10:12], csumUpdate(cs, old, newA))
	}
	copy(b[addrOff:], newA)
	if portOff >= 0 {
		binary.BigEndian.PutUint16(b[portOff:], port)
	}
	if src {
		p.Src = addr
		if portOff >= 0 {
			p.SrcPort = port
		}
	} else {
		p.Dst = addr
		if portOff >= 0 {
			p.DstPort = port
		}
	}
}

// l4ChecksumOffset is the offset of the transport checksum in Data, or -1.
func (p *Packet) l4ChecksumOffset() int {
	if p.l4off == 0 {
		return -1
	}
	n := len(p.Data) - p.l4off
	switch p.Proto {
	case netfilter.ProtoTCP:
		if n >= 18 {
			return p.l4off + 16
		}
	case netfilter.ProtoUDP:
		if n >= 8 {
			return p.l4off + 6
		}
	case netfilter.ProtoICMP, netfilter.ProtoICMPv6:
		if n >= 4 {
			return p.l4off + 2
		}
	}
	return -1
}

// decTTL decrements the TTL (hop limit), updating the IPv4 checksum. It reports false when
// the TTL was already at or below 1, in which case the packet must not be forwarded.
func (p *Packet) decTTL() bool {
	b := p.Data
	if p.IPv6 {
		if b[7] <= 1 {
			return false
		}
		b[7]--
		p.TTL = b[7]
		return true
	}
	if b[8] <= 1 {
		return false
	}
	old := binary.BigEndian.Uint16(b[8:10]) // TTL and protocol
	b[8]--
	cs := binary.BigEndian.Uint16(b[10:12])
	binary.BigEndian.PutUint16(b[10:12], csumUpdate16(cs, old, binary.BigEndian.Uint16(b[8:10])))
	p.TTL = b[8]
	return true
}

// csumUpdate adjusts an Internet checksum for a change of 16-bit-aligned bytes from old
// to new (RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m')).
func csumUpdate(sum uint16, old, new []byte) uint16 {
	s := uint32(^sum)
	for i := 0; i+1 < len(old); i += 2 {
		s += uint32(^binary.BigEndian.Uint16(old[i:]))
		s += uint32(binary.BigEndian.Uint16(new[i:]))
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// csumUpdate16 is csumUpdate for one 16-bit word.
func csumUpdate16(sum, old, new uint16) uint16 {
	s := uint32(^sum) + uint32(^old) + uint32(new)
	s = s&0xffff + s>>16
	s = s&0xffff + s>>16
	return ^uint16(s)
}

// csumUpdate32 is csumUpdate for a 32-bit word (an IPv4 address).
func csumUpdate32(sum uint16, old, new uint32) uint16 {
	s := uint32(^sum) + uint32(^uint16(old>>16)) + uint32(^uint16(old)) + new>>16 + new&0xffff
	s = s&0xffff + s>>16
	s = s&0xffff + s>>16
	return ^uint16(s)
}

// checksum computes the Internet checksum of b folded onto initial.
func checksum(b []byte, initial uint32) uint16 {
	s := initial
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

func pseudoHeaderSum(src, dst netip.Addr, proto uint8, length int) uint32 {
	var s uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			s += uint32(binary.BigEndian.Uint16(b[i:]))
		}
	}
	add(src.AsSlice())
	add(dst.AsSlice())
	s += uint32(proto)
	s += uint32(length)
	return s
}

// ChecksumsValid reports whether the IPv4 header checksum and the TCP/UDP/ICMP checksum
// of a packet are correct. Tests use it to check that NAT keeps checksums right.
func (p *Packet) ChecksumsValid() bool {
	b := p.Data
	if !p.IPv6 && checksum(b[:p.l3len], 0) != 0 {
		return false
	}
	if p.l4off == 0 {
		return true
	}
	l4 := b[p.l4off:]
	switch p.Proto {
	case netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoICMPv6:
		if p.Proto == netfilter.ProtoUDP && !p.IPv6 && binary.BigEndian.Uint16(l4[6:8]) == 0 {
			return true
		}
		return checksum(l4, pseudoHeaderSum(p.Src, p.Dst, p.Proto, len(l4))) == 0
	case netfilter.ProtoICMP:
		return checksum(l4, 0) == 0
	}
	return true
}
