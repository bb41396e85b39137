package emulator

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/netfilter"
)

// cowTables are the tables and built-in chains the copy-on-write property draws from.
var cowTables = map[string][]string{
	TableNAT:    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	TableFilter: {"INPUT", "FORWARD", "OUTPUT"},
}

var cowUsers = []string{"U1", "U2", "U3", "U4"}

// genCowRule draws a rule spec (after "-A CHAIN") for a table: a port match or none,
// and a verdict, a jump or goto to a user chain (loops included), or a target that is
// valid only in some hooks.
func genCowRule(t *rapid.T, table string) string {
	var b strings.Builder
	if rapid.Bool().Draw(t, "match") {
		fmt.Fprintf(&b, "-p tcp --dport %d ", rapid.IntRange(1, 3).Draw(t, "port"))
	}
	if rapid.IntRange(0, 5).Draw(t, "addrtype") == 0 {
		b.WriteString("-m addrtype --dst-type LOCAL " + rapid.SampledFrom([]string{"--limit-iface-in ", "--limit-iface-out ", ""}).Draw(t, "limit"))
	}
	kinds := []string{"ACCEPT", "DROP", "RETURN", "jump", "jump", "goto"}
	if table == TableNAT {
		kinds = append(kinds, "DNAT", "MASQUERADE")
	} else {
		kinds = append(kinds, "REJECT")
	}
	switch k := rapid.SampledFrom(kinds).Draw(t, "target"); k {
	case "jump":
		b.WriteString("-j " + rapid.SampledFrom(cowUsers).Draw(t, "to"))
	case "goto":
		b.WriteString("-g " + rapid.SampledFrom(cowUsers).Draw(t, "to"))
	case "DNAT":
		if !strings.Contains(b.String(), "-p tcp") {
			b.WriteString("-p tcp ")
		}
		b.WriteString("-j DNAT --to-destination 10.9.0.1:80")
	default:
		b.WriteString("-j " + k)
	}
	return b.String()
}

