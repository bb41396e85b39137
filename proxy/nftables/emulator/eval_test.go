package emulator

import (
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// testEnv is a deterministic Env: a settable clock, scripted numgen picks.
type testEnv struct {
	now   time.Time
	picks []int
	dry   bool
	local map[netip.Addr]bool
}

func (e *testEnv) Now() time.Time { return e.now }
func (e *testEnv) Pick(n int) int {
	if len(e.picks) == 0 {
		return 0
	}
	p := e.picks[0]
	e.picks = e.picks[1:]
	return p % n
}
func (e *testEnv) DryRun() bool              { return e.dry }
func (e *testEnv) IsLocal(a netip.Addr) bool { return a.IsLoopback() || e.local[a] }

func newTestEnv() *testEnv {
	return &testEnv{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), local: map[netip.Addr]bool{netip.MustParseAddr("192.168.0.2"): true}}
}

func tcp(src, dst string, dport uint16) *Packet {
	return &Packet{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), SrcPort: 40000, DstPort: dport, Len: 60}
}

// runHook runs every base chain at h for q as a datapath would, stopping at a decision.
func runHook(e *Emulator, env Env, h netfilter.Hook, q *Packet) ChainVerdict {
	for _, bc := range e.BaseChains(h) {
		if !bc.Family.Sees(q.Dst.Is6()) {
			continue
		}
		v := e.RunChain(env, bc, q, nil)
		if v.Decided() {
			return v
		}
	}
	return ChainVerdict{Verdict: Accept}
}

// TestAcceptEndsOnlyItsBaseChain: an accept in one table does not stop another
// table's base chain at the same hook; priorities order them.
func TestAcceptEndsOnlyItsBaseChain(t *testing.T) {
	e := mustLoad(t, `table ip b {
	chain in {
		type filter hook input priority 10; policy accept;
		tcp dport 22 drop
	}
}
table inet a {
	chain in {
		type filter hook input priority 0; policy drop;
		tcp dport 22 accept
	}
}
`)
	bcs := e.BaseChains(netfilter.Input)
	if len(bcs) != 2 || bcs[0].Table != "a" || bcs[1].Table != "b" {
		t.Fatalf("base chains %+v, want a (priority 0) before b (10)", bcs)
	}
	v := runHook(e, newTestEnv(), netfilter.Input, tcp("10.0.0.1", "192.168.0.2", 22))
	if v.Verdict != Drop || v.Reason != "ip b in line 4" {
		t.Errorf("got %+v, want drop by ip b in line 4", v)
	}
	v = runHook(e, newTestEnv(), netfilter.Input, tcp("10.0.0.1", "192.168.0.2", 80))
	if v.Verdict != Drop || v.Reason != "inet a in policy drop" {
		t.Errorf("got %+v, want drop by the inet policy", v)
	}
	// IPv6 packets see only the inet table.
	v = runHook(e, newTestEnv(), netfilter.Input, tcp("fd00::1", "fd00::2", 22))
	if v.Verdict != Accept {
		t.Errorf("IPv6 got %+v, want accept (the ip table does not see it)", v)
	}
}

func TestMarksGotoReturnAndWildcards(t *testing.T) {
	e := mustLoad(t, `table ip t {
	chain pre {
		type filter hook prerouting priority 0; policy accept;
		iifname "eth*" meta mark set 0x10
		meta mark set meta mark or 0x4000
		ct mark set meta mark
		jump sub
		meta mark 0x4011 drop
	}
	chain sub {
		goto leaf
		meta mark set 0x99
	}
	chain leaf {
		meta mark set meta mark xor 0x1
		return
		meta mark set 0x77
	}
}
`)
	q := tcp("10.0.0.1", "10.0.0.2", 80)
	q.InIface = "eth0"
	tr := &Trace{}
	v := e.RunChain(newTestEnv(), e.BaseChains(netfilter.Prerouting)[0], q, tr)
	if v.Verdict != Drop || q.Mark != 0x4011 || q.CT.Mark != 0x4010 {
		t.Errorf("verdict %v mark %#x ctmark %#x, want drop 0x4011 0x4010\n%s", v.Verdict, q.Mark, q.CT.Mark, tr)
	}
	q = tcp("10.0.0.1", "10.0.0.2", 80)
	q.InIface = "wlan0"
	v = e.RunChain(newTestEnv(), e.BaseChains(netfilter.Prerouting)[0], q, nil)
	if v.Verdict != Accept || q.Mark != 0x4001 {
		t.Errorf("wlan0: verdict %v mark %#x, want accept 0x4001", v.Verdict, q.Mark)
	}
}

