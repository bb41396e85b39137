package emulator

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/proxy/iptables/emulator/emutest"
)

var update = flag.Bool("update", false, "rewrite the golden trace files under testdata/iptables/traces")

func walk(t testing.TB, e *Emulator, in WalkInput) *WalkResult {
	t.Helper()
	r, err := e.Walk(in)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ladder(n int, format string) string {
	var b strings.Builder
	b.WriteString("*nat\n:SVC - [0:0]\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, ":SEP%d - [0:0]\n", i)
	}
	b.WriteString("-A PREROUTING -d 10.96.0.1 -p tcp -j SVC\n")
	for i := 0; i < n; i++ {
		if i < n-1 {
			fmt.Fprintf(&b, "-A SVC -m statistic --mode random --probability "+format+" -j SEP%d\n", 1/float64(n-i), i)
		} else {
			fmt.Fprintf(&b, "-A SVC -j SEP%d\n", i)
		}
		fmt.Fprintf(&b, "-A SEP%d -p tcp -j DNAT --to-destination 10.244.0.%d:8080\n", i, i+1)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// TestLadderProbabilities: all branches of kube-proxy's probability ladder give each
// endpoint 1/n, using the kernel's fixed-point probabilities (1/3 is 0.33333333349).
func TestLadderProbabilities(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 10, 33} {
		for _, format := range []string{"%0.10f", "%.11f"} {
			e := load(t, IPv4, ladder(n, format))
			r := walk(t, e, WalkInput{Packet: *pkt("tcp 10.0.0.5:4000 10.96.0.1:80"), AllBranches: true})
			if len(r.Outcomes) != n {
				t.Fatalf("n=%d: %d outcomes, want %d", n, len(r.Outcomes), n)
			}
			sum := 0.0
			for i, o := range r.Outcomes {
				sum += o.Probability
				if math.Abs(o.Probability-1/float64(n)) > 1e-8 {
					t.Errorf("n=%d endpoint %d: p=%.12f, want 1/%d", n, i, o.Probability, n)
				}
				if want := fmt.Sprintf("10.244.0.%d:8080", i+1); o.DNATDestination == nil || *o.DNATDestination != want {
					t.Errorf("n=%d outcome %d goes to %v, want %s", n, i, o.DNATDestination, want)
				}
			}
			if math.Abs(sum-1) > 1e-12 {
				t.Errorf("n=%d: probabilities sum to %.15f", n, sum)
			}
		}
	}
	// The ladder 1/3, 1/2, 1 exactly as the kernel applies it.
	e := load(t, IPv4, ladder(3, "%0.10f"))
	r := walk(t, e, WalkInput{Packet: *pkt("tcp 10.0.0.5:4000 10.96.0.1:80"), AllBranches: true})
	p1 := 715827883.0 / (1 << 31) // round(0.3333333333 · 2^31) / 2^31
	want := []float64{p1, (1 - p1) * 0.5, (1 - p1) * 0.5}
	for i, o := range r.Outcomes {
		if o.Probability != want[i] {
			t.Errorf("outcome %d: %.17g, want %.17g", i, o.Probability, want[i])
		}
	}
}

func TestMergeIdenticalOutcomes(t *testing.T) {
	e := load(t, IPv4, `*nat
:A - [0:0]
:B - [0:0]
-A PREROUTING -m statistic --mode random --probability 0.25 -j A
-A PREROUTING -j B
-A A -p tcp -j DNAT --to-destination 10.244.0.1:80
-A B -m statistic --mode random --probability 0.5 -j A
-A B -p tcp -j DNAT --to-destination 10.244.0.2:80
COMMIT
`)
	r := walk(t, e, WalkInput{Packet: *pkt("tcp 10.0.0.5:4000 10.96.0.1:80"), AllBranches: true})
	if len(r.Paths) != 3 || len(r.Outcomes) != 2 {
		t.Fatalf("%d paths, %d outcomes; want 3 and 2", len(r.Paths), len(r.Outcomes))
	}
	a, b := r.Outcomes[0], r.Outcomes[1]
	if *a.DNATDestination != "10.244.0.1:80" || a.Paths != 2 || math.Abs(a.Probability-0.625) > 1e-9 {
		t.Errorf("first outcome %s p=%v paths=%d, want 10.244.0.1:80 p=0.625 paths=2", *a.DNATDestination, a.Probability, a.Paths)
	}
	if *b.DNATDestination != "10.244.0.2:80" || math.Abs(b.Probability-0.375) > 1e-9 {
		t.Errorf("second outcome %s p=%v", *b.DNATDestination, b.Probability)
	}
}

// TestUnknownBranches: an unknown module is an undecidable branch in all-branches mode
// and assumed not to match otherwise.
func TestUnknownBranches(t *testing.T) {
	e := load(t, IPv4, `*filter
:FORWARD DROP [0:0]
-A FORWARD -m physdev --physdev-is-bridged -j ACCEPT
-A FORWARD -m physdev --physdev-is-bridged -j LOG
-A FORWARD -s 10.0.0.0/8 -m limit --limit 1/s -j REJECT
COMMIT
`)
	in := WalkInput{Packet: *pkt("tcp 10.0.0.5:4000 10.96.0.1:80")}
	r := walk(t, e, in)
	if len(r.Outcomes) != 1 || r.Outcomes[0].Verdict != "DROP" || r.Outcomes[0].DecidedBy != "policy" {
		t.Fatalf("single path: %+v", r.Outcomes[0])
	}
	if len(r.Outcomes[0].Assumptions) != 2 { // the two physdev rules test one condition
		t.Errorf("assumptions %+v", r.Outcomes[0].Assumptions)
	}
	if !strings.Contains(r.Text(), `"-m physdev --physdev-is-bridged" not emulated: assumed not to match`) {
		t.Errorf("trace does not show the assumption:\n%s", r.Text())
	}
	in.AllBranches = true
	r = walk(t, e, in)
	var got []string
	for _, o := range r.Outcomes {
		var as []string
		for _, a := range o.Assumptions {
			as = append(as, fmt.Sprintf("%d=%v", a.Line, a.Matched))
		}
		got = append(got, fmt.Sprintf("%s p=%v [%s]", o.Verdict, o.Probability, strings.Join(as, " ")))
	}
	// One condition is assumed once per path, whichever rules test it: the two
	// physdev rules test the same one on the same packet (listed at its first rule).
	want := []string{"DROP p=1 [3=false 5=false]", "REJECT p=1 [3=false 5=true]", "ACCEPT p=1 [3=true]"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("outcomes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestWalkPaths(t *testing.T) {
	node := mustAddr("192.168.0.2")
	e := load(t, IPv4, `*nat
:SVC - [0:0]
-A PREROUTING -j SVC
-A OUTPUT -j SVC
-A SVC -d 10.96.0.1 -p tcp --dport 443 -j DNAT --to-destination 192.168.0.2:6443
-A SVC -d 10.96.0.2 -p tcp --dport 80 -j DNAT --to-destination 10.244.0.9:80
-A POSTROUTING -s 10.244.0.0/16 ! -d 10.244.0.0/16 -j MASQUERADE
COMMIT
*filter
:FORWARD DROP [0:0]
-A INPUT -p tcp --dport 22 -j REJECT --reject-with tcp-reset
-A FORWARD -d 10.244.0.0/16 -j ACCEPT
-A FORWARD -s 10.244.0.0/16 -j ACCEPT
COMMIT
`)
	cases := []struct {
		name, pkt string
		from      From
		verdict   string
		hooks     string
		by        string
		dnat      string
		masq      bool
	}{
		{"pod to a service on the node itself", "tcp 10.244.0.5:4000 10.96.0.1:443", FromPod, "LOCAL", "PREROUTING,INPUT", "policy", "192.168.0.2:6443", false},
		{"node to a service on the node: back in over loopback", "tcp 192.168.0.2:4000 10.96.0.1:443", FromAuto, "LOCAL", "OUTPUT,POSTROUTING,PREROUTING,INPUT", "policy", "192.168.0.2:6443", false},
		{"external to a pod: forwarded", "tcp 203.0.113.7:4000 10.96.0.2:80", FromExternal, "ACCEPT", "PREROUTING,FORWARD,POSTROUTING", "rule", "10.244.0.9:80", false},
		{"pod to the internet: masqueraded", "tcp 10.244.0.5:4000 8.8.8.8:53", FromPod, "ACCEPT", "PREROUTING,FORWARD,POSTROUTING", "rule", "", true},
		{"external to elsewhere: FORWARD policy DROP", "tcp 203.0.113.7:4000 8.8.8.8:53", FromExternal, "DROP", "PREROUTING,FORWARD", "policy", "", false},
		{"ssh to the node: rejected in INPUT", "tcp 203.0.113.7:4000 192.168.0.2:22", FromAuto, "REJECT", "PREROUTING,INPUT", "rule", "", false},
		{"node to the internet", "tcp 192.168.0.2:4000 8.8.8.8:53", FromNode, "ACCEPT", "OUTPUT,POSTROUTING", "policy", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := walk(t, e, WalkInput{Packet: *pkt(tc.pkt), From: tc.from, Local: []netip.Addr{node}})
			o := r.Outcomes[0]
			dnat := ""
			if o.DNATDestination != nil {
				dnat = *o.DNATDestination
			}
			if o.Verdict != tc.verdict || strings.Join(o.Hooks, ",") != tc.hooks || o.DecidedBy != tc.by || dnat != tc.dnat || o.Masqueraded != tc.masq {
				t.Errorf("got %s via %v by %s dnat %q masq %v; want %s via %s by %s dnat %q masq %v\n%s",
					o.Verdict, o.Hooks, o.DecidedBy, dnat, o.Masqueraded, tc.verdict, tc.hooks, tc.by, tc.dnat, tc.masq, r.Text())
			}
			if o.Probability != 1 {
				t.Errorf("probability %v", o.Probability)
			}
		})
	}
	if _, err := e.Walk(WalkInput{Packet: *pkt("tcp [fd00::1]:4000 [fd00::2]:80")}); err == nil {
		t.Error("an IPv6 packet walked an IPv4 ruleset")
	}
}

// TestSinglePathSeed: without all branches one branch is drawn from the seed, with the
// probability of that path; the same seed gives the same path.
func TestSinglePathSeed(t *testing.T) {
	e := load(t, IPv4, ladder(4, "%0.10f"))
	seen := map[string]int{}
	for seed := uint64(0); seed < 400; seed++ {
		in := WalkInput{Packet: *pkt("tcp 10.0.0.5:4000 10.96.0.1:80"), Seed: seed}
		a, b := walk(t, e, in), walk(t, e, in)
		if *a.Outcomes[0].DNATDestination != *b.Outcomes[0].DNATDestination {
			t.Fatal("same seed, different paths")
		}
		o := a.Outcomes[0]
		seen[*o.DNATDestination]++
		if math.Abs(o.Probability-0.25) > 1e-8 {
			t.Fatalf("path probability %v, want 0.25", o.Probability)
		}
	}
	for d, n := range seen {
		if n < 60 || n > 140 {
			t.Errorf("%s drawn %d times of 400", d, n)
		}
	}
}

// TestTraceGolden checks text and JSON renderings of walks through the fixture dumps
// against golden files (go test -update rewrites them).
func TestTraceGolden(t *testing.T) {
	type tcase struct {
		name   string
		dump   string
		family Family
		in     WalkInput
	}
	node := []netip.Addr{mustAddr("192.168.0.2")}
	kp := func(name, p string, from From, all bool) tcase {
		return tcase{name, "normalise/kube.saved", IPv4, WalkInput{Packet: *pkt(p), From: from, Local: node, AllBranches: all}}
	}
	cases := []tcase{
		kp("kube-pod-to-clusterip", "tcp 10.0.0.2:40000 172.30.0.41:80", FromPod, true),
		kp("kube-node-to-no-endpoints", "tcp 192.168.0.2:40000 172.30.0.46:80", FromAuto, false),
		kp("kube-external-to-nodeport", "tcp 203.0.113.9:40000 192.168.0.2:3001", FromExternal, true),
		kp("kube-lb-allowed-source", "tcp 203.0.113.9:40000 5.6.7.8:80", FromExternal, true),
		kp("kube-lb-blocked-source", "tcp 203.0.113.200:40000 5.6.7.8:80", FromExternal, false),
		kp("kube-localhost-nodeport", "tcp 127.0.0.1:40000 127.0.0.1:3001", FromNode, true),
		{"calico-pod-to-docker-host-port", "normalise/calico.saved", IPv4, WalkInput{
			Packet: func() Packet {
				p := *pkt("tcp 10.244.1.7:40000 192.168.1.10:8080")
				p.InIface = "cali12d4a061371"
				return p
			}(),
			From: FromPod, Local: []netip.Addr{mustAddr("192.168.1.10")}, AllBranches: true, OutIface: "docker0"}},
		{"calico-pod-to-apiserver", "normalise/calico.saved", IPv4, WalkInput{
			Packet: func() Packet {
				p := *pkt("tcp 10.244.1.7:40000 10.96.0.1:443")
				p.InIface = "cali12d4a061371"
				return p
			}(),
			From: FromPod, Local: []netip.Addr{mustAddr("192.168.1.10")}, AllBranches: true}},
		{"ipv6-clusterip", "normalise/v6-v6.saved", IPv6, WalkInput{Packet: *pkt("tcp [fd00:10::9]:40000 [fd00:30::41]:80"), From: FromPod, AllBranches: true}},
	}
	dir := "../../../testdata/iptables/traces"
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Load(mustRead(t, filepath.Join("../../../testdata/iptables", tc.dump)), tc.family, tc.dump)
			if err != nil {
				t.Fatal(err)
			}
			r := walk(t, e, tc.in)
			js, err := r.JSON()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []struct {
				ext  string
				data []byte
			}{{".txt", []byte(r.Text())}, {".json", js}} {
				path := filepath.Join(dir, tc.name+f.ext)
				if *update {
					os.MkdirAll(dir, 0o755)
					if err := os.WriteFile(path, f.data, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run go test -update to create it)", err)
				}
				if string(want) != string(f.data) {
					t.Errorf("%s differs:\n%s", path, lineDiff(string(want), string(f.data)))
				}
			}
			// The JSON shape: a list of outcomes with these fields, probabilities summing
			// to 1 when nothing was assumed.
			var outs []map[string]any
			if err := json.Unmarshal(js, &outs); err != nil {
				t.Fatal(err)
			}
			sum, assumed := 0.0, false
			for _, o := range outs {
				for _, k := range []string{"probability", "verdict", "decided_by", "decision", "dnat_destination", "masqueraded", "matched_rules", "hooks", "paths"} {
					if _, ok := o[k]; !ok {
						t.Errorf("outcome without %q: %v", k, o)
					}
				}
				sum += o["probability"].(float64)
				_, a := o["assumptions"]
				assumed = assumed || a
			}
			if !assumed && math.Abs(sum-1) > 1e-9 {
				t.Errorf("probabilities sum to %v", sum)
			}
		})
	}
}

