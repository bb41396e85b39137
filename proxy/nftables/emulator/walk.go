package emulator

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/internal/walkpath"
	"github.com/clusterlab/clusterlab/netfilter"
)

// From says where a walked packet comes from.
type From uint8

// Packet origins.
const (
	// FromAuto: from the node itself when the source is one of its local addresses,
	// else from outside (a pod or another host).
	FromAuto From = iota
	FromPod
	FromNode
	FromExternal
)

// ParseFrom parses "pod", "node", "external" or "" (auto).
func ParseFrom(s string) (From, error) {
	switch s {
	case "", "auto":
		return FromAuto, nil
	case "pod":
		return FromPod, nil
	case "node":
		return FromNode, nil
	case "external":
		return FromExternal, nil
	}
	return 0, fmt.Errorf("unknown origin %q (want pod, node or external)", s)
}

// WalkInput is a stand-alone walk of a connection's first packet through a node.
type WalkInput struct {
	// Packet is the packet as it enters (its conntrack state is set to new).
	Packet Packet
	From   From
	// Local are the node's addresses (fib type local, local delivery); loopback
	// addresses are always local.
	Local []netip.Addr
	// AllBranches follows every numgen choice (and both assumptions for every
	// statement the emulator does not model) instead of drawing from Seed.
	AllBranches bool
	Seed        uint64
	// Time is the virtual clock for set timeouts; zero means a fixed epoch.
	Time time.Time
	// MaxPaths bounds an all-branches exploration (default 4096).
	MaxPaths int
	// MaxSteps bounds the rule evaluations of one path (default DefaultMaxWalkSteps):
	// a path that reaches it stops with an UNKNOWN outcome decided by "limit", its
	// trace saying so.
	MaxSteps int
	// OutIface is the output interface of a packet that leaves the node (when Route
	// is not set).
	OutIface string
	// Route, when set, is the node's routing table: the output interface for a
	// destination (after DNAT), "" when no route matches. It takes precedence over
	// OutIface.
	Route func(dst netip.Addr) string
	// IfaceAddrs are the node's interfaces' primary addresses: masquerade takes the
	// output interface's (as the kernel's inet_select_addr), redirect in PREROUTING
	// the input interface's. Their addresses are local.
	IfaceAddrs map[string]netip.Addr
	// RouteLocalnet, when set, is the node's net.ipv4.conf.*.route_localnet: false
	// drops (as the kernel's routing does) a packet arriving on an interface other than
	// lo with a loopback source or destination after PREROUTING. Nil: not checked.
	RouteLocalnet *bool
	// CtNAT is the NAT binding of the existing connection a packet of an established
	// connection belongs to (from the node's conntrack table): its destination is
	// rewritten after PREROUTING (or OUTPUT) and its source after POSTROUTING, where
	// nat chains ran for the connection's first packet.
	CtNAT *netfilter.NATBinding
	// Conntrack, when set, is the conntrack state of a packet of an existing connection
	// (ESTABLISHED, RELATED, a reply: its Status has StatusConfirmed) or of one
	// conntrack found no entry for (INVALID). Nil is the first packet of a new
	// connection (new). nat chains run only for a first packet, as in the kernel.
	Conntrack *Conntrack
}

// RuleRef names a rule on a packet's path. Table is "FAMILY NAME" ("ip kube-proxy").
type RuleRef struct {
	Hook    string `json:"hook"`
	Table   string `json:"table"`
	Chain   string `json:"chain"`
	Line    int    `json:"line"`
	Handle  int    `json:"handle,omitempty"`
	Rule    string `json:"rule"`
	Element string `json:"element,omitempty"`
}

// DecisionRef names what decided an outcome: a rule or a base chain's policy.
type DecisionRef struct {
	Hook   string `json:"hook"`
	Table  string `json:"table"`
	Chain  string `json:"chain"`
	Line   int    `json:"line,omitempty"`
	Handle int    `json:"handle,omitempty"`
	Rule   string `json:"rule,omitempty"`
	Policy string `json:"policy,omitempty"`
}

