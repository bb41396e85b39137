package emulator

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"
)

// Generators of canonical models: values as the parser would build them from
// iptables-save text, so that model → Save → parse gives the model back.

func genAddr(f Family) *rapid.Generator[netip.Addr] {
	return rapid.Custom(func(t *rapid.T) netip.Addr {
		if f == IPv6 {
			var b [16]byte
			b[0], b[1] = 0xfd, 0x00
			for i := 2; i < 16; i++ {
				if rapid.Bool().Draw(t, "nz") {
					b[i] = rapid.Byte().Draw(t, "b")
				}
			}
			return netip.AddrFrom16(b)
		}
		return netip.AddrFrom4([4]byte{rapid.Byte().Draw(t, "a"), rapid.Byte().Draw(t, "b"), rapid.Byte().Draw(t, "c"), rapid.Byte().Draw(t, "d")})
	})
}

func genPrefix(f Family, minBits int) *rapid.Generator[netip.Prefix] {
	return rapid.Custom(func(t *rapid.T) netip.Prefix {
		a := genAddr(f).Draw(t, "addr")
		bits := rapid.IntRange(minBits, f.bits()).Draw(t, "bits")
		p, _ := a.Prefix(bits)
		return p
	})
}

func genPortRange(t *rapid.T, name string) PortRange {
	a := rapid.Uint16().Draw(t, name+"a")
	if rapid.Bool().Draw(t, name+"single") {
		return PortRange{a, a}
	}
	b := rapid.Uint16Range(a, 65535).Draw(t, name+"b")
	return PortRange{a, b}
}

func genPortSpec(t *rapid.T, name string) *PortSpec {
	if rapid.Bool().Draw(t, name+"absent") {
		return nil
	}
	r := genPortRange(t, name)
	neg := rapid.Bool().Draw(t, name+"neg")
	if r.Min == 0 && r.Max == 65535 && !neg {
		return nil
	}
	return &PortSpec{r, neg}
}

var commentChars = []rune("abcXYZ019 -_./:;\"'\\\t$`,()[]{}<>é→")

var (
	textGen  = rapid.StringOfN(rapid.SampledFrom(commentChars), 0, 40, -1)
	nameGen  = rapid.StringMatching(`[a-zA-Z][a-zA-Z0-9_-]{0,15}`)
	inGen    = rapid.StringMatching(`[a-z][a-z0-9.]{0,9}\+?`)
	outGen   = rapid.StringMatching(`[a-z][a-z0-9]{0,9}\+?`)
	chainGen = rapid.StringMatching(`(KUBE-SVC-|cali-|C)[A-Z0-9]{1,8}`).Filter(func(s string) bool { return !isTargetName(s) })
)

// genText draws text of at most max bytes.
func genText(t *rapid.T, name string, max int) string {
	s := textGen.Draw(t, name)
	for len(s) > max {
		r := []rune(s)
		s = string(r[:len(r)-1])
	}
	return s
}

func genName(t *rapid.T, name string, _ int) string { return nameGen.Draw(t, name) }

func genMark(t *rapid.T, name string) (uint32, uint32) {
	mask := rapid.SampledFrom([]uint32{0xffffffff, 0x4000, 0xff00, 0x10000, 0}).Draw(t, name+"mask")
	if rapid.Bool().Draw(t, name+"rnd") {
		mask = rapid.Uint32().Draw(t, name+"m")
	}
	return rapid.Uint32().Draw(t, name+"v") & mask, mask
}

// genMatch draws a match module compatible with the rule's protocol and chain.
// genAddrTypes draws a non-empty addrtype mask the family's kernel accepts.
func genAddrTypes(t *rapid.T, f Family, label string) AddrType {
	for {
		m := AddrType(rapid.Uint16Range(1, 1<<12-1).Draw(t, label))
		if f == IPv6 {
			m &^= AddrTypesNot6
		}
		if m != 0 {
			return m
		}
	}
}

