package nodewalk

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sort"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
	ipt "github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	nftemu "github.com/clusterlab/clusterlab/proxy/nftables/emulator"
)

// Sources of the rules a unit runs.
const (
	SourceIPTables = "iptables"
	SourceNFT      = "nft"
)

// Node is a node's rules: its iptables tables (one family's, from iptables-save) and
// its nftables ruleset; either may be nil.
type Node struct {
	IPTables *ipt.Emulator
	NFT      *nftemu.Emulator
	// SkipNFT names nft tables ("ip filter") not to run: iptables-nft's copies of the
	// tables IPTables holds (IPTablesNFTCopies).
	SkipNFT map[string]bool
}

// Input is the packet and what the walk knows of the node; the fields mean what the
// iptables walk's (ipt.WalkInput) do.
type Input struct {
	// Packet is the packet as it enters (its conntrack state NEW unless Conntrack).
	Packet ipt.Packet
	From   ipt.From
	// Local are the node's addresses; loopback addresses are always local.
	Local []netip.Addr
	// IfaceAddrs are the interfaces' primary addresses (masquerade, redirect); they
	// are local.
	IfaceAddrs map[string]netip.Addr
	// OutIface is the output interface of a packet that leaves the node, when Route
	// is nil.
	OutIface string
	// Route is the routing table: the output interface for a destination (after DNAT).
	Route func(netip.Addr) string
	// RouteLocalnet: false drops a loopback source or destination that came in by
	// another interface than lo after PREROUTING (nil: not checked).
	RouteLocalnet *bool
	// CtNAT is an established packet's connection's NAT binding.
	CtNAT *netfilter.NATBinding
	// Conntrack is the conntrack state of a packet of an existing connection; nil for
	// a first packet.
	Conntrack   *ipt.Conntrack
	AllBranches bool
	Seed        uint64
	// MaxPaths bounds an all-branches exploration (default 4096).
	MaxPaths int
}

// unit is one base chain at one hook: an iptables table's built-in chain or an nft
// base chain.
type unit struct {
	prio   int
	source string
	nat    bool
	table  string // "nat" (iptables) or "ip kube-proxy" (nft)
	chain  string // "PREROUTING" or "nat-prerouting"
	ipt    string // the iptables table
	bc     nftemu.BaseChain
	filter bool // its policy is a filtering decision (iptables filter, nft non-nat)
}

// iptPriority is an iptables table's priority at a hook (NF_IP_PRI_*).
func iptPriority(table string, h netfilter.Hook) int {
	switch table {
	case ipt.TableRaw:
		return netfilter.PriorityRaw
	case ipt.TableMangle:
		return netfilter.PriorityMangle
	case ipt.TableNAT:
		if h == netfilter.Prerouting || h == netfilter.Output {
			return netfilter.PriorityNATDst
		}
		return netfilter.PriorityNATSrc
	case ipt.TableSecurity:
		return netfilter.PrioritySecurity
	}
	return netfilter.PriorityFilter
}

// units lists what runs at hook h for a packet of the family v6, in the kernel's
// order: by priority; on a tie the nft base chain first (a hook registered later runs
// before one of the same priority registered earlier, and kube-proxy creates its table
// after the node's iptables tables exist).
func (n *Node) units(h netfilter.Hook, v6 bool) []unit {
	var us []unit
	if n.NFT != nil {
		for _, bc := range n.NFT.BaseChains(h) {
			table := bc.Family.String() + " " + bc.Table
			if !bc.Family.Sees(v6) || n.SkipNFT[table] {
				continue
			}
			us = append(us, unit{prio: bc.Priority, source: SourceNFT, nat: bc.Type == "nat", table: table, chain: bc.Chain, bc: bc, filter: bc.Type != "nat"})
		}
	}
	if n.IPTables != nil && (n.IPTables.Family() == ipt.IPv6) == v6 {
		for _, t := range ipt.TablesAt(h) {
			if !n.IPTables.HasTable(t) {
				continue
			}
			us = append(us, unit{prio: iptPriority(t, h), source: SourceIPTables, nat: t == ipt.TableNAT, table: t, chain: h.String(), ipt: t, filter: t == ipt.TableFilter})
		}
	}
	sort.SliceStable(us, func(i, j int) bool {
		if us[i].prio != us[j].prio {
			return us[i].prio < us[j].prio
		}
		return us[i].source == SourceNFT && us[j].source != SourceNFT
	})
	return us
}