// AssumptionRef is a statement the emulator does not model and the value assumed for
// it on an outcome's path.
type AssumptionRef struct {
	RuleRef
	Match   string `json:"match"`
	Matched bool   `json:"assumed_match"`
}

// Outcome is one possible fate of a walked packet; its JSON is the same as the
// iptables walk's (`clusterlab trace -o json`).
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

	// Trace is the (first merged) path's trace.
	Trace   *Trace            `json:"-"`
	choices []walkpath.Choice // the path's choices, for the tree rendering
	key     string
}

// WalkResult is a walk's outcomes: merged (identical outcomes summed) and per path.
type WalkResult struct {
	Input     WalkInput
	Start     netfilter.Hook
	Outcomes  []*Outcome
	Paths     []*Outcome
	Truncated bool
}

// walkEnv is a walk's Env: a dry run on a fixed clock, its numgen choices replayed
// (all branches) or drawn from the seed, assumptions recorded.
type walkEnv struct {
	now    time.Time
	local  map[netip.Addr]bool
	all    bool
	rng    *rand.Rand
	forced []int
	pos    int
	taken  []walkpath.Choice
	prob   float64
	tr     *Trace
	memo   map[*UnknownStmt]bool
	assume []AssumptionRef
	limit  stepLimit
}

// DefaultMaxWalkSteps is a walk's bound on one path's rule evaluations when
// WalkInput.MaxSteps is not set: far above kube-proxy's rulesets, which look
// Services up in maps, far below a runaway.
const DefaultMaxWalkSteps = 1 << 18

func (w *walkEnv) Now() time.Time { return w.now }
func (w *walkEnv) DryRun() bool   { return true }
func (w *walkEnv) IsLocal(a netip.Addr) bool {
	return a.IsLoopback() || w.local[a.Unmap()]
}

func (w *walkEnv) next() int {
	alt := 0
	if w.pos < len(w.forced) {
		alt = w.forced[w.pos]
	}
	w.pos++
	return alt
}

// Pick is numgen random's choice point.
func (w *walkEnv) Pick(n int) int {
	if n <= 1 {
		return 0
	}
	var alt int
	if w.all {
		alt = w.next()
	} else {
		alt = w.rng.IntN(n)
	}
	p := 1 / float64(n)
	w.prob *= p
	w.taken = append(w.taken, walkpath.Choice{Alt: alt, N: n, P: p, Step: max(len(w.tr.Steps)-1, 0),
		Label: fmt.Sprintf("numgen random mod %d = %d", n, alt)})
	return alt
}

// Assume decides an unmodelled statement: not matching on a single path; both ways
// (once per statement and path) with all branches.
func (w *walkEnv) Assume(r *Rule, u *UnknownStmt) bool {
	if v, ok := w.memo[u]; ok {
		return v
	}
	v := false
	if w.all {
		v = w.next() == 1
		label := fmt.Sprintf("assume %q does not match", u.Text)
		if v {
			label = fmt.Sprintf("assume %q matches", u.Text)
		}
		w.taken = append(w.taken, walkpath.Choice{Alt: map[bool]int{false: 0, true: 1}[v], N: 2, P: 1, Step: max(len(w.tr.Steps)-1, 0), Label: label})
	}
	if w.memo == nil {
		w.memo = map[*UnknownStmt]bool{}
	}
	w.memo[u] = v
	ref := RuleRef{Line: r.Line, Handle: r.Handle, Rule: r.Text}
	if n := len(w.tr.Steps); n > 0 {
		s := w.tr.Steps[n-1]
		ref.Hook, ref.Table, ref.Chain = s.Hook, s.Family+" "+s.Table, s.Chain
	}
	w.assume = append(w.assume, AssumptionRef{RuleRef: ref, Match: u.Text, Matched: v})
	return v
}

