package netsim

import (
	"net/netip"
	"sync"
)

// FlowFilter selects the live packets Network.TraceFlows traces. Every set field must
// match, in either direction: Addr is the packet's source or destination address, Port
// its source or destination port (as tcpdump's "host A and port P").
type FlowFilter struct {
	Proto uint8      // 0: any protocol
	Addr  netip.Addr // zero: any address
	Port  uint16     // 0: any port
	// Src is the packet's source address (zero: any), in this direction only.
	Src netip.Addr
	// Limit is how many packets are traced at most (default 1000); later packets pass
	// untraced.
	Limit int
}

func (f FlowFilter) match(pk *Packet) bool {
	return (f.Proto == 0 || pk.Proto == f.Proto) &&
		(!f.Addr.IsValid() || pk.Src == f.Addr || pk.Dst == f.Addr) &&
		(f.Port == 0 || pk.hasPorts() && (pk.SrcPort == f.Port || pk.DstPort == f.Port)) &&
		(!f.Src.IsValid() || pk.Src == f.Src)
}

// FlowTracer collects the traces of live packets (real netstack traffic, not probes)
// that match its filter; see Network.TraceFlows.
type FlowTracer struct {
	c      *Network
	filter FlowFilter
	mu     sync.Mutex
	traces []*Trace
}

// TraceFlows starts tracing the live packets that match f: every packet a pod's, a
// node's or an external host's stack sends (and every packet arriving at a node
// untraced, e.g. through the cloud load balancer) is traced from the first node where it
// matches, through every node it crosses after, to its end, with the same steps as a
// probe's trace (hooks, handler verdicts, rules, conntrack, NAT, routes, links, end).
// A packet a node sends in answer (a REJECT's RST or ICMP error) shares the trace of the
// packet it answers. Tracing is off by default and costs one atomic load a packet while
// no tracer runs; Stop ends it.
func (c *Network) TraceFlows(f FlowFilter) *FlowTracer {
	if f.Limit <= 0 {
		f.Limit = 1000
	}
	ft := &FlowTracer{c: c, filter: f}
	c.flowMu.Lock()
	cur := c.flowTracers.Load()
	var next []*FlowTracer
	if cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, ft)
	c.flowTracers.Store(&next)
	c.flowMu.Unlock()
	return ft
}

// Stop ends the tracing; the traces collected so far stay.
func (ft *FlowTracer) Stop() {
	c := ft.c
	c.flowMu.Lock()
	defer c.flowMu.Unlock()
	cur := c.flowTracers.Load()
	if cur == nil {
		return
	}
	var next []*FlowTracer
	for _, t := range *cur {
		if t != ft {
			next = append(next, t)
		}
	}
	if len(next) == 0 {
		c.flowTracers.Store(nil)
		return
	}
	c.flowTracers.Store(&next)
}

// Traces returns copies of the traces collected so far, one a packet, in the order the
// packets were first seen. The trace of a packet still on its way ends where the packet
// was when Traces was called; a later call sees more.
func (ft *FlowTracer) Traces() []*Trace {
	ft.mu.Lock()
	live := append([]*Trace(nil), ft.traces...)
	ft.mu.Unlock()
	out := make([]*Trace, len(live))
	for i, tr := range live {
		tr.mu.Lock()
		out[i] = &Trace{Steps: append([]TraceStep(nil), tr.Steps...)}
		tr.mu.Unlock()
	}
	return out
}

// flowTrace returns a new trace for a live packet entering node n from where, if a
// running tracer wants it (nil otherwise). The first tracer whose filter matches takes it.
//
//go:noinline
func (c *Network) flowTrace(n *Node, pk *Packet, where string) *Trace {
	ts := c.flowTracers.Load()
	if ts == nil {
		return nil
	}
	for _, ft := range *ts {
		if !ft.filter.match(pk) {
			continue
		}
		ft.mu.Lock()
		if len(ft.traces) >= ft.filter.Limit {
			ft.mu.Unlock()
			continue
		}
		tr := &Trace{}
		ft.traces = append(ft.traces, tr)
		ft.mu.Unlock()
		tr.add(TraceStep{Kind: StepLink, Node: n.name, Detail: "live packet " + where, Packet: pk.String()})
		return tr
	}
	return nil
}
