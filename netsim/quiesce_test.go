package netsim

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestQuiesceGoroutineStates: which goroutine states a quiescence wait takes for busy.
// Waiting on a channel, a lock, a condition or a sleep is blocked, whatever the runtime
// adds to the status; the collector's passing waits are busy: under memory pressure a
// goroutine relaying a datagram sat in "GC assist wait" for three polls, the wait took
// the cluster for quiet, and the manual clock's next step ended the proxy's UDP session
// before the answer came back (TestModesAgree, once in a few hundred runs).
func TestQuiesceGoroutineStates(t *testing.T) {
	busy := []string{"running", "runnable", "syscall", "running (scan)", "runnable (scan)",
		"GC assist wait", "GC assist marking", "preempted", "copystack", "garbage collection",
		"wait for GC cycle", "stopping the world", "a state of a later Go"}
	blocked := []string{"chan receive", "chan send", "select", "select (no cases)", "select (scan)",
		"chan receive (scan)", "chan receive (durable)", "semacquire", "sync.Mutex.Lock",
		"sync.RWMutex.RLock", "sync.Cond.Wait", "sync.WaitGroup.Wait", "sleep", "IO wait", "select (leaked)"}
	want := map[string]bool{}
	for _, s := range busy {
		want[s] = true
	}
	for _, s := range blocked {
		want[s] = false
	}
	for state, want := range want {
		for _, tail := range []string{"", ", 3 minutes", ", locked to thread", ` labels:{"netsim-cluster": "7"}`} {
			dump := "goroutine 1 [running]:\nmain.main()\n\ngoroutine 9 [" + state + tail + "]:\nmain.f()"
			if got := len(busyGoroutines([]byte(dump))) == 1; got != want {
				t.Errorf("goroutine in [%s%s]: busy %v, want %v", state, tail, got, want)
			}
		}
	}
}

// TestQuiesceSignalWatcher: a process that called signal.Notify has os/signal's watcher
// goroutine in a system call for ever; Quiesce must not take it for a busy goroutine
// (it polled to its bound, about 100 s, in every such process), but any other goroutine
// in a system call is busy.
func TestQuiesceSignalWatcher(t *testing.T) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt)
	defer signal.Stop(c)
	// The watcher starts runnable and then waits in signal_recv: look until it does.
	watcher := syscallGoroutine(t, "\nos/signal.signal_recv(")
	if othersBusy(append([]byte("goroutine 1 [running]:\nmain.main()\n\n"), watcher...)) {
		t.Errorf("the signal watcher counts as busy:\n%s", watcher)
	}
	if !othersBusy([]byte("goroutine 1 [running]:\nmain.main()\n\ngoroutine 7 [syscall]:\nsyscall.Syscall(0x0)\n\t/usr/lib/go/src/syscall/syscall_linux.go:73")) {
		t.Error("a goroutine in another system call does not count as busy")
	}
	// With GODEBUG=tracebacklabels=1 (which New turns on) a header carries labels.
	if got := busyGoroutines([]byte("goroutine 1 [running]:\nmain.main()\n\ngoroutine 9 [runnable labels:{\"netsim-cluster\": \"7\"}]:\nmain.f()\n\ngoroutine 10 [chan receive labels:{\"netsim-cluster\": \"7\"}]:\nmain.g()")); len(got) != 1 || !strings.Contains(got[0], "goroutine 9 ") {
		t.Errorf("busy goroutines of a labeled dump: %q, want goroutine 9's header", got)
	}
}

// syscallGoroutine returns the dump block of a goroutine in a system call whose stack
// holds frame, looking for up to about 5 s (a goroutine gets there after it starts).
func syscallGoroutine(t *testing.T, frame string) []byte {
	t.Helper()
	buf := make([]byte, 1<<20)
	var dump []byte
	for range 5000 {
		runtime.Gosched()
		time.Sleep(time.Millisecond)
		dump = buf[:runtime.Stack(buf, true)]
		for _, b := range bytes.Split(dump, []byte("\n\n")) {
			if bytes.Contains(b, []byte("[syscall")) && bytes.Contains(b, []byte(frame)) {
				return b
			}
		}
	}
	t.Fatalf("no goroutine in a system call with %q in the goroutine dump:\n%s", frame, dump)
	return nil
}

