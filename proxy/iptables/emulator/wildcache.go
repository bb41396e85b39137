package emulator

import (
	"encoding/binary"
	"math/bits"
	"net/netip"

	"github.com/clusterlab/clusterlab/netfilter"
)

// The wildcard cache: RunTable's shortcut for a packet whose traversal differs from one
// it has seen only in fields no rule on the way read.
//
// The flow cache (flowcache.go) keys a traversal by the whole packet, so a connection's
// first packet (a probe: a new source port each time) always misses it. A traversal
// reads far less: kube-proxy's nat PREROUTING reads the destination address and port,
// the protocol, the source address (the masquerade checks) and the marks, never the
// source port. The wildcard cache records, during a compiled traversal, which of the
// packet's fields it read (evalCtx.reads: the rules' -s/-d, the ports and TCP flags
// their matches test, the interfaces of the rules that name one, a chain index's
// destination and port, a NAT target's addresses and port) and keys the outcome by the
// packet with the other fields left out. A packet that agrees with the key on every
// field in it meets the same rules in the same order, each deciding the same way, so it
// gets the same outcome: verdict, NAT, marks, conntrack state, counters.
//
// Always in the key, whatever was read: the protocol, the fragment flag, the mark, the
// conntrack state, status, direction and mark (targets write them, and they are cheap
// to compare). Never: Len (counters only) and, among the fields a traversal may read,
// none that the key leaves out: a traversal that reads anything the key cannot hold
// (xt_recent, sets, addrtype, ipvs, nfacct, an nth counter, --ctexpire, an unknown
// match's assumption, MASQUERADE and REDIRECT, which read the host's addresses, a NAT
// that picks from a range) sets wildNo and is not kept.
//
// Draws from the random source (-m statistic --mode random) are kept as a tree: an
// entry holds, for its key, the probabilities the traversal drew with, in order, and
// for each outcome of each draw what came next (another draw, or the outcome). A hit
// draws from the same source with the same probabilities in the same order, as the
// traversal would have, and follows the tree; when it reaches a branch the entry has
// not seen, the traversal runs with those draws given (evalCtx.pre: the source is not
// drawn from twice) and the branch is added. So seeded runs are unchanged.
//
// One key mask per table and hook (wildCache.masks): the union of what the traversals
// there read since the ruleset's generation began (a key with more fields than needed
// is still exact). An entry recorded under a smaller mask is not found under the
// larger one; it is replaced when its slot fills again.
//
// Like the flow cache, entries are valid for one ruleset generation (Emulator.gen), and
// traversals with a trace, dry runs and interpreted traversals neither use nor fill the
// cache.

// Fields a traversal may read besides those always in the key (evalCtx.reads).
const (
	rdSrc uint16 = 1 << iota
	rdDst
	rdSport
	rdDport
	rdFlags
	rdICMP // type and code
	rdIn
	rdOut
	rdTTL
	rdTuples // the conntrack tuples
	// rdDstNet: a prefix of the destination (the longest a rule compared:
	// evalCtx.dbits), where rdDst reads all of it.
	rdDstNet
)

// wildSize is the number of wildcard cache entries per emulator (two-way set
// associative: wildCache.find), and
// wildSharedSize per ruleset shared by emulators (ShareWildCache): one cache then
// serves every node of a group, whose probes spread over many more Services than one
// node's packets do, for the memory of one.
const (
	wildSize       = 64
	wildSharedSize = 16384
)

// wkey is a packet as an entry's key holds it: the fields outside mask are zero, and
// ext, the fields few traversals read, counts only when mask has one of them (rdExt).
type wkey struct {
	wcore
	ext wext
}

type wcore struct {
	mask                       uint16
	dbits                      uint8 // the prefix of dst kept (rdDstNet)
	proto, flags, icmpT, icmpC uint8
	ttl                        uint8
	frag, ctReply              bool
	ctState                    netfilter.CtState
	ctStatus                   netfilter.CtStatus
	sport, dport               uint16
	mark, ctMark               uint32
	src, dst                   netip.Addr
}

type wext struct {
	in, out     string
	orig, reply netfilter.Tuple
}

// rdExt are the reads whose fields are in wkey.ext.
const rdExt = rdIn | rdOut | rdTuples

