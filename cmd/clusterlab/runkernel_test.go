package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/kernelrun"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/scenario"
)

// slowScenario waits on the kernel for about 30 s (ten advances of 3 s), long enough
// to be killed midway.
const slowScenario = `
cluster:
  nodes: [{name: node-a}, {name: node-b}]
manifests:
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-a, containers: [{name: c, image: busybox}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web, labels: {app: web}}, spec: {nodeName: node-b, containers: [{name: w, image: nginx, ports: [{containerPort: 8080}]}]}}
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}}
steps:
  - connect: {from: pod:default/client, to: web:80}
` + "  - advance: 3s\n  - advance: 3s\n  - advance: 3s\n  - advance: 3s\n  - advance: 3s\n  - advance: 3s\n  - advance: 3s\n  - advance: 3s\n  - advance: 3s\n  - advance: 3s\n"

// killPrefix starts the namespaces of these tests' runs.
const killPrefix = "clkct"

// startKernelRun starts `clusterlab run --backend kernel` (this test binary as the CLI)
// on the slow scenario and waits until its namespaces are there; it returns the process
// and their names.
func startKernelRun(t *testing.T) (*exec.Cmd, *bytes.Buffer, []string) {
	t.Helper()
	if err := kernelrun.Supported(kubeproxy.IPTables, kernel.BackendNFT); err != nil {
		t.Skip("kernel back end unavailable: " + err.Error())
	}
	file := filepath.Join(t.TempDir(), "slow.yaml")
	if err := os.WriteFile(file, []byte(slowScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "run", "--backend", "kernel", "--netns-prefix", killPrefix, file)
	cmd.Env = append(os.Environ(), "CLUSTERLAB_TEST_AS_CLI=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		// external, two nodes, client, web, two CoreDNS pods
		if names := runNamespaces(cmd.Process.Pid); len(names) >= 5 {
			time.Sleep(1500 * time.Millisecond) // into the steps
			return cmd, &stderr, runNamespaces(cmd.Process.Pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the run made no namespaces within 30 s; stderr: %s", stderr.String())
	return nil, nil, nil
}

// runNamespaces are the namespaces of the run of process pid.
func runNamespaces(pid int) []string {
	entries, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), killPrefix+strconv.Itoa(pid)+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// reaperOf returns the pid of pid's namespace reaper (an sh child), or 0.
func reaperOf(pid int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) && strings.Contains(s[:i], "(sh") {
			return child
		}
	}
	return 0
}

// TestKernelRunKilled: a run SIGKILLed midway, its namespace reaper killed first (the
// worst case: nothing of the run is left to clean up), leaves its namespaces; the next
// run's start deletes them, since their process is gone.
func TestKernelRunKilled(t *testing.T) {
	cmd, _, names := startKernelRun(t)
	pid := cmd.Process.Pid
	if r := reaperOf(pid); r != 0 {
		_ = syscall.Kill(r, syscall.SIGKILL)
	} else {
		t.Log("no reaper process found; its pipe will delete the namespaces instead")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	left := runNamespaces(pid)
	t.Logf("killed run %d had %d namespaces; %d left after the kill", pid, len(names), len(left))
	// The next start: a harness of the same prefix removes the dead run's namespaces.
	h, err := kernel.NewHarness(kernel.HarnessConfig{Prefix: killPrefix, Pods: []kernel.PodConfig{{Name: "p"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second) // a reaper may be deleting meanwhile
	for len(runNamespaces(pid)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if left := runNamespaces(pid); len(left) > 0 {
		t.Fatalf("namespaces of the killed run left after the next start: %v", left)
	}
}

// TestKernelRunTerminated: SIGTERM ends a run between (or during a wait of) its steps,
// and the run itself deletes its namespaces before it exits: none is left for the
// reaper (which would say so on stderr).
func TestKernelRunTerminated(t *testing.T) {
	cmd, stderr, names := startKernelRun(t)
	pid := cmd.Process.Pid
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	took := time.Since(start)
	if left := runNamespaces(pid); len(left) > 0 {
		t.Fatalf("namespaces left after SIGTERM: %v; stderr: %s", left, stderr.String())
	}
	if strings.Contains(stderr.String(), "left by process") {
		t.Errorf("the reaper, not the run, deleted the namespaces: %s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr does not say the run was interrupted: %s", stderr.String())
	}
	if took > 10*time.Second {
		t.Errorf("the run took %v to end after SIGTERM", took)
	}
	t.Logf("run %d with %d namespaces ended %v after SIGTERM (%v); stderr: %s", pid, len(names), took.Round(time.Millisecond), err, strings.TrimSpace(stderr.String()))
}

// TestKernelRunNeedsRoot: without root, --backend kernel and both are refused with exit
// code 2 and a message saying so, before anything is made (run as nobody).
func TestKernelRunNeedsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the CLI as another user")
	}
	// A directory nobody can read, with the scenario and a copy of this binary.
	dir, err := os.MkdirTemp("", "clkroot")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	file := filepath.Join(dir, "slow.yaml")
	bin := filepath.Join(dir, "clusterlab.test")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{file, []byte(slowScenario), 0o644}, {bin, self, 0o755}} {
		if err := os.WriteFile(f.path, f.data, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, backend := range []string{"kernel", "both"} {
		cmd := exec.Command(bin, "run", "--backend", backend, file)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CLUSTERLAB_TEST_AS_CLI=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Skipf("cannot run the test binary as nobody: %v %s", err, stderr.String())
		}
		if ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "needs root") || stdout.Len() > 0 {
			t.Errorf("--backend %s as nobody: exit %d, stderr %q, stdout %q", backend, ee.ExitCode(), stderr.String(), stdout.String())
		}
	}
}

// TestKeepStates: --keep writes each differing step's kernel state, one file per node
// and kind, the counters only when the back end gave them.
func TestKeepStates(t *testing.T) {
	dir := t.TempDir()
	cmp := &scenario.Comparison{Differences: []scenario.StepDifference{{Index: 3, DatapathState: []scenario.NodeState{
		{Node: "node-a", Rules: "*filter\nCOMMIT\n", Conntrack: "udp 17 ...\n", Counters: "node: Ip.InReceives=3\n"},
		{Node: "node-b", Rules: "*nat\nCOMMIT\n", Conntrack: ""},
	}}}}
	if err := keepStates(dir, cmp); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"step-3-node-a.rules": "*filter\nCOMMIT\n", "step-3-node-a.conntrack": "udp 17 ...\n",
		"step-3-node-a.counters": "node: Ip.InReceives=3\n", "step-3-node-b.rules": "*nat\nCOMMIT\n", "step-3-node-b.conntrack": "",
	} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "step-3-node-b.counters")); err == nil {
		t.Error("node-b had no counters, and a .counters file was written")
	}
}
