package emulator

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// Table names.
const (
	TableRaw      = "raw"
	TableMangle   = "mangle"
	TableNAT      = "nat"
	TableFilter   = "filter"
	TableSecurity = "security"
)

// tableDef describes a table: its built-in chains (in iptables-save order) and its
// netfilter priority.
type tableDef struct {
	name     string
	hooks    []netfilter.Hook
	priority int
}

// Tables in netfilter priority order (raw -300, mangle -150, nat -100 (DNAT) / 100 (SNAT),
// filter 0, security 50).
var tableDefs = map[string]*tableDef{
	TableRaw:      {TableRaw, []netfilter.Hook{netfilter.Prerouting, netfilter.Output}, -300},
	TableMangle:   {TableMangle, []netfilter.Hook{netfilter.Prerouting, netfilter.Input, netfilter.Forward, netfilter.Output, netfilter.Postrouting}, -150},
	TableNAT:      {TableNAT, []netfilter.Hook{netfilter.Prerouting, netfilter.Input, netfilter.Output, netfilter.Postrouting}, -100},
	TableFilter:   {TableFilter, []netfilter.Hook{netfilter.Input, netfilter.Forward, netfilter.Output}, 0},
	TableSecurity: {TableSecurity, []netfilter.Hook{netfilter.Input, netfilter.Forward, netfilter.Output}, 50},
}

// hookTables lists, per hook, the tables that run there in priority order. nat runs at
// -100 in PREROUTING and OUTPUT (destination NAT) and at +100 in INPUT and POSTROUTING
// (source NAT).
var hookTables = [...][]string{
	netfilter.Prerouting:  {TableRaw, TableMangle, TableNAT},
	netfilter.Input:       {TableMangle, TableFilter, TableSecurity, TableNAT},
	netfilter.Forward:     {TableMangle, TableFilter, TableSecurity},
	netfilter.Output:      {TableRaw, TableMangle, TableNAT, TableFilter, TableSecurity},
	netfilter.Postrouting: {TableMangle, TableNAT},
}

// TablesAt returns the tables evaluated at hook, in the kernel's order.
func TablesAt(h netfilter.Hook) []string { return slices.Clone(hookTables[h]) }

// Counters are a rule's or a chain policy's packet and byte counters.
type Counters struct {
	Packets, Bytes uint64
}

// Ruleset is the model of one family's iptables state: its tables in the order they
// were created (iptables-save prints them in that order).
type Ruleset struct {
	Family Family
	Tables []*Table
}

// NewRuleset returns an empty ruleset.
func NewRuleset(f Family) *Ruleset { return &Ruleset{Family: f} }