// IPTablesNFTCopies returns the tables of nft's listing ("ip filter", "ip6 nat") that
// are iptables-nft's own tables holding what the iptables dump d holds: a table of an
// iptables table's name, of d's family, with a base chain named as iptables' built-in
// chains, when d has that table too.
func IPTablesNFTCopies(d *ipt.Emulator, n *nftemu.Emulator) []string {
	if d == nil || n == nil {
		return nil
	}
	fam := nftemu.FamilyIP
	if d.Family() == ipt.IPv6 {
		fam = nftemu.FamilyIP6
	}
	builtin := map[string]bool{"PREROUTING": true, "INPUT": true, "FORWARD": true, "OUTPUT": true, "POSTROUTING": true}
	var out []string
	for _, t := range n.Ruleset().Tables {
		if t.Family != fam || !d.HasTable(t.Name) {
			continue
		}
		for _, c := range t.Chains {
			if c.Hook != "" && builtin[c.Name] {
				out = append(out, t.Family.String()+" "+t.Name)
				break
			}
		}
	}
	return out
}

// Walk follows the packet through the node, hook by hook, every unit at a hook in
// priority order. A walk is a what-if: it changes no state.
func Walk(n *Node, in Input) (*Result, error) {
	p := in.Packet
	if !p.Src.IsValid() || !p.Dst.IsValid() {
		return nil, fmt.Errorf("walk: source and destination addresses are required")
	}
	if p.Src.Is4() != p.Dst.Is4() {
		return nil, fmt.Errorf("walk: %s and %s are of different IP families", p.Src, p.Dst)
	}
	if n.IPTables != nil && ipt.FamilyOf(p.Dst) != n.IPTables.Family() {
		return nil, fmt.Errorf("walk: %s packet %s -> %s in an %s iptables ruleset", ipt.FamilyOf(p.Dst), p.Src, p.Dst, n.IPTables.Family())
	}
	local := map[netip.Addr]bool{}
	for _, a := range in.Local {
		local[a.Unmap()] = true
	}
	for _, a := range in.IfaceAddrs {
		local[a.Unmap()] = true
	}
	res := &Result{Input: in, Start: netfilter.Prerouting}
	if in.From == ipt.FromNode || (in.From == ipt.FromAuto && (local[p.Src] || p.Src.IsLoopback())) {
		res.Start = netfilter.Output
	}
	var hooks [netfilter.NumHooks][]unit
	for h := range hooks {
		hooks[h] = n.units(netfilter.Hook(h), p.Dst.Is6())
	}
	maxPaths := in.MaxPaths
	if maxPaths <= 0 {
		maxPaths = 4096
	}
	var forced []int
	merged := map[string]*Outcome{}
	for {
		pa := &path{all: in.AllBranches, forced: forced, prob: 1, rng: rand.New(rand.NewPCG(in.Seed, 0x6e6f6465))}
		w := &walker{n: n, in: &in, units: &hooks, local: local, path: pa, pkt: in.Packet,
			o: &Outcome{Paths: 1, MatchedRules: []RuleRef{}, Hooks: []string{}}}
		pa.steps = &w.o.Trace
		o := w.run(res.Start)
		o.Probability, o.choices = pa.prob, pa.taken
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
		next, ok := pa.nextPath()
		if !ok {
			break
		}
		if len(res.Paths) >= maxPaths {
			res.Truncated = true
			break
		}
		forced = next
	}
	return res, nil
}

// walker is one path's walk.
type walker struct {
	n     *Node
	in    *Input
	units *[netfilter.NumHooks][]unit
	local map[netip.Addr]bool
	*path
	pkt ipt.Packet
	o   *Outcome
	// dnat and snat are the translations made (their Dest); decision the last
	// filtering rule, policy the last filtering policy; martian: routing dropped it.
	dnat, snat       *string
	masq             bool
	decision, policy *DecisionRef
	martian          bool
	cur              *unit // the unit running (nft assumptions)
	curHook          netfilter.Hook
	ctNote           bool
}

func (w *walker) isLocal(a netip.Addr) bool { return a.IsLoopback() || w.local[a.Unmap()] }

func (w *walker) note(s string) { w.o.Trace = append(w.o.Trace, Step{Kind: "note", Text: "  " + s}) }

func (w *walker) outIface(dst netip.Addr) string {
	if w.in.Route != nil {
		return w.in.Route(dst)
	}
	return w.in.OutIface
}

