package kubeproxy

import (
	"context"
	"encoding/json"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	"github.com/clusterlab/clusterlab/service"
)

// Shared rulesets (Options.ShareRules), iptables mode. kube-proxy's rules on two nodes
// are byte for byte the same when nothing the generator reads about the node makes a
// difference: no Service with a Local traffic policy (endpoints local to the node),
// none with loadBalancerSourceRanges (the node's own IP allowed), no topology hints (the
// node's zone or name), and the same flags (the node's addresses and pod CIDRs matter
// only with --nodeport-addresses or --detect-local-mode=NodeCIDR). Nodes whose
// kube-proxy flags agree so form a group per IP family, which runs one Proxier (the
// group's leader, writing into an emulator of its own that no node runs) instead of one
// a node. Each node keeps its own emulator, attached to its datapath as before, with
// its own xt_recent lists and nth and nfacct counters; it adopts the leader's ruleset
// version (emulator.Emulator.Adopt) when it syncs, so a node whose kube-proxy is paused
// or lags keeps the version it last synced.
//
// A node's sync, in the group: when the store changed since the leader's last round,
// the leader syncs (a new round) first; the node adopts the latest round's ruleset and
// clears its own conntrack with what its own kube-proxy would have cleared: the round's
// stale-conntrack filters when it synced the round before (in step with the leader, as
// every node is while they sync together), else those of a change tracker moved from
// the round it last synced to the latest. When the store holds something that makes
// nodes differ, or the node is told to sync fully (ForceFullSync: a restart), the node
// leaves the group for good: it builds its own Proxier, brought to the round it last
// synced by a first sync into a scratch emulator, and runs as an unshared node from then on.
//
// What differs from unshared nodes: rule counters (iptables-save -c) count the packets
// of every node sharing a version; and in large-cluster mode (over 1,000 endpoints) the
// stale chains a partial sync leaves until its cleanup period come from the leader's
// history rather than the node's own (iptables-save lists them; no rule reaches them).

// shareRegistry holds the groups of the clusters a Factory built proxies for.
type shareRegistry struct {
	mu     sync.Mutex
	groups map[*cluster.Cluster]map[string]*shareGroup
}

func (r *shareRegistry) group(c *cluster.Cluster, key string, mk func() (*shareGroup, error)) (*shareGroup, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.groups == nil {
		r.groups = map[*cluster.Cluster]map[string]*shareGroup{}
	}
	m := r.groups[c]
	if m == nil {
		m = map[string]*shareGroup{}
		r.groups[c] = m
	}
	if g := m[key]; g != nil {
		return g, nil
	}
	g, err := mk()
	if err != nil {
		return nil, err
	}
	m[key] = g
	return g, nil
}

// shareGroup is the nodes of one family whose kube-proxy flags agree.
type shareGroup struct {
	mu     sync.Mutex // serialises the group's syncs
	evalMu sync.Mutex // held by every use of an emulator of the group (they share chains)
	// pkt is the packet buffer of the group's nodes' netsim handlers (under evalMu).
	pkt    emulator.Packet
	family corev1.IPFamily
	emu    *emulator.Emulator // the leader's
	px     *iptables.Proxier  // the leader
	latest *shareRound
	// latestRS is the leader's ruleset (under evalMu): the one version whose compiled
	// chains are right. A node holding another version interprets its rules.
	latestRS *emulator.Ruleset
}

// leaderIPT is the leader's emulator: restores under the group's lock, which also
// record the new latest version.
type leaderIPT struct{ g *shareGroup }

func (l leaderIPT) Restore(ctx context.Context, data []byte, opts iptables.RestoreOptions) error {
	l.g.evalMu.Lock()
	defer l.g.evalMu.Unlock()
	err := l.g.emu.Restore(ctx, data, opts)
	l.g.latestRS = l.g.emu.Ruleset()
	return err
}

