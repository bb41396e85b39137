package netsim

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Quiesce returns once every goroutine of the process other than the caller has been
// blocked (on a channel, a lock, a netstack waiter, a timer) for three polls in a row,
// or when it gives up (after 100 000 polls or 5 s of wall time, as Network.Quiesce
// does). It looks at the whole
// PROCESS: goroutines of every simulation, of the test framework and of the program all
// count, so with two simulations running at once (t.Parallel tests, a program with two
// clusters) it waits for both, and, if the other never rests, until it gives up. Prefer
// Network.Quiesce, which waits for one cluster only; Quiesce stays for callers without a
// cluster at hand.
func Quiesce() { quiesce(quiesceMaxPolls, quiesceMaxWait) }

// Quiesce returns once every goroutine of this cluster, and every goroutine that belongs
// to no cluster (the caller's helpers: a test's dialing goroutine, an app server it
// started itself), has been blocked for three polls in a row. Goroutines of other
// clusters in the same process are ignored, so simulations running side by side do not
// wait for each other. With a manual clock this is the moment to move virtual time:
// nothing of this cluster can happen until a timer fires. Tests that drive real
// connections under a manual clock call it between clock steps instead of sleeping on
// wall time.
//
// A goroutine belongs to a cluster when it carries the cluster's pprof label
// (netsim-cluster=<id>): the cluster puts it on the goroutines it starts (node datapaths,
// the netstack goroutines of every node, pod and external host, timer callbacks, and
// whatever runs through Network.Do and Network.Go: a kubelet's app servers, a load
// balancer's health checks), and goroutines inherit it from the goroutine
// that started them. A goroutine that sets its own labels with pprof.Do or
// pprof.SetGoroutineLabels drops the cluster's label and counts as belonging to none.
//
// Each poll takes a dump of every goroutine (runtime.Stack), which stops the world, and
// reads each goroutine's state and labels from its header. The labels are there because
// the first cluster of the process turns on GODEBUG=tracebacklabels=1 (with os.Setenv),
// unless GODEBUG sets tracebacklabels already; a side effect is that panic tracebacks
// show goroutine labels too. With tracebacklabels=0 set by the user, every busy
// goroutine counts, as in the package-level Quiesce. After a busy poll it backs off (up
// to a millisecond of sleep) so the busy goroutines can get on. It gives up after 100 000
// polls or 5 s of wall time, whichever comes first, and returns as if the cluster were
// quiet: something of the cluster, or a goroutine of no cluster, never rests (a goroutine
// spinning, a stream that never ends). The caller then moves on, a manual clock may
// advance, with work still in flight, so what follows may depend on timing.
func (c *Network) Quiesce() { c.quiesce(quiesceMaxPolls, quiesceMaxWait) }

// The bounds of a quiescence wait.
const (
	quiesceMaxPolls = 100000
	quiesceMaxWait  = 5 * time.Second
)

// clusterLabel is the pprof label key that marks a cluster's goroutines.
const clusterLabel = "netsim-cluster"

var clusterIDs atomic.Uint64

// newClusterLabels returns a context carrying a fresh cluster id's label, and the id.
func newClusterLabels() (context.Context, string) {
	tracebackLabels()
	id := strconv.FormatUint(clusterIDs.Add(1), 10)
	return pprof.WithLabels(context.Background(), pprof.Labels(clusterLabel, id)), id
}

// labeled runs f on a goroutine that carries the cluster's label, and waits for it:
// every goroutine f starts, directly or through netstack, inherits the label. The
// caller's own labels are left alone. A panic in f is raised again in the caller.
func (c *Network) labeled(f func()) {
	if c.labels == nil {
		f()
		return
	}
	done := make(chan struct{})
	var (
		p        any
		panicked = true
	)
	go func() {
		defer close(done)
		defer func() {
			if panicked {
				p = recover()
			}
		}()
		pprof.SetGoroutineLabels(c.labels)
		f()
		panicked = false
	}()
	<-done
	if panicked && p != nil {
		panic(p)
	}
}

