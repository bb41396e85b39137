package emulator

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/netfilter"
)

// trainEnv is a test Env: a fixed clock, seeded draws, nothing local.
type trainEnv struct {
	now   time.Time
	rng   *rand.Rand
	draws *int
}

func (v trainEnv) Now() time.Time { return v.now }
func (v trainEnv) Pick(n int) int {
	*v.draws++
	return v.rng.IntN(n)
}
func (v trainEnv) DryRun() bool            { return false }
func (v trainEnv) IsLocal(netip.Addr) bool { return false }

// genTrainRule draws a forward-chain rule over what a train's segments share and what
// tells them apart (length, PSH), with the statements that count, mark, update sets,
// draw random numbers or decide.
func genTrainRule(t *rapid.T, i int) string {
	var b []string
	if rapid.IntRange(0, 3).Draw(t, "has-len") == 0 {
		b = append(b, "meta length "+rapid.SampledFrom([]string{"> 1000", "< 1000", "1448", "!= 1448", "600-1500"}).Draw(t, "len"))
	}
	if rapid.IntRange(0, 3).Draw(t, "has-flags") == 0 {
		b = append(b, "tcp flags "+rapid.SampledFrom([]string{"& psh == psh", "& psh == 0", "ack", "! psh", "psh / psh"}).Draw(t, "flags"))
	}
	if rapid.IntRange(0, 3).Draw(t, "has-addr") == 0 {
		b = append(b, "ip saddr "+rapid.SampledFrom([]string{"10.0.0.1", "10.0.0.0/8", "!= 10.0.0.1", "@addrs"}).Draw(t, "saddr"))
	}
	if rapid.IntRange(0, 4).Draw(t, "has-mark") == 0 {
		b = append(b, "meta mark "+rapid.SampledFrom([]string{"0x1", "0x0", "!= 0x2"}).Draw(t, "mark"))
	}
	if rapid.IntRange(0, 4).Draw(t, "has-ct") == 0 {
		b = append(b, "ct state "+rapid.SampledFrom([]string{"established", "new", "!= established"}).Draw(t, "ct"))
	}
	if rapid.IntRange(0, 4).Draw(t, "has-ctmark") == 0 {
		b = append(b, "ct mark "+rapid.SampledFrom([]string{"0x0", "0x7"}).Draw(t, "ctmark"))
	}
	if rapid.Bool().Draw(t, "counter") {
		b = append(b, rapid.SampledFrom([]string{"counter", "counter", `counter name "c1"`}).Draw(t, "counter-kind"))
	}
	switch k := rapid.SampledFrom([]string{"none", "none", "accept", "drop", "reject", "mark", "mark", "ctmark", "update", "numgen", "jump", "return"}).Draw(t, "kind"); k {
	case "none":
		if len(b) == 0 {
			b = append(b, "counter")
		}
	case "accept", "drop", "reject", "return":
		b = append(b, k)
	case "mark":
		b = append(b, "meta mark set "+rapid.SampledFrom([]string{"0x1", "0x2", "0x3"}).Draw(t, "set-mark"))
	case "ctmark":
		b = append(b, "ct mark set "+rapid.SampledFrom([]string{"0x0", "0x7"}).Draw(t, "set-ctmark"))
	case "update":
		b = append(b, "update @dyn { ip saddr }")
	case "numgen":
		b = append(b, "numgen random mod 2 vmap { 0 : accept, 1 : continue }")
	case "jump":
		b = append(b, "jump sub")
	}
	_ = i
	return strings.Join(b, " ")
}

// genTrainRuleset draws a table with a forward base chain and a chain it may jump to.
func genTrainRuleset(t *rapid.T) string {
	var s strings.Builder
	s.WriteString("table ip t {\n\tcounter c1 { }\n\tset addrs { type ipv4_addr; elements = { 10.0.0.1, 10.0.0.9 } }\n")
	s.WriteString("\tset dyn { type ipv4_addr; flags dynamic; }\n")
	s.WriteString("\tchain sub {\n")
	for i := range rapid.IntRange(0, 3).Draw(t, "sub-rules") {
		r := genTrainRule(t, i)
		if strings.Contains(r, "jump sub") {
			r = strings.Replace(r, "jump sub", "accept", 1)
		}
		fmt.Fprintf(&s, "\t\t%s\n", r)
	}
	s.WriteString("\t}\n")
	policy := rapid.SampledFrom([]string{"accept", "accept", "drop"}).Draw(t, "policy")
	fmt.Fprintf(&s, "\tchain fwd {\n\t\ttype filter hook forward priority 0; policy %s;\n", policy)
	for i := range rapid.IntRange(0, 6).Draw(t, "rules") {
		fmt.Fprintf(&s, "\t\t%s\n", genTrainRule(t, i))
	}
	s.WriteString("\t}\n}\n")
	return s.String()
}

