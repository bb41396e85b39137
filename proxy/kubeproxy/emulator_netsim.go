package kubeproxy

import (
	"net/netip"
	"sync"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
)

// This file runs an iptables emulator as a netsim node's netfilter tables: each table at
// each hook becomes a netsim handler at the table's netfilter priority (nat tables as
// NAT handlers, which netsim calls only for a connection's first packet and whose
// bindings its conntrack applies to later packets, as the kernel does). Every mode that
// writes iptables rules (iptables, and IPVS and userspace for their side rules) runs
// them through it.

// EmulatorHandlers returns the handler specs that run the emulator's tables on a netsim
// node, named "<name> <table>". Each spec has its own handler: attach them to one node.
func EmulatorHandlers(e *emulator.Emulator, name string) []netsim.HandlerSpec {
	return emulatorHandlers(e, nil, nil, nil, name)
}

// emulatorHandlers is EmulatorHandlers with a lock each packet's evaluation holds (nil:
// none), for emulators that share chains, a function called under it first, and the
// packet buffer the handlers fill under it (nil: one of their own, which they share:
// a node runs its handlers one packet at a time). Emulators sharing a lock share a
// buffer: one that stays in the processor's cache, where each of thousands of nodes'
// own buffers is cold when a large cluster's probes pass that node.
func emulatorHandlers(e *emulator.Emulator, lock *sync.Mutex, prep func(), buf *emulator.Packet, name string) []netsim.HandlerSpec {
	if buf == nil {
		buf = new(emulator.Packet)
	}
	var specs []netsim.HandlerSpec
	for h := netfilter.Prerouting; h <= netfilter.Postrouting; h++ {
		for _, table := range emulator.TablesAt(h) {
			specs = append(specs, netsim.HandlerSpec{Name: name + " " + table, Hook: h,
				Priority: emulator.TablePriority(table, h), NAT: table == emulator.TableNAT,
				Handler: &emulatorHandler{e: e, lock: lock, prep: prep, table: table, hook: h, q: buf}})
		}
	}
	return specs
}

// AttachEmulator registers the emulator's handlers on a node and returns a function that
// removes them.
func AttachEmulator(e *emulator.Emulator, n *netsim.Node, name string) (detach func()) {
	return attachEmulator(e, nil, nil, nil, n, name)
}

func attachEmulator(e *emulator.Emulator, lock *sync.Mutex, prep func(), buf *emulator.Packet, n *netsim.Node, name string) (detach func()) {
	var removes []func()
	for _, s := range emulatorHandlers(e, lock, prep, buf, name) {
		removes = append(removes, n.AddHandler(s))
	}
	return func() {
		for _, r := range removes {
			r()
		}
	}
}

// emulatorEnv is the emulator.Env of a packet in netsim: its virtual clock, its choice
// points and its node's addresses.
type emulatorEnv struct{ ctx *netsim.Context }

func (v emulatorEnv) Now() time.Time        { return v.ctx.Now() }
func (v emulatorEnv) Chance(p float64) bool { return v.ctx.Chance(p) }
func (v emulatorEnv) Pick(n int) int        { return v.ctx.Pick(n) }
func (v emulatorEnv) DryRun() bool          { return v.ctx.DryRun() }
func (v emulatorEnv) AddrType(a netip.Addr, iface string) emulator.AddrType {
	if iface == "" {
		return emulator.ClassifyAddr(a, v.ctx.IsLocalAddr)
	}
	return emulator.ClassifyAddrOn(a, iface, func(a netip.Addr) bool {
		on, ok := v.ctx.LocalAddrIface(a)
		return ok && on == iface
	})
}

// emulatorHandler is one table at one hook. Netsim calls a node's handlers one packet
// at a time, under the node's lock, so the packet buffer q, shared by the node's
// handlers, is theirs; with a lock, it is shared by every handler under the lock and
// used under it.
type emulatorHandler struct {
	e     *emulator.Emulator
	lock  *sync.Mutex // nil, or the lock of the emulators sharing e's chains
	prep  func()      // called under lock before each evaluation (nil: none)
	table string
	hook  netfilter.Hook
	q     *emulator.Packet
	train *emulatorTrain // PeekTrain's state (emulator_train.go); nil until the first
}

