package netsim

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// TestConntrackExpiryAgainstModel drives a table with random UDP traffic (new flows,
// refreshes, replies that make a flow a 120 s stream), random steps of the clock and
// random deletions, and checks after every step that the live entries are exactly those
// of a model that computes each flow's deadline by itself; TCP flows closed by RST (their
// timeout shrinks below the one they were queued with) and reopened by SYN run beside
// them. It checks the expiry queue's bookkeeping too: a heap; one item per entry in the
// table; items of removed entries counted, and never more than half the queue once past
// the rebuild's threshold.
func TestConntrackExpiryAgainstModel(t *testing.T) {
	maxDead := 0
	for seed := uint64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 24))
		now := Epoch
		ct := NewConntrack(func() time.Time { return now }, ConntrackSettings{})
		src := netip.MustParseAddr("10.0.0.1")
		dst := netip.MustParseAddrPort("10.0.0.2:53")
		type flow struct {
			deadline time.Time
			replied  bool
		}
		model := map[uint16]*flow{} // UDP flows by source port
		udp := func(port uint16, reply bool) {
			a, b := netip.AddrPortFrom(src, port), dst
			if reply {
				a, b = b, a
			}
			pk, _ := ParsePacket(BuildUDP(a, b, nil))
			r := ct.in(pk, now)
			if r.isNew && !ct.confirm(r.conn) {
				t.Fatalf("seed %d: confirm failed", seed)
			}
			f := model[port]
			if f == nil || !now.Before(f.deadline) {
				if reply {
					return // a reply without a live flow is a new flow the other way: not modelled
				}
				f = &flow{}
				model[port] = f
			}
			f.replied = f.replied || reply
			f.deadline = now.Add(30 * time.Second)
			if f.replied {
				f.deadline = now.Add(120 * time.Second)
			}
		}
		tcp := func(port uint16, flags uint8) {
			pk, _ := ParsePacket(BuildTCP(TCPSegment{Src: netip.AddrPortFrom(src, port), Dst: netip.MustParseAddrPort("10.0.0.3:80"), Flags: flags, Seq: 1000, Window: 1000, WindowScale: -1}))
			if r := ct.in(pk, now); r.isNew {
				ct.confirm(r.conn)
			}
		}
		for step := 0; step < 2000; step++ {
			switch k := rng.IntN(100); {
			case k < 45:
				udp(uint16(1000+rng.IntN(400)), false)
			case k < 60:
				port := uint16(1000 + rng.IntN(400))
				if f := model[port]; f != nil && now.Before(f.deadline) {
					udp(port, true)
				}
			case k < 75:
				// SYN (120 s), then maybe RST (CLOSE, 10 s): the entry stays queued
				// with its SYN's deadline and is removed by the lookup of a later
				// packet, or by collection.
				port := uint16(20000 + rng.IntN(8))
				if rng.IntN(2) == 0 {
					tcp(port, netfilter.TCPSyn)
				} else {
					tcp(port, netfilter.TCPRst)
				}
			case k < 94:
				now = now.Add(time.Duration(rng.IntN(20000)) * time.Millisecond)
			case k < 95:
				// A burst of flows closed 10 s after their SYN and reopened: their
				// entries are removed by lookups, their items left in the queue.
				n := 50 + rng.IntN(300)
				for i := range n {
					tcp(uint16(30000+i), netfilter.TCPSyn)
					tcp(uint16(30000+i), netfilter.TCPRst)
				}
				now = now.Add(11 * time.Second)
				for i := range n {
					tcp(uint16(30000+i), netfilter.TCPSyn)
				}
			case k < 99:
				port := uint16(1000 + rng.IntN(400))
				ct.Delete(CtFilter{Proto: netfilter.ProtoUDP, OrigSrcPort: port})
				delete(model, port)
			default:
				ct.Flush()
				clear(model)
			}
			// The live UDP entries are the model's.
			var got, want []uint16
			for _, c := range ct.List(CtFilter{Proto: netfilter.ProtoUDP}) {
				got = append(got, c.Orig.SrcPort)
			}
			for port, f := range model {
				if now.Before(f.deadline) {
					want = append(want, port)
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d step %d: live UDP flows %v, model %v", seed, step, got, want)
			}
			checkExpiryQueue(t, ct)
			maxDead = max(maxDead, ct.expDead)
			if t.Failed() {
				t.Fatalf("seed %d step %d", seed, step)
			}
		}
	}
	if maxDead <= 64 {
		t.Errorf("at most %d items of removed entries at once: the queue's rebuild was not exercised", maxDead)
	}
}

// checkExpiryQueue checks the expiry queue's invariants.
func checkExpiryQueue(t *testing.T, ct *Conntrack) {
	t.Helper()
	q := ct.expq
	for i := 1; i < len(q); i++ {
		if q[i].at < q[(i-1)/2].at {
			t.Errorf("queue is not a heap at %d", i)
		}
	}
	items := map[*Conn]int{}
	dead := 0
	for _, it := range q {
		if it.c.queued {
			items[it.c]++
		} else {
			dead++
		}
	}
	if dead != ct.expDead {
		t.Errorf("%d items of removed entries, counted %d", dead, ct.expDead)
	}
	if dead > 64 && 2*dead > len(q) {
		t.Errorf("%d items of removed entries in a queue of %d", dead, len(q))
	}
	conns := ct.table.conns()
	for _, c := range conns {
		if items[c] != 1 {
			t.Errorf("entry %s has %d live queue items, want 1", c, items[c])
		}
	}
	if len(items) != len(conns) {
		t.Errorf("%d entries queued, %d in the table", len(items), len(conns))
	}
	if len(q) > 0 && ct.gcAt != q[0].at {
		t.Errorf("gcAt %d, queue head %d", ct.gcAt, q[0].at)
	}
}
