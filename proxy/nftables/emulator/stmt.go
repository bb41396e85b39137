package emulator

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// Stmt is one statement of a rule: a match (*Match), a verdict map (*VmapStmt), a
// verdict (*VerdictStmt), *RejectStmt, *NATStmt, *MarkStmt, *CounterStmt, *LogStmt,
// *SetUpdateStmt, or *UnknownStmt (kept by its text). String prints it as nft lists it.
type Stmt interface {
	String() string
}

// exprKind is what an expression reads from the packet.
type exprKind uint8

const (
	xSaddr exprKind = iota + 1
	xDaddr
	xIPProto // ip protocol / ip6 nexthdr
	xSport
	xDport
	xL4proto
	xNfproto
	xMark
	xIifname
	xOifname
	xCtState
	xCtStatus
	xCtMark
	xFib
	xNumgen
	xConcat
	xTCPFlags // tcp flags
)

// Expr is a value read from the packet (or drawn: numgen), possibly concatenated.
type Expr struct {
	Kind  exprKind
	V6    bool   // ip6 saddr/daddr
	Proto uint8  // sport/dport: tcp/udp/sctp; 0 for th
	Fib   string // fib: "saddr" or "daddr"
	Mod   uint32 // numgen
	Off   uint32
	Parts []*Expr // concatenation
	Text  string  // as written

	tys []dtype // types(), cached
}

// types returns the expression's data types, one per concatenated component.
func (x *Expr) types() []dtype {
	if x.tys == nil {
		x.tys = x.computeTypes()
	}
	return x.tys
}

func (x *Expr) computeTypes() []dtype {
	if x.Kind == xConcat {
		var ts []dtype
		for _, p := range x.Parts {
			ts = append(ts, p.types()...)
		}
		return ts
	}
	switch x.Kind {
	case xSaddr, xDaddr:
		if x.V6 {
			return []dtype{tIPv6}
		}
		return []dtype{tIPv4}
	case xIPProto, xL4proto:
		return []dtype{tProto}
	case xSport, xDport:
		return []dtype{tService}
	case xNfproto:
		return []dtype{tNfproto}
	case xMark, xCtMark:
		return []dtype{tMark}
	case xIifname, xOifname:
		return []dtype{tIfname}
	case xCtState:
		return []dtype{tCtState}
	case xCtStatus:
		return []dtype{tCtStatus}
	case xTCPFlags:
		return []dtype{tTCPFlag}
	case xFib:
		return []dtype{tFibType}
	}
	return []dtype{tInteger}
}

// String prints the expression as nft lists it.
func (x *Expr) String() string {
	switch x.Kind {
	case xConcat:
		parts := make([]string, len(x.Parts))
		for i, p := range x.Parts {
			parts[i] = p.String()
		}
		return strings.Join(parts, " . ")
	case xSaddr, xDaddr:
		f := "ip"
		if x.V6 {
			f = "ip6"
		}
		if x.Kind == xSaddr {
			return f + " saddr"
		}
		return f + " daddr"
	case xIPProto:
		if x.V6 {
			return "ip6 nexthdr"
		}
		return "ip protocol"
	case xSport, xDport:
		p := "th"
		if x.Proto != 0 {
			p = ProtoName(x.Proto)
		}
		if x.Kind == xSport {
			return p + " sport"
		}
		return p + " dport"
	case xL4proto:
		return "meta l4proto"
	case xNfproto:
		return "meta nfproto"
	case xMark:
		return "meta mark"
	case xIifname:
		return "iifname"
	case xOifname:
		return "oifname"
	case xCtState:
		return "ct state"
	case xCtStatus:
		return "ct status"
	case xCtMark:
		return "ct mark"
	case xTCPFlags:
		return "tcp flags"
	case xFib:
		return "fib " + x.Fib + " type"
	case xNumgen:
		s := fmt.Sprintf("numgen random mod %d", x.Mod)
		if x.Off != 0 {
			s += fmt.Sprintf(" offset %d", x.Off)
		}
		return s
	}
	return x.Text
}

// Match compares an expression (optionally masked: `meta mark & 0x4000`) with a
// constant, an anonymous set or a named set.
type Match struct {
	Left   *Expr
	Bin    string // "", "&", "|", "^"
	BinVal uint32
	Op     string // "" (implicit), "==", "!=", "<", ">", "<=", ">="
	Lo, Hi key
	Range  bool
	Anon   *Set   // { ... }
	SetRef string // @name
	RHS    string // the right side as written

	set *Set
}

// String prints the match in nft's listing spelling.
func (m *Match) String() string {
	if s, ok := m.bitsString(); ok {
		return s
	}
	var b strings.Builder
	b.WriteString(m.Left.String())
	if m.Bin != "" {
		fmt.Fprintf(&b, " %s 0x%08x", m.Bin, m.BinVal)
	}
	if m.Op != "" && m.Op != "==" {
		b.WriteString(" " + m.Op)
	} else if m.Op == "==" && m.Bin != "" {
		b.WriteString(" ==")
	}
	b.WriteString(" " + m.rhsString())
	return b.String()
}

