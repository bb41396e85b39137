package nftables

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/knftables"

	"github.com/clusterlab/clusterlab/proxy"
)

// Render returns the nft -f input kube-proxy writes on its first (full) sync for the
// given Services and EndpointSlices into an empty table: the table, base chains and
// jump rules, fixed chains, sets, maps, every service's chains and the elements.
// Services are written in ServicePortName order (kube-proxy walks a map). Errors come
// from bad configuration or objects that do not parse; nothing is rendered then.
func Render(services []*corev1.Service, slices []*discoveryv1.EndpointSlice, cfg Config) ([]byte, error) {
	r, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	st, err := proxy.NewSyncState(services, slices, r.family, cfg.Node)
	if err != nil {
		return nil, err
	}
	return []byte(renderTx(r, st).String()), nil
}

// RenderState is Render for a view already built by a proxy.ChangeTracker (of the
// family in cfg).
func RenderState(st *proxy.SyncState, cfg Config) ([]byte, error) {
	r, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	return []byte(renderTx(r, st).String()), nil
}

// NewTransaction returns an empty transaction for kube-proxy's table in the family,
// for writing without an Interface.
func NewTransaction(family corev1.IPFamily) *knftables.Transaction {
	f := knftables.IPv4Family
	if family == corev1.IPv6Protocol {
		f = knftables.IPv6Family
	}
	return knftables.NewFake(f, TableName).NewTransaction()
}

func renderTx(r *resolved, st *proxy.SyncState) *knftables.Transaction {
	g := newGenerator(r)
	tx := NewTransaction(r.family)
	g.setup(tx, chainSet{}, true)
	out := &syncOut{chains: chainSet{}, affinitySets: map[string]bool{}}
	ctx := context.Background()
	for _, s := range g.stores() {
		s.begin(ctx, tx, nil, true)
	}
	g.services(tx, st, true, out)
	return tx
}
