package emulator

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator/emutest"

	"pgregory.net/rapid"
)

// dryStaticEnv is a StaticEnv whose packets are what-ifs.
type dryStaticEnv struct{ *StaticEnv }

func (dryStaticEnv) DryRun() bool { return true }

// genCacheRule is genRule with the matches a flow-cached traversal may have evaluated
// (pureMatch) and, of those it may not have, only the ones whose outcome a replay
// would get wrong with the packets TestFlowCacheSameAsTraversal draws: statistic with a
// probability that draws from the random source, nth every 2 or 3 packets, --ctexpire
// with a range that some of the packets' CT.Expire values are in and others are not.
func genCacheRule(t *rapid.T, f Family, plan chainPlan) *Rule {
	return genRuleKeeping(t, f, plan, func(m Match) bool {
		c, ok := m.(*ConntrackMatch)
		if ok && c.Expire != nil {
			c.Expire.Min, c.Expire.Max = 60, 100000
		}
		return ok
	})
}

// genRuleKeeping is genRule with only its pure matches (pureMatch), its statistic
// matches (nth every 2 or 3 packets; random with a probability that draws) and the
// matches keep keeps (keep may adjust them).
func genRuleKeeping(t *rapid.T, f Family, plan chainPlan, keep func(Match) bool) *Rule {
	r := genRule(t, f, plan)
	var ms []Match
	for _, m := range r.Matches {
		if s, ok := m.(*StatisticMatch); ok {
			if s.Nth {
				s.Every = rapid.Uint32Range(2, 3).Draw(t, "every")
				s.Packet = rapid.Uint32Range(0, s.Every-1).Draw(t, "packet")
			} else {
				s.Probability = rapid.SampledFrom([]uint32{1 << 29, 1 << 30, 3 << 29}).Draw(t, "probability")
			}
		} else if !keep(m) && !pureMatch(m) {
			continue
		}
		ms = append(ms, m)
	}
	r.Matches = ms
	return r
}

// genCacheRuleset draws the text of a ruleset for TestFlowCacheSameAsTraversal: random
// rules of genCacheRule, random rules with any match, or kube-proxy's layout.
func genCacheRuleset(t *rapid.T, f Family) []byte {
	kind := 0
	if f == IPv4 {
		kind = rapid.IntRange(0, 2).Draw(t, "ruleset kind")
	} else {
		kind = rapid.IntRange(0, 1).Draw(t, "ruleset kind")
	}
	switch kind {
	case 0:
		return genRulesetWith(f, 20, genCacheRule).Draw(t, "cache ruleset").Save(false)
	case 1:
		return genRuleset(f).Draw(t, "ruleset").Save(false)
	}
	return emutest.KubeDump(rapid.IntRange(1, 30).Draw(t, "services"), rapid.IntRange(1, 4).Draw(t, "endpoints"))
}

// describeVerdict renders everything of a TableVerdict (a NAT's rule by its text: the
// two emulators have their own Rules).
func describeVerdict(v TableVerdict) string {
	s := fmt.Sprintf("%s %q %v %q has NAT %t", v.Verdict, v.RejectWith, v.Reject, v.Reason, v.HasNAT)
	if v.HasNAT {
		n := v.NAT
		s += fmt.Sprintf(" %v %v %v %d %d %t %t %t %s %s", n.Kind, n.Addr, n.AddrMax, n.Port, n.PortMax, n.Random, n.RandomFully, n.Persistent, n.Hook, n.Chain)
		if n.Rule != nil {
			s += " " + n.Rule.Text(n.Chain)
		}
	}
	return s
}

