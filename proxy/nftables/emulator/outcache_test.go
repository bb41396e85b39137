package emulator

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/netfilter"
)

// target is a Service address the ruleset names (dst zero: a node port, any address).
type target struct {
	dst   netip.Addr
	proto uint8
	port  uint16
}

// cacheCase is a ruleset of testdata and what its packets are drawn from.
type cacheCase struct {
	name    string
	addrs   []netip.Addr
	ports   []uint16
	targets []target
}

// seqEnv is a testEnv whose draws come from a seeded source, counted, and whose local
// addresses and dry-run flag the test changes.
type seqEnv struct {
	now   time.Time
	rnd   *rand.Rand
	picks int
	dry   bool
	local map[netip.Addr]bool
}

func (e *seqEnv) Now() time.Time            { return e.now }
func (e *seqEnv) Pick(n int) int            { e.picks++; return e.rnd.IntN(n) }
func (e *seqEnv) DryRun() bool              { return e.dry }
func (e *seqEnv) IsLocal(a netip.Addr) bool { return e.local[a] }

// TestOutcomeCacheMatchesEvaluation: every kube-proxy ruleset of testdata in two
// evaluators, one with the outcome cache and one evaluating every packet, fed the
// same random packets at every hook (fields drawn from the addresses and ports the
// ruleset names, marks, conntrack states, interfaces), with the clock moving on
// (affinity sets' timeouts), the node's local addresses changing (fib), dry runs and
// ruleset changes in between: every chain's verdict, NAT, deciding rule and marks
// agree, both draw as many random numbers, and at the end their listings (counters,
// the elements the packets added) are the same.
func TestOutcomeCacheMatchesEvaluation(t *testing.T) {
	files, err := filepath.Glob("testdata/kube-proxy/*.nft")
	if err != nil || len(files) == 0 {
		t.Fatalf("testdata: %v", err)
	}
	protos := map[string]uint8{"tcp": netfilter.ProtoTCP, "udp": netfilter.ProtoUDP, "sctp": netfilter.ProtoSCTP}
	targetRE := regexp.MustCompile(`([0-9a-f.:]+ \. |\{ )(tcp|udp|sctp) \. (\d+)`)
	var data []cacheCase
	addrRE := regexp.MustCompile(`\b\d+\.\d+\.\d+\.\d+\b|\b[0-9a-f]*:[0-9a-f:]*::?[0-9a-f]+\b`)
	portRE := regexp.MustCompile(`\b\d{2,5}\b`)
	for _, f := range files {
		name := filepath.Base(f)
		if name == "base-rules.nft" {
			continue
		}
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d := cacheCase{name: name}
		seen := map[string]bool{}
		for _, w := range addrRE.FindAllString(string(text), -1) {
			if a, err := netip.ParseAddr(w); err == nil && !seen[w] {
				seen[w] = true
				d.addrs = append(d.addrs, a)
			}
		}
		for _, w := range portRE.FindAllString(string(text), -1) {
			if p, err := strconv.Atoi(w); err == nil && p < 65536 && !seen[w] {
				seen[w] = true
				d.ports = append(d.ports, uint16(p))
			}
		}
		for _, m := range targetRE.FindAllStringSubmatch(string(text), -1) {
			p, _ := strconv.Atoi(m[3])
			tg := target{proto: protos[m[2]], port: uint16(p)}
			if m[1] != "{ " {
				tg.dst = netip.MustParseAddr(m[1][:len(m[1])-3])
			}
			d.targets = append(d.targets, tg)
		}
		if len(d.targets) == 0 {
			d.targets = append(d.targets, target{dst: netip.MustParseAddr("172.30.0.41"), proto: netfilter.ProtoTCP, port: 80})
		}
		d.addrs = append(d.addrs, netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("fd00::5"))
		d.ports = append(d.ports, 40000, 80)
		data = append(data, d)
	}
	for _, d := range data {
		t.Run(d.name, func(t *testing.T) { checkOutcomeCache(t, d) })
	}
}

