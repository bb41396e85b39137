package emulator

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// preParseLines are restore lines of every kind the pre-parser meets: plain appends
// it parses, lines it must leave to the transaction (counters, a table option, the
// other family, errors of tokenizing, parsing and checking, other commands), and lines
// that are not commands.
var preParseLines = []string{
	"-A X1 -p tcp -m tcp --dport 80 -j ACCEPT",
	"-A X1 -s 10.0.0.1/32 -m comment --comment \"ns/svc:http\" -j X2",
	"-A X2 -m statistic --mode random --probability 0.25 -j X3",
	"-A X2 -d 10.96.0.10/32 -p udp -m udp --dport 53 -j DNAT --to-destination 10.244.1.5:53",
	"-A X3 -s 10.0.0.1,10.0.0.2 -d 1.2.3.4,5.6.7.8 -j DROP",
	"-A X3 -m mark --mark 0x4000/0x4000 -j MARK --set-xmark 0x4000/0",
	"-A X4 -j RETURN",
	"-A PREROUTING -j X1",
	"-A OUTPUT -m addrtype --dst-type LOCAL -j X4",
	"[5:300] -A X1 -j ACCEPT",
	"-A X1 -c 7 9 -p tcp -j ACCEPT",
	"-A X1 -6 -j ACCEPT",
	"-A X1 -4 -p icmp -j ACCEPT",
	"-A X1 -t nat -j ACCEPT",
	"-A X1 -p tcp --dport 99999 -j ACCEPT",
	"-A X1 -s 10.0.0.999 -j ACCEPT",
	"-A X1 -m comment --comment \"unterminated -j ACCEPT",
	"-A X1 -j NOSUCH",
	"-A NOSUCH -j ACCEPT",
	"-A PREROUTING -j PREROUTING",
	"-A X1 -j DNAT --to-destination 10.0.0.1",
	"-A X4",
	"-A",
	"-I X1 1 -j DROP",
	"-D X1 -j ACCEPT",
	"-N X9",
	"-F X2",
	"# a comment",
	"",
	"   -A X2 -j ACCEPT   ",
}

// genPreParseText draws a restore text of many lines from preParseLines, in tables
// nat and filter, with odd line ends.
func genPreParseText(t *rapid.T) string {
	var b strings.Builder
	if rapid.IntRange(0, 9).Draw(t, "line outside a table") == 0 {
		b.WriteString("-A X1 -j ACCEPT\n")
	}
	for _, table := range []string{"nat", "filter"} {
		b.WriteString("*" + table + "\n:X1 - [0:0]\n:X2 - [0:0]\n:X3 - [0:0]\n:X4 - [0:0]\n")
		n := rapid.IntRange(0, 120).Draw(t, "lines in "+table)
		bad := rapid.IntRange(0, 3).Draw(t, "kinds of lines") == 0
		for i := range n {
			pool := preParseLines[:9] // plain appends
			if bad {
				pool = preParseLines
			}
			line := rapid.SampledFrom(pool).Draw(t, fmt.Sprintf("line %d", i))
			if table == "filter" && strings.Contains(line, "PREROUTING") {
				line = strings.ReplaceAll(line, "PREROUTING", "INPUT")
			}
			b.WriteString(line)
			if rapid.IntRange(0, 15).Draw(t, "end") == 0 {
				b.WriteString("\r")
			}
			b.WriteString("\n")
		}
		if rapid.IntRange(0, 10).Draw(t, "commit") > 0 {
			b.WriteString("COMMIT\n")
		}
	}
	return b.String()
}

