package emulator

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// stmt converts one JSON statement; nil for a rule-level comment.
func (p *jsonParser) stmt(t *Table, ex map[string]any) (Stmt, error) {
	if len(ex) != 1 {
		return unknownJSON(ex), nil
	}
	for k, v := range ex {
		switch k {
		case "match":
			m, _ := v.(map[string]any)
			st, ok, err := p.match(m)
			if err != nil {
				return nil, err
			}
			if !ok {
				return unknownJSON(ex), nil
			}
			return st, nil
		case "vmap":
			return p.vmap(ex, v)
		case "accept", "drop", "continue", "return", "jump", "goto":
			return jsonVerdict(ex)
		case "reject":
			return jsonReject(v), nil
		case "mangle":
			if st := jsonMangle(v); st != nil {
				return st, nil
			}
		case "counter":
			switch c := v.(type) {
			case string:
				return &CounterStmt{Name: c}, nil
			case map[string]any:
				pk, _ := c["packets"].(float64)
				by, _ := c["bytes"].(float64)
				return &CounterStmt{Packets: uint64(pk), Bytes: uint64(by)}, nil
			}
			return &CounterStmt{}, nil
		case "log":
			return &LogStmt{Text: "log"}, nil
		case "dnat", "snat", "masquerade", "redirect":
			return p.nat(t, k, v)
		case "set":
			if st := jsonSetUpdate(v); st != nil {
				return st, nil
			}
		}
	}
	return unknownJSON(ex), nil
}

func unknownJSON(ex map[string]any) Stmt {
	b, _ := json.Marshal(ex)
	u := &UnknownStmt{Text: string(b)}
	for k := range ex {
		u.Terminal = terminalUnknown[k]
	}
	return u
}

// jsonExpr converts a packet expression; false when the emulator does not model it.
func jsonExpr(v any) (*Expr, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return nil, false
	}
	for k, a := range m {
		switch k {
		case "concat":
			list, _ := a.([]any)
			x := &Expr{Kind: xConcat}
			for _, it := range list {
				y, ok := jsonExpr(it)
				if !ok {
					return nil, false
				}
				x.Parts = append(x.Parts, y)
			}
			return x, len(x.Parts) > 0
		case "payload":
			pm, _ := a.(map[string]any)
			proto, _ := pm["protocol"].(string)
			field, _ := pm["field"].(string)
			return payloadExpr(proto, field)
		case "meta", "ct":
			km, _ := a.(map[string]any)
			key, _ := km["key"].(string)
			kinds := map[string]exprKind{"meta l4proto": xL4proto, "meta nfproto": xNfproto, "meta mark": xMark,
				"meta iifname": xIifname, "meta oifname": xOifname, "ct state": xCtState, "ct status": xCtStatus, "ct mark": xCtMark}
			if kind, ok := kinds[k+" "+key]; ok && (km["dir"] == nil) {
				return &Expr{Kind: kind}, true
			}
		case "fib":
			fm, _ := a.(map[string]any)
			flags, _ := fm["flags"].([]any)
			if fm["result"] == "type" && len(flags) == 1 && (flags[0] == "saddr" || flags[0] == "daddr") {
				return &Expr{Kind: xFib, Fib: flags[0].(string)}, true
			}
		case "numgen":
			nm, _ := a.(map[string]any)
			mod, _ := nm["mod"].(float64)
			off, _ := nm["offset"].(float64)
			if nm["mode"] == "random" && mod >= 1 {
				return &Expr{Kind: xNumgen, Mod: uint32(mod), Off: uint32(off)}, true
			}
		}
	}
	return nil, false
}

func payloadExpr(proto, field string) (*Expr, bool) {
	switch proto {
	case "ip", "ip6":
		v6 := proto == "ip6"
		switch field {
		case "saddr":
			return &Expr{Kind: xSaddr, V6: v6}, true
		case "daddr":
			return &Expr{Kind: xDaddr, V6: v6}, true
		case "protocol", "nexthdr":
			return &Expr{Kind: xIPProto, V6: v6}, true
		}
	case "tcp", "udp", "sctp", "th":
		switch field {
		case "sport":
			return &Expr{Kind: xSport, Proto: protoNames[proto]}, true
		case "dport":
			return &Expr{Kind: xDport, Proto: protoNames[proto]}, true
		case "flags":
			if proto == "tcp" {
				return &Expr{Kind: xTCPFlags, Proto: netfilter.ProtoTCP}, true
			}
		}
	}
	return nil, false
}