// Table returns the named table, or nil.
func (rs *Ruleset) Table(name string) *Table {
	for _, t := range rs.Tables {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// Chain returns a chain of a table, or nil.
func (rs *Ruleset) Chain(table, chain string) *Chain {
	if t := rs.Table(table); t != nil {
		return t.Chain(chain)
	}
	return nil
}

// Rules returns the number of rules in the ruleset.
func (rs *Ruleset) Rules() int {
	n := 0
	for _, t := range rs.Tables {
		for _, c := range t.Chains {
			n += len(c.Rules)
		}
	}
	return n
}

// Table is one iptables table: its built-in chains first (in hook order), then the
// user-defined chains.
type Table struct {
	Name   string
	Chains []*Chain
	byName map[string]*Chain
}

// NewTable returns a table with its built-in chains (policy ACCEPT), or an error for an
// unknown table name.
func NewTable(name string) (*Table, error) {
	def, ok := tableDefs[name]
	if !ok {
		return nil, fmt.Errorf("unknown table %q (want raw, mangle, nat, filter or security)", name)
	}
	t := &Table{Name: name, byName: make(map[string]*Chain)}
	for _, h := range def.hooks {
		c := &Chain{Name: h.String(), Builtin: true, Policy: "ACCEPT"}
		t.Chains = append(t.Chains, c)
		t.byName[c.Name] = c
	}
	return t, nil
}

// Chain returns the named chain, or nil.
func (t *Table) Chain(name string) *Chain {
	if t.byName == nil {
		t.reindex()
	}
	return t.byName[name]
}

func (t *Table) reindex() {
	t.byName = make(map[string]*Chain, len(t.Chains))
	for _, c := range t.Chains {
		t.byName[c.Name] = c
	}
}

// reserve makes room in the chain index for n chains.
func (t *Table) reserve(n int) {
	if n <= len(t.byName) {
		return
	}
	m := make(map[string]*Chain, n+len(t.Chains))
	for _, c := range t.Chains {
		m[c.Name] = c
	}
	t.byName = m
}

// AddChain adds a user-defined chain (no check that the name is free).
func (t *Table) AddChain(name string) *Chain {
	if t.byName == nil {
		t.reindex()
	}
	c := &Chain{Name: name}
	t.Chains = append(t.Chains, c)
	t.byName[name] = c
	return c
}

// removeChain deletes a chain from the table.
func (t *Table) removeChain(name string) {
	for i, c := range t.Chains {
		if c.Name == name {
			t.Chains = slices.Delete(t.Chains, i, i+1)
			break
		}
	}
	delete(t.byName, name)
}

// saveOrder returns the chains as iptables-save lists them: built-in chains in hook order,
// then user-defined chains sorted by name.
func (t *Table) saveOrder() []*Chain {
	out := make([]*Chain, 0, len(t.Chains))
	var user []*Chain
	for _, c := range t.Chains {
		if c.Builtin {
			out = append(out, c)
		} else {
			user = append(user, c)
		}
	}
	slices.SortFunc(user, func(a, b *Chain) int { return strings.Compare(a.Name, b.Name) })
	return append(out, user...)
}

// Chain is a chain: a built-in one (with a policy) or a user-defined one.
type Chain struct {
	Name     string
	Builtin  bool
	Policy   string // ACCEPT or DROP for built-in chains, "" for user chains
	Counters Counters
	Rules    []*Rule

	idx   *chainIndex // built lazily by the evaluator; valid while Rules is unchanged
	jumps []*Chain    // resolved jump targets, per ruleset version (not kept by clone)
	prog  *chainProg  // compiled rules (compile.go), per ruleset version (not kept by clone)

	// Restore's scratch, for the chains of a table a transaction builds (clone and
	// NewTable give it new Chain objects): txn is the transaction whose Rules slice
	// this is (restore.go's own), pos the chain's position in the table during
	// validation.
	txn uint64
	pos int32
}

// AddrSpec is -s or -d: a prefix, possibly negated. The zero value matches anything.
type AddrSpec struct {
	Prefix netip.Prefix
	Neg    bool
}

// IsSet reports whether the spec restricts anything.
func (a AddrSpec) IsSet() bool { return a.Prefix.IsValid() }

// IfaceSpec is -i or -o: an interface name, a trailing '+' matching any name with that
// prefix, possibly negated. The zero value matches anything.
type IfaceSpec struct {
	Name string
	Neg  bool
}

// ProtoSpec is -p: a protocol number, possibly negated. Set is false when -p is absent
// (or -p all).
type ProtoSpec struct {
	Set bool
	Num uint8
	Neg bool
}

// Fragment is -f: FragAny (absent), FragOnly (-f: only non-first fragments) or FragNone
// (! -f).
type Fragment uint8

// Fragment specs.
const (
	FragAny Fragment = iota
	FragOnly
	FragNone
)

// Rule is one rule: the built-in header matches, the match modules in order, and the
// target (nil for a rule without one, which only counts).
type Rule struct {
	Src, Dst          AddrSpec
	InIface, OutIface IfaceSpec
	Proto             ProtoSpec
	Fragment          Fragment
	Matches           []Match
	Target            Target
	Counters          Counters

	// Origin: the text and line the rule was loaded from.
	File string
	Line int
}

// String renders the rule spec as iptables-save prints it, without "-A CHAIN".
func (r *Rule) String() string {
	b := r.appendSpec(nil)
	if len(b) > 0 {
		b = b[1:]
	}
	return string(b)
}

// Text renders the rule as iptables-save prints it: "-A CHAIN ...".
func (r *Rule) Text(chain string) string {
	b := append([]byte("-A "), chain...)
	return string(r.appendSpec(b))
}

// appendSpec appends the rule spec, each part preceded by a space.
func (r *Rule) appendSpec(b []byte) []byte {
	if r.Src.IsSet() {
		b = appendNeg(b, r.Src.Neg)
		b = append(b, " -s "...)
		b = appendPrefix(b, r.Src.Prefix)
	}
	if r.Dst.IsSet() {
		b = appendNeg(b, r.Dst.Neg)
		b = append(b, " -d "...)
		b = appendPrefix(b, r.Dst.Prefix)
	}
	if r.InIface.Name != "" {
		b = appendNeg(b, r.InIface.Neg)
		b = append(b, " -i "...)
		b = append(b, r.InIface.Name...)
	}
	if r.OutIface.Name != "" {
		b = appendNeg(b, r.OutIface.Neg)
		b = append(b, " -o "...)
		b = append(b, r.OutIface.Name...)
	}
	if r.Proto.Set {
		b = appendNeg(b, r.Proto.Neg)
		b = append(b, " -p "...)
		b = append(b, ProtoName(r.Proto.Num)...)
	}
	switch r.Fragment {
	case FragOnly:
		b = append(b, " -f"...)
	case FragNone:
		b = append(b, " ! -f"...)
	}
	for _, m := range r.Matches {
		b = append(b, " -m "...)
		b = append(b, m.Module()...)
		b = m.appendArgs(b)
	}
	if r.Target != nil {
		b = r.Target.appendTarget(b)
	}
	return b
}

func appendNeg(b []byte, neg bool) []byte {
	if neg {
		b = append(b, " !"...)
	}
	return b
}

// appendPrefix prints an address as iptables-save does: always with a prefix length.
func appendPrefix(b []byte, p netip.Prefix) []byte {
	b = p.Addr().AppendTo(b)
	b = append(b, '/')
	return fmt.Appendf(b, "%d", p.Bits())
}

// clone returns a copy of the table whose chains can be changed without touching t's
// (rules are shared: rules are replaced, never edited, by restores).
func (t *Table) clone() *Table {
	nt := &Table{Name: t.Name, Chains: make([]*Chain, len(t.Chains)), byName: make(map[string]*Chain, len(t.Chains))}
	// One allocation for all the chains: a partial restore of a big table (kube-proxy's
	// 100,000 chains) clones every chain, and touches few.
	slab := make([]Chain, len(t.Chains))
	for i, c := range t.Chains {
		nc := &slab[i]
		*nc = Chain{Name: c.Name, Builtin: c.Builtin, Policy: c.Policy, Counters: c.Counters, Rules: c.Rules, idx: c.idx}
		nt.Chains[i] = nc
		nt.byName[nc.Name] = nc
	}
	return nt
}