// bitsString prints a bitmask type's masked or negated match as nft 1.0.6 lists it:
// `& M == 0` as "! M", `& M != 0` as plain "M", `& B == B` for one bit B as written,
// any other `& M == V` as "V / M" (and "!= V / M").
func (m *Match) bitsString() (string, bool) {
	ts := m.Left.types()
	if len(ts) != 1 || !ts[0].isBitmask() || m.Anon != nil || m.SetRef != "" || m.Range {
		return "", false
	}
	t, left := ts[0], m.Left.String()
	var v uint32
	for _, c := range m.Lo.bytes() {
		v = v<<8 | uint32(c)
	}
	list := func(x uint32) string { return bitsString(t, x, ",") }
	switch {
	case m.Bin == "" && m.Op == "!":
		return left + " ! " + list(v), true
	case m.Bin == "" && (m.Op == "==" || m.Op == "!="):
		// A whole-value comparison lists several bits as "a | b".
		return left + " " + m.Op + " " + bitsString(t, v, " | "), true
	case m.Bin != "&":
		return "", false
	case m.Op == "==" && v == 0:
		return left + " ! " + list(m.BinVal), true
	case m.Op == "!=" && v == 0:
		return left + " " + list(m.BinVal), true
	case m.Op == "==" && v == m.BinVal && v&(v-1) == 0:
		return left + " & " + list(v) + " == " + list(v), true
	case m.Op == "==":
		return left + " " + list(v) + " / " + list(m.BinVal), true
	case m.Op == "!=":
		return left + " != " + list(v) + " / " + list(m.BinVal), true
	}
	return "", false
}

func (m *Match) rhsString() string {
	switch {
	case m.SetRef != "":
		return "@" + m.SetRef
	case m.Anon != nil:
		return anonString(m.Anon)
	}
	ts := m.Left.types()
	if m.Bin != "" {
		return formatValue(tMark, m.Lo.bytes())
	}
	return formatKey(ts, &m.Lo, &m.Hi, m.Range, " . ")
}

// formatKey prints a (concatenated) key.
func formatKey(ts []dtype, lo, hi *key, isRange bool, sep string) string {
	parts := make([]string, 0, len(ts))
	off := 0
	for _, t := range ts {
		w := t.width()
		if off+w > int(lo.n) {
			break
		}
		l, h := lo.b[off:off+w], hi.b[off:off+w]
		if isRange && string(l) != string(h) {
			parts = append(parts, formatRange(t, l, h))
		} else if t.isBitmask() {
			parts = append(parts, formatBits(t, l))
		} else {
			parts = append(parts, formatValue(t, l))
		}
		off += w
	}
	return strings.Join(parts, sep)
}

func formatBits(t dtype, b []byte) string {
	var v uint32
	for _, c := range b {
		v = v<<8 | uint32(c)
	}
	return bitsString(t, v, ",")
}

// bitOrder is the order nft lists a bitmask type's bits in.
var bitOrder = map[dtype][]string{
	tCtState:  {"invalid", "established", "related", "new", "untracked"},
	tCtStatus: {"expected", "seen-reply", "assured", "confirmed", "snat", "dnat", "dying"},
	tTCPFlag:  {"fin", "syn", "rst", "psh", "ack", "urg", "ecn", "cwr"},
}

// bitsString prints a bitmask value by its bits' names joined by sep ("syn,ack"; nft
// writes "syn | ack" inside a binary operation), any bits without a name as a number.
func bitsString(t dtype, v uint32, sep string) string {
	names := bitNames(t)
	var parts []string
	for _, n := range bitOrder[t] {
		if v&names[n] != 0 {
			parts = append(parts, n)
			v &^= names[n]
		}
	}
	if v != 0 || len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("0x%x", v))
	}
	return strings.Join(parts, sep)
}

func anonString(s *Set) string {
	els := s.live()
	parts := make([]string, len(els))
	for i, e := range els {
		parts[i] = elemString(s, e)
	}
	if !s.IsMap && len(s.ranges) > 0 && len(s.KeyTypes) == 1 {
		parts = mergedIntervals(s)
	}
	if len(parts) == 1 && !s.IsMap && s.written <= 1 {
		return parts[0]
	}
	return "{ " + strings.Join(parts, ", ") + " }"
}

// VmapStmt looks a key up in a verdict map and runs the element's verdict.
type VmapStmt struct {
	Key    *Expr
	Anon   *Set
	SetRef string

	set *Set
}

// String prints the VmapStmt as nft lists it.
func (v *VmapStmt) String() string {
	if v.SetRef != "" {
		return v.Key.String() + " vmap @" + v.SetRef
	}
	return v.Key.String() + " vmap " + anonString(v.Anon)
}

// VerdictStmt is accept, drop, continue, return, jump CHAIN or goto CHAIN.
type VerdictStmt struct {
	Kind  string
	Chain string

	target *Chain
}

// String prints the VerdictStmt as nft lists it.
func (v *VerdictStmt) String() string {
	if v.Chain != "" {
		return v.Kind + " " + v.Chain
	}
	return v.Kind
}

