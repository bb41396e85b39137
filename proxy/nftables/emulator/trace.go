package emulator

import (
	"fmt"
	"strings"
)

// Trace records the steps of an evaluation. A nil *Trace records nothing.
type Trace struct {
	Steps []Step `json:"steps"`
}

// Step kinds.
const (
	StepHook    = "hook"    // a walk enters a hook
	StepChain   = "chain"   // a base chain starts
	StepRule    = "rule"    // a rule was evaluated (matched or not)
	StepPolicy  = "policy"  // a base chain's policy applied
	StepNote    = "note"    // anything else (routing, conntrack, an assumption)
	StepVerdict = "verdict" // the end of a walk
)

// Step is one step of a trace: a rule (its family, table, chain, handle or line, text,
// whether it matched, what it did, the set or map element that matched) or a note.
type Step struct {
	Kind    string `json:"kind"`
	Hook    string `json:"hook,omitempty"`
	Family  string `json:"family,omitempty"`
	Table   string `json:"table,omitempty"`
	Chain   string `json:"chain,omitempty"`
	Handle  int    `json:"handle,omitempty"`
	Line    int    `json:"line,omitempty"`
	Rule    string `json:"rule,omitempty"`
	Matched bool   `json:"matched,omitempty"`
	Verdict string `json:"verdict,omitempty"`
	// Element is the set or map element that matched ("172.30.0.41 . tcp . 80").
	Element string `json:"element,omitempty"`
	Detail  string `json:"detail,omitempty"`
	Packet  string `json:"packet,omitempty"`
	// Depth is the call depth below the base chain.
	Depth int `json:"depth"`
}

func (t *Trace) add(s Step) int {
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

// String renders one step.
func (s Step) String() string {
	ind := strings.Repeat("  ", s.Depth)
	switch s.Kind {
	case StepHook:
		return fmt.Sprintf("%s %s", s.Hook, s.Packet)
	case StepChain:
		return fmt.Sprintf("  %s %s %s %s", s.Family, s.Table, s.Chain, s.Detail)
	case StepRule:
		mark := "✗ "
		if s.Matched {
			mark = "✓ "
		}
		where := fmt.Sprintf("line %d", s.Line)
		if s.Handle > 0 {
			where = fmt.Sprintf("handle %d", s.Handle)
		}
		out := fmt.Sprintf("    %s%s%s: %s", ind, mark, where, s.Rule)
		if s.Element != "" {
			out += "  [element " + s.Element + "]"
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
	case StepVerdict:
		return fmt.Sprintf("=> %s %s", s.Verdict, s.Detail)
	}
	return "  " + ind + s.Detail
}
