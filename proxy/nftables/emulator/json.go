package emulator

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseJSON reads `nft -j list ruleset` output (libnftables-json) into a ruleset:
// tables, chains, sets and maps with their elements, counters, and rules, each
// expression converted to the statement the text parser would give (an expression the
// emulator does not model becomes an UnknownStmt holding its JSON). Errors name the
// file and the item (its index in the nftables array). Rules keep their handles; their
// Text is the normalised listing spelling.
func ParseJSON(data []byte, file string) (*Ruleset, error) {
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: not nft JSON: %v", file, err)
	}
	if doc.Nftables == nil {
		return nil, fmt.Errorf("%s: not nft JSON: no \"nftables\" array", file)
	}
	x := newTxn(&Ruleset{}, file)
	jp := &jsonParser{x: x, file: file}
	for i, item := range doc.Nftables {
		jp.item = i
		for kind, raw := range item {
			if err := jp.object(kind, raw); err != nil {
				return nil, err
			}
		}
	}
	if err := x.validate(); err != nil {
		return nil, err
	}
	return x.rs, nil
}

type jsonParser struct {
	x    *txn
	file string
	item int
	seq  int
}

func (p *jsonParser) errf(format string, args ...any) error {
	return fmt.Errorf("%s: item %d: %s", p.file, p.item, fmt.Sprintf(format, args...))
}

// jsonObj is the common header of tables, chains, sets and rules.
type jsonObj struct {
	Family  string           `json:"family"`
	Table   string           `json:"table"`
	Name    string           `json:"name"`
	Chain   string           `json:"chain"`
	Handle  int              `json:"handle"`
	Comment string           `json:"comment"`
	Type    json.RawMessage  `json:"type"`
	Hook    string           `json:"hook"`
	Prio    *int             `json:"prio"`
	Policy  string           `json:"policy"`
	Dev     string           `json:"dev"`
	Map     json.RawMessage  `json:"map"`
	Flags   json.RawMessage  `json:"flags"`
	Timeout int64            `json:"timeout"`
	GCInt   int64            `json:"gc-interval"`
	Size    int              `json:"size"`
	Elem    []any            `json:"elem"`
	Expr    []map[string]any `json:"expr"`
	Packets uint64           `json:"packets"`
	Bytes   uint64           `json:"bytes"`
}

func (p *jsonParser) table(o *jsonObj) (*Table, error) {
	fam, ok := ParseFamily(o.Family)
	if !ok {
		return nil, p.errf("unknown family %q", o.Family)
	}
	t := p.x.rs.table(fam, o.Table)
	if t == nil {
		return nil, p.errf("no table %s %s (it must come before its objects)", o.Family, o.Table)
	}
	return t, nil
}

func (p *jsonParser) object(kind string, raw json.RawMessage) error {
	if kind == "metainfo" {
		return nil
	}
	var o jsonObj
	if err := json.Unmarshal(raw, &o); err != nil {
		return p.errf("%s: %v", kind, err)
	}
	switch kind {
	case "table":
		fam, ok := ParseFamily(o.Family)
		if !ok {
			return p.errf("unknown family %q", o.Family)
		}
		if p.x.rs.table(fam, o.Name) != nil {
			return p.errf("table %s %s listed twice", o.Family, o.Name)
		}
		p.x.addTable(&Table{Family: fam, Name: o.Name, Handle: o.Handle, Comment: o.Comment})
	case "chain":
		return p.chain(&o)
	case "set", "map":
		return p.set(kind, &o)
	case "rule":
		return p.rule(&o)
	case "counter":
		t, err := p.table(&o)
		if err != nil {
			return err
		}
		t.Objects = append(t.Objects, &Object{Kind: "counter", Name: o.Name, Handle: o.Handle, Packets: o.Packets, Bytes: o.Bytes})
	default:
		t, err := p.table(&o)
		if err != nil {
			return nil // an object outside tables (a ct helper listed globally, ...)
		}
		t.Objects = append(t.Objects, &Object{Kind: kind, Name: o.Name, Handle: o.Handle, Text: fmt.Sprintf("# %s %s (from JSON, not modelled): %s", kind, o.Name, raw)})
	}
	return nil
}

