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
		{append([]string{"--nft-ruleset", nftRuleset, "--iptables-save", "x"}, pkt...), "--iptables-save: open x"},
		{append([]string{"--nft-ruleset", nftRuleset, "--iptables-save", "x", "--lenient"}, pkt...), "--lenient: not with both --iptables-save and --nft-ruleset"},
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

// TestNFTTraceNodeState: the nftables trace takes what the iptables trace takes of the
// node: interface addresses name the masquerade address, --conntrack gives an
// established packet its entry's binding (a stale endpoint the ruleset no longer
// names), --route-localnet=false drops a loopback destination from outside.
func TestNFTTraceNodeState(t *testing.T) {
	base := []string{"--nft-ruleset", nftRuleset, "--local-ips", "192.168.0.2", "-o", "json"}
	outcome := func(args ...string) map[string]any {
		t.Helper()
		got, errOut, err := runCmd(t, append(append([]string{"trace"}, base...), args...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, errOut)
		}
		var outs []map[string]any
		if err := json.Unmarshal([]byte(got), &outs); err != nil {
			t.Fatal(err)
		}
		if len(outs) != 1 {
			t.Fatalf("%d outcomes:\n%s", len(outs), got)
		}
		return outs[0]
	}
	o := outcome("--src", "203.0.113.2", "--dst", "192.168.0.2", "--dport", "3003", "--iface-addr", "eth0=192.168.0.2", "--out-interface", "eth0")
	if o["snat_source"] != "192.168.0.2" || o["masqueraded"] != true || !strings.HasPrefix(o["packet"].(string), "tcp 192.168.0.2:") {
		t.Errorf("masquerade out of eth0: %v", o)
	}
	o = outcome("--src", "203.0.113.2", "--dst", "192.168.0.2", "--dport", "3003")
	if o["snat_source"] != nil || o["masqueraded"] != true {
		t.Errorf("masquerade, interface address unknown: %v", o)
	}
	ct := t.TempDir() + "/conntrack.txt"
	os.WriteFile(ct, []byte("tcp      6 86397 ESTABLISHED src=10.0.0.2 dst=172.30.0.41 sport=40000 dport=80 src=10.180.0.9 dst=10.0.0.2 sport=80 dport=40000 [ASSURED] mark=0 use=1\n"), 0o644)
	o = outcome("--src", "10.0.0.2", "--dst", "172.30.0.41", "--dport", "80", "--conntrack", ct, "--ctstate", "ESTABLISHED")
	if o["dnat_destination"] != "10.180.0.9:80" || !strings.Contains(o["packet"].(string), "-> 10.180.0.9:80") {
		t.Errorf("established, the entry's binding: %v", o)
	}
	o = outcome("--src", "10.0.0.2", "--dst", "172.30.0.41", "--dport", "80", "--conntrack", ct)
	if o["dnat_destination"] != "10.180.0.1:80" {
		t.Errorf("first packet, the rules' DNAT: %v", o)
	}
	o = outcome("--src", "203.0.113.2", "--dst", "127.0.0.1", "--dport", "8080", "--in-interface", "eth0", "--route-localnet=false")
	if o["verdict"] != "DROP" || o["decided_by"] != "routing" {
		t.Errorf("route_localnet=0: %v", o)
	}
	o = outcome("--src", "203.0.113.2", "--dst", "127.0.0.1", "--dport", "8080", "--in-interface", "eth0")
	if o["verdict"] != "LOCAL" {
		t.Errorf("route_localnet not given: %v", o)
	}
}