func genMatch(t *rapid.T, f Family, proto ProtoSpec, plan chainPlan) Match {
	kinds := []string{"comment", "addrtype", "statistic", "recent", "conntrack", "state", "mark", "connmark", "set", "nfacct", "iprange", "unknown"}
	if proto.Set && !proto.Neg {
		switch proto.Num {
		case netfilter.ProtoTCP:
			kinds = append(kinds, "tcp", "multiport")
		case netfilter.ProtoUDP:
			kinds = append(kinds, "udp", "multiport")
		case netfilter.ProtoSCTP:
			kinds = append(kinds, "sctp", "multiport")
		case netfilter.ProtoICMP:
			if f == IPv4 {
				kinds = append(kinds, "icmp")
			}
		case netfilter.ProtoICMPv6:
			if f == IPv6 {
				kinds = append(kinds, "icmp6")
			}
		}
	}
	switch rapid.SampledFrom(kinds).Draw(t, "kind") {
	case "tcp":
		m := &TCPMatch{Sport: genPortSpec(t, "sport"), Dport: genPortSpec(t, "dport")}
		if rapid.Bool().Draw(t, "flags") {
			m.Flags = &TCPFlags{Mask: rapid.Uint8().Draw(t, "fm"), Comp: rapid.Uint8().Draw(t, "fc"), Neg: rapid.Bool().Draw(t, "fneg")}
		}
		if rapid.Bool().Draw(t, "opt") {
			m.Option, m.OptionNeg = rapid.IntRange(1, 255).Draw(t, "o"), rapid.Bool().Draw(t, "oneg")
		}
		return m
	case "udp":
		return &UDPMatch{Sport: genPortSpec(t, "sport"), Dport: genPortSpec(t, "dport")}
	case "sctp":
		m := &SCTPMatch{Sport: genPortSpec(t, "sport"), Dport: genPortSpec(t, "dport")}
		if rapid.Bool().Draw(t, "chunks") {
			if rapid.Bool().Draw(t, "cneg") {
				m.Chunks = append(m.Chunks, "!")
			}
			m.Chunks = append(m.Chunks, rapid.SampledFrom([]string{"all", "any", "only"}).Draw(t, "cm"), "INIT,DATA")
		}
		return m
	case "icmp", "icmp6":
		m := &ICMPMatch{V6: f == IPv6, set: true, Neg: rapid.Bool().Draw(t, "neg")}
		if !m.V6 && rapid.Bool().Draw(t, "any") {
			m.Any = true
			return m
		}
		m.Type, m.CodeMin, m.CodeMax = rapid.Uint8().Draw(t, "type"), 0, 255
		if rapid.Bool().Draw(t, "code") {
			c := rapid.Uint8().Draw(t, "c")
			m.CodeMin, m.CodeMax = c, c
		}
		return m
	case "multiport":
		m := &MultiportMatch{Which: rapid.SampledFrom([]string{"--sports", "--dports", "--ports"}).Draw(t, "which"), Neg: rapid.Bool().Draw(t, "neg")}
		for slots := rapid.IntRange(1, 15).Draw(t, "slots"); slots > 0; {
			r := genPortRange(t, "p")
			if r.Min != r.Max {
				if slots < 2 {
					r.Max = r.Min
				} else {
					slots--
				}
			}
			slots--
			m.Ports = append(m.Ports, r)
		}
		return m
	case "addrtype":
		m := &AddrTypeMatch{}
		if rapid.Bool().Draw(t, "src") {
			m.Src, m.SrcNeg = genAddrTypes(t, f, "st"), rapid.Bool().Draw(t, "sn")
		}
		if m.Src == 0 || rapid.Bool().Draw(t, "dst") {
			m.Dst, m.DstNeg = genAddrTypes(t, f, "dt"), rapid.Bool().Draw(t, "dn")
		}
		// The interface limits only where the chain's hook has that interface (a user
		// chain may be reached from any hook: none there).
		h, builtin := netfilter.ParseHook(plan.chain.Name)
		switch rapid.IntRange(0, 2).Draw(t, "limit") {
		case 1:
			m.LimitIn = builtin && h != netfilter.Output && h != netfilter.Postrouting
		case 2:
			m.LimitOut = builtin && h != netfilter.Prerouting && h != netfilter.Input
		}
		return m
	case "comment":
		return &CommentMatch{Comment: genText(t, "comment", 40)}
	case "statistic":
		m := &StatisticMatch{Neg: rapid.Bool().Draw(t, "neg"), modeSet: true}
		if rapid.Bool().Draw(t, "nth") {
			m.Nth = true
			m.Every = rapid.Uint32Range(1, 1000).Draw(t, "every")
			m.Packet = rapid.Uint32Range(0, m.Every-1).Draw(t, "packet")
		} else {
			m.Probability = rapid.Uint32Range(0, 1<<31).Draw(t, "p")
		}
		return m
	case "recent":
		m := &RecentMatch{Command: rapid.SampledFrom([]string{RecentSet, RecentCheck, RecentUpdate, RecentRemove}).Draw(t, "cmd"),
			Neg: rapid.Bool().Draw(t, "neg"), Name: genName(t, "name", 30), nameSet: true, Dest: rapid.Bool().Draw(t, "dest")}
		if m.Command == RecentCheck || m.Command == RecentUpdate {
			m.Seconds = rapid.Uint32Range(0, 100000).Draw(t, "sec")
			m.Reap = m.Seconds > 0 && rapid.Bool().Draw(t, "reap")
			m.Hitcount = rapid.Uint32Range(0, 20).Draw(t, "hits")
			m.TTL = rapid.Bool().Draw(t, "ttl")
		}
		m.Mask = fullMask(f)
		if rapid.Bool().Draw(t, "mask") {
			m.Mask = genAddr(f).Draw(t, "maskaddr")
		}
		return m
	case "conntrack":
		m := &ConntrackMatch{}
		any := false
		if rapid.Bool().Draw(t, "state") {
			s := rapid.Uint8Range(1, 127).Draw(t, "s")
			m.State, m.StateNeg, any = &s, rapid.Bool().Draw(t, "sn"), true
		}
		if rapid.Bool().Draw(t, "proto") {
			p := rapid.Uint8Range(1, 255).Draw(t, "p")
			m.Proto, m.ProtoNeg, any = &p, rapid.Bool().Draw(t, "pn"), true
		}
		for _, a := range []**CTAddrSpec{&m.OrigSrc, &m.OrigDst, &m.ReplSrc, &m.ReplDst} {
			if rapid.Bool().Draw(t, "addr") {
				*a, any = &CTAddrSpec{genPrefix(f, 0).Draw(t, "pfx"), rapid.Bool().Draw(t, "an")}, true
			}
		}
		for _, p := range []**CTRangeSpec{&m.OrigSrcPort, &m.OrigDstPort, &m.ReplSrcPort, &m.ReplDstPort} {
			if rapid.Bool().Draw(t, "port") {
				r := genPortRange(t, "ctp")
				*p, any = &CTRangeSpec{uint32(r.Min), uint32(r.Max), rapid.Bool().Draw(t, "pn")}, true
			}
		}
		if rapid.Bool().Draw(t, "status") {
			s := netfilter.CtStatus(rapid.Uint16Range(0, 15).Draw(t, "st"))
			m.Status, m.StatusNeg, any = &s, rapid.Bool().Draw(t, "stn"), true
		}
		if rapid.Bool().Draw(t, "expire") {
			a := rapid.Uint32().Draw(t, "ea")
			m.Expire, any = &CTRangeSpec{a, rapid.Uint32Range(a, 1<<32-1).Draw(t, "eb"), rapid.Bool().Draw(t, "en")}, true
		}
		if !any || rapid.Bool().Draw(t, "dir") {
			m.Dir = rapid.SampledFrom([]string{"ORIGINAL", "REPLY"}).Draw(t, "d")
		}
		return m
	case "state":
		return &StateMatch{States: rapid.Uint8Range(1, 31).Draw(t, "s"), Neg: rapid.Bool().Draw(t, "neg")}
	case "mark", "connmark":
		v, m := genMark(t, "mark")
		return &MarkMatch{Conn: rapid.Bool().Draw(t, "conn"), Value: v, Mask: m, Neg: rapid.Bool().Draw(t, "neg")}
	case "set":
		m := &SetMatch{Name: genName(t, "set", 20), Neg: rapid.Bool().Draw(t, "neg"),
			ReturnNomatch: rapid.Bool().Draw(t, "rn"), NoUpdateCounters: rapid.Bool().Draw(t, "nuc"), NoUpdateSubcounters: rapid.Bool().Draw(t, "nus")}
		for n := rapid.IntRange(1, 3).Draw(t, "dims"); n > 0; n-- {
			m.Dirs = append(m.Dirs, rapid.Bool().Draw(t, "dir"))
		}
		if rapid.Bool().Draw(t, "ctr") {
			m.Counters = []string{fmt.Sprintf("--packets-gt %d", rapid.Uint32().Draw(t, "pg"))}
		}
		return m
	case "nfacct":
		return &NfacctMatch{Name: genName(t, "acct", 20)}
	case "iprange":
		m := &IPRangeMatch{}
		gen := func() *AddrRange {
			a, b := genAddr(f).Draw(t, "from"), genAddr(f).Draw(t, "to")
			if b.Less(a) {
				a, b = b, a
			}
			return &AddrRange{a, b, rapid.Bool().Draw(t, "rneg")}
		}
		if rapid.Bool().Draw(t, "src") {
			m.Src = gen()
		}
		if m.Src == nil || rapid.Bool().Draw(t, "dst") {
			m.Dst = gen()
		}
		return m
	default:
		return &UnknownMatch{Name: rapid.SampledFrom([]string{"physdev", "limit", "owner", "rpfilter", "u32"}).Draw(t, "module"),
			Args: rapid.SampledFrom([][]string{{"--physdev-is-bridged"}, {"!", "--physdev-is-in"}, {"--limit", "5/min", "--limit-burst", "7"},
				{"--uid-owner", "0"}, {"--validmark", "--invert"}, {"--u32", `"0>>22&0x3C@ 12>>26&0x3C@ 0&0xFFFF=0x1"`}}).Draw(t, "args")}
	}
}

