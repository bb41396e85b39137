package emulator

import (
	"fmt"
	"iter"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

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

	// stateOnce and state: the matches with state beside them (see stateRefsOf), found
	// once: a ruleset a restore made is not changed afterwards.
	stateOnce sync.Once
	state     *stateRefs

	// wild is the wildcard cache of the emulators that hold this ruleset and share
	// it (Emulator.ShareWildCache); nil until first used.
	wild *wildCache
}

// stateRefs are the matches of a ruleset that name state kept beside the rules, in
// rule order: xt_recent lists, nth counters, nfacct objects.
type stateRefs struct {
	recent []*RecentMatch
	nth    []*StatisticMatch
	nfacct []string
}

// stateRefsOf returns the ruleset's stateRefs, found on first use.
func (rs *Ruleset) stateRefsOf() *stateRefs {
	rs.stateOnce.Do(func() {
		r := &stateRefs{}
		for _, t := range rs.Tables {
			for _, c := range t.AllChains() {
				for _, rl := range c.Rules {
					for _, m := range rl.Matches {
						switch m := m.(type) {
						case *RecentMatch:
							r.recent = append(r.recent, m)
						case *StatisticMatch:
							if m.Nth {
								r.nth = append(r.nth, m)
							}
						case *NfacctMatch:
							r.nfacct = append(r.nfacct, m.Name)
						}
					}
				}
			}
		}
		rs.state = r
	})
	return rs.state
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
		for _, c := range t.AllChains() {
			n += len(c.Rules)
		}
	}
	return n
}

// Table is one iptables table: its built-in chains first (in hook order), then the
// user-defined chains.
//
// The chains are read through NumChains, ChainAt, AllChains (an iterator, the cheap
// way to visit them all), Chains (a new slice) and Chain (by name); AddChain adds one.
//
// A --noflush restore gives a table a new version that shares with the old one every
// chain it does not change (copy on write): the chain index is layered (this version's
// entries over a map shared with earlier versions), the chain list is kept in chunks
// of 256 chains of which a version copies only those it changes (and the list of
// chunks), and counts and hook masks the validation keeps are carried over.
// A table a restore took as its base must not be changed afterwards.
type Table struct {
	Name string
	// chains in order: built-in chains first, then user chains in creation order.
	chains chainList
	// byName is this version's chain index over base (a nil value: deleted here);
	// the whole index when base is nil.
	byName map[string]*Chain
	// base is an index shared with the versions this one derives from; never written.
	base map[string]*Chain
	// refs counts the jumps to each chain, nil until a restore needed it (to delete a
	// chain); versions derived from this one keep it up to date.
	refs *refIndex
	// checked: a restore validated this version (no loops, every rule valid for the
	// hooks that reach it, and each chain's hooks field covers those hooks), so that a
	// restore based on it can validate only what it changes.
	checked bool
	// memo: a chain of this version (or of one it derives from) keeps its lines
	// (Chain.src).
	memo bool // lineage is shared by the versions of a table; its head is the latest a restore
	// made. Only a restore based on the head validates incrementally (Chain.hooks
	// describe the head's table).
	lineage *lineage
}

type lineage struct{ head *Table }

// NewTable returns a table with its built-in chains (policy ACCEPT), or an error for an
// unknown table name.
func NewTable(name string) (*Table, error) {
	def, ok := tableDefs[name]
	if !ok {
		return nil, fmt.Errorf("unknown table %q (want raw, mangle, nat, filter or security)", name)
	}
	t := &Table{Name: name, byName: make(map[string]*Chain), chains: newChainList()}
	for _, h := range def.hooks {
		c := &Chain{Name: h.String(), Builtin: true, Policy: "ACCEPT"}
		t.chains.append(c)
		t.byName[c.Name] = c
	}
	return t, nil
}

// NumChains returns the number of chains in the table.
func (t *Table) NumChains() int { return t.chains.len() }

// ChainAt returns the chain at position i (0 <= i < NumChains): built-in chains come
// first, in hook order, then user chains in the order they were created. It panics
// when i is out of range.
func (t *Table) ChainAt(i int) *Chain { return t.chains.at(i) }

// AllChains yields each chain of the table with its position, in ChainAt's order:
//
//	for i, c := range t.AllChains() { ... }
//
// It reads the table in place (no copy); the table must not change during the loop.
func (t *Table) AllChains() iter.Seq2[int, *Chain] { return t.chains.all() }

