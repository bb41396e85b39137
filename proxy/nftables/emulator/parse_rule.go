package emulator

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// ruleParser parses one rule's tokens into statements.
type ruleParser struct {
	toks []token
	i    int
	src  string
	file string
	fam  Family
	rule *Rule
	prev []Stmt // the rule's statements so far
}

// parseError is an error naming the file, line and token.
type parseError struct {
	file string
	line int
	msg  string
}

func (e *parseError) Error() string { return fmt.Sprintf("%s:%d: %s", e.file, e.line, e.msg) }

func (p *ruleParser) errf(t token, format string, args ...any) error {
	return &parseError{p.file, t.line, fmt.Sprintf(format, args...)}
}

func (p *ruleParser) eof() bool { return p.i >= len(p.toks) }

func (p *ruleParser) peek() token {
	if p.eof() {
		return token{s: "", line: p.lastLine()}
	}
	return p.toks[p.i]
}

func (p *ruleParser) peekN(n int) token {
	if p.i+n >= len(p.toks) {
		return token{line: p.lastLine()}
	}
	return p.toks[p.i+n]
}

func (p *ruleParser) lastLine() int {
	if len(p.toks) == 0 {
		return 0
	}
	return p.toks[len(p.toks)-1].line
}

func (p *ruleParser) next() token {
	t := p.peek()
	if !p.eof() {
		p.i++
	}
	return t
}

// want consumes the word w or fails naming what was found.
func (p *ruleParser) want(w string) error {
	t := p.next()
	if !t.is(w) {
		return p.errf(t, "expected %q, found %s", w, describe(t))
	}
	return nil
}

func describe(t token) string {
	switch {
	case t.nl || (t.s == "" && !t.quoted):
		return "end of line"
	case t.quoted:
		return strconv.Quote(t.s)
	}
	return fmt.Sprintf("%q", t.s)
}

// skipNL skips newline tokens (inside braces newlines do not end anything).
func (p *ruleParser) skipNL() {
	for !p.eof() && p.toks[p.i].nl {
		p.i++
	}
}

// stmtStarts are the words that begin a statement or match the parser knows; an
// unknown statement runs until one of them.
var stmtStarts = map[string]bool{"accept": true, "drop": true, "continue": true, "return": true, "jump": true,
	"goto": true, "reject": true, "counter": true, "comment": true, "log": true, "dnat": true, "snat": true,
	"masquerade": true, "redirect": true, "ip": true, "ip6": true, "tcp": true, "udp": true, "sctp": true,
	"th": true, "meta": true, "ct": true, "fib": true, "numgen": true, "mark": true, "iifname": true,
	"oifname": true, "update": true, "limit": true, "quota": true, "queue": true, "notrack": true, "icmp": true,
	"icmpv6": true, "tproxy": true, "synproxy": true, "fwd": true, "dup": true, "ether": true, "vlan": true,
	"socket": true, "osf": true, "rt": true, "ipsec": true, "exthdr": true, "xt": true}

// terminalUnknown are statements the emulator does not model that end the evaluation.
var terminalUnknown = map[string]bool{"queue": true, "tproxy": true, "synproxy": true, "fwd": true}

// parseRuleStmts parses a rule's statements.
func (p *ruleParser) parseRuleStmts() ([]Stmt, error) {
	for !p.eof() {
		st, err := p.parseStmt()
		if err != nil {
			return nil, err
		}
		if st != nil {
			p.prev = append(p.prev, st)
		}
	}
	return p.prev, nil
}

// hasProtoMatch reports whether an earlier statement of the rule matches the
// transport protocol (meta l4proto, ip protocol, tcp/udp/sctp ports), which nft
// requires before a NAT statement maps ports.
func (p *ruleParser) hasProtoMatch() bool {
	for _, st := range p.prev {
		if m, ok := st.(*Match); ok {
			switch k := m.Left.Kind; {
			case (k == xL4proto || k == xIPProto) && m.Op != "!=":
				return true
			case (k == xSport || k == xDport || k == xTCPFlags) && m.Left.Proto != 0:
				// tcp/udp dport ... brings its protocol dependency (meta l4proto tcp)
				// whatever the comparison: "tcp dport != 80" is a TCP match.
				return true
			}
		}
	}
	return false
}