// TestDynamicSetTimeouts: update @set adds the source with the set's timeout on the
// Env's clock; a dry run changes nothing; counters count only real packets.
func TestDynamicSetTimeouts(t *testing.T) {
	e := mustLoad(t, `table ip t {
	set aff {
		type ipv4_addr
		flags dynamic,timeout
		timeout 10s
	}

	chain pre {
		type filter hook prerouting priority 0; policy accept;
		ip saddr @aff counter drop
		tcp dport 80 update @aff { ip saddr } counter
	}
}
`)
	env := newTestEnv()
	bc := e.BaseChains(netfilter.Prerouting)[0]
	run := func() Verdict { return e.RunChain(env, bc, tcp("10.0.0.1", "10.0.0.2", 80), nil).Verdict }
	env.dry = true
	if run() != Accept || run() != Accept {
		t.Fatal("a dry run must not add to the set")
	}
	env.dry = false
	if v := run(); v != Accept {
		t.Fatalf("first packet %v", v)
	}
	env.now = env.now.Add(4 * time.Second)
	if v := run(); v != Drop {
		t.Fatalf("second packet %v, want drop (source in @aff)", v)
	}
	if !strings.Contains(e.String(), "elements = { 10.0.0.1 expires 6s }") {
		t.Errorf("listing of the dynamic set:\n%s", e.String())
	}
	env.now = env.now.Add(7 * time.Second)
	if v := run(); v != Accept {
		t.Fatalf("after the timeout %v, want accept", v)
	}
	rules := e.Ruleset().Tables[0].chain("pre").Rules
	if c := rules[0].Stmts[1].(*CounterStmt); c.Packets != 1 || c.Bytes != 60 {
		t.Errorf("drop counter %d/%d, want 1/60", c.Packets, c.Bytes)
	}
	if c := rules[1].Stmts[2].(*CounterStmt); c.Packets != 2 {
		t.Errorf("update counter %d, want 2 (dry runs not counted)", c.Packets)
	}
}

// TestNumgenDNATMap: dnat to numgen ... map picks the element from Env.Pick.
func TestNumgenDNATMap(t *testing.T) {
	e := mustLoad(t, `add table ip t
add chain ip t nat { type nat hook prerouting priority -100 ; }
add rule ip t nat ip daddr 172.30.0.44 meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.180.0.4 . 80 , 1 : 10.180.0.5 . 8080 }
add chain ip t out { type nat hook output priority -100 ; }
add rule ip t out tcp dport 53 dnat to [fd00::1]:5353
add rule ip t out tcp dport 54 redirect to :5454
add chain ip t post { type nat hook postrouting priority 100 ; }
add rule ip t post oifname "eth0" masquerade fully-random
`)
	env := newTestEnv()
	env.picks = []int{1, 0}
	bc := e.BaseChains(netfilter.Prerouting)[0]
	for _, want := range []string{"10.180.0.5:8080", "10.180.0.4:80"} {
		v := e.RunChain(env, bc, tcp("10.0.0.1", "172.30.0.44", 80), nil)
		if !v.HasNAT || v.NAT.Kind != netfilter.DNAT || v.NAT.Dest() != want {
			t.Errorf("got %+v, want DNAT to %s", v, want)
		}
	}
	q := tcp("10.0.0.1", "1.1.1.1", 80)
	q.OutIface = "eth0"
	v := e.RunChain(env, e.BaseChains(netfilter.Postrouting)[0], q, nil)
	if !v.HasNAT || v.NAT.Kind != netfilter.Masquerade || !v.NAT.RandomFully {
		t.Errorf("masquerade: %+v", v)
	}
	v = e.RunChain(env, e.BaseChains(netfilter.Output)[0], tcp("10.0.0.1", "1.1.1.1", 54), nil)
	if !v.HasNAT || v.NAT.Kind != netfilter.Redirect || v.NAT.Port != 5454 {
		t.Errorf("redirect: %+v", v)
	}
}

