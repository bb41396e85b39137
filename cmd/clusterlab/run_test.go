package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

const failingScenario = `cluster: {dns: off}
manifests:
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {containers: [{name: c, image: i}]}}
  - {apiVersion: v1, kind: Service, metadata: {name: empty}, spec: {selector: {app: none}, ports: [{port: 80}]}}
steps:
  - name: no endpoints
    connect: {from: pod:default/client, to: service:default/empty:80}
    expect: {result: connected}
`

func TestRunExitCodes(t *testing.T) {
	dir := t.TempDir()
	failing := filepath.Join(dir, "failing.yaml")
	os.WriteFile(failing, []byte(failingScenario), 0o644)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("steps:\n  - connect: {from: pod:default/c, to: nowhere}\n"), 0o644)

	out, _, err := runCmd(t, "run", "../../scenario/demo.yaml")
	if err != nil {
		t.Fatalf("demo scenario: %v\n%s", err, out)
	}
	if !strings.Contains(out, "PASS: 9 steps") {
		t.Errorf("no PASS line:\n%s", out)
	}

	out, _, err = runCmd(t, "run", failing)
	var ue usageError
	if err == nil || errors.As(err, &ue) {
		t.Fatalf("a failed expectation must exit 1 (not 2): %v", err)
	}
	if !strings.Contains(out, "FAIL expect result: every attempt connected, got refused 1") {
		t.Errorf("output:\n%s", out)
	}

	_, _, err = runCmd(t, "run", bad)
	if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), "bad.yaml:2: steps[0].connect.to:") {
		t.Errorf("bad file: want a usage error naming file:line: field, got %v", err)
	}
	for _, args := range [][]string{{"run"}, {"run", failing, "-o", "yaml"}, {"run", "/nonexistent.yaml"}, {"run", failing, "--modes", "iptables,ebpf"}} {
		if _, _, err := runCmd(t, args...); err == nil || !errors.As(err, &ue) {
			t.Errorf("%v: want a usage error, got %v", args, err)
		}
	}
}

func TestRunModesJSON(t *testing.T) {
	out, _, err := runCmd(t, "run", "../../scenario/demo.yaml", "--modes", "iptables,userspace", "-o", "json")
	var cmp struct {
		Modes       []string
		Differences []struct {
			Title string
			Facts []struct {
				Name   string
				ByMode map[string]string `json:"by_mode"`
			}
		}
		Passed bool
	}
	if jerr := json.Unmarshal([]byte(out), &cmp); jerr != nil {
		t.Fatalf("%v (run error %v)\n%s", jerr, err, out)
	}
	if err != nil || !cmp.Passed {
		t.Fatalf("the demo scenario should pass under both modes: %v", err)
	}
	found := false
	for _, d := range cmp.Differences {
		for _, f := range d.Facts {
			if d.Title == "requests to the VIP" && f.Name == "seen_source" && f.ByMode["iptables"] == "client" && f.ByMode["userspace"] == "node:node-a" {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("the VIP step's seen source should differ (client vs node:node-a): %+v", cmp.Differences)
	}
}

func TestRunProgress(t *testing.T) {
	_, stderr, err := runCmd(t, "run", "../../scenario/demo.yaml", "--progress")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "\r[1/9] requests to the VIP") || !strings.Contains(stderr, "[9/9] from outside through node-b") {
		t.Errorf("progress line: %q", stderr)
	}
	_, stderr, _ = runCmd(t, "run", "../../scenario/demo.yaml")
	if stderr != "" {
		t.Errorf("no progress line when stderr is not a terminal: %q", stderr)
	}
}

// TestProgressLineCutsCharacters: a long title is cut at a character boundary, and a
// shorter line after a longer one blanks the rest of it.
func TestProgressLineCutsCharacters(t *testing.T) {
	var b strings.Builder
	p := newProgress(&b, true)
	p.step(1, 2, strings.Repeat("→", 120))
	first := b.String()
	if !utf8.ValidString(first) || !strings.HasSuffix(first, "...") || utf8.RuneCountInString(first) != 1+100 {
		t.Errorf("long line %q: want 100 characters after \\r, ending in ...", first)
	}
	b.Reset()
	p.step(2, 2, "short")
	if got := b.String(); got != "\r[2/2] short"+strings.Repeat(" ", 100-len("[2/2] short")) {
		t.Errorf("short line after a long one: %q", got)
	}
	b.Reset()
	p.done()
	if got := b.String(); got != "\r"+strings.Repeat(" ", len("[2/2] short"))+"\r" {
		t.Errorf("done: %q", got)
	}
}

// TestModeFlagErrors: a mode flag naming a mode this build lacks is a usage error (exit
// 2) about the flag, not about the scenario file, and nothing runs.
func TestModeFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--modes", "iptables,nft", "../../scenario/demo.yaml"}, `--modes: unknown kube-proxy mode "nft": this build has iptables, ipvs, nftables, userspace`},
		{[]string{"run", "--modes", "ipvs,iptables,ipvs", "../../scenario/demo.yaml"}, `--modes: mode "ipvs" is listed twice`},
		{[]string{"run", "--mode", "ebpf", "../../scenario/demo.yaml"}, `--mode: unknown kube-proxy mode "ebpf"`},
		{[]string{"trace", "../../scenario/demo.yaml", "--from", "pod:default/client", "--to", "my-service:80", "--mode", "ipvss"}, `--mode: unknown kube-proxy mode "ipvss"`},
	} {
		out, _, err := runCmd(t, tc.args...)
		if exitCode(err) != 2 || err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("clusterlab %s: exit %d, %v; want exit 2 and %q", strings.Join(tc.args, " "), exitCode(err), err, tc.want)
		}
		if out != "" {
			t.Errorf("clusterlab %s printed %q", strings.Join(tc.args, " "), out)
		}
	}
}
