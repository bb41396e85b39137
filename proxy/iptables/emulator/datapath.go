package emulator

import (
	"fmt"

	"github.com/clusterlab/clusterlab/netfilter"
)

// This file is the emulator's face to a datapath: what an adapter that runs the
// emulator's tables as a node's netfilter tables needs (proxy/kubeproxy has the one for
// netsim). The adapter registers, for every table at every hook (TablesAt), a handler
// at the table's priority (TablePriority) that fills a Packet from its own packet and
// calls RunTable; nat tables are NAT handlers, which a datapath with conntrack calls for
// a connection's first packet only.

// TablePriority returns a table's netfilter priority at a hook: raw -300, mangle -150,
// nat -100 for destination NAT (PREROUTING, OUTPUT) and +100 for source NAT (INPUT,
// POSTROUTING), filter 0, security 50.
func TablePriority(table string, h netfilter.Hook) int {
	if table == TableNAT {
		if h == netfilter.Input || h == netfilter.Postrouting {
			return netfilter.PriorityNATSrc
		}
		return netfilter.PriorityNATDst
	}
	if d := tableDefs[table]; d != nil {
		return d.priority
	}
	return netfilter.PriorityFilter
}

// TableVerdict is what one table did with a packet at a hook, copied out for a
// datapath: it refers to nothing of the emulator's.
type TableVerdict struct {
	// Verdict is the table's verdict: Accept (go on), Drop, Reject, Unknown (a target the
	// emulator does not model), or Accept with a NAT.
	Verdict Verdict
	// RejectWith is the --reject-with of a Reject, and Reject its kind.
	RejectWith string
	Reject     netfilter.RejectWith
	// NAT is the NAT a nat table's target set up (when HasNAT).
	NAT    NAT
	HasNAT bool
	// Reason names the rule or policy that decided ("nat/KUBE-SEP-X line 12", "filter/
	// INPUT policy DROP") when the table decided: a Drop, Reject, Unknown or NAT.
	Reason string
}

// Decided reports whether the table ended the packet's way at the hook or NATed it.
func (v TableVerdict) Decided() bool {
	return v.Verdict == Drop || v.Verdict == Reject || v.Verdict == Unknown || v.HasNAT
}

// RunTable evaluates one table's built-in chain at a hook for q, as the kernel does when
// the packet reaches the table (whatever its conntrack state: the datapath decides
// whether a nat table applies). Targets change q: MARK and CONNMARK its marks, NOTRACK
// its conntrack state (CtUntracked), NAT targets its addresses. tr, if not nil, receives
// the table's rule steps. The caller owns q (the emulator keeps no reference to it) and
// must not share it with another goroutine during the call; the emulator locks its own
// state. A packet the compiled chains decide costs no allocation. A packet whose
// traversal the flow cache holds (flowcache.go) gets its outcome, counters included,
// without the traversal.
func (e *Emulator) RunTable(env Env, table string, hook netfilter.Hook, q *Packet, tr *Trace) TableVerdict {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ent *flowEnt
	var wm *wildMiss
	if tr == nil && !e.noCompile && !e.noFlowCache && !isDryRun(env) {
		b := chainAtBit(table, hook)
		if b >= 0 && table != TableNAT {
			var h uint64
			ent, h = e.flowSlot(q, b)
			if ent.hit(e.gen, b, q) {
				e.flowHits++
				return ent.replay(q)
			}
			if ent.seen == h {
				ent.start(b, q) // seen twice: this traversal may fill the entry
			} else {
				ent.seen, ent = h, nil
			}
		}
		// A packet seen twice in a row (ent: it fills the flow cache) traverses;
		// any other may be one the wildcard cache holds.
		if b >= 0 && ent == nil && !e.noWild {
			wm = &e.wildMissBuf
			if v, ok := e.wildLookup(env, b, q, wm); ok {
				return v
			}
			e.wildArm = wm
		}
	}
	var res TableResult
	c := e.evalTableLockedInto(env, table, hook, q, tr, &e.nat, &res)
	e.wildArm = nil
	v := TableVerdict{Verdict: res.Verdict, RejectWith: res.RejectWith}
	if v.Verdict == Reject {
		v.Reject, _ = netfilter.RejectWithName(res.RejectWith)
	}
	if res.NAT != nil {
		v.NAT, v.HasNAT = *res.NAT, true
	}
	if v.Decided() {
		v.Reason = c.decisionReason(res.Decision)
	}
	if ent != nil {
		ent.fill(e.gen, c, q, &v)
	}
	if wm != nil {
		e.wildFill(c, wm, q, &v)
	}
	return v
}

// isDryRun reports whether env's packets are what-ifs (DryRunner).
func isDryRun(env Env) bool {
	d, ok := env.(DryRunner)
	return ok && d.DryRun()
}

// decisionReason names the rule or policy that decided, for a datapath's verdict.
func decisionReason(d Decision) string {
	if d.Rule == nil {
		return fmt.Sprintf("%s/%s policy %s", d.Table, d.Chain, d.Policy)
	}
	return fmt.Sprintf("%s/%s line %d", d.Table, d.Chain, d.Rule.Line)
}

// decisionReason is decisionReason(d), cached per rule when a compiled rule decided
// (c may be nil: nothing was evaluated).
func (c *evalCtx) decisionReason(d Decision) string {
	if c == nil || d.Rule == nil || !c.compiled || c.lastProg == nil {
		return decisionReason(d)
	}
	cp := c.lastProg
	if cp.recs[c.lastRec].rule != d.Rule {
		return decisionReason(d)
	}
	x := cp.ext
	if x.reasons == nil {
		x.reasons = make([]string, len(cp.recs))
	}
	s := x.reasons[c.lastRec]
	if s == "" {
		s = decisionReason(d)
		x.reasons[c.lastRec] = s
	}
	return s
}
