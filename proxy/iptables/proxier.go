package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/clusterlab/clusterlab/proxy"
)

// Proxier is kube-proxy's iptables-mode proxier for one IP family: it keeps the
// previous view of Services and EndpointSlices, and on each Sync writes the ruleset
// through an Interface (the emulator or the kernel) and clears stale UDP conntrack
// entries through a proxy.Conntrack.
//
// The first Sync is a full sync: it ensures the hook jump rules and rewrites every
// chain. Later Syncs are partial (as in kube-proxy since 1.26): the top-level chains are
// rewritten every time, but the KUBE-SVC/SVL/EXT/FW/SEP chains only of Services whose
// service ports or EndpointSlices changed; chains no longer used are flushed and
// deleted with -X. A failed sync, ForceFullSync, or an hour without one makes the next
// sync full. In large-cluster mode (over 1000 endpoints) stale chains are looked for at
// most once per sync period.
//
// A Proxier is not safe for concurrent use.
type Proxier struct {
	r       *resolved
	cfg     Config
	ipt     Interface
	ct      proxy.Conntrack
	tracker *proxy.ChangeTracker
	gen     *generator

	needFullSync bool
	lastFullSync time.Time
	lastCleanup  time.Time
	state        *proxy.SyncState
}

// NewProxier returns a Proxier writing through ipt; ct may be nil (no conntrack
// cleanup).
func NewProxier(ipt Interface, ct proxy.Conntrack, cfg Config) (*Proxier, error) {
	if ipt == nil {
		return nil, errors.New("iptables proxier: nil Interface")
	}
	r, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Proxier{
		r:            r,
		cfg:          cfg,
		ipt:          ipt,
		ct:           ct,
		tracker:      proxy.NewChangeTracker(r.family, cfg.Node),
		gen:          newGenerator(r),
		needFullSync: true,
	}, nil
}

// Family returns the proxier's IP family.
func (p *Proxier) Family() corev1.IPFamily { return p.r.family }

// ForceFullSync makes the next Sync a full one (kube-proxy does this when its canary
// chain disappears or the node's topology labels change).
func (p *Proxier) ForceFullSync() { p.needFullSync = true }

// State returns the view of the last successful Sync (nil before the first).
func (p *Proxier) State() *proxy.SyncState { return p.state }

// SyncResult reports what one Sync did.
type SyncResult struct {
	// Full is true for a full sync.
	Full bool
	// JumpData is the restore input that created missing kube-proxy chains and inserted
	// missing jump rules ("-I"), written before Data; nil if nothing was missing or the
	// sync was partial.
	JumpData []byte
	// Data is the main restore input (applied with --noflush --counters). It shares
	// the Proxier's buffers: it is valid until the next Sync.
	Data []byte
	// StaleChains are the chains Data deletes.
	StaleChains []string
	// LargeCluster is true when there were more than 1000 endpoints.
	LargeCluster bool
	// ServicePorts and Endpoints count the view.
	ServicePorts, Endpoints int
	// ConntrackFilters were applied after the restore; ConntrackDeleted entries went.
	ConntrackFilters []proxy.ConntrackFilter
	ConntrackDeleted int
	// Warnings are failures kube-proxy only logs: iptables-save failing (no stale-chain
	// cleanup this time) and conntrack deletions failing.
	Warnings []error
}

// Sync brings the ruleset in line with the complete current lists of Services and
// EndpointSlices. On error nothing more is written and the next Sync is full. Objects
// that do not parse are an error before anything is written. Objects are treated as
// immutable (see proxy.ChangeTracker.Update): pass a new object for a change.
func (p *Proxier) Sync(ctx context.Context, services []*corev1.Service, slices []*discoveryv1.EndpointSlice) (*SyncResult, error) {
	st, err := p.tracker.Update(services, slices)
	if err != nil {
		return nil, fmt.Errorf("iptables proxier: %w", err)
	}
	now := p.r.clock()
	// Without MinimizeIPTablesRestore (before 1.27 by default) every sync is full.
	res := &SyncResult{Full: p.needFullSync || !p.r.layout.partial || now.Sub(p.lastFullSync) > FullSyncPeriod}
	// The tracker has moved on; until a sync succeeds the changes are only known to a
	// full sync.
	p.needFullSync = true

	if res.Full {
		jd, err := p.ensureJumps(ctx)
		res.JumpData = jd
		if err != nil {
			return res, fmt.Errorf("iptables proxier: ensuring jump rules: %w", err)
		}
	}

	g := p.gen
	g.begin()
	g.cleanupDue = now.Sub(p.lastCleanup) > p.r.syncPeriod
	g.services(st, res.Full)
	res.LargeCluster = g.largeCluster
	res.ServicePorts, res.Endpoints = len(st.Services), g.numEndpoints
	if g.trackActive { // not a large cluster, or its cleanup is due

		saved, err := p.ipt.Save(ctx, TableNAT)
		if err != nil {
			res.Warnings = append(res.Warnings, fmt.Errorf("iptables-save nat failed, stale chains not deleted: %w", err))
		} else {
			res.StaleChains = g.staleChains(ParseSave(saved).ChainNames(TableNAT))
			g.deleteChains(res.StaleChains)
			p.lastCleanup = now
		}
	}
	data := g.finish(false)
	res.Data = data
	if err := p.ipt.Restore(ctx, data, RestoreOptions{NoFlush: true, Counters: true}); err != nil {
		return res, fmt.Errorf("iptables proxier: restore: %w", err)
	}
	p.needFullSync = false
	if res.Full {
		p.lastFullSync = now
	}
	p.state = st

	res.ConntrackFilters = st.StaleConntrackFilters()
	if p.ct != nil && len(res.ConntrackFilters) > 0 {
		n, err := proxy.CleanStaleConntrack(p.ct, res.ConntrackFilters)
		res.ConntrackDeleted = n
		if err != nil {
			res.Warnings = append(res.Warnings, err)
		}
	}
	return res, nil
}

// ensureJumps creates kube-proxy's chains that do not exist yet and inserts the jump
// rules that are missing, in kube-proxy's order, with one restore. It returns the
// restore input (nil if nothing was missing).
func (p *Proxier) ensureJumps(ctx context.Context) ([]byte, error) {
	saved, err := p.ipt.Save(ctx, TableFilter, TableNAT)
	if err != nil {
		return nil, fmt.Errorf("iptables-save: %w", err)
	}
	have := ParseSave(saved)
	var out bytes.Buffer
	for _, table := range []string{TableFilter, TableNAT} {
		var chains, rules []string
		created := map[string]bool{}
		for _, j := range p.r.jumpRules() {
			if j.Table != table {
				continue
			}
			if !have.HasChain(table, j.Target) && !created[j.Target] {
				created[j.Target] = true
				chains = append(chains, chainLine(j.Target))
			}
			if !have.HasRule(table, j.Chain, j.Spec()) {
				rules = append(rules, "-I "+j.Chain+" "+j.Spec())
			}
		}
		if len(chains)+len(rules) == 0 {
			continue
		}
		out.WriteString("*" + table + "\n")
		for _, l := range append(chains, rules...) {
			out.WriteString(l + "\n")
		}
		out.WriteString("COMMIT\n")
	}
	if out.Len() == 0 {
		return nil, nil
	}
	if err := p.ipt.Restore(ctx, out.Bytes(), RestoreOptions{NoFlush: true}); err != nil {
		return out.Bytes(), err
	}
	return out.Bytes(), nil
}
