package netsim

import (
	"context"
	"math"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

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
// Clock implements tcpip.Clock. Timers that Advance fires, fire in deadline order, and in
// the order they were set when their deadlines are equal.
type Clock struct {
	manual  bool
	offset  atomic.Int64 // virtual nanoseconds added by Advance
	started time.Time    // wall-clock start (monotonic) for running mode

	mu     sync.Mutex
	timers []*clockTimer // pending timers, in no order; each knows its index
	seq    uint64
	// advancing counts the Advance calls under way, and advanceTo is the furthest
	// target among them: in running mode a timer due by then is Advance's to fire
	// (and wait for), not its wall-clock timer's.
	advancing int
	advanceTo time.Duration

	labels context.Context // a cluster's pprof labels for timer goroutines; nil: none
}

// NewClock returns a clock at Epoch. manual selects manual mode.
func NewClock(manual bool) *Clock {
	return &Clock{manual: manual, started: time.Now()}
}

// Manual reports whether the clock only moves through Advance.
func (c *Clock) Manual() bool { return c.manual }

// elapsed is the virtual time since Epoch.
func (c *Clock) elapsed() time.Duration {
	if c.manual {
		return time.Duration(c.offset.Load())
	}
	return time.Duration(c.offset.Load()) + time.Since(c.started)
}

// Now returns the current virtual time.
func (c *Clock) Now() time.Time { return Epoch.Add(c.elapsed()) }

// Since returns the virtual time elapsed since t.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// NowMonotonic implements tcpip.Clock.
func (c *Clock) NowMonotonic() tcpip.MonotonicTime {
	return monotonic(int64(c.elapsed() + time.Hour)) // never zero
}

// monotonic returns the tcpip.MonotonicTime ns nanoseconds after the zero one. Netstack
// reads the clock some eighty times a connection, and MonotonicTime's only constructor,
// Add, goes through three time.Time conversions (about 250 instructions). A MonotonicTime
// is one int64 of nanoseconds, so it is written directly when monotonicDirect says that
// the layout is what it was when this was written (checked once, against Add); otherwise
// Add builds it.
func monotonic(ns int64) tcpip.MonotonicTime {
	if monotonicDirect {
		return *(*tcpip.MonotonicTime)(unsafe.Pointer(&ns))
	}
	return tcpip.MonotonicTime{}.Add(time.Duration(ns))
}

// monotonicDirect reports whether a tcpip.MonotonicTime is an int64 of nanoseconds: the
// same size, and the same values as Add makes for a few readings.
var monotonicDirect = func() bool {
	if unsafe.Sizeof(tcpip.MonotonicTime{}) != unsafe.Sizeof(int64(0)) {
		return false
	}
	for _, ns := range []int64{0, 1, 999_999_999, int64(time.Hour) + 123_456_789, 1 << 62} {
		direct := ns
		if *(*tcpip.MonotonicTime)(unsafe.Pointer(&direct)) != (tcpip.MonotonicTime{}).Add(time.Duration(ns)) {
			return false
		}
	}
	return true
}()

// Advance moves virtual time forward by d and runs every timer that falls due, in
// deadline order, before it returns (each callback on its own goroutine, as tcpip.Clock
// requires, but Advance waits for it).
func (c *Clock) Advance(d time.Duration) {
	if d < 0 {
		panic("netsim: Clock.Advance with a negative duration")
	}
	if int64(d) > math.MaxInt64-c.offset.Load() {
		panic("netsim: Clock.Advance past the largest time.Duration")
	}
	c.mu.Lock()
	c.offset.Add(int64(d))
	target := c.elapsed()
	if !c.manual {
		// Wall-clock timers were armed for the old offset: bring forward those still
		// in the future, and stop those now due, which the loop below fires and waits
		// for. (Resetting a due one to fire at once let its wall-clock timer run the
		// callback on a goroutine of its own, which Advance did not wait for: under
		// load IPVS's graceful-termination check ran after Advance had returned.) A
		// wall-clock timer that fires anyway leaves a due timer to Advance (fireReal).
		c.advancing++
		c.advanceTo = max(c.advanceTo, target)
		defer func() {
			c.mu.Lock()
			c.advancing--
			c.mu.Unlock()
		}()
		for _, t := range c.timers {
			if t.real == nil {
				continue
			}
			if t.deadline <= target {
				t.real.Stop()
			} else {
				t.real.Reset(t.deadline - target)
			}
		}
	}
	c.mu.Unlock()
	for i := 0; i < 1_000_000; i++ {
		c.mu.Lock()
		var next *clockTimer
		for _, t := range c.timers {
			if t.deadline <= target && (next == nil || t.deadline < next.deadline || t.deadline == next.deadline && t.seq < next.seq) {
				next = t
			}
		}
		if next == nil {
			c.mu.Unlock()
			return
		}
		c.removeLocked(next)
		c.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.label()
			next.f()
		}()
		<-done
	}
}

