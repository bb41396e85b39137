package dns

import (
	"context"
	"runtime"
	"time"

	"github.com/clusterlab/clusterlab/netsim"
)

// VirtualClock is what LookupOnClock needs of a simulation: its clock and a
// way to wait until nothing of it can move without time passing
// (*cluster.Cluster and *netsim.Network have both).
type VirtualClock interface {
	Clock() *netsim.Clock
	Quiesce()
}

// clockAfter is time.After on the virtual clock.
func clockAfter(clock *netsim.Clock) func(time.Duration) <-chan time.Time {
	return func(d time.Duration) <-chan time.Time {
		ch := make(chan time.Time, 1)
		clock.AfterFunc(d, func() { ch <- clock.Now() })
		return ch
	}
}

// LookupOnClock runs s.Lookup with the stub's reply timeouts on the
// simulation's virtual clock (see RunOnClock): a lost query costs the
// resolv.conf timeout (5 s by default) of virtual time, and a retry follows,
// without waiting on the wall clock. It sets s.After (the stub should be the
// caller's own, as one program's resolver state is). The result's Waited is
// the virtual time spent on timeouts.
func LookupOnClock(ctx context.Context, sim VirtualClock, s *Stub, name string, fam Family) (*Result, error) {
	s.After = clockAfter(sim.Clock())
	g := netsim.NewGate()
	s.mu.Lock()
	s.gate = g
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.gate = nil
		s.mu.Unlock()
	}()
	var res *Result
	var err error
	runOnClock(ctx, sim, s.timeout(), g, func() { res, err = s.Lookup(ctx, name, fam) })
	return res, err
}

// RunOnClock runs f (a lookup whose timeouts are on sim's clock: Stub.After,
// ClusterDNSOptions.ClockTimeouts) and, whenever f waits and the simulation
// is quiet, moves the virtual clock to its next timer if that is at most
// limit away (a reply timeout; anything further is not the resolver's and f
// is still working). It returns when f does, or when ctx ends and f has.
func RunOnClock(ctx context.Context, sim VirtualClock, limit time.Duration, f func()) {
	runOnClock(ctx, sim, limit, nil, f)
}

// runOnClock is RunOnClock that also waits for g to be idle before moving the clock,
// and moves it only if g stayed idle (no reply woke the stub) through a second quiet
// simulation.
func runOnClock(ctx context.Context, sim VirtualClock, limit time.Duration, g *netsim.Gate, f func()) {
	clock := sim.Clock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	for {
		select {
		case <-done:
			return
		default:
		}
		idle, wake, gen := g.State()
		if !idle {
			select {
			case <-done:
				return
			case <-wake:
			}
			continue
		}
		sim.Quiesce()
		select {
		case <-done:
			return
		default:
		}
		if g != nil {
			// A reply delivered while the simulation settled wakes the reader a moment
			// later: give it the chance before the timer can fire.
			runtime.Gosched()
			sim.Quiesce()
			if idle, _, now := g.State(); !idle || now != gen {
				continue
			}
		}
		if d, ok := clock.NextDeadline(); ok && d <= limit {
			clock.Advance(d)
		}
		if ctx.Err() != nil {
			<-done
			return
		}
	}
}
