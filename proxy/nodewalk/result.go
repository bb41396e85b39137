package nodewalk

import (
	"fmt"
	"slices"
	"strings"

	"github.com/clusterlab/clusterlab/internal/walkpath"
	"github.com/clusterlab/clusterlab/netfilter"
)

// RuleRef names a rule on a packet's path: its source ("iptables" or "nft"), the hook,
// the table ("nat"; "ip kube-proxy"), the chain, its line in the dump it was loaded
// from, its handle (nft, when the listing has them), its text and the set or map
// element that matched (nft).
type RuleRef struct {
	Source  string `json:"source"`
	Hook    string `json:"hook"`
	Table   string `json:"table"`
	Chain   string `json:"chain"`
	Line    int    `json:"line"`
	Handle  int    `json:"handle,omitempty"`
	Rule    string `json:"rule"`
	Element string `json:"element,omitempty"`
}

// DecisionRef names what decided an outcome: a rule, or a built-in or base chain's
// policy.
type DecisionRef struct {
	Source string `json:"source"`
	Hook   string `json:"hook"`
	Table  string `json:"table"`
	Chain  string `json:"chain"`
	Line   int    `json:"line,omitempty"`
	Handle int    `json:"handle,omitempty"`
	Rule   string `json:"rule,omitempty"`
	Policy string `json:"policy,omitempty"`
}

// AssumptionRef is an undecidable match and the value assumed for it on a path; the
// condition is held the same on every rule of the path that tests it.
type AssumptionRef struct {
	RuleRef
	Match     string `json:"match"`
	Matched   bool   `json:"assumed_match"`
	Condition string `json:"condition"`
	Holds     bool   `json:"condition_holds"`
}

// Step is one line of a walk's trace: a hook, a unit (base chain) starting, a rule, a
// policy, a note; Text is how it prints.
type Step struct {
	Kind    string `json:"kind"`
	Source  string `json:"source,omitempty"`
	Hook    string `json:"hook,omitempty"`
	Table   string `json:"table,omitempty"`
	Chain   string `json:"chain,omitempty"`
	Line    int    `json:"line,omitempty"`
	Handle  int    `json:"handle,omitempty"`
	Rule    string `json:"rule,omitempty"`
	Matched bool   `json:"matched,omitempty"`
	Element string `json:"element,omitempty"`
	Text    string `json:"text"`
}

// Outcome is one possible fate of the packet; its JSON has the fields of the iptables
// and nftables walks' outcomes (`clusterlab trace -o json`), its rules a source each.
type Outcome struct {
	Probability     float64         `json:"probability"`
	Verdict         string          `json:"verdict"`
	RejectWith      string          `json:"reject_with,omitempty"`
	DecidedBy       string          `json:"decided_by"`
	Decision        *DecisionRef    `json:"decision"`
	DNATDestination *string         `json:"dnat_destination"`
	Masqueraded     bool            `json:"masqueraded"`
	SNATSource      *string         `json:"snat_source"`
	Mark            string          `json:"mark"`
	Packet          string          `json:"packet"`
	Hooks           []string        `json:"hooks"`
	MatchedRules    []RuleRef       `json:"matched_rules"`
	Assumptions     []AssumptionRef `json:"assumptions,omitempty"`
	Paths           int             `json:"paths"`
	// Names are what the addresses the outcome shows are in the cluster (a caller that
	// has the cluster's manifests fills it in).
	Names map[string]string `json:"names,omitempty"`

	// Trace is the (first merged) path's trace.
	Trace   []Step            `json:"-"`
	choices []walkpath.Choice // the path's choices, for the tree rendering
	key     string
}

// Result is a walk's outcomes: merged (identical outcomes summed) and per path.
type Result struct {
	Input     Input
	Start     netfilter.Hook
	Outcomes  []*Outcome
	Paths     []*Outcome
	Truncated bool
}

