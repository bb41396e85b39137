package emulator

import (
	"fmt"
	"strings"

	"github.com/clusterlab/clusterlab/internal/walkpath"
)

// JSON renders the merged outcomes as a JSON array (the `clusterlab trace -o json`
// format; see Outcome for the fields).
func (r *WalkResult) JSON() ([]byte, error) { return walkpath.JSON(r.Outcomes) }

// Text renders the walk: the packet, every step (a tree of branches when all branches
// were followed, like ovn-trace), and the outcomes with their probabilities.
func (r *WalkResult) Text() string {
	var b strings.Builder
	p := r.Input.Packet
	fmt.Fprintf(&b, "packet %s%s enters at %s%s\n", p.String(), walkpath.ICMPNote(p.Proto, p.ICMPType, p.ICMPCode), r.Start, ctNote(r.Input.Conntrack))
	if len(r.Paths) == 1 {
		writeSteps(&b, r.Paths[0].Trace.Steps, "")
		writeOutcomeLine(&b, r.Paths[0], "")
	} else {
		pathTree.Write(&b, r.Paths, 0, 0, "")
	}
	b.WriteString("\noutcomes:\n")
	for i, o := range r.Outcomes {
		fmt.Fprintf(&b, "  %d. p=%.6f  %s\n", i+1, o.Probability, o.summary())
		for _, a := range o.Assumptions {
			if a.Line == 0 && a.Table == "" { // a node setting (the bridge's)
				fmt.Fprintf(&b, "       assuming %s %s (not known)\n", a.Match, onOff(a.Holds))
				continue
			}
			word := "does not match"
			if a.Matched {
				word = "matches"
			}
			fmt.Fprintf(&b, "       assuming %s (line %d) %s\n", a.Match, a.Line, word)
		}
		if br := o.Bridge; br != nil {
			fmt.Fprintf(&b, "       bridge %s: %s\n", br.Bridge, br.Reason)
			if br.Reply != "" {
				fmt.Fprintf(&b, "       but %s\n", br.Reply)
			}
		}
		if len(o.MayDiffer) > 0 {
			fmt.Fprintf(&b, "       may differ: its path went where lines were skipped (%s)\n", strings.Join(o.MayDiffer, ", "))
		}
	}
	if r.Truncated {
		fmt.Fprintf(&b, "  (exploration stopped after %d paths)\n", len(r.Paths))
	}
	return b.String()
}

func (o *Outcome) summary() string {
	var parts []string
	parts = append(parts, o.Verdict)
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
	if o.DecidedBy == "routing" {
		by = "by routing (a martian packet: route_localnet=0)"
	} else if o.DecidedBy == "bridge" && o.Bridge != nil {
		by = "by the bridge (" + o.Bridge.summary() + ")"
	} else if o.Decision != nil {
		if o.DecidedBy == "rule" {
			by = fmt.Sprintf("by %s/%s line %d", o.Decision.Table, o.Decision.Chain, o.Decision.Line)
		} else {
			by = fmt.Sprintf("by %s/%s policy %s", o.Decision.Table, o.Decision.Chain, o.Decision.Policy)
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

func writeOutcomeLine(b *strings.Builder, o *Outcome, prefix string) {
	fmt.Fprintf(b, "%s=> %s\n", prefix, o.summary())
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
