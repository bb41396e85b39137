package emulator

// The iptables emulator's differential fuzzer, model side: a generator of small
// rulesets, the emulator's prediction for a packet, and the regression cases under
// testdata/difffuzz that every `go test` replays (against the emulator always; against
// the kernel too where the kernel test can run). The topology, the packet, the case
// file format and the kernel side are internal/difffuzz's, shared with the nftables
// emulator's fuzzer; the kernel test is difffuzz_kernel_test.go.

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/internal/difffuzz"
	"github.com/clusterlab/clusterlab/netfilter"
)

// The shared topology, by the names this file has always used.
type fzPacket = difffuzz.Packet
type fzCase = difffuzz.Case

var (
	fzClient, fzSrv1, fzSrv2, fzNode, fzGateway, fzExt, fzVIP = difffuzz.Client, difffuzz.Srv1, difffuzz.Srv2, difffuzz.Node, difffuzz.Gateway, difffuzz.Ext, difffuzz.VIP
	fzAddrs, fzPorts, fzSrcPorts, fzPrefixes                  = difffuzz.Addrs, difffuzz.Ports, difffuzz.SrcPorts, difffuzz.Prefixes
	fzDNATAddrs, fzSNATAddrs                                  = difffuzz.DNATAddrs, difffuzz.SNATAddrs
)

// fzBackends are the values a case's backend key takes: the iptables backends.
var fzBackends = []string{"nft", "legacy"}

// fzGuard goes first in filter's built-in chains: packets of the connection after its
// first (replies, the handshake's ACK, the ICMP errors and resets REJECT sends, which
// are RELATED) pass, so that the generated rules decide the first packet only, which
// is what the emulator's walk follows. A first packet is NEW, so the guard never
// matches it.
const fzGuard = "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"

// Rules are drawn from these parts. Chains: filter F1, F2 (jumped to from any filter
// chain); nat D1, D2 (from PREROUTING and OUTPUT, where DNAT is allowed) and S1 (from
// POSTROUTING, where SNAT and MASQUERADE are). A chain jumps only to a later one, so
// there are no loops.
var (
	fzRejects = []string{"", "icmp-port-unreachable", "icmp-host-unreachable", "icmp-net-unreachable",
		"icmp-proto-unreachable", "icmp-admin-prohibited", "icmp-host-prohibited", "icmp-net-prohibited", "tcp-reset"}
	fzCtStates = []string{"NEW", "ESTABLISHED", "NEW,ESTABLISHED", "RELATED", "DNAT", "SNAT", "INVALID", "UNTRACKED"}
)

// fzChain is where a rule goes: its table and chain, and which targets it may use.
type fzChain struct {
	table, name string
	builtin     bool
	targets     []string // target kinds
	jumps       []string // chains it may jump to
}

func fzChains() []fzChain {
	filterT := []string{"ACCEPT", "DROP", "REJECT", "MARK", "none"}
	return []fzChain{
		{"filter", "INPUT", true, filterT, []string{"F1", "F2"}},
		{"filter", "FORWARD", true, filterT, []string{"F1", "F2"}},
		{"filter", "OUTPUT", true, filterT, []string{"F1", "F2"}},
		{"filter", "F1", false, append([]string{"RETURN"}, filterT...), []string{"F2"}},
		{"filter", "F2", false, append([]string{"RETURN"}, filterT...), nil},
		// NAT targets are listed twice: drawn more often.
		{"nat", "PREROUTING", true, []string{"ACCEPT", "DNAT", "DNAT", "MARK", "none"}, []string{"D1", "D2"}},
		{"nat", "OUTPUT", true, []string{"ACCEPT", "DNAT", "DNAT", "MARK", "none"}, []string{"D1", "D2"}},
		{"nat", "INPUT", true, []string{"ACCEPT", "SNAT", "SNAT", "MARK", "none"}, nil},
		{"nat", "POSTROUTING", true, []string{"ACCEPT", "SNAT", "MASQUERADE", "MARK", "none"}, []string{"S1"}},
		{"nat", "D1", false, []string{"RETURN", "ACCEPT", "DNAT", "DNAT", "MARK", "none"}, []string{"D2"}},
		{"nat", "D2", false, []string{"RETURN", "ACCEPT", "DNAT", "DNAT", "MARK", "none"}, nil},
		{"nat", "S1", false, []string{"RETURN", "ACCEPT", "SNAT", "MASQUERADE", "MARK", "none"}, nil},
	}
}

func drawOf[V any](t *rapid.T, label string, vs []V) V { return difffuzz.DrawOf(t, label, vs) }

// fzMaybe is true one time in n, false when shrunk.
func fzMaybe(t *rapid.T, label string, n int) bool { return difffuzz.Maybe(t, label, n) }

