package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/nodebundle"
	"github.com/clusterlab/clusterlab/proxy/iptables"
)

// TestCombinedTraceOnARealNode (root): a node network namespace runs a kube-proxy
// nftables table (nft -f) that DNATs a ClusterIP to a pod, and Docker's iptables rules
// (iptables-restore, iptables-nft: FORWARD policy DROP). The bundle collect gathers
// from it, traced with both rule sets by priority, predicts what real connections from
// outside get: dropped by Docker's FORWARD policy after kube-proxy's DNAT; answered by
// the pod once DOCKER-USER accepts the pod's address.
func TestCombinedTraceOnARealNode(t *testing.T) {
	kernel.RequireHarness(t)
	kernel.RequireTools(t, "iptables-save", "iptables-restore", "nft", "ip", "tar", "sh")
	vip := netip.MustParseAddrPort("10.96.7.10:80")
	h, err := kernel.NewHarness(kernel.HarnessConfig{Prefix: "clcomb", NFTables: true, Backend: kernel.BackendNFT, Timeout: 500 * time.Millisecond,
		Pods:           []kernel.PodConfig{{Name: "web-0", Node: 0, TCPPorts: []uint16{8080}}},
		ExternalRoutes: []netip.Prefix{netip.PrefixFrom(vip.Addr(), 32)}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	web := h.Pod("web-0")
	node := h.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kubeProxy := fmt.Sprintf(`table ip kube-proxy {
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr %s tcp dport %d dnat to %s:8080
	}
	chain filter-forward {
		type filter hook forward priority filter; policy accept;
		ct state new ip daddr %s tcp dport 8080 meta mark set 0x100
	}
}
`, vip.Addr(), vip.Port(), web.IP, web.IP)
	if err := node.NFTables.ApplyScript(ctx, kubeProxy); err != nil {
		t.Fatal(err)
	}
	docker := `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER-USER - [0:0]
-A FORWARD -j DOCKER-USER
-A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -i docker0 ! -o docker0 -j ACCEPT
-A DOCKER-USER -j RETURN
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
COMMIT
`
	if err := node.IPTables.Restore(ctx, []byte(docker), iptables.RestoreOptions{NoFlush: true}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "collect.sh")
	if err := os.WriteFile(script, []byte(nodebundle.CollectScript), 0o755); err != nil {
		t.Fatal(err)
	}
	// trace collects a bundle (once per name) and traces the first packet from outside
	// to the ClusterIP, or with reply the pod's answer to it.
	trace := func(name string, reply bool) combinedOutcome {
		t.Helper()
		bundle := filepath.Join(dir, name)
		if _, err := os.Stat(bundle); err != nil {
			if out, err := h.Exec(ctx, node.Netns, "sh", script, bundle); err != nil {
				t.Fatalf("collect: %v\n%s", err, out)
			}
		}
		args := []string{"--node", bundle, "--src", h.ExternalIP.String(), "--dst", vip.Addr().String(), "--dport", fmt.Sprint(vip.Port()), "--in-interface", "eth0"}
		if reply {
			args = []string{"--node", bundle, "--src", web.IP.String(), "--sport", "8080", "--dst", h.ExternalIP.String(), "--dport", "40000", "--reply"}
		}
		outs, errOut := combinedTrace(t, args...)
		if !strings.Contains(errOut, "together") {
			t.Errorf("the trace did not take both rule sets:\n%s", errOut)
		}
		if len(outs) != 1 {
			t.Fatalf("%d outcomes", len(outs))
		}
		return outs[0]
	}

	o := trace("dropped", false)
	if o.Verdict != "DROP" || o.Decision == nil || o.Decision.Source != "iptables" || o.Decision.Chain != "FORWARD" || o.Decision.Policy != "DROP" ||
		o.DNAT == nil || *o.DNAT != web.IP.String()+":8080" {
		t.Errorf("trace: %+v, want DROP by iptables filter FORWARD policy DROP after the DNAT to %s:8080", o, web.IP)
	}
	if r := h.Dial(h.External, "tcp", vip); r.Outcome == kernel.Answered {
		t.Errorf("a real connection from outside to %s: %v, want no answer (dropped)", vip, r)
	}

	// DOCKER-USER accepts packets to the pod: the first packet passes, its reply is
	// still dropped by the policy, and the connection fails.
	accept := fmt.Sprintf("*filter\n-I DOCKER-USER 1 -d %s/32 -j ACCEPT\nCOMMIT\n", web.IP)
	if err := node.IPTables.Restore(ctx, []byte(accept), iptables.RestoreOptions{NoFlush: true}); err != nil {
		t.Fatal(err)
	}
	o = trace("half-open", false)
	if o.Verdict != "ACCEPT" || o.Decision == nil || o.Decision.Source != "iptables" || o.Decision.Chain != "DOCKER-USER" || o.DNAT == nil || *o.DNAT != web.IP.String()+":8080" {
		t.Errorf("trace: %+v, want ACCEPT by DOCKER-USER's rule, DNATed to %s:8080", o, web.IP)
	}
	var sawMark bool
	for _, r := range o.MatchedRules {
		sawMark = sawMark || r.Source == "nft" && r.Chain == "filter-forward"
	}
	if !sawMark {
		t.Errorf("kube-proxy's filter-forward rule at priority 0 (before iptables' filter) is not among the matched rules: %+v", o.MatchedRules)
	}
	if o = trace("half-open", true); o.Verdict != "DROP" || o.Decision == nil || o.Decision.Policy != "DROP" {
		t.Errorf("trace --reply: %+v, want DROP by the FORWARD policy", o)
	}
	if r := h.Dial(h.External, "tcp", vip); r.Outcome == kernel.Answered {
		t.Errorf("a real connection from outside to %s: %v, want no answer (its reply is dropped)", vip, r)
	}

	// And from the pod: both ways pass, the connection is answered.
	accept = fmt.Sprintf("*filter\n-I DOCKER-USER 1 -s %s/32 -j ACCEPT\nCOMMIT\n", web.IP)
	if err := node.IPTables.Restore(ctx, []byte(accept), iptables.RestoreOptions{NoFlush: true}); err != nil {
		t.Fatal(err)
	}
	if o = trace("open", false); o.Verdict != "ACCEPT" {
		t.Errorf("trace: %+v, want ACCEPT", o)
	}
	if o = trace("open", true); o.Verdict != "ACCEPT" || o.Decision == nil || o.Decision.Chain != "DOCKER-USER" {
		t.Errorf("trace --reply: %+v, want ACCEPT by DOCKER-USER's rule", o)
	}
	if r := h.Dial(h.External, "tcp", vip); r.Outcome != kernel.Answered || r.Server != "web-0" {
		t.Errorf("a real connection from outside to %s: %v, want web-0 to answer", vip, r)
	}
}
