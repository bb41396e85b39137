package emulator

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
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

// WalkInput is a stand-alone packet walk through a node's hooks: the first packet of a
// connection, as `clusterlab trace` follows it.
type WalkInput struct {
	// Packet is the packet as it enters (its conntrack state is set to NEW).
	Packet Packet
	From   From
	// Local are the node's addresses (addrtype LOCAL, local delivery); loopback
	// addresses are always local.
	Local []netip.Addr
	// IfaceAddrs are the node's interfaces' primary addresses: the one MASQUERADE
	// takes for a packet leaving by OutIface (as the kernel's inet_select_addr), the
	// one REDIRECT takes for a packet that came in by InIface. Without them those
	// addresses are not known to the walk.
	IfaceAddrs map[string]netip.Addr
	// AllBranches follows every statistic choice (and both assumptions for every
	// match the emulator does not model) instead of drawing from Seed.
	AllBranches bool
	Seed        uint64
	// Time is the virtual clock (recent --seconds); zero means a fixed epoch.
	Time time.Time
	// MaxPaths bounds an all-branches exploration (default 4096).
	MaxPaths int
	// MaxSteps bounds the rule evaluations of one path (default DefaultMaxWalkSteps):
	// jumps without a loop can still visit a chain exponentially often (C0 jumps to C1
	// twice, C1 to C2 twice, ...). A path that reaches it stops with an UNKNOWN
	// outcome decided by "limit", its trace saying so.
	MaxSteps int
	// OutIface is the output interface routing picks for a packet that leaves the node
	// (FORWARD, POSTROUTING); empty when unknown. Packets to a local address leave
	// over "lo".
	OutIface string
	// Route, when set, is the node's routing table: the output interface for a
	// destination (after DNAT), "" when no route matches. It takes precedence over
	// OutIface.
	Route func(dst netip.Addr) string
	// IPVSLeg walks a packet IPVS forwards to a real server after it met a virtual
	// service at INPUT (ip_vs_nat_xmit): from OUTPUT (its nat table not run: the
	// connection's destination binding was made at PREROUTING) through POSTROUTING.
	IPVSLeg bool
	// RouteLocalnet, when set, is the node's net.ipv4.conf.*.route_localnet: false
	// drops (as the kernel's routing does) a packet arriving on an interface other than
	// lo with a loopback source or destination after PREROUTING, a NodePort DNATed to
	// 127.0.0.1 say. Nil: not known, not checked.
	RouteLocalnet *bool
	// Bridge, when set, is the bridge a pod's packet enters the node on: for a packet
	// from a pod on it whose destination (after DNAT) is on it too, its hairpin mode
	// and bridge-nf-call-iptables decide what the rules alone cannot (see Bridge).
	// Nil: not modelled (the packet is routed as if the pod had its own interface).
	Bridge *Bridge
	// CtNAT is the NAT binding of the existing connection a packet of --ctstate
	// ESTABLISHED belongs to (from the node's conntrack table): its destination is
	// rewritten at PREROUTING (or OUTPUT) and its source at POSTROUTING, where the nat
	// table ran for the connection's first packet.
	CtNAT *CtNAT
	// EveryRule scans every chain rule by rule, as the kernel does, so that the trace
	// lists every rule looked at, matched or not, instead of skipping through the chain
	// indexes the rules that cannot match (the outcomes are the same).
	EveryRule bool
	// Conntrack, when set, is the conntrack state of a packet of an existing connection
	// (ESTABLISHED, RELATED, a reply: its Status has StatusConfirmed) or of one
	// conntrack found no entry for (INVALID). Nil is the first packet of a new
	// connection (NEW). The nat table runs only for a first packet, as in the kernel.
	Conntrack *Conntrack
}

// RuleRef names a rule on a packet's path.
type RuleRef struct {
	Hook  string `json:"hook"`
	Table string `json:"table"`
	Chain string `json:"chain"`
	Line  int    `json:"line"`
	Rule  string `json:"rule"`
}

