package emulator

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

const vip = "10.0.0.1:80"

// svcLines adds a TCP service on vip with the scheduler and the given destinations, in
// order ("A", "B:3" = weight 3). Each -a puts the new destination at the head of the list.
func svcLines(sched string, dests ...string) []string {
	out := []string{"-A -t " + vip + " -s " + sched}
	for _, d := range dests {
		name, w, _ := strings.Cut(d, ":")
		if w == "" {
			w = "1"
		}
		out = append(out, "-a -t "+vip+" -r "+addrOf(name)+":80 -m -w "+w)
	}
	return out
}

func addrOf(letter string) string {
	return "10.1.0." + string(rune('0'+letter[0]-'A'+1))
}

type schedStep struct {
	do    []string
	picks int    // real SYNs from one client
	ask   string // dry-run schedule for a SYN from this client:port
	order bool   // compare the list order
	want  string
}

type schedCase struct {
	name  string
	setup []string
	steps []schedStep
}

func runSchedCases(t *testing.T, cases []schedCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm := newTM(t, Config{}, c.setup...)
			for i, s := range c.steps {
				tm.do(s.do...)
				var got string
				switch {
				case s.picks > 0:
					got = tm.picks(s.picks, vip)
				case s.ask != "":
					got = tm.ask(s.ask, vip, 0)
				case s.order:
					got = tm.listOrder("TCP " + vip)
				default:
					continue
				}
				eq(t, c.name+" step "+string(rune('0'+i)), got, s.want)
			}
		})
	}
}

func TestRR(t *testing.T) {
	runSchedCases(t, []schedCase{
		{name: "rr-01 list order is reverse insertion",
			setup: svcLines("rr", "A", "B", "C"),
			steps: []schedStep{{order: true, want: "C B A"}, {picks: 7, want: "C B A C B A C"}}},
		{name: "rr-02 weight 0 and OVERLOAD are skipped",
			setup: svcLines("rr", "A", "B:0", "C"),
			steps: []schedStep{{picks: 4, want: "C A C A"},
				{do: []string{"-e -t " + vip + " -r 10.1.0.2:80 -m -w 1", "set -t " + vip + " -r 10.1.0.3:80 overloaded=yes"},
					picks: 4, want: "B A B A"}}},
		{name: "rr-03 no reset on add: the new head is reached when the walk wraps",
			setup: svcLines("rr", "A", "B", "C"),
			steps: []schedStep{{picks: 2, want: "C B"},
				{do: []string{"-a -t " + vip + " -r 10.1.0.4:80 -m"}, order: true, want: "D C B A"},
				{picks: 5, want: "A D C B A"}}},
		{name: "rr-04 deleting the cursor moves it to the predecessor",
			setup: svcLines("rr", "A", "B", "C"),
			steps: []schedStep{{picks: 2, want: "C B"},
				{do: []string{"-d -t " + vip + " -r 10.1.0.2:80"}, picks: 3, want: "A C A"}}},
		{name: "rr-05 deleting the cursor at the head of the list restarts from the head",
			setup: svcLines("rr", "A", "B", "C"),
			steps: []schedStep{{picks: 1, want: "C"},
				{do: []string{"-d -t " + vip + " -r 10.1.0.3:80"}, picks: 3, want: "B A B"}}},
		{name: "rr-06 a weight change does not reset the cursor",
			setup: svcLines("rr", "A", "B", "C"),
			steps: []schedStep{{picks: 1, want: "C"},
				{do: []string{"-e -t " + vip + " -r 10.1.0.1:80 -m -w 5"}, picks: 3, want: "B A C"}}},
		{name: "rr-07 nothing eligible: no destination, cursor kept",
			setup: svcLines("rr", "A", "B"),
			steps: []schedStep{{picks: 1, want: "B"},
				{do: []string{"-e -t " + vip + " -r 10.1.0.1:80 -m -w 0", "-e -t " + vip + " -r 10.1.0.2:80 -m -w 0"}, picks: 2, want: "- -"},
				{do: []string{"-e -t " + vip + " -r 10.1.0.1:80 -m -w 1", "-e -t " + vip + " -r 10.1.0.2:80 -m -w 1"}, picks: 3, want: "A B A"}}},
		{name: "rr-08 dry-run sched does not move the cursor",
			setup: svcLines("rr", "A", "B", "C"),
			steps: []schedStep{{picks: 1, want: "C"}, {ask: "192.0.2.9:1000", want: "B"}, {ask: "192.0.2.9:1001", want: "B"},
				{picks: 2, want: "B A"}}},
	})
}

