package emulator

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// This file gives the ipset model `ipset restore` semantics (create, add, del, flush,
// destroy, rename, swap, with -exist), so that a proxy mode can program the emulator's
// sets as it programs a kernel's (kube-proxy's IPVS mode keeps its ipsets this way). The
// Emulator holds one collection of sets beside its rules, as a network namespace does.

// RestoreIPSets applies `ipset restore` input to the emulator's sets: all of it or,
// on error, none of it. A set that a rule of the ruleset names cannot be destroyed
// (the kernel's "in use by a kernel component").
func (e *Emulator) RestoreIPSets(ctx context.Context, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	name := fmt.Sprintf("ipset-restore#%d", e.restores+1)
	inUse := func(set string) bool { return e.rs.setInUse(set) }
	next, err := e.st.ipsets.Restore(data, name, e.rs.Family, inUse)
	if err != nil {
		return err
	}
	e.st.ipsets = next
	e.restores++
	e.gen++
	return nil
}

// SaveIPSets returns `ipset save` output of the emulator's sets.
func (e *Emulator) SaveIPSets(ctx context.Context) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.st.ipsets == nil {
		return nil, nil
	}
	return e.st.ipsets.Save(), nil
}

// IPSets returns the emulator's sets. Restores replace the collection rather than change
// it, so the value stays valid; callers must not modify it.
func (e *Emulator) IPSets() *IPSets {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st.ipsets
}

// setInUse reports whether a rule names the set in a set match.
func (rs *Ruleset) setInUse(name string) bool {
	for _, t := range rs.Tables {
		for _, c := range t.AllChains() {
			for _, r := range c.Rules {
				for _, m := range r.Matches {
					if sm, ok := m.(*SetMatch); ok && sm.Name == name {
						return true
					}
				}
			}
		}
	}
	return false
}

// Restore returns a copy of s with `ipset restore` input applied (s itself does not
// change; sets the input does not touch are shared). Lines are commands as ipset takes
// them: "create NAME TYPE [options]", "add NAME ELEMENT [options]", "del NAME ELEMENT",
// "flush [NAME]", "destroy [NAME]", "rename FROM TO", "swap A B", each optionally with
// -exist (or -!), which turns "already exists" / "not added" errors of create, add and
// del into no-ops; "-exist" may also stand alone on a line before the commands it
// applies to. Blank lines and "#" comments are skipped. family is the default for sets
// that have none (bitmap:port sets match packets of any family; in the model they take
// the emulator's). inUse, if not nil, says which sets rules still name: those cannot be
// destroyed. Errors name the file and line.
func (s *IPSets) Restore(data []byte, file string, family Family, inUse func(string) bool) (*IPSets, error) {
	r := &setRestore{next: s.shallowCopy(), cloned: map[string]bool{}, family: family, inUse: inUse}
	globalExist := false
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		perr := func(err error) error { return &ParseError{File: file, Line: n + 1, Err: err} }
		f := strings.Fields(line)
		exist := globalExist
		kept := f[:0:0]
		for _, w := range f {
			if w == "-exist" || w == "-!" {
				exist = true
				continue
			}
			kept = append(kept, w)
		}
		if len(kept) == 0 {
			globalExist = true // "-exist" alone: for the rest of the input
			continue
		}
		if err := r.command(kept, line, exist); err != nil {
			return nil, perr(err)
		}
	}
	r.finish()
	return r.next, nil
}

type setRestore struct {
	next    *IPSets
	cloned  map[string]bool // sets copied into next (safe to change)
	family  Family
	inUse   func(string) bool
	scratch *IPSet
}

func (s *IPSets) shallowCopy() *IPSets {
	n := NewIPSets()
	if s == nil {
		return n
	}
	for k, v := range s.sets {
		n.sets[k] = v
	}
	n.order = slices.Clone(s.order)
	return n
}

