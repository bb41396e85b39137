package iptables

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/proxy"
)

// nodeAt is testNode running kube-proxy release version.
func nodeAt(t *testing.T, version string) proxy.NodeConfig {
	t.Helper()
	v, err := proxy.ParseVersion(version)
	if err != nil {
		t.Fatal(err)
	}
	n := testNode()
	n.Version = v
	return n
}

// syncFake syncs a Proxier with cfg into a fresh fake; it returns the fake and the
// Proxier, or the NewProxier error.
func syncFake(t *testing.T, cfg Config, services []*corev1.Service, slices []*discoveryv1.EndpointSlice) (*fakeIPT, *Proxier, error) {
	t.Helper()
	ipt := newFakeIPT()
	p, err := NewProxier(ipt, nil, cfg)
	if err != nil {
		return nil, nil, err
	}
	if _, err := p.Sync(context.Background(), services, slices); err != nil {
		t.Fatal(err)
	}
	return ipt, p, nil
}

func nodePortService() ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	svc := mkService("ns1", "svc1", "172.30.0.41", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports = []corev1.ServicePort{{Name: "p80", Port: 80, Protocol: corev1.ProtocolTCP, NodePort: 3001}}
	})
	return []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{mkSlice("ns1", "svc1", 1, "p80", 80, corev1.ProtocolTCP, "10.180.0.1")}
}

// 1.25 (kubernetes#108250): --iptables-localhost-nodeports. kube-proxy 1.24 has no such
// flag (refused); there a host process reaches a NodePort on 127.0.0.1 whatever one
// wants. From 1.25 the flag set to false stops that: the NodePort tail rule gets
// "! -d 127.0.0.0/8" and the packet is not DNATed.
func TestLocalhostNodePortsFlagFrom125(t *testing.T) {
	svcs, slices := nodePortService()
	off := nodeAt(t, "1.24")
	off.LocalhostNodePorts = ptr.To(false)
	if _, _, err := syncFake(t, Config{Node: off}, svcs, slices); err == nil || !strings.Contains(err.Error(), "no --iptables-localhost-nodeports (added in 1.25)") {
		t.Errorf("kube-proxy 1.24 with localhostNodePorts=false: err = %v, want the flag refused", err)
	}
	for _, tc := range []struct {
		name    string
		version string
		flag    *bool
		want    string
	}{
		{"1.24", "1.24", nil, "10.180.0.1:80"},
		{"1.25 default", "1.25", nil, "10.180.0.1:80"},
		{"1.25 false", "1.25", ptr.To(false), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := nodeAt(t, tc.version)
			n.LocalhostNodePorts = tc.flag
			ipt, _, err := syncFake(t, Config{Node: n}, svcs, slices)
			if err != nil {
				t.Fatal(err)
			}
			matches, out, _ := tracePacket(t, ipt, "127.0.0.1", "tcp", "127.0.0.1", 3001, testNodeIPs)
			if out != tc.want {
				t.Errorf("127.0.0.1 -> 127.0.0.1:3001: got %q, want %q\nmatched:\n%s", out, tc.want, strings.Join(matches, "\n"))
			}
		})
	}
}

// 1.30 (kubernetes#123105): --nodeport-addresses=primary. kube-proxy 1.29 refuses the
// value (not a CIDR) and serves NodePorts on every local address; 1.30 with it serves
// them on the primary IP only.
func TestNodePortAddressesPrimaryFrom130(t *testing.T) {
	svcs, slices := nodePortService()
	n := nodeAt(t, "1.29")
	n.NodePortAddresses = []string{proxy.NodePortAddressesPrimary}
	if _, _, err := syncFake(t, Config{Node: n}, svcs, slices); err == nil || !strings.Contains(err.Error(), "added in 1.30") {
		t.Errorf("kube-proxy 1.29 with nodePortAddresses=primary: err = %v, want it refused", err)
	}
	for _, tc := range []struct {
		version            string
		npa                []string
		primary, secondary string
	}{
		{"1.29", nil, "10.180.0.1:80", "10.180.0.1:80"},
		{"1.30", []string{proxy.NodePortAddressesPrimary}, "10.180.0.1:80", ""},
	} {
		t.Run(tc.version, func(t *testing.T) {
			n := nodeAt(t, tc.version)
			n.NodePortAddresses = tc.npa
			ipt, _, err := syncFake(t, Config{Node: n}, svcs, slices)
			if err != nil {
				t.Fatal(err)
			}
			for dst, want := range map[string]string{testNodeIP: tc.primary, testNodeIPAlt: tc.secondary} {
				if _, out, _ := tracePacket(t, ipt, testExternalClient, "tcp", dst, 3001, testNodeIPs); out != want {
					t.Errorf("external -> %s:3001: got %q, want %q", dst, out, want)
				}
			}
		})
	}
}