func (p *ruleParser) parseStmt() (Stmt, error) {
	t := p.peek()
	if t.quoted {
		return nil, p.errf(t, "unexpected string %q", t.s)
	}
	switch t.s {
	case "comment":
		p.next()
		c := p.next()
		if !c.quoted {
			return nil, p.errf(c, "comment: expected a quoted string, found %s", describe(c))
		}
		p.rule.Comment = c.s
		return nil, nil
	case "counter":
		return p.parseCounter()
	case "accept", "drop", "continue", "return":
		p.next()
		return &VerdictStmt{Kind: t.s}, nil
	case "jump", "goto":
		p.next()
		c := p.next()
		if c.s == "" || c.nl {
			return nil, p.errf(c, "%s: expected a chain name", t.s)
		}
		return &VerdictStmt{Kind: t.s, Chain: c.s}, nil
	case "reject":
		return p.parseReject()
	case "log":
		return p.parseLog()
	case "dnat", "snat", "masquerade", "redirect":
		return p.parseNAT()
	case "update", "add":
		if strings.HasPrefix(p.peekN(1).s, "@") {
			return p.parseSetUpdate()
		}
	}
	if (t.is("meta") && p.peekN(1).is("mark") && p.peekN(2).is("set")) || (t.is("mark") && p.peekN(1).is("set")) ||
		(t.is("ct") && p.peekN(1).is("mark") && p.peekN(2).is("set")) {
		return p.parseMarkSet()
	}
	start := p.i
	x, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	if x == nil {
		p.i = start
		if t := p.peek(); !t.quoted && (t.is(",") || t.is(";") || t.is("}")) {
			return nil, p.errf(t, "syntax error: unexpected %q", t.s)
		}
		return p.parseUnknown(), nil
	}
	return p.parseMatchRest(x)
}

// parseUnknown keeps tokens up to the next known statement as one unknown statement.
func (p *ruleParser) parseUnknown() Stmt {
	start := p.i
	first := p.next()
	depth := 0
	for !p.eof() {
		t := p.peek()
		if t.is("{") {
			depth++
		} else if t.is("}") {
			depth--
		} else if depth == 0 && !t.quoted && stmtStarts[t.s] {
			break
		}
		p.i++
	}
	// An iptables-nft target nft cannot translate (xt target DNAT, ...) most likely
	// decides the packet's fate: the evaluation ends with UNKNOWN.
	xtTarget := first.is("xt") && start+1 < len(p.toks) && p.toks[start+1].is("target")
	return &UnknownStmt{Text: span(p.src, p.toks[start:p.i]), Terminal: terminalUnknown[first.s] || xtTarget}
}

func (p *ruleParser) parseCounter() (Stmt, error) {
	p.next()
	c := &CounterStmt{}
	if p.peek().is("name") {
		p.next()
		n := p.next()
		c.Name = n.s
		return c, nil
	}
	if p.peek().is("packets") {
		p.next()
		v, err := strconv.ParseUint(p.next().s, 10, 64)
		if err != nil {
			return nil, p.errf(p.toks[p.i-1], "counter: bad packets %q", p.toks[p.i-1].s)
		}
		c.Packets = v
		if err := p.want("bytes"); err != nil {
			return nil, err
		}
		b := p.next()
		if c.Bytes, err = strconv.ParseUint(b.s, 10, 64); err != nil {
			return nil, p.errf(b, "counter: bad bytes %q", b.s)
		}
	}
	return c, nil
}

var rejectICMP = map[string]string{"port-unreachable": "port-unreachable", "net-unreachable": "net-unreachable",
	"host-unreachable": "host-unreachable", "prot-unreachable": "proto-unreachable", "net-prohibited": "net-prohibited",
	"host-prohibited": "host-prohibited", "admin-prohibited": "admin-prohibited", "no-route": "net-unreachable",
	"addr-unreachable": "host-unreachable", "port-unreach": "port-unreachable"}

