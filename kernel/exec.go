package kernel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// command is one process to run: its argv (argv[0] is a bare tool name or a path) and the
// bytes to feed it on standard input.
type command struct {
	argv  []string
	stdin []byte
}

func (c command) String() string { return strings.Join(c.argv, " ") }

// result is what running a command produced.
type result struct {
	stdout, stderr []byte
	// exitCode is the process's exit status, or -1 when it did not run to completion
	// (not found, killed, context cancelled).
	exitCode int
	// err is nil only when the command ran and exited 0.
	err error
}

// runner is the exec seam: every external tool this package drives (iptables-restore,
// iptables-save, conntrack, ip) goes through one. execRunner runs real processes; the
// unit tests use a fake that records each command line and stdin and answers from a
// script, so the command lines are checked without root.
type runner interface {
	run(ctx context.Context, c command) result
}

// execRunner runs commands with os/exec. A bare tool name is looked up in $PATH and then
// in /usr/sbin and /sbin, where Debian puts iptables, conntrack and ip but where a
// non-login $PATH often does not look.
type execRunner struct{}

func (execRunner) run(ctx context.Context, c command) result {
	if len(c.argv) == 0 {
		panic("kernel: empty command")
	}
	path, err := lookTool(c.argv[0])
	if err != nil {
		return result{exitCode: -1, err: err}
	}
	cmd := exec.CommandContext(ctx, path, c.argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if c.stdin != nil {
		cmd.Stdin = bytes.NewReader(c.stdin)
	}
	err = cmd.Run()
	res := result{stdout: stdout.Bytes(), stderr: stderr.Bytes(), exitCode: -1, err: err}
	if cmd.ProcessState != nil {
		res.exitCode = cmd.ProcessState.ExitCode()
	}
	if err == nil {
		res.exitCode = 0
	} else if ctx.Err() != nil {
		res.err = fmt.Errorf("%w (%w)", err, ctx.Err())
	}
	return res
}

// sbinDirs are searched after $PATH for bare tool names.
var sbinDirs = []string{"/usr/sbin", "/sbin", "/usr/local/sbin"}

// lookTool resolves a tool name the way execRunner does.
func lookTool(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range sbinDirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

// HaveTool reports whether the named tool can be found (in $PATH, /usr/sbin or /sbin).
func HaveTool(name string) bool {
	_, err := lookTool(name)
	return err == nil
}

// inNetnsArgv returns argv run inside the named network namespace. The adapter uses
// `ip netns exec NAME ...` rather than setns(2) on a locked thread for external tools:
// the command line is then exactly what a person would type to reproduce it, and ip
// also remounts /sys for the namespace, which some tools read.
// HostNamespace runs argv as it is; the adapters refuse "" before they get here.
func inNetnsArgv(netns string, argv []string) []string {
	if netns == "" || isHost(netns) {
		return argv
	}
	out := make([]string, 0, len(argv)+4)
	out = append(out, "ip", "netns", "exec", netns)
	return append(out, argv...)
}

// CommandError is a tool that failed: could not start, or exited non-zero.
type CommandError struct {
	Args     []string // the full command line, including any `ip netns exec NAME` prefix
	ExitCode int      // -1 when the tool did not run to completion
	Stderr   string   // the tool's standard error, trimmed
	Err      error    // the underlying os/exec error
}

func (e *CommandError) Error() string {
	var b strings.Builder
	b.WriteString(strings.Join(e.Args, " "))
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	if e.Stderr != "" {
		b.WriteString(": ")
		b.WriteString(e.Stderr)
	}
	return b.String()
}

func (e *CommandError) Unwrap() error { return e.Err }

// commandError builds the CommandError for a failed result, or returns nil.
func commandError(c command, r result) *CommandError {
	if r.err == nil {
		return nil
	}
	return &CommandError{
		Args:     append([]string(nil), c.argv...),
		ExitCode: r.exitCode,
		Stderr:   strings.TrimSpace(string(r.stderr)),
		Err:      r.err,
	}
}

// exitCodeOf returns the exit code carried by err if it is a *CommandError, else -1.
func exitCodeOf(err error) int {
	var ce *CommandError
	if errors.As(err, &ce) {
		return ce.ExitCode
	}
	return -1
}
