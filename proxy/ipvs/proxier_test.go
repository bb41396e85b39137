package ipvs_test

import (
	"context"
	"flag"
	"fmt"
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

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
	ipvsemu "github.com/clusterlab/clusterlab/proxy/ipvs/emulator"
)

// The golden cases of the IPVS-mode proxier live in testdata/ipvsmode: each <case>.yaml
// holds an IPVSModeCase document (node and flags, and, where kube-proxy's own
// proxier_test.go states them, its expectations) followed by Services and
// EndpointSlices; <case>.golden is the applied state after one sync: the addresses on
// kube-ipvs0, ipvsadm -Sn, ipset save and iptables-save.
const modeCaseDir = "../../testdata/ipvsmode"

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ipvsmode")

// Test conventions as in kube-proxy's ipvs proxier_test.go: node test-node; its
// addresses on eth0 are the case's nodeIPs (default 100.101.102.103).
const testNodeName = "test-node"

type modeCase struct {
	Kind              string            `json:"kind"`
	Description       string            `json:"description"`
	Family            corev1.IPFamily   `json:"family"`
	NodeIPs           []string          `json:"nodeIPs"`
	ExtraAddresses    map[string]string `json:"extraAddresses"` // interface → address
	Scheduler         string            `json:"scheduler"`
	DetectLocalMode   proxy.LocalMode   `json:"detectLocalMode"`
	ClusterCIDRs      []string          `json:"clusterCIDRs"`
	NodePortAddresses []string          `json:"nodePortAddresses"`
	MasqueradeAll     bool              `json:"masqueradeAll"`
	StrictARP         bool              `json:"strictARP"`
	KernelVersion     string            `json:"kernelVersion"`
	NoRandomFully     bool              `json:"noRandomFully"`
	Labels            map[string]string `json:"labels"`
	// Upstream holds what kube-proxy's test of the same inputs asserts.
	Upstream *upstreamExpect `json:"upstream"`
}

// upstreamExpect is kube-proxy's expectation style: virtual servers with their real
// servers, ipset entries, and per chain the (jump, match-set) of each rule in order.
type upstreamExpect struct {
	Test           string                     `json:"test"`
	VirtualServers map[string]upstreamVS      `json:"virtualServers"` // "ip:port/PROTO"
	IPSets         map[string][]string        `json:"ipsets"`
	Chains         map[string][]upstreamChain `json:"chains"`
}

type upstreamVS struct {
	Scheduler   string   `json:"scheduler"`
	Flags       uint32   `json:"flags"`
	Timeout     uint32   `json:"timeout"`
	RealServers []string `json:"realServers"` // "ip:port" (weight 1), any order
}

type upstreamChain struct {
	Jump   string `json:"jump"`
	Set    string `json:"set"`
	Source string `json:"source"`
}

type loadedCase struct {
	name     string
	file     modeCase
	cfg      ipvs.ProxierConfig
	services []*corev1.Service
	slices   []*discoveryv1.EndpointSlice
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

func loadModeCase(t *testing.T, path string) loadedCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lc := loadedCase{name: strings.TrimSuffix(filepath.Base(path), ".yaml")}
	for i, doc := range docSep.Split(string(data), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%s: document %d: %v", path, i+1, err)
		}
		var err error
		switch meta.Kind {
		case "IPVSModeCase":
			err = yaml.UnmarshalStrict([]byte(doc), &lc.file)
		case "Service":
			s := &corev1.Service{}
			err = yaml.UnmarshalStrict([]byte(doc), s)
			lc.services = append(lc.services, s)
		case "EndpointSlice":
			s := &discoveryv1.EndpointSlice{}
			err = yaml.UnmarshalStrict([]byte(doc), s)
			lc.slices = append(lc.slices, s)
		default:
			err = fmt.Errorf("unknown kind %q", meta.Kind)
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, i+1, err)
		}
	}
	f := lc.file
	if f.NodeIPs == nil {
		f.NodeIPs = []string{"100.101.102.103"}
		lc.file.NodeIPs = f.NodeIPs
	}
	node := proxy.NodeConfig{Name: testNodeName, Labels: f.Labels, DetectLocalMode: f.DetectLocalMode,
		NodePortAddresses: f.NodePortAddresses, MasqueradeAll: f.MasqueradeAll}
	if node.DetectLocalMode == "" {
		node.DetectLocalMode = proxy.LocalModeNone // kube-proxy's NewFakeProxier: a no-op detector
	}
	seen := map[bool]bool{}
	for _, s := range f.NodeIPs {
		a := netip.MustParseAddr(s)
		if !seen[a.Is6()] {
			node.IPs = append(node.IPs, a)
			seen[a.Is6()] = true
		}
	}
	for _, c := range f.ClusterCIDRs {
		node.ClusterCIDRs = append(node.ClusterCIDRs, netip.MustParsePrefix(c))
	}
	lc.cfg = ipvs.ProxierConfig{Family: f.Family, Node: node, Scheduler: f.Scheduler, StrictARP: f.StrictARP,
		KernelVersion: f.KernelVersion, NoRandomFully: f.NoRandomFully}
	return lc
}