func (p *ruleParser) parseReject() (Stmt, error) {
	p.next()
	r := &RejectStmt{}
	if !p.peek().is("with") {
		return r, nil
	}
	start := p.i
	p.next()
	kind := p.next()
	switch kind.s {
	case "tcp":
		if err := p.want("reset"); err != nil {
			return nil, err
		}
		r.With = netfilter.RejectTCPReset
	case "icmp", "icmpv6", "icmpx":
		if kind.s == "icmpx" && (p.fam == FamilyIP || p.fam == FamilyIP6) {
			// nft: icmpx is for inet (and bridge, netdev) tables.
			return nil, p.errf(kind, "reject with icmpx: abstracted ICMP unreachable not supported in %s tables", p.fam)
		}
		if p.peek().is("type") {
			p.next()
		}
		n := p.next()
		name, ok := rejectICMP[n.s]
		if !ok {
			return nil, p.errf(n, "reject: unknown ICMP reject type %q", n.s)
		}
		r.With, _ = netfilter.RejectWithName("icmp-" + name)
		r.Text = "with " + kind.s + " " + n.s // nft lists it without "type"
		return r, nil
	default:
		return nil, p.errf(kind, "reject with: expected icmp, icmpv6, icmpx or tcp, found %s", describe(kind))
	}
	r.Text = span(p.src, p.toks[start:p.i])
	return r, nil
}

func (p *ruleParser) parseLog() (Stmt, error) {
	start := p.i
	p.next()
	for !p.eof() {
		switch t := p.peek(); t.s {
		case "prefix", "level", "group", "snaplen", "queue-threshold", "flags":
			p.next()
			if p.eof() {
				return nil, p.errf(t, "log %s: missing value", t.s)
			}
			p.next()
			for t.s == "flags" && p.peek().is(",") {
				p.next()
				if p.eof() {
					return nil, p.errf(t, "log flags: missing flag after \",\"")
				}
				p.next()
			}
		default:
			return &LogStmt{Text: span(p.src, p.toks[start:p.i])}, nil
		}
	}
	return &LogStmt{Text: span(p.src, p.toks[start:p.i])}, nil
}

func (p *ruleParser) parseMarkSet() (Stmt, error) {
	m := &MarkStmt{}
	if p.peek().is("ct") {
		m.Ct = true
		p.next()
	} else if p.peek().is("meta") {
		p.next()
	}
	p.next() // mark
	p.next() // set
	t := p.next()
	switch {
	case t.is("meta") || t.is("mark") || t.is("ct"):
		if t.is("meta") || t.is("ct") {
			if err := p.want("mark"); err != nil {
				return nil, err
			}
		}
		m.FromCt = t.is("ct")
		op := p.peek()
		sym := map[string]string{"or": "|", "|": "|", "xor": "^", "^": "^", "and": "&", "&": "&"}[op.s]
		if sym == "" || op.quoted {
			m.FromPkt = true
			return m, nil
		}
		p.next()
		v := p.next()
		n, err := strconv.ParseUint(v.s, 0, 32)
		if err != nil {
			return nil, p.errf(v, "mark set: bad value %q", v.s)
		}
		m.Op, m.Val = sym, uint32(n)
	default:
		n, err := strconv.ParseUint(t.s, 0, 32)
		if err != nil {
			return nil, p.errf(t, "mark set: bad value %s", describe(t))
		}
		m.Val = uint32(n)
	}
	return m, nil
}

func (p *ruleParser) parseSetUpdate() (Stmt, error) {
	op := p.next()
	ref := p.next()
	name, err := p.setName(ref)
	if err != nil {
		return nil, err
	}
	u := &SetUpdateStmt{Op: op.s, SetRef: name}
	if err := p.want("{"); err != nil {
		return nil, err
	}
	x, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	if x == nil {
		return nil, p.errf(p.peek(), "%s @%s: expected a key expression, found %s", op.s, u.SetRef, describe(p.peek()))
	}
	u.Key = x
	if p.peek().is("timeout") {
		p.next()
		d := p.next()
		if u.Timeout, err = parseDuration(d.s); err != nil {
			return nil, p.errf(d, "%v", err)
		}
	}
	if err := p.want("}"); err != nil {
		return nil, err
	}
	return u, nil
}