// fromNetsim builds the emulator's view of a netsim packet in q.
// Every field of q is written, one by one (q is a heap object: see conntrackInto).
func fromNetsim(q *emulator.Packet, p *netsim.Packet, ctx *netsim.Context, table string) {
	q.Proto, q.Src, q.Dst, q.SrcPort, q.DstPort = p.Proto, p.Src, p.Dst, p.SrcPort, p.DstPort
	q.TCPFlags, q.ICMPType, q.ICMPCode, q.TTL = p.TCPFlags, p.ICMPType, p.ICMPCode, p.TTL
	q.Fragment = false
	q.InIface, q.OutIface, q.Mark, q.Len = p.InIface, p.OutIface, p.Mark, len(p.Data)
	conntrackInto((*ctView)(&q.CT), p, ctx, table == emulator.TableRaw) // the raw table runs before conntrack
}

// Idle implements netsim.IdleHandler: the cases where Handle returns Continue at once
// without touching the packet (untraced): a packet of the other family, or a table the
// ruleset lacks, except for the raw table's carrying of an untracked state over.
func (h *emulatorHandler) Idle(p *netsim.Packet) bool {
	e := h.e
	if p.IPv6 != (e.Family() == emulator.IPv6) {
		return true
	}
	return !e.HasChainAt(h.table, h.hook) && !(h.table == emulator.TableRaw && p.Conn != nil && p.CtState == netfilter.CtUntracked)
}

// Handle implements netsim.Handler.
func (h *emulatorHandler) Handle(ctx *netsim.Context, p *netsim.Packet) netsim.Verdict {
	e := h.e
	if p.IPv6 != (e.Family() == emulator.IPv6) {
		return netsim.VerdictContinue // iptables does not see ip6tables' packets, nor the reverse
	}
	var tr *emulator.Trace
	if ctx.Tracing() {
		tr = &emulator.Trace{}
	} else if !e.HasChainAt(h.table, h.hook) {
		// The ruleset lacks the table (kube-proxy writes no raw, mangle or security
		// rules): RunTable would accept and change nothing. The one thing Handle
		// would still do is the raw table's carrying of an untracked state over.
		if h.table == emulator.TableRaw && p.Conn != nil && p.CtState == netfilter.CtUntracked {
			p.SetNoTrack()
		}
		return netsim.VerdictContinue
	}
	q := h.q
	if h.lock != nil {
		h.lock.Lock()
		if h.prep != nil {
			h.prep()
		}
	}
	fromNetsim(q, p, ctx, h.table)
	v := e.RunTable(emulatorEnv{ctx}, h.table, h.hook, q, tr)
	mark, ctMark, untracked := q.Mark, q.CT.Mark, q.CT.State == netfilter.CtUntracked
	if h.lock != nil {
		h.lock.Unlock()
	}
	if tr != nil {
		traceRules(ctx, tr)
	}
	p.Mark = mark
	if p.Conn != nil && !ctx.DryRun() {
		p.Conn.Mark = ctMark
	}
	if untracked && h.table == emulator.TableRaw {
		p.SetNoTrack()
	}
	if !v.Decided() {
		return netsim.VerdictContinue
	}
	d := engineNAT
	switch v.Verdict {
	case emulator.Drop:
		d = engineDrop
	case emulator.Reject:
		d = engineReject
	case emulator.Unknown:
		d = engineUnknown
	}
	if d == engineNAT && !v.HasNAT {
		return netsim.VerdictContinue
	}
	n := &v.NAT
	return netsimVerdict(d, v.Reject, netsimNAT(n.Kind, n.Addr, n.Port, n.PortMax, n.Random, n.RandomFully), v.Reason, "target")
}

// traceRules copies the emulator's rule steps into the packet's netsim trace.
func traceRules(ctx *netsim.Context, tr *emulator.Trace) {
	for _, s := range tr.Steps {
		if s.Kind != emulator.StepRule && s.Kind != emulator.StepPolicy && s.Kind != emulator.StepIndex {
			continue
		}
		ts := netsim.TraceStep{Kind: netsim.StepRule, Table: s.Table, Chain: s.Chain, Line: s.Line, Rule: s.Rule,
			Matched: s.Matched, Verdict: s.Verdict, Detail: s.Detail}
		if s.Kind == emulator.StepPolicy {
			ts.Rule, ts.Verdict = "policy "+s.Verdict, s.Verdict
		} else if s.Kind == emulator.StepIndex {
			ts.Kind = netsim.StepNote
		}
		ctx.Trace(ts)
	}
}
