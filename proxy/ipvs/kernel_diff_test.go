package ipvs_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/yaml"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
	ipvsemu "github.com/clusterlab/clusterlab/proxy/ipvs/emulator"
)

// TestKernelDifferential programs the same cases twice — once into the emulator (rules and
// sets), once into a real kernel inside a network namespace made for the test (iptables
// through package kernel, ipsets through ExecIPSets) — and requires the kernel's
// iptables-save and ipset save to equal the emulator's. IPVS itself is the userspace
// model on both sides (this machine's kernel has no IPVS). Cases whose rules need the
// xt_ipvs match (KUBE-IPVS-OUT-FILTER) are skipped when the kernel lacks it.
func TestKernelDifferential(t *testing.T) {
	kernel.RequireRoot(t)
	kernel.RequireTools(t, "ip", "ipset", "iptables-nft-restore", "iptables-nft-save")
	files, err := filepath.Glob("../../testdata/ipvsmode/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	ctx := context.Background()
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".yaml")
		t.Run(name, func(t *testing.T) {
			cfg, nodeIPs, svcs, eps := loadDiffCase(t, path)
			ns := kernel.NewTestNetns(t)

			fam, kfam := emulator.IPv4, kernel.IPv4
			if cfg.Family == corev1.IPv6Protocol {
				fam, kfam = emulator.IPv6, kernel.IPv6
			}
			ipt, err := kernel.NewIPTables(ctx, kernel.IPTablesOptions{Backend: kernel.BackendNFT, Family: kfam, Netns: ns})
			if err != nil {
				t.Skipf("iptables in %s: %v", ns, err)
			}
			sets := &ipvs.ExecIPSets{Netns: ns}
			emu := emulator.New(fam)

			run := func(w ipvs.Writers) *ipvs.SyncResult {
				t.Helper()
				nl := ipvs.NewFakeNetlink()
				nl.SetAddresses("eth0", nodeIPs...)
				w.IPVS, w.Netlink = ipvsemu.MustNew(ipvsemu.Config{}), nl
				px, err := ipvs.NewProxier(w, cfg)
				if err != nil {
					t.Fatal(err)
				}
				res, err := px.Sync(ctx, svcs, eps)
				if err != nil {
					if strings.Contains(err.Error(), "ipvs") && strings.Contains(string(res.IPTablesData), "-m ipvs") {
						t.Skipf("the kernel lacks the ipvs match: %v", err)
					}
					t.Fatal(err)
				}
				// The second sync is a no-op on both.
				if res, err = px.Sync(ctx, svcs, eps); err != nil || res.SetEntriesAdded+res.SetEntriesDeleted != 0 || res.JumpData != nil {
					t.Fatalf("second sync: %+v %v", res, err)
				}
				return res
			}
			run(ipvs.Writers{IPSets: sets, IPTables: ipt})
			run(ipvs.Writers{IPSets: emu, IPTables: emu})

			kSets, err := sets.SaveIPSets(ctx)
			if err != nil {
				t.Fatal(err)
			}
			eSets, _ := emu.SaveIPSets(ctx)
			if diff := cmp.Diff(normaliseSets(string(eSets)), normaliseSets(string(kSets))); diff != "" {
				t.Errorf("ipset save differs (-emulator +kernel):\n%s", diff)
			}
			for _, table := range []string{"filter", "nat"} {
				k, err := ipt.Save(ctx, table)
				if err != nil {
					t.Fatal(err)
				}
				e, _ := emu.Save(ctx, table)
				if diff := cmp.Diff(stripComments(string(e)), stripComments(string(k))); diff != "" {
					t.Errorf("iptables-save -t %s differs (-emulator +kernel):\n%s", table, diff)
				}
			}
		})
	}
}

var kernelOnly = regexp.MustCompile(` bucketsize \d+ initval 0x[0-9a-f]+`)

// normaliseSets drops the kernel's generated create options and sorts each set's
// members (the kernel lists them in hash order).
func normaliseSets(s string) string {
	var out, members []string
	flush := func() {
		slices.Sort(members)
		out = append(out, members...)
		members = nil
	}
	for _, l := range strings.Split(strings.TrimSpace(kernelOnly.ReplaceAllString(s, "")), "\n") {
		if strings.HasPrefix(l, "create ") {
			flush()
			out = append(out, l)
		} else if l != "" {
			members = append(members, l)
		}
	}
	flush()
	return strings.Join(out, "\n")
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// loadDiffCase reads a testdata/ipvsmode case (the fields this test needs).
func loadDiffCase(t *testing.T, path string) (ipvs.ProxierConfig, []netip.Addr, []*corev1.Service, []*discoveryv1.EndpointSlice) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Family            corev1.IPFamily `json:"family"`
		NodeIPs           []string        `json:"nodeIPs"`
		Scheduler         string          `json:"scheduler"`
		DetectLocalMode   proxy.LocalMode `json:"detectLocalMode"`
		ClusterCIDRs      []string        `json:"clusterCIDRs"`
		NodePortAddresses []string        `json:"nodePortAddresses"`
		MasqueradeAll     bool            `json:"masqueradeAll"`
		NoRandomFully     bool            `json:"noRandomFully"`
	}
	var svcs []*corev1.Service
	var eps []*discoveryv1.EndpointSlice
	for _, doc := range docSep.Split(string(data), -1) {
		var meta struct {
			Kind string `json:"kind"`
		}
		if strings.TrimSpace(doc) == "" {
			continue
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "IPVSModeCase":
			err = yaml.Unmarshal([]byte(doc), &c)
		case "Service":
			s := &corev1.Service{}
			err = yaml.Unmarshal([]byte(doc), s)
			svcs = append(svcs, s)
		case "EndpointSlice":
			s := &discoveryv1.EndpointSlice{}
			err = yaml.Unmarshal([]byte(doc), s)
			eps = append(eps, s)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if c.NodeIPs == nil {
		c.NodeIPs = []string{"100.101.102.103"}
	}
	node := proxy.NodeConfig{Name: "test-node", DetectLocalMode: c.DetectLocalMode, NodePortAddresses: c.NodePortAddresses, MasqueradeAll: c.MasqueradeAll}
	if node.DetectLocalMode == "" {
		node.DetectLocalMode = proxy.LocalModeNone
	}
	var addrs []netip.Addr
	seen := map[bool]bool{}
	for _, s := range c.NodeIPs {
		a := netip.MustParseAddr(s)
		addrs = append(addrs, a)
		if !seen[a.Is6()] {
			node.IPs = append(node.IPs, a)
			seen[a.Is6()] = true
		}
	}
	for _, s := range c.ClusterCIDRs {
		node.ClusterCIDRs = append(node.ClusterCIDRs, netip.MustParsePrefix(s))
	}
	return ipvs.ProxierConfig{Family: c.Family, Node: node, Scheduler: c.Scheduler, NoRandomFully: c.NoRandomFully}, addrs, svcs, eps
}
