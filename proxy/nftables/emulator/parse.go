package emulator

import (
	"fmt"
	"strconv"
	"strings"
)

// parser applies nft text (a listing or an `nft -f` script) to a transaction.
type parser struct {
	src  string
	file string
	x    *txn
	seq  *int // chain registration counter (the emulator's)
}

func (p *parser) errf(t token, format string, args ...any) error {
	return &parseError{p.file, t.line, fmt.Sprintf(format, args...)}
}

// splitLines splits tokens at newlines and semicolons outside braces; empty lines are
// dropped.
func splitLines(toks []token) [][]token {
	var out [][]token
	depth, start := 0, 0
	flush := func(end int) {
		if line := toks[start:end]; len(line) > 0 {
			out = append(out, line)
		}
	}
	for i, t := range toks {
		switch {
		case t.is("{"):
			depth++
		case t.is("}"):
			depth--
		case (t.nl || t.is(";")) && depth <= 0:
			flush(i)
			start = i + 1
		}
	}
	flush(len(toks))
	return out
}

// braceBody returns the tokens between toks[i] (a "{") and its matching "}", and the
// index after the "}".
func (p *parser) braceBody(toks []token, i int) ([]token, int, error) {
	depth := 0
	for j := i; j < len(toks); j++ {
		switch {
		case toks[j].is("{"):
			depth++
		case toks[j].is("}"):
			depth--
			if depth == 0 {
				return toks[i+1 : j], j + 1, nil
			}
		}
	}
	return nil, 0, p.errf(toks[i], "missing \"}\" for the \"{\" here")
}

// stripNL removes newline tokens (a line that spans lines inside braces).
func stripNL(toks []token) []token {
	out := toks[:0:0]
	for _, t := range toks {
		if !t.nl {
			out = append(out, t)
		}
	}
	return out
}

// splitHandle removes a trailing "# handle N" and returns it.
func splitHandle(line []token) ([]token, int) {
	h := 0
	for len(line) >= 2 && line[len(line)-1].hc && line[len(line)-2].hc {
		h, _ = strconv.Atoi(line[len(line)-1].s)
		line = line[:len(line)-2]
	}
	return line, h
}

