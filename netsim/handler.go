package netsim

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Hook is a netfilter hook point of a node's datapath.
//
// A packet's way through a node, as in Linux:
//
//	from a pod, another node          ┌──────────────────────────────────────────┐
//	or the external network           │                                          ▼
//	  ──▶ PREROUTING ──▶ routing ──┬──▶ FORWARD ─────────────────────────▶ POSTROUTING ──▶ out
//	      (conntrack,   decision   │                                          ▲
//	       DNAT)        (after     └──▶ INPUT ──▶ the node's own stack        │
//	                     DNAT)          (SNAT)    (hostNetwork pods,          │
//	                                               NodePort listeners)        │
//	                                                   │                      │
//	                                                   ▼                      │
//	                                    OUTPUT ──▶ routing ───────────────────┘
//	                                    (conntrack, DNAT)                 (SNAT, MASQUERADE,
//	                                                                       conntrack confirm)
//
// At each hook the registered handlers run in priority order (lowest first), with the
// datapath's own steps at the kernel's priorities: conntrack lookup at PriorityConntrack
// in PREROUTING and OUTPUT, NAT at PriorityNATDst (PREROUTING, OUTPUT) and PriorityNATSrc
// (INPUT, POSTROUTING), and conntrack confirmation last in INPUT and POSTROUTING.
type Hook uint8

// The five hooks.
const (
	Prerouting Hook = iota
	Input
	Forward
	Output
	Postrouting
	numHooks
)

var hookNames = [...]string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}

func (h Hook) String() string {
	if int(h) < len(hookNames) {
		return hookNames[h]
	}
	return fmt.Sprintf("HOOK(%d)", uint8(h))
}

// ParseHook parses a hook name as iptables spells its built-in chains.
func ParseHook(s string) (Hook, error) {
	for i, n := range hookNames {
		if strings.EqualFold(n, s) {
			return Hook(i), nil
		}
	}
	return 0, fmt.Errorf("unknown hook %q", s)
}

// Handler priorities, as netfilter's NF_IP_PRI_* values.
const (
	PriorityRaw       = -300
	PriorityConntrack = -200
	PriorityMangle    = -150
	PriorityNATDst    = -100
	PriorityFilter    = 0
	PrioritySecurity  = 50
	PriorityNATSrc    = 100
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

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx *Context, p *Packet) Verdict

// Handle calls f.
func (f HandlerFunc) Handle(ctx *Context, p *Packet) Verdict { return f(ctx, p) }

// HandlerSpec registers a handler on a node.
type HandlerSpec struct {
	Name     string // shown in traces
	Hook     Hook
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

// RejectWith says what a Reject sends back (iptables' --reject-with).
type RejectWith uint8

// Reject types. The zero value is ICMP port unreachable, the REJECT target's default.
const (
	RejectPortUnreachable  RejectWith = iota // icmp-port-unreachable / icmp6-port-unreachable
	RejectNetUnreachable                     // icmp-net-unreachable / icmp6-no-route
	RejectHostUnreachable                    // icmp-host-unreachable / icmp6-addr-unreachable
	RejectProtoUnreachable                   // icmp-proto-unreachable
	RejectNetProhibited                      // icmp-net-prohibited
	RejectHostProhibited                     // icmp-host-prohibited
	RejectAdminProhibited                    // icmp-admin-prohibited / icmp6-adm-prohibited
	RejectTCPReset                           // tcp-reset
)

var rejectNames = [...]string{"icmp-port-unreachable", "icmp-net-unreachable", "icmp-host-unreachable", "icmp-proto-unreachable", "icmp-net-prohibited", "icmp-host-prohibited", "icmp-admin-prohibited", "tcp-reset"}

func (r RejectWith) String() string {
	if int(r) < len(rejectNames) {
		return rejectNames[r]
	}
	return fmt.Sprintf("reject(%d)", uint8(r))
}

// icmpTypeCode returns the ICMP (or ICMPv6) type and code a reject sends.
func (r RejectWith) icmpTypeCode(v6 bool) (uint8, uint8) {
	if v6 {
		switch r {
		case RejectNetUnreachable:
			return 1, 0
		case RejectHostUnreachable:
			return 1, 3
		case RejectAdminProhibited, RejectNetProhibited, RejectHostProhibited:
			return 1, 1
		default:
			return 1, 4
		}
	}
	switch r {
	case RejectNetUnreachable:
		return 3, 0
	case RejectHostUnreachable:
		return 3, 1
	case RejectProtoUnreachable:
		return 3, 2
	case RejectNetProhibited:
		return 3, 9
	case RejectHostProhibited:
		return 3, 10
	case RejectAdminProhibited:
		return 3, 13
	default:
		return 3, 3
	}
}

// NATKind is the kind of a NAT action.
type NATKind uint8

// NAT kinds.
const (
	DNAT       NATKind = iota + 1 // rewrite the destination (PREROUTING, OUTPUT)
	Redirect                      // DNAT to the node itself (the input interface's address, 127.0.0.1 for OUTPUT)
	SNAT                          // rewrite the source (INPUT, POSTROUTING)
	Masquerade                    // SNAT to the output interface's address (POSTROUTING)
)

func (k NATKind) String() string {
	switch k {
	case DNAT:
		return "DNAT"
	case Redirect:
		return "REDIRECT"
	case SNAT:
		return "SNAT"
	case Masquerade:
		return "MASQUERADE"
	}
	return "NAT?"
}

// NATAction is what a NAT verdict does.
type NATAction struct {
	Kind NATKind
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
	Reject RejectWith // for Reject
	NAT    NATAction  // for NAT
	// Reason says why, for traces ("KUBE-SVC-XYZ rule 3", "no endpoints").
	Reason string
}

// Verdict helpers.
var (
	VerdictContinue = Verdict{Kind: Continue}
	VerdictDrop     = Verdict{Kind: Drop}
)

// RejectVerdict returns a Reject verdict.
func RejectVerdict(with RejectWith, reason string) Verdict {
	return Verdict{Kind: Reject, Reject: with, Reason: reason}
}

// DNATTo returns a NAT verdict that rewrites the destination to ap.
func DNATTo(ap netip.AddrPort, reason string) Verdict {
	return Verdict{Kind: NAT, NAT: NATAction{Kind: DNAT, Addr: ap.Addr(), PortMin: ap.Port(), PortMax: ap.Port()}, Reason: reason}
}

// MasqueradeVerdict returns a MASQUERADE verdict.
func MasqueradeVerdict(randomFully bool, reason string) Verdict {
	return Verdict{Kind: NAT, NAT: NATAction{Kind: Masquerade, RandomFully: randomFully}, Reason: reason}
}

// Context is what a handler gets beside the packet: the node, the hook, the virtual time,
// the seeded choice points and the trace.
type Context struct {
	node    *Node
	hook    Hook
	now     time.Time
	chooser chooser
	trace   *Trace
	dryRun  bool
	handler string
}

// Node returns the node whose datapath runs the handler.
func (c *Context) Node() *Node { return c.node }

// Hook returns the hook being run.
func (c *Context) Hook() Hook { return c.hook }

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
	ok := conn != nil && !p.CtReply && p.CtState != CtRelated
	if ok && !c.dryRun {
		conn.Reply.Src, conn.Reply.SrcPort = to.Addr(), to.Port()
		conn.Status |= StatusDstNAT | StatusDstNATDone
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
