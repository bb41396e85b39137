package main

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// traceOutcomes runs `clusterlab trace ... -o json` and decodes its outcomes.
func traceOutcomes(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	got, err := runTraceCmd(t, append(args, "-o", "json")...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	var outs []map[string]any
	if err := json.Unmarshal([]byte(got), &outs); err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 {
		t.Fatalf("%v: %d outcomes, want 1", args, len(outs))
	}
	return outs
}

// decisionRule is the rule text of an outcome's decision ("" for a policy).
func decisionRule(o map[string]any) string {
	d, _ := o["decision"].(map[string]any)
	s, _ := d["rule"].(string)
	return s
}

// TestTraceCtState: a packet of an existing connection skips the nat table (no DNAT to
// the ClusterIP's endpoint, unlike the first packet) and is accepted by the
// RELATED,ESTABLISHED rule; an INVALID one is dropped by the --ctstate INVALID rule.
func TestTraceCtState(t *testing.T) {
	dump := "../../testdata/iptables/normalise/kube.saved"
	base := []string{"--iptables-save", dump, "--src", "10.0.0.2", "--dst", "172.30.0.41", "--dport", "80", "--local-ips", "192.168.0.2", "--from", "pod"}
	first := traceOutcomes(t, base...)[0]
	if first["dnat_destination"] == nil {
		t.Fatalf("the first packet is not DNATed: %v", first)
	}
	for _, state := range []string{"ESTABLISHED", "established"} {
		o := traceOutcomes(t, append(base, "--ctstate", state)...)[0]
		if o["dnat_destination"] != nil || o["verdict"] != "ACCEPT" || !strings.Contains(decisionRule(o), "--ctstate RELATED,ESTABLISHED -j ACCEPT") {
			t.Errorf("--ctstate %s: %v", state, o)
		}
	}
	text, err := runTraceCmd(t, append(base, "--ctstate", "ESTABLISHED")...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "(ctstate ESTABLISHED)") || strings.Count(text, "nat table skipped: not the first packet") != 2 {
		t.Errorf("text trace does not say the nat tables were skipped:\n%s", text)
	}
	o := traceOutcomes(t, append(base, "--ctstate", "INVALID")...)[0]
	if o["verdict"] != "DROP" || decisionRule(o) != "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP" || o["dnat_destination"] != nil {
		t.Errorf("--ctstate INVALID: %v", o)
	}
	// --ctstate NEW is the default first packet, byte for byte.
	a, _ := runTraceCmd(t, base...)
	b, _ := runTraceCmd(t, append(base, "--ctstate", "NEW")...)
	if a != b {
		t.Errorf("--ctstate NEW differs from the default:\n%s\n%s", a, b)
	}
}

// TestTraceReplyAndICMP: --reply sets the reply direction (--ctdir REPLY), and an
// ICMP error of a connection (RELATED) is matched by its type and code.
func TestTraceReplyAndICMP(t *testing.T) {
	dump := t.TempDir() + "/d.txt"
	if err := os.WriteFile(dump, []byte(`*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -m conntrack --ctdir REPLY -j ACCEPT
-A FORWARD -p icmp -m icmp --icmp-type fragmentation-needed -m conntrack --ctstate RELATED -j ACCEPT
-A FORWARD -p icmp -m icmp --icmp-type echo-request -j ACCEPT
COMMIT
`), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"--iptables-save", dump, "--src", "10.0.0.2", "--dst", "10.0.1.5"}
	cases := []struct {
		args    []string
		verdict string
		line    float64
	}{
		{[]string{"--dport", "80"}, "DROP", 0},
		{[]string{"--dport", "80", "--ctstate", "ESTABLISHED"}, "DROP", 0},
		{[]string{"--dport", "80", "--reply"}, "ACCEPT", 5},
		{[]string{"--proto", "icmp"}, "ACCEPT", 7}, // echo-request by default
		{[]string{"--proto", "icmp", "--icmp-type", "fragmentation-needed", "--ctstate", "RELATED"}, "ACCEPT", 6},
		{[]string{"--proto", "icmp", "--icmp-type", "3/4", "--ctstate", "RELATED"}, "ACCEPT", 6},
		{[]string{"--proto", "icmp", "--icmp-type", "3", "--icmp-code", "4", "--ctstate", "RELATED"}, "ACCEPT", 6},
		{[]string{"--proto", "icmp", "--icmp-type", "fragmentation-needed"}, "DROP", 0}, // NEW: not RELATED
		{[]string{"--proto", "icmp", "--icmp-type", "port-unreachable", "--ctstate", "RELATED"}, "DROP", 0},
	}
	for _, tc := range cases {
		o := traceOutcomes(t, append(base, tc.args...)...)[0]
		d, _ := o["decision"].(map[string]any)
		line, _ := d["line"].(float64)
		if o["verdict"] != tc.verdict || line != tc.line {
			t.Errorf("%v: verdict %v line %v, want %s line %v", tc.args, o["verdict"], line, tc.verdict, tc.line)
		}
	}
	text, err := runTraceCmd(t, append(base, "--proto", "icmp", "--icmp-type", "fragmentation-needed", "--ctstate", "RELATED", "--reply")...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(text, "packet icmp 10.0.0.2 -> 10.0.1.5 (type 3 code 4) enters at PREROUTING (ctstate RELATED, reply direction)\n") {
		t.Errorf("header:\n%s", text)
	}
}

// TestNFTTraceCtStateAndICMP: through the nftables ruleset, an echo request to a
// ClusterIP is not DNATed (no rule for ICMP) and the cluster-ips-check chain rejects it
// as a new connection; an established TCP packet skips the nat chains (no DNAT) and
// the ct state new jumps.
func TestNFTTraceCtStateAndICMP(t *testing.T) {
	base := []string{"--nft-ruleset", nftRuleset, "--src", "10.0.0.2", "--dst", "172.30.0.44", "--local-ips", "192.168.0.2", "--from", "pod"}
	o := traceOutcomes(t, append(base, "--proto", "icmp")...)[0]
	if o["verdict"] != "REJECT" || o["dnat_destination"] != nil || !strings.Contains(decisionRule(o), "@cluster-ips reject") {
		t.Errorf("echo request to a ClusterIP: %v", o)
	}
	if o := traceOutcomes(t, append(base, "--dport", "80")...)[0]; o["dnat_destination"] != "10.180.0.4:80" {
		t.Errorf("first packet: %v", o)
	}
	o = traceOutcomes(t, append(base, "--dport", "80", "--ctstate", "ESTABLISHED")...)[0]
	if o["verdict"] != "ACCEPT" || o["dnat_destination"] != nil {
		t.Errorf("established packet: %v", o)
	}
	text, err := runTraceCmd(t, append(base, "--dport", "80", "--ctstate", "ESTABLISHED")...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "conntrack: ESTABLISHED, not the first packet of the connection: nat chains are not run") || strings.Contains(text, "dnat to") {
		t.Errorf("text:\n%s", text)
	}
}

func TestTracePacketBadInput(t *testing.T) {
	dump := "../../testdata/iptables/normalise/kube.saved"
	base := []string{"--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2"}
	cases := []struct {
		args []string
		msg  string
	}{
		{[]string{"--dport", "80", "--ctstate", "BOGUS"}, "--ctstate \"BOGUS\""},
		{[]string{"--dport", "80", "--ctstate", "NEW", "--reply"}, "--reply"},
		{[]string{"--dport", "80", "--ctstate", "INVALID", "--reply"}, "--reply"},
		{[]string{"--dport", "80", "--icmp-type", "echo-request"}, "only with --proto icmp"},
		{[]string{"--dport", "80", "--icmp-code", "1"}, "only with --proto icmp"},
		{[]string{"--proto", "icmp", "--sport", "5"}, "ICMP has no ports"},
		{[]string{"--proto", "icmp", "--icmp-type", "nope"}, "--icmp-type"},
		{[]string{"--proto", "icmp", "--icmp-code", "300"}, "--icmp-code 300"},
	}
	for _, tc := range cases {
		_, err := runTraceCmd(t, append(base, tc.args...)...)
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%v: error %v, want a usage error mentioning %q", tc.args, err, tc.msg)
		}
	}
	_, err := runTraceCmd(t, "scenario.yaml", "--from", "pod:default/a", "--to", "web", "--ctstate", "ESTABLISHED")
	if err == nil || !strings.Contains(err.Error(), "--ctstate") {
		t.Errorf("a scenario trace with --ctstate: %v", err)
	}
}
