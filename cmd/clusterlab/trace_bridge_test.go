package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const bridgeBundle = "../../testdata/nodebundle/bridge-node"

// TestTraceBridgeBundle: a bundle from a node whose pod solo-0 sits on a hairpin-off
// port: the pod's packet to its own Service is dropped by the bridge, the outcome
// naming the port and its mode, and stderr says where the port and settings came
// from; another pod reaches its Service over the bridge; the flags override the
// bundle's settings.
func TestTraceBridgeBundle(t *testing.T) {
	solo := []string{"trace", "--node", bridgeBundle, "--src", "10.244.0.5", "--dst", "10.96.0.50", "--dport", "80"}
	out, errOut, err := runCmd(t, solo...)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if !strings.Contains(out, "DROP dnat 10.244.0.5:8080 by the bridge (cbr0 port vethsolo hairpin off, bridge-nf-call-iptables=1)") || strings.Contains(out, "FORWARD tcp") {
		t.Errorf("solo-0 to its own Service:\n%s", out)
	}
	for _, want := range []string{"10.244.0.5 is on bridge cbr0 behind port vethsolo (hairpin off)", "net.bridge.bridge-nf-call-iptables = 1, cbr0's own nf_call_iptables 0: cbr0's frames go through iptables"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr:\n%s\nwant %q", errOut, want)
		}
	}
	if strings.Contains(errOut, "nftables tables too") {
		t.Errorf("iptables-nft's own tables taken for other nftables tables:\n%s", errOut)
	}
	js, _, err := runCmd(t, append(solo, "-o", "json")...)
	for _, want := range []string{`"decided_by": "bridge"`, `"decision": null`, `"bridge": "cbr0"`, `"in_port": "vethsolo"`, `"out_port": "vethsolo"`, `"path": "bridged"`, `"hairpin": false`, `"bridge_nf_call_iptables": true`} {
		if err != nil || !strings.Contains(js, want) {
			t.Errorf("json: %v, want %s in\n%s", err, want, js)
		}
	}
	// The flags over the bundle: hairpin on, or no br_netfilter.
	out, _, err = runCmd(t, append(solo, "--hairpin", "on")...)
	if err != nil || !strings.Contains(out, "ACCEPT dnat 10.244.0.5:8080 masqueraded to 10.244.0.1 by filter/KUBE-FORWARD line 25") || !strings.Contains(out, "back out port vethsolo, the port it came in on: hairpin on") {
		t.Errorf("--hairpin on: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, append(solo, "--bridge-nf-call-iptables=false")...)
	if err != nil || !strings.Contains(out, "ACCEPT dnat 10.244.0.5:8080 masqueraded to 10.244.0.1") || !strings.Contains(out, "bridge-nf-call-iptables=0: the frame was addressed to the node") {
		t.Errorf("--bridge-nf-call-iptables=false: %v\n%s", err, out)
	}
	// The client on a hairpin-on port reaches web-0 on another port.
	out, _, err = runCmd(t, "trace", "--node", bridgeBundle, "--src", "10.244.0.7", "--dst", "10.96.0.60", "--dport", "80")
	if err != nil || !strings.Contains(out, "ACCEPT dnat 10.244.0.6:8080 by filter/FORWARD") || !strings.Contains(out, "10.244.0.6 is behind port vethweb, not the port it came in on") {
		t.Errorf("client to web: %v\n%s", err, out)
	}
	// From outside the bridge is not involved.
	out, _, err = runCmd(t, "trace", "--node", bridgeBundle, "--src", "172.18.0.9", "--dst", "10.96.0.50", "--dport", "80", "--in-interface", "eth0")
	if err != nil || !strings.Contains(out, "ACCEPT dnat 10.244.0.5:8080") || strings.Contains(out, "bridge") {
		t.Errorf("from outside: %v\n%s", err, out)
	}
}

// TestTraceBridgeFlags: without a bundle --hairpin and --bridge-nf-call-iptables
// model the bridge for a packet DNATed back to its own source; a setting not given
// is an assumption (both with --all-branches); bad values and the nftables trace are
// refused; without either flag the bridge is not modelled, as before.
func TestTraceBridgeFlags(t *testing.T) {
	args := []string{"trace", "--iptables-save", bridgeBundle + "/iptables-save.txt", "--src", "10.244.0.5", "--dst", "10.96.0.50", "--dport", "80", "--in-interface", "cbr0", "--iface-addr", "cbr0=10.244.0.1"}
	out, _, err := runCmd(t, args...)
	if err != nil || !strings.Contains(out, "ACCEPT dnat 10.244.0.5:8080 masqueraded") || strings.Contains(out, "bridge") {
		t.Errorf("no bridge flags: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, append(args, "--hairpin", "off", "--bridge-nf-call-iptables=true")...)
	if err != nil || !strings.Contains(out, "DROP dnat 10.244.0.5:8080 by the bridge (cbr0 the pod's port hairpin off, bridge-nf-call-iptables=1)") {
		t.Errorf("hairpin off: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, append(args, "--hairpin", "off", "--bridge-nf-call-iptables=false")...)
	if err != nil || !strings.Contains(out, "ACCEPT dnat 10.244.0.5:8080 masqueraded") {
		t.Errorf("hairpin off without br_netfilter: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, append(args, "--hairpin", "off")...)
	if err != nil || !strings.Contains(out, "DROP") || !strings.Contains(out, "assuming bridge-nf-call-iptables (cbr0) on (not known)") {
		t.Errorf("hairpin off, br_netfilter not given: %v\n%s", err, out)
	}
	js, _, err := runCmd(t, append(args, "--bridge-nf-call-iptables=true", "--all-branches", "-o", "json")...)
	if err != nil || strings.Count(js, `"verdict"`) != 2 || !strings.Contains(js, `"condition": "bridge cbr0 port (the pod's) hairpin"`) || !strings.Contains(js, `"decided_by": "bridge"`) {
		t.Errorf("hairpin not known, all branches: %v\n%s", err, js)
	}
	if _, _, err := runCmd(t, append(args, "--hairpin", "maybe")...); err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "want on or off") {
		t.Errorf("--hairpin maybe: %v", err)
	}
	if _, _, err := runCmd(t, "trace", "--nft-ruleset", "x", "--hairpin", "off", "--src", "10.244.0.5", "--dst", "10.96.0.50", "--dport", "80"); err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "--hairpin: only with --iptables-save") {
		t.Errorf("--hairpin with nft: %v", err)
	}
}

// bundleWithout copies the bridge-node bundle without some of its files.
func bundleWithout(t *testing.T, drop ...string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(bridgeBundle)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if slices.Contains(drop, e.Name()) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(bridgeBundle, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestTraceBridgeBundleGaps: what a bundle lacks for the bridge the trace says, and
// assumes instead of guessing: without the neighbour table the pod's port is not
// known (the ports' modes differ, so hairpin on is assumed, and both with
// --all-branches); without the link details the bridge is not modelled unless a flag
// asks for it; without the sysctl bridge-nf-call-iptables is assumed; on a node
// without br_netfilter iptables never sees a frame between two pods.
func TestTraceBridgeBundleGaps(t *testing.T) {
	solo := []string{"--src", "10.244.0.5", "--dst", "10.96.0.50", "--dport", "80"}
	noNeigh := bundleWithout(t, "ip-neigh.json")
	out, errOut, err := runCmd(t, append([]string{"trace", "--node", noNeigh}, solo...)...)
	if err != nil || !strings.Contains(out, "ACCEPT dnat 10.244.0.5:8080") || !strings.Contains(out, "assuming hairpin mode of the pod's port on cbr0 on (not known)") ||
		!strings.Contains(errOut, "10.244.0.5 is on bridge cbr0, its port not known (no neighbour table (ip-neigh.json: not collected)); and the ports' hairpin modes differ") {
		t.Errorf("no neighbour table: %v\n%s\n%s", err, out, errOut)
	}
	out, _, err = runCmd(t, append([]string{"trace", "--node", noNeigh, "--all-branches"}, solo...)...)
	if err != nil || !strings.Contains(out, "DROP dnat 10.244.0.5:8080 by the bridge") || !strings.Contains(out, "ACCEPT dnat 10.244.0.5:8080") {
		t.Errorf("no neighbour table, all branches: %v\n%s", err, out)
	}

	noLinks := bundleWithout(t, "ip-link.json")
	out, errOut, err = runCmd(t, append([]string{"trace", "--node", noLinks}, solo...)...)
	if err != nil || !strings.Contains(out, "ACCEPT dnat 10.244.0.5:8080") || strings.Contains(out, "bridge cbr0") ||
		!strings.Contains(errOut, "no interface details (ip-link.json: not collected): whether cbr0 (the way to 10.244.0.5) is a bridge is not known") {
		t.Errorf("no links: %v\n%s\n%s", err, out, errOut)
	}
	out, _, err = runCmd(t, append([]string{"trace", "--node", noLinks, "--hairpin", "off"}, solo...)...)
	if err != nil || !strings.Contains(out, "DROP dnat 10.244.0.5:8080 by the bridge (cbr0 port vethsolo hairpin off, bridge-nf-call-iptables=1)") {
		t.Errorf("no links, --hairpin off: %v\n%s", err, out)
	}

	dir := bundleWithout(t, "sysctl.txt")
	out, errOut, err = runCmd(t, append([]string{"trace", "--node", dir}, solo...)...)
	if err != nil || !strings.Contains(out, "DROP") || !strings.Contains(out, "assuming bridge-nf-call-iptables (cbr0) on (not known)") || !strings.Contains(errOut, "net.bridge.bridge-nf-call-iptables not collected") {
		t.Errorf("no sysctls: %v\n%s\n%s", err, out, errOut)
	}
	// A node without br_netfilter: the sysctl absent.
	if err := os.WriteFile(filepath.Join(dir, "sysctl.txt"), []byte("net.ipv4.ip_forward = 1\n# not present: net.bridge.bridge-nf-call-iptables\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = runCmd(t, "trace", "--node", dir, "--src", "10.244.0.7", "--dst", "10.244.0.6", "--dport", "8080", "-o", "json")
	if err != nil || !strings.Contains(out, `"decided_by": "bridge"`) || !strings.Contains(out, `"hooks": []`) || !strings.Contains(out, "iptables never sees it") ||
		!strings.Contains(errOut, "net.bridge.bridge-nf-call-iptables = absent (br_netfilter not loaded)") {
		t.Errorf("pod to pod without br_netfilter: %v\n%s\n%s", err, out, errOut)
	}
}

// TestTraceBridgeNFTBundle: the nftables trace does not model the bridge yet, and a
// bundle traced through its nft ruleset says so when the source is on a bridge.
func TestTraceBridgeNFTBundle(t *testing.T) {
	dir := bundleWithout(t, "iptables-save.txt")
	_, errOut, err := runCmd(t, "trace", "--node", dir, "--src", "10.244.0.5", "--dst", "10.96.0.50", "--dport", "80")
	if err != nil || !strings.Contains(errOut, "tracing nft-ruleset.txt") || !strings.Contains(errOut, "10.244.0.5 is on bridge cbr0: the nftables trace does not model the bridge") {
		t.Errorf("nft bundle: %v\n%s", err, errOut)
	}
}
