package netsim

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// penv is the environment one packet is processed in: how choice points resolve,
// whether it is traced, whether it may change state.
type penv struct {
	ch    chooser
	trace *Trace
	dry   bool
	t     time.Time // the virtual time, read once per packet
	// delay adds up a probe's time on links (latency and jitter): shared by the copies
	// nodeEnv makes; nil outside probes.
	delay *time.Duration
	// gate holds a packet sent with others (Node.SendTogether) at its confirmation until
	// the schedule lets it on; nil otherwise.
	gate *flightGate
}

func (e *penv) now(n *Node) time.Time {
	if e.t.IsZero() {
		e.t = n.cluster.clock.Now()
	}
	return e.t
}

func (e *penv) step(s TraceStep) {
	if e.trace != nil {
		e.trace.add(s)
	}
}

type egressKind uint8

const (
	egDrop     egressKind = iota // the packet is gone (dropped or rejected)
	egLocal                      // deliver to the node's host stack
	egPod                        // out the bridge to a pod
	egUplink                     // out eth0 into the cluster network
	egLoopback                   // out lo: re-enters the node at PREROUTING
	egStolen                     // a handler took it
)

// egress is what the datapath decided for a packet at one node.
type egress struct {
	kind    egressKind
	pk      *Packet
	port    *podPort
	reason  string
	reject  bool      // dropped by a Reject (replies holds what was sent back)
	replies []*Packet // packets the node generated in response (REJECT, ICMP errors)
}

func dropped(pk *Packet, reason string) egress {
	return egress{kind: egDrop, pk: pk, reason: reason}
}

// hookResult is how a hook ended.
type hookResult uint8

const (
	hookContinue hookResult = iota
	hookDrop
	hookReject
	hookReroute
	hookStolen
)

// ingress processes a packet arriving on an interface: PREROUTING, routing, then INPUT or
// FORWARD and POSTROUTING.
//
// The common way through (a packet forwarded without tracing) is kept short: what only
// some packets need (traces, drops and their reasons, the checks of rarer settings) is in
// separate functions, so that the code a pass runs fills few cache lines. Between two
// packets the stacks' code runs and evicts the datapath's from the instruction cache, so
// each line a pass touches is usually a miss.
func (n *Node) ingress(pk *Packet, in *Iface, port *podPort, env *penv) egress {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.countLocked(&n.hot.stats.Received)
	pk.InIface, pk.OutIface = in.Name, ""
	if port != nil {
		pk.inPort = port
	}
	loop := in == n.lo
	if !loop && (!n.settings.RouteLocalnet && (isLoopback(pk.Src) || isLoopback(pk.Dst)) ||
		n.addrLocked(pk.Src).local != nil && pk.Src != pk.Dst) {
		return n.martianLocked(pk, env)
	}
	if env.trace != nil {
		n.traceHook(env, netfilter.Prerouting, pk, in, nil)
	}
	var eg egress
	res := n.runHookLocked(netfilter.Prerouting, pk, env, &eg)
	if res != hookContinue && res != hookReroute { // routing comes next anyway
		return eg
	}
	rt := n.routeLocked(pk.Dst)
	if !loop && (rt.kind == routeLocal && !n.settings.RouteLocalnet || n.settings.RPFilter != 0) {
		if reason := n.routeCheckLocked(pk, in, rt); reason != "" {
			return n.dropLocked(pk, env, reason)
		}
	}
	if env.trace != nil {
		n.traceRoute(env, rt, pk, "")
	}
	switch rt.kind {
	case routeLocal:
		return n.inputLocked(pk, rt, env)
	case routeNone:
		return n.noRouteLocked(pk, env)
	}
	if !n.settings.IPForward {
		return n.dropLocked(pk, env, "ip_forward=0: the node does not forward")
	}
	pk.OutIface = rt.iface.Name
	if !pk.decTTL() {
		return n.ttlExceededLocked(pk, env)
	}
	if env.trace != nil {
		n.traceHook(env, netfilter.Forward, pk, in, rt.iface)
	}
	res = n.runHookLocked(netfilter.Forward, pk, env, &eg)
	switch res {
	case hookContinue:
	case hookReroute:
		return n.rerouteLocked(pk, env)
	default:
		return eg
	}
	n.countLocked(&n.hot.stats.Forwarded)
	return n.postroutingLocked(pk, rt, env)
}

// isLoopback is netip.Addr.IsLoopback with the IPv4 case inline.
func isLoopback(a netip.Addr) bool {
	if a.Is4() {
		return a.As4()[0] == 127
	}
	return a.IsLoopback()
}

// martianLocked drops a packet that ingress found to be a martian, saying why.
//
//go:noinline
func (n *Node) martianLocked(pk *Packet, env *penv) egress {
	switch {
	case pk.Src.IsLoopback() && !n.settings.RouteLocalnet:
		return n.dropLocked(pk, env, "martian source (route_localnet=0)")
	case pk.Dst.IsLoopback() && !n.settings.RouteLocalnet:
		return n.dropLocked(pk, env, "martian destination (route_localnet=0)")
	}
	return n.dropLocked(pk, env, "martian source (one of the node's own addresses)")
}

