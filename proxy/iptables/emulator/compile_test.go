package emulator

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator/emutest"

	"pgregory.net/rapid"
)

// genLongRuleset is genRuleset with longer chains (up to 40 rules, so that some are
// indexed) whose rules often name one destination address or port.
func genLongRuleset(f Family) *rapid.Generator[*Ruleset] {
	return genRulesetWith(f, 40, func(t *rapid.T, f Family, plan chainPlan) *Rule {
		r := genRule(t, f, plan)
		if rapid.IntRange(0, 2).Draw(t, "single dst") == 0 {
			r.Dst = AddrSpec{Prefix: netip.PrefixFrom(pktAddrs(f)[rapid.IntRange(0, 3).Draw(t, "d")], f.bits())}
		}
		return r
	})
}

// pktAddrs are addresses generated rules and packets share.
func pktAddrs(f Family) []netip.Addr {
	if f == IPv6 {
		return []netip.Addr{netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"), netip.MustParseAddr("fd00:1::1"), netip.MustParseAddr("fd00::a00:1")}
	}
	return []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("192.168.0.1")}
}

// genPacket draws a packet whose addresses are often in the ruleset's prefixes.
func genPacket(t *rapid.T, f Family, rs *Ruleset) Packet {
	var addrs []netip.Addr
	for _, tb := range rs.Tables {
		for _, c := range tb.AllChains() {
			for _, r := range c.Rules {
				for _, a := range []AddrSpec{r.Src, r.Dst} {
					if a.IsSet() {
						addrs = append(addrs, a.Prefix.Addr())
					}
				}
			}
		}
	}
	addrs = append(addrs, pktAddrs(f)...)
	addr := func(name string) netip.Addr {
		if rapid.IntRange(0, 5).Draw(t, name+"random") == 0 {
			return genAddr(f).Draw(t, name)
		}
		return rapid.SampledFrom(addrs).Draw(t, name)
	}
	icmp := netfilter.ProtoICMP
	if f == IPv6 {
		icmp = netfilter.ProtoICMPv6
	}
	p := Packet{Proto: rapid.SampledFrom([]uint8{netfilter.ProtoTCP, netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoSCTP, icmp, netfilter.ProtoGRE}).Draw(t, "proto"),
		Src: addr("src"), Dst: addr("dst"), SrcPort: rapid.Uint16().Draw(t, "sport"), DstPort: rapid.Uint16().Draw(t, "dport"),
		TCPFlags: rapid.Uint8().Draw(t, "flags"), ICMPType: rapid.Uint8().Draw(t, "type"), TTL: 64,
		Fragment: f == IPv4 && rapid.IntRange(0, 9).Draw(t, "frag") == 0,
		Mark:     rapid.SampledFrom([]uint32{0, 0x4000, 1, 0xffffffff}).Draw(t, "mark"), Len: 60}
	if rapid.Bool().Draw(t, "in") {
		p.InIface = inGen.Draw(t, "inif")
	}
	if rapid.Bool().Draw(t, "out") {
		p.OutIface = outGen.Draw(t, "outif")
	}
	p.CT.State = rapid.SampledFrom([]netfilter.CtState{netfilter.CtNew, netfilter.CtNew, netfilter.CtEstablished, netfilter.CtRelated, netfilter.CtInvalid, netfilter.CtUntracked}).Draw(t, "ct")
	p.CT.Mark = rapid.SampledFrom([]uint32{0, 1, 0x4000}).Draw(t, "ctmark")
	return p
}

