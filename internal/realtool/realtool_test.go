package realtool

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"pgregory.net/rapid"
	"sigs.k8s.io/knftables"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/proptest"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
	ipvsemu "github.com/clusterlab/clusterlab/proxy/ipvs/emulator"
	"github.com/clusterlab/clusterlab/proxy/nftables"
	"github.com/clusterlab/clusterlab/service"
)

// DefaultCases is how many generated clusters TestGeneratedRulesPassRealTools checks
// when -rapid.checks is not given: about 10 s on the 2-core CI machine.
const DefaultCases = 50

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "rapid.checks" })
	if !given {
		if err := flag.Set("rapid.checks", fmt.Sprint(DefaultCases)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	os.Exit(kernel.RunTests(m)) // namespaces deleted on signals too
}

const root = "../../"

// restoreVariant is one iptables-restore binary: a backend for a family.
type restoreVariant struct {
	name string // "iptables-nft-restore"
	ipt  *kernel.IPTables
}

// tools are the real tools, each run in one throwaway network namespace.
type tools struct {
	ns      string
	restore map[corev1.IPFamily][]restoreVariant
	nft     map[corev1.IPFamily]*kernel.NFTables // nil map entry: nft missing
	ipset   bool
	// passed are the inputs a tool already took (tool name + input): many generated
	// cases write the same jump rules, and the same input is not run twice.
	passed map[string]bool
	runs   int // tool processes run
}

// newTools makes the namespace and an adapter per tool found. It skips the test when
// namespaces cannot be made here or no iptables-restore variant exists, and says which
// variants are missing.
func newTools(t *testing.T) *tools {
	t.Helper()
	kernel.RequireHarness(t)
	ctx := context.Background()
	tl := &tools{ns: kernel.NewTestNetns(t), restore: map[corev1.IPFamily][]restoreVariant{}, nft: map[corev1.IPFamily]*kernel.NFTables{},
		passed: map[string]bool{}}
	var missing []string
	for _, fam := range []struct {
		k     kernel.Family
		c     corev1.IPFamily
		base  string
		table knftables.Family
	}{{kernel.IPv4, corev1.IPv4Protocol, "iptables", knftables.IPv4Family}, {kernel.IPv6, corev1.IPv6Protocol, "ip6tables", knftables.IPv6Family}} {
		for _, b := range []kernel.Backend{kernel.BackendNFT, kernel.BackendLegacy} {
			name := fam.base + "-" + string(b) + "-restore"
			if !kernel.HaveTool(name) {
				missing = append(missing, name)
				continue
			}
			ipt, err := kernel.NewIPTables(ctx, kernel.IPTablesOptions{Backend: b, Family: fam.k, Netns: tl.ns})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			tl.restore[fam.c] = append(tl.restore[fam.c], restoreVariant{name: name, ipt: ipt})
		}
		if kernel.HaveTool("nft") {
			n, err := kernel.NewNFTables(ctx, kernel.NFTablesOptions{Family: fam.table, Netns: tl.ns})
			if err != nil {
				t.Fatalf("nft: %v", err)
			}
			tl.nft[fam.c] = n
		}
	}
	if !kernel.HaveTool("nft") {
		missing = append(missing, "nft")
	}
	tl.ipset = kernel.HaveTool("ipset")
	if !tl.ipset {
		missing = append(missing, "ipset (the IPVS mode's rules are not checked)")
	}
	if len(missing) > 0 {
		t.Logf("not installed, not checked: %s", strings.Join(missing, ", "))
	}
	if len(tl.restore[corev1.IPv4Protocol])+len(tl.restore[corev1.IPv6Protocol]) == 0 {
		t.Skip("no iptables-restore variant is installed")
	}
	return tl
}

// checkRestore runs every restore variant of the family with --test on data and
// returns one error per refusal, naming the input, the tool and its message.
func (tl *tools) checkRestore(ctx context.Context, input string, fam corev1.IPFamily, data []byte, opts iptables.RestoreOptions) error {
	var errs []error
	for _, v := range tl.restore[fam] {
		key := fmt.Sprintf("%s %+v\n%s", v.name, opts, data)
		if tl.passed[key] {
			continue
		}
		tl.runs++
		if err := v.ipt.CheckRestore(ctx, data, opts); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s --test refuses it: %w", input, v.name, err))
		} else {
			tl.passed[key] = true
		}
	}
	return errors.Join(errs...)
}

