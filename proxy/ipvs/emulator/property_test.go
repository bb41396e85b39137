package emulator

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/ipvs"

	"pgregory.net/rapid"
)

// TestModelInvariants drives a service through random control-plane changes, packets
// and time, and checks after every step what must always hold:
//   - each destination's ActiveConn/InActConn/PersistConn equal the live entries bound
//     to it (no counters were overridden), and its reference count covers those entries
//     and the lblc/lblcr cache entries;
//   - the list order is "most recently (re)added first";
//   - OVERLOAD is never set without an upper threshold;
//   - a destination chosen by the scheduler had weight > 0 and no OVERLOAD (lblc may
//     keep a cached OVERLOADed dest), one chosen by a template was in the list.
func TestModelInvariants(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		clock := NewManualClock()
		sys := DefaultSysctls()
		sys.ExpireNodestConn = rapid.Bool().Draw(rt, "expire_nodest_conn")
		sys.ConnReuseMode = rapid.IntRange(0, 1).Draw(rt, "conn_reuse_mode")
		sys.ExpireQuiescentTemplate = rapid.Bool().Draw(rt, "expire_quiescent_template")
		m := MustNew(Config{Clock: clock, Seed: 3, Sysctls: &sys, MHTableIndex: 8})
		sched := rapid.SampledFrom(ipvs.Schedulers()).Draw(rt, "scheduler")
		proto := rapid.SampledFrom([]string{"t", "u"}).Draw(rt, "protocol")
		persist := rapid.Bool().Draw(rt, "persistent")
		svc := "-" + proto + " 10.0.0.1:80"
		svcCmd := "-A " + svc + " -s " + sched
		if persist {
			svcCmd += " -p 120"
		}
		run := func(l string) error { return m.Exec(strings.Fields(l), nil) }
		if err := run(svcCmd); err != nil {
			rt.Fatal(err)
		}
		p := netfilter.ProtoTCP
		if proto == "u" {
			p = netfilter.ProtoUDP
		}
		addedAt := map[string]int{} // destination -> step of its last (re)add
		step := 0
		n := rapid.IntRange(1, 60).Draw(rt, "steps")
		for ; step < n; step++ {
			op := rapid.IntRange(0, 8).Draw(rt, "op")
			dst := fmt.Sprintf("10.1.0.%d:80", rapid.IntRange(1, 4).Draw(rt, "dest"))
			switch op {
			case 0:
				w := rapid.IntRange(0, 3).Draw(rt, "weight")
				x := rapid.IntRange(0, 3).Draw(rt, "uthreshold")
				if run(fmt.Sprintf("-a %s -r %s -m -w %d -x %d", svc, dst, w, x)) == nil {
					addedAt[dst] = step
				}
			case 1:
				w := rapid.IntRange(0, 3).Draw(rt, "weight")
				_ = run(fmt.Sprintf("-e %s -r %s -m -w %d", svc, dst, w))
			case 2:
				if run(fmt.Sprintf("-d %s -r %s", svc, dst)) == nil {
					delete(addedAt, dst)
				}
			case 3, 4, 5:
				client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(rapid.IntRange(1, 3).Draw(rt, "client"))}),
					uint16(1000+rapid.IntRange(0, 3).Draw(rt, "port")))
				flags := []uint8{netfilter.TCPSyn, netfilter.TCPAck, netfilter.TCPFin | netfilter.TCPAck, netfilter.TCPRst}[rapid.IntRange(0, 3).Draw(rt, "flags")]
				pkt := Packet{Protocol: p, Src: client, Dst: netip.MustParseAddrPort("10.0.0.1:80"), TCPFlags: flags}
				before := destView(m)
				var d Decision
				if op == 5 {
					pkt.Src, pkt.Dst = netip.MustParseAddrPort(dst), client
					d = m.Out(pkt)
				} else {
					d = m.In(pkt)
				}
				if d.Verdict == VerdictForward && d.New {
					v, ok := before[d.Dest.String()]
					switch {
					case !ok:
						rt.Fatalf("step %d: new connection to %s, not in the list", step, d.Dest)
					case d.Via == ViaScheduler && (v.weight <= 0 || (v.overload && sched != "lblc")):
						rt.Fatalf("step %d: %s chose %s with weight %d overload %v", step, sched, d.Dest, v.weight, v.overload)
					}
				}
			case 6:
				clock.Advance(time.Duration(rapid.IntRange(0, 400).Draw(rt, "seconds")) * time.Second)
			case 7:
				s := rapid.SampledFrom(ipvs.Schedulers()).Draw(rt, "new scheduler")
				cmd := "-E " + svc + " -s " + s
				if persist {
					cmd += " -p 120"
				}
				if run(cmd) == nil {
					sched = s
				}
			case 8:
				_ = m.ExpireConnection(p, netip.MustParseAddrPort("192.0.2.1:1000"), netip.MustParseAddrPort("10.0.0.1:80"))
			}
			checkInvariants(rt, m, addedAt)
		}
	})
}

type destInfo struct {
	weight   int
	overload bool
}

func destView(m *Model) map[string]destInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	out := map[string]destInfo{}
	for _, s := range m.services {
		for _, d := range s.dests {
			out[d.addrPort().String()] = destInfo{d.weight, d.overload}
		}
	}
	return out
}

func checkInvariants(rt *rapid.T, m *Model, addedAt map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	all := map[*dest]bool{}
	for _, s := range m.services {
		for _, d := range s.dests {
			all[d] = true
		}
		// list order: most recently (re)added first
		var want []string
		for a := range addedAt {
			want = append(want, a)
		}
		sort.Slice(want, func(i, j int) bool { return addedAt[want[i]] > addedAt[want[j]] })
		var got []string
		for _, d := range s.dests {
			got = append(got, d.addrPort().String())
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			rt.Fatalf("list order %v, want %v", got, want)
		}
	}
	for _, d := range m.trash {
		all[d] = true
	}
	type cnt struct{ a, i, p, refs int }
	counts := map[*dest]*cnt{}
	for d := range all {
		counts[d] = &cnt{}
	}
	for _, c := range m.allConns() {
		if c.dest == nil {
			continue
		}
		k := counts[c.dest]
		if k == nil {
			rt.Fatalf("entry %s bound to a destination that is neither listed nor in the trash", c.describe())
		}
		k.refs++
		switch {
		case c.template:
			k.p++
		case c.inactive:
			k.i++
		default:
			k.a++
		}
	}
	for _, s := range m.services {
		switch sc := s.sched.(type) {
		case *lblcSched:
			for _, b := range sc.tbl.buckets {
				for _, e := range b {
					if k := counts[e.dest]; k != nil {
						k.refs++
					}
				}
			}
		case *lblcrSched:
			for _, b := range sc.tbl.buckets {
				for _, e := range b {
					for _, d := range e.set {
						if k := counts[d]; k != nil {
							k.refs++
						}
					}
				}
			}
		}
	}
	for d, k := range counts {
		if d.active != k.a || d.inactive != k.i || d.persist != k.p {
			rt.Fatalf("%s: counters %d/%d/%d, entries %d/%d/%d", d.addrPort(), d.active, d.inactive, d.persist, k.a, k.i, k.p)
		}
		if d.refs != k.refs {
			rt.Fatalf("%s: refs %d, want %d", d.addrPort(), d.refs, k.refs)
		}
		if d.uThresh == 0 && d.overload {
			rt.Fatalf("%s: OVERLOAD without an upper threshold", d.addrPort())
		}
	}
}
