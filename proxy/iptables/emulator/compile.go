package emulator

import (
	"math/bits"
	"net/netip"

	"github.com/clusterlab/clusterlab/netfilter"
)

// Chains compiled for evaluation without a trace (the path every netsim packet takes).
//
// Evaluating a Rule directly reads a ~220-byte struct, its Matches slice, one object
// per match module and its target. At 10,000 services the rules a packet meets were
// last touched thousands of packets earlier, so each of those reads is a cache miss
// (and, across a heap of hundreds of MB, a TLB miss), and each depends on the one
// before. A chainProg keeps what a chain's evaluation needs in one array of 48-byte
// records, one per rule:
//
//	rule     the Rule (read when the rule matched: counters, the decision)
//	jump     the chainProg of the chain it jumps or goes to
//	w0       target kind | flags<<8 | protocol<<16 | number of code words<<24
//	code     the code words, inline (or, when they do not fit, an index into more):
//	         -s: IPv4 address and mask (two words), or an index into v6 (one word)
//	         -d: the same
//	         one op per match module that does something (comments are left out):
//	           kind | flags<<8 | match index<<16, then its arguments (ports, TCP flags,
//	           a probability, a mark and mask, or an index into gen for any other
//	           module, which is called through its Match)
//	         DNAT to one IPv4 address: address, ports, flags
//
// A kube-proxy KUBE-SVC rule (-m comment -m statistic ... -j KUBE-SEP-x) is two code
// words; KUBE-SERVICES, KUBE-SVC and KUBE-SEP rules all fit in their records. Long
// chains get an index of record numbers in flat tables (flatIndex). The Rule is matched
// by matchRule, as with a trace, when the code cannot express it (interfaces,
// fragments, very long rules); targets other than verdicts, jumps and single-address
// DNAT go through the Rule's Target.
//
// Chains are compiled the first time an untraced evaluation enters them, together
// with the short chains they reach (a KUBE-SVC chain with its KUBE-SEP chains, in one
// allocation each for records and chainProgs), and stay valid while the chain's rules
// are unchanged: a restore gives a chain it changes a new Chain object (without
// compiled state) and shares the others with the table's new version; a compiled jump
// to a chain the restore replaced or deleted (gone) is resolved again by name.

type chainProg struct {
	recs  []crec
	idx   *flatIndex
	ext   *progExt
	name  string
	ready bool // compiled; a chain jumped to gets its chainProg before it is compiled
	gone  bool // its chain is gone (see Chain.gone): jumps here are resolved again
}

// progExt is what evaluation seldom needs.
type progExt struct {
	chain   *Chain
	more    []uint32  // code that does not fit in its record
	gen     []Match   // matches ops call through (opGeneric)
	v6      []prefix6 // IPv6 prefixes the code refers to
	reasons []string  // decisionReason per rule (netsim verdicts), filled lazily
}

// crec is one compiled rule (40 bytes).
type crec struct {
	rule *Rule
	jump *chainProg // jump or goto destination (nil: none, or a missing chain)
	w0   uint32
	ri   uint32 // the rule's number in its chain
	// code holds the code words, or, when there are more than recWords, the first
	// recWords-1 and the index in ext.more of the others.
	code [recWords]uint32
}

const recWords = 4

// word returns code word o of rec.
func (cp *chainProg) word(rec *crec, o int) uint32 {
	if o < recWords-1 || rec.w0>>24 <= recWords {
		return rec.code[o]
	}
	return cp.ext.more[int(rec.code[recWords-1])+o-(recWords-1)]
}

// Target kinds (word 0, bits 0-7).
const (
	tkNone uint32 = iota
	tkAccept
	tkDrop
	tkReturn
	tkJump
	tkGoto
	tkDNAT4 // DNAT to one IPv4 address: three words after the ops
	tkOther // through Rule.Target
	tkMask  = 0x7f
	// tkSlow marks a rule the code cannot express: it is matched by matchRule.
	tkSlow = 0x80
)

