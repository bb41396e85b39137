package netsim

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// Handler inspects a packet at a hook and decides what happens to it. Proxy modes (the
// iptables emulator, IPVS, the userspace proxy's redirect rules) and users' own code are
// handlers.
//
// Handlers run with the node locked, one packet at a time, on whichever goroutine carries
// the packet through the node (the node's datapath goroutine for packets from its pods and
// its own stack; the sending node's for packets from the cluster network): they must not
// block, must not call back into the node, and must not keep the packet or its bytes after
// they return (except by returning Stolen, which hands the packet over). Time and randomness come from the Context (so that decisions are a pure
// function of the seed and the packets), never from the wall clock or a global source.
type Handler interface {
	Handle(ctx *Context, p *Packet) Verdict
}

// IdleHandler is a Handler that can tell at once that it would let a packet pass
// untouched: when Idle(p) is true, Handle(ctx, p) would return Continue (with no
// reason) and change nothing, neither the packet nor any state of its own (counters,
// lists, connections). A node then skips the call for an untraced packet: it builds no
// Context for it. (The iptables emulator's handlers of tables the ruleset lacks are
// idle: kube-proxy writes no raw, mangle or security rules, and those handlers are most
// of a packet's handler calls.) A traced packet's handlers are always called, so that
// the trace shows each of them.
type IdleHandler interface {
	Handler
	Idle(p *Packet) bool
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx *Context, p *Packet) Verdict

// Handle calls f.
func (f HandlerFunc) Handle(ctx *Context, p *Packet) Verdict { return f(ctx, p) }

// HandlerSpec registers a handler on a node.
type HandlerSpec struct {
	Name     string // shown in traces
	Hook     netfilter.Hook
	Priority int
	// NAT makes this a NAT handler, like a nat-table chain: it sees only the first packet
	// of each connection (while the connection's NAT binding of its kind is not yet set
	// up), may return a NAT verdict (DNAT/REDIRECT in PREROUTING and OUTPUT, SNAT and
	// MASQUERADE in INPUT and POSTROUTING), and later packets of the connection follow
	// the binding without calling it. A first packet that no NAT handler NATs gets a null
	// binding: later packets skip NAT handlers too, as in the kernel.
	NAT     bool
	Handler Handler
}

// VerdictKind is what a handler decided.
type VerdictKind uint8

// Verdict kinds.
const (
	// Continue lets the packet go on to the next handler (netfilter's NF_ACCEPT).
	Continue VerdictKind = iota
	// Drop discards the packet silently.
	Drop
	// Reject discards the packet and sends an error back to its source: an ICMP
	// unreachable or a TCP RST, as the REJECT target does.
	Reject
	// NAT sets up a NAT binding for the packet's connection (NAT handlers only).
	NAT
	// Reroute means the handler rewrote the packet's destination itself (as IPVS does in
	// masquerading mode): the datapath routes it again and sends it on through
	// POSTROUTING without running the rest of this hook.
	Reroute
	// Stolen means the handler took the packet; the datapath forgets it.
	Stolen
)

func (k VerdictKind) String() string {
	return [...]string{"CONTINUE", "DROP", "REJECT", "NAT", "REROUTE", "STOLEN"}[k]
}

// NATAction is what a NAT verdict does.
type NATAction struct {
	Kind netfilter.NATKind
	// Addr is the new address for DNAT and SNAT (zero keeps the address).
	Addr netip.Addr
	// PortMin..PortMax is the new port range; zero keeps the port (DNAT, REDIRECT) or
	// lets the datapath pick (SNAT, MASQUERADE), as the kernel does.
	PortMin, PortMax uint16
	// RandomFully picks the source port at random even when the original one is free
	// (--random-fully).
	RandomFully bool
	// Random randomises the port choice (--random).
	Random bool
}

func (a NATAction) String() string {
	s := a.Kind.String()
	if a.Addr.IsValid() {
		s += " to " + a.Addr.String()
	}
	if a.PortMin != 0 {
		if a.PortMax > a.PortMin {
			s += fmt.Sprintf(":%d-%d", a.PortMin, a.PortMax)
		} else {
			s += fmt.Sprintf(":%d", a.PortMin)
		}
	}
	if a.RandomFully {
		s += " random-fully"
	}
	return s
}

// Verdict is a handler's decision about a packet.
type Verdict struct {
	Kind   VerdictKind
	Reject netfilter.RejectWith // for Reject
	NAT    NATAction            // for NAT
	// Reason says why, for traces ("KUBE-SVC-XYZ rule 3", "no endpoints").
	Reason string
}

// Verdict helpers.
var (
	VerdictContinue = Verdict{Kind: Continue}
	VerdictDrop     = Verdict{Kind: Drop}
)

