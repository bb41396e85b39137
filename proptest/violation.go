package proptest

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/netsim"
)

// Violation is one broken invariant: which invariant, for which service port, from
// which source, what was expected, and what the probe showed (with its trace).
type Violation struct {
	Invariant string
	// Service is the service port ("default/web:http (80/TCP, IPv4)"), or "".
	Service string
	// Probe is the probe that showed it (From, Proto, Dst).
	Probe    netsim.Probe
	Expected string
	Got      string
	// Trace is the probe's trace for the outcome that broke the rule (nil if not traced).
	Trace *netsim.Trace
	// Repro is how to show the violation again from the case's starting state, in the
	// vocabulary of scenario files (see Case.Scenario): traffic with expectations that
	// hold when the invariant does.
	Repro []Action
}

// Action is one step of a violation's reproduction: traffic ("send": single packets;
// "connect": whole exchanges), "advance" (the virtual clock), "delete-pod" (grace 0) or
// "sync" (every proxy now).
type Action struct {
	Kind    string
	From    string
	Proto   uint8
	To      string // "IP:PORT", or "loadbalancer:NS/NAME:PORT"
	Count   int    // attempts, each from a new source port (unless SrcPort)
	SrcPort uint16
	// AllBranches follows every random choice of one packet (send only): expectations
	// then hold over every possible outcome.
	AllBranches bool
	Duration    time.Duration
	Pods        []string
	Expect      *Want
}

// Want is what a reproduction step expects when the invariant holds (scenario
// expectations: result, reaches, not_reaches, backends, seen_source).
type Want struct {
	Result     string
	Reaches    []string
	NotReaches []string
	Backends   int
	SeenSource string
}