func (l leaderIPT) Save(ctx context.Context, tables ...string) ([]byte, error) {
	l.g.evalMu.Lock()
	defer l.g.evalMu.Unlock()
	return l.g.emu.Save(ctx, tables...)
}

// evalMode makes the node's emulator interpret while it holds an older version than the
// group's latest; a node that left the group has its own copy. The caller holds evalMu.
func (f *iptablesFamily) evalMode() {
	compiled := f.g == nil || f.rs == f.g.latestRS
	if compiled != f.compiled {
		f.compiled = compiled
		f.emu.Interpret(!compiled)
	}
}

// shareRound is one sync of the leader: its input and what it made.
type shareRound struct {
	seq     int
	store   *service.Store
	rev     uint64
	svcs    []*corev1.Service
	slices  []*discoveryv1.EndpointSlice
	rs      *emulator.Ruleset
	filters []proxy.ConntrackFilter
	state   *proxy.SyncState
}

// shareKey is the group key of a node's kube-proxy flags: all of them but the node's
// name and hostname label, and without its addresses and pod CIDRs when the flags do
// not read them.
func shareKey(family corev1.IPFamily, cfg proxy.NodeConfig, tcpLiberal bool) (string, error) {
	cfg.Name = ""
	labels := map[string]string{}
	for k, v := range cfg.Labels {
		if k != corev1.LabelHostname {
			labels[k] = v
		}
	}
	cfg.Labels = labels
	if len(cfg.NodePortAddresses) == 0 && cfg.DetectLocalMode != proxy.LocalModeNodeCIDR {
		cfg.IPs, cfg.Addresses, cfg.PodCIDRs = nil, nil, nil
	}
	b, err := json.Marshal(struct {
		F   corev1.IPFamily
		L   bool
		Cfg proxy.NodeConfig
	}{family, tcpLiberal, cfg})
	return string(b), err
}

// nodeNeutral reports whether the services and slices give every node of a group the
// same rules (see above).
func nodeNeutral(svcs []*corev1.Service, slices []*discoveryv1.EndpointSlice) bool {
	for _, s := range svcs {
		if s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal ||
			s.Spec.InternalTrafficPolicy != nil && *s.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal ||
			len(s.Spec.LoadBalancerSourceRanges) > 0 || s.Spec.TrafficDistribution != nil {
			return false
		}
	}
	for _, sl := range slices {
		for _, e := range sl.Endpoints {
			if e.Hints != nil {
				return false
			}
		}
	}
	return true
}

// lockedIPT is an emulator used under its group's lock.
type lockedIPT struct {
	e  *emulator.Emulator
	mu *sync.Mutex
}

func (l lockedIPT) Restore(ctx context.Context, data []byte, opts iptables.RestoreOptions) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.e.Restore(ctx, data, opts)
}

func (l lockedIPT) Save(ctx context.Context, tables ...string) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.e.Save(ctx, tables...)
}

// switchCT is a conntrack cleaner that can be off (a Proxier's catch-up sync).
type switchCT struct {
	on bool
	c  proxy.Conntrack
}

func (s *switchCT) Delete(f proxy.ConntrackFilter) (int, error) {
	if !s.on {
		return 0, nil
	}
	return s.c.Delete(f)
}

// joinGroup puts the family of a node in its group (made on first use).
func (f *iptablesFamily) joinGroup(reg *shareRegistry, n *cluster.Node, cfg proxy.NodeConfig, icfg iptables.Config) error {
	key, err := shareKey(f.family, cfg, icfg.ConntrackTCPBeLiberal)
	if err != nil {
		return err
	}
	g, err := reg.group(n.Cluster(), key, func() (*shareGroup, error) {
		g := &shareGroup{family: f.family, emu: emulator.New(f.emu.Family())}
		px, err := iptables.NewProxier(leaderIPT{g}, nil, icfg)
		if err != nil {
			return nil, err
		}
		g.px = px
		return g, nil
	})
	if err != nil {
		return err
	}
	f.g, f.cfg, f.icfg = g, cfg, icfg
	f.lock = &g.evalMu
	f.compiled = true
	// The group's nodes hold the same rulesets and evaluate under evalMu: one wildcard
	// cache per version serves them all, where a cache per node is cold in every node
	// a large cluster's probes pass (a node's own comes from its own packets only).
	f.emu.ShareWildCache(!noSharedWild)
	return nil
}

