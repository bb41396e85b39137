package emulator

import (
	"encoding/binary"
	"net/netip"

	"github.com/clusterlab/clusterlab/netfilter"
)

// The outcome cache: RunChain's shortcut for a packet whose evaluation of a base chain
// differs from one already seen only in fields no rule on the way read.
//
// The evaluator interprets a base chain's rules for every packet. A connection's first
// packet (a probe: a new source port each time) reads far less than the whole packet:
// kube-proxy's nat-prerouting reads the destination address, protocol and port (the
// service-ips verdict map), the source address (the masquerade check) and the marks,
// never the source port. Every packet value a rule reads goes through evalCtx.load;
// the evaluation records which fields it read (evalCtx.reads) and the outcome is kept
// under the packet with the other fields left out. A packet that agrees with the key on
// every field in it meets the same rules, each deciding the same way, so it gets the
// same outcome: verdict, NAT, deciding rule, marks, counters bumped.
//
// Always in the key: the base chain, the protocol, the address family, the mark and
// the conntrack state, status and mark (statements write the marks; all are cheap to
// compare). Never in it: the length (counters add the packet's own), ICMP type, code
// and TTL (no expression reads them), the conntrack tuples and expiry (idem).
//
// Two things a rule may consult are not the packet: numgen random (Env.Pick) and fib
// (Env.IsLocal, the node's addresses, which change without the ruleset changing). An
// entry keeps them as a tree of decision points in the order the evaluation met them:
// for each value of each decision, what came next (another decision, or the outcome).
// A hit asks the Env the same questions in the same order, as the evaluation would
// have (so a seeded run draws the same numbers), and follows the tree; a branch it has
// not seen runs the evaluation with the draws already made given to it (evalCtx.pre:
// the source is not drawn from twice), and the branch is added.
//
// Not kept: an evaluation that met a set element with a timeout (its liveness is the
// clock's), a set update statement (it changes the sets: the whole cache is dropped
// when one ran), an unknown statement that is not terminal (its value is the
// Assumer's). Traced evaluations, dry runs, walks and trains neither use nor fill the
// cache. Entries are valid for one ruleset generation.
//
// One key mask per base chain (chainCache.mask): the union of the fields its
// evaluations read this generation (a key with more fields than needed is still
// exact). An entry recorded under a smaller mask is not found under the larger one; it
// is replaced when its slot fills again.

// Fields an evaluation may read besides those always in the key (evalCtx.reads).
const (
	rdSrc uint8 = 1 << iota
	rdDst
	rdSport
	rdDport
	rdFlags
	rdIif
	rdOif
)

// outSlots is the number of entries per base chain (direct-mapped).
const outSlots = 64

// maxDecs and maxCounters bound the decisions and counters of an evaluation the cache
// keeps (evalCtx holds them in arrays).
const (
	maxDecs     = 8
	maxCounters = 8
)

// maxDrawKids bounds a numgen's modulus the cache keeps branches for (a decision
// node holds one pointer per value).
const maxDrawKids = 1 << 14

// okey is a packet as an entry's key holds it: the fields outside mask are zero. The
// interface names are compared only when the mask has them (equal).
type okey struct {
	okcore
	iif, oif string
}

type okcore struct {
	mask, proto, flags uint8
	v6                 bool
	ctState            netfilter.CtState
	ctStatus           netfilter.CtStatus
	sport, dport       uint16
	mark, ctMark       uint32
	src, dst           netip.Addr
}

func (k *okey) equal(o *okey) bool {
	return k.okcore == o.okcore && (k.mask&(rdIif|rdOif) == 0 || k.iif == o.iif && k.oif == o.oif)
}

