package emulator

import (
	"fmt"
	"strconv"
	"strings"
)

// chainDecl handles `chain NAME [{ body }]` (block syntax, or add/create chain).
func (p *parser) chainDecl(t *Table, toks []token, kw token, create bool) error {
	name, rest, err := p.name(toks, "chain", kw)
	if err != nil {
		return err
	}
	c := t.chain(name)
	if c != nil && create {
		return p.errf(kw, "chain %s already exists in table %s %s", name, t.Family, t.Name)
	}
	isNew := c == nil
	if isNew {
		c = &Chain{Name: name, Line: kw.line}
	} else {
		c = p.x.mutChain(t, c)
	}
	if len(rest) > 0 {
		if !rest[0].is("{") {
			return p.errf(rest[0], "chain %s: expected \"{\", found %s", name, describe(rest[0]))
		}
		body, _, err := p.braceBody(rest, 0)
		if err != nil {
			return err
		}
		if err := p.chainBody(t, c, body, isNew); err != nil {
			return err
		}
	}
	if isNew {
		*p.seq++
		c.seq = *p.seq
		t.Chains = append(t.Chains, c)
		t.chainIdx[name] = c
		p.x.owned[c] = true
	}
	return nil
}

func (p *parser) chainBody(t *Table, c *Chain, body []token, isNew bool) error {
	for _, line := range splitLines(body) {
		line, h := splitHandle(line)
		if len(line) == 0 {
			if h > 0 {
				c.Handle = h
			}
			continue
		}
		w := line[0]
		switch {
		case w.is("type"):
			if err := p.chainHeader(t, c, line, isNew); err != nil {
				return err
			}
		case w.is("policy"):
			if len(line) != 2 || (line[1].s != "accept" && line[1].s != "drop") {
				return p.errf(w, "chain %s: policy: expected accept or drop", c.Name)
			}
			if !c.IsBase() {
				return p.errf(w, "chain %s: a policy needs a base chain (type ... hook ...)", c.Name)
			}
			c.Policy = line[1].s
		case w.is("comment"):
			if len(line) < 2 || !line[1].quoted {
				return p.errf(w, "chain %s: comment: expected a quoted string", c.Name)
			}
			c.Comment = line[1].s
		case w.is("devices"):
		default:
			r, err := p.parseRule(t, c, line, h)
			if err != nil {
				return err
			}
			c.Rules = append(c.Rules, r)
		}
	}
	return nil
}

// chainHeader parses `type T hook H [device D] priority P`.
func (p *parser) chainHeader(t *Table, c *Chain, line []token, isNew bool) error {
	var typ, hook, dev, prio string
	var prioToks []token
	for i := 0; i < len(line); i++ {
		w := line[i]
		if i+1 >= len(line) {
			return p.errf(w, "chain %s: %s: missing value", c.Name, describe(w))
		}
		switch w.s {
		case "type":
			typ = line[i+1].s
			i++
		case "hook":
			hook = line[i+1].s
			i++
		case "device":
			dev = line[i+1].s
			i++
		case "priority":
			prioToks = line[i+1:]
			i = len(line)
		default:
			return p.errf(w, "chain %s: unexpected %s in the chain's type line", c.Name, describe(w))
		}
	}
	switch typ {
	case "filter", "nat", "route":
	default:
		return p.errf(line[0], "chain %s: unknown chain type %q (want filter, nat or route)", c.Name, typ)
	}
	if _, ok := hookOf(hook); !ok && t.Family <= FamilyInet && hook != "ingress" && hook != "egress" {
		return p.errf(line[0], "chain %s: unknown hook %q", c.Name, hook)
	}
	if len(prioToks) == 0 {
		return p.errf(line[0], "chain %s: missing priority", c.Name)
	}
	n, err := parsePriority(t.Family, prioToks)
	if err != nil {
		return p.errf(prioToks[0], "chain %s: %v", c.Name, err)
	}
	var parts []string
	for _, pt := range prioToks {
		parts = append(parts, pt.s)
	}
	prio = strings.Join(parts, " ")
	if !isNew && c.IsBase() && (c.Type != typ || c.Hook != hook || c.Priority != n) {
		return p.errf(line[0], "chain %s already exists as type %s hook %s priority %d", c.Name, c.Type, c.Hook, c.Priority)
	}
	if !isNew && !c.IsBase() {
		return p.errf(line[0], "chain %s already exists as a regular chain", c.Name)
	}
	c.Type, c.Hook, c.Device, c.Priority, c.PrioText = typ, hook, dev, n, prio
	if c.Policy == "" {
		c.Policy = "accept"
	}
	return nil
}

