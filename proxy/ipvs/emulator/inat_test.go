package emulator

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// InAt and OutAt, given the time the caller read from the model's clock (as the netsim
// datapath passes a packet's time), decide exactly as In and Out, which read the clock
// themselves: two models fed the same fixed-seed mix of client packets (SYN, ACK, FIN,
// RST, from a few clients), replies and clock advances across the TCP timeouts give the
// same decisions, connection entries, counters and stats.
func TestInAtSameAsIn(t *testing.T) {
	r := rand.New(rand.NewPCG(24, 11))
	lines := svcLines("rr", "A", "B", "C")
	a := newTM(t, Config{}, lines...)
	b := newTM(t, Config{}, lines...)
	show := func(d Decision) string {
		conn := "-"
		if d.Conn != nil {
			conn = fmt.Sprintf("%s %s %s", d.Conn.Dest, d.Conn.State, d.Conn.Expires)
		}
		return fmt.Sprintf("%v %v %v %v %v %q %s", d.Verdict, d.Dest, d.Forward, d.Via, d.New, d.Reason, conn)
	}
	flagsOf := []uint8{netfilter.TCPSyn, netfilter.TCPAck, netfilter.TCPAck | netfilter.TCPPsh, netfilter.TCPFin | netfilter.TCPAck, netfilter.TCPRst}
	for i := range 3000 {
		client := netip.MustParseAddrPort(fmt.Sprintf("192.0.2.%d:%d", 1+r.IntN(3), 40000+r.IntN(4)))
		flags := flagsOf[r.IntN(len(flagsOf))]
		var da, db Decision
		switch r.IntN(10) {
		case 0, 1:
			d := 2 * time.Duration(r.Int64N(int64(20*time.Minute)))
			if r.IntN(2) == 0 {
				d = time.Duration(r.Int64N(int64(3 * time.Second)))
			}
			a.advance(d)
			b.advance(d)
			continue
		case 2, 3, 4:
			dest := netip.MustParseAddrPort(addrOf(string(rune('A'+r.IntN(3)))) + ":80")
			p := Packet{Protocol: netfilter.ProtoTCP, Src: dest, Dst: client, TCPFlags: flags | netfilter.TCPAck}
			da = a.Out(p)
			db = b.OutAt(p, b.clock.Now())
		default:
			p := Packet{Protocol: netfilter.ProtoTCP, Src: client, Dst: netip.MustParseAddrPort(vip), TCPFlags: flags}
			da = a.In(p)
			db = b.InAt(p, b.clock.Now())
		}
		if sa, sb := show(da), show(db); sa != sb {
			t.Fatalf("step %d: In/Out decided %s, InAt/OutAt %s", i, sa, sb)
		}
	}
	for _, rs := range []string{"A", "B", "C"} {
		eq(t, "counters of "+rs, b.counters(svcLabel, addrOf(rs)+":80"), a.counters(svcLabel, addrOf(rs)+":80"))
	}
	if sa, sb := fmt.Sprintf("%+v", a.Stats()), fmt.Sprintf("%+v", b.Stats()); sa != sb {
		t.Fatalf("stats: In/Out %s, InAt/OutAt %s", sa, sb)
	}
}

// wallClock is a running clock (as netsim's is outside tests): each read is a real clock
// read.
type wallClock struct{ start time.Time }

func (c wallClock) Now() time.Time { return Epoch.Add(time.Since(c.start)) }

// BenchmarkInEstablished is one established connection's packet through the model with a
// running clock, as the netsim datapath handles it: the datapath reads the packet's time
// (one clock read per op on both paths), then path=In has the model read the clock again,
// path=InAt passes it the packet's time.
func BenchmarkInEstablished(b *testing.B) {
	for _, path := range []string{"In", "InAt"} {
		b.Run("path="+path, func(b *testing.B) {
			tm := newTM(&testing.T{}, Config{}, svcLines("rr", "A", "B")...)
			clock := wallClock{start: time.Now()}
			tm.Model.clock = clock
			p := Packet{Protocol: netfilter.ProtoTCP, Src: netip.MustParseAddrPort("192.0.2.1:40000"), Dst: netip.MustParseAddrPort(vip), TCPFlags: netfilter.TCPSyn}
			tm.In(p)
			p.TCPFlags = netfilter.TCPAck
			for b.Loop() {
				now := clock.Now() // the datapath's read for the packet
				if path == "In" {
					tm.In(p)
				} else {
					tm.InAt(p, now)
				}
			}
		})
	}
}