func TestCtAndRejectAndUnknown(t *testing.T) {
	e := mustLoad(t, `table inet f {
	chain in {
		type filter hook input priority 0; policy accept;
		ct state established,related accept
		ct status dnat tcp dport 1 drop
		tcp dport 2 reject with tcp reset
		tcp dport 3 reject with icmpx admin-prohibited
		tcp dport 4 queue num 3
		tcp dport 5 meta skuid 1000 drop
		ip saddr 10.0.0.0/8 tcp dport { 6, 60-70 } drop
	}
}
`)
	bc := e.BaseChains(netfilter.Input)[0]
	env := newTestEnv()
	check := func(port uint16, mod func(*Packet), want Verdict, with netfilter.RejectWith) {
		t.Helper()
		q := tcp("10.1.1.1", "192.168.0.2", port)
		if mod != nil {
			mod(q)
		}
		v := e.RunChain(env, bc, q, nil)
		if v.Verdict != want || (want == Reject && v.Reject != with) {
			t.Errorf("port %d: got %+v, want %v %v", port, v, want, with)
		}
	}
	check(1, func(q *Packet) { q.CT.State = netfilter.CtEstablished }, Accept, 0)
	check(1, func(q *Packet) { q.CT.Status = netfilter.StatusDstNAT }, Drop, 0)
	check(1, nil, Accept, 0)
	check(2, nil, Reject, netfilter.RejectTCPReset)
	check(3, nil, Reject, netfilter.RejectAdminProhibited)
	check(4, nil, Unknown, 0)
	check(5, nil, Accept, 0) // meta skuid is assumed not to match
	check(6, nil, Drop, 0)
	check(65, nil, Drop, 0)
	check(71, nil, Accept, 0)
}

// TestDecidedPacketAllocations: a packet the kube-proxy rules decide without a trace
// costs few allocations.
func TestDecidedPacketAllocations(t *testing.T) {
	e := loadKubeProxy(t, "overall.nft")
	env := newTestEnv()
	var bc BaseChain
	for _, b := range e.BaseChains(netfilter.Prerouting) {
		if b.Type == "nat" {
			bc = b
		}
	}
	q0 := tcp("10.0.0.2", "172.30.0.44", 80)
	allocs := testing.AllocsPerRun(200, func() {
		q := *q0
		if v := e.RunChain(env, bc, &q, nil); !v.HasNAT {
			t.Fatal("not NATed")
		}
	})
	if allocs > 2 {
		t.Errorf("%v allocations per decided packet, want at most 2", allocs)
	}
}

// TestWalkText is the text rendering of an all-branches walk (golden file; -update
// rewrites it).
func TestWalkText(t *testing.T) {
	e := loadKubeProxy(t, "overall.nft")
	res, err := e.Walk(WalkInput{Packet: *tcp("10.0.0.2", "172.30.0.44", 80), Local: []netip.Addr{netip.MustParseAddr("192.168.0.2")}, AllBranches: true})
	if err != nil {
		t.Fatal(err)
	}
	got := res.Text()
	for _, want := range []string{"├─ numgen random mod 2 = 0 (p=0.500000)", "└─ numgen random mod 2 = 1 (p=0.500000)",
		"1. p=0.500000  ACCEPT dnat 10.180.0.4:80 by ip kube-proxy filter-forward policy accept",
		"[element 172.30.0.44 . tcp . 80]"} {
		if !strings.Contains(got, want) {
			t.Errorf("walk text lacks %q:\n%s", want, got)
		}
	}
	if os.Getenv("SHOW") != "" {
		t.Log(got)
	}
}

