package emulator

import (
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// maxDepth bounds jumps, as the kernel's jump stack does.
const maxDepth = 16

// evalCtx is one base chain's evaluation.
type evalCtx struct {
	env     Env
	assumer Assumer
	q       *Packet
	tr      *Trace
	t       *Table
	hook    netfilter.Hook
	depth   int
	res     ChainVerdict
	now     time.Time
	hasNow  bool
	elem    *Element // the element the last lookup matched
	chain   *Chain   // the chain being run (traces)
	// decRule and decChain are the rule (nil: the policy) and chain that decided.
	decRule  *Rule
	decChain string
	// limit, in a walk, bounds the rules a path evaluates (nil: no bound).
	limit *stepLimit
	// peek, in PeekTrain, records counters instead of bumping them (nil: not a peek).
	peek *peekRun

	// The outcome cache's recording (outcache.go), when rec: the fields read, the
	// decisions met, the counters bumped; noCache when the outcome must not be kept,
	// setChanged when a set update ran; pre, draws made before the evaluation.
	// Arrays, not slices: a slice of the context's own array would move it to the heap.
	rec           bool
	noCache       bool
	setChanged    bool
	reads         uint8
	ndecs, nctrs  int
	npre, usedPre int
	decs          [maxDecs]odec
	counters      [maxCounters]*CounterStmt
	pre           [maxDecs]int
}

// stepLimit counts a walk path's rule evaluations over all its base chains: jumps
// without a loop can still run a chain exponentially often (sixteen levels deep, each
// jumping to the next ten times, is 10^16 rules).
type stepLimit struct {
	n, max int
	hit    bool
}

// flow is what running a chain (or a rule) did: fell off / returned, or decided.
type flow uint8

const (
	fNext  flow = iota // continue (the chain fell off its end or returned)
	fFinal             // a verdict ended the base chain (res holds it)
)

func (c *evalCtx) clock() time.Time {
	if !c.hasNow {
		c.now, c.hasNow = c.env.Now(), true
	}
	return c.now
}

func (c *evalCtx) runBase(ch *Chain) ChainVerdict {
	if c.tr != nil {
		c.tr.add(Step{Kind: StepChain, Hook: c.hook.String(), Family: c.t.Family.String(), Table: c.t.Name, Chain: ch.Name,
			Detail: fmt.Sprintf("(type %s hook %s priority %d)", ch.Type, ch.Hook, ch.Priority)})
	}
	if c.runChain(ch) == fFinal {
		return c.res
	}
	c.decRule, c.decChain = nil, ch.Name
	c.res = ChainVerdict{Verdict: Accept, Reason: ch.policyReason}
	if ch.Policy == "drop" {
		c.res.Verdict = Drop
	}
	if c.tr != nil {
		c.tr.add(Step{Kind: StepPolicy, Hook: c.hook.String(), Family: c.t.Family.String(), Table: c.t.Name, Chain: ch.Name, Verdict: ch.Policy})
	}
	return c.res
}

func (c *evalCtx) runChain(ch *Chain) flow {
	saved := c.chain
	c.chain = ch
	defer func() { c.chain = saved }()
	for _, r := range ch.Rules {
		fl, stop := c.runRule(r)
		if stop {
			return fl
		}
	}
	return fNext
}

// runRule runs one rule's statements; stop is true when the chain must stop (a final
// verdict, return, goto).
func (c *evalCtx) runRule(r *Rule) (fl flow, stop bool) {
	if l := c.limit; l != nil {
		if l.n++; l.n > l.max {
			l.hit = true
			if c.tr != nil {
				c.tr.add(Step{Kind: StepNote, Hook: c.hook.String(), Family: c.t.Family.String(), Table: c.t.Name, Chain: c.chain.Name,
					Detail: fmt.Sprintf("walk stopped: more than %d rule evaluations on this path (jumps that revisit chains); the outcome is not known", l.max)})
			}
			c.res, c.decRule, c.decChain = ChainVerdict{Verdict: Unknown, Reason: "the walk's step limit"}, nil, c.chain.Name
			return fFinal, true
		}
	}
	step := -1
	if c.tr != nil {
		step = c.tr.add(Step{Kind: StepRule, Hook: c.hook.String(), Family: c.t.Family.String(), Table: c.t.Name,
			Chain: c.chain.Name, Handle: r.Handle, Line: r.Line, Rule: r.Text, Depth: c.depth})
	}
	c.elem = nil
	for _, st := range r.Stmts {
		switch s := st.(type) {
		case *Match:
			if !c.match(s) {
				return fNext, false
			}
		case *VmapStmt:
			el := c.lookupVmap(s)
			if el == nil {
				return fNext, false
			}
			c.matched(step, el, "")
			return c.verdict(r, step, el.Value.Verdict)
		case *VerdictStmt:
			c.matched(step, nil, "")
			return c.verdict(r, step, s)
		case *RejectStmt:
			c.matched(step, nil, "reject")
			c.decide(r, ChainVerdict{Verdict: Reject, Reject: s.With, Reason: r.reason})
			if step >= 0 {
				c.setVerdict(step, "reject "+s.With.String())
			}
			return fFinal, true
		case *NATStmt:
			n, ok := c.nat(s)
			if !ok {
				return fNext, false
			}
			c.matched(step, nil, "")
			c.decide(r, ChainVerdict{Verdict: Accept, NAT: n, HasNAT: true, Reason: r.reason})
			if step >= 0 {
				c.setVerdict(step, fmt.Sprintf("%s %s", n.Kind, n.Dest()))
			}
			return fFinal, true
		case *MarkStmt:
			c.setMark(s)
			if step >= 0 {
				c.detail(step, fmt.Sprintf("mark %#x", c.q.Mark))
			}
		case *CounterStmt:
			if p := c.peek; p != nil {
				p.counts = append(p.counts, trainCount{c: s, packets: p.n, bytes: p.n * uint64(c.q.Len)})
			} else if !c.env.DryRun() {
				s.bump(c.q.Len)
				if c.rec {
					if c.nctrs == maxCounters {
						c.noCache = true
					} else {
						c.counters[c.nctrs] = s
						c.nctrs++
					}
				}
			}
		case *LogStmt:
		case *SetUpdateStmt:
			c.noCache = true
			if c.peek != nil {
				c.peek.bad = true // each segment would add or refresh the element
			}
			if !c.update(s) {
				return fNext, false
			}
		case *UnknownStmt:
			if s.Terminal {
				c.matched(step, nil, "")
				c.decide(r, ChainVerdict{Verdict: Unknown, Reason: r.reason})
				c.setVerdict(step, "UNKNOWN ("+s.Text+")")
				return fFinal, true
			}
			c.noCache = true
			v := false
			if c.assumer != nil {
				v = c.assumer.Assume(r, s)
			}
			if step >= 0 {
				c.detail(step, fmt.Sprintf("assumed %q %s", s.Text, map[bool]string{true: "matches", false: "does not match"}[v]))
			}
			if !v {
				return fNext, false
			}
		}
	}
	c.matched(step, c.elem, "")
	return fNext, false
}

// decide records the rule that decided.
func (c *evalCtx) decide(r *Rule, v ChainVerdict) {
	c.res, c.decRule, c.decChain = v, r, c.chain.Name
}

func (c *evalCtx) matched(step int, el *Element, _ string) {
	if step < 0 {
		return
	}
	s := &c.tr.Steps[step]
	s.Matched = true
	if el == nil {
		el = c.elem
	}
	if el != nil && s.Element == "" {
		s.Element = el.Text
	}
}

func (c *evalCtx) setVerdict(step int, v string) {
	if step >= 0 {
		c.tr.Steps[step].Verdict = v
	}
}

func (c *evalCtx) detail(step int, d string) {
	if step < 0 {
		return
	}
	s := &c.tr.Steps[step]
	if s.Detail != "" {
		s.Detail += "; "
	}
	s.Detail += d
}

// verdict applies a verdict statement (or a vmap element's verdict).
func (c *evalCtx) verdict(r *Rule, step int, v *VerdictStmt) (flow, bool) {
	switch v.Kind {
	case "accept":
		c.decide(r, ChainVerdict{Verdict: Accept, Reason: r.reason})
		c.setVerdict(step, "accept")
		return fFinal, true
	case "drop":
		c.decide(r, ChainVerdict{Verdict: Drop, Reason: r.reason})
		c.setVerdict(step, "drop")
		return fFinal, true
	case "continue":
		c.setVerdict(step, "continue")
		return fNext, false
	case "return":
		c.setVerdict(step, "return")
		return fNext, true
	}
	if step >= 0 {
		c.setVerdict(step, v.Kind+" "+v.Chain)
	}
	if v.target == nil || c.depth >= maxDepth {
		c.decide(r, ChainVerdict{Verdict: Drop, Reason: r.reason + " (" + v.Kind + " to a missing chain or too deep)"})
		return fFinal, true
	}
	c.depth++
	fl := c.runChain(v.target)
	c.depth--
	if fl == fFinal {
		return fFinal, true
	}
	return fNext, v.Kind == "goto"
}

// load puts the expression's value into k; false when the packet has no such value
// (ports of an ICMP packet, an IPv4 address of an IPv6 packet).
func (c *evalCtx) load(x *Expr, k *key) bool {
	q := c.q
	switch x.Kind {
	case xConcat:
		for _, p := range x.Parts {
			if !c.load(p, k) {
				return false
			}
		}
		return true
	case xSaddr, xDaddr:
		a := q.Src
		if x.Kind == xDaddr {
			a = q.Dst
			c.reads |= rdDst
		} else {
			c.reads |= rdSrc
		}
		if a.Is6() != x.V6 {
			return false
		}
		if x.V6 {
			b := a.As16()
			return k.put(b[:])
		}
		b := a.As4()
		return k.put(b[:])
	case xIPProto:
		if q.Dst.Is6() != x.V6 {
			return false
		}
		return k.putUint(uint64(q.Proto), 1)
	case xL4proto:
		return k.putUint(uint64(q.Proto), 1)
	case xSport, xDport:
		if x.Proto != 0 && q.Proto != x.Proto {
			return false
		}
		switch q.Proto {
		case netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoSCTP, netfilter.ProtoUDPLite, netfilter.ProtoDCCP:
		default:
			return false
		}
		if x.Kind == xSport {
			c.reads |= rdSport
			return k.putUint(uint64(q.SrcPort), 2)
		}
		c.reads |= rdDport
		return k.putUint(uint64(q.DstPort), 2)
	case xNfproto:
		if q.Dst.Is6() {
			return k.putUint(10, 1)
		}
		return k.putUint(2, 1)
	case xMark:
		return k.putUint(uint64(q.Mark), 4)
	case xCtMark:
		return k.putUint(uint64(q.CT.Mark), 4)
	case xIifname, xOifname:
		name := q.InIface
		if x.Kind == xOifname {
			name = q.OutIface
			c.reads |= rdOif
		} else {
			c.reads |= rdIif
		}
		var b [16]byte
		copy(b[:15], name)
		return k.put(b[:])
	case xCtState:
		return k.putUint(uint64(ctStateBit(q.CT.State)), 4)
	case xCtStatus:
		return k.putUint(uint64(ctStatusBitsOf(q.CT.Status)), 4)
	case xTCPFlags:
		// nft adds the dependency `meta l4proto tcp`: another protocol does not match.
		if q.Proto != netfilter.ProtoTCP {
			return false
		}
		c.reads |= rdFlags
		return k.putUint(uint64(q.TCPFlags), 1)
	case xFib:
		a, kind := q.Src, oFibSrc
		if x.Fib == "daddr" {
			a, kind = q.Dst, oFibDst
		}
		local := c.env.IsLocal(a)
		c.decide1(kind, 0, b2i(local))
		if local {
			return k.putUint(2, 4)
		}
		return k.putUint(1, 4)
	case xNumgen:
		d := c.pick(int(x.Mod))
		c.decide1(oDraw, int(x.Mod), d)
		v := uint32(d) + x.Off
		if c.tr != nil && len(c.tr.Steps) > 0 {
			c.detail(len(c.tr.Steps)-1, fmt.Sprintf("numgen random mod %d = %d", x.Mod, v))
		}
		return k.putUint(uint64(v), 4)
	}
	return false
}

func (c *evalCtx) match(m *Match) bool {
	var k key
	if !c.load(m.Left, &k) {
		return false
	}
	if m.Bin != "" {
		// The value is 1 (tcp flags), 2 or 4 bytes wide; the operation keeps its width.
		w := int(k.n)
		if w > 4 {
			return false
		}
		var v uint32
		for _, c := range k.b[:w] {
			v = v<<8 | uint32(c)
		}
		switch m.Bin {
		case "&":
			v &= m.BinVal
		case "|":
			v |= m.BinVal
		case "^":
			v ^= m.BinVal
		}
		k = key{}
		k.putUint(uint64(v), w)
	}
	var ok bool
	switch {
	case m.set != nil || m.Anon != nil:
		s := m.set
		if s == nil {
			s = m.Anon
		}
		el := c.lookup(s, &k)
		ok = el != nil
		if ok {
			c.elem = el
		}
		if m.Op == "!=" {
			ok = !ok
		}
		return ok
	case m.SetRef != "":
		return false // an unbound set (cannot happen after validation)
	}
	ts := m.Left.types()
	// A bitmask type's plain match is "any of these bits" and "!" is "none of them"
	// (nft compiles both to a mask and a compare with 0); "==" and "!=" compare the
	// whole value, as nft 1.0.6 compiles them (`ct state != established,related` is
	// `cmp neq 0x6`, true for every packet, whose state has one bit).
	if len(ts) == 1 && ts[0].isBitmask() && (m.Op == "" || m.Op == "!") {
		any := false
		for i := 0; i < int(k.n); i++ {
			if k.b[i]&m.Lo.b[i] != 0 {
				any = true
			}
		}
		return any != (m.Op == "!")
	}
	switch m.Op {
	case "", "==":
		return inRange(&k, &m.Lo, &m.Hi, ts, m.Range)
	case "!=":
		return !inRange(&k, &m.Lo, &m.Hi, ts, m.Range)
	case "<":
		return cmpKey(&k, &m.Lo) < 0
	case ">":
		return cmpKey(&k, &m.Lo) > 0
	case "<=":
		return cmpKey(&k, &m.Lo) <= 0
	case ">=":
		return cmpKey(&k, &m.Lo) >= 0
	}
	return false
}

// inRange reports lo <= k <= hi component by component.
func inRange(k, lo, hi *key, ts []dtype, isRange bool) bool {
	if !isRange {
		return *k == *lo
	}
	if k.n != lo.n {
		return false
	}
	off := 0
	for _, t := range ts {
		w := t.width()
		a := string(k.b[off : off+w])
		if a < string(lo.b[off:off+w]) || a > string(hi.b[off:off+w]) {
			return false
		}
		off += w
	}
	return true
}

// lookup finds k in a set: a hash lookup, then (interval sets) a binary search over
// the ranges of a one-component key, or a scan over ranges of concatenated keys.
func (c *evalCtx) lookup(s *Set, k *key) *Element {
	if el := s.elems[*k]; el != nil && c.alive(s, el) {
		return el
	}
	if len(s.ranges) == 0 {
		return nil
	}
	if len(s.KeyTypes) == 1 {
		i := sort.Search(len(s.ranges), func(i int) bool { return cmpKey(&s.ranges[i].Lo, k) > 0 }) - 1
		if i >= 0 {
			if el := s.ranges[i]; cmpKey(k, &el.Hi) <= 0 && c.alive(s, el) {
				return el
			}
		}
		return nil
	}
	for _, el := range s.ranges {
		if inRange(k, &el.Lo, &el.Hi, s.KeyTypes, true) && c.alive(s, el) {
			return el
		}
	}
	return nil
}

// alive reports whether an element has not timed out on the Env's clock.
func (c *evalCtx) alive(s *Set, el *Element) bool {
	if el.Timeout == 0 && el.Expires == 0 && !el.anchored {
		return true
	}
	c.noCache = true
	now := c.clock()
	if !el.anchored {
		d := el.Expires
		if d == 0 {
			d = el.Timeout
		}
		el.expireAt, el.anchored = now.Add(d), true
	}
	return now.Before(el.expireAt)
}

func (c *evalCtx) lookupVmap(v *VmapStmt) *Element {
	var k key
	if !c.load(v.Key, &k) {
		return nil
	}
	s := v.set
	if s == nil {
		s = v.Anon
	}
	if s == nil {
		return nil
	}
	el := c.lookup(s, &k)
	if el == nil || el.Value == nil || el.Value.Verdict == nil {
		return nil
	}
	return el
}

// update adds the key to a dynamic set or refreshes its timeout; false when the set is
// full (the rule stops, as the kernel's dynset breaks).
func (c *evalCtx) update(u *SetUpdateStmt) bool {
	var k key
	if !c.load(u.Key, &k) {
		return false
	}
	if c.env.DryRun() || u.set == nil {
		return true
	}
	c.setChanged = true
	s := u.set
	d := u.Timeout
	if d == 0 {
		d = s.Timeout
	}
	now := c.clock()
	if el := s.elems[k]; el != nil && c.alive(s, el) {
		if u.Op == "update" && d > 0 {
			el.expireAt, el.anchored = now.Add(d), true
		}
		return true
	}
	if s.Size > 0 && s.Len() >= s.Size {
		return false
	}
	el := &Element{Lo: k, Hi: k, Text: formatKey(s.KeyTypes, &k, &k, false, " . ")}
	if d > 0 {
		el.Timeout, el.expireAt, el.anchored = d, now.Add(d), true
	}
	s.insertElem(el)
	return true
}

func (c *evalCtx) setMark(m *MarkStmt) {
	src := c.q.Mark
	if m.FromCt {
		src = c.q.CT.Mark
	}
	var v uint32
	switch {
	case m.FromPkt:
		v = src
	case m.Op == "|":
		v = src | m.Val
	case m.Op == "^":
		v = src ^ m.Val
	case m.Op == "&":
		v = src & m.Val
	default:
		v = m.Val
	}
	if m.Ct {
		c.q.CT.Mark = v
	} else {
		c.q.Mark = v
	}
}

// nat computes a NAT statement's translation; false when its map has no element for
// the packet (the rule stops).
func (c *evalCtx) nat(s *NATStmt) (NAT, bool) {
	n := NAT{Kind: s.Kind, Port: s.Port, PortMax: s.PortMax}
	for _, f := range s.Flags {
		switch f {
		case "random":
			n.Random = true
		case "fully-random":
			n.RandomFully = true
		case "persistent":
			n.Persistent = true
		}
	}
	if s.MapKey != nil {
		var k key
		if !c.load(s.MapKey, &k) {
			return n, false
		}
		m := s.mapSet
		if m == nil {
			m = s.MapAnon
		}
		if m == nil {
			return n, false
		}
		el := c.lookup(m, &k)
		if el == nil || el.Value == nil {
			return n, false
		}
		c.elem = el
		d := el.Value.Data.bytes()
		w := s.addrTypes.width()
		if len(d) < w {
			return n, false
		}
		n.Addr = addrOf(d[:w])
		if len(d) >= w+2 {
			n.Port = binary.BigEndian.Uint16(d[w : w+2])
			n.PortMax = n.Port
		}
		return n, true
	}
	if s.Addr.n > 0 {
		n.Addr = addrOf(s.Addr.bytes())
		if s.AddrMax != s.Addr {
			n.AddrMax = addrOf(s.AddrMax.bytes())
		}
	}
	return n, true
}
