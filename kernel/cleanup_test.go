package kernel

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(RunTests(m)) }

// childEnv makes the test binary, re-executed, run TestCleanupChild: it builds a
// harness and a test namespace, prints their names and waits to be killed.
const childEnv = "CLUSTERLAB_CLEANUP_CHILD"

// TestCleanupChild is the child of TestNamespacesGoneWhenKilled; it skips unless
// started by it.
func TestCleanupChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("the child process of TestNamespacesGoneWhenKilled")
	}
	h, err := NewHarness(HarnessConfig{Prefix: "clsig", Pods: []PodConfig{{Name: "p0"}}, PodPorts: []uint16{}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	tmp := NewTestNetns(t)
	names := []string{tmp}
	for _, ns := range h.Namespaces() {
		names = append(names, ns.Name)
	}
	fmt.Printf("READY %s\n", strings.Join(names, " "))
	select {} // until killed
}

// TestNamespacesGoneWhenKilled: a test process that made namespaces (a harness, a
// NewTestNetns) and is ended by SIGTERM, SIGINT, SIGKILL or a `go test -timeout`
// expiry leaves none behind (issue 23: SIGTERM left 5). SIGINT and SIGTERM are
// RunTests's handler's; SIGKILL and the timeout, which no handler sees, the reaper's.
func TestNamespacesGoneWhenKilled(t *testing.T) {
	RequireHarness(t)
	for _, tc := range []struct {
		name    string
		sig     syscall.Signal // 0: none, the -test.timeout ends it
		timeout string
		handled bool // RunTests's handler reports the signal
	}{
		{"SIGTERM", syscall.SIGTERM, "10m", true},
		{"SIGINT", syscall.SIGINT, "10m", true},
		{"SIGKILL", syscall.SIGKILL, "10m", false},
		{"test timeout", 0, "4s", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestCleanupChild$", "-test.timeout="+tc.timeout)
			cmd.Env = append(os.Environ(), childEnv+"=1")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			names := strings.Fields(strings.TrimPrefix(line, "READY "))
			if tc.sig == 0 && err != nil {
				// On a slow machine the timeout may strike while the harness is being
				// built: its namespaces must go all the same (the reaper says which).
				names = nil
			} else if err != nil || !strings.HasPrefix(line, "READY ") || len(names) < 3 {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("child: %q, %v\n%s", line, err, stderr.String())
			}
			pid := strconv.Itoa(cmd.Process.Pid)
			for _, n := range names {
				if _, err := os.Stat(netnsDir + "/" + n); err != nil || !strings.Contains(n, pid+"-") {
					t.Fatalf("the child's namespace %s: %v (pid %s)", n, err, pid)
				}
			}
			if tc.sig != 0 {
				if err := cmd.Process.Signal(tc.sig); err != nil {
					t.Fatal(err)
				}
			}
			// Wait returns once the child has exited and every holder of its standard
			// error (the reaper too) has closed it: the cleanup is over either way.
			werr := cmd.Wait()
			if werr == nil {
				t.Fatalf("child exited 0\n%s", stderr.String())
			}
			left := leftBy(t, pid)
			if len(left) > 0 {
				t.Errorf("after %s: namespaces of process %s remain: %v\nchild's stderr:\n%s", tc.name, pid, left, stderr.String())
			}
			if tc.handled && !strings.Contains(stderr.String(), "deleted "+strconv.Itoa(len(names))+" network namespaces") {
				t.Errorf("the signal handler did not report deleting %d namespaces:\n%s", len(names), stderr.String())
			}
			if !tc.handled && !strings.Contains(stderr.String(), "left by process "+pid) {
				t.Errorf("the reaper did not report its work:\n%s", stderr.String())
			}
			if tc.sig == 0 && !strings.Contains(stderr.String(), "test timed out") {
				t.Errorf("the child did not time out:\n%s", stderr.String())
			}
		})
	}
}

// leftBy lists the namespaces whose name carries pid as this package names them
// (PREFIX<pid>-<n>-<role>).
func leftBy(t *testing.T, pid string) []string {
	t.Helper()
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^[a-z][a-z0-9]*?` + pid + `-[0-9]+-`)
	var out []string
	for _, e := range entries {
		if re.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}
