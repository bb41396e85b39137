package nftables

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/knftables"

	"github.com/clusterlab/clusterlab/proxy"
)

// Proxier is kube-proxy's nftables-mode proxier for one IP family: it keeps the
// previous view of Services and EndpointSlices, and on each Sync writes one nftables
// transaction through an Interface and clears stale UDP conntrack entries through a
// proxy.Conntrack.
//
// The first Sync, a Sync after a failed one, ForceFullSync, and a Sync an hour after
// the last full one are full: they rewrite the table, base chains, fixed chains and
// rules, sets and maps, and every service's chains. Other Syncs are partial: only the
// chains of Services whose service ports or EndpointSlices changed are rewritten ("add
// chain" + "flush chain" + rules). Set and map elements are diffed against what is
// there either way: only added, changed or removed elements are written. A service
// chain no longer used is flushed, and deleted by a separate transaction at the start
// of the first Sync at least StaleChainDelay later; an affinity set no longer used is
// deleted at once.
//
// A Proxier is not safe for concurrent use.
type Proxier struct {
	r      *resolved
	cfg    Config
	nft    Interface
	lister Lister // nil: nft cannot read back; chains/sets below are the record
	ct     proxy.Conntrack

	tracker *proxy.ChangeTracker
	gen     *generator

	needFullSync bool
	flushed      bool // the one-time base chain add+delete was written
	lastFullSync time.Time
	staleChains  map[string]time.Time
	chains       map[string]bool // without lister: chains the table has
	affinitySets map[string]bool // without lister: affinity sets the table has
	state        *proxy.SyncState
}

// NewProxier returns a Proxier writing through nft; ct may be nil (no conntrack
// cleanup). If nft also implements Lister (knftables.Fake and knftables.Interface do),
// the Proxier reads the table back as kube-proxy does.
func NewProxier(nft Interface, ct proxy.Conntrack, cfg Config) (*Proxier, error) {
	if nft == nil {
		return nil, errors.New("nftables proxier: nil Interface")
	}
	r, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	l, _ := nft.(Lister)
	return &Proxier{
		r:            r,
		cfg:          cfg,
		nft:          nft,
		lister:       l,
		ct:           ct,
		tracker:      proxy.NewChangeTracker(r.family, cfg.Node),
		gen:          newGenerator(r),
		needFullSync: true,
		staleChains:  map[string]time.Time{},
		chains:       map[string]bool{},
		affinitySets: map[string]bool{},
	}, nil
}

// Family returns the proxier's IP family.
func (p *Proxier) Family() corev1.IPFamily { return p.r.family }

// Version returns the kube-proxy layout the proxier writes.
func (p *Proxier) Version() Version { return p.r.version }

// ForceFullSync makes the next Sync a full one (kube-proxy does this when the node's
// topology labels change).
func (p *Proxier) ForceFullSync() { p.needFullSync = true }

// State returns the view of the last successful Sync (nil before the first).
func (p *Proxier) State() *proxy.SyncState { return p.state }