// genCowRestore draws a --noflush restore input: for some tables, chain lines (which
// create or flush), rules appended, inserted, replaced and deleted, chains created,
// deleted, flushed and renamed, and policies.
func genCowRestore(t *rapid.T) string {
	var b strings.Builder
	for _, table := range []string{TableNAT, TableFilter} {
		if !rapid.Bool().Draw(t, "table "+table) {
			continue
		}
		builtins := cowTables[table]
		all := append(append([]string(nil), builtins...), cowUsers...)
		fmt.Fprintf(&b, "*%s\n", table)
		for _, u := range cowUsers {
			if rapid.IntRange(0, 2).Draw(t, "declare") == 0 {
				fmt.Fprintf(&b, ":%s - [0:0]\n", u)
			}
		}
		if rapid.IntRange(0, 4).Draw(t, "policy") == 0 {
			fmt.Fprintf(&b, ":%s %s [0:0]\n", rapid.SampledFrom(builtins).Draw(t, "builtin"), rapid.SampledFrom([]string{"ACCEPT", "DROP"}).Draw(t, "verdict"))
		}
		for n := rapid.IntRange(0, 6).Draw(t, "lines"); n > 0; n-- {
			c := rapid.SampledFrom(all).Draw(t, "chain")
			switch rapid.IntRange(0, 9).Draw(t, "command") {
			case 0, 1, 2, 3:
				fmt.Fprintf(&b, "-A %s %s\n", c, genCowRule(t, table))
			case 4:
				fmt.Fprintf(&b, "-I %s 1 %s\n", c, genCowRule(t, table))
			case 5:
				fmt.Fprintf(&b, "-R %s 1 %s\n", c, genCowRule(t, table))
			case 6:
				fmt.Fprintf(&b, "-D %s 1\n", c)
			case 7:
				fmt.Fprintf(&b, "-X %s\n", rapid.SampledFrom(cowUsers).Draw(t, "user"))
			case 8:
				fmt.Fprintf(&b, "-N %s\n", rapid.SampledFrom(cowUsers).Draw(t, "user"))
			case 9:
				switch rapid.IntRange(0, 2).Draw(t, "other") {
				case 0:
					fmt.Fprintf(&b, "-F %s\n", c)
				case 1:
					// Names no other line uses as well, so that renames succeed
					// (and rewrite the jumps to the chain, some in rules whose
					// Spec earlier versions share) and can be undone.
					names := append([]string{"V1", "V2"}, cowUsers...)
					fmt.Fprintf(&b, "-E %s %s\n", rapid.SampledFrom(names).Draw(t, "from"), rapid.SampledFrom(names).Draw(t, "to"))
				case 2:
					fmt.Fprintf(&b, "-P %s DROP\n", rapid.SampledFrom(builtins).Draw(t, "builtin"))
				}
			}
		}
		if rapid.IntRange(0, 2).Draw(t, "pad") == 0 {
			// Many chains, so that the table spans several chunks of its chain list
			// (chainChunkSize): a run of them declared (created at the end, or
			// flushed where they are) and some deleted again, which empties,
			// shrinks and merges chunks in the middle of the list.
			lo := rapid.IntRange(0, 700).Draw(t, "pad from")
			hi := lo + rapid.IntRange(1, 600).Draw(t, "pad count")
			for i := lo; i < hi; i++ {
				fmt.Fprintf(&b, ":PAD%d - [0:0]\n", i)
			}
			if every := rapid.IntRange(0, 4).Draw(t, "pad delete every"); every > 0 {
				for i := lo + rapid.IntRange(0, every-1).Draw(t, "pad delete first"); i < hi; i += every {
					fmt.Fprintf(&b, "-X PAD%d\n", i)
				}
			}
		}
		if table == TableFilter && rapid.IntRange(0, 2).Draw(t, "long") == 0 {
			// A long chain rewritten whole, as kube-proxy rewrites KUBE-SERVICES:
			// lines drawn from a few, so that versions share most of them (the
			// restore reuses the rules of equal lines).
			b.WriteString(":LONG - [0:0]\n")
			pool := []string{"-p tcp --dport 1 -j ACCEPT", "-p tcp --dport 2 -j U1", "-p tcp --dport 3 -g U2",
				"-j U3", "-m addrtype --dst-type LOCAL -j RETURN", "-p tcp --dport 2 -j REJECT", "-s 10.1.0.0/16 -j U4", "-p tcp --dport 1 -j DROP"}
			for n := rapid.IntRange(memoMinRules-2, memoMinRules+6).Draw(t, "long rules"); n > 0; n-- {
				fmt.Fprintf(&b, "-A LONG %s\n", rapid.SampledFrom(pool).Draw(t, "long rule"))
			}
			if rapid.Bool().Draw(t, "enter long") {
				fmt.Fprintf(&b, "-A %s -j LONG\n", rapid.SampledFrom(builtins).Draw(t, "from"))
			}
			if rapid.IntRange(0, 2).Draw(t, "rename after long") == 0 {
				// A rename rewrites the jumps to the chain, in LONG's rules too,
				// whose Specs the version before shares when they were reused.
				u := rapid.SampledFrom(cowUsers).Draw(t, "renamed")
				fmt.Fprintf(&b, "-E %s W%s\n", u, u)
			}
			if rapid.IntRange(0, 3).Draw(t, "delete in long") == 0 {
				fmt.Fprintf(&b, "-X %s\n", rapid.SampledFrom(cowUsers).Draw(t, "deleted"))
				fmt.Fprintf(&b, "-A LONG %s\n", rapid.SampledFrom(pool).Draw(t, "after delete"))
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// TestCopyOnWriteRestoreProperty: --noflush restores applied one after another to an
// emulator, which shares the chains a restore does not change between versions and
// validates only what it changed, accept and reject what restores of the same inputs
// validated whole accept and reject, leave the same ruleset, leave earlier versions as
// they were, and evaluate packets as a fresh load of the same ruleset does (cached
// jumps to replaced chains resolved again).
func TestCopyOnWriteRestoreProperty(t *testing.T) {
	env := NewStaticEnv(1, netip.MustParseAddr("10.0.0.1"))
	rapid.Check(t, func(t *rapid.T) {
		e := New(IPv4)
		whole := NewRuleset(IPv4)
		// Every version so far and its text: a restore changes none of them (rules
		// share their Spec with the versions before).
		var versions []*Ruleset
		var texts []string
		// lists: each version's chains, per table, in order (Save sorts user chains
		// by name; the list order is kept too).
		var lists []map[string][]*Chain
		for step := range rapid.IntRange(1, 6).Draw(t, "steps") {
			in := genCowRestore(t)
			before := e.Ruleset()
			beforeText := string(before.Save(false))
			versions, texts = append(versions, before), append(texts, beforeText)
			lists = append(lists, chainLists(before))
			err := e.RestoreText([]byte(in), RestoreOptions{NoFlush: true, File: "step"})
			wrs, werr := Restore(whole, []byte(in), RestoreOptions{NoFlush: true, File: "step", wholeTables: true})
			if (err == nil) != (werr == nil) {
				t.Fatalf("step %d: incremental error %v, whole-table error %v, input:\n%s", step, err, werr, in)
			}
			if err == nil {
				whole = wrs
			} else if err.Error() != werr.Error() {
				t.Fatalf("step %d: incremental error %q, whole-table error %q", step, err, werr)
			}
			for i, v := range versions {
				if got := string(v.Save(false)); got != texts[i] {
					t.Fatalf("step %d: the restore changed the version of step %d:\n%s\nwas:\n%s", step, i, got, texts[i])
				}
				if got := chainLists(v); !maps.EqualFunc(got, lists[i], slices.Equal) {
					t.Fatalf("step %d: the restore changed the chain list of the version of step %d", step, i)
				}
			}
			if err == nil {
				// The incremental version's chain order is the whole-table one's
				// (creation order, deletions closing up).
				for name, cs := range chainLists(e.Ruleset()) {
					var wn []string
					for _, c := range whole.Table(name).AllChains() {
						wn = append(wn, c.Name)
					}
					var gn []string
					for _, c := range cs {
						gn = append(gn, c.Name)
					}
					if !slices.Equal(gn, wn) {
						t.Fatalf("step %d: table %s chain order %v, whole-table %v", step, name, gn, wn)
					}
				}
			}
			got, want := string(e.Ruleset().Save(false)), string(whole.Save(false))
			if got != want {
				t.Fatalf("step %d: incremental result\n%s\nwhole-table result\n%s", step, got, want)
			}
			fresh, ferr := Load([]byte(got), IPv4, "fresh")
			if ferr != nil {
				t.Fatalf("step %d: the result does not load: %v\n%s", step, ferr, got)
			}
			for _, hook := range []netfilter.Hook{netfilter.Prerouting, netfilter.Input, netfilter.Forward, netfilter.Output, netfilter.Postrouting} {
				for port := uint16(1); port <= 3; port++ {
					mk := func() Packet {
						p := Packet{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("10.1.0.2"), Dst: netip.MustParseAddr("10.0.0.1"),
							SrcPort: 40000, DstPort: port, TCPFlags: netfilter.TCPSyn, Len: 60}
						if hook == netfilter.Prerouting || hook == netfilter.Input || hook == netfilter.Forward {
							p.InIface = "eth0"
						}
						if hook == netfilter.Forward || hook == netfilter.Postrouting || hook == netfilter.Output {
							p.OutIface = "eth1"
						}
						return p
					}
					p1, p2 := mk(), mk()
					r1 := e.EvalHook(env, hook, &p1, nil)
					r2 := fresh.EvalHook(env, hook, &p2, nil)
					if r1.Verdict != r2.Verdict || r1.Decision.Chain != r2.Decision.Chain || p1 != p2 {
						t.Fatalf("step %d, %s port %d: incremental %v in %s (%v), fresh load %v in %s (%v)\n%s", step, hook, port,
							r1.Verdict, r1.Decision.Chain, p1, r2.Verdict, r2.Decision.Chain, p2, got)
					}
				}
			}
		}
	})
}

// chainLists returns each table's chains in order, checking that the accessors agree.
func chainLists(rs *Ruleset) map[string][]*Chain {
	out := make(map[string][]*Chain)
	for _, tb := range rs.Tables {
		cs := tb.Chains()
		for i, c := range tb.AllChains() {
			if cs[i] != c || tb.ChainAt(i) != c || tb.Chain(c.Name) != c {
				panic(fmt.Sprintf("table %s: chain %d (%s): Chains, AllChains, ChainAt and Chain disagree", tb.Name, i, c.Name))
			}
		}
		if len(cs) != tb.NumChains() {
			panic(fmt.Sprintf("table %s: %d chains, NumChains %d", tb.Name, len(cs), tb.NumChains()))
		}
		out[tb.Name] = cs
	}
	return out
}

// TestCopyOnWriteReplacedJumpTarget: a chain a restore does not change is shared with
// the version before, and so are its compiled program and resolved jumps; a jump to a
// chain the restore replaced follows the new chain, in compiled and rule-by-rule
// evaluation, and a deleted chain can be created again.
func TestCopyOnWriteReplacedJumpTarget(t *testing.T) {
	env := NewStaticEnv(1, netip.MustParseAddr("10.0.0.1"))
	for _, noCompile := range []bool{false, true} {
		e := New(IPv4)
		e.noCompile = noCompile
		eval := func() Verdict {
			p := Packet{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("10.1.0.2"), Dst: netip.MustParseAddr("10.0.0.1"),
				SrcPort: 40000, DstPort: 80, TCPFlags: netfilter.TCPSyn, Len: 60, InIface: "eth0"}
			return e.EvalHook(env, netfilter.Input, &p, nil).Verdict
		}
		restore := func(in string) {
			t.Helper()
			if err := e.RestoreText([]byte(in), RestoreOptions{NoFlush: true, File: "in"}); err != nil {
				t.Fatal(err)
			}
		}
		restore("*filter\n:U1 - [0:0]\n:U2 - [0:0]\n-A INPUT -j U1\n-A U1 -j U2\n-A U2 -j DROP\nCOMMIT\n")
		if v := eval(); v != Drop {
			t.Fatalf("noCompile %v: first ruleset: %v, want DROP", noCompile, v)
		}
		old := e.Ruleset()
		u1 := old.Chain(TableFilter, "U1")
		restore("*filter\n:U2 - [0:0]\n-A U2 -j ACCEPT\nCOMMIT\n")
		if e.Ruleset().Chain(TableFilter, "U1") != u1 {
			t.Fatalf("noCompile %v: U1 was not shared between versions", noCompile)
		}
		if !old.Chain(TableFilter, "U2").gone {
			t.Fatalf("noCompile %v: the replaced U2 is not marked gone", noCompile)
		}
		if v := eval(); v != Accept {
			t.Fatalf("noCompile %v: after U2 was replaced: %v, want ACCEPT (a cached jump to the old U2?)", noCompile, v)
		}
		// Delete U2 and create it again with other rules.
		restore("*filter\n:U1 - [0:0]\n:U2 - [0:0]\n-A U1 -j RETURN\n-X U2\nCOMMIT\n")
		restore("*filter\n:U2 - [0:0]\n-F U1\n-A U1 -j U2\n-A U2 -j DROP\nCOMMIT\n")
		if v := eval(); v != Drop {
			t.Fatalf("noCompile %v: after U2 was created again: %v, want DROP", noCompile, v)
		}
		if got := string(old.Save(false)); !strings.Contains(got, "-A U2 -j DROP") || strings.Contains(got, "-A U2 -j ACCEPT") {
			t.Fatalf("noCompile %v: the first version changed:\n%s", noCompile, got)
		}
	}
}

// TestMemoizedRulesAreNewRules: a chain rewritten whole with the same lines (as
// kube-proxy rewrites KUBE-SERVICES on every sync) reuses the parsed rules of its
// version before, but as new rules: their origin is the new input's line, their
// counters start at zero (the kernel's rules are new too), the version before keeps its
// counters, and an nth counter starts again.
func TestMemoizedRulesAreNewRules(t *testing.T) {
	env := NewStaticEnv(1, netip.MustParseAddr("10.0.0.1"))
	var b strings.Builder
	b.WriteString("*filter\n:LONG - [0:0]\n:SINK - [0:0]\n-A INPUT -j LONG\n")
	for i := range 20 {
		fmt.Fprintf(&b, "-A LONG -p tcp --dport %d -j SINK\n", 100+i)
	}
	b.WriteString("-A LONG -p tcp --dport 80 -m statistic --mode nth --every 2 --packet 0 -j DROP\n-A LONG -p tcp --dport 80 -j ACCEPT\nCOMMIT\n")
	text := b.String()
	e := New(IPv4)
	restore := func(file string) {
		t.Helper()
		if err := e.RestoreText([]byte(text), RestoreOptions{NoFlush: true, File: file}); err != nil {
			t.Fatal(err)
		}
	}
	eval := func(port uint16) Verdict {
		p := Packet{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("10.1.0.2"), Dst: netip.MustParseAddr("10.0.0.1"),
			SrcPort: 40000, DstPort: port, TCPFlags: netfilter.TCPSyn, Len: 60, InIface: "eth0"}
		return e.EvalHook(env, netfilter.Input, &p, nil).Verdict
	}
	restore("first")
	first := e.Ruleset()
	eval(105)
	if v := eval(80); v != Drop { // the nth rule's first match: every 2, packet 0
		t.Fatalf("first packet to 80: %v, want DROP", v)
	}
	if v := eval(80); v != Accept {
		t.Fatalf("second packet to 80: %v, want ACCEPT", v)
	}
	restore("second")
	long := e.Ruleset().Chain(TableFilter, "LONG")
	old := first.Chain(TableFilter, "LONG")
	if long == old || long.src == nil || old.src == nil {
		t.Fatalf("LONG does not keep its lines (new %p src %p, old %p src %p)", long, long.src, old, old.src)
	}
	for i, r := range long.Rules {
		if r == old.Rules[i] {
			t.Fatalf("rule %d is the version before's object", i+1)
		}
		if i < 20 && r.Target != old.Rules[i].Target {
			t.Fatalf("rule %d was parsed again, not reused", i+1)
		}
		if r.File != "second" || r.Line != i+5 {
			t.Fatalf("rule %d comes from %s:%d, want second:%d", i+1, r.File, r.Line, i+5)
		}
		if r.Counters != (Counters{}) {
			t.Fatalf("rule %d kept counters %v", i+1, r.Counters)
		}
	}
	if old.Rules[5].Counters.Packets != 1 {
		t.Fatalf("the version before lost its counters: %v", old.Rules[5].Counters)
	}
	if !strings.Contains(string(e.SaveCounters(TableFilter)), "[0:0] -A LONG -p tcp -m tcp --dport 105 -j SINK") {
		t.Fatalf("the new rule for port 105 does not start at zero:\n%s", e.SaveCounters(TableFilter))
	}
	// The nth rule is parsed again (its counter is per rule object): the first packet
	// after the restore is the new rule's packet 0.
	if long.Rules[20] == old.Rules[20] || long.Rules[20].Matches[0] == old.Rules[20].Matches[0] {
		t.Fatal("the nth rule's match is shared with the version before")
	}
	if v := eval(80); v != Drop {
		t.Fatalf("first packet to 80 after the restore: %v, want DROP (a fresh nth counter)", v)
	}
	// A line that jumps to a chain the restore deleted before it is refused, as when
	// parsed.
	bad := "*filter\n:LONG - [0:0]\n:SINK - [0:0]\n-X SINK\n" + strings.SplitN(text, "\n", 5)[4]
	err := e.RestoreText([]byte(bad), RestoreOptions{NoFlush: true, File: "bad"})
	if err == nil || !strings.Contains(err.Error(), "bad:5: -j SINK: jump to missing chain") {
		t.Fatalf("jump to a deleted chain from a reused line: %v", err)
	}
}

// TestCopyOnWriteHookChecks: a restore that changes a few chains checks targets against
// the hooks that reach them through new jumps, and a chain whose callers changed is not
// refused for a hook that no longer reaches it (the superset of hooks kept per chain
// falls back to a whole-table validation).
func TestCopyOnWriteHookChecks(t *testing.T) {
	e := New(IPv4)
	restore := func(in string) error {
		return e.RestoreText([]byte(in), RestoreOptions{NoFlush: true, File: "in"})
	}
	if err := restore("*nat\n:U1 - [0:0]\n:U2 - [0:0]\n:U3 - [0:0]\n-A PREROUTING -j U1\n-A U1 -p tcp -j DNAT --to-destination 10.9.0.1:80\n-A PREROUTING -j U3\nCOMMIT\n"); err != nil {
		t.Fatal(err)
	}
	err := restore("*nat\n-A POSTROUTING -j U1\nCOMMIT\n")
	if err == nil || !strings.Contains(err.Error(), "not valid in chain U1 of table nat, which is reached from POSTROUTING") {
		t.Fatalf("DNAT newly reached from POSTROUTING: %v", err)
	}
	err = restore("*nat\n-A U2 -m addrtype --dst-type LOCAL --limit-iface-out -j RETURN\n-A PREROUTING -j U2\nCOMMIT\n")
	if err == nil || !strings.Contains(err.Error(), "--limit-iface-out") {
		t.Fatalf("--limit-iface-out newly reached from PREROUTING: %v", err)
	}
	// U3 was reached from PREROUTING; now only from POSTROUTING, where MASQUERADE is
	// valid.
	if err := restore("*nat\n-D PREROUTING 2\n-A POSTROUTING -j U3\n-A U3 -j MASQUERADE\nCOMMIT\n"); err != nil {
		t.Fatalf("MASQUERADE in a chain reached only from POSTROUTING: %v", err)
	}
	if err := restore("*nat\n-A PREROUTING -j U3\nCOMMIT\n"); err == nil {
		t.Fatal("MASQUERADE newly reached from PREROUTING was accepted")
	}
	// A new jump reaches a DNAT two chains down, through a jump that is not new.
	if err := restore("*nat\n:U4 - [0:0]\n:U5 - [0:0]\n-A U5 -p tcp -j DNAT --to-destination 10.9.0.1:80\n-A U4 -j U5\n-A PREROUTING -j U4\nCOMMIT\n"); err != nil {
		t.Fatal(err)
	}
	err = restore("*nat\n-A POSTROUTING -j U4\nCOMMIT\n")
	if err == nil || !strings.Contains(err.Error(), "not valid in chain U5 of table nat, which is reached from POSTROUTING") {
		t.Fatalf("DNAT newly reached from POSTROUTING through U4: %v", err)
	}
}

// TestReusedRulesShareSpecs: a chain rewritten with the lines of its version before
// gets new Rules over the version before's Specs (not copies), and what changes a
// rule's match or target later (a rename rewriting the jumps to a chain) gives the
// rule a Spec of its own: every earlier version saves as it did.
func TestReusedRulesShareSpecs(t *testing.T) {
	var b strings.Builder
	b.WriteString("*filter\n:LONG - [0:0]\n:U1 - [0:0]\n:U2 - [0:0]\n-A INPUT -j LONG\n")
	for i := range 20 {
		fmt.Fprintf(&b, "-A LONG -p tcp --dport %d -j U%d\n", 100+i, 1+i%2)
	}
	long := b.String()
	e := New(IPv4)
	var versions []*Ruleset
	var texts []string
	restore := func(in string) {
		t.Helper()
		if err := e.RestoreText([]byte(in), RestoreOptions{NoFlush: true, File: "in"}); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, e.Ruleset())
		texts = append(texts, string(e.Ruleset().Save(false)))
	}
	restore(long + "COMMIT\n")
	restore(long + "COMMIT\n")
	first, second := versions[0].Chain(TableFilter, "LONG"), versions[1].Chain(TableFilter, "LONG")
	for i, r := range second.Rules {
		if r == first.Rules[i] || r.Spec != first.Rules[i].Spec {
			t.Fatalf("rule %d: new rule %v (spec %p), version before's %v (spec %p): want a new Rule over the same Spec",
				i+1, r == first.Rules[i], r.Spec, first.Rules[i].Spec, first.Rules[i].Spec)
		}
	}
	// The third rewrites LONG from the same lines again, then renames U1: the rules
	// jumping to it (their Specs shared with both versions before) are rewritten.
	restore(long + "-E U1 W1\n-A LONG -p tcp --dport 99 -j W1\nCOMMIT\n")
	if got := string(versions[2].Save(false)); !strings.Contains(got, "-A LONG -p tcp -m tcp --dport 100 -j W1\n") || strings.Contains(got, "-j U1") {
		t.Fatalf("the rename did not rewrite LONG's jumps:\n%s", got)
	}
	restore("*filter\n-E W1 U1\nCOMMIT\n")
	for i, v := range versions {
		if got := string(v.Save(false)); got != texts[i] {
			t.Fatalf("version %d changed:\n%s\nwas:\n%s", i, got, texts[i])
		}
	}
	if got := string(versions[3].Save(false)); strings.Contains(got, "W1") || !strings.Contains(got, "--dport 99 -j U1\n") {
		t.Fatalf("renaming back:\n%s", got)
	}
}

// TestIncrementalRestoreDropsGoneState: the state beside rules (an xt_recent list, an
// nfacct object) follows --noflush restores that change one chain at a time, whether
// the chain that held the rule was made by a restore validated whole or by an
// incremental one (whose scan gcChanges keeps): a list goes with the last rule that
// names it, an nfacct object comes with the first.
func TestIncrementalRestoreDropsGoneState(t *testing.T) {
	e := New(IPv4)
	env := NewStaticEnv(1)
	restore := func(text string) {
		t.Helper()
		if err := e.RestoreText([]byte(text), RestoreOptions{NoFlush: true}); err != nil {
			t.Fatalf("restore: %v\n%s", err, text)
		}
	}
	hit := func() {
		e.EvalTable(env, TableNAT, netfilter.Prerouting, pkt("udp 10.1.0.1:5 10.96.0.1:53"), nil)
	}
	hasList := func() bool { return slices.Contains(e.RecentLists(), "L") }
	restore("*nat\n:U - [0:0]\n-A PREROUTING -j U\n-A U -m recent --name L --set\nCOMMIT\n")
	hit()
	if !hasList() {
		t.Fatal("list L not filled by the rule that sets it")
	}
	// Incremental: U (made by the restore validated whole) replaced by a version
	// without the rule.
	restore("*nat\n:U - [0:0]\n-A U -j RETURN\nCOMMIT\n")
	if hasList() {
		t.Fatal("list L kept after an incremental restore replaced the last rule that names it (a chain loaded whole)")
	}
	// U replaced by versions with the rule (made incrementally), then by one without.
	restore("*nat\n:U - [0:0]\n-A U -m recent --name L --set\nCOMMIT\n")
	hit()
	restore("*nat\n:U - [0:0]\n-A U -m recent --name L --set\n-A U -j RETURN\nCOMMIT\n")
	hit()
	if !hasList() {
		t.Fatal("list L dropped while a rule still names it")
	}
	restore("*nat\n:U - [0:0]\n-A U -j RETURN\nCOMMIT\n")
	if hasList() {
		t.Fatal("list L kept after an incremental restore replaced the last rule that names it")
	}
	if _, ok := e.Nfacct("A"); ok {
		t.Fatal("nfacct object A before any rule names it")
	}
	restore("*nat\n:U - [0:0]\n-A U -m nfacct --nfacct-name A\nCOMMIT\n")
	if _, ok := e.Nfacct("A"); !ok {
		t.Fatal("nfacct object A not created by the incremental restore that names it")
	}
	restore("*nat\n:V - [0:0]\n-A V -m recent --name L --set\n-A PREROUTING -j V\nCOMMIT\n")
	hit()
	if !hasList() {
		t.Fatal("list L not filled by the rule of V")
	}
	restore("*nat\n-D PREROUTING -j V\n-F V\n-X V\nCOMMIT\n")
	if hasList() {
		t.Fatal("list L kept after an incremental restore deleted the chain that named it")
	}
}

// TestIncrementalValidationOfReusedRules: a long chain rewritten with the lines of its
// version before reuses their Specs, whose checks an incremental validation skips
// only while the hooks that reach the chain are those that reached it: a new jump
// that brings a hook where a reused rule is invalid fails the restore, as loading the
// same text whole does.
func TestIncrementalValidationOfReusedRules(t *testing.T) {
	var long strings.Builder
	long.WriteString(":LONG - [0:0]\n")
	for i := range memoMinRules + 4 {
		fmt.Fprintf(&long, "-A LONG -p tcp --dport %d -j ACCEPT\n", i+1)
	}
	long.WriteString("-A LONG -m addrtype --dst-type LOCAL --limit-iface-in -j RETURN\n")
	e := New(IPv4)
	whole := NewRuleset(IPv4)
	for step, in := range []string{
		"*filter\n" + long.String() + "-A INPUT -j LONG\nCOMMIT\n",
		"*filter\n" + long.String() + "COMMIT\n", // the same lines: rules reused, valid
		"*filter\n" + long.String() + "-A OUTPUT -j LONG\nCOMMIT\n",
	} {
		err := e.RestoreText([]byte(in), RestoreOptions{NoFlush: true, File: "step"})
		wrs, werr := Restore(whole, []byte(in), RestoreOptions{NoFlush: true, File: "step", wholeTables: true})
		if werr == nil {
			whole = wrs
		}
		if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
			t.Fatalf("step %d: incremental error %v, whole-table error %v", step, err, werr)
		}
		if wantErr := step == 2; (err != nil) != wantErr {
			t.Fatalf("step %d: error %v, want one: %v", step, err, wantErr)
		}
		if got, want := string(e.Ruleset().Save(false)), string(whole.Save(false)); got != want {
			t.Fatalf("step %d: incremental result\n%s\nwhole-table result\n%s", step, got, want)
		}
	}
}

// TestRebuiltChainScan: a long chain rewritten with the lines of its version before
// keeps that version's scan (gcChanges does not read its rules again), and one the
// restore changed otherwise is scanned anew: a rule with state appended to a chain
// scanned without (with or without a flush first) makes the chain's state count, so
// that the restore dropping that rule drops the list.
func TestRebuiltChainScan(t *testing.T) {
	var long strings.Builder
	long.WriteString(":LONG - [0:0]\n")
	for i := range memoMinRules + 4 {
		fmt.Fprintf(&long, "-A LONG -p udp --dport %d -j RETURN\n", i+1000)
	}
	const set = "-A LONG -m recent --name L --set\n"
	env := NewStaticEnv(1)
	for _, tc := range []struct{ name, add string }{
		{"appended", "*nat\n" + set + "COMMIT\n"},
		{"flushed and rewritten", "*nat\n" + long.String() + set + "COMMIT\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := New(IPv4)
			restore := func(text string) {
				t.Helper()
				if err := e.RestoreText([]byte(text), RestoreOptions{NoFlush: true}); err != nil {
					t.Fatalf("restore: %v\n%s", err, text)
				}
			}
			hasList := func() bool { return slices.Contains(e.RecentLists(), "L") }
			restore("*nat\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n")
			restore("*nat\n" + long.String() + "-A KUBE-SERVICES -j LONG\nCOMMIT\n") // made incrementally: scanned, no state
			restore("*nat\n" + long.String() + "COMMIT\n")                           // the same lines: the scan carried over
			restore(tc.add)
			e.EvalTable(env, TableNAT, netfilter.Prerouting, pkt("udp 10.1.0.1:5 10.96.0.1:53"), nil)
			if !hasList() {
				t.Fatal("list L not filled by the rule that sets it")
			}
			restore("*nat\n" + long.String() + "COMMIT\n")
			if hasList() {
				t.Fatal("list L kept after the restore that replaced the last rule naming it")
			}
		})
	}
	// The carried scan itself: a chain rebuilt from the same lines has its version
	// before's bits without a scan of its own.
	e := New(IPv4)
	for _, in := range []string{
		"*nat\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n",
		"*nat\n" + long.String() + set + "-A KUBE-SERVICES -j LONG\nCOMMIT\n",
		"*nat\n" + long.String() + set + "COMMIT\n",
	} {
		if err := e.RestoreText([]byte(in), RestoreOptions{NoFlush: true}); err != nil {
			t.Fatal(err)
		}
	}
	if c := e.rs.Table("nat").Chain("LONG"); c.scan != chainScanned|chainHasState {
		t.Errorf("LONG rebuilt from the same lines: scan %03b, want scanned with state", c.scan)
	}
}