// Rule flags (word 0, bits 8-15).
const (
	fSrc uint32 = 1 << (8 + iota)
	fSrcNeg
	fSrc6
	fDst
	fDstNeg
	fDst6
	fProto
	fProtoNeg
)

// Op kinds (op word bits 0-7).
const (
	opGeneric uint32 = iota // gen[arg].eval
	opTCP                   // [sport min<<16|max] [dport] [flags mask<<8|comp]
	opUDP                   // [sport] [dport]
	opRandom                // statistic --mode random: probability·2^31
	opMark                  // mark / connmark: value, mask
)

// Op flags (op word bits 8-15).
const (
	oSport uint32 = 1 << (8 + iota)
	oSportNeg
	oDport
	oDportNeg
	oTCPFlags
	oNeg // tcp flags, statistic, mark: the match is negated
	oConn
	oImpure // generic: the match is not pure (pureMatch; the flow cache)
)

// DNAT flags (third target word).
const (
	dnRandom uint32 = 1 << iota
	dnRandomFully
	dnPersistent
)

type prefix6 struct{ hi, lo, mhi, mlo uint64 }

// addrKey is a packet address as the code compares it: kind 4 (IPv4, in lo), kind 6
// (IPv6: hi, lo) or 0 (no address, or one with a zone: it is in no prefix, as
// netip.Prefix.Contains has it).
type addrKey struct {
	hi, lo uint64
	kind   uint8
}

func keyOf(a netip.Addr) addrKey {
	if a.Zone() != "" {
		return addrKey{}
	}
	switch a.BitLen() {
	case 32:
		b := a.As4()
		return addrKey{lo: uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3]), kind: 4}
	case 128:
		b := a.As16()
		return addrKey{hi: be64(b[:8]), lo: be64(b[8:]), kind: 6}
	}
	return addrKey{}
}

func be64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

func mask4(bits int) uint32 {
	if bits <= 0 {
		return 0
	}
	return ^uint32(0) << (32 - bits)
}

func mask64(bits int) uint64 {
	switch {
	case bits <= 0:
		return 0
	case bits >= 64:
		return ^uint64(0)
	}
	return ^uint64(0) << (64 - bits)
}

// progOf returns the chain's chainProg, creating it (not compiled) if needed. A chain
// of fewer than indexThreshold rules gets its records (and verdict reasons) in the
// same allocation as its chainProg, so that entering it reads one block of memory.
func progOf(ch *Chain) *chainProg {
	if ch.prog != nil {
		return ch.prog
	}
	n := len(ch.Rules)
	var p *chainProg
	var x *progExt
	switch {
	case n == 0 || n >= indexThreshold:
		s := &struct {
			chainProg
			x progExt
		}{}
		p, x = &s.chainProg, &s.x
	case n == 1:
		s := &struct {
			chainProg
			r [1]crec
			s [1]string
			x progExt
		}{}
		p, x = &s.chainProg, &s.x
		p.recs, x.reasons = s.r[:], s.s[:]
	case n == 2:
		s := &struct {
			chainProg
			r [2]crec
			s [2]string
			x progExt
		}{}
		p, x = &s.chainProg, &s.x
		p.recs, x.reasons = s.r[:], s.s[:]
	case n <= 4:
		s := &struct {
			chainProg
			r [4]crec
			s [4]string
			x progExt
		}{}
		p, x = &s.chainProg, &s.x
		p.recs, x.reasons = s.r[:n:n], s.s[:n:n]
	case n <= 8:
		s := &struct {
			chainProg
			r [8]crec
			s [8]string
			x progExt
		}{}
		p, x = &s.chainProg, &s.x
		p.recs, x.reasons = s.r[:n:n], s.s[:n:n]
	default:
		s := &struct {
			chainProg
			r [indexThreshold]crec
			s [indexThreshold]string
			x progExt
		}{}
		p, x = &s.chainProg, &s.x
		p.recs, x.reasons = s.r[:n:n], s.s[:n:n]
	}
	x.chain = ch
	p.ext, p.name, p.gone = x, ch.Name, ch.gone
	ch.prog = p
	return p
}