// parseExpr parses a (possibly concatenated) packet expression; nil (and no error)
// when the next word does not start one the emulator knows.
func (p *ruleParser) parseExpr() (*Expr, error) {
	x, err := p.parsePrimary()
	if err != nil || x == nil {
		return x, err
	}
	if !p.peek().is(".") {
		return x, nil
	}
	c := &Expr{Kind: xConcat, Parts: []*Expr{x}}
	for p.peek().is(".") {
		p.next()
		y, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if y == nil {
			return nil, p.errf(p.peek(), "concatenation: expected an expression after \".\", found %s", describe(p.peek()))
		}
		c.Parts = append(c.Parts, y)
	}
	return c, nil
}

func (p *ruleParser) parsePrimary() (*Expr, error) {
	t := p.peek()
	if t.quoted {
		return nil, nil
	}
	n1 := p.peekN(1)
	one := func(x *Expr, n int) (*Expr, error) {
		p.i += n
		return x, nil
	}
	switch t.s {
	case "ip", "ip6":
		v6 := t.s == "ip6"
		switch n1.s {
		case "saddr":
			return one(&Expr{Kind: xSaddr, V6: v6}, 2)
		case "daddr":
			return one(&Expr{Kind: xDaddr, V6: v6}, 2)
		case "protocol", "nexthdr":
			return one(&Expr{Kind: xIPProto, V6: v6}, 2)
		}
	case "tcp", "udp", "sctp", "th":
		proto := protoNames[t.s]
		switch n1.s {
		case "sport":
			return one(&Expr{Kind: xSport, Proto: proto}, 2)
		case "dport":
			return one(&Expr{Kind: xDport, Proto: proto}, 2)
		case "flags":
			if t.s == "tcp" {
				return one(&Expr{Kind: xTCPFlags, Proto: proto}, 2)
			}
		}
	case "meta":
		switch n1.s {
		case "l4proto":
			return one(&Expr{Kind: xL4proto}, 2)
		case "nfproto":
			return one(&Expr{Kind: xNfproto}, 2)
		case "mark":
			return one(&Expr{Kind: xMark}, 2)
		case "iifname":
			return one(&Expr{Kind: xIifname}, 2)
		case "oifname":
			return one(&Expr{Kind: xOifname}, 2)
		}
	case "mark":
		return one(&Expr{Kind: xMark}, 1)
	case "iifname":
		return one(&Expr{Kind: xIifname}, 1)
	case "oifname":
		return one(&Expr{Kind: xOifname}, 1)
	case "ct":
		switch n1.s {
		case "state":
			return one(&Expr{Kind: xCtState}, 2)
		case "status":
			return one(&Expr{Kind: xCtStatus}, 2)
		case "mark":
			return one(&Expr{Kind: xCtMark}, 2)
		}
	case "fib":
		if (n1.s == "saddr" || n1.s == "daddr") && p.peekN(2).is("type") {
			return one(&Expr{Kind: xFib, Fib: n1.s}, 3)
		}
	case "numgen":
		return p.parseNumgen()
	}
	return nil, nil
}

func (p *ruleParser) parseNumgen() (*Expr, error) {
	p.next()
	mode := p.next()
	if !mode.is("random") {
		if mode.is("inc") {
			return nil, nil // numgen inc: not modelled
		}
		return nil, p.errf(mode, "numgen: expected random or inc, found %s", describe(mode))
	}
	if err := p.want("mod"); err != nil {
		return nil, err
	}
	m := p.next()
	mod, err := strconv.ParseUint(m.s, 0, 32)
	if err != nil || mod == 0 {
		return nil, p.errf(m, "numgen: bad modulus %s", describe(m))
	}
	x := &Expr{Kind: xNumgen, Mod: uint32(mod)}
	if p.peek().is("offset") {
		p.next()
		o := p.next()
		off, err := strconv.ParseUint(o.s, 0, 32)
		if err != nil {
			return nil, p.errf(o, "numgen: bad offset %s", describe(o))
		}
		x.Off = uint32(off)
	}
	return x, nil
}