// Chains returns the table's chains in a new slice, in ChainAt's order (AllChains
// visits them without the copy).
func (t *Table) Chains() []*Chain { return t.chains.slice() }

// Chain returns the named chain, or nil.
func (t *Table) Chain(name string) *Chain {
	if t.byName == nil && t.base == nil {
		t.reindex()
	}
	if c, ok := t.byName[name]; ok {
		return c
	}
	return t.base[name]
}

func (t *Table) reindex() {
	t.byName = make(map[string]*Chain, t.NumChains())
	t.base = nil
	for _, c := range t.AllChains() {
		t.byName[c.Name] = c
	}
}

// setIndex points name at c (nil: the chain is deleted) in this version's index.
func (t *Table) setIndex(name string, c *Chain) {
	if t.byName == nil && t.base == nil {
		t.reindex()
	}
	if t.byName == nil {
		t.byName = make(map[string]*Chain)
	}
	if c == nil {
		if _, inBase := t.base[name]; !inBase {
			delete(t.byName, name)
			return
		}
	}
	t.byName[name] = c
}

// reserve makes room in the chain index for n more chains (a restore's declarations),
// so that the index does not grow by doubling, rehashing what it holds each time. A
// version layered on a base (cow) whose chains the n outnumber gets one flat index of
// its own: the base is small beside what is coming, and a flat index is one lookup.
func (t *Table) reserve(n int) {
	switch {
	case t.base == nil && n > len(t.byName), t.base != nil && n > t.NumChains():
		m := make(map[string]*Chain, n+t.NumChains())
		for _, c := range t.AllChains() {
			m[c.Name] = c
		}
		t.byName, t.base = m, nil
	case t.base != nil && len(t.byName) == 0 && n > 64:
		// A new version of a table as large as what is coming: most declarations
		// name chains it holds, and each one flushed or replaced lands in the upper
		// layer. (A partial sync's few declarations need no room made.)
		t.byName = make(map[string]*Chain, n)
	}
}

// indexOf returns c's position in the table, or -1. c.pos is a hint: a chain only
// moves towards the front (deletions), so the search goes backwards from it first.
func (t *Table) indexOf(c *Chain) int {
	i := t.chains.indexOf(c, int(c.pos))
	if i >= 0 {
		c.pos = int32(i)
	}
	return i
}

// holds reports whether c is the chain its name stands for in t: found at its last
// known position (no index lookup), or else through the index.
func (t *Table) holds(c *Chain) bool {
	if p := int(c.pos); p >= 0 && p < t.NumChains() && t.chains.at(p) == c {
		return true
	}
	return t.Chain(c.Name) == c
}

// replaceChain puts nc where c is (same name).
func (t *Table) replaceChain(c, nc *Chain) {
	t.setChainAt(t.indexOf(c), nc)
}

// setChainAt puts c at position i (in place of a chain of the same name).
func (t *Table) setChainAt(i int, c *Chain) {
	t.chains.set(i, c)
	c.pos = int32(i)
	t.setIndex(c.Name, c)
}

// AddChain adds a user-defined chain at the end (no check that the name is free).
func (t *Table) AddChain(name string) *Chain {
	if t.chains.id == 0 {
		t.chains = newChainList() // a Table made without NewTable
	}
	c := &Chain{Name: name, pos: int32(t.NumChains())}
	t.chains.append(c)
	t.setIndex(name, c)
	return c
}

// removeChain deletes a chain from the table.
func (t *Table) removeChain(name string) {
	if c := t.Chain(name); c != nil {
		if i := t.indexOf(c); i >= 0 {
			t.chains.delete(i)
		}
	}
	t.setIndex(name, nil)
}

// cow returns a new version of t that shares its chains: changes to the new version
// (through setIndex, replaceChain, AddChain, removeChain) leave t as it is.
func (t *Table) cow() *Table {
	if t.byName == nil && t.base == nil {
		t.reindex()
	}
	nt := &Table{Name: t.Name, chains: t.chains.clone(), refs: t.refs, memo: t.memo, lineage: t.lineage}
	switch {
	case t.base == nil:
		nt.base = t.byName
	case len(t.byName) > 1024+len(t.base)/32:
		// Merge the layers (their chains changed often enough that a lookup would
		// mostly find the upper one): every version until the next merge shares it.
		nt.base = mergeLayers(t.base, t.byName)
	default:
		nt.base, nt.byName = t.base, maps.Clone(t.byName)
	}
	if nt.byName == nil {
		nt.byName = make(map[string]*Chain)
	}
	return nt
}

