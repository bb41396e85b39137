package netsim

import (
	"bytes"
	"os"
	"os/signal"
	"runtime"
	"testing"
	"time"
)

// TestQuiesceSignalWatcher: a process that called signal.Notify has os/signal's watcher
// goroutine in a system call for ever; Quiesce must not take it for a busy goroutine
// (it polled to its bound, about 100 s, in every such process), but any other goroutine
// in a system call is busy.
func TestQuiesceSignalWatcher(t *testing.T) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt)
	defer signal.Stop(c)
	// The watcher starts runnable and then waits in signal_recv: look until it does.
	buf := make([]byte, 1<<20)
	var watcher, dump []byte
	for i := 0; i < 5000 && watcher == nil; i++ {
		runtime.Gosched()
		time.Sleep(time.Millisecond)
		dump = buf[:runtime.Stack(buf, true)]
		for _, b := range bytes.Split(dump, []byte("\n\n")) {
			if bytes.Contains(b, []byte("[syscall")) && bytes.Contains(b, []byte("\nos/signal.signal_recv(")) {
				watcher = b
			}
		}
	}
	if watcher == nil {
		t.Fatalf("no os/signal watcher in a system call in the goroutine dump:\n%s", dump)
	}
	if othersBusy(append([]byte("goroutine 1 [running]:\nmain.main()\n\n"), watcher...)) {
		t.Errorf("the signal watcher counts as busy:\n%s", watcher)
	}
	if !othersBusy([]byte("goroutine 1 [running]:\nmain.main()\n\ngoroutine 7 [syscall]:\nsyscall.Syscall(0x0)\n\t/usr/lib/go/src/syscall/syscall_linux.go:73")) {
		t.Error("a goroutine in another system call does not count as busy")
	}
}
