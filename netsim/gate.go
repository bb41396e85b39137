package netsim

import "sync"

// Gate counts the goroutines of a program driven on the virtual clock that have work
// to do at the current instant (sending a query, handling a reply) rather than being
// blocked on the network or a timer. A loop that moves the clock once the simulation is
// quiet (dns.RunOnClock, scenario.DialWhoami) must also wait for its gate to be idle:
// the simulation is quiet too while a goroutine that is about to send has not been
// scheduled yet, and moving the clock then times out a round whose packets never left
// (seen under load: a DNS lookup that waited 10 s instead of 5, a UDP dial through the
// userspace proxy counted as dropped). A nil *Gate is always idle.
type Gate struct {
	mu   sync.Mutex
	busy int
	gen  uint64
	idle chan struct{} // closed while busy is 0; replaced when it rises
}

// NewGate returns an idle gate.
func NewGate() *Gate {
	ch := make(chan struct{})
	close(ch)
	return &Gate{idle: ch}
}

// Add changes the number of busy goroutines by d.
func (g *Gate) Add(d int) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gen++
	was := g.busy
	g.busy += d
	switch {
	case was == 0 && g.busy > 0:
		g.idle = make(chan struct{})
	case was > 0 && g.busy == 0:
		close(g.idle)
	}
}

// State reports whether no goroutine is busy, a channel closed when none next is, and
// a generation that changes on every Add (so a caller sees whether anything woke
// between two looks).
func (g *Gate) State() (idle bool, wake <-chan struct{}, gen uint64) {
	if g == nil {
		return true, nil, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.busy == 0, g.idle, g.gen
}
