package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

func runTraceCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newTraceCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), err
}

// TestTraceJSONContract: the CLI's JSON is the golden outcome list other tools rely on.
func TestTraceJSONContract(t *testing.T) {
	got, err := runTraceCmd(t, "--iptables-save", "../../testdata/iptables/normalise/kube.saved",
		"--src", "10.0.0.2", "--dst", "172.30.0.41", "--dport", "80", "--proto", "tcp",
		"--local-ips", "192.168.0.2", "--from", "pod", "--all-branches", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../../testdata/iptables/traces/kube-pod-to-clusterip.json")
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("JSON differs from the golden file:\n%s", got)
	}
}

func TestTraceText(t *testing.T) {
	got, err := runTraceCmd(t, "--iptables-save", "../../testdata/iptables/normalise/kube.saved",
		"--src", "192.168.0.2", "--dst", "172.30.0.46", "--dport", "80", "--local-ips", "192.168.0.2")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile("../../testdata/iptables/traces/kube-node-to-no-endpoints.txt")
	if got != string(want) {
		t.Errorf("text differs from the golden file:\n%s", got)
	}
}

func TestTraceBadInput(t *testing.T) {
	dump := "../../testdata/iptables/normalise/kube.saved"
	bad := t.TempDir() + "/bad.txt"
	os.WriteFile(bad, []byte("*filter\n-A INPUT -j NOPE\nCOMMIT\n"), 0o644)
	cases := []struct {
		args []string
		msg  string
	}{
		{[]string{"--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80"}, "--iptables-save is required"},
		{[]string{"--iptables-save", dump, "--src", "10.0.0.x", "--dst", "10.0.0.2", "--dport", "80"}, "--src"},
		{[]string{"--iptables-save", dump, "--src", "10.0.0.1", "--dst", "fd00::1", "--dport", "80"}, "different IP families"},
		{[]string{"--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2"}, "--dport 0"},
		{[]string{"--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--proto", "icmp"}, "--proto"},
		{[]string{"--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--from", "moon"}, "--from"},
		{[]string{"--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "-o", "yaml"}, "-o"},
		{[]string{"--iptables-save", bad, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80"}, "bad.txt:2: -j NOPE: jump to missing chain"},
		{[]string{"--iptables-save", "/nonexistent", "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80"}, "no such file"},
	}
	for _, tc := range cases {
		_, err := runTraceCmd(t, tc.args...)
		var ue usageError
		if err == nil || !errors.As(err, &ue) {
			t.Errorf("%v: error %v is not a usage error (exit code 2)", tc.args, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%v: error %q does not mention %q", tc.args, err, tc.msg)
		}
	}
}

// TestTraceEveryRule: a long chain is looked up through its index unless --every-rule
// asks for the rule-by-rule scan, which lists every rule before the match.
func TestTraceEveryRule(t *testing.T) {
	var b strings.Builder
	b.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n")
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&b, "-A KUBE-SERVICES -d 10.96.0.%d/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.244.0.%d:8080\n", i, i)
	}
	b.WriteString("COMMIT\n")
	dump := t.TempDir() + "/dump.txt"
	if err := os.WriteFile(dump, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--iptables-save", dump, "--src", "10.244.1.5", "--dst", "10.96.0.15", "--dport", "80"}
	indexed, err := runTraceCmd(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	every, err := runTraceCmd(t, append(args, "--every-rule")...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(indexed, "19 of 20 rules skipped by the chain index") || strings.Contains(indexed, "line 5:") {
		t.Errorf("default trace does not go through the index:\n%s", indexed)
	}
	if strings.Contains(every, "skipped by the chain index") {
		t.Errorf("--every-rule trace still skips rules:\n%s", every)
	}
	for line := 5; line <= 19; line++ { // the 15th KUBE-SERVICES rule, on line 19, matches
		if !strings.Contains(every, fmt.Sprintf("line %d: -A KUBE-SERVICES", line)) {
			t.Errorf("--every-rule trace lacks line %d:\n%s", line, every)
		}
	}
	if strings.Contains(every, "line 20:") {
		t.Errorf("--every-rule trace goes on after the DNAT:\n%s", every)
	}
	if _, err := runTraceCmd(t, "../../testdata/scenarios/quickstart.yaml", "--from", "pod:default/client", "--to", "web", "--every-rule"); err == nil || !strings.Contains(err.Error(), "every-rule") {
		t.Errorf("--every-rule with a scenario: %v, want an error naming the flag", err)
	}
}