// TestFlowCacheSameAsTraversal: RunTable with the flow cache gives what it gives
// without (every packet traversing its table): for generated rulesets (genCacheRule's,
// any match, kube-proxy's layout) and sequences of packets drawn from a small pool (so
// that they repeat, with another Len and CT.Expire, or a changed field), through every
// table at every hook, with restores (whole, and one table with --noflush), Interpret
// switched on and off, and dry runs between them: the same verdicts, NAT, reasons,
// packets (marks, conntrack state), draws from the random source, xt_recent lists and
// nfacct counters, and every rule's and policy's counters (iptables-save -c).
func TestFlowCacheSameAsTraversal(t *testing.T) {
	var hits uint64
	hooks := []netfilter.Hook{netfilter.Prerouting, netfilter.Input, netfilter.Forward, netfilter.Output, netfilter.Postrouting}
	for _, f := range []Family{IPv4, IPv6} {
		t.Run(f.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				text := genCacheRuleset(t, f)
				es, envs := restoredTwins(t, f, text)
				es[1].FlowCache(false)
				// The pool: packets, each with the table and hook it meets.
				type entry struct {
					p     Packet
					table string
					hook  netfilter.Hook
				}
				var pool []entry
				for n := rapid.IntRange(1, 5).Draw(t, "pool"); n > 0; n-- {
					p := genPacket(t, f, es[0].Ruleset())
					if rapid.Bool().Draw(t, "ct") {
						p.CT.Reply = rapid.Bool().Draw(t, "reply")
						p.CT.Status = netfilter.CtStatus(rapid.Uint16Range(0, 15).Draw(t, "status"))
						p.CT.Orig = netfilter.Tuple{Proto: p.Proto, Src: p.Src, Dst: p.Dst, SrcPort: p.SrcPort, DstPort: p.DstPort}
						p.CT.ReplyTuple = p.CT.Orig.Invert()
					}
					h := rapid.SampledFrom(hooks).Draw(t, "hook")
					pool = append(pool, entry{p, drawTable(t, es[0], h, true), h})
				}
				compare := func(when string) {
					if a, b := string(es[0].SaveCounters()), string(es[1].SaveCounters()); a != b {
						t.Fatalf("%s: counters differ:\ncached:\n%s\ntraversed:\n%s", when, a, b)
					}
					if a, b := fmt.Sprint(es[0].RecentLists()), fmt.Sprint(es[1].RecentLists()); a != b {
						t.Fatalf("%s: xt_recent lists differ: %s, %s", when, a, b)
					}
				}
				steps := rapid.IntRange(30, 100).Draw(t, "steps")
				for step := 0; step < steps; step++ {
					// (rapid draws the ends of a range more often than the middle.)
					switch rapid.IntRange(0, 59).Draw(t, "action") {
					case 30, 31:
						compare(fmt.Sprintf("step %d, before a restore", step))
						next := genCacheRuleset(t, f)
						opts := RestoreOptions{}
						if rapid.Bool().Draw(t, "one table") {
							rs, err := Load(next, f, "next")
							if err != nil {
								t.Fatalf("load: %v\n%s", err, next)
							}
							if len(rs.Ruleset().Tables) > 0 {
								tb := rapid.SampledFrom(rs.Ruleset().Tables).Draw(t, "table")
								next, opts.NoFlush = rs.Ruleset().Save(false, tb.Name), true
							}
						}
						var errs [2]string
						for i, e := range es {
							errs[i] = fmt.Sprint(e.RestoreText(next, opts))
						}
						if errs[0] != errs[1] {
							t.Fatalf("restore: %s, %s", errs[0], errs[1])
						}
					case 45:
						on := rapid.Bool().Draw(t, "interpret")
						for _, e := range es {
							e.Interpret(on)
						}
					default:
						pe := pool[rapid.IntRange(0, len(pool)-1).Draw(t, "packet")]
						p0, table, h := pe.p, pe.table, pe.hook
						if rapid.IntRange(0, 19).Draw(t, "elsewhere") == 10 {
							h = rapid.SampledFrom(hooks).Draw(t, "hook")
							table = rapid.SampledFrom(TablesAt(h)).Draw(t, "table")
						}
						p0.Len = rapid.SampledFrom([]int{0, 40, 60, 1500, 65535}).Draw(t, "len")
						p0.CT.Expire = time.Duration(rapid.SampledFrom([]int{0, 1, 59, 120, 86400}).Draw(t, "expire")) * time.Second
						switch rapid.IntRange(0, 19).Draw(t, "change") {
						case 10:
							p0.TCPFlags = rapid.Uint8().Draw(t, "flags")
						case 11:
							p0.Mark ^= 0x4000
						case 12:
							p0.CT.State = rapid.SampledFrom([]netfilter.CtState{netfilter.CtNew, netfilter.CtEstablished, netfilter.CtRelated, netfilter.CtInvalid, netfilter.CtUntracked}).Draw(t, "state")
						case 13:
							p0.CT.Mark ^= 1
						}
						dry := rapid.IntRange(0, 19).Draw(t, "dry") == 10
						got := runTwins(es, envs, dry, table, h, p0)
						if got[0] != got[1] {
							t.Fatalf("step %d: %s %s, packet %+v:\ncached:    %s\ntraversed: %s", step, table, h, p0, got[0], got[1])
						}
						if step%8 == 0 {
							compare(fmt.Sprintf("step %d", step))
						}
					}
				}
				compare("end")
				for _, name := range []string{"acct", "a", "b"} {
					a, aok := es[0].Nfacct(name)
					b, bok := es[1].Nfacct(name)
					if a != b || aok != bok {
						t.Fatalf("nfacct %s: %v %t, %v %t", name, a, aok, b, bok)
					}
				}
				hits += es[0].flowHits
				if es[1].flowHits != 0 {
					t.Fatalf("the cache is off, yet it answered %d packets", es[1].flowHits)
				}
			})
		})
	}
	if hits == 0 {
		t.Fatal("the flow cache answered no packet: the property tested nothing")
	}
	t.Logf("%d packets answered by the flow cache", hits)
}