type chainPlan struct {
	table *Table
	chain *Chain
	users []string // user chains a rule may jump to (to keep the graph acyclic)
}

// genTarget draws a target valid for the chain.
func genTarget(t *rapid.T, f Family, plan chainPlan, proto ProtoSpec) Target {
	kinds := []string{"none", "ACCEPT", "DROP", "RETURN", "MARK", "CONNMARK", "LOG", "NFLOG"}
	if len(plan.users) > 0 {
		kinds = append(kinds, "jump", "jump", "goto")
	}
	tbl, c := plan.table.Name, plan.chain
	h, builtin := netfilter.ParseHook(c.Name)
	if tbl == TableFilter {
		kinds = append(kinds, "REJECT")
	}
	if tbl == TableRaw {
		kinds = append(kinds, "NOTRACK")
	}
	if tbl == TableNAT && builtin {
		switch h {
		case netfilter.Prerouting, netfilter.Output:
			kinds = append(kinds, "DNAT", "REDIRECT")
		case netfilter.Postrouting:
			kinds = append(kinds, "SNAT", "MASQUERADE")
		case netfilter.Input:
			kinds = append(kinds, "SNAT")
		}
	}
	ported := proto.Set && !proto.Neg && (proto.Num == netfilter.ProtoTCP || proto.Num == netfilter.ProtoUDP || proto.Num == netfilter.ProtoSCTP)
	ports := func(name string) (uint16, uint16) {
		if !ported || rapid.Bool().Draw(t, name+"none") {
			return 0, 0
		}
		a := rapid.Uint16Range(1, 65535).Draw(t, name+"a")
		return a, rapid.Uint16Range(a, 65535).Draw(t, name+"b")
	}
	switch k := rapid.SampledFrom(kinds).Draw(t, "target"); k {
	case "none":
		return nil
	case "ACCEPT", "DROP", "RETURN":
		return &VerdictTarget{Verdict: k}
	case "jump", "goto":
		return &JumpTarget{Chain: rapid.SampledFrom(plan.users).Draw(t, "to"), Goto: k == "goto"}
	case "REJECT":
		types := []string{"icmp-net-unreachable", "icmp-host-unreachable", "icmp-port-unreachable", "icmp-proto-unreachable", "icmp-net-prohibited", "icmp-host-prohibited", "icmp-admin-prohibited"}
		if f == IPv6 {
			types = []string{"icmp6-no-route", "icmp6-adm-prohibited", "icmp6-addr-unreachable", "icmp6-port-unreachable", "icmp6-policy-fail", "icmp6-reject-route"}
		}
		if proto.Set && !proto.Neg && proto.Num == netfilter.ProtoTCP {
			types = append(types, "tcp-reset")
		}
		return &RejectTarget{With: rapid.SampledFrom(types).Draw(t, "with")}
	case "MARK":
		v, m := genMark(t, "xmark")
		return &MarkTarget{Value: v, Mask: m, set: true}
	case "CONNMARK":
		switch rapid.IntRange(0, 2).Draw(t, "mode") {
		case 0:
			return &ConnmarkTarget{Mode: ConnmarkSet, Value: rapid.Uint32().Draw(t, "v"), Mask: rapid.Uint32().Draw(t, "m")}
		case 1:
			return &ConnmarkTarget{Mode: ConnmarkSave, NfMask: rapid.Uint32().Draw(t, "nf"), CtMask: rapid.Uint32().Draw(t, "ct"), nf: true, ct: true}
		default:
			return &ConnmarkTarget{Mode: ConnmarkRestore, NfMask: rapid.Uint32().Draw(t, "nf"), CtMask: rapid.Uint32().Draw(t, "ct"), nf: true, ct: true}
		}
	case "LOG":
		lt := &LogTarget{Prefix: genText(t, "prefix", 29), Level: rapid.Uint8Range(0, 7).Draw(t, "level")}
		for _, fl := range logFlags {
			if rapid.Bool().Draw(t, fl) {
				lt.Flags = append(lt.Flags, fl)
			}
		}
		return lt
	case "NFLOG":
		return &UnknownTarget{Target: "NFLOG", Args: []string{"--nflog-group", fmt.Sprint(rapid.IntRange(0, 100).Draw(t, "g"))}}
	case "NOTRACK":
		return &NotrackTarget{}
	case "DNAT", "SNAT":
		nt := &NATTarget{Kind: k, toSet: true, Random: rapid.Bool().Draw(t, "r"), Persistent: rapid.Bool().Draw(t, "p")}
		nt.PortMin, nt.PortMax = ports("nat")
		if nt.PortMin == 0 || rapid.Bool().Draw(t, "addr") {
			a, b := genAddr(f).Draw(t, "a"), genAddr(f).Draw(t, "b")
			if b.Less(a) {
				a, b = b, a
			}
			if rapid.Bool().Draw(t, "single") {
				b = a
			}
			nt.AddrMin, nt.AddrMax = a, b
		}
		if k == "SNAT" {
			nt.RandomFully = rapid.Bool().Draw(t, "rf")
		}
		return nt
	case "MASQUERADE":
		mt := &MasqueradeTarget{Random: rapid.Bool().Draw(t, "r"), RandomFully: rapid.Bool().Draw(t, "rf")}
		mt.PortMin, mt.PortMax = ports("masq")
		return mt
	case "REDIRECT":
		rt := &RedirectTarget{Random: rapid.Bool().Draw(t, "r")}
		rt.PortMin, rt.PortMax = ports("redir")
		return rt
	}
	panic("unreachable")
}