// relOps are the relational operators; "!" is nft's negation for bitmask types (the
// bits are all clear: `ct state ! established`), where "!=" is plain inequality.
var relOps = map[string]string{"==": "==", "eq": "==", "!=": "!=", "ne": "!=", "!": "!", "<": "<", "lt": "<", ">": ">",
	"gt": ">", "<=": "<=", "le": "<=", ">=": ">=", "ge": ">="}

var binOps = map[string]string{"&": "&", "and": "&", "|": "|", "or": "|", "^": "^", "xor": "^"}

// parseMatchRest parses what follows an expression: a mask, vmap, or a relation and
// its right side.
func (p *ruleParser) parseMatchRest(x *Expr) (Stmt, error) {
	m := &Match{Left: x}
	lt := x.types()
	bitmask := len(lt) == 1 && lt[0].isBitmask()
	if op, ok := binOps[p.peek().s]; ok && !p.peek().quoted {
		p.next()
		if bitmask {
			n, err := p.parseBits(x, lt[0])
			if err != nil {
				return nil, err
			}
			m.Bin, m.BinVal = op, n
		} else {
			v := p.next()
			n, err := strconv.ParseUint(v.s, 0, 32)
			if err != nil {
				return nil, p.errf(v, "%s %s: bad value %s", x, op, describe(v))
			}
			m.Bin, m.BinVal = op, uint32(n)
		}
	}
	if p.peek().is("vmap") {
		p.next()
		v := &VmapStmt{Key: x}
		if strings.HasPrefix(p.peek().s, "@") {
			name, err := p.setName(p.next())
			if err != nil {
				return nil, err
			}
			v.SetRef = name
			return v, nil
		}
		s, err := p.parseAnon(x.types(), []dtype{tVerdict})
		if err != nil {
			return nil, err
		}
		v.Anon = s
		return v, nil
	}
	if op, ok := relOps[p.peek().s]; ok && !p.peek().quoted {
		p.next()
		m.Op = op
	}
	if m.Op == "!" && !bitmask {
		return nil, p.errf(p.toks[p.i-1], "%s: the ! operator is for bitmask types (ct state, ct status, tcp flags)", x)
	}
	start := p.i
	ts := x.types()
	if m.Bin != "" && !bitmask {
		ts = []dtype{tMark}
	}
	switch t := p.peek(); {
	case strings.HasPrefix(t.s, "@") && !t.quoted:
		name, err := p.setName(p.next())
		if err != nil {
			return nil, err
		}
		m.SetRef = name
	case t.is("{"):
		s, err := p.parseAnon(ts, nil)
		if err != nil {
			return nil, err
		}
		m.Anon = s
	default:
		if err := p.parseConst(m, ts); err != nil {
			return nil, err
		}
		if bitmask && m.Bin == "" && m.Op != "!" && p.peek().is("/") && !p.peek().quoted {
			// "tcp flags syn / syn,ack": the flags under the mask are these.
			p.next()
			n, err := p.parseBits(x, lt[0])
			if err != nil {
				return nil, err
			}
			m.Bin, m.BinVal = "&", n
			if m.Op == "" {
				m.Op = "=="
			}
		}
	}
	m.RHS = span(p.src, p.toks[start:p.i])
	return m, nil
}

