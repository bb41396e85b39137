//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/clusterlab/clusterlab/internal/vmtest"
)

// goTestEnv is the environment a test binary starts with: tools in the image's
// /usr/sbin and /usr/bin first (the real ip, not busybox's), then busybox.
var goTestEnv = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp", "TMPDIR=/tmp"}

// maxOutputLine cuts longer output lines (a console line is one JSON object).
const maxOutputLine = 64 << 10

// runGoTest runs a KindGoTest case: the binary with its arguments in its directory, in
// a process group of its own (killed at the timeout), its standard output and error
// merged on one pipe and emitted line by line as they come. The pipe is read to its
// end: a child of the test (package kernel's namespace reaper) that keeps it open
// holds the case until it exits, as it would hold `go test`.
func runGoTest(c vmtest.Case) (exit int, err error) {
	g := c.GoTest
	if g == nil {
		return -1, errors.New("a go-test case without go_test")
	}
	if err := os.MkdirAll(g.Dir, 0o755); err != nil {
		return -1, err
	}
	cmd := exec.Command(g.Binary, g.Args...)
	cmd.Dir = g.Dir
	cmd.Env = append(append([]string{}, goTestEnv...), g.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return -1, fmt.Errorf("start %s: %w", g.Binary, err)
	}
	w.Close()
	var timedOut atomic.Bool
	if g.Timeout > 0 {
		t := time.AfterFunc(time.Duration(g.Timeout)*time.Second, func() {
			timedOut.Store(true)
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		})
		defer t.Stop()
	}
	br := bufio.NewReaderSize(r, 64<<10)
	for step := 0; ; step++ {
		line, rerr := br.ReadString('\n')
		if line != "" {
			line = strings.TrimSuffix(line, "\n")
			if len(line) > maxOutputLine {
				line = line[:maxOutputLine] + " …(line cut by the agent)"
			}
			emit(vmtest.ResultPrefix, vmtest.Result{Case: c.Name, Step: step, Output: line})
		}
		if rerr != nil {
			break
		}
	}
	r.Close()
	werr := cmd.Wait()
	if timedOut.Load() {
		return -1, fmt.Errorf("killed after %d s", g.Timeout)
	}
	if cmd.ProcessState == nil {
		return -1, werr
	}
	return cmd.ProcessState.ExitCode(), nil
}
