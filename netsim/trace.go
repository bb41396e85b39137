package netsim

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// Kinds of trace steps.
const (
	StepHook      = "hook"      // a hook starts
	StepHandler   = "handler"   // a handler's verdict
	StepRule      = "rule"      // a rule evaluated by a rule-based handler (iptables emulator)
	StepConntrack = "conntrack" // a conntrack lookup: a new entry or which existing one
	StepNAT       = "nat"       // a NAT rewrite (a new binding or an existing one applied)
	StepRoute     = "route"     // the routing decision
	StepLink      = "link"      // the packet crossed a link (fabric, pod veth, external)
	StepFault     = "fault"     // a fault acted on the packet (loss, partition, node down)
	StepEnd       = "end"       // the packet's end: delivered, dropped, rejected
	StepNote      = "note"      // free text from a handler
)

// TraceStep is one step of a packet's way. Fields that do not apply are empty.
type TraceStep struct {
	Kind    string `json:"kind"`
	Node    string `json:"node,omitempty"`
	Hook    string `json:"hook,omitempty"`
	Handler string `json:"handler,omitempty"`

	// Rule-level detail (iptables emulator).
	Table   string `json:"table,omitempty"`
	Chain   string `json:"chain,omitempty"`
	Line    int    `json:"line,omitempty"`
	Rule    string `json:"rule,omitempty"`
	Matched *bool  `json:"matched,omitempty"`

	Verdict string `json:"verdict,omitempty"`
	Packet  string `json:"packet,omitempty"` // the packet as it is at this step
	Detail  string `json:"detail,omitempty"`

	// Decision is a handler's structured verdict beside its text (the NetworkPolicy
	// handler's cluster.PolicyTrace), for programs reading traces; netsim does not look at it.
	Decision any `json:"decision,omitempty"`
}

// Trace is the structured record of a packet's (or a probe's) way through the network.
type Trace struct {
	mu    sync.Mutex
	Steps []TraceStep `json:"steps"`
}

func (t *Trace) add(s TraceStep) {
	t.mu.Lock()
	t.Steps = append(t.Steps, s)
	t.mu.Unlock()
}

// String renders the trace as indented text, one step a line.
func (t *Trace) String() string {
	if t == nil {
		return ""
	}
	var b strings.Builder
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.Steps {
		b.WriteString(s.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// String renders one step.
func (s TraceStep) String() string {
	var b strings.Builder
	indent := "  "
	switch s.Kind {
	case StepHook:
		indent = ""
	case StepRule:
		indent = "      "
	}
	b.WriteString(indent)
	where := s.Node
	if s.Hook != "" && s.Kind != StepHook {
		where += " " + s.Hook
	}
	switch s.Kind {
	case StepHook:
		fmt.Fprintf(&b, "[%s] %s", s.Node, s.Hook)
		if s.Packet != "" {
			fmt.Fprintf(&b, "  %s", s.Packet)
		}
	case StepRule:
		m := "  "
		if s.Matched != nil && *s.Matched {
			m = "✓ "
		} else if s.Matched != nil {
			m = "✗ "
		}
		fmt.Fprintf(&b, "%s%s/%s", m, s.Table, s.Chain)
		if s.Line > 0 {
			fmt.Fprintf(&b, " line %d", s.Line)
		}
		if s.Rule != "" {
			fmt.Fprintf(&b, ": %s", s.Rule)
		}
		if s.Verdict != "" {
			fmt.Fprintf(&b, " => %s", s.Verdict)
		}
	default:
		fmt.Fprintf(&b, "%s", s.Kind)
		if s.Handler != "" {
			fmt.Fprintf(&b, " %s", s.Handler)
		}
		if s.Verdict != "" {
			fmt.Fprintf(&b, ": %s", s.Verdict)
		}
		if s.Detail != "" {
			fmt.Fprintf(&b, " (%s)", s.Detail)
		}
		if s.Packet != "" {
			fmt.Fprintf(&b, "  %s", s.Packet)
		}
		_ = where
	}
	return b.String()
}

// JSON renders the trace as JSON.
func (t *Trace) JSON() ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return json.MarshalIndent(struct {
		Steps []TraceStep `json:"steps"`
	}{t.Steps}, "", "  ")
}

// Len returns the number of steps.
func (t *Trace) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.Steps)
}

// Find returns the steps of the given kind.
func (t *Trace) Find(kind string) []TraceStep {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []TraceStep
	for _, s := range t.Steps {
		if s.Kind == kind {
			out = append(out, s)
		}
	}
	return out
}

// Snapshot returns a copy of the trace's steps as they are now (a trace still being
// written, of a packet on its way, can be read this way).
func (t *Trace) Snapshot() []TraceStep {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]TraceStep(nil), t.Steps...)
}
