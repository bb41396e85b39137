package emulator

// Trains: one answer for a run of TCP segments that differ only in sequence numbers,
// lengths and checksums (a datapath carrying a segmentation-offloaded super-packet
// whole; netsim's train.go). Such segments are the same Packet but for Len (which
// only counters and `meta length` read) and, for the last, its TCP flags (PSH): two
// shapes. PeekTrain evaluates a base chain once for each shape without changing
// anything; when each evaluation is a function of the packet and the ruleset alone
// (no dynamic set updated, no random number drawn, no statement the evaluator does not
// model, the conntrack mark left alone) and both shapes meet the same outcome, every
// segment of the run would meet its shape's, and CommitTrain bumps the counters the
// segments would have bumped: mid.N times each counter the mid shape met, once each
// the last's.

// TrainShape is one shape of a train's segments: the packet (Len: the IP length of each
// of its segments) and how many segments have it.
type TrainShape struct {
	P *Packet
	N int
}

// TrainStash holds what PeekTrain found, for CommitTrain: the counters to bump. The
// caller keeps it between the two calls (reused, it allocates nothing once grown).
type TrainStash struct {
	counts []trainCount
	ok     bool
}

// trainCount is one counter statement's share of a train.
type trainCount struct {
	c              *CounterStmt
	packets, bytes uint64
}

// peekRun is an evaluation's state in PeekTrain: what it met that a train cannot
// answer for, and the counters it met.
type peekRun struct {
	bad    bool
	counts []trainCount
	n      uint64 // the segments of the shape being evaluated
}

// peekEnv refuses random draws: a train's segments would each draw (netsim's
// randomness advances per packet), so a chain that draws cannot answer for them.
type peekEnv struct {
	Env
	run *peekRun
}

func (v peekEnv) Pick(int) int {
	v.run.bad = true
	return 0
}

func (v peekEnv) DryRun() bool { return true }

// PeekTrain reports the verdict a base chain gives every segment of a train of two
// shapes (mid: all but the last segment; last: the last), and stashes their counters,
// when both evaluations are exact for every segment (see above) and meet the same
// verdict and marks. ok false: it cannot answer; nothing changed but the evaluator's
// clock (as the segments' evaluations would move it). On ok, mid.P's marks are the
// outcome's. A train is only carried on: the caller cuts it on anything but a verdict
// that lets the packet continue.
func (e *Emulator) PeekTrain(env Env, bc BaseChain, mid, last TrainShape, st *TrainStash) (ChainVerdict, bool) {
	st.ok = false
	if mid.N < 1 || last.N < 1 {
		return ChainVerdict{}, false
	}
	if _, ok := env.(Assumer); ok {
		return ChainVerdict{}, false
	}
	ctMark := mid.P.CT.Mark
	run := peekRun{counts: st.counts[:0], n: uint64(mid.N)}
	vm := e.runPeek(env, bc, mid.P, &run)
	if run.bad || mid.P.CT.Mark != ctMark {
		st.counts = run.counts[:0]
		return ChainVerdict{}, false
	}
	run.n = uint64(last.N)
	vl := e.runPeek(env, bc, last.P, &run)
	st.counts = run.counts
	if run.bad || last.P.CT.Mark != ctMark || last.P.Mark != mid.P.Mark || !sameVerdict(vm, vl) {
		return ChainVerdict{}, false
	}
	st.ok = true
	return vm, true
}

// CommitTrain bumps the counters the last successful PeekTrain stashed.
func (e *Emulator) CommitTrain(st *TrainStash) {
	if !st.ok {
		return
	}
	st.ok = false
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range st.counts {
		if t.c.obj != nil {
			t.c.obj.Packets += t.packets
			t.c.obj.Bytes += t.bytes
		} else {
			t.c.Packets += t.packets
			t.c.Bytes += t.bytes
		}
	}
}

// runPeek is RunChain in PeekTrain's mode: counters recorded in run, not bumped.
func (e *Emulator) runPeek(env Env, bc BaseChain, q *Packet, run *peekRun) ChainVerdict {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.rs.table(bc.Family, bc.Table)
	if t == nil {
		run.bad = true
		return ChainVerdict{}
	}
	c := t.chain(bc.Chain)
	if c == nil || !c.IsBase() {
		run.bad = true
		return ChainVerdict{}
	}
	ctx := evalCtx{env: peekEnv{Env: env, run: run}, q: q, t: t, hook: bc.Hook, peek: run}
	v := ctx.runBase(c)
	v.Rule, v.Chain = ctx.decRule, ctx.decChain
	if ctx.hasNow && ctx.now.After(e.now) {
		e.now = ctx.now
	}
	return v
}

// sameVerdict reports whether two evaluations decided alike (the deciding rule aside:
// the same verdict, reject type, NAT and reason).
func sameVerdict(a, b ChainVerdict) bool {
	return a.Verdict == b.Verdict && a.Reject == b.Reject && a.HasNAT == b.HasNAT && a.NAT == b.NAT &&
		a.Reason == b.Reason && a.Rule == b.Rule && a.Chain == b.Chain
}
