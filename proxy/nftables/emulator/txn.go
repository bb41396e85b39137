package emulator

import (
	"fmt"
	"slices"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// txn is a transaction: a copy-on-write view of a ruleset. Tables, chains and sets are
// cloned the first time the transaction changes them, so the live ruleset is untouched
// until commit, and an error leaves nothing changed.
type txn struct {
	rs    *Ruleset
	owned map[any]bool
	file  string
	// deleted records the line of each chain, set or map the transaction deleted, so
	// that a reference left to it at commit is reported at the delete (the kernel
	// refuses to delete an object in use: Device or resource busy).
	deleted map[deletedKey]int
	final   bool // validating the whole transaction (not one command)
}

type deletedKey struct {
	t          *Table
	kind, name string
}

func (x *txn) noteDeleted(t *Table, kind, name string, line int) {
	if x.deleted == nil {
		x.deleted = map[deletedKey]int{}
	}
	x.deleted[deletedKey{t, kind, name}] = line
}

// inUse is the error for a reference (described by user) to an object the
// transaction deleted; nil when the object was not deleted here.
func (x *txn) inUse(t *Table, kind, name, user string) error {
	if !x.final {
		return nil
	}
	for _, k := range []string{kind, "set", "map"} {
		if line, ok := x.deleted[deletedKey{t, k, name}]; ok && (k == kind || kind == "set") {
			return x.errAt(line, "delete %s %s: it is in use (%s): Device or resource busy", k, name, user)
		}
	}
	return nil
}

func newTxn(rs *Ruleset, file string) *txn {
	n := &Ruleset{Tables: append([]*Table(nil), rs.Tables...)}
	return &txn{rs: n, owned: map[any]bool{}, file: file}
}

// mutTable returns a table of the transaction's own (cloning t if needed).
func (x *txn) mutTable(t *Table) *Table {
	if x.owned[t] {
		return t
	}
	n := *t
	n.Chains = append([]*Chain(nil), t.Chains...)
	n.Sets = append([]*Set(nil), t.Sets...)
	n.Objects = append([]*Object(nil), t.Objects...)
	n.chainIdx = make(map[string]*Chain, len(t.chainIdx))
	for k, v := range t.chainIdx {
		n.chainIdx[k] = v
	}
	n.setIdx = make(map[string]*Set, len(t.setIdx))
	for k, v := range t.setIdx {
		n.setIdx[k] = v
	}
	for i, tt := range x.rs.Tables {
		if tt == t {
			x.rs.Tables[i] = &n
		}
	}
	x.owned[&n] = true
	return &n
}

// mutChain returns a chain of the transaction's own in table t (already owned).
func (x *txn) mutChain(t *Table, c *Chain) *Chain {
	if x.owned[c] {
		return c
	}
	n := *c
	n.Rules = append([]*Rule(nil), c.Rules...)
	for i, cc := range t.Chains {
		if cc == c {
			t.Chains[i] = &n
		}
	}
	t.chainIdx[c.Name] = &n
	x.owned[&n] = true
	return &n
}

// mutSet returns a set of the transaction's own in table t (already owned).
func (x *txn) mutSet(t *Table, s *Set) *Set {
	if x.owned[s] {
		return s
	}
	n := s.clone()
	for i, ss := range t.Sets {
		if ss == s {
			t.Sets[i] = n
		}
	}
	t.setIdx[s.Name] = n
	x.owned[n] = true
	return n
}

func (x *txn) addTable(t *Table) {
	t.chainIdx, t.setIdx = map[string]*Chain{}, map[string]*Set{}
	x.rs.Tables = append(x.rs.Tables, t)
	x.owned[t] = true
}

func (x *txn) deleteTable(t *Table) {
	for i, tt := range x.rs.Tables {
		if tt == t {
			x.rs.Tables = append(x.rs.Tables[:i:i], x.rs.Tables[i+1:]...)
			return
		}
	}
}

// validate checks every rule of the tables the transaction changed: jump and goto
// targets exist (also in verdict map elements), referenced sets exist and suit their
// use. Errors name the rule's file and line.
func (x *txn) validate() error {
	x.final = true
	for _, t := range x.rs.Tables {
		if !x.owned[t] || t.Family > FamilyInet {
			continue
		}
		for _, s := range t.Sets {
			if err := x.checkMapTargets(t, s, s.Line); err != nil {
				return err
			}
		}
		for _, c := range t.Chains {
			for _, r := range c.Rules {
				if err := x.checkRule(t, c, r); err != nil {
					return err
				}
			}
		}
		if err := checkLoops(t); err != nil {
			return fmt.Errorf("%s: %w", x.file, err)
		}
		if err := x.checkNATHooks(t); err != nil {
			return err
		}
	}
	return nil
}

func (x *txn) errAt(line int, format string, args ...any) error {
	return &parseError{x.file, line, fmt.Sprintf(format, args...)}
}

func (x *txn) checkMapTargets(t *Table, s *Set, line int) error {
	if !s.Verdict() {
		return nil
	}
	for _, e := range s.live() {
		if v := e.Value.Verdict; v != nil && v.Chain != "" && t.chain(v.Chain) == nil {
			name := "anonymous map"
			if s.Name != "" {
				name = "map " + s.Name
			}
			if err := x.inUse(t, "chain", v.Chain, name+" element "+e.Text); err != nil {
				return err
			}
			return x.errAt(line, "%s element %s: %s to missing chain %q", name, e.Text, v.Kind, v.Chain)
		}
	}
	return nil
}

func (x *txn) checkRule(t *Table, c *Chain, r *Rule) error {
	for _, st := range r.Stmts {
		switch s := st.(type) {
		case *VerdictStmt:
			if s.Chain != "" && t.chain(s.Chain) == nil {
				if err := x.inUse(t, "chain", s.Chain, "a "+s.Kind+" from chain "+c.Name); err != nil {
					return err
				}
				return x.errAt(r.Line, "chain %s: %s to missing chain %q", c.Name, s.Kind, s.Chain)
			}
			if s.Chain != "" && t.chain(s.Chain).IsBase() {
				return x.errAt(r.Line, "chain %s: %s to base chain %q", c.Name, s.Kind, s.Chain)
			}
		case *VmapStmt:
			if s.Anon != nil {
				if err := x.checkMapTargets(t, s.Anon, r.Line); err != nil {
					return err
				}
				continue
			}
			if err := x.checkRef(t, r, s.SetRef, s.Key.types(), "vmap"); err != nil {
				return err
			}
		case *Match:
			if s.SetRef == "" {
				continue
			}
			ts := s.Left.types()
			if err := x.checkRef(t, r, s.SetRef, ts, "set"); err != nil {
				return err
			}
		case *CounterStmt:
			if s.Name != "" && t.object("counter", s.Name) == nil {
				return x.errAt(r.Line, "counter name %q: no such counter in table %s %s", s.Name, t.Family, t.Name)
			}
		case *SetUpdateStmt:
			if err := x.checkRef(t, r, s.SetRef, s.Key.types(), "set"); err != nil {
				return err
			}
			x.makeDynamic(t, t.set(s.SetRef))
		case *NATStmt:
			if s.MapRef != "" {
				if err := x.checkRef(t, r, s.MapRef, s.MapKey.types(), "map"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// dynsetDefaultSize is the size nft gives a set that the packet path writes when the set
// declares none (NFT_SET_DEFAULT_SIZE... as nft 1.0.6 lists it: "size 65535").
const dynsetDefaultSize = 65535

// makeDynamic does to a set that a rule updates (update/add @set) what nft does when it
// adds such a rule: the set gets the dynamic flag if it lacks it, and a size of 65535
// elements if it declares none, as `nft list ruleset` then shows. t is the
// transaction's own table.
func (x *txn) makeDynamic(t *Table, set *Set) {
	if set.HasFlag("dynamic") && set.Size != 0 {
		return
	}
	m := x.mutSet(t, set)
	if !m.HasFlag("dynamic") {
		m.Flags = append([]string{"dynamic"}, m.Flags...) // nft lists "dynamic,timeout"
	}
	if m.Size == 0 {
		m.Size = dynsetDefaultSize
	}
}

// checkRef checks that the named set exists and suits the use: "set" (a lookup: a set),
// "vmap" (a verdict map) or "map" (a data map), with key types matching the expression.
func (x *txn) checkRef(t *Table, r *Rule, name string, ts []dtype, use string) error {
	s := t.set(name)
	if s == nil {
		if err := x.inUse(t, "set", name, "a rule in chain "+chainOf(t, r)); err != nil {
			return err
		}
		return x.errAt(r.Line, "@%s: no such set or map in table %s %s", name, t.Family, t.Name)
	}
	switch use {
	case "set":
		if s.IsMap {
			return x.errAt(r.Line, "@%s is a map, not a set: a lookup needs a set", name)
		}
	case "vmap":
		if !s.Verdict() {
			return x.errAt(r.Line, "@%s is not a verdict map (type %s): vmap needs \"... : verdict\"", name, s.typeString())
		}
	case "map":
		if !s.IsMap || s.Verdict() {
			return x.errAt(r.Line, "@%s is not a data map: map needs \"... : DATATYPE\"", name)
		}
	}
	if !sameTypes(s.KeyTypes, ts) {
		return x.errAt(r.Line, "@%s has key type %s, but the rule looks up %s", name, s.KeyText, typesString(ts))
	}
	return nil
}

func sameTypes(a, b []dtype) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && a[i] != tOther && b[i] != tOther && !(a[i] == tMark && b[i] == tInteger) {
			return false
		}
	}
	return true
}

func typesString(ts []dtype) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = "?"
		for n, v := range dtypeNames {
			if v == t {
				parts[i] = n
			}
		}
	}
	return strings.Join(parts, " . ")
}

func (s *Set) typeString() string {
	if s.IsMap {
		return s.KeyText + " : " + s.DataText
	}
	return s.KeyText
}

// checkLoops refuses jump/goto loops, as the kernel does.
func checkLoops(t *Table) error {
	state := map[*Chain]int{}
	var visit func(c *Chain) error
	visit = func(c *Chain) error {
		switch state[c] {
		case 1:
			return fmt.Errorf("table %s %s: chain %s: jump loop", t.Family, t.Name, c.Name)
		case 2:
			return nil
		}
		state[c] = 1
		for _, tgt := range chainTargets(t, c) {
			if err := visit(tgt); err != nil {
				return err
			}
		}
		state[c] = 2
		return nil
	}
	for _, c := range t.Chains {
		if err := visit(c); err != nil {
			return err
		}
	}
	return nil
}

func chainTargets(t *Table, c *Chain) []*Chain {
	var out []*Chain
	add := func(v *VerdictStmt) {
		if v != nil && v.Chain != "" {
			if tc := t.chain(v.Chain); tc != nil {
				out = append(out, tc)
			}
		}
	}
	addSet := func(s *Set) {
		if s != nil && s.Verdict() {
			for _, e := range s.live() {
				add(e.Value.Verdict)
			}
		}
	}
	for _, r := range c.Rules {
		for _, st := range r.Stmts {
			switch s := st.(type) {
			case *VerdictStmt:
				add(s)
			case *VmapStmt:
				if s.Anon != nil {
					addSet(s.Anon)
				} else {
					addSet(t.set(s.SetRef))
				}
			}
		}
	}
	return out
}

// bind resolves names to objects in the committed ruleset: set references, jump
// targets, and each rule's reason text.
func bind(rs *Ruleset) {
	for _, t := range rs.Tables {
		bindSetTargets := func(s *Set) {
			if s != nil && s.Verdict() {
				for _, e := range s.live() {
					if v := e.Value.Verdict; v != nil && v.Chain != "" {
						v.target = t.chain(v.Chain)
					}
				}
			}
		}
		for _, s := range t.Sets {
			bindSetTargets(s)
		}
		for _, c := range t.Chains {
			for _, r := range c.Rules {
				if r.reason == "" {
					r.reason = ruleReason(t, c, r)
				}
				for _, st := range r.Stmts {
					switch s := st.(type) {
					case *VerdictStmt:
						s.target = t.chain(s.Chain)
					case *VmapStmt:
						if s.Anon != nil {
							bindSetTargets(s.Anon)
						} else {
							s.set = t.set(s.SetRef)
						}
					case *Match:
						if s.SetRef != "" {
							s.set = t.set(s.SetRef)
						}
					case *SetUpdateStmt:
						s.set = t.set(s.SetRef)
					case *CounterStmt:
						if s.Name != "" {
							s.obj = t.object("counter", s.Name)
						}
					case *NATStmt:
						if s.MapRef != "" {
							s.mapSet = t.set(s.MapRef)
						}
					}
				}
			}
		}
	}
}

func ruleReason(t *Table, c *Chain, r *Rule) string {
	if r.Handle > 0 {
		return fmt.Sprintf("%s %s %s handle %d", t.Family, t.Name, c.Name, r.Handle)
	}
	return fmt.Sprintf("%s %s %s line %d", t.Family, t.Name, c.Name, r.Line)
}

// natHooks are the hooks each NAT statement may run at, in nat chains only (as the
// kernel's nft_nat_validate and nft_masq/redir validate them).
var natHooks = map[netfilter.NATKind][]string{
	netfilter.DNAT:       {"prerouting", "output"},
	netfilter.Redirect:   {"prerouting", "output"},
	netfilter.SNAT:       {"postrouting", "input"},
	netfilter.Masquerade: {"postrouting"},
}

// rejectHooks are the hooks reject may run at in ip, ip6 and inet tables, as the
// kernel's nft_reject_validate (and nft_reject_inet_validate, which adds ingress) have
// them: not postrouting (nft -c accepts it; the kernel's commit refuses it).
var rejectHooks = []string{"prerouting", "input", "forward", "output", "ingress"}

// checkNATHooks refuses a NAT statement in a chain reached from a base chain that is
// not a nat chain at a hook the statement allows, and a reject reached from a base
// chain at a hook that does not take it.
func (x *txn) checkNATHooks(t *Table) error {
	for _, base := range t.Chains {
		if !base.IsBase() {
			continue
		}
		seen := map[*Chain]bool{}
		var walk func(c *Chain) error
		walk = func(c *Chain) error {
			if seen[c] {
				return nil
			}
			seen[c] = true
			for _, r := range c.Rules {
				for _, st := range r.Stmts {
					if _, ok := st.(*RejectStmt); ok && t.Family <= FamilyInet && !slices.Contains(rejectHooks, base.Hook) {
						return x.errAt(r.Line, "chain %s: reject is not allowed here: the chain is reached from base chain %s (hook %s); reject runs at %s only: Operation not supported",
							c.Name, base.Name, base.Hook, strings.Join(rejectHooks, ", "))
					}
					n, ok := st.(*NATStmt)
					if !ok {
						continue
					}
					if base.Type != "nat" || !slices.Contains(natHooks[n.Kind], base.Hook) {
						return x.errAt(r.Line, "chain %s: %s is not allowed here: the chain is reached from base chain %s (type %s hook %s); %s needs a nat chain at %s",
							c.Name, natWord(n.Kind), base.Name, base.Type, base.Hook, natWord(n.Kind), strings.Join(natHooks[n.Kind], " or "))
					}
				}
			}
			for _, tgt := range chainTargets(t, c) {
				if err := walk(tgt); err != nil {
					return err
				}
			}
			return nil
		}
		if err := walk(base); err != nil {
			return err
		}
	}
	return nil
}

// chainOf names the chain holding r (for messages).
func chainOf(t *Table, r *Rule) string {
	for _, c := range t.Chains {
		for _, rr := range c.Rules {
			if rr == r {
				return c.Name
			}
		}
	}
	return "?"
}