// checkNFT runs nft --check on script in the family's table, if nft is installed.
func (tl *tools) checkNFT(ctx context.Context, input string, fam corev1.IPFamily, script []byte) error {
	n := tl.nft[fam]
	if n == nil {
		return nil
	}
	tl.runs++
	if err := n.CheckScript(ctx, string(script)); err != nil {
		return fmt.Errorf("%s: nft --check refuses it: %w", input, err)
	}
	return nil
}

// commentRE finds the comments of an nft script.
var commentRE = regexp.MustCompile(`comment "([^"]*)"`)

// commentMax is nft's limit on a comment: "comment too long, 128 characters maximum
// allowed".
const commentMax = 128

// checkNFTLayout is checkNFT for a script of a kube-proxy layout. Layouts before 1.37
// write element comments ("ns/name:port") whole, and nft refuses those over 128 bytes:
// kube-proxy 1.29-1.36 failed every sync of such a cluster (kubernetes#139515; 1.37
// truncates them, kubernetes#139516). The generator writes what each release wrote,
// so for those layouts the refusal is expected: it must be for the comments and
// nothing else, which the script with the comments cut to 128 bytes shows by passing.
func (tl *tools) checkNFTLayout(ctx context.Context, input string, fam corev1.IPFamily, v nftables.Version, script []byte) error {
	long := len(nftables.OverlongComments(script)) > 0
	err := tl.checkNFT(ctx, input, fam, script)
	switch {
	case !long || tl.nft[fam] == nil:
		return err
	case v == nftables.Version137:
		return fmt.Errorf("%s: the 1.37 layout wrote a comment over %d bytes (it truncates them): %v", input, commentMax, err)
	case err == nil:
		return fmt.Errorf("%s: nft took comments over %d bytes, which the %s layout writes and nft 1.0.6 refuses: the expected refusal is missing", input, commentMax, v)
	case !strings.Contains(err.Error(), "comment too long"):
		return err
	}
	cut := commentRE.ReplaceAllFunc(script, func(m []byte) []byte {
		c := commentRE.FindSubmatch(m)[1]
		if len(c) > commentMax {
			c = c[:commentMax]
		}
		return []byte(`comment "` + string(c) + `"`)
	})
	if err := tl.checkNFT(ctx, input+" (comments cut to 128 bytes)", fam, cut); err != nil {
		return err
	}
	return nil
}

