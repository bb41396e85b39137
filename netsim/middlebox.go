package netsim

import (
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/clusterlab/clusterlab/netfilter"
)

// A Middlebox is a device of the cluster network that owns addresses of its own and
// forwards what is sent to them to a node: a cloud load balancer, a NAT gateway, an
// anycast router. The network hands it every packet addressed to one of its addresses
// (real traffic and probes alike); it decides, may rewrite the packet, and names the
// node the network then delivers the packet to, over that node's uplink.
//
// Forward runs on the goroutine of whatever sent the packet, possibly on many at once:
// a middlebox guards its own state.
type Middlebox interface {
	// String names the middlebox where the cluster network routes to it, in traces and
	// in messages about addresses in use ("load balancer 198.51.100.1").
	String() string
	// Forward decides about pk, addressed to one of the middlebox's addresses. It may
	// rewrite pk (Packet.SetDst), but must not keep pk or its bytes after it returns (a
	// probe's packet is reused by the next probe). traced says whether the packet is
	// traced: only then is MiddleboxVerdict.Note read.
	Forward(pk *Packet, traced bool) MiddleboxVerdict
}

// MiddleboxVerdict is what a middlebox does with one packet.
type MiddleboxVerdict struct {
	// To is the node to deliver the packet to; nil drops it.
	To *Node
	// Drop says why the packet was dropped (when To is nil), as the probe's reason and
	// the trace's last step ("cloud load balancer: no healthy backend node").
	Drop string
	// Note is the trace step of a forwarded packet, when traced.
	Note string
}

// AttachMiddlebox routes addr to m in the cluster network. The address must be free: no
// node's, external host's, other middlebox's or routed externalIP.
func (c *Network) AttachMiddlebox(addr netip.Addr, m Middlebox) error {
	c.fabric.mu.Lock()
	defer c.fabric.unlock()
	if d := c.fabric.lookupLocked(addr); d.kind != hopNone {
		return fmt.Errorf("%s is already used by %s", addr, d)
	}
	c.fabric.middleboxes[addr] = &attached{m: m, in: func(fr frame) { c.middleboxIn(m, fr) }}
	return nil
}

// DetachMiddlebox removes the route of addr to a middlebox.
func (c *Network) DetachMiddlebox(addr netip.Addr) {
	c.fabric.mu.Lock()
	defer c.fabric.unlock()
	delete(c.fabric.middleboxes, addr)
}

// Owner names what owns addr in the cluster network ("node node-a", "external host
// client", "load balancer 198.51.100.1"), or returns "" when no route leads to it.
func (c *Network) Owner(addr netip.Addr) string {
	d := c.fabric.lookup(addr)
	if d.kind == hopNone {
		return ""
	}
	return d.String()
}

// A FabricNAT rewrites packets that nodes send into the cluster network before they are
// routed: the reply half of a middlebox's NAT (a load balancer that rewrote a client's
// destination to a node, and whose node answers the client directly, rewrites the
// answer's source back). It reports whether it rewrote the packet.
type FabricNAT interface {
	// Active reports whether the NAT has any binding at all: a cheap test made for
	// every packet before Rewrite is called.
	Active() bool
	// Rewrite rewrites pk if it belongs to one of the NAT's bindings.
	Rewrite(pk *Packet) bool
	// String names the rewrite in traces ("cloud load balancer un-NATs the reply").
	String() string
}

// SetFabricNAT installs the cluster network's NAT for packets from nodes (nil removes
// it). There is one.
func (c *Network) SetFabricNAT(nat FabricNAT) {
	if nat == nil {
		c.fabric.nat.Store(nil)
		return
	}
	c.fabric.nat.Store(&nat)
}

// fabricNAT rewrites a packet from a node with the fabric's NAT, and reports whether it
// did and, if so, the NAT's name.
func (f *fabric) fabricNAT(pk *Packet) (FabricNAT, bool) {
	p := f.nat.Load()
	if p == nil {
		return nil, false
	}
	nat := *p
	if !nat.Active() || !nat.Rewrite(pk) {
		return nil, false
	}
	return nat, true
}

// middleboxIn takes a packet of real traffic addressed to a middlebox.
func (c *Network) middleboxIn(m Middlebox, f frame) {
	pk, err := ParsePacket(f.b)
	if err != nil {
		return
	}
	pk.view = f.v
	v := m.Forward(pk, false)
	if v.To == nil {
		return
	}
	c.fabric.deliver(fabricDest{kind: hopNode, node: v.To}, pk.frame(), nil)
}

// middleboxProbe carries a probe's packet through a middlebox.
func (c *Network) middleboxProbe(m Middlebox, pk *Packet, env *penv, nodeEnv nodeEnvs) walkEnd {
	v := m.Forward(pk, env.trace != nil)
	if v.To == nil {
		if env.trace != nil {
			env.step(TraceStep{Kind: StepEnd, Verdict: "DROP", Detail: v.Drop, Packet: pk.String()})
		}
		return walkEnd{kind: endDropped, pk: pk, reason: v.Drop}
	}
	if env.trace != nil && v.Note != "" {
		env.step(TraceStep{Kind: StepLink, Detail: v.Note})
	}
	n := v.To
	if n.down.Load() {
		return walkEnd{kind: endDropped, pk: pk, node: n, reason: "node " + n.name + " is down"}
	}
	var e penv
	nodeEnv.at(n, &e)
	return c.follow(n, n.ingress(pk, n.uplink, nil, &e), &e, nodeEnv)
}

// Tuple returns the packet's tuple as it is now: protocol, addresses and ports.
func (p *Packet) Tuple() netfilter.Tuple { return tupleOf(p) }

// natPointer is the fabric's NAT, read for every packet without a lock.
type natPointer = atomic.Pointer[FabricNAT]
