package kubeproxy

import (
	"net/netip"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
)

// What the netsim adapters of the rule engines (the iptables emulator's tables, the
// nftables evaluator's base chains) share: the conntrack view of a netsim packet, the
// netsim verdict of an engine's decision and the netsim NAT of a NAT target.

// ctView is a netsim packet's conntrack entry as a rule engine sees it.
type ctView struct {
	State            netfilter.CtState
	Status           netfilter.CtStatus
	Reply            bool
	Orig, ReplyTuple netfilter.Tuple
	Mark             uint32
	Expire           time.Duration
}

// conntrackInto writes into *v what rules see of p's conntrack entry. beforeConntrack
// says the handler runs before conntrack's lookup (the raw table, an nftables chain at
// a priority below -200): a packet with no entry yet is then INVALID there, as it is
// without an entry anywhere. The engines' packets (emulator.Conntrack, nftemu.Conntrack)
// hold ctView's fields, so a handler fills its packet in place rather than copying a
// view of 130 bytes twice, three times per node a probe crosses.
//
// It writes the fields one by one, never a whole ctView: the engine's packet is a heap
// object, and storing a struct literal of pointerful fields (the tuples' addresses)
// copies it with the GC's bulk write barrier whenever a collection marks.
func conntrackInto(v *ctView, p *netsim.Packet, ctx *netsim.Context, beforeConntrack bool) {
	switch {
	case p.Conn == nil && beforeConntrack:
		// Before conntrack's lookup the packet has no entry (netsim marks a packet
		// untracked until conntrack sees it; NOTRACK there would untrack it for good).
		v.State = netfilter.CtInvalid
	case p.CtState == netfilter.CtUntracked:
		v.State = netfilter.CtUntracked
	case p.Conn == nil:
		v.State = netfilter.CtInvalid
	default:
		v.State = p.CtState
	}
	c := p.Conn
	if c == nil {
		v.Reply, v.Mark, v.Status, v.Expire = false, 0, 0, 0
		v.Orig, v.ReplyTuple = netfilter.Tuple{}, netfilter.Tuple{}
		return
	}
	v.Reply = p.CtReply
	v.Mark = c.Mark
	v.Orig, v.ReplyTuple = c.Orig, c.Reply
	// The IPS_* bits the rules name (not the datapath's NAT_DONE bits).
	v.Status = c.Status & (netfilter.StatusSeenReply | netfilter.StatusAssured | netfilter.StatusConfirmed | netfilter.StatusSrcNAT | netfilter.StatusDstNAT)
	v.Expire = 0
	if !c.Expires.IsZero() {
		v.Expire = c.Expires.Sub(ctx.Now())
	}
}

// engineDecision is what a rule engine decided for a packet at one table or chain.
type engineDecision uint8

const (
	engineContinue engineDecision = iota // go on to the next handler
	engineDrop
	engineReject
	engineUnknown // a target or statement the engine does not model decided
	engineNAT
)

// netsimVerdict is the netsim verdict of an engine's decision; what names the kind of
// rule an unknown decision came from ("target", "statement").
func netsimVerdict(d engineDecision, reject netfilter.RejectWith, nat netsim.NATAction, reason, what string) netsim.Verdict {
	switch d {
	case engineDrop:
		return netsim.Verdict{Kind: netsim.Drop, Reason: reason}
	case engineReject:
		return netsim.RejectVerdict(reject, reason)
	case engineUnknown:
		return netsim.Verdict{Kind: netsim.Drop, Reason: reason + ": " + what + " not emulated"}
	case engineNAT:
		return netsim.Verdict{Kind: netsim.NAT, NAT: nat, Reason: reason}
	}
	return netsim.VerdictContinue
}

// netsimNAT is the netsim NAT of a NAT target's result: an address for DNAT and SNAT,
// a port or port range.
func netsimNAT(kind netfilter.NATKind, addr netip.Addr, port, portMax uint16, random, randomFully bool) netsim.NATAction {
	a := netsim.NATAction{Kind: kind, Random: random, RandomFully: randomFully}
	if kind == netfilter.DNAT || kind == netfilter.SNAT {
		a.Addr = addr
	}
	if port != 0 {
		a.PortMin, a.PortMax = port, port
		if portMax > port {
			a.PortMax = portMax
		}
	}
	return a
}
