package emulator

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
)

// This file adapts the emulator to netsim's datapath: each table at each hook becomes a
// netsim handler at the table's netfilter priority (nat tables as NAT handlers, which
// netsim calls only for a connection's first packet and whose bindings its conntrack
// applies to later packets, as the kernel does).

// NetsimHandlers returns the handler specs that run the emulator's tables on a netsim
// node, named "<name> <table>".
func (e *Emulator) NetsimHandlers(name string) []netsim.HandlerSpec {
	prio := map[string]int{TableRaw: netfilter.PriorityRaw, TableMangle: netfilter.PriorityMangle,
		TableFilter: netfilter.PriorityFilter, TableSecurity: netfilter.PrioritySecurity}
	var specs []netsim.HandlerSpec
	for h := Prerouting; h <= Postrouting; h++ {
		for _, table := range hookTables[h] {
			spec := netsim.HandlerSpec{Name: name + " " + table, Hook: netsimHook(h),
				Handler: &netsimHandler{e: e, table: table, hook: h}}
			if table == TableNAT {
				spec.NAT = true
				spec.Priority = netfilter.PriorityNATDst
				if h == Input || h == Postrouting {
					spec.Priority = netfilter.PriorityNATSrc
				}
			} else {
				spec.Priority = prio[table]
			}
			specs = append(specs, spec)
		}
	}
	return specs
}

// AttachNetsim registers the emulator's handlers on a node and returns a function that
// removes them.
func (e *Emulator) AttachNetsim(n *netsim.Node, name string) (detach func()) {
	var removes []func()
	for _, s := range e.NetsimHandlers(name) {
		removes = append(removes, n.AddHandler(s))
	}
	return func() {
		for _, r := range removes {
			r()
		}
	}
}

func netsimHook(h Hook) netfilter.Hook {
	return [...]netfilter.Hook{netfilter.Prerouting, netfilter.Input, netfilter.Forward, netfilter.Output, netfilter.Postrouting}[h]
}

// netsimEnv is the Env of a packet in netsim: its virtual clock, its choice points and
// its node's addresses.
type netsimEnv struct{ ctx *netsim.Context }

func (v netsimEnv) Now() time.Time        { return v.ctx.Now() }
func (v netsimEnv) Chance(p float64) bool { return v.ctx.Chance(p) }
func (v netsimEnv) Pick(n int) int        { return v.ctx.Pick(n) }
func (v netsimEnv) DryRun() bool          { return v.ctx.DryRun() }
func (v netsimEnv) AddrType(a netip.Addr, iface string) AddrType {
	if iface == "" {
		return ClassifyAddr(a, v.ctx.IsLocalAddr)
	}
	return ClassifyAddrOn(a, iface, func(a netip.Addr) bool {
		on, ok := v.ctx.LocalAddrIface(a)
		return ok && on == iface
	})
}

type netsimHandler struct {
	e     *Emulator
	table string
	hook  Hook
}

var netsimReject = map[string]netfilter.RejectWith{
	"icmp-port-unreachable": netfilter.RejectPortUnreachable, "icmp6-port-unreachable": netfilter.RejectPortUnreachable,
	"icmp-net-unreachable": netfilter.RejectNetUnreachable, "icmp6-no-route": netfilter.RejectNetUnreachable,
	"icmp-host-unreachable": netfilter.RejectHostUnreachable, "icmp6-addr-unreachable": netfilter.RejectHostUnreachable,
	"icmp-proto-unreachable": netfilter.RejectProtoUnreachable, "icmp-net-prohibited": netfilter.RejectNetProhibited,
	"icmp-host-prohibited": netfilter.RejectHostProhibited, "icmp-admin-prohibited": netfilter.RejectAdminProhibited,
	"icmp6-adm-prohibited": netfilter.RejectAdminProhibited, "icmp6-policy-fail": netfilter.RejectAdminProhibited,
	"icmp6-reject-route": netfilter.RejectAdminProhibited, "tcp-reset": netfilter.RejectTCPReset,
}