// parseBits parses a bitmask operand: a bit's name or a number, names joined by "|"
// in parentheses ("(syn | ack)", "(syn|ack)") or by commas ("syn,ack").
func (p *ruleParser) parseBits(x *Expr, t dtype) (uint32, error) {
	first := p.next()
	text := first.s
	if strings.HasPrefix(text, "(") {
		for !strings.HasSuffix(text, ")") {
			if p.eof() || p.peek().nl {
				return 0, p.errf(first, "%s: missing \")\" after %s", x, text)
			}
			text += p.next().s
		}
		text = text[1 : len(text)-1]
	} else {
		for p.peek().is(",") {
			p.next()
			text += "," + p.next().s
		}
	}
	var v uint32
	for _, part := range strings.FieldsFunc(text, func(r rune) bool { return r == '|' || r == ',' }) {
		n, err := parseScalar(t, part)
		if err != nil {
			return 0, p.errf(first, "%s: %v", x, err)
		}
		v |= uint32(n)
	}
	if text == "" {
		return 0, p.errf(first, "%s: expected a value, found %s", x, describe(first))
	}
	return v, nil
}

// parseConst parses a constant right side: a value per component; bitmask types take
// a comma list of bits.
func (p *ruleParser) parseConst(m *Match, ts []dtype) error {
	for i, t := range ts {
		if i > 0 {
			if err := p.want("."); err != nil {
				return err
			}
		}
		v := p.next()
		if v.nl || (v.s == "" && !v.quoted) {
			return p.errf(v, "%s: expected a value, found end of rule", m.Left)
		}
		lo, hi, r, err := parseValue(t, v.s)
		if err != nil {
			return p.errf(v, "%s: %v", m.Left, err)
		}
		if t.isBitmask() {
			for p.peek().is(",") {
				p.next()
				w := p.next()
				l2, _, _, err := parseValue(t, w.s)
				if err != nil {
					return p.errf(w, "%s: %v", m.Left, err)
				}
				for j := range lo.b[:lo.n] {
					lo.b[j] |= l2.b[j]
				}
				hi = lo
			}
		}
		m.Lo.put(lo.bytes())
		m.Hi.put(hi.bytes())
		m.Range = m.Range || r
	}
	return nil
}

// parseAnon parses `{ elem, ... }` into an anonymous set (or map, with data types).
func (p *ruleParser) parseAnon(keyTypes, dataTypes []dtype) (*Set, error) {
	s := &Set{KeyTypes: keyTypes, DataTypes: dataTypes, IsMap: dataTypes != nil}
	if err := p.want("{"); err != nil {
		return nil, err
	}
	els, err := p.parseElems(s, false)
	if err != nil {
		return nil, err
	}
	for _, e := range els {
		s.insertElem(e)
	}
	s.normaliseAnon()
	return s, nil
}

// parseElems parses elements up to and including the closing brace. withOpts allows
// element options (timeout, expires, comment) as in named sets (anonymous ones too,
// nft accepts comments there).
func (p *ruleParser) parseElems(s *Set, natData bool) ([]*Element, error) {
	var out []*Element
	for {
		p.skipNL()
		if p.peek().is("}") {
			p.next()
			return out, nil
		}
		if p.eof() {
			return nil, p.errf(p.peek(), "missing \"}\" after elements")
		}
		el, err := p.parseElem(s, natData)
		if err != nil {
			return nil, err
		}
		out = append(out, el)
		p.skipNL()
		if p.peek().is(",") {
			p.next()
			continue
		}
		if !p.peek().is("}") {
			return nil, p.errf(p.peek(), "elements: expected \",\" or \"}\", found %s", describe(p.peek()))
		}
	}
}

