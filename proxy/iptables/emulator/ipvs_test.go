package emulator

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
)

// TestIPVSMatch: -m ipvs (xt_ipvs) decided from the IPVS state a lookup gives, as
// ipvs_mt() does; undecidable without one; printed as written.
func TestIPVSMatch(t *testing.T) {
	rules := `*filter
:KUBE-IPVS-OUT-FILTER - [0:0]
-A OUTPUT -j KUBE-IPVS-OUT-FILTER
-A KUBE-IPVS-OUT-FILTER -s 1.2.3.4 -m ipvs --vaddr 1.2.3.4 --vproto tcp --vport 80 -j DROP
-A KUBE-IPVS-OUT-FILTER -m ipvs ! --ipvs -p udp -j ACCEPT
-A KUBE-IPVS-OUT-FILTER -p udp -m ipvs --vaddr 10.96.0.0/16 --vport 53 --vdir REPLY -j REJECT
-A KUBE-IPVS-OUT-FILTER -p udp -m ipvs --vaddr 10.96.0.0/255.255.0.0 ! --vport 53 --vmethod GATE -j ACCEPT
-A KUBE-IPVS-OUT-FILTER -m ipvs --proto 17 --vport 9 -j REJECT
COMMIT
`
	e := load(t, IPv4, rules)
	if got := string(e.Ruleset().Save(false)); !strings.Contains(got, "-A KUBE-IPVS-OUT-FILTER -s 1.2.3.4/32 -m ipvs --vaddr 1.2.3.4 --vproto tcp --vport 80 -j DROP\n") {
		t.Errorf("-m ipvs is not printed as written:\n%s", got)
	}
	env := NewStaticEnv(1)
	// Without IPVS state the match is undecidable: assumed not to match.
	if v := e.EvalTable(env, TableFilter, netfilter.Output, pkt("tcp 1.2.3.4:40000 10.244.1.5:8080"), nil).Verdict; v != Accept {
		t.Errorf("no lookup: %v, want ACCEPT (undecidable, assumed not to match)", v)
	}
	conns := map[netip.AddrPort]*IPVSConn{
		netip.MustParseAddrPort("10.244.1.5:8080"): {VAddr: netip.MustParseAddr("1.2.3.4"), VPort: 80},
		netip.MustParseAddrPort("10.244.1.6:53"):   {VAddr: netip.MustParseAddr("10.96.0.10"), VPort: 53},
		netip.MustParseAddrPort("10.244.1.7:54"):   {VAddr: netip.MustParseAddr("10.96.7.7"), VPort: 54, Method: IPVSDRoute},
		netip.MustParseAddrPort("10.244.1.9:99"):   {VAddr: netip.MustParseAddr("172.16.0.1"), VPort: 9},
	}
	var asked []string
	e.SetIPVSLookup(func(p *Packet, hook netfilter.Hook, table string) *IPVSConn {
		asked = append(asked, hook.String()+" "+table)
		if p.CT.Reply {
			return conns[netip.AddrPortFrom(p.Src, p.SrcPort)]
		}
		return conns[netip.AddrPortFrom(p.Dst, p.DstPort)]
	})
	reply := func(s string) *Packet {
		p := pkt(s)
		p.CT.State, p.CT.Reply = netfilter.CtEstablished, true
		return p
	}
	for _, c := range []struct {
		name string
		p    *Packet
		want string
	}{
		{"the node's connection to its LB VIP, scheduled to a real server", pkt("tcp 1.2.3.4:40000 10.244.1.5:8080"), "DROP"},
		{"same virtual address, another source", pkt("tcp 192.168.0.2:40000 10.244.1.5:8080"), "ACCEPT"},
		{"tcp, not an IPVS packet", pkt("tcp 1.2.3.4:40000 10.244.9.9:8080"), "ACCEPT"},
		{"udp, not an IPVS packet: ! --ipvs", pkt("udp 192.168.0.2:5 8.8.8.8:53"), "ACCEPT@2"},
		{"udp reply of a 10.96/16 :53 connection", reply("udp 10.244.1.6:53 192.168.0.2:5"), "REJECT"},
		{"udp original direction: --vdir REPLY fails", pkt("udp 192.168.0.2:5 10.244.1.6:53"), "ACCEPT"},
		{"! --vport 53 and --vmethod GATE", pkt("udp 192.168.0.2:5 10.244.1.7:54"), "ACCEPT@4"},
		{"--proto (libxt_ipvs's saved spelling of --vproto)", pkt("udp 192.168.0.2:5 10.244.1.9:99"), "REJECT"},
	} {
		res := e.EvalTable(env, TableFilter, netfilter.Output, c.p, nil)
		got := res.Verdict.String()
		if res.Decision.Rule != nil && res.Verdict == Accept {
			got += "@" + map[int]string{5: "2", 7: "4"}[res.Decision.Rule.Line]
		}
		if got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	if len(asked) == 0 || asked[0] != "OUTPUT filter" {
		t.Errorf("lookup asked %v, want the hook and table", asked)
	}

	for _, bad := range []struct{ rule, msg string }{
		{"-m ipvs", "at least one option"},
		{"-m ipvs ! --ipvs --vport 80", "cannot be together"},
		{"-m ipvs ! --vdir REPLY", "cannot be negated"},
		{"-m ipvs --vdir SIDEWAYS", "bad --vdir"},
		{"-m ipvs --vmethod NAT", "bad --vmethod"},
		{"-m ipvs --vport", "needs an argument"},
		{"-m ipvs --vaddr fd00::1", "not IPv4"},
		{"-m ipvs --vport 80 --vport 81", "given twice"},
		{"-m ipvs --vproto tcp --proto 6", "given twice"},
		{"-m ipvs --vhost x", "unknown option"},
	} {
		err := New(IPv4).RestoreText([]byte("*filter\n-A INPUT "+bad.rule+" -j DROP\nCOMMIT\n"), RestoreOptions{})
		if err == nil || !strings.Contains(err.Error(), bad.msg) || !strings.Contains(err.Error(), ":2:") {
			t.Errorf("%q: %v, want an error on line 2 saying %q", bad.rule, err, bad.msg)
		}
	}
}