// match converts {"op", "left", "right"}; ok is false for an unmodelled left side.
func (p *jsonParser) match(m map[string]any) (Stmt, bool, error) {
	left := m["left"]
	mt := &Match{}
	var binArg any
	if lm, ok := left.(map[string]any); ok && len(lm) == 1 {
		for op, a := range lm {
			if op == "&" || op == "|" || op == "^" {
				pair, _ := a.([]any)
				if len(pair) != 2 {
					return nil, false, nil
				}
				left, mt.Bin, binArg = pair[0], op, pair[1]
			}
		}
	}
	x, ok := jsonExpr(left)
	if !ok {
		return nil, false, nil
	}
	mt.Left = x
	lt := x.types()
	bitmask := len(lt) == 1 && lt[0].isBitmask()
	if mt.Bin != "" {
		// A number, or for a bitmask type a bit's name or a list of names.
		switch a := binArg.(type) {
		case float64:
			mt.BinVal = uint32(a)
		case string, []any:
			if !bitmask {
				return nil, false, nil
			}
			v, err := jsonBits(lt[0], a)
			if err != nil {
				return nil, false, fmt.Errorf("match %s %s: %v", x, mt.Bin, err)
			}
			mt.BinVal = v
		default:
			return nil, false, nil
		}
	}
	switch op, _ := m["op"].(string); op {
	case "==":
		if mt.Bin != "" || bitmask { // "in" is a bitmask's implicit "any of these bits"
			mt.Op = "=="
		}
	case "in":
	case "!":
		if !bitmask {
			return nil, false, nil
		}
		mt.Op = op
	case "!=", "<", ">", "<=", ">=":
		mt.Op = op
	default:
		return nil, false, nil
	}
	ts := x.types()
	if mt.Bin != "" && !bitmask {
		ts = []dtype{tMark}
	}
	right := m["right"]
	if rm, ok := right.(map[string]any); ok && bitmask {
		if list, ok := rm["|"].([]any); ok { // {"|": ["established", "related"]}
			right = list
		}
	}
	if err := p.matchRight(mt, ts, right); err != nil {
		return nil, false, err
	}
	return mt, true, nil
}

func (p *jsonParser) matchRight(mt *Match, ts []dtype, right any) error {
	if s, ok := right.(string); ok && strings.HasPrefix(s, "@") {
		mt.SetRef = s[1:]
		return nil
	}
	if rm, ok := right.(map[string]any); ok {
		if list, ok := rm["set"].([]any); ok {
			s := &Set{KeyTypes: ts}
			for _, it := range list {
				el, err := p.elem(s, it)
				if err != nil {
					return err
				}
				s.insertElem(el)
			}
			s.normaliseAnon()
			mt.Anon = s
			return nil
		}
	}
	parts := []any{right}
	if rm, ok := right.(map[string]any); ok {
		if c, ok := rm["concat"].([]any); ok {
			parts = c
		}
	}
	if list, ok := right.([]any); ok && len(ts) == 1 && ts[0].isBitmask() {
		parts = []any{list}
	}
	if len(parts) != len(ts) {
		return fmt.Errorf("match %s: %d values for %d fields", mt.Left, len(parts), len(ts))
	}
	for i, part := range parts {
		vals := []any{part}
		if list, ok := part.([]any); ok {
			vals = list
		}
		var lo, hi key
		for j, v := range vals {
			txt, err := jsonValueText(v)
			if err != nil {
				return err
			}
			l, h, r, err := parseValue(ts[i], txt)
			if err != nil {
				return fmt.Errorf("match %s: %v", mt.Left, err)
			}
			if j == 0 {
				lo, hi = l, h
			} else {
				for b := range lo.b[:lo.n] {
					lo.b[b] |= l.b[b]
				}
				hi = lo
			}
			mt.Range = mt.Range || r
		}
		mt.Lo.put(lo.bytes())
		mt.Hi.put(hi.bytes())
	}
	return nil
}

func (p *jsonParser) vmap(ex map[string]any, v any) (Stmt, error) {
	vm, _ := v.(map[string]any)
	x, ok := jsonExpr(vm["key"])
	if !ok {
		return unknownJSON(ex), nil
	}
	st := &VmapStmt{Key: x}
	if s, ok := vm["data"].(string); ok && strings.HasPrefix(s, "@") {
		st.SetRef = s[1:]
		return st, nil
	}
	dm, _ := vm["data"].(map[string]any)
	list, ok := dm["set"].([]any)
	if !ok {
		return unknownJSON(ex), nil
	}
	s := &Set{KeyTypes: x.types(), DataTypes: []dtype{tVerdict}, IsMap: true}
	for _, it := range list {
		el, err := p.elem(s, it)
		if err != nil {
			return nil, err
		}
		s.insertElem(el)
	}
	st.Anon = s
	return st, nil
}

func jsonReject(v any) Stmt {
	r := &RejectStmt{}
	m, _ := v.(map[string]any)
	typ, _ := m["type"].(string)
	ex, _ := m["expr"].(string)
	switch {
	case typ == "tcp reset":
		r.With, r.Text = netfilter.RejectTCPReset, "with tcp reset"
	case ex != "" && ex != "port-unreachable":
		if name, ok := rejectICMP[ex]; ok {
			r.With, _ = netfilter.RejectWithName("icmp-" + name)
		}
		r.Text = fmt.Sprintf("with %s %s", typ, ex)
	}
	return r
}

