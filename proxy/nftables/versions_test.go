package nftables

import (
	"context"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"
)

// overallAt syncs kube-proxy's TestOverallNFTablesRules inputs (testdata/cases/overall.yaml)
// with the layout of kube-proxy v; unsetNodePortAddresses leaves --nodeport-addresses
// at its default.
func overallAt(t *testing.T, v Version, unsetNodePortAddresses bool) (*knftables.Fake, *Proxier, testCase) {
	t.Helper()
	tc := loadCase(t, filepath.Join("testdata", "cases", "overall.yaml"))
	tc.cfg.Version, tc.cfg.LocalhostNodePorts = v, false
	if unsetNodePortAddresses {
		tc.cfg.Node.NodePortAddresses = nil
	}
	fake, p, _ := syncCase(t, tc)
	return fake, p, tc
}

// flowAt traces one new connection through the table of kube-proxy v.
func flowAt(t *testing.T, v Version, unsetNodePortAddresses bool, f caseFlow) (string, bool) {
	t.Helper()
	fake, _, _ := overallAt(t, v, unsetNodePortAddresses)
	out, masq, err := trace(fake, testNodeIPs, f.Src, "tcp", f.Dst, f.Port)
	if err != nil {
		t.Fatalf("%s, %s: %v", v, f.Name, err)
	}
	return out, masq
}

// checkFlows runs a flow at two releases and compares with the outcomes wanted.
func checkFlows(t *testing.T, unset bool, f caseFlow, want map[Version]caseFlow) {
	t.Helper()
	for v, w := range want {
		out, masq := flowAt(t, v, unset, f)
		if out != w.Output || masq != w.Masq {
			t.Errorf("kube-proxy %s, %s: %s -> %s:%d gives %q masq %v, want %q masq %v", v, f.Name, f.Src, f.Dst, f.Port, out, masq, w.Output, w.Masq)
		}
	}
}

// nftables-layout-1.30: a new connection to a port a ClusterIP does not serve goes on
// unDNATed in 1.29 (no cluster-ips set); from 1.30 cluster-ips-check rejects it.
func TestLayout130RejectsOtherClusterIPPorts(t *testing.T) {
	checkFlows(t, false, caseFlow{Name: "pod to another port of a ClusterIP", Src: "10.180.0.2", Dst: "172.30.0.41", Port: 22},
		map[Version]caseFlow{Version129: {Output: ""}, Version130: {Output: "REJECT"}, Version135: {Output: "REJECT"}})
	// The service port itself works in every layout.
	checkFlows(t, false, caseFlow{Name: "pod to the ClusterIP", Src: "10.180.0.2", Dst: "172.30.0.41", Port: 80},
		map[Version]caseFlow{Version129: {Output: "10.180.0.1:80"}, Version130: {Output: "10.180.0.1:80"}, Version137: {Output: "10.180.0.1:80"}})
}

// nftables-nodeport-addresses-primary: with --nodeport-addresses unset, a NodePort on
// the node's secondary address 192.168.1.2 is served up to 1.30 (fib daddr type local)
// and not from 1.31 (only the primary address is in nodeport-ips).
func TestNodePortPrimaryFrom131(t *testing.T) {
	f := caseFlow{Name: "external client to a NodePort on a secondary node address", Src: "203.0.113.1", Dst: "192.168.1.2", Port: 3003}
	checkFlows(t, true, f, map[Version]caseFlow{
		Version130: {Output: "10.180.0.3:80", Masq: true},
		Version131: {Output: ""},
	})
	f = caseFlow{Name: "external client to a NodePort on the primary address", Src: "203.0.113.1", Dst: testNodeIP, Port: 3003}
	checkFlows(t, true, f, map[Version]caseFlow{
		Version130: {Output: "10.180.0.3:80", Masq: true},
		Version131: {Output: "10.180.0.3:80", Masq: true},
	})
}

// nftables-masquerade-redesign: the endpoint 10.180.0.2 (its slice names other-node)
// reaching itself through its service is masqueraded by its endpoint chain up to 1.35;
// from 1.36 only local endpoints are in hairpin-connections. A local endpoint's
// hairpin is masqueraded in both.
func TestHairpinRemoteEndpointBefore136(t *testing.T) {
	checkFlows(t, false, caseFlow{Name: "remote-named endpoint to itself", Src: "10.180.0.2", Dst: "172.30.0.42", Port: 80},
		map[Version]caseFlow{Version135: {Output: "10.180.0.2:80", Masq: true}, Version136: {Output: "10.180.0.2:80"}})
	checkFlows(t, false, caseFlow{Name: "local endpoint to itself", Src: "10.180.0.1", Dst: "172.30.0.41", Port: 80},
		map[Version]caseFlow{Version135: {Output: "10.180.0.1:80", Masq: true}, Version136: {Output: "10.180.0.1:80", Masq: true}})
	for v, want := range map[Version]bool{Version135: true, Version136: false} {
		fake, _, _ := overallAt(t, v, false)
		dump := fake.Dump()
		if got := strings.Contains(dump, "chain ip kube-proxy "+ChainMarkForMasquerade); got != want {
			t.Errorf("%s: mark-for-masquerade chain present %v, want %v", v, got, want)
		}
		if got := strings.Contains(dump, "set ip kube-proxy "+SetHairpinConnections); got == want {
			t.Errorf("%s: hairpin-connections set present %v, want %v", v, got, !want)
		}
	}
}