func (p *ruleParser) parseElem(s *Set, natData bool) (*Element, error) {
	el := &Element{}
	start := p.i
	for i, t := range s.KeyTypes {
		if i > 0 {
			if err := p.want("."); err != nil {
				return nil, err
			}
		}
		v := p.next()
		if v.nl || v.s == "" && !v.quoted || v.is("}") || v.is(",") {
			return nil, p.errf(v, "element: expected a value, found %s", describe(v))
		}
		lo, hi, r, err := parseValue(t, v.s)
		if err != nil {
			return nil, p.errf(v, "element %s: %v", v.s, err)
		}
		el.Lo.put(lo.bytes())
		el.Hi.put(hi.bytes())
		el.Range = el.Range || r
	}
	el.Text = span(p.src, p.toks[start:p.i])
	if err := p.parseElemOpts(el); err != nil {
		return nil, err
	}
	if !s.IsMap {
		return el, nil
	}
	if err := p.want(":"); err != nil {
		return nil, err
	}
	vstart := p.i
	mv := &MapValue{}
	if len(s.DataTypes) == 1 && s.DataTypes[0] == tVerdict {
		t := p.next()
		switch t.s {
		case "accept", "drop", "continue", "return":
			mv.Verdict = &VerdictStmt{Kind: t.s}
		case "jump", "goto":
			c := p.next()
			mv.Verdict = &VerdictStmt{Kind: t.s, Chain: c.s}
		default:
			return nil, p.errf(t, "element %s: expected a verdict, found %s", el.Text, describe(t))
		}
	} else {
		for i, t := range s.DataTypes {
			if i > 0 {
				if natData && !p.peek().is(".") {
					break
				}
				if err := p.want("."); err != nil {
					return nil, err
				}
			}
			v := p.next()
			lo, _, _, err := parseValue(t, v.s)
			if err != nil {
				return nil, p.errf(v, "element %s: data: %v", el.Text, err)
			}
			mv.Data.put(lo.bytes())
		}
	}
	mv.Text = span(p.src, p.toks[vstart:p.i])
	el.Value = mv
	return el, nil
}

func (p *ruleParser) parseElemOpts(el *Element) error {
	for {
		switch t := p.peek(); {
		case t.is("timeout"), t.is("expires"):
			p.next()
			v := p.next()
			d, err := parseDuration(v.s)
			if err != nil {
				return p.errf(v, "%v", err)
			}
			if t.s == "timeout" {
				el.Timeout = d
			} else {
				el.Expires = d
			}
		case t.is("comment"):
			p.next()
			v := p.next()
			if !v.quoted {
				return p.errf(v, "comment: expected a quoted string, found %s", describe(v))
			}
			el.Comment = v.s
		case t.is("counter"):
			p.next()
			if p.peek().is("packets") {
				if p.i+4 > len(p.toks) {
					return p.errf(t, "counter: expected packets N bytes N")
				}
				p.i += 4
			}
		default:
			return nil
		}
	}
}

// parseNAT parses dnat/snat/masquerade/redirect.
func (p *ruleParser) parseNAT() (Stmt, error) {
	start := p.i
	kw := p.next()
	n := &NATStmt{}
	switch kw.s {
	case "dnat":
		n.Kind = netfilter.DNAT
	case "snat":
		n.Kind = netfilter.SNAT
	case "masquerade":
		n.Kind = netfilter.Masquerade
	case "redirect":
		n.Kind = netfilter.Redirect
	}
	if p.peek().is("ip") || p.peek().is("ip6") {
		n.Fam = p.next().s
	}
	if p.peek().is("addr") {
		p.next()
		if err := p.want("."); err != nil {
			return nil, err
		}
		if err := p.want("port"); err != nil {
			return nil, err
		}
		n.AddrPort = true
	}
	addrT := tIPv4
	if n.Fam == "ip6" || (n.Fam == "" && p.fam == FamilyIP6) {
		addrT = tIPv6
	}
	if p.peek().is("to") {
		p.next()
		if err := p.parseNATTarget(n, addrT); err != nil {
			return nil, err
		}
	}
	p.parseNATFlags(n)
	n.Text = span(p.src, p.toks[start:p.i])
	n.addrTypes = addrT
	if n.mapsPorts() && !p.hasProtoMatch() {
		return nil, p.errf(kw, "%s: transport protocol mapping is only valid after transport protocol match (add e.g. meta l4proto tcp before it)", kw.s)
	}
	return n, nil
}

