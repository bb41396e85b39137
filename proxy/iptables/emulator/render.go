package emulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// JSON renders the merged outcomes as a JSON array (the `clusterlab trace -o json`
// format; see Outcome for the fields).
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
// were followed, like ovn-trace), and the outcomes with their probabilities.
func (r *WalkResult) Text() string {
	var b strings.Builder
	p := r.Input.Packet
	fmt.Fprintf(&b, "packet %s%s enters at %s%s\n", p.String(), icmpNote(p.Proto, p.ICMPType, p.ICMPCode), r.Start, ctNote(r.Input.Conntrack))
	if len(r.Paths) == 1 {
		writeSteps(&b, r.Paths[0].Trace.Steps, "")
		writeOutcomeLine(&b, r.Paths[0], "")
	} else {
		writeTree(&b, r.Paths, 0, 0, "")
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

// writeTree renders paths that share their first k choices (and so their steps up to
// step from) as a tree: the shared steps, then one branch per alternative of choice k.
func writeTree(b *strings.Builder, paths []*Outcome, k, from int, prefix string) {
	first := paths[0]
	if len(paths) == 1 || k >= len(first.choices) {
		writeSteps(b, first.Trace.Steps[from:], prefix)
		if len(paths) == 1 {
			fmt.Fprintf(b, "%s=> p=%.6f %s\n", prefix, first.Probability, first.summary())
		} else {
			writeOutcomeLine(b, first, prefix)
		}
		return
	}
	div := first.choices[k].step
	writeSteps(b, first.Trace.Steps[from:div], prefix)
	// Group by the alternative taken at choice k, in order of appearance.
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