// DecisionRef names what decided an outcome: a rule (line and rule set) or a built-in
// chain's policy (policy set).
type DecisionRef struct {
	Hook   string `json:"hook"`
	Table  string `json:"table"`
	Chain  string `json:"chain"`
	Line   int    `json:"line,omitempty"`
	Rule   string `json:"rule,omitempty"`
	Policy string `json:"policy,omitempty"`
}

// AssumptionRef is an undecidable match (a module the emulator does not model) and
// the value assumed for it on an outcome's path.
type AssumptionRef struct {
	RuleRef
	Match   string `json:"match"`
	Matched bool   `json:"assumed_match"`
	// Condition is what was assumed, held the same on every rule of the path that
	// tests it ("set KUBE-X dst=10.96.0.1:80"), and Holds its assumed value (a
	// negated match tests the same condition: Matched is then !Holds). The first
	// rule that tested it is the RuleRef.
	Condition string `json:"condition"`
	Holds     bool   `json:"condition_holds"`
}

// Outcome is one possible fate of a walked packet.
type Outcome struct {
	// Probability of this outcome (the product of the statistic choices on its paths,
	// summed over merged paths). With assumptions it is conditional on them.
	Probability float64 `json:"probability"`
	// Verdict: ACCEPT (left the node: forwarded, or sent out by the node itself),
	// LOCAL (delivered to a local socket), DROP, REJECT, or UNKNOWN (a target the
	// emulator does not model decided).
	Verdict    string `json:"verdict"`
	RejectWith string `json:"reject_with,omitempty"`
	// DecidedBy is "rule", "policy", "limit" (the walk stopped at
	// WalkInput.MaxSteps rule evaluations), "routing" (a martian packet, see
	// WalkInput.RouteLocalnet) or "bridge" (Bridge says why); Decision names the rule or policy (null when no filter table
	// rule or policy was involved: a ruleset without a filter table accepts).
	DecidedBy string       `json:"decided_by"`
	Decision  *DecisionRef `json:"decision"`
	// DNATDestination is the destination a DNAT or REDIRECT chose ("ip:port"), or null.
	DNATDestination *string `json:"dnat_destination"`
	// Masqueraded is true when a MASQUERADE or SNAT rule translated the source.
	Masqueraded bool `json:"masqueraded"`
	// SNATSource is the source address SNAT chose; for MASQUERADE the output
	// interface's primary address (WalkInput.IfaceAddrs), null when it is not known.
	SNATSource *string `json:"snat_source"`
	// Mark is the packet mark at the end, in hex.
	Mark string `json:"mark"`
	// Packet is the packet at the end, after translations.
	Packet string `json:"packet"`
	// Hooks are the hooks the packet went through.
	Hooks []string `json:"hooks"`
	// MatchedRules are the rules that matched, in order.
	MatchedRules []RuleRef `json:"matched_rules"`
	// Assumptions lists the undecidable matches met on the way and what was assumed.
	Assumptions []AssumptionRef `json:"assumptions,omitempty"`
	// Paths counts the paths merged into this outcome.
	Paths int `json:"paths"`
	// MayDiffer lists the lines a lenient load skipped ("FILE:LINE") in a chain or
	// table this outcome's paths went through (or whose place is unknown): with them
	// the outcome could have been another.
	MayDiffer []string `json:"may_differ,omitempty"`
	// IPVS, for a packet delivered locally to an IPVS virtual service (a caller that
	// has the node's IPVS state fills it in): the service, the real server it goes to
	// and the packet's way on from there.
	IPVS *IPVSHop `json:"ipvs,omitempty"`
	// Bridge, for a pod's packet whose destination is on the bridge it came in on
	// (WalkInput.Bridge): the ports, the path and the settings that decided.
	Bridge *BridgeHop `json:"bridge,omitempty"`
	// Names are what the addresses the outcome shows are in the cluster (a caller that
	// has the cluster's manifests fills it in): "10.244.1.3": "pod default/web-0 on node-b".
	Names map[string]string `json:"names,omitempty"`

	// Trace is the (first merged) path's trace.
	Trace   *Trace            `json:"-"`
	choices []walkpath.Choice // the path's choices, for the tree rendering
	key     string            // identity for merging
}

