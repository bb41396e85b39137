package emulator

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/iptables"
)

// Emulator is an in-memory iptables for one address family: a state-based fake of
// iptables-restore / iptables-save (it rejects what the kernel rejects: jumps to
// missing chains, deleting a chain in use, loops, NAT targets outside their hooks) that
// also evaluates packets against its rules, with the state the kernel keeps beside
// them: xt_recent lists, statistic nth counters, nfacct counters, rule counters and an
// ipset model.
//
// It is safe for concurrent use; evaluations are serialised.
type Emulator struct {
	// The fields every RunTable call reads come first, together, so that a packet
	// through a node whose emulator is cold (a large cluster's probes pass random
	// nodes) loads two or three cache lines of it, not one per field: the flags and
	// generation below, then wildMissBuf's head. The evaluation scratch and the rest
	// follow.
	fam Family // fixed at New; read without mu
	mu  sync.Mutex
	rs  *Ruleset
	// chainsAt has bit chainAtBit(table, hook) set when rs has the table's built-in
	// chain for the hook (read without mu: see HasChainAt).
	chainsAt atomic.Uint64
	// noCompile makes evaluations without a trace run on the Rules too (tests).
	noCompile bool
	// noFlowCache turns the flow cache off (tests); noWild the wildcard cache;
	// shareWild keeps the wildcard cache on the ruleset instead (ShareWildCache).
	noFlowCache bool
	noWild      bool
	shareWild   bool
	// gen is the ruleset generation the flow cache's entries are valid for: every
	// change of what a traversal reads besides the packet makes a new one
	// (flowcache.go). flows is the cache (nil until first used).
	gen      uint64
	flows    *flowCache
	flowHits uint64 // packets the flow cache answered (tests)
	// wild is the wildcard cache (wildcache.go; nil until first used), wildHits counts
	// the packets it answered (tests); wildArm, set by RunTable around a traversal that
	// may fill it, is what newCtx gives the traversal (its recording on, the draws a
	// lookup made).
	wild     *wildCache
	wildHits uint64
	// wildDrawHits counts those of them that drew (tests).
	wildDrawHits uint64
	wildArm      *wildMiss
	// wildMissBuf is RunTable's wildMiss (a lookup's packet copy and draws).
	wildMissBuf wildMiss

	st       *state
	restores int
	scratch  evalCtx // reused by evaluations (they hold mu)
	// nat is RunTable's NAT result (it holds mu).
	nat NAT
	// lenient loads skip what does not load (Lenient); skipped is what they left out.
	lenient bool
	skipped []SkippedLine
}

var _ iptables.Interface = (*Emulator)(nil)

// Option configures an Emulator.
type Option func(*Emulator)

// WithRecentLimits sets xt_recent's module parameters: ip_list_tot (addresses per
// list, default 100) and ip_pkt_list_tot (time stamps remembered per address; default 0,
// which lets each list size its stamps from the --hitcount of its rules, 32 at least, as
// kernels since 4.11 do).
func WithRecentLimits(listTot, pktListTot int) Option {
	return func(e *Emulator) {
		if listTot > 0 {
			e.st.recentListTot = listTot
		}
		if pktListTot > 0 {
			e.st.recentPktTot = pktListTot
		}
	}
}

// WithIPSets gives the emulator the ipsets that set matches read.
func WithIPSets(s *IPSets) Option { return func(e *Emulator) { e.st.ipsets = s } }