// noSharedWild keeps a wildcard cache per node in groups (tests compare the two).
var noSharedWild bool

// syncShared syncs the family through its group; false when it must leave the group.
func (f *iptablesFamily) syncShared(n *cluster.Node) (bool, error) {
	g := f.g
	g.mu.Lock()
	defer g.mu.Unlock()
	st := n.Cluster().Store()
	rev := st.Revision()
	r := g.latest
	if r == nil || r.store != st || r.rev != rev {
		svcs, slices := st.ListServices(), st.ListEndpointSlices()
		if !nodeNeutral(svcs, slices) {
			return false, nil
		}
		res, err := g.px.Sync(context.Background(), svcs, slices)
		if err != nil {
			return true, err
		}
		g.evalMu.Lock()
		rs := g.emu.Ruleset()
		g.evalMu.Unlock()
		seq := 1
		if r != nil {
			seq = r.seq + 1
		}
		r = &shareRound{seq: seq, store: st, rev: rev, svcs: svcs, slices: slices, rs: rs,
			filters: res.ConntrackFilters, state: g.px.State()}
		g.latest = r
	}
	last := 0
	if f.last != nil {
		last = f.last.seq
	}
	var filters []proxy.ConntrackFilter
	switch {
	case f.last == r: // nothing changed since the node's last sync
	case last == r.seq-1: // in step with the leader
		filters = r.filters
	default:
		t := proxy.NewChangeTracker(f.family, f.cfg)
		if f.last != nil {
			if _, err := t.Update(f.last.svcs, f.last.slices); err != nil {
				return true, err
			}
		}
		s, err := t.Update(r.svcs, r.slices)
		if err != nil {
			return true, err
		}
		filters = s.StaleConntrackFilters()
	}
	g.evalMu.Lock()
	err := f.emu.Adopt(r.rs)
	if err == nil {
		f.rs = r.rs
		f.evalMode()
	}
	g.evalMu.Unlock()
	if err != nil {
		return true, err
	}
	f.last = r
	if len(filters) > 0 {
		if _, err := proxy.CleanStaleConntrack(f.ct, filters); err != nil {
			return true, err
		}
	}
	return true, nil
}

// leaveGroup gives the family its own copy of its rules and its own Proxier, brought to
// the round the node last synced: its first sync writes that round's rules over the
// node's (the same rules), clearing no conntrack entry.
func (f *iptablesFamily) leaveGroup() error {
	g := f.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.evalMu.Lock()
	// Its packets alone use its rules from now on: a cache of its own, of a node's
	// size (a shared one's 16,384 entries on each of thousands of nodes leaving
	// would be gigabytes), and the group's cache stays with the group's version.
	f.emu.ShareWildCache(false)
	// A copy of its own: restores on a branch of the group's versions would mark the
	// group's chains gone and share their reference counts.
	own, err := emulator.ParseDump(f.emu.Ruleset().Save(true), f.emu.Family(), "kube-proxy "+string(f.family))
	if err == nil {
		err = f.emu.Adopt(own)
	}
	f.g, f.rs = nil, nil
	f.evalMode()
	g.evalMu.Unlock()
	if err != nil {
		return err
	}
	sw := &switchCT{c: f.ct}
	px, err := iptables.NewProxier(lockedIPT{f.emu, &g.evalMu}, sw, f.icfg)
	if err != nil {
		return err
	}
	if f.last != nil {
		if _, err := px.Sync(context.Background(), f.last.svcs, f.last.slices); err != nil {
			return err
		}
	}
	sw.on = true
	f.px, f.last = px, nil
	return nil
}
