package iptables

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/clusterlab/clusterlab/proxy"
)

// RenderOptions adjust Render's output.
type RenderOptions struct {
	// IncludeJumps also writes the hook jump rules (PREROUTING → KUBE-SERVICES and the
	// rest, in the order they end up in on a fresh node) and declares KUBE-FIREWALL if
	// needed, so that the text alone sets up a node that has no kube-proxy rules yet.
	// kube-proxy itself inserts these with iptables -I; see JumpRules.
	IncludeJumps bool
}

// Render returns the iptables-restore input kube-proxy writes on a full sync for the
// given Services and EndpointSlices: a *filter and a *nat section, to be applied with
// --noflush. Services are written in ServicePortName order, endpoints in string order
// (kube-proxy walks a map, so only its order within a chain is the same). Errors come
// from bad configuration or objects that do not parse; nothing is rendered then.
func Render(services []*corev1.Service, slices []*discoveryv1.EndpointSlice, cfg Config, opts RenderOptions) ([]byte, error) {
	r, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	st, err := proxy.NewSyncState(services, slices, r.family, cfg.Node)
	if err != nil {
		return nil, err
	}
	return renderState(r, st, opts), nil
}

// RenderState is Render for a view already built by a proxy.ChangeTracker (of the
// family in cfg).
func RenderState(st *proxy.SyncState, cfg Config, opts RenderOptions) ([]byte, error) {
	r, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	return renderState(r, st, opts), nil
}

func renderState(r *resolved, st *proxy.SyncState, opts RenderOptions) []byte {
	g := newGenerator(r)
	g.begin()
	g.services(st, true)
	return g.finish(opts.IncludeJumps)
}