// routeCheckLocked applies the checks after routing that only some settings and routes
// call for (route_localnet for local delivery, rp_filter): a drop reason, or "".
//
//go:noinline
func (n *Node) routeCheckLocked(pk *Packet, in *Iface, rt route) string {
	if rt.kind == routeLocal && pk.Dst.IsLoopback() && !n.settings.RouteLocalnet {
		return "martian destination after DNAT (route_localnet=0)"
	}
	if n.settings.RPFilter != 0 {
		back := n.routeLocked(pk.Src)
		switch {
		case back.kind == routeNone:
			return "rp_filter: no route back to the source"
		case n.settings.RPFilter == 1 && back.iface != in:
			return fmt.Sprintf("rp_filter strict: route back to %s leaves %s, packet came in %s", pk.Src, ifaceName(back.iface), in.Name)
		}
	}
	return ""
}

//go:noinline
func (n *Node) noRouteLocked(pk *Packet, env *penv) egress {
	return n.dropLocked(pk, env, "no route to "+pk.Dst.String())
}

//go:noinline
func (n *Node) ttlExceededLocked(pk *Packet, env *penv) egress {
	eg := n.dropLocked(pk, env, "TTL exceeded")
	if r := n.icmpErrorLocked(pk, 11, 0); r != nil {
		eg.replies = append(eg.replies, r)
	}
	return eg
}

// traceHook records that pk enters hook h (arriving on in, leaving by out, when known).
//
//go:noinline
func (n *Node) traceHook(env *penv, h netfilter.Hook, pk *Packet, in, out *Iface) {
	var detail string
	switch {
	case in != nil && out != nil:
		detail = "in " + in.Name + " out " + out.Name
	case in != nil:
		detail = "in " + in.Name
	case out != nil:
		detail = "out " + out.Name
	}
	env.step(TraceStep{Kind: StepHook, Node: n.name, Hook: h.String(), Packet: pk.String(), Detail: detail})
}

// traceRoute records the routing decision (prefix: "rerouted: " or "").
//
//go:noinline
func (n *Node) traceRoute(env *penv, rt route, pk *Packet, prefix string) {
	env.step(TraceStep{Kind: StepRoute, Node: n.name, Detail: prefix + n.describeRoute(rt, pk)})
}

// countLocked adds one to a counter only passes under the node lock write (Received,
// Forwarded, Delivered): an atomic store, for Stats, but no locked read-modify-write.
func (n *Node) countLocked(c *uint64) { atomic.StoreUint64(c, *c+1) }

func ifaceName(i *Iface) string {
	if i == nil {
		return "nowhere"
	}
	return i.Name
}

func (n *Node) describeRoute(rt route, pk *Packet) string {
	switch rt.kind {
	case routeLocal:
		return fmt.Sprintf("%s is local (%s): INPUT", pk.Dst, rt.iface.Name)
	case routeBridge:
		return fmt.Sprintf("%s is pod %s on %s port %s: FORWARD", pk.Dst, rt.port.pod.key(), rt.iface.Name, rt.port.name)
	case routeUplink:
		return fmt.Sprintf("%s via %s: FORWARD", pk.Dst, rt.iface.Name)
	case routeNoNeigh:
		return fmt.Sprintf("%s is on %s but no pod has it", pk.Dst, rt.iface.Name)
	}
	return fmt.Sprintf("no route to %s", pk.Dst)
}

// output processes a packet the node's host stack sends: OUTPUT, routing (after DNAT),
// POSTROUTING.
func (n *Node) output(pk *Packet, env *penv) egress {
	n.mu.Lock()
	defer n.mu.Unlock()
	pk.InIface, pk.OutIface = "", ""
	// A locally generated packet is routed before OUTPUT (the socket's route): rules
	// there see its output interface (-o), which stays for the whole hook even when nat
	// OUTPUT's DNAT changes the destination; the packet is routed again after it.
	switch rt := n.routeLocked(pk.Dst); rt.kind {
	case routeNone:
	case routeLocal:
		pk.OutIface = n.lo.Name
	default:
		if rt.iface != nil {
			pk.OutIface = rt.iface.Name
		}
	}
	if env.trace != nil {
		env.step(TraceStep{Kind: StepHook, Node: n.name, Hook: netfilter.Output.String(), Packet: pk.String()})
	}
	var eg egress
	res := n.runHookLocked(netfilter.Output, pk, env, &eg)
	if res != hookContinue && res != hookReroute { // routing comes next anyway
		return eg
	}
	rt := n.routeLocked(pk.Dst)
	if env.trace != nil {
		env.step(TraceStep{Kind: StepRoute, Node: n.name, Detail: n.describeRoute(rt, pk)})
	}
	switch rt.kind {
	case routeNone:
		return n.dropLocked(pk, env, "no route to "+pk.Dst.String())
	case routeLocal:
		pk.OutIface = n.lo.Name
		if env.trace != nil {
			env.step(TraceStep{Kind: StepHook, Node: n.name, Hook: netfilter.Postrouting.String(), Packet: pk.String(), Detail: "out lo"})
		}
		if n.runHookLocked(netfilter.Postrouting, pk, env, &eg) != hookContinue {
			return eg
		}
		return egress{kind: egLoopback, pk: pk}
	}
	if pk.Src.IsLoopback() && !n.settings.RouteLocalnet {
		return n.dropLocked(pk, env, fmt.Sprintf("martian source %s leaving %s (route_localnet=0)", pk.Src, rt.iface.Name))
	}
	pk.OutIface = rt.iface.Name
	return n.postroutingLocked(pk, rt, env)
}

