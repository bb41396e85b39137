package netsim

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Replay mode: identical packet traces run to run.
//
// Real netstack traffic is concurrent: TCP segments are processed on netstack's own
// goroutines, so windows and ACK timing vary with scheduling. Config.Replay makes a run
// reproducible byte for byte, at about a hundredth of the speed: the clock is manual, no
// node runs its own datapath goroutine, and Network.Run delivers exactly one packet at a
// time, waiting before each for every other goroutine to block (a quiescence barrier over
// the goroutine states), and advances virtual time to the next timer only when nothing is
// in flight. Use it to re-run a failing seed and diff pcaps; property tests should check
// outcomes in the normal mode instead.

// replayQueue holds every packet in flight, in the order it was sent.
type replayQueue struct {
	mu    sync.Mutex
	items []replayItem
	head  int // items[:head] are taken; the slice is reused once it is empty
}

type replayItem struct {
	n *Node
	q queued
}

func (r *replayQueue) push(n *Node, q queued) {
	r.mu.Lock()
	r.items = append(r.items, replayItem{n, q})
	r.mu.Unlock()
}

func (r *replayQueue) pop() (replayItem, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.head == len(r.items) {
		return replayItem{}, false
	}
	it := r.items[r.head]
	r.items[r.head] = replayItem{}
	r.head++
	if r.head == len(r.items) {
		r.items, r.head = r.items[:0], 0
	}
	return it, true
}

// ErrRunTimeout is returned by Run when the function does not finish within the wall-
// clock limit of a replay run.
var ErrRunTimeout = errors.New("netsim: replay run did not finish")

// Run runs f, which drives traffic in the cluster (dials, requests), and returns its
// error. In replay mode Run is what moves packets and time while f runs, one packet at a
// time; f must not wait on wall-clock deadlines. In the normal mode Run just calls f.
func (c *Network) Run(f func() error) error {
	if !c.cfg.Replay {
		return f()
	}
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	done := make(chan error, 1)
	c.goLabeled(func() { done <- f() })
	deadline := time.Now().Add(5 * time.Minute)
	for {
		c.quiesce(quiesceMaxPolls, quiesceMaxWait)
		select {
		case err := <-done:
			return err
		default:
		}
		if time.Now().After(deadline) {
			return ErrRunTimeout
		}
		if it, ok := c.replayQ.pop(); ok {
			if !it.n.down.Load() {
				it.n.handleQueued(it.q)
			}
			continue
		}
		if d, ok := c.clock.nextDeadline(); ok {
			c.clock.Advance(d)
		} else {
			c.clock.Advance(time.Millisecond)
		}
	}
}

// othersBusy reports whether a goroutine other than the caller is running or runnable.
func othersBusy(dump []byte) bool { return len(busyGoroutines(dump)) > 0 }

// busyGoroutines returns the header lines of the goroutines of a dump (runtime.Stack of
// all, the caller's first) that are running or runnable or in a system call, other than
// the caller, os/signal's watcher and quiescence waits. With GODEBUG=tracebacklabels=1 a
// header ends with the goroutine's labels: goroutine 7 [runnable labels:{"k": "v"}]:.
func busyGoroutines(dump []byte) []string {
	var out []string
	first := true
	for _, block := range bytes.Split(dump, []byte("\n\n")) {
		header, _, _ := bytes.Cut(block, []byte("\n"))
		if first {
			first = false // the caller
			continue
		}
		i := bytes.IndexByte(header, '[')
		j := bytes.LastIndexByte(header, ']')
		if i < 0 || j < i {
			continue
		}
		state := string(header[i+1 : j])
		state, _, _ = strings.Cut(state, " labels:{")
		state, _, _ = strings.Cut(state, ",")
		switch state {
		case "running", "runnable":
		case "syscall":
			// os/signal's watcher waits for signals in a system call for the life of
			// any process that called signal.Notify (a CLI, a server, go test with
			// some packages): it never runs simulation work.
			if bytes.Contains(block, []byte("\nos/signal.signal_recv(")) {
				continue
			}
		default:
			continue
		}
		if bytes.Contains(block, []byte("clusterlab/netsim.pollQuiet(")) {
			continue // another quiescence wait
		}
		out = append(out, string(header))
	}
	return out
}
