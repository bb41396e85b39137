package netsim

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// TestConntrackSweepAgainstPops feeds two tables the same random traffic (UDP flows and
// their replies, TCP SYNs and RSTs that shrink a queued entry's timeout, deletions,
// flushes) and the same clock, often stepped past every timeout: one table collects
// item by item only (the heap pops), the other sweeps whenever every item is due
// (sweepLocked, from one queued item on). After every step both hold the same entries
// (ID, tuples, state, counters, expiry), the same tuples map to the same entries, and
// the queue's invariants hold; the sweep must have run, in both of its branches (most
// entries removed: the table rebuilt; few: deleted one by one), which sweepFew and
// sweepRebuilt count.
func TestConntrackSweepAgainstPops(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 33))
		now := Epoch
		clock := func() time.Time { return now }
		pops := NewConntrack(clock, ConntrackSettings{})
		pops.sweepMin = math.MaxInt
		sweep := NewConntrack(clock, ConntrackSettings{})
		sweep.sweepMin = 1
		both := []*Conntrack{pops, sweep}
		src := netip.MustParseAddr("10.0.0.1")
		send := func(raw []byte) {
			for _, ct := range both {
				pk, err := ParsePacket(raw)
				if err != nil {
					t.Fatal(err)
				}
				if r := ct.in(pk, now); r.isNew {
					ct.confirm(r.conn)
				}
			}
		}
		var tuples []netfilter.Tuple
		for step := 0; step < 2000; step++ {
			switch k := rng.IntN(100); {
			case k < 40:
				port := uint16(1000 + rng.IntN(600))
				a, b := netip.AddrPortFrom(src, port), netip.MustParseAddrPort("10.0.0.2:53")
				if rng.IntN(3) == 0 {
					a, b = b, a
				}
				send(BuildUDP(a, b, nil))
				tuples = append(tuples, netfilter.Tuple{Proto: netfilter.ProtoUDP, Src: a.Addr(), Dst: b.Addr(), SrcPort: a.Port(), DstPort: b.Port()})
			case k < 60:
				flags := uint8(netfilter.TCPSyn)
				if rng.IntN(3) == 0 {
					flags = netfilter.TCPRst
				}
				port := uint16(20000 + rng.IntN(300))
				send(BuildTCP(TCPSegment{Src: netip.AddrPortFrom(src, port), Dst: netip.MustParseAddrPort("10.0.0.3:80"), Flags: flags, Seq: 1000, Window: 1000, WindowScale: -1}))
			case k < 83:
				now = now.Add(time.Duration(rng.IntN(20000)) * time.Millisecond)
			case k < 88:
				// After a flush, 40 new flows of which 36 are refreshed 25 s later: at
				// 31 s every queued item is due, but most entries live on (the sweep
				// that removes few).
				for _, ct := range both {
					ct.Flush()
				}
				burst := func(n int) {
					for i := range n {
						send(BuildUDP(netip.AddrPortFrom(src, uint16(5000+i)), netip.MustParseAddrPort("10.0.0.2:53"), nil))
					}
				}
				burst(40)
				now = now.Add(25 * time.Second)
				burst(36)
				now = now.Add(6 * time.Second)
				send(BuildUDP(netip.AddrPortFrom(src, 999), netip.MustParseAddrPort("10.0.0.2:53"), nil))
			case k < 95:
				now = now.Add(time.Duration(100+rng.IntN(200)) * time.Second) // past most or all timeouts
				// A packet makes the tables collect (both at the same moment).
				send(BuildUDP(netip.AddrPortFrom(src, 999), netip.MustParseAddrPort("10.0.0.2:53"), nil))
			case k < 99:
				port := uint16(1000 + rng.IntN(600))
				for _, ct := range both {
					ct.Delete(CtFilter{Proto: netfilter.ProtoUDP, OrigSrcPort: port})
				}
			default:
				for _, ct := range both {
					ct.Flush()
				}
			}
			a, b := pops.Entries(), sweep.Entries()
			if !slices.Equal(a, b) {
				t.Fatalf("seed %d step %d: entries differ:\npops  %v\nsweep %v", seed, step, a, b)
			}
			if pops.table.len() != sweep.table.len() {
				t.Fatalf("seed %d step %d: %d tuples mapped, %d with sweeps", seed, step, pops.table.len(), sweep.table.len())
			}
			for _, tu := range tuples[max(0, len(tuples)-50):] {
				ra, oka := pops.table.get(tu)
				rb, okb := sweep.table.get(tu)
				if oka != okb || oka && (ra.c.ID != rb.c.ID || ra.reply != rb.reply) {
					t.Fatalf("seed %d step %d: %v maps to %v %v, with sweeps %v %v", seed, step, tu, ra, oka, rb, okb)
				}
			}
			checkExpiryQueue(t, pops)
			checkExpiryQueue(t, sweep)
			if t.Failed() {
				t.Fatalf("seed %d step %d", seed, step)
			}
		}
		if pops.sweepFew+pops.sweepRebuilt != 0 || sweep.sweepFew == 0 || sweep.sweepRebuilt == 0 {
			t.Fatalf("seed %d: sweeps (few, rebuilt) %d, %d without; %d, %d with", seed, pops.sweepFew, pops.sweepRebuilt, sweep.sweepFew, sweep.sweepRebuilt)
		}
	}
}

// BenchmarkConntrackExpireAll measures one collection of a table whose every entry has
// expired (the clock stepped past their timeouts, as a test's Advance does), per entry:
// popped item by item (pops) or swept (sweep, what gcLocked does from ctSweepMin items).
//
//	go test ./netsim -run '^$' -bench ConntrackExpireAll
func BenchmarkConntrackExpireAll(b *testing.B) {
	const n = 50000
	for _, mode := range []string{"pops", "sweep"} {
		b.Run("collect="+mode, func(b *testing.B) {
			now := Epoch
			ct := NewConntrack(func() time.Time { return now }, ConntrackSettings{})
			if mode == "pops" {
				ct.sweepMin = math.MaxInt
			}
			pks := make([]*Packet, n)
			for i := range pks {
				src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), uint16(1024+i%50000))
				pks[i], _ = ParsePacket(BuildUDP(src, netip.MustParseAddrPort("10.96.0.10:53"), nil))
			}
			trigger, _ := ParsePacket(BuildUDP(netip.MustParseAddrPort("10.1.0.1:999"), netip.MustParseAddrPort("10.96.0.10:53"), nil))
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				for _, pk := range pks {
					if r := ct.in(pk, now); r.isNew {
						ct.confirm(r.conn)
					}
				}
				now = now.Add(time.Hour)
				runtime.GC() // the setup's garbage is not the collection's
				b.StartTimer()
				ct.in(trigger, now) // collects all n entries
				b.StopTimer()
				ct.Flush()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/entry")
		})
	}
}