// rerouteLocked sends on a packet a handler rewrote (Reroute verdict): route it again and
// run POSTROUTING.
func (n *Node) rerouteLocked(pk *Packet, env *penv) egress {
	rt := n.routeLocked(pk.Dst)
	if env.trace != nil {
		env.step(TraceStep{Kind: StepRoute, Node: n.name, Detail: "rerouted: " + n.describeRoute(rt, pk)})
	}
	switch rt.kind {
	case routeNone:
		return n.dropLocked(pk, env, "no route to "+pk.Dst.String())
	case routeLocal:
		return n.dropLocked(pk, env, "rerouted to a local address")
	}
	pk.OutIface = rt.iface.Name
	return n.postroutingLocked(pk, rt, env)
}

func (n *Node) inputLocked(pk *Packet, rt route, env *penv) egress {
	if env.trace != nil {
		env.step(TraceStep{Kind: StepHook, Node: n.name, Hook: netfilter.Input.String(), Packet: pk.String()})
	}
	var eg egress
	res := n.runHookLocked(netfilter.Input, pk, env, &eg)
	switch res {
	case hookContinue:
	case hookReroute:
		return n.rerouteLocked(pk, env)
	default:
		return eg
	}
	n.countLocked(&n.hot.stats.Delivered)
	if env.trace != nil {
		env.step(TraceStep{Kind: StepEnd, Node: n.name, Verdict: "LOCAL", Packet: pk.String(), Detail: "delivered to the node's host stack"})
	}
	return egress{kind: egLocal, pk: pk}
}

func (n *Node) postroutingLocked(pk *Packet, rt route, env *penv) egress {
	if env.trace != nil {
		n.traceHook(env, netfilter.Postrouting, pk, nil, rt.iface)
	}
	var eg egress
	if n.runHookLocked(netfilter.Postrouting, pk, env, &eg) != hookContinue {
		return eg
	}
	switch rt.kind {
	case routeBridge:
		if pk.inPort == rt.port && !n.settings.Hairpin {
			return n.hairpinDropLocked(pk, rt, env)
		}
		return egress{kind: egPod, pk: pk, port: rt.port}
	case routeNoNeigh:
		return n.noNeighLocked(pk, rt, env)
	}
	return egress{kind: egUplink, pk: pk}
}

//go:noinline
func (n *Node) hairpinDropLocked(pk *Packet, rt route, env *penv) egress {
	return n.dropLocked(pk, env, fmt.Sprintf("bridge hairpin mode off: %s would leave by the port it came in on (%s)", pk, rt.port.name))
}

//go:noinline
func (n *Node) noNeighLocked(pk *Packet, rt route, env *penv) egress {
	eg := n.dropLocked(pk, env, fmt.Sprintf("no neighbour: nothing answers ARP for %s on %s", pk.Dst, rt.iface.Name))
	if r := n.icmpErrorLocked(pk, 3, 1); r != nil {
		eg.replies = append(eg.replies, r)
	}
	return eg
}

func (n *Node) dropLocked(pk *Packet, env *penv, reason string) egress {
	atomic.AddUint64(&n.hot.stats.Dropped, 1)
	if env.trace != nil {
		env.step(TraceStep{Kind: StepEnd, Node: n.name, Verdict: "DROP", Packet: pk.String(), Detail: reason})
	}
	return dropped(pk, reason)
}

// builtin steps of a hook, at netfilter's priorities.
const (
	stepConntrack = iota
	stepNAT
	stepConfirm
)

type builtin struct {
	prio int
	kind int
}

var hookBuiltins = [netfilter.NumHooks][]builtin{
	netfilter.Prerouting:  {{netfilter.PriorityConntrack, stepConntrack}, {netfilter.PriorityNATDst, stepNAT}},
	netfilter.Input:       {{netfilter.PriorityNATSrc, stepNAT}, {1 << 30, stepConfirm}},
	netfilter.Forward:     nil,
	netfilter.Output:      {{netfilter.PriorityConntrack, stepConntrack}, {netfilter.PriorityNATDst, stepNAT}},
	netfilter.Postrouting: {{netfilter.PriorityNATSrc, stepNAT}, {1 << 30, stepConfirm}},
}

// runHookLocked runs a hook's handlers and built-in steps in priority order. When the
// packet's way ends at the hook (anything but hookContinue and hookReroute), out holds
// how.
func (n *Node) runHookLocked(h netfilter.Hook, pk *Packet, env *penv, out *egress) hookResult {
	if n.bare[h] { // no handlers but NAT handlers: the built-in steps of hookBuiltins
		switch h {
		case netfilter.Prerouting, netfilter.Output:
			n.conntrackLocked(pk, env)
			return n.natStepLocked(h, pk, env, out)
		case netfilter.Input, netfilter.Postrouting:
			if r := n.natStepLocked(h, pk, env, out); r != hookContinue {
				return r
			}
			return n.confirmLocked(pk, env, out)
		}
		return hookContinue
	}
	plan := n.plans[h] // the handlers and built-in steps in order (planLocked)
	for i := range plan {
		st := &plan[i]
		var r hookResult
		switch {
		case st.spec == nil:
			r = n.builtinLocked(h, st.builtin, pk, env, out)
		case st.idle != nil && env.trace == nil && st.idle.Idle(pk):
			// Handle would return Continue and change nothing (IdleHandler).
		default:
			r = n.callLocked(h, st.spec, pk, env, out)
		}
		if r != hookContinue {
			return r
		}
	}
	return hookContinue
}