func TestWRR(t *testing.T) {
	runSchedCases(t, []schedCase{
		{name: "wrr-01a created empty, filled one by one: cw starts at the first add's mw",
			setup: svcLines("wrr", "C:2", "B:3", "A:4"),
			steps: []schedStep{{order: true, want: "A B C"}, {picks: 12, want: "A B C A A B A B C A B C"}}},
		{name: "wrr-01b bound to a filled service (-E): cw starts at the maximum weight",
			setup: append(svcLines("rr", "C:2", "B:3", "A:4"), "-E -t "+vip+" -s wrr"),
			steps: []schedStep{{picks: 9, want: "A A B A B C A B C"}}},
		{name: "wrr-02 gcd step and the last pass at cw=1",
			setup: svcLines("wrr", "B:2", "A:4"),
			steps: []schedStep{{picks: 8, want: "A B A A B A A B"}}},
		{name: "wrr-03 any update resets the cursor to the head (rr would continue with A)",
			setup: svcLines("wrr", "A", "B", "C"),
			steps: []schedStep{{picks: 2, want: "C B"},
				{do: []string{"-e -t " + vip + " -r 10.1.0.1:80 -m -w 1"}, picks: 3, want: "C B A"}}},
		{name: "wrr-04 overloaded destinations are skipped; all overloaded gives none",
			setup: svcLines("wrr", "A:1", "B:2"),
			steps: []schedStep{{do: []string{"set -t " + vip + " -r 10.1.0.2:80 overloaded=yes"}, picks: 2, want: "A A"},
				{do: []string{"set -t " + vip + " -r 10.1.0.1:80 overloaded=yes"}, picks: 1, want: "-"}}},
		{name: "wrr-05 all weights 0: no destination",
			setup: svcLines("wrr", "A:0", "B:0"),
			steps: []schedStep{{picks: 2, want: "- -"}}},
		{name: "wrr-06 kube-proxy weights (all 1) behave like rr until a change",
			setup: svcLines("wrr", "A", "B", "C", "D"),
			steps: []schedStep{{picks: 6, want: "D C B A D C"},
				{do: []string{"-a -t " + vip + " -r 10.1.0.5:80 -m -w 1"}, picks: 3, want: "E D C"}}},
	})
}