// WalkResult is a walk's outcomes: merged (identical outcomes summed) and per path.
type WalkResult struct {
	Input     WalkInput
	Start     netfilter.Hook
	Outcomes  []*Outcome
	Paths     []*Outcome
	Truncated bool
}

// pathChooser replays forced choices and records new ones (all-branches exploration).
type pathChooser struct {
	forced []int
	pos    int
	taken  []walkpath.Choice
	prob   float64
	tr     *Trace
	memo   map[string]bool // condition -> the value assumed on this path
}

func (c *pathChooser) next(n int) int {
	alt := 0
	if c.pos < len(c.forced) {
		alt = c.forced[c.pos]
	}
	c.pos++
	return alt
}

func (c *pathChooser) chance(p float64) bool {
	if p >= 1 {
		return true
	}
	if p <= 0 {
		return false
	}
	alt := c.next(2)
	v := alt == 0
	q := p
	label := fmt.Sprintf("statistic p=%.11f: taken", p)
	if !v {
		q = 1 - p
		label = fmt.Sprintf("statistic p=%.11f: not taken", p)
	}
	c.prob *= q
	c.taken = append(c.taken, walkpath.Choice{Alt: alt, N: 2, P: q, Step: len(c.tr.Steps), Label: label})
	return v
}

func (c *pathChooser) pickRange(int) int { return -1 }

// unknown assumes a value for an undecidable condition, once a path: every rule that
// tests the same condition on the same packet sees the same value (a negated match
// its opposite).
func (c *pathChooser) unknown(cond, label string, neg bool) bool {
	if v, ok := c.memo[cond]; ok {
		return v != neg
	}
	alt := c.next(2)
	v := alt == 1 // the match as written matches
	text := fmt.Sprintf("assume %q does not match", label)
	if v {
		text = fmt.Sprintf("assume %q matches", label)
	}
	c.taken = append(c.taken, walkpath.Choice{Alt: alt, N: 2, P: 1, Step: len(c.tr.Steps), Label: text})
	if c.memo == nil {
		c.memo = make(map[string]bool)
	}
	c.memo[cond] = v != neg
	return v
}

// recordingChooser draws from an Env and records the choices (single-path walks).
type recordingChooser struct {
	envChooser
	prob  float64
	taken []walkpath.Choice
	tr    *Trace
}

func (c *recordingChooser) chance(p float64) bool {
	v := (&c.envChooser).chance(p)
	if p > 0 && p < 1 {
		q := p
		if !v {
			q = 1 - p
		}
		c.prob *= q
		c.taken = append(c.taken, walkpath.Choice{N: 2, P: q, Step: len(c.tr.Steps)})
	}
	return v
}

// DefaultMaxWalkSteps is a walk's bound on one path's rule evaluations when
// WalkInput.MaxSteps is not set: far above kube-proxy's rulesets (a path through
// 10,000 Services scanned rule by rule evaluates about 20,000), far below a runaway
// (20 levels of doubling jumps, 4 million, took 71 s).
const DefaultMaxWalkSteps = 1 << 18

// walkEnv is the Env of a stand-alone walk.
type walkEnv struct {
	*StaticEnv
}

func (walkEnv) DryRun() bool { return true }