func (n *Node) builtinLocked(h netfilter.Hook, kind int, pk *Packet, env *penv, out *egress) hookResult {
	switch kind {
	case stepConntrack:
		n.conntrackLocked(pk, env)
	case stepNAT:
		return n.natStepLocked(h, pk, env, out)
	case stepConfirm:
		return n.confirmLocked(pk, env, out)
	}
	return hookContinue
}

// context returns the handler context; the node reuses one (handlers must not keep it).
// It sets every field one by one: storing a Context literal into the node copies it
// with the GC's bulk write barrier whenever a collection marks (3.5 % of a probe).
func (n *Node) context(h netfilter.Hook, name string, env *penv) *Context {
	c := &n.hctx
	c.node, c.hook, c.now, c.chooser = n, h, env.now(n), env.ch
	c.trace, c.dryRun, c.handler = env.trace, env.dry, name
	return c
}

// callLocked calls one handler and acts on its verdict.
func (n *Node) callLocked(h netfilter.Hook, spec *HandlerSpec, pk *Packet, env *penv, out *egress) hookResult {
	var steps int
	if env.trace != nil {
		steps = env.trace.Len()
	}
	v := spec.Handler.Handle(n.context(h, spec.Name, env), pk)
	if env.trace != nil {
		n.traceVerdict(env, h, spec.Name, v, steps)
	}
	switch v.Kind {
	case Continue:
		return hookContinue
	case Drop:
		*out = n.dropLocked(pk, env, fmt.Sprintf("dropped by %s at %s%s", spec.Name, h, reasonSuffix(v.Reason)))
		return hookDrop
	case Reject:
		*out = n.rejectLocked(pk, v.Reject, env, fmt.Sprintf("rejected (%s) by %s at %s%s", v.Reject, spec.Name, h, reasonSuffix(v.Reason)))
		return hookReject
	case Reroute:
		if h == netfilter.Postrouting {
			*out = n.dropLocked(pk, env, spec.Name+" returned REROUTE at POSTROUTING, where routing is over")
			return hookDrop
		}
		return hookReroute
	case Stolen:
		if env.trace != nil {
			env.step(TraceStep{Kind: StepEnd, Node: n.name, Verdict: "STOLEN", Detail: "taken by " + spec.Name})
		}
		*out = egress{kind: egStolen, pk: pk}
		return hookStolen
	case NAT:
		panic(fmt.Sprintf("netsim: handler %q returned a NAT verdict but is not registered as a NAT handler", spec.Name))
	}
	panic(fmt.Sprintf("netsim: handler %q returned unknown verdict %d", spec.Name, v.Kind))
}

// traceVerdict records a handler's verdict: every verdict but a plain CONTINUE, and a
// plain CONTINUE too when the handler left no step of its own (rules, notes) since the
// trace had steps steps, so that every handler a packet met shows in the trace.
//
//go:noinline
func (n *Node) traceVerdict(env *penv, h netfilter.Hook, name string, v Verdict, steps int) {
	if v.Kind == Continue && v.Reason == "" && env.trace.Len() != steps {
		return
	}
	env.step(TraceStep{Kind: StepHandler, Node: n.name, Hook: h.String(), Handler: name, Verdict: verdictString(v), Detail: v.Reason})
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return ": " + r
}

func verdictString(v Verdict) string {
	switch v.Kind {
	case Reject:
		return "REJECT " + v.Reject.String()
	case NAT:
		return v.NAT.String()
	}
	return v.Kind.String()
}

// conntrackLocked is the conntrack hook (PREROUTING and OUTPUT at -200).
func (n *Node) conntrackLocked(pk *Packet, env *penv) {
	if pk.Conn != nil || pk.notrack {
		// Already tracked (looped back, or a reply the node generated), or NOTRACK.
		if pk.notrack {
			pk.CtState = netfilter.CtUntracked
		}
		return
	}
	r := n.ct.inLocked(pk, env.now(n))
	pk.Conn, pk.CtReply, pk.CtState, pk.ctCreated = r.conn, r.reply, r.state, r.isNew
	if r.state == netfilter.CtInvalid {
		n.ct.stats.Invalid++
	}
	if env.trace != nil {
		n.traceConntrack(env, r)
	}
}

//go:noinline
func (n *Node) traceConntrack(env *penv, r ctResult) {
	s := TraceStep{Kind: StepConntrack, Node: n.name, Verdict: r.state.String()}
	switch {
	case r.conn == nil:
		s.Detail = "no entry (invalid or untracked)"
	case r.isNew:
		s.Detail = "new entry " + r.conn.Orig.String()
	default:
		dir := "original"
		if r.reply {
			dir = "reply"
		}
		s.Detail = fmt.Sprintf("entry #%d (%s direction): %s", r.conn.ID, dir, r.conn.String())
	}
	env.step(s)
}