// own returns a set of next that may be changed, copying it on first use.
func (r *setRestore) own(name string) *IPSet {
	set := r.next.sets[name]
	if set == nil || r.cloned[name] {
		return set
	}
	c := *set
	c.Options = slices.Clone(set.Options)
	c.members = make(map[string]setMember, len(set.members))
	for k, v := range set.members {
		c.members[k] = v
	}
	c.keys = slices.Clone(set.keys)
	c.nets = slices.Clone(set.nets)
	r.next.sets[name] = &c
	r.cloned[name] = true
	return &c
}

func (r *setRestore) command(f []string, line string, exist bool) error {
	need := func(n int, usage string) error {
		if len(f) < n {
			return fmt.Errorf("%s: want %s", f[0], usage)
		}
		return nil
	}
	switch f[0] {
	case "create", "-N", "n":
		if err := need(3, "create NAME TYPE [options]"); err != nil {
			return err
		}
		return r.create(f[1], f[2], f[3:], exist)
	case "add", "-A", "a":
		if err := need(3, "add NAME ELEMENT [options]"); err != nil {
			return err
		}
		extra := strings.Join(f[3:], " ")
		// Keep the element options as written (comments may hold several spaces).
		if i := strings.Index(line, " "+f[2]); i >= 0 {
			rest := strings.TrimSpace(line[i+1+len(f[2]):])
			rest = strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(" "+rest+" ", " -exist ", " "), " -! ", " "))
			extra = rest
		}
		return r.add(f[1], f[2], extra, exist)
	case "del", "-D", "d":
		if err := need(3, "del NAME ELEMENT"); err != nil {
			return err
		}
		return r.del(f[1], f[2], exist)
	case "flush", "-F", "f":
		names := f[1:]
		if len(names) == 0 {
			names = slices.Clone(r.next.order)
		}
		for _, name := range names {
			set := r.own(name)
			if set == nil {
				return fmt.Errorf("flush: the set with the given name does not exist: %s", name)
			}
			clear(set.members)
			set.keys = set.keys[:0]
			set.nets = set.nets[:0]
		}
		return nil
	case "destroy", "-X", "x":
		names := f[1:]
		if len(names) == 0 {
			names = slices.Clone(r.next.order)
		}
		for _, name := range names {
			if r.next.sets[name] == nil {
				return fmt.Errorf("destroy: the set with the given name does not exist: %s", name)
			}
			if r.inUse != nil && r.inUse(name) {
				return fmt.Errorf("destroy %s: set cannot be destroyed: it is in use by a kernel component", name)
			}
			delete(r.next.sets, name)
			delete(r.cloned, name)
			r.next.order = slices.DeleteFunc(r.next.order, func(n string) bool { return n == name })
		}
		return nil
	case "rename", "-E", "e":
		if err := need(3, "rename FROM TO"); err != nil {
			return err
		}
		from, to := f[1], f[2]
		set := r.own(from)
		if set == nil {
			return fmt.Errorf("rename: the set with the given name does not exist: %s", from)
		}
		if r.next.sets[to] != nil {
			return fmt.Errorf("rename: a set with the new name already exists: %s", to)
		}
		if r.inUse != nil && r.inUse(from) {
			return fmt.Errorf("rename %s: set is in use by a kernel component", from)
		}
		set.Name = to
		delete(r.next.sets, from)
		r.next.sets[to] = set
		r.cloned[to] = true
		delete(r.cloned, from)
		for i, n := range r.next.order {
			if n == from {
				r.next.order[i] = to
			}
		}
		return nil
	case "swap", "-W", "w":
		if err := need(3, "swap A B"); err != nil {
			return err
		}
		a, b := r.own(f[1]), r.own(f[2])
		if a == nil || b == nil {
			return fmt.Errorf("swap: both sets must exist: %s, %s", f[1], f[2])
		}
		if a.Type != b.Type || a.Family != b.Family {
			return fmt.Errorf("swap: the sets %s and %s are not compatible (%s %s, %s %s)", f[1], f[2], a.Type, a.Family, b.Type, b.Family)
		}
		a.Name, b.Name = f[2], f[1]
		r.next.sets[f[1]], r.next.sets[f[2]] = b, a
		return nil
	}
	return fmt.Errorf("unknown ipset command %q", f[0])
}