func (w *walker) run(start netfilter.Hook) *Outcome {
	w.pkt.CT = ipt.Conntrack{State: netfilter.CtNew}
	if w.in.Conntrack != nil {
		w.pkt.CT = *w.in.Conntrack
	}
	nat := natFirst(&w.pkt)
	if !nat {
		w.note(fmt.Sprintf("conntrack: %s, not the first packet of the connection: nat chains and tables are not run (the conntrack entry's binding applies)", w.pkt.CT.State))
	}
	ctDNAT := func() {
		if b := w.in.CtNAT; b != nil && b.DNAT.IsValid() && !nat {
			w.pkt.Dst, w.pkt.DstPort = b.DNAT.Addr(), b.DNAT.Port()
			s := b.DNAT.String()
			w.dnat = &s
			w.note("conntrack: the connection's binding DNATs the packet to " + s + " (" + b.Entry + ")")
		}
	}
	ctSNAT := func() {
		if b := w.in.CtNAT; b != nil && b.SNAT.IsValid() && !nat {
			w.pkt.Src, w.pkt.SrcPort = b.SNAT.Addr(), b.SNAT.Port()
			s := b.SNAT.String()
			w.snat, w.masq = &s, true
			w.note("conntrack: the connection's binding SNATs the packet from " + s)
		}
	}
	if start == netfilter.Prerouting {
		if o := w.hook(netfilter.Prerouting, nat); o != nil {
			return o
		}
		ctDNAT()
		q := toNFT(&w.pkt)
		if nftemu.Martian(w.in.RouteLocalnet, &q) {
			w.note(fmt.Sprintf("routing: %s -> %s in %s is martian with route_localnet=0: dropped", w.pkt.Src, w.pkt.Dst, w.pkt.InIface))
			w.martian = true
			return w.finish(ipt.Drop.String(), "", nil)
		}
		if w.isLocal(w.pkt.Dst) {
			w.note(fmt.Sprintf("routing: %s is local: INPUT", w.pkt.Dst))
			if o := w.hook(netfilter.Input, nat); o != nil {
				return o
			}
			return w.finish(ipt.Local.String(), "", nil)
		}
		w.pkt.OutIface = w.outIface(w.pkt.Dst)
		w.note(fmt.Sprintf("routing: %s is not local: FORWARD%s", w.pkt.Dst, nftemu.OutVia(w.pkt.OutIface)))
		if o := w.hook(netfilter.Forward, nat); o != nil {
			return o
		}
		if o := w.hook(netfilter.Postrouting, nat); o != nil {
			return o
		}
		ctSNAT()
		return w.finish(ipt.Accept.String(), "", nil)
	}
	if o := w.hook(netfilter.Output, nat); o != nil {
		return o
	}
	ctDNAT()
	local := w.isLocal(w.pkt.Dst)
	if local {
		w.pkt.OutIface = "lo"
		w.note(fmt.Sprintf("routing: %s is local: out over loopback", w.pkt.Dst))
	} else {
		w.pkt.OutIface = w.outIface(w.pkt.Dst)
		w.note(fmt.Sprintf("routing: %s is not local%s", w.pkt.Dst, nftemu.OutVia(w.pkt.OutIface)))
	}
	if o := w.hook(netfilter.Postrouting, nat); o != nil {
		return o
	}
	ctSNAT()
	if !local {
		return w.finish(ipt.Accept.String(), "", nil)
	}
	w.pkt.CT.Status |= netfilter.StatusConfirmed
	w.pkt.InIface = "lo"
	w.note("conntrack: entry confirmed; back in over loopback (nat is not run again)")
	if o := w.hook(netfilter.Prerouting, false); o != nil {
		return o
	}
	if o := w.hook(netfilter.Input, false); o != nil {
		return o
	}
	return w.finish(ipt.Local.String(), "", nil)
}

// natFirst reports whether nat sees the packet: only an unconfirmed entry's first
// packet (new, or related to an expectation), as nf_nat_inet_fn.
func natFirst(p *ipt.Packet) bool {
	return p.CT.Status&netfilter.StatusConfirmed == 0 && (p.CT.State == netfilter.CtNew || p.CT.State == netfilter.CtRelated)
}