// RejectStmt is reject [with ...].
type RejectStmt struct {
	With netfilter.RejectWith
	Text string // "" (plain reject) or the "with ..." part
}

// String prints the RejectStmt as nft lists it.
func (r *RejectStmt) String() string {
	if r.Text == "" {
		return "reject"
	}
	return "reject " + r.Text
}

// NATStmt is dnat, snat, masquerade or redirect.
type NATStmt struct {
	Kind    netfilter.NATKind
	Fam     string // "ip", "ip6" or "" as written after dnat/snat
	Addr    key    // literal address (Addr.n == 0: none)
	AddrMax key
	Port    uint16
	PortMax uint16
	// MapKey/MapAnon/MapRef: `to EXPR map { k : addr [. port], ... }`.
	MapKey    *Expr
	MapAnon   *Set
	MapRef    string
	AddrPort  bool // "addr . port" was written
	Flags     []string
	Text      string
	mapSet    *Set
	addrTypes dtype
}

// String prints the NATStmt as nft lists it.
func (n *NATStmt) String() string { return n.normString() }

// MarkStmt sets the packet mark (meta mark set) or the conntrack mark (ct mark set):
// to a constant, or to the (ct) mark combined with a constant (| ^ &).
type MarkStmt struct {
	Ct      bool   // ct mark set
	FromCt  bool   // value read from ct mark (else from meta mark), when Op != ""
	FromPkt bool   // value is the other mark, unchanged (meta mark set ct mark)
	Op      string // "", "|", "^", "&"
	Val     uint32
}

// String prints the MarkStmt as nft lists it.
func (m *MarkStmt) String() string {
	dst, src := "meta mark", "meta mark"
	if m.Ct {
		dst = "ct mark"
	}
	if m.FromCt {
		src = "ct mark"
	}
	switch {
	case m.FromPkt:
		return dst + " set " + src
	case m.Op == "":
		return fmt.Sprintf("%s set 0x%08x", dst, m.Val)
	}
	return fmt.Sprintf("%s set %s %s 0x%08x", dst, src, m.Op, m.Val)
}

// CounterStmt counts packets and bytes (anonymous counter), or names a counter object.
type CounterStmt struct {
	Name    string
	Packets uint64
	Bytes   uint64

	obj *Object // the named counter
}

// String prints the CounterStmt as nft lists it.
func (c *CounterStmt) String() string {
	if c.Name != "" {
		return "counter name " + quote(c.Name)
	}
	return fmt.Sprintf("counter packets %d bytes %d", c.Packets, c.Bytes)
}

// LogStmt is log [options]: a no-op shown in traces.
type LogStmt struct{ Text string }

// String prints the LogStmt as nft lists it.
func (l *LogStmt) String() string { return l.Text }

// SetUpdateStmt is `update|add @set { key [timeout T] }`: the key is added to a dynamic
// set (or its timeout refreshed).
type SetUpdateStmt struct {
	Op      string
	Key     *Expr
	SetRef  string
	Timeout time.Duration

	set *Set
}

// String prints the SetUpdateStmt as nft lists it.
func (u *SetUpdateStmt) String() string {
	s := fmt.Sprintf("%s @%s { %s", u.Op, u.SetRef, u.Key)
	if u.Timeout > 0 {
		s += " timeout " + formatDuration(u.Timeout)
	}
	return s + " }"
}

// UnknownStmt is a statement or expression the emulator does not model, kept by its
// text. Terminal ones (queue, tproxy, ...) decide with verdict Unknown; others are
// undecidable matches: assumed not to match on a single path.
type UnknownStmt struct {
	Text     string
	Terminal bool
}

// String prints the UnknownStmt as nft lists it.
func (u *UnknownStmt) String() string { return u.Text }

// mergedIntervals prints an anonymous interval set as nft does: sorted, adjacent and
// overlapping intervals merged.
func mergedIntervals(s *Set) []string {
	type iv struct{ lo, hi key }
	var ivs []iv
	for _, e := range s.live() {
		ivs = append(ivs, iv{e.Lo, e.Hi})
	}
	sort.Slice(ivs, func(i, j int) bool { return cmpKey(&ivs[i].lo, &ivs[j].lo) < 0 })
	var merged []iv
	for _, v := range ivs {
		if n := len(merged); n > 0 {
			last := &merged[n-1]
			next := last.hi
			if incKey(&next) && cmpKey(&v.lo, &next) <= 0 {
				if cmpKey(&v.hi, &last.hi) > 0 {
					last.hi = v.hi
				}
				continue
			}
		}
		merged = append(merged, v)
	}
	t := s.KeyTypes[0]
	out := make([]string, len(merged))
	for i, v := range merged {
		if v.lo == v.hi {
			out[i] = formatValue(t, v.lo.bytes())
		} else {
			out[i] = formatRange(t, v.lo.bytes(), v.hi.bytes())
		}
	}
	return out
}

// incKey adds one to a key (false on overflow).
func incKey(k *key) bool {
	for i := int(k.n) - 1; i >= 0; i-- {
		k.b[i]++
		if k.b[i] != 0 {
			return true
		}
	}
	return false
}