// confirmLocked inserts a new connection into the table (end of INPUT and POSTROUTING),
// resolving an insert clash as the node's kernel does (Conntrack.confirmKernelLocked).
// A packet sent with others in an interleaving (Node.SendTogether) may wait here for
// its turn.
func (n *Node) confirmLocked(pk *Packet, env *penv, out *egress) hookResult {
	c := pk.Conn
	if c == nil || !pk.ctCreated || c.Has(netfilter.StatusConfirmed) {
		return hookContinue
	}
	if env.dry {
		return hookContinue
	}
	if env.gate != nil {
		env.gate.wait(n)
	}
	res, other := n.ct.confirmKernelLocked(c, env.now(n), n.settings.Kernel)
	switch res {
	case ctInsertFailed:
		*out = n.dropLocked(pk, env, "conntrack insert clash: another entry holds "+clashTuple(c, other).String())
		return hookDrop
	case ctMerged:
		pk.Conn = other
	}
	if res != ctInserted && env.trace != nil {
		n.traceClash(env, res, c, other)
	}
	pk.ctCreated = false
	return hookContinue
}

// clashTuple is the tuple of c that other holds.
func clashTuple(c, other *Conn) netfilter.Tuple {
	if other != nil && (other.Orig == c.Orig || other.Reply == c.Orig) {
		return c.Orig
	}
	return c.Reply
}

// traceClash records an insert clash the kernel resolved.
//
//go:noinline
func (n *Node) traceClash(env *penv, res ctInsert, c, other *Conn) {
	s := TraceStep{Kind: StepConntrack, Node: n.name, Verdict: "CLASH"}
	switch res {
	case ctMerged:
		s.Detail = fmt.Sprintf("insert clash resolved (kernel %s): the packet joins entry #%d with the same NAT result", n.settings.Kernel, other.ID)
	case ctClashInserted:
		s.Detail = fmt.Sprintf("insert clash resolved (kernel %s): entry #%d inserted by its reply tuple %s only, for 1 s", n.settings.Kernel, c.ID, c.Reply)
	}
	env.step(s)
}

// natStepLocked is the NAT hook: for a connection's first packet it runs the NAT
// handlers and records the binding (or a null binding); then it applies the binding.
func (n *Node) natStepLocked(h netfilter.Hook, pk *Packet, env *penv, out *egress) hookResult {
	c := pk.Conn
	if c == nil {
		return hookContinue
	}
	dstManip := h == netfilter.Prerouting || h == netfilter.Output
	if pk.CtState == netfilter.CtRelated {
		n.natICMPErrorLocked(pk, dstManip, env)
		return hookContinue
	}
	done := netfilter.StatusSrcNATDone
	if dstManip {
		done = netfilter.StatusDstNATDone
	}
	if !c.Has(done) && !pk.CtReply {
		if r := n.natFirstLocked(h, c, pk, env, out); r != hookContinue {
			return r
		}
		c.Status |= done
	}
	n.applyNATLocked(pk, dstManip, env)
	return hookContinue
}

// natFirstLocked runs the NAT handlers for the first packet of a connection (per kind of
// binding) and records the binding they ask for.
//
//go:noinline
func (n *Node) natFirstLocked(h netfilter.Hook, c *Conn, pk *Packet, env *penv, out *egress) hookResult {
	{
		for _, he := range n.hooks[h] {
			if !he.spec.NAT {
				continue
			}
			var steps int
			if env.trace != nil {
				steps = env.trace.Len()
			}
			v := he.spec.Handler.Handle(n.context(h, he.spec.Name, env), pk)
			if env.trace != nil {
				n.traceVerdict(env, h, he.spec.Name, v, steps)
			}
			switch v.Kind {
			case Continue:
				continue
			case Drop:
				*out = n.dropLocked(pk, env, fmt.Sprintf("dropped by %s at %s%s", he.spec.Name, h, reasonSuffix(v.Reason)))
				return hookDrop
			case Reject:
				*out = n.rejectLocked(pk, v.Reject, env, fmt.Sprintf("rejected (%s) by %s at %s%s", v.Reject, he.spec.Name, h, reasonSuffix(v.Reason)))
				return hookReject
			case NAT:
				if err := n.bindLocked(h, c, pk, v.NAT, env); err != "" {
					*out = n.dropLocked(pk, env, err)
					return hookDrop
				}
			case Stolen:
				*out = egress{kind: egStolen, pk: pk}
				return hookStolen
			default:
				panic(fmt.Sprintf("netsim: NAT handler %q returned %s", he.spec.Name, v.Kind))
			}
			break
		}
	}
	return hookContinue
}