// Walk follows the first packet of a connection through the node: it enters at
// PREROUTING, or at OUTPUT when it comes from the node (--from node, or its source is
// a local address). After PREROUTING (and its DNAT) a local destination goes to INPUT
// (LOCAL), any other through FORWARD and POSTROUTING (ACCEPT). After OUTPUT the packet
// goes through POSTROUTING and, when its destination is local, back in over loopback
// (PREROUTING without nat, INPUT) to LOCAL. A walk is a what-if: it changes no state.
func (e *Emulator) Walk(in WalkInput) (*WalkResult, error) {
	if !in.Packet.Src.IsValid() || !in.Packet.Dst.IsValid() {
		return nil, fmt.Errorf("walk: source and destination addresses are required")
	}
	if FamilyOf(in.Packet.Src) != e.Family() || FamilyOf(in.Packet.Dst) != e.Family() {
		return nil, fmt.Errorf("walk: %s packet %s -> %s in an %s ruleset", FamilyOf(in.Packet.Dst), in.Packet.Src, in.Packet.Dst, e.Family())
	}
	env := NewStaticEnv(in.Seed, in.Local...)
	env.IfaceAddrs = in.IfaceAddrs
	if !in.Time.IsZero() {
		env.Time = in.Time
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	res := &WalkResult{Input: in}
	res.Start = netfilter.Prerouting
	if in.IPVSLeg || in.From == FromNode || (in.From == FromAuto && env.AddrType(in.Packet.Src, "") == AddrLocal) {
		res.Start = netfilter.Output
	}
	if !in.AllBranches {
		tr := &Trace{}
		ch := &recordingChooser{envChooser: envChooser{env}, prob: 1, tr: tr}
		o := e.walkOnce(env, ch, tr, in, res.Start)
		o.Probability, o.choices = ch.prob, ch.taken
		o.MayDiffer = e.mayDiffer(tr)
		res.Paths = []*Outcome{o}
		res.Outcomes = []*Outcome{o}
		return res, nil
	}
	max := in.MaxPaths
	if max <= 0 {
		max = 4096
	}
	var forced []int
	merged := map[string]*Outcome{}
	for {
		tr := &Trace{}
		ch := &pathChooser{forced: forced, prob: 1, tr: tr}
		o := e.walkOnce(env, ch, tr, in, res.Start)
		o.Probability, o.choices = ch.prob, ch.taken
		o.MayDiffer = e.mayDiffer(tr)
		res.Paths = append(res.Paths, o)
		if m, ok := merged[o.key]; ok {
			m.Probability += o.Probability
			m.Paths++
			m.MayDiffer = unionSorted(m.MayDiffer, o.MayDiffer)
		} else {
			c := *o
			merged[o.key] = &c
			res.Outcomes = append(res.Outcomes, &c)
		}
		next, ok := walkpath.Next(ch.taken)
		if !ok {
			break
		}
		if len(res.Paths) >= max {
			res.Truncated = true
			break
		}
		forced = next
	}
	res.Outcomes = minimiseAssumptions(res.Outcomes)
	return res, nil
}

func (e *Emulator) walkOnce(env *StaticEnv, ch chooser, tr *Trace, in WalkInput, start netfilter.Hook) *Outcome {
	pkt := in.Packet
	pkt.CT = Conntrack{State: netfilter.CtNew}
	if in.Conntrack != nil {
		pkt.CT = *in.Conntrack
	}
	c := &evalCtx{pkt: &pkt, env: walkEnv{env}, ch: ch, st: e.st, dry: true, tr: tr, noIndex: in.EveryRule, ipvsOut: in.IPVSLeg,
		maxSteps: in.MaxSteps}
	if c.maxSteps <= 0 {
		c.maxSteps = DefaultMaxWalkSteps
	}
	o := &Outcome{Paths: 1, Trace: tr, MatchedRules: []RuleRef{}, Hooks: []string{}}
	var lastRule, lastFilter *Decision
	var dnat, snat *NAT
	isLocal := func(a netip.Addr) bool { return env.AddrType(a, "") == AddrLocal }
	martian := false // routing dropped it (route_localnet)
	bridged := false // the bridge decided (hairpin off, or iptables never saw it)
	finish := func(v Verdict, reject string, d *Decision) *Outcome {
		o.Verdict, o.RejectWith = v.String(), reject
		if d == nil {
			d = lastRule
			if d == nil {
				d = lastFilter
			}
		}
		o.DecidedBy = "policy"
		if martian {
			o.DecidedBy, d = "routing", nil
		}
		if bridged {
			o.DecidedBy, d = "bridge", nil
		}
		if c.limited {
			o.DecidedBy, d = "limit", nil
		}
		if d != nil {
			o.Decision = &DecisionRef{Hook: d.Hook.String(), Table: d.Table, Chain: d.Chain, Policy: d.Policy}
			if d.Rule != nil {
				o.DecidedBy = "rule"
				o.Decision.Line, o.Decision.Rule, o.Decision.Policy = d.Rule.Line, d.Rule.Text(d.Chain), ""
			}
		}
		if dnat != nil {
			s := dnat.Dest()
			o.DNATDestination = &s
		}
		if snat != nil {
			o.Masqueraded = true
			if snat.Kind == netfilter.SNAT || snat.Addr.IsValid() { // MASQUERADE: when the interface's address is known
				s := snat.Dest()
				o.SNATSource = &s
			}
		}
		o.Mark = fmt.Sprintf("%#x", pkt.Mark)
		o.Packet = pkt.String()
		for _, s := range tr.Steps {
			if s.Kind == StepRule && s.Matched != nil && *s.Matched {
				o.MatchedRules = append(o.MatchedRules, RuleRef{Hook: s.Hook, Table: s.Table, Chain: s.Chain, Line: s.Line, Rule: s.Rule})
			}
		}
		if o.Bridge != nil {
			bridgeReply(o.Bridge, in.Packet.Src, in.Packet.Dst, pkt.Dst, o.Masqueraded)
		}
		seen := map[string]bool{}
		for _, a := range c.assume {
			if seen[a.Condition] {
				continue // the same condition tested again on the path: one assumption
			}
			seen[a.Condition] = true
			ref := RuleRef{Hook: a.Hook.String()}
			if a.Rule != nil { // else a node setting (the bridge's), not a rule's match
				ref = RuleRef{Hook: a.Hook.String(), Table: a.Table, Chain: a.Chain, Line: a.Rule.Line, Rule: a.Rule.Text(a.Chain)}
			}
			o.Assumptions = append(o.Assumptions, AssumptionRef{RuleRef: ref,
				Match: a.Match, Matched: a.Matched, Condition: a.Condition, Holds: a.Holds})
		}
		detail := ""
		if o.DNATDestination != nil {
			detail += " dnat " + *o.DNATDestination
		}
		if o.Masqueraded {
			detail += " masqueraded"
		}
		tr.add(Step{Kind: StepVerdict, Verdict: o.Verdict, Detail: strings.TrimSpace(detail + " " + o.RejectWith)}, c)
		o.key = outcomeKey(o)
		return o
	}
	run := func(h netfilter.Hook) *Outcome {
		o.Hooks = append(o.Hooks, h.String())
		tr.add(Step{Kind: StepHook, Hook: h.String(), Packet: pkt.String()}, c)
		hr := c.evalHook(e.rs, h)
		for i := range hr.Tables {
			d := hr.Tables[i].Decision
			if d.Table == TableNAT {
				continue
			}
			if d.Rule != nil {
				lastRule = &d
			} else if d.Table == TableFilter {
				lastFilter = &d
			}
		}
		if hr.NAT != nil {
			switch hr.NAT.Kind {
			case netfilter.DNAT, netfilter.Redirect:
				dnat = hr.NAT
			default:
				snat = hr.NAT
			}
		}
		if hr.Verdict != Accept {
			d := hr.Decision
			return finish(hr.Verdict, hr.RejectWith, &d)
		}
		return nil
	}
	ctDNAT := func() {
		if n := in.CtNAT; n != nil && n.DNAT.IsValid() && !natFirst(&pkt) {
			pkt.Dst, pkt.DstPort = n.DNAT.Addr(), n.DNAT.Port()
			dnat = &NAT{Kind: netfilter.DNAT, Addr: n.DNAT.Addr(), Port: n.DNAT.Port()}
			tr.add(Step{Kind: StepNote, Detail: "conntrack: the connection's binding DNATs the packet to " + n.DNAT.String() + " (" + n.Entry + ")"}, c)
		}
	}
	ctSNAT := func() {
		if n := in.CtNAT; n != nil && n.SNAT.IsValid() && !natFirst(&pkt) {
			pkt.Src, pkt.SrcPort = n.SNAT.Addr(), n.SNAT.Port()
			snat = &NAT{Kind: netfilter.SNAT, Addr: n.SNAT.Addr(), Port: n.SNAT.Port()}
			tr.add(Step{Kind: StepNote, Detail: "conntrack: the connection's binding SNATs the packet from " + n.SNAT.String()}, c)
		}
	}
	if start == netfilter.Prerouting {
		br := in.bridgeFor()
		var hop *BridgeHop
		bridgeOut := "" // the bridge device, out of which a packet DNATed back onto it leaves
		src, origDst := pkt.Src, pkt.Dst
		if br != nil {
			if pkt.InIface == "" {
				pkt.InIface = br.Name // the bridge device, as iptables sees a bridged or routed frame
			}
			hop = &BridgeHop{Bridge: br.Name, InPort: br.portOf(src)}
			if br.has(origDst, src) && !isLocal(origDst) {
				// A frame to another pod on the bridge: bridged, seen by iptables only
				// through br_netfilter.
				o.Bridge = hop
				c.hook = netfilter.Prerouting
				if !c.bridgeNFCall(br, hop) {
					bridgeUnseen(br, hop, origDst)
					tr.add(Step{Kind: StepNote, Detail: "bridge: " + hop.Reason}, c)
					bridged = true
					return finish(Accept, "", nil)
				}
				hop.Path, hop.OutPort = "bridged", br.portOf(origDst)
				hop.Reason = fmt.Sprintf("bridged: %s is on %s; br_netfilter hands the frame to iptables", origDst, br.name())
			}
		}
		if o := run(netfilter.Prerouting); o != nil {
			return o
		}
		ctDNAT()
		if br != nil && pkt.Dst != origDst && br.has(pkt.Dst, src) && !isLocal(pkt.Dst) {
			o.Bridge = hop
			c.hook = netfilter.Prerouting
			if !c.bridgeAfterDNAT(br, hop, src, pkt.Dst) {
				bridged = true
				return finish(Drop, "", nil)
			}
			bridgeOut = br.Name
		}
		if in.RouteLocalnet != nil && !*in.RouteLocalnet && pkt.InIface != LoopbackIface && (pkt.Dst.IsLoopback() || pkt.Src.IsLoopback()) {
			// ip_route_input: a loopback address arriving on another interface is a
			// martian unless route_localnet is set.
			tr.add(Step{Kind: StepNote, Detail: fmt.Sprintf("routing: %s -> %s in %s is martian with route_localnet=0: dropped", pkt.Src, pkt.Dst, pkt.InIface)}, c)
			martian = true
			return finish(Drop, "", nil)
		}
		if isLocal(pkt.Dst) {
			tr.add(Step{Kind: StepNote, Detail: fmt.Sprintf("routing: %s is local: INPUT", pkt.Dst)}, c)
			if o := run(netfilter.Input); o != nil {
				return o
			}
			return finish(Local, "", nil)
		}
		pkt.OutIface = in.outIface(pkt.Dst)
		if pkt.OutIface == "" {
			pkt.OutIface = bridgeOut
		}
		tr.add(Step{Kind: StepNote, Detail: fmt.Sprintf("routing: %s is not local: FORWARD%s", pkt.Dst, outVia(pkt.OutIface))}, c)
		if o := run(netfilter.Forward); o != nil {
			return o
		}
		if o := run(netfilter.Postrouting); o != nil {
			return o
		}
		ctSNAT()
		return finish(Accept, "", nil)
	}
	// A locally generated packet is routed before OUTPUT (-o matches there): the hook
	// runs with that interface even when nat OUTPUT's DNAT re-routes it
	// (ip_route_me_harder changes the packet's route, not the hook's out device).
	if isLocal(pkt.Dst) {
		pkt.OutIface = LoopbackIface
	} else {
		pkt.OutIface = in.outIface(pkt.Dst)
	}
	if o := run(netfilter.Output); o != nil {
		return o
	}
	ctDNAT()
	local := isLocal(pkt.Dst)
	if local {
		pkt.OutIface = "lo"
		tr.add(Step{Kind: StepNote, Detail: fmt.Sprintf("routing: %s is local: out over loopback", pkt.Dst)}, c)
	} else {
		pkt.OutIface = in.outIface(pkt.Dst)
		tr.add(Step{Kind: StepNote, Detail: fmt.Sprintf("routing: %s is not local%s", pkt.Dst, outVia(pkt.OutIface))}, c)
	}
	if o := run(netfilter.Postrouting); o != nil {
		return o
	}
	ctSNAT()
	if !local {
		return finish(Accept, "", nil)
	}
	pkt.CT.Status |= netfilter.StatusConfirmed
	pkt.InIface = "lo"
	tr.add(Step{Kind: StepNote, Detail: "conntrack: entry confirmed; back in over loopback"}, c)
	if o := run(netfilter.Prerouting); o != nil {
		return o
	}
	if o := run(netfilter.Input); o != nil {
		return o
	}
	return finish(Local, "", nil)
}

// outIface is the interface a packet to dst leaves by: the routing table's when there
// is one, else OutIface.
func (in *WalkInput) outIface(dst netip.Addr) string {
	if in.Route != nil {
		return in.Route(dst)
	}
	return in.OutIface
}

func outVia(iface string) string {
	if iface == "" {
		return " (output interface unknown)"
	}
	return " via " + iface
}

// outcomeKey identifies an outcome for merging: everything observable except the
// probability and the rules on the way.
func outcomeKey(o *Outcome) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%s|", o.Verdict, o.RejectWith, o.DecidedBy)
	if o.Decision != nil {
		fmt.Fprintf(&b, "%s/%s/%s/%d/%s|", o.Decision.Hook, o.Decision.Table, o.Decision.Chain, o.Decision.Line, o.Decision.Policy)
	}
	if o.DNATDestination != nil {
		b.WriteString(*o.DNATDestination)
	}
	fmt.Fprintf(&b, "|%v|", o.Masqueraded)
	if o.SNATSource != nil {
		b.WriteString(*o.SNATSource)
	}
	fmt.Fprintf(&b, "|%s|%s|%s|%s|", o.Mark, o.Packet, strings.Join(o.Hooks, ","), o.Bridge.key())
	b.WriteString(assumptionsKey(o.Assumptions, ""))
	return b.String()
}

