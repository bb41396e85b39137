package emulator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator/emutest"

	"pgregory.net/rapid"
)

// genWildRule is genRule with the matches a wildcard-cached traversal may have
// evaluated (pure ones, statistic in random mode, addrtype) and, of the others, nth
// (which a cached traversal must not have evaluated), with probabilities that draw.
func genWildRule(t *rapid.T, f Family, plan chainPlan) *Rule {
	return genRuleKeeping(t, f, plan, func(m Match) bool {
		_, ok := m.(*AddrTypeMatch)
		return ok
	})
}

// genFieldRuleset draws the text of a ruleset whose rules each test one packet field
// (or ask the random source or the host) with values from the small domains of
// fieldPacket's packets, in filter and nat chains long enough to be indexed (16 rules
// and more), so that two packets differing in one field often meet a rule that tells
// them apart: a key that leaves out a field the traversal read answers one of them
// wrongly.
func genFieldRuleset(t *rapid.T, f Family) []byte {
	addrs := pktAddrs(f)
	icmp := "-p icmp -m icmp --icmp-type 8"
	if f == IPv6 {
		icmp = "-p ipv6-icmp -m icmp6 --icmpv6-type 128"
	}
	// Prefixes of several lengths: the key holds a destination's longest compared
	// prefix, and a source's comparisons are asked again of each packet.
	lens := []int{8, 16, 24, 31, 32, 32}
	if f == IPv6 {
		lens = []int{16, 64, 120, 127, 128, 128}
	}
	cond := func() string {
		a := rapid.SampledFrom(addrs).Draw(t, "addr")
		bits := rapid.SampledFrom(lens).Draw(t, "prefix")
		switch rapid.IntRange(0, 16).Draw(t, "cond") {
		case 0:
			return "-p tcp -m tcp --sport 1000:1500"
		case 1, 2:
			return fmt.Sprintf("-p tcp -m tcp --dport %d", rapid.IntRange(79, 81).Draw(t, "dport"))
		case 3:
			return fmt.Sprintf("-d %s/%d", a, bits)
		case 4:
			return fmt.Sprintf("-d %s/%d -p tcp -m tcp --dport %d", a, bits, rapid.IntRange(79, 81).Draw(t, "dport"))
		case 5:
			return fmt.Sprintf("-s %s/%d", a, bits)
		case 6:
			return "-p tcp -m tcp --tcp-flags SYN,ACK SYN"
		case 7:
			return icmp
		case 8:
			return "-i eth0"
		case 9:
			return "-o eth1"
		case 10:
			return fmt.Sprintf("-m conntrack --ctorigsrc %s", a)
		case 11:
			return "-m mark --mark 0x1/0x1"
		case 12:
			return "-m statistic --mode random --probability 0.50000000000"
		case 13:
			return "-m addrtype --dst-type LOCAL"
		case 14:
			return "-m conntrack --ctstate NEW"
		case 15:
			return fmt.Sprintf("! -s %s/%d", a, bits)
		}
		return "-p udp -m udp --dport 80"
	}
	var b strings.Builder
	chains := func(table string, builtins []string, targets func(chain string) []string) {
		fmt.Fprintf(&b, "*%s\n", table)
		for _, c := range builtins {
			fmt.Fprintf(&b, ":%s %s [0:0]\n", c, rapid.SampledFrom([]string{"ACCEPT", "ACCEPT", "DROP"}).Draw(t, "policy"))
		}
		b.WriteString(":USER - [0:0]\n")
		for _, c := range append(builtins, "USER") {
			for n := rapid.IntRange(0, 24).Draw(t, "rules"); n > 0; n-- {
				ts := []string{"-j ACCEPT", "-j DROP", "-j RETURN", "-j MARK --set-xmark 0x1/0x1", "-j MARK --set-xmark 0x0/0x1", ""}
				if c != "USER" {
					ts = append(ts, "-j USER", "-g USER")
					ts = append(ts, targets(c)...)
				}
				cd, tg := cond(), rapid.SampledFrom(ts).Draw(t, "target")
				if strings.HasSuffix(tg, ":8080") { // a port needs -p tcp
					switch {
					case strings.Contains(cd, "-p tcp"):
					case strings.Contains(cd, "-p "):
						tg = strings.TrimSuffix(tg, ":8080")
					default:
						cd = "-p tcp " + cd
					}
				}
				fmt.Fprintf(&b, "-A %s %s %s\n", c, cd, tg)
			}
		}
		b.WriteString("COMMIT\n")
	}
	chains("filter", []string{"INPUT", "FORWARD", "OUTPUT"}, func(string) []string {
		return []string{"-j REJECT --reject-with " + map[Family]string{IPv4: "icmp-port-unreachable", IPv6: "icmp6-port-unreachable"}[f]}
	})
	chains("nat", []string{"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"}, func(c string) []string {
		a := rapid.SampledFrom(addrs).Draw(t, "to")
		ta := a.String()
		if f == IPv6 {
			ta = "[" + ta + "]"
		}
		switch c {
		case "PREROUTING", "OUTPUT":
			return []string{"-j DNAT --to-destination " + a.String(), "-j DNAT --to-destination " + ta + ":8080"}
		}
		return []string{"-j SNAT --to-source " + a.String()}
	})
	return []byte(b.String())
}