// extraTable is the ruleset change checkOutcomeCache applies and takes back.
const extraTable = "add table ip extra\nadd chain ip extra pre { type filter hook prerouting priority -300 ; }\nadd rule ip extra pre ip saddr 198.51.100.7 counter drop\n"

// checkOutcomeCache is TestOutcomeCacheMatchesEvaluation for one ruleset.
func checkOutcomeCache(t *testing.T, d cacheCase) {
	rapid.Check(t, func(rt *rapid.T) {
		seed := rapid.Uint64().Draw(rt, "seed")
		var emus [2]*Emulator
		var envs [2]*seqEnv
		for i := range emus {
			emus[i] = loadKubeProxy(t, d.name)
			envs[i] = &seqEnv{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), rnd: rand.New(rand.NewPCG(seed, 1)), local: map[netip.Addr]bool{}}
		}
		emus[1].noOutCache = true
		addr := rapid.SampledFrom(d.addrs)
		port := rapid.SampledFrom(d.ports)
		// Packets are variations on a few drawn for the case (a new source port each
		// time, sometimes another field changed), so that keys recur: mostly to the
		// Services the ruleset names.
		var templates []Packet
		for range rapid.IntRange(1, 3).Draw(rt, "templates") {
			q := Packet{
				Proto:   rapid.SampledFrom([]uint8{netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoSCTP, netfilter.ProtoICMP}).Draw(rt, "proto"),
				Src:     addr.Draw(rt, "src"),
				Dst:     addr.Draw(rt, "dst"),
				DstPort: port.Draw(rt, "dport"),
				Mark:    rapid.SampledFrom([]uint32{0, 0, 0x4000, 0x8000, 0xc000}).Draw(rt, "mark"),
				InIface: rapid.SampledFrom([]string{"", "eth0", "lo"}).Draw(rt, "iif"),
			}
			if rapid.IntRange(0, 3).Draw(rt, "to-service") > 0 {
				tg := rapid.SampledFrom(d.targets).Draw(rt, "target")
				q.Proto, q.DstPort = tg.proto, tg.port
				if tg.dst.IsValid() {
					q.Dst = tg.dst
				}
			}
			q.CT.State = rapid.SampledFrom([]netfilter.CtState{netfilter.CtNew, netfilter.CtNew, netfilter.CtEstablished, netfilter.CtRelated, netfilter.CtInvalid, netfilter.CtUntracked}).Draw(rt, "ctstate")
			q.CT.Status = rapid.SampledFrom([]netfilter.CtStatus{0, 0, netfilter.StatusDstNAT, netfilter.StatusSeenReply | netfilter.StatusAssured}).Draw(rt, "ctstatus")
			q.CT.Mark = rapid.SampledFrom([]uint32{0, 0, 0x4000}).Draw(rt, "ctmark")
			if q.Proto == netfilter.ProtoTCP {
				q.TCPFlags = rapid.SampledFrom([]uint8{0x02, 0x02, 0x10, 0x12, 0x04}).Draw(rt, "flags")
			}
			templates = append(templates, q)
		}
		hasExtra := false
		for step := range rapid.IntRange(1, 60).Draw(rt, "steps") {
			switch op := rapid.IntRange(0, 9).Draw(rt, "op"); op {
			case 0: // the clock moves on
				dt := rapid.SampledFrom([]time.Duration{time.Second, 30 * time.Second, 3 * time.Hour}).Draw(rt, "dt")
				for _, env := range envs {
					env.now = env.now.Add(dt)
				}
			case 1: // an address becomes local or stops being: often a template's own
				a := addr.Draw(rt, "local")
				if rapid.Bool().Draw(rt, "template-addr") {
					t := rapid.SampledFrom(templates).Draw(rt, "template")
					a = t.Src
					if rapid.Bool().Draw(rt, "dst") {
						a = t.Dst
					}
				}
				for _, env := range envs {
					env.local[a] = !env.local[a]
				}
			case 2: // a ruleset change
				script := extraTable
				if hasExtra {
					script = "delete table ip extra\n"
				}
				hasExtra = !hasExtra
				for _, e := range emus {
					if err := e.ApplyScript([]byte(script), "change"); err != nil {
						rt.Fatal(err)
					}
				}
			default: // a packet through every base chain of a hook
				t := rapid.SampledFrom(templates).Draw(rt, "template")
				q := &t
				q.SrcPort = uint16(rapid.IntRange(1024, 65535).Draw(rt, "sport"))
				q.Len = rapid.IntRange(40, 1500).Draw(rt, "len")
				switch rapid.IntRange(0, 7).Draw(rt, "vary") {
				case 0:
					q.Src = addr.Draw(rt, "src")
				case 1:
					q.Dst = addr.Draw(rt, "dst")
				case 2:
					q.DstPort = port.Draw(rt, "dport")
				case 3:
					q.Mark ^= 0x4000
				case 4:
					q.CT.State = netfilter.CtEstablished
				}
				h := rapid.SampledFrom([]netfilter.Hook{netfilter.Prerouting, netfilter.Input, netfilter.Forward, netfilter.Output, netfilter.Postrouting}).Draw(rt, "hook")
				if h != netfilter.Prerouting && h != netfilter.Input {
					q.OutIface = rapid.SampledFrom([]string{"eth0", "lo"}).Draw(rt, "oif")
				}
				dry := op == 3
				qs := [2]Packet{*q, *q}
				chains := emus[0].BaseChains(h)
				if !slices.Equal(chains, emus[1].BaseChains(h)) {
					rt.Fatalf("base chains differ: %v, %v", chains, emus[1].BaseChains(h))
				}
				for _, bc := range chains {
					if !bc.Family.Sees(q.Dst.Is6()) {
						continue
					}
					var vs [2]ChainVerdict
					for i := range emus {
						envs[i].dry = dry
						vs[i] = emus[i].RunChain(envs[i], bc, &qs[i], nil)
					}
					where := fmt.Sprintf("step %d, %s at %s, %s %s", step, q, h, bc.Table, bc.Chain)
					if got, want := verdictString(vs[0]), verdictString(vs[1]); got != want {
						rt.Fatalf("%s: cached %s, evaluated %s", where, got, want)
					}
					if qs[0].Mark != qs[1].Mark || qs[0].CT.Mark != qs[1].CT.Mark {
						rt.Fatalf("%s: marks cached %#x/%#x, evaluated %#x/%#x", where, qs[0].Mark, qs[0].CT.Mark, qs[1].Mark, qs[1].CT.Mark)
					}
					if envs[0].picks != envs[1].picks {
						rt.Fatalf("%s: %d draws cached, %d evaluated", where, envs[0].picks, envs[1].picks)
					}
					if vs[0].Decided() {
						break
					}
				}
			}
		}
		if a, b := emus[0].String(), emus[1].String(); a != b {
			rt.Fatalf("listings differ:\ncached:\n%s\nevaluated:\n%s", a, b)
		}
	})
}

