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
	for _, args := range [][]string{{"run"}, {"run", failing, "-o", "xml"}, {"run", "/nonexistent.yaml"}, {"run", failing, "--modes", "iptables,ebpf"}} {
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

// TestRunVersions: --versions runs the scenario once per kube-proxy version and ends
// with where the versions differ; JSON has versions and facts by_version.
func TestRunVersions(t *testing.T) {
	const file = "../../testdata/scenarios/prefer-same-node.yaml"
	out, _, err := runCmd(t, "run", "--versions", "1.33,1.34", file)
	if exitCode(err) != 1 {
		t.Errorf("1.33 ignores the node hints and fails the scenario: exit %d, %v", exitCode(err), err)
	}
	for _, want := range []string{"==== version 1.33 ====", "==== version 1.34 ====", "==== where the versions differ (1.33, 1.34) ====",
		"      status: 1.33: failed | 1.34: ok", "1.33 FAIL (1 steps), 1.34 PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	out, _, _ = runCmd(t, "run", "--versions", "1.33,1.34", "-o", "json", file)
	var cmp struct {
		Versions    []string
		Modes       []string
		Differences []struct {
			Facts []struct {
				Name      string
				ByVersion map[string]string `json:"by_version"`
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &cmp); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Join(cmp.Versions, ",") != "1.33,1.34" || cmp.Modes != nil || len(cmp.Differences) != 1 || cmp.Differences[0].Facts[0].ByVersion["1.34"] != "ok" {
		t.Errorf("json: %+v", cmp)
	}
}

// TestRunVersionsErrors: a version the mode is not modelled in, a version listed twice,
// and --versions with --modes are usage errors (exit 2) and nothing runs.
func TestRunVersionsErrors(t *testing.T) {
	const file = "../../testdata/scenarios/prefer-same-node.yaml"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--versions", "1.12,1.34", file}, "prefer-same-node.yaml: version: 1.12: kube-proxy before 1."},
		{[]string{"run", "--versions", "1.34,1.40", file}, "prefer-same-node.yaml: version: 1.40: newer than the model"},
		{[]string{"run", "--mode", "userspace", "--versions", "1.34", file}, "the userspace proxy mode was removed in kube-proxy 1.26; use version 1.25 or earlier"},
		{[]string{"run", "--versions", "1.34,v1.34", file}, "version 1.34 is listed twice"},
		{[]string{"run", "--versions", "1.34", "--modes", "iptables,ipvs", file}, "--modes and --versions: give one"},
	} {
		out, _, err := runCmd(t, tc.args...)
		if exitCode(err) != 2 || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("clusterlab %s: exit %d, %v; want exit 2 and %q", strings.Join(tc.args, " "), exitCode(err), err, tc.want)
		}
		if out != "" {
			t.Errorf("clusterlab %s printed %q", strings.Join(tc.args, " "), out)
		}
	}
}
