package emulator

import (
	"sort"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// Family is an nftables table family.
type Family uint8

// Families. Only ip, ip6 and inet tables are evaluated; the others are kept (and
// printed) but never see a packet here.
const (
	FamilyIP Family = iota
	FamilyIP6
	FamilyInet
	FamilyARP
	FamilyBridge
	FamilyNetdev
)

var familyNames = [...]string{"ip", "ip6", "inet", "arp", "bridge", "netdev"}

// String names the Family.
func (f Family) String() string {
	if int(f) < len(familyNames) {
		return familyNames[f]
	}
	return "family?"
}

// ParseFamily parses a family name.
func ParseFamily(s string) (Family, bool) {
	for i, n := range familyNames {
		if n == s {
			return Family(i), true
		}
	}
	return 0, false
}

// Sees reports whether the family's tables see packets of that IP version.
func (f Family) Sees(ipv6 bool) bool {
	switch f {
	case FamilyIP:
		return !ipv6
	case FamilyIP6:
		return ipv6
	case FamilyInet:
		return true
	}
	return false
}

// Ruleset is the whole nftables state: tables in creation order.
type Ruleset struct {
	Tables []*Table
}

// Table is one table: its chains, sets and maps, and other objects, each in creation
// order as nft lists them.
type Table struct {
	Family  Family
	Name    string
	Comment string
	Flags   []string
	Handle  int
	Line    int

	Chains  []*Chain
	Sets    []*Set // sets and maps
	Objects []*Object

	chainIdx  map[string]*Chain
	setIdx    map[string]*Set
	maxHandle int
}

// Chain is a base or regular chain.
type Chain struct {
	Name     string
	Type     string // "filter", "nat", "route" for base chains; "" for regular chains
	Hook     string // nft's hook name ("prerouting", ...); "" for regular chains
	Device   string
	Priority int
	// PrioText is the priority as written ("dstnat - 10"), for errors and notes.
	PrioText string
	Policy   string // "accept" or "drop" (base chains)
	Comment  string
	Handle   int
	Line     int
	Rules    []*Rule

	seq          int    // registration order, for base chains of equal priority
	policyReason string // "ip t c policy accept"
}

// IsBase reports whether the chain is attached to a hook.
func (c *Chain) IsBase() bool { return c.Hook != "" }

// hookOf maps nft's hook names to the netfilter hooks.
func hookOf(name string) (netfilter.Hook, bool) {
	switch name {
	case "prerouting":
		return netfilter.Prerouting, true
	case "input":
		return netfilter.Input, true
	case "forward":
		return netfilter.Forward, true
	case "output":
		return netfilter.Output, true
	case "postrouting":
		return netfilter.Postrouting, true
	}
	return 0, false
}

// Rule is one rule: its statements, its text as written, its handle (0 when the input
// had none) and the line it came from.
type Rule struct {
	Handle  int
	Line    int
	Text    string
	Stmts   []Stmt
	Comment string

	reason string // "ip t c handle N" / "... line N", set when the rule is bound
}

// Set is a named set or map. Key types are one per concatenated component; a map has
// data types too (or Verdict).
type Set struct {
	Name      string
	IsMap     bool
	KeyTypes  []dtype
	KeyText   string // the key type as written ("ipv4_addr . inet_proto . inet_service")
	DataTypes []dtype
	DataText  string // "verdict", "ipv4_addr . inet_service", ...
	Typeof    bool   // declared with typeof
	Flags     []string
	Timeout   time.Duration
	GCInt     time.Duration
	Size      int
	Comment   string
	Policy    string
	AutoMerge bool
	Handle    int
	Line      int

	elems  map[key]*Element // exact keys
	ranges []*Element       // elements with a prefix or range component, sorted by Lo
	order  []*Element       // insertion order (for printing); may hold deleted ones
	dead   int
	// written is how many elements an anonymous set was written with (nft keeps the
	// braces of a set of several elements merged into one).
	written int
}

// normaliseAnon makes an anonymous one-component set with a prefix or range an
// interval set, merging overlapping and adjacent intervals as nft does.
func (s *Set) normaliseAnon() {
	s.written = s.Len()
	if s.IsMap || len(s.KeyTypes) != 1 || len(s.ranges) == 0 {
		return
	}
	els := append([]*Element(nil), s.live()...)
	s.flush()
	s.Flags = []string{"interval"}
	for _, e := range els {
		s.mergeInterval(e)
	}
}

// Verdict reports whether the set is a verdict map.
func (s *Set) Verdict() bool { return s.IsMap && len(s.DataTypes) == 1 && s.DataTypes[0] == tVerdict }

// HasFlag reports whether the set has the flag.
func (s *Set) HasFlag(f string) bool {
	for _, x := range s.Flags {
		if x == f {
			return true
		}
	}
	return false
}

// Len is the number of elements.
func (s *Set) Len() int { return len(s.order) - s.dead }

// Element is one set or map element.
type Element struct {
	Lo, Hi  key
	Range   bool
	Text    string // the key as written
	Timeout time.Duration
	Expires time.Duration // as listed (relative to when the listing was taken)
	Comment string
	Value   *MapValue // maps only

	expireAt time.Time // dynamic elements: when it expires (zero: anchor on first use)
	anchored bool
	deleted  bool
}

// MapValue is a map element's data: a verdict, or data values.
type MapValue struct {
	Verdict *VerdictStmt
	Data    key
	Text    string
}

// Object is a stateful object (counter) or any other block nft lists inside a table
// (quota, limit, flowtable, ct helper, ...), kept by its text.
type Object struct {
	Kind    string // "counter", "quota", "flowtable", ...
	Name    string
	Packets uint64
	Bytes   uint64
	Text    string // unknown objects: the block as written
	Handle  int
	Line    int
}

func (t *Table) chain(name string) *Chain { return t.chainIdx[name] }

func (t *Table) set(name string) *Set { return t.setIdx[name] }

func (t *Table) object(kind, name string) *Object {
	for _, o := range t.Objects {
		if o.Kind == kind && o.Name == name {
			return o
		}
	}
	return nil
}

func (r *Ruleset) table(f Family, name string) *Table {
	for _, t := range r.Tables {
		if t.Family == f && t.Name == name {
			return t
		}
	}
	return nil
}

// sortedElements returns the live elements in insertion order.
func (s *Set) live() []*Element {
	if s.dead > 0 {
		n := s.order[:0:0]
		for _, e := range s.order {
			if !e.deleted {
				n = append(n, e)
			}
		}
		s.order, s.dead = n, 0
	}
	return s.order
}

// storedAsRange reports whether el is kept in the sorted ranges: a prefix or range,
// or any element of a one-component interval set.
func (s *Set) storedAsRange(el *Element) bool {
	return el.Range || (len(s.KeyTypes) == 1 && s.HasFlag("interval"))
}

// rangeIndex is the index of the first range whose Lo is above k.
func (s *Set) rangeIndex(k *key) int {
	return sort.Search(len(s.ranges), func(i int) bool { return cmpKey(&s.ranges[i].Lo, k) > 0 })
}

// insertElem adds (or replaces) an element.
func (s *Set) insertElem(el *Element) {
	if old := s.findExact(el); old != nil {
		old.deleted = true
		s.dead++
		s.removeFromIndex(old)
	}
	if s.elems == nil {
		s.elems = map[key]*Element{}
	}
	if s.storedAsRange(el) {
		if !el.Range {
			el.Hi = el.Lo
		}
		i := s.rangeIndex(&el.Lo)
		s.ranges = append(s.ranges, nil)
		copy(s.ranges[i+1:], s.ranges[i:])
		s.ranges[i] = el
	} else {
		s.elems[el.Lo] = el
	}
	s.order = append(s.order, el)
}

// findExact finds the element with the same key (and range) as el.
func (s *Set) findExact(el *Element) *Element {
	if !s.storedAsRange(el) {
		return s.elems[el.Lo]
	}
	hi := el.Hi
	if !el.Range {
		hi = el.Lo
	}
	if len(s.KeyTypes) == 1 {
		if i := s.rangeIndex(&el.Lo) - 1; i >= 0 && s.ranges[i].Lo == el.Lo && s.ranges[i].Hi == hi {
			return s.ranges[i]
		}
		return nil
	}
	for _, x := range s.ranges {
		if x.Lo == el.Lo && x.Hi == hi {
			return x
		}
	}
	return nil
}

// overlaps returns a range of a one-component interval set that el overlaps (or,
// with adjacent, touches), nil when none.
func (s *Set) overlaps(el *Element, adjacent bool) *Element {
	if len(s.KeyTypes) != 1 || len(s.ranges) == 0 {
		return nil
	}
	hi := el.Hi
	if !el.Range {
		hi = el.Lo
	}
	i := s.rangeIndex(&el.Lo)
	if i > 0 {
		prev := s.ranges[i-1]
		end := prev.Hi
		if cmpKey(&end, &el.Lo) >= 0 || (adjacent && incKey(&end) && end == el.Lo) {
			return prev
		}
	}
	if i < len(s.ranges) {
		next := s.ranges[i]
		end := hi
		if cmpKey(&next.Lo, &hi) <= 0 || (adjacent && incKey(&end) && end == next.Lo) {
			return next
		}
	}
	return nil
}

// mergeInterval adds el to a one-component interval set, merging it with the ranges
// it overlaps or touches (auto-merge, and anonymous sets).
func (s *Set) mergeInterval(el *Element) {
	if !el.Range {
		el.Hi = el.Lo
	}
	for {
		o := s.overlaps(el, true)
		if o == nil {
			break
		}
		if cmpKey(&o.Lo, &el.Lo) < 0 {
			el.Lo = o.Lo
		}
		if cmpKey(&o.Hi, &el.Hi) > 0 {
			el.Hi = o.Hi
		}
		s.deleteElem(o)
		el.Range = el.Lo != el.Hi
		t := s.KeyTypes[0]
		if el.Range {
			el.Text = formatRange(t, el.Lo.bytes(), el.Hi.bytes())
		} else {
			el.Text = formatValue(t, el.Lo.bytes())
		}
	}
	s.insertElem(el)
}

func (s *Set) removeFromIndex(el *Element) {
	if !s.storedAsRange(el) {
		delete(s.elems, el.Lo)
		return
	}
	if len(s.KeyTypes) == 1 {
		for i := s.rangeIndex(&el.Lo) - 1; i >= 0 && s.ranges[i].Lo == el.Lo; i-- {
			if s.ranges[i] == el {
				s.ranges = append(s.ranges[:i], s.ranges[i+1:]...)
				return
			}
		}
	}
	for i, x := range s.ranges {
		if x == el {
			s.ranges = append(s.ranges[:i], s.ranges[i+1:]...)
			return
		}
	}
}

// deleteElem removes the element with el's key; false when there is none.
func (s *Set) deleteElem(el *Element) bool {
	old := s.findExact(el)
	if old == nil {
		return false
	}
	old.deleted = true
	s.dead++
	s.removeFromIndex(old)
	if s.dead > 64 && s.dead > len(s.order)/2 {
		s.live()
	}
	return true
}

func (s *Set) flush() {
	s.elems, s.ranges, s.order, s.dead = nil, nil, nil, 0
}

// clone copies the set's elements (so that a transaction can change them).
func (s *Set) clone() *Set {
	n := *s
	n.dead = 0 // n.order holds the live elements only
	n.elems = make(map[key]*Element, len(s.elems))
	n.order = make([]*Element, 0, s.Len())
	n.ranges = make([]*Element, len(s.ranges))
	copied := make(map[*Element]*Element, len(s.ranges))
	for _, e := range s.live() {
		c := *e
		n.order = append(n.order, &c)
		if c.Range {
			copied[e] = &c
		} else {
			n.elems[c.Lo] = &c
		}
	}
	for i, r := range s.ranges {
		n.ranges[i] = copied[r]
	}
	return &n
}