// TestQuiesceChildWait: a goroutine waiting for a child process (exec.Cmd.Wait) is in a
// system call until the child exits; Quiesce must not take it for busy. The kernel
// package's reaper waits so for the life of the process, and every quiescence wait
// after it ran to its 5 s bound (clusterlab demo's tests took 25-35 s after a test on a
// real node, 0.4 s alone).
func TestQuiesceChildWait(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sleep: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	defer func() { cmd.Process.Kill(); <-done }()
	waiter := syscallGoroutine(t, "\nos/exec.(*Cmd).Wait(")
	if othersBusy(append([]byte("goroutine 1 [running]:\nmain.main()\n\n"), waiter...)) {
		t.Errorf("a goroutine waiting for a child process counts as busy:\n%s", waiter)
	}
	// And a cluster's Quiesce returns at once beside it.
	c := newTestCluster(t, Config{Seed: 1, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}}})
	if polls, quiet := c.quiesce(quiesceMaxPolls, quiesceMaxWait); !quiet || polls > 1000 {
		t.Errorf("Quiesce beside a child wait: quiet %v after %d polls", quiet, polls)
	}
}

// TestClusterQuiesceIgnoresOtherClusters: two clusters in one process, the second kept
// busy on purpose (a goroutine spinning under its label, and a loop carrying traffic
// through its pods). The first cluster's Quiesce waits for its own traffic and returns
// as soon as it is idle, in a few polls; the process-wide Quiesce on the same setup
// never sees the process quiet. A goroutine of no cluster, or of the first one, that
// spins keeps the first cluster's Quiesce waiting.
func TestClusterQuiesceIgnoresOtherClusters(t *testing.T) {
	a := newTestCluster(t, Config{Seed: 1, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	startPod(t, a, "node-a", "default/client")
	webA := startPod(t, a, "node-b", "default/web", 80)
	b := newTestCluster(t, Config{Seed: 2, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	clientB := startPod(t, b, "node-a", "default/client")
	webB := startPod(t, b, "node-b", "default/web", 80)

	var stop atomic.Bool
	var wg sync.WaitGroup
	defer func() { stop.Store(true); wg.Wait() }()
	spinning := make(chan struct{})
	wg.Add(2)
	b.goLabeled(func() {
		defer wg.Done()
		close(spinning)
		for !stop.Load() {
		}
	})
	var exchanges atomic.Int64
	b.goLabeled(func() {
		defer wg.Done()
		for !stop.Load() {
			if _, err := exchange(clientB.Net(), netip.AddrPortFrom(webB.IP(), 80).String()); err == nil {
				exchanges.Add(1)
			}
		}
	})
	<-spinning

	for i := range 5 {
		// Traffic in the first cluster under a manual clock needs no timer: Quiesce
		// must not return before it is through.
		done := make(chan error, 1)
		a.goLabeled(func() {
			w, err := exchange(startPodNet(a, "default/client"), netip.AddrPortFrom(webA.IP(), 80).String())
			if err == nil && w.Pod != "default/web" {
				err = fmt.Errorf("answered by %q", w.Pod)
			}
			done <- err
		})
		polls, quiet := a.quiesce(5000, 30*time.Second)
		if !quiet || polls >= 1000 {
			t.Fatalf("round %d: the first cluster's Quiesce: %d polls, quiet %v; want quiet within 1000 polls while the other cluster is busy", i, polls, quiet)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: exchange in the first cluster: %v", i, err)
			}
		default:
			t.Fatalf("round %d: Quiesce returned (after %d polls) with the first cluster's exchange still in flight", i, polls)
		}
	}
	if exchanges.Load() == 0 {
		t.Error("the second cluster carried no traffic while the first quiesced")
	}

	// The process-wide barrier sees the spinning goroutine: it polls to its bound (a
	// small one: with a goroutine spinning on one of two cores, a poll waits for a turn).
	if polls, quiet := quiesce(20, time.Minute); quiet || polls != 20 {
		t.Errorf("process-wide Quiesce with another cluster busy: %d polls, quiet %v; want 20 polls and not quiet", polls, quiet)
	}

	// A goroutine of no cluster counts, and so does one of the first cluster.
	for _, start := range []struct {
		name string
		run  func(func())
	}{{"unlabeled", func(f func()) { go f() }}, {"first cluster's", a.goLabeled}} {
		var stopSpin atomic.Bool
		started := make(chan struct{})
		finished := make(chan struct{})
		start.run(func() {
			defer close(finished)
			close(started)
			for !stopSpin.Load() {
			}
		})
		<-started
		polls, quiet := a.quiesce(20, time.Minute)
		stopSpin.Store(true)
		<-finished
		if quiet || polls != 20 {
			t.Errorf("a spinning %s goroutine: the first cluster's Quiesce took %d polls, quiet %v; want 20 polls and not quiet", start.name, polls, quiet)
		}
	}
}

// startPodNet returns the network of a running pod.
func startPodNet(c *Network, key string) *Net {
	ns, name, _ := strings.Cut(key, "/")
	return c.Pod(ns, name).Net()
}

// exchange is askCtx with its own 20 s limit.
func exchange(n *Net, addr string) (Whoami, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return askCtx(ctx, n, addr)
}