func fzNeg(t *rapid.T) string {
	if fzMaybe(t, "neg", 4) {
		return "! "
	}
	return ""
}

// genFzRule draws one rule's text (after "-A CHAIN"). Its addresses, protocol and
// ports lean towards the packet's, so that rules match it often enough.
func genFzRule(t *rapid.T, c fzChain, p fzPacket) string {
	var b []string
	if fzMaybe(t, "has-s", 4) {
		b = append(b, fzAddrMatch(t, "-s", p))
	}
	if fzMaybe(t, "has-d", 3) {
		b = append(b, fzAddrMatch(t, "-d", p))
	}
	if in, out := fzIfaceOpts(c); fzMaybe(t, "has-iface", 5) && (in || out) {
		opt := "-i"
		if !in || out && rapid.Bool().Draw(t, "iface-out") {
			opt = "-o"
		}
		b = append(b, fzNeg(t)+opt+" "+drawOf(t, "iface", []string{"veth0", "veth1", "eth0", "lo", "veth+"}))
	}
	proto := drawOf(t, "proto", []string{"", "tcp", "udp", p.Proto, p.Proto})
	if proto != "" {
		b = append(b, "-p "+proto)
		switch rapid.IntRange(0, 5).Draw(t, "ports") {
		case 1:
			b = append(b, "-m "+proto+" "+fzNeg(t)+"--dport "+fzPortSpec(t, proto, p))
		case 2:
			b = append(b, "-m "+proto+" "+fzNeg(t)+"--sport "+fzPortSpec(t, proto, p))
		case 4:
			if proto == "tcp" {
				b = append(b, "-m tcp "+fzNeg(t)+drawOf(t, "tcp-flags", []string{"--syn", "--tcp-flags SYN,ACK SYN", "--tcp-flags SYN,RST,ACK,FIN SYN,ACK", "--tcp-flags ALL NONE", "--tcp-flags FIN,SYN FIN,SYN"}))
			}
		case 3:
			opt := drawOf(t, "mp-opt", []string{"--dports", "--sports", "--ports"})
			var ps []string
			for i, n := 0, rapid.IntRange(1, 3).Draw(t, "mp-n"); i < n; i++ {
				ps = append(ps, fzPortSpec(t, "multiport", p))
			}
			b = append(b, "-m multiport "+fzNeg(t)+opt+" "+strings.Join(ps, ","))
		}
	}
	if fzMaybe(t, "has-iprange", 8) {
		lo := drawOf(t, "iprange-lo", append(slices.Clone(fzAddrs), p.Src.Addr(), p.Dst.Addr()))
		hi := drawOf(t, "iprange-hi", append(slices.Clone(fzAddrs), p.Src.Addr(), p.Dst.Addr()))
		if hi.Less(lo) {
			lo, hi = hi, lo
		}
		b = append(b, "-m iprange "+fzNeg(t)+drawOf(t, "iprange-opt", []string{"--src-range ", "--dst-range "})+lo.String()+"-"+hi.String())
	}
	if fzMaybe(t, "has-addrtype", 6) {
		opt := drawOf(t, "at-opt", []string{"--dst-type", "--src-type"})
		b = append(b, "-m addrtype "+fzNeg(t)+opt+" "+drawOf(t, "at-type", []string{"LOCAL", "UNICAST", "LOCAL,UNICAST"}))
	}
	if fzMaybe(t, "has-mark", 6) {
		b = append(b, "-m mark "+fzNeg(t)+"--mark "+drawOf(t, "mark", []string{"0x1/0x1", "0x2/0x2", "0x0/0x1", "0x3"}))
	}
	if fzMaybe(t, "has-ct", 6) {
		b = append(b, "-m conntrack "+fzNeg(t)+"--ctstate "+drawOf(t, "ctstate", fzCtStates))
	}
	if fzMaybe(t, "has-comment", 8) {
		b = append(b, `-m comment --comment "`+drawOf(t, "comment", []string{"a rule", "x", "svc/port: 80"})+`"`)
	}
	targets := c.targets
	if len(c.jumps) > 0 {
		targets = append(slices.Clone(targets), "jump", "goto")
	}
	switch tk := drawOf(t, "target", targets); tk {
	case "none":
	case "ACCEPT", "DROP", "RETURN":
		b = append(b, "-j "+tk)
	case "jump", "goto":
		b = append(b, "-"+tk[:1]+" "+drawOf(t, "chain", c.jumps))
	case "MARK":
		b = append(b, "-j MARK --set-xmark "+drawOf(t, "set-mark", []string{"0x1/0x1", "0x2/0x2", "0x0/0x1", "0x3/0xffffffff"}))
	case "REJECT":
		w := drawOf(t, "reject-with", fzRejects)
		if w == "tcp-reset" && proto != "tcp" {
			w = ""
		}
		if w != "" {
			w = " --reject-with " + w
		}
		b = append(b, "-j REJECT"+w)
	case "DNAT":
		to := drawOf(t, "dnat-addr", fzDNATAddrs).String()
		if proto != "" && rapid.Bool().Draw(t, "dnat-port") {
			to += fmt.Sprintf(":%d", drawOf(t, "dnat-to-port", fzPorts))
		}
		b = append(b, "-j DNAT --to-destination "+to)
	case "SNAT":
		b = append(b, "-j SNAT --to-source "+drawOf(t, "snat-addr", fzSNATAddrs).String())
	case "MASQUERADE":
		b = append(b, "-j MASQUERADE")
	}
	return strings.Join(b, " ")
}