// nftables-no-ct-invalid-drop: 1.29's filter-forward jumps to a forward chain dropping
// conntrack-INVALID packets; 1.30 has no such rule.
func TestLayout129ForwardDropsInvalid(t *testing.T) {
	for v, want := range map[Version]bool{Version129: true, Version130: false} {
		fake, _, _ := overallAt(t, v, false)
		fwd := fake.Table.Chains[ChainForward]
		got := fwd != nil && len(fwd.Rules) == 1 && fwd.Rules[0].Rule == "ct state invalid drop"
		if got != want {
			t.Errorf("%s: forward chain with ct state invalid drop %v, want %v", v, got, want)
		}
		jumps := false
		for _, r := range fake.Table.Chains[ChainFilterForward].Rules {
			jumps = jumps || r.Rule == "jump "+ChainForward
		}
		if jumps != want {
			t.Errorf("%s: filter-forward jumps to forward %v, want %v", v, jumps, want)
		}
	}
}

// nftables-partial-sync: a sync without any change rewrites the whole table before
// 1.31 and writes nothing from 1.31.
func TestPartialSyncsFrom131(t *testing.T) {
	for v, wantFull := range map[Version]bool{Version130: true, Version131: false} {
		_, p, tc := overallAt(t, v, false)
		res, err := p.Sync(context.Background(), tc.services, tc.slices)
		if err != nil {
			t.Fatal(err)
		}
		if res.Full != wantFull || (res.Transaction.NumOperations() == 0) == wantFull {
			t.Errorf("%s: second sync without changes: full %v with %d operations, want full %v", v, res.Full, res.Transaction.NumOperations(), wantFull)
		}
	}
}

// nftables-hourly-full-sync: an hour after the last full sync, a sync without changes
// is partial (empty) in 1.32 and full from 1.33.
func TestHourlyFullSyncFrom133(t *testing.T) {
	for v, wantFull := range map[Version]bool{Version132: false, Version133: true} {
		tc := loadCase(t, filepath.Join("testdata", "cases", "overall.yaml"))
		clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		tc.cfg.Version, tc.cfg.LocalhostNodePorts, tc.cfg.Clock = v, false, clock.Now
		_, p, _ := syncCase(t, tc)
		clock.Advance(FullSyncPeriod + time.Minute)
		res, err := p.Sync(context.Background(), tc.services, tc.slices)
		if err != nil {
			t.Fatal(err)
		}
		if res.Full != wantFull {
			t.Errorf("%s: sync an hour later: full %v, want %v", v, res.Full, wantFull)
		}
	}
}

// The base chains of each layout (reference §2), as the Fake holds them.
func TestBaseChainsByRelease(t *testing.T) {
	want := map[Version]string{
		Version129: "filter-forward:forward:-101 filter-input:input:-101 filter-output:output:-101",
		Version133: "filter-forward:forward:-110 filter-input:input:-110 filter-output-post-dnat:output:-90 filter-output:output:-110 filter-prerouting:prerouting:-110",
		Version134: "filter-forward:forward:0 filter-input:input:0 filter-output-pre-dnat:output:-110 filter-output:output:0 filter-prerouting-pre-dnat:prerouting:-110",
	}
	for v, w := range want {
		fake, _, _ := overallAt(t, v, false)
		var got []string
		for name, c := range fake.Table.Chains {
			if c.Hook != nil && *c.Type == knftables.FilterType {
				n, err := knftables.ParsePriority(knftables.IPv4Family, string(*c.Priority))
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, name+":"+string(*c.Hook)+":"+strconv.Itoa(n))
			}
		}
		sort.Strings(got)
		if g := strings.Join(got, " "); g != w {
			t.Errorf("%s: filter base chains\n%s\nwant\n%s", v, g, w)
		}
	}
}

// nftables-localhost-nodeports: NodePort traffic to 127.0.0.1 matches no rule in 1.36
// and in 1.37 with the gate at its default (off); the node's
// KubeProxyNFTablesLocalhostNodePorts gate (or Config.LocalhostNodePorts) makes 1.37
// reject it.
func TestLocalhostNodePortsGate(t *testing.T) {
	for _, tc := range []struct {
		v    Version
		gate bool
		want string
	}{{Version136, false, ""}, {Version137, false, ""}, {Version137, true, "REJECT"}} {
		c := loadCase(t, filepath.Join("testdata", "cases", "overall.yaml"))
		c.cfg.Version, c.cfg.LocalhostNodePorts = tc.v, false
		if tc.gate {
			c.cfg.Node.FeatureGates = map[string]bool{"KubeProxyNFTablesLocalhostNodePorts": true}
		}
		fake, _, _ := syncCase(t, c)
		out, _, err := trace(fake, testNodeIPs, "127.0.0.1", "tcp", "127.0.0.1", 3003)
		if err != nil {
			t.Fatal(err)
		}
		if out != tc.want {
			t.Errorf("%s, gate %v: 127.0.0.1:3003 gives %q, want %q", tc.v, tc.gate, out, tc.want)
		}
	}
}

// Every case's packet flows (kube-proxy 1.37's packetFlowTest vectors) give the same
// outcomes on the 1.30-1.36 layouts: the layout changes between them move rules, not
// the outcome of a new connection in these cases (the hairpin cases use local
// endpoints). 1.29 differs by design (no cluster-ips-check: TestLayout130RejectsOtherClusterIPPorts).
func TestUpstreamFlowsEveryLayout(t *testing.T) {
	paths, err := filepath.Glob("testdata/cases/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		tc := loadCase(t, path)
		if len(tc.file.Flows) == 0 {
			continue
		}
		for _, v := range []Version{Version130, Version131, Version133, Version134, Version135, Version136} {
			tc.cfg.Version, tc.cfg.LocalhostNodePorts = v, false
			t.Run(tc.name+"/"+string(v), func(t *testing.T) {
				fake, _, _ := syncCase(t, tc)
				runFlows(t, fake, tc.file.FibLocal, tc.file.Flows)
			})
		}
	}
}