// A train's pass through a base chain against its segments' passes one by one: two
// evaluators loaded with the same random ruleset (counters, marks, conntrack marks,
// dynamic set updates, random draws, jumps, verdicts); one runs every segment of a
// random train (mid segments of one length, the last of another with PSH) through
// RunChain, the other asks PeekTrain and, when it answers, commits the train, or else
// runs the segments as the first did. Every verdict and mark PeekTrain answers is every
// segment's, and afterwards both evaluators list the same ruleset (counters, set
// elements) and drew the same random numbers. PeekTrain answers often: trains are not
// just refused.
func TestPeekTrainSameAsSegments(t *testing.T) {
	answered := 0
	rapid.Check(t, func(t *rapid.T) {
		text := genTrainRuleset(t)
		a, err := Load([]byte(text), "train")
		if err != nil {
			t.Fatalf("%v\n%s", err, text)
		}
		b, _ := Load([]byte(text), "train")
		bc := a.BaseChains(netfilter.Forward)[0]
		now := time.Unix(1000, 0)
		var da, db int
		ea := trainEnv{now: now, rng: rand.New(rand.NewPCG(1, 2)), draws: &da}
		eb := trainEnv{now: now, rng: rand.New(rand.NewPCG(1, 2)), draws: &db}
		var st TrainStash
		for range rapid.IntRange(1, 4).Draw(t, "trains") {
			src := rapid.SampledFrom([]string{"10.0.0.1", "10.0.0.9", "192.168.1.1"}).Draw(t, "src")
			mid := Packet{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr("10.1.0.5"),
				SrcPort: 40000, DstPort: 80, TCPFlags: netfilter.TCPAck, TTL: 63, InIface: "cbr0", OutIface: "eth0",
				Mark: uint32(rapid.IntRange(0, 2).Draw(t, "pkt-mark")),
				Len:  rapid.SampledFrom([]int{1448 + 52, 1000, 1348 + 52}).Draw(t, "mid-len")}
			mid.CT = Conntrack{State: netfilter.CtEstablished, Mark: uint32(rapid.SampledFrom([]int{0, 7}).Draw(t, "ctmark"))}
			last := mid
			last.TCPFlags |= netfilter.TCPPsh
			last.Len = rapid.IntRange(53, mid.Len).Draw(t, "last-len")
			n := rapid.IntRange(1, 40).Draw(t, "mid-n")

			segs := func(e *Emulator, env Env) []string {
				var out []string
				for i := range n + 1 {
					q := mid
					if i == n {
						q = last
					}
					v := e.RunChain(env, bc, &q, nil)
					out = append(out, fmt.Sprintf("%v %v %s mark %#x ctmark %#x", v.Verdict, v.HasNAT, v.Reason, q.Mark, q.CT.Mark))
				}
				return out
			}
			want := segs(a, ea)
			pm, pl := mid, last
			v, ok := b.PeekTrain(eb, bc, TrainShape{P: &pm, N: n}, TrainShape{P: &pl, N: 1}, &st)
			if !ok {
				segs(b, eb)
				continue
			}
			answered++
			b.CommitTrain(&st)
			got := fmt.Sprintf("%v %v %s mark %#x ctmark %#x", v.Verdict, v.HasNAT, v.Reason, pm.Mark, pm.CT.Mark)
			for i, w := range want {
				if w != got {
					t.Fatalf("segment %d of %d: %s, PeekTrain answered %s\n%s", i, n+1, w, got, text)
				}
			}
		}
		if sa, sb := a.String(), b.String(); sa != sb {
			t.Fatalf("after the trains, segment by segment:\n%s\nwith PeekTrain:\n%s", sa, sb)
		}
		if da != db {
			t.Fatalf("random draws: %d segment by segment, %d with PeekTrain", da, db)
		}
	})
	t.Logf("PeekTrain answered %d trains", answered)
	if answered < 30 {
		t.Errorf("PeekTrain answered only %d trains", answered)
	}
}
