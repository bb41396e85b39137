package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// lineWriter hands each written chunk to a channel.
type lineWriter struct {
	mu sync.Mutex
	ch chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case w.ch <- string(p):
	default:
	}
	return len(p), nil
}

// startDNSServe runs `dns serve` in-process with args on an ephemeral port and
// returns the address it serves on and the log lines that followed the status
// line; the server stops when the test ends.
func startDNSServe(t *testing.T, args ...string) (addr string, log *lineWriter) {
	t.Helper()
	cmd := newDNSServeCmd()
	out := &lineWriter{ch: make(chan string, 16)}
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs(append(args, "--listen", "127.0.0.1:0"))
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("after cancel: %v", err)
		}
	})
	select {
	case line := <-out.ch:
		m := regexp.MustCompile(`on (127\.0\.0\.1:\d+) udp\+tcp\n$`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("status line %q", line)
		}
		return m[1], out
	case err := <-done:
		t.Fatalf("dns serve exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no status line")
	}
	return "", nil
}

// TestDNSServeHandWritten is the command of the help text and the README: the Services
// docs' my-service, hand-written (no clusterIP, no EndpointSlice), given as an argument
// after the flags as well as with --manifests.
func TestDNSServeHandWritten(t *testing.T) {
	for _, args := range [][]string{
		{"--manifests", "../../testdata/dns/my-service.yaml"},
		{"../../testdata/dns/my-service.yaml"},
		{"--manifests", "../../testdata/dns/cluster.yaml", "../../testdata/dns/my-service.yaml"},
	} {
		addr, log := startDNSServe(t, args...)
		allocRE := regexp.MustCompile(`service default/my-service has no clusterIP in the manifests: given (10\.\d+\.\d+\.\d+) \(derived from its name`)
		var notes []string
		var m []string
		derived := false
		for m == nil || !derived {
			select {
			case l := <-log.ch:
				notes = append(notes, l)
				if mm := allocRE.FindStringSubmatch(l); mm != nil {
					m = mm
				}
				derived = derived || strings.Contains(l, "default/my-service has no EndpointSlice in the manifests: 3 endpoints derived")
			case <-time.After(30 * time.Second):
				t.Fatalf("%v: log has %q, want the allocation and endpoint notes", args, notes)
			}
		}
		q := new(mdns.Msg)
		q.SetQuestion("my-service.default.svc.cluster.local.", mdns.TypeA)
		resp, _, err := (&mdns.Client{Timeout: 5 * time.Second}).Exchange(q, addr)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Answer) != 1 || !strings.HasSuffix(resp.Answer[0].String(), "\tA\t"+m[1]) {
			t.Errorf("%v: answer %v, want A %s", args, resp.Answer, m[1])
		}
		q.SetQuestion("5.1.244.10.in-addr.arpa.", mdns.TypePTR)
		resp, _, err = (&mdns.Client{Timeout: 5 * time.Second}).Exchange(q, addr)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Answer) != 1 || !strings.HasSuffix(resp.Answer[0].String(), "\tPTR\t10-244-1-5.my-service.default.svc.cluster.local.") {
			t.Errorf("%v: PTR %v", args, resp.Answer)
		}
	}
}

