package netsim

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// LinkFaults are the faults of one link, all drawn from the link's seeded source.
type LinkFaults struct {
	Loss      float64       // probability that a packet is lost
	Latency   time.Duration // one-way delay on the virtual clock
	Jitter    time.Duration // extra uniform delay in [0, Jitter)
	Reorder   float64       // probability that a packet is held back by ReorderBy
	ReorderBy time.Duration // how long a reordered packet is held (default 1ms)
	Duplicate float64       // probability that a packet is delivered twice
}

func (f LinkFaults) zero() bool { return f == LinkFaults{} }

// Link is a point-to-point link with faults: a pod's veth, a node's uplink, an external
// host's link. Packets keep their order unless reordering is asked for.
type Link struct {
	name    string
	flushMu sync.Mutex // serialises deliveries so they keep their order
	mu      sync.Mutex
	f       LinkFaults
	rng     *rand.Rand
	// delivery queue for delayed packets, in due order
	pending  []delayed
	timerSet bool
	lost     uint64
	sent     uint64
	// clean is set while the link has no faults and holds nothing back: packets then
	// cross it at once without taking mu, counted in fast by direction. Each direction's
	// count has a cache line of its own: they are written by different goroutines (a pod's
	// own and its node's datapath), which a shared line would make wait for each other.
	clean atomic.Bool
	_     [64]byte
	fast  [2]linkCounter // packets sent by send and by sendBack on the fast path
}

// linkCounter is a counter padded to a cache line.
type linkCounter struct {
	n atomic.Uint64
	_ [56]byte
}

type delayed struct {
	due     time.Time
	data    frame
	deliver func(frame)
}

func newLink(name string, seed uint64) *Link {
	s := seedFor(seed, "link/"+name)
	l := &Link{name: name, rng: rand.New(rand.NewChaCha8(s))}
	l.clean.Store(true)
	return l
}

// updateCleanLocked recomputes clean after a change of faults or of the pending queue.
func (l *Link) updateCleanLocked() { l.clean.Store(l.f.zero() && len(l.pending) == 0) }

// Name returns the link's name ("pod default/web-1", "node node-a uplink", ...).
func (l *Link) Name() string { return l.name }

// SetFaults sets the link's faults.
func (l *Link) SetFaults(f LinkFaults) {
	l.mu.Lock()
	l.f = f
	l.updateCleanLocked()
	l.mu.Unlock()
}

// Faults returns the link's faults.
func (l *Link) Faults() LinkFaults {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f
}

// Counters returns how many packets the link carried and lost.
func (l *Link) Counters() (sent, lost uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent + l.fast[0].n.Load() + l.fast[1].n.Load(), l.lost
}

// send carries data over the link, applying its faults, and calls deliver (possibly
// later, on the virtual clock).
func (l *Link) send(c *Network, data frame, deliver func(frame)) {
	if l.pass(0) {
		deliver(data)
		return
	}
	l.sendFaulty(c, data, deliver)
}

// sendBack is send for packets in the link's other direction (from a node to a pod). The
// direction only chooses which fast-path counter counts the packet.
func (l *Link) sendBack(c *Network, data frame, deliver func(frame)) {
	if l.pass(1) {
		deliver(data)
		return
	}
	l.sendFaulty(c, data, deliver)
}

// pass reports whether a packet crosses the link at once, untouched: no faults and nothing
// held back. It then counts the packet as sent in direction dir, and the caller delivers it
// itself (so that the fast path needs no closure).
func (l *Link) pass(dir int) bool {
	if l == nil {
		return true
	}
	if l.clean.Load() {
		l.fast[dir].n.Add(1)
		return true
	}
	return false
}

// sendFaulty is send for a link with faults or packets held back.
func (l *Link) sendFaulty(c *Network, data frame, deliver func(frame)) {
	if l == nil {
		deliver(data)
		return
	}
	l.mu.Lock()
	f := l.f
	if f.zero() && len(l.pending) == 0 {
		l.sent++
		l.mu.Unlock()
		deliver(data)
		return
	}
	if f.Loss > 0 && l.rng.Float64() < f.Loss {
		l.lost++
		l.mu.Unlock()
		return
	}
	l.sent++
	copies := 1
	if f.Duplicate > 0 && l.rng.Float64() < f.Duplicate {
		copies = 2
	}
	now := c.clock.Now()
	for i := 0; i < copies; i++ {
		d := f.Latency
		if f.Jitter > 0 {
			d += time.Duration(l.rng.Int64N(int64(f.Jitter)))
		}
		if f.Reorder > 0 && l.rng.Float64() < f.Reorder {
			by := f.ReorderBy
			if by == 0 {
				by = time.Millisecond
			}
			d += by
		}
		b := data
		if i > 0 {
			// The duplicate gets its own bytes: a frame goes to one stack only.
			b = plainFrame(append([]byte(nil), data.b...))
		}
		l.insertLocked(delayed{due: now.Add(d), data: b, deliver: deliver})
	}
	l.updateCleanLocked()
	l.armLocked(c, now)
	l.mu.Unlock()
}