// stdPrios are the symbolic priorities of the ip, ip6 and inet families.
var stdPrios = map[string]int{"raw": -300, "mangle": -150, "dstnat": -100, "filter": 0, "security": 50, "srcnat": 100}

// bridgePrios are the bridge family's.
var bridgePrios = map[string]int{"dstnat": -300, "filter": -200, "out": 100, "srcnat": 300}

// parsePriority parses "N", "NAME", "NAME + N", "NAME - N".
func parsePriority(f Family, toks []token) (int, error) {
	s := strings.Join(tokStrings(toks), " ")
	if n, err := strconv.Atoi(s); err == nil {
		return n, nil
	}
	table := stdPrios
	if f == FamilyBridge {
		table = bridgePrios
	}
	base, ok := table[toks[0].s]
	if !ok {
		return 0, errorf("bad priority %q", s)
	}
	switch {
	case len(toks) == 1:
		return base, nil
	case len(toks) == 3 && (toks[1].s == "+" || toks[1].s == "-"):
		n, err := strconv.Atoi(toks[2].s)
		if err != nil {
			return 0, errorf("bad priority %q", s)
		}
		if toks[1].s == "-" {
			n = -n
		}
		return base + n, nil
	}
	return 0, errorf("bad priority %q", s)
}

// parseRule parses one rule of chain c.
func (p *parser) parseRule(t *Table, c *Chain, line []token, handle int) (*Rule, error) {
	line = stripNL(line)
	r := &Rule{Handle: handle, Line: line[0].line, Text: span(p.src, line)}
	rp := &ruleParser{toks: line, src: p.src, file: p.file, fam: t.Family, rule: r}
	st, err := rp.parseRuleStmts()
	if err != nil {
		return nil, err
	}
	r.Stmts = st
	if r.Handle > t.maxHandle {
		t.maxHandle = r.Handle
	}
	return r, nil
}

// setDecl handles `set|map NAME [{ body }]`.
func (p *parser) setDecl(t *Table, toks []token, kw token, create bool) error {
	name, rest, err := p.name(toks, kw.s, kw)
	if err != nil {
		return err
	}
	s := &Set{Name: name, IsMap: kw.s == "map", Line: kw.line}
	if len(rest) > 0 {
		if !rest[0].is("{") {
			return p.errf(rest[0], "%s %s: expected \"{\", found %s", kw.s, name, describe(rest[0]))
		}
		body, _, err := p.braceBody(rest, 0)
		if err != nil {
			return err
		}
		if err := p.setBody(t, s, body); err != nil {
			return err
		}
	}
	if len(s.KeyTypes) == 0 {
		return p.errf(kw, "%s %s: missing type", kw.s, name)
	}
	if s.IsMap && len(s.DataTypes) == 0 {
		return p.errf(kw, "map %s: missing data type (\"type KEY : DATA\")", name)
	}
	if !s.IsMap && len(s.DataTypes) > 0 {
		return p.errf(kw, "set %s: a set has no data type (declare a map)", name)
	}
	old := t.set(name)
	if old == nil {
		t.Sets = append(t.Sets, s)
		t.setIdx[name] = s
		p.x.owned[s] = true
		return nil
	}
	if create {
		return p.errf(kw, "%s %s already exists in table %s %s", kw.s, name, t.Family, t.Name)
	}
	if old.IsMap != s.IsMap || old.typeString() != s.typeString() || strings.Join(old.Flags, ",") != strings.Join(s.Flags, ",") && len(s.Flags) > 0 {
		return p.errf(kw, "%s %s already exists with a different definition (type %s)", kw.s, name, old.typeString())
	}
	if len(s.order) > 0 {
		m := p.x.mutSet(t, old)
		for _, e := range s.live() {
			if err := addElem(m, e); err != nil {
				return p.errf(kw, "%s %s: %v", kw.s, name, err)
			}
		}
	}
	return nil
}