// ipsetRestore replaces every set of the namespace with data (ipset restore). Nothing
// else refers to the sets: the iptables rules are only ever checked, never loaded.
func (tl *tools) ipsetRestore(ctx context.Context, data []byte) error {
	tl.runs++
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", tl.ns, "ipset", "restore")
	cmd.Stdin = io.MultiReader(strings.NewReader("destroy\n"), bytes.NewReader(data)) // one process; its line numbers count this line
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ipset restore: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

var familyLine = regexp.MustCompile(`(?m)^family:\s*(IPv4|IPv6)\s*$`)

// goldenFamily is the family of a testdata/generator golden: its case's family: line
// (IPv4 when there is none or no case file).
func goldenFamily(golden string) corev1.IPFamily {
	b, err := os.ReadFile(strings.TrimSuffix(golden, ".golden") + ".yaml")
	if err != nil {
		return corev1.IPv4Protocol
	}
	first, _, _ := strings.Cut(string(b), "\n---")
	if m := familyLine.FindStringSubmatch(first); m != nil {
		return corev1.IPFamily(m[1])
	}
	return corev1.IPv4Protocol
}

// sections splits a testdata/ipvsmode golden into its "# name" sections.
func sections(text string) map[string]string {
	out := map[string]string{}
	name := ""
	for _, line := range strings.SplitAfter(text, "\n") {
		if h, ok := strings.CutPrefix(line, "# "); ok {
			name = strings.TrimSpace(h)
			continue
		}
		out[name] += line
	}
	return out
}

func glob(t *testing.T, pattern string) []string {
	t.Helper()
	paths, err := filepath.Glob(root + pattern)
	if err != nil || len(paths) == 0 {
		t.Fatalf("no files match %s: %v", pattern, err)
	}
	return paths
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoldenRulesetsPassRealTools: every golden ruleset the generators are held to is
// input the real tools take. The iptables mode's goldens (testdata/generator, the CLI's
// too) go through iptables-restore --test of their family, nft and legacy backends;
// the partial-sync sequence is loaded for real step by step (--noflush), each step
// checked first, since a partial sync jumps to chains an earlier one made; each IPVS
// mode golden's ipsets are created and its iptables rules checked; the CLI's nftables
// golden goes through nft --check.
func TestGoldenRulesetsPassRealTools(t *testing.T) {
	tl := newTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	noflush := iptables.RestoreOptions{NoFlush: true}
	n := 0
	for _, path := range append(glob(t, "testdata/generator/*.golden"), glob(t, "testdata/generator/cli/cluster.golden")...) {
		if err := tl.checkRestore(ctx, path, goldenFamily(path), read(t, path), noflush); err != nil {
			t.Error(err)
		}
		n++
	}
	// Loading for real needs the nfacct objects kube-proxy creates at start.
	for _, acct := range []string{"ct_state_invalid_dropped_pkts", "localhost_nps_accepted_pkts"} {
		if err := kernel.EnsureNFAcct(tl.ns, acct); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range tl.restore[corev1.IPv4Protocol] {
		for _, path := range glob(t, "testdata/generator/partial/*.golden") {
			data := read(t, path)
			if err := v.ipt.CheckRestore(ctx, data, noflush); err != nil {
				t.Errorf("%s (after the steps before it): %s --test refuses it: %v", path, v.name, err)
				break
			}
			if err := v.ipt.Restore(ctx, data, noflush); err != nil {
				t.Errorf("%s (after the steps before it): %s refuses it: %v", path, v.name, err)
				break
			}
			n++
		}
	}
	if tl.ipset {
		for _, path := range glob(t, "testdata/ipvsmode/*.golden") {
			sec := sections(string(read(t, path)))
			fam := corev1.IPv4Protocol
			if strings.Contains(sec["ipset save"], " family inet6 ") {
				fam = corev1.IPv6Protocol
			}
			if err := tl.ipsetRestore(ctx, []byte(sec["ipset save"])); err != nil {
				t.Errorf("%s: %v", path, err)
				continue
			}
			if err := tl.checkRestore(ctx, path+" (# iptables-save)", fam, []byte(sec["iptables-save"]), iptables.RestoreOptions{}); err != nil {
				t.Error(err)
			}
			n++
		}
	}
	path := root + "testdata/generator/cli/cluster-nftables.golden"
	if err := tl.checkNFT(ctx, path, corev1.IPv4Protocol, read(t, path)); err != nil {
		t.Error(err)
	}
	t.Logf("%d golden rulesets checked: %d tool runs", n+1, tl.runs)
}

// flags are the node's kube-proxy flags a generated case draws.
type flags struct {
	node          int
	masqueradeAll bool
	detectLocal   proxy.LocalMode
	localhostNP   bool
	noNFAcct      bool
	nftVersion    nftables.Version
	scheduler     string
}

func drawFlags(t *rapid.T, c *proptest.Case) flags {
	return flags{
		node:          rapid.IntRange(0, len(c.Cluster.Nodes)-1).Draw(t, "node"),
		masqueradeAll: rapid.Bool().Draw(t, "masqueradeAll"),
		detectLocal:   rapid.SampledFrom([]proxy.LocalMode{proxy.LocalModeClusterCIDR, proxy.LocalModeNodeCIDR, proxy.LocalModeNone}).Draw(t, "detectLocal"),
		localhostNP:   rapid.Bool().Draw(t, "localhostNodePorts"),
		noNFAcct:      rapid.Bool().Draw(t, "noNFAcct"),
		nftVersion:    rapid.SampledFrom(nftables.Versions).Draw(t, "nftablesVersion"),
		scheduler:     rapid.SampledFrom([]string{"rr", "mh", "sh"}).Draw(t, "ipvsScheduler"),
	}
}

// longNames moves a case into a namespace with a name of a drawn length and gives its
// Services names of drawn lengths, up to the API's 63 characters: the tools limit
// comments, chain and set names, and the generators must stay within them.
func longNames(t *rapid.T, c *proptest.Case) {
	name := func(label string, n int) string {
		if n <= len(label) {
			return label[:n]
		}
		return label + strings.Repeat("x", n-len(label)-1) + "z"
	}
	ns := name("ns-long", rapid.SampledFrom([]int{0, 1, 40, 63}).Draw(t, "namespaceLength"))
	svcLen := rapid.SampledFrom([]int{0, 20, 63}).Draw(t, "serviceNameLength")
	renamed := map[string]string{}
	for i, s := range c.Services {
		if svcLen > 0 {
			old := s.Name
			s.Name = name(fmt.Sprintf("svc%d-", i), svcLen)
			renamed[old] = s.Name
		}
		if ns != "" {
			s.Namespace = ns
		}
	}
	for _, sl := range c.Slices {
		if n, ok := renamed[sl.Labels[discoveryv1.LabelServiceName]]; ok {
			sl.Labels[discoveryv1.LabelServiceName] = n
		}
		if ns != "" {
			sl.Namespace = ns
		}
	}
	if ns == "" {
		return
	}
	states := map[string]proptest.PodState{}
	for _, p := range c.Pods {
		if st, ok := c.PodStates[p.Namespace+"/"+p.Name]; ok {
			states[ns+"/"+p.Name] = st
		}
		p.Namespace = ns
	}
	c.PodStates = states
}

// nodeConfig is kube-proxy's view of node f.node of the case.
func nodeConfig(c *proptest.Case, f flags) proxy.NodeConfig {
	spec := c.Cluster.Nodes[f.node]
	nc := proxy.NodeConfig{
		Name:            spec.Name,
		IPs:             c.Cluster.NodeIPs(f.node),
		PodCIDRs:        c.Cluster.PodCIDRs(f.node),
		ClusterCIDRs:    []netip.Prefix{proptest.ClusterCIDR4},
		DetectLocalMode: f.detectLocal,
		MasqueradeAll:   f.masqueradeAll,
	}
	if c.Cluster.DualStack {
		nc.ClusterCIDRs = append(nc.ClusterCIDRs, proptest.ClusterCIDR6)
	}
	if spec.Zone != "" {
		nc.Labels = map[string]string{corev1.LabelTopologyZone: spec.Zone}
	}
	lnp := f.localhostNP
	nc.LocalhostNodePorts = &lnp
	c.Cluster.KubeProxyFlags(&nc)
	return nc
}

// lbNet4 and lbNet6 are where the load balancers' ingress addresses come from.
var (
	lbNet4 = netip.MustParseAddr("198.51.100.0")
	lbNet6 = netip.MustParseAddr("2001:db8:1b::")
)

// materialise runs a generated case's objects through the simulated API server (cluster
// IPs and node ports allocated, EndpointSlices written by its controller) without a
// network: pods get the readiness their state says, LoadBalancer Services an ingress
// address per family, terminating pods are deleted with a grace period.
func materialise(c *proptest.Case) ([]*corev1.Service, []*discoveryv1.EndpointSlice, error) {
	cidrs := []netip.Prefix{proptest.ServiceCIDR4}
	if c.Cluster.DualStack {
		cidrs = append(cidrs, proptest.ServiceCIDR6)
	}
	st, err := service.NewStore(service.Config{ServiceCIDRs: cidrs, Seed: c.Cluster.Seed})
	if err != nil {
		return nil, nil, err
	}
	var objs []runtime.Object
	namespaces := map[string]bool{}
	for _, s := range c.Services {
		if !namespaces[s.Namespace] {
			namespaces[s.Namespace] = true
			if _, exists := st.GetNamespace(s.Namespace); !exists {
				objs = append(objs, service.NewNamespace(s.Namespace))
			}
		}
	}
	for i, n := range c.Cluster.Nodes {
		node := service.NewNode(n.Name)
		if n.Zone != "" {
			node.Labels = map[string]string{corev1.LabelTopologyZone: n.Zone}
		}
		for _, p := range c.Cluster.PodCIDRs(i) {
			node.Spec.PodCIDRs = append(node.Spec.PodCIDRs, p.String())
		}
		for _, a := range c.Cluster.NodeIPs(i) {
			node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a.String()})
		}
		objs = append(objs, node)
	}
	for _, s := range c.Services {
		objs = append(objs, s.DeepCopy())
	}
	for _, p := range c.Pods {
		pod := p.DeepCopy()
		ready := corev1.ConditionTrue
		if s := c.State(p.Namespace + "/" + p.Name); s == proptest.PodNotReady || s == proptest.PodTerminatingNotReady {
			ready = corev1.ConditionFalse
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}
		objs = append(objs, pod)
	}
	for _, s := range c.Slices {
		objs = append(objs, s.DeepCopy())
	}
	if err := st.Apply(objs...); err != nil {
		return nil, nil, err
	}
	for i, s := range st.ListServices() {
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		s = s.DeepCopy()
		for _, fam := range s.Spec.IPFamilies {
			base := lbNet4
			if fam == corev1.IPv6Protocol {
				base = lbNet6
			}
			a := base
			for range i + 1 {
				a = a.Next()
			}
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: a.String()})
		}
		if _, err := st.UpdateStatus(s); err != nil {
			return nil, nil, fmt.Errorf("load balancer status of %s: %w", s.Name, err)
		}
	}
	for _, p := range c.Pods {
		if s := c.State(p.Namespace + "/" + p.Name); s == proptest.PodTerminating || s == proptest.PodTerminatingNotReady {
			if err := st.DeletePod(p.Namespace, p.Name, proptest.TerminationGrace); err != nil {
				return nil, nil, err
			}
		}
	}
	return st.ListServices(), st.ListEndpointSlices(), nil
}

