package emulator

import (
	"fmt"
	"strings"

	"github.com/clusterlab/clusterlab/internal/walkpath"
)

// JSON renders the merged outcomes as a JSON array (the `clusterlab trace -o json`
// format, the same fields as the iptables walk's).
func (r *WalkResult) JSON() ([]byte, error) { return walkpath.JSON(r.Outcomes) }

// Text renders the walk: the packet, every step (a tree of branches when all branches
// were followed), and the outcomes with their probabilities.
func (r *WalkResult) Text() string {
	var b strings.Builder
	p := r.Input.Packet
	fmt.Fprintf(&b, "packet %s%s enters at %s%s\n", p.String(), walkpath.ICMPNote(p.Proto, p.ICMPType, p.ICMPCode), r.Start, ctNote(r.Input.Conntrack))
	if len(r.Paths) == 1 {
		writeSteps(&b, r.Paths[0].Trace.Steps, "")
		fmt.Fprintf(&b, "=> %s\n", r.Paths[0].summary())
	} else {
		pathTree.Write(&b, r.Paths, 0, 0, "")
	}
	b.WriteString("\noutcomes:\n")
	for i, o := range r.Outcomes {
		fmt.Fprintf(&b, "  %d. p=%.6f  %s\n", i+1, o.Probability, o.summary())
		for _, a := range o.Assumptions {
			word := "does not match"
			if a.Matched {
				word = "matches"
			}
			fmt.Fprintf(&b, "       assuming %s (line %d) %s\n", a.Match, a.Line, word)
		}
	}
	if r.Truncated {
		fmt.Fprintf(&b, "  (exploration stopped after %d paths)\n", len(r.Paths))
	}
	return b.String()
}

func (o *Outcome) summary() string {
	parts := []string{o.Verdict}
	if o.RejectWith != "" {
		parts = append(parts, "("+o.RejectWith+")")
	}
	if o.DNATDestination != nil {
		parts = append(parts, "dnat "+*o.DNATDestination)
	}
	if o.Masqueraded {
		s := "masqueraded"
		if o.SNATSource != nil {
			s += " to " + *o.SNATSource
		}
		parts = append(parts, s)
	}
	by := "by policy"
	if d := o.Decision; d != nil {
		if o.DecidedBy == "rule" {
			where := fmt.Sprintf("line %d", d.Line)
			if d.Handle > 0 {
				where = fmt.Sprintf("handle %d", d.Handle)
			}
			by = fmt.Sprintf("by %s %s %s", d.Table, d.Chain, where)
		} else {
			by = fmt.Sprintf("by %s %s policy %s", d.Table, d.Chain, d.Policy)
		}
	}
	parts = append(parts, by)
	if o.Paths > 1 {
		parts = append(parts, fmt.Sprintf("[%d paths]", o.Paths))
	}
	return strings.Join(parts, " ")
}

func writeSteps(b *strings.Builder, steps []Step, prefix string) {
	for _, s := range steps {
		if s.Kind == StepVerdict {
			continue
		}
		b.WriteString(prefix)
		b.WriteString(s.String())
		b.WriteByte('\n')
	}
}

// ctNote describes the conntrack state of a walk of a packet of an existing
// connection; empty for a first packet.
func ctNote(ct *Conntrack) string {
	if ct == nil {
		return ""
	}
	return walkpath.CtNote(ct.State, ct.Reply)
}

// pathTree renders an all-branches walk's paths as a tree.
var pathTree = walkpath.Tree[*Outcome]{
	Choices: func(o *Outcome) []walkpath.Choice { return o.choices },
	Steps: func(b *strings.Builder, o *Outcome, from, to int, prefix string) {
		writeSteps(b, walkpath.Span(o.Trace.Steps, from, to), prefix)
	},
	Leaf: walkpath.ArrowLeaf(func(o *Outcome) (float64, string) { return o.Probability, o.summary() }),
}
