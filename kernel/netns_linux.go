//go:build linux

package kernel

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// nsHandle is an open named network namespace.
type nsHandle struct {
	name string
	f    *os.File
	dev  uint64
	ino  uint64
}

func openNetns(name string) (*nsHandle, error) {
	p := filepath.Join(netnsDir, name)
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("stat netns %s: %w", name, err)
	}
	return &nsHandle{name: name, f: f, dev: uint64(st.Dev), ino: st.Ino}, nil
}

func (h *nsHandle) close() error { return h.f.Close() }

// do runs fn on a fresh OS thread that has joined the namespace. Sockets fn creates
// belong to that namespace for life, and may be used from any goroutine afterwards.
//
// The goroutine locks its thread, setns(2)es it, checks through /proc/thread-self that
// the switch really happened (so a failure can never make fn act on the caller's
// namespace), runs fn, and exits still locked: the Go runtime then destroys the thread
// instead of returning a thread in a foreign namespace to its pool. Threads the runtime
// starts meanwhile come from its template thread, never from this one.
func (h *nsHandle) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread, on purpose: see above.
		if err := unix.Setns(int(h.f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", h.name, err)
			return
		}
		var st unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
			errc <- fmt.Errorf("verify netns %s: %w", h.name, err)
			return
		}
		if uint64(st.Dev) != h.dev || st.Ino != h.ino {
			errc <- fmt.Errorf("verify netns %s: thread is in netns inode %d, want %d", h.name, st.Ino, h.ino)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