// TestDormantAndIngress: a dormant table's chains see no packets; an inet ingress
// chain is kept but not run (no ingress hook in the model).
func TestDormantAndIngress(t *testing.T) {
	e := mustLoad(t, `table ip sleepy {
	flags dormant
	chain in {
		type filter hook input priority 0; policy drop;
	}
}
table inet i {
	chain ing {
		type filter hook ingress device "lo" priority 0; policy drop;
	}
}
`)
	for h := netfilter.Prerouting; int(h) < netfilter.NumHooks; h++ {
		if bcs := e.BaseChains(h); len(bcs) != 0 {
			t.Errorf("%v: base chains %v, want none", h, bcs)
		}
	}
	if !strings.Contains(e.String(), "flags dormant") || !strings.Contains(e.String(), "hook ingress device \"lo\"") {
		t.Errorf("listing:\n%s", e.String())
	}
}

// TestWalkAssumptions: an all-branches walk follows both values of an unmodelled
// match and lists the assumption on each outcome; a single path assumes no match.
func TestWalkAssumptions(t *testing.T) {
	e := mustLoad(t, `table inet f {
	chain in {
		type filter hook input priority 0; policy accept;
		meta skuid 1000 tcp dport 22 drop
	}
}
`)
	in := WalkInput{Packet: *tcp("10.0.0.1", "192.168.0.2", 22), Local: []netip.Addr{netip.MustParseAddr("192.168.0.2")}}
	res, err := e.Walk(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outcomes) != 1 || res.Outcomes[0].Verdict != "LOCAL" {
		t.Fatalf("single path:\n%s", res.Text())
	}
	in.AllBranches = true
	if res, err = e.Walk(in); err != nil {
		t.Fatal(err)
	}
	if len(res.Outcomes) != 2 {
		t.Fatalf("want 2 outcomes:\n%s", res.Text())
	}
	for _, o := range res.Outcomes {
		if len(o.Assumptions) != 1 || o.Assumptions[0].Match != "meta skuid 1000" || o.Assumptions[0].Matched != (o.Verdict == "DROP") {
			t.Errorf("outcome %s assumptions %+v", o.Verdict, o.Assumptions)
		}
	}
	if !strings.Contains(res.Text(), `assuming meta skuid 1000 (line 4) matches`) {
		t.Errorf("text:\n%s", res.Text())
	}
}

// A set cloned by a transaction after deletions counts only its live elements: a
// second transaction that clones it again (found by the property kit: a pod deleted
// twice over, each sync deleting hairpin elements) must not see a negative length.
func TestSetCloneAfterDeletes(t *testing.T) {
	e := New()
	if err := e.ApplyScript([]byte("add table ip t\nadd set ip t s { type ipv4_addr ; }\nadd element ip t s { 10.0.0.1, 10.0.0.2, 10.0.0.3 }\n"), "1"); err != nil {
		t.Fatal(err)
	}
	for i, script := range []string{
		"delete element ip t s { 10.0.0.1, 10.0.0.2 }\n",
		"delete element ip t s { 10.0.0.3 }\n",
		"add element ip t s { 10.0.0.4 }\n",
		"delete element ip t s { 10.0.0.4 }\nadd element ip t s { 10.0.0.5 }\n",
	} {
		if err := e.ApplyScript([]byte(script), strconv.Itoa(i+2)); err != nil {
			t.Fatalf("script %d: %v", i+2, err)
		}
	}
	s := e.Ruleset().Tables[0].set("s")
	if s.Len() != 1 || len(s.live()) != 1 || s.live()[0].Text != "10.0.0.5" {
		t.Errorf("set after the transactions: len %d, live %v", s.Len(), s.live())
	}
}

