package cluster

import (
	"fmt"
	"sync"
	"time"
)

// Proxy is a node's service proxy (a kube-proxy mode) as the cluster drives it: Sync
// brings the node's datapath in line with the store's Services, EndpointSlices and
// Nodes. The cluster calls Sync once when the proxy starts and again after every change,
// after the node's sync delay, never concurrently for one node.
type Proxy interface {
	Sync() error
}

// ProxyFactory builds the proxy of one node (registering its handlers on the node).
type ProxyFactory func(n *Node) (Proxy, error)

// startProxy builds the node's proxy with Config.Proxy, if there is one, and syncs it.
func (n *Node) startProxy() error {
	if n.c.cfg.Proxy == nil {
		return nil
	}
	p, err := n.c.cfg.Proxy(n)
	if err != nil {
		return fmt.Errorf("cluster: proxy on node %s: %w", n.Name(), err)
	}
	n.proxy = p
	n.syncNow()
	return nil
}

// proxyState is a node's proxy and its sync bookkeeping.
type proxyState struct {
	syncMu      sync.Mutex // held while the proxy syncs
	pendingMu   sync.Mutex
	pending     bool
	queuedAt    time.Time // the oldest change the proxy has not synced yet (zero: none)
	syncs       int
	delay       time.Duration
	delaySet    bool
	paused      bool
	pausedDirty bool
}

// SetSyncDelay sets how long after a change this node's proxy syncs (kube-proxy's sync
// lag): a longer delay on one node reproduces rules updated after a pod died.
func (n *Node) SetSyncDelay(d time.Duration) {
	n.ps.pendingMu.Lock()
	n.ps.delay, n.ps.delaySet = d, true
	n.ps.pendingMu.Unlock()
}

// PauseProxy stops the node's proxy from syncing until ResumeProxy (a hung kube-proxy).
func (n *Node) PauseProxy() {
	n.ps.pendingMu.Lock()
	n.ps.paused = true
	n.ps.pendingMu.Unlock()
}

// ResumeProxy lets the node's proxy sync again, at once if anything changed meanwhile.
func (n *Node) ResumeProxy() {
	n.ps.pendingMu.Lock()
	n.ps.paused = false
	dirty := n.ps.pausedDirty
	n.ps.pausedDirty = false
	n.ps.pendingMu.Unlock()
	if dirty {
		n.syncNow()
	}
}

// ProxySyncs returns how many times the node's proxy has synced.
func (n *Node) ProxySyncs() int {
	n.ps.syncMu.Lock()
	defer n.ps.syncMu.Unlock()
	return n.ps.syncs
}

// Proxy returns the node's proxy, or nil.
func (n *Node) Proxy() Proxy { return n.proxy }

func (c *Cluster) requestSyncs() {
	if !c.proxiesUp.Load() { // no proxy runs yet: nothing to tell (and no list of nodes to make)
		return
	}
	for _, n := range c.Nodes() {
		if n.proxy != nil && !n.Down() {
			n.requestSync()
		}
	}
}

func (n *Node) syncDelay() time.Duration {
	if n.ps.delaySet {
		return n.ps.delay
	}
	return n.c.cfg.SyncDelay
}

func (n *Node) requestSync() {
	n.ps.pendingMu.Lock()
	if n.ps.queuedAt.IsZero() {
		n.ps.queuedAt = n.c.Clock().Now()
	}
	if n.ps.paused {
		n.ps.pausedDirty = true
		n.ps.pendingMu.Unlock()
		return
	}
	d := n.syncDelay()
	if d <= 0 {
		n.ps.pendingMu.Unlock()
		n.syncNow()
		return
	}
	if n.ps.pending {
		n.ps.pendingMu.Unlock()
		return
	}
	n.ps.pending = true
	n.ps.pendingMu.Unlock()
	n.c.Clock().AfterFunc(d, func() {
		n.ps.pendingMu.Lock()
		n.ps.pending = false
		paused := n.ps.paused
		if paused {
			n.ps.pausedDirty = true
		}
		n.ps.pendingMu.Unlock()
		if !paused && !n.Down() {
			n.syncNow()
		}
	})
}

func (n *Node) syncNow() {
	if n.proxy == nil {
		return
	}
	n.ps.syncMu.Lock()
	n.ps.pendingMu.Lock()
	n.ps.queuedAt = time.Time{} // the sync reads everything changed before this point
	n.ps.pendingMu.Unlock()
	n.ps.syncs++
	if err := n.proxy.Sync(); err != nil {
		n.c.recordErr(fmt.Errorf("proxy on node %s: sync %d: %w", n.Name(), n.ps.syncs, err))
	}
	n.ps.syncMu.Unlock()
	// The cloud load balancer health-checks the node at once (see checkAfterSync).
	n.c.checkAfterSync(n)
}

// ProxyQueuedSince returns when the oldest change the node's proxy has not synced yet
// happened (a change it was told about, waiting for its sync delay or a paused proxy),
// and false when it is in sync: kube-proxy's QueuedUpdate and Updated, which its
// /healthz answers from.
func (n *Node) ProxyQueuedSince() (time.Time, bool) {
	n.ps.pendingMu.Lock()
	defer n.ps.pendingMu.Unlock()
	return n.ps.queuedAt, !n.ps.queuedAt.IsZero()
}

// SyncProxy makes the node's proxy sync now (whatever its delay), even while paused;
// nothing happens on a node that is down or has no proxy.
func (n *Node) SyncProxy() {
	if n.proxy != nil && !n.Down() {
		n.syncNow()
	}
}

// SyncProxies makes every live node's proxy sync now (whatever its delay).
func (c *Cluster) SyncProxies() {
	for _, n := range c.Nodes() {
		if n.proxy != nil && !n.Down() {
			n.syncNow()
		}
	}
}