// bindLocked records a NAT binding on c for its first packet pk. It returns a drop
// reason when the binding cannot be made.
func (n *Node) bindLocked(h netfilter.Hook, c *Conn, pk *Packet, a NATAction, env *penv) string {
	dstManip := h == netfilter.Prerouting || h == netfilter.Output
	switch a.Kind {
	case netfilter.DNAT, netfilter.Redirect:
		if !dstManip {
			panic(fmt.Sprintf("netsim: %s at %s: DNAT and REDIRECT are only valid in PREROUTING and OUTPUT", a.Kind, h))
		}
		addr := a.Addr
		if a.Kind == netfilter.Redirect {
			var ok bool
			addr, ok = n.redirectAddrLocked(h, pk)
			if !ok {
				return "REDIRECT: the input interface has no address"
			}
		}
		if !addr.IsValid() {
			addr = pk.Dst
		}
		if addr.Is4() != pk.Dst.Is4() {
			return fmt.Sprintf("%s to %s: wrong address family", a.Kind, addr)
		}
		port := pk.DstPort
		if a.PortMin != 0 && pk.hasPorts() && !pk.isICMPEcho() {
			port = a.PortMin
			if a.PortMax > a.PortMin {
				port = n.pickPortLocked(c, netfilter.Tuple{Proto: c.Orig.Proto, Src: addr, Dst: c.Reply.Dst, DstPort: c.Reply.DstPort}, true, a.PortMin, a.PortMax, a.Random || a.RandomFully)
			}
		}
		c.Reply.Src, c.Reply.SrcPort = addr, port
		c.Status |= netfilter.StatusDstNAT
	case netfilter.SNAT, netfilter.Masquerade:
		if dstManip {
			panic(fmt.Sprintf("netsim: %s at %s: SNAT and MASQUERADE are only valid in INPUT and POSTROUTING", a.Kind, h))
		}
		if a.Kind == netfilter.Masquerade && h != netfilter.Postrouting {
			panic("netsim: MASQUERADE is only valid in POSTROUTING")
		}
		addr := a.Addr
		if a.Kind == netfilter.Masquerade {
			out := n.ifaces[pk.OutIface]
			if out == nil {
				return "MASQUERADE: no output interface"
			}
			var ok bool
			addr, ok = out.Primary(pk.Src)
			if !ok {
				return "MASQUERADE: " + out.Name + " has no address of the packet's family"
			}
		}
		if !addr.IsValid() {
			addr = pk.Src
		}
		if addr.Is4() != pk.Src.Is4() {
			return fmt.Sprintf("%s to %s: wrong address family", a.Kind, addr)
		}
		port := c.Orig.SrcPort
		if pk.hasPorts() && !pk.isICMPEcho() {
			lo, hi := a.PortMin, a.PortMax
			if hi < lo {
				hi = lo
			}
			var ok bool
			port, ok = n.snatPortLocked(c, addr, lo, hi, a.Random || a.RandomFully)
			if !ok {
				return "SNAT: no free source port"
			}
		}
		c.Reply.Dst, c.Reply.DstPort = addr, port
		c.Status |= netfilter.StatusSrcNAT
	default:
		panic(fmt.Sprintf("netsim: unknown NAT kind %d", a.Kind))
	}
	if env.trace != nil {
		env.step(TraceStep{Kind: StepNAT, Node: n.name, Hook: h.String(), Verdict: a.Kind.String(), Detail: "new binding: replies expected as " + c.Reply.String()})
	}
	return ""
}

// redirectAddrLocked is REDIRECT's new destination: the primary address of the input
// interface, or loopback for locally generated packets.
func (n *Node) redirectAddrLocked(h netfilter.Hook, pk *Packet) (netip.Addr, bool) {
	if h == netfilter.Output || pk.InIface == n.lo.Name {
		if pk.Dst.Is4() {
			return netip.MustParseAddr("127.0.0.1"), true
		}
		return netip.IPv6Loopback(), true
	}
	if i := n.ifaces[pk.InIface]; i != nil {
		return i.Primary(pk.Dst)
	}
	return netip.Addr{}, false
}

// snatPortLocked chooses the source port for SNAT/MASQUERADE as the kernel's
// nf_nat_l4proto_unique_tuple does: keep the original port when the resulting tuple is
// unique (and no randomisation was asked for), else search from a random offset.
func (n *Node) snatPortLocked(c *Conn, addr netip.Addr, lo, hi uint16, random bool) (uint16, bool) {
	orig := c.Orig.SrcPort
	reply := netfilter.Tuple{Proto: c.Orig.Proto, Src: c.Reply.Src, SrcPort: c.Reply.SrcPort, Dst: addr}
	inRange := lo == 0 || orig >= lo && orig <= hi
	if !random && inRange {
		reply.DstPort = orig
		if !n.ct.tupleTakenLocked(reply, c) {
			return orig, true
		}
	}
	if lo == 0 {
		switch {
		case orig < 512:
			lo, hi = 1, 511
		case orig < 1024:
			lo, hi = 600, 1023
		default:
			lo, hi = 1024, 65535
		}
	}
	p := n.pickPortLocked(c, reply, false, lo, hi, true)
	if p == 0 {
		return 0, false
	}
	return p, true
}

// pickPortLocked searches [lo, hi] for a port that makes tuple (with the port in the
// destination field for SNAT, source field for DNAT) unique, from a random offset when
// random is set, trying at most 128 ports and then halving rounds, as the kernel does.
func (n *Node) pickPortLocked(c *Conn, tu netfilter.Tuple, dnat bool, lo, hi uint16, random bool) uint16 {
	size := uint32(hi) - uint32(lo) + 1
	var off uint32
	if random {
		off = uint32(n.rng.Uint32() & 0xffff)
	}
	attempts := size
	if attempts > 128 {
		attempts = 128
	}
	for {
		for i := uint32(0); i < attempts; i++ {
			port := uint16(uint32(lo) + (off+i)%size)
			if dnat {
				tu.SrcPort = port
			} else {
				tu.DstPort = port
			}
			if !n.ct.tupleTakenLocked(tu, c) {
				return port
			}
		}
		attempts /= 2
		if attempts < 16 {
			return 0
		}
		off = uint32(n.rng.Uint32() & 0xffff)
	}
}

