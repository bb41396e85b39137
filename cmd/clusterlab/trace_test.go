package main

import (
	"bytes"
	"errors"
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