func TestLeastConnFamily(t *testing.T) {
	set := func(l, kv string) string { return "set -t " + vip + " -r " + addrOf(l) + ":80 " + kv }
	runSchedCases(t, []schedCase{
		{name: "lc overhead is active*256+inactive; first minimum in list order wins",
			setup: svcLines("lc", "A", "B", "C"),
			steps: []schedStep{
				{ask: "192.0.2.1:1", want: "C"},
				{do: []string{set("A", "active=1"), set("B", "inactive=255"), set("C", "inactive=256")}, ask: "192.0.2.1:1", want: "B"},
				{do: []string{set("B", "inactive=256")}, ask: "192.0.2.1:1", want: "C"},
				{do: []string{"-e -t " + vip + " -r 10.1.0.3:80 -m -w 0"}, ask: "192.0.2.1:1", want: "B"},
				{do: []string{set("B", "overloaded=yes")}, ask: "192.0.2.1:1", want: "A"}}},
		{name: "wlc cross-multiplied strict comparison, ties keep the earlier",
			setup: svcLines("wlc", "A:3", "B:2", "C:1"),
			steps: []schedStep{
				{ask: "192.0.2.1:1", want: "C"},
				{do: []string{set("C", "inactive=10"), set("B", "inactive=15"), set("A", "inactive=30")}, ask: "192.0.2.1:1", want: "B"},
				{do: []string{set("A", "inactive=22")}, ask: "192.0.2.1:1", want: "A"},
				{do: []string{set("A", "inactive=30"), set("B", "inactive=20")}, ask: "192.0.2.1:1", want: "C"},
				{do: []string{set("A", "active=1 inactive=0")}, ask: "192.0.2.1:1", want: "C"}}},
		{name: "wlc weight 0 cannot seed and never wins later",
			setup: svcLines("wlc", "A:1", "B:0", "C:0"),
			steps: []schedStep{{do: []string{set("A", "active=100")}, ask: "192.0.2.1:1", want: "A"}}},
		{name: "sed ignores inactive connections: overhead active+1",
			setup: svcLines("sed", "A:3", "B:2", "C:1"),
			steps: []schedStep{
				{do: []string{set("C", "inactive=1000"), set("B", "active=1"), set("A", "active=1")}, ask: "192.0.2.1:1", want: "A"},
				{do: []string{set("A", "active=2")}, ask: "192.0.2.1:1", want: "C"}}},
		{name: "nq takes the first idle server regardless of weight, else the sed minimum",
			setup: svcLines("nq", "A:3", "B:2", "C:1"),
			steps: []schedStep{
				{do: []string{set("C", "active=2")}, ask: "192.0.2.1:1", want: "B"},
				{do: []string{set("B", "active=1"), set("A", "active=5")}, ask: "192.0.2.1:1", want: "B"},
				{do: []string{set("A", "active=2")}, ask: "192.0.2.1:1", want: "B"},
				{do: []string{set("A", "active=1")}, ask: "192.0.2.1:1", want: "A"}}},
		{name: "fo highest weight, first on ties, OVERLOAD skipped",
			setup: svcLines("fo", "A:3", "B:3", "C:1"),
			steps: []schedStep{{ask: "192.0.2.1:1", want: "B"},
				{do: []string{set("B", "overloaded=yes")}, ask: "192.0.2.1:1", want: "A"},
				{do: []string{set("A", "overloaded=yes")}, ask: "192.0.2.1:1", want: "C"}}},
		{name: "ovf highest weight among those with active <= weight",
			setup: svcLines("ovf", "A:3", "B:3", "C:1"),
			steps: []schedStep{{ask: "192.0.2.1:1", want: "B"},
				{do: []string{set("B", "active=4")}, ask: "192.0.2.1:1", want: "A"},
				{do: []string{set("A", "active=3")}, ask: "192.0.2.1:1", want: "A"},
				{do: []string{set("A", "active=4")}, ask: "192.0.2.1:1", want: "C"},
				{do: []string{set("C", "active=2")}, ask: "192.0.2.1:1", want: "-"}}},
	})
}

// TestTwos checks ip_vs_twos_schedule against the draws of the same seeded PCG: each
// choice is the first eligible dest (list order) whose cumulative weight reaches the
// draw r in [0, total]; the second choice wins only if it is strictly less loaded
// (weight2*overhead1 > weight1*overhead2).
func TestTwos(t *testing.T) {
	const seed = 7
	tm := newTM(t, Config{Seed: seed}, svcLines("twos", "A:1", "B:2", "C:3")...)
	tm.do("set -t "+vip+" -r 10.1.0.1:80 inactive=1", "set -t "+vip+" -r 10.1.0.2:80 inactive=5",
		"set -t "+vip+" -r 10.1.0.3:80 inactive=4")
	rng := rand.New(rand.NewPCG(seed, seed))
	list := []struct {
		name   string
		w      int32
		oh     int32
		letter string
	}{{"C", 3, 4, "C"}, {"B", 2, 5, "B"}, {"A", 1, 1, "A"}}
	pick := func(r int32) int {
		for i, d := range list {
			r -= d.w
			if r <= 0 {
				return i
			}
		}
		return len(list) - 1
	}
	for i := 0; i < 200; i++ {
		r1 := int32(rng.Uint32() % 7)
		r2 := int32(rng.Uint32() % 7)
		c1, c2 := list[pick(r1)], list[pick(r2)]
		want := c1.letter
		if c2.w*c1.oh > c1.w*c2.oh {
			want = c2.letter
		}
		// a dry run does not consume draws
		if got := tm.ask("192.0.2.1:1", vip, 0); got != want {
			t.Fatalf("draw %d: dry run chose %s, want %s", i, got, want)
		}
		d := tm.Schedule(Packet{Protocol: netfilter.ProtoTCP, Src: netip.MustParseAddrPort("192.0.2.1:1"), Dst: netip.MustParseAddrPort(vip), TCPFlags: netfilter.TCPSyn})
		_ = d
		tm.Model.mu.Lock()
		s := tm.services[svcKey{proto: netfilter.ProtoTCP, addr: netip.MustParseAddr("10.0.0.1"), port: 80}]
		got := letter(s.sched.schedule(tm.Model, s, &schedInput{}, false).addrPort())
		tm.Model.mu.Unlock()
		if got != want {
			t.Fatalf("draw %d (r1=%d r2=%d): twos chose %s, want %s", i, r1, r2, got, want)
		}
	}
	// one eligible destination is always chosen; overloaded never
	tm2 := newTM(t, Config{Seed: 1}, svcLines("twos", "A:5", "B:5")...)
	tm2.do("set -t " + vip + " -r 10.1.0.2:80 overloaded=yes")
	eq(t, "twos with B overloaded", tm2.picks(20, vip), strings.TrimSpace(strings.Repeat("A ", 20)))
}

