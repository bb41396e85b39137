package main

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const demoFile = "../../scenario/demo.yaml"

func TestTraceScenarioText(t *testing.T) {
	out, _, err := runCmd(t, "trace", demoFile, "--from", "pod:default/client", "--to", "my-service:80")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tcp packet from pod:default/client to my-service:80 (10.", "outcome: delivered pod default/my-app-", "nat/KUBE-SERVICES", "KUBE-SVC-", "DNAT"} {
		if !strings.Contains(out, want) {
			t.Errorf("trace output lacks %q:\n%s", want, out)
		}
	}
}

func TestTraceScenarioAllBranchesAndPictures(t *testing.T) {
	dir := t.TempDir()
	dot := filepath.Join(dir, "path.dot")
	out, _, err := runCmd(t, "trace", demoFile, "--from", "pod:default/client", "--to", "service:default/my-service:80", "--all-branches", "--dot", dot)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "of 3, probability 0.3333"); n != 3 {
		t.Errorf("want 3 outcomes of probability 1/3, got %d:\n%s", n, out)
	}
	b, err := os.ReadFile(dot)
	if err != nil {
		t.Fatal(err)
	}
	d := string(b)
	if !strings.HasPrefix(d, "digraph trace {") || strings.Count(d, "subgraph cluster_") < 2 || !strings.Contains(d, "DNAT --to-destination") || strings.Count(d, `label="p=0.3333"`) != 3 {
		t.Errorf("DOT picture:\n%s", d)
	}
	if strings.Count(d, "{") != strings.Count(d, "}") {
		t.Errorf("unbalanced braces in DOT")
	}
	mm, _, err := runCmd(t, "trace", demoFile, "--from", "pod:default/client", "--to", "service:default/my-service:80", "--mermaid")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(mm, "flowchart LR\n") || !strings.Contains(mm, "subgraph n0[\"node node-a\"]") || !strings.Contains(mm, "PREROUTING") || strings.Contains(mm, `"tcp`) && strings.Count(mm, `"`)%2 != 0 {
		t.Errorf("Mermaid:\n%s", mm)
	}
}

// TestTraceScenarioSVG: --svg draws the path top to bottom without Graphviz (a PATH
// without dot): a hook box a node's hook, the DNAT rule with its chain and dump line,
// and with --reply the answer's column with its un-DNAT.
func TestTraceScenarioSVG(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	svg := filepath.Join(t.TempDir(), "path.svg")
	if _, _, err := runCmd(t, "trace", demoFile, "--from", "pod:default/client", "--to", "my-service", "--reply", "--svg", svg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"<svg", `class="hook" data-node="node-a" data-hook="PREROUTING"`, `data-chain="nat/KUBE-SERVICES"`, "DNAT to 10.244.", "the answer, from pod:default/my-app-", "un-DNAT → tcp 10.", `class="end ok" data-result="delivered" data-pod="default/client"`} {
		if !strings.Contains(s, want) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
	if _, err := exec.LookPath("dot"); err == nil {
		t.Fatal("dot is still found with an empty PATH")
	}
}

// TestTraceScenarioPcapNG: the capture is a pcapng with an interface per capture point,
// in which the DNAT shows: the SYN to the VIP on the client node's bridge, then the
// same SYN to the backend's address on another interface.
func TestTraceScenarioPcapNG(t *testing.T) {
	pcap := filepath.Join(t.TempDir(), "path.pcapng")
	if _, _, err := runCmd(t, "trace", demoFile, "--from", "pod:default/client", "--to", "service:default/my-service:80", "--pcap", pcap); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pcap)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	if len(b) < 12 || le.Uint32(b) != 0x0A0D0D0A {
		t.Fatalf("not a pcapng: % x", b[:min(12, len(b))])
	}
	var ifaces, seen []string
	for off := 0; off+12 <= len(b); {
		typ, total := le.Uint32(b[off:]), int(le.Uint32(b[off+4:]))
		body := b[off+8 : off+total-4]
		switch typ {
		case 1: // an interface: its if_name option comes first
			l := int(le.Uint16(body[10:]))
			ifaces = append(ifaces, string(body[12:12+l]))
		case 6:
			id, caplen := le.Uint32(body), int(le.Uint32(body[12:]))
			pkt := body[20 : 20+caplen]
			if len(pkt) >= 20 && pkt[9] == 6 {
				seen = append(seen, ifaces[id]+" "+ipString(pkt[16:20]))
			}
		}
		off += total
	}
	if len(seen) < 6 {
		t.Fatalf("only %d TCP packets: %v", len(seen), seen)
	}
	first, second := strings.Fields(seen[0]), strings.Fields(seen[1])
	if !strings.HasSuffix(first[0], "/cbr0") || strings.HasPrefix(first[1], "10.244.") || second[0] == first[0] || !strings.HasPrefix(second[1], "10.244.") {
		t.Errorf("want the SYN to the VIP on the client's bridge, then to a pod on another interface (the DNAT), got %v", seen[:2])
	}
}