func jsonMangle(v any) Stmt {
	m, _ := v.(map[string]any)
	dst, ok := jsonExpr(m["key"])
	if !ok || (dst.Kind != xMark && dst.Kind != xCtMark) {
		return nil
	}
	st := &MarkStmt{Ct: dst.Kind == xCtMark}
	switch val := m["value"].(type) {
	case float64:
		st.Val = uint32(val)
		return st
	case map[string]any:
		for op, a := range val {
			pair, _ := a.([]any)
			if (op == "|" || op == "^" || op == "&") && len(pair) == 2 {
				src, ok := jsonExpr(pair[0])
				n, ok2 := pair[1].(float64)
				if ok && ok2 && (src.Kind == xMark || src.Kind == xCtMark) {
					st.FromCt, st.Op, st.Val = src.Kind == xCtMark, op, uint32(n)
					return st
				}
			}
			if src, ok := jsonExpr(val); ok && (src.Kind == xMark || src.Kind == xCtMark) {
				st.FromCt, st.FromPkt = src.Kind == xCtMark, true
				return st
			}
		}
	}
	return nil
}

func jsonSetUpdate(v any) Stmt {
	m, _ := v.(map[string]any)
	op, _ := m["op"].(string)
	name, _ := m["set"].(string)
	if (op != "update" && op != "add") || !strings.HasPrefix(name, "@") {
		return nil
	}
	elem := m["elem"]
	var timeout time.Duration
	if em, ok := elem.(map[string]any); ok {
		if e, ok := em["elem"].(map[string]any); ok {
			elem = e["val"]
			if t, ok := e["timeout"].(float64); ok {
				timeout = time.Duration(t) * time.Second
			}
		}
	}
	x, ok := jsonExpr(elem)
	if !ok {
		return nil
	}
	return &SetUpdateStmt{Op: op, Key: x, SetRef: name[1:], Timeout: timeout}
}

func (p *jsonParser) nat(t *Table, kind string, v any) (Stmt, error) {
	n := &NATStmt{Kind: map[string]netfilter.NATKind{"dnat": netfilter.DNAT, "snat": netfilter.SNAT,
		"masquerade": netfilter.Masquerade, "redirect": netfilter.Redirect}[kind]}
	m, _ := v.(map[string]any)
	n.Fam, _ = m["family"].(string)
	n.addrTypes = tIPv4
	if n.Fam == "ip6" || (n.Fam == "" && t.Family == FamilyIP6) {
		n.addrTypes = tIPv6
	}
	switch f := m["flags"].(type) {
	case string:
		n.Flags = []string{f}
	case []any:
		for _, x := range f {
			if s, ok := x.(string); ok {
				n.Flags = append(n.Flags, s)
			}
		}
	}
	if port, ok := m["port"].(float64); ok {
		n.Port, n.PortMax = uint16(port), uint16(port)
	}
	switch a := m["addr"].(type) {
	case string:
		at := n.addrTypes
		if strings.Contains(a, ":") {
			at, n.addrTypes = tIPv6, tIPv6
		}
		lo, hi, _, err := parseAddrValue(at, a)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", kind, err)
		}
		n.Addr, n.AddrMax = lo, hi
	case map[string]any:
		mm, ok := a["map"].(map[string]any)
		if !ok {
			return unknownJSON(map[string]any{kind: v}), nil
		}
		x, ok := jsonExpr(mm["key"])
		if !ok {
			return unknownJSON(map[string]any{kind: v}), nil
		}
		n.MapKey = x
		if s, ok := mm["data"].(string); ok && strings.HasPrefix(s, "@") {
			n.MapRef = s[1:]
			return n, nil
		}
		dm, _ := mm["data"].(map[string]any)
		list, _ := dm["set"].([]any)
		s := &Set{KeyTypes: x.types(), DataTypes: []dtype{n.addrTypes, tService}, IsMap: true}
		for _, it := range list {
			el, err := p.elem(s, it)
			if err != nil {
				return nil, err
			}
			s.insertElem(el)
		}
		n.MapAnon = s
	}
	return n, nil
}

// jsonBits is a bitmask operand: a bit's name (or a number) or a list of them.
func jsonBits(t dtype, a any) (uint32, error) {
	vals := []any{a}
	if list, ok := a.([]any); ok {
		vals = list
	}
	var v uint32
	for _, x := range vals {
		txt, err := jsonValueText(x)
		if err != nil {
			return 0, err
		}
		n, err := parseScalar(t, txt)
		if err != nil {
			return 0, err
		}
		v |= uint32(n)
	}
	return v, nil
}
