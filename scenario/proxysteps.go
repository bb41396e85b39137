package scenario

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// syncConntrack runs the sync steps that separate kube-proxy's rules from its conntrack
// cleanup: rules_only, hold_conntrack and clean_conntrack. It reports false for the
// other sync steps.
func (r *runner) syncConntrack(sy *Sync, res *StepResult) bool {
	switch {
	case sy.RulesOnly != "":
		r.forLiveProxies(sy.RulesOnly, func(n *cluster.Node) {
			t := n.Conntrack()
			held := len(kubeproxy.HeldConntrackCleanup(t))
			kubeproxy.HoldConntrackCleanup(t, true)
			n.SyncProxy()
			if !r.holding[n.Name()] {
				kubeproxy.HoldConntrackCleanup(t, false) // what waits keeps waiting
			}
			for _, f := range kubeproxy.HeldConntrackCleanup(t)[held:] {
				res.Details = append(res.Details, n.Name()+": kept back: "+f)
			}
		})
		res.Summary = "kube-proxy on " + sy.RulesOnly + " synced its rules; the conntrack cleanup of the sync waits for clean_conntrack"
	case sy.HoldConntrack != "":
		r.forLiveProxies(sy.HoldConntrack, func(n *cluster.Node) {
			kubeproxy.HoldConntrackCleanup(n.Conntrack(), true)
			r.holding[n.Name()] = true
		})
		res.Summary = "kube-proxy on " + sy.HoldConntrack + " updates its rules as usual, but its conntrack cleanup waits for clean_conntrack"
	case sy.CleanConntrack != "":
		total := 0
		r.forLiveProxies(sy.CleanConntrack, func(n *cluster.Node) {
			for _, f := range kubeproxy.HeldConntrackCleanup(n.Conntrack()) {
				res.Details = append(res.Details, n.Name()+": "+f)
			}
			total += kubeproxy.ReleaseConntrackCleanup(n.Conntrack())
			delete(r.holding, n.Name())
		})
		res.Summary = fmt.Sprintf("kube-proxy on %s ran the conntrack cleanup it kept back: %d entries deleted", sy.CleanConntrack, total)
	default:
		return false
	}
	return true
}

// forLiveProxies calls f for each live node with a proxy that name selects (a node or
// "all").
func (r *runner) forLiveProxies(name string, f func(n *cluster.Node)) {
	r.forNodes(name, func(n *cluster.Node) {
		if n.Proxy() != nil && !n.Down() {
			f(n)
		}
	})
}

// restartProxy restarts kube-proxy on the nodes name selects: what a new process does
// in its first sync. It syncs everything, forgets any cleanup kept back (the old
// process's), and clears what the release clears at startup, as package proxy says
// (RestartConntrackFilters: before 1.32 the UDP entries to every service with a
// serving endpoint).
func (r *runner) restartProxy(name string, res *StepResult) error {
	svcs, slices := r.c.Store().ListServices(), r.c.Store().ListEndpointSlices()
	var errs []error
	total := 0
	r.forLiveProxies(name, func(n *cluster.Node) {
		t := n.Conntrack()
		kubeproxy.ForgetConntrackCleanup(t)
		delete(r.holding, n.Name())
		kubeproxy.ForceFullSync(n)
		n.SyncProxy()
		nc := kubeproxy.NodeConfigFor(n)
		if r.p.proxyOpts.Node != nil {
			r.p.proxyOpts.Node(&nc)
		}
		for _, fam := range r.families() {
			filters, err := proxy.RestartConntrackFilters(svcs, slices, fam, nc)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", n.Name(), err))
				continue
			}
			k, err := proxy.CleanStaleConntrack(kubeproxy.Conntrack{T: t, Family: fam}, filters)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", n.Name(), err))
			}
			total += k
			for _, f := range filters {
				res.Details = append(res.Details, n.Name()+": at startup: "+f.String())
			}
		}
	})
	res.Summary = fmt.Sprintf("kube-proxy %s restarted on %s: a full sync", r.p.version, name)
	if total > 0 || len(res.Details) > 0 {
		res.Summary += fmt.Sprintf("; its startup cleanup deleted %d conntrack entries", total)
	} else {
		res.Summary += "; no conntrack cleanup of its own at startup"
	}
	return errors.Join(errs...)
}

// families are the IP families of the cluster's services, primary first.
func (r *runner) families() []corev1.IPFamily {
	var out []corev1.IPFamily
	for _, p := range r.c.Config().ServiceCIDRs {
		f := corev1.IPv4Protocol
		if !p.Addr().Is4() {
			f = corev1.IPv6Protocol
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		out = append(out, corev1.IPv4Protocol)
	}
	return out
}
