package netsim

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// Advance fires due timers in deadline order, and in the order they were set when their
// deadlines are equal; stopped timers do not fire; a reset timer fires once, at its new
// deadline; timers not yet due stay pending.
func TestClockAdvanceOrder(t *testing.T) {
	c := NewClock(true)
	var fired []string
	add := func(name string, d time.Duration) *clockTimer {
		return c.AfterFunc(d, func() { fired = append(fired, name) }).(*clockTimer)
	}
	add("b", 20*time.Millisecond)
	add("a", 10*time.Millisecond)
	add("c", 20*time.Millisecond) // same deadline as b, set later
	stopped := add("stopped", 5*time.Millisecond)
	moved := add("moved", 1*time.Millisecond)
	add("late", time.Hour)
	var timers []*clockTimer
	for i := 0; i < 50; i++ { // churn: many timers set and stopped in between
		timers = append(timers, add(fmt.Sprint("x", i), time.Minute))
	}
	for _, x := range timers {
		x.Stop()
	}
	if !stopped.Stop() || stopped.Stop() {
		t.Error("Stop should report true for a pending timer, then false")
	}
	moved.Reset(15 * time.Millisecond)
	c.Advance(30 * time.Millisecond)
	if got, want := strings.Join(fired, " "), "a moved b c"; got != want {
		t.Errorf("fired %q, want %q", got, want)
	}
	if d, ok := c.nextDeadline(); !ok || d != time.Hour-30*time.Millisecond {
		t.Errorf("next deadline %v %v, want the late timer's", d, ok)
	}
	if len(c.timers) != 1 {
		t.Errorf("%d timers pending, want 1", len(c.timers))
	}
}

// The clock's monotonic readings are built without MonotonicTime.Add when the layout
// allows, and equal what Add builds either way.
func TestMonotonicReadings(t *testing.T) {
	if !monotonicDirect {
		t.Log("tcpip.MonotonicTime's layout changed: readings go through Add")
	}
	for _, ns := range []int64{0, 1, 42, int64(time.Hour), int64(time.Hour) + 987_654_321, 1 << 40} {
		if got, want := monotonic(ns), (tcpip.MonotonicTime{}).Add(time.Duration(ns)); got != want {
			t.Errorf("monotonic(%d) = %v, want %v", ns, got, want)
		}
	}
	c := NewClock(true)
	before := c.NowMonotonic()
	c.Advance(1500 * time.Millisecond)
	if d := c.NowMonotonic().Sub(before); d != 1500*time.Millisecond {
		t.Errorf("after Advance(1.5s) the monotonic reading moved %v", d)
	}
}

// TestClockAdvanceOverflowPanics: moving the clock past the largest time.Duration is a
// programming error that panics, not a clock that wraps to a negative time.
func TestClockAdvanceOverflowPanics(t *testing.T) {
	c := NewClock(true)
	c.Advance(math.MaxInt64 / 2)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "past the largest time.Duration") {
			t.Errorf("recovered %v", r)
		}
		if c.Since(Epoch) < 0 {
			t.Error("the clock wrapped")
		}
	}()
	c.Advance(math.MaxInt64/2 + 2)
}

// On a running clock too, Advance runs the timers it brings due one after the other, in
// deadline order, and has waited for every one when it returns. It used to reset their
// wall-clock timers to fire at once: a callback could then start on the wall-clock
// timer's goroutine, while an earlier one ran, and still be running after Advance had
// returned (IPVS's graceful-termination check, in proxy/kubeproxy's tests under load).
// The callbacks take a few milliseconds, which was ample for that goroutine to start.
func TestClockAdvanceRunningWaitsForDueTimers(t *testing.T) {
	c := NewClock(false)
	var mu sync.Mutex
	var log []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		log = append(log, s)
	}
	slow := func(name string) func() {
		return func() {
			note(name + "+")
			time.Sleep(5 * time.Millisecond) // a callback that takes a while
			note(name + "-")
		}
	}
	for i := 0; i < 4; i++ {
		c.AfterFunc(time.Minute+time.Duration(i)*time.Second, slow(fmt.Sprint(i)))
	}
	c.AfterFunc(time.Hour, func() { note("late") })
	c.Advance(2 * time.Minute)
	mu.Lock()
	got := strings.Join(log, " ")
	mu.Unlock()
	if want := "0+ 0- 1+ 1- 2+ 2- 3+ 3-"; got != want {
		t.Errorf("callbacks when Advance returned: %q, want %q", got, want)
	}
	if d, ok := c.NextDeadline(); !ok || d > 58*time.Minute {
		t.Errorf("the timer not yet due: next deadline %v %v", d, ok)
	}
}

// In running mode one wall-clock timer serves every pending timer, armed for the
// earliest: a timer set earlier than the one it is armed for, timers due at the same
// wake-up, a timer moved earlier and, after an Advance, a timer the jump brought near
// all fire by the wall clock; a stopped one does not.
func TestClockRunningWakeUps(t *testing.T) {
	c := NewClock(false)
	fired := make(chan string, 16)
	add := func(name string, d time.Duration) tcpip.Timer {
		return c.AfterFunc(d, func() { fired <- name })
	}
	wait := func(names ...string) {
		t.Helper()
		want := map[string]bool{}
		for _, n := range names {
			want[n] = true
		}
		deadline := time.After(20 * time.Second)
		for len(want) > 0 {
			select {
			case n := <-fired:
				if !want[n] {
					t.Fatalf("%s fired, waiting for %v", n, want)
				}
				delete(want, n)
			case <-deadline:
				t.Fatalf("not fired: %v", want)
			}
		}
	}
	add("late", time.Hour)
	add("soon", 2*time.Millisecond) // earlier than the wall-clock timer's arming
	add("pair1", 5*time.Millisecond)
	add("pair2", 5*time.Millisecond)
	moved := add("moved", 2*time.Hour)
	moved.Reset(8 * time.Millisecond)
	wait("soon", "pair1", "pair2", "moved")
	// The wall-clock timer armed for a timer that then moves later, or stops, wakes
	// up to nothing due and arms itself for the next.
	x := add("x", 30*time.Millisecond)
	x.Reset(60 * time.Millisecond)
	stopped := add("stopped", 40*time.Millisecond)
	stopped.Stop()
	wait("x")
	// An Advance that brings the last timer 20 ms near leaves the wall-clock timer
	// armed for the new offset.
	d, ok := c.NextDeadline()
	if !ok || d < time.Minute {
		t.Fatalf("next deadline %v %v, want the late timer's", d, ok)
	}
	c.Advance(d - 20*time.Millisecond)
	wait("late")
	if d, ok := c.NextDeadline(); ok {
		t.Errorf("a timer is still pending, due in %v", d)
	}
	select {
	case n := <-fired:
		t.Errorf("%s fired again", n)
	default:
	}
}