// New returns an empty emulator for a family.
func New(f Family, opts ...Option) *Emulator {
	e := &Emulator{fam: f, rs: NewRuleset(f), st: newState(), gen: 1}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Load returns an emulator holding the ruleset of an iptables-save dump (with or
// without counters). file names the dump in errors and traces.
func Load(data []byte, f Family, file string, opts ...Option) (*Emulator, error) {
	e := New(f, opts...)
	if err := e.restore(data, RestoreOptions{Counters: true, File: file, keepOrder: true, Lenient: e.lenient}); err != nil {
		return nil, err
	}
	return e, nil
}

// Lenient makes Load skip what it cannot load instead of refusing the dump (see
// RestoreOptions.Lenient); Skipped lists what was left out, and walks say which
// outcomes went through a chain or table that lost a line.
func Lenient() Option { return func(e *Emulator) { e.lenient = true } }

// Skipped returns the lines lenient loads and restores left out, in order.
func (e *Emulator) Skipped() []SkippedLine {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.skipped)
}

// Family returns the emulator's address family.
func (e *Emulator) Family() Family { return e.fam }

// Restore implements iptables.Interface: it applies iptables-restore input atomically.
func (e *Emulator) Restore(ctx context.Context, data []byte, opts iptables.RestoreOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.mu.Lock()
	name := fmt.Sprintf("restore#%d", e.restores+1)
	e.mu.Unlock()
	return e.restore(data, RestoreOptions{NoFlush: opts.NoFlush, Counters: opts.Counters, File: name})
}

// RestoreText is Restore with this package's options (an input name for errors).
func (e *Emulator) RestoreText(data []byte, opts RestoreOptions) error { return e.restore(data, opts) }

func (e *Emulator) restore(data []byte, opts RestoreOptions) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	tx, err := restoreTxn(e.rs, data, opts)
	if err != nil {
		return err
	}
	e.setRulesetLocked(tx.rs)
	e.skipped = append(e.skipped, tx.skipped...)
	e.restores++
	if !e.gcChanges(tx) {
		e.gc()
	}
	return nil
}

// setRulesetLocked makes rs the emulator's ruleset.
func (e *Emulator) setRulesetLocked(rs *Ruleset) {
	e.passWild(rs)
	e.rs = rs
	e.gen++
	var bits uint64
	for _, t := range rs.Tables {
		for h := netfilter.Prerouting; h <= netfilter.Postrouting; h++ {
			if b := chainAtBit(t.Name, h); b >= 0 && t.builtin(h) != nil {
				bits |= 1 << b
			}
		}
	}
	e.chainsAt.Store(bits)
}

// chainAtBit is the bit of chainsAt for a table's chain at a hook, or -1 for a table
// the emulator does not know.
func chainAtBit(table string, h netfilter.Hook) int {
	var i int
	switch table {
	case TableRaw:
		i = 0
	case TableMangle:
		i = 1
	case TableNAT:
		i = 2
	case TableFilter:
		i = 3
	case TableSecurity:
		i = 4
	default:
		return -1
	}
	if h > netfilter.Postrouting {
		return -1
	}
	return i*8 + int(h)
}

// HasChainAt reports whether the ruleset has the table's built-in chain for the hook,
// without waiting for evaluations. When it has not, RunTable would change nothing and
// accept: a datapath may skip the call (and building its packet). A restore running at
// the same time may make the answer stale, as if the packet had come a moment earlier.
func (e *Emulator) HasChainAt(table string, h netfilter.Hook) bool {
	b := chainAtBit(table, h)
	return b < 0 || e.chainsAt.Load()&(1<<b) != 0
}

// gcChanges is gc for a restore that changed its tables incrementally (see
// validateChanges): when neither the chains it replaced or deleted nor those it made
// hold a rule with state (an xt_recent list, an nth counter), the state stays as it
// is, and only the nfacct objects the new rules name are created. It reports false
// when the whole ruleset must be swept (gc).
func (e *Emulator) gcChanges(tx *txn) bool {
	var made []*Chain
	for _, ts := range tx.tables {
		if !ts.incremental() {
			return false
		}
		for _, c := range ts.owned {
			if ts.t.holds(c) {
				made = append(made, c)
			}
		}
	}
	// A chain this restore made is scanned once, and keeps what it holds
	// (Chain.scan): when a later restore replaces it (kube-proxy's KUBE-SERVICES,
	// rewritten on every sync), it is not scanned again. One rebuilt from the same
	// lines as its version before has that version's bits already (commit).
	for _, c := range made {
		if c.scan == 0 {
			c.scan = scanChain(c)
		}
	}
	for _, c := range tx.gone {
		f := c.scan
		if f == 0 {
			f = scanChain(c) // made by a restore validated whole (gc swept after it)
		}
		if f&chainHasState != 0 {
			return false
		}
	}
	for _, c := range made {
		if c.scan&chainHasState != 0 {
			return false
		}
	}
	for _, c := range made {
		if c.scan&chainHasNfacct == 0 {
			continue
		}
		for _, r := range c.Rules {
			for _, m := range r.Matches {
				if m, ok := m.(*NfacctMatch); ok && e.st.nfacct[m.Name] == nil {
					e.st.nfacct[m.Name] = &Counters{}
				}
			}
		}
	}
	return true
}

