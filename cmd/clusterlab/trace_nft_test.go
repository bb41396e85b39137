package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

const nftRuleset = "../../testdata/nftables/kube-proxy.nft"

// golden compares got with a golden file; UPDATE=1 rewrites it.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if os.Getenv("UPDATE") == "1" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n%s", path, got)
	}
}

// TestNFTTraceJSONContract: the outcome JSON through an nft ruleset has the iptables
// walk's fields, and rule refs carry table, chain, line, handle, rule and element.
func TestNFTTraceJSONContract(t *testing.T) {
	got, err := runTraceCmd(t, "--nft-ruleset", nftRuleset, "--src", "10.0.0.2", "--dst", "172.30.0.44", "--dport", "80",
		"--local-ips", "192.168.0.2", "--from", "pod", "--all-branches", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "../../testdata/nftables/traces/kube-pod-to-clusterip.json", got)
	var outs []map[string]any
	if err := json.Unmarshal([]byte(got), &outs); err != nil {
		t.Fatal(err)
	}
	ipt, err := runTraceCmd(t, "--iptables-save", "../../testdata/iptables/normalise/kube.saved",
		"--src", "10.0.0.2", "--dst", "172.30.0.41", "--dport", "80", "--local-ips", "192.168.0.2", "--from", "pod", "--all-branches", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var iouts []map[string]any
	if err := json.Unmarshal([]byte(ipt), &iouts); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) []string {
		var k []string
		for key := range m {
			if key != "assumptions" && key != "reject_with" {
				k = append(k, key)
			}
		}
		slices.Sort(k)
		return k
	}
	if len(outs) != 2 || !slices.Equal(keys(outs[0]), keys(iouts[0])) {
		t.Errorf("outcome fields %v, want the iptables walk's %v", keys(outs[0]), keys(iouts[0]))
	}
	rules := outs[0]["matched_rules"].([]any)
	vmap := rules[2].(map[string]any)
	if vmap["table"] != "ip kube-proxy" || vmap["chain"] != "services" || vmap["element"] != "172.30.0.44 . tcp . 80" || vmap["handle"] == nil {
		t.Errorf("matched rule %v: want table, chain, handle and element", vmap)
	}
}

func TestNFTTraceText(t *testing.T) {
	got, err := runTraceCmd(t, "--nft-ruleset", nftRuleset, "--src", "192.168.0.2", "--dst", "172.30.0.46", "--dport", "80", "--local-ips", "192.168.0.2")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "../../testdata/nftables/traces/kube-node-to-no-endpoints.txt", got)
}

// TestNFTTraceKubeProxyCases: ClusterIP, NodePort, no endpoints and hairpin through
// kube-proxy's ruleset, as the CLI reports them.
func TestNFTTraceKubeProxyCases(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		args                 []string
		verdict, dnat, chain string
		masq                 bool
	}{
		{"pod to ClusterIP", []string{"--src", "10.0.0.2", "--dst", "172.30.0.41", "--dport", "80"}, "ACCEPT", "10.180.0.1:80", "filter-forward", false},
		{"hairpin", []string{"--src", "10.180.0.1", "--dst", "172.30.0.41", "--dport", "80"}, "ACCEPT", "10.180.0.1:80", "filter-forward", true},
		{"external to NodePort", []string{"--src", "203.0.113.2", "--dst", "192.168.0.2", "--dport", "3003"}, "ACCEPT", "10.180.0.3:80", "filter-forward", true},
		{"node to NodePort", []string{"--src", "192.168.0.2", "--dst", "192.168.0.2", "--dport", "3003"}, "ACCEPT", "10.180.0.3:80", "filter-output", true},
		{"no endpoints", []string{"--src", "10.0.0.2", "--dst", "172.30.0.46", "--dport", "80"}, "REJECT", "", "reject-chain", false},
		{"eTP Local NodePort without local endpoints", []string{"--src", "203.0.113.2", "--dst", "192.168.0.2", "--dport", "3001"}, "DROP", "", "nodeport-endpoints-check", false},
		{"wrong port of a ClusterIP", []string{"--src", "10.0.0.2", "--dst", "172.30.0.41", "--dport", "81", "--proto", "udp"}, "REJECT", "", "cluster-ips-check", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--nft-ruleset", nftRuleset, "--local-ips", "192.168.0.2", "--all-branches", "-o", "json"}, tc.args...)
			got, err := runTraceCmd(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			var outs []struct {
				Verdict     string  `json:"verdict"`
				DNAT        *string `json:"dnat_destination"`
				Masqueraded bool    `json:"masqueraded"`
				Decision    *struct {
					Chain string `json:"chain"`
				} `json:"decision"`
			}
			if err := json.Unmarshal([]byte(got), &outs); err != nil {
				t.Fatal(err)
			}
			if len(outs) != 1 {
				t.Fatalf("%d outcomes, want 1:\n%s", len(outs), got)
			}
			o := outs[0]
			dnat := ""
			if o.DNAT != nil {
				dnat = *o.DNAT
			}
			if o.Verdict != tc.verdict || dnat != tc.dnat || o.Masqueraded != tc.masq || o.Decision == nil || o.Decision.Chain != tc.chain {
				t.Errorf("got %s", got)
			}
		})
	}
}

func TestNFTTraceBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := dir + "/bad.nft"
	if err := os.WriteFile(bad, []byte("table ip t {\n\tchain c {\n\t\tjump nowhere\n\t}\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := dir + "/empty.nft"
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pkt := []string{"--src", "10.0.0.2", "--dst", "172.30.0.41", "--dport", "80"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append([]string{"--nft-ruleset", nftRuleset, "--iptables-save", "x"}, pkt...), "give only one of them"},
		{pkt, "--iptables-save is required (or --nft-ruleset"},
		{append([]string{"--nft-ruleset", bad}, pkt...), `bad.nft:3: chain c: jump to missing chain "nowhere"`},
		{append([]string{"--nft-ruleset", empty}, pkt...), "no tables in"},
		{append([]string{"--nft-ruleset", dir + "/missing.nft"}, pkt...), "--nft-ruleset: open"},
		{append([]string{"--nft-ruleset", nftRuleset, "--ipsets", "x"}, pkt...), "--ipsets: only with --iptables-save"},
	} {
		_, err := runTraceCmd(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