// TestDNSServeCommand runs `dns serve` in-process on an ephemeral port,
// queries it, and stops it through its context.
func TestDNSServeCommand(t *testing.T) {
	cmd := newDNSServeCmd()
	out := &lineWriter{ch: make(chan string, 4)}
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs([]string{"--manifests", "../../testdata/dns/cluster.yaml", "--listen", "127.0.0.1:0",
		"--zone", "cluster.local", "--zone", "0.10.in-addr.arpa", "--pods", "verified", "--ttl", "30"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	var line string
	select {
	case line = <-out.ch:
	case err := <-done:
		t.Fatalf("dns serve exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no status line")
	}
	m := regexp.MustCompile(`^clusterlab dns: serving cluster\.local \(0\.10\.in-addr\.arpa\) from \d+ objects on (127\.0\.0\.1:\d+) udp\+tcp\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("status line %q", line)
	}
	q := new(mdns.Msg)
	q.SetQuestion("10-240-0-1.podns.pod.cluster.local.", mdns.TypeA)
	resp, _, err := (&mdns.Client{Timeout: 5 * time.Second}).Exchange(q, m[1])
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Answer) != 1 || !strings.HasSuffix(resp.Answer[0].String(), "30\tIN\tA\t10.240.0.1") {
		t.Errorf("answer %v, want the verified pod record with TTL 30", resp.Answer)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("after cancel: %v", err)
	}
}

func TestDNSServeBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"--manifests", "../../testdata/dns/nonexistent.yaml", "--listen", "127.0.0.1:0"},
		{"--manifests", "../../testdata/dns/cluster.yaml", "--listen", "127.0.0.1:0", "--pods", "sometimes"},
		{"--listen", "127.0.0.1:0"},
	} {
		cmd := newDNSServeCmd()
		cmd.SetArgs(args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetOut(&lineWriter{ch: make(chan string, 1)})
		err := cmd.ExecuteContext(context.Background())
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: err %v, want a usage error (exit 2)", args, err)
		}
	}
}

// Objects the API server would reject stop dns serve at start-up with exit
// code 2 and each problem with its file, line and field.
func TestDNSServeInvalidManifest(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 10.96.7.7
  ports:
  - {name: http, port: 70000}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-x7k2p, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints:
- addresses: [127.0.0.1]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := newDNSServeCmd()
	cmd.SetArgs([]string{"--manifests", file, "--listen", "127.0.0.1:0"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetOut(&lineWriter{ch: make(chan string, 10)})
	err := cmd.ExecuteContext(context.Background())
	if code := exitCode(err); code != 2 {
		t.Fatalf("exit code %d (err %v), want 2", code, err)
	}
	for _, want := range []string{
		file + `:7 (document 1 from line 1, Service "default/web"): spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive`,
		file + `:14 (document 2 from line 9, EndpointSlice "default/web-x7k2p"): endpoints[0].addresses[0]: Invalid value: "127.0.0.1": may not be in the loopback range`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error:\n%v\nwant:\n%s", err, want)
		}
	}
}

// TestDNSServeAllowRecursionFlag: a bad network in --allow-recursion is exit 2 naming
// the flag and the value; a good one is taken.
func TestDNSServeAllowRecursionFlag(t *testing.T) {
	for _, bad := range []string{"10.0.0/8", "127.0.0.0/8,nonsense", "10.0.0.0/40"} {
		_, _, err := runCmd(t, "dns", "serve", "--manifests", "../../testdata/dns/my-service.yaml", "--listen", "127.0.0.1:0",
			"--upstream", "127.0.0.1:1", "--allow-recursion", bad)
		if code := exitCode(err); code != 2 || !strings.Contains(err.Error(), "--allow-recursion ") {
			t.Errorf("--allow-recursion %s: exit %d (%v), want 2 naming the flag", bad, code, err)
		}
	}
}

// TestOneValidationForEveryCommand: dns serve, generate iptables|nftables and run
// refuse the same manifests with the same messages: a Service defined twice, and two
// Services on one cluster IP, each naming both files and lines (before, dns serve and
// generate took both, and run named only the second).
func TestOneValidationForEveryCommand(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	for f, text := range map[string]string{
		a: "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {clusterIP: 10.96.0.5, selector: {app: web}, ports: [{port: 80}]}\n",
		b: "# the same name, and another on the same address\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec: {clusterIP: 10.96.0.6, selector: {app: web}, ports: [{port: 80}]}\n---\n" +
			"{apiVersion: v1, kind: Service, metadata: {name: other}, spec: {clusterIP: 10.96.0.5, selector: {app: o}, ports: [{port: 80}]}}\n",
	} {
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	scen := filepath.Join(dir, "s.yaml")
	if err := os.WriteFile(scen, []byte("name: t\ncluster:\n  nodes: [{name: node-a}]\nmanifests:\n  - path: a.yaml\n  - path: b.yaml\nsteps:\n  - advance: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{
		b + `:4 (document 1 from line 2, Service "default/web"): metadata.name: Service "default/web" is defined twice (first at ` + a + `:3): the API server refuses the second create: services "web" already exists`,
		b + `:7 (document 2, Service "default/other"): spec.clusterIP: Invalid value: "10.96.0.5": provided IP is already allocated (to Service "default/web" at ` + a + `:4)`,
	}
	for _, args := range [][]string{
		{"dns", "serve", "--manifests", a, "--manifests", b, "--listen", "127.0.0.1:0"},
		{"generate", "iptables", "--node", "node-a", "-f", a, "-f", b},
		{"generate", "nftables", "--node", "node-a", "-f", a, "-f", b},
		{"run", scen},
	} {
		_, _, err := runCmd(t, args...)
		if code := exitCode(err); code != 2 {
			t.Errorf("%s: exit %d (%v), want 2", args[:2], code, err)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error\n%v\nlacks\n%s", args[:2], err, w)
			}
		}
	}
}