func verdictString(v ChainVerdict) string {
	s := fmt.Sprintf("%v %v nat=%v %+v (%s) in %s", v.Verdict, v.Reject, v.HasNAT, v.NAT, v.Reason, v.Chain)
	if v.Rule != nil {
		s += fmt.Sprintf(" rule %d %q", v.Rule.Handle, v.Rule.Text)
	}
	return s
}

// TestOutcomeCacheHits: the cache serves kube-proxy's ClusterIP packets (a new source
// port each) without evaluating, and a ruleset change is seen at once.
func TestOutcomeCacheHits(t *testing.T) {
	e := loadKubeProxy(t, "overall.nft")
	env := &seqEnv{rnd: rand.New(rand.NewPCG(1, 2))}
	bc := natPrerouting(e)
	run := func(sport uint16) ChainVerdict {
		q := tcp("10.0.0.2", "172.30.0.44", 80)
		q.SrcPort = sport
		return e.RunChain(env, bc, q, nil)
	}
	first := run(40000)
	if !first.HasNAT {
		t.Fatalf("not NATed: %+v", first)
	}
	cc := e.oc.chains[e.resolveChain(t, bc)]
	if cc == nil || cc.mask&rdSport != 0 || cc.mask&rdDst == 0 {
		t.Fatalf("chain cache %+v: want the destination read and not the source port", cc)
	}
	// Until both endpoints were drawn, the entry lacks one branch of the numgen.
	warm := map[netip.Addr]bool{first.NAT.Addr: true}
	for p := uint16(30000); len(warm) < 2 && p < 30100; p++ {
		warm[run(p).NAT.Addr] = true
	}
	// Hits: with the base chain's rules taken away an evaluation would accept without
	// NAT; the cache still answers (both endpoints, by its draws).
	c := e.resolveChain(t, bc)
	rules := c.Rules
	c.Rules = nil
	seen := map[netip.Addr]bool{}
	for p := uint16(40001); p < 40100; p++ {
		v := run(p)
		if !v.HasNAT {
			t.Fatalf("port %d: evaluated, not served by the cache: %+v", p, v)
		}
		seen[v.NAT.Addr] = true
	}
	if len(seen) != 2 {
		t.Errorf("endpoints the cache chose: %v, want both of the service's", seen)
	}
	c.Rules = rules
	// A new generation: the entry is gone; the packet is evaluated again.
	if err := e.ApplyScript([]byte("add table ip other\n"), "change"); err != nil {
		t.Fatal(err)
	}
	c = e.resolveChain(t, bc)
	rules = c.Rules
	c.Rules = nil
	if v := run(40200); v.HasNAT {
		t.Fatalf("after a ruleset change the cache answered: %+v", v)
	}
	c.Rules = rules
	if err := e.ApplyScript([]byte("delete table ip other\n"), "change"); err != nil {
		t.Fatal(err)
	}
	if v := run(40201); !v.HasNAT {
		t.Fatalf("not NATed after the change: %+v", v)
	}
}