// The dh and sh vectors were computed with an independent Python implementation of
// hash_32 and of ip_vs_dh.c/ip_vs_sh.c.
func TestDH(t *testing.T) {
	tm := newTM(t, Config{}, "-A -f 1 -s dh", "-a -f 1 -r 10.1.0.1:80 -m", "-a -f 1 -r 10.1.0.2:80 -m", "-a -f 1 -r 10.1.0.3:80 -m")
	// list C B A: bucket i holds list[i mod 3]; hash_32(daddr, 8)
	for daddr, want := range map[string]string{
		"192.168.1.1:80": "B", "192.168.1.2:80": "C", "93.184.216.34:80": "C", "10.0.0.1:80": "C", "8.8.8.8:80": "A",
	} {
		eq(t, "dh "+daddr, tm.ask("172.16.0.1:999", daddr, 1), want)
		eq(t, "dh other client "+daddr, tm.ask("172.16.9.9:5", daddr, 1), want)
	}
	// weight 0 on the bucket's dest: none, no fallback
	tm.do("-e -f 1 -r 10.1.0.1:80 -m -w 0")
	eq(t, "dh weight 0", tm.ask("172.16.0.1:999", "8.8.8.8:80", 1), "-")
	// weights do not shape the table, and an update does not rebuild it
	tm.do("-e -f 1 -r 10.1.0.1:80 -m -w 1", "-e -f 1 -r 10.1.0.2:80 -m -w 50")
	eq(t, "dh weights unused", tm.ask("172.16.0.1:999", "192.168.1.1:80", 1), "B")
	// delete rebuilds: list C A, bucket 136 -> C (136 mod 2 = 0)
	tm.do("-d -f 1 -r 10.1.0.2:80")
	eq(t, "dh after delete", tm.ask("172.16.0.1:999", "192.168.1.1:80", 1), "C")
}

