package kernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
)

// Namespaces made by this process (a Harness, NewTestNetns) are deleted however the
// process ends:
//
//   - normally, by Harness.Close and the tests' cleanups, and by the sweep RunTests
//     makes after the tests (CleanupNamespaces);
//   - on SIGINT, SIGTERM or SIGHUP in a test binary whose TestMain is RunTests: its
//     handler deletes them before the process dies of the signal;
//   - on anything else that ends the process at once (SIGKILL, `go test -timeout`
//     expiring, which panics the test binary from a timer no code of ours can
//     recover, a crash): by the reaper, a small sh process started with the first
//     namespace. It reads the name of each namespace on a pipe whose other end only
//     this process holds; when that end closes, which the kernel does when this
//     process ends however it ends, it deletes the ones still there. It ignores the
//     terminal's signals and sits in its own process group, so a Ctrl-C reaches it
//     only through the pipe, and it keeps this process's standard error, so whoever
//     waits for this process's output waits for it too;
//   - and if even that failed (the reaper killed with the process group, say), by
//     the next Harness or NewTestNetns, which deletes namespaces of its prefix whose
//     process is gone (removeStaleNetns).

// reaperScript deletes, once its standard input ends, every namespace named on it
// that still exists. $1 is the ip tool, $2 the pid it cleans up after.
const reaperScript = `trap '' INT TERM HUP QUIT
names=
while IFS= read -r n; do names="$names $n"; done
for n in $names; do
	if [ -e "` + netnsDir + `/$n" ]; then
		if "$1" netns del "$n"; then
			echo "clusterlab: deleted network namespace $n left by process $2" >&2
		else
			echo "clusterlab: could not delete network namespace $n left by process $2" >&2
		fi
	fi
done
`

// live is the registry of this process's namespaces.
var live = struct {
	sync.Mutex
	names  map[string]bool
	reaper *os.File // write end of the reaper's pipe; nil until the first namespace
	tried  bool     // the reaper was started (or failed to start) once
}{names: map[string]bool{}}

// registerNetns records a namespace this process is about to create, and tells the
// reaper. It is called before `ip netns add`, so that no moment exists in which the
// namespace exists and nothing would delete it.
func registerNetns(name string) {
	live.Lock()
	defer live.Unlock()
	live.names[name] = true
	if !live.tried {
		live.tried = true
		w, err := startReaper()
		if err != nil {
			fmt.Fprintf(os.Stderr, "clusterlab: no namespace reaper (namespaces are left behind if this process is killed): %v\n", err)
		}
		live.reaper = w
	}
	if live.reaper != nil {
		if _, err := live.reaper.WriteString(name + "\n"); err != nil {
			fmt.Fprintf(os.Stderr, "clusterlab: namespace reaper: %v\n", err)
			live.reaper.Close()
			live.reaper = nil
		}
	}
}

// unregisterNetns forgets a namespace this process deleted.
func unregisterNetns(name string) {
	live.Lock()
	delete(live.names, name)
	live.Unlock()
}

// startReaper starts the reaper and returns the write end of its pipe.
func startReaper() (*os.File, error) {
	sh, err := lookTool("sh")
	if err != nil {
		return nil, err
	}
	ip, err := lookTool("ip")
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(sh, "-c", reaperScript, "clusterlab-netns-reaper", ip, fmt.Sprint(os.Getpid()))
	cmd.Stdin = r
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	// Nobody waits for it here: it outlives this process by design (init reaps it).
	go func() { _ = cmd.Wait() }()
	return w, nil
}

// LiveNamespaces returns the names of the namespaces this process made and has not
// deleted, sorted.
func LiveNamespaces() []string {
	live.Lock()
	defer live.Unlock()
	out := make([]string, 0, len(live.names))
	for n := range live.names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// CleanupNamespaces deletes every namespace this process made and has not deleted
// (a Harness not closed, a test's namespace whose cleanup did not run). It returns
// what it deleted and the errors of those it could not.
func CleanupNamespaces() ([]string, error) {
	var deleted []string
	var errs []error
	for _, n := range LiveNamespaces() {
		if _, err := os.Stat(filepath.Join(netnsDir, n)); errors.Is(err, os.ErrNotExist) {
			unregisterNetns(n)
			continue
		}
		c := command{argv: []string{"ip", "netns", "del", n}}
		if ce := commandError(c, execRunner{}.run(context.Background(), c)); ce != nil {
			errs = append(errs, ce)
			continue
		}
		unregisterNetns(n)
		deleted = append(deleted, n)
	}
	return deleted, errors.Join(errs...)
}

// cleanupSignals are the signals RunTests's handler turns into a cleanup.
var cleanupSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// RunTests is a TestMain body for packages whose tests make namespaces:
//
//	func TestMain(m *testing.M) { os.Exit(kernel.RunTests(m)) }
//
// It runs the tests with a handler that, on SIGINT, SIGTERM or SIGHUP, deletes the
// namespaces the process made and then dies of the signal as it would have without
// the handler; after the tests it deletes any namespace a test left (saying so on
// standard error). A `go test -timeout` expiry or SIGKILL is the reaper's (see above).
func RunTests(m *testing.M) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, cleanupSignals...)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			cleanupAndDie(sig)
		case <-done:
		}
	}()
	code := m.Run()
	close(done)
	signal.Stop(sigs)
	deleted, err := CleanupNamespaces()
	for _, n := range deleted {
		fmt.Fprintf(os.Stderr, "clusterlab: network namespace %s was left by a test; deleted\n", n)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "clusterlab: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// cleanupAndDie deletes the namespaces and re-raises sig with its default action.
func cleanupAndDie(sig os.Signal) {
	deleted, err := CleanupNamespaces()
	fmt.Fprintf(os.Stderr, "clusterlab: %v: deleted %d network namespaces %v\n", sig, len(deleted), deleted)
	if err != nil {
		fmt.Fprintf(os.Stderr, "clusterlab: %v\n", err)
	}
	signal.Reset(sig)
	if s, ok := sig.(syscall.Signal); ok {
		_ = syscall.Kill(os.Getpid(), s)
	}
	// The default action of these signals ends the process; if it has not yet:
	select {}
}
