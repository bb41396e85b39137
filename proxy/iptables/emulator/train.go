package emulator

import "github.com/clusterlab/clusterlab/netfilter"

// Trains: one answer for a run of TCP segments that differ only in sequence numbers,
// lengths and checksums (a datapath carrying a segmentation-offloaded super-packet
// whole; netsim's train.go). Such segments are the same emulator Packet but for Len
// (which only counters read) and, for the last, its TCP flags (PSH): two shapes. When
// the flow cache holds the traversal of both shapes, each is a function of the packet
// and the ruleset alone, so every segment of the run would replay its shape's entry;
// PeekTrain finds both entries without changing anything and CommitTrain bumps their
// counters as the segments' replays would: mid.N packets of mid.Len bytes and one of
// last.Len.

// TrainShape is one shape of a train's segments: the packet (Len: the IP length of each
// of its segments) and how many segments have it.
type TrainShape struct {
	P *Packet
	N int
}

// TrainStash holds what PeekTrain found, for CommitTrain: the rules and policies to
// bump. The caller keeps it between the two calls (reused, it allocates nothing once
// grown).
type TrainStash struct {
	mid, last         []*Rule
	midPol, lastPol   *Chain
	midN              uint64
	midBytes, lastLen uint64
}

// PeekTrain reports the verdict a table at a hook gives every segment of a train of two
// shapes (mid: all but the last segment; last: the last), and stashes their counters,
// when the flow cache answers for both with the same outcome, that outcome leaves the
// packet's conntrack view (state and connmark) as it was, and it is not a Drop, Reject,
// Unknown or NAT (a train is only carried on). ok false: it cannot answer (a miss, an
// outcome that differs or changes what the next segment would see); nothing changed.
// On ok, mid.P's marks are the outcome's.
func (e *Emulator) PeekTrain(table string, hook netfilter.Hook, mid, last TrainShape, st *TrainStash) (TableVerdict, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.noCompile || e.noFlowCache || table == TableNAT || e.flows == nil || mid.N < 1 {
		return TableVerdict{}, false
	}
	b := chainAtBit(table, hook)
	if b < 0 {
		return TableVerdict{}, false
	}
	fm, _ := e.flowSlot(mid.P, b)
	if !fm.hit(e.gen, b, mid.P) || !fm.trainable(mid.P) {
		return TableVerdict{}, false
	}
	fl, _ := e.flowSlot(last.P, b)
	if !fl.hit(e.gen, b, last.P) || !fl.trainable(last.P) || !fm.sameOutcome(fl) {
		return TableVerdict{}, false
	}
	st.mid = append(st.mid[:0], fm.rules...)
	st.last = append(st.last[:0], fl.rules...)
	st.midPol, st.lastPol = fm.policy, fl.policy
	st.midN = uint64(mid.N)
	st.midBytes = uint64(mid.N) * uint64(mid.P.Len)
	st.lastLen = uint64(last.P.Len)
	mid.P.Mark = fm.mark
	return TableVerdict{Verdict: fm.verdict, RejectWith: fm.rejectWith, Reject: fm.reject, Reason: fm.reason}, true
}

// CommitTrain bumps the counters PeekTrain stashed, as the train's segments' replays
// would have, one after the other.
func (e *Emulator) CommitTrain(st *TrainStash) {
	e.mu.Lock()
	countReplay(st.mid, st.midPol, st.midN, st.midBytes)
	countReplay(st.last, st.lastPol, 1, st.lastLen)
	e.flowHits += st.midN + 1
	e.mu.Unlock()
}

// trainable reports whether the entry's outcome for q carries a train on unchanged: the
// packet goes on (Accept, no NAT) and its conntrack view stays as it entered, so that
// the next segment meets the same key.
func (f *flowEnt) trainable(q *Packet) bool {
	return f.verdict == Accept && f.ctMark == q.CT.Mark && f.ctState == q.CT.State
}

// sameOutcome reports whether two entries leave a packet alike.
func (f *flowEnt) sameOutcome(g *flowEnt) bool {
	return f.mark == g.mark && f.ctMark == g.ctMark && f.ctState == g.ctState &&
		f.verdict == g.verdict && f.reject == g.reject && f.rejectWith == g.rejectWith && f.reason == g.reason
}