func (r *setRestore) create(name, typ string, opts []string, exist bool) error {
	dims, ok := setTypes[typ]
	if !ok {
		return fmt.Errorf("create %s: unsupported set type %q", name, typ)
	}
	if len(name) > 31 {
		return fmt.Errorf("create %s: set names are at most 31 characters", name)
	}
	set := &IPSet{Name: name, Type: typ, Family: IPv4, dims: dims, members: make(map[string]setMember)}
	if typ == "bitmap:port" {
		set.Family = r.family
	}
	for i := 0; i < len(opts); i++ {
		if opts[i] == "family" && i+1 < len(opts) {
			switch opts[i+1] {
			case "inet":
				set.Family = IPv4
			case "inet6":
				set.Family = IPv6
			default:
				return fmt.Errorf("create %s: unknown family %q", name, opts[i+1])
			}
			i++
			continue
		}
		set.Options = append(set.Options, opts[i])
	}
	if old := r.next.sets[name]; old != nil {
		if !exist || old.Type != set.Type || old.Family != set.Family {
			return fmt.Errorf("create %s: set cannot be created: set with the same name already exists", name)
		}
		return nil
	}
	r.next.sets[name] = set
	r.cloned[name] = true
	r.next.order = append(r.next.order, name)
	return nil
}

func (r *setRestore) parse(set *IPSet, elem, extra string) (string, setMember, error) {
	if r.scratch == nil || r.scratch.Type != set.Type || r.scratch.Family != set.Family {
		r.scratch = &IPSet{Type: set.Type, Family: set.Family, dims: set.dims, members: map[string]setMember{}}
	}
	sc := r.scratch
	clear(sc.members)
	sc.keys, sc.nets = sc.keys[:0], sc.nets[:0]
	// Add parses the element; on an empty scratch set its indexing costs nothing.
	if err := sc.Add(elem, extra); err != nil {
		return "", setMember{}, err
	}
	k := sc.keys[0]
	return k, sc.members[k], nil
}

func (r *setRestore) add(name, elem, extra string, exist bool) error {
	set := r.own(name)
	if set == nil {
		return fmt.Errorf("add: the set with the given name does not exist: %s", name)
	}
	k, m, err := r.parse(set, elem, extra)
	if err != nil {
		return fmt.Errorf("add %s: %v", name, err)
	}
	if _, dup := set.members[k]; dup {
		if !exist {
			return fmt.Errorf("add %s %s: element cannot be added to the set: it's already added", name, elem)
		}
		set.members[k] = m
		return nil
	}
	set.members[k] = m
	set.keys = append(set.keys, k)
	return nil
}

func (r *setRestore) del(name, elem string, exist bool) error {
	set := r.own(name)
	if set == nil {
		return fmt.Errorf("del: the set with the given name does not exist: %s", name)
	}
	k, _, err := r.parse(set, elem, "")
	if err != nil {
		return fmt.Errorf("del %s: %v", name, err)
	}
	if _, ok := set.members[k]; !ok {
		if exist {
			return nil
		}
		return fmt.Errorf("del %s %s: element cannot be deleted from the set: it's not added", name, elem)
	}
	delete(set.members, k)
	return nil
}

// finish rebuilds the insertion-order keys and the network index of every changed set.
func (r *setRestore) finish() {
	for name := range r.cloned {
		set := r.next.sets[name]
		if set == nil {
			continue
		}
		keys := set.keys[:0]
		seen := make(map[string]bool, len(set.keys))
		for _, k := range set.keys {
			if _, ok := set.members[k]; ok && !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		set.keys = keys
		set.nets = set.nets[:0]
		for _, k := range set.keys {
			m := set.members[k]
			for _, pr := range m.prefixes {
				if pr.Bits() != pr.Addr().BitLen() {
					set.nets = append(set.nets, m)
					break
				}
			}
		}
	}
}

// Len returns the number of elements of the set.
func (set *IPSet) Len() int { return len(set.keys) }

// Entries returns the set's elements as they were added, in insertion order.
func (set *IPSet) Entries() []string {
	out := make([]string, 0, len(set.keys))
	for _, k := range set.keys {
		out = append(out, set.members[k].text)
	}
	return out
}
