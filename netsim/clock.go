package netsim

import (
	"container/heap"
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

	mu sync.Mutex
	// timers are the pending timers, a min-heap by deadline and then seq (the order
	// they fire in); each knows its index.
	timers timerHeap
	seq    uint64
	// Running mode: one wall-clock timer, armed for the earliest pending deadline
	// (wakeAt, virtual; -1 when not known to be armed), fires every due timer. A
	// wall-clock timer per pending timer put tens of thousands in the runtime's timer
	// heap (TCP's TIME_WAIT timers), which the scheduler then scanned whole each time
	// one reset earlier fell due: 8 % of a connection benchmark's CPU.
	wake   *time.Timer
	wakeAt time.Duration
	// advancing counts the Advance calls under way, and advanceTo is the furthest
	// target among them: in running mode a timer due by then is Advance's to fire
	// (and wait for), not its wall-clock timer's.
	advancing int
	advanceTo time.Duration

	labels context.Context // a cluster's pprof labels for timer goroutines; nil: none
}

// NewClock returns a clock at Epoch. manual selects manual mode.
func NewClock(manual bool) *Clock {
	return &Clock{manual: manual, started: time.Now(), wakeAt: -1}
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
		// The timers due by target are Advance's to fire and wait for: a wall-clock
		// wake-up meanwhile leaves them (fireWake). (Firing a due one from the
		// wall-clock timer let its callback run on a goroutine of its own, which
		// Advance did not wait for: under load IPVS's graceful-termination check ran
		// after Advance had returned.) The wall-clock timer was armed for the old
		// offset: at the end it is armed again for the new one.
		c.advancing++
		c.advanceTo = max(c.advanceTo, target)
		defer func() {
			c.mu.Lock()
			c.advancing--
			c.wakeAt = -1
			c.armLocked()
			c.mu.Unlock()
		}()
	}
	c.mu.Unlock()
	for i := 0; i < 1_000_000; i++ {
		c.mu.Lock()
		if len(c.timers) == 0 || c.timers[0].deadline > target {
			c.mu.Unlock()
			return
		}
		next := c.timers[0]
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
	if len(c.timers) == 0 {
		return 0, false
	}
	return max(0, c.timers[0].deadline-c.elapsed()), true
}

type clockTimer struct {
	c        *Clock
	f        func()
	deadline time.Duration // virtual time since Epoch
	seq      uint64
	pending  bool
	idx      int // position in Clock.timers while pending
}

// addLocked puts t among the pending timers, or moves it to its new place there.
func (c *Clock) addLocked(t *clockTimer) {
	if t.pending {
		heap.Fix(&c.timers, t.idx)
		return
	}
	t.pending = true
	heap.Push(&c.timers, t)
}

// removeLocked takes t out of the pending timers (if it is there).
func (c *Clock) removeLocked(t *clockTimer) {
	if !t.pending {
		return
	}
	heap.Remove(&c.timers, t.idx)
	t.pending = false
}

// timerHeap is heap.Interface over the pending timers: the earliest deadline first,
// and of equal deadlines the one set first.
type timerHeap []*clockTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	return h[i].deadline < h[j].deadline || h[i].deadline == h[j].deadline && h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*clockTimer)
	t.idx = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}

// label puts the clock's cluster label on the calling goroutine, a timer's own.
func (c *Clock) label() {
	if c.labels != nil {
		pprof.SetGoroutineLabels(c.labels)
	}
}

// fireWake runs when the wall-clock timer expires (running mode): it fires every due
// timer, each on a goroutine of its own (the last on this one), and arms the wall-clock
// timer for the next. While an Advance is under way it leaves everything to it: the
// timers due by its target are its own, and it arms the wall-clock timer when it ends.
func (c *Clock) fireWake() {
	c.label()
	c.mu.Lock()
	c.wakeAt = -1
	if c.advancing > 0 {
		c.mu.Unlock()
		return
	}
	now := c.elapsed()
	var due []*clockTimer
	for len(c.timers) > 0 && c.timers[0].deadline <= now {
		t := c.timers[0]
		c.removeLocked(t)
		due = append(due, t)
	}
	c.armLocked()
	c.mu.Unlock()
	for i, t := range due {
		if i == len(due)-1 {
			t.f()
		} else {
			go func() {
				c.label()
				t.f()
			}()
		}
	}
}

// armLocked makes sure that the wall-clock timer fires by the earliest pending
// deadline (running mode). An earlier arming is left: its wake-up finds nothing due
// and arms it again, which costs less than resetting it each time the earliest
// timer is stopped or moved later.
func (c *Clock) armLocked() {
	if c.manual || len(c.timers) == 0 {
		return
	}
	at := c.timers[0].deadline
	if c.wakeAt >= 0 && c.wakeAt <= at {
		return
	}
	d := at - c.elapsed()
	if c.wake == nil {
		c.wake = time.AfterFunc(d, c.fireWake)
	} else {
		c.wake.Reset(d)
	}
	c.wakeAt = at
}

// Stop implements tcpip.Timer.
func (t *clockTimer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	was := t.pending
	c.removeLocked(t)
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
	c.armLocked()
}

var _ tcpip.Clock = (*Clock)(nil)
