package nodewalk

import (
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
	ipt "github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	nftemu "github.com/clusterlab/clusterlab/proxy/nftables/emulator"
)

// node loads an iptables-save dump and an nft ruleset (either may be empty).
func node(t *testing.T, iptSave, nft string) *Node {
	t.Helper()
	n := &Node{}
	if iptSave != "" {
		e, err := ipt.Load([]byte(iptSave), ipt.IPv4, "iptables-save.txt")
		if err != nil {
			t.Fatal(err)
		}
		n.IPTables = e
	}
	if nft != "" {
		e, err := nftemu.Load([]byte(nft), "ruleset.nft")
		if err != nil {
			t.Fatal(err)
		}
		n.NFT = e
	}
	return n
}

func tcp(src, dst string, dport uint16) ipt.Packet {
	return ipt.Packet{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), SrcPort: 40000, DstPort: dport, TTL: 64, Len: 60}
}

func walk(t *testing.T, n *Node, in Input) *Result {
	t.Helper()
	res, err := Walk(n, in)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func one(t *testing.T, res *Result) *Outcome {
	t.Helper()
	if len(res.Outcomes) != 1 {
		t.Fatalf("%d outcomes, want 1:\n%s", len(res.Outcomes), res.Text())
	}
	return res.Outcomes[0]
}

// kube-proxy's nftables DNAT: a Service 10.96.0.10:80 to its one endpoint.
const kubeDNAT = `table ip kube-proxy {
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr 10.96.0.10 tcp dport 80 dnat to 10.244.1.5:8080
	}
}
`

// An iptables filter rule at priority 0 runs after kube-proxy's nft DNAT at -100 and
// sees the DNATed address: it drops the packet, and says so by its dump line.
func TestIPTablesFilterSeesNFTDNAT(t *testing.T) {
	n := node(t, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -d 10.96.0.10/32 -j ACCEPT
-A FORWARD -d 10.244.1.5/32 -p tcp --dport 8080 -j DROP
COMMIT
`, kubeDNAT)
	o := one(t, walk(t, n, Input{Packet: tcp("10.0.0.9", "10.96.0.10", 80)}))
	if o.Verdict != "DROP" || o.DecidedBy != "rule" {
		t.Fatalf("verdict %s by %s, want DROP by rule:\n%v", o.Verdict, o.DecidedBy, o.Trace)
	}
	if d := o.Decision; d.Source != SourceIPTables || d.Table != "filter" || d.Chain != "FORWARD" || d.Line != 6 {
		t.Errorf("decision %+v, want iptables filter FORWARD line 6", d)
	}
	if o.DNATDestination == nil || *o.DNATDestination != "10.244.1.5:8080" {
		t.Errorf("dnat %v, want 10.244.1.5:8080", o.DNATDestination)
	}
	var got []string
	for _, r := range o.MatchedRules {
		got = append(got, r.Source+" "+r.Table+" "+r.Chain)
	}
	if want := "nft ip kube-proxy nat-prerouting,iptables filter FORWARD"; strings.Join(got, ",") != want {
		t.Errorf("matched rules %q, want %q", strings.Join(got, ","), want)
	}
}

// An nft chain at priority -200 runs before iptables' mangle (-150): the mark it sets
// is seen there; one at -100 runs after mangle, too late.
func TestNFTBeforeMangleByPriority(t *testing.T) {
	dump := `*mangle
:PREROUTING ACCEPT [0:0]
-A PREROUTING -m mark --mark 0x1 -j DROP
COMMIT
`
	for _, tc := range []struct {
		prio int
		want string
	}{{-200, "DROP"}, {-151, "DROP"}, {-150, "DROP"}, {-149, "ACCEPT"}, {-100, "ACCEPT"}} {
		nft := strings.ReplaceAll(`table ip marks {
	chain pre {
		type filter hook prerouting priority PRIO; policy accept;
		meta mark set 0x1
	}
}
`, "PRIO", itoa(tc.prio))
		o := one(t, walk(t, node(t, dump, nft), Input{Packet: tcp("10.0.0.9", "10.0.0.20", 80)}))
		if o.Verdict != tc.want {
			t.Errorf("nft chain at priority %d: %s, want %s:\n%v", tc.prio, o.Verdict, tc.want, o.Trace)
		}
	}
}

func itoa(i int) string {
	if i < 0 {
		return "-" + itoa(-i)
	}
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// NAT happens once per connection and direction: the first nat chain or table that
// binds wins; one that does not bind leaves it to the next.
func TestNATOnce(t *testing.T) {
	dump := `*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -d 10.96.0.10/32 -p tcp -j DNAT --to-destination 10.244.9.9:9090
-A PREROUTING -d 10.96.0.11/32 -p tcp -j DNAT --to-destination 10.244.9.9:9090
COMMIT
`
	n := node(t, dump, strings.Replace(kubeDNAT, "priority dstnat", "priority -101", 1))
	o := one(t, walk(t, n, Input{Packet: tcp("10.0.0.9", "10.96.0.10", 80)}))
	if o.DNATDestination == nil || *o.DNATDestination != "10.244.1.5:8080" || !strings.HasPrefix(o.Packet, "tcp 10.0.0.9:40000 -> 10.244.1.5:8080") {
		t.Errorf("nft nat at -101 binds first: dnat %v packet %s, want 10.244.1.5:8080", o.DNATDestination, o.Packet)
	}
	for _, r := range o.MatchedRules {
		if r.Source == SourceIPTables {
			t.Errorf("the iptables nat table ran after the connection was bound: %+v", r)
		}
	}
	o = one(t, walk(t, n, Input{Packet: tcp("10.0.0.9", "10.96.0.11", 80)}))
	if o.DNATDestination == nil || *o.DNATDestination != "10.244.9.9:9090" {
		t.Errorf("nft nat does not bind 10.96.0.11: iptables' does; dnat %v, want 10.244.9.9:9090", o.DNATDestination)
	}
	// An established packet runs no nat at all; its conntrack binding applies.
	ct := &ipt.Conntrack{State: netfilter.CtEstablished, Status: netfilter.StatusConfirmed | netfilter.StatusSeenReply}
	b := &netfilter.NATBinding{DNAT: netip.MustParseAddrPort("10.244.7.7:8080"), Entry: "test"}
	o = one(t, walk(t, n, Input{Packet: tcp("10.0.0.9", "10.96.0.10", 80), Conntrack: ct, CtNAT: b}))
	if o.DNATDestination == nil || *o.DNATDestination != "10.244.7.7:8080" || len(o.MatchedRules) != 0 {
		t.Errorf("established: dnat %v, rules %v; want the binding's 10.244.7.7:8080 and no nat rule", o.DNATDestination, o.MatchedRules)
	}
}

// accept ends only its base chain: a later iptables filter table's DROP policy still
// drops; a drop in an nft chain ends the packet before iptables sees it.
func TestAcceptGoesOnDropEnds(t *testing.T) {
	dump := `*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
COMMIT
`
	nft := `table inet fw {
	chain in {
		type filter hook input priority -10; policy accept;
		tcp dport 22 accept
		tcp dport 23 drop
	}
}
`
	n := node(t, dump, nft)
	local := []netip.Addr{netip.MustParseAddr("10.0.0.20")}
	o := one(t, walk(t, n, Input{Packet: tcp("10.0.0.9", "10.0.0.20", 22), Local: local}))
	if o.Verdict != "DROP" || o.DecidedBy != "policy" || o.Decision.Source != SourceIPTables || o.Decision.Chain != "INPUT" {
		t.Errorf("port 22: %s by %s %+v, want DROP by iptables filter INPUT policy", o.Verdict, o.DecidedBy, o.Decision)
	}
	o = one(t, walk(t, n, Input{Packet: tcp("10.0.0.9", "10.0.0.20", 23), Local: local}))
	if o.Verdict != "DROP" || o.Decision.Source != SourceNFT || o.Decision.Rule != "tcp dport 23 drop" {
		t.Errorf("port 23: %s %+v, want DROP by the nft rule", o.Verdict, o.Decision)
	}
	if strings.Contains(strings.Join(o.Hooks, ","), "FORWARD") {
		t.Errorf("hooks %v", o.Hooks)
	}
}

// Every branch of both engines' choices is explored once: nft numgen over two
// endpoints times an iptables statistic rule, probabilities summing to 1.
func TestAllBranchesBothSources(t *testing.T) {
	dump := `*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A FORWARD -m statistic --mode random --probability 0.25 -j MARK --set-xmark 0x8/0x8
COMMIT
`
	nft := `table ip kube-proxy {
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr 10.96.0.10 tcp dport 80 dnat to numgen random mod 2 map { 0 : 10.244.1.5, 1 : 10.244.2.6 }
	}
}
`
	res := walk(t, node(t, dump, nft), Input{Packet: tcp("10.0.0.9", "10.96.0.10", 80), AllBranches: true})
	if len(res.Paths) != 4 || len(res.Outcomes) != 4 {
		t.Fatalf("%d paths, %d outcomes, want 4 and 4:\n%s", len(res.Paths), len(res.Outcomes), res.Text())
	}
	sum := 0.0
	got := map[string]float64{}
	for _, o := range res.Outcomes {
		sum += o.Probability
		got[*o.DNATDestination+" "+o.Mark] = o.Probability
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Errorf("probabilities sum to %v, want 1", sum)
	}
	want := map[string]float64{"10.244.1.5:80 0x8": 0.125, "10.244.1.5:80 0x0": 0.375, "10.244.2.6:80 0x8": 0.125, "10.244.2.6:80 0x0": 0.375}
	for k, p := range want {
		if math.Abs(got[k]-p) > 1e-9 {
			t.Errorf("outcome %s: p=%v, want %v (all: %v)", k, got[k], p, got)
		}
	}
	// The tree: both choice points as branches, each after the steps all its paths
	// share (the unit a choice is made in before it, the rule that made it after),
	// each path's outcome at its leaf.
	text := res.Text()
	at := 0
	for _, want := range []string{
		"\n  [nft] ip kube-proxy nat-prerouting (priority -100)\n",
		"\n├─ numgen random mod 2 = 0 (p=0.500000)\n",
		"\n│        ✓ line 4: ip daddr 10.96.0.10",
		"\n│    [iptables] mangle FORWARD (priority -150)\n",
		"\n│  ├─ statistic p=0.25000000000: taken (p=0.250000)\n",
		"\n│  │        ✓ line 7: -A FORWARD",
		"\n│  │     p=0.125000 ACCEPT dnat 10.244.1.5:80 by policy\n",
		"\n│  └─ statistic p=0.25000000000: not taken (p=0.750000)\n",
		"\n│        p=0.375000 ACCEPT dnat 10.244.1.5:80 by policy\n",
		"\n└─ numgen random mod 2 = 1 (p=0.500000)\n",
		"\n   └─ statistic p=0.25000000000: not taken (p=0.750000)\n",
	} {
		i := strings.Index(text[at:], want)
		if i < 0 {
			t.Fatalf("the tree lacks %q after byte %d:\n%s", want, at, text)
		}
		at += i + 1
	}
}

// Masquerade names the output interface's primary address, from either source.
func TestMasqueradeAddress(t *testing.T) {
	nft := `table ip kube-proxy {
	chain nat-postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip daddr 10.244.0.0/16 masquerade
	}
}
`
	dump := `*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A POSTROUTING -d 192.168.0.0/16 -j MASQUERADE
COMMIT
`
	n := node(t, dump, nft)
	in := Input{IfaceAddrs: map[string]netip.Addr{"eth0": netip.MustParseAddr("172.18.0.3")},
		Route: func(netip.Addr) string { return "eth0" }}
	for dst, src := range map[string]string{"10.244.1.5": SourceNFT, "192.168.3.4": SourceIPTables} {
		in.Packet = tcp("10.0.0.9", dst, 80)
		o := one(t, walk(t, n, in))
		if !o.Masqueraded || o.SNATSource == nil || *o.SNATSource != "172.18.0.3" || !strings.HasPrefix(o.Packet, "tcp 172.18.0.3:40000") {
			t.Errorf("%s (%s masquerade): masqueraded %v to %v, packet %s; want 172.18.0.3", dst, src, o.Masqueraded, o.SNATSource, o.Packet)
		}
	}
}

// iptables-nft's tables in the nft listing are found, to be skipped.
func TestIPTablesNFTCopies(t *testing.T) {
	dump := `# Generated by iptables-nft-save v1.8.9 (nf_tables) on Mon Jan  1 00:00:00 2026
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -d 10.244.1.5/32 -j DROP
COMMIT
`
	nft := kubeDNAT + `table ip filter {
	chain FORWARD {
		type filter hook forward priority filter; policy accept;
		ip daddr 10.244.1.5 counter packets 0 bytes 0 drop
	}
}
table ip6 filter {
	chain FORWARD {
		type filter hook forward priority filter; policy accept;
	}
}
`
	n := node(t, dump, nft)
	got := IPTablesNFTCopies(n.IPTables, n.NFT)
	if strings.Join(got, ",") != "ip filter" {
		t.Fatalf("copies %v, want [ip filter]", got)
	}
	n.SkipNFT = map[string]bool{"ip filter": true}
	o := one(t, walk(t, n, Input{Packet: tcp("10.0.0.9", "10.96.0.10", 80)}))
	if o.Verdict != "DROP" || o.Decision.Source != SourceIPTables {
		t.Errorf("%s by %+v, want DROP by the iptables dump's rule", o.Verdict, o.Decision)
	}
	for _, r := range o.MatchedRules {
		if r.Table == "ip filter" {
			t.Errorf("the skipped copy ran: %+v", r)
		}
	}
}