// fzAddrMatch draws -s or -d with a prefix, maybe negated. Not a negated /0:
// iptables-nft refuses it (testdata/difffuzz/negated-zero-prefix.case).
func fzAddrMatch(t *rapid.T, opt string, pkt fzPacket) string {
	addrs := append(slices.Clone(fzAddrs), pkt.Src.Addr(), pkt.Dst.Addr())
	p, _ := drawOf(t, opt+"addr", addrs).Prefix(drawOf(t, opt+"bits", fzPrefixes))
	neg := fzNeg(t)
	if p.Bits() == 0 {
		neg = ""
	}
	return neg + opt + " " + p.String()
}

// fzIfaceOpts says whether a chain's rules may use -i and -o: iptables refuses -o in
// INPUT and PREROUTING and -i in OUTPUT and POSTROUTING; a user chain takes both (the
// interface a hook lacks is empty: -i veth0 never matches there, ! -i veth0 always).
func fzIfaceOpts(c fzChain) (in, out bool) {
	switch c.name {
	case "INPUT", "PREROUTING":
		return true, false
	case "OUTPUT", "POSTROUTING":
		return false, true
	}
	return true, true
}

// fzPortSpec is a port or a range around the ports packets use, valid for the
// module: -m tcp wants the start at most the end, multiport below it, and -m udp takes
// a reversed range (which never matches).
func fzPortSpec(t *rapid.T, module string, pkt fzPacket) string {
	all := append(slices.Clone(fzPorts), append(fzSrcPorts, pkt.Src.Port(), pkt.Dst.Port())...)
	p := drawOf(t, "port", all)
	if fzMaybe(t, "range", 4) {
		q := drawOf(t, "port-max", all)
		if q < p && module != "udp" || q == p && module == "multiport" {
			p, q = min(p, q), max(p, q)+1
		}
		return fmt.Sprintf("%d:%d", p, q)
	}
	return fmt.Sprint(p)
}