// TestBitmaskMatches: tcp flags, ct state and ct status matches decide as the bytecode
// nft 1.0.6 compiles them to (`nft --debug=netlink`): a plain bitmask match is
// `& bits != 0`, "!" is `& bits == 0`, "==" and "!=" compare the whole value (so
// `ct state != established,related` holds for every packet: a state is one bit), and
// "V / M" is `& M == V`. tcp flags carries the dependency `meta l4proto tcp`: a UDP
// packet matches none of its forms, negated ones included.
func TestBitmaskMatches(t *testing.T) {
	type pkt struct {
		name   string
		udp    bool
		flags  uint8
		state  netfilter.CtState
		status netfilter.CtStatus
	}
	syn := pkt{name: "SYN", flags: netfilter.TCPSyn, state: netfilter.CtNew}
	synack := pkt{name: "SYN-ACK", flags: netfilter.TCPSyn | netfilter.TCPAck, state: netfilter.CtEstablished}
	ack := pkt{name: "ACK", flags: netfilter.TCPAck, state: netfilter.CtEstablished, status: netfilter.StatusDstNAT}
	rst := pkt{name: "RST", flags: 0x04, state: netfilter.CtRelated, status: netfilter.StatusSrcNAT | netfilter.StatusDstNAT}
	udp := pkt{name: "UDP", udp: true, state: netfilter.CtNew, status: netfilter.StatusDstNAT}
	all := []pkt{syn, synack, ack, rst, udp}
	for _, c := range []struct {
		rule  string
		match []string // the packets it matches
	}{
		{"tcp flags syn", []string{"SYN", "SYN-ACK"}},
		{"tcp flags syn,ack", []string{"SYN", "SYN-ACK", "ACK"}},
		{"tcp flags == syn", []string{"SYN"}},
		{"tcp flags != syn", []string{"SYN-ACK", "ACK", "RST"}},
		{"tcp flags ! syn,ack", []string{"RST"}},
		{"tcp flags syn / syn,ack", []string{"SYN"}},
		{"tcp flags & (syn|ack) == syn", []string{"SYN"}},
		{"tcp flags & (syn | ack) != syn", []string{"SYN-ACK", "ACK", "RST"}},
		{"tcp flags & syn == syn", []string{"SYN", "SYN-ACK"}},
		{"tcp flags & 0x3f == 0x02", []string{"SYN"}},
		{"tcp flags & (fin|syn|rst|ack) == 0", nil},
		{"ct state != established,related", []string{"SYN", "SYN-ACK", "ACK", "RST", "UDP"}},
		{"ct state != established", []string{"SYN", "RST", "UDP"}},
		{"ct state ! established,related", []string{"SYN", "UDP"}},
		{"ct state established,related", []string{"SYN-ACK", "ACK", "RST"}},
		{"ct status dnat", []string{"ACK", "RST", "UDP"}},
		{"ct status ! dnat", []string{"SYN", "SYN-ACK"}},
		{"ct status & (snat|dnat) == dnat", []string{"ACK", "UDP"}},
		{"ct status dnat / snat,dnat", []string{"ACK", "UDP"}},
		{"ct status & dnat != 0", []string{"ACK", "RST", "UDP"}},
		{"ct status snat,dnat", []string{"ACK", "RST", "UDP"}},
	} {
		e := mustLoad(t, "table ip f {\n\tchain in {\n\t\ttype filter hook input priority 0; policy accept;\n\t\t"+c.rule+" drop\n\t}\n}\n")
		bc := e.BaseChains(netfilter.Input)[0]
		var got []string
		for _, p := range all {
			q := tcp("10.1.1.1", "192.168.0.2", 80)
			q.TCPFlags, q.CT.State, q.CT.Status = p.flags, p.state, p.status
			if p.udp {
				q.Proto = netfilter.ProtoUDP
			}
			if e.RunChain(newTestEnv(), bc, q, nil).Verdict == Drop {
				got = append(got, p.name)
			}
		}
		if strings.Join(got, " ") != strings.Join(c.match, " ") {
			t.Errorf("%s: matches %q, want %q", c.rule, got, c.match)
		}
	}
}