// resolveChain is the *Chain a base chain names.
func (e *Emulator) resolveChain(t *testing.T, bc BaseChain) *Chain {
	t.Helper()
	_, c := e.resolve(bc)
	if c == nil {
		t.Fatalf("no chain %+v", bc)
	}
	return c
}

// assumeEnv is a seqEnv that assumes unknown statements match when match is set.
type assumeEnv struct {
	seqEnv
	match bool
}

func (e *assumeEnv) Assume(*Rule, *UnknownStmt) bool { return e.match }

// TestOutcomeCacheLeavesOut: what an evaluation consults besides the packet and the
// ruleset is asked again for every packet: an element's timeout (the clock), a set
// another chain's update statement changed, an unknown statement's assumption, the
// node's local addresses (fib).
func TestOutcomeCacheLeavesOut(t *testing.T) {
	q := func() *Packet { return tcp("10.0.0.1", "192.168.0.2", 80) }
	newEnv := func() *assumeEnv {
		return &assumeEnv{seqEnv: seqEnv{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), rnd: rand.New(rand.NewPCG(1, 1)), local: map[netip.Addr]bool{}}}
	}
	hookChain := func(e *Emulator, h netfilter.Hook) BaseChain {
		t.Helper()
		bcs := e.BaseChains(h)
		if len(bcs) != 1 {
			t.Fatalf("base chains at %s: %v", h, bcs)
		}
		return bcs[0]
	}
	t.Run("element timeout", func(t *testing.T) {
		e := mustLoad(t, `table ip t {
	set blocked {
		type ipv4_addr
		flags timeout
		elements = { 10.0.0.1 timeout 10s }
	}

	chain pre {
		type filter hook prerouting priority 0; policy accept;
		ip saddr @blocked drop
	}
}
`)
		env, bc := newEnv(), hookChain(e, netfilter.Prerouting)
		for i, want := range []Verdict{Drop, Drop, Accept, Accept} {
			if i == 2 {
				env.now = env.now.Add(11 * time.Second)
			}
			if v := e.RunChain(env, bc, q(), nil); v.Verdict != want {
				t.Fatalf("packet %d: %v, want %v", i, v.Verdict, want)
			}
		}
	})
	t.Run("set updated elsewhere", func(t *testing.T) {
		e := mustLoad(t, `table ip t {
	set seen {
		type ipv4_addr
		flags dynamic
	}

	chain in {
		type filter hook input priority 0; policy drop;
		ip saddr @seen accept
	}

	chain pre {
		type filter hook prerouting priority 0; policy accept;
		tcp dport 80 update @seen { ip saddr }
	}
}
`)
		env := newEnv()
		in, pre := hookChain(e, netfilter.Input), hookChain(e, netfilter.Prerouting)
		for i := range 2 {
			if v := e.RunChain(env, in, q(), nil); v.Verdict != Drop {
				t.Fatalf("input %d before the update: %v", i, v.Verdict)
			}
		}
		e.RunChain(env, pre, q(), nil)
		if v := e.RunChain(env, in, q(), nil); v.Verdict != Accept {
			t.Fatalf("input after the update: %v, want accept", v.Verdict)
		}
	})
	t.Run("assumption", func(t *testing.T) {
		e := mustLoad(t, `table ip t {
	chain out {
		type filter hook output priority 0; policy accept;
		meta skuid 1000 drop
	}
}
`)
		env, bc := newEnv(), hookChain(e, netfilter.Output)
		for i, m := range []bool{false, false, true, false} {
			env.match = m
			want := Accept
			if m {
				want = Drop
			}
			if v := e.RunChain(env, bc, q(), nil); v.Verdict != want {
				t.Fatalf("packet %d (assumed %v): %v, want %v", i, m, v.Verdict, want)
			}
		}
	})
	t.Run("fib", func(t *testing.T) {
		e := mustLoad(t, `table ip t {
	chain pre {
		type filter hook prerouting priority 0; policy accept;
		fib daddr type local drop
	}
}
`)
		env, bc := newEnv(), hookChain(e, netfilter.Prerouting)
		dst := netip.MustParseAddr("192.168.0.2")
		for i, local := range []bool{false, false, true, true, false} {
			env.local[dst] = local
			want := Accept
			if local {
				want = Drop
			}
			if v := e.RunChain(env, bc, q(), nil); v.Verdict != want {
				t.Fatalf("packet %d (local %v): %v, want %v", i, local, v.Verdict, want)
			}
		}
	})
}