// equal reports whether k and o are the same key.
func (k *wkey) equal(o *wkey) bool {
	return k.wcore == o.wcore && (k.mask&rdExt == 0 || k.ext == o.ext)
}

// keyIn fills k with q's fields under mask, and the first db bits of the destination
// when mask reads it as a prefix.
func (k *wkey) keyIn(q *Packet, mask uint16, db uint8) {
	k.wcore = wcore{mask: mask, proto: q.Proto, frag: q.Fragment, ctReply: q.CT.Reply, ctState: q.CT.State,
		ctStatus: q.CT.Status, mark: q.Mark, ctMark: q.CT.Mark}
	if mask&rdSrc != 0 {
		k.src = q.Src
	}
	switch {
	case mask&rdDst != 0:
		k.dst = q.Dst
	case mask&rdDstNet != 0:
		k.dst, k.dbits = keyPrefix(q.Dst, db), db
	}
	if mask&rdSport != 0 {
		k.sport = q.SrcPort
	}
	if mask&rdDport != 0 {
		k.dport = q.DstPort
	}
	if mask&rdFlags != 0 {
		k.flags = q.TCPFlags
	}
	if mask&rdICMP != 0 {
		k.icmpT, k.icmpC = q.ICMPType, q.ICMPCode
	}
	if mask&rdTTL != 0 {
		k.ttl = q.TTL
	}
	if mask&rdExt != 0 {
		k.ext = wext{}
		if mask&rdIn != 0 {
			k.ext.in = q.InIface
		}
		if mask&rdOut != 0 {
			k.ext.out = q.OutIface
		}
		if mask&rdTuples != 0 {
			k.ext.orig, k.ext.reply = q.CT.Orig, q.CT.ReplyTuple
		}
	}
}

// keyPrefix returns a's first n bits (of 32 for IPv4, of 128 for IPv6), the rest zero:
// every address with those bits answers a comparison with a prefix of at most n bits
// as a does, and is of a's family. An address with a zone or an IPv4-mapped one is
// kept whole (the comparisons treat them apart).
func keyPrefix(a netip.Addr, n uint8) netip.Addr {
	switch {
	case a.Is4():
		if n >= 32 {
			return a
		}
		b := a.As4()
		v := binary.BigEndian.Uint32(b[:]) &^ (^uint32(0) >> n)
		binary.BigEndian.PutUint32(b[:], v)
		return netip.AddrFrom4(b)
	case !a.Is6() || a.Is4In6() || a.Zone() != "" || n >= 128:
		return a
	}
	p, _ := a.Prefix(int(n))
	return p.Addr()
}

// hash returns k's hash, for the slot (b: the table and hook's bit).
func (k *wkey) hash(b int) uint64 {
	h := uint64(b) | uint64(k.mask)<<8 | uint64(k.proto)<<24 | uint64(k.ctState)<<32 | uint64(k.dport)<<40 | uint64(k.flags)<<56
	h ^= (uint64(k.mark) | uint64(k.ctMark)<<32) * 0x9e3779b97f4a7c15
	h ^= (uint64(k.sport) | uint64(k.ctStatus)<<16 | uint64(k.icmpT)<<32 | uint64(k.icmpC)<<40 | uint64(k.ttl)<<48 | uint64(b2i(k.ctReply))<<56 | uint64(b2i(k.frag))<<57) * 0xd6e8feb86659fd93
	if k.src.IsValid() {
		s := k.src.As16()
		h ^= (uint64(s[8])<<56 | uint64(s[9])<<48 | uint64(s[10])<<40 | uint64(s[11])<<32 | uint64(s[12])<<24 | uint64(s[13])<<16 | uint64(s[14])<<8 | uint64(s[15])) * 0xc2b2ae3d27d4eb4f
	}
	if k.dst.IsValid() {
		d := k.dst.As16()
		h ^= (uint64(d[8])<<56 | uint64(d[9])<<48 | uint64(d[10])<<40 | uint64(d[11])<<32 | uint64(d[12])<<24 | uint64(d[13])<<16 | uint64(d[14])<<8 | uint64(d[15])) * 0x165667b19e3779f9
	}
	if k.mask&rdExt != 0 {
		h ^= uint64(len(k.ext.in))<<3 ^ uint64(len(k.ext.out))<<11
	}
	h *= 0xff51afd7ed558ccd
	return h ^ h>>31
}