// modeHarness is one node: the IPVS model, an emulator holding its iptables rules and
// ipsets, and a fake netlink with eth0.
type modeHarness struct {
	model *ipvsemu.Model
	emu   *emulator.Emulator
	nl    *ipvs.FakeNetlink
	sys   *ipvs.FakeSysctl
	px    *ipvs.Proxier
	clock *ipvsemu.ManualClock
}

func newModeHarness(t *testing.T, cfg ipvs.ProxierConfig, nodeIPs []string, extra map[string]string) *modeHarness {
	t.Helper()
	h := &modeHarness{clock: ipvsemu.NewManualClock(), nl: ipvs.NewFakeNetlink(), sys: &ipvs.FakeSysctl{}}
	h.model = ipvsemu.MustNew(ipvsemu.Config{Clock: h.clock})
	fam := emulator.IPv4
	if cfg.Family == corev1.IPv6Protocol {
		fam = emulator.IPv6
	}
	h.emu = emulator.New(fam)
	var eth0 []netip.Addr
	for _, s := range nodeIPs {
		eth0 = append(eth0, netip.MustParseAddr(s))
	}
	h.nl.SetAddresses("eth0", eth0...)
	for _, dev := range sortedKeys(extra) {
		h.nl.SetAddresses(dev, netip.MustParseAddr(extra[dev]))
	}
	px, err := ipvs.NewProxier(ipvs.Writers{IPVS: h.model, IPSets: h.emu, IPTables: h.emu, Netlink: h.nl, Sysctl: h.sys}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.px = px
	return h
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (h *modeHarness) sync(t *testing.T, svcs []*corev1.Service, slices []*discoveryv1.EndpointSlice) *ipvs.SyncResult {
	t.Helper()
	res, err := h.px.Sync(context.Background(), svcs, slices)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range res.Warnings {
		t.Errorf("sync warning: %v", w)
	}
	return res
}

// state renders the applied state: kube-ipvs0's addresses, ipvsadm -Sn, ipset save and
// iptables-save.
func (h *modeHarness) state(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	addrs, err := h.nl.LocalAddresses(ipvs.DefaultDummyDevice)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(addrs, func(a, b netip.Addr) int { return a.Compare(b) })
	b.WriteString("# ip -brief addr show kube-ipvs0\n")
	for _, a := range addrs {
		b.WriteString(a.String() + "\n")
	}
	b.WriteString("# ipvsadm -Sn\n")
	b.WriteString(h.model.Rules())
	sets, err := h.emu.SaveIPSets(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b.WriteString("# ipset save\n")
	b.Write(sets)
	rules, err := h.emu.Save(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b.WriteString("# iptables-save\n")
	b.Write(rules)
	return b.String()
}

// TestProxierGolden syncs every case under testdata/ipvsmode once and compares the
// applied state with <case>.golden; where the case carries kube-proxy's expectations
// it checks them too; a second sync of the same inputs changes nothing.
func TestProxierGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(modeCaseDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases in %s: %v", modeCaseDir, err)
	}
	for _, path := range files {
		lc := loadModeCase(t, path)
		t.Run(lc.name, func(t *testing.T) {
			h := newModeHarness(t, lc.cfg, lc.file.NodeIPs, lc.file.ExtraAddresses)
			h.sync(t, lc.services, lc.slices)
			got := "# sysctls\n" + strings.Join(h.sys.Writes, "\n") + "\n" + h.state(t)
			golden := strings.TrimSuffix(path, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("applied state differs from %s (-want +got):\n%s", golden, diff)
			}
			if u := lc.file.Upstream; u != nil {
				checkUpstream(t, h, u)
			}
			// A second sync of the same objects is a no-op for IPVS and the sets.
			res := h.sync(t, lc.services, lc.slices)
			if res.VirtualServersAdded+res.VirtualServersUpdated+res.VirtualServersDeleted+res.RealServersAdded+
				res.RealServersDeleted+res.RealServersQuiesced+res.SetEntriesAdded+res.SetEntriesDeleted != 0 ||
				len(res.Bound)+len(res.Unbound) != 0 || res.JumpData != nil {
				t.Errorf("second sync changed things: %+v", res)
			}
			if again := "# sysctls\n" + strings.Join(h.sys.Writes, "\n") + "\n" + h.state(t); again != got {
				t.Errorf("second sync changed the state:\n%s", cmp.Diff(got, again))
			}
		})
	}
}

// checkUpstream asserts kube-proxy's expectations: the exact set of virtual servers
// with their schedulers, flags and real servers; the entries of the listed ipsets;
// the (jump, match-set, source) of every rule of the listed chains, nat rules then
// filter rules, as kube-proxy's checkIptables reads its fake.
func checkUpstream(t *testing.T, h *modeHarness, u *upstreamExpect) {
	t.Helper()
	if u.VirtualServers != nil {
		vss, err := h.model.GetVirtualServers()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]upstreamVS{}
		for _, vs := range vss {
			rss, err := h.model.GetRealServers(vs)
			if err != nil {
				t.Fatal(err)
			}
			e := upstreamVS{Scheduler: vs.Scheduler, Flags: uint32(vs.Flags), Timeout: vs.Timeout, RealServers: []string{}}
			for _, rs := range rss {
				if rs.Weight != 1 {
					t.Errorf("%s: real server %s has weight %d, want 1", ipvs.VSString(vs), ipvs.RSString(rs), rs.Weight)
				}
				e.RealServers = append(e.RealServers, ipvs.RSString(rs))
			}
			slices.Sort(e.RealServers)
			got[ipvs.VSString(vs)] = e
		}
		want := map[string]upstreamVS{}
		for k, v := range u.VirtualServers {
			if v.RealServers == nil {
				v.RealServers = []string{}
			}
			slices.Sort(v.RealServers)
			want[k] = v
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("virtual servers differ from kube-proxy's %s (-kube-proxy +ours):\n%s", u.Test, diff)
		}
	}
	sets := h.emu.IPSets()
	for name, want := range u.IPSets {
		set := sets.Get(name)
		if set == nil {
			t.Errorf("kube-proxy's %s expects ipset %s, which does not exist", u.Test, name)
			continue
		}
		got := set.Entries()
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("ipset %s: %v, kube-proxy's %s expects %v", name, got, u.Test, want)
		}
	}
	rs := h.emu.Ruleset()
	for chain, want := range u.Chains {
		var got []upstreamChain
		for _, table := range []string{emulator.TableNAT, emulator.TableFilter} {
			tb := rs.Table(table)
			if tb == nil || tb.Chain(chain) == nil {
				continue
			}
			for _, r := range tb.Chain(chain).Rules {
				c := upstreamChain{Jump: r.Target.Name()}
				for _, m := range r.Matches {
					if sm, ok := m.(*emulator.SetMatch); ok {
						c.Set = sm.Name
					}
				}
				if r.Src.IsSet() && !r.Src.Neg {
					c.Source = r.Src.Prefix.String()
				}
				got = append(got, c)
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("chain %s differs from kube-proxy's %s (-kube-proxy +ours):\n%s", chain, u.Test, diff)
		}
	}
}