// RejectVerdict returns a Reject verdict.
func RejectVerdict(with netfilter.RejectWith, reason string) Verdict {
	return Verdict{Kind: Reject, Reject: with, Reason: reason}
}

// DNATTo returns a NAT verdict that rewrites the destination to ap.
func DNATTo(ap netip.AddrPort, reason string) Verdict {
	return Verdict{Kind: NAT, NAT: NATAction{Kind: netfilter.DNAT, Addr: ap.Addr(), PortMin: ap.Port(), PortMax: ap.Port()}, Reason: reason}
}

// MasqueradeVerdict returns a MASQUERADE verdict.
func MasqueradeVerdict(randomFully bool, reason string) Verdict {
	return Verdict{Kind: NAT, NAT: NATAction{Kind: netfilter.Masquerade, RandomFully: randomFully}, Reason: reason}
}

// Context is what a handler gets beside the packet: the node, the hook, the virtual time,
// the seeded choice points and the trace.
type Context struct {
	node    *Node
	hook    netfilter.Hook
	now     time.Time
	chooser chooser
	trace   *Trace
	dryRun  bool
	handler string
}

// Node returns the node whose datapath runs the handler.
func (c *Context) Node() *Node { return c.node }

// Hook returns the hook being run.
func (c *Context) Hook() netfilter.Hook { return c.hook }

// Now returns the virtual time.
func (c *Context) Now() time.Time { return c.now }

// Chance is a choice point that is true with probability p (iptables' statistic match).
// Normally it draws from the node's seeded source; when a probe explores all branches it
// follows each outcome in turn and weighs the results.
func (c *Context) Chance(p float64) bool { return c.chooser.chance(p) }

// Pick is a choice point that returns a uniform choice in [0, n).
func (c *Context) Pick(n int) int { return c.chooser.pick(n) }

// IsLocalAddr reports whether addr is one of the node's own addresses (addrtype LOCAL).
func (c *Context) IsLocalAddr(addr netip.Addr) bool { return c.node.IsLocalAddr(addr) }

// LocalAddrIface returns the name of the node's interface that holds addr, when addr is
// one of the node's own addresses: "lo" for loopback addresses, kube-ipvs0 for a VIP
// bound there, and so on (addrtype --limit-iface-in/out).
func (c *Context) LocalAddrIface(addr netip.Addr) (string, bool) {
	if addr.IsLoopback() {
		return c.node.lo.Name, true
	}
	if i := c.node.local[addr]; i != nil { // handlers run under the node's lock
		return i.Name, true
	}
	return "", false
}

// DryRun reports whether the packet is a what-if (a probe exploring branches): handlers
// must not change persistent state (recent lists, counters, connection tables) then.
func (c *Context) DryRun() bool { return c.dryRun }

// Tracing reports whether the packet is being traced; handlers may skip building trace
// detail when it is not.
func (c *Context) Tracing() bool { return c.trace != nil }

// Trace adds a step to the packet's trace (a no-op when not tracing). Node, hook and
// handler are filled in when empty.
func (c *Context) Trace(s TraceStep) {
	if c.trace == nil {
		return
	}
	if s.Node == "" {
		s.Node = c.node.name
	}
	if s.Hook == "" {
		s.Hook = c.hook.String()
	}
	if s.Handler == "" {
		s.Handler = c.handler
	}
	if s.Kind == "" {
		s.Kind = StepNote
	}
	c.trace.add(s)
}

// Tracef adds a note to the trace.
func (c *Context) Tracef(format string, args ...any) {
	if c.trace == nil {
		return
	}
	c.Trace(TraceStep{Kind: StepNote, Detail: fmt.Sprintf(format, args...)})
}

// RewriteDst rewrites the packet's destination the way IPVS's masquerading forwarder
// does from a non-NAT hook (INPUT, OUTPUT), and records it on the packet's conntrack
// entry as a DNAT binding (as the kernel's ip_vs_update_conntrack does), so that replies
// are translated back and later packets of the connection follow it. Use it with a
// Reroute verdict. It reports false when the packet has no conntrack entry of its own
// to bind (untracked or invalid): the packet is still rewritten.
func (c *Context) RewriteDst(p *Packet, to netip.AddrPort) bool {
	conn := p.Conn
	ok := conn != nil && !p.CtReply && p.CtState != netfilter.CtRelated
	if ok && !c.dryRun {
		conn.Reply.Src, conn.Reply.SrcPort = to.Addr(), to.Port()
		conn.Status |= netfilter.StatusDstNAT | netfilter.StatusDstNATDone
	}
	before := ""
	if c.trace != nil {
		before = p.String()
	}
	p.SetDst(to.Addr(), to.Port())
	if c.trace != nil {
		c.Trace(TraceStep{Kind: StepNAT, Verdict: "DNAT", Detail: before + " => " + p.String()})
	}
	return ok
}