// wnode is a node of an entry's draw tree: a draw with probability p whose outcomes
// lead to kid[0] (not taken) and kid[1] (taken), each a node's index+1 (0: not seen
// yet), or, when leaf > 0, the outcome leaves[leaf-1].
type wnode struct {
	d    wdraw // the draw (its v unused)
	kid  [2]int32
	leaf int32
}

// wleaf is one traversal's outcome.
type wleaf struct {
	v            TableVerdict
	mark, ctMark uint32
	ctState      netfilter.CtState
	ctStatus     netfilter.CtStatus
	src, dst     netip.Addr
	dport        uint16
	rules        []*Rule // the rules it matched (counted)
	policy       *Chain  // the built-in chain whose policy decided (nil: a rule)
}

type wildEnt struct {
	gen    uint64 // 0: empty
	bit    int
	used   uint64 // the cache's tick when it was last filled or hit (the pair's victim is the older)
	key    wkey
	nodes  []wnode // nodes[0] is the root
	leaves []wleaf
}

// wdraw is one of a traversal's questions whose answer is not in the packet, with the
// answer v: a draw from the random source with probability p (kind drawChance), or an
// addrtype test (drawAddr4, drawAddr6: is a of a type in mask, on iface), whose
// answer is the host's.
type wdraw struct {
	p      float64
	a      netip.Addr
	iface  string
	mask   AddrType
	pv, pm uint32 // drawSrc4: the prefix's address and mask
	kind   uint8
	v      bool
}

// The kinds of draws.
const (
	drawChance uint8 = iota
	drawAddr4
	drawAddr6
	// drawSrc4: is the packet's source in the IPv4 prefix pv/pm (a compiled rule's
	// -s)? Asked of every packet that hits, so that the key need not hold the source:
	// kube-proxy's rules compare it with the cluster's pod CIDR and, in each endpoint's
	// chain, with the endpoint's address (hairpin masquerade), and a key holding it
	// would keep an entry per client where these answers give one per Service.
	drawSrc4
	// drawSrc6: drawSrc4 for an IPv6 prefix of contiguous mask: a its (masked)
	// address, pm its length.
	drawSrc6
)

// same reports whether d and o ask the same question.
func (d *wdraw) same(o *wdraw) bool {
	return d.kind == o.kind && d.p == o.p && d.a == o.a && d.iface == o.iface && d.mask == o.mask &&
		d.pv == o.pv && d.pm == o.pm
}

// ask answers the question d asks, as a traversal would: the random source is drawn
// from as evalCtx.chance draws, the host asked as AddrTypeMatch.eval asks.
func (d *wdraw) ask(env Env, q *Packet) bool {
	switch d.kind {
	case drawSrc4:
		return src4In(keyOf(q.Src), d.pv, d.pm)
	case drawSrc6:
		return src6In(keyOf(q.Src), keyOf(d.a), d.pm)
	case drawAddr4:
		return addrTypeMatch(env, d.a, d.iface, d.mask)
	case drawAddr6:
		return addrTypeMatch6(env, d.a, d.iface, d.mask)
	}
	ch := envChooser{env}
	return ch.chance(d.p)
}

type wildCache struct {
	ents  []wildEnt  // a power of two long
	shift uint8      // 64 - log2(len(ents)): a key hash's top bits index ents
	masks [40]uint16 // per table and hook bit: the key mask (valid for mgen)
	mgen  [40]uint64
	// dbits, per table and hook bit: the prefix of the destination in the key when
	// the mask has rdDstNet (valid for mgen).
	dbits [40]uint8
	pre   []wdraw // a lookup's draws (the traversal after a partial hit replays them)
	tick  uint64  // counts fills and hits (wildEnt.used)
	// gen is the generation of a ruleset's cache's entries (ShareWildCache): a new
	// ruleset takes over its predecessor's cache with a new one (passWild).
	gen uint64
}

