package emulator

import (
	"fmt"
	"strconv"
)

// command applies one `nft -f` command line.
func (p *parser) command(line []token) error {
	verb := line[0]
	if len(line) < 2 {
		return p.errf(verb, "%s: expected what to %s (table, chain, rule, set, map, element)", verb.s, verb.s)
	}
	obj, rest := line[1], line[2:]
	switch obj.s {
	case "ruleset":
		if verb.s != "flush" {
			return p.errf(obj, "%s ruleset: only flush ruleset is supported", verb.s)
		}
		fam, ok := Family(0), false
		if len(rest) > 0 {
			fam, ok = ParseFamily(rest[0].s)
		}
		keep := p.x.rs.Tables[:0:0]
		for _, t := range p.x.rs.Tables {
			if ok && t.Family != fam {
				keep = append(keep, t)
			}
		}
		p.x.rs.Tables = keep
		return nil
	case "table":
		return p.tableCmd(verb, rest)
	case "chain":
		return p.chainCmd(verb, rest)
	case "rule":
		return p.ruleCmd(verb, rest)
	case "set", "map":
		return p.setCmd(verb, obj, rest)
	case "element":
		if verb.s == "flush" || verb.s == "insert" || verb.s == "replace" {
			return p.errf(obj, "%s element is not an nft command", verb.s)
		}
		return p.elementsCmd(verb, rest)
	case "counter":
		return p.counterCmd(verb, rest)
	}
	return p.errf(obj, "%s %s: not supported (want table, chain, rule, set, map, element, counter or ruleset)", verb.s, obj.s)
}

// lookupTable finds [family] TABLE for a command; the transaction's copy.
func (p *parser) lookupTable(verb token, toks []token) (*Table, []token, error) {
	fam, toks := famName(toks)
	name, rest, err := p.name(toks, "table", verb)
	if err != nil {
		return nil, nil, err
	}
	t := p.x.rs.table(fam, name)
	if t == nil {
		return nil, nil, p.errf(verb, "%s: no table %s %s", verb.s, fam, name)
	}
	return p.x.mutTable(t), rest, nil
}

func (p *parser) tableCmd(verb token, toks []token) error {
	switch verb.s {
	case "add":
		return p.tableBlock(toks, true)
	case "create":
		fam, rest := famName(toks)
		if len(rest) > 0 && p.x.rs.table(fam, rest[0].s) != nil {
			return p.errf(verb, "create table: table %s %s already exists", fam, rest[0].s)
		}
		return p.tableBlock(toks, true)
	case "delete", "destroy":
		fam, rest := famName(toks)
		if len(rest) == 0 {
			return p.errf(verb, "%s table: expected a table name", verb.s)
		}
		t := p.x.rs.table(fam, rest[0].s)
		if t == nil {
			if verb.s == "destroy" {
				return nil
			}
			return p.errf(rest[0], "delete table: no table %s %s", fam, rest[0].s)
		}
		p.x.deleteTable(t)
		return nil
	case "flush":
		t, _, err := p.lookupTable(verb, toks)
		if err != nil {
			return err
		}
		for i, c := range t.Chains {
			c = p.x.mutChain(t, c)
			c.Rules = nil
			t.Chains[i] = c
		}
		for _, s := range t.Sets {
			p.x.mutSet(t, s).flush()
		}
		return nil
	}
	return p.errf(verb, "%s table: not supported", verb.s)
}

func (p *parser) chainCmd(verb token, toks []token) error {
	t, rest, err := p.lookupTable(verb, toks)
	if err != nil {
		return err
	}
	switch verb.s {
	case "add", "create":
		return p.chainDecl(t, rest, verb, verb.s == "create")
	case "flush", "delete", "destroy":
		name, _, err := p.name(rest, "chain", verb)
		if err != nil {
			return err
		}
		c := t.chain(name)
		if c == nil {
			if verb.s == "destroy" {
				return nil
			}
			return p.errf(verb, "%s chain: no chain %s in table %s %s", verb.s, name, t.Family, t.Name)
		}
		if verb.s == "flush" {
			p.x.mutChain(t, c).Rules = nil
			return nil
		}
		p.x.noteDeleted(t, "chain", name, verb.line)
		for i, cc := range t.Chains {
			if cc == c {
				t.Chains = append(t.Chains[:i:i], t.Chains[i+1:]...)
				break
			}
		}
		delete(t.chainIdx, name)
		return nil
	}
	return p.errf(verb, "%s chain: not supported", verb.s)
}