// Bits of Chain.scan.
const (
	chainScanned   = 1 << iota
	chainHasState  // a rule with state beside it: an xt_recent list, an nth counter
	chainHasNfacct // a rule with an nfacct match
)

// scanChain returns what c's rules hold, as Chain.scan bits.
func scanChain(c *Chain) uint8 {
	f := uint8(chainScanned)
	for _, r := range c.Rules {
		for _, m := range r.Matches {
			switch m := m.(type) {
			case *RecentMatch:
				f |= chainHasState
			case *StatisticMatch:
				if m.Nth {
					f |= chainHasState
				}
			case *NfacctMatch:
				f |= chainHasNfacct
			}
		}
	}
	return f
}

// gc drops the state of rules that are gone: xt_recent lists no rule names any more
// (the kernel frees a list with its last rule) and nth counters of deleted rules.
func (e *Emulator) gc() {
	names := make(map[string]bool)
	nth := make(map[*StatisticMatch]bool)
	conf := make(map[string]recentConf)
	refs := e.rs.stateRefsOf() // the walk over every rule, once per ruleset
	for _, m := range refs.recent {
		names[m.Name] = true
		conf[m.Name] = e.st.recentConfig(conf, m)
	}
	for _, m := range refs.nth {
		nth[m] = true
	}
	for _, name := range refs.nfacct {
		if e.st.nfacct[name] == nil {
			e.st.nfacct[name] = &Counters{}
		}
	}
	for n := range e.st.recent {
		if !names[n] {
			delete(e.st.recent, n)
		}
	}
	for n, cf := range conf {
		if old, ok := e.st.recentConf[n]; ok && cf.stampMask > old.stampMask {
			// A rule needs more time stamps than the list keeps: the kernel flushes it.
			delete(e.st.recent, n)
		}
	}
	e.st.recentConf = conf
	for m := range e.st.nth {
		if !nth[m] {
			delete(e.st.nth, m)
		}
	}
}