// TestTraceScenarioPcap: with --pcap-classic the capture is a classic pcap in which the
// DNAT shows: the SYN to the VIP, then the same SYN to the backend's address.
func TestTraceScenarioPcap(t *testing.T) {
	pcap := filepath.Join(t.TempDir(), "path.pcap")
	out, _, err := runCmd(t, "trace", demoFile, "--from", "pod:default/client", "--to", "service:default/my-service:80", "--pcap", pcap, "--pcap-classic", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pcap)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 24 || binary.LittleEndian.Uint32(b) != 0xa1b2c3d4 || binary.LittleEndian.Uint32(b[20:]) != 101 {
		t.Fatalf("not a LINKTYPE_RAW pcap: % x", b[:min(24, len(b))])
	}
	var dsts []string
	for off := 24; off+16 <= len(b); {
		caplen := int(binary.LittleEndian.Uint32(b[off+8:]))
		pkt := b[off+16 : off+16+caplen]
		off += 16 + caplen
		if len(pkt) >= 20 && pkt[9] == 6 {
			dsts = append(dsts, ipString(pkt[16:20]))
		}
	}
	if len(dsts) < 6 {
		t.Fatalf("only %d TCP packets", len(dsts))
	}
	if strings.HasPrefix(dsts[0], "10.244.") || !strings.HasPrefix(dsts[1], "10.244.") {
		t.Errorf("want the SYN to the VIP then to a pod (the DNAT), got %v", dsts[:2])
	}
	if !strings.Contains(out, `"pcap": "`) {
		t.Errorf("JSON does not describe the capture:\n%s", out)
	}
}

func ipString(b []byte) string { return netip.AddrFrom4([4]byte(b)).String() }

func TestTraceScenarioBadInput(t *testing.T) {
	cases := []struct {
		args []string
		msg  string
	}{
		{[]string{"trace", demoFile, "--from", "pod:default/client"}, "needs --from"},
		{[]string{"trace", demoFile, "--from", "pod:default/client", "--to", "my-service", "--src", "10.0.0.1"}, "--src: only for tracing an --iptables-save dump"},
		{[]string{"trace", demoFile, "--iptables-save", "x", "--from", "pod:default/client", "--to", "x"}, "give one"},
		{[]string{"trace", "--iptables-save", "../../testdata/iptables/normalise/kube.saved", "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--to", "x"}, "--to: only for tracing a scenario"},
		{[]string{"trace", demoFile, "--from", "node:node-a", "--to", "my-service"}, "only pods resolve cluster names"},
		{[]string{"trace", demoFile, "--from", "pod:default/client", "--to", "my-service", "--after-step", "99"}, "--after-step: want 0-9"},
		{[]string{"trace", demoFile, "--from", "moon", "--to", "my-service"}, "--from"},
		{[]string{"trace", demoFile, "--from", "pod:default/client", "--to", "my-service", "--mode", "ebpf"}, "mode: unknown kube-proxy mode"},
	}
	for _, tc := range cases {
		_, _, err := runCmd(t, tc.args...)
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%v: want a usage error mentioning %q, got %v", tc.args, tc.msg, err)
		}
	}
}