// assumptionsKey renders a set of assumptions for comparison, leaving out the
// condition skip.
func assumptionsKey(as []AssumptionRef, skip string) string {
	var parts []string
	for _, a := range as {
		if a.Condition != skip {
			parts = append(parts, fmt.Sprintf("%s=%v", a.Condition, a.Holds))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ";")
}

// observableKey is outcomeKey without the assumptions.
func observableKey(o *Outcome) string {
	k := outcomeKey(&Outcome{Verdict: o.Verdict, RejectWith: o.RejectWith, DecidedBy: o.DecidedBy, Decision: o.Decision,
		DNATDestination: o.DNATDestination, Masqueraded: o.Masqueraded, SNATSource: o.SNATSource, Mark: o.Mark, Packet: o.Packet, Hooks: o.Hooks, Bridge: o.Bridge})
	return k
}

// minimiseAssumptions merges outcomes that differ only in one assumption, the same
// fate with the same probability whichever value the condition has: that condition
// does not decide it, and the merged outcome no longer lists it. Repeated until no
// two outcomes merge, so that an assumption an outcome lists is one its fate depends
// on. The order of the first of each merged group is kept.
func minimiseAssumptions(outs []*Outcome) []*Outcome {
	for {
		merged := false
	scan:
		for i := 0; i < len(outs); i++ {
			for j := i + 1; j < len(outs); j++ {
				a, b := outs[i], outs[j]
				if len(a.Assumptions) != len(b.Assumptions) || len(a.Assumptions) == 0 || math.Abs(a.Probability-b.Probability) > 1e-12 || observableKey(a) != observableKey(b) {
					continue
				}
				for _, as := range a.Assumptions {
					bv, ok := holdsIn(b.Assumptions, as.Condition)
					if !ok || bv == as.Holds || assumptionsKey(a.Assumptions, as.Condition) != assumptionsKey(b.Assumptions, as.Condition) {
						continue
					}
					c := *a
					c.Assumptions = nil
					for _, x := range a.Assumptions {
						if x.Condition != as.Condition {
							c.Assumptions = append(c.Assumptions, x)
						}
					}
					c.Paths = a.Paths + b.Paths
					c.MayDiffer = unionSorted(a.MayDiffer, b.MayDiffer)
					c.key = outcomeKey(&c)
					outs[i] = &c
					outs = append(outs[:j], outs[j+1:]...)
					merged = true
					break scan
				}
			}
		}
		if !merged {
			return outs
		}
	}
}

func holdsIn(as []AssumptionRef, cond string) (bool, bool) {
	for _, a := range as {
		if a.Condition == cond {
			return a.Holds, true
		}
	}
	return false, false
}

// mayDiffer returns the skipped lines (Skipped) that could have changed a path: those
// in a chain the path went through, or in a table it went through when their chain is
// not known, or whose table is not known.
func (e *Emulator) mayDiffer(tr *Trace) []string {
	if len(e.skipped) == 0 || tr == nil {
		return nil
	}
	tables, chains := map[string]bool{}, map[string]bool{}
	for _, st := range tr.Steps {
		if st.Table != "" {
			tables[st.Table] = true
			if st.Chain != "" {
				chains[st.Table+"/"+st.Chain] = true
			}
		}
	}
	var out []string
	for _, sl := range e.skipped {
		if sl.Table == "" || sl.Chain == "" && tables[sl.Table] || chains[sl.Table+"/"+sl.Chain] {
			out = append(out, fmt.Sprintf("%s:%d", sl.File, sl.Line))
		}
	}
	return unionSorted(nil, out)
}

// unionSorted merges two lists of FILE:LINE names, without duplicates, in file then
// line order.
func unionSorted(a, b []string) []string {
	if len(b) == 0 {
		return a
	}
	out := slices.Concat(a, b)
	slices.SortFunc(out, func(x, y string) int {
		fx, lx, _ := strings.Cut(x, ":")
		fy, ly, _ := strings.Cut(y, ":")
		if c := strings.Compare(fx, fy); c != 0 {
			return c
		}
		nx, _ := strconv.Atoi(lx)
		ny, _ := strconv.Atoi(ly)
		return nx - ny
	})
	return slices.Compact(out)
}

// IPVSHop is what IPVS did with a packet delivered to one of its virtual services.
type IPVSHop struct {
	Service    string `json:"service"`     // "TCP 10.96.0.1:443 rr"
	RealServer string `json:"real_server"` // "172.18.0.2:6443" (empty when none)
	Reason     string `json:"reason"`
	// Then is the forwarded packet's walk from OUTPUT (WalkInput.IPVSLeg).
	Then []*Outcome `json:"then,omitempty"`
}

// CtNAT is an existing connection's NAT binding (see netfilter.NATBinding).
type CtNAT = netfilter.NATBinding
