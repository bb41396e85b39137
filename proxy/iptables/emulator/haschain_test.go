package emulator

import (
	"context"
	"slices"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/iptables"
)

// TestHasChainAt checks HasChainAt, which lets a datapath skip RunTable, against the
// ruleset after every restore of a sequence that adds tables (with and without rules in
// their chains), flushes and replaces them; and that where it says no chain, RunTable
// indeed decides nothing, changes neither the packet nor a counter.
func TestHasChainAt(t *testing.T) {
	e := New(IPv4)
	steps := []struct {
		data    string
		noFlush bool
	}{
		{"", false},
		{"*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -j DROP\nCOMMIT\n", false},
		{"*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:X - [0:0]\n-A PREROUTING -j X\n-A X -p tcp -j DNAT --to-destination 10.0.0.9:80\nCOMMIT\n", true},
		{"*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j MARK --set-xmark 0x1/0x1\nCOMMIT\n", true},
		{"*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A PREROUTING -j NOTRACK\nCOMMIT\n", true},
		{"*security\n:FORWARD DROP [0:0]\nCOMMIT\n", true},
		{"*filter\n:FORWARD ACCEPT [0:0]\nCOMMIT\n", false},
	}
	for i, s := range steps {
		if s.data != "" {
			if err := e.Restore(context.Background(), []byte(s.data), iptables.RestoreOptions{NoFlush: s.noFlush}); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		for _, table := range []string{TableRaw, TableMangle, TableNAT, TableFilter, TableSecurity} {
			for h := netfilter.Prerouting; h <= netfilter.Postrouting; h++ {
				e.mu.Lock()
				tb := e.rs.Table(table)
				want := tb != nil && tb.builtin(h) != nil
				e.mu.Unlock()
				if got := e.HasChainAt(table, h); got != want {
					t.Errorf("step %d: HasChainAt(%s, %s) = %v, the ruleset has the chain: %v", i, table, h, got, want)
				}
				if want || !slices.Contains(TablesAt(h), table) {
					continue
				}
				before := e.SaveCounters()
				q := pkt("tcp 10.1.0.1:5 10.96.0.1:80")
				orig := *q
				v := e.RunTable(NewStaticEnv(1), table, h, q, nil)
				if v.Decided() || *q != orig || string(e.SaveCounters()) != string(before) {
					t.Errorf("step %d: %s at %s has no chain, yet RunTable decided (%v), changed the packet or counted", i, table, h, v.Decided())
				}
			}
		}
	}
	if !e.HasChainAt("no-such-table", netfilter.Input) {
		t.Error("an unknown table must not be skipped (RunTable reports it)")
	}
}

// TestHasChainAtAfterAdopt: an emulator that adopts another's ruleset (kube-proxy's
// shared rules) answers HasChainAt for the adopted tables, and for its own again after
// a restore of its own. (Adopt once left the answers of the emulator's last restore, and
// the datapath skipped the adopted nat table: every shared node dropped Service traffic.)
func TestHasChainAtAfterAdopt(t *testing.T) {
	leader, member := New(IPv4), New(IPv4)
	nat := "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A PREROUTING -p tcp -j DNAT --to-destination 10.0.0.9:80\nCOMMIT\n"
	if err := leader.Restore(context.Background(), []byte(nat), iptables.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if member.HasChainAt(TableNAT, netfilter.Prerouting) {
		t.Fatal("an empty emulator has a nat PREROUTING chain")
	}
	leader.mu.Lock()
	rs := leader.rs
	leader.mu.Unlock()
	if err := member.Adopt(rs); err != nil {
		t.Fatal(err)
	}
	if !member.HasChainAt(TableNAT, netfilter.Prerouting) || !member.HasChainAt(TableNAT, netfilter.Output) {
		t.Fatal("after Adopt: no nat chains, though the adopted ruleset has them")
	}
	if member.HasChainAt(TableFilter, netfilter.Forward) {
		t.Fatal("after Adopt: a filter chain the adopted ruleset lacks")
	}
	filter := "*filter\n:FORWARD ACCEPT [0:0]\nCOMMIT\n"
	if err := member.Restore(context.Background(), []byte(filter), iptables.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if !member.HasChainAt(TableFilter, netfilter.Forward) {
		t.Fatal("after its own restore: no filter FORWARD chain")
	}
}