// compile compiles cp's chain (jumps resolved in t) and, when the chain is short enough
// not to be indexed, the chains it jumps to that are not compiled yet, and so on
// through short chains: a KUBE-SVC chain is compiled with its KUBE-SEP chains at the
// service's first packet, rather than each endpoint chain at the first packet the
// random choice sends there. Indexed chains (KUBE-SERVICES) stop this: their targets
// are compiled as packets reach them.
func compile(t *Table, cp *chainProg) {
	todo := []*chainProg{cp}
	var buf []uint32
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if p.ready {
			continue
		}
		ch := p.ext.chain
		n := len(ch.Rules)
		if n >= indexThreshold {
			p.recs = make([]crec, n)
		}
		for i, r := range ch.Rules {
			buf = p.compileRule(t, &p.recs[i], i, r, buf[:0])
		}
		if n >= indexThreshold {
			if ch.idx == nil {
				ch.idx = buildIndex(ch)
			}
			p.idx = newFlatIndex(ch.idx, p.recs)
		}
		p.ready = true
		if n >= indexThreshold {
			continue
		}
		for i := range p.recs {
			if j := p.recs[i].jump; j != nil && !j.ready {
				todo = append(todo, j)
			}
		}
	}
}

// compileRule fills rec for rule i, r (code: scratch for the code words).
func (cp *chainProg) compileRule(t *Table, rec *crec, i int, r *Rule, code []uint32) []uint32 {
	rec.rule, rec.ri = r, uint32(i)
	kind, dnat := compileTarget(t, rec, r.Target)
	if r.InIface.Name != "" || r.OutIface.Name != "" || r.Fragment != FragAny {
		rec.slow(kind)
		return code
	}
	w0, code, ok := cp.compileAddrs(r, kind, code)
	if !ok {
		rec.slow(kind)
		return code
	}
	if r.Proto.Set {
		w0 |= fProto | uint32(r.Proto.Num)<<16
		if r.Proto.Neg {
			w0 |= fProtoNeg
		}
	}
	if code, ok = cp.compileMatches(r, code); !ok {
		rec.slow(kind)
		return code
	}
	if kind == tkDNAT4 {
		code = append(code, dnat[:]...)
	}
	if len(code) > 0xff {
		rec.slow(kind)
		return code
	}
	cp.storeCode(rec, w0, code)
	return code
}

// slow marks rec as a rule the code cannot express, matched by matchRule; a DNAT to
// one address then goes through the Rule's Target.
func (rec *crec) slow(kind uint32) {
	if kind == tkDNAT4 {
		kind = tkOther
	}
	rec.w0 = kind | tkSlow
}

// compileTarget returns the target kind of a rule and, for a DNAT to one IPv4
// address, its three code words; a jump or goto to a chain of t sets rec.jump.
func compileTarget(t *Table, rec *crec, target Target) (kind uint32, dnat [3]uint32) {
	kind = tkOther
	switch tg := target.(type) {
	case nil:
		kind = tkNone
	case *VerdictTarget:
		switch tg.Verdict {
		case "ACCEPT":
			kind = tkAccept
		case "DROP":
			kind = tkDrop
		case "RETURN":
			kind = tkReturn
		}
	case *JumpTarget:
		kind = tkJump
		if tg.Goto {
			kind = tkGoto
		}
		if j := t.Chain(tg.Chain); j != nil {
			rec.jump = progOf(j)
		}
	case *NATTarget:
		if tg.Kind == "DNAT" && tg.AddrMin.Is4() && tg.AddrMax == tg.AddrMin {
			kind = tkDNAT4
			dnat[0] = uint32(keyOf(tg.AddrMin).lo)
			dnat[1] = uint32(tg.PortMin)<<16 | uint32(tg.PortMax)
			if tg.Random {
				dnat[2] |= dnRandom
			}
			if tg.RandomFully {
				dnat[2] |= dnRandomFully
			}
			if tg.Persistent {
				dnat[2] |= dnPersistent
			}
		}
	}
	return kind, dnat
}