// manifests prints the objects a case's rules were written from, for a failure report.
func manifests(svcs []*corev1.Service, slices []*discoveryv1.EndpointSlice) string {
	var b strings.Builder
	for _, s := range svcs {
		fmt.Fprintf(&b, "Service %s/%s %s clusterIPs=%v ports=%v externalIPs=%v lb=%v etp=%s itp=%v affinity=%s ranges=%v\n",
			s.Namespace, s.Name, s.Spec.Type, s.Spec.ClusterIPs, s.Spec.Ports, s.Spec.ExternalIPs, s.Status.LoadBalancer.Ingress,
			s.Spec.ExternalTrafficPolicy, s.Spec.InternalTrafficPolicy, s.Spec.SessionAffinity, s.Spec.LoadBalancerSourceRanges)
	}
	for _, sl := range slices {
		fmt.Fprintf(&b, "EndpointSlice %s/%s %s ports=%d endpoints=%d\n", sl.Namespace, sl.Name, sl.AddressType, len(sl.Ports), len(sl.Endpoints))
	}
	return b.String()
}

// TestGeneratedRulesPassRealTools: for generated clusters (the property kit's cases:
// ClusterIP, NodePort, LoadBalancer, headless and ExternalName Services, externalIPs,
// both traffic policies, ClientIP affinity, IPv4, IPv6 and dual-stack, named ports,
// services without endpoints, terminating and not-ready pods, hand-written slices) and
// drawn node flags, what each generator writes for one node is input the real tools
// take: the iptables mode (iptables.Render with the hook jumps) through
// iptables-restore --test, nft and legacy, per family; the nftables mode
// (nftables.Render, a drawn 1.29-1.37 layout) through nft --check; the IPVS mode (a
// first sync of its proxier on the emulators) by loading its ipsets and checking its
// jump and rule inputs with iptables-restore --test. A refusal fails with the tool's
// message, the input and the objects; rapid shrinks the case.
func TestGeneratedRulesPassRealTools(t *testing.T) {
	tl := newTools(t)
	start := time.Now()
	cases := 0
	rapid.Check(t, func(rt *rapid.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := proptest.Cases(proptest.Options{NoSteps: true}).Draw(rt, "case")
		longNames(rt, c)
		f := drawFlags(rt, c)
		svcs, slices, err := materialise(c)
		if err != nil {
			rt.Fatalf("objects: %v", err)
		}
		cases++
		nc := nodeConfig(c, f)
		for _, fam := range c.Cluster.Families() {
			report := func(err error, input []byte) {
				rt.Errorf("%v\nnode %s (%+v), %s\n%sinput:\n%s", err, nc.Name, f, fam, manifests(svcs, slices), input)
			}
			text, err := iptables.Render(svcs, slices, iptables.Config{Family: fam, Node: nc, NoNFAcct: f.noNFAcct}, iptables.RenderOptions{IncludeJumps: true})
			if err != nil {
				rt.Fatalf("iptables.Render: %v", err)
			}
			if err := tl.checkRestore(ctx, "iptables mode "+string(fam), fam, text, iptables.RestoreOptions{NoFlush: true}); err != nil {
				report(err, text)
			}
			script, err := nftables.Render(svcs, slices, nftables.Config{Family: fam, Node: nc, Version: f.nftVersion,
				ServiceCIDRs: []netip.Prefix{proptest.ServiceCIDR4, proptest.ServiceCIDR6}})
			if err != nil {
				rt.Fatalf("nftables.Render: %v", err)
			}
			if err := tl.checkNFTLayout(ctx, "nftables mode "+string(fam), fam, f.nftVersion, script); err != nil {
				report(err, script)
			}
			if tl.ipset {
				res := ipvsSync(rt, fam, nc, f, svcs, slices)
				if err := tl.ipsetRestore(ctx, res.IPSetData); err != nil {
					report(fmt.Errorf("IPVS mode %s: %w", fam, err), res.IPSetData)
					continue
				}
				for _, in := range []struct {
					name string
					data []byte
				}{{"jump rules", res.JumpData}, {"rules", res.IPTablesData}} {
					if err := tl.checkRestore(ctx, "IPVS mode "+string(fam)+" "+in.name, fam, in.data, iptables.RestoreOptions{NoFlush: true}); err != nil {
						report(err, in.data)
					}
				}
			}
		}
	})
	t.Logf("%d generated clusters checked in %v: %d tool runs", cases, time.Since(start).Round(time.Millisecond), tl.runs)
}