// fieldPacket draws a packet for genFieldRuleset's rulesets: each field from a small
// domain its rules test.
func fieldPacket(t *rapid.T, f Family) Packet {
	addrs := pktAddrs(f)
	icmp := netfilter.ProtoICMP
	if f == IPv6 {
		icmp = netfilter.ProtoICMPv6
	}
	p := Packet{Proto: rapid.SampledFrom([]uint8{netfilter.ProtoTCP, netfilter.ProtoTCP, netfilter.ProtoUDP, icmp}).Draw(t, "proto"),
		Src: rapid.SampledFrom(addrs).Draw(t, "src"), Dst: rapid.SampledFrom(addrs).Draw(t, "dst"),
		SrcPort: rapid.SampledFrom([]uint16{900, 1200, 1800}).Draw(t, "sport"), DstPort: uint16(rapid.IntRange(79, 81).Draw(t, "dport")),
		TCPFlags: rapid.SampledFrom([]uint8{netfilter.TCPSyn, netfilter.TCPSyn | netfilter.TCPAck, netfilter.TCPAck}).Draw(t, "flags"),
		ICMPType: rapid.SampledFrom([]uint8{0, 8, 128, 129}).Draw(t, "type"), TTL: 64,
		InIface: rapid.SampledFrom([]string{"", "eth0", "eth1"}).Draw(t, "in"), OutIface: rapid.SampledFrom([]string{"", "eth0", "eth1"}).Draw(t, "out"),
		Mark: rapid.Uint32Range(0, 1).Draw(t, "mark"), Len: 60}
	p.CT.State = rapid.SampledFrom([]netfilter.CtState{netfilter.CtNew, netfilter.CtEstablished}).Draw(t, "state")
	if rapid.Bool().Draw(t, "orig") {
		a := rapid.SampledFrom(addrs).Draw(t, "orig src")
		p.CT.Orig = netfilter.Tuple{Proto: p.Proto, Src: a, Dst: p.Dst, SrcPort: p.SrcPort, DstPort: p.DstPort}
		p.CT.ReplyTuple = p.CT.Orig.Invert()
	}
	return p
}

// fieldChange changes one field of p (or none) within fieldPacket's domains.
func fieldChange(t *rapid.T, f Family, p *Packet) {
	addrs := pktAddrs(f)
	switch rapid.IntRange(0, 9).Draw(t, "field") {
	case 0:
		p.SrcPort = rapid.SampledFrom([]uint16{900, 1200, 1800}).Draw(t, "sport")
	case 1:
		p.DstPort = uint16(rapid.IntRange(79, 81).Draw(t, "dport"))
	case 2:
		p.Src = rapid.SampledFrom(addrs).Draw(t, "src")
	case 3:
		p.Dst = rapid.SampledFrom(addrs).Draw(t, "dst")
	case 4:
		p.TCPFlags = rapid.SampledFrom([]uint8{netfilter.TCPSyn, netfilter.TCPSyn | netfilter.TCPAck, netfilter.TCPAck}).Draw(t, "flags")
	case 5:
		p.ICMPType = rapid.SampledFrom([]uint8{0, 8, 128, 129}).Draw(t, "type")
	case 6:
		p.InIface = rapid.SampledFrom([]string{"", "eth0", "eth1"}).Draw(t, "in")
	case 7:
		p.OutIface = rapid.SampledFrom([]string{"", "eth0", "eth1"}).Draw(t, "out")
	case 8:
		if p.CT.Orig.Src.IsValid() {
			p.CT.Orig.Src = rapid.SampledFrom(addrs).Draw(t, "orig src")
		}
	}
}