func TestSH(t *testing.T) {
	// list B(w2) A(w1): buckets B B A B B A ...
	tm := newTM(t, Config{}, svcLines("sh", "A:1", "B:2")...)
	for client, want := range map[string]string{
		"10.0.0.1": "B", "10.0.0.2": "A", "10.0.0.3": "B", "10.0.0.4": "A", "10.0.0.5": "B", "172.16.0.9": "B",
	} {
		eq(t, "sh "+client, tm.ask(client+":40000", vip, 0), want)
		eq(t, "sh other port "+client, tm.ask(client+":1234", vip, 0), want)
	}
	// sh-port: key = port + addr
	tm.do("-E -t " + vip + " -s sh -b sh-port")
	for client, want := range map[string]string{
		"10.0.0.1": "A", "10.0.0.2": "B", "10.0.0.3": "A", "10.0.0.4": "B", "10.0.0.5": "B", "172.16.0.9": "A",
	} {
		eq(t, "sh-port "+client, tm.ask(client+":40000", vip, 0), want)
	}

	// sh-fallback probes bucket (k + 2h) mod 256: list D C(w2) B A -> D C C B A ...
	tm2 := newTM(t, Config{}, "-A -t "+vip+" -s sh -b sh-fallback", "-a -t "+vip+" -r 10.1.0.1:80 -m",
		"-a -t "+vip+" -r 10.1.0.2:80 -m", "-a -t "+vip+" -r 10.1.0.3:80 -m -w 2", "-a -t "+vip+" -r 10.1.0.4:80 -m")
	eq(t, "sh before overload", tm2.ask("10.0.1.2:1", vip, 0), "C")
	tm2.do("set -t " + vip + " -r 10.1.0.3:80 overloaded=yes")
	eq(t, "sh-fallback 10.0.1.2 (h=82, probe 2h=164 -> A)", tm2.ask("10.0.1.2:1", vip, 0), "A")
	eq(t, "sh-fallback 10.0.1.4 (h=21, probe 42 -> C, 43 -> B)", tm2.ask("10.0.1.4:1", vip, 0), "B")
	tm2.do("-E -t " + vip + " -s sh")
	eq(t, "sh without fallback", tm2.ask("10.0.1.2:1", vip, 0), "-")

	// weight 0 keeps one bucket per round
	tm3 := newTM(t, Config{}, svcLines("sh", "A:1", "B:0")...)
	eq(t, "sh weight 0 bucket", tm3.ask("10.0.0.5:1", vip, 0), "-") // h=174: B
	eq(t, "sh weight 0 other bucket", tm3.ask("10.0.0.1:1", vip, 0), "A")
}

// The mh vectors were computed with an independent Python implementation of the
// kernel's 64-bit hsiphash and of ip_vs_mh.c (4093 slots).
func TestMH(t *testing.T) {
	tm := newTM(t, Config{}, svcLines("mh", "A", "B", "C")...)
	// table share: C 1365, B 1364, A 1364
	counts := map[string]int{}
	tm.Model.mu.Lock()
	s := tm.services[svcKey{proto: netfilter.ProtoTCP, addr: netip.MustParseAddr("10.0.0.1"), port: 80}]
	for _, d := range s.sched.(*mhSched).lookup {
		counts[letter(d.addrPort())]++
	}
	tm.Model.mu.Unlock()
	if counts["C"] != 1365 || counts["B"] != 1364 || counts["A"] != 1364 {
		t.Errorf("mh table share = %v, want C 1365 B 1364 A 1364", counts)
	}
	noPort := map[string]string{"10.0.0.1": "A", "10.0.0.2": "B", "10.0.0.3": "C", "10.0.0.4": "B", "192.168.7.9": "B", "172.16.5.4": "A"}
	withPort := map[string]string{"10.0.0.1": "A", "10.0.0.2": "B", "10.0.0.3": "C", "10.0.0.4": "C", "192.168.7.9": "A", "172.16.5.4": "A"}
	for c, want := range noPort {
		eq(t, "mh "+c, tm.ask(c+":40000", vip, 0), want)
	}
	tm.do("-E -t " + vip + " -s mh -b mh-port")
	for c, want := range withPort {
		eq(t, "mh-port "+c, tm.ask(c+":40000", vip, 0), want)
	}
	// weight 0 (kube-proxy graceful termination): table unchanged (last_weight), B's
	// clients get no destination, others keep theirs
	tm.do("-E -t "+vip+" -s mh", "-e -t "+vip+" -r 10.1.0.2:80 -m -w 0")
	eq(t, "mh quiesced B", tm.ask("192.168.7.9:1", vip, 0), "-")
	eq(t, "mh quiesced B", tm.ask("10.0.0.2:1", vip, 0), "-")
	eq(t, "mh others keep", tm.ask("10.0.0.3:1", vip, 0), "C")
	eq(t, "mh others keep", tm.ask("10.0.0.1:1", vip, 0), "A")
	// mh-fallback rehashes with offsets
	tm.do("-E -t " + vip + " -s mh -b mh-fallback")
	for c, want := range map[string]string{"10.0.0.1": "A", "10.0.0.2": "C", "10.0.0.3": "C", "10.0.0.4": "A", "192.168.7.9": "A", "172.16.5.4": "A"} {
		eq(t, "mh-fallback "+c, tm.ask(c+":1", vip, 0), want)
	}
	// delete B: rebuilt from C A
	tm.do("-E -t "+vip+" -s mh", "-d -t "+vip+" -r 10.1.0.2:80")
	for c, want := range map[string]string{"10.0.0.1": "A", "10.0.0.2": "A", "10.0.0.3": "C", "10.0.0.4": "C", "192.168.7.9": "C", "172.16.5.4": "A"} {
		eq(t, "mh after delete "+c, tm.ask(c+":1", vip, 0), want)
	}

	// weights 3:1 (list C(3) B(1))
	tw := newTM(t, Config{}, svcLines("mh", "B:1", "C:3")...)
	for c, want := range map[string]string{"10.0.0.1": "C", "10.0.0.2": "B", "10.0.0.3": "C", "10.0.0.4": "C"} {
		eq(t, "mh 3:1 "+c, tw.ask(c+":1", vip, 0), want)
	}

	// IPv6: addresses folded by XOR of the 32-bit words
	t6 := newTM(t, Config{}, "-A -u [fd00::100]:53 -s mh", "-a -u [fd00::100]:53 -r [fd00::1]:53 -m",
		"-a -u [fd00::100]:53 -r [fd00::2]:53 -m", "-a -u [fd00::100]:53 -r [fd00::3]:53 -m")
	ask6 := func(c string) string {
		d := t6.Schedule(Packet{Protocol: netfilter.ProtoUDP, Src: netip.MustParseAddrPort(c), Dst: netip.MustParseAddrPort("[fd00::100]:53")})
		return letter(d.Dest)
	}
	eq(t, "mh v6 fd00:1::1", ask6("[fd00:1::1]:5353"), "C")
	eq(t, "mh v6 fd00:1::2", ask6("[fd00:1::2]:5353"), "A")
	eq(t, "mh v6 2001:db8::77", ask6("[2001:db8::77]:5353"), "C")
	t6.do("-E -u [fd00::100]:53 -s mh -b mh-port")
	eq(t, "mh-port v6 fd00:1::2", ask6("[fd00:1::2]:5353"), "B")
}

