package emulator

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// pkt builds a packet from "proto src:sport dst:dport" ("tcp 10.0.0.1:1234 10.0.0.2:80").
func pkt(s string) *Packet {
	f := strings.Fields(s)
	p := &Packet{Len: 60, TTL: 64}
	var err error
	if p.Proto, err = ParseProto(f[0]); err != nil {
		panic(err)
	}
	parse := func(s string) (netip.Addr, uint16) {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return ap.Addr(), ap.Port()
		}
		return netip.MustParseAddr(s), 0
	}
	p.Src, p.SrcPort = parse(f[1])
	p.Dst, p.DstPort = parse(f[2])
	if p.Proto == netfilter.ProtoTCP {
		p.TCPFlags = netfilter.TCPSyn
	}
	return p
}

// load builds an emulator from restore text.
func load(t testing.TB, f Family, text string, opts ...Option) *Emulator {
	t.Helper()
	e := New(f, opts...)
	if err := e.RestoreText([]byte(text), RestoreOptions{File: "rules"}); err != nil {
		t.Fatal(err)
	}
	return e
}

// matchedLines returns the lines of the rules that matched in a trace.
func matchedLines(tr *Trace) string {
	var out []string
	for _, s := range tr.Steps {
		if s.Kind == StepRule && s.Matched != nil && *s.Matched {
			out = append(out, fmt.Sprint(s.Line))
		}
	}
	return strings.Join(out, ",")
}