// TestOutcomeCacheTurnsOff: a chain whose packets' keys do not recur (a new source
// each, read by the masquerade check) stops paying for misses after a window of
// lookups, evaluates uncached for a while, then tries the cache again.
func TestOutcomeCacheTurnsOff(t *testing.T) {
	e := loadKubeProxy(t, "overall.nft")
	env := &seqEnv{rnd: rand.New(rand.NewPCG(1, 2))}
	bc := natPrerouting(e)
	run := func(src netip.Addr) ChainVerdict {
		q := tcp(src.String(), "172.30.0.41", 80)
		v := e.RunChain(env, bc, q, nil)
		if !v.HasNAT {
			t.Fatalf("from %v: not NATed: %+v", src, v)
		}
		return v
	}
	cc := func() *chainCache { return e.oc.chains[e.resolveChain(t, bc)] }
	src := netip.MustParseAddr("198.51.100.0")
	for range outWindow {
		src = src.Next()
		run(src)
	}
	if got := cc().off; got != outOff {
		t.Fatalf("after %d misses the cache is off for %d evaluations, want %d", outWindow, got, outOff)
	}
	for range outOff {
		run(src) // the same key: the cache would hit, but it is off
	}
	if c := cc(); c.off != 0 || c.tries != 0 {
		t.Fatalf("after the off period: off %d, tries %d", c.off, c.tries)
	}
	// Back on: the key recurs, every lookup after the first hits; the window passes.
	for range outWindow {
		run(src)
	}
	if c := cc(); c.off != 0 {
		t.Fatalf("a window of hits turned the cache off (%d)", c.off)
	}
}

// natPrerouting is the ruleset's nat base chain at PREROUTING.
func natPrerouting(e *Emulator) BaseChain {
	var bc BaseChain
	for _, b := range e.BaseChains(netfilter.Prerouting) {
		if b.Type == "nat" {
			bc = b
		}
	}
	return bc
}
