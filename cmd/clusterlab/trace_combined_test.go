package main

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

const nftNode = "../../testdata/nodebundle/nftables-node"

// combinedOutcome is the part of an outcome the combined-trace tests read.
type combinedOutcome struct {
	Probability float64 `json:"probability"`
	Verdict     string  `json:"verdict"`
	DecidedBy   string  `json:"decided_by"`
	Decision    *struct {
		Source, Hook, Table, Chain, Policy string
		Line                               int
	} `json:"decision"`
	DNAT         *string `json:"dnat_destination"`
	Masqueraded  bool    `json:"masqueraded"`
	SNATSource   *string `json:"snat_source"`
	MatchedRules []struct {
		Source, Hook, Table, Chain string
		Line, Handle               int
	} `json:"matched_rules"`
}

func combinedTrace(t *testing.T, args ...string) ([]combinedOutcome, string) {
	t.Helper()
	out, errOut, err := runCmd(t, append(append([]string{"trace"}, args...), "-o", "json")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var outs []combinedOutcome
	if err := json.Unmarshal([]byte(out), &outs); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return outs, errOut
}

// TestTraceNFTablesNodeWithDocker: an nftables-mode node whose Docker (iptables-nft)
// sets FORWARD's policy to DROP. trace --node runs both at each hook by priority:
// kube-proxy's nft DNAT at -100, then at FORWARD kube-proxy's filter chain and
// Docker's filter table, whose policy drops the pod's packet to a Service (the
// well-known breakage); a Docker container's packet is accepted by Docker's rule and
// masqueraded once, by kube-proxy's nat chain (iptables' nat POSTROUTING at the same
// priority does not run again). The iptables-nft copies in the nft listing are skipped.
func TestTraceNFTablesNodeWithDocker(t *testing.T) {
	outs, errOut := combinedTrace(t, "--node", nftNode, "--src", "10.244.0.9", "--dst", "10.96.0.10", "--dport", "80", "--in-interface", "cbr0", "--all-branches")
	for _, want := range []string{"tracing iptables-save.txt and nft-ruleset.txt (tables ip kube-proxy) together",
		"ip nat, ip filter in " + nftNode + "/nft-ruleset.txt are iptables-nft's tables"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if len(outs) != 1 {
		t.Fatalf("%d outcomes", len(outs))
	}
	o := outs[0]
	if o.Verdict != "DROP" || o.DecidedBy != "policy" || o.Decision.Source != "iptables" || o.Decision.Table != "filter" || o.Decision.Chain != "FORWARD" ||
		o.DNAT == nil || *o.DNAT != "10.244.1.5:8080" || math.Abs(o.Probability-1) > 1e-12 {
		t.Errorf("pod to ClusterIP: %+v, want DROP by iptables filter FORWARD policy after the nft DNAT to 10.244.1.5:8080", o)
	}
	var order []string
	for _, r := range o.MatchedRules {
		order = append(order, r.Source+":"+r.Hook+":"+r.Table)
		if r.Table == "ip filter" || r.Table == "ip nat" {
			t.Errorf("a skipped iptables-nft copy ran: %+v", r)
		}
	}
	want := "nft:PREROUTING:ip kube-proxy,nft:PREROUTING:ip kube-proxy,nft:PREROUTING:ip kube-proxy,nft:PREROUTING:ip kube-proxy," +
		"nft:FORWARD:ip kube-proxy,nft:FORWARD:ip kube-proxy,iptables:FORWARD:filter,iptables:FORWARD:filter,iptables:FORWARD:filter,iptables:FORWARD:filter"
	if got := strings.Join(order, ","); got != want {
		t.Errorf("matched rules in order:\n%s\nwant\n%s", got, want)
	}

	// The same dumps given as flags trace the same.
	flags, _ := combinedTrace(t, "--iptables-save", nftNode+"/iptables-save.txt", "--nft-ruleset", nftNode+"/nft-ruleset.txt",
		"--src", "10.244.0.9", "--dst", "10.96.0.10", "--dport", "80", "--in-interface", "cbr0", "--out-interface", "eth0", "--local-ips", "172.18.0.3,10.244.0.1,172.17.0.1")
	if len(flags) != 1 || flags[0].Verdict != "DROP" || flags[0].Decision.Chain != "FORWARD" {
		t.Errorf("with --iptables-save and --nft-ruleset: %+v", flags)
	}

	outs, _ = combinedTrace(t, "--node", nftNode, "--src", "172.17.0.2", "--dst", "10.96.0.10", "--dport", "80", "--in-interface", "docker0")
	o = outs[0]
	if o.Verdict != "ACCEPT" || o.Decision == nil || o.Decision.Source != "iptables" || o.Decision.Line != 14 || !o.Masqueraded || o.SNATSource == nil || *o.SNATSource != "172.18.0.3" {
		t.Errorf("container to ClusterIP: %+v, want ACCEPT by Docker's line 14, masqueraded to eth0's 172.18.0.3", o)
	}
	last := o.MatchedRules[len(o.MatchedRules)-1]
	if last.Source != "nft" || last.Hook != "POSTROUTING" {
		t.Errorf("the masquerade that bound: %+v, want kube-proxy's (nft, POSTROUTING)", last)
	}
	for _, r := range o.MatchedRules {
		if r.Source == "iptables" && r.Table == "nat" {
			t.Errorf("iptables' nat ran after kube-proxy's masquerade bound: %+v", r)
		}
	}

	text, _, err := runCmd(t, "trace", "--node", nftNode, "--src", "10.244.0.9", "--dst", "10.96.0.10", "--dport", "80", "--in-interface", "cbr0",
		"--manifests", nftNode+"/source/manifests.yaml")
	if err != nil || !strings.Contains(text, "DROP dnat 10.244.1.5:8080 by [iptables] filter FORWARD policy DROP (FORWARD)") ||
		!strings.Contains(text, "[nft] ip kube-proxy nat-prerouting (priority -100)") || !strings.Contains(text, "10.244.1.5      pod default/web-1 on node-b") {
		t.Errorf("text with --manifests: %v\n%s", err, text)
	}

	outs, _ = combinedTrace(t, "--node", nftNode, "--src", "172.18.0.3", "--dst", "10.96.0.10", "--dport", "80")
	if o := outs[0]; o.Verdict != "ACCEPT" || o.DNAT == nil || *o.DNAT != "10.244.1.5:8080" {
		t.Errorf("node to ClusterIP: %+v, want ACCEPT DNATed (OUTPUT: no FORWARD policy)", o)
	}
}

// TestTraceReplyByConntrack: --reply finds the packet's connection in conntrack -L by
// its reply tuple and undoes the connection's NAT as the kernel does: a reply to a
// Docker container's masqueraded connection to a ClusterIP is un-masqueraded after
// PREROUTING (to the container) and un-DNATed after POSTROUTING (from the ClusterIP),
// and Docker's RELATED,ESTABLISHED rule accepts it; through both rule sets, and
// through the iptables dump alone.
func TestTraceReplyByConntrack(t *testing.T) {
	ct := t.TempDir() + "/conntrack.txt"
	if err := os.WriteFile(ct, []byte("tcp      6 431999 ESTABLISHED src=172.17.0.2 dst=10.96.0.10 sport=40000 dport=80 src=10.244.1.5 dst=172.18.0.3 sport=8080 dport=61000 [ASSURED] mark=0 use=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reply := []string{"--src", "10.244.1.5", "--sport", "8080", "--dst", "172.18.0.3", "--dport", "61000", "--in-interface", "eth0", "--reply", "--conntrack", ct}
	for name, args := range map[string][]string{
		"both":     append([]string{"--node", nftNode}, reply...),
		"iptables": append([]string{"--iptables-save", nftNode + "/iptables-save.txt", "--local-ips", "172.18.0.3", "--out-interface", "docker0"}, reply...),
	} {
		outs, errOut := combinedTrace(t, args...)
		if !strings.Contains(errOut, "the packet's connection in "+ct) {
			t.Errorf("%s: stderr:\n%s", name, errOut)
		}
		o := outs[0]
		if o.Verdict != "ACCEPT" || o.DNAT == nil || *o.DNAT != "172.17.0.2:40000" || o.SNATSource == nil || *o.SNATSource != "10.96.0.10:80" ||
			o.Decision == nil || o.Decision.Line != 12 {
			t.Errorf("%s: %+v, want ACCEPT by Docker's line 12, to 172.17.0.2:40000 from 10.96.0.10:80", name, o)
		}
	}
	// Without the entry the binding is not known, and the trace says so.
	_, errOut := combinedTrace(t, append([]string{"--node", nftNode}, append(reply, "--sport", "8081")...)...)
	if !strings.Contains(errOut, "no entry in "+ct+" has the packet's tuple as its reply tuple") {
		t.Errorf("no entry: %s", errOut)
	}
}
