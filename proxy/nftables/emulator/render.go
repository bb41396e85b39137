package emulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// JSON renders the merged outcomes as a JSON array (the `clusterlab trace -o json`
// format, the same fields as the iptables walk's).
func (r *WalkResult) JSON() ([]byte, error) {
	out := r.Outcomes
	if out == nil {
		out = []*Outcome{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Text renders the walk: the packet, every step (a tree of branches when all branches
// were followed), and the outcomes with their probabilities.
func (r *WalkResult) Text() string {
	var b strings.Builder
	p := r.Input.Packet
	fmt.Fprintf(&b, "packet %s%s enters at %s%s\n", p.String(), icmpNote(p.Proto, p.ICMPType, p.ICMPCode), r.Start, ctNote(r.Input.Conntrack))
	if len(r.Paths) == 1 {
		writeSteps(&b, r.Paths[0].Trace.Steps, "")
		fmt.Fprintf(&b, "=> %s\n", r.Paths[0].summary())
	} else {
		writeTree(&b, r.Paths, 0, 0, "")
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

// writeTree renders paths that share their first k choices as a tree.
func writeTree(b *strings.Builder, paths []*Outcome, k, from int, prefix string) {
	first := paths[0]
	if len(paths) == 1 || k >= len(first.choices) {
		writeSteps(b, first.Trace.Steps[from:], prefix)
		if len(paths) == 1 {
			fmt.Fprintf(b, "%s=> p=%.6f %s\n", prefix, first.Probability, first.summary())
		} else {
			fmt.Fprintf(b, "%s=> %s\n", prefix, first.summary())
		}
		return
	}
	div := first.choices[k].step
	writeSteps(b, first.Trace.Steps[from:div], prefix)
	var groups [][]*Outcome
	for _, p := range paths {
		if len(groups) > 0 && groups[len(groups)-1][0].choices[k].alt == p.choices[k].alt {
			groups[len(groups)-1] = append(groups[len(groups)-1], p)
			continue
		}
		groups = append(groups, []*Outcome{p})
	}
	for gi, g := range groups {
		c := g[0].choices[k]
		branch, next := "├─", "│  "
		if gi == len(groups)-1 {
			branch, next = "└─", "   "
		}
		prob := ""
		if c.p != 1 {
			prob = fmt.Sprintf(" (p=%.6f)", c.p)
		}
		fmt.Fprintf(b, "%s%s %s%s\n", prefix, branch, c.label, prob)
		writeTree(b, g, k+1, div, prefix+next)
	}
}

// ctNote describes the conntrack state of a walk of a packet of an existing
// connection; empty for a first packet.
func ctNote(ct *Conntrack) string {
	if ct == nil {
		return ""
	}
	if ct.Reply {
		return fmt.Sprintf(" (ctstate %s, reply direction)", ct.State)
	}
	return fmt.Sprintf(" (ctstate %s)", ct.State)
}

// icmpNote names an ICMP message's type and code; empty for other protocols.
func icmpNote(proto, typ, code uint8) string {
	if proto != netfilter.ProtoICMP && proto != netfilter.ProtoICMPv6 {
		return ""
	}
	return fmt.Sprintf(" (type %d code %d)", typ, code)
}
