package emulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// Emulator is an in-memory nftables: a ruleset, its dynamic state (set elements added
// from the packet path, counters), and the evaluator. It is safe for concurrent use.
type Emulator struct {
	mu   sync.Mutex
	rs   *Ruleset
	gen  uint64
	seq  int
	base [netfilter.NumHooks][]BaseChain
	now  time.Time // the latest clock the evaluator saw (for printing "expires")

	baseRef    [netfilter.NumHooks][]baseRef // base's tables and chains
	oc         outCache                      // RunChain's outcome cache (outcache.go)
	noOutCache bool                          // tests: evaluate every packet
}

// New returns an emulator with an empty ruleset.
func New() *Emulator { return &Emulator{rs: &Ruleset{}} }

// Load reads `nft list ruleset` text (with or without -a handles; an `nft -f` script is
// accepted too) or `nft -j list ruleset` JSON (detected by its leading "{").
func Load(data []byte, file string) (*Emulator, error) {
	e := New()
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		rs, err := ParseJSON(data, file)
		if err != nil {
			return nil, err
		}
		e.rs = rs
		for _, t := range rs.Tables {
			for _, c := range t.Chains {
				e.seq = max(e.seq, c.seq)
			}
		}
		e.commitLocked()
		return e, nil
	}
	if err := e.ApplyScript(data, file); err != nil {
		return nil, err
	}
	return e, nil
}

// ApplyScript applies `nft -f` input (commands and/or table blocks) atomically: on an
// error nothing changes, and the error names the file, the line and the token.
func (e *Emulator) ApplyScript(data []byte, file string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := newTxn(e.rs, file)
	seq := e.seq
	p := &parser{src: string(data), file: file, x: x, seq: &seq}
	if err := p.run(); err != nil {
		return err
	}
	if err := x.validate(); err != nil {
		return err
	}
	e.rs, e.seq = x.rs, seq
	e.commitLocked()
	return nil
}

// commitLocked binds the new ruleset and bumps the generation.
func (e *Emulator) commitLocked() {
	bind(e.rs)
	e.gen++
	for h := range e.base {
		e.base[h] = nil
	}
	for _, t := range e.rs.Tables {
		if t.Family > FamilyInet || slices.Contains(t.Flags, "dormant") {
			continue
		}
		for _, c := range t.Chains {
			if c.policyReason == "" && c.IsBase() {
				c.policyReason = fmt.Sprintf("%s %s %s policy %s", t.Family, t.Name, c.Name, c.Policy)
			}
			h, ok := hookOf(c.Hook)
			if !ok {
				continue
			}
			e.base[h] = append(e.base[h], BaseChain{Family: t.Family, Table: t.Name, Chain: c.Name, Type: c.Type, Hook: h, Priority: c.Priority, seq: c.seq})
		}
	}
	for h := range e.base {
		sort.SliceStable(e.base[h], func(i, j int) bool {
			a, b := e.base[h][i], e.base[h][j]
			if a.Priority != b.Priority {
				return a.Priority < b.Priority
			}
			// nf_hook_entries_grow puts a new hook before the first one of the
			// same or a higher priority: of equal ones, the latest runs first.
			return a.seq > b.seq
		})
		e.baseRef[h] = e.baseRef[h][:0]
		for _, bc := range e.base[h] {
			t := e.rs.table(bc.Family, bc.Table)
			e.baseRef[h] = append(e.baseRef[h], baseRef{t, t.chain(bc.Chain)})
		}
	}
}

// baseRef is a base chain's table and chain, resolved once a generation.
type baseRef struct {
	t *Table
	c *Chain
}

// resolve returns a base chain's table and chain: from the hook's list when bc is one
// of its entries (the datapath's handlers hold those), else by name.
func (e *Emulator) resolve(bc BaseChain) (*Table, *Chain) {
	if int(bc.Hook) < len(e.base) {
		for i, b := range e.base[bc.Hook] {
			if b.seq == bc.seq && b.Chain == bc.Chain && b.Table == bc.Table && b.Family == bc.Family {
				r := e.baseRef[bc.Hook][i]
				return r.t, r.c
			}
		}
	}
	t := e.rs.table(bc.Family, bc.Table)
	if t == nil {
		return nil, nil
	}
	return t, t.chain(bc.Chain)
}

// Generation is bumped by every successful change of the ruleset (not by the packet
// path's set updates and counters).
func (e *Emulator) Generation() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gen
}

// Ruleset returns the current ruleset. It is shared: read it only while no script is
// being applied.
func (e *Emulator) Ruleset() *Ruleset {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rs
}

// BaseChain is a base chain as a datapath registers it.
type BaseChain struct {
	Family   Family
	Table    string
	Chain    string
	Type     string // "filter", "nat", "route"
	Hook     netfilter.Hook
	Priority int

	seq int
}

// BaseChains returns the base chains (of ip, ip6 and inet tables) at a hook in the
// order the kernel runs them: by priority, and of equal priority the one registered
// last first (checked against a kernel: TestEqualPriorityKernel). The slice is
// shared; do not modify it.
func (e *Emulator) BaseChains(h netfilter.Hook) []BaseChain {
	e.mu.Lock()
	defer e.mu.Unlock()
	if int(h) >= len(e.base) {
		return nil
	}
	return e.base[h]
}

// Env is what the evaluator needs from its surroundings.
type Env interface {
	Now() time.Time
	Pick(n int) int            // uniform choice in [0,n): numgen random
	DryRun() bool              // a what-if packet: change no state (counters, dynamic sets)
	IsLocal(a netip.Addr) bool // fib ... type local
}