// hook runs every unit at h in order; an outcome when one of them ends the packet.
// nat units run only when nat is true, and only until one of them translated.
func (w *walker) hook(h netfilter.Hook, nat bool) *Outcome {
	w.o.Hooks = append(w.o.Hooks, h.String())
	w.o.Trace = append(w.o.Trace, Step{Kind: "hook", Hook: h.String(), Text: fmt.Sprintf("%s %s", h, w.pkt.String())})
	w.curHook = h
	natDone := false
	for i := range w.units[h] {
		u := &w.units[h][i]
		if u.nat && !nat {
			continue
		}
		if u.nat && natDone {
			w.note(fmt.Sprintf("%s %s %s (priority %d) not run: the connection is already translated at this hook", u.source, u.table, u.chain, u.prio))
			continue
		}
		w.cur = u
		w.o.Trace = append(w.o.Trace, Step{Kind: "chain", Source: u.source, Hook: h.String(), Table: u.table, Chain: u.chain,
			Text: fmt.Sprintf("  [%s] %s %s (priority %d)", u.source, u.table, u.chain, u.prio)})
		var r unitResult
		if u.source == SourceIPTables {
			r = w.runIPT(u, h)
		} else {
			r = w.runNFT(u, h)
		}
		if r.nat {
			natDone = true
		}
		if !u.nat && r.decision != nil {
			if r.decision.Policy == "" {
				w.decision = r.decision
			} else if u.filter {
				w.policy = r.decision
			}
		}
		if r.verdict != ipt.Accept.String() {
			return w.finish(r.verdict, r.rejectWith, r.decision)
		}
	}
	return nil
}

// unitResult is what one unit did.
type unitResult struct {
	verdict    string
	rejectWith string
	decision   *DecisionRef
	nat        bool
}

// runIPT runs an iptables table's built-in chain for h on the walk's packet.
func (w *walker) runIPT(u *unit, h netfilter.Hook) unitResult {
	env := &iptEnv{StaticEnv: ipt.NewStaticEnv(w.in.Seed), w: w}
	for a := range w.local {
		env.Local = append(env.Local, a)
	}
	env.IfaceAddrs = w.in.IfaceAddrs
	tr := &ipt.Trace{}
	tres := w.n.IPTables.EvalTable(env, u.ipt, h, &w.pkt, tr)
	for _, s := range tr.Steps {
		if s.Kind == ipt.StepTable {
			continue
		}
		st := Step{Kind: string(s.Kind), Source: SourceIPTables, Hook: s.Hook, Table: s.Table, Chain: s.Chain, Line: s.Line, Rule: s.Rule, Text: "  " + s.String()}
		st.Matched = s.Matched != nil && *s.Matched
		w.o.Trace = append(w.o.Trace, st)
		if s.Kind == ipt.StepRule && st.Matched {
			w.o.MatchedRules = append(w.o.MatchedRules, RuleRef{Source: SourceIPTables, Hook: s.Hook, Table: s.Table, Chain: s.Chain, Line: s.Line, Rule: s.Rule})
		}
	}
	for _, a := range tres.Assumptions {
		w.addAssumption(AssumptionRef{
			RuleRef: RuleRef{Source: SourceIPTables, Hook: a.Hook.String(), Table: a.Table, Chain: a.Chain, Line: a.Rule.Line, Rule: a.Rule.Text(a.Chain)},
			Match:   a.Match, Matched: a.Matched, Condition: SourceIPTables + " " + a.Condition, Holds: a.Holds})
	}
	d := tres.Decision
	ref := &DecisionRef{Source: SourceIPTables, Hook: h.String(), Table: d.Table, Chain: d.Chain, Policy: d.Policy}
	if d.Rule != nil {
		ref.Line, ref.Rule, ref.Policy = d.Rule.Line, d.Rule.Text(d.Chain), ""
	} else if ref.Policy == "" {
		ref.Policy = "ACCEPT"
	}
	r := unitResult{verdict: tres.Verdict.String(), rejectWith: tres.RejectWith, decision: ref}
	if n := tres.NAT; n != nil {
		r.nat = true
		s := n.Dest()
		switch n.Kind {
		case netfilter.DNAT, netfilter.Redirect:
			w.dnat = &s
		default:
			w.masq = true
			w.snat = nil
			if n.Kind == netfilter.SNAT || n.Addr.IsValid() {
				w.snat = &s
			}
		}
	}
	return r
}