// TestWildCacheSameAsTraversal: RunTable with the wildcard cache (and the flow cache)
// gives what every packet's full traversal gives, for first packets of new connections
// (each with another source port, as netsim's probes), and packets that differ from them
// in one more field: kube-proxy's layout (1-40 Services of 1-5 endpoints: KUBE-SVC
// chains' random draws, indexed KUBE-SERVICES, the addrtype rule, masquerade marks),
// genWildRule's rulesets and rulesets with any match; through every table at every hook,
// nat included; with restores, the host's local addresses changing (addrtype asks the
// host), dry runs and Interpret between them. Compared after every packet: the verdict,
// NAT and reason, the packet (addresses, ports, marks, conntrack state and status), the
// random source's next draw (so every draw was made with the same probability in the
// same order); every few packets and at the end, every rule's and policy's counters
// (iptables-save -c). The cache must answer packets, some of them along a path with
// draws.
func TestWildCacheSameAsTraversal(t *testing.T) {
	var hits, drawHits uint64
	var kindHits [4]uint64
	hooks := []netfilter.Hook{netfilter.Prerouting, netfilter.Input, netfilter.Forward, netfilter.Output, netfilter.Postrouting}
	for _, f := range []Family{IPv4, IPv6} {
		t.Run(f.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				// kind: 0 genWildRule's, 1 any match, 2 genFieldRuleset's, 3 kube-proxy's.
				kind := rapid.IntRange(0, 3).Draw(t, "ruleset kind")
				if f == IPv6 && kind == 3 {
					kind = 2
				}
				services := 0
				genText := func() []byte {
					switch kind {
					case 0:
						return genRulesetWith(f, 20, genWildRule).Draw(t, "wild ruleset").Save(false)
					case 1:
						return genRuleset(f).Draw(t, "ruleset").Save(false)
					case 2:
						return genFieldRuleset(t, f)
					}
					services = rapid.IntRange(1, 40).Draw(t, "services")
					return emutest.KubeDump(services, rapid.IntRange(1, 5).Draw(t, "endpoints"))
				}
				es, envs := restoredTwins(t, f, genText())
				es[1].FlowCache(false)
				es[1].WildCache(false)
				type entry struct {
					p     Packet
					table string
					hook  netfilter.Hook
				}
				var pool []entry
				for n := rapid.IntRange(1, 4).Draw(t, "pool"); n > 0; n-- {
					var p Packet
					switch kind {
					case 2:
						p = fieldPacket(t, f)
					case 3:
						// A pod's first packet to a ClusterIP (or to an address
						// of the host's, or anywhere).
						p = genPacket(t, f, es[0].Ruleset())
						p.Proto, p.Fragment, p.DstPort = netfilter.ProtoTCP, false, 80
						switch rapid.IntRange(0, 3).Draw(t, "dst kind") {
						case 0, 1:
							p.Dst = netip.MustParseAddr(emutest.ClusterIP(rapid.IntRange(0, services-1).Draw(t, "service")))
						case 2:
							p.Dst = rapid.SampledFrom(pktAddrs(f)).Draw(t, "local")
						}
						p.CT = Conntrack{State: netfilter.CtNew}
					default:
						p = genPacket(t, f, es[0].Ruleset())
						switch rapid.IntRange(0, 3).Draw(t, "dport kind") {
						case 0:
							p.DstPort = 80
						case 1:
							p.DstPort = 81
						}
						if rapid.Bool().Draw(t, "new") {
							p.CT = Conntrack{State: netfilter.CtNew}
						}
					}
					h := rapid.SampledFrom(hooks).Draw(t, "hook")
					pool = append(pool, entry{p, drawTable(t, es[0], h, false), h})
				}
				compare := func(when string) {
					if a, b := string(es[0].SaveCounters()), string(es[1].SaveCounters()); a != b {
						t.Fatalf("%s: counters differ:\ncached:\n%s\ntraversed:\n%s", when, a, b)
					}
				}
				locals := pktAddrs(f)
				steps := rapid.IntRange(40, 150).Draw(t, "steps")
				for step := 0; step < steps; step++ {
					switch rapid.IntRange(0, 79).Draw(t, "action") {
					case 40:
						compare(fmt.Sprintf("step %d, before a restore", step))
						next := genText()
						var errs [2]string
						for i, e := range es {
							errs[i] = fmt.Sprint(e.RestoreText(next, RestoreOptions{}))
						}
						if errs[0] != errs[1] {
							t.Fatalf("restore: %s, %s", errs[0], errs[1])
						}
					case 41, 42:
						// The host gains or loses a local address (addrtype's answers).
						a := rapid.SampledFrom(locals).Draw(t, "local")
						for _, env := range envs {
							if i := slices.Index(env.Local, a); i >= 0 {
								env.Local = slices.Delete(env.Local, i, i+1)
							} else {
								env.Local = append(env.Local, a)
							}
						}
					case 43:
						on := rapid.Bool().Draw(t, "interpret")
						for _, e := range es {
							e.Interpret(on)
						}
					default:
						pe := pool[rapid.IntRange(0, len(pool)-1).Draw(t, "packet")]
						p0, table, h := pe.p, pe.table, pe.hook
						p0.Len = rapid.SampledFrom([]int{40, 60, 1500}).Draw(t, "len")
						if kind == 2 {
							fieldChange(t, f, &p0)
						} else {
							p0.SrcPort = uint16(rapid.IntRange(1024, 65535).Draw(t, "sport"))
						}
						switch rapid.IntRange(0, 29).Draw(t, "change") {
						case 10:
							p0.TCPFlags = rapid.Uint8().Draw(t, "flags")
						case 11:
							p0.Mark ^= 0x4000
						case 12:
							p0.CT.State = rapid.SampledFrom([]netfilter.CtState{netfilter.CtNew, netfilter.CtEstablished, netfilter.CtRelated, netfilter.CtInvalid, netfilter.CtUntracked}).Draw(t, "state")
						case 13:
							p0.Src = genPacket(t, f, es[0].Ruleset()).Src
						case 14:
							p0.Dst = genPacket(t, f, es[0].Ruleset()).Dst
						case 15:
							p0.DstPort = uint16(rapid.IntRange(79, 81).Draw(t, "dport"))
						case 16:
							p0.InIface, p0.OutIface = inGen.Draw(t, "in"), outGen.Draw(t, "out")
						case 17:
							p0.CT.Status ^= netfilter.StatusDstNAT
						case 18:
							p0.ICMPType, p0.ICMPCode = rapid.Uint8Range(0, 12).Draw(t, "type"), rapid.Uint8Range(0, 3).Draw(t, "code")
						case 19:
							h = rapid.SampledFrom(hooks).Draw(t, "hook")
							table = rapid.SampledFrom(TablesAt(h)).Draw(t, "table")
						}
						dry := rapid.IntRange(0, 29).Draw(t, "dry") == 10
						before := es[0].wildHits
						beforeDraws := es[0].wildDrawHits
						got := runTwins(es, envs, dry, table, h, p0)
						if got[0] != got[1] {
							t.Fatalf("step %d: %s %s, packet %+v (answered by the wildcard cache: %t):\ncached:    %s\ntraversed: %s",
								step, table, h, p0, es[0].wildHits != before, got[0], got[1])
						}
						hits += es[0].wildHits - before
						kindHits[kind] += es[0].wildHits - before
						drawHits += es[0].wildDrawHits - beforeDraws
						if step%8 == 0 {
							compare(fmt.Sprintf("step %d", step))
						}
					}
				}
				compare("end")
				if es[1].wildHits != 0 {
					t.Fatalf("the cache is off, yet it answered %d packets", es[1].wildHits)
				}
			})
		})
	}
	if drawHits == 0 || slices.Contains(kindHits[:], 0) {
		t.Fatalf("the wildcard cache answered %d packets (per ruleset kind %v), %d after draws: the property tested too little", hits, kindHits, drawHits)
	}
	t.Logf("%d packets answered by the wildcard cache (per ruleset kind %v), %d of them after draws", hits, kindHits, drawHits)
}