// StaleChains returns the service chains flushed and waiting to be deleted, sorted.
func (p *Proxier) StaleChains() []string {
	out := make([]string, 0, len(p.staleChains))
	for c := range p.staleChains {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// SyncResult reports what one Sync did.
type SyncResult struct {
	// Full is true for a full sync.
	Full bool
	// Cleanup is the transaction that deleted stale chains before the main one, nil if
	// none was due; DeletedChains are its chains.
	Cleanup       *knftables.Transaction
	DeletedChains []string
	// Transaction is the sync's transaction (Transaction.String() is its nft -f text;
	// NumOperations its size).
	Transaction *knftables.Transaction
	// StaleChains are the service chains this sync flushed because nothing uses them.
	StaleChains []string
	// ServicePorts and Endpoints count the view.
	ServicePorts, Endpoints int
	// ConntrackFilters were applied after the transaction; ConntrackDeleted entries went.
	ConntrackFilters []proxy.ConntrackFilter
	ConntrackDeleted int
	// Warnings are failures kube-proxy only logs: reading the table back, deleting stale
	// chains (the sync then becomes full), conntrack deletions.
	Warnings []error
}

// Sync brings the table in line with the complete current lists of Services and
// EndpointSlices. On error the transaction is not applied and the next Sync is full.
// Objects that do not parse are an error before anything is written. Objects are
// treated as immutable (see proxy.ChangeTracker.Update): pass a new object for a change.
func (p *Proxier) Sync(ctx context.Context, services []*corev1.Service, slices []*discoveryv1.EndpointSlice) (*SyncResult, error) {
	st, err := p.tracker.Update(services, slices)
	if err != nil {
		return nil, fmt.Errorf("nftables proxier: %w", err)
	}
	start := p.r.clock()
	res := &SyncResult{Full: p.needFullSync || !p.r.partialSyncs || (p.r.hourlyFullSync && start.Sub(p.lastFullSync) > FullSyncPeriod)}
	// The tracker has moved on; until a sync succeeds the changes are only known to a
	// full sync.
	p.needFullSync = true

	if err := p.deleteStaleChains(ctx, start, res); err != nil {
		res.Warnings = append(res.Warnings, err)
		res.Full = true
	}

	tx := p.nft.NewTransaction()
	res.Transaction = tx
	g := p.gen
	seen := chainSet{}
	if res.Full {
		g.setup(tx, seen, !p.flushed)
	}
	for _, s := range g.stores() {
		s.begin(ctx, tx, p.lister, res.Full)
	}
	existingChains, existingSets := p.existing(ctx, res)

	out := &syncOut{chains: chainSet{}, affinitySets: map[string]bool{}}
	g.services(tx, st, res.Full, out)
	res.ServicePorts, res.Endpoints = len(st.Services), out.endpoints

	flushed := map[string]bool{}
	for _, c := range existingChains {
		if !IsServiceChainName(c) {
			continue
		}
		if out.chains[c] {
			delete(p.staleChains, c)
			continue
		}
		tx.Flush(&knftables.Chain{Name: c})
		flushed[c] = true
		res.StaleChains = append(res.StaleChains, c)
	}
	for _, s := range existingSets {
		if IsAffinitySetName(s) && !out.affinitySets[s] {
			tx.Delete(&knftables.Set{Name: s})
		}
	}
	for _, s := range g.stores() {
		s.finish(tx)
	}

	if err := p.nft.Run(ctx, tx); err != nil {
		for _, s := range g.stores() {
			s.rollback()
		}
		// The stale chains were not flushed; the next (full) sync finds them again.
		clear(p.staleChains)
		return res, fmt.Errorf("nftables proxier: transaction: %w", err)
	}
	for c := range flushed {
		p.staleChains[c] = start
	}
	if p.lister == nil {
		for c := range out.chains {
			p.chains[c] = true
		}
		p.affinitySets = out.affinitySets
	}
	if res.Full {
		p.flushed = true
		p.lastFullSync = start
	}
	p.needFullSync = false
	p.state = st
	p.cleanConntrack(st, res)
	return res, nil
}

// existing returns the chains and sets the table has: read back with the Lister, or
// the Proxier's record.
func (p *Proxier) existing(ctx context.Context, res *SyncResult) (chains, sets []string) {
	if p.lister == nil {
		for c := range p.chains {
			chains = append(chains, c)
		}
		for s := range p.affinitySets {
			sets = append(sets, s)
		}
	} else {
		var err error
		if chains, err = p.lister.List(ctx, "chain"); err != nil && !knftables.IsNotFound(err) {
			res.Warnings = append(res.Warnings, fmt.Errorf("listing chains: %w", err))
		}
		if sets, err = p.lister.List(ctx, "set"); err != nil && !knftables.IsNotFound(err) {
			res.Warnings = append(res.Warnings, fmt.Errorf("listing sets: %w", err))
		}
	}
	slices.Sort(chains)
	slices.Sort(sets)
	return chains, sets
}

// deleteStaleChains deletes, in a transaction of its own, the stale chains flushed at
// least StaleChainDelay before now.
func (p *Proxier) deleteStaleChains(ctx context.Context, now time.Time, res *SyncResult) error {
	var due []string
	for c, t := range p.staleChains {
		if t.Before(now.Add(-StaleChainDelay)) {
			due = append(due, c)
		}
	}
	if len(due) == 0 {
		return nil
	}
	slices.Sort(due)
	tx := p.nft.NewTransaction()
	for _, c := range due {
		tx.Delete(&knftables.Chain{Name: c})
		delete(p.staleChains, c)
	}
	res.Cleanup, res.DeletedChains = tx, due
	if err := p.nft.Run(ctx, tx); err != nil {
		// The chains, if still there, are found stale again at the end of this sync.
		return fmt.Errorf("deleting stale chains: %w", err)
	}
	for _, c := range due {
		delete(p.chains, c)
	}
	return nil
}

func (p *Proxier) cleanConntrack(st *proxy.SyncState, res *SyncResult) {
	res.ConntrackFilters = st.StaleConntrackFilters()
	if p.ct != nil && len(res.ConntrackFilters) > 0 {
		n, err := proxy.CleanStaleConntrack(p.ct, res.ConntrackFilters)
		res.ConntrackDeleted = n
		if err != nil {
			res.Warnings = append(res.Warnings, err)
		}
	}
}
