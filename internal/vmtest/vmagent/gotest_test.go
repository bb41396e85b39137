//go:build linux

package main

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/internal/vmtest"
)

// captureResults runs f with standard output on a pipe and returns the results it
// printed.
func captureResults(t *testing.T, f func()) []vmtest.Result {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	f()
	os.Stdout = old
	w.Close()
	var out []vmtest.Result
	for _, l := range strings.Split(strings.TrimSpace(string(<-done)), "\n") {
		var res vmtest.Result
		if err := json.Unmarshal([]byte(strings.TrimPrefix(l, vmtest.ResultPrefix)), &res); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, res)
	}
	return out
}

// TestRunGoTest: a go-test case's output comes back line by line, standard output and
// error merged in order, in the environment and directory asked for; the exit status
// is reported; a child that keeps the output open is read until it exits (as package
// kernel's namespace reaper does); a run past its timeout is killed with its process
// group.
func TestRunGoTest(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	var exit int
	var rerr error
	got := captureResults(t, func() {
		exit, rerr = runGoTest(vmtest.Case{Name: "c", GoTest: &vmtest.GoTest{Binary: sh, Dir: dir + "/pkg",
			Args: []string{"-c", `echo "one $X"; echo two >&2; (sleep 0.3; echo late) & printf last; exit 3`}, Env: []string{"X=x"}}})
	})
	if rerr != nil || exit != 3 {
		t.Fatalf("exit %d, err %v", exit, rerr)
	}
	var lines []string
	for _, r := range got {
		if r.Case != "c" {
			t.Errorf("result of case %q", r.Case)
		}
		lines = append(lines, r.Output)
	}
	// "last" has no newline when sh exits; its background child's "late" ends the line.
	if want := "one x|two|lastlate"; strings.Join(lines, "|") != want {
		t.Errorf("output %q, want %q", lines, want)
	}
	if _, err := os.Stat(dir + "/pkg"); err != nil {
		t.Errorf("the working directory was not made: %v", err)
	}

	start := time.Now()
	got = captureResults(t, func() {
		exit, rerr = runGoTest(vmtest.Case{Name: "slow", GoTest: &vmtest.GoTest{Binary: sh, Dir: dir,
			Args: []string{"-c", "echo started; sleep 30 & sleep 30"}, Timeout: 1}})
	})
	if exit != -1 || rerr == nil || !strings.Contains(rerr.Error(), "killed after 1 s") {
		t.Errorf("a run past its timeout: exit %d, err %v", exit, rerr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the killed run held the case %v (its background child kept the pipe?)", d)
	}
	if len(got) != 1 || got[0].Output != "started" {
		t.Errorf("output %+v", got)
	}
}
