package dns

import (
	"context"
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

// LookupOnClock runs s.Lookup with the stub's reply timeouts on the
// simulation's virtual clock: whenever the lookup waits and the simulation is
// quiet, the clock jumps to its next timer, so a lost query costs the
// resolv.conf timeout (5 s by default) of virtual time, and a retry follows,
// without waiting on the wall clock. It sets s.After (the stub should be the
// caller's own, as one program's resolver state is). The result's Waited is
// the virtual time spent on timeouts.
func LookupOnClock(ctx context.Context, sim VirtualClock, s *Stub, name string, fam Family) (*Result, error) {
	clock := sim.Clock()
	s.After = func(d time.Duration) <-chan time.Time {
		ch := make(chan time.Time, 1)
		clock.AfterFunc(d, func() { ch <- clock.Now() })
		return ch
	}
	var res *Result
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err = s.Lookup(ctx, name, fam)
	}()
	limit := s.timeout()
	for {
		select {
		case <-done:
			return res, err
		default:
		}
		sim.Quiesce()
		select {
		case <-done:
			return res, err
		default:
		}
		// The lookup waits: for a reply timeout when the next timer is one
		// (at most a timeout away); anything further is not the stub's, and
		// the lookup is still working.
		if d, ok := clock.NextDeadline(); ok && d <= limit {
			clock.Advance(d)
		}
		if ctx.Err() != nil {
			<-done
			return res, err
		}
	}
}