// Error renders the violation on several lines, trace last.
func (v *Violation) Error() string {
	var b strings.Builder
	b.WriteString(v.Invariant)
	if v.Service != "" {
		b.WriteString(": service " + v.Service)
	}
	fmt.Fprintf(&b, "\n  probe:    %s %s -> %s", v.Probe.From, netsim.ProtoName(v.Probe.Proto), v.Probe.Dst)
	if v.Probe.SrcPort != 0 {
		fmt.Fprintf(&b, " (source port %d)", v.Probe.SrcPort)
	}
	b.WriteString("\n  expected: " + v.Expected)
	b.WriteString("\n  got:      " + strings.ReplaceAll(v.Got, "\n", "\n            "))
	if v.Trace != nil && v.Trace.Len() > 0 {
		b.WriteString("\n  trace:\n")
		for _, line := range strings.Split(strings.TrimRight(v.Trace.String(), "\n"), "\n") {
			b.WriteString("    " + line + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// Violations is every violation a check found; it is the error checkers return.
type Violations []*Violation

// MaxShown bounds how many violations an error message spells out.
const MaxShown = 3

// Error renders the first MaxShown violations in full and counts the rest.
func (vs Violations) Error() string {
	if len(vs) == 0 {
		return "no violations"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d violation", len(vs))
	if len(vs) > 1 {
		b.WriteString("s")
	}
	b.WriteString(":\n")
	for i, v := range vs {
		if i == MaxShown {
			fmt.Fprintf(&b, "... and %d more:\n", len(vs)-MaxShown)
			for _, v := range vs[MaxShown:] {
				fmt.Fprintf(&b, "  - %s: %s: %s %s -> %s: got %s\n", v.Invariant, v.Service, v.Probe.From, netsim.ProtoName(v.Probe.Proto), v.Probe.Dst, firstLine(v.Got))
			}
			break
		}
		b.WriteString(v.Error() + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// Invariants lists the distinct invariants violated, in order of first appearance.
func (vs Violations) Invariants() []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range vs {
		if !seen[v.Invariant] {
			seen[v.Invariant] = true
			out = append(out, v.Invariant)
		}
	}
	return out
}

func (vs Violations) err() error {
	if len(vs) == 0 {
		return nil
	}
	return vs
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// describe renders probe outcomes one a line, with probabilities when there are several.
func describe(rs []netsim.ProbeResult) string {
	if len(rs) == 0 {
		return "no outcome"
	}
	var lines []string
	for _, r := range rs {
		s := r.Outcome.String()
		if len(rs) > 1 || r.Probability != 1 {
			s += fmt.Sprintf(" (p=%.3f)", r.Probability)
		}
		lines = append(lines, s)
	}
	return strings.Join(lines, "\n")
}

// ingressNode is the first node a traced packet went through.
func ingressNode(tr *netsim.Trace) string {
	if tr == nil {
		return ""
	}
	for _, s := range tr.Steps {
		if s.Node != "" {
			return s.Node
		}
	}
	return ""
}

func addrPort(a netip.Addr, port int32) netip.AddrPort { return netip.AddrPortFrom(a, uint16(port)) }

// wantFor turns an expectation into what a reproduction step checks: the pods at the
// expected endpoints (each answering, no other), or the verdict.
func wantFor(exp Expect) *Want {
	if len(exp.Endpoints) == 0 {
		switch exp.Verdict {
		case "refused", "dropped":
			return &Want{Result: exp.Verdict}
		}
		return &Want{NotReaches: []string{"*/*", "node:*"}}
	}
	seen := map[string]bool{}
	var pods []string
	for _, ep := range exp.Endpoints {
		if ep.Pod != "" && !seen[ep.Pod] {
			seen[ep.Pod] = true
			pods = append(pods, ep.Pod)
		}
	}
	if len(pods) == 0 {
		return &Want{Result: "dropped"}
	}
	sort.Strings(pods)
	return &Want{Reaches: pods}
}

// probeRepro is the default reproduction of a violation found by probe p: the same
// traffic (every branch of it when p followed every branch; else often enough to meet
// every branch), expecting what exp says.
//
// Under ClientIP session affinity (sticky) every attempt of one client lands on the
// backend its first attempt chose, so attempts cannot show each of several endpoints:
// where the traffic may land is then checked on every branch of one packet (a dry run,
// which no affinity narrows before the client's first connection; Scenario puts such
// steps first), or, where a dry run cannot go (a load-balancer target, a probe that did
// not follow every branch), by no answer coming from the other pods (others); the
// attempts check the rest (the source the backend saw).
func probeRepro(p netsim.Probe, to string, exp Expect, want *Want, sticky bool, others []string) []Action {
	if to == "" {
		to = p.Dst.String()
	}
	if want == nil {
		want = wantFor(exp)
	}
	// Scenario files count the source a receiver saw only for real attempts, so a
	// source expectation is replayed with attempts rather than branches.
	if p.AllBranches && !strings.HasPrefix(to, "loadbalancer:") && want.SeenSource == "" {
		return []Action{{Kind: "send", From: p.From, Proto: p.Proto, To: to, SrcPort: p.SrcPort, AllBranches: true, Expect: want}}
	}
	kind := "send"
	if p.Mode == netsim.ProbeConnect && !p.AllBranches {
		kind = "connect"
	}
	count := 1
	if len(exp.Endpoints) > 1 || p.AllBranches {
		count = 40
	}
	attempts := Action{Kind: kind, From: p.From, Proto: p.Proto, To: to, Count: count, SrcPort: p.SrcPort, Expect: want}
	if !sticky || len(want.Reaches) < 2 || count == 1 {
		return []Action{attempts}
	}
	rest := *want
	rest.Reaches = nil
	attempts.Expect = &rest
	if p.AllBranches && !strings.HasPrefix(to, "loadbalancer:") {
		landing := Action{Kind: "send", From: p.From, Proto: p.Proto, To: to, SrcPort: p.SrcPort, AllBranches: true, Expect: &Want{Reaches: want.Reaches}}
		return []Action{landing, attempts}
	}
	rest.NotReaches = append(append([]string(nil), rest.NotReaches...), others...)
	return []Action{attempts}
}
