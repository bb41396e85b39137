package emulator

import (
	"sync"
	"time"
)

// Clock is where the model reads time. netsim.Clock satisfies it; ManualClock is a
// stand-alone virtual clock for tests and the CLI. The model never sleeps and sets no
// timers on the clock: connection expiry, persistence templates, the lblc/lblcr garbage
// collection and the destination trash are events in the model's own queue, run in
// deadline order whenever a method is called at or after their time.
type Clock interface {
	Now() time.Time
}

// Epoch is where a ManualClock starts.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ManualClock is a virtual clock that moves only through Advance.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a clock at Epoch.
func NewManualClock() *ManualClock { return &ManualClock{now: Epoch} }

// Now returns the current virtual time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (a negative d panics: a programmer error).
func (c *ManualClock) Advance(d time.Duration) {
	if d < 0 {
		panic("ipvs: ManualClock.Advance with a negative duration")
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
