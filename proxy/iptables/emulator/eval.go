package emulator

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// Verdict is the fate a table traversal, a hook or a walk gives a packet.
type Verdict uint8

// Verdicts.
const (
	// Accept lets the packet go on (the next table, the next hook).
	Accept Verdict = iota
	// Drop discards the packet silently.
	Drop
	// Reject discards it and answers with an ICMP error or a TCP reset.
	Reject
	// Unknown means a target the emulator does not model decided (NFQUEUE, TPROXY, ...).
	Unknown
	// Local is a walk's end: delivered to a local socket (the packet passed INPUT).
	Local
)

func (v Verdict) String() string {
	switch v {
	case Accept:
		return "ACCEPT"
	case Drop:
		return "DROP"
	case Reject:
		return "REJECT"
	case Unknown:
		return "UNKNOWN"
	case Local:
		return "LOCAL"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Decision says what decided a table traversal: a rule, or a built-in chain's policy.
type Decision struct {
	Hook   netfilter.Hook
	Table  string
	Chain  string
	Rule   *Rule // nil when the policy decided
	Policy string
}

// ByPolicy reports whether the chain policy decided.
func (d Decision) ByPolicy() bool { return d.Rule == nil }

// NAT is a NAT action a rule took. Addr and Port are the translation; AddrMax/PortMax
// give the range when it was not narrowed to one choice (an all-branches exploration
// keeps ranges whole; MASQUERADE without a known interface address has no Addr).
type NAT struct {
	Kind          netfilter.NATKind
	Addr, AddrMax netip.Addr
	Port, PortMax uint16
	Random        bool
	RandomFully   bool
	Persistent    bool
	Hook          netfilter.Hook
	Chain         string
	Rule          *Rule
}

// Dest renders the translated address and port: "10.0.0.1:80", "[fd00::1]:80", a
// range "10.0.0.1-10.0.0.3:80", or "" when unknown.
func (n *NAT) Dest() string {
	if n == nil {
		return ""
	}
	addr := ""
	if n.Addr.IsValid() {
		addr = n.Addr.String()
		if n.AddrMax.IsValid() && n.AddrMax != n.Addr {
			addr += "-" + n.AddrMax.String()
		}
	}
	if n.Port == 0 {
		return addr
	}
	port := fmt.Sprint(n.Port)
	if n.PortMax > n.Port {
		port += fmt.Sprintf("-%d", n.PortMax)
	}
	if n.Addr.Is6() {
		return "[" + addr + "]:" + port
	}
	return addr + ":" + port
}

func (n *NAT) String() string {
	s := n.Kind.String()
	if d := n.Dest(); d != "" {
		s += " to " + d
	}
	if n.RandomFully {
		s += " random-fully"
	}
	return s
}

// TableResult is the outcome of one table at one hook.
type TableResult struct {
	Verdict    Verdict
	RejectWith string
	Decision   Decision
	NAT        *NAT
	// Assumptions are the undecidable matches met, and what was assumed (EvalTable).
	Assumptions []Assumption
}

// HookResult is the outcome of all tables at a hook.
type HookResult struct {
	Verdict    Verdict
	RejectWith string
	// Decision is what decided: the terminal rule or policy for DROP/REJECT/UNKNOWN,
	// else the last table's decision.
	Decision Decision
	// Tables holds each table's result in evaluation order.
	Tables []TableResult
	// NAT is the NAT action taken at this hook (first packets only), if any.
	NAT *NAT
}

// chooser resolves choice points and undecidable matches.
type chooser interface {
	chance(p float64) bool
	// pickRange picks one of n values, or returns -1 to keep the range whole.
	pickRange(n int) int
	// unknown returns whether an undecidable match matches: cond identifies its
	// condition on the packet (the same on every rule that tests it), label names
	// it, neg says the match is the condition's negation.
	unknown(cond, label string, neg bool) bool
}

type envChooser struct{ env Env }

func (c *envChooser) chance(p float64) bool {
	if p >= 1 {
		return true
	}
	if p <= 0 {
		return false
	}
	return c.env.Chance(p)
}
func (c *envChooser) pickRange(n int) int {
	if n <= 1 {
		return 0
	}
	return c.env.Pick(n)
}
func (c *envChooser) unknown(cond, label string, neg bool) bool {
	if a, ok := c.env.(MatchAssumer); ok {
		return a.AssumeMatch(cond, label, neg)
	}
	return false
}

// MatchAssumer is an optional Env method: the value to assume for a match the emulator
// cannot decide (a module it does not model, a set it was not given). cond identifies
// the condition on the packet (the same on every rule that tests it), label names the
// match as iptables-save prints it, neg says the match is the condition's negation; the
// result is whether the match as written matches. Without it such a match does not
// match. A walk that follows every branch (another package's, driving several rule
// engines) implements it.
type MatchAssumer interface {
	AssumeMatch(cond, label string, neg bool) bool
}

// state is the emulator state evaluation reads and changes.
type state struct {
	recent        map[string]*recentTable
	nth           map[*StatisticMatch]uint32
	nfacct        map[string]*Counters
	ipsets        *IPSets
	recentListTot int
	recentPktTot  int
	// recentConf holds, per xt_recent list, what the kernel fixes when the first rule
	// naming it is checked: the address mask and the size of each entry's time-stamp
	// ring (see recentConfig).
	recentConf map[string]recentConf
	// ipvs tells -m ipvs rules about IPVS connections (nil: undecidable).
	ipvs IPVSLookup
}

func newState() *state {
	return &state{recent: make(map[string]*recentTable), nth: make(map[*StatisticMatch]uint32),
		nfacct: make(map[string]*Counters), recentListTot: 100, recentConf: make(map[string]recentConf)}
}

// overlay holds a dry run's changes.
type overlay struct {
	recent map[string]*recentTable
	nth    map[*StatisticMatch]uint32
}

// evalCtx is one evaluation: the packet, the host, the state, the trace.
type evalCtx struct {
	// ipvsOut: the packet is one IPVS forwards (a walk's IPVSLeg): nat OUTPUT does not
	// run for it.
	ipvsOut bool
	pkt     *Packet
	env     Env
	ch      chooser
	st      *state
	dry     bool
	ov      overlay
	tr      *Trace
	hook    netfilter.Hook
	table   string
	notes   []string // details of the rule being evaluated (choices, assumptions)
	assume  []Assumption
	rule    *Rule
	chain   string
	buf     []int32
	cbuf    []*crec
	stack   []frame
	// counted: rules a compiled traversal matched, counted when it ends.
	counted []*Rule
	envCh   envChooser
	// noIndex scans long chains rule by rule instead of through their index.
	noIndex bool
	// noCompile evaluates Rules directly even without a trace (tests compare the two).
	noCompile bool
	// compiled: this table traversal runs on chainProgs (no trace, not noCompile).
	compiled bool
	keys     pktKeys
	// lastProg and lastRec are the chain and rule that matched last in a compiled
	// traversal (the deciding rule when a rule decided).
	lastProg *chainProg
	lastRec  int
	reason   string // cached reason of a compiled DNAT decision
	// natInto, when set, receives NAT results instead of a new NAT (callers that copy
	// the result before the next evaluation).
	natInto *NAT
	// maxSteps, when positive, bounds the rules a traversal evaluates (all hooks of a
	// walk's path together); steps counts them; limited says the bound stopped it.
	maxSteps, steps int
	limited         bool
	// impure: the traversal evaluated a match that reads more than the packet and
	// its rule, drew from the chooser or changed state (the flow cache may not keep
	// it); policyHit is the built-in chain whose policy decided and was counted.
	impure    bool
	policyHit *Chain
	// The wildcard cache (wildcache.go): reads are the packet's fields the traversal
	// read (rd*); wildNo says it read something a key cannot hold; when wild, draws
	// records its draws from the random source, the first of which are pre's
	// (npre of them used so far) rather than the source's.
	// dbits is, when reads has rdDstNet, the longest prefix of the destination
	// address a compiled rule compared.
	reads  uint16
	dbits  uint8
	wildNo bool
	wild   bool
	// wildSets: the wildcard cache is the emulator's own, whose generation every
	// change of its ipsets moves, so a set match's outcome may be kept (setReads).
	wildSets bool
	draws    []wdraw
	pre      []wdraw
	npre     int
}

// Assumption records how an undecidable match was resolved on a path.
type Assumption struct {
	Hook    netfilter.Hook
	Table   string
	Chain   string
	Rule    *Rule
	Match   string // the match as iptables-save prints it
	Matched bool
	// Condition is what was assumed, the same for every rule that tests it on the
	// same packet ("set KUBE-X dst=10.96.0.1:80"; a negated match tests the
	// condition too), and Holds the value assumed for it.
	Condition string
	Holds     bool
}

func (c *evalCtx) chance(p float64) bool {
	c.impure = true
	var v bool
	if c.npre < len(c.pre) {
		d := c.pre[c.npre]
		c.npre++
		v = d.v
		if d.kind != drawChance || d.p != p {
			c.wildNo = true // cannot happen: the key holds all that led here
		}
	} else {
		v = c.ch.chance(p)
	}
	if c.wild {
		c.draws = append(c.draws, wdraw{p: p, v: v})
	}
	if c.tr != nil && p > 0 && p < 1 {
		word := "not taken"
		if v {
			word = "taken"
		}
		c.notes = append(c.notes, fmt.Sprintf("statistic p=%.11f: %s", p, word))
	}
	return v
}

// nth advances (or, in a dry run, pretends to advance) an nth-mode counter.
func (c *evalCtx) nth(m *StatisticMatch) bool {
	c.impure, c.wildNo = true, true
	every := m.Every - 1
	cur, ok := c.ov.nth[m]
	if !ok {
		if v, ok2 := c.st.nth[m]; ok2 {
			cur = v
		} else {
			cur = every - m.Packet
		}
	}
	next := cur + 1
	if cur == every {
		next = 0
	}
	if c.dry {
		if c.ov.nth == nil {
			c.ov.nth = make(map[*StatisticMatch]uint32)
		}
		c.ov.nth[m] = next
	} else {
		c.st.nth[m] = next
	}
	if c.tr != nil {
		c.notes = append(c.notes, fmt.Sprintf("statistic nth: packet %d of every %d", (next+every)%m.Every, m.Every))
	}
	return next == 0
}

func (c *evalCtx) countNfacct(name string) {
	c.impure, c.wildNo = true, true
	if c.dry {
		return
	}
	ctr := c.st.nfacct[name]
	if ctr == nil {
		ctr = &Counters{}
		c.st.nfacct[name] = ctr
	}
	ctr.Packets++
	ctr.Bytes += uint64(c.pkt.Len)
}

func ifaceMatch(pattern, name string) bool {
	if strings.HasSuffix(pattern, "+") {
		return strings.HasPrefix(name, pattern[:len(pattern)-1])
	}
	return pattern == name
}

// matchRule decides whether r matches the packet, checking the header fields first
// and then each match module in order (stopping at the first that fails, as the kernel
// does, so later modules' side effects do not happen).
func (c *evalCtx) matchRule(r *Rule) bool {
	if c.wild {
		c.ruleReads(r)
	}
	p := c.pkt
	if r.Src.IsSet() && r.Src.Prefix.Contains(p.Src) == r.Src.Neg {
		return false
	}
	if r.Dst.IsSet() && r.Dst.Prefix.Contains(p.Dst) == r.Dst.Neg {
		return false
	}
	if r.InIface.Name != "" && ifaceMatch(r.InIface.Name, p.InIface) == r.InIface.Neg {
		return false
	}
	if r.OutIface.Name != "" && ifaceMatch(r.OutIface.Name, p.OutIface) == r.OutIface.Neg {
		return false
	}
	if r.Proto.Set && (p.Proto == r.Proto.Num) == r.Proto.Neg {
		return false
	}
	switch r.Fragment {
	case FragOnly:
		if !p.Fragment {
			return false
		}
	case FragNone:
		if p.Fragment {
			return false
		}
	}
	for i, m := range r.Matches {
		if !pureMatch(m) {
			c.impure = true
		}
		res := m.eval(c)
		if res == unknown {
			res = c.assumeUnknown(r, i, m)
		}
		if res == no {
			return false
		}
	}
	return true
}

// assumeUnknown resolves match i (m) of r, which the emulator cannot decide, through
// the chooser and records the assumption.
func (c *evalCtx) assumeUnknown(r *Rule, i int, m Match) tri {
	c.impure, c.wildNo = true, true
	cond, neg := c.condition(m)
	v := c.ch.unknown(cond, FormatMatch(m), neg)
	a := Assumption{Hook: c.hook, Table: c.table, Chain: c.chain, Rule: r, Match: FormatMatch(m), Matched: v, Condition: cond, Holds: v != neg}
	c.assume = append(c.assume, a)
	if c.tr != nil {
		word := "assumed not to match"
		if v {
			word = "assumed to match"
		}
		c.notes = append(c.notes, fmt.Sprintf("%q not emulated: %s", a.Match, word))
	}
	return triOf(v)
}

// condition names the condition an undecidable match tests on the current packet,
// and whether the match is its negation: a set lookup is the set's name and the
// packet's addresses and ports in the directions it looks up (a set with counter
// conditions, or a module the emulator does not know, the match without a leading
// "!" on this packet).
func (c *evalCtx) condition(m Match) (string, bool) {
	p := c.pkt
	switch m := m.(type) {
	case *SetMatch:
		if len(m.Counters) == 0 {
			var b strings.Builder
			b.WriteString("set " + m.Name)
			for _, dst := range m.Dirs {
				if dst {
					b.WriteString(" dst=" + netip.AddrPortFrom(p.Dst, p.DstPort).String())
				} else {
					b.WriteString(" src=" + netip.AddrPortFrom(p.Src, p.SrcPort).String())
				}
			}
			return b.String(), m.Neg
		}
	case *UnknownMatch:
		args, neg := m.Args, false
		if len(args) > 1 && args[0] == "!" && !slices.Contains(args[1:], "!") {
			args, neg = args[1:], true
		}
		return "-m " + m.Name + " " + strings.Join(args, " ") + " on " + p.String(), neg
	}
	return FormatMatch(m) + " on " + p.String(), false
}

type frame struct {
	chain   *Chain
	prog    *chainProg // compiled traversals: the chain's code
	cand    []int32    // candidate rule indexes (indexed chains), nil: every rule
	ccand   []*crec    // compiled traversals: candidate rules (indexed chains)
	pos     int
	indexed bool
}

// nextRec returns the next rule of a compiled frame.
func (f *frame) nextRec() *crec {
	if f.indexed {
		if f.pos >= len(f.ccand) {
			return nil
		}
		f.pos++
		return f.ccand[f.pos-1]
	}
	if f.pos >= len(f.prog.recs) {
		return nil
	}
	f.pos++
	return &f.prog.recs[f.pos-1]
}

func (f *frame) next() (int, bool) {
	if f.indexed {
		if f.pos >= len(f.cand) {
			return 0, false
		}
		f.pos++
		return int(f.cand[f.pos-1]), true
	}
	if f.pos >= len(f.chain.Rules) {
		return 0, false
	}
	f.pos++
	return f.pos - 1, true
}

const maxDepth = 256

// builtin returns a table's built-in chain for a hook (they come first).
func (t *Table) builtin(h netfilter.Hook) *Chain {
	name := h.String()
	for _, c := range t.AllChains() {
		if !c.Builtin {
			break
		}
		if c.Name == name {
			return c
		}
	}
	return nil
}

// jumpTarget returns the chain rule i of c jumps to, resolving the chain's jumps once
// per ruleset version (restores give changed tables new Chain objects).
func (c *Chain) jumpTarget(t *Table, i int) *Chain {
	if c.jumps == nil {
		c.jumps = make([]*Chain, len(c.Rules))
		for j, r := range c.Rules {
			if jt, ok := r.Target.(*JumpTarget); ok {
				c.jumps[j] = t.Chain(jt.Chain)
			}
		}
	}
	d := c.jumps[i]
	if d != nil && d.gone {
		// Replaced or deleted by a restore since it was resolved (tables share the
		// chains a restore does not change).
		d = t.Chain(c.Rules[i].Target.(*JumpTarget).Chain)
		c.jumps[i] = d
	}
	return d
}

// regoProg resolves again a compiled jump whose destination is gone.
func regoProg(t *Table, rec *crec) *chainProg {
	var p *chainProg
	if d := t.Chain(rec.rule.Target.(*JumpTarget).Chain); d != nil {
		p = progOf(d)
	}
	rec.jump = p
	return p
}

// push enters a chain: an indexed chain's candidate rules are computed here.
func (c *evalCtx) push(t *Table, ch *Chain) {
	f := frame{chain: ch}
	if len(ch.Rules) >= indexThreshold && !c.noIndex {
		if ch.idx == nil {
			ch.idx = buildIndex(ch)
		}
		start := len(c.buf)
		c.buf = ch.idx.candidates(c.pkt, c.buf)
		f.cand, f.indexed = c.buf[start:len(c.buf):len(c.buf)], true
		if c.tr != nil && len(f.cand) < len(ch.Rules) {
			c.tr.add(Step{Kind: StepIndex, Hook: c.hook.String(), Table: t.Name, Chain: ch.Name, Depth: len(c.stack),
				Detail: fmt.Sprintf("%d of %d rules skipped by the chain index (destination %s, port %d)", len(ch.Rules)-len(f.cand), len(ch.Rules), c.pkt.Dst, c.pkt.DstPort)}, c)
		}
	}
	c.stack = append(c.stack, f)
}

// pushProg enters a chain in a compiled traversal, compiling it first if needed.
func (c *evalCtx) pushProg(t *Table, cp *chainProg) {
	if !cp.ready {
		compile(t, cp)
	}
	f := frame{prog: cp}
	if cp.idx != nil && !c.noIndex {
		start := len(c.cbuf)
		c.reads |= rdDst | rdDport
		c.cbuf = cp.idx.candidates(c.pkt, &c.keys.dst, c.cbuf)
		f.ccand, f.indexed = c.cbuf[start:len(c.cbuf):len(c.cbuf)], true
	}
	c.stack = append(c.stack, f)
}

// policy ends a traversal with the built-in chain's policy.
func (c *evalCtx) policy(base *Chain, res *TableResult) {
	res.Decision.Chain, res.Decision.Policy, res.Decision.Rule = base.Name, base.Policy, nil
	if base.Policy == "DROP" {
		res.Verdict = Drop
	}
	if !c.dry {
		base.Counters.Packets++
		base.Counters.Bytes += uint64(c.pkt.Len)
		c.policyHit = base
	}
	if c.tr != nil {
		c.tr.add(Step{Kind: StepPolicy, Hook: c.hook.String(), Table: c.table, Chain: base.Name, Verdict: base.Policy}, c)
	}
}

func (c *evalCtx) setVerdict(step int, s string) {
	if step >= 0 {
		c.tr.Steps[step].Verdict = s
	}
}

// evalTable runs the packet through one table's built-in chain for hook. Without a
// trace it runs on the chains' compiled code (compile.go); with one, on the Rules,
// recording each step.
func (c *evalCtx) evalTable(t *Table, hook netfilter.Hook) TableResult {
	var res TableResult
	c.evalTableInto(t, t.builtin(hook), hook, &res)
	return res
}

// evalTableInto is evalTable writing into *res, which it overwrites (a datapath's table
// call keeps its result in its frame: the result is not copied from callee to caller at
// each level).
func (c *evalCtx) evalTableInto(t *Table, base *Chain, hook netfilter.Hook, res *TableResult) {
	c.counted = c.counted[:0]
	c.traverse(t, base, hook, res)
	// A compiled traversal counts its matched rules here, all at once: each is a
	// Rule the traversal did not otherwise read, and, at 10,000 services, a cache
	// miss; together the misses overlap instead of each stalling the traversal.
	for _, r := range c.counted {
		r.Counters.Packets++
		r.Counters.Bytes += uint64(c.pkt.Len)
	}
}

// traverse runs the packet through a table's built-in chain base for hook, rule after
// rule, through jumps, gotos and returns, to a verdict or the built-in chain's policy,
// written into *res. Without a trace it runs the chains' compiled code (compiledStep);
// with one, or with compiling off, the Rules (ruleStep).
func (c *evalCtx) traverse(t *Table, base *Chain, hook netfilter.Hook, res *TableResult) {
	c.hook, c.table = hook, t.Name
	*res = TableResult{Decision: Decision{Hook: hook, Table: t.Name, Chain: base.Name}}
	c.stack = c.stack[:0]
	c.buf = c.buf[:0]
	c.cbuf = c.cbuf[:0]
	c.compiled = c.tr == nil && !c.noCompile
	if c.compiled {
		c.keys = pktKeys{src: keyOf(c.pkt.Src), dst: keyOf(c.pkt.Dst)}
		c.pushProg(t, progOf(base))
	} else {
		c.push(t, base)
	}
	for {
		f := &c.stack[len(c.stack)-1]
		var fl flow
		if c.compiled {
			fl = c.compiledStep(t, f, res)
		} else {
			fl = c.ruleStep(t, f, res)
		}
		switch fl {
		case flowDecided:
			return
		case flowPolicy:
			c.policy(base, res)
			return
		}
	}
}

// flow is what a step of a traversal leaves it to do.
type flow uint8

const (
	flowNext    flow = iota // go on in the chain on top of the stack
	flowDecided             // the TableResult holds the verdict and decision
	flowPolicy              // the built-in chain is left: its policy decides
)

// decide ends the traversal with verdict v, decided by rule r of chain.
func (res *TableResult) decide(v Verdict, chain string, r *Rule) flow {
	res.Verdict = v
	res.Decision.Chain, res.Decision.Rule, res.Decision.Policy = chain, r, ""
	return flowDecided
}

// pop leaves the chain on top of the stack (RETURN); leaving the built-in chain
// leaves its policy to decide.
func (c *evalCtx) pop() flow {
	c.stack = c.stack[:len(c.stack)-1]
	if len(c.stack) == 0 {
		return flowPolicy
	}
	return flowNext
}

// endOfChain leaves f's chain, whose rules are all evaluated: the traversal goes on
// after the rule that jumped to it, and a trace says so.
func (c *evalCtx) endOfChain(t *Table, f *frame) flow {
	done := f.chain
	if c.pop() == flowPolicy {
		return flowPolicy
	}
	if c.tr != nil && !done.Builtin {
		c.tr.add(Step{Kind: StepReturn, Hook: c.hook.String(), Table: t.Name, Chain: done.Name, Depth: len(c.stack), Detail: "end of chain"}, c)
	}
	return flowNext
}

// compiledStep runs the compiled code of f's chain to its next matching rule, notes
// the rule (to count it, and as the last rule matched) and applies its target: here
// when the code expresses it (none, ACCEPT, DROP, RETURN, a jump or goto, a DNAT to
// one IPv4 address), else as on the Rules (ruleTarget).
func (c *evalCtx) compiledStep(t *Table, f *frame, res *TableResult) flow {
	cp := f.prog
	var rec *crec
	for {
		if rec = f.nextRec(); rec == nil {
			return c.endOfChain(t, f)
		}
		if c.matchRec(cp, rec) {
			break
		}
	}
	ri, r := int(rec.ri), rec.rule
	c.lastProg, c.lastRec = cp, ri
	if !c.dry {
		c.counted = append(c.counted, r)
	}
	switch k := rec.w0 & tkMask; k {
	case tkNone:
		return flowNext
	case tkAccept:
		return res.decide(Accept, cp.name, r)
	case tkDrop:
		return res.decide(Drop, cp.name, r)
	case tkReturn:
		return c.pop()
	case tkJump, tkGoto:
		dst := rec.jump
		if dst != nil && dst.gone {
			dst = regoProg(t, rec)
		}
		if dst == nil || len(c.stack) >= maxDepth {
			return res.decide(Drop, cp.name, r)
		}
		if k == tkGoto {
			c.stack = c.stack[:len(c.stack)-1]
		}
		c.pushProg(t, dst)
		return flowNext
	case tkDNAT4:
		res.NAT = c.dnat4(cp, rec, c.hook)
		if rs := cp.ext.reasons; rs != nil {
			c.reason = rs[ri] // read now: its miss overlaps the counters'
		}
		return res.decide(Accept, cp.name, r)
	}
	// A compiled frame has no Chain (f.chain is nil): ruleTarget needs one only for
	// jumps, which the code decides above.
	return c.ruleTarget(t, f.chain, ri, r, cp.name, -1, res)
}

// ruleStep evaluates f's chain's Rules to the next matching rule, a trace step per
// rule, counts it and applies its target (ruleTarget).
func (c *evalCtx) ruleStep(t *Table, f *frame, res *TableResult) flow {
	ch := f.chain
	for {
		ri, ok := f.next()
		if !ok {
			return c.endOfChain(t, f)
		}
		r := ch.Rules[ri]
		if c.maxSteps > 0 {
			if c.steps++; c.steps > c.maxSteps {
				return c.stopAtLimit(t, ch, res)
			}
		}
		matched, step := c.matchTraced(t, ch, r)
		if !matched {
			continue
		}
		if !c.dry {
			r.Counters.Packets++
			r.Counters.Bytes += uint64(c.pkt.Len)
		}
		return c.ruleTarget(t, ch, ri, r, ch.Name, step, res)
	}
}

// stopAtLimit ends a traversal that reached maxSteps rule evaluations: UNKNOWN, no
// rule deciding, the trace saying why.
func (c *evalCtx) stopAtLimit(t *Table, ch *Chain, res *TableResult) flow {
	c.limited = true
	if c.tr != nil {
		c.tr.add(Step{Kind: StepNote, Hook: c.hook.String(), Table: t.Name, Chain: ch.Name,
			Detail: fmt.Sprintf("walk stopped: more than %d rule evaluations on this path (jumps that revisit chains); the outcome is not known", c.maxSteps)}, c)
	}
	res.Verdict = Unknown
	res.Decision.Chain, res.Decision.Rule, res.Decision.Policy = ch.Name, nil, ""
	return flowDecided
}

// matchTraced matches rule r of chain ch; with a trace it records a step saying
// whether and why, and returns its index (else -1).
func (c *evalCtx) matchTraced(t *Table, ch *Chain, r *Rule) (matched bool, step int) {
	c.chain, c.rule = ch.Name, r
	if c.tr == nil {
		return c.matchRule(r), -1
	}
	c.notes = c.notes[:0]
	matched = c.matchRule(r)
	m := matched
	step = c.tr.add(Step{Kind: StepRule, Hook: c.hook.String(), Table: t.Name, Chain: ch.Name,
		Line: r.Line, Rule: r.Text(ch.Name), Matched: &m, Depth: len(c.stack) - 1,
		Detail: strings.Join(c.notes, "; ")}, c)
	return matched, step
}

// ruleTarget applies the target of rule r, rule ri of chain ch (named name), which
// matched; step is the rule's trace step, or -1. Verdicts, REJECT and NAT decide;
// RETURN, jumps and gotos move in the stack; MARK, CONNMARK, LOG, NOTRACK and
// pass-through extension targets go on with the next rule.
func (c *evalCtx) ruleTarget(t *Table, ch *Chain, ri int, r *Rule, name string, step int, res *TableResult) flow {
	switch tg := r.Target.(type) {
	case *VerdictTarget:
		c.setVerdict(step, tg.Verdict)
		switch tg.Verdict {
		case "ACCEPT":
			return res.decide(Accept, name, r)
		case "DROP":
			return res.decide(Drop, name, r)
		case "RETURN":
			return c.pop()
		}
	case *JumpTarget:
		var dst *Chain
		if c.noCompile { // maybe an older version's chains (Interpret): no cached jumps
			dst = t.Chain(tg.Chain)
		} else {
			dst = ch.jumpTarget(t, ri)
		}
		if dst == nil || len(c.stack) >= maxDepth {
			c.setVerdict(step, "DROP (bad jump)")
			return res.decide(Drop, name, r)
		}
		if tg.Goto {
			if step >= 0 {
				c.setVerdict(step, "goto "+tg.Chain)
			}
			c.stack = c.stack[:len(c.stack)-1]
		} else if step >= 0 {
			c.setVerdict(step, "jump "+tg.Chain)
		}
		c.push(t, dst)
	case *RejectTarget:
		if step >= 0 {
			c.setVerdict(step, "REJECT --reject-with "+tg.With)
		}
		res.RejectWith = tg.With
		return res.decide(Reject, name, r)
	case *NATTarget, *MasqueradeTarget, *RedirectTarget:
		n := c.nat(r, c.hook, name)
		if step >= 0 {
			c.setVerdict(step, n.String())
		}
		res.NAT = n
		return res.decide(Accept, name, r)
	case *MarkTarget:
		c.pkt.Mark = (c.pkt.Mark &^ tg.Mask) ^ tg.Value
		if step >= 0 {
			c.setVerdict(step, fmt.Sprintf("MARK -> %#x", c.pkt.Mark))
		}
	case *ConnmarkTarget:
		c.connmark(tg, step)
	case *LogTarget:
		c.setVerdict(step, "LOG (no-op)")
	case *NotrackTarget:
		c.pkt.CT.State = netfilter.CtUntracked
		c.setVerdict(step, "NOTRACK")
	case *UnknownTarget:
		return c.unknownTarget(tg, r, name, step, res)
	}
	return flowNext
}

// connmark applies a CONNMARK target.
func (c *evalCtx) connmark(tg *ConnmarkTarget, step int) {
	switch tg.Mode {
	case ConnmarkSet:
		c.pkt.CT.Mark = (c.pkt.CT.Mark &^ tg.Mask) ^ tg.Value
	case ConnmarkSave:
		c.pkt.CT.Mark = (c.pkt.CT.Mark &^ tg.CtMask) ^ (c.pkt.Mark & tg.NfMask)
	case ConnmarkRestore:
		c.pkt.Mark = (c.pkt.Mark &^ tg.NfMask) ^ (c.pkt.CT.Mark & tg.CtMask)
	}
	if step >= 0 {
		c.setVerdict(step, fmt.Sprintf("CONNMARK (mark %#x, ctmark %#x)", c.pkt.Mark, c.pkt.CT.Mark))
	}
}

// unknownTarget applies an extension target the emulator keeps verbatim: CT --notrack
// untracks the packet, a pass-through target goes on, any other ends the traversal
// with verdict UNKNOWN.
func (c *evalCtx) unknownTarget(tg *UnknownTarget, r *Rule, name string, step int, res *TableResult) flow {
	if tg.notrack() {
		// The CT target returns XT_CONTINUE; with --notrack its other
		// options do not matter (xt_ct_tg_check sets no template).
		c.pkt.CT.State = netfilter.CtUntracked
		c.setVerdict(step, "CT --notrack (the packet is untracked, continues)")
		return flowNext
	}
	if tg.passThrough() {
		if step >= 0 {
			c.setVerdict(step, tg.Target+" (not emulated, continues)")
		}
		return flowNext
	}
	if step >= 0 {
		c.setVerdict(step, tg.Target+" (not emulated: verdict unknown)")
	}
	return res.decide(Unknown, name, r)
}

// nat computes and applies a NAT target.
func (c *evalCtx) nat(r *Rule, hook netfilter.Hook, chain string) *NAT {
	c.impure = true
	if tg, ok := r.Target.(*NATTarget); ok {
		return c.natTarget(r, hook, chain, tg)
	}
	p := c.pkt
	c.wildNo = true // MASQUERADE and REDIRECT read the host's addresses
	n := c.newNAT(r.Target.Name(), r, hook, chain)
	switch tg := r.Target.(type) {
	case *MasqueradeTarget:
		n.Random, n.RandomFully = tg.Random, tg.RandomFully
		n.Port, n.PortMax = tg.PortMin, tg.PortMax
		if ia, ok := c.env.(IfaceAddrer); ok && p.OutIface != "" {
			if a, ok := ia.IfaceAddr(p.OutIface, p.Family()); ok {
				n.Addr = a
			}
		}
	case *RedirectTarget:
		n.Random = tg.Random
		if hook == netfilter.Output {
			n.Addr = netip.MustParseAddr("127.0.0.1")
			if p.Family() == IPv6 {
				n.Addr = netip.IPv6Loopback()
			}
		} else if ia, ok := c.env.(IfaceAddrer); ok && p.InIface != "" {
			if a, ok := ia.IfaceAddr(p.InIface, p.Family()); ok {
				n.Addr = a
			}
		}
		n.Port, n.PortMax = c.pickPort(tg.PortMin, tg.PortMax, p.DstPort)
	}
	c.applyNAT(n)
	return n
}

// natTarget computes and applies a DNAT or SNAT target (tg need not be r's own: the
// compiled path passes a copy rebuilt from its code).
func (c *evalCtx) natTarget(r *Rule, hook netfilter.Hook, chain string, tg *NATTarget) *NAT {
	c.impure = true
	// It writes the source (SNAT) or the destination and its port (DNAT), and reads
	// what it writes (an absent address or port is kept); DNAT never reads the source.
	if tg.Kind == "DNAT" {
		c.reads |= rdDst | rdDport
	} else {
		c.reads |= rdSrc | rdDst | rdDport
	}
	p := c.pkt
	n := c.newNAT(tg.Kind, r, hook, chain)
	n.Random, n.RandomFully, n.Persistent = tg.Random, tg.RandomFully, tg.Persistent
	if tg.AddrMin.IsValid() {
		n.Addr = tg.AddrMin
		if tg.AddrMax != tg.AddrMin {
			if size, ok := rangeSize(tg.AddrMin, tg.AddrMax); ok {
				c.wildNo = true // a pick (not kept by the wildcard cache)
				if i := c.ch.pickRange(size); i >= 0 {
					n.Addr = addrAdd(tg.AddrMin, i)
				} else {
					n.AddrMax = tg.AddrMax
				}
			} else {
				n.AddrMax = tg.AddrMax
			}
		}
	}
	if tg.Kind == "DNAT" {
		if !n.Addr.IsValid() {
			n.Addr = p.Dst
		}
		n.Port, n.PortMax = c.pickPort(tg.PortMin, tg.PortMax, p.DstPort)
	} else {
		if !n.Addr.IsValid() {
			n.Addr = p.Src
		}
		n.Port, n.PortMax = tg.PortMin, tg.PortMax
	}
	c.applyNAT(n)
	return n
}

func (c *evalCtx) newNAT(kind string, r *Rule, hook netfilter.Hook, chain string) *NAT {
	n := c.natInto
	if n == nil {
		n = new(NAT)
	}
	k, _ := netfilter.ParseNATKind(kind)
	*n = NAT{Kind: k, Hook: hook, Chain: chain, Rule: r}
	return n
}

// pickPort chooses the translated port: keep when it is in [lo, hi] (or there is no
// range), else one of the range (or the whole range, when the chooser keeps it).
func (c *evalCtx) pickPort(lo, hi uint16, keep uint16) (uint16, uint16) {
	if lo == 0 {
		return keep, 0
	}
	if keep >= lo && keep <= hi {
		return keep, 0
	}
	if hi == lo {
		return lo, 0
	}
	c.wildNo = true // a pick (not kept by the wildcard cache)
	if i := c.ch.pickRange(int(hi-lo) + 1); i >= 0 {
		return lo + uint16(i), 0
	}
	return lo, hi
}

// applyNAT applies a translation to the packet so that later tables see it.
func (c *evalCtx) applyNAT(n *NAT) {
	p := c.pkt
	switch n.Kind {
	case netfilter.DNAT, netfilter.Redirect:
		if n.Addr.IsValid() && !n.AddrMax.IsValid() {
			p.Dst = n.Addr
		}
		if n.Port != 0 && n.PortMax == 0 && p.hasPorts() {
			p.DstPort = n.Port
		}
		p.CT.Status |= netfilter.StatusDstNAT
	default:
		if n.Addr.IsValid() && !n.AddrMax.IsValid() {
			p.Src = n.Addr
		}
		p.CT.Status |= netfilter.StatusSrcNAT
	}
}

// rangeSize returns the number of addresses in [a, b] when it fits an int.
func rangeSize(a, b netip.Addr) (int, bool) {
	n := 1
	for x := a; x != b; x = x.Next() {
		n++
		if n > 1<<16 {
			return 0, false
		}
	}
	return n, true
}

func addrAdd(a netip.Addr, i int) netip.Addr {
	for ; i > 0; i-- {
		a = a.Next()
	}
	return a
}

// natFirst reports whether the nat table sees this packet: only a connection's first
// packet (new or related, not yet confirmed) does; later packets follow the binding.
func natFirst(p *Packet) bool {
	return p.CT.Status&netfilter.StatusConfirmed == 0 && (p.CT.State == netfilter.CtNew || p.CT.State == netfilter.CtRelated)
}

// evalHook runs every table at hook in netfilter priority order.
func (c *evalCtx) evalHook(rs *Ruleset, hook netfilter.Hook) HookResult {
	var hr HookResult
	for _, name := range hookTables[hook] {
		t := rs.Table(name)
		if t == nil {
			continue
		}
		if name == TableNAT && !natFirst(c.pkt) {
			if c.tr != nil {
				c.tr.add(Step{Kind: StepNote, Hook: hook.String(), Table: name,
					Detail: "nat table skipped: not the first packet of the connection (the conntrack entry's binding applies)"}, c)
			}
			continue
		}
		if name == TableNAT && c.ipvsOut && hook == netfilter.Output {
			if c.tr != nil {
				c.tr.add(Step{Kind: StepNote, Hook: hook.String(), Table: name,
					Detail: "nat table skipped: IPVS sends the packet on; its destination was bound at PREROUTING"}, c)
			}
			continue
		}
		if c.tr != nil {
			c.tr.add(Step{Kind: StepTable, Hook: hook.String(), Table: name, Chain: hook.String(), Packet: c.pkt.String()}, c)
		}
		tr := c.evalTable(t, hook)
		hr.Tables = append(hr.Tables, tr)
		hr.Decision = tr.Decision
		if tr.NAT != nil {
			hr.NAT = tr.NAT
		}
		if tr.Verdict != Accept {
			hr.Verdict, hr.RejectWith = tr.Verdict, tr.RejectWith
			return hr
		}
	}
	return hr
}
