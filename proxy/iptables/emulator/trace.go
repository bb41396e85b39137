package emulator

import (
	"encoding/json"
	"fmt"
	"strings"
)

// StepKind is the kind of a trace step.
type StepKind string

// Step kinds.
const (
	StepHook    StepKind = "hook"    // a walk enters a hook
	StepTable   StepKind = "table"   // a table's built-in chain starts
	StepRule    StepKind = "rule"    // a rule was evaluated (matched or not)
	StepPolicy  StepKind = "policy"  // a built-in chain's policy applied
	StepReturn  StepKind = "return"  // a user chain ended (back to the caller)
	StepIndex   StepKind = "index"   // an indexed chain: rules that cannot match were skipped
	StepNote    StepKind = "note"    // anything else (conntrack, routing)
	StepVerdict StepKind = "verdict" // the end of a walk
)

// Step is one step of a trace. Rule steps name the hook, table, chain, the rule's line
// in the text it was loaded from, the rule as iptables-save prints it, whether it
// matched, and what its target did.
type Step struct {
	Kind    StepKind `json:"kind"`
	Hook    string   `json:"hook,omitempty"`
	Table   string   `json:"table,omitempty"`
	Chain   string   `json:"chain,omitempty"`
	Line    int      `json:"line,omitempty"`
	Rule    string   `json:"rule,omitempty"`
	Matched *bool    `json:"matched,omitempty"`
	Verdict string   `json:"verdict,omitempty"`
	Detail  string   `json:"detail,omitempty"`
	Packet  string   `json:"packet,omitempty"`
	// Depth is the call depth within the table (0 for the built-in chain).
	Depth int `json:"depth"`
}

// Trace records the steps of an evaluation. A nil *Trace records nothing.
type Trace struct {
	Steps []Step `json:"steps"`
}

func (t *Trace) add(s Step, _ *evalCtx) int {
	t.Steps = append(t.Steps, s)
	return len(t.Steps) - 1
}

// String renders the trace as text, one step a line.
func (t *Trace) String() string {
	if t == nil {
		return ""
	}
	var b strings.Builder
	for _, s := range t.Steps {
		b.WriteString(s.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// JSON renders the trace as JSON.
func (t *Trace) JSON() ([]byte, error) { return json.MarshalIndent(t, "", "  ") }

// String renders one step.
func (s Step) String() string {
	ind := strings.Repeat("  ", s.Depth)
	switch s.Kind {
	case StepHook:
		return fmt.Sprintf("%s %s", s.Hook, s.Packet)
	case StepTable:
		return fmt.Sprintf("  %s %s", s.Table, s.Chain)
	case StepRule:
		mark := "  "
		if s.Matched != nil && *s.Matched {
			mark = "✓ "
		} else if s.Matched != nil {
			mark = "✗ "
		}
		out := fmt.Sprintf("    %s%s%s", ind, mark, s.Rule)
		if s.Line > 0 {
			out = fmt.Sprintf("    %s%sline %d: %s", ind, mark, s.Line, s.Rule)
		}
		if s.Detail != "" {
			out += "  [" + s.Detail + "]"
		}
		if s.Verdict != "" {
			out += "  => " + s.Verdict
		}
		return out
	case StepPolicy:
		return fmt.Sprintf("    %s%s policy %s", ind, s.Chain, s.Verdict)
	case StepReturn:
		return fmt.Sprintf("    %s↩ %s: %s", ind, s.Chain, s.Detail)
	case StepIndex:
		return fmt.Sprintf("    %s… %s: %s", ind, s.Chain, s.Detail)
	case StepVerdict:
		return fmt.Sprintf("=> %s %s", s.Verdict, s.Detail)
	}
	where := strings.TrimSpace(s.Hook + " " + s.Table)
	if where != "" {
		return fmt.Sprintf("  %s: %s", where, s.Detail)
	}
	return "  " + s.Detail
}