// TestMHConsistency: Maglev keeps most mappings when a destination goes (2726 of the
// 2729 slots of the survivors stay put, per the Python model).
func TestMHConsistency(t *testing.T) {
	tm := newTM(t, Config{}, svcLines("mh", "A", "B", "C")...)
	snapshot := func() []string {
		tm.Model.mu.Lock()
		defer tm.Model.mu.Unlock()
		s := tm.services[svcKey{proto: netfilter.ProtoTCP, addr: netip.MustParseAddr("10.0.0.1"), port: 80}]
		out := make([]string, 0, 4093)
		for _, d := range s.sched.(*mhSched).lookup {
			out = append(out, letter(d.addrPort()))
		}
		return out
	}
	before := snapshot()
	tm.do("-d -t " + vip + " -r 10.1.0.2:80")
	after := snapshot()
	kept, total := 0, 0
	for i := range before {
		if before[i] == "B" {
			continue
		}
		total++
		if before[i] == after[i] {
			kept++
		}
	}
	if kept != 2726 || total != 2729 {
		t.Errorf("mh kept %d of %d slots, want 2726 of 2729", kept, total)
	}
}

func TestMHTableIndex(t *testing.T) {
	for idx, size := range map[int]int{8: 251, 12: 4093, 17: 131071} {
		m := MustNew(Config{MHTableIndex: idx})
		if m.mhSize != size {
			t.Errorf("MHTableIndex %d: size %d, want %d", idx, m.mhSize, size)
		}
	}
	if _, err := New(Config{MHTableIndex: 18}); err == nil {
		t.Error("MHTableIndex 18 accepted")
	}
}

// TestSchedulersImplemented: every scheduler ipvs.Schedulers names (what the proxier and
// scenario files accept) is one the model implements; any other name is ENOENT, as a
// missing ip_vs_* module is.
func TestSchedulersImplemented(t *testing.T) {
	for _, name := range append(ipvs.Schedulers(), "none") {
		if _, err := MustNew(Config{}).schedulerByName(name); err != nil {
			t.Errorf("scheduler %s: %v", name, err)
		}
	}
	if _, err := MustNew(Config{}).schedulerByName("wlcx"); !ipvs.IsNotFound(err) {
		t.Errorf("unknown scheduler: %v, want ErrNotFound", err)
	}
}
