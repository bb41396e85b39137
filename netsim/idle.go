package netsim

import "time"

// Quiesce returns once every goroutine of the process other than the caller has been
// blocked (on a channel, a lock, a netstack waiter, a timer) for three polls in a row,
// or after a bounded number of polls. With a manual clock this is the moment to move
// virtual time: nothing left can happen until a timer fires. Replay mode uses the same
// barrier before every packet; tests that drive real connections under a manual clock
// use it between clock steps instead of sleeping on wall time. It looks at the whole
// process, so it is meant for tests that run one simulation at a time.
func Quiesce() { quiesce() }

// NextDeadline returns how long until the earliest pending timer fires (zero for one
// already due), and false when no timer is pending.
func (c *Clock) NextDeadline() (time.Duration, bool) { return c.nextDeadline() }
