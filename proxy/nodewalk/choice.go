package nodewalk

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/clusterlab/clusterlab/internal/walkpath"
	ipt "github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	nftemu "github.com/clusterlab/clusterlab/proxy/nftables/emulator"
)

// path resolves one path's choice points, for both emulators: replaying forced
// alternatives and recording new ones (all branches), or drawing from the seed.
type path struct {
	all    bool
	rng    *rand.Rand
	forced []int
	pos    int
	taken  []walkpath.Choice
	prob   float64
	steps  *[]Step
	memo   map[string]bool // condition -> the value assumed on this path
}

func (p *path) next() int {
	alt := 0
	if p.pos < len(p.forced) {
		alt = p.forced[p.pos]
	}
	p.pos++
	return alt
}

func (p *path) step() int { return max(len(*p.steps)-1, 0) }

// chance is a choice true with probability q (iptables' statistic --mode random).
func (p *path) chance(q float64) bool {
	if q >= 1 {
		return true
	}
	if q <= 0 {
		return false
	}
	var v bool
	if p.all {
		v = p.next() == 0
	} else {
		v = p.rng.Float64() < q
	}
	pr, label, alt := q, fmt.Sprintf("statistic p=%.11f: taken", q), 0
	if !v {
		pr, label, alt = 1-q, fmt.Sprintf("statistic p=%.11f: not taken", q), 1
	}
	p.prob *= pr
	p.taken = append(p.taken, walkpath.Choice{Alt: alt, N: 2, P: pr, Step: p.step(), Label: label})
	return v
}

// pick is a uniform choice in [0, n) (nft's numgen random).
func (p *path) pick(n int, what string) int {
	if n <= 1 {
		return 0
	}
	var alt int
	if p.all {
		alt = p.next()
	} else {
		alt = p.rng.IntN(n)
	}
	pr := 1 / float64(n)
	p.prob *= pr
	p.taken = append(p.taken, walkpath.Choice{Alt: alt, N: n, P: pr, Step: p.step(), Label: fmt.Sprintf("%s mod %d = %d", what, n, alt)})
	return alt
}

// assume decides an undecidable condition, once a path: with all branches both ways,
// else as not matching. It returns whether the match (neg: the condition's negation)
// matches.
func (p *path) assume(cond, label string, neg bool) bool {
	if v, ok := p.memo[cond]; ok {
		return v != neg
	}
	matches := false
	if p.all {
		alt := p.next()
		matches = alt == 1
		text := fmt.Sprintf("assume %q does not match", label)
		if matches {
			text = fmt.Sprintf("assume %q matches", label)
		}
		p.taken = append(p.taken, walkpath.Choice{Alt: alt, N: 2, P: 1, Step: p.step(), Label: text})
	}
	if p.memo == nil {
		p.memo = map[string]bool{}
	}
	p.memo[cond] = matches != neg
	return matches
}

// nextPath is the forced prefix of the next path to explore, false when every path
// was.
func (p *path) nextPath() ([]int, bool) { return walkpath.Next(p.taken) }

// iptEnv is the iptables emulator's Env on a walk: the node's addresses, a dry run,
// its choices the path's.
type iptEnv struct {
	*ipt.StaticEnv
	w *walker
}

var (
	_ ipt.Env          = (*iptEnv)(nil)
	_ ipt.DryRunner    = (*iptEnv)(nil)
	_ ipt.MatchAssumer = (*iptEnv)(nil)
)

func (e *iptEnv) Chance(q float64) bool { return e.w.chance(q) }

// Pick keeps a NAT range whole when following every branch, else draws.
func (e *iptEnv) Pick(n int) int {
	if n <= 1 {
		return 0
	}
	if e.w.all {
		return -1
	}
	return e.w.rng.IntN(n)
}
func (e *iptEnv) DryRun() bool { return true }
func (e *iptEnv) AssumeMatch(cond, label string, neg bool) bool {
	return e.w.assume(SourceIPTables+" "+cond, label, neg)
}

// nftEnv is the nftables emulator's Env on a walk.
type nftEnv struct{ w *walker }

var (
	_ nftemu.Env     = (*nftEnv)(nil)
	_ nftemu.Assumer = (*nftEnv)(nil)
)

func (e *nftEnv) Now() time.Time            { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
func (e *nftEnv) Pick(n int) int            { return e.w.pick(n, "numgen random") }
func (e *nftEnv) DryRun() bool              { return true }
func (e *nftEnv) IsLocal(a netip.Addr) bool { return e.w.isLocal(a) }

// Assume decides an nft statement the emulator does not model, the same on every rule
// of the path that has it for the same packet.
func (e *nftEnv) Assume(r *nftemu.Rule, u *nftemu.UnknownStmt) bool {
	w := e.w
	cond := SourceNFT + " " + u.Text + " on " + w.pkt.String()
	v := w.assume(cond, u.Text, false)
	ref := RuleRef{Source: SourceNFT, Hook: w.curHook.String(), Line: r.Line, Handle: r.Handle, Rule: r.Text}
	if w.cur != nil {
		ref.Table, ref.Chain = w.cur.table, w.cur.chain
	}
	w.addAssumption(AssumptionRef{RuleRef: ref, Match: u.Text, Matched: v, Condition: cond, Holds: v})
	return v
}