// fromNetsim builds the emulator's view of a netsim packet in q.
func fromNetsim(q *Packet, p *netsim.Packet, ctx *netsim.Context, table string) {
	*q = Packet{Proto: p.Proto, Src: p.Src, Dst: p.Dst, SrcPort: p.SrcPort, DstPort: p.DstPort,
		TCPFlags: p.TCPFlags, ICMPType: p.ICMPType, ICMPCode: p.ICMPCode, TTL: p.TTL,
		InIface: p.InIface, OutIface: p.OutIface, Mark: p.Mark, Len: len(p.Data)}
	switch {
	case p.Conn == nil && table == TableRaw:
		q.CT.State = CTInvalid // the raw table runs before conntrack: no entry yet
	case p.CtState == netfilter.CtUntracked:
		q.CT.State = CTUntracked
	case p.Conn == nil || p.CtState == netfilter.CtInvalid:
		q.CT.State = CTInvalid
	case p.CtState == netfilter.CtEstablished:
		q.CT.State = CTEstablished
	case p.CtState == netfilter.CtRelated:
		q.CT.State = CTRelated
	default:
		q.CT.State = CTNew
	}
	if c := p.Conn; c != nil {
		q.CT.Reply = p.CtReply
		q.CT.Mark = c.Mark
		q.CT.Orig = Tuple{Src: c.Orig.Src, Dst: c.Orig.Dst, SrcPort: c.Orig.SrcPort, DstPort: c.Orig.DstPort}
		q.CT.ReplyTuple = Tuple{Src: c.Reply.Src, Dst: c.Reply.Dst, SrcPort: c.Reply.SrcPort, DstPort: c.Reply.DstPort}
		for _, b := range []struct {
			from netfilter.CtStatus
			to   CTStatus
		}{{netfilter.StatusSeenReply, CTSeenReply}, {netfilter.StatusAssured, CTAssured}, {netfilter.StatusConfirmed, CTConfirmed},
			{netfilter.StatusSrcNAT, CTSrcNAT}, {netfilter.StatusDstNAT, CTDstNAT}} {
			if c.Status&b.from != 0 {
				q.CT.Status |= b.to
			}
		}
		if !c.Expires.IsZero() {
			q.CT.Expire = c.Expires.Sub(ctx.Now())
		}
	}
}

// Handle implements netsim.Handler. It runs under the emulator's lock with the
// emulator's packet and NAT buffers (no allocation per packet): what the verdict needs
// is copied out before the lock is released.
func (h *netsimHandler) Handle(ctx *netsim.Context, p *netsim.Packet) netsim.Verdict {
	e := h.e
	if p.IPv6 != (e.Family() == IPv6) {
		return netsim.VerdictContinue // iptables does not see ip6tables' packets, nor the reverse
	}
	var tr *Trace
	if ctx.Tracing() {
		tr = &Trace{}
	}
	e.mu.Lock()
	q := &e.pkt
	fromNetsim(q, p, ctx, h.table)
	res, c := e.evalTableLocked(netsimEnv{ctx}, h.table, h.hook, q, tr, &e.nat)
	mark, ctMark, untracked := q.Mark, q.CT.Mark, q.CT.State == CTUntracked
	decided := res.Verdict == Drop || res.Verdict == Reject || res.Verdict == Unknown || res.NAT != nil
	var reason string
	var nat NAT
	if decided {
		reason = c.decisionReason(res.Decision)
		if res.NAT != nil {
			nat = *res.NAT
		}
	}
	e.mu.Unlock()
	if tr != nil {
		for _, s := range tr.Steps {
			if s.Kind != StepRule && s.Kind != StepPolicy && s.Kind != StepIndex {
				continue
			}
			ts := netsim.TraceStep{Kind: netsim.StepRule, Table: s.Table, Chain: s.Chain, Line: s.Line, Rule: s.Rule,
				Matched: s.Matched, Verdict: s.Verdict, Detail: s.Detail}
			if s.Kind == StepPolicy {
				ts.Rule, ts.Verdict = "policy "+s.Verdict, s.Verdict
			} else if s.Kind == StepIndex {
				ts.Kind = netsim.StepNote
			}
			ctx.Trace(ts)
		}
	}
	p.Mark = mark
	if p.Conn != nil && !ctx.DryRun() {
		p.Conn.Mark = ctMark
	}
	if untracked && h.table == TableRaw {
		p.SetNoTrack()
	}
	if !decided {
		return netsim.VerdictContinue
	}
	switch res.Verdict {
	case Drop:
		return netsim.Verdict{Kind: netsim.Drop, Reason: reason}
	case Reject:
		return netsim.RejectVerdict(netsimReject[res.RejectWith], reason)
	case Unknown:
		return netsim.Verdict{Kind: netsim.Drop, Reason: reason + ": target not emulated"}
	}
	if res.NAT != nil {
		n := &nat
		a := netsim.NATAction{Random: n.Random, RandomFully: n.RandomFully}
		switch n.Kind {
		case "DNAT":
			a.Kind = netfilter.DNAT
		case "REDIRECT":
			a.Kind = netfilter.Redirect
		case "SNAT":
			a.Kind = netfilter.SNAT
		default:
			a.Kind = netfilter.Masquerade
		}
		if n.Kind == "DNAT" || n.Kind == "SNAT" {
			a.Addr = n.Addr
		}
		if n.Port != 0 {
			a.PortMin, a.PortMax = n.Port, n.Port
			if n.PortMax > n.Port {
				a.PortMax = n.PortMax
			}
		}
		return netsim.Verdict{Kind: netsim.NAT, NAT: a, Reason: reason}
	}
	return netsim.VerdictContinue
}

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