// MinimizeIPTablesRestore (KEP-3453; alpha 1.26, on by default from 1.27): after one
// Service's endpoints change, a sync of 1.26 rewrites every chain (a full restore,
// the unchanged Service's KUBE-SEP chain included), one of 1.27 only the changed
// Service's chains; 1.26 with the gate turned on behaves as 1.27.
func TestPartialRestoresFollowTheGate(t *testing.T) {
	a := mkService("ns1", "a", "172.30.0.41", withPort("p80", 80, corev1.ProtocolTCP))
	b := mkService("ns1", "b", "172.30.0.42", withPort("p80", 80, corev1.ProtocolTCP))
	svcs := []*corev1.Service{a, b}
	before := []*discoveryv1.EndpointSlice{
		mkSlice("ns1", "a", 1, "p80", 80, corev1.ProtocolTCP, "10.180.0.1"),
		mkSlice("ns1", "b", 1, "p80", 80, corev1.ProtocolTCP, "10.180.0.2"),
	}
	after := []*discoveryv1.EndpointSlice{before[0], mkSlice("ns1", "b", 1, "p80", 80, corev1.ProtocolTCP, "10.180.0.3")}
	unchangedSEP := EndpointChainName("ns1/a:p80", "tcp", "10.180.0.1:80")
	for _, tc := range []struct {
		name    string
		version string
		gates   map[string]bool
		full    bool
	}{
		{"1.26", "1.26", nil, true},
		{"1.26 with the gate", "1.26", map[string]bool{"MinimizeIPTablesRestore": true}, false},
		{"1.27", "1.27", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := nodeAt(t, tc.version)
			n.FeatureGates = tc.gates
			_, p, err := syncFake(t, Config{Node: n, Clock: newClock().Now}, svcs, before)
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Sync(context.Background(), svcs, after)
			if err != nil {
				t.Fatal(err)
			}
			rewritten := strings.Contains(string(res.Data), "-A "+unchangedSEP+" ")
			if res.Full != tc.full || rewritten != tc.full {
				t.Errorf("second sync: full %v, unchanged Service's %s rewritten %v; want both %v\n%s", res.Full, unchangedSEP, rewritten, tc.full, res.Data)
			}
		})
	}
}