func (p *jsonParser) chain(o *jsonObj) error {
	t, err := p.table(o)
	if err != nil {
		return err
	}
	if t.chain(o.Name) != nil {
		return p.errf("chain %s listed twice", o.Name)
	}
	c := &Chain{Name: o.Name, Handle: o.Handle, Comment: o.Comment}
	if o.Hook != "" {
		var typ string
		_ = json.Unmarshal(o.Type, &typ)
		if typ != "filter" && typ != "nat" && typ != "route" {
			return p.errf("chain %s: unknown type %q", o.Name, typ)
		}
		if o.Prio == nil {
			return p.errf("chain %s: missing prio", o.Name)
		}
		c.Type, c.Hook, c.Device, c.Priority, c.PrioText, c.Policy = typ, o.Hook, o.Dev, *o.Prio, strconv.Itoa(*o.Prio), o.Policy
		if c.Policy == "" {
			c.Policy = "accept"
		}
	}
	p.seq++
	c.seq = p.seq
	t.Chains = append(t.Chains, c)
	t.chainIdx[c.Name] = c
	return nil
}

// jsonTypes parses a set's type: a name or an array of names (a concatenation).
func jsonTypes(raw json.RawMessage) ([]dtype, string) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if t, ok := dtypeNames[one]; ok {
			return []dtype{t}, one
		}
		return []dtype{tOther}, one
	}
	var many []string
	_ = json.Unmarshal(raw, &many)
	var ts []dtype
	for _, n := range many {
		t, ok := dtypeNames[n]
		if !ok {
			t = tOther
		}
		ts = append(ts, t)
	}
	return ts, strings.Join(many, " . ")
}

func (p *jsonParser) set(kind string, o *jsonObj) error {
	t, err := p.table(o)
	if err != nil {
		return err
	}
	if t.set(o.Name) != nil {
		return p.errf("%s %s listed twice", kind, o.Name)
	}
	s := &Set{Name: o.Name, IsMap: kind == "map", Handle: o.Handle, Comment: o.Comment, Size: o.Size,
		Timeout: time.Duration(o.Timeout) * time.Second, GCInt: time.Duration(o.GCInt) * time.Second}
	s.KeyTypes, s.KeyText = jsonTypes(o.Type)
	if len(s.KeyTypes) == 0 {
		return p.errf("%s %s: missing type", kind, o.Name)
	}
	if s.IsMap {
		s.DataTypes, s.DataText = jsonTypes(o.Map)
	}
	var flags []string
	if json.Unmarshal(o.Flags, &flags) != nil {
		var f string
		if json.Unmarshal(o.Flags, &f) == nil && f != "" {
			flags = []string{f}
		}
	}
	s.Flags = flags
	for _, raw := range o.Elem {
		el, err := p.elem(s, raw)
		if err != nil {
			return p.errf("%s %s: %v", kind, o.Name, err)
		}
		s.insertElem(el)
	}
	t.Sets = append(t.Sets, s)
	t.setIdx[s.Name] = s
	return nil
}

// elem converts a set element ("10.0.0.1", {"concat": [...]}, {"prefix": ...},
// {"range": [...]}, {"elem": {"val": ..., "comment": ...}}) or a map element
// ([key, value]).
func (p *jsonParser) elem(s *Set, raw any) (*Element, error) {
	el := &Element{}
	if pair, ok := raw.([]any); ok && s.IsMap {
		if len(pair) != 2 {
			return nil, fmt.Errorf("map element %v: want [key, value]", raw)
		}
		raw = pair[0]
		mv, err := jsonMapValue(s, pair[1])
		if err != nil {
			return nil, err
		}
		el.Value = mv
	}
	if m, ok := raw.(map[string]any); ok {
		if e, ok := m["elem"].(map[string]any); ok {
			raw = e["val"]
			if c, ok := e["comment"].(string); ok {
				el.Comment = c
			}
			if v, ok := e["timeout"].(float64); ok {
				el.Timeout = time.Duration(v) * time.Second
			}
			if v, ok := e["expires"].(float64); ok {
				el.Expires = time.Duration(v) * time.Second
			}
		}
	}
	parts := []any{raw}
	if m, ok := raw.(map[string]any); ok {
		if c, ok := m["concat"].([]any); ok {
			parts = c
		}
	}
	if len(parts) != len(s.KeyTypes) {
		return nil, fmt.Errorf("element %v: %d values for a key of %d", raw, len(parts), len(s.KeyTypes))
	}
	var texts []string
	for i, part := range parts {
		txt, err := jsonValueText(part)
		if err != nil {
			return nil, err
		}
		lo, hi, r, err := parseValue(s.KeyTypes[i], txt)
		if err != nil {
			return nil, fmt.Errorf("element %s: %v", txt, err)
		}
		el.Lo.put(lo.bytes())
		el.Hi.put(hi.bytes())
		el.Range = el.Range || r
		texts = append(texts, txt)
	}
	el.Text = strings.Join(texts, " . ")
	return el, nil
}