// TestWalkEveryRule: by default a trace skips, through the chain index, the rules of a
// long chain that cannot match; EveryRule lists each of them as evaluated and not
// matched, with the same outcomes.
func TestWalkEveryRule(t *testing.T) {
	e := load(t, IPv4, string(emutest.KubeDumpTo(40, 2, func(i, j int) string { return fmt.Sprintf("10.244.%d.%d", i, j+1) }, 8080)))
	in := WalkInput{Packet: *pkt("tcp 10.0.0.2:40000 172.30.0.31:80"), AllBranches: true}
	indexed := walk(t, e, in)
	in.EveryRule = true
	every := walk(t, e, in)
	summary := func(r *WalkResult) string {
		var s []string
		for _, o := range r.Outcomes {
			s = append(s, fmt.Sprintf("%s %.6f", o.summary(), o.Probability))
		}
		return strings.Join(s, "; ")
	}
	if summary(indexed) != summary(every) {
		t.Errorf("outcomes differ:\nindexed %s\nevery rule %s", summary(indexed), summary(every))
	}
	// nat KUBE-SERVICES holds 40 cluster IP rules and the NodePort tail rule; the DNAT
	// ends the nat table, so the indexed walk lists only the matching rule.
	looked := func(r *WalkResult) (rules, skipped int) {
		for _, s := range r.Paths[0].Trace.Steps {
			switch {
			case s.Kind == StepRule && s.Table == TableNAT && s.Chain == "KUBE-SERVICES":
				rules++
			case s.Kind == StepIndex && s.Table == TableNAT && s.Chain == "KUBE-SERVICES":
				skipped++
			}
		}
		return
	}
	if n, skips := looked(indexed); n != 1 || skips != 1 {
		t.Errorf("indexed walk: %d KUBE-SERVICES rules listed, %d index steps; want 1 and 1", n, skips)
	}
	// The packet's service is the 31st: rules 1-30 are listed as not matching, the 31st
	// matches and jumps; nothing after it is looked at.
	if n, skips := looked(every); n != 31 || skips != 0 {
		t.Errorf("every-rule walk: %d KUBE-SERVICES rules listed, %d index steps; want 31 and 0", n, skips)
	}
}