// ipvsSync is the IPVS proxier's first sync for the node, on the emulators.
func ipvsSync(rt *rapid.T, fam corev1.IPFamily, nc proxy.NodeConfig, f flags, svcs []*corev1.Service, slices []*discoveryv1.EndpointSlice) *ipvs.SyncResult {
	efam := emulator.IPv4
	if fam == corev1.IPv6Protocol {
		efam = emulator.IPv6
	}
	emu := emulator.New(efam)
	nl := ipvs.NewFakeNetlink()
	nl.SetAddresses("eth0", nc.IPs...)
	px, err := ipvs.NewProxier(ipvs.Writers{IPVS: ipvsemu.MustNew(ipvsemu.Config{}), IPSets: emu, IPTables: emu, Netlink: nl},
		ipvs.ProxierConfig{Family: fam, Node: nc, Scheduler: f.scheduler})
	if err != nil {
		rt.Fatalf("ipvs.NewProxier: %v", err)
	}
	res, err := px.Sync(context.Background(), svcs, slices)
	if err != nil {
		rt.Fatalf("ipvs sync: %v", err)
	}
	return res
}

// The case the generated clusters found (kept): a Service whose "ns/name:port" is over
// nft's 128-byte comment limit, with kubernetes#139515's names. The 1.37 layout cuts
// the comments and nft takes it; every earlier layout writes them whole, as those
// releases did, and nft refuses exactly those comments.
func TestLongServiceNameComments(t *testing.T) {
	tl := newTools(t)
	if tl.nft[corev1.IPv4Protocol] == nil {
		t.Skip("nft is not installed")
	}
	ctx := context.Background()
	const (
		ns   = "loft-acme-platform-services-team-dev-v-shared-workloads-ns-001"
		name = "my-api-svc-x-my-api-namespace-x-acme-shared-vcluster--a1b2c3d4e"
	)
	svc := service.NewService(ns+"/"+name, service.ClusterIP("10.96.0.77"), service.Port("http", 80, 0),
		service.NodePort(), service.WithNodePort("http", 30077))
	service.Default(svc)
	svcs := []*corev1.Service{svc} // no endpoints: the no-endpoint maps carry the comments
	node := proxy.NodeConfig{Name: "node-a", IPs: []netip.Addr{netip.MustParseAddr("172.18.0.2")}}
	for _, v := range nftables.Versions {
		script, err := nftables.Render(svcs, nil, nftables.Config{Node: node, Version: v})
		if err != nil {
			t.Fatal(err)
		}
		err = tl.checkNFT(ctx, "layout "+string(v), corev1.IPv4Protocol, script)
		if v == nftables.Version137 {
			if err != nil {
				t.Errorf("1.37 truncates the comments, yet: %v", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "comment too long") {
			t.Errorf("layout %s: %v; want nft to refuse the whole comment, as kube-proxy %s failed its syncs", v, err, v)
		}
		if err := tl.checkNFTLayout(ctx, "layout "+string(v), corev1.IPv4Protocol, v, script); err != nil {
			t.Errorf("layout %s with the comments cut: %v", v, err)
		}
	}
}