func genRule(t *rapid.T, f Family, plan chainPlan) *Rule {
	r := &Rule{Spec: &Spec{}}
	if rapid.Bool().Draw(t, "src") {
		r.Src = AddrSpec{genPrefix(f, 1).Draw(t, "s"), rapid.Bool().Draw(t, "sn")}
	}
	if rapid.Bool().Draw(t, "dst") {
		r.Dst = AddrSpec{genPrefix(f, 1).Draw(t, "d"), rapid.Bool().Draw(t, "dn")}
	}
	if rapid.Bool().Draw(t, "in") {
		r.InIface = IfaceSpec{inGen.Draw(t, "i"), rapid.Bool().Draw(t, "in")}
	}
	if rapid.Bool().Draw(t, "out") {
		r.OutIface = IfaceSpec{outGen.Draw(t, "o"), rapid.Bool().Draw(t, "on")}
	}
	if rapid.Bool().Draw(t, "proto") {
		icmp := netfilter.ProtoICMP
		if f == IPv6 {
			icmp = netfilter.ProtoICMPv6
		}
		num := rapid.SampledFrom([]uint8{netfilter.ProtoTCP, netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoSCTP, icmp, netfilter.ProtoGRE, 200}).Draw(t, "p")
		r.Proto = ProtoSpec{Set: true, Num: num, Neg: rapid.IntRange(0, 4).Draw(t, "pn") == 0}
	}
	if f == IPv4 {
		r.Fragment = Fragment(rapid.IntRange(0, 2).Draw(t, "frag"))
	}
	for n := rapid.IntRange(0, 4).Draw(t, "matches"); n > 0; n-- {
		r.Matches = append(r.Matches, genMatch(t, f, r.Proto, plan))
	}
	r.Target = genTarget(t, f, plan, r.Proto)
	return r
}

