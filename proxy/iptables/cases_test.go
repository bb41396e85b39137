package iptables

import (
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/yaml"

	"github.com/clusterlab/clusterlab/proxy"
)

// Test conventions, as in kube-proxy's proxier_test.go: node test-node with IPs
// 192.168.0.2, 192.168.1.2 and 192.168.99.11 on eth0 (2001:db8::1, 2001:db8:1::2 for
// IPv6), pod CIDR 10.0.0.0/8 (fd00:10::/64), cluster IPs 172.30.0.0/16, LB IPs 1.2.3.4,
// 5.6.7.8, 9.10.11.12, external client 203.0.113.2, blocked client 203.0.113.130.
const (
	testNodeName              = "test-node"
	testNodeIP                = "192.168.0.2"
	testNodeIPAlt             = "192.168.1.2"
	testExternalIP            = "192.168.99.11"
	testNodeIPv6              = "2001:db8::1"
	testNodeIPv6Alt           = "2001:db8:1::2"
	testExternalClient        = "203.0.113.2"
	testExternalClientBlocked = "203.0.113.130"
)

var testNodeIPs = []string{testNodeIP, testNodeIPAlt, testExternalIP, testNodeIPv6, testNodeIPv6Alt}

func mustAddrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func mustPrefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// testNode is kube-proxy's NewFakeProxier node.
func testNode() proxy.NodeConfig {
	return proxy.NodeConfig{
		Name:         testNodeName,
		IPs:          mustAddrs(testNodeIP, testNodeIPv6),
		Addresses:    mustAddrs("127.0.0.1", "::1", testNodeIP, testNodeIPAlt, testExternalIP, testNodeIPv6, testNodeIPv6Alt),
		ClusterCIDRs: mustPrefixes("10.0.0.0/8", "fd00:10::/64"),
	}
}

// upstreamConfig is kube-proxy's NewFakeProxier configuration: its fake iptables has no
// --random-fully, the nfacct counters exist.
func upstreamConfig(family corev1.IPFamily) Config {
	return Config{Family: family, Node: testNode(), NoRandomFully: true}
}

// caseFile is the first document of a testdata/generator/*.yaml case.
type caseFile struct {
	Kind                  string            `json:"kind"`
	Description           string            `json:"description"`
	Family                corev1.IPFamily   `json:"family"`
	DetectLocalMode       proxy.LocalMode   `json:"detectLocalMode"`
	BridgeInterface       string            `json:"bridgeInterface"`
	InterfaceNamePrefix   string            `json:"interfaceNamePrefix"`
	PodCIDRs              []string          `json:"podCIDRs"`
	ClusterCIDRs          *[]string         `json:"clusterCIDRs"`
	NodePortAddresses     []string          `json:"nodePortAddresses"`
	MasqueradeAll         bool              `json:"masqueradeAll"`
	MasqueradeBit         *int              `json:"masqueradeBit"`
	LocalhostNodePorts    *bool             `json:"localhostNodePorts"`
	Labels                map[string]string `json:"labels"`
	IgnoreNodeHints       bool              `json:"ignoreNodeHints"`
	NoRandomFully         bool              `json:"noRandomFully"`
	NoNFAcct              bool              `json:"noNFAcct"`
	ConntrackTCPBeLiberal bool              `json:"conntrackTCPBeLiberal"`
	IncludeJumps          bool              `json:"includeJumps"`
	// Version is the kube-proxy release ("1.24"; empty: the newest) and FeatureGates
	// its --feature-gates.
	Version      string          `json:"version"`
	FeatureGates map[string]bool `json:"featureGates"`
	// Upstream names testdata/generator/upstream/<name>.txt: kube-proxy's expected
	// output for the same inputs, compared after kube-proxy's test sort.
	Upstream string `json:"upstream"`
	// Flows are packet-flow expectations checked with the tracer.
	Flows []caseFlow `json:"flows"`
}

type caseFlow struct {
	Name     string `json:"name"`
	Src      string `json:"src"`
	Protocol string `json:"protocol"`
	Dst      string `json:"dst"`
	Port     int    `json:"port"`
	Output   string `json:"output"`
	Masq     bool   `json:"masq"`
}