// applyNATLocked rewrites a packet according to its connection's bindings (the kernel's
// nf_nat_packet): at a DST hook the destination, at a SRC hook the source, in whichever
// direction the packet travels.
func (n *Node) applyNATLocked(pk *Packet, dstManip bool, env *penv) {
	c := pk.Conn
	var target netip.AddrPort
	switch {
	case dstManip && !pk.CtReply && c.Has(netfilter.StatusDstNAT):
		target = netip.AddrPortFrom(c.Reply.Src, c.Reply.SrcPort)
	case dstManip && pk.CtReply && c.Has(netfilter.StatusSrcNAT):
		target = netip.AddrPortFrom(c.Orig.Src, c.Orig.SrcPort)
	case !dstManip && !pk.CtReply && c.Has(netfilter.StatusSrcNAT):
		target = netip.AddrPortFrom(c.Reply.Dst, c.Reply.DstPort)
	case !dstManip && pk.CtReply && c.Has(netfilter.StatusDstNAT):
		target = netip.AddrPortFrom(c.Orig.Dst, c.Orig.DstPort)
	default:
		return
	}
	if dstManip {
		if pk.Dst == target.Addr() && pk.DstPort == target.Port() {
			return
		}
	} else if pk.Src == target.Addr() && pk.SrcPort == target.Port() {
		return
	}
	if env.trace != nil {
		n.traceNAT(env, pk, dstManip, target)
		return
	}
	if dstManip {
		pk.SetDst(target.Addr(), target.Port())
	} else {
		pk.SetSrc(target.Addr(), target.Port())
	}
}

// traceNAT rewrites a traced packet as applyNATLocked does, and records it.
//
//go:noinline
func (n *Node) traceNAT(env *penv, pk *Packet, dstManip bool, target netip.AddrPort) {
	before := pk.String()
	if dstManip {
		pk.SetDst(target.Addr(), target.Port())
	} else {
		pk.SetSrc(target.Addr(), target.Port())
	}
	kind := "SNAT"
	if dstManip {
		kind = "DNAT"
	}
	if pk.CtReply {
		kind = "un-" + map[bool]string{true: "SNAT", false: "DNAT"}[dstManip]
	}
	env.step(TraceStep{Kind: StepNAT, Node: n.name, Verdict: kind, Detail: fmt.Sprintf("entry #%d: %s => %s", pk.Conn.ID, before, pk.String())})
}

// natICMPErrorLocked translates an ICMP error related to a NATed connection: the outer
// header as a packet of the error's direction, the quoted packet the opposite way (the
// kernel's nf_nat_icmp_reply_translation).
func (n *Node) natICMPErrorLocked(pk *Packet, dstManip bool, env *penv) {
	c := pk.Conn
	in := pk.Inner
	if in == nil {
		return
	}
	var target netip.AddrPort
	ok := true
	switch {
	case dstManip && !pk.CtReply && c.Has(netfilter.StatusDstNAT):
		target = netip.AddrPortFrom(c.Reply.Src, c.Reply.SrcPort)
	case dstManip && pk.CtReply && c.Has(netfilter.StatusSrcNAT):
		target = netip.AddrPortFrom(c.Orig.Src, c.Orig.SrcPort)
	case !dstManip && !pk.CtReply && c.Has(netfilter.StatusSrcNAT):
		target = netip.AddrPortFrom(c.Reply.Dst, c.Reply.DstPort)
	case !dstManip && pk.CtReply && c.Has(netfilter.StatusDstNAT):
		target = netip.AddrPortFrom(c.Orig.Dst, c.Orig.DstPort)
	default:
		ok = false
	}
	if !ok {
		return
	}
	before := pk.String()
	if dstManip {
		if in.Src != target.Addr() || in.SrcPort != target.Port() {
			in.SetSrc(target.Addr(), target.Port())
		}
		if pk.Dst != target.Addr() {
			pk.SetDst(target.Addr(), 0)
		}
	} else {
		if in.Dst != target.Addr() || in.DstPort != target.Port() {
			in.SetDst(target.Addr(), target.Port())
		}
		if pk.Src != target.Addr() {
			pk.SetSrc(target.Addr(), 0)
		}
	}
	pk.fixICMPChecksum()
	if env.trace != nil {
		env.step(TraceStep{Kind: StepNAT, Node: n.name, Verdict: "ICMP error translation", Detail: fmt.Sprintf("entry #%d: %s => %s", c.ID, before, pk.String())})
	}
}

// rejectLocked drops pk and builds what the REJECT target sends back.
func (n *Node) rejectLocked(pk *Packet, with netfilter.RejectWith, env *penv, reason string) egress {
	atomic.AddUint64(&n.hot.stats.Rejected, 1)
	eg := dropped(pk, reason)
	eg.reject = true
	var r *Packet
	if with == netfilter.RejectTCPReset && pk.Proto == netfilter.ProtoTCP {
		r = n.tcpResetLocked(pk)
	} else {
		typ, code := with.ICMPTypeCode(pk.IPv6)
		r = n.icmpErrorLocked(pk, typ, code)
	}
	if env.trace != nil {
		env.step(TraceStep{Kind: StepEnd, Node: n.name, Verdict: "REJECT", Packet: pk.String(), Detail: reason})
	}
	if r != nil {
		eg.replies = append(eg.replies, r)
	}
	return eg
}