// find returns the entry holding k at table and hook bit b, or nil. The cache is
// two-way set associative: k's entry is in slot i or i^1 (i from its hash), so that
// two keys a node's packets alternate between (a Service's backends, say) do not evict
// each other from one slot at every packet.
func (w *wildCache) find(gen uint64, b int, k *wkey) *wildEnt {
	i := int(k.hash(b) >> w.shift)
	if ent := &w.ents[i]; ent.gen == gen && ent.bit == b && ent.key.equal(k) {
		return ent
	}
	if ent := &w.ents[i^1]; ent.gen == gen && ent.bit == b && ent.key.equal(k) {
		return ent
	}
	return nil
}

// victim returns the slot of k's pair that a new entry for k takes: one not valid for
// gen, else the one filled or hit longer ago.
func (w *wildCache) victim(gen uint64, k *wkey, b int) *wildEnt {
	i := int(k.hash(b) >> w.shift)
	a, o := &w.ents[i], &w.ents[i^1]
	switch {
	case a.gen != gen:
		return a
	case o.gen != gen:
		return o
	case o.used < a.used:
		return o
	}
	return a
}

// newWildCache returns a cache of n entries (a power of two).
func newWildCache(n int) *wildCache {
	return &wildCache{ents: make([]wildEnt, n), shift: uint8(64 - bits.TrailingZeros(uint(n))), gen: 1}
}

// passWild hands the shared cache of the emulator's ruleset over to rs, the ruleset
// replacing it, its entries no longer valid (a new generation): a group's versions
// follow one another, and once a newer one exists the older is interpreted (no
// cache), so the cache's 16,384 entries are made once rather than at each sync. An
// emulator that still evaluates the older version compiled makes a cache anew.
func (e *Emulator) passWild(rs *Ruleset) {
	old := e.rs
	if !e.shareWild || old == nil || old == rs || old.wild == nil || rs.wild != nil {
		return
	}
	rs.wild, old.wild = old.wild, nil
	rs.wild.gen++
}

// wildMiss is what RunTable keeps of a missed lookup for filling the cache after the
// traversal.
type wildMiss struct {
	b   int
	ent *wildEnt // the entry whose tree the lookup followed (nil: no entry for the key)
	pre []wdraw  // the draws the lookup made (given to the traversal)
	in  Packet   // the packet as it entered (written on a miss only: last)
}

// wildMask returns the key mask of table and hook bit b for the current generation.
func (w *wildCache) wildMask(gen uint64, b int) uint16 {
	if w.mgen[b] != gen {
		w.mgen[b], w.masks[b], w.dbits[b] = gen, 0, 0
	}
	return w.masks[b]
}

