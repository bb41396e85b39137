package kubeproxy

import (
	"sync"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
)

// Held conntrack cleanup: a scenario can let a node's kube-proxy update its rules while
// the conntrack entries its syncs would delete stay (a sync that skips the cleanup, a
// conntrack tool that fails or is slow), and run that cleanup later.
var holds = struct {
	mu      sync.Mutex
	on      map[*netsim.Conntrack]bool
	pending map[*netsim.Conntrack][]heldDelete
}{on: map[*netsim.Conntrack]bool{}, pending: map[*netsim.Conntrack][]heldDelete{}}

type heldDelete struct {
	c Conntrack
	f proxy.ConntrackFilter
}

// HoldConntrackCleanup makes the deletions kube-proxy asks of the table wait (on) until
// ReleaseConntrackCleanup, or lets later ones go through at once again (off; what
// waits keeps waiting).
func HoldConntrackCleanup(t *netsim.Conntrack, on bool) {
	holds.mu.Lock()
	defer holds.mu.Unlock()
	if on {
		holds.on[t] = true
	} else {
		delete(holds.on, t)
	}
}

// HeldConntrackCleanup returns the deletions waiting on the table, as conntrack -D
// options.
func HeldConntrackCleanup(t *netsim.Conntrack) []string {
	holds.mu.Lock()
	defer holds.mu.Unlock()
	var out []string
	for _, h := range holds.pending[t] {
		out = append(out, h.f.String())
	}
	return out
}

// ReleaseConntrackCleanup stops holding the table's deletions and carries out those
// that waited, in order; it returns how many entries they deleted.
func ReleaseConntrackCleanup(t *netsim.Conntrack) int {
	holds.mu.Lock()
	pending := holds.pending[t]
	delete(holds.pending, t)
	delete(holds.on, t)
	holds.mu.Unlock()
	n := 0
	for _, h := range pending {
		k, _ := h.c.Delete(h.f)
		n += k
	}
	return n
}

// held records the deletion if the table's cleanup is held, and says so.
func (c Conntrack) held(f proxy.ConntrackFilter) bool {
	holds.mu.Lock()
	defer holds.mu.Unlock()
	if !holds.on[c.T] {
		return false
	}
	holds.pending[c.T] = append(holds.pending[c.T], heldDelete{c, f})
	return true
}

// ForgetConntrackCleanup stops holding the table's deletions and forgets those that
// waited (a restarted kube-proxy does not remember them; a closed cluster needs none).
func ForgetConntrackCleanup(t *netsim.Conntrack) {
	holds.mu.Lock()
	defer holds.mu.Unlock()
	delete(holds.pending, t)
	delete(holds.on, t)
}

// ForceFullSync makes the next sync of the node's proxy a full one, as the first sync
// of a kube-proxy that has just started is (the iptables and nftables modes sync
// partially otherwise; the IPVS and userspace modes always sync everything). It reports
// whether the mode has partial syncs.
func ForceFullSync(n *cluster.Node) bool {
	switch p := n.Proxy().(type) {
	case *iptablesProxy:
		for _, f := range p.fams {
			f.forceFullSync()
		}
		return true
	case *nftablesProxy:
		for _, f := range p.fams {
			f.px.ForceFullSync()
		}
		return true
	}
	return false
}