// goLabeled starts f on a new goroutine that carries the cluster's label.
func (c *Network) goLabeled(f func()) {
	labels := c.labels
	go func() {
		if labels != nil {
			pprof.SetGoroutineLabels(labels)
		}
		f()
	}()
}

// quiesce is Network.Quiesce with its bounds as parameters; it reports how many polls it
// took and whether the last three found the cluster quiet.
func (c *Network) quiesce(maxPolls int, maxWait time.Duration) (polls int, quiet bool) {
	buf := make([]byte, 1<<20)
	own := `"` + clusterLabel + `": "` + c.id + `"`
	return pollQuiet(maxPolls, maxWait, func() bool {
		dump := stackDump(&buf)
		// Without labels in the dump (GODEBUG=tracebacklabels=0 set by the user, or a
		// cluster without labels) every busy goroutine counts, as in Quiesce.
		labels := c.id != "" && bytes.Contains(dump, []byte(" labels:{"))
		for _, g := range busyGoroutines(dump) {
			if !labels || !strings.Contains(g, `"`+clusterLabel+`": `) || strings.Contains(g, own) {
				return true
			}
		}
		return false
	})
}

// quiesce is Quiesce with its bounds as parameters (see Network.quiesce).
func quiesce(maxPolls int, maxWait time.Duration) (polls int, quiet bool) {
	buf := make([]byte, 1<<20)
	return pollQuiet(maxPolls, maxWait, func() bool { return othersBusy(stackDump(&buf)) })
}

// stackDump returns the dump of every goroutine, the caller's first, growing *buf to fit.
func stackDump(buf *[]byte) []byte {
	n := runtime.Stack(*buf, true)
	for n == len(*buf) {
		*buf = make([]byte, 2*len(*buf))
		n = runtime.Stack(*buf, true)
	}
	return (*buf)[:n]
}

// tracebackLabels turns on GODEBUG=tracebacklabels=1, once, unless GODEBUG sets
// tracebacklabels already: goroutine dumps (runtime.Stack, and so a panic's traceback)
// then show each goroutine's pprof labels in its header, which is how Network.Quiesce
// tells whose a runnable goroutine is. (The goroutine profile has the labels but not the
// goroutine states: a goroutine made runnable still shows the stack it parked with.) The
// runtime reads a GODEBUG set with os.Setenv at once.
var tracebackLabels = sync.OnceFunc(func() {
	env := os.Getenv("GODEBUG")
	if strings.Contains(env, "tracebacklabels=") {
		return
	}
	if env != "" {
		env += ","
	}
	os.Setenv("GODEBUG", env+"tracebacklabels=1")
})

// pollQuiet polls busy until it reports false three times in a row, or until maxPolls
// polls or maxWait of wall time. A poll stops the world, so after a busy one it backs
// off, up to a millisecond of sleep, to let the busy goroutines get on: polling flat out
// starved them, and a wait that should take microseconds took seconds.
func pollQuiet(maxPolls int, maxWait time.Duration, busy func() bool) (polls int, quiet bool) {
	calm := 0
	backoff := 10 * time.Microsecond
	deadline := time.Now().Add(maxWait)
	for polls < maxPolls && calm < 3 {
		runtime.Gosched()
		polls++
		if busy() {
			calm = 0
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Millisecond)
		} else {
			calm++
		}
	}
	return polls, calm >= 3
}

// NextDeadline returns how long until the earliest pending timer fires (zero for one
// already due), and false when no timer is pending.
func (c *Clock) NextDeadline() (time.Duration, bool) { return c.nextDeadline() }

// Do runs f as the network's own work: on a goroutine that carries the network's label,
// waiting for it. Every goroutine f starts inherits the label, so Quiesce waits for it
// as for the network's own. Code built on the network (a kubelet starting a pod's apps,
// a control loop reacting to an event) runs its work through Do. A panic in f is raised
// again in the caller.
func (c *Network) Do(f func()) { c.labeled(f) }

// Go starts f on a new goroutine that carries the network's label (see Do).
func (c *Network) Go(f func()) { c.goLabeled(f) }