// TestAssumptionsConsistent: an ipset the walk was not given is one condition however
// many rules test it, negated or not: a packet in the set is accepted, one outside it
// rejected, and no path has it both outside for the first rule and inside for the
// second (which would reach the DROP policy).
func TestAssumptionsConsistent(t *testing.T) {
	e := load(t, IPv4, `*filter
:FORWARD DROP [0:0]
-A FORWARD -m set --match-set KUBE-LOOP-BACK dst,dst,src -j LOG
-A FORWARD -p tcp -m set --match-set KUBE-LOOP-BACK dst,dst,src -j ACCEPT
-A FORWARD -m set ! --match-set KUBE-LOOP-BACK dst,dst,src -j REJECT
COMMIT
`)
	r := walk(t, e, WalkInput{Packet: *pkt("tcp 10.0.0.5:4000 10.96.0.1:80"), AllBranches: true})
	var got []string
	for _, o := range r.Outcomes {
		var as []string
		for _, a := range o.Assumptions {
			as = append(as, fmt.Sprintf("%s=%v", a.Condition, a.Holds))
		}
		got = append(got, fmt.Sprintf("%s p=%v [%s]", o.Verdict, o.Probability, strings.Join(as, " ")))
	}
	want := []string{
		"REJECT p=1 [set KUBE-LOOP-BACK dst=10.96.0.1:80 dst=10.96.0.1:80 src=10.0.0.5:4000=false]",
		"ACCEPT p=1 [set KUBE-LOOP-BACK dst=10.96.0.1:80 dst=10.96.0.1:80 src=10.0.0.5:4000=true]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("outcomes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(r.Paths) != 2 {
		t.Errorf("%d paths, want 2 (one assumption)", len(r.Paths))
	}
}

// TestAssumptionsThatDecideNothingMerge: conditions that do not change a packet's fate
// (rules that only log) leave one outcome with no assumption, its probability 1,
// instead of one identical outcome per combination; a condition that does decide
// stays on the outcomes it splits.
func TestAssumptionsThatDecideNothingMerge(t *testing.T) {
	e := load(t, IPv4, `*filter
:FORWARD ACCEPT [0:0]
-A FORWARD -m physdev --physdev-in veth1 -j LOG
-A FORWARD -m socket --transparent -j LOG
-A FORWARD -m set --match-set A src -j LOG
-A FORWARD -m set --match-set B src -j LOG
COMMIT
`)
	r := walk(t, e, WalkInput{Packet: *pkt("tcp 10.0.0.5:4000 10.96.0.1:80"), AllBranches: true})
	if len(r.Paths) != 16 {
		t.Fatalf("%d paths, want 16", len(r.Paths))
	}
	if len(r.Outcomes) != 1 || r.Outcomes[0].Verdict != "ACCEPT" || r.Outcomes[0].Probability != 1 || len(r.Outcomes[0].Assumptions) != 0 || r.Outcomes[0].Paths != 16 {
		o := r.Outcomes[0]
		t.Fatalf("%d outcomes, the first %s p=%v assumptions %v paths %d; want one ACCEPT p=1 with none, 16 paths", len(r.Outcomes), o.Verdict, o.Probability, o.Assumptions, o.Paths)
	}
	e = load(t, IPv4, `*filter
:FORWARD ACCEPT [0:0]
-A FORWARD -m physdev --physdev-in veth1 -j LOG
-A FORWARD -m set --match-set A src -j DROP
-A FORWARD -m socket --transparent -j LOG
COMMIT
`)
	r = walk(t, e, WalkInput{Packet: *pkt("tcp 10.0.0.5:4000 10.96.0.1:80"), AllBranches: true})
	var got []string
	for _, o := range r.Outcomes {
		var as []string
		for _, a := range o.Assumptions {
			as = append(as, fmt.Sprintf("%s=%v", a.Match, a.Holds))
		}
		got = append(got, fmt.Sprintf("%s [%s]", o.Verdict, strings.Join(as, " ")))
	}
	want := []string{"ACCEPT [-m set --match-set A src=false]", "DROP [-m set --match-set A src=true]"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("outcomes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestIPVSLeg: a packet IPVS forwards is walked from OUTPUT without the nat table there
// (its destination was bound at PREROUTING), and through POSTROUTING's nat table.
func TestIPVSLeg(t *testing.T) {
	e := load(t, IPv4, `*nat
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A OUTPUT -p tcp -j DNAT --to-destination 10.9.9.9:1
-A POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE
COMMIT
`)
	p := *pkt("tcp 203.0.113.5:4000 10.0.1.1:80")
	p.Mark = 0x4000
	r := walk(t, e, WalkInput{Packet: p, IPVSLeg: true, IfaceAddrs: map[string]netip.Addr{"eth0": netip.MustParseAddr("192.168.0.2")}, OutIface: "eth0"})
	o := r.Outcomes[0]
	if o.DNATDestination != nil || !o.Masqueraded || o.SNATSource == nil || *o.SNATSource != "192.168.0.2" || o.Verdict != "ACCEPT" {
		t.Errorf("IPVS leg: %s, dnat %v", o.summary(), o.DNATDestination)
	}
	if !strings.Contains(r.Text(), "nat table skipped: IPVS sends the packet on") {
		t.Errorf("trace:\n%s", r.Text())
	}
	// The same packet from the node itself is NATed at OUTPUT.
	r = walk(t, e, WalkInput{Packet: p, From: FromNode, OutIface: "eth0"})
	if o := r.Outcomes[0]; o.DNATDestination == nil || *o.DNATDestination != "10.9.9.9:1" {
		t.Errorf("from the node: %s", o.summary())
	}
}

// TestRouteLocalnet: a packet from another interface DNATed to a loopback address is a
// martian the kernel's routing drops unless route_localnet is set; not known: not
// checked.
func TestRouteLocalnet(t *testing.T) {
	e := load(t, IPv4, `*nat
:PREROUTING ACCEPT [0:0]
-A PREROUTING -p tcp --dport 30080 -j DNAT --to-destination 127.0.0.1:8080
COMMIT
`)
	p := *pkt("tcp 192.168.0.9:4000 192.168.0.2:30080")
	p.InIface = "eth0"
	off, on := false, true
	r := walk(t, e, WalkInput{Packet: p, Local: []netip.Addr{netip.MustParseAddr("192.168.0.2")}, RouteLocalnet: &off})
	if o := r.Outcomes[0]; o.Verdict != "DROP" || o.DecidedBy != "routing" || !strings.Contains(r.Text(), "is martian with route_localnet=0") || !strings.Contains(r.Text(), "DROP dnat 127.0.0.1:8080 by routing") {
		t.Errorf("route_localnet=0: %s\n%s", o.summary(), r.Text())
	}
	for _, rl := range []*bool{&on, nil} {
		r = walk(t, e, WalkInput{Packet: p, Local: []netip.Addr{netip.MustParseAddr("192.168.0.2")}, RouteLocalnet: rl})
		if o := r.Outcomes[0]; o.Verdict != "LOCAL" {
			t.Errorf("route_localnet %v: %s", rl, o.summary())
		}
	}
}