// TestFlowCacheEstablished: kube-proxy's filter FORWARD for an established stream's
// segments is answered by the flow cache from the third on (the first is only noted,
// the second fills the entry), with the counters a traversal of each would give
// (KUBE-FORWARD's conntrack rule, FORWARD's jump), bytes included; after a restore of
// the same rules the next segment traverses and fills again.
func TestFlowCacheEstablished(t *testing.T) {
	data := emutest.KubeDump(20, 3)
	es := loadedTwins(t, data)
	es[1].FlowCache(false)
	env := NewStaticEnv(1)
	seg := Packet{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.1.2.3"),
		SrcPort: 40000, DstPort: 80, TCPFlags: netfilter.TCPAck, TTL: 63, InIface: "eth0", OutIface: "veth1",
		CT: Conntrack{State: netfilter.CtEstablished, Status: netfilter.StatusConfirmed | netfilter.StatusSeenReply}}
	run := func(n int) {
		for i := 0; i < n; i++ {
			for _, e := range es {
				p := seg
				p.Len = 52 + i%1449
				p.CT.Expire = time.Duration(432000-i) * time.Second
				if v := e.RunTable(env, TableFilter, netfilter.Forward, &p, nil); v.Decided() {
					t.Fatalf("segment %d: %+v", i, v)
				}
			}
		}
	}
	run(100)
	if es[0].flowHits != 98 {
		t.Fatalf("the cache answered %d of 100 segments, want 98", es[0].flowHits)
	}
	if err := es[0].RestoreText(data, RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := es[1].RestoreText(data, RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	run(10)
	if es[0].flowHits != 98+9 {
		t.Fatalf("after a restore the cache answered %d segments in all, want 107", es[0].flowHits)
	}
	a, b := string(es[0].SaveCounters("filter")), string(es[1].SaveCounters("filter"))
	if a != b {
		t.Fatalf("counters differ:\ncached:\n%s\ntraversed:\n%s", a, b)
	}
}

// BenchmarkRunTableForward: one packet through kube-proxy's filter FORWARD by RunTable
// (the netsim handler's call), with the flow cache and without: "established" is one
// stream's segments (the same key, Len and CT.Expire changing: hits), "new" a new
// connection's first packet each time (another source port: misses, each filling an
// entry).
func BenchmarkRunTableForward(b *testing.B) {
	e, err := Load(emutest.KubeDump(10, 3), IPv4, "bench")
	if err != nil {
		b.Fatal(err)
	}
	env := NewStaticEnv(1)
	seg := Packet{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.1.2.3"),
		SrcPort: 40000, DstPort: 80, TCPFlags: netfilter.TCPAck, TTL: 63, InIface: "eth0", OutIface: "veth1",
		CT: Conntrack{State: netfilter.CtEstablished, Status: netfilter.StatusConfirmed | netfilter.StatusSeenReply}}
	seg.CT.Orig = netfilter.Tuple{Proto: seg.Proto, Src: seg.Src, Dst: seg.Dst, SrcPort: seg.SrcPort, DstPort: seg.DstPort}
	seg.CT.ReplyTuple = seg.CT.Orig.Invert()
	for _, kind := range []string{"established", "new"} {
		for _, cache := range []bool{true, false} {
			b.Run(fmt.Sprintf("kind=%s/cache=%t", kind, cache), func(b *testing.B) {
				e.FlowCache(cache)
				b.ReportAllocs()
				p := new(Packet) // the handler's own, as in netsim
				for i := 0; b.Loop(); i++ {
					*p = seg
					p.Len = 52 + i%1449
					p.CT.Expire = time.Duration(432000-i%1000) * time.Second
					if kind == "new" {
						p.SrcPort = uint16(1024 + i%60000)
						p.TCPFlags, p.CT.State, p.CT.Status = netfilter.TCPSyn, netfilter.CtNew, 0
						p.CT.Orig.SrcPort, p.CT.ReplyTuple.DstPort = p.SrcPort, p.SrcPort
					}
					if v := e.RunTable(env, TableFilter, netfilter.Forward, p, nil); v.Decided() {
						b.Fatalf("%+v", v)
					}
				}
			})
		}
	}
}

// drawTable draws a table at hook h, mostly one e has (one it lacks accepts at once);
// with absent, one in ten draws may be any of the hook's tables.
func drawTable(t *rapid.T, e *Emulator, h netfilter.Hook, absent bool) string {
	tables := TablesAt(h)
	var has []string
	for _, name := range tables {
		if e.HasTable(name) {
			has = append(has, name)
		}
	}
	if len(has) > 0 && (!absent || rapid.IntRange(0, 9).Draw(t, "absent table") != 5) {
		tables = has
	}
	return rapid.SampledFrom(tables).Draw(t, "table")
}

// runTwins runs table at hook h on a copy of p0 in both twins (cached, traversed),
// as what-ifs when dry, and returns what each answered: the verdict, the packet as
// the table left it and the next number of its random source.
func runTwins(es [2]*Emulator, envs [2]*StaticEnv, dry bool, table string, h netfilter.Hook, p0 Packet) [2]string {
	var got [2]string
	for i, e := range es {
		p := p0
		var env Env = envs[i]
		if dry {
			env = dryStaticEnv{envs[i]}
		}
		v := e.RunTable(env, table, h, &p, nil)
		got[i] = fmt.Sprintf("%s|%+v|next draw %d", describeVerdict(v), p, envs[i].Rand.Uint64())
	}
	return got
}
