package netsim

import (
	"net/netip"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// BenchmarkCtTableGrowth puts the two tuples of 50,000 entries (a probe benchmark's
// flows between two clock jumps) into a table, per tuple: a new table that grows as
// they come (grow), one sized for them beforehand whose fresh slots the puts touch
// first (presized), and one whose slots were written before the timer started
// (pretouched). grow - presized is the growth's re-insertion; presized - pretouched the
// first touch of fresh memory.
//
//	go test ./netsim -run '^$' -bench CtTableGrowth
func BenchmarkCtTableGrowth(b *testing.B) {
	const n = 50000
	tus := make([]netfilter.Tuple, 0, 2*n)
	for i := range n {
		t := netfilter.Tuple{Proto: netfilter.ProtoTCP, Src: netip.AddrFrom4([4]byte{10, 244, 0, 2}), Dst: netip.AddrFrom4([4]byte{10, 96, 0, 10}),
			SrcPort: uint16(1024 + i), DstPort: 80}
		r := t.Invert()
		r.Src = netip.AddrFrom4([4]byte{10, 244, 1, byte(2 + i%3)})
		tus = append(tus, t, r)
	}
	c := &Conn{}
	for _, mode := range []string{"grow", "presized", "pretouched"} {
		b.Run("table="+mode, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				m := newCtTable()
				if mode != "grow" {
					m.resize(262144) // what 100,000 tuples grow to
					if mode == "pretouched" {
						for i := range m.slots {
							m.slots[i].reply = true
						}
						clear(m.slots)
					}
				}
				b.StartTimer()
				for i, t := range tus {
					m.put(t, ctRef{c: c, reply: i%2 == 1})
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(tus)), "ns/tuple")
		})
	}
}

// BenchmarkConntrackConfirm confirms new entries (a probe's: a TCP tuple DNATed to a
// backend) into a table that already holds 30,000 entries, sized and touched before the
// timer starts, per entry: the common way (path=one-probe: ctTable.putNew4, one probe of
// the table per tuple) and with oneProbeOff (path=lookups: each tuple looked up, then
// put). At most 20,000 entries are confirmed a run, so the table does not grow.
//
//	go test ./netsim -run '^$' -bench ConntrackConfirm -benchtime 20000x
func BenchmarkConntrackConfirm(b *testing.B) {
	const base, most = 30000, 20000
	entry := func(i int) *Conn {
		t := netfilter.Tuple{Proto: netfilter.ProtoTCP, Src: netip.AddrFrom4([4]byte{10, 244, byte(i >> 16), byte(i >> 8)}), Dst: netip.AddrFrom4([4]byte{10, 96, 0, 10}),
			SrcPort: uint16(i), DstPort: 80}
		r := t.Invert()
		r.Src, r.SrcPort = netip.AddrFrom4([4]byte{10, 244, 1, byte(2 + i%3)}), 9376
		return &Conn{Orig: t, Reply: r, Expires: Epoch.Add(time.Hour)}
	}
	for _, path := range []string{"one-probe", "lookups"} {
		b.Run("path="+path, func(b *testing.B) {
			if b.N > most {
				b.Fatalf("at most %d entries a run (-benchtime %dx)", most, most)
			}
			ct := NewConntrack(func() time.Time { return Epoch }, ConntrackSettings{})
			ct.oneProbeOff = path == "lookups"
			ct.table.resize(262144)
			for i := range base {
				ct.confirmKernelLocked(entry(i), Epoch, netfilter.KernelVersion{})
			}
			conns := make([]*Conn, b.N)
			for i := range conns {
				conns[i] = entry(base + i)
			}
			b.ResetTimer()
			for _, c := range conns {
				if r, _ := ct.confirmKernelLocked(c, Epoch, netfilter.KernelVersion{}); r != ctInserted {
					b.Fatal("not inserted")
				}
			}
		})
	}
}