type testCase struct {
	name     string
	file     caseFile
	cfg      Config
	opts     RenderOptions
	services []*corev1.Service
	slices   []*discoveryv1.EndpointSlice
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

func loadCase(t *testing.T, path string) testCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tc := testCase{name: strings.TrimSuffix(path[strings.LastIndex(path, "/")+1:], ".yaml")}
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
		switch meta.Kind {
		case "GeneratorCase":
			if err := yaml.UnmarshalStrict([]byte(doc), &tc.file); err != nil {
				t.Fatalf("%s: document %d: %v", path, i+1, err)
			}
		case "Service":
			s := &corev1.Service{}
			if err := yaml.UnmarshalStrict([]byte(doc), s); err != nil {
				t.Fatalf("%s: document %d: %v", path, i+1, err)
			}
			tc.services = append(tc.services, s)
		case "EndpointSlice":
			s := &discoveryv1.EndpointSlice{}
			if err := yaml.UnmarshalStrict([]byte(doc), s); err != nil {
				t.Fatalf("%s: document %d: %v", path, i+1, err)
			}
			tc.slices = append(tc.slices, s)
		default:
			t.Fatalf("%s: document %d: unknown kind %q", path, i+1, meta.Kind)
		}
	}
	f := tc.file
	node := testNode()
	node.DetectLocalMode = f.DetectLocalMode
	node.BridgeInterface = f.BridgeInterface
	node.InterfaceNamePrefix = f.InterfaceNamePrefix
	for _, p := range f.PodCIDRs {
		node.PodCIDRs = append(node.PodCIDRs, netip.MustParsePrefix(p))
	}
	if f.ClusterCIDRs != nil {
		node.ClusterCIDRs = mustPrefixes(*f.ClusterCIDRs...)
	}
	node.NodePortAddresses = f.NodePortAddresses
	node.MasqueradeAll = f.MasqueradeAll
	node.MasqueradeBit = f.MasqueradeBit
	node.LocalhostNodePorts = f.LocalhostNodePorts
	node.Labels = f.Labels
	node.IgnoreNodeHints = f.IgnoreNodeHints
	node.FeatureGates = f.FeatureGates
	if f.Version != "" {
		v, err := proxy.ParseVersion(f.Version)
		if err != nil {
			t.Fatalf("%s: version: %v", path, err)
		}
		node.Version = v
	}
	tc.cfg = Config{
		Family: f.Family, Node: node, NoRandomFully: f.NoRandomFully, NoNFAcct: f.NoNFAcct,
		ConntrackTCPBeLiberal: f.ConntrackTCPBeLiberal,
	}
	tc.opts = RenderOptions{IncludeJumps: f.IncludeJumps}
	return tc
}

