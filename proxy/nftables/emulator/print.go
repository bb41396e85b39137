package emulator

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// PrintOptions choose how the ruleset is printed.
type PrintOptions struct {
	// Handles prints "# handle N" as `nft -a list ruleset` does.
	Handles bool
	// Numeric prints priorities as numbers, as `nft -y` does.
	Numeric bool
	// Now is the clock for elements' "expires" (zero: the latest clock the evaluator
	// has seen).
	Now time.Time
}

// String prints the ruleset as `nft list ruleset` does.
func (e *Emulator) String() string {
	var b strings.Builder
	e.Print(&b, PrintOptions{})
	return b.String()
}

// Print writes the ruleset in nft's listing format.
func (e *Emulator) Print(w io.Writer, o PrintOptions) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if o.Now.IsZero() {
		o.Now = e.now
	}
	for _, t := range e.rs.Tables {
		printTable(w, t, o)
	}
}

func handleSuffix(o PrintOptions, h int) string {
	if o.Handles && h > 0 {
		return fmt.Sprintf(" # handle %d", h)
	}
	return ""
}

func printTable(w io.Writer, t *Table, o PrintOptions) {
	fmt.Fprintf(w, "table %s %s {%s\n", t.Family, t.Name, handleSuffix(o, t.Handle))
	if len(t.Flags) > 0 {
		fmt.Fprintf(w, "\tflags %s\n", strings.Join(t.Flags, ","))
	}
	if t.Comment != "" {
		fmt.Fprintf(w, "\tcomment %s\n", quote(t.Comment))
	}
	first := true
	sep := func() {
		if !first {
			fmt.Fprintln(w)
		}
		first = false
	}
	for _, ob := range t.Objects {
		sep()
		if ob.Kind == "counter" {
			fmt.Fprintf(w, "\tcounter %s {%s\n\t\tpackets %d bytes %d\n\t}\n", ob.Name, handleSuffix(o, ob.Handle), ob.Packets, ob.Bytes)
		} else {
			fmt.Fprintf(w, "\t%s\n", ob.Text)
		}
	}
	for _, s := range t.Sets {
		sep()
		printSet(w, s, o)
	}
	for _, c := range t.Chains {
		sep()
		printChain(w, t, c, o)
	}
	fmt.Fprintln(w, "}")
}

func printSet(w io.Writer, s *Set, o PrintOptions) {
	fmt.Fprintf(w, "\t%s %s {%s\n", kindWord(s), s.Name, handleSuffix(o, s.Handle))
	kw := "type"
	if s.Typeof {
		kw = "typeof"
	}
	fmt.Fprintf(w, "\t\t%s %s\n", kw, s.typeString())
	if s.Policy != "" && s.Policy != "performance" {
		fmt.Fprintf(w, "\t\tpolicy %s\n", s.Policy)
	}
	if s.Size > 0 {
		fmt.Fprintf(w, "\t\tsize %d\n", s.Size)
	}
	if len(s.Flags) > 0 {
		fmt.Fprintf(w, "\t\tflags %s\n", strings.Join(s.Flags, ","))
	}
	if s.Timeout > 0 {
		fmt.Fprintf(w, "\t\ttimeout %s\n", formatDuration(s.Timeout))
	}
	if s.GCInt > 0 {
		fmt.Fprintf(w, "\t\tgc-interval %s\n", formatDuration(s.GCInt))
	}
	if s.AutoMerge {
		fmt.Fprintf(w, "\t\tauto-merge\n")
	}
	if s.Comment != "" {
		fmt.Fprintf(w, "\t\tcomment %s\n", quote(s.Comment))
	}
	els := s.live()
	if len(s.KeyTypes) == 1 && s.HasFlag("interval") && len(s.elems) == 0 {
		els = s.ranges // nft lists interval sets sorted
	}
	if len(els) > 0 {
		parts := make([]string, len(els))
		for i, e := range els {
			parts[i] = elemStringAt(s, e, o.Now)
		}
		fmt.Fprintf(w, "\t\telements = { %s }\n", strings.Join(parts, ",\n\t\t\t     "))
	}
	fmt.Fprintln(w, "\t}")
}

