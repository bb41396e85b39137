package netsim

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// segmentPacket (cutting a GSO packet straight from the stack's views) hands out exactly
// the frames of the reference path, copyOut then segment: the same packets, byte for byte,
// in the same order, for IPv4 (with and without IP options) and IPv6, TCP options, flags,
// sequence numbers that wrap, payloads split over many views at any offsets, packets
// within the MSS, and packets that are not TCP (or are truncated) handed out as they are.
func TestSegmentPacketSameAsCopy(t *testing.T) {
	r := rand.New(rand.NewPCG(24, 7))
	collect := func(out *[][]byte) *stackLink {
		return &stackLink{out: func(f frame) {
			*out = append(*out, append([]byte(nil), f.b...))
			if f.v != nil {
				f.v.Release()
			}
		}}
	}
	cut := 0
	for i := range 400 {
		v6 := r.IntN(2) == 0
		l3 := 20 + 4*r.IntN(11) // IPv4: 20..60
		if v6 {
			l3 = 40
		}
		thl := 20 + 4*r.IntN(11)
		var size int
		switch r.IntN(4) {
		case 0:
			size = r.IntN(1500)
		case 1:
			size = 65535 - 120 - r.IntN(200)
		default:
			size = r.IntN(64 << 10)
		}
		if l3+thl+size > 65535 {
			size = 65535 - l3 - thl
		}
		mss := 536 + r.IntN(9000)
		if r.IntN(20) == 0 {
			mss = 0
		}
		ip := make([]byte, l3)
		tcp := make([]byte, thl)
		for j := range ip {
			ip[j] = byte(r.Uint32())
		}
		for j := range tcp {
			tcp[j] = byte(r.Uint32())
		}
		if v6 {
			ip[0] = 0x60
			binary.BigEndian.PutUint16(ip[4:], uint16(thl+size))
			ip[6] = 6
		} else {
			ip[0] = 0x40 | byte(l3/4)
			binary.BigEndian.PutUint16(ip[2:], uint16(l3+thl+size))
			ip[9] = 6
		}
		tcp[12] = byte(thl/4) << 4
		switch r.IntN(10) {
		case 0:
			ip[0] = 0x30 // neither version: handed out as it is
		case 1:
			tcp[12] = 15 << 4 // a TCP header longer than the packet holds, when small
		}
		payload := make([]byte, size)
		for j := range payload {
			payload[j] = byte(r.Uint32())
		}
		g := stack.GSO{Type: stack.GSOTCPv4, NeedsCsum: r.IntN(4) != 0, MSS: uint16(mss)}
		if v6 {
			g.Type = stack.GSOTCPv6
		}
		build := func() *stack.PacketBuffer {
			var buf buffer.Buffer
			for rest := payload; len(rest) > 0; {
				n := min(len(rest), 1+r.IntN(20000))
				if r.IntN(3) == 0 {
					n = min(len(rest), 1+r.IntN(7))
				}
				buf.Append(buffer.NewViewWithData(rest[:n]))
				rest = rest[n:]
			}
			pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{ReserveHeaderBytes: l3 + thl + r.IntN(64), Payload: buf})
			copy(pkt.TransportHeader().Push(thl), tcp)
			copy(pkt.NetworkHeader().Push(l3), ip)
			pkt.GSOOptions = g
			return pkt
		}
		var want, got [][]byte
		pkt := build()
		collect(&want).segment(copyOut(pkt), g)
		pkt.DecRef()
		pkt = build()
		collect(&got).segmentPacket(pkt, g)
		pkt.DecRef()
		if len(want) > 1 {
			cut++
		}
		if len(got) != len(want) {
			t.Fatalf("case %d (v6 %v, l3 %d, thl %d, size %d, mss %d): %d frames, the reference path %d", i, v6, l3, thl, size, mss, len(got), len(want))
		}
		for j := range want {
			if !bytes.Equal(got[j], want[j]) {
				t.Fatalf("case %d (v6 %v, l3 %d, thl %d, size %d, mss %d): frame %d of %d differs from the reference path", i, v6, l3, thl, size, mss, j, len(want))
			}
		}
	}
	if cut < 200 {
		t.Fatalf("only %d of 400 cases were cut into segments", cut)
	}
}

// BenchmarkSegmentGSO cuts one 64 KiB IPv4 TCP super-packet (MSS 1448, 12 bytes of TCP
// options) the way a pod's link does: path=copy is copyOut then segment (before
// segmentPacket), path=views is segmentPacket. Per-op: one super-packet.
func BenchmarkSegmentGSO(b *testing.B) {
	const l3, thl, mss = 20, 32, 1448
	size := 65535 - 120 - l3 - thl
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	ip := make([]byte, l3)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(l3+thl+size))
	ip[8], ip[9] = 64, 6
	tcp := make([]byte, thl)
	tcp[12], tcp[13] = byte(thl/4)<<4, 0x18
	g := stack.GSO{Type: stack.GSOTCPv4, NeedsCsum: true, MSS: mss}
	build := func() *stack.PacketBuffer {
		var buf buffer.Buffer
		buf.Append(buffer.NewViewWithData(payload))
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{ReserveHeaderBytes: 128, Payload: buf})
		copy(pkt.TransportHeader().Push(thl), tcp)
		copy(pkt.NetworkHeader().Push(l3), ip)
		pkt.GSOOptions = g
		return pkt
	}
	l := &stackLink{out: func(f frame) { f.v.Release() }}
	for _, path := range []string{"copy", "views"} {
		b.Run("path="+path, func(b *testing.B) {
			pkt := build()
			defer pkt.DecRef()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if path == "copy" {
					l.segment(copyOut(pkt), g)
				} else {
					l.segmentPacket(pkt, g)
				}
			}
		})
	}
}