// compileAddrs adds the rule's -s and -d to word 0's flags (w0) and appends their code:
// an IPv4 address and mask, or the index of an IPv6 prefix in ext.v6. ok is false
// when an address is one the code cannot compare (one with a zone).
func (cp *chainProg) compileAddrs(r *Rule, w0 uint32, code []uint32) (uint32, []uint32, bool) {
	x := cp.ext
	for _, spec := range [2]struct {
		a             AddrSpec
		set, neg, six uint32
	}{{r.Src, fSrc, fSrcNeg, fSrc6}, {r.Dst, fDst, fDstNeg, fDst6}} {
		if !spec.a.IsSet() {
			continue
		}
		p := spec.a.Prefix
		k := keyOf(p.Addr())
		if k.kind == 0 || p.Bits() < 0 {
			return w0, code, false
		}
		w0 |= spec.set
		if spec.a.Neg {
			w0 |= spec.neg
		}
		if k.kind == 4 {
			m := mask4(p.Bits())
			code = append(code, uint32(k.lo)&m, m)
		} else {
			w0 |= spec.six
			mhi, mlo := mask64(p.Bits()), mask64(p.Bits()-64)
			x.v6 = append(x.v6, prefix6{k.hi & mhi, k.lo & mlo, mhi, mlo})
			code = append(code, uint32(len(x.v6)-1))
		}
	}
	return w0, code, true
}

// compileMatches appends an op word and its arguments per match module (comments,
// which always match and do nothing, are left out); ok is false when the rule has
// more matches than an op word can number.
func (cp *chainProg) compileMatches(r *Rule, code []uint32) ([]uint32, bool) {
	for mi, m := range r.Matches {
		if mi > 0xffff {
			return code, false
		}
		if _, ok := m.(*CommentMatch); ok {
			continue
		}
		o := cp.compileMatch(m)
		code = append(code, o.op|uint32(mi)<<16)
		code = append(code, o.args[:o.n]...)
	}
	return code, true
}

// opCode is one match module's op word (without its match index) and arguments.
type opCode struct {
	op   uint32
	args [3]uint32
	n    int
}

// arg appends an argument.
func (o *opCode) arg(v uint32) {
	o.args[o.n] = v
	o.n++
}

// ports adds a port range, if the match has one, with its flags.
func (o *opCode) ports(s *PortSpec, set, neg uint32) {
	if s == nil {
		return
	}
	o.op |= set
	if s.Neg {
		o.op |= neg
	}
	o.arg(uint32(s.Min)<<16 | uint32(s.Max))
}

// compileMatch returns the op of a match module: its own op for tcp (without
// --tcp-option), udp, statistic's random mode, mark and connmark; any other module is
// opGeneric, called through its Match, kept in ext.gen.
func (cp *chainProg) compileMatch(m Match) opCode {
	var o opCode
	switch m := m.(type) {
	case *TCPMatch:
		if m.Option != 0 {
			break
		}
		o.op = opTCP
		o.ports(m.Sport, oSport, oSportNeg)
		o.ports(m.Dport, oDport, oDportNeg)
		if m.Flags != nil {
			o.op |= oTCPFlags
			if m.Flags.Neg {
				o.op |= oNeg
			}
			o.arg(uint32(m.Flags.Mask)<<8 | uint32(m.Flags.Comp))
		}
		return o
	case *UDPMatch:
		o.op = opUDP
		o.ports(m.Sport, oSport, oSportNeg)
		o.ports(m.Dport, oDport, oDportNeg)
		return o
	case *StatisticMatch:
		if m.Nth {
			break
		}
		o.op = opRandom
		o.arg(m.Probability)
		if m.Neg {
			o.op |= oNeg
		}
		return o
	case *MarkMatch:
		o.op = opMark
		o.arg(m.Value)
		o.arg(m.Mask)
		if m.Neg {
			o.op |= oNeg
		}
		if m.Conn {
			o.op |= oConn
		}
		return o
	}
	x := cp.ext
	o = opCode{op: opGeneric}
	if !pureMatch(m) {
		o.op |= oImpure
	}
	o.arg(uint32(len(x.gen)))
	x.gen = append(x.gen, m)
	return o
}