// Save implements iptables.Interface: iptables-save output (without counters) for the
// named tables, or all.
func (e *Emulator) Save(ctx context.Context, tables ...string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, t := range tables {
		if _, ok := tableDefs[t]; !ok {
			return nil, fmt.Errorf("iptables-save: unknown table %q", t)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rs.Save(false, tables...), nil
}

// SaveCounters is iptables-save -c: rule and policy counters included.
func (e *Emulator) SaveCounters(tables ...string) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rs.Save(true, tables...)
}

// Ruleset returns the current ruleset. Restores replace it rather than change it, so
// it stays valid; callers must not modify it (evaluations update its counters).
func (e *Emulator) Ruleset() *Ruleset {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rs
}

// Adopt makes rs the emulator's ruleset, as a restore that left the tables exactly so
// would: rs is another emulator's of the same family (its Ruleset), which that
// emulator's later restores leave as it is. The emulators then share rs's chains with
// their rule counters and compiled programs, so every use of them (evaluations,
// restores, saves) must be serialised by the caller. The emulator's own state stays
// its own (xt_recent lists, nth and nfacct counters), swept as after a restore.
func (e *Emulator) Adopt(rs *Ruleset) error {
	if rs == nil || rs.Family != e.fam {
		return fmt.Errorf("emulator: adopt: a ruleset of another family")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.setRulesetLocked(rs)
	e.restores++
	e.gc()
	return nil
}

// Interpret makes evaluations run on the rules themselves, resolving every jump by
// name (true), or on compiled chains and cached jumps (false, the default). Compiled
// chains and cached jumps link to the chains of the version that made them, which is
// right only while no older version is evaluated: an emulator holding an older version
// than another emulator whose chains it shares (Adopt) must interpret.
func (e *Emulator) Interpret(on bool) {
	e.mu.Lock()
	if e.noCompile != on {
		e.noCompile = on
		e.gen++
	}
	e.mu.Unlock()
}

// SetIPSets replaces the ipsets set matches read.
func (e *Emulator) SetIPSets(s *IPSets) {
	e.mu.Lock()
	e.st.ipsets = s
	e.gen++
	e.mu.Unlock()
}

// Recent returns the entries of an xt_recent list (oldest first), as
// /proc/net/xt_recent/NAME would show them.
func (e *Emulator) Recent(name string) []RecentEntry {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.st.recent[name]
	if t == nil {
		return nil
	}
	out := make([]RecentEntry, 0, len(t.lru))
	for _, en := range t.lru {
		out = append(out, en.export())
	}
	return out
}

// RecentLists returns the names of the xt_recent lists that hold entries.
func (e *Emulator) RecentLists() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for n, t := range e.st.recent {
		if len(t.entries) > 0 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Nfacct returns an nfacct object's counters; objects exist once a rule names them.
func (e *Emulator) Nfacct(name string) (Counters, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.st.nfacct[name]
	if c == nil {
		return Counters{}, false
	}
	return *c, true
}

// newCtx prepares the emulator's reusable evaluation context (the caller holds mu).
func (e *Emulator) newCtx(env Env, pkt *Packet, tr *Trace) *evalCtx {
	dry := false
	if d, ok := env.(DryRunner); ok {
		dry = d.DryRun()
	}
	c := &e.scratch
	*c = evalCtx{pkt: pkt, env: env, st: e.st, dry: dry, tr: tr,
		buf: c.buf[:0], cbuf: c.cbuf[:0], counted: c.counted[:0], stack: c.stack[:0], notes: c.notes[:0], assume: c.assume[:0], noCompile: e.noCompile,
		draws: c.draws}
	c.envCh = envChooser{env}
	c.ch = &c.envCh
	c.draws = c.draws[:0]
	if m := e.wildArm; m != nil {
		c.wild, c.pre, c.wildSets = true, m.pre, !e.shareWild
	}
	return c
}

// EvalHook evaluates the tables at a hook for pkt, in netfilter priority order
// (raw, mangle, nat, filter, security; nat last in INPUT and POSTROUTING). The nat table
// is consulted only for a connection's first packet (Conntrack state NEW or RELATED and
// not CTConfirmed): later packets follow the conntrack entry, which the host applies.
// Targets change pkt: MARK and CONNMARK its marks, NAT targets its addresses and
// ports (so later tables see the translation) and its conntrack status. tr, if not
// nil, records every rule looked at.
func (e *Emulator) EvalHook(env Env, hook netfilter.Hook, pkt *Packet, tr *Trace) HookResult {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.newCtx(env, pkt, tr).evalHook(e.rs, hook)
}

// EvalTable evaluates one table's built-in chain for hook (whatever the packet's
// conntrack state: the caller decides whether a nat table applies). A table the
// ruleset lacks accepts.
func (e *Emulator) EvalTable(env Env, table string, hook netfilter.Hook, pkt *Packet, tr *Trace) TableResult {
	e.mu.Lock()
	defer e.mu.Unlock()
	res, c := e.evalTableLocked(env, table, hook, pkt, tr, nil)
	if c != nil && len(c.assume) > 0 {
		res.Assumptions = slices.Clone(c.assume)
	}
	return res
}

// HasTable reports whether the ruleset has the table (filter, nat, ...).
func (e *Emulator) HasTable(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rs.Table(name) != nil
}

// evalTableLocked is EvalTable with mu held; it also returns the evaluation context
// (nil when the ruleset lacks the table or the chain), valid until mu is released. A
// NAT result goes into natInto when that is not nil.
func (e *Emulator) evalTableLocked(env Env, table string, hook netfilter.Hook, pkt *Packet, tr *Trace, natInto *NAT) (TableResult, *evalCtx) {
	var res TableResult
	c := e.evalTableLockedInto(env, table, hook, pkt, tr, natInto, &res)
	return res, c
}

// evalTableLockedInto is evalTableLocked writing the result into *res.
func (e *Emulator) evalTableLockedInto(env Env, table string, hook netfilter.Hook, pkt *Packet, tr *Trace, natInto *NAT, res *TableResult) *evalCtx {
	t := e.rs.Table(table)
	var base *Chain
	if t != nil {
		base = t.builtin(hook)
	}
	if base == nil {
		*res = TableResult{Decision: Decision{Hook: hook, Table: table, Chain: hook.String(), Policy: "ACCEPT"}}
		return nil
	}
	c := e.newCtx(env, pkt, tr)
	c.natInto = natInto
	if tr != nil {
		tr.add(Step{Kind: StepTable, Hook: hook.String(), Table: table, Chain: hook.String(), Packet: pkt.String()}, c)
	}
	c.evalTableInto(t, base, hook, res)
	return c
}