var genRuleset = func(f Family) *rapid.Generator[*Ruleset] {
	return genRulesetWith(f, 4, genRule)
}

// genRulesetWith draws tables with user chains that jump only forward (no loops), each
// chain holding up to maxRules rules drawn by rule.
func genRulesetWith(f Family, maxRules int, rule func(*rapid.T, Family, chainPlan) *Rule) *rapid.Generator[*Ruleset] {
	return rapid.Custom(func(t *rapid.T) *Ruleset {
		rs := NewRuleset(f)
		all := []string{TableMangle, TableSecurity, TableRaw, TableFilter, TableNAT}
		for _, name := range all {
			if !rapid.Bool().Draw(t, "has "+name) {
				continue
			}
			tb, _ := NewTable(name)
			for _, c := range tb.AllChains() {
				c.Policy = rapid.SampledFrom([]string{"ACCEPT", "ACCEPT", "DROP"}).Draw(t, "policy")
			}
			var users []string
			for n := rapid.IntRange(0, 5).Draw(t, "users"); n > 0; n-- {
				users = append(users, chainGen.Draw(t, "chain"))
			}
			slices.Sort(users)
			users = slices.Compact(users)
			for _, u := range users {
				tb.AddChain(u)
			}
			for _, c := range tb.AllChains() {
				plan := chainPlan{table: tb, chain: c}
				if c.Builtin {
					plan.users = users
				} else {
					i := slices.Index(users, c.Name)
					plan.users = users[i+1:]
				}
				for n := rapid.IntRange(0, maxRules).Draw(t, "rules"); n > 0; n-- {
					c.Rules = append(c.Rules, rule(t, f, plan))
				}
			}
			rs.Tables = append(rs.Tables, tb)
		}
		return rs
	})
}