// storeCode puts the code words in rec (those that do not fit, in ext.more) and
// completes word 0 with their number.
func (cp *chainProg) storeCode(rec *crec, w0 uint32, code []uint32) {
	x := cp.ext
	if len(code) <= recWords {
		copy(rec.code[:], code)
	} else {
		copy(rec.code[:], code[:recWords-1])
		rec.code[recWords-1] = uint32(len(x.more))
		x.more = append(x.more, code[recWords-1:]...)
	}
	rec.w0 = w0 | uint32(len(code))<<24
}

// contains reports whether the packet address k is in the prefix at code word o of
// rec (six: an IPv6 prefix, by its index in ext.v6).
func (cp *chainProg) contains(rec *crec, o int, six bool, k *addrKey) bool {
	if !six {
		return k.kind == 4 && uint32(k.lo)&cp.word(rec, o+1) == cp.word(rec, o)
	}
	p := &cp.ext.v6[cp.word(rec, o)]
	return k.kind == 6 && k.hi&p.mhi == p.hi && k.lo&p.mlo == p.lo
}

// prefixBits is the length of the prefix contains compares at word o of rec: what
// of the address the comparison reads (the wildcard cache keys by that much of it).
func (cp *chainProg) prefixBits(rec *crec, o int, six bool) uint8 {
	if !six {
		return uint8(bits.OnesCount32(cp.word(rec, o+1)))
	}
	p := &cp.ext.v6[cp.word(rec, o)]
	return uint8(bits.OnesCount64(p.mhi) + bits.OnesCount64(p.mlo))
}

func portIn(spec uint32, port uint16) bool {
	return uint32(port) >= spec>>16 && uint32(port) <= spec&0xffff
}

// pktKeys are the packet's addresses as the code compares them, set when an untraced
// table evaluation starts (NAT, which changes them, ends the table's traversal).
type pktKeys struct{ src, dst addrKey }

