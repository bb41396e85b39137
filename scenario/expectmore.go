package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netsim"
)

// The expectations a bug report states beyond outcomes: probabilities over every
// branch, the decision point, conntrack tuples and counters, a health-check node
// port's answer (see Expect).

// defaultTolerance is the tolerance of probabilities when the step gives none.
const defaultTolerance = 0.001

// counterNames are the conntrack -S counters a conntrack_stats check reads.
var counterNames = []string{"found", "invalid", "insert", "insert_failed", "drop", "early_drop", "clash_resolve"}

// checkMoreExpect validates the expectations of this file; fail reports a field of
// the step's expect.
func (s *Scenario) checkMoreExpect(st *Step, ep string, fail func(f, format string, args ...any)) {
	e := st.Expect
	check := func(kind bool) bool { return st.Check != nil && kind }
	if e.Probabilities != nil && (st.Send == nil || !st.Send.AllBranches) {
		fail("probabilities", "only send steps with all_branches: true have probabilities")
	}
	if e.Tolerance != nil && e.Probabilities == nil {
		fail("tolerance", "tolerance goes with probabilities")
	}
	for _, k := range slices.Sorted(mapKeys(e.Probabilities)) {
		if p := e.Probabilities[k]; p < 0 || p > 1 {
			fail("probabilities."+k, "want a probability between 0 and 1, got %v", p)
		}
	}
	if e.Tolerance != nil && (*e.Tolerance < 0 || *e.Tolerance >= 1) {
		fail("tolerance", "want a tolerance between 0 and 1, got %v", *e.Tolerance)
	}
	if e.DecidedBy != nil {
		t := st.Connect
		if t == nil {
			t = st.Send
		}
		switch {
		case t == nil:
			fail("decided_by", "only connect and send steps have decided_by")
		case t.AllBranches:
			fail("decided_by", "a step with all_branches has several fates; decided_by needs one")
		case t.Via == "netstack":
			fail("decided_by", "decided_by reads a probe's trace: not with via: netstack")
		}
		e.DecidedBy.check(func(f, format string, args ...any) {
			if f != "" {
				f = "." + f
			}
			fail("decided_by"+f, format, args...)
		})
	}
	if e.Present != nil && !check(st.Check != nil && st.Check.Conntrack != nil) {
		fail("present", "only check conntrack steps have present")
	}
	if e.NATDestination != "" {
		if !check(st.Check != nil && st.Check.Conntrack != nil) {
			fail("nat_destination", "only check conntrack steps have nat_destination")
		} else if _, err := parseTarget(e.NATDestination, true); err != nil {
			fail("nat_destination", "want an IP, IP:PORT or pod:NS/NAME[:PORT]: %v", err)
		}
	}
	if e.Counters != nil && !check(st.Check != nil && st.Check.ConntrackStats != nil) {
		fail("counters", "only check conntrack_stats steps have counters")
	}
	for _, k := range slices.Sorted(mapKeys(e.Counters)) {
		if !slices.Contains(counterNames, k) {
			fail("counters."+k, "unknown counter: want %s", strings.Join(counterNames, ", "))
		} else if e.Counters[k] < 0 {
			fail("counters."+k, "want zero or more, got %d", e.Counters[k])
		}
	}
	health := st.Check != nil && st.Check.HealthCheck != nil
	httpGet := st.Connect != nil && st.Connect.HTTP != nil
	if e.Status != nil && !health && !httpGet {
		fail("status", "only check health_check steps have status (and connect steps with http)")
	}
	if e.Body != "" && !httpGet {
		fail("body", "only connect steps with http have body")
	}
	if e.LocalEndpoints != nil && !health {
		fail("local_endpoints", "only check health_check steps have local_endpoints")
	}
	if health && (e.Count != nil) {
		fail("count", "a health_check step has status and local_endpoints, not count")
	}
	if st.Check != nil && st.Check.ConntrackStats != nil && e.Count != nil {
		fail("count", "a conntrack_stats step has counters, not count")
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// check validates a decision point: one kind, and Rule and Line only with Chain.
func (d *DecisionPoint) check(fail func(f, format string, args ...any)) {
	n := 0
	for _, set := range []bool{d.Chain != "", d.Policy != "", d.Conntrack, d.IPVSTemplate, d.NetworkPolicy != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		fail("", "want one of chain (with rule or line), policy, conntrack, ipvs_template, network_policy")
	}
	if d.NetworkPolicy != "" {
		if ns, name, ok := strings.Cut(d.NetworkPolicy, "/"); !ok || ns == "" || name == "" {
			fail("network_policy", "want NAMESPACE/NAME, got %q", d.NetworkPolicy)
		}
		if d.Line != 0 {
			fail("line", "a NetworkPolicy rule is named by rule (a part of its text), not line")
		}
	} else if (d.Rule != "" || d.Line != 0) && d.Chain == "" {
		fail("chain", "rule and line name a rule of a chain: give its chain")
	}
	if d.Line < 0 {
		fail("line", "want a line number, got %d", d.Line)
	}
}

// String describes the decision point as the step wants it.
func (d *DecisionPoint) String() string {
	switch {
	case d.Chain != "":
		s := "a rule of " + d.Chain
		if d.Line != 0 {
			s += fmt.Sprintf(" line %d", d.Line)
		}
		if d.Rule != "" {
			s += fmt.Sprintf(" containing %q", d.Rule)
		}
		return s
	case d.Policy != "":
		return "the policy of " + d.Policy
	case d.Conntrack:
		return "an existing conntrack entry"
	case d.IPVSTemplate:
		return "an IPVS persistence template"
	case d.NetworkPolicy != "":
		s := "NetworkPolicy " + d.NetworkPolicy
		if d.Rule != "" {
			s += fmt.Sprintf(" (a rule containing %q)", d.Rule)
		}
		return s
	}
	return "?"
}

// decision is what decided a packet's fate, read from its trace.
type decision struct {
	kind  string // rule, policy, conntrack, ipvs-template, ipvs-scheduler, handler, routing, none
	node  string
	table string
	chain string
	line  int
	rule  string
	text  string // the decisive step in words
}

// decisionOf reads the decision point of a probe's trace: for a packet dropped or
// rejected, the rule or policy (or the handler, or routing) that did it; otherwise what
// chose its destination: a DNAT rule, an existing conntrack entry, an IPVS template or
// scheduler; "none" when nothing translated it.
func decisionOf(tr *netsim.Trace) decision {
	if tr == nil {
		return decision{kind: "none", text: "no trace"}
	}
	steps := tr.Steps
	end := slices.IndexFunc(steps, func(s netsim.TraceStep) bool { return s.Kind == netsim.StepEnd })
	if end < 0 {
		end = len(steps)
	} else if v := steps[end].Verdict; v == "REJECT" || v == "DROP" {
		return fateDecision(steps, end)
	}
	for i, s := range steps[:end] {
		switch {
		case s.Kind == netsim.StepNote && s.Handler == "ipvs" && strings.Contains(s.Detail, "persistence template of"):
			return decision{kind: "ipvs-template", node: s.Node, text: "IPVS on " + s.Node + ": " + s.Detail}
		case s.Kind == netsim.StepNote && s.Handler == "ipvs" && strings.HasPrefix(s.Detail, "scheduler "):
			return decision{kind: "ipvs-scheduler", node: s.Node, text: "IPVS on " + s.Node + ": " + s.Detail}
		case s.Kind == netsim.StepHandler && (strings.HasPrefix(s.Verdict, "DNAT") || strings.HasPrefix(s.Verdict, "REDIRECT")):
			if d, ok := ruleBefore(steps, i); ok {
				return d
			}
			return decision{kind: "handler", node: s.Node, text: s.Handler + " on " + s.Node + ": " + s.Verdict}
		case s.Kind == netsim.StepNAT && strings.HasPrefix(s.Detail, "entry #"):
			return decision{kind: "conntrack", node: s.Node, text: "the conntrack entry on " + s.Node + ": " + s.Detail}
		}
	}
	return decision{kind: "none", text: "nothing translated or stopped the packet"}
}

// fateDecision is the decision of a packet that ends (dropped or rejected) at steps[end].
func fateDecision(steps []netsim.TraceStep, end int) decision {
	for j := end - 1; j >= 0; j-- {
		s := steps[j]
		if s.Kind != netsim.StepHandler || !(strings.HasPrefix(s.Verdict, "DROP") || strings.HasPrefix(s.Verdict, "REJECT")) {
			continue
		}
		if d, ok := ruleBefore(steps, j); ok {
			return d
		}
		return decision{kind: "handler", node: s.Node, text: s.Handler + " on " + s.Node + ": " + s.Verdict + " " + s.Detail}
	}
	return decision{kind: "routing", node: steps[end].Node, text: "on " + steps[end].Node + ": " + steps[end].Detail}
}

// ruleBefore is the rule (or policy) whose verdict the handler step at steps[h] reports:
// the last rule step of the same handler and hook before it that matched or was a policy.
func ruleBefore(steps []netsim.TraceStep, h int) (decision, bool) {
	hs := steps[h]
	for k := h - 1; k >= 0; k-- {
		s := steps[k]
		if s.Kind == netsim.StepHook || s.Node != hs.Node {
			break
		}
		if s.Kind != netsim.StepRule || s.Handler != hs.Handler {
			continue
		}
		if strings.HasPrefix(s.Rule, "policy ") {
			return decision{kind: "policy", node: s.Node, table: s.Table, chain: s.Chain,
				text: fmt.Sprintf("the policy of %s/%s on %s: %s", s.Table, s.Chain, s.Node, s.Verdict)}, true
		}
		if s.Matched != nil && *s.Matched {
			return decision{kind: "rule", node: s.Node, table: s.Table, chain: s.Chain, line: s.Line, rule: s.Rule,
				text: fmt.Sprintf("%s/%s line %d on %s: %s", s.Table, s.Chain, s.Line, s.Node, s.Rule)}, true
		}
	}
	return decision{}, false
}

// chainIs reports whether want (CHAIN or TABLE/CHAIN) names table/chain.
func chainIs(want, table, chain string) bool {
	if t, c, ok := strings.Cut(want, "/"); ok {
		return t == table && c == chain
	}
	return want == chain
}

// matches reports whether the decision is the one the step wants.
func (d decision) matches(w *DecisionPoint) bool {
	switch {
	case w.Chain != "":
		return d.kind == "rule" && chainIs(w.Chain, d.table, d.chain) && (w.Line == 0 || w.Line == d.line) && strings.Contains(d.rule, w.Rule)
	case w.Policy != "":
		return d.kind == "policy" && chainIs(w.Policy, d.table, d.chain)
	case w.Conntrack:
		return d.kind == "conntrack"
	case w.IPVSTemplate:
		return d.kind == "ipvs-template"
	}
	return false
}

// checkDecision is the decided_by expectation of a step whose first attempt's trace is tr.
func checkDecision(w *DecisionPoint, tr *netsim.Trace) Expectation {
	if w.NetworkPolicy != "" {
		return checkPolicyDecision(w, tr)
	}
	d := decisionOf(tr)
	return Expectation{Field: "decided_by", Want: w.String(), Got: d.text, OK: d.matches(w)}
}

// branchKey is the key of a branch in probabilities: its pod, its node's host network,
// or its result.
func branchKey(pr netsim.ProbeResult) string {
	switch {
	case pr.Pod != "":
		return pr.Pod
	case pr.Node != "" && okResult(pr.Result):
		return "node:" + pr.Node
	}
	return pr.Result
}

// checkProbabilities compares the probability of each outcome over every branch with
// the step's, within the tolerance; outcomes the step does not name must not happen.
func checkProbabilities(e *Expect, rs []netsim.ProbeResult) Expectation {
	tol := defaultTolerance
	if e.Tolerance != nil {
		tol = *e.Tolerance
	}
	got := map[string]float64{}
	for _, pr := range rs {
		got[branchKey(pr)] += pr.Probability
	}
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range e.Probabilities {
		keys[k] = true
	}
	ok := true
	for k := range keys {
		if math.Abs(got[k]-e.Probabilities[k]) > tol {
			ok = false
		}
	}
	return Expectation{Field: "probabilities", Want: probText(e.Probabilities) + fmt.Sprintf(" (±%g)", tol), Got: probText(got), OK: ok}
}

func probText(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.4g", k, m[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// parseAddrRef checks an address reference: an IP, pod:NS/NAME or node:NAME.
func parseAddrRef(s string) (target, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return target{kind: "addr", addr: netip.AddrPortFrom(a, 0)}, nil
	}
	kind, name, ok := strings.Cut(s, ":")
	if !ok || (kind != "pod" && kind != "node") || name == "" || strings.Contains(name, ":") {
		return target{}, fmt.Errorf("want an IP, pod:NS/NAME or node:NAME, got %q", s)
	}
	if kind == "pod" && !strings.Contains(name, "/") {
		name = "default/" + name
	}
	return target{kind: kind, host: name}, nil
}

// checkConntrackMore adds the present and nat_destination expectations of a conntrack
// check over the entries it found.
func (r *runner) checkConntrackMore(e *Expect, entries []netsim.Conn, res *StepResult) error {
	if e == nil {
		return nil
	}
	if e.Present != nil {
		res.Expectations = append(res.Expectations, Expectation{Field: "present", Want: strconv.FormatBool(*e.Present),
			Got: fmt.Sprintf("%v (%d entries)", len(entries) > 0, len(entries)), OK: (len(entries) > 0) == *e.Present})
	}
	if e.NATDestination != "" {
		t, err := parseTarget(e.NATDestination, true)
		if err != nil {
			return err
		}
		ap, _, err := r.resolveTarget(context.Background(), t, "")
		if err != nil {
			return err
		}
		var got []string
		ok := len(entries) > 0
		for _, c := range entries {
			d := netip.AddrPortFrom(c.Reply.Src, c.Reply.SrcPort)
			got = append(got, d.String())
			if c.Reply.Src != ap.Addr() || ap.Port() != 0 && c.Reply.SrcPort != ap.Port() {
				ok = false
			}
		}
		want := ap.Addr().String()
		if ap.Port() != 0 {
			want = ap.String()
		}
		g := strings.Join(slices.Compact(slices.Sorted(slices.Values(got))), ", ")
		if len(entries) == 0 {
			g = "no entry"
		}
		res.Expectations = append(res.Expectations, Expectation{Field: "nat_destination", Want: want, Got: g, OK: ok})
	}
	return nil
}

// checkConntrackStats reads the conntrack counters of a node (or the sums over every
// node) and checks counters.
func (r *runner) checkConntrackStats(cs *ConntrackStatsCheck, e *Expect, res *StepResult) error {
	got := map[string]int{}
	r.forNodes(cs.Node, func(n *cluster.Node) {
		st := n.Conntrack().Stats()
		got["insert"] += int(st.Insert)
		got["insert_failed"] += int(st.InsertFailed)
		got["drop"] += int(st.Drop)
		got["early_drop"] += int(st.EarlyDrop)
		got["found"] += int(st.Found)
		got["invalid"] += int(st.Invalid)
		got["clash_resolve"] += int(st.ClashResolve)
	})
	var parts []string
	for _, k := range counterNames {
		parts = append(parts, fmt.Sprintf("%s=%d", k, got[k]))
	}
	res.Summary = "conntrack -S on " + cs.Node + ": " + strings.Join(parts, " ")
	res.Details = append(res.Details, "early_drop stays 0: the simulated table has no size limit (nf_conntrack_max)")
	if e == nil {
		return nil
	}
	for _, k := range slices.Sorted(mapKeys(e.Counters)) {
		res.Expectations = append(res.Expectations, Expectation{Field: "counters." + k, Want: strconv.Itoa(e.Counters[k]), Got: strconv.Itoa(got[k]), OK: got[k] == e.Counters[k]})
	}
	return nil
}

// checkHealth has the cloud load balancer health-check every node now and reads the
// answer of the node's health-check node port for the Service: its HTTP status and
// the localEndpoints of its body (kube-proxy's healthcheck server).
func (r *runner) checkHealth(hc *HealthCheckCheck, e *Expect, res *StepResult) error {
	ns, name := splitKey(hc.Service)
	svc, ok := r.c.Store().GetService(ns, name)
	if !ok {
		return fmt.Errorf("no service %s/%s", ns, name)
	}
	if svc.Spec.HealthCheckNodePort == 0 {
		return fmt.Errorf("service %s/%s has no health-check node port (a LoadBalancer with externalTrafficPolicy Local has one)", ns, name)
	}
	r.c.CheckLoadBalancers()
	hs, ok := r.c.LoadBalancerHealth(ns, name)
	if !ok {
		return fmt.Errorf("service %s/%s has no load balancer", ns, name)
	}
	i := slices.IndexFunc(hs, func(h cluster.NodeHealth) bool { return h.Node == hc.Node })
	if i < 0 {
		return fmt.Errorf("no node %q", hc.Node)
	}
	last := hs[i].Last
	local := -1
	var body struct {
		LocalEndpoints *int `json:"localEndpoints"`
	}
	if err := json.Unmarshal([]byte(last.Body), &body); err == nil && body.LocalEndpoints != nil {
		local = *body.LocalEndpoints
	}
	res.Summary = fmt.Sprintf("health-check node port %d on %s: ", svc.Spec.HealthCheckNodePort, hc.Node)
	if last.Status == 0 {
		res.Summary += "no answer: " + last.Err
	} else {
		res.Summary += fmt.Sprintf("HTTP %d, localEndpoints %d", last.Status, local)
	}
	if last.Body != "" {
		var b bytes.Buffer
		if json.Compact(&b, []byte(last.Body)) != nil {
			b.Reset()
			b.WriteString(strings.TrimSpace(last.Body))
		}
		res.Details = append(res.Details, "body: "+b.String())
	}
	if e == nil {
		return nil
	}
	if e.Status != nil {
		res.Expectations = append(res.Expectations, Expectation{Field: "status", Want: strconv.Itoa(*e.Status), Got: strconv.Itoa(last.Status), OK: last.Status == *e.Status})
	}
	if e.LocalEndpoints != nil {
		res.Expectations = append(res.Expectations, Expectation{Field: "local_endpoints", Want: strconv.Itoa(*e.LocalEndpoints), Got: strconv.Itoa(local), OK: local == *e.LocalEndpoints})
	}
	return nil
}