// tableModel is what modelCmp compares of a Table.
type tableModel struct {
	Name   string
	Chains []*Chain
}

var modelCmp = []cmp.Option{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
	cmpopts.IgnoreFields(Rule{}, "File", "Line"),
	// A table's chains are unexported (chainList): compare them through Chains.
	cmp.Transformer("Table", func(t *Table) *tableModel {
		if t == nil {
			return nil
		}
		return &tableModel{Name: t.Name, Chains: t.Chains()}
	}),
	cmpopts.IgnoreUnexported(Ruleset{}, Table{}, Chain{}, UnknownMatch{}, TCPMatch{}, ICMPMatch{}, StatisticMatch{}, RecentMatch{}, MarkTarget{},
		ConnmarkTarget{}, NATTarget{}, JumpTarget{}),
}

// TestRoundTripProperty: for generated rulesets, save → parse gives the same model, and
// saving again gives the same text.
func TestRoundTripProperty(t *testing.T) {
	for _, f := range []Family{IPv4, IPv6} {
		t.Run(f.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				rs := genRuleset(f).Draw(t, "ruleset")
				text := rs.Save(false)
				back, err := ParseDump(text, f, "generated")
				if err != nil {
					t.Fatalf("generated ruleset does not parse: %v\n%s", err, text)
				}
				if d := cmp.Diff(rs, back, modelCmp...); d != "" {
					t.Fatalf("model changed by save → parse (-want +got):\n%s\n%s", d, text)
				}
				if again := back.Save(false); string(again) != string(text) {
					t.Fatalf("save not stable:\n%s", lineDiff(string(text), string(again)))
				}
				// Restoring the text into an emulator gives the same save too (restore
				// semantics, with table order from the nf_tables backend).
				e := New(f)
				if err := e.RestoreText(text, RestoreOptions{}); err != nil {
					t.Fatalf("restore: %v", err)
				}
				if got := stripEmptyTables(e.Ruleset().Save(false)); got != stripEmptyTables(text) {
					t.Fatalf("restore then save differs:\n%s", lineDiff(stripEmptyTables(text), got))
				}
			})
		})
	}
}

func stripEmptyTables(b []byte) string { return strings.TrimSpace(string(b)) }