// wildLookup looks q up at table and hook bit b. On a hit it replays the outcome (the
// counters, the packet's changes) and returns it with true. On a miss it fills m for
// wildFill; the draws it made are in m.pre.
func (e *Emulator) wildLookup(env Env, b int, q *Packet, m *wildMiss) (TableVerdict, bool) {
	w, gen := e.wildCache()
	var k wkey
	k.keyIn(q, w.wildMask(gen, b), w.dbits[b])
	ent := w.find(gen, b, &k)
	m.b, m.ent, m.pre = b, nil, w.pre[:0]
	if ent != nil {
		for n := &ent.nodes[0]; ; {
			if n.leaf > 0 {
				w.tick++
				ent.used = w.tick
				e.wildHits++
				if len(m.pre) > 0 {
					e.wildDrawHits++
				}
				w.pre = m.pre // its storage, grown
				return ent.leaves[n.leaf-1].replay(q, k.mask), true
			}
			d := n.d
			d.v = d.ask(env, q)
			v := d.v
			m.pre = append(m.pre, d)
			next := n.kid[b2i(v)]
			if next == 0 {
				m.ent = ent
				break
			}
			n = &ent.nodes[next-1]
		}
	}
	w.pre = m.pre
	m.in = *q
	return TableVerdict{}, false
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

// replay applies the outcome to q, as the traversal would, and returns its verdict.
func (l *wleaf) replay(q *Packet, mask uint16) TableVerdict {
	countReplay(l.rules, l.policy, 1, uint64(q.Len))
	q.Mark, q.CT.Mark, q.CT.State, q.CT.Status = l.mark, l.ctMark, l.ctState, l.ctStatus
	// A NAT target reads and writes these (so they are in the mask when one ran);
	// when they are in the mask and nothing wrote them, the leaf holds the key's.
	if mask&rdSrc != 0 {
		q.Src = l.src
	}
	if mask&rdDst != 0 {
		q.Dst = l.dst
	}
	if mask&rdDport != 0 {
		q.DstPort = l.dport
	}
	return l.v
}

// wildFill keeps the traversal c just ran for m.in (which left q and gave v) when
// nothing it read is outside what a key holds.
func (e *Emulator) wildFill(c *evalCtx, m *wildMiss, q *Packet, v *TableVerdict) {
	if c == nil || !c.compiled || c.dry || c.wildNo || c.tr != nil {
		return
	}
	w, gen := e.wildCache()
	mask := w.wildMask(gen, m.b) | c.reads
	w.masks[m.b] = mask
	w.dbits[m.b] = max(w.dbits[m.b], c.dbits)
	var k wkey
	k.keyIn(&m.in, mask, w.dbits[m.b])
	ent := m.ent
	if ent == nil || ent.key.wcore.mask != mask || ent.key.dbits != k.dbits || ent.gen != gen || ent.bit != m.b {
		// A new entry (or one whose key needs more fields now: it starts again).
		if ent = w.find(gen, m.b, &k); ent == nil {
			ent = w.victim(gen, &k, m.b)
			ent.gen, ent.bit, ent.key = gen, m.b, k
			ent.nodes, ent.leaves = ent.nodes[:0], ent.leaves[:0]
		}
	}
	w.tick++
	ent.used = w.tick
	if !ent.add(c.draws) {
		return // the path is there already
	}
	// The new leaf is the last node added.
	l := ent.newLeaf()
	ent.nodes[len(ent.nodes)-1].leaf = int32(len(ent.leaves))
	l.v = *v
	l.mark, l.ctMark, l.ctState, l.ctStatus = q.Mark, q.CT.Mark, q.CT.State, q.CT.Status
	l.src, l.dst, l.dport = q.Src, q.Dst, q.DstPort
	l.rules = append(l.rules[:0], c.counted...)
	l.policy = c.policyHit
}

// newLeaf appends a leaf, reusing an old one's rules slice.
func (ent *wildEnt) newLeaf() *wleaf {
	if len(ent.leaves) < cap(ent.leaves) {
		ent.leaves = ent.leaves[:len(ent.leaves)+1]
		l := &ent.leaves[len(ent.leaves)-1]
		rules := l.rules
		*l = wleaf{rules: rules[:0]}
		return l
	}
	ent.leaves = append(ent.leaves, wleaf{})
	return &ent.leaves[len(ent.leaves)-1]
}

// add adds the path of draws d to the entry's tree, ending at a new node the caller
// makes a leaf; false when the tree holds the path already. A tree that disagrees
// with d (a leaf where d draws, another probability) cannot come from traversals of
// packets agreeing on the key; it is emptied and holds d alone.
func (ent *wildEnt) add(d []wdraw) bool {
	if len(ent.nodes) == 0 {
		ent.chain(d)
		return true
	}
	n := int32(0)
	for i, dr := range d {
		nd := &ent.nodes[n]
		if nd.leaf > 0 || !nd.d.same(&dr) {
			ent.nodes, ent.leaves = ent.nodes[:0], ent.leaves[:0]
			ent.chain(d)
			return true
		}
		next := nd.kid[b2i(dr.v)]
		if next == 0 {
			nd.kid[b2i(dr.v)] = int32(len(ent.nodes)) + 1
			ent.chain(d[i+1:])
			return true
		}
		n = next - 1
	}
	if ent.nodes[n].leaf == 0 {
		ent.nodes, ent.leaves = ent.nodes[:0], ent.leaves[:0]
		ent.chain(d)
		return true
	}
	return false
}

// chain appends a node per draw of d, each the previous one's child on its outcome,
// and a last node (the leaf's).
func (ent *wildEnt) chain(d []wdraw) {
	for _, dr := range d {
		nd := wnode{d: dr}
		nd.kid[b2i(dr.v)] = int32(len(ent.nodes)) + 2
		ent.nodes = append(ent.nodes, nd)
	}
	ent.nodes = append(ent.nodes, wnode{})
}

// matchReads returns the packet fields a pure match module reads beyond those always
// in a key, and false for a module whose outcome the key cannot hold.
func matchReads(m Match) (uint16, bool) {
	switch m := m.(type) {
	case *CommentMatch, *StateMatch, *MarkMatch, *AddrTypeMatch: // addrtype: reads and draws in evalCtx.addrType
		return 0, true
	case *ICMPMatch:
		return rdICMP, true
	case *IPRangeMatch:
		return rdSrc | rdDst, true
	case *MultiportMatch, *UDPMatch, *SCTPMatch:
		return rdSport | rdDport, true
	case *TCPMatch:
		return rdSport | rdDport | rdFlags, true
	case *StatisticMatch:
		return 0, !m.Nth // random: a draw (the tree); nth: a counter
	case *ConntrackMatch:
		if m.Expire != nil {
			return 0, false
		}
		if m.OrigSrc != nil || m.OrigDst != nil || m.ReplSrc != nil || m.ReplDst != nil ||
			m.OrigSrcPort != nil || m.OrigDstPort != nil || m.ReplSrcPort != nil || m.ReplDstPort != nil {
			// A first packet's tuples are its own (Packet.origTuple).
			return rdTuples | rdSrc | rdDst | rdSport | rdDport, true
		}
		return 0, true
	}
	return 0, false
}

// matchReads is matchReads(m) for this evaluation: a set match's reads depend on its
// set (setReads).
func (c *evalCtx) matchReads(m Match) (uint16, bool) {
	if sm, ok := m.(*SetMatch); ok {
		return c.setReads(sm)
	}
	return matchReads(m)
}

// setReads returns the packet fields a set match reads: the address or port of each
// of its set's dimensions, from the side its direction names (IPSet.test), and the
// destination (the family check). Its outcome is a function of those and of the set's
// members, which only a restore of the emulator's sets changes, moving the emulator's
// generation: with a wildcard cache shared between emulators (ShareWildCache), whose
// sets may differ, it is not kept. A missing set or counter conditions decide nothing
// (the match is unknown: an assumption, never kept).
func (c *evalCtx) setReads(m *SetMatch) (uint16, bool) {
	if !c.wildSets || c.st.ipsets == nil {
		return 0, false
	}
	set := c.st.ipsets.Get(m.Name)
	if set == nil {
		return 0, false
	}
	rd := rdDst
	for i, d := range set.dims {
		if i >= len(m.Dirs) {
			break // fewer directions than dimensions: a miss whatever the packet
		}
		switch d {
		case dimIP, dimNet:
			if m.Dirs[i] {
				rd |= rdDst
			} else {
				rd |= rdSrc
			}
		case dimPort:
			if m.Dirs[i] {
				rd |= rdDport
			} else {
				rd |= rdSport
			}
		default:
			return 0, false
		}
	}
	return rd, true
}

// ruleReads returns what matchRule reads of the packet for r's header and matches
// (all of them: a superset of what one evaluation reads).
func (c *evalCtx) ruleReads(r *Rule) {
	if r.Src.IsSet() {
		c.reads |= rdSrc
	}
	if r.Dst.IsSet() {
		c.reads |= rdDst
	}
	if r.InIface.Name != "" {
		c.reads |= rdIn
	}
	if r.OutIface.Name != "" {
		c.reads |= rdOut
	}
	for _, m := range r.Matches {
		rd, ok := c.matchReads(m)
		c.reads |= rd
		if !ok {
			c.wildNo = true
		}
	}
}

// wildCache returns the wildcard cache RunTable uses and the generation its entries
// must have: the emulator's own, valid for a generation (Emulator.gen), or, with
// ShareWildCache, the ruleset's, valid for as long as the ruleset holds it (its own
// generation, wildCache.gen).
func (e *Emulator) wildCache() (*wildCache, uint64) {
	if e.shareWild {
		if e.rs.wild == nil {
			e.rs.wild = newWildCache(wildSharedSize)
		}
		return e.rs.wild, e.rs.wild.gen
	}
	if e.wild == nil {
		e.wild = newWildCache(wildSize)
	}
	return e.wild, e.gen
}

// ShareWildCache keeps RunTable's wildcard cache on the ruleset (on) rather than in
// the emulator (off, the default), so that emulators holding the same ruleset
// (Adopt) share one cache: what one of them learned, another's packets hit. An entry
// holds nothing of the emulator that filled it: its key and outcome come from the
// packet and the rules (shared, counters included), and what else a traversal asks
// (a random draw, an address's type) is asked again of the emulator whose packet hits
// it, as the traversal would. What the emulator alone decides (xt_recent, nth, sets,
// ipvs, nfacct, MASQUERADE's host addresses) is never kept (wildNo), and an emulator
// evaluating a ruleset interpreted (Interpret) does not use the cache.
//
// The emulators sharing a ruleset must not evaluate at the same time (the caller
// serialises them, as it must already for their shared compiled chains).
func (e *Emulator) ShareWildCache(on bool) {
	e.mu.Lock()
	e.shareWild = on
	e.gen++
	e.mu.Unlock()
}

// SharesWildCache reports whether the emulator keeps its wildcard cache on its ruleset
// (ShareWildCache).
func (e *Emulator) SharesWildCache() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.shareWild
}