func keyOf(q *Packet, mask uint8) okey {
	k := okey{okcore: okcore{mask: mask, proto: q.Proto, v6: q.Dst.Is6(), ctState: q.CT.State, ctStatus: q.CT.Status, mark: q.Mark, ctMark: q.CT.Mark}}
	if mask&rdSrc != 0 {
		k.src = q.Src
	}
	if mask&rdDst != 0 {
		k.dst = q.Dst
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
	if mask&rdIif != 0 {
		k.iif = q.InIface
	}
	if mask&rdOif != 0 {
		k.oif = q.OutIface
	}
	return k
}

// slot hashes the key into [0, outSlots).
func (k *okey) slot() int {
	h := uint64(k.sport)<<48 | uint64(k.dport)<<32 | uint64(k.mark)
	h ^= (uint64(k.ctMark) | uint64(k.ctStatus)<<32) * 0x9e3779b97f4a7c15
	h ^= (uint64(k.mask) | uint64(k.proto)<<8 | uint64(k.flags)<<16 | uint64(k.ctState)<<24) * 0xc2b2ae3d27d4eb4f
	h ^= addrBits(k.src)*0x165667b19e3779f9 ^ addrBits(k.dst)*0xd6e8feb86659fd93
	for _, s := range [2]string{k.iif, k.oif} {
		for i := 0; i < len(s); i++ {
			h = h*31 + uint64(s[i])
		}
	}
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	return int((h ^ h>>31) >> 58) // outSlots = 64
}

// addrBits folds an address into a word (zero for the zero Addr).
func addrBits(a netip.Addr) uint64 {
	if a.Is4() {
		b := a.As4()
		return uint64(binary.BigEndian.Uint32(b[:]))
	}
	if !a.IsValid() {
		return 0
	}
	b := a.As16()
	return binary.BigEndian.Uint64(b[:8]) ^ binary.BigEndian.Uint64(b[8:])*0x9e3779b97f4a7c15
}

// Decision kinds (onode.kind).
const (
	oLeaf   uint8 = iota
	oDraw         // Env.Pick(mod)
	oFibSrc       // Env.IsLocal(source)
	oFibDst       // Env.IsLocal(destination)
)

// odec is one decision an evaluation met: its kind, the draw's modulus, the value.
type odec struct {
	kind uint8
	mod  int
	v    int
}

// onode is a decision point (its kids indexed by the decision's value) or the outcome.
type onode struct {
	kind uint8
	mod  int
	kids []*onode

	v            ChainVerdict
	mark, ctMark uint32
	counters     []*CounterStmt
}

type oentry struct {
	k    okey
	root *onode
}

// chainCache is one base chain's entries and key mask, and how well they serve.
type chainCache struct {
	mask  uint8
	slots [outSlots]*oentry
	// A miss costs more than an evaluation without the cache (the key, the
	// recording, the entry's allocation). Packets whose keys rarely recur (probes
	// from many sources to many Services, more than the slots hold) would pay it
	// every time: a window of outWindow lookups with fewer than outMinHits hits
	// turns the cache off for the chain's next outOff evaluations.
	tries, hits uint16
	off         uint32
}

const (
	outWindow  = 256
	outMinHits = outWindow / 2
	outOff     = 16 * outWindow
)

// count notes a lookup's result.
func (cc *chainCache) count(hit bool) {
	if hit {
		cc.hits++
	}
	if cc.tries++; cc.tries == outWindow {
		if cc.hits < outMinHits {
			cc.off = outOff
		}
		cc.tries, cc.hits = 0, 0
	}
}

// outCache is an emulator's outcome cache, for one ruleset generation.
type outCache struct {
	gen    uint64
	chains map[*Chain]*chainCache
}

func (oc *outCache) chain(c *Chain, gen uint64) *chainCache {
	if oc.gen != gen || oc.chains == nil {
		oc.gen, oc.chains = gen, make(map[*Chain]*chainCache)
	}
	cc := oc.chains[c]
	if cc == nil {
		cc = &chainCache{}
		oc.chains[c] = cc
	}
	return cc
}

// drop forgets every entry (a set update changed what lookups find).
func (oc *outCache) drop() { oc.chains = nil }

// hit looks q up in the base chain's entries. On a hit it applies the outcome (marks,
// counters) and returns it. Otherwise it returns how many draws it made into pre on
// the way (a branch the entry lacks), which the evaluation must take as its own.
func (cc *chainCache) hit(env Env, q *Packet, pre *[maxDecs]int) (v ChainVerdict, ok bool, npre int) {
	k := keyOf(q, cc.mask)
	ent := cc.slots[k.slot()]
	if ent == nil || !ent.k.equal(&k) {
		return v, false, 0
	}
	n := ent.root
	for n.kind != oLeaf {
		var d int
		switch n.kind {
		case oDraw:
			d = env.Pick(n.mod)
			pre[npre] = d // a tree is at most maxDecs deep (decide1)
			npre++
		case oFibSrc:
			d = b2i(env.IsLocal(q.Src))
		case oFibDst:
			d = b2i(env.IsLocal(q.Dst))
		}
		if d < 0 || d >= len(n.kids) || n.kids[d] == nil {
			return v, false, npre
		}
		n = n.kids[d]
	}
	q.Mark, q.CT.Mark = n.mark, n.ctMark
	for _, s := range n.counters {
		s.bump(q.Len)
	}
	return n.v, true, 0
}

// fill evaluates c for a packet the cache missed, recording, and keeps the outcome.
// ctx.pre holds the draws hit made.
func (e *Emulator) fill(ctx *evalCtx, cc *chainCache, c *Chain) ChainVerdict {
	q := ctx.q
	mark, ctMark := q.Mark, q.CT.Mark // the only fields an evaluation writes
	ctx.rec = true
	v := ctx.runBase(c)
	v.Rule, v.Chain = ctx.decRule, ctx.decChain
	if ctx.setChanged {
		e.oc.drop()
		return v
	}
	if ctx.noCache || ctx.usedPre != ctx.npre {
		return v
	}
	leaf := &onode{v: v, mark: q.Mark, ctMark: q.CT.Mark}
	if ctx.nctrs > 0 {
		leaf.counters = append([]*CounterStmt(nil), ctx.counters[:ctx.nctrs]...)
	}
	cc.mask |= ctx.reads
	k := keyOf(q, cc.mask)
	k.mark, k.ctMark = mark, ctMark // the key is the packet as it came
	i := k.slot()
	ent := cc.slots[i]
	if ent == nil || !ent.k.equal(&k) {
		ent = &oentry{k: k}
		cc.slots[i] = ent
	}
	ent.insert(ctx.decs[:ctx.ndecs], leaf)
	return v
}

// insert adds the path decs → leaf to the entry's tree. The decisions agree with the
// tree's up to where the tree ends (the evaluation is deterministic given the key and
// the values decided), so a disagreement means the tree is stale: it is replaced.
func (ent *oentry) insert(decs []odec, leaf *onode) {
	p := &ent.root
	for _, d := range decs {
		n := *p
		if n == nil || n.kind != d.kind || n.mod != d.mod {
			size := 2
			if d.kind == oDraw {
				size = d.mod
			}
			n = &onode{kind: d.kind, mod: d.mod, kids: make([]*onode, size)}
			*p = n
		}
		if d.v < 0 || d.v >= len(n.kids) {
			return // cannot happen: a decision's value is below its size
		}
		p = &n.kids[d.v]
	}
	*p = leaf
}

// decide1 records a decision of a recording evaluation (one more than maxDecs, or a
// draw with a modulus beyond maxDrawKids, and the outcome is not kept).
func (c *evalCtx) decide1(kind uint8, mod, v int) {
	if !c.rec {
		return
	}
	if kind == oDraw && (mod <= 0 || mod > maxDrawKids) || c.ndecs == maxDecs {
		c.noCache = true
		return
	}
	c.decs[c.ndecs] = odec{kind: kind, mod: mod, v: v}
	c.ndecs++
}

// pick is Env.Pick, or the next value drawn before this evaluation (a branch the
// cache lacked).
func (c *evalCtx) pick(n int) int {
	if c.usedPre < c.npre {
		v := c.pre[c.usedPre]
		c.usedPre++
		if v >= n { // the tree disagrees with the rules (cannot happen): keep nothing
			c.noCache = true
			v %= n
		}
		return v
	}
	return c.env.Pick(n)
}

func (s *CounterStmt) bump(n int) {
	if s.obj != nil {
		s.obj.Packets++
		s.obj.Bytes += uint64(n)
	} else {
		s.Packets++
		s.Bytes += uint64(n)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
