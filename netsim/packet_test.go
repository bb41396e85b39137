package netsim

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
)

// The IPv4 rewrite and TTL decrement (32-bit checksum arithmetic) leave exactly the bytes
// and fields the general code does, for TCP, UDP (with and without a checksum), ICMP echo,
// ICMP errors and fragments.
func TestIPv4RewriteMatchesGeneral(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	addr := func() netip.Addr {
		return netip.AddrFrom4([4]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())})
	}
	ap := func() netip.AddrPort { return netip.AddrPortFrom(addr(), uint16(rng.Uint32())) }
	payload := func() []byte {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	build := func(kind int) []byte {
		switch kind {
		case 0:
			return BuildTCP(TCPSegment{Src: ap(), Dst: ap(), Flags: netfilter.TCPAck, Seq: rng.Uint32(), Ack: rng.Uint32(), Window: uint16(rng.Uint32()), Payload: payload(), WindowScale: -1})
		case 1:
			return BuildUDP(ap(), ap(), payload())
		case 2: // UDP without a checksum
			b := BuildUDP(ap(), ap(), payload())
			binary.BigEndian.PutUint16(b[26:28], 0)
			return b
		case 3:
			return BuildICMPEcho(addr(), addr(), rng.IntN(2) == 0, uint16(rng.Uint32()), uint16(rng.Uint32()), payload())
		case 4:
			return BuildICMPError(addr(), BuildUDP(ap(), ap(), payload()), 3, 3)
		default: // a fragment: no transport header
			b := BuildUDP(ap(), ap(), payload())
			binary.BigEndian.PutUint16(b[6:8], 0x0010)
			binary.BigEndian.PutUint16(b[10:12], 0)
			binary.BigEndian.PutUint16(b[10:12], checksum(b[:20], 0))
			return b
		}
	}
	for i := 0; i < 20000; i++ {
		orig := build(i % 6)
		src, to, port := rng.IntN(2) == 0, addr(), uint16(rng.Uint32())
		fast, err := ParsePacket(append([]byte(nil), orig...))
		if err != nil {
			t.Fatal(err)
		}
		slow, _ := ParsePacket(append([]byte(nil), orig...))
		fast.rewrite4(src, to, port)
		slow.rewriteAny(src, to, port)
		if !bytes.Equal(fast.Data, slow.Data) || fast.Src != slow.Src || fast.Dst != slow.Dst || fast.SrcPort != slow.SrcPort || fast.DstPort != slow.DstPort {
			t.Fatalf("%s: rewrite (src %v) to %s:%d\nfast %x\nslow %x", slow, src, to, port, fast.Data, slow.Data)
		}
		if i%6 != 2 && !fast.ChecksumsValid() {
			t.Fatalf("%s: checksums wrong after the rewrite", fast)
		}
		want := append([]byte(nil), fast.Data...)
		if want[8] > 1 {
			cs := binary.BigEndian.Uint16(want[10:12])
			old := []byte{want[8], want[9]}
			want[8]--
			binary.BigEndian.PutUint16(want[10:12], csumUpdate(cs, old, want[8:10]))
		}
		if ok := fast.decTTL(); ok != (orig[8] > 1) || !bytes.Equal(fast.Data, want) {
			t.Fatalf("%s: TTL decrement gave %x, want %x", fast, fast.Data, want)
		}
	}
}

// IPv4 prefixes as numbers contain the addresses netip.Prefix.Contains says they do, for
// every length, masked or not.
func TestPrefix4MatchesNetip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	a4 := func() netip.Addr {
		v := rng.Uint32()
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	for i := 0; i < 20000; i++ {
		p := netip.PrefixFrom(a4(), rng.IntN(33))
		p4, ok := prefix4Of(p)
		if !ok {
			t.Fatalf("%s: not an IPv4 prefix", p)
		}
		a := a4()
		if rng.IntN(2) == 0 { // an address inside, near the prefix's own
			a = netip.AddrFrom4(p.Masked().Addr().As4())
		}
		k, _ := addr4(a)
		if got, want := p4.contains(k), p.Contains(a); got != want {
			t.Fatalf("%s contains %s: %v, want %v", p, a, got, want)
		}
	}
	if _, ok := prefix4Of(netip.MustParsePrefix("fd00::/64")); ok {
		t.Error("an IPv6 prefix made a prefix4")
	}
}