// WildCache turns RunTable's wildcard cache on (the default) or off (tests compare).
func (e *Emulator) WildCache(on bool) {
	e.mu.Lock()
	e.noWild = !on
	e.gen++
	e.mu.Unlock()
}

// addrType is AddrTypeMatch's test of a (the packet's field rd) against mask on iface,
// recorded for the wildcard cache as a draw whose answer is the host's.
func (c *evalCtx) addrType(six bool, a netip.Addr, rd uint16, iface string, mask AddrType) bool {
	c.reads |= rd | rdDst // rdDst: the family (Packet.Family)
	if iface != "" {
		c.reads |= rdIn | rdOut
	}
	d := wdraw{a: a, iface: iface, mask: mask, kind: drawAddr4}
	if six {
		d.kind = drawAddr6
	}
	if c.npre < len(c.pre) {
		p := &c.pre[c.npre]
		c.npre++
		if !p.same(&d) {
			c.wildNo = true // cannot happen: the key holds all that led here
		}
		d.v = p.v
	} else {
		d.v = d.ask(c.env, c.pkt)
	}
	if c.wild {
		c.draws = append(c.draws, d)
	}
	return d.v
}

// src4In is a compiled rule's test of an IPv4 -s (chainProg.contains).
func src4In(k addrKey, v, m uint32) bool { return k.kind == 4 && uint32(k.lo)&m == v }

