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

// PeekInAt, InRunAt and OutRunAt against InAt and OutAt: two models fed the same fixed-seed mix of client packets,
// replies, clock advances across the timeouts, real servers removed, re-added and
// given weight 0 (expire_nodest_conn on or off); before each of the client's packets
// one model is asked PeekInAt first. Wherever PeekInAt answers, the packet's InAt
// decides the same verdict, destination and forwarding method; and PeekInAt changes
// nothing InAt would not: both models' connection entries, counters and statistics
// stay the same; and runs of packets (trains) through InRunAt and OutRunAt leave the
// model as InAt and OutAt for each packet do. It answers for most of the established
// connections' packets.
func TestPeekInAtSameAsInAt(t *testing.T) {
	for _, nodest := range []int{0, 1} {
		t.Run(fmt.Sprintf("expire_nodest_conn=%d", nodest), func(t *testing.T) {
			r := rand.New(rand.NewPCG(38, uint64(nodest)))
			lines := append(svcLines("rr", "A", "B", "C"), fmt.Sprintf("sysctl expire_nodest_conn=%d", nodest))
			a := newTM(t, Config{}, lines...)
			b := newTM(t, Config{}, lines...)
			flagsOf := []uint8{netfilter.TCPSyn, netfilter.TCPAck, netfilter.TCPAck | netfilter.TCPPsh, netfilter.TCPAck, netfilter.TCPFin | netfilter.TCPAck, netfilter.TCPRst}
			answered := 0
			for i := range 4000 {
				client := netip.MustParseAddrPort(fmt.Sprintf("192.0.2.%d:%d", 1+r.IntN(3), 40000+r.IntN(4)))
				flags := flagsOf[r.IntN(len(flagsOf))]
				rs := addrOf(string(rune('A'+r.IntN(3)))) + ":80"
				switch r.IntN(30) {
				case 0:
					d := time.Duration(r.Int64N(int64(20 * time.Minute)))
					a.advance(d)
					b.advance(d)
				case 1:
					// A real server removed, or back (an error when it is already there or
					// gone is fine: both models get the same).
					l := "-d -t " + vip + " -r " + rs
					if r.IntN(2) == 0 {
						l = "-a -t " + vip + " -r " + rs + " -m -w 1"
					}
					a.Run([]byte(l), "test", a.clock)
					b.Run([]byte(l), "test", b.clock)
				case 2:
					l := "-e -t " + vip + " -r " + rs + " -m -w " + fmt.Sprint(r.IntN(2))
					a.Run([]byte(l), "test", a.clock)
					b.Run([]byte(l), "test", b.clock)
				case 3, 4, 5, 6, 7, 8, 9:
					p := Packet{Protocol: netfilter.ProtoTCP, Src: netip.MustParseAddrPort(rs), Dst: client, TCPFlags: flags | netfilter.TCPAck, Len: 52 + r.IntN(1448)}
					if r.IntN(3) == 0 {
						// A run of replies (a train): OutRunAt against OutAt for each.
						last, n := drawRun(r, p)
						eachOfRun(p, n, last, func(_ int, q Packet) { a.OutAt(q, a.clock.Now()) })
						b.OutRunAt(p, n, last, b.clock.Now())
						break
					}
					a.OutAt(p, a.clock.Now())
					b.OutAt(p, b.clock.Now())
				default:
					p := Packet{Protocol: netfilter.ProtoTCP, Src: client, Dst: netip.MustParseAddrPort(vip), TCPFlags: flags, Len: 52 + r.IntN(1448)}
					pd, ok := b.PeekInAt(p, b.clock.Now())
					if ok && flags&netfilter.TCPSyn == 0 && r.IntN(3) == 0 {
						// A run of the client's packets (a train) where PeekInAt
						// answers: InRunAt against InAt for each, which decides as
						// PeekInAt said every time.
						answered++
						last, n := drawRun(r, p)
						eachOfRun(p, n, last, func(j int, q Packet) {
							if d := a.InAt(q, a.clock.Now()); d.Verdict != pd.Verdict || d.Dest != pd.Dest || d.Forward != pd.Forward {
								t.Fatalf("step %d: PeekInAt answered %v %v %v, InAt decided %v %v %v for packet %d of the run", i, pd.Verdict, pd.Dest, pd.Forward, d.Verdict, d.Dest, d.Forward, j)
							}
						})
						b.InRunAt(p, n, last, b.clock.Now())
						break
					}
					da, db := a.InAt(p, a.clock.Now()), b.InAt(p, b.clock.Now())
					if ok {
						answered++
						if pd.Verdict != db.Verdict || pd.Dest != db.Dest || pd.Forward != db.Forward {
							t.Fatalf("step %d: PeekInAt answered %v %v %v, InAt decided %v %v %v (%s)", i, pd.Verdict, pd.Dest, pd.Forward, db.Verdict, db.Dest, db.Forward, db.Reason)
						}
					}
					if ca, cb := fmt.Sprintf("%+v", da.Conn), fmt.Sprintf("%+v", db.Conn); ca != cb {
						t.Fatalf("step %d: after PeekInAt and runs, InAt's entry %s; without, %s", i, cb, ca)
					}
					if da.Verdict != db.Verdict || da.Dest != db.Dest || da.Reason != db.Reason {
						t.Fatalf("step %d: after PeekInAt, InAt decided %v %v %q; without, %v %v %q", i, db.Verdict, db.Dest, db.Reason, da.Verdict, da.Dest, da.Reason)
					}
				}
				if i%25 != 24 {
					// Not every step: listing syncs the models (runs their expiries),
					// which PeekInAt must do itself.
					continue
				}
				if la, lb := a.Listing(false), b.Listing(false); la != lb {
					t.Fatalf("step %d: entries without PeekInAt:\n%s\nwith:\n%s", i, la, lb)
				}
				if sa, sb := fmt.Sprintf("%+v %+v", a.Stats(), a.Traffic()), fmt.Sprintf("%+v %+v", b.Stats(), b.Traffic()); sa != sb {
					t.Fatalf("step %d: stats without PeekInAt %s, with %s", i, sa, sb)
				}
			}
			t.Logf("PeekInAt answered %d packets", answered)
			if answered < 300 {
				t.Errorf("PeekInAt answered only %d packets", answered)
			}
		})
	}
}

// drawRun draws a run of packets like p (a train): how many mid packets (p itself), and
// the last, with PSH and a shorter length.
func drawRun(r *rand.Rand, p Packet) (last Packet, n int) {
	last, n = p, r.IntN(40)
	last.TCPFlags |= netfilter.TCPPsh
	last.Len = 53 + r.IntN(1000)
	return last, n
}

// eachOfRun calls f with each packet of the run, in order: mid n times, then last.
func eachOfRun(mid Packet, n int, last Packet, f func(i int, q Packet)) {
	for i := range n + 1 {
		q := mid
		if i == n {
			q = last
		}
		f(i, q)
	}
}