// genFzRuleset draws a ruleset for the packet as iptables-restore text: filter and
// nat, every chain declared (user chains only when used), a few rules per chain, the
// filter guard first.
func genFzRuleset(t *rapid.T, p fzPacket) string {
	rules := map[string][]string{}
	used := map[string]bool{}
	for _, c := range fzChains() {
		drawn := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) string { return genFzRule(t, c, p) }), 0, 3).Draw(t, "rules-"+c.name)
		for _, r := range drawn {
			rules[c.table+"/"+c.name] = append(rules[c.table+"/"+c.name], r)
			for _, j := range c.jumps {
				if strings.HasSuffix(r, " "+j) {
					used[j] = true
				}
			}
		}
	}
	var b strings.Builder
	for _, table := range []string{"filter", "nat"} {
		fmt.Fprintf(&b, "*%s\n", table)
		for _, c := range fzChains() {
			if c.table != table {
				continue
			}
			if c.builtin {
				policy := "ACCEPT"
				if table == "filter" && fzMaybe(t, "policy-"+c.name, 4) {
					policy = "DROP"
				}
				fmt.Fprintf(&b, ":%s %s [0:0]\n", c.name, policy)
			} else if used[c.name] || len(rules[table+"/"+c.name]) > 0 {
				fmt.Fprintf(&b, ":%s - [0:0]\n", c.name)
			}
		}
		for _, c := range fzChains() {
			if c.table != table {
				continue
			}
			if table == "filter" && c.builtin {
				fmt.Fprintf(&b, "-A %s %s\n", c.name, fzGuard)
			}
			for _, r := range rules[table+"/"+c.name] {
				fmt.Fprintf(&b, "-A %s %s\n", c.name, strings.TrimSpace(r))
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// genFzPacket draws a packet (difffuzz.GenPacket).
func genFzPacket(t *rapid.T) fzPacket { return difffuzz.GenPacket(t) }

// fzWalk walks the packet through the emulator loaded with the ruleset.
func fzWalk(ruleset string, p fzPacket) (*Outcome, error) {
	emu := New(IPv4)
	if err := emu.RestoreText([]byte(ruleset), RestoreOptions{File: "ruleset"}); err != nil {
		return nil, err
	}
	pkt := Packet{Src: p.Src.Addr(), Dst: p.Dst.Addr(), SrcPort: p.Src.Port(), DstPort: p.Dst.Port(),
		TTL: 64, Len: 60, InIface: difffuzz.InIface[p.From]}
	if p.Proto == "tcp" {
		pkt.Proto, pkt.TCPFlags = netfilter.ProtoTCP, netfilter.TCPSyn
	} else {
		pkt.Proto = netfilter.ProtoUDP
	}
	from := map[string]From{"client": FromPod, "external": FromExternal, "node": FromNode}[p.From]
	r, err := emu.Walk(WalkInput{Packet: pkt, From: from, Local: difffuzz.NodeLocal, IfaceAddrs: difffuzz.IfaceAddrs, Route: difffuzz.Route})
	if err != nil {
		return nil, err
	}
	return r.Outcomes[0], nil
}

// fzExpect is what the client should see, by the emulator's outcome (difffuzz.Expect).
func fzExpect(o *Outcome, p fzPacket) string {
	return difffuzz.Expect(difffuzz.Prediction{Verdict: o.Verdict, RejectWith: o.RejectWith,
		SendPath: o.Decision != nil && (o.Decision.Hook == "OUTPUT" || o.Decision.Hook == "POSTROUTING"), DNAT: o.DNATDestination,
		Masqueraded: o.Masqueraded, SNAT: o.SNATSource}, p)
}

const fzCaseDir = "testdata/difffuzz"

func loadFzCases(t *testing.T) map[string]*fzCase {
	return difffuzz.LoadCases(t, fzCaseDir, fzBackends)
}

// checkFzCase holds the emulator to a regression case: for "same", its prediction is
// the kernel's observation; for "differ", it is the emulator's recorded one and not the
// kernel's.
func checkFzCase(c *fzCase) error {
	got := "load error"
	o, err := fzWalk(c.Ruleset, c.Packet)
	if err == nil {
		got = fzExpect(o, c.Packet)
	}
	return c.Check(got)
}

// TestDiffFuzzRegressions replays every case the differential fuzzer kept under
// testdata/difffuzz through the emulator (no root needed); TestKernelDiffFuzz replays
// them through the kernel too.
func TestDiffFuzzRegressions(t *testing.T) {
	cases := loadFzCases(t)
	if len(cases) == 0 {
		t.Fatalf("no cases under %s", fzCaseDir)
	}
	for f, c := range cases {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if err := checkFzCase(c); err != nil {
				t.Errorf("%s: %s: %v", f, c.Packet, err)
			}
		})
	}
}

// TestDiffFuzzCaseFormat: a case survives Format and parse, and bad files are errors
// naming the file and line.
func TestDiffFuzzCaseFormat(t *testing.T) {
	c := &fzCase{Comment: []string{"why"}, Packet: fzPacket{Proto: "udp", From: "node", Src: netip.MustParseAddrPort("192.168.77.1:1111"),
		Dst: netip.MustParseAddrPort("10.244.0.3:80")}, Kernel: "timeout", Emulator: "answered srv1 from 192.168.77.1", Expect: "differ: a reason",
		Backend: "legacy", Ruleset: "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n"}
	got, err := difffuzz.ParseCase("x.case", c.Format(), fzBackends)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Format()) != string(c.Format()) {
		t.Errorf("round trip:\n%s\nwant\n%s", got.Format(), c.Format())
	}
	for _, bad := range []struct{ text, want string }{
		{"packet: tcp from nowhere 1.2.3.4:1 -> 1.2.3.4:2\n", "x.case:1: packet"},
		{"packet: tcp from node 1.2.3.4:1 -> 1.2.3.4:2\nexpect: maybe\n", "x.case:2: expect \"maybe\""},
		{"nonsense\n", "x.case:1:"},
		{"kernel: timeout\n", "x.case: no packet"},
	} {
		if _, err := difffuzz.ParseCase("x.case", []byte(bad.text), fzBackends); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: error %v, want one containing %q", bad.text, err, bad.want)
		}
	}
}

// TestDiffFuzzGeneratorLoads: every drawn ruleset loads into the emulator, and every
// drawn packet walks (the kernel test relies on both; rejections there are findings).
func TestDiffFuzzGeneratorLoads(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genFzPacket(t)
		rs := genFzRuleset(t, p)
		o, err := fzWalk(rs, p)
		if err != nil {
			t.Fatalf("%v\n%s", err, rs)
		}
		if e := fzExpect(o, p); strings.HasSuffix(e, "?") || strings.HasPrefix(e, "no owner") {
			t.Fatalf("no prediction for %s: %s\n%s", p, e, rs)
		}
	})
}