// Assumer is an optional Env method: the value to assume for a statement the emulator
// does not model (an unknown match). Without it such a statement is assumed not to
// match.
type Assumer interface {
	Assume(rule *Rule, stmt *UnknownStmt) bool
}

// Packet is a packet as the evaluator sees it.
type Packet struct {
	Proto            uint8
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	TCPFlags         uint8
	ICMPType         uint8
	ICMPCode         uint8
	TTL              uint8
	InIface          string
	OutIface         string
	Mark             uint32
	Len              int
	CT               Conntrack
}

// Conntrack is the packet's conntrack entry as rules see it.
type Conntrack struct {
	State      netfilter.CtState
	Status     netfilter.CtStatus
	Reply      bool
	Orig       netfilter.Tuple
	ReplyTuple netfilter.Tuple
	Mark       uint32
	Expire     time.Duration
}

// String prints the packet ("tcp 10.0.0.2:40000 -> 172.30.0.41:80").
func (q *Packet) String() string {
	s := fmt.Sprintf("%s %s -> %s", ProtoName(q.Proto), netip.AddrPortFrom(q.Src, q.SrcPort), netip.AddrPortFrom(q.Dst, q.DstPort))
	if q.Mark != 0 {
		s += fmt.Sprintf(" mark %#x", q.Mark)
	}
	return s
}

// Verdict is the fate a base chain (or a walk) gives a packet.
type Verdict uint8

// Verdicts.
const (
	// Accept: the base chain let the packet go on (to the next base chain).
	Accept Verdict = iota
	// Drop discards the packet.
	Drop
	// Reject discards it with an ICMP error or a TCP reset.
	Reject
	// Unknown: a statement the emulator does not model decided (queue, tproxy, ...).
	Unknown
	// Local is a walk's end: delivered to a local socket.
	Local
)

// String names the Verdict.
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

// NAT is a NAT statement's translation.
type NAT struct {
	Kind        netfilter.NATKind
	Addr        netip.Addr
	AddrMax     netip.Addr // the end of an address range, when one was given
	Port        uint16
	PortMax     uint16
	Random      bool
	RandomFully bool
	Persistent  bool
}

// Dest prints the translation ("10.0.0.1:80", "[fd00::1]:80", "10.0.0.1").
func (n NAT) Dest() string {
	if !n.Addr.IsValid() {
		if n.Port != 0 {
			return fmt.Sprintf(":%d", n.Port)
		}
		return ""
	}
	if n.Port == 0 {
		return n.Addr.String()
	}
	return netip.AddrPortFrom(n.Addr, n.Port).String()
}

// ChainVerdict is what one base chain did with a packet.
type ChainVerdict struct {
	Verdict Verdict              // Accept (go on to the next base chain), Drop, Reject, Unknown
	Reject  netfilter.RejectWith // for Reject
	NAT     NAT                  // a nat chain's dnat/snat/masquerade/redirect
	HasNAT  bool
	// Reason is the rule or policy that decided: "ip kube-proxy services handle 12",
	// "... line 40", "... policy drop".
	Reason string
	// Rule is the rule that decided (nil: the base chain's policy) and Chain the chain
	// it is in (RunChain).
	Rule  *Rule
	Chain string
}

// Decided reports whether the chain ended the packet's way or NATed it.
func (v ChainVerdict) Decided() bool {
	return v.Verdict == Drop || v.Verdict == Reject || v.Verdict == Unknown || v.HasNAT
}

// RunChain evaluates one base chain for q. Statements change q (marks, ct mark); NAT
// is returned, not applied. The caller owns q. tr, if not nil, receives the steps.
func (e *Emulator) RunChain(env Env, bc BaseChain, q *Packet, tr *Trace) ChainVerdict {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, c := e.resolve(bc)
	if t == nil {
		return ChainVerdict{Reason: fmt.Sprintf("%s %s: no such table", bc.Family, bc.Table)}
	}
	if c == nil || !c.IsBase() {
		return ChainVerdict{Reason: fmt.Sprintf("%s %s %s: no such base chain", bc.Family, bc.Table, bc.Chain)}
	}
	var cc *chainCache
	var pre [maxDecs]int
	npre := 0
	if tr == nil && !e.noOutCache && !env.DryRun() {
		cc = e.oc.chain(c, e.gen)
		if cc.off > 0 {
			cc.off-- // too few hits lately: evaluate without the cache's costs
			cc = nil
		} else {
			var v ChainVerdict
			var ok bool
			v, ok, npre = cc.hit(env, q, &pre)
			cc.count(ok)
			if ok {
				return v
			}
		}
	}
	ctx := evalCtx{env: env, q: q, tr: tr, t: t, hook: bc.Hook}
	if a, ok := env.(Assumer); ok {
		ctx.assumer = a
	}
	var v ChainVerdict
	if cc != nil {
		ctx.pre, ctx.npre = pre, npre
		v = e.fill(&ctx, cc, c)
	} else {
		v = ctx.runBase(c)
		v.Rule, v.Chain = ctx.decRule, ctx.decChain
	}
	if ctx.hasNow && ctx.now.After(e.now) {
		e.now = ctx.now
	}
	return v
}

// JSON renders the trace as JSON.
func (t *Trace) JSON() ([]byte, error) { return json.MarshalIndent(t, "", "  ") }