// tcpResetLocked builds the RST the kernel's nf_send_reset sends for pk, attached to pk's
// connection so that NAT is undone on the way back.
func (n *Node) tcpResetLocked(pk *Packet) *Packet {
	if pk.TCPFlags&netfilter.TCPRst != 0 || pk.l4off == 0 {
		return nil
	}
	seq, ack, _ := pk.TCPSeq()
	seg := TCPSegment{Src: netip.AddrPortFrom(pk.Dst, pk.DstPort), Dst: netip.AddrPortFrom(pk.Src, pk.SrcPort), WindowScale: -1}
	if pk.TCPFlags&netfilter.TCPAck != 0 {
		seg.Flags, seg.Seq = netfilter.TCPRst, ack
	} else {
		seg.Flags, seg.Ack = netfilter.TCPRst|netfilter.TCPAck, seq+pk.tcpSeqLen()
	}
	r, err := ParsePacket(BuildTCP(seg))
	if err != nil {
		return nil
	}
	if pk.Conn != nil {
		r.Conn, r.CtReply, r.CtState = pk.Conn, !pk.CtReply, netfilter.CtEstablished
	}
	return r
}

// icmpErrorLocked builds an ICMP error about pk from this node, related to pk's
// connection. The source is pk's destination when that is local, else the node's address
// on the interface toward pk's source (as icmp_send chooses).
func (n *Node) icmpErrorLocked(pk *Packet, typ, code uint8) *Packet {
	if pk.IsICMPError() {
		return nil // never an error about an error
	}
	src := pk.Dst
	if !n.IsLocalAddr(pk.Dst) {
		back := n.routeLocked(pk.Src)
		a, ok := netip.Addr{}, false
		if back.iface != nil {
			a, ok = back.iface.Primary(pk.Src)
		}
		if !ok {
			a, ok = n.uplink.Primary(pk.Src)
		}
		if !ok {
			return nil
		}
		src = a
	}
	if pk.IPv6 && typ == 3 {
		typ = 1
	}
	b := BuildICMPError(src, pk.Data, typ, code)
	if b == nil {
		return nil
	}
	r, err := ParsePacket(b)
	if err != nil {
		return nil
	}
	if pk.Conn != nil {
		r.Conn, r.CtReply, r.CtState = pk.Conn, !pk.CtReply, netfilter.CtRelated
	}
	return r
}

// execute carries out an egress decision for real traffic.
//
// t is the virtual time the node read for the packet (zero if it read none): a packet that
// goes on over the cluster network into another node at once arrives at that time.
func (n *Node) execute(eg egress, tr *Trace, t time.Time) {
	for _, r := range eg.replies {
		n.execute(n.output(r, n.packetEnv(tr)), tr, time.Time{})
	}
	if tr != nil {
		n.traceExecute(eg, tr)
	}
	switch eg.kind {
	case egLocal:
		n.deliverHost(eg.pk)
	case egPod:
		n.capture(n.bridge.Name, eg.pk.Data)
		if eg.pk.gro != nil && eg.port.pod != nil && eg.port.link.pass(1) {
			eg.port.pod.receiveBatched(eg.pk.frame(), eg.pk.gro) // see gro.go
			return
		}
		eg.port.link.sendBack(n.cluster, eg.pk.frame(), eg.port.toPod)
	case egUplink:
		n.capture(n.uplink.Name, eg.pk.Data)
		n.cluster.fabric.fromNode(n, eg.pk, tr, t)
	case egLoopback:
		n.capture(n.lo.Name, eg.pk.Data)
		n.execute(n.ingress(eg.pk, n.lo, nil, n.packetEnv(tr)), tr, time.Time{})
	}
}

// traceExecute records where a traced live packet goes at the end of a node pass.
//
//go:noinline
func (n *Node) traceExecute(eg egress, tr *Trace) {
	switch eg.kind {
	case egLocal:
		tr.add(TraceStep{Kind: StepEnd, Node: n.name, Verdict: "DELIVERED", Detail: "node " + n.name + "'s host stack", Packet: eg.pk.String()})
	case egPod:
		tr.add(TraceStep{Kind: StepEnd, Node: n.name, Verdict: "DELIVERED", Detail: "pod " + eg.port.pod.key() + " via " + eg.port.name, Packet: eg.pk.String()})
	case egUplink:
		d := n.cluster.fabric.lookup(eg.pk.Dst)
		tr.add(TraceStep{Kind: StepLink, Node: n.name, Detail: "cluster network: " + eg.pk.Dst.String() + " -> " + d.String(), Packet: eg.pk.String()})
	}
}

// deliverHost hands a locally delivered packet to the node's host stack.
func (n *Node) deliverHost(pk *Packet) {
	if n.host == nil {
		return
	}
	if pk.Dst.IsLoopback() && n.host.lo != nil {
		n.host.lo.inject(pk.frame())
		return
	}
	n.host.link.inject(pk.frame())
}