// runNFT runs an nft base chain for h on the walk's packet.
func (w *walker) runNFT(u *unit, h netfilter.Hook) unitResult {
	q := toNFT(&w.pkt)
	env := &nftEnv{w: w}
	tr := &nftemu.Trace{}
	v := w.n.NFT.RunChain(env, u.bc, &q, tr)
	for _, s := range tr.Steps {
		if s.Kind == nftemu.StepChain {
			continue
		}
		table := s.Family + " " + s.Table
		st := Step{Kind: s.Kind, Source: SourceNFT, Hook: s.Hook, Table: table, Chain: s.Chain, Line: s.Line, Handle: s.Handle, Rule: s.Rule, Matched: s.Matched, Element: s.Element, Text: "  " + s.String()}
		w.o.Trace = append(w.o.Trace, st)
		if s.Kind == nftemu.StepRule && s.Matched {
			w.o.MatchedRules = append(w.o.MatchedRules, RuleRef{Source: SourceNFT, Hook: s.Hook, Table: table, Chain: s.Chain, Line: s.Line, Handle: s.Handle, Rule: s.Rule, Element: s.Element})
		}
	}
	ref := &DecisionRef{Source: SourceNFT, Hook: h.String(), Table: u.table, Chain: v.Chain}
	if v.Rule != nil {
		ref.Line, ref.Handle, ref.Rule = v.Rule.Line, v.Rule.Handle, v.Rule.Text
	} else {
		ref.Chain = u.chain
		ref.Policy = "accept"
		if v.Verdict == nftemu.Drop {
			ref.Policy = "drop"
		}
	}
	r := unitResult{verdict: v.Verdict.String(), decision: ref}
	if v.Verdict == nftemu.Reject {
		r.rejectWith = v.Reject.String()
	}
	if v.HasNAT {
		r.nat = true
		ifaceAddr := func(iface string) (netip.Addr, bool) {
			a, ok := w.in.IfaceAddrs[iface]
			return a, ok && iface != ""
		}
		d := nftemu.ApplyNAT(&q, h, v.NAT, ifaceAddr, w.local)
		s := d.Dest()
		detail := d.Kind.String()
		switch d.Kind {
		case netfilter.DNAT, netfilter.Redirect:
			w.dnat = &s
			detail += " to " + s
		default:
			w.masq = true
			w.snat = nil
			if d.Kind == netfilter.SNAT || d.Addr.IsValid() {
				w.snat = &s
				detail += " to " + s
			}
		}
		w.note(h.String() + ": " + detail)
	}
	fromNFT(&w.pkt, &q)
	return r
}

// addAssumption records an assumption once per condition and path.
func (w *walker) addAssumption(a AssumptionRef) {
	for _, x := range w.o.Assumptions {
		if x.Condition == a.Condition {
			return
		}
	}
	w.o.Assumptions = append(w.o.Assumptions, a)
}

func (w *walker) finish(verdict, rejectWith string, d *DecisionRef) *Outcome {
	o := w.o
	o.Verdict, o.RejectWith = verdict, rejectWith
	if d == nil {
		d = w.decision
		if d == nil {
			d = w.policy
		}
	}
	o.DecidedBy = "policy"
	if w.martian {
		o.DecidedBy, d = "routing", nil
	}
	if d != nil {
		o.Decision = d
		if d.Policy == "" {
			o.DecidedBy = "rule"
		}
	}
	o.DNATDestination, o.Masqueraded, o.SNATSource = w.dnat, w.masq, w.snat
	o.Mark = fmt.Sprintf("%#x", w.pkt.Mark)
	o.Packet = w.pkt.String()
	detail := ""
	if o.DNATDestination != nil {
		detail += " dnat " + *o.DNATDestination
	}
	if o.Masqueraded {
		detail += " masqueraded"
	}
	o.Trace = append(o.Trace, Step{Kind: "verdict", Text: strings.TrimSpace("=> " + o.Verdict + detail + " " + o.RejectWith)})
	o.key = outcomeKey(o)
	return o
}

// toNFT and fromNFT carry the walk's packet into and out of the nftables emulator.
func toNFT(p *ipt.Packet) nftemu.Packet {
	return nftemu.Packet{Proto: p.Proto, Src: p.Src, Dst: p.Dst, SrcPort: p.SrcPort, DstPort: p.DstPort, TCPFlags: p.TCPFlags,
		ICMPType: p.ICMPType, ICMPCode: p.ICMPCode, TTL: p.TTL, InIface: p.InIface, OutIface: p.OutIface, Mark: p.Mark, Len: p.Len,
		CT: nftemu.Conntrack{State: p.CT.State, Status: p.CT.Status, Reply: p.CT.Reply, Orig: p.CT.Orig, ReplyTuple: p.CT.ReplyTuple, Mark: p.CT.Mark, Expire: p.CT.Expire}}
}

func fromNFT(p *ipt.Packet, q *nftemu.Packet) {
	p.Src, p.Dst, p.SrcPort, p.DstPort, p.Mark = q.Src, q.Dst, q.SrcPort, q.DstPort, q.Mark
	p.CT.Status, p.CT.Mark = q.CT.Status, q.CT.Mark
}