// TestWildCacheDirections: first packets in both directions of kube-proxy's filter
// FORWARD, each with another source port (the flow cache misses every one), whose keys
// differ only in the conntrack direction and status: after the first of each kind the
// wildcard cache answers every one (keys that differ in those fields must not evict one
// another), with the counters full traversals give.
func TestWildCacheDirections(t *testing.T) {
	es := loadedTwins(t, emutest.KubeDump(20, 3))
	es[1].FlowCache(false)
	env := NewStaticEnv(1)
	a, b := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.1.2.3")
	const n = 200
	for i := 0; i < n; i++ {
		p := Packet{Proto: netfilter.ProtoTCP, Src: a, Dst: b, SrcPort: uint16(20000 + i), DstPort: 80, TCPFlags: netfilter.TCPAck, TTL: 63,
			InIface: "eth0", OutIface: "veth1", Len: 52,
			CT: Conntrack{State: netfilter.CtEstablished, Status: netfilter.StatusConfirmed}}
		if i%2 == 1 {
			p.Src, p.Dst, p.SrcPort, p.DstPort = b, a, 80, uint16(20000+i)
			p.CT.Reply, p.CT.Status = true, netfilter.StatusConfirmed|netfilter.StatusSeenReply
		}
		for _, e := range es {
			q := p
			if v := e.RunTable(env, TableFilter, netfilter.Forward, &q, nil); v.Decided() {
				t.Fatalf("packet %d: %+v", i, v)
			}
		}
	}
	if es[0].wildHits != n-2 {
		t.Fatalf("the wildcard cache answered %d of %d packets, want %d", es[0].wildHits, n, n-2)
	}
	if a, b := string(es[0].SaveCounters("filter")), string(es[1].SaveCounters("filter")); a != b {
		t.Fatalf("counters differ:\ncached:\n%s\ntraversed:\n%s", a, b)
	}
}

