package emulator

import (
	"encoding/binary"

	"github.com/clusterlab/clusterlab/netfilter"
)

// The flow cache: RunTable's exact shortcut for a packet whose traversal it has seen.
//
// Every segment of an established TCP stream meets the filter table at each hook it
// passes (kube-proxy's FORWARD: its --ctstate NEW jumps fail, KUBE-FORWARD's RELATED,
// ESTABLISHED rule accepts), and the table's evaluation there costs more in its fixed
// work (the context, the stack, the built-in chain's lookup, the result) than in its
// rules. A traversal is a function of the packet and the ruleset when every match it
// evaluated reads only the packet and its rule (pureMatch) and its targets draw nothing
// (no statistic, NAT, unknown-match assumption, nfacct, xt_recent, addrtype, set or
// ipvs lookup): then the same packet meets the same rules again and gets the same
// verdict, marks and notrack, and bumps the same counters. The cache keeps such a
// traversal's outcome, keyed by the whole Packet as it entered except Len (read only by
// counters) and CT.Expire (read only by --ctexpire, whose matches are not pure), and
// replays it: the outcome copied into the packet, each matched rule's counters and, when
// the policy decided, the built-in chain's bumped by one packet of this packet's Len, as
// the traversal would.
//
// An entry is valid for one ruleset generation (Emulator.gen): every change of what a
// traversal reads besides the packet (a restore, Adopt, Interpret, the ipsets or the
// IPVS lookup, though traversals that read the last two are never kept) starts a new
// one. Traversals with a trace, dry runs, interpreted traversals (Interpret: they count
// as they go, not through the list the cache keeps) and the nat table (first packets
// only, whose keys do not repeat) neither use nor fill the cache. A packet fills an
// entry only the second time in a row its hash misses there (flowEnt.seen).

// flowCacheSize is the number of cache entries per emulator (direct-mapped, shared by
// its tables and hooks).
const flowCacheSize = 16

type flowEnt struct {
	gen uint64 // the emulator's gen when filled; 0: empty
	bit int    // chainAtBit of the table and hook
	// seen is the hash of the last packet that missed here: a packet fills the entry
	// only when it is seen a second time in a row, so that packets that do not repeat
	// (first packets, probes) cost a hash, not a copy of their key and of the outcome,
	// and do not evict an entry that is in use.
	seen uint64
	// key is the packet as it entered the table, Len and CT.Expire zero.
	key Packet
	// What the traversal left in the packet: nothing else changes without NAT.
	mark, ctMark uint32
	ctState      netfilter.CtState
	// The verdict (never a NAT).
	verdict    Verdict
	reject     netfilter.RejectWith
	rejectWith string
	reason     string
	// rules are the rules the traversal matched, policy the built-in chain whose
	// policy decided (nil: a rule decided): the counters a replay bumps.
	rules  []*Rule
	policy *Chain
}

type flowCache [flowCacheSize]flowEnt

// flowSlot returns the cache entry for q at table and hook bit b, and q's hash.
func (e *Emulator) flowSlot(q *Packet, b int) (*flowEnt, uint64) {
	if e.flows == nil {
		e.flows = new(flowCache)
	}
	s, d := q.Src.As16(), q.Dst.As16()
	h := uint64(b) | uint64(q.SrcPort)<<8 | uint64(q.DstPort)<<24 | uint64(q.TCPFlags)<<40 | uint64(q.CT.State)<<48 | uint64(q.Proto)<<56
	h ^= binary.LittleEndian.Uint64(s[8:]) * 0x9e3779b97f4a7c15
	h ^= binary.LittleEndian.Uint64(d[8:]) * 0xc2b2ae3d27d4eb4f
	h *= 0xff51afd7ed558ccd
	return &e.flows[h>>60&(flowCacheSize-1)], h
}

// hit reports whether the entry holds q's traversal at table and hook bit b.
func (f *flowEnt) hit(gen uint64, b int, q *Packet) bool {
	if f.gen != gen || f.bit != b {
		return false
	}
	n, x := q.Len, q.CT.Expire
	q.Len, q.CT.Expire = 0, 0
	eq := *q == f.key
	q.Len, q.CT.Expire = n, x
	return eq
}

// replay applies the entry's outcome to q, as the traversal would, and returns its
// verdict.
func (f *flowEnt) replay(q *Packet) TableVerdict {
	countReplay(f.rules, f.policy, 1, uint64(q.Len))
	q.Mark, q.CT.Mark, q.CT.State = f.mark, f.ctMark, f.ctState
	return TableVerdict{Verdict: f.verdict, RejectWith: f.rejectWith, Reject: f.reject, Reason: f.reason}
}

// start empties the entry and records q as its key, before q's traversal.
func (f *flowEnt) start(b int, q *Packet) {
	f.gen, f.bit = 0, b
	f.key = *q
	f.key.Len, f.key.CT.Expire = 0, 0
}

// fill keeps the traversal c just ran for the entry's key, which left q and gave v,
// when it may be replayed: c read nothing but the packet and its rules, and changed
// nothing in q but the marks and the conntrack state.
func (f *flowEnt) fill(gen uint64, c *evalCtx, q *Packet, v *TableVerdict) {
	if c == nil || !c.compiled || c.dry || c.impure || v.HasNAT {
		return
	}
	out := *q
	out.Len, out.CT.Expire = 0, 0
	out.Mark, out.CT.Mark, out.CT.State = f.key.Mark, f.key.CT.Mark, f.key.CT.State
	if out != f.key {
		return
	}
	f.mark, f.ctMark, f.ctState = q.Mark, q.CT.Mark, q.CT.State
	f.verdict, f.reject, f.rejectWith, f.reason = v.Verdict, v.Reject, v.RejectWith, v.Reason
	f.rules = append(f.rules[:0], c.counted...)
	f.policy = c.policyHit
	f.gen = gen
}

// pureMatch reports whether m's evaluation reads only the packet and m, and changes
// nothing (a cached traversal may have evaluated it).
func pureMatch(m Match) bool {
	switch m := m.(type) {
	case *CommentMatch, *StateMatch, *ICMPMatch, *IPRangeMatch, *MarkMatch, *MultiportMatch, *TCPMatch, *UDPMatch, *SCTPMatch:
		return true
	case *ConntrackMatch:
		return m.Expire == nil
	}
	return false
}

// FlowCache turns RunTable's flow cache on (the default) or off (tests compare the two).
func (e *Emulator) FlowCache(on bool) {
	e.mu.Lock()
	e.noFlowCache = !on
	e.gen++
	e.mu.Unlock()
}

// countReplay bumps the counters a cached traversal matched, rules and the built-in
// chain whose policy decided (nil: a rule decided), by packets packets of bytes bytes
// in all, as the traversals would have.
func countReplay(rules []*Rule, policy *Chain, packets, bytes uint64) {
	for _, r := range rules {
		r.Counters.Packets += packets
		r.Counters.Bytes += bytes
	}
	if policy != nil {
		policy.Counters.Packets += packets
		policy.Counters.Bytes += bytes
	}
}
