package emulator

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestParsedRulesShareNoStorage checks that the rules one restore parses, carved from
// the parser's slabs (specParser.newRule, newMatches, newJump), share no storage:
// appending a match to every rule's match list, in load order, and changing every
// jump's chain leaves every other rule as it was. Enough rules to cross several chunks,
// with 0 to 3 -m options each and implicit protocol matches (which grow a list past the
// room counted for it).
func TestParsedRulesShareNoStorage(t *testing.T) {
	var b strings.Builder
	b.WriteString("*filter\n:A - [0:0]\n:B - [0:0]\n")
	const n = 5000
	for i := range n {
		fmt.Fprintf(&b, "-A A")
		switch i % 5 {
		case 1:
			fmt.Fprintf(&b, " -m comment --comment \"r%d\"", i)
		case 2:
			fmt.Fprintf(&b, " -m comment --comment \"r%d\" -m mark --mark 0x%x", i, i)
		case 3:
			fmt.Fprintf(&b, " -m comment --comment \"r%d\" -m tcp -p tcp --dport %d -m mark --mark 0x%x", i, i%65535+1, i)
		case 4:
			fmt.Fprintf(&b, " -p udp --dport %d", i%65535+1) // implicit -m udp
		}
		if i%2 == 0 {
			fmt.Fprintf(&b, " -j B\n")
		} else {
			fmt.Fprintf(&b, " -s 10.%d.%d.0/24 -j ACCEPT\n", i/256%256, i%256)
		}
	}
	b.WriteString("COMMIT\n")
	rs, err := Restore(NewRuleset(IPv4), []byte(b.String()), RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rules := rs.Table("filter").Chain("A").Rules
	if len(rules) != n {
		t.Fatalf("loaded %d rules, want %d", len(rules), n)
	}
	before := make([]string, n)
	for i, r := range rules {
		before[i] = r.String()
	}
	for _, r := range rules {
		r.Matches = append(r.Matches, &UnknownMatch{Name: "x"})
		if j, ok := r.Target.(*JumpTarget); ok {
			j.Chain = "C"
		}
	}
	for i, r := range rules {
		want := " " + before[i]
		if strings.HasSuffix(want, " -j B") {
			want = strings.TrimSuffix(want, " -j B")
		} else {
			want = strings.TrimSuffix(want, " -j ACCEPT")
		}
		got := " " + r.String()
		if !strings.HasPrefix(got, want+" -m x ") || strings.Count(got, " -m x") != 1 {
			t.Fatalf("rule %d after changing every rule: %q, want %q with one -m x appended", i, got, before[i])
		}
		if strings.HasSuffix(" "+before[i], " -j B") != strings.HasSuffix(got, " -j C") {
			t.Fatalf("rule %d: target %q, was %q", i, got, before[i])
		}
	}
}

// TestRuleChainCacheFollowsChanges checks the restore's cache of the last chain a rule
// line named (txn.ruleChain) against chains deleted, recreated, renamed and flushed in
// the same transaction and in the next one (which copies the chains it changes).
func TestRuleChainCacheFollowsChanges(t *testing.T) {
	steps := []struct{ in, want string }{{
		in:   "*filter\n:X - [0:0]\n-A X -j ACCEPT\n-F X\n-X X\n-N X\n-A X -j DROP\n-E X Y\n-N X\n-A X -j RETURN\n-A Y -s 10.0.0.1/32 -j DROP\n-A X -s 10.0.0.2/32 -j ACCEPT\nCOMMIT\n",
		want: "-A X -j RETURN\n-A X -s 10.0.0.2/32 -j ACCEPT\n-A Y -j DROP\n-A Y -s 10.0.0.1/32 -j DROP\n",
	}, {
		in:   "*filter\n-A X -j DROP\n-A X -s 10.0.0.3/32 -j DROP\n-A Y -j ACCEPT\n-D Y 1\n-A Y -j RETURN\n-E Y Z\n-N Y\n-A Y -j DROP\n-A Z -j ACCEPT\nCOMMIT\n",
		want: "-A X -j RETURN\n-A X -s 10.0.0.2/32 -j ACCEPT\n-A X -j DROP\n-A X -s 10.0.0.3/32 -j DROP\n-A Y -j DROP\n-A Z -s 10.0.0.1/32 -j DROP\n-A Z -j ACCEPT\n-A Z -j RETURN\n-A Z -j ACCEPT\n",
	}, {
		in:   "*filter\n-F X\n-A X -j ACCEPT\nCOMMIT\n",
		want: "-A X -j ACCEPT\n-A Y -j DROP\n-A Z -s 10.0.0.1/32 -j DROP\n-A Z -j ACCEPT\n-A Z -j RETURN\n-A Z -j ACCEPT\n",
	}}
	rs := NewRuleset(IPv4)
	for i, s := range steps {
		next, err := Restore(rs, []byte(s.in), RestoreOptions{NoFlush: true})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		rs = next
		var got strings.Builder
		for _, line := range strings.Split(string(rs.Save(false, "filter")), "\n") {
			if strings.HasPrefix(line, "-A ") {
				got.WriteString(line + "\n")
			}
		}
		if got.String() != s.want {
			t.Fatalf("step %d: rules\n%s\nwant\n%s", i, got.String(), s.want)
		}
	}
	// A jump to a chain deleted since the last jump to it fails; to one re-created,
	// it goes to the new chain.
	if _, err := Restore(rs, []byte("*filter\n-N W\n-A X -j W\n-D X -j W\n-X W\n-A X -j W\nCOMMIT\n"), RestoreOptions{NoFlush: true}); !errors.Is(err, ErrChainNotFound) {
		t.Fatalf("jump to a deleted chain: %v, want %v", err, ErrChainNotFound)
	}
	next, err := Restore(rs, []byte("*filter\n-N W\n-A X -j W\n-D X -j W\n-X W\n-N W\n-A X -j W\n-A W -j DROP\nCOMMIT\n"), RestoreOptions{NoFlush: true})
	if err != nil {
		t.Fatal(err)
	}
	if x, w := next.Table("filter").Chain("X"), next.Table("filter").Chain("W"); x.Rules[len(x.Rules)-1].Target.(*JumpTarget).Chain != "W" || len(w.Rules) != 1 {
		t.Fatalf("after re-creating W: X %v, W %v", x.Rules, w.Rules)
	}
	out := string(next.Save(false, "filter"))
	if !strings.Contains(out, "-A X -j W\n") || !strings.Contains(out, "-A W -j DROP\n") {
		t.Fatalf("after re-creating W:\n%s", out)
	}
}

// TestRuleListsFromSlab checks the rule lists a restore carves from one slab
// (txn.appendRules): chains appended to in runs and interleaved, lists crossing slab
// boundaries, inserts and appends into a carved list in the same transaction and the
// next, each chain's rules compared with a model of what was appended where.
func TestRuleListsFromSlab(t *testing.T) {
	model := map[string][]string{}
	var b strings.Builder
	b.WriteString("*filter\n")
	names := []string{"A", "B", "C", "D"}
	for _, c := range names {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c)
	}
	add := func(chain, spec string, insert bool) {
		if insert {
			fmt.Fprintf(&b, "-I %s 1 %s\n", chain, spec)
			model[chain] = append([]string{spec}, model[chain]...)
			return
		}
		fmt.Fprintf(&b, "-A %s %s\n", chain, spec)
		model[chain] = append(model[chain], spec)
	}
	n := 0
	rule := func() string { n++; return fmt.Sprintf("-s 10.%d.%d.%d/32 -j ACCEPT", n>>16&255, n>>8&255, n&255) }
	// Runs of growing length (the longest cross the 4096-entry slab), interleaved
	// single lines, and inserts into a chain whose list is the slab's last.
	for run := 1; run <= 9000; run *= 3 {
		for _, c := range names {
			for range run {
				add(c, rule(), false)
			}
			add("A", rule(), false)
			add(c, rule(), true)
			add(c, rule(), false)
		}
	}
	b.WriteString("COMMIT\n")
	check := func(rs *Ruleset, when string) {
		t.Helper()
		for _, c := range names {
			var got []string
			for _, r := range rs.Table("filter").Chain(c).Rules {
				got = append(got, r.String())
			}
			if len(got) != len(model[c]) {
				t.Fatalf("%s: chain %s has %d rules, want %d", when, c, len(got), len(model[c]))
			}
			for i := range got {
				if got[i] != model[c][i] {
					t.Fatalf("%s: chain %s rule %d = %q, want %q", when, c, i+1, got[i], model[c][i])
				}
			}
		}
	}
	rs, err := Restore(NewRuleset(IPv4), []byte(b.String()), RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check(rs, "first restore")
	first := map[string][]string{}
	for k, v := range model {
		first[k] = append([]string(nil), v...)
	}
	// The next transaction appends to and inserts into the carved lists.
	b.Reset()
	b.WriteString("*filter\n")
	for _, c := range names {
		add(c, rule(), false)
		add("B", rule(), true)
		add(c, rule(), false)
	}
	b.WriteString("COMMIT\n")
	rs2, err := Restore(rs, []byte(b.String()), RestoreOptions{NoFlush: true})
	if err != nil {
		t.Fatal(err)
	}
	check(rs2, "second restore")
	model = first
	check(rs, "the first version after the second restore")
}