// TestMatches runs one packet through filter INPUT per case; each case's rules accept
// with a mark naming the rule that matched first.
func TestMatches(t *testing.T) {
	local := []netip.Addr{mustAddr("192.168.0.2"), mustAddr("fd00::2")}
	sets, err := ParseIPSetSave(mustRead(t, "../../../testdata/iptables/normalise/sets.ipset"), "sets")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		rules []string // each "-A INPUT ..." or a chain line; the first match wins
		pkt   *Packet
		setup func(*Packet)
		want  string // "ACCEPT@n" (line n of the rules decided), "DROP@policy", "REJECT:type@n"
	}{
		{"-s prefix", []string{"-s 10.1.0.0/16 -j DROP", "-s 10.0.0.0/8 -j ACCEPT"}, pkt("tcp 10.2.3.4:1 192.168.0.2:80"), nil, "ACCEPT@2"},
		{"! -s", []string{"! -s 10.0.0.0/8 -j DROP", "-j ACCEPT"}, pkt("tcp 10.2.3.4:1 192.168.0.2:80"), nil, "ACCEPT@2"},
		{"-d host", []string{"-d 192.168.0.3 -j DROP", "-d 192.168.0.2/32 -j ACCEPT"}, pkt("tcp 10.2.3.4:1 192.168.0.2:80"), nil, "ACCEPT@2"},
		{"-p and ! -p", []string{"-p udp -j DROP", "! -p tcp -j DROP", "-p tcp -j ACCEPT"}, pkt("tcp 10.0.0.1:1 192.168.0.2:80"), nil, "ACCEPT@3"},
		{"-i wildcard", []string{"-i eth0 -j DROP", "-i cali+ -j ACCEPT"}, pkt("tcp 10.0.0.1:1 192.168.0.2:80"), func(p *Packet) { p.InIface = "cali12ab" }, "ACCEPT@2"},
		{"! -i and missing interface", []string{"-i lo -j DROP", "! -i lo -j ACCEPT"}, pkt("tcp 10.0.0.1:1 192.168.0.2:80"), nil, "ACCEPT@2"},
		{"-f", []string{"-f -j DROP", "! -f -j ACCEPT"}, pkt("tcp 10.0.0.1:1 192.168.0.2:80"), nil, "ACCEPT@2"},
		{"-f on a fragment", []string{"-p tcp --dport 80 -j DROP", "-f -j ACCEPT"}, pkt("tcp 10.0.0.1:1 192.168.0.2:80"), func(p *Packet) { p.Fragment = true }, "ACCEPT@2"},
		{"--dport range", []string{"-p tcp --dport 81:90 -j DROP", "-p tcp --dport 70:80 -j ACCEPT"}, pkt("tcp 10.0.0.1:1 192.168.0.2:80"), nil, "ACCEPT@2"},
		{"! --dport and --sport", []string{"-p tcp ! --dport 80 -j DROP", "-p tcp --sport 1000: -j DROP", "-p tcp --sport :999 -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "ACCEPT@3"},
		{"--syn and --tcp-flags", []string{"-p tcp ! --syn -j DROP", "-p tcp --tcp-flags SYN,ACK ACK -j DROP", "-p tcp --tcp-flags ALL SYN -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "ACCEPT@3"},
		{"tcp flags of an ACK", []string{"-p tcp --syn -j DROP", "-p tcp --tcp-flags SYN,ACK ACK -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), func(p *Packet) { p.TCPFlags = netfilter.TCPAck }, "ACCEPT@2"},
		{"udp port", []string{"-p udp --dport 54 -j DROP", "-p udp -m udp --dport domain -j ACCEPT"}, pkt("udp 10.0.0.1:5 192.168.0.2:53"), nil, "ACCEPT@2"},
		{"sctp port", []string{"-p sctp --dport 5 -j DROP", "-p sctp --dport 9 -j ACCEPT"}, pkt("sctp 10.0.0.1:5 192.168.0.2:9"), nil, "ACCEPT@2"},
		{"icmp type", []string{"-p icmp --icmp-type echo-reply -j DROP", "-p icmp --icmp-type port-unreachable -j DROP", "-p icmp --icmp-type 3 -j ACCEPT"}, pkt("icmp 10.0.0.1 192.168.0.2"), func(p *Packet) { p.ICMPType, p.ICMPCode = 3, 1 }, "ACCEPT@3"},
		{"icmp any", []string{"-p icmp --icmp-type any -j ACCEPT"}, pkt("icmp 10.0.0.1 192.168.0.2"), nil, "ACCEPT@1"},
		{"multiport", []string{"-p tcp -m multiport --dports 1,2,3 -j DROP", "-p tcp -m multiport ! --sports 5 -j DROP", "-p tcp -m multiport --ports 70:90,100 -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "ACCEPT@3"},
		{"addrtype LOCAL", []string{"-m addrtype --src-type LOCAL -j DROP", "-m addrtype ! --dst-type LOCAL -j DROP", "-m addrtype --dst-type LOCAL,BROADCAST -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "ACCEPT@3"},
		{"addrtype loopback and multicast", []string{"-m addrtype --dst-type MULTICAST -j DROP", "-m addrtype --dst-type LOCAL -j ACCEPT"}, pkt("tcp 10.0.0.1:5 127.0.0.1:80"), nil, "ACCEPT@2"},
		{"addrtype UNICAST", []string{"-m addrtype --dst-type UNICAST -j ACCEPT"}, pkt("tcp 10.0.0.1:5 8.8.8.8:80"), nil, "ACCEPT@1"},
		// IPv4's inet_dev_addr_type answers BROADCAST for 0.0.0.0/8 (ipv4_is_zeronet), never UNSPEC.
		{"addrtype IPv4 zero network is BROADCAST", []string{"-m addrtype --src-type UNSPEC -j DROP", "-m addrtype --src-type BROADCAST -j ACCEPT"}, pkt("udp 0.0.0.0:68 255.255.255.255:67"), nil, "ACCEPT@2"},
		{"addrtype IPv6 unspecified is UNSPEC", []string{"-m addrtype --src-type UNSPEC -j ACCEPT"}, pkt("udp [::]:546 [ff02::1:2]:547"), nil, "ACCEPT@1"},
		// --limit-iface-in: LOCAL only for an address on the packet's input interface
		// (the environment puts 10.96.0.10 on kube-ipvs0 and 172.18.0.2 on eth0).
		{"addrtype --limit-iface-in: address of another interface is UNICAST", []string{"-m addrtype --dst-type LOCAL --limit-iface-in -j DROP", "-m addrtype --dst-type UNICAST --limit-iface-in -j ACCEPT"}, pkt("tcp 10.0.0.1:5 10.96.0.10:80"), func(p *Packet) { p.InIface = "eth0" }, "ACCEPT@2"},
		{"addrtype without the limit: local on any interface", []string{"-m addrtype ! --dst-type LOCAL -j DROP", "-j ACCEPT"}, pkt("tcp 10.0.0.1:5 10.96.0.10:80"), func(p *Packet) { p.InIface = "eth0" }, "ACCEPT@2"},
		{"addrtype --limit-iface-in: address of the input interface", []string{"-m addrtype ! --dst-type LOCAL --limit-iface-in -j DROP", "-j ACCEPT"}, pkt("tcp 10.0.0.1:5 172.18.0.2:80"), func(p *Packet) { p.InIface = "eth0" }, "ACCEPT@2"},
		{"addrtype --limit-iface-in: negated, other interface", []string{"-m addrtype ! --dst-type LOCAL --limit-iface-in -j ACCEPT"}, pkt("tcp 10.0.0.1:5 172.18.0.2:80"), func(p *Packet) { p.InIface = "cbr0" }, "ACCEPT@1"},
		{"addrtype --limit-iface-in: --src-type too", []string{"-m addrtype --src-type LOCAL --limit-iface-in -j DROP", "-m addrtype --src-type LOCAL -j ACCEPT"}, pkt("tcp 10.96.0.10:5 172.18.0.2:80"), func(p *Packet) { p.InIface = "eth0" }, "ACCEPT@2"},
		{"addrtype --limit-iface-in: loopback is on lo only", []string{"-m addrtype --dst-type LOCAL --limit-iface-in -j DROP", "-m addrtype --dst-type UNICAST --limit-iface-in -j ACCEPT"}, pkt("tcp 10.0.0.1:5 127.0.0.1:80"), func(p *Packet) { p.InIface = "eth0" }, "ACCEPT@2"},
		{"addrtype --limit-iface-in: loopback on lo", []string{"-m addrtype --dst-type LOCAL --limit-iface-in -j ACCEPT"}, pkt("tcp 127.0.0.1:5 127.0.0.1:80"), func(p *Packet) { p.InIface = "lo" }, "ACCEPT@1"},
		{"addrtype --limit-iface-in: an address of unknown interface is local on any", []string{"-m addrtype ! --dst-type LOCAL --limit-iface-in -j DROP", "-j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), func(p *Packet) { p.InIface = "eth9" }, "ACCEPT@2"},
		{"addrtype --limit-iface-in: IPv6", []string{"-m addrtype --dst-type LOCAL --limit-iface-in -j DROP", "-m addrtype --dst-type LOCAL -j ACCEPT"}, pkt("tcp [fd00::9]:5 [fd00::10]:80"), func(p *Packet) { p.InIface = "eth0" }, "ACCEPT@2"},
		{"addrtype IPv4 gives one type: a local address is not UNICAST", []string{"-m addrtype --dst-type UNICAST -j DROP", "-m addrtype ! --dst-type LOCAL -j DROP", "-j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "ACCEPT@3"},
		{"addrtype IPv6 local unicast is UNICAST and LOCAL", []string{"-m addrtype ! --dst-type UNICAST -j DROP", "-m addrtype ! --dst-type LOCAL -j DROP", "-m addrtype --dst-type UNICAST,LOCAL -j ACCEPT"}, pkt("tcp [fd00::9]:5 [fd00::2]:80"), nil, "ACCEPT@3"},
		{"addrtype IPv6 UNICAST,LOCAL needs both", []string{"-m addrtype --dst-type UNICAST,LOCAL -j DROP", "-m addrtype --dst-type LOCAL -j DROP", "-m addrtype ! --dst-type UNICAST -j DROP", "-m addrtype --dst-type UNICAST -j ACCEPT"}, pkt("tcp [fd00::9]:5 [2001:db8::1]:80"), nil, "ACCEPT@4"},
		{"addrtype IPv6 negated MULTICAST,LOCAL: not multicast, so no match, so the negation matches", []string{"-m addrtype ! --dst-type MULTICAST,LOCAL -j ACCEPT", "-j DROP"}, pkt("tcp [fd00::9]:5 [fd00::2]:80"), nil, "ACCEPT@1"},
		{"addrtype IPv6 multicast", []string{"-m addrtype --dst-type UNICAST -j DROP", "-m addrtype --dst-type LOCAL -j DROP", "-m addrtype --dst-type MULTICAST,UNICAST -j DROP", "-m addrtype ! --dst-type MULTICAST -j DROP", "-m addrtype --dst-type MULTICAST -j ACCEPT"}, pkt("udp [fd00::9]:5 [ff02::fb]:5353"), nil, "ACCEPT@5"},
		{"addrtype IPv6 unspecified is UNSPEC only", []string{"-m addrtype --src-type UNICAST -j DROP", "-m addrtype --src-type LOCAL -j DROP", "-m addrtype --src-type UNSPEC,LOCAL -j DROP", "-m addrtype ! --src-type UNSPEC -j DROP", "-m addrtype --src-type UNSPEC,MULTICAST -j DROP", "-m addrtype --src-type UNSPEC -j ACCEPT"}, pkt("udp [::]:546 [ff02::1:2]:547"), nil, "ACCEPT@6"},
		{"addrtype IPv6 loopback is UNICAST and LOCAL", []string{"-m addrtype ! --src-type UNICAST -j DROP", "-m addrtype ! --dst-type LOCAL,UNICAST -j DROP", "-m addrtype --src-type UNICAST,LOCAL --dst-type LOCAL -j ACCEPT"}, pkt("tcp [::1]:5 [::1]:80"), nil, "ACCEPT@3"},
		{"addrtype IPv6 remote link-local is UNICAST, not LOCAL", []string{"-m addrtype --src-type LOCAL -j DROP", "-m addrtype ! --src-type UNICAST -j DROP", "-m addrtype ! --src-type LOCAL -j ACCEPT"}, pkt("tcp [fe80::1]:5 [fd00::2]:80"), nil, "ACCEPT@3"},
		{"addrtype IPv6 IPv4-mapped is neither UNICAST nor MULTICAST", []string{"-m addrtype --src-type UNICAST -j DROP", "-m addrtype --src-type MULTICAST -j DROP", "-m addrtype ! --src-type UNICAST -j ACCEPT"}, pkt("tcp [::ffff:10.0.0.1]:5 [fd00::2]:80"), nil, "ACCEPT@3"},
		{"addrtype IPv6 --limit-iface-in: local on another interface is UNICAST only", []string{"-m addrtype --dst-type UNICAST,LOCAL --limit-iface-in -j DROP", "-m addrtype ! --dst-type UNICAST --limit-iface-in -j DROP", "-m addrtype --dst-type UNICAST,LOCAL -j ACCEPT"}, pkt("tcp [fd00::9]:5 [fd00::10]:80"), func(p *Packet) { p.InIface = "eth0" }, "ACCEPT@3"},
		{"addrtype IPv6 --limit-iface-in: on the input interface", []string{"-m addrtype ! --dst-type UNICAST,LOCAL --limit-iface-in -j DROP", "-j ACCEPT"}, pkt("tcp [fd00::9]:5 [fd00::10]:80"), func(p *Packet) { p.InIface = "kube-ipvs0" }, "ACCEPT@2"},
		{"addrtype --limit-iface-in: multicast is not a lookup", []string{"-m addrtype --dst-type MULTICAST --limit-iface-in -j ACCEPT"}, pkt("udp 10.0.0.1:5 224.0.0.251:5353"), func(p *Packet) { p.InIface = "eth0" }, "ACCEPT@1"},
		{"comment always matches", []string{"-m comment --comment \"a b\" -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "ACCEPT@1"},
		{"statistic 0 and 1", []string{"-m statistic --mode random --probability 0 -j DROP", "-m statistic --mode random ! --probability 0 -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "ACCEPT@2"},
		{"mark", []string{"-m mark --mark 0x4000 -j DROP", "-m mark ! --mark 0x4000/0x4000 -j DROP", "-m mark --mark 0x4000/0x4000 -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), func(p *Packet) { p.Mark = 0x4001 }, "ACCEPT@3"},
		{"connmark", []string{"-m connmark --mark 0x1 -j DROP", "-m connmark --mark 0x2/0x2 -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), func(p *Packet) { p.CT.Mark = 0x6 }, "ACCEPT@2"},
		{"ctstate NEW", []string{"-m conntrack --ctstate RELATED,ESTABLISHED -j DROP", "-m conntrack --ctstate NEW -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "ACCEPT@2"},
		{"ctstate DNAT from the status", []string{"-m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP", "-m conntrack --ctstate DNAT -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), func(p *Packet) { p.CT.Status |= netfilter.StatusDstNAT }, "ACCEPT@2"},
		{"ctstate INVALID: other conntrack options do not match", []string{"-m conntrack --ctorigdst 192.168.0.2 -j DROP", "-m conntrack ! --ctstate NEW -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), func(p *Packet) { p.CT.State = netfilter.CtInvalid }, "ACCEPT@2"},
		{"ctorigdst and port", []string{"-m conntrack --ctorigdst 10.96.0.0/12 --ctorigdstport 443 -j DROP", "-m conntrack --ctorigdst 10.96.0.10 --ctorigdstport 53 --ctproto udp -j ACCEPT"}, pkt("udp 10.0.0.1:5 10.244.0.9:5353"),
			func(p *Packet) {
				p.CT.Orig = netfilter.Tuple{Src: p.Src, Dst: mustAddr("10.96.0.10"), SrcPort: 5, DstPort: 53}
			}, "ACCEPT@2"},
		{"ctdir and ctstatus", []string{"-m conntrack --ctdir REPLY -j DROP", "-m conntrack --ctstatus SEEN_REPLY -j DROP", "-m conntrack --ctdir ORIGINAL --ctstatus ASSURED,CONFIRMED -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), func(p *Packet) { p.CT.State, p.CT.Status = netfilter.CtEstablished, netfilter.StatusAssured }, "ACCEPT@3"},
		{"ctexpire", []string{"-m conntrack --ctexpire 0:10 -j DROP", "-m conntrack --ctexpire 100:200 -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), func(p *Packet) { p.CT.Expire = 150 * time.Second }, "ACCEPT@2"},
		{"state", []string{"-m state --state INVALID -j DROP", "-m state ! --state NEW -j DROP", "-m state --state NEW,UNTRACKED -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "ACCEPT@3"},
		{"set hash:ip,port dst,dst", []string{"-m set --match-set KUBE-CLUSTER-IP src,dst -j DROP", "-m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT"}, pkt("tcp 10.0.0.1:5 10.96.0.1:443"), nil, "ACCEPT@2"},
		{"set protocol is part of the key", []string{"-m set --match-set KUBE-CLUSTER-IP dst,dst -j DROP", "-j ACCEPT"}, pkt("udp 10.0.0.1:5 10.96.0.1:443"), nil, "ACCEPT@2"},
		{"set hash:net with nomatch", []string{"-m set --match-set KUBE-NETS src -j DROP", "-m set ! --match-set KUBE-NETS src -j ACCEPT"}, pkt("tcp 10.1.2.3:5 10.96.0.1:443"), nil, "ACCEPT@2"},
		{"set hash:net", []string{"-m set --match-set KUBE-NETS src -j ACCEPT"}, pkt("tcp 10.2.2.3:5 10.96.0.1:443"), nil, "ACCEPT@1"},
		{"set hash:ip,port,ip", []string{"-m set --match-set KUBE-LOOP-BACK dst,dst,src -j ACCEPT"}, pkt("tcp 10.244.1.5:5 10.244.1.5:8080"), nil, "ACCEPT@1"},
		{"set hash:ip,port,net", []string{"-m set --match-set KUBE-LB-SRC dst,dst,src -j ACCEPT"}, pkt("tcp 203.0.113.9:5 1.2.3.4:80"), nil, "ACCEPT@1"},
		{"set bitmap:port", []string{"-p tcp -m set --match-set KUBE-NODE-PORT-TCP dst -j ACCEPT"}, pkt("tcp 203.0.113.9:5 192.168.0.2:30080"), nil, "ACCEPT@1"},
		{"a missing set is undecidable: assumed not to match", []string{"-m set --match-set NOPE dst -j DROP", "-j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "ACCEPT@2"},
		{"iprange", []string{"-m iprange --src-range 10.0.0.5-10.0.0.9 -j DROP", "-m iprange ! --src-range 10.0.0.5-10.0.0.9 --dst-range 192.168.0.1-192.168.0.3 -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "ACCEPT@2"},
		{"unknown module: assumed not to match", []string{"-m physdev --physdev-is-bridged -j DROP", "-m physdev ! --physdev-is-bridged -j DROP", "-j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "ACCEPT@3"},
		{"header fields are checked before an unknown module", []string{"-p udp -m limit --limit 1/s -j DROP", "-j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "ACCEPT@2"},
		{"tcp option is undecidable", []string{"-p tcp --tcp-option 2 -j DROP", "-j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "ACCEPT@2"},
		{"IPv6 header and icmp6", []string{"-s fd00::/64 -p ipv6-icmp --icmpv6-type echo-request -j ACCEPT"}, pkt("ipv6-icmp fd00::9 fd00::2"), func(p *Packet) { p.ICMPType = 128 }, "ACCEPT@1"},
		{"policy", []string{":INPUT DROP [0:0]", "-p udp -j ACCEPT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "DROP@policy"},
		{"REJECT default", []string{"-p tcp -j REJECT"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "REJECT:icmp-port-unreachable@1"},
		{"REJECT IPv6 default", []string{"-p tcp -j REJECT"}, pkt("tcp [fd00::9]:5 [fd00::2]:80"), nil, "REJECT:icmp6-port-unreachable@1"},
		{"REJECT tcp-reset", []string{"-p tcp -j REJECT --reject-with tcp-reset"}, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil, "REJECT:tcp-reset@1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.pkt
			fam := FamilyOf(p.Dst)
			var text strings.Builder
			text.WriteString("*filter\n")
			var lines []int
			n := 1
			for _, r := range tc.rules {
				n++
				if strings.HasPrefix(r, ":") {
					text.WriteString(r + "\n")
					continue
				}
				text.WriteString("-A INPUT " + r + "\n")
				lines = append(lines, n)
			}
			text.WriteString("COMMIT\n")
			e := load(t, fam, text.String(), WithIPSets(sets))
			if tc.setup != nil {
				tc.setup(p)
			}
			tr := &Trace{}
			env := NewStaticEnv(1, local...)
			env.IfaceLocal = map[string][]netip.Addr{"eth0": {mustAddr("172.18.0.2")}, "kube-ipvs0": {mustAddr("10.96.0.10"), mustAddr("fd00::10")}}
			res := e.EvalTable(env, TableFilter, netfilter.Input, p, tr)
			got := res.Verdict.String()
			if res.RejectWith != "" {
				got += ":" + res.RejectWith
			}
			if res.Decision.ByPolicy() {
				got += "@policy"
			} else {
				idx := -1
				for i, l := range lines {
					if l == res.Decision.Rule.Line {
						idx = i + 1
					}
				}
				got += fmt.Sprintf("@%d", idx)
			}
			if got != tc.want {
				t.Errorf("got %s, want %s\n%s", got, tc.want, tr)
			}
		})
	}
}

func TestTargets(t *testing.T) {
	env := NewStaticEnv(7, mustAddr("192.168.0.2"))
	env.IfaceAddrs = map[string]netip.Addr{"eth0": mustAddr("192.168.0.2"), "cni0": mustAddr("10.244.0.1")}

	t.Run("jump, RETURN, goto", func(t *testing.T) {
		e := load(t, IPv4, `*filter
:INPUT DROP [0:0]
:A - [0:0]
:B - [0:0]
:C - [0:0]
-A INPUT -j A
-A INPUT -j ACCEPT
-A A -g B
-A A -j DROP
-A B -j C
-A B -j RETURN
-A B -j DROP
-A C -p udp -j DROP
COMMIT
`)
		// INPUT → A → goto B → C (falls off) → B RETURN: back to INPUT (A's caller),
		// skipping A's DROP.
		tr := &Trace{}
		res := e.EvalTable(env, TableFilter, netfilter.Input, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), tr)
		if res.Verdict != Accept || res.Decision.Rule == nil || res.Decision.Rule.Line != 7 {
			t.Fatalf("got %+v, want ACCEPT by line 7\n%s", res, tr)
		}
		if got := matchedLines(tr); got != "6,8,10,11,7" {
			t.Errorf("matched lines %s, want 6,8,10,11,7\n%s", got, tr)
		}
	})

	t.Run("MARK forms", func(t *testing.T) {
		e := load(t, IPv4, `*mangle
-A PREROUTING -j MARK --set-mark 0xff00
-A PREROUTING -j MARK --and-mark 0x0ff0
-A PREROUTING -j MARK --or-mark 0x0001
-A PREROUTING -j MARK --xor-mark 0x0011
-A PREROUTING -j MARK --set-xmark 0x4000/0x4000
-A PREROUTING -m mark --mark 0x4f10 -j ACCEPT
COMMIT
`)
		p := pkt("tcp 10.0.0.1:5 192.168.0.2:80")
		p.Mark = 0x1234
		res := e.EvalTable(env, TableMangle, netfilter.Prerouting, p, nil)
		// 0xff00 → &0x0ff0 = 0x0f00 → |1 = 0x0f01 → ^0x11 = 0x0f10 → |0x4000 = 0x4f10.
		if p.Mark != 0x4f10 || res.Decision.Rule == nil || res.Decision.Rule.Line != 7 {
			t.Errorf("mark %#x, decision %+v", p.Mark, res.Decision)
		}
	})

	t.Run("CONNMARK set, save, restore", func(t *testing.T) {
		e := load(t, IPv4, `*mangle
-A PREROUTING -j CONNMARK --set-mark 0x10/0xf0
-A PREROUTING -j MARK --set-mark 0x3
-A PREROUTING -j CONNMARK --save-mark --mask 0x0f
-A PREROUTING -j MARK --set-mark 0x0
-A PREROUTING -j CONNMARK --restore-mark --nfmask 0xff --ctmask 0xf0
COMMIT
`)
		p := pkt("tcp 10.0.0.1:5 192.168.0.2:80")
		p.CT.Mark = 0x101
		e.EvalTable(env, TableMangle, netfilter.Prerouting, p, nil)
		// ct: (0x101 &^ 0xf0) ^ 0x10 = 0x111; save: (0x111 &^ 0xf) ^ (0x3 & 0xf) = 0x113;
		// restore: (0 &^ 0xff) ^ (0x113 & 0xf0) = 0x10.
		if p.CT.Mark != 0x113 || p.Mark != 0x10 {
			t.Errorf("ctmark %#x mark %#x, want 0x113 0x10", p.CT.Mark, p.Mark)
		}
	})

	t.Run("DNAT with a port, later tables see it", func(t *testing.T) {
		e := load(t, IPv4, `*nat
-A OUTPUT -p tcp -d 10.96.0.1 -j DNAT --to-destination 10.244.0.5:8443
COMMIT
*filter
-A OUTPUT -d 10.244.0.5 -p tcp --dport 8443 -m conntrack --ctstate DNAT -j ACCEPT
-A OUTPUT -j DROP
COMMIT
`)
		p := pkt("tcp 192.168.0.2:5 10.96.0.1:443")
		hr := e.EvalHook(env, netfilter.Output, p, nil)
		if hr.Verdict != Accept || hr.NAT == nil || hr.NAT.Dest() != "10.244.0.5:8443" || p.Dst != mustAddr("10.244.0.5") || p.DstPort != 8443 {
			t.Errorf("hook result %+v nat %v packet %s", hr, hr.NAT, p)
		}
		if hr.Decision.Table != TableFilter || hr.Decision.Rule == nil {
			t.Errorf("decision %+v", hr.Decision)
		}
	})

	t.Run("nat only for the first packet", func(t *testing.T) {
		e := load(t, IPv4, "*nat\n-A PREROUTING -p tcp -j DNAT --to-destination 10.244.0.5\nCOMMIT\n")
		p := pkt("tcp 10.0.0.1:5 10.96.0.1:443")
		p.CT.State, p.CT.Status = netfilter.CtEstablished, netfilter.StatusConfirmed|netfilter.StatusSeenReply
		tr := &Trace{}
		hr := e.EvalHook(env, netfilter.Prerouting, p, tr)
		if hr.NAT != nil || p.Dst != mustAddr("10.96.0.1") {
			t.Errorf("nat applied to an established packet: %+v", hr)
		}
		if !strings.Contains(tr.String(), "not the first packet") {
			t.Errorf("trace does not say why nat was skipped:\n%s", tr)
		}
	})

	t.Run("DNAT ranges: address picked, port kept in range", func(t *testing.T) {
		e := load(t, IPv4, "*nat\n-A PREROUTING -p tcp -j DNAT --to-destination 10.0.0.1-10.0.0.3:70-90\nCOMMIT\n")
		seen := map[string]int{}
		for i := 0; i < 300; i++ {
			p := pkt("tcp 10.9.0.1:5 10.96.0.1:80")
			hr := e.EvalHook(env, netfilter.Prerouting, p, nil)
			seen[hr.NAT.Dest()]++
		}
		if len(seen) != 3 || seen["10.0.0.1:80"] == 0 || seen["10.0.0.3:80"] == 0 {
			t.Errorf("destinations %v, want the three addresses with port 80", seen)
		}
	})

	t.Run("SNAT, MASQUERADE and REDIRECT", func(t *testing.T) {
		e := load(t, IPv4, `*nat
:POST - [0:0]
-A PREROUTING -p tcp --dport 15001 -j REDIRECT --to-ports 15006
-A OUTPUT -p tcp --dport 80 -j REDIRECT --to-ports 8080
-A POSTROUTING -j POST
-A POST -s 10.244.0.0/16 -o eth0 -j MASQUERADE --random-fully
-A POST -s 10.88.0.0/16 -p tcp -j SNAT --to-source 192.168.0.2:20000-30000
COMMIT
`)
		p := pkt("tcp 10.244.0.5:5 8.8.8.8:443")
		p.OutIface = "eth0"
		hr := e.EvalHook(env, netfilter.Postrouting, p, nil)
		if hr.NAT == nil || hr.NAT.Kind != netfilter.Masquerade || !hr.NAT.RandomFully || hr.NAT.Addr != mustAddr("192.168.0.2") || p.Src != mustAddr("192.168.0.2") {
			t.Errorf("masquerade: %+v", hr.NAT)
		}
		p = pkt("tcp 10.88.0.5:5 8.8.8.8:443")
		hr = e.EvalHook(env, netfilter.Postrouting, p, nil)
		if hr.NAT == nil || hr.NAT.String() != "SNAT to 192.168.0.2:20000-30000" {
			t.Errorf("snat: %v", hr.NAT)
		}
		p = pkt("tcp 192.168.0.2:5 1.1.1.1:80")
		hr = e.EvalHook(env, netfilter.Output, p, nil)
		if hr.NAT == nil || hr.NAT.Dest() != "127.0.0.1:8080" {
			t.Errorf("redirect in OUTPUT: %v", hr.NAT)
		}
		p = pkt("tcp 10.244.0.7:5 1.1.1.1:15001")
		p.InIface = "cni0"
		hr = e.EvalHook(env, netfilter.Prerouting, p, nil)
		if hr.NAT == nil || hr.NAT.Dest() != "10.244.0.1:15006" {
			t.Errorf("redirect in PREROUTING: %v", hr.NAT)
		}
	})

	t.Run("LOG and pass-through extensions continue, NOTRACK untracks, NFQUEUE is unknown", func(t *testing.T) {
		e := load(t, IPv4, `*raw
-A PREROUTING -p udp --dport 53 -j NOTRACK
-A PREROUTING -p udp --dport 54 -j CT --notrack
COMMIT
*filter
-A INPUT -j LOG --log-prefix "in: "
-A INPUT -j NFLOG --nflog-group 2
-A INPUT -m conntrack --ctstate UNTRACKED -j ACCEPT
-A INPUT -p tcp -j NFQUEUE --queue-num 1
COMMIT
`)
		for _, port := range []string{"53", "54"} {
			p := pkt("udp 10.0.0.1:5 192.168.0.2:" + port)
			pre := &Trace{}
			if hr := e.EvalHook(env, netfilter.Prerouting, p, pre); hr.Verdict != Accept {
				t.Fatalf("PREROUTING: %v", hr.Verdict)
			}
			want := map[string]string{"53": "=> NOTRACK", "54": "=> CT --notrack (the packet is untracked, continues)"}[port]
			if !strings.Contains(pre.String(), want) || strings.Contains(pre.String(), "not emulated") {
				t.Errorf("port %s: raw PREROUTING trace does not say %q:\n%s", port, want, pre)
			}
			tr := &Trace{}
			hr := e.EvalHook(env, netfilter.Input, p, tr)
			if hr.Verdict != Accept || hr.Decision.Rule == nil || hr.Decision.Rule.Line != 8 {
				t.Errorf("port %s: %+v\n%s", port, hr.Decision, tr)
			}
			if !strings.Contains(tr.String(), "LOG (no-op)") || !strings.Contains(tr.String(), "NFLOG (not emulated, continues)") {
				t.Errorf("trace does not show LOG and NFLOG:\n%s", tr)
			}
		}
		hr := e.EvalHook(env, netfilter.Input, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil)
		if hr.Verdict != Unknown {
			t.Errorf("NFQUEUE: verdict %v, want UNKNOWN", hr.Verdict)
		}
	})

	t.Run("nfacct counts", func(t *testing.T) {
		e := load(t, IPv4, "*filter\n-A INPUT -m nfacct --nfacct-name acct1 -p tcp -j ACCEPT\nCOMMIT\n")
		if c, ok := e.Nfacct("acct1"); !ok || c.Packets != 0 {
			t.Fatalf("nfacct object after load: %v %v", c, ok)
		}
		e.EvalHook(env, netfilter.Input, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil)
		e.EvalHook(env, netfilter.Input, pkt("tcp 10.0.0.1:5 192.168.0.2:80"), nil)
		if c, _ := e.Nfacct("acct1"); c.Packets != 2 || c.Bytes != 120 {
			t.Errorf("nfacct counters %+v, want 2 packets 120 bytes", c)
		}
	})
}

// TestNth: statistic nth mode counts per rule, starting at --packet.
func TestNth(t *testing.T) {
	e := load(t, IPv4, `*nat
:A - [0:0]
:B - [0:0]
:C - [0:0]
-A PREROUTING -m statistic --mode nth --every 3 --packet 0 -j A
-A PREROUTING -m statistic --mode nth --every 2 --packet 1 -j B
-A PREROUTING -j C
-A A -j ACCEPT
-A B -j ACCEPT
-A C -j ACCEPT
COMMIT
`)
	env := NewStaticEnv(1)
	var got []string
	for i := 0; i < 8; i++ {
		tr := &Trace{}
		e.EvalTable(env, TableNAT, netfilter.Prerouting, pkt("tcp 10.0.0.1:5 10.0.0.2:80"), tr)
		for _, s := range tr.Steps {
			if s.Kind == StepRule && *s.Matched && strings.HasPrefix(s.Verdict, "jump ") {
				got = append(got, strings.Fields(s.Verdict)[1])
			}
		}
	}
	// Rule 1 matches packets 0, 3, 6; rule 2 sees packets 1, 2, 4, 5, 7 and matches its
	// 2nd, 4th: packets 2 and 5; the rest fall to C.
	want := "A C B A C B A C"
	if strings.Join(got, " ") != want {
		t.Errorf("got %v, want %s", got, want)
	}
	// Replacing the rules resets the counters, as the kernel does.
	if err := e.RestoreText([]byte("*nat\n-A PREROUTING -m statistic --mode nth --every 3 --packet 0 -j ACCEPT\nCOMMIT\n"), RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	res := e.EvalTable(env, TableNAT, netfilter.Prerouting, pkt("tcp 10.0.0.1:5 10.0.0.2:80"), nil)
	if res.Decision.Rule == nil {
		t.Error("first packet after a reload does not match --packet 0")
	}
}

func TestRecent(t *testing.T) {
	rules := `*nat
:SEP - [0:0]
-A PREROUTING -m recent --name aff --rcheck --seconds 10 --reap -j SEP
-A PREROUTING -m recent --name aff --set -j ACCEPT
-A SEP -j DNAT --to-destination 10.0.0.9
COMMIT
`
	t.Run("set then rcheck within --seconds", func(t *testing.T) {
		e := load(t, IPv4, rules)
		env := NewStaticEnv(1)
		first := e.EvalTable(env, TableNAT, netfilter.Prerouting, pkt("udp 10.1.0.1:5 10.96.0.1:53"), nil)
		if first.NAT != nil {
			t.Fatal("first packet hit the affinity rule")
		}
		env.Advance(10 * time.Second)
		second := e.EvalTable(env, TableNAT, netfilter.Prerouting, pkt("udp 10.1.0.1:5 10.96.0.1:53"), nil)
		if second.NAT == nil {
			t.Fatal("packet 10 s later did not follow the affinity")
		}
		env.Advance(10*time.Second + time.Millisecond)
		third := e.EvalTable(env, TableNAT, netfilter.Prerouting, pkt("udp 10.1.0.1:5 10.96.0.1:53"), nil)
		if third.NAT != nil {
			t.Fatal("packet 10.001 s after the last --set followed the affinity")
		}
		// The stale entry was reaped (it was the oldest) and set afresh.
		if got := e.Recent("aff"); len(got) != 1 || len(got[0].Stamps) != 1 || !got[0].LastSeen.Equal(env.Now()) {
			t.Errorf("list %+v, want one entry with one stamp, now", got)
		}
	})

	t.Run("capacity: ip_list_tot entries, least recently updated evicted", func(t *testing.T) {
		e := load(t, IPv4, rules, WithRecentLimits(3, 0))
		env := NewStaticEnv(1)
		send := func(src string) {
			env.Advance(time.Second)
			e.EvalTable(env, TableNAT, netfilter.Prerouting, pkt("udp "+src+":5 10.96.0.1:53"), nil)
		}
		send("10.1.0.1")
		send("10.1.0.2")
		send("10.1.0.3")
		send("10.1.0.1") // refreshes .1 (rcheck matches, so no --set: order unchanged)
		send("10.1.0.4") // evicts the least recently updated: .1
		var got []string
		for _, en := range e.Recent("aff") {
			got = append(got, en.Addr.String())
		}
		if strings.Join(got, " ") != "10.1.0.2 10.1.0.3 10.1.0.4" {
			t.Errorf("list %v, want .2 .3 .4", got)
		}
	})

	t.Run("default capacity is 100", func(t *testing.T) {
		e := load(t, IPv4, rules)
		env := NewStaticEnv(1)
		for i := 0; i < 150; i++ {
			e.EvalTable(env, TableNAT, netfilter.Prerouting, pkt(fmt.Sprintf("udp 10.1.%d.%d:5 10.96.0.1:53", i/200, i%200+1)), nil)
		}
		got := e.Recent("aff")
		if len(got) != 100 || got[0].Addr != mustAddr("10.1.0.51") {
			t.Errorf("%d entries, oldest %v; want 100, oldest 10.1.0.51", len(got), got[0].Addr)
		}
	})

	t.Run("update, hitcount, remove, rdest and mask", func(t *testing.T) {
		e := load(t, IPv4, `*filter
:INPUT ACCEPT [0:0]
-A INPUT -p tcp --dport 22 -m recent --name ssh --update --seconds 60 --hitcount 3 --rsource -j DROP
-A INPUT -p tcp --dport 22 -m recent --name ssh --set -j ACCEPT
-A INPUT -p tcp --dport 23 -m recent --name ssh --remove -j ACCEPT
-A INPUT -m recent --name dst --set --rdest --mask 255.255.255.0
-A INPUT -p udp -m recent --name dst --rcheck --rdest --mask 255.255.255.0 -j REJECT
COMMIT
`)
		env := NewStaticEnv(1)
		var verdicts []string
		for i := 0; i < 5; i++ {
			env.Advance(time.Second)
			verdicts = append(verdicts, e.EvalTable(env, TableFilter, netfilter.Input, pkt("tcp 10.1.0.1:5 192.168.0.2:22"), nil).Verdict.String())
		}
		// Packets 1 and 2 are --set (1 and 2 stamps); packet 3 sees 2 < 3 hits, --set (3);
		// packet 4 sees 3 hits: DROP and --update adds a stamp; packet 5 also DROP.
		if got := strings.Join(verdicts, " "); got != "ACCEPT ACCEPT ACCEPT DROP DROP" {
			t.Errorf("verdicts %s", got)
		}
		e.EvalTable(env, TableFilter, netfilter.Input, pkt("tcp 10.1.0.1:5 192.168.0.2:23"), nil)
		if v := e.EvalTable(env, TableFilter, netfilter.Input, pkt("tcp 10.1.0.1:5 192.168.0.2:22"), nil).Verdict; v != Accept {
			t.Errorf("after --remove: %v, want ACCEPT", v)
		}
		// --rdest --mask /24: a packet to 192.168.0.77 finds the entry 192.168.0.0.
		if v := e.EvalTable(env, TableFilter, netfilter.Input, pkt("udp 10.9.9.9:5 192.168.0.77:53"), nil).Verdict; v != Reject {
			t.Errorf("rdest/mask: %v, want REJECT", v)
		}
		if got := e.Recent("dst"); len(got) != 1 || got[0].Addr != mustAddr("192.168.0.0") {
			t.Errorf("dst list %+v", got)
		}
	})

	t.Run("lists go with their last rule", func(t *testing.T) {
		e := load(t, IPv4, rules)
		env := NewStaticEnv(1)
		e.EvalTable(env, TableNAT, netfilter.Prerouting, pkt("udp 10.1.0.1:5 10.96.0.1:53"), nil)
		if err := e.RestoreText([]byte(rules), RestoreOptions{}); err != nil {
			t.Fatal(err)
		}
		if len(e.Recent("aff")) != 1 {
			t.Error("list lost although rules still name it")
		}
		if err := e.RestoreText([]byte("*nat\nCOMMIT\n"), RestoreOptions{}); err != nil {
			t.Fatal(err)
		}
		if e.Recent("aff") != nil {
			t.Error("list kept after its rules were removed")
		}
	})

	// What a 6.18 kernel did with these rules (UDP from 10.9.0.5 and .6 to a namespace
	// holding them, counters read back): the list's mask is the first rule's, so the
	// /32 --rcheck finds the /24 entry; and a list sizes its time-stamp ring from the
	// --hitcount of its rules (32 stamps for 25), so packets 26 to 30 of 30 match.
	t.Run("list mask from the first rule, stamp ring sized by --hitcount", func(t *testing.T) {
		e := load(t, IPv4, `*filter
:INPUT ACCEPT [0:0]
-A INPUT -p udp --dport 1000 -m recent --name L --set --mask 255.255.255.0
-A INPUT -p udp --dport 1001 -m recent --name L --rcheck --mask 255.255.255.255 -j DROP
-A INPUT -p udp --dport 2000 -m recent --name H --rcheck --hitcount 25 -j DROP
-A INPUT -p udp --dport 2000 -m recent --name H --set
COMMIT
`)
		env := NewStaticEnv(1)
		e.EvalTable(env, TableFilter, netfilter.Input, pkt("udp 10.9.0.5:5 10.9.0.1:1000"), nil)
		if v := e.EvalTable(env, TableFilter, netfilter.Input, pkt("udp 10.9.0.6:5 10.9.0.1:1001"), nil).Verdict; v != Drop {
			t.Errorf("--rcheck --mask 255.255.255.255 on a list made with /24: %v, want DROP (the list's mask applies)", v)
		}
		drops := 0
		for i := 0; i < 30; i++ {
			if e.EvalTable(env, TableFilter, netfilter.Input, pkt("udp 10.9.0.5:5 10.9.0.1:2000"), nil).Verdict == Drop {
				drops++
			}
		}
		if drops != 5 {
			t.Errorf("--hitcount 25 matched %d of 30 packets, want 5 (the kernel keeps 32 stamps)", drops)
		}
		if got := e.Recent("H"); len(got) != 1 || len(got[0].Stamps) != 25 {
			t.Errorf("list H %+v, want one entry with 25 stamps (the dropped packets never reached --set)", got)
		}
		// A rule needing more stamps than the list keeps makes the kernel flush it.
		if err := e.RestoreText([]byte("*filter\n-A INPUT -m recent --name H --rcheck --hitcount 40\nCOMMIT\n"), RestoreOptions{NoFlush: true}); err != nil {
			t.Fatal(err)
		}
		if got := e.Recent("H"); got != nil {
			t.Errorf("list H kept %d entries after a rule with --hitcount 40 was added, want it flushed", len(got))
		}
	})

	t.Run("dry runs change nothing", func(t *testing.T) {
		e := load(t, IPv4, rules)
		env := dryEnv{NewStaticEnv(1)}
		e.EvalTable(env, TableNAT, netfilter.Prerouting, pkt("udp 10.1.0.1:5 10.96.0.1:53"), nil)
		if e.Recent("aff") != nil {
			t.Error("a dry run wrote the list")
		}
		if c := string(e.SaveCounters()); strings.Contains(c, "[1:") {
			t.Errorf("a dry run counted:\n%s", c)
		}
	})
}

type dryEnv struct{ *StaticEnv }

func (dryEnv) DryRun() bool { return true }

// TestIndexPreservesOrder compares indexed evaluation with a linear scan on chains
// where rules of different kinds interleave.
func TestIndexPreservesOrder(t *testing.T) {
	var b strings.Builder
	b.WriteString("*nat\n:SVC - [0:0]\n:T - [0:0]\n-A PREROUTING -j SVC\n")
	for i := 0; i < 60; i++ {
		switch i % 5 {
		case 0:
			fmt.Fprintf(&b, "-A SVC -d 10.96.0.%d -p tcp --dport 80 -j T\n", i%7)
		case 1:
			fmt.Fprintf(&b, "-A SVC -p tcp --dport %d -j T\n", 30000+i%4)
		case 2:
			fmt.Fprintf(&b, "-A SVC -s 10.0.%d.0/24 -j T\n", i%3)
		case 3:
			fmt.Fprintf(&b, "-A SVC -d 10.96.0.0/29 -p udp -j T\n")
		default:
			fmt.Fprintf(&b, "-A SVC -m comment --comment c%d -p tcp -m tcp --dport 80 -j T\n", i)
		}
	}
	b.WriteString("-A T -j RETURN\nCOMMIT\n")
	e := load(t, IPv4, b.String())
	svc := e.Ruleset().Chain(TableNAT, "SVC")
	env := NewStaticEnv(1)
	for _, src := range []string{"10.0.0.5", "10.0.1.5", "10.9.0.1"} {
		for d := 0; d < 9; d++ {
			for _, proto := range []string{"tcp", "udp"} {
				for _, port := range []int{80, 30001, 30003, 9} {
					p := pkt(fmt.Sprintf("%s %s:5 10.96.0.%d:%d", proto, src, d, port))
					tr := &Trace{}
					e.EvalTable(env, TableNAT, netfilter.Prerouting, p, tr)
					var want []string
					c := &evalCtx{pkt: p, env: env, ch: &envChooser{env}, st: newState(), dry: true}
					for _, r := range svc.Rules {
						if c.matchRule(r) {
							want = append(want, fmt.Sprint(r.Line))
						}
					}
					got := strings.TrimPrefix(matchedLines(tr), "4")
					got = strings.TrimPrefix(got, ",")
					var gotSVC []string
					for _, s := range tr.Steps {
						if s.Kind == StepRule && s.Chain == "SVC" && *s.Matched {
							gotSVC = append(gotSVC, fmt.Sprint(s.Line))
						}
					}
					if strings.Join(gotSVC, ",") != strings.Join(want, ",") {
						t.Fatalf("%s: indexed %v, linear %v", p, gotSVC, want)
					}
				}
			}
		}
	}
	if svc.idx == nil {
		t.Fatal("chain was not indexed")
	}
}