// matchRec is matchRule for a compiled rule: the same checks, in the same order, with
// the same side effects (statistic draws, recent updates, assumptions).
func (c *evalCtx) matchRec(cp *chainProg, rec *crec) bool {
	w0 := rec.w0
	if w0&tkSlow != 0 {
		c.chain = cp.name
		return c.matchRule(rec.rule)
	}
	o := 0
	if w0&fSrc != 0 {
		six := w0&fSrc6 != 0
		var in bool
		if six {
			// (A mask is a prefix's: AddrSpec holds a netip.Prefix, and a dump's
			// non-contiguous mask is refused.)
			p := &cp.ext.v6[cp.word(rec, o)]
			in = c.srcIn6(p.hi, p.lo, uint32(cp.prefixBits(rec, o, six)))
		} else {
			in = c.srcIn4(cp.word(rec, o), cp.word(rec, o+1))
		}
		if in == (w0&fSrcNeg != 0) {
			return false
		}
		o += 2
		if six {
			o--
		}
	}
	if w0&fDst != 0 {
		six := w0&fDst6 != 0
		c.reads |= rdDstNet
		c.dbits = max(c.dbits, cp.prefixBits(rec, o, six))
		if cp.contains(rec, o, six, &c.keys.dst) == (w0&fDstNeg != 0) {
			return false
		}
		o += 2
		if six {
			o--
		}
	}
	p := c.pkt
	if w0&fProto != 0 && (p.Proto == uint8(w0>>16)) == (w0&fProtoNeg != 0) {
		return false
	}
	end := int(w0 >> 24)
	if w0&tkMask == tkDNAT4 {
		end -= 3
	}
	for o < end {
		op := cp.word(rec, o)
		o++
		switch op & 0xff {
		case opTCP, opUDP:
			proto := netfilter.ProtoTCP
			if op&0xff == opUDP {
				proto = netfilter.ProtoUDP
			}
			if p.Fragment || p.Proto != proto {
				return false
			}
			if op&oSport != 0 {
				c.reads |= rdSport
				if portIn(cp.word(rec, o), p.SrcPort) == (op&oSportNeg != 0) {
					return false
				}
				o++
			}
			if op&oDport != 0 {
				c.reads |= rdDport
				if portIn(cp.word(rec, o), p.DstPort) == (op&oDportNeg != 0) {
					return false
				}
				o++
			}
			if op&oTCPFlags != 0 {
				c.reads |= rdFlags
				f := cp.word(rec, o)
				if ((p.TCPFlags & uint8(f>>8)) == uint8(f)) == (op&oNeg != 0) {
					return false
				}
				o++
			}
		case opRandom:
			if c.chance(float64(cp.word(rec, o))/(1<<31)) == (op&oNeg != 0) {
				return false
			}
			o++
		case opMark:
			v := p.Mark
			if op&oConn != 0 {
				if !hasCT(p) {
					return false
				}
				v = p.CT.Mark
			}
			if (v&cp.word(rec, o+1) == cp.word(rec, o)) == (op&oNeg != 0) {
				return false
			}
			o += 2
		default:
			m := cp.ext.gen[cp.word(rec, o)]
			o++
			if op&oImpure != 0 {
				c.impure = true
			}
			if c.wild {
				rd, ok := c.matchReads(m)
				c.reads |= rd
				if !ok {
					c.wildNo = true
				}
			}
			res := m.eval(c)
			if res == unknown {
				c.chain = cp.name
				res = c.assumeUnknown(rec.rule, int(op>>16), m)
			}
			if res == no {
				return false
			}
		}
	}
	return true
}

// dnat4 applies a compiled single-address IPv4 DNAT (the last three code words).
func (c *evalCtx) dnat4(cp *chainProg, rec *crec, hook netfilter.Hook) *NAT {
	n := int(rec.w0 >> 24)
	w := [3]uint32{cp.word(rec, n-3), cp.word(rec, n-2), cp.word(rec, n-1)}
	a := w[0]
	addr := netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
	tg := NATTarget{Kind: "DNAT", AddrMin: addr, AddrMax: addr, PortMin: uint16(w[1] >> 16), PortMax: uint16(w[1]),
		Random: w[2]&dnRandom != 0, RandomFully: w[2]&dnRandomFully != 0, Persistent: w[2]&dnPersistent != 0}
	return c.natTarget(rec.rule, hook, cp.name, &tg)
}

// flatIndex is a chainIndex for compiled chains, in open-addressing tables of fixed-size
// slots: a lookup reads one slot, and a key with a single rule (a KUBE-SERVICES
// ClusterIP) keeps a copy of that rule's record in its slot.
type flatIndex struct {
	dst, port flatTable
	rest      []*crec
	lists     []*crec
}

type flatTable struct {
	slots []flatSlot
	mask  uint64
}

type flatSlot struct {
	hi, lo uint64
	first  uint32 // the list's start in lists, when the key has more than one rule
	meta   uint32 // the number of rules | the key's address kind<<24; 0: empty
	rec    crec   // the rule, when the key has one
}