// A restore whose -A lines other goroutines parsed ahead of it (startPreParse) gives
// what a restore parsing every line in order gives: the same rules, counters, origins
// (file and line), skipped lines and errors, with chunks of a few lines so that every
// way a chunk can be met (claimed by the transaction, parsed by a worker, waited for)
// happens.
func TestPreParseAsParsing(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	defer func(m, c int, a bool) { preParseMinLines, preChunkLines, preParseAll = m, c, a }(preParseMinLines, preChunkLines, preParseAll)
	used, ran := 0, 0
	rapid.Check(t, func(t *rapid.T) {
		preParseMinLines = 1
		preChunkLines = rapid.IntRange(1, 9).Draw(t, "chunk lines")
		preParseAll = rapid.Bool().Draw(t, "workers parse every chunk")
		text := genPreParseText(t)
		opts := RestoreOptions{File: "in", Counters: rapid.Bool().Draw(t, "counters"), Lenient: rapid.Bool().Draw(t, "lenient")}
		base := NewRuleset(IPv4)
		if rapid.Bool().Draw(t, "into a ruleset") {
			var err error
			base, err = Restore(base, []byte("*filter\n:X1 - [0:0]\n-A X1 -j DROP\nCOMMIT\n"), RestoreOptions{})
			if err != nil {
				t.Fatal(err)
			}
			opts.NoFlush = rapid.Bool().Draw(t, "noflush")
		}
		pre, errP := restoreTxn(base, []byte(text), opts)
		seq := opts
		seq.noPreParse = true
		ord, errS := restoreTxn(base, []byte(text), seq)
		if fmt.Sprint(errP) != fmt.Sprint(errS) {
			t.Fatalf("error %v pre-parsed, %v in order:\n%s", errP, errS, text)
		}
		if errP != nil {
			return
		}
		ran++
		used += pre.preUsed
		if ord.preUsed != 0 {
			t.Fatalf("noPreParse restore applied %d pre-parsed lines", ord.preUsed)
		}
		if a, b := pre.rs.Save(true), ord.rs.Save(true); string(a) != string(b) {
			t.Fatalf("pre-parsed\n%s\nin order\n%s\ninput:\n%s", a, b, text)
		}
		if a, b := fmt.Sprint(pre.skipped), fmt.Sprint(ord.skipped); a != b {
			t.Fatalf("skipped %s pre-parsed, %s in order", a, b)
		}
		for _, tn := range []string{TableNAT, TableFilter} {
			ta, tb := pre.rs.Table(tn), ord.rs.Table(tn)
			if (ta == nil) != (tb == nil) {
				t.Fatalf("table %s: %v pre-parsed, %v in order", tn, ta != nil, tb != nil)
			}
			if ta == nil {
				continue
			}
			for _, ca := range ta.AllChains() {
				cb := tb.Chain(ca.Name)
				for i, r := range ca.Rules {
					if q := cb.Rules[i]; r.File != q.File || r.Line != q.Line {
						t.Fatalf("%s %s rule %d from %s:%d pre-parsed, %s:%d in order", tn, ca.Name, i+1, r.File, r.Line, q.File, q.Line)
					}
				}
			}
		}
	})
	if ran == 0 || used == 0 {
		t.Fatalf("%d restores succeeded, %d pre-parsed lines applied: the pre-parser did not run", ran, used)
	}
}

// A full sync's size of text is pre-parsed (the thresholds are what a first sync
// meets), and the result is the ordinary path's.
func TestPreParseLargeText(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	var b strings.Builder
	b.WriteString("*nat\n")
	for i := range 3000 {
		fmt.Fprintf(&b, ":C%d - [0:0]\n", i)
	}
	for i := range 3000 {
		fmt.Fprintf(&b, "-A PREROUTING -d 10.96.%d.%d/32 -p tcp -m tcp --dport 80 -j C%d\n", i/256, i%256, i)
		fmt.Fprintf(&b, "-A C%d -p tcp -m statistic --mode random --probability 0.5 -j DNAT --to-destination 10.244.%d.%d:80\n", i, i/256, i%256)
		fmt.Fprintf(&b, "-A C%d -p tcp -j DNAT --to-destination 10.245.%d.%d:80\n", i, i/256, i%256)
	}
	b.WriteString("COMMIT\n")
	pre, err := restoreTxn(NewRuleset(IPv4), []byte(b.String()), RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ord, err := restoreTxn(NewRuleset(IPv4), []byte(b.String()), RestoreOptions{noPreParse: true})
	if err != nil {
		t.Fatal(err)
	}
	if pre.preUsed == 0 {
		t.Fatalf("no line of a %d-line text was pre-parsed", strings.Count(b.String(), "\n"))
	}
	if a, b := pre.rs.Save(true), ord.rs.Save(true); string(a) != string(b) {
		t.Fatal("pre-parsed and in-order restores differ")
	}
}
