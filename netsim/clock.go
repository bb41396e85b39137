package netsim

import (
	"container/heap"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// Epoch is the virtual time every simulation starts at, so that timestamps in traces and
// objects do not depend on when a test ran.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is the simulation's virtual clock. Everything in the datapath reads time from it
// (conntrack timeouts, recent lists, IPVS connection entries, proxy sync delays, link
// latency) and every pod's netstack runs its TCP timers on it.
//
// A Clock runs in one of two modes:
//
//   - Running (the default for clusters with real traffic): virtual time follows the wall
//     clock from Epoch, and Advance jumps it forward, firing every timer that falls due
//     (so a test can skip a 30 s UDP timeout or a 2 min TIME_WAIT instantly).
//   - Manual: virtual time moves only through Advance. Probes and replay mode use it;
//     netstack traffic under a manual clock needs someone to advance it.
//
// Clock implements tcpip.Clock. Timers due at the same instant fire in the order they
// were set.
type Clock struct {
	mu      sync.Mutex
	manual  bool
	offset  time.Duration // virtual time elapsed through Advance
	started time.Time     // wall-clock start (monotonic) for running mode
	timers  timerHeap
	seq     uint64
}

// NewClock returns a clock at Epoch. manual selects manual mode.
func NewClock(manual bool) *Clock {
	return &Clock{manual: manual, started: time.Now()}
}

// Manual reports whether the clock only moves through Advance.
func (c *Clock) Manual() bool { return c.manual }

// Now returns the current virtual time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Epoch.Add(c.elapsedLocked())
}

// Since returns the virtual time elapsed since t.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *Clock) elapsedLocked() time.Duration {
	if c.manual {
		return c.offset
	}
	return c.offset + time.Since(c.started)
}

// NowMonotonic implements tcpip.Clock.
func (c *Clock) NowMonotonic() tcpip.MonotonicTime {
	c.mu.Lock()
	defer c.mu.Unlock()
	var m tcpip.MonotonicTime
	return m.Add(c.elapsedLocked() + time.Hour) // never zero
}

// Advance moves virtual time forward by d and runs every timer that falls due, in
// deadline order, before it returns (each callback on its own goroutine, as tcpip.Clock
// requires, but Advance waits for them).
func (c *Clock) Advance(d time.Duration) {
	if d < 0 {
		panic("netsim: Clock.Advance with a negative duration")
	}
	c.mu.Lock()
	c.offset += d
	target := c.elapsedLocked()
	if !c.manual {
		for _, t := range c.timers {
			c.armLocked(t, target)
		}
	}
	c.mu.Unlock()
	// Fire due timers one at a time so that timers set by callbacks, and due by now,
	// fire too.
	for i := 0; i < 1_000_000; i++ {
		c.mu.Lock()
		if len(c.timers) == 0 || c.timers[0].deadline > target {
			c.mu.Unlock()
			return
		}
		t := heap.Pop(&c.timers).(*clockTimer)
		t.index = -1
		if t.real != nil {
			t.real.Stop()
			t.real = nil
		}
		c.mu.Unlock()
		done := make(chan struct{})
		go func() { defer close(done); t.f() }()
		<-done
	}
}

// AfterFunc implements tcpip.Clock: f runs on its own goroutine once d of virtual time
// has passed.
func (c *Clock) AfterFunc(d time.Duration, f func()) tcpip.Timer {
	t := &clockTimer{c: c, f: f, index: -1}
	t.Reset(d)
	return t
}

// armLocked (re)starts the wall-clock timer behind t in running mode.
func (c *Clock) armLocked(t *clockTimer, now time.Duration) {
	if t.real != nil {
		t.real.Stop()
	}
	wait := t.deadline - now
	if wait < 0 {
		wait = 0
	}
	t.real = time.AfterFunc(wait, func() { c.fire(t) })
}

// fire runs t if it is still pending (called from a wall-clock timer).
func (c *Clock) fire(t *clockTimer) {
	c.mu.Lock()
	if t.index < 0 {
		c.mu.Unlock()
		return
	}
	now := c.elapsedLocked()
	if t.deadline > now { // Advance re-armed it with a later wall time; wait for that
		c.mu.Unlock()
		return
	}
	heap.Remove(&c.timers, t.index)
	t.index = -1
	t.real = nil
	c.mu.Unlock()
	t.f()
}

type clockTimer struct {
	c        *Clock
	f        func()
	deadline time.Duration
	seq      uint64
	index    int
	real     *time.Timer
}

// Stop implements tcpip.Timer.
func (t *clockTimer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&c.timers, t.index)
	t.index = -1
	if t.real != nil {
		t.real.Stop()
		t.real = nil
	}
	return true
}

// Reset implements tcpip.Timer.
func (t *clockTimer) Reset(d time.Duration) {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.index >= 0 {
		heap.Remove(&c.timers, t.index)
	}
	now := c.elapsedLocked()
	t.deadline = now + d
	c.seq++
	t.seq = c.seq
	heap.Push(&c.timers, t)
	if !c.manual {
		c.armLocked(t, now)
	}
}

type timerHeap []*clockTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].deadline != h[j].deadline {
		return h[i].deadline < h[j].deadline
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *timerHeap) Push(x any)   { t := x.(*clockTimer); t.index = len(*h); *h = append(*h, t) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

var _ tcpip.Clock = (*Clock)(nil)
