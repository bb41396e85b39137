package emulator

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestModuleSlabsAsSeparate restores random texts of kube-proxy's rule shapes (and
// near misses: another -m, SNAT, MASQUERADE, bad values) with the tcp, statistic and
// comment matches and DNAT targets carved from the parser's slabs and with each
// allocated on its own (noModuleSlabs), and with every line parsed the general way
// (noFastRule): the same error, -c save text and rules, and
// each rule keeps its own values (no two rules share a match or target) — with texts
// large enough to be pre-parsed by the workers or not.
func TestModuleSlabsAsSeparate(t *testing.T) {
	// Texts of 1,000 lines or more are pre-parsed, in chunks of 64 lines: the large
	// texts below have workers without being thousands of lines of random draws.
	defer func(m, c int) { preParseMinLines, preChunkLines = m, c }(preParseMinLines, preChunkLines)
	preParseMinLines, preChunkLines = 1000, 64
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 200).Draw(rt, "n")
		if rapid.IntRange(0, 9).Draw(rt, "large") == 0 {
			n += 1500
		}
		var b strings.Builder
		b.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:C - [0:0]\n:D - [0:0]\n")
		for i := 0; i < n; i++ {
			chain := rapid.SampledFrom([]string{"C", "PREROUTING", "POSTROUTING"}).Draw(rt, "chain")
			fmt.Fprintf(&b, "-A %s ", chain)
			if rapid.Bool().Draw(rt, "comment") {
				fmt.Fprintf(&b, "-m comment --comment \"c%d\" ", rapid.IntRange(0, 1<<20).Draw(rt, "c"))
			}
			switch rapid.IntRange(0, 7).Draw(rt, "shape") {
			case 0:
				fmt.Fprintf(&b, "-m tcp -p tcp -j DNAT --to-destination 10.%d.%d.%d:%d", i>>16&255, i>>8&255, i&255, 1+rapid.IntRange(0, 65534).Draw(rt, "port"))
			case 1:
				fmt.Fprintf(&b, "-m statistic --mode random --probability 0.%05d -j D", rapid.IntRange(0, 99999).Draw(rt, "p"))
			case 2:
				fmt.Fprintf(&b, "-s 10.0.%d.%d/32 -j D", i>>8&255, i&255)
			case 3:
				fmt.Fprintf(&b, "-p tcp -m tcp --dport %d -j DNAT --to-destination 10.1.0.%d", 1+i%65535, i&255)
			case 4:
				fmt.Fprintf(&b, "-m statistic --mode nth --every %d --packet 0 -j RETURN", 1+i%9)
			case 5:
				b.WriteString("-p tcp -j SNAT --to-source 10.9.9.9:1000")
			case 6:
				b.WriteString("-m udp -p udp -j MASQUERADE --to-ports 80")
			case 7:
				b.WriteString(rapid.SampledFrom([]string{
					"-m tcp -p udp -j DNAT --to-destination 10.0.0.1:80",
					"-p icmp -j DNAT --to-destination 10.0.0.1:80",
					"-m statistic --mode random --probability 2 -j C",
					"-m comment --comment x -m comment --comment y -j C",
					"-j DNAT",
					"-m tcp --dport 0x -j C",
				}).Draw(rt, "bad"))
			}
			b.WriteByte('\n')
		}
		b.WriteString("COMMIT\n")
		text := []byte(b.String())
		lenient := rapid.Bool().Draw(rt, "lenient")

		run := func(separate, general bool) (*Emulator, error) {
			oldSlabs, oldFast := noModuleSlabs, noFastRule
			noModuleSlabs, noFastRule = separate, general
			defer func() { noModuleSlabs, noFastRule = oldSlabs, oldFast }()
			e := New(IPv4)
			return e, e.RestoreText(text, RestoreOptions{Lenient: lenient})
		}
		es, errS := run(false, false)
		eo, errO := run(true, false)
		eg, errG := run(false, true) // every line parsed the general way (no fastRule)
		if fmt.Sprint(errS) != fmt.Sprint(errO) || fmt.Sprint(errS) != fmt.Sprint(errG) {
			rt.Fatalf("error with slabs %v, without %v, general parse only %v", errS, errO, errG)
		}
		rs, ro := es.Ruleset(), eo.Ruleset()
		if s, o := rs.Save(true), ro.Save(true); string(s) != string(o) {
			rt.Fatalf("save differs:\nslabs:\n%s\nseparate:\n%s", s, o)
		}
		if s, g := rs.Save(true), eg.Ruleset().Save(true); string(s) != string(g) {
			rt.Fatalf("save differs:\nslabs, fast rules:\n%s\ngeneral parse only:\n%s", s, g)
		}
		if tg := eg.Ruleset().Table("nat"); tg != nil && rs.Table("nat") != nil {
			for _, name := range []string{"PREROUTING", "POSTROUTING", "C", "D"} {
				cs, cg := rs.Table("nat").Chain(name), tg.Chain(name)
				if cs == nil || cg == nil || len(cs.Rules) != len(cg.Rules) {
					continue // the save texts were the same
				}
				for i := range cs.Rules {
					if !reflect.DeepEqual(cs.Rules[i].Spec, cg.Rules[i].Spec) || cs.Rules[i].Line != cg.Rules[i].Line {
						rt.Fatalf("chain %s rule %d: %+v / general %+v", name, i, cs.Rules[i].Spec, cg.Rules[i].Spec)
					}
				}
			}
		}
		ts, to := rs.Table("nat"), ro.Table("nat")
		if (ts == nil) != (to == nil) {
			rt.Fatalf("nat table %v / %v", ts, to)
		}
		if ts == nil {
			return
		}
		seen := map[any]bool{}
		for _, name := range []string{"PREROUTING", "POSTROUTING", "C", "D"} {
			cs, co := ts.Chain(name), to.Chain(name)
			if (cs == nil) != (co == nil) {
				rt.Fatalf("chain %s: %v / %v", name, cs, co)
			}
			if cs == nil {
				continue
			}
			if len(cs.Rules) != len(co.Rules) {
				rt.Fatalf("chain %s: %d / %d rules", name, len(cs.Rules), len(co.Rules))
			}
			for i := range cs.Rules {
				if !reflect.DeepEqual(cs.Rules[i].Spec, co.Rules[i].Spec) {
					rt.Fatalf("chain %s rule %d: %+v / %+v", name, i, cs.Rules[i].Spec, co.Rules[i].Spec)
				}
				for _, m := range cs.Rules[i].Matches {
					if seen[m] {
						rt.Fatalf("chain %s rule %d: match %p shared with another rule", name, i, m)
					}
					seen[m] = true
				}
				if tg := cs.Rules[i].Target; tg != nil {
					if _, ok := tg.(*NATTarget); ok && seen[tg] {
						rt.Fatalf("chain %s rule %d: target %p shared with another rule", name, i, tg)
					}
					seen[tg] = true
				}
			}
		}
	})
}