func flatHash(hi, lo uint64) uint64 {
	h := (hi ^ lo*0x9e3779b97f4a7c15) * 0xff51afd7ed558ccd
	return h ^ h>>29
}

func (ft *flatTable) init(n int) {
	if n == 0 {
		return
	}
	size := 2
	for size <= n+n/2 { // at least one slot stays empty: lookups end
		size <<= 1
	}
	ft.slots, ft.mask = make([]flatSlot, size), uint64(size-1)
}

func (ft *flatTable) put(hi, lo uint64, kind uint8) *flatSlot {
	for i := flatHash(hi, lo) & ft.mask; ; i = (i + 1) & ft.mask {
		if s := &ft.slots[i]; s.meta == 0 {
			s.hi, s.lo, s.meta = hi, lo, uint32(kind)<<24
			return s
		}
	}
}

func (ft *flatTable) get(hi, lo uint64, kind uint8) *flatSlot {
	if ft.slots == nil {
		return nil
	}
	for i := flatHash(hi, lo) & ft.mask; ; i = (i + 1) & ft.mask {
		s := &ft.slots[i]
		if s.meta == 0 {
			return nil
		}
		if s.hi == hi && s.lo == lo && s.meta>>24 == uint32(kind) {
			return s
		}
	}
}

// newFlatIndex copies a chain's index, with the chain's records, into flat tables.
func newFlatIndex(idx *chainIndex, recs []crec) *flatIndex {
	fi := &flatIndex{}
	fill := func(s *flatSlot, l []int32) {
		if len(l) == 1 {
			s.rec = recs[l[0]]
		} else {
			s.first = uint32(len(fi.lists))
			for _, ri := range l {
				fi.lists = append(fi.lists, &recs[ri])
			}
		}
		s.meta |= uint32(len(l))
	}
	fi.dst.init(len(idx.byDst))
	for a, l := range idx.byDst {
		k := keyOf(a) // a prefix's address: no zone
		fill(fi.dst.put(k.hi, k.lo, k.kind), l)
	}
	fi.port.init(len(idx.byPort))
	for pk, l := range idx.byPort {
		fill(fi.port.put(uint64(pk.proto), uint64(pk.port), 1), l)
	}
	for _, ri := range idx.rest {
		fi.rest = append(fi.rest, &recs[ri])
	}
	return fi
}

func (fi *flatIndex) lookup(ft *flatTable, hi, lo uint64, kind uint8, one *[1]*crec) []*crec {
	s := ft.get(hi, lo, kind)
	if s == nil {
		return nil
	}
	if n := s.meta & 0xffffff; n > 1 {
		return fi.lists[s.first : s.first+n]
	}
	one[0] = &s.rec
	return one[:]
}

// candidates appends to buf the rules that may match p, in order.
func (fi *flatIndex) candidates(p *Packet, k *addrKey, buf []*crec) []*crec {
	var oneA, oneB [1]*crec
	var a, b []*crec
	if k.kind != 0 { // no address, or a zoned one: no index key is one (prefixes have no zone)
		a = fi.lookup(&fi.dst, k.hi, k.lo, k.kind, &oneA)
	}
	if p.hasPorts() {
		b = fi.lookup(&fi.port, uint64(p.Proto), uint64(p.DstPort), 1, &oneB)
	}
	c := fi.rest
	for len(a)+len(b)+len(c) > 0 {
		var m *crec
		if len(a) > 0 {
			m = a[0]
		}
		if len(b) > 0 && (m == nil || b[0].ri < m.ri) {
			m = b[0]
		}
		if len(c) > 0 && (m == nil || c[0].ri < m.ri) {
			m = c[0]
		}
		buf = append(buf, m)
		switch {
		case len(a) > 0 && a[0] == m:
			a = a[1:]
		case len(b) > 0 && b[0] == m:
			b = b[1:]
		default:
			c = c[1:]
		}
	}
	return buf
}
