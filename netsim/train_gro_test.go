package netsim

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// recDispatcher records the TCP segments a link hands its stack: each one's sequence
// number, acknowledgement, window, flags and payload, and whether the link reported
// the checksums validated while it delivered.
type recDispatcher struct {
	l    *stackLink
	segs []recSeg
}

type recSeg struct {
	seq, ack    uint32
	win         uint16
	flags       uint8
	payload     []byte
	rxValidated bool
}

func (d *recDispatcher) DeliverNetworkPacket(_ tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	v := pkt.ToView()
	b := append([]byte(nil), v.AsSlice()...)
	v.Release()
	var p Packet
	if err := p.parse(b); err != nil {
		panic(err)
	}
	seq, ack, win := p.TCPSeq()
	d.segs = append(d.segs, recSeg{seq: seq, ack: ack, win: win, flags: p.TCPFlags, payload: p.Payload(),
		rxValidated: d.l.Capabilities()&stack.CapabilityRXChecksumOffload != 0 || pkt.RXChecksumValidated})
}

func (d *recDispatcher) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// A train delivered whole into a pod (injectTrain) is what GRO hands the stack for its
// cut segments: 200 fixed-seed trains (IPv4 and IPv6, 2-45 segments, PSH on the last or
// not), each after a held segment of the same flow, delivered whole into one link and
// cut (cutTrain) through GRO (injectBatched, then the batch's flush) into another; the
// stacks receive the same bytes in the same order from the same sequence numbers, with
// the same acknowledgement, window and flags (PSH where GRO puts it), every packet taken
// as checked; the train is delivered after what GRO held, not before.
func TestTrainWholeAsGRO(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 3))
	for i := range 200 {
		v6 := r.IntN(3) == 0
		src, dst := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.244.2.9")
		if v6 {
			src, dst = netip.MustParseAddr("fd00::1:5"), netip.MustParseAddr("fd00::2:9")
		}
		mss := 1448 - r.IntN(4)*100
		n := 2 + r.IntN(44)
		size := (n-1)*mss + 1 + r.IntN(mss)
		flags := uint8(netfilter.TCPAck)
		if r.IntN(2) == 0 {
			flags |= netfilter.TCPPsh
		}
		seq := r.Uint32()
		seg := TCPSegment{Src: netip.AddrPortFrom(src, 40000), Dst: netip.AddrPortFrom(dst, 8080), Flags: netfilter.TCPAck,
			Seq: seq - 100, Ack: 77, Window: 500, WindowScale: -1, Payload: bytes.Repeat([]byte{0xee}, 100)}
		held := BuildTCP(seg)
		seg.Flags, seg.Seq, seg.Payload = flags, seq, make([]byte, size)
		for j := range seg.Payload {
			seg.Payload[j] = byte(r.Uint32())
		}
		train := BuildTCP(seg)
		if _, _, segs, ok := trainGeometry(train, mss); !ok || segs != n {
			t.Fatalf("train %d: geometry %d segments, %v", i, segs, ok)
		}
		run := func(whole bool) []recSeg {
			l := &stackLink{gro: true}
			d := &recDispatcher{l: l}
			l.Attach(d)
			var b groBatch
			l.injectBatched(frame{b: held}, &b)
			tf := frame{b: append([]byte(nil), train...), mss: uint16(mss)}
			if whole {
				if !l.injectTrain(tf, &b) {
					t.Fatal("injectTrain refused a train on a link with GRO")
				}
			} else {
				cutTrain(tf, func(s frame) { l.injectBatched(s, &b) })
			}
			b.flush()
			return d.segs
		}
		got, want := run(true), run(false)
		for _, ss := range [][]recSeg{got, want} {
			off := uint32(0)
			for _, s := range ss {
				if s.seq != seq-100+off || s.ack != 77 || s.win != 500 || !s.rxValidated {
					t.Fatalf("train %d: packet seq %d ack %d win %d validated %v at stream offset %d (whole: %v)", i, s.seq, s.ack, s.win, s.rxValidated, off, &ss[0] == &got[0])
				}
				off += uint32(len(s.payload))
			}
		}
		join := func(ss []recSeg) (p []byte) {
			for _, s := range ss {
				p = append(p, s.payload...)
			}
			return p
		}
		if gp, wp := join(got), join(want); !bytes.Equal(gp, wp) || len(gp) != 100+size {
			t.Fatalf("train %d (%d segments of %d): whole delivered %d bytes in %d packets, GRO %d in %d, or they differ", i, n, mss, len(gp), len(got), len(wp), len(want))
		}
		if gl, wl := got[len(got)-1].flags, want[len(want)-1].flags; gl != wl || gl != flags {
			t.Fatalf("train %d: last packet's flags %#x whole, %#x through GRO, want %#x", i, gl, wl, flags)
		}
		if len(got[0].payload) != 100 {
			t.Fatalf("train %d: the held segment was not delivered first, alone", i)
		}
	}
}
