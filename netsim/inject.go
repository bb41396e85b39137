package netsim

import (
	"fmt"
	"net/netip"

	"github.com/clusterlab/clusterlab/netfilter"
)

// Crafted packets: segments and ICMP messages a stack would not send on its own (an
// out-of-window ACK, a RST with a chosen sequence number, an ICMP error about a
// connection), injected through the datapath with what became of them: where they
// ended, the conntrack state every node gave them and the rule or handler that dropped
// or rejected them.

// InjectResult is what became of an injected packet.
type InjectResult struct {
	ProbeResult
	// States are the conntrack states the packet got, one for every conntrack lookup
	// on its way (a node's PREROUTING or OUTPUT), in order.
	States []NodeCtState
	// Decision is the trace step of the rule (StepRule) or handler (StepHandler) that
	// dropped or rejected the packet; nil when none did.
	Decision *TraceStep
	// Delivered and Answers (InjectAnswered only): the packet was handed to the stack
	// it reached, and the packets that stack sent back to its source in answer (as
	// Packet.String renders them; none: it answered nothing).
	Delivered bool
	Answers   []string
}

// NodeCtState is the conntrack state a node's lookup gave a packet.
type NodeCtState struct {
	Node  string
	State netfilter.CtState
}

// StateAt returns the state the packet got at the node's first lookup, and whether
// that node looked it up at all.
func (r *InjectResult) StateAt(node string) (netfilter.CtState, bool) {
	for _, s := range r.States {
		if s.Node == node {
			return s.State, true
		}
	}
	return 0, false
}

// InjectCrafted sends a raw IP packet (BuildTCP, BuildICMPEcho, BuildICMPError, ...)
// from a place (see Probe.From) through the datapath, traced, and reports where it
// ended (and the answer that came back to the place, for a RST or an ICMP error), the
// conntrack states it got and the decision that dropped or rejected it.
func (c *Network) InjectCrafted(from string, data []byte) (InjectResult, error) {
	out, _, err := c.injectCrafted(from, data)
	return out, err
}

// InjectAnswered is InjectCrafted, and then, when the packet reached a stack (a pod's,
// a node's host stack or an external host's), it hands the packet, as it arrived, to
// that stack and reports what the stack sent back to the packet's source: a TCP stack's
// challenge ACK or RST, an ICMP error, or nothing (Answers empty), once the simulation
// is quiet (Quiesce). The stack's answers go on through the datapath as live traffic;
// Answers are the packets as the stack sent them.
func (c *Network) InjectAnswered(from string, data []byte) (InjectResult, error) {
	out, end, err := c.injectCrafted(from, data)
	if err != nil || end.kind != endDelivered {
		return out, err
	}
	pk := end.pk
	ft := c.TraceFlows(FlowFilter{Src: pk.Dst, Addr: pk.Src})
	defer ft.Stop()
	f := plainFrame(append([]byte(nil), pk.Data...))
	switch at := end.at; {
	case at.pod != nil && !at.pod.hostNetwork:
		at.pod.receive(f)
	case at.pod != nil:
		at.pod.node.deliverHost(pk)
	case at.node != nil:
		at.node.deliverHost(pk)
	case at.ext != nil:
		at.ext.receive(f)
	}
	c.Quiesce()
	out.Delivered = true
	for _, tr := range ft.Traces() {
		if len(tr.Steps) > 0 {
			out.Answers = append(out.Answers, tr.Steps[0].Packet)
		}
	}
	return out, nil
}

// injectCrafted is InjectCrafted, also returning where the walk ended.
func (c *Network) injectCrafted(from string, data []byte) (InjectResult, walkEnd, error) {
	r, end, err := c.inject(from, data, true)
	if err != nil {
		return InjectResult{}, end, err
	}
	out := InjectResult{ProbeResult: r}
	if r.Trace == nil {
		return out, end, nil
	}
	for _, s := range r.Trace.Steps {
		switch s.Kind {
		case StepConntrack:
			out.States = append(out.States, NodeCtState{Node: s.Node, State: parseCtState(s.Verdict)})
		case StepRule:
			// The rule that decided, rather than its handler's verdict step after it.
			if s.Matched != nil && *s.Matched && isDropVerdict(s.Verdict) && (out.Decision == nil || out.Decision.Kind == StepHandler) {
				d := s
				out.Decision = &d
			}
		case StepHandler:
			if isDropVerdict(s.Verdict) && out.Decision == nil {
				d := s
				out.Decision = &d
			}
		}
	}
	return out, end, nil
}

// isDropVerdict reports whether a trace verdict ends the packet (DROP, REJECT ...).
func isDropVerdict(v string) bool {
	return len(v) >= 4 && (v[:4] == "DROP" || (len(v) >= 6 && v[:6] == "REJECT"))
}

// parseCtState is the inverse of CtState.String for the trace's conntrack steps.
func parseCtState(s string) netfilter.CtState {
	for st := netfilter.CtNew; st <= netfilter.CtUntracked; st++ {
		if st.String() == s {
			return st
		}
	}
	return netfilter.CtUntracked
}

// ConnSegment is a TCP segment on an existing connection's tuple, from either side:
// the original direction's client (reply false) sends from conn.Orig's source to its
// destination, the server (reply true) from conn.Reply's source to its destination,
// as the node whose conntrack holds conn sees them. Flags, sequence and
// acknowledgement numbers and window are the caller's.
func ConnSegment(conn Conn, reply bool, flags uint8, seq, ack uint32, window uint16) (TCPSegment, error) {
	t := conn.Orig
	if reply {
		t = conn.Reply
	}
	if t.Proto != netfilter.ProtoTCP {
		return TCPSegment{}, fmt.Errorf("connection %s is not TCP", conn.Orig)
	}
	return TCPSegment{Src: netip.AddrPortFrom(t.Src, t.SrcPort), Dst: netip.AddrPortFrom(t.Dst, t.DstPort),
		Flags: flags, Seq: seq, Ack: ack, Window: window, WindowScale: -1}, nil
}

// NextSeq is the sequence number the connection's side (reply false: the original
// direction's sender) is expected to send next, as conntrack's window tracking saw it
// (td_end): a segment with it is in the window, one far from it is not.
func (conn Conn) NextSeq(reply bool) uint32 {
	if reply {
		return conn.tcp[1].end
	}
	return conn.tcp[0].end
}