func (p *ruleParser) parseNATTarget(n *NATStmt, addrT dtype) error {
	x, err := p.parseExpr()
	if err != nil {
		return err
	}
	if x != nil {
		if err := p.want("map"); err != nil {
			return err
		}
		n.MapKey = x
		if strings.HasPrefix(p.peek().s, "@") {
			name, err := p.setName(p.next())
			if err != nil {
				return err
			}
			n.MapRef = name
			return nil
		}
		s := &Set{KeyTypes: x.types(), DataTypes: []dtype{addrT, tService}, IsMap: true}
		if err := p.want("{"); err != nil {
			return err
		}
		els, err := p.parseElems(s, true)
		if err != nil {
			return err
		}
		for _, e := range els {
			s.insertElem(e)
		}
		n.MapAnon = s
		return nil
	}
	t := p.next()
	return p.parseNATAddr(n, addrT, t)
}

// parseNATAddr parses "A", "A:P", "[A6]:P", ":P", "A-B:P-Q", "P" (redirect).
func (p *ruleParser) parseNATAddr(n *NATStmt, addrT dtype, t token) error {
	s := t.s
	addr, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		i := strings.Index(s, "]")
		if i < 0 {
			return p.errf(t, "bad address %q", s)
		}
		addr, port = s[1:i], strings.TrimPrefix(s[i+1:], ":")
		addrT = tIPv6
	case addrT == tIPv6 || strings.Count(s, ":") > 1: // an IPv6 address ("::" too), no port
		addrT = tIPv6
	case strings.HasPrefix(s, ":"):
		addr, port = "", s[1:]
	default:
		if a, b, ok := strings.Cut(s, ":"); ok {
			addr, port = a, b
		}
	}
	if n.Kind == netfilter.Redirect && addr != "" && port == "" {
		addr, port = "", addr
	}
	if addr != "" {
		lo, hi, _, err := parseAddrValue(addrT, addr)
		if err != nil {
			return p.errf(t, "%s to: %v", natWord(n.Kind), err)
		}
		n.Addr, n.AddrMax = lo, hi
	}
	if port != "" {
		a, b, _ := strings.Cut(port, "-")
		lo, err := strconv.ParseUint(a, 10, 16)
		hi := lo
		if err == nil && b != "" {
			hi, err = strconv.ParseUint(b, 10, 16)
		}
		if err != nil {
			return p.errf(t, "%s to: bad port %q", natWord(n.Kind), port)
		}
		n.Port, n.PortMax = uint16(lo), uint16(hi)
	}
	return nil
}

func natWord(k netfilter.NATKind) string { return strings.ToLower(k.String()) }

func (p *ruleParser) parseNATFlags(n *NATStmt) {
	isFlag := func(t token) bool { return t.is("random") || t.is("fully-random") || t.is("persistent") }
	for {
		t := p.peek()
		switch {
		case isFlag(t):
			n.Flags = append(n.Flags, t.s)
			p.next()
			if p.peek().is(",") && isFlag(p.peekN(1)) { // a comma only between flags
				p.next()
			}
		case t.is("to") && n.Kind == netfilter.Masquerade:
			p.next()
			_ = p.parseNATAddr(n, tIPv4, p.next())
		default:
			return
		}
	}
}

// addrOf returns the address a key's first bytes hold.
func addrOf(b []byte) netip.Addr {
	a, _ := netip.AddrFromSlice(b)
	return a
}

// mapsPorts reports whether the NAT statement translates ports.
func (n *NATStmt) mapsPorts() bool {
	if n.Port != 0 || n.AddrPort {
		return true
	}
	if n.MapAnon != nil {
		w := n.addrTypes.width()
		for _, e := range n.MapAnon.live() {
			if e.Value != nil && int(e.Value.Data.n) > w {
				return true
			}
		}
	}
	return false
}

// setName takes the name of an @set reference.
func (p *ruleParser) setName(t token) (string, error) {
	name := strings.TrimPrefix(t.s, "@")
	if t.quoted || !strings.HasPrefix(t.s, "@") || name == "" || strings.ContainsAny(name, "@$") {
		return "", p.errf(t, "expected @SETNAME, found %s", describe(t))
	}
	return name, nil
}