// run parses and applies the whole text.
func (p *parser) run() error {
	toks, err := lex(p.src, p.file)
	if err != nil {
		return err
	}
	for _, line := range splitLines(toks) {
		line, _ = splitHandle(line)
		if len(line) == 0 {
			continue
		}
		if err := p.top(line); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) top(line []token) error {
	switch w := line[0]; {
	case w.is("table"):
		return p.tableBlock(line[1:], true)
	case w.is("add"), w.is("create"), w.is("insert"), w.is("replace"), w.is("delete"), w.is("destroy"), w.is("flush"):
		return p.command(line)
	default:
		return p.errf(w, "expected table, add, create, insert, replace, delete or flush, found %s", describe(w))
	}
}

// famName parses an optional family at toks[0]; ip when absent.
func famName(toks []token) (Family, []token) {
	if len(toks) > 0 && !toks[0].quoted {
		if f, ok := ParseFamily(toks[0].s); ok {
			return f, toks[1:]
		}
	}
	return FamilyIP, toks
}

// name takes a name token.
func (p *parser) name(toks []token, what string, after token) (string, []token, error) {
	if len(toks) == 0 || toks[0].is("{") || toks[0].is("}") || toks[0].nl {
		t := after
		if len(toks) > 0 {
			t = toks[0]
		}
		return "", nil, p.errf(t, "expected a %s name after %q", what, after.s)
	}
	if n := toks[0].s; n == "" || strings.ContainsAny(n, " \t{};,#\"\\") || strings.HasPrefix(n, "@") || strings.HasPrefix(n, "$") ||
		strings.ContainsFunc(n, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", nil, p.errf(toks[0], "bad %s name %q", what, n)
	}
	if len(toks[0].s) > 255 {
		return "", nil, p.errf(toks[0], "%s name too long (%d bytes; the kernel takes at most 255)", what, len(toks[0].s))
	}
	return toks[0].s, toks[1:], nil
}

// tableBlock handles `table [family] NAME [{ body }]`: creates the table if needed and
// applies the body (block syntax adds).
func (p *parser) tableBlock(toks []token, create bool) error {
	kw := token{s: "table", line: 0}
	if len(toks) > 0 {
		kw.line = toks[0].line
	}
	fam, toks := famName(toks)
	name, rest, err := p.name(toks, "table", kw)
	if err != nil {
		return err
	}
	t := p.getTable(fam, name, true, rest)
	if len(rest) == 0 {
		return nil
	}
	if !rest[0].is("{") {
		return p.errf(rest[0], "table %s: expected \"{\", found %s", name, describe(rest[0]))
	}
	body, end, err := p.braceBody(rest, 0)
	if err != nil {
		return err
	}
	if end != len(rest) {
		return p.errf(rest[end], "unexpected %s after the table's \"}\"", describe(rest[end]))
	}
	return p.tableBody(t, body)
}

// getTable returns the transaction's copy of a table, creating it if asked.
func (p *parser) getTable(fam Family, name string, create bool, at []token) *Table {
	if t := p.x.rs.table(fam, name); t != nil {
		return p.x.mutTable(t)
	}
	if !create {
		return nil
	}
	line := 0
	if len(at) > 0 {
		line = at[0].line
	}
	t := &Table{Family: fam, Name: name, Line: line}
	p.x.addTable(t)
	return t
}

func (p *parser) tableBody(t *Table, body []token) error {
	for _, line := range splitLines(body) {
		line, h := splitHandle(line)
		if len(line) == 0 {
			if h > 0 {
				t.Handle = h
			}
			continue
		}
		w := line[0]
		var err error
		switch {
		case w.is("comment"):
			if len(line) < 2 || !line[1].quoted {
				return p.errf(w, "table comment: expected a quoted string")
			}
			t.Comment = line[1].s
		case w.is("flags"):
			t.Flags = listWords(line[1:])
		case w.is("chain"):
			err = p.chainDecl(t, line[1:], w, false)
		case w.is("set"), w.is("map"):
			err = p.setDecl(t, line[1:], w, false)
		case w.is("counter"):
			err = p.counterDecl(t, line[1:], w, false)
		default:
			err = p.objectDecl(t, line)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func listWords(toks []token) []string {
	var out []string
	for _, t := range toks {
		if !t.is(",") && !t.nl {
			out = append(out, t.s)
		}
	}
	return out
}

// objectDecl keeps an object block the emulator does not model (quota, limit,
// flowtable, ct helper, ...) by its text.
func (p *parser) objectDecl(t *Table, line []token) error {
	i := 0
	for i < len(line) && !line[i].is("{") {
		i++
	}
	if i == len(line) || i < 2 {
		return p.errf(line[0], "table %s: unexpected %s", t.Name, describe(line[0]))
	}
	_, end, err := p.braceBody(line, i)
	if err != nil {
		return err
	}
	kind := strings.Join(tokStrings(line[:i-1]), " ")
	name := line[i-1].s
	o := &Object{Kind: kind, Name: name, Text: p.src[line[0].pos:line[end-1].end], Line: line[0].line}
	if old := t.object(kind, name); old != nil {
		*old = *o
		return nil
	}
	t.Objects = append(t.Objects, o)
	return nil
}

func tokStrings(toks []token) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = t.s
	}
	return out
}

func (p *parser) counterDecl(t *Table, toks []token, kw token, create bool) error {
	name, rest, err := p.name(toks, "counter", kw)
	if err != nil {
		return err
	}
	o := t.object("counter", name)
	if o != nil && create {
		return p.errf(kw, "counter %s already exists in table %s %s", name, t.Family, t.Name)
	}
	if o == nil {
		o = &Object{Kind: "counter", Name: name, Line: kw.line}
		t.Objects = append(t.Objects, o)
	}
	if len(rest) == 0 {
		return nil
	}
	body, _, err := p.braceBody(rest, 0)
	if err != nil {
		return err
	}
	for _, line := range splitLines(body) {
		line, h := splitHandle(line)
		if h > 0 {
			o.Handle = h
		}
		for i := 0; i+1 < len(line); i += 2 {
			v, err := strconv.ParseUint(line[i+1].s, 10, 64)
			if err != nil {
				return p.errf(line[i+1], "counter %s: bad %s %q", name, line[i].s, line[i+1].s)
			}
			switch line[i].s {
			case "packets":
				o.Packets = v
			case "bytes":
				o.Bytes = v
			case "comment":
			default:
				return p.errf(line[i], "counter %s: unexpected %s", name, describe(line[i]))
			}
		}
	}
	return nil
}
