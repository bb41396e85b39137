package netsim

import (
	"encoding/binary"
	"net/netip"

	"github.com/clusterlab/clusterlab/netfilter"
)

// TCPSegment describes a TCP segment for BuildTCP.
type TCPSegment struct {
	Src, Dst      netip.AddrPort
	Flags         uint8
	Seq, Ack      uint32
	Window        uint16
	Payload       []byte
	TTL           uint8 // 64 when zero
	MSS           uint16
	WindowScale   int8 // -1: no option; options are added to SYN segments only
	SACKPermitted bool
}

// BuildTCP returns an IPv4 or IPv6 packet carrying the segment, with valid checksums.
func BuildTCP(s TCPSegment) []byte { return buildTCP(nil, s) }

// buildTCP is BuildTCP into the array of into when it has room (see buildIP).
func buildTCP(into []byte, s TCPSegment) []byte {
	var opts []byte
	if s.Flags&netfilter.TCPSyn != 0 {
		if s.MSS != 0 {
			opts = append(opts, 2, 4, byte(s.MSS>>8), byte(s.MSS))
		}
		if s.WindowScale >= 0 && s.WindowScale != 0 {
			opts = append(opts, 1, 3, 3, byte(s.WindowScale))
		}
		if s.SACKPermitted {
			opts = append(opts, 1, 1, 4, 2)
		}
		for len(opts)%4 != 0 {
			opts = append(opts, 0)
		}
	}
	hl := 20 + len(opts)
	l4 := make([]byte, hl+len(s.Payload))
	binary.BigEndian.PutUint16(l4[0:], s.Src.Port())
	binary.BigEndian.PutUint16(l4[2:], s.Dst.Port())
	binary.BigEndian.PutUint32(l4[4:], s.Seq)
	binary.BigEndian.PutUint32(l4[8:], s.Ack)
	l4[12] = byte(hl/4) << 4
	l4[13] = s.Flags
	win := s.Window
	if win == 0 && s.Flags&netfilter.TCPRst == 0 {
		win = 65535
	}
	binary.BigEndian.PutUint16(l4[14:], win)
	copy(l4[20:], opts)
	copy(l4[hl:], s.Payload)
	return buildIP(into, s.Src.Addr(), s.Dst.Addr(), netfilter.ProtoTCP, s.TTL, l4, 16)
}

// BuildUDP returns an IPv4 or IPv6 UDP packet with valid checksums.
func BuildUDP(src, dst netip.AddrPort, payload []byte) []byte {
	return buildUDP(nil, src, dst, payload)
}

// buildUDP is BuildUDP into the array of into when it has room (see buildIP).
func buildUDP(into []byte, src, dst netip.AddrPort, payload []byte) []byte {
	l4 := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(l4[0:], src.Port())
	binary.BigEndian.PutUint16(l4[2:], dst.Port())
	binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	copy(l4[8:], payload)
	return buildIP(into, src.Addr(), dst.Addr(), netfilter.ProtoUDP, 0, l4, 6)
}

// BuildSCTPInit returns a minimal SCTP INIT packet (the checksum is CRC32c in real SCTP;
// the datapath does not check it, so it is left zero).
func BuildSCTPInit(src, dst netip.AddrPort) []byte {
	l4 := make([]byte, 12+20)
	binary.BigEndian.PutUint16(l4[0:], src.Port())
	binary.BigEndian.PutUint16(l4[2:], dst.Port())
	l4[12] = 1 // INIT chunk
	binary.BigEndian.PutUint16(l4[14:], 20)
	return buildIP(nil, src.Addr(), dst.Addr(), netfilter.ProtoSCTP, 0, l4, -1)
}

