package netsim

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// A frame is marked sumsOK (its checksums known right, so GRO skips its check) only when
// its IP and TCP checksums verify, and they still verify after any sequence of the
// datapath's rewrites (SetSrc, SetDst, the TTL): 300 fixed-seed super-packets, IPv4 with
// and without options and IPv6, with and without a checksum to complete (NeedsCsum),
// within the MSS and cut, each frame rewritten up to 6 times.
func TestCutSumsOKOnlyWhenRight(t *testing.T) {
	r := rand.New(rand.NewPCG(36, 1))
	var frames []frame
	l := &stackLink{out: func(f frame) { frames = append(frames, f) }}
	addr := func(v6 bool) netip.Addr {
		if v6 {
			var a [16]byte
			for i := range a {
				a[i] = byte(r.Uint32())
			}
			return netip.AddrFrom16(a)
		}
		return netip.AddrFrom4([4]byte{10, byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))})
	}
	marked, cutMarked := 0, 0
	for i := range 300 {
		v6 := r.IntN(3) == 0
		size := r.IntN(1500)
		if r.IntN(2) == 0 {
			size = r.IntN(60000)
		}
		mss := 536 + r.IntN(1000)
		seg := TCPSegment{Src: netip.AddrPortFrom(addr(v6), uint16(r.Uint32())), Dst: netip.AddrPortFrom(addr(v6), uint16(r.Uint32())),
			Flags: netfilter.TCPAck | netfilter.TCPPsh, Seq: r.Uint32(), Ack: r.Uint32(), Window: uint16(r.Uint32()), Payload: make([]byte, size)}
		for j := range seg.Payload {
			seg.Payload[j] = byte(r.Uint32())
		}
		b := BuildTCP(seg)
		l3 := 40
		if !v6 {
			l3 = 20
			if r.IntN(3) == 0 { // IPv4 options (NOPs), the header checksum redone
				b = append(b[:20:20], append([]byte{1, 1, 1, 1, 1, 1, 1, 1}, b[20:]...)...)
				b[0] = 0x47
				binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
				ip := header.IPv4(b)
				ip.SetChecksum(0)
				ip.SetChecksum(^ip.CalculateChecksum())
				l3 = 28
			}
		}
		g := stack.GSO{Type: stack.GSOTCPv4, NeedsCsum: r.IntN(4) != 0, MSS: uint16(mss)}
		if v6 {
			g.Type = stack.GSOTCPv6
		}
		if g.NeedsCsum { // the stack hands over a partial sum (here: a wrong one)
			binary.BigEndian.PutUint16(b[l3+16:], uint16(r.Uint32()))
		}
		if !v6 && r.IntN(8) == 0 { // a wrong IP header checksum: never marked
			b[10] ^= 0x40
		}
		frames = frames[:0]
		l.segment(buffer.NewViewWithData(b), g)
		for j, f := range frames {
			pk, err := ParsePacket(f.b)
			if err != nil {
				t.Fatalf("case %d frame %d: %v", i, j, err)
			}
			if !f.sumsOK {
				continue
			}
			marked++
			if len(frames) > 1 {
				cutMarked++
			}
			pk.sumsOK = true
			for k := range r.IntN(7) {
				if !pk.ChecksumsValid() {
					t.Fatalf("case %d (v6 %v, l3 %d, size %d, mss %d, NeedsCsum %v) frame %d of %d: marked sumsOK after %d rewrites, checksums do not verify",
						i, v6, l3, size, mss, g.NeedsCsum, j, len(frames), k)
				}
				switch r.IntN(3) {
				case 0:
					pk.SetSrc(addr(v6), uint16(r.Uint32()))
				case 1:
					pk.SetDst(addr(v6), uint16(r.Uint32()))
				default:
					pk.decTTL()
				}
			}
			if !pk.ChecksumsValid() || !pk.frame().sumsOK {
				t.Fatalf("case %d frame %d: checksums verify %v, frame still marked %v", i, j, pk.ChecksumsValid(), pk.frame().sumsOK)
			}
		}
		for _, f := range frames {
			f.v.Release()
		}
	}
	if marked < 300 || cutMarked < 100 {
		t.Fatalf("only %d frames marked, %d of them cut: the shortcut hardly acts", marked, cutMarked)
	}
}

// A segment reaching a pod's GRO without the mark is checked as before: with a wrong TCP
// checksum the pod's stack counts a checksum error and drops it; with a right one it
// does not. (A marked one is not checked again: that is the shortcut, and why only
// frames whose sums netsim computed are marked.)
func TestGROChecksUnmarkedSegments(t *testing.T) {
	c := newTestCluster(t, Config{Seed: 5, Nodes: []NodeConfig{{Name: "node-a"}}})
	p, err := c.StartPod("node-a", "default", "server", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := p.Net().Listen("tcp", ":9") // a segment to an endpoint has its checksum checked
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ns := p.stack.Load()
	if !ns.link.gro {
		t.Fatal("the pod's link has no GRO")
	}
	errs := func() uint64 { return ns.s.Stats().TCP.ChecksumErrors.Value() }
	send := func(bad, marked bool) {
		b := BuildTCP(TCPSegment{Src: netip.MustParseAddrPort("10.9.9.9:4000"), Dst: netip.AddrPortFrom(p.IP(), 9),
			Flags: netfilter.TCPAck, Seq: 1, Ack: 1, Window: 100, Payload: []byte("payload")})
		if bad {
			b[len(b)-1] ^= 0xff
		}
		var batch groBatch
		ns.link.injectBatched(frame{b: b, sumsOK: marked}, &batch)
		batch.flush()
		c.Quiesce()
	}
	e0 := errs()
	send(false, false)
	if got := errs() - e0; got != 0 {
		t.Fatalf("a right checksum counted %d checksum errors", got)
	}
	send(true, false)
	if got := errs() - e0; got != 1 {
		t.Fatalf("an unmarked segment with a wrong checksum: %d checksum errors, want 1", got)
	}
	send(true, true)
	if got := errs() - e0; got != 1 {
		t.Fatalf("a marked segment was checked (%d checksum errors): the shortcut does not act", got)
	}
}