// outcomeKey identifies an outcome for merging: everything observable except the
// probability and the rules on the way.
func outcomeKey(o *Outcome) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%s|", o.Verdict, o.RejectWith, o.DecidedBy)
	if d := o.Decision; d != nil {
		fmt.Fprintf(&b, "%s/%s/%s/%s/%d/%d/%s|", d.Source, d.Hook, d.Table, d.Chain, d.Line, d.Handle, d.Policy)
	}
	if o.DNATDestination != nil {
		b.WriteString(*o.DNATDestination)
	}
	fmt.Fprintf(&b, "|%v|", o.Masqueraded)
	if o.SNATSource != nil {
		b.WriteString(*o.SNATSource)
	}
	fmt.Fprintf(&b, "|%s|%s|%s|", o.Mark, o.Packet, strings.Join(o.Hooks, ","))
	var as []string
	for _, a := range o.Assumptions {
		as = append(as, fmt.Sprintf("%s=%v", a.Condition, a.Holds))
	}
	slices.Sort(as)
	b.WriteString(strings.Join(as, ";"))
	return b.String()
}

// JSON renders the merged outcomes as a JSON array.
func (r *Result) JSON() ([]byte, error) { return walkpath.JSON(r.Outcomes) }

// Text renders the walk: the packet, every step (a tree of branches when all branches
// were followed), and the outcomes with their probabilities.
func (r *Result) Text() string {
	var b strings.Builder
	p := r.Input.Packet
	ct := ""
	if c := r.Input.Conntrack; c != nil {
		ct = walkpath.CtNote(c.State, c.Reply)
	}
	fmt.Fprintf(&b, "packet %s enters at %s%s; iptables tables and nftables base chains by priority\n", p.String(), r.Start, ct)
	if len(r.Paths) == 1 {
		writeSteps(&b, r.Paths[0].Trace, "")
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
			fmt.Fprintf(&b, "       assuming %s %s (%s %s %s) %s\n", a.Source, a.Match, a.Table, a.Chain, where(a.Line, a.Handle), word)
		}
	}
	if r.Truncated {
		fmt.Fprintf(&b, "  (exploration stopped after %d paths)\n", len(r.Paths))
	}
	return b.String()
}

func where(line, handle int) string {
	if handle > 0 {
		return fmt.Sprintf("handle %d", handle)
	}
	return fmt.Sprintf("line %d", line)
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
	switch d := o.Decision; {
	case o.DecidedBy == "routing":
		by = "by routing (a martian packet: route_localnet=0)"
	case d != nil && d.Policy == "":
		by = fmt.Sprintf("by [%s] %s %s %s (%s)", d.Source, d.Table, d.Chain, where(d.Line, d.Handle), d.Hook)
	case d != nil:
		by = fmt.Sprintf("by [%s] %s %s policy %s (%s)", d.Source, d.Table, d.Chain, d.Policy, d.Hook)
	}
	parts = append(parts, by)
	if o.Paths > 1 {
		parts = append(parts, fmt.Sprintf("[%d paths]", o.Paths))
	}
	return strings.Join(parts, " ")
}

func writeSteps(b *strings.Builder, steps []Step, prefix string) {
	for _, s := range steps {
		b.WriteString(prefix)
		b.WriteString(s.Text)
		b.WriteByte('\n')
	}
}

// pathTree renders an all-branches walk's paths as a tree: a choice's alternatives
// share the steps up to its own.
var pathTree = walkpath.Tree[*Outcome]{
	Choices: func(o *Outcome) []walkpath.Choice { return o.choices },
	Shared:  1,
	Steps: func(b *strings.Builder, o *Outcome, from, to int, prefix string) {
		writeSteps(b, walkpath.Span(o.Trace, from, to), prefix)
	},
	Leaf: func(b *strings.Builder, o *Outcome, prefix string, only bool) {
		if only {
			fmt.Fprintf(b, "%s   p=%.6f %s\n", prefix, o.Probability, o.summary())
		}
	},
}