func (p *parser) setCmd(verb, obj token, toks []token) error {
	t, rest, err := p.lookupTable(verb, toks)
	if err != nil {
		return err
	}
	switch verb.s {
	case "add", "create":
		return p.setDecl(t, rest, obj, verb.s == "create")
	case "flush", "delete", "destroy":
		name, _, err := p.name(rest, obj.s, verb)
		if err != nil {
			return err
		}
		s := t.set(name)
		if s == nil {
			if verb.s == "destroy" {
				return nil
			}
			return p.errf(verb, "%s %s: no %s %s in table %s %s", verb.s, obj.s, obj.s, name, t.Family, t.Name)
		}
		if verb.s == "flush" {
			p.x.mutSet(t, s).flush()
			return nil
		}
		p.x.noteDeleted(t, obj.s, name, verb.line)
		for i, ss := range t.Sets {
			if ss == s {
				t.Sets = append(t.Sets[:i:i], t.Sets[i+1:]...)
				break
			}
		}
		delete(t.setIdx, name)
		return nil
	}
	return p.errf(verb, "%s %s: not supported", verb.s, obj.s)
}

func (p *parser) counterCmd(verb token, toks []token) error {
	t, rest, err := p.lookupTable(verb, toks)
	if err != nil {
		return err
	}
	switch verb.s {
	case "add", "create":
		return p.counterDecl(t, rest, verb, verb.s == "create")
	case "delete", "destroy", "reset":
		name, _, err := p.name(rest, "counter", verb)
		if err != nil {
			return err
		}
		for i, o := range t.Objects {
			if o.Kind == "counter" && o.Name == name {
				t.Objects = append(t.Objects[:i:i], t.Objects[i+1:]...)
				return nil
			}
		}
		if verb.s == "destroy" {
			return nil
		}
		return p.errf(verb, "delete counter: no counter %s", name)
	}
	return p.errf(verb, "%s counter: not supported", verb.s)
}

// ruleCmd handles add/insert/replace/delete rule.
func (p *parser) ruleCmd(verb token, toks []token) error {
	t, rest, err := p.lookupTable(verb, toks)
	if err != nil {
		return err
	}
	cname, rest, err := p.name(rest, "chain", verb)
	if err != nil {
		return err
	}
	c := t.chain(cname)
	if c == nil {
		return p.errf(verb, "%s rule: no chain %s in table %s %s", verb.s, cname, t.Family, t.Name)
	}
	c = p.x.mutChain(t, c)
	pos, posKind := -1, ""
	if len(rest) >= 2 && (rest[0].is("position") || rest[0].is("handle") || rest[0].is("index")) {
		n, err := strconv.Atoi(rest[1].s)
		if err != nil {
			return p.errf(rest[1], "%s rule: bad %s %q", verb.s, rest[0].s, rest[1].s)
		}
		pos, posKind, rest = n, rest[0].s, rest[2:]
	}
	at := -1 // index of the referenced rule
	if pos >= 0 {
		if posKind == "index" {
			at = pos
			if at >= len(c.Rules) {
				return p.errf(verb, "%s rule: index %d out of range in chain %s", verb.s, pos, cname)
			}
		} else {
			for i, r := range c.Rules {
				if r.Handle == pos {
					at = i
				}
			}
			if at < 0 {
				return p.errf(verb, "%s rule: no rule with handle %d in chain %s", verb.s, pos, cname)
			}
		}
	}
	switch verb.s {
	case "delete", "destroy":
		if at < 0 {
			return p.errf(verb, "delete rule: needs handle N")
		}
		c.Rules = append(c.Rules[:at:at], c.Rules[at+1:]...)
		return nil
	}
	if len(rest) == 0 {
		return p.errf(verb, "%s rule: no statements", verb.s)
	}
	r, err := p.parseRule(t, c, rest, 0)
	if err != nil {
		return err
	}
	// As the kernel does, a rule may refer only to chains and sets that exist at this
	// point of the transaction.
	if err := p.x.checkRule(t, c, r); err != nil {
		return fmt.Errorf("%w (it must exist before the rule is added)", err)
	}
	t.maxHandle++
	r.Handle = t.maxHandle
	switch {
	case verb.s == "replace":
		if at < 0 {
			return p.errf(verb, "replace rule: needs handle N")
		}
		r.Handle = c.Rules[at].Handle
		c.Rules[at] = r
	case verb.s == "insert" && at < 0:
		c.Rules = append([]*Rule{r}, c.Rules...)
	case verb.s == "insert":
		c.Rules = append(c.Rules[:at:at], append([]*Rule{r}, c.Rules[at:]...)...)
	case at < 0:
		c.Rules = append(c.Rules, r)
	default:
		c.Rules = append(c.Rules[:at+1:at+1], append([]*Rule{r}, c.Rules[at+1:]...)...)
	}
	return nil
}