func (p *parser) setBody(t *Table, s *Set, body []token) error {
	for _, line := range splitLines(body) {
		line, h := splitHandle(line)
		if len(line) == 0 {
			if h > 0 {
				s.Handle = h
			}
			continue
		}
		if err := p.setLine(t, s, line); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) setLine(t *Table, s *Set, line []token) error {
	w := line[0]
	arg := func() (token, error) {
		if len(line) < 2 {
			return token{}, p.errf(w, "%s %s: %s: missing value", kindWord(s), s.Name, w.s)
		}
		return line[1], nil
	}
	switch w.s {
	case "type", "typeof":
		return p.setType(s, line)
	case "flags":
		s.Flags = listWords(line[1:])
	case "timeout", "gc-interval":
		v, err := arg()
		if err != nil {
			return err
		}
		d, err := parseDuration(v.s)
		if err != nil {
			return p.errf(v, "%s %s: %v", kindWord(s), s.Name, err)
		}
		if w.s == "timeout" {
			s.Timeout = d
		} else {
			s.GCInt = d
		}
	case "size":
		v, err := arg()
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(v.s)
		if err != nil {
			return p.errf(v, "%s %s: bad size %q", kindWord(s), s.Name, v.s)
		}
		s.Size = n
	case "comment":
		v, err := arg()
		if err != nil || !v.quoted {
			return p.errf(w, "%s %s: comment: expected a quoted string", kindWord(s), s.Name)
		}
		s.Comment = v.s
	case "policy":
		v, err := arg()
		if err != nil {
			return err
		}
		s.Policy = v.s
	case "auto-merge":
		s.AutoMerge = true
	case "elements":
		if len(s.KeyTypes) == 0 {
			return p.errf(w, "%s %s: elements before the type", kindWord(s), s.Name)
		}
		if len(line) < 3 || !line[1].is("=") || !line[2].is("{") {
			return p.errf(w, "%s %s: expected \"elements = { ... }\"", kindWord(s), s.Name)
		}
		rp := &ruleParser{toks: line[3:], src: p.src, file: p.file, fam: FamilyIP}
		els, err := rp.parseElems(s, false)
		if err != nil {
			return err
		}
		for _, e := range els {
			if err := addElem(s, e); err != nil {
				return p.errf(w, "%s %s: %v", kindWord(s), s.Name, err)
			}
		}
	case "counter":
	default:
		return p.errf(w, "%s %s: unexpected %s", kindWord(s), s.Name, describe(w))
	}
	return nil
}

func kindWord(s *Set) string {
	if s.IsMap {
		return "map"
	}
	return "set"
}

// setType parses `type K [. K2] [: D]` or `typeof EXPR [: EXPR]`.
func (p *parser) setType(s *Set, line []token) error {
	w := line[0]
	rest := line[1:]
	colon := len(rest)
	for i, t := range rest {
		if t.is(":") {
			colon = i
		}
	}
	keyToks, dataToks := rest[:colon], []token(nil)
	if colon < len(rest) {
		dataToks = rest[colon+1:]
	}
	parse := func(toks []token) ([]dtype, string, error) {
		if len(toks) == 0 {
			return nil, "", p.errf(w, "%s %s: empty type", kindWord(s), s.Name)
		}
		for _, t := range toks {
			if t.quoted || t.s == "" || t.is("{") || t.is("}") || t.is(",") {
				return nil, "", p.errf(t, "%s %s: expected a type, found %s", kindWord(s), s.Name, describe(t))
			}
		}
		text := strings.Join(tokStrings(toks), " ")
		if w.s == "typeof" {
			rp := &ruleParser{toks: toks, src: p.src, file: p.file}
			x, err := rp.parseExpr()
			if err != nil {
				return nil, "", err
			}
			if x == nil || !rp.eof() {
				if len(toks) == 1 && toks[0].s == "verdict" {
					return []dtype{tVerdict}, text, nil
				}
				return []dtype{tOther}, text, nil
			}
			return x.types(), text, nil
		}
		var ts []dtype
		for i, t := range toks {
			if i%2 == 1 {
				if !t.is(".") {
					return nil, "", p.errf(t, "%s %s: expected \".\" between types, found %s", kindWord(s), s.Name, describe(t))
				}
				continue
			}
			dt, ok := dtypeNames[t.s]
			if !ok {
				dt = tOther
			}
			ts = append(ts, dt)
		}
		return ts, text, nil
	}
	var err error
	if s.KeyTypes, s.KeyText, err = parse(keyToks); err != nil {
		return err
	}
	s.Typeof = w.s == "typeof"
	if dataToks != nil {
		if s.DataTypes, s.DataText, err = parse(dataToks); err != nil {
			return err
		}
	}
	w2 := 0
	for _, t := range s.KeyTypes {
		w2 += t.width()
	}
	if w2 > maxKey {
		return p.errf(w, "%s %s: key too long", kindWord(s), s.Name)
	}
	return nil
}

// elementsCmd handles add/create/delete element: `[family] TABLE SET { elements }`.
func (p *parser) elementsCmd(verb token, toks []token) error {
	fam, toks := famName(toks)
	tname, toks, err := p.name(toks, "table", verb)
	if err != nil {
		return err
	}
	sname, toks, err := p.name(toks, "set", verb)
	if err != nil {
		return err
	}
	t := p.x.rs.table(fam, tname)
	if t == nil {
		return p.errf(verb, "%s element: no table %s %s", verb.s, fam, tname)
	}
	t = p.x.mutTable(t)
	s := t.set(sname)
	if s == nil {
		return p.errf(verb, "%s element: no set or map %s in table %s %s", verb.s, sname, fam, tname)
	}
	if len(toks) == 0 || !toks[0].is("{") {
		return p.errf(verb, "%s element %s: expected \"{ elements }\"", verb.s, sname)
	}
	probe := *s
	if verb.s == "delete" || verb.s == "destroy" {
		probe.IsMap = false
	}
	rp := &ruleParser{toks: toks[1:], src: p.src, file: p.file, fam: fam}
	els, err := rp.parseElems(&probe, false)
	if err != nil {
		return err
	}
	s = p.x.mutSet(t, s)
	for _, e := range els {
		switch verb.s {
		case "delete", "destroy":
			if !s.deleteElem(e) && verb.s == "delete" {
				return p.errf(verb, "delete element: %s is not in %s %s", e.Text, kindWord(s), sname)
			}
		case "create":
			if s.findExact(e) != nil {
				return p.errf(verb, "create element: %s already in %s %s", e.Text, kindWord(s), sname)
			}
			s.insertElem(e)
		default:
			if v := e.Value; v != nil && v.Verdict != nil && v.Verdict.Chain != "" && t.chain(v.Verdict.Chain) == nil {
				return p.errf(verb, "add element %s: %s: %s to missing chain %q (it must exist before the element is added)", sname, e.Text, v.Verdict.Kind, v.Verdict.Chain)
			}
			if e.Timeout == 0 && s.Timeout > 0 && s.HasFlag("timeout") {
				e.Timeout = s.Timeout
			}
			if err := addElem(s, e); err != nil {
				return p.errf(verb, "add element %s: %v", sname, err)
			}
		}
	}
	return nil
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// addElem adds an element as the kernel's `add element` does: an element already
// there is left alone, but a map element whose key is there with another value is
// refused (File exists): kube-proxy deletes it first.
func addElem(s *Set, e *Element) error {
	if old := s.findExact(e); old != nil {
		if s.IsMap && !sameValue(old.Value, e.Value) {
			return fmt.Errorf("element %s already exists with another value (%s; delete it first)", e.Text, old.Value.Text)
		}
		return nil
	}
	if s.HasFlag("interval") && len(s.KeyTypes) == 1 {
		if s.AutoMerge && !s.IsMap {
			s.mergeInterval(e)
			return nil
		}
		if o := s.overlaps(e, false); o != nil {
			return fmt.Errorf("element %s: conflicting intervals specified (it overlaps %s)", e.Text, o.Text)
		}
	}
	s.insertElem(e)
	return nil
}

func sameValue(a, b *MapValue) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Verdict != nil || b.Verdict != nil {
		return a.Verdict != nil && b.Verdict != nil && a.Verdict.Kind == b.Verdict.Kind && a.Verdict.Chain == b.Verdict.Chain
	}
	return a.Data == b.Data
}