// Every golden case rendered as every release from 1.18 to the newest gives consistent
// rules (every jump to a declared, filled chain; no declared chain unused) that a fake
// node accepts, and a Proxier's first sync writes the same text; cases whose flags a
// release does not have are refused by it instead.
func TestEveryReleaseRendersConsistentRules(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(caseDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases in %s: %v", caseDir, err)
	}
	for _, path := range files {
		tc := loadCase(t, path)
		if tc.file.Version != "" {
			continue
		}
		for v := proxy.OldestVersion; v <= proxy.NewestVersion; v++ {
			cfg := tc.cfg
			cfg.Node.Version = v
			got, err := Render(tc.services, tc.slices, cfg, tc.opts)
			if err != nil {
				if cfg.Node.CheckIPTablesFlags() == nil {
					t.Errorf("%s as %s: %v", tc.name, v, err)
				}
				continue
			}
			if err := checkRuleJumps(string(got)); err != nil {
				t.Errorf("%s as %s: inconsistent rules: %v", tc.name, v, err)
			}
			ipt := newFakeIPT()
			p, err := NewProxier(ipt, nil, cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Sync(context.Background(), tc.services, tc.slices)
			if err != nil {
				t.Errorf("%s as %s: sync: %v", tc.name, v, err)
				continue
			}
			if !tc.opts.IncludeJumps && string(res.Data) != string(got) {
				t.Errorf("%s as %s: Proxier's first sync differs from Render", tc.name, v)
			}
		}
	}
}

// Property: in every release, whatever sequence of states a node goes through, its
// syncs (full ones before MinimizeIPTablesRestore, partial ones after) leave it as one
// sync of the last state leaves a fresh node: the chains of older layouts (KUBE-XLB,
// KUBE-FW of every LB IP) are deleted when no longer used, and every restore is
// accepted by the fake.
func TestSyncsConvergeInEveryRelease(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		cfg := upstreamConfig(corev1.IPv4Protocol)
		cfg.Node.Version = proxy.Version(rapid.IntRange(int(proxy.OldestVersion), int(proxy.NewestVersion)).Draw(rt, "version"))
		ipt := newFakeIPT()
		p, err := NewProxier(ipt, nil, cfg)
		if err != nil {
			rt.Fatal(err)
		}
		steps := rapid.IntRange(1, 5).Draw(rt, "steps")
		var services []*corev1.Service
		var slices []*discoveryv1.EndpointSlice
		for s := 0; s < steps; s++ {
			services, slices = genCluster(rt)
			if _, err := p.Sync(ctx, services, slices); err != nil {
				rt.Fatalf("%s, step %d: %v", cfg.Node.Version, s, err)
			}
		}
		fresh := newFakeIPT()
		fp, _ := NewProxier(fresh, nil, cfg)
		if _, err := fp.Sync(ctx, services, slices); err != nil {
			rt.Fatal(err)
		}
		for _, table := range []string{TableFilter, TableNAT} {
			a, _ := fresh.Save(ctx, table)
			b, _ := ipt.Save(ctx, table)
			if !bytes.Equal(a, b) {
				rt.Fatalf("%s: %s differs after %d syncs:\nfresh:\n%s\nsynced:\n%s", cfg.Node.Version, table, steps, a, b)
			}
		}
	})
}

// The nfacct counters: none on 1.29; the INVALID drop counted from 1.30
// (kubernetes#122812); localhost NodePort traffic taken by its own counting rule from
// 1.31 (kubernetes#125015), where before the NodePort's one jump took it.
func TestNFAcctCountersFrom130And131(t *testing.T) {
	svcs, slices := nodePortService()
	for _, tc := range []struct {
		version             string
		invalid             bool
		localhostMatchedVia string
	}{
		{"1.29", false, "-A KUBE-NODEPORTS -m comment --comment ns1/svc1:p80 -m tcp -p tcp --dport 3001 -j KUBE-EXT-"},
		{"1.30", true, "-A KUBE-NODEPORTS -m comment --comment ns1/svc1:p80 -m tcp -p tcp --dport 3001 -j KUBE-EXT-"},
		{"1.31", true, "-A KUBE-NODEPORTS -m comment --comment ns1/svc1:p80 -m tcp -p tcp -d 127.0.0.0/8 --dport 3001 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-EXT-"},
	} {
		t.Run(tc.version, func(t *testing.T) {
			ipt, _, err := syncFake(t, Config{Node: nodeAt(t, tc.version)}, svcs, slices)
			if err != nil {
				t.Fatal(err)
			}
			saved, _ := ipt.Save(context.Background(), TableFilter)
			if got := strings.Contains(string(saved), "--nfacct-name "+NFAcctInvalidCTDropped); got != tc.invalid {
				t.Errorf("INVALID drop counted: %v, want %v", got, tc.invalid)
			}
			matches, out, _ := tracePacket(t, ipt, "127.0.0.1", "tcp", "127.0.0.1", 3001, testNodeIPs)
			via := ""
			for _, m := range matches {
				if strings.HasPrefix(m, "-A KUBE-NODEPORTS ") {
					via = m
					break
				}
			}
			if out != "10.180.0.1:80" || !strings.HasPrefix(via, tc.localhostMatchedVia) {
				t.Errorf("127.0.0.1 -> 127.0.0.1:3001: %q via\n  %s\nwant 10.180.0.1:80 via\n  %s…", out, via, tc.localhostMatchedVia)
			}
		})
	}
}