// src6In is a compiled rule's test of an IPv6 -s whose mask is the first n bits, the
// prefix's address p (masked).
func src6In(k, p addrKey, n uint32) bool {
	mhi, mlo := mask64(int(n)), mask64(int(n)-64)
	return k.kind == 6 && k.hi&mhi == p.hi && k.lo&mlo == p.lo
}

// srcIn6 is srcIn4 for an IPv6 -s of prefix length n (drawSrc6).
func (c *evalCtx) srcIn6(hi, lo uint64, n uint32) bool {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	return c.srcQuestion(wdraw{kind: drawSrc6, a: netip.AddrFrom16(b), pm: n, v: src6In(c.keys.src, addrKey{hi: hi, lo: lo, kind: 6}, n)})
}

// srcIn4 answers a compiled rule's -s v/m for the packet, recorded for the wildcard
// cache as a draw (drawSrc4) whose answer is the packet's.
func (c *evalCtx) srcIn4(v, m uint32) bool {
	return c.srcQuestion(wdraw{kind: drawSrc4, pv: v, pm: m, v: src4In(c.keys.src, v, m)})
}

// srcQuestion records source question d, answered, for the wildcard cache.
func (c *evalCtx) srcQuestion(d wdraw) bool {
	if c.npre < len(c.pre) {
		p := &c.pre[c.npre]
		c.npre++
		if !p.same(&d) || p.v != d.v {
			c.wildNo = true // cannot happen: the lookup asked the same of the same packet
		}
	}
	if c.wild {
		c.draws = append(c.draws, d)
	}
	return d.v
}
