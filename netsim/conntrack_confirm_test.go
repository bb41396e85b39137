package netsim

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/netfilter"
)

// TestConfirmOneProbeAgainstLookups runs two tables on the same random traffic: one
// confirms new entries the common way (ctTable.putNew4: each tuple probed once), the
// other with oneProbeOff (each tuple looked up, then put, as before). The traffic has
// few addresses and ports, so that tuples clash (two packets of one flow in flight
// together, an entry DNATed onto another's reply tuple, a tuple that is its own
// inverse), entries expire, and tables grow from empty through every resize. After every
// step both give the same confirmation results and hold the same slots (key, entry ID,
// direction, in the same places), counts, statistics and queues.
func TestConfirmOneProbeAgainstLookups(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		now := Epoch
		clock := func() time.Time { return now }
		one := NewConntrack(clock, ConntrackSettings{})
		old := NewConntrack(clock, ConntrackSettings{})
		old.oneProbeOff = true
		both := []*Conntrack{one, old}
		addr := func(label string) netip.Addr {
			return netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + rapid.IntRange(0, 3).Draw(rt, label))})
		}
		kernel := netfilter.KernelVersion{Major: 6, Minor: 1}
		if rapid.Bool().Draw(rt, "oldKernel") {
			kernel = netfilter.KernelVersion{Major: 5, Minor: 4}
		}
		steps := rapid.IntRange(1, 400).Draw(rt, "steps")
		for step := range steps {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0:
				now = now.Add(time.Duration(rapid.IntRange(0, 200).Draw(rt, "advance")) * time.Second)
				continue
			case 1:
				if rapid.IntRange(0, 20).Draw(rt, "flush") == 0 {
					for _, ct := range both {
						ct.Flush()
					}
					continue
				}
			}
			src := netip.AddrPortFrom(addr("src"), uint16(1000+rapid.IntRange(0, 7).Draw(rt, "sport")))
			dst := netip.AddrPortFrom(addr("dst"), uint16(1000+rapid.IntRange(0, 7).Draw(rt, "dport")))
			if rapid.IntRange(0, 15).Draw(rt, "self") == 0 {
				dst = src // a tuple that is its own inverse
			}
			udp := rapid.Bool().Draw(rt, "udp")
			together := rapid.IntRange(1, 2).Draw(rt, "together") // packets of the flow in flight at once
			var dnat netip.AddrPort
			if rapid.Bool().Draw(rt, "dnat") {
				dnat = netip.AddrPortFrom(addr("to"), uint16(1000+rapid.IntRange(0, 7).Draw(rt, "toport")))
			}
			raw := BuildUDP(src, dst, nil)
			if !udp {
				raw = BuildTCP(TCPSegment{Src: src, Dst: dst, Flags: netfilter.TCPSyn, Seq: 1000, Window: 1000, WindowScale: -1})
			}
			var got [2][]string
			for i, ct := range both {
				var conns []*Conn
				for range together {
					pk, err := ParsePacket(raw)
					if err != nil {
						rt.Fatal(err)
					}
					r := ct.in(pk, now)
					if !r.isNew {
						continue
					}
					if dnat.IsValid() { // as the datapath's NAT step leaves it before confirmation
						r.conn.Reply.Src, r.conn.Reply.SrcPort = dnat.Addr(), dnat.Port()
					}
					conns = append(conns, r.conn)
				}
				for _, c := range conns {
					ct.mu.Lock()
					res, w := ct.confirmKernelLocked(c, now, kernel)
					ct.mu.Unlock()
					got[i] = append(got[i], fmt.Sprintf("%d->%d", res, w.ID))
				}
			}
			if fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
				rt.Fatalf("step %d: confirmations %v (one probe) vs %v (lookups)", step, got[0], got[1])
			}
			if a, b := dumpCtTable(one), dumpCtTable(old); a != b {
				rt.Fatalf("step %d: tables differ\none probe:\n%s\nlookups:\n%s", step, a, b)
			}
		}
	})
}

// dumpCtTable prints a table's slots, counts, statistics and queue by entry ID.
func dumpCtTable(ct *Conntrack) string {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	m := &ct.table
	s := fmt.Sprintf("slots %d n4 %d v6 %d stats %+v\n", len(m.slots), m.n4, len(m.v6), ct.stats)
	for i, sl := range m.slots {
		if sl.c != nil {
			s += fmt.Sprintf("%d: %x/%x id %d reply %v status %v expires %v\n", i, sl.k.addrs, sl.k.rest, sl.c.ID, sl.reply, sl.c.Status, sl.c.Expires.Sub(Epoch))
		}
	}
	for _, it := range ct.expq {
		s += fmt.Sprintf("q %d@%d ", it.c.ID, it.at)
	}
	return s
}