// elemString prints an element as nft lists it.
func elemString(s *Set, e *Element) string { return elemStringAt(s, e, time.Time{}) }

// elemStringAt prints an element, its "expires" taken on the clock now when the
// element's expiry is known on the evaluator's clock.
func elemStringAt(s *Set, e *Element, now time.Time) string {
	var b strings.Builder
	b.WriteString(formatKey(s.KeyTypes, &e.Lo, &e.Hi, e.Range, " . "))
	if e.Timeout > 0 && e.Timeout != s.Timeout {
		b.WriteString(" timeout " + formatDuration(e.Timeout))
	}
	switch {
	case e.anchored && !now.IsZero():
		if left := e.expireAt.Sub(now); left > 0 {
			b.WriteString(" expires " + formatDuration(left))
		}
	case e.Expires > 0:
		b.WriteString(" expires " + formatDuration(e.Expires))
	}
	if e.Comment != "" {
		b.WriteString(" comment " + quote(e.Comment))
	}
	if e.Value != nil {
		b.WriteString(" : ")
		if e.Value.Verdict != nil {
			b.WriteString(e.Value.Verdict.String())
		} else {
			b.WriteString(formatKey(s.DataTypes, &e.Value.Data, &e.Value.Data, false, " . "))
		}
	}
	return b.String()
}

func printChain(w io.Writer, t *Table, c *Chain, o PrintOptions) {
	fmt.Fprintf(w, "\tchain %s {%s\n", c.Name, handleSuffix(o, c.Handle))
	if c.Comment != "" {
		fmt.Fprintf(w, "\t\tcomment %s\n", quote(c.Comment))
	}
	if c.IsBase() {
		dev := ""
		if c.Device != "" {
			dev = " device " + quote(c.Device)
		}
		prio := strconv.Itoa(c.Priority)
		if !o.Numeric {
			prio = prioString(t.Family, c.Hook, c.Priority)
		}
		fmt.Fprintf(w, "\t\ttype %s hook %s%s priority %s; policy %s;\n", c.Type, c.Hook, dev, prio, c.Policy)
	}
	for _, r := range c.Rules {
		fmt.Fprintf(w, "\t\t%s%s\n", RuleString(r), handleSuffix(o, r.Handle))
	}
	fmt.Fprintln(w, "\t}")
}

// RuleString prints a rule's statements in nft's normalised listing spelling.
func RuleString(r *Rule) string {
	parts := make([]string, 0, len(r.Stmts)+1)
	for i, s := range r.Stmts {
		if i+1 < len(r.Stmts) && redundantDependency(s, r.Stmts[i+1]) {
			continue
		}
		parts = append(parts, s.String())
	}
	if r.Comment != "" {
		parts = append(parts, "comment "+quote(r.Comment))
	}
	return strings.Join(parts, " ")
}

// prioString prints a priority as nft lists it: a standard name (± up to 10) where the
// name is valid for the family and hook, else the number.
func prioString(f Family, hook string, prio int) string {
	type named struct {
		name string
		val  int
	}
	var table []named
	if f == FamilyBridge {
		table = []named{{"dstnat", -300}, {"filter", -200}, {"out", 100}, {"srcnat", 300}}
	} else {
		table = []named{{"raw", -300}, {"mangle", -150}, {"dstnat", -100}, {"filter", 0}, {"security", 50}, {"srcnat", 100}}
	}
	for _, n := range table {
		if !prioCompat(f, hook, n.name) {
			continue
		}
		off := prio - n.val
		switch {
		case off == 0:
			return n.name
		case off > 0 && off <= 10:
			return fmt.Sprintf("%s + %d", n.name, off)
		case off < 0 && off >= -10:
			return fmt.Sprintf("%s - %d", n.name, -off)
		}
	}
	return strconv.Itoa(prio)
}