// TestCompiledMatchesRules: evaluation on compiled chains (every untraced evaluation)
// gives what evaluation on the Rules gives: verdicts, decisions, NAT, the packet's
// changes, counters, xt_recent and nfacct state, and the same draws from the random
// source, for generated rulesets and packets, in both families.
func TestCompiledMatchesRules(t *testing.T) {
	for _, f := range []Family{IPv4, IPv6} {
		t.Run(f.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				text := genLongRuleset(f).Draw(t, "ruleset").Save(false)
				es, envs := restoredTwins(t, f, text)
				es[1].noCompile = true
				for n := rapid.IntRange(1, 8).Draw(t, "packets"); n > 0; n-- {
					p0 := genPacket(t, f, es[0].Ruleset())
					for _, h := range []netfilter.Hook{netfilter.Prerouting, netfilter.Input, netfilter.Forward, netfilter.Output, netfilter.Postrouting} {
						var got [2]string
						for i, e := range es {
							p := p0
							hr := e.EvalHook(envs[i], h, &p, nil)
							got[i] = fmt.Sprintf("%s %s %s %v %s|%v %d %d|%+v|next draw %d", hr.Verdict, hr.RejectWith, describeDecision(hr.Decision),
								describeNAT(hr.NAT), describeTables(hr.Tables), p, len(hr.Tables), envs[i].Rand.Uint64(), e.RecentLists(), envs[i].Rand.Uint64())
						}
						if got[0] != got[1] {
							t.Fatalf("%s, packet %v:\ncompiled: %s\nrules:    %s\n%s", h, p0, got[0], got[1], text)
						}
					}
				}
				if a, b := string(es[0].SaveCounters()), string(es[1].SaveCounters()); a != b {
					t.Fatalf("counters differ:\ncompiled:\n%s\nrules:\n%s", a, b)
				}
			})
		})
	}
}

func describeDecision(d Decision) string {
	if d.Rule == nil {
		return fmt.Sprintf("%s/%s/%s policy %s", d.Hook, d.Table, d.Chain, d.Policy)
	}
	return fmt.Sprintf("%s/%s/%s %s", d.Hook, d.Table, d.Chain, d.Rule.Text(d.Chain))
}

func describeNAT(n *NAT) string {
	if n == nil {
		return "no NAT"
	}
	return fmt.Sprintf("%s %s/%s %v %v %v %v %d %d %t %t %t", n.Kind, n.Hook, n.Chain, n.Rule.Text(n.Chain), n.Addr, n.AddrMax, n.Dest(), n.Port, n.PortMax, n.Random, n.RandomFully, n.Persistent)
}

func describeTables(ts []TableResult) string {
	s := ""
	for _, tr := range ts {
		s += fmt.Sprintf("[%s %s %s %s]", tr.Verdict, tr.RejectWith, describeDecision(tr.Decision), describeNAT(tr.NAT))
	}
	return s
}

// TestCompiledKubeLayout: the same comparison on kube-proxy's layout (indexed
// KUBE-SERVICES and KUBE-NODEPORTS, probability ladders, DNAT), and through the netsim
// handler's verdict reasons.
func TestCompiledKubeLayout(t *testing.T) {
	data := emutest.KubeDump(40, 5)
	es := loadedTwins(t, data)
	es[1].noCompile = true
	envs := [2]*StaticEnv{NewStaticEnv(3, netip.MustParseAddr("192.168.0.2")), NewStaticEnv(3, netip.MustParseAddr("192.168.0.2"))}
	for i := 0; i < 2000; i++ {
		dst := netip.MustParseAddr(emutest.ClusterIP(i % 45))
		port := uint16(80 + i%3)
		if i%7 == 0 {
			dst, port = netip.MustParseAddr("192.168.0.2"), uint16(30000+i%50)
		}
		for _, h := range []netfilter.Hook{netfilter.Prerouting, netfilter.Forward, netfilter.Output, netfilter.Postrouting} {
			var got [2]string
			for k, e := range es {
				p := Packet{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("10.0.0.2"), Dst: dst, SrcPort: uint16(1024 + i), DstPort: port, TCPFlags: netfilter.TCPSyn, Len: 60, CT: Conntrack{State: netfilter.CtNew}}
				hr := e.EvalHook(envs[k], h, &p, nil)
				c := &e.scratch
				got[k] = fmt.Sprintf("%s %s %s %s|%v|%s", hr.Verdict, hr.RejectWith, describeDecision(hr.Decision), describeNAT(hr.NAT), p, c.decisionReason(hr.Decision))
			}
			if got[0] != got[1] {
				t.Fatalf("packet %d at %s:\ncompiled: %s\nrules:    %s", i, h, got[0], got[1])
			}
		}
	}
	if a, b := string(es[0].SaveCounters()), string(es[1].SaveCounters()); a != b {
		t.Fatal("counters differ")
	}
}

// restoredTwins returns two emulators restored from the same text (a test then makes
// them differ in one setting and compares them), each with its own environment.
func restoredTwins(t interface {
	Helper()
	Fatalf(string, ...any)
}, f Family, text []byte) (es [2]*Emulator, envs [2]*StaticEnv) {
	t.Helper()
	for i := range es {
		es[i] = New(f)
		if err := es[i].RestoreText(text, RestoreOptions{}); err != nil {
			t.Fatalf("restore: %v\n%s", err, text)
		}
		envs[i] = NewStaticEnv(7, pktAddrs(f)[1])
	}
	return es, envs
}