// AfterFunc implements tcpip.Clock: f runs on its own goroutine once d of virtual time
// has passed.
func (c *Clock) AfterFunc(d time.Duration, f func()) tcpip.Timer {
	t := &clockTimer{c: c, f: f}
	t.Reset(d)
	return t
}

// nextDeadline returns how long until the earliest pending timer.
func (c *Clock) nextDeadline() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var min time.Duration
	found := false
	for _, t := range c.timers {
		if !found || t.deadline < min {
			min, found = t.deadline, true
		}
	}
	if !found {
		return 0, false
	}
	return max(0, min-c.elapsed()), true
}

type clockTimer struct {
	c        *Clock
	f        func()
	deadline time.Duration // virtual time since Epoch
	seq      uint64
	pending  bool
	idx      int         // position in Clock.timers while pending
	real     *time.Timer // running mode
}

// addLocked puts t among the pending timers (if it is not there yet).
func (c *Clock) addLocked(t *clockTimer) {
	if t.pending {
		return
	}
	t.pending, t.idx = true, len(c.timers)
	c.timers = append(c.timers, t)
}

// removeLocked takes t out of the pending timers (if it is there).
func (c *Clock) removeLocked(t *clockTimer) {
	if !t.pending {
		return
	}
	last := len(c.timers) - 1
	c.timers[t.idx] = c.timers[last]
	c.timers[t.idx].idx = t.idx
	c.timers[last] = nil
	c.timers = c.timers[:last]
	t.pending = false
}

// label puts the clock's cluster label on the calling goroutine, a timer's own.
func (c *Clock) label() {
	if c.labels != nil {
		pprof.SetGoroutineLabels(c.labels)
	}
}

// fireReal runs when the wall-clock timer expires.
func (t *clockTimer) fireReal() {
	c := t.c
	c.label()
	c.mu.Lock()
	if !t.pending || c.advancing > 0 && t.deadline <= c.advanceTo {
		// Gone, or due within an Advance under way, which fires it and waits for it.
		c.mu.Unlock()
		return
	}
	if rest := t.deadline - c.elapsed(); rest > 0 { // stale wake-up of an earlier arming
		t.real.Reset(rest)
		c.mu.Unlock()
		return
	}
	c.removeLocked(t)
	c.mu.Unlock()
	t.f()
}

// Stop implements tcpip.Timer.
func (t *clockTimer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	was := t.pending
	c.removeLocked(t)
	if t.real != nil {
		t.real.Stop()
	}
	return was
}

// Reset implements tcpip.Timer.
func (t *clockTimer) Reset(d time.Duration) {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	t.deadline = c.elapsed() + d
	c.seq++
	t.seq = c.seq
	c.addLocked(t)
	if c.manual {
		return
	}
	if t.real == nil {
		t.real = time.AfterFunc(d, t.fireReal)
	} else {
		t.real.Reset(d)
	}
}

var _ tcpip.Clock = (*Clock)(nil)