// jsonValueText renders a JSON value as nft text: strings and numbers as they are,
// prefixes as a/len, ranges as a-b.
func jsonValueText(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case map[string]any:
		if pr, ok := x["prefix"].(map[string]any); ok {
			a, _ := pr["addr"].(string)
			l, _ := pr["len"].(float64)
			return fmt.Sprintf("%s/%d", a, int(l)), nil
		}
		if r, ok := x["range"].([]any); ok && len(r) == 2 {
			a, err1 := jsonValueText(r[0])
			b, err2 := jsonValueText(r[1])
			if err1 == nil && err2 == nil {
				return a + "-" + b, nil
			}
		}
	}
	return "", fmt.Errorf("value %v: not modelled", v)
}

func jsonMapValue(s *Set, v any) (*MapValue, error) {
	if s.Verdict() {
		vs, err := jsonVerdict(v)
		if err != nil {
			return nil, err
		}
		return &MapValue{Verdict: vs, Text: vs.String()}, nil
	}
	parts := []any{v}
	if m, ok := v.(map[string]any); ok {
		if c, ok := m["concat"].([]any); ok {
			parts = c
		}
	}
	mv := &MapValue{}
	var texts []string
	for i, part := range parts {
		if i >= len(s.DataTypes) {
			return nil, fmt.Errorf("map value %v: too many values", v)
		}
		txt, err := jsonValueText(part)
		if err != nil {
			return nil, err
		}
		lo, _, _, err := parseValue(s.DataTypes[i], txt)
		if err != nil {
			return nil, err
		}
		mv.Data.put(lo.bytes())
		texts = append(texts, txt)
	}
	mv.Text = strings.Join(texts, " . ")
	return mv, nil
}

// jsonVerdict converts {"accept": null}, {"jump": {"target": "X"}}, ...
func jsonVerdict(v any) (*VerdictStmt, error) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return nil, fmt.Errorf("verdict %v: want one of accept, drop, continue, return, jump, goto", v)
	}
	for k, arg := range m {
		switch k {
		case "accept", "drop", "continue", "return":
			return &VerdictStmt{Kind: k}, nil
		case "jump", "goto":
			a, _ := arg.(map[string]any)
			tgt, _ := a["target"].(string)
			if tgt == "" {
				return nil, fmt.Errorf("%s without a target", k)
			}
			return &VerdictStmt{Kind: k, Chain: tgt}, nil
		}
	}
	return nil, fmt.Errorf("verdict %v: not a verdict", v)
}

func (p *jsonParser) rule(o *jsonObj) error {
	t, err := p.table(o)
	if err != nil {
		return err
	}
	c := t.chain(o.Chain)
	if c == nil {
		return p.errf("rule in missing chain %q", o.Chain)
	}
	r := &Rule{Handle: o.Handle, Comment: o.Comment}
	for _, ex := range o.Expr {
		st, err := p.stmt(t, ex)
		if err != nil {
			return p.errf("rule handle %d in chain %s: %v", o.Handle, o.Chain, err)
		}
		if st != nil {
			r.Stmts = append(r.Stmts, st)
		}
	}
	r.Text = RuleString(r)
	if r.Handle > t.maxHandle {
		t.maxHandle = r.Handle
	}
	c.Rules = append(c.Rules, r)
	return nil
}
