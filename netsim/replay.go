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
// all, the caller's first) that are not blocked waiting for another goroutine or a
// timer (see blocked), other than the caller, os/signal's watcher, waits for a child
// process and quiescence waits.
// With GODEBUG=tracebacklabels=1 a header ends with the goroutine's labels:
// goroutine 7 [runnable labels:{"k": "v"}]:.
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
		if blocked(state) {
			continue
		}
		if state == "syscall" && idleSyscall(block) {
			continue
		}
		if bytes.Contains(block, []byte("clusterlab/netsim.pollQuiet(")) {
			continue // another quiescence wait
		}
		out = append(out, string(header))
	}
	return out
}

// idleSyscalls are the frames of goroutines that wait in a system call for something
// outside the simulation, for as long as it takes:
//   - os/signal's watcher, for signals, for the life of any process that called
//     signal.Notify (a CLI, a server, go test with some packages);
//   - a wait for a child process to exit (exec.Cmd.Wait, os.Process.Wait): the kernel
//     package's reaper waits so for the life of any process that used a network
//     namespace, and what the child does is outside the process either way. Taken for
//     busy, it made every later quiescence wait of the process run to its 5 s bound.
var idleSyscalls = [][]byte{[]byte("\nos/signal.signal_recv("), []byte("\nos.(*Process).wait(")}

// idleSyscall reports whether a goroutine in a system call (its dump block) is one of
// idleSyscalls: it runs no simulation work.
func idleSyscall(block []byte) bool {
	for _, f := range idleSyscalls {
		if bytes.Contains(block, f) {
			return true
		}
	}
	return false
}

// blocked reports whether a goroutine in a dump's state (the header's status, before
// any ", N minutes", ", locked to thread" or labels) waits for another goroutine, a
// timer or I/O: on a channel, a lock, a condition, a sleep. Every other state is busy:
// running, runnable, in a system call, and the runtime's own passing waits, which end
// by themselves: a goroutine the garbage collector stopped to scan its stack
// ("preempted"), one growing its stack ("copystack"), one
// made to help the collector ("GC assist wait": it allocated during a collection and
// goes on once the collector catches up). Under memory pressure such a goroutine is
// often in the middle of the simulation's work (a proxy relaying a datagram), and
// taking it for blocked let a manual clock move while its packet was in flight. A state
// this list does not know also counts as busy: a quiescence wait then lasts until it
// gives up, which is slow but never wrong.
func blocked(state string) bool {
	switch baseState(state) {
	case "chan receive", "chan send", "select", "select (no cases)", "chan receive (nil chan)", "chan send (nil chan)",
		"semacquire", "sync.Mutex.Lock", "sync.RWMutex.RLock", "sync.RWMutex.Lock", "sync.Cond.Wait", "sync.WaitGroup.Wait",
		"sleep", "IO wait", "coroutine", "panicwait", "waiting", "leaked",
		"finalizer wait", "cleanup wait", "synctest.Run", "synctest.Wait":
		return true
	}
	return false
}

// baseState drops what the runtime adds to a status, in the order it adds them:
// " (leaked)", " (scan)" (the collector is scanning the stack: the goroutine is as busy
// or blocked as its status says) and " (durable)" (a wait inside a synctest bubble).
// Every goroutine of every poll goes through it, so it trims rather than allocates.
func baseState(s string) string {
	s = strings.TrimSuffix(s, " (durable)")
	s = strings.TrimSuffix(s, " (scan)")
	return strings.TrimSuffix(s, " (leaked)")
}