// sortRestore orders iptables-restore text the way kube-proxy's sortIPTablesRules does,
// so that our output and kube-proxy's expected output (whose service order is random in
// kube-proxy) compare: tables by name; chains KUBE-NODEPORTS, KUBE-SERVICES, other KUBE-*
// alphabetically, then the rest; rules grouped by chain in that order, with
// KUBE-NODEPORTS and KUBE-SERVICES rules stably sorted by the service name in their
// comment (the nat NodePort tail rule kept last); -X lines last.
func sortRestore(t *testing.T, text string) string {
	t.Helper()
	type table struct {
		name    string
		chains  []string
		rules   map[string][]string
		deletes []string
	}
	var tables []*table
	var cur *table
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			cur = &table{name: line[1:], rules: map[string][]string{}}
			tables = append(tables, cur)
		case line == "COMMIT":
			cur = nil
		case cur == nil:
			t.Fatalf("sortRestore: %q outside a table", line)
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			if !slices.Contains(cur.chains, name) {
				cur.chains = append(cur.chains, name)
			}
		case strings.HasPrefix(line, "-X "):
			cur.deletes = append(cur.deletes, line)
		default:
			_, chain, _ := splitRule(line)
			cur.rules[chain] = append(cur.rules[chain], line)
		}
	}
	sort.Slice(tables, func(i, j int) bool { return tables[i].name < tables[j].name })
	rank := func(c string) int {
		switch {
		case c == ChainNodePorts:
			return 0
		case c == ChainServices:
			return 1
		case strings.HasPrefix(c, "KUBE-"):
			return 2
		}
		return 3
	}
	svcName := func(line string) (string, bool) {
		r := parseTraceRule(line)
		if !r.hasComment {
			return "", false
		}
		n := r.comment
		if i := strings.IndexAny(n, " :"); i >= 0 {
			n = n[:i]
		}
		return n, true
	}
	var b strings.Builder
	for _, tb := range tables {
		b.WriteString("*" + tb.name + "\n")
		sort.SliceStable(tb.chains, func(i, j int) bool {
			ri, rj := rank(tb.chains[i]), rank(tb.chains[j])
			if ri != rj {
				return ri < rj
			}
			return tb.chains[i] < tb.chains[j]
		})
		for _, c := range tb.chains {
			b.WriteString(chainLine(c) + "\n")
		}
		for _, c := range tb.chains {
			rules := tb.rules[c]
			if c == ChainNodePorts || c == ChainServices {
				sort.SliceStable(rules, func(i, j int) bool {
					if strings.Contains(rules[i], "must be the last rule") {
						return false
					}
					if strings.Contains(rules[j], "must be the last rule") {
						return true
					}
					ni, oki := svcName(rules[i])
					nj, okj := svcName(rules[j])
					return oki && okj && ni < nj
				})
			}
			for _, r := range rules {
				b.WriteString(r + "\n")
			}
		}
		slices.Sort(tb.deletes)
		for _, d := range tb.deletes {
			b.WriteString(d + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// asUpstream rewrites our mark (kube-proxy's production %#08x form) to the 0x4000 its
// tests configure.
func asUpstream(text string) string { return strings.ReplaceAll(text, "0x00004000", "0x4000") }

// checkRuleJumps is kube-proxy's checkIPTablesRuleJumps: every jump goes to a chain the
// text declares and fills, no rule goes to an undeclared chain, and no declared chain
// is unused (the fixed top-level chains excepted).
func checkRuleJumps(text string) error {
	type tbl struct{ created, filled, jumped, hooked map[string]bool }
	tables := map[string]*tbl{}
	var cur *tbl
	curName := ""
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			cur = &tbl{map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}}
			curName = line[1:]
			tables[curName] = cur
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			cur.created[name] = true
		case strings.HasPrefix(line, "-X "):
			delete(cur.created, strings.Fields(line)[1])
		case strings.HasPrefix(line, "-A "):
			_, chain, spec := splitRule(line)
			cur.filled[chain] = true
			if j := jumpTarget(spec); j != "" && !builtinTargets[j] {
				if slices.Contains(builtinChains[curName], chain) {
					cur.hooked[j] = true // a hook jump rule (IncludeJumps): may target an empty chain
				} else {
					cur.jumped[j] = true
				}
			}
		}
	}
	for name, t := range tables {
		for c := range t.hooked {
			if !t.created[c] {
				return fmt.Errorf("%s: hook jump to chain %s that was not created", name, c)
			}
		}
		for c := range t.jumped {
			if !t.created[c] {
				return fmt.Errorf("%s: jump to chain %s that was not created", name, c)
			}
			if !t.filled[c] && c != ChainNodePorts {
				return fmt.Errorf("%s: jump to chain %s that has no rules", name, c)
			}
		}
		for c := range t.filled {
			if !t.created[c] && !slices.Contains(builtinChains[name], c) {
				return fmt.Errorf("%s: rules added to chain %s that was not created", name, c)
			}
		}
		for c := range t.created {
			switch c {
			case ChainServices, ChainExternalServices, ChainNodePorts, ChainPostrouting, ChainForward,
				ChainMarkMasq, ChainProxyFirewall, ChainKubeletFirewall, ChainMarkDrop:
				continue
			}
			if !t.jumped[c] {
				return fmt.Errorf("%s: chain %s created but not used", name, c)
			}
		}
	}
	return nil
}