// TestSharedWildCacheAcrossEmulators: emulators that adopted one ruleset and share its
// wildcard cache hit what another filled, with the same outcome as a traversal; a new
// version takes the cache over (one cache made, not one per version) with no entry of
// the old version valid; an emulator still on the old version makes itself a new one.
func TestSharedWildCacheAcrossEmulators(t *testing.T) {
	leader := New(IPv4)
	if err := leader.RestoreText(emutest.KubeDump(5, 3), RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	v1 := leader.Ruleset()
	var es [2]*Emulator
	for i := range es {
		es[i] = New(IPv4)
		if err := es[i].Adopt(v1); err != nil {
			t.Fatal(err)
		}
		es[i].ShareWildCache(true)
	}
	plain := New(IPv4) // the same rules, traversed every time
	if err := plain.Adopt(v1); err != nil {
		t.Fatal(err)
	}
	plain.WildCache(false)
	plain.FlowCache(false)
	run := func(e *Emulator, env Env, svc int, sport uint16) TableVerdict {
		p := Packet{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("10.244.1.5"), SrcPort: sport,
			Dst: netip.MustParseAddr(emutest.ClusterIP(svc)), DstPort: 80, TCPFlags: netfilter.TCPSyn, TTL: 64,
			CT: Conntrack{State: netfilter.CtNew}}
		v := e.RunTable(env, TableNAT, netfilter.Prerouting, &p, nil)
		v.NAT.Rule = nil // the rule that made it differs between versions only by pointer
		return v
	}
	// The statistic draws: each packet's environment is a source of the same seed as
	// the traversal's, so both draw the same (and the cache's tree has the path).
	check := func(e *Emulator, svc int, sport uint16) {
		t.Helper()
		got := run(e, NewStaticEnv(3, pktAddrs(IPv4)[1]), svc, sport)
		want := run(plain, NewStaticEnv(3, pktAddrs(IPv4)[1]), svc, sport)
		if got.Verdict != want.Verdict || got.NAT.Addr != want.NAT.Addr || got.NAT.Port != want.NAT.Port || got.Reason != want.Reason {
			t.Fatalf("service %d port %d: cached %+v, traversed %+v", svc, sport, got, want)
		}
	}
	check(es[0], 1, 40000)
	if v1.wild == nil || es[0].wild != nil {
		t.Fatalf("the cache is not the ruleset's: ruleset %p, emulator %p", v1.wild, es[0].wild)
	}
	check(es[1], 1, 40001)
	if es[1].wildHits != 1 {
		t.Fatalf("the second emulator's packet did not hit what the first filled (%d hits)", es[1].wildHits)
	}
	w := v1.wild
	if err := leader.RestoreText(emutest.KubeDump(6, 2), RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	v2 := leader.Ruleset()
	if err := es[0].Adopt(v2); err != nil {
		t.Fatal(err)
	}
	if err := plain.Adopt(v2); err != nil {
		t.Fatal(err)
	}
	if v2.wild != w || v1.wild != nil {
		t.Fatalf("the new version did not take the cache over: %p, old %p (was %p)", v2.wild, v1.wild, w)
	}
	hits := es[0].wildHits
	check(es[0], 1, 40002) // version 2: 2 endpoints instead of 3
	if es[0].wildHits != hits {
		t.Fatal("an entry of the old version answered the new one")
	}
	check(es[0], 1, 40003)
	if es[0].wildHits != hits+1 {
		t.Fatal("no hit on the new version's entry")
	}
	// es[1] still holds version 1: a cache of its own making, not the passed one.
	if err := plain.Adopt(v1); err != nil {
		t.Fatal(err)
	}
	check(es[1], 1, 40004)
	if v1.wild == nil || v1.wild == w {
		t.Fatalf("version 1's cache: %p (the passed one %p)", v1.wild, w)
	}
}

// TestWildCacheTwoWay: two keys whose hashes pick the same slot both stay (a node's
// packets alternating between two backends missed at every packet when one slot held
// one of them); a third evicts the one filled or hit longer ago.
func TestWildCacheTwoWay(t *testing.T) {
	w := newWildCache(wildSize)
	const gen, b = 1, 16
	keyOf := func(i int) wkey {
		q := Packet{Proto: netfilter.ProtoTCP, Dst: netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}), DstPort: 9376}
		var k wkey
		k.keyIn(&q, rdDst|rdDport, 0)
		return k
	}
	var same []wkey
	k0 := keyOf(0)
	slot := int(k0.hash(b) >> w.shift)
	for i := 0; len(same) < 3 && i < 1<<16; i++ {
		k := keyOf(i)
		if int(k.hash(b)>>w.shift)&^1 == slot&^1 {
			same = append(same, k)
		}
	}
	if len(same) < 3 {
		t.Fatal("no three keys of one pair of slots")
	}
	fill := func(k *wkey) {
		ent := w.victim(gen, k, b)
		ent.gen, ent.bit, ent.key = gen, b, *k
		w.tick++
		ent.used = w.tick
	}
	fill(&same[0])
	fill(&same[1])
	for i := 0; i < 2; i++ {
		if w.find(gen, b, &same[i]) == nil {
			t.Fatalf("key %d of the pair lost", i)
		}
	}
	w.tick++
	w.find(gen, b, &same[0]).used = w.tick // key 0 hit: key 1 is the older
	fill(&same[2])
	if w.find(gen, b, &same[0]) == nil || w.find(gen, b, &same[2]) == nil || w.find(gen, b, &same[1]) != nil {
		t.Fatalf("the third key did not evict the older: %v %v %v",
			w.find(gen, b, &same[0]) != nil, w.find(gen, b, &same[1]) != nil, w.find(gen, b, &same[2]) != nil)
	}
}