func (l *Link) insertLocked(d delayed) {
	i := len(l.pending)
	for i > 0 && (l.pending[i-1].due.After(d.due)) {
		i--
	}
	l.pending = append(l.pending, delayed{})
	copy(l.pending[i+1:], l.pending[i:])
	l.pending[i] = d
}

func (l *Link) armLocked(c *Network, now time.Time) {
	if l.timerSet || len(l.pending) == 0 {
		return
	}
	l.timerSet = true
	wait := l.pending[0].due.Sub(now)
	if wait < 0 {
		wait = 0
	}
	c.clock.AfterFunc(wait, func() { l.flush(c) })
}

// flush delivers every packet that is due, in order.
func (l *Link) flush(c *Network) {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	for {
		l.mu.Lock()
		l.timerSet = false
		now := c.clock.Now()
		if len(l.pending) == 0 {
			l.updateCleanLocked()
			l.mu.Unlock()
			return
		}
		if l.pending[0].due.After(now) {
			l.armLocked(c, now)
			l.mu.Unlock()
			return
		}
		d := l.pending[0]
		l.pending = l.pending[1:]
		l.mu.Unlock()
		d.deliver(d.data)
	}
}

// probeLost decides whether a probe's packet is lost on the link: a choice point when the
// probe explores all branches, a draw from the link's seeded source otherwise. A packet
// that crosses adds the link's latency to the probe's delay, and a jitter drawn from the
// link's source (none when exploring all branches: draws would change state).
func (l *Link) probeLost(env *penv) bool {
	if l == nil || l.clean.Load() { // clean: no faults (nor held packets), nothing to draw
		return false
	}
	l.mu.Lock()
	f := l.f
	l.mu.Unlock()
	if f.Loss > 0 {
		var lost bool
		if pc, ok := env.ch.(*pathChooser); ok {
			lost = pc.chance(f.Loss)
		} else {
			l.mu.Lock()
			lost = l.rng.Float64() < f.Loss
			l.mu.Unlock()
		}
		if lost {
			env.step(TraceStep{Kind: StepFault, Detail: "lost on link " + l.name})
			return true
		}
	}
	if env.delay != nil && (f.Latency > 0 || f.Jitter > 0) {
		d := f.Latency
		if _, explore := env.ch.(*pathChooser); f.Jitter > 0 && !explore {
			l.mu.Lock()
			d += time.Duration(l.rng.Int64N(int64(f.Jitter)))
			l.mu.Unlock()
		}
		*env.delay += d
		if env.trace != nil {
			env.step(TraceStep{Kind: StepFault, Detail: fmt.Sprintf("delayed %s on link %s (%s in all)", d, l.name, *env.delay)})
		}
	}
	return false
}

// Uplink returns the node's link to the cluster network, whose faults can be set.
func (n *Node) Uplink() *Link { return n.uplinkLink }

// Partition cuts the cluster network into groups: places in different groups cannot
// reach each other; places in no group reach everyone. A place is a node name or
// "external" (all external hosts and middleboxes). Partition replaces any earlier
// partition.
func (c *Network) Partition(groups ...[]string) error {
	p := map[string]int{}
	for i, g := range groups {
		for _, name := range g {
			if name != "external" && c.Node(name) == nil {
				return fmt.Errorf("partition: no node %q", name)
			}
			if _, dup := p[name]; dup {
				return fmt.Errorf("partition: %q is in two groups", name)
			}
			p[name] = i + 1
		}
	}
	c.fabric.mu.Lock()
	c.fabric.partition = p
	c.fabric.unlock()
	return nil
}

// Heal removes any partition.
func (c *Network) Heal() { _ = c.Partition() }

// KillNode makes a node die: its datapath stops, its pods die with their sockets, and the
// cluster network drops everything addressed to it. (In a Kubernetes cluster its objects
// stay in the store, as a NotReady node's do, until someone removes them.)
func (c *Network) KillNode(name string) error {
	n := c.Node(name)
	if n == nil {
		return fmt.Errorf("no node %q", name)
	}
	if !n.down.CompareAndSwap(false, true) {
		return nil
	}
	for _, p := range c.Pods() {
		if p.node == n && !p.hostNetwork {
			p.kill()
		}
	}
	return nil
}

// Down reports whether the node has been killed.
func (n *Node) Down() bool { return n.down.Load() }