// loadedTwins returns two emulators loaded from the same IPv4 dump.
func loadedTwins(t *testing.T, data []byte) (es [2]*Emulator) {
	t.Helper()
	for i := range es {
		var err error
		if es[i], err = Load(data, IPv4, "kube"); err != nil {
			t.Fatal(err)
		}
	}
	return es
}

// TestCompiledAddressPrefixes: a compiled -s, ! -s, -d and ! -d of every prefix length
// class, in both families, against addresses inside and just outside it (the last bit
// of the prefix flipped, a bit after the prefix flipped), answered as the Rules answer
// (and as netip.Prefix.Contains: the twins of the other differential tests share the
// compiled predicates); and, with the wildcard cache on, packets from (or to) three
// addresses on one side of the prefix hit one cache entry after the first: a source
// is asked, not keyed, and a destination keyed by the prefix compared.
func TestCompiledAddressPrefixes(t *testing.T) {
	flip := func(a netip.Addr, bit int) netip.Addr {
		b := a.AsSlice()
		b[bit/8] ^= 0x80 >> (bit % 8)
		r, _ := netip.AddrFromSlice(b)
		return r
	}
	type tc struct {
		f      Family
		prefix netip.Prefix
	}
	var cases []tc
	for _, n := range []int{0, 1, 8, 24, 31, 32} {
		cases = append(cases, tc{IPv4, netip.PrefixFrom(netip.MustParseAddr("10.1.2.3"), n).Masked()})
	}
	for _, n := range []int{0, 1, 16, 63, 64, 65, 100, 127, 128} {
		cases = append(cases, tc{IPv6, netip.PrefixFrom(netip.MustParseAddr("fd00:1:2:3:4:5:6:7"), n).Masked()})
	}
	for _, c := range cases {
		base := netip.MustParseAddr("10.1.2.3")
		if c.f == IPv6 {
			base = netip.MustParseAddr("fd00:1:2:3:4:5:6:7")
		}
		other := pktAddrs(c.f)[1]
		for _, opt := range []string{"-s", "-d"} {
			packet := func(a netip.Addr, sport int) Packet {
				p := Packet{Proto: netfilter.ProtoTCP, Src: a, Dst: other, SrcPort: uint16(sport), DstPort: 80, TTL: 64, Len: 60}
				if opt == "-d" {
					p.Src, p.Dst = other, a
				}
				return p
			}
			for _, neg := range []string{"", "! "} {
				text := fmt.Sprintf("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT %s%s %s -j DROP\nCOMMIT\n", neg, opt, c.prefix)
				es, envs := restoredTwins(t, c.f, []byte(text))
				es[1].noCompile = true
				addrs := []netip.Addr{base}
				if n := c.prefix.Bits(); n > 0 {
					addrs = append(addrs, flip(base, n-1)) // outside
				}
				if n := c.prefix.Bits(); n < base.BitLen() {
					addrs = append(addrs, flip(base, n), flip(base, base.BitLen()-1)) // inside
				}
				for _, a := range addrs {
					want := c.prefix.Contains(a) != (neg != "")
					for i, e := range es {
						p := packet(a, 1000)
						hr := e.EvalHook(envs[i], netfilter.Input, &p, nil)
						if got := hr.Verdict == Drop; got != want {
							t.Errorf("%s%s %s, address %s (compiled %v): dropped %v, want %v", neg, opt, c.prefix, a, i == 0, got, want)
						}
					}
				}
				e := New(c.f)
				if err := e.RestoreText([]byte(text), RestoreOptions{}); err != nil {
					t.Fatal(err)
				}
				env := NewStaticEnv(7, other)
				if n := c.prefix.Bits(); n < base.BitLen() {
					for k, a := range []netip.Addr{base, flip(base, base.BitLen()-1), flip(base, n)} {
						p := packet(a, 1000+k)
						hits := e.wildHits
						e.RunTable(env, "filter", netfilter.Input, &p, nil)
						if hit := e.wildHits > hits; hit != (k > 0) {
							t.Errorf("%s%s %s, packet %d with %s: a wildcard cache hit %v, want %v", neg, opt, c.prefix, k, a, hit, k > 0)
						}
					}
				}
			}
		}
	}
}