// BuildICMPEcho returns an ICMP (or ICMPv6) echo request or reply.
func BuildICMPEcho(src, dst netip.Addr, reply bool, id, seq uint16, payload []byte) []byte {
	l4 := make([]byte, 8+len(payload))
	proto := netfilter.ProtoICMP
	switch {
	case src.Is4() && !reply:
		l4[0] = 8
	case src.Is4():
		l4[0] = 0
	case !reply:
		proto, l4[0] = netfilter.ProtoICMPv6, 128
	default:
		proto, l4[0] = netfilter.ProtoICMPv6, 129
	}
	binary.BigEndian.PutUint16(l4[4:], id)
	binary.BigEndian.PutUint16(l4[6:], seq)
	copy(l4[8:], payload)
	return buildIP(nil, src, dst, proto, 0, l4, 2)
}

// BuildICMPError returns the ICMP error (type/code) that src sends about the offending
// packet orig, quoting as much of it as the kernel does (the IP header and 8 bytes for
// IPv4's minimum; we quote up to 548 bytes for IPv4 and 1232 for IPv6 like Linux).
func BuildICMPError(src netip.Addr, orig []byte, typ, code uint8) []byte {
	origPkt, err := ParsePacket(orig)
	if err != nil {
		return nil
	}
	max := 576 - 20 - 8
	proto := netfilter.ProtoICMP
	if origPkt.IPv6 {
		max = 1280 - 40 - 8
		proto = netfilter.ProtoICMPv6
	}
	q := orig
	if len(q) > max {
		q = q[:max]
	}
	l4 := make([]byte, 8+len(q))
	l4[0], l4[1] = typ, code
	copy(l4[8:], q)
	return buildIP(nil, src, origPkt.Src, proto, 0, l4, 2)
}

// buildIP returns the IP packet carrying l4. It is built in into's array when that has
// room (a probe's packet and its bytes are then one allocation), else in a new slice;
// either way its capacity is its length, so an append never writes past it.
func buildIP(into []byte, src, dst netip.Addr, proto, ttl uint8, l4 []byte, csOff int) []byte {
	if ttl == 0 {
		ttl = 64
	}
	sized := func(n int) []byte {
		if cap(into) >= n {
			b := into[:n:n]
			clear(b)
			return b
		}
		return make([]byte, n)
	}
	var b []byte
	if src.Is4() {
		b = sized(20 + len(l4))
		b[0] = 0x45
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
		b[6] = 0x40 // DF
		b[8] = ttl
		b[9] = proto
		s4, d4 := src.As4(), dst.As4()
		copy(b[12:], s4[:])
		copy(b[16:], d4[:])
		binary.BigEndian.PutUint16(b[10:], checksum(b[:20], 0))
		copy(b[20:], l4)
	} else {
		b = sized(40 + len(l4))
		b[0] = 0x60
		binary.BigEndian.PutUint16(b[4:], uint16(len(l4)))
		b[6] = proto
		b[7] = ttl
		s16, d16 := src.As16(), dst.As16()
		copy(b[8:], s16[:])
		copy(b[24:], d16[:])
		copy(b[40:], l4)
	}
	if csOff >= 0 {
		seg := b[len(b)-len(l4):]
		var init uint32
		if proto != netfilter.ProtoICMP {
			init = pseudoHeaderSum(src, dst, proto, len(seg))
		}
		cs := checksum(seg, init)
		if proto == netfilter.ProtoUDP && cs == 0 {
			cs = 0xffff
		}
		binary.BigEndian.PutUint16(seg[csOff:], cs)
	}
	return b
}

// fixICMPChecksum recomputes an ICMP/ICMPv6 checksum from scratch (after the quoted
// packet inside an error has been rewritten).
func (p *Packet) fixICMPChecksum() {
	if p.l4off == 0 || len(p.Data)-p.l4off < 4 {
		return
	}
	seg := p.Data[p.l4off:]
	seg[2], seg[3] = 0, 0
	var init uint32
	if p.Proto == netfilter.ProtoICMPv6 {
		init = pseudoHeaderSum(p.Src, p.Dst, p.Proto, len(seg))
	}
	binary.BigEndian.PutUint16(seg[2:], checksum(seg, init))
}