// mergeLayers returns one index of a layered one: base with over's names on top (a
// nil value in over: deleted). It copies the larger layer whole (a first sync puts
// 100,000s of chains over a base of a few) and adds the other's names to it.
func mergeLayers(base, over map[string]*Chain) map[string]*Chain {
	if len(over) <= len(base) {
		m := maps.Clone(base)
		for k, v := range over {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	m := maps.Clone(over)
	for k, v := range over {
		if v == nil {
			delete(m, k)
		}
	}
	for k, v := range base {
		if _, ok := over[k]; !ok {
			m[k] = v
		}
	}
	return m
}

// refIndex counts the jumps to each chain of a table version, layered like the chain
// index: over holds the counts this version changed.
type refIndex struct {
	base, over map[string]int32
}

func (r *refIndex) get(name string) int32 {
	if v, ok := r.over[name]; ok {
		return v
	}
	return r.base[name]
}

// derive returns a refIndex for a new version: r plus delta.
func (r *refIndex) derive(delta map[string]int32) *refIndex {
	nr := &refIndex{}
	switch {
	case r.base == nil:
		nr.base, nr.over = r.over, make(map[string]int32, len(delta))
	case len(r.over) > 1024+len(r.base)/32:
		m := maps.Clone(r.base)
		maps.Copy(m, r.over)
		nr.base, nr.over = m, make(map[string]int32, len(delta))
	default:
		nr.base, nr.over = r.base, maps.Clone(r.over)
	}
	if nr.over == nil {
		nr.over = make(map[string]int32, len(delta))
	}
	for k, d := range delta {
		if d != 0 {
			nr.over[k] = r.get(k) + d
		}
	}
	return nr
}

// saveOrder returns the chains as iptables-save lists them: built-in chains in hook order,
// then user-defined chains sorted by name.
func (t *Table) saveOrder() []*Chain {
	out := make([]*Chain, 0, t.NumChains())
	var user []*Chain
	for _, c := range t.AllChains() {
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
	jumps []*Chain    // resolved jump targets (a gone one is resolved again)
	prog  *chainProg  // compiled rules (compile.go); jumps to gone chains resolved again

	// Restore's scratch: txn is the transaction that owns this Chain object (a
	// transaction copies a chain it changes that it does not own: versions of a table
	// share the chains neither changed), pos the chain's position in its table (a
	// hint; exact during validation).
	txn uint64
	pos int32
	// hooks covers the hooks that reach the chain in the latest validated version of
	// its table (a superset after incremental validations: a restore checks the rules
	// of a changed chain against it, and validates the whole table when that fails).
	hooks uint8
	// gone: a committed restore replaced or deleted this chain; cached jumps to it
	// (jumps, prog) are resolved again by name.
	gone bool
	// src is the text the chain was built from (long chains built from empty by -A
	// lines only): the next version of the chain reuses the rules of equal lines.
	src *chainSrc
	// clean: the transaction that owns the chain built it from empty with -A lines
	// only (so far); build follows it when its version before has a src.
	clean bool
	build *chainBuild
	// scan: what the rules hold (chainScanned, chainHasState, chainHasNfacct), set by
	// gcChanges for the chains a restore made (0: not scanned).
	scan uint8
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

// Rule is one rule of one version of a chain: what it matches and does (its Spec,
// whose fields it promotes: r.Src, r.Matches, r.Target...), its counters and the line
// it was loaded from.
//
// A Spec is never changed once a rule holds it, and rules may share one: a restore
// that rewrites a long chain with the lines of its version before (kube-proxy's
// KUBE-SERVICES on every sync) gives the new version new Rules (their own counters,
// starting at zero, and the new line numbers) over the Specs parsed for the old one.
// Code that changes a rule's match or target gives the rule a new Spec.
type Rule struct {
	*Spec
	Counters Counters

	// Origin: the text and line the rule was loaded from.
	File string
	Line int
}

// Spec is what a rule matches and does: the built-in header matches, the match modules
// in order, and the target (nil for a rule without one, which only counts).
type Spec struct {
	Src, Dst          AddrSpec
	InIface, OutIface IfaceSpec
	Proto             ProtoSpec
	Fragment          Fragment
	Matches           []Match
	Target            Target
}

// withSpec returns a copy of r with its own copy of r's Spec, which the caller may
// change.
func (r *Rule) withSpec() *Rule {
	nr := *r
	sp := *r.Spec
	nr.Spec = &sp
	return &nr
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