// Walk follows the first packet of a connection through the node as the kernel routes
// it: PREROUTING, then INPUT (LOCAL) when the destination is local after DNAT, else
// FORWARD and POSTROUTING (ACCEPT); from the node itself OUTPUT and POSTROUTING (and
// back in through PREROUTING and INPUT when the destination is local). At each hook the
// base chains of all ip/ip6/inet tables run in priority order; nat chains only until
// one NATs. A walk is a what-if: it changes no state.
func (e *Emulator) Walk(in WalkInput) (*WalkResult, error) {
	if !in.Packet.Src.IsValid() || !in.Packet.Dst.IsValid() {
		return nil, fmt.Errorf("walk: source and destination addresses are required")
	}
	if in.Packet.Src.Is6() != in.Packet.Dst.Is6() {
		return nil, fmt.Errorf("walk: %s and %s are of different IP families", in.Packet.Src, in.Packet.Dst)
	}
	local := map[netip.Addr]bool{}
	for _, a := range in.Local {
		local[a.Unmap()] = true
	}
	for _, a := range in.IfaceAddrs {
		local[a.Unmap()] = true
	}
	now := in.Time
	if now.IsZero() {
		now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	res := &WalkResult{Input: in, Start: netfilter.Prerouting}
	if in.From == FromNode || (in.From == FromAuto && (local[in.Packet.Src] || in.Packet.Src.IsLoopback())) {
		res.Start = netfilter.Output
	}
	max := in.MaxPaths
	if max <= 0 {
		max = 4096
	}
	var forced []int
	merged := map[string]*Outcome{}
	for {
		tr := &Trace{}
		env := &walkEnv{now: now, local: local, all: in.AllBranches, rng: rand.New(rand.NewPCG(in.Seed, 0x6e667465)), forced: forced, prob: 1, tr: tr,
			limit: stepLimit{max: in.MaxSteps}}
		if env.limit.max <= 0 {
			env.limit.max = DefaultMaxWalkSteps
		}
		o := e.walkOnce(env, in, res.Start)
		o.Probability, o.choices = env.prob, env.taken
		res.Paths = append(res.Paths, o)
		if m, ok := merged[o.key]; ok {
			m.Probability += o.Probability
			m.Paths++
		} else {
			c := *o
			merged[o.key] = &c
			res.Outcomes = append(res.Outcomes, &c)
		}
		if !in.AllBranches {
			break
		}
		next, ok := walkpath.Next(env.taken)
		if !ok {
			break
		}
		if len(res.Paths) >= max {
			res.Truncated = true
			break
		}
		forced = next
	}
	return res, nil
}

// walkState is one path's state.
type walkState struct {
	e        *Emulator
	env      *walkEnv
	tr       *Trace
	pkt      Packet
	o        *Outcome
	in       *WalkInput
	dnat     *NAT
	snat     *NAT
	decision *DecisionRef
	martian  bool // routing dropped it (route_localnet)
}

func (e *Emulator) walkOnce(env *walkEnv, in WalkInput, start netfilter.Hook) *Outcome {
	w := &walkState{e: e, env: env, tr: env.tr, pkt: in.Packet, in: &in,
		o: &Outcome{Paths: 1, Trace: env.tr, MatchedRules: []RuleRef{}, Hooks: []string{}}}
	w.pkt.CT = Conntrack{State: netfilter.CtNew}
	note := func(s string) { w.tr.add(Step{Kind: StepNote, Detail: s}) }
	nat := true
	if in.Conntrack != nil {
		w.pkt.CT = *in.Conntrack
		nat = natFirst(&w.pkt)
		if !nat {
			note(fmt.Sprintf("conntrack: %s, not the first packet of the connection: nat chains are not run (the conntrack entry's binding applies)", w.pkt.CT.State))
		}
	}
	ctDNAT := func() {
		if n := in.CtNAT; n != nil && n.DNAT.IsValid() && !nat {
			w.pkt.Dst, w.pkt.DstPort = n.DNAT.Addr(), n.DNAT.Port()
			w.dnat = &NAT{Kind: netfilter.DNAT, Addr: n.DNAT.Addr(), Port: n.DNAT.Port()}
			note("conntrack: the connection's binding DNATs the packet to " + n.DNAT.String() + " (" + n.Entry + ")")
		}
	}
	ctSNAT := func() {
		if n := in.CtNAT; n != nil && n.SNAT.IsValid() && !nat {
			w.pkt.Src, w.pkt.SrcPort = n.SNAT.Addr(), n.SNAT.Port()
			w.snat = &NAT{Kind: netfilter.SNAT, Addr: n.SNAT.Addr(), Port: n.SNAT.Port()}
			note("conntrack: the connection's binding SNATs the packet from " + n.SNAT.String())
		}
	}
	if start == netfilter.Prerouting {
		if o := w.hook(netfilter.Prerouting, nat); o != nil {
			return o
		}
		ctDNAT()
		if Martian(in.RouteLocalnet, &w.pkt) {
			note(fmt.Sprintf("routing: %s -> %s in %s is martian with route_localnet=0: dropped", w.pkt.Src, w.pkt.Dst, w.pkt.InIface))
			w.martian = true
			return w.finish(Drop, ChainVerdict{})
		}
		if env.IsLocal(w.pkt.Dst) {
			note(fmt.Sprintf("routing: %s is local: INPUT", w.pkt.Dst))
			if o := w.hook(netfilter.Input, nat); o != nil {
				return o
			}
			return w.finish(Local, ChainVerdict{})
		}
		w.pkt.OutIface = in.outIface(w.pkt.Dst)
		note(fmt.Sprintf("routing: %s is not local: FORWARD%s", w.pkt.Dst, OutVia(w.pkt.OutIface)))
		if o := w.hook(netfilter.Forward, nat); o != nil {
			return o
		}
		if o := w.hook(netfilter.Postrouting, nat); o != nil {
			return o
		}
		ctSNAT()
		return w.finish(Accept, ChainVerdict{})
	}
	// The kernel routes a locally generated packet before OUTPUT (the socket's route):
	// rules there see its output interface (oifname), which stays for the whole hook
	// even when a dnat there changes the destination; it is routed again after.
	if env.IsLocal(w.pkt.Dst) {
		w.pkt.OutIface = "lo"
	} else {
		w.pkt.OutIface = in.outIface(w.pkt.Dst)
	}
	if o := w.hook(netfilter.Output, nat); o != nil {
		return o
	}
	ctDNAT()
	isLocal := env.IsLocal(w.pkt.Dst)
	if isLocal {
		w.pkt.OutIface = "lo"
		note(fmt.Sprintf("routing: %s is local: out over loopback", w.pkt.Dst))
	} else {
		w.pkt.OutIface = in.outIface(w.pkt.Dst)
		note(fmt.Sprintf("routing: %s is not local%s", w.pkt.Dst, OutVia(w.pkt.OutIface)))
	}
	if o := w.hook(netfilter.Postrouting, nat); o != nil {
		return o
	}
	ctSNAT()
	if !isLocal {
		return w.finish(Accept, ChainVerdict{})
	}
	w.pkt.CT.Status |= netfilter.StatusConfirmed
	w.pkt.InIface = "lo"
	note("conntrack: entry confirmed; back in over loopback (nat chains are not run again)")
	if o := w.hook(netfilter.Prerouting, false); o != nil {
		return o
	}
	if o := w.hook(netfilter.Input, false); o != nil {
		return o
	}
	return w.finish(Local, ChainVerdict{})
}

// outIface is the interface a packet to dst leaves by: the routing table's when there
// is one, else OutIface.
func (in *WalkInput) outIface(dst netip.Addr) string {
	if in.Route != nil {
		return in.Route(dst)
	}
	return in.OutIface
}

// OutVia renders the output interface for a routing note.
func OutVia(iface string) string {
	if iface == "" {
		return " (output interface unknown)"
	}
	return " via " + iface
}

// Martian reports whether the kernel's routing (ip_route_input) drops q after
// PREROUTING as a martian: a loopback source or destination on a packet that came in
// by an interface other than lo, with route_localnet off. routeLocalnet nil: not known,
// not checked.
func Martian(routeLocalnet *bool, q *Packet) bool {
	return routeLocalnet != nil && !*routeLocalnet && q.InIface != "lo" && (q.Dst.IsLoopback() || q.Src.IsLoopback())
}

// natFirst reports whether nat chains see the packet: only an unconfirmed entry's
// first packet (new, or related to an expectation), as nf_nat_inet_fn.
func natFirst(p *Packet) bool {
	return p.CT.Status&netfilter.StatusConfirmed == 0 && (p.CT.State == netfilter.CtNew || p.CT.State == netfilter.CtRelated)
}

// hook runs the base chains at h; an outcome when one of them ends the packet.
func (w *walkState) hook(h netfilter.Hook, nat bool) *Outcome {
	w.o.Hooks = append(w.o.Hooks, h.String())
	w.tr.add(Step{Kind: StepHook, Hook: h.String(), Packet: w.pkt.String()})
	natDone := false
	v6 := w.pkt.Dst.Is6()
	for _, bc := range w.e.base[h] {
		if !bc.Family.Sees(v6) {
			continue
		}
		if bc.Type == "nat" && (!nat || natDone) {
			continue
		}
		t := w.e.rs.table(bc.Family, bc.Table)
		c := t.chain(bc.Chain)
		ctx := evalCtx{env: w.env, assumer: w.env, q: &w.pkt, tr: w.tr, t: t, hook: h, limit: &w.env.limit}
		v := ctx.runBase(c)
		ref := &DecisionRef{Hook: h.String(), Table: t.Family.String() + " " + t.Name, Chain: ctx.decChain}
		if r := ctx.decRule; r != nil {
			ref.Line, ref.Handle, ref.Rule = r.Line, r.Handle, r.Text
		} else {
			ref.Policy = c.Policy
		}
		if v.HasNAT {
			natDone = true
			w.applyNAT(h, v.NAT)
			continue
		}
		if bc.Type != "nat" {
			w.decision = ref
		}
		if v.Verdict != Accept {
			w.decision = ref
			return w.finish(v.Verdict, v)
		}
	}
	return nil
}

func (w *walkState) applyNAT(h netfilter.Hook, n NAT) {
	d := ApplyNAT(&w.pkt, h, n, w.ifaceAddr, w.env.local)
	switch n.Kind {
	case netfilter.DNAT, netfilter.Redirect:
		w.dnat = &d
		w.tr.add(Step{Kind: StepNote, Hook: h.String(), Detail: fmt.Sprintf("%s to %s", n.Kind, d.Dest())})
	default:
		w.snat = &d
		detail := n.Kind.String()
		if d.Addr.IsValid() {
			detail += " to " + d.Dest()
		}
		w.tr.add(Step{Kind: StepNote, Hook: h.String(), Detail: detail})
	}
}

// ifaceAddr is an interface's primary address, when the walk knows it.
func (w *walkState) ifaceAddr(iface string) (netip.Addr, bool) {
	a, ok := w.in.IfaceAddrs[iface]
	return a, ok && iface != ""
}

// ApplyNAT applies a nat chain's translation n at hook h to q, as the kernel's nf_nat
// does, and returns it as applied (the address and port q got). redirect takes the
// input interface's primary address in PREROUTING (ifaceAddr, else the lowest of
// local's addresses of q's family) and loopback in OUTPUT; masquerade the output
// interface's primary address (when ifaceAddr knows it; else the source address stays
// unknown and q's is kept). ifaceAddr may be nil.
func ApplyNAT(q *Packet, h netfilter.Hook, n NAT, ifaceAddr func(string) (netip.Addr, bool), local map[netip.Addr]bool) NAT {
	if ifaceAddr == nil {
		ifaceAddr = func(string) (netip.Addr, bool) { return netip.Addr{}, false }
	}
	switch n.Kind {
	case netfilter.DNAT, netfilter.Redirect:
		if n.Kind == netfilter.Redirect {
			n.Addr = netip.MustParseAddr("127.0.0.1")
			if q.Dst.Is6() {
				n.Addr = netip.IPv6Loopback()
			}
			if h == netfilter.Prerouting {
				if a, ok := ifaceAddr(q.InIface); ok && a.Is6() == q.Dst.Is6() {
					n.Addr = a
				} else {
					for a := range local {
						if a.Is6() == q.Dst.Is6() && (!n.Addr.IsLoopback() || a.Less(n.Addr)) {
							n.Addr = a
						}
					}
				}
			}
		}
		if n.Addr.IsValid() {
			q.Dst = n.Addr
		}
		if n.Port != 0 {
			q.DstPort = n.Port
		}
		q.CT.Status |= netfilter.StatusDstNAT
		n.Addr, n.Port = q.Dst, q.DstPort
		return n
	}
	if n.Kind == netfilter.Masquerade {
		if a, ok := ifaceAddr(q.OutIface); ok && a.Is6() == q.Src.Is6() {
			n.Addr = a
		}
	}
	if n.Addr.IsValid() {
		q.Src = n.Addr
		if n.Port != 0 {
			q.SrcPort = n.Port
		}
	}
	q.CT.Status |= netfilter.StatusSrcNAT
	return n
}

func (w *walkState) finish(v Verdict, cv ChainVerdict) *Outcome {
	o := w.o
	o.Verdict = v.String()
	if v == Reject {
		o.RejectWith = cv.Reject.String()
	}
	o.DecidedBy = "policy"
	if w.martian {
		o.DecidedBy, w.decision = "routing", nil
	}
	if w.env.limit.hit {
		o.DecidedBy, w.decision = "limit", nil
	}
	if w.decision != nil {
		o.Decision = w.decision
		if w.decision.Policy == "" {
			o.DecidedBy = "rule"
		}
	}
	if w.dnat != nil {
		s := w.dnat.Dest()
		o.DNATDestination = &s
	}
	if w.snat != nil {
		o.Masqueraded = true
		if w.snat.Kind == netfilter.SNAT || w.snat.Addr.IsValid() { // masquerade: when the interface's address is known
			s := w.snat.Dest()
			o.SNATSource = &s
		}
	}
	o.Mark = fmt.Sprintf("%#x", w.pkt.Mark)
	o.Packet = w.pkt.String()
	for _, s := range w.tr.Steps {
		if s.Kind == StepRule && s.Matched {
			o.MatchedRules = append(o.MatchedRules, RuleRef{Hook: s.Hook, Table: s.Family + " " + s.Table, Chain: s.Chain,
				Line: s.Line, Handle: s.Handle, Rule: s.Rule, Element: s.Element})
		}
	}
	o.Assumptions = w.env.assume
	detail := ""
	if o.DNATDestination != nil {
		detail += " dnat " + *o.DNATDestination
	}
	if o.Masqueraded {
		detail += " masqueraded"
	}
	w.tr.add(Step{Kind: StepVerdict, Verdict: o.Verdict, Detail: strings.TrimSpace(detail + " " + o.RejectWith)})
	o.key = outcomeKey(o)
	return o
}

// outcomeKey identifies an outcome for merging: everything observable except the
// probability and the rules on the way.
func outcomeKey(o *Outcome) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%s|", o.Verdict, o.RejectWith, o.DecidedBy)
	if d := o.Decision; d != nil {
		fmt.Fprintf(&b, "%s/%s/%s/%d/%d/%s|", d.Hook, d.Table, d.Chain, d.Line, d.Handle, d.Policy)
	}
	if o.DNATDestination != nil {
		b.WriteString(*o.DNATDestination)
	}
	fmt.Fprintf(&b, "|%v|", o.Masqueraded)
	if o.SNATSource != nil {
		b.WriteString(*o.SNATSource)
	}
	fmt.Fprintf(&b, "|%s|%s|%s|", o.Mark, o.Packet, strings.Join(o.Hooks, ","))
	for _, a := range o.Assumptions {
		fmt.Fprintf(&b, "%s:%d:%s=%v;", a.Chain, a.Line, a.Match, a.Matched)
	}
	return b.String()
}