// TestWildCacheSetMatches: traversals through set matches are kept by the wildcard
// cache keyed by the fields each set's dimensions read (the destination and its port
// for dst,dst, the source for src), answer as traversals do, and are dropped when a
// restore of the sets changes their members. With a cache shared between emulators,
// whose sets may differ, they are not kept.
func TestWildCacheSetMatches(t *testing.T) {
	ctx := context.Background()
	sets := "create KUBE-CLUSTER-IP hash:ip,port family inet\nadd KUBE-CLUSTER-IP 10.96.0.1,tcp:80\n" +
		"create SRCS hash:ip family inet\nadd SRCS 10.0.0.9\n"
	rules := "*filter\n" +
		"-A INPUT -m set --match-set SRCS src -j DROP\n" +
		"-A INPUT -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\n" +
		"-A INPUT -j REJECT\nCOMMIT\n"
	var es [2]*Emulator
	for i := range es {
		es[i] = New(IPv4)
		if err := es[i].RestoreIPSets(ctx, []byte(sets)); err != nil {
			t.Fatal(err)
		}
		if err := es[i].RestoreText([]byte(rules), RestoreOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	es[1].WildCache(false)
	es[1].FlowCache(false)
	env := NewStaticEnv(1)
	r := rand.New(rand.NewPCG(3, 4))
	srcs := []string{"10.0.0.8", "10.0.0.9"}
	dsts := []string{"10.96.0.1", "10.96.0.2"}
	round := func(name string) (verdicts map[string]bool) {
		t.Helper()
		verdicts = map[string]bool{}
		for i := range 400 {
			src, dst, dport := srcs[r.IntN(2)], dsts[r.IntN(2)], uint16(80+r.IntN(2))
			var got [2]TableVerdict
			for k, e := range es {
				p := Packet{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst),
					SrcPort: uint16(30000 + i), DstPort: dport, TCPFlags: netfilter.TCPSyn, TTL: 64, InIface: "eth0",
					CT: Conntrack{State: netfilter.CtNew}}
				got[k] = e.RunTable(env, TableFilter, netfilter.Input, &p, nil)
			}
			if got[0].Verdict != got[1].Verdict || got[0].Reason != got[1].Reason {
				t.Fatalf("%s: %s -> %s:%d: cached %v (%s), traversed %v (%s)", name, src, dst, dport, got[0].Verdict, got[0].Reason, got[1].Verdict, got[1].Reason)
			}
			verdicts[fmt.Sprintf("%s %s:%d %v", src, dst, dport, got[0].Verdict)] = true
		}
		return verdicts
	}
	hits := es[0].wildHits
	v := round("first sets")
	if es[0].wildHits-hits < 300 {
		t.Errorf("the cache answered %d of 400 packets through set matches", es[0].wildHits-hits)
	}
	for _, want := range []string{"10.0.0.9 10.96.0.1:80 DROP", "10.0.0.8 10.96.0.1:80 ACCEPT", "10.0.0.8 10.96.0.1:81 REJECT", "10.0.0.8 10.96.0.2:80 REJECT"} {
		if !v[want] {
			t.Errorf("first sets: no %q among %v", want, v)
		}
	}
	change := "add KUBE-CLUSTER-IP 10.96.0.2,tcp:80\ndel SRCS 10.0.0.9\n"
	for _, e := range es {
		if err := e.RestoreIPSets(ctx, []byte(change)); err != nil {
			t.Fatal(err)
		}
	}
	v = round("changed sets")
	for _, want := range []string{"10.0.0.9 10.96.0.1:80 ACCEPT", "10.0.0.8 10.96.0.2:80 ACCEPT", "10.0.0.9 10.96.0.2:81 REJECT"} {
		if !v[want] {
			t.Errorf("changed sets: no %q among %v", want, v)
		}
	}

	// Two emulators sharing a cache, one ruleset, sets that differ: each answers from
	// its own sets.
	var shared [2]*Emulator
	for i := range shared {
		shared[i] = New(IPv4)
		if err := shared[i].RestoreIPSets(ctx, []byte(sets)); err != nil {
			t.Fatal(err)
		}
		shared[i].ShareWildCache(true)
	}
	if err := shared[0].RestoreText([]byte(rules), RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := shared[1].Adopt(shared[0].Ruleset()); err != nil {
		t.Fatal(err)
	}
	if err := shared[1].RestoreIPSets(ctx, []byte("del SRCS 10.0.0.9\n")); err != nil {
		t.Fatal(err)
	}
	for i, want := range []Verdict{Drop, Drop, Accept, Accept} {
		p := Packet{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("10.0.0.9"), Dst: netip.MustParseAddr("10.96.0.1"),
			SrcPort: uint16(40000 + i), DstPort: 80, TCPFlags: netfilter.TCPSyn, TTL: 64, InIface: "eth0",
			CT: Conntrack{State: netfilter.CtNew}}
		if got := shared[i/2].RunTable(env, TableFilter, netfilter.Input, &p, nil); got.Verdict != want {
			t.Errorf("shared cache, emulator %d, packet %d: %v, want %v", i/2, i, got.Verdict, want)
		}
	}
}