func prioCompat(f Family, hook, name string) bool {
	if f == FamilyBridge {
		switch name {
		case "dstnat":
			return hook == "prerouting"
		case "srcnat":
			return hook == "postrouting"
		case "out":
			return hook == "output"
		}
		return true
	}
	if f > FamilyInet && f != FamilyARP {
		return name == "filter"
	}
	switch name {
	case "dstnat":
		return hook == "prerouting"
	case "srcnat":
		return hook == "postrouting"
	}
	return true
}

// String prints the NAT statement as nft lists it.
func (n *NATStmt) normString() string {
	var b strings.Builder
	b.WriteString(natWord(n.Kind))
	if n.MapKey != nil {
		fam := n.Fam
		if fam == "" {
			fam = "ip"
			if n.addrTypes == tIPv6 {
				fam = "ip6"
			}
		}
		fmt.Fprintf(&b, " %s", fam)
		if n.AddrPort && n.MapAnon == nil {
			b.WriteString(" addr . port")
		}
		fmt.Fprintf(&b, " to %s map ", n.MapKey)
		if n.MapRef != "" {
			b.WriteString("@" + n.MapRef)
		} else {
			parts := []string{}
			for _, e := range n.MapAnon.live() {
				parts = append(parts, formatKey(n.MapAnon.KeyTypes, &e.Lo, &e.Hi, e.Range, " . ")+" : "+
					formatKey(n.MapAnon.DataTypes, &e.Value.Data, &e.Value.Data, false, " . "))
			}
			b.WriteString("{ " + strings.Join(parts, ", ") + " }")
		}
	} else {
		if n.Fam != "" {
			b.WriteString(" " + n.Fam)
		}
		if dest := n.literal(); dest != "" {
			b.WriteString(" to " + dest)
		}
	}
	if len(n.Flags) > 0 {
		b.WriteString(" " + strings.Join(n.Flags, ","))
	}
	return b.String()
}

func (n *NATStmt) literal() string {
	port := ""
	if n.Port != 0 {
		port = strconv.Itoa(int(n.Port))
		if n.PortMax != n.Port && n.PortMax != 0 {
			port += "-" + strconv.Itoa(int(n.PortMax))
		}
	}
	if n.Addr.n == 0 {
		if port == "" {
			return ""
		}
		return ":" + port
	}
	a := addrOf(n.Addr.bytes())
	as := a.String()
	if n.AddrMax != n.Addr {
		as += "-" + addrOf(n.AddrMax.bytes()).String()
	}
	if port == "" {
		return as
	}
	if a.Is6() {
		return "[" + as + "]:" + port
	}
	return as + ":" + port
}

// redundantDependency reports a match nft leaves out of its listing because the next
// match implies it: `meta nfproto ipv4` before an ip payload match, `meta l4proto tcp`
// before a tcp port match.
func redundantDependency(s, next Stmt) bool {
	m, ok := s.(*Match)
	n, ok2 := next.(*Match)
	if !ok || !ok2 || m.Op != "" || m.Bin != "" || m.Anon != nil || m.SetRef != "" || m.Range || m.Left.Kind == xConcat {
		return false
	}
	first := n.Left
	if first.Kind == xConcat {
		first = first.Parts[0]
	}
	switch m.Left.Kind {
	case xNfproto:
		want := byte(2)
		if first.V6 {
			want = 10
		}
		return (first.Kind == xSaddr || first.Kind == xDaddr || first.Kind == xIPProto) && m.Lo.b[0] == want
	case xL4proto:
		return (first.Kind == xSport || first.Kind == xDport) && first.Proto != 0 && m.Lo.b[0] == first.Proto
	}
	return false
}
