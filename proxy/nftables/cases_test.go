package nftables

import (
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/yaml"

	"github.com/clusterlab/clusterlab/proxy"
)

// Test conventions, as in kube-proxy's nftables proxier_test.go: node test-node with IPs
// 192.168.0.2, 192.168.1.2 and 192.168.99.11 on eth0 (2001:db8::1, 2001:db8:1::2 for
// IPv6), pod CIDR 10.0.0.0/8 (fd00:10::/64), ServiceCIDR 172.30.0.0/16
// (fd00:10:96::/112), --nodeport-addresses 192.168.0.2/32 and 2001:db8::1/128.
const (
	testNodeName = "test-node"
	testNodeIP   = "192.168.0.2"
	testNodeIPv6 = "2001:db8::1"
)

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
		Name:              testNodeName,
		IPs:               mustAddrs(testNodeIP, testNodeIPv6),
		Addresses:         mustAddrs("127.0.0.1", "::1", testNodeIP, "192.168.1.2", "192.168.99.11", testNodeIPv6, "2001:db8:1::2"),
		ClusterCIDRs:      mustPrefixes("10.0.0.0/8", "fd00:10::/64"),
		NodePortAddresses: []string{testNodeIP + "/32", testNodeIPv6 + "/128"},
	}
}

// upstreamConfig is kube-proxy's NewFakeProxier configuration.
func upstreamConfig(family corev1.IPFamily) Config {
	return Config{
		Family: family, Node: testNode(),
		ServiceCIDRs: mustPrefixes("172.30.0.0/16", "fd00:10:96::/112"),
		Clock:        (&fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}).Now,
	}
}

// fakeClock is a settable clock; tests advance it instead of sleeping.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

// caseFile is the first document of a testdata/cases/*.yaml case.
type caseFile struct {
	Kind               string          `json:"kind"`
	Description        string          `json:"description"`
	Family             corev1.IPFamily `json:"family"`
	LocalhostNodePorts bool            `json:"localhostNodePorts"`
	// Version is the kube-proxy release whose layout is written ("" the newest).
	Version           Version         `json:"version"`
	NodePortAddresses []string        `json:"nodePortAddresses"`
	MasqueradeAll     bool            `json:"masqueradeAll"`
	DetectLocalMode   proxy.LocalMode `json:"detectLocalMode"`
	BridgeInterface   string          `json:"bridgeInterface"`
	// Upstream names testdata/upstream/<name>.txt files whose concatenation is
	// kube-proxy's expected output for the same inputs.
	Upstream []string `json:"upstream"`
	// Flows are packet-flow expectations checked with the tracer (kube-proxy's
	// packetFlowTest vectors for the same inputs).
	Flows []caseFlow `json:"flows"`
	// FlowsWithoutEndpoints are checked after a second (partial) sync in which the
	// case's EndpointSlices are gone.
	FlowsWithoutEndpoints []caseFlow `json:"flowsWithoutEndpoints"`
	// FibLocal are more addresses the tracer's "fib ... type local" takes as the
	// node's (kube-proxy's tracer knows only the node IPs, not loopback).
	FibLocal []string `json:"fibLocal"`
}

// caseFlow is one packetFlowTest: the first packet of a new connection from Src to
// Dst:Port; Output is the DNAT target(s) ("ip:port, ip:port", every numgen branch),
// DROP, REJECT or "" (accepted untouched); Masq whether it was masqueraded.
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
	tc := testCase{name: strings.TrimSuffix(filepath.Base(path), ".yaml")}
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
		var obj any
		switch meta.Kind {
		case "GeneratorCase":
			obj = &tc.file
		case "Service":
			s := &corev1.Service{}
			tc.services, obj = append(tc.services, s), s
		case "EndpointSlice":
			s := &discoveryv1.EndpointSlice{}
			tc.slices, obj = append(tc.slices, s), s
		default:
			t.Fatalf("%s: document %d: unknown kind %q", path, i+1, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s: document %d: %v", path, i+1, err)
		}
	}
	f := tc.file
	tc.cfg = upstreamConfig(f.Family)
	tc.cfg.LocalhostNodePorts = f.LocalhostNodePorts
	tc.cfg.Version = f.Version
	if f.NodePortAddresses != nil {
		tc.cfg.Node.NodePortAddresses = f.NodePortAddresses
	}
	tc.cfg.Node.MasqueradeAll = f.MasqueradeAll
	tc.cfg.Node.DetectLocalMode = f.DetectLocalMode
	tc.cfg.Node.BridgeInterface = f.BridgeInterface
	return tc
}

// upstreamText returns the concatenated upstream files of a case.
func upstreamText(t *testing.T, names []string) string {
	t.Helper()
	var b strings.Builder
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join("testdata", "upstream", n+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteString("\n")
	}
	return b.String()
}

// objectOrder ranks the object kinds of "add KIND ..." lines, higher first, as
// kube-proxy's helpers_test.go does.
var objectOrder = map[string]int{"table": 10, "chain": 9, "rule": 8, "set": 7, "map": 6, "element": 5}

// sortTransaction normalises nft -f text for comparison the way kube-proxy's
// sortNFTablesTransaction does: blank and # lines dropped; lines stably sorted by
// object kind, then object name (the 5th word); rules keep their order within a
// chain; other lines with the same kind and name sort by their whole text.
func sortTransaction(tx string) string {
	var lines []string
	for _, l := range strings.Split(tx, "\n") {
		if l != "" && l[0] != '#' {
			lines = append(lines, l)
		}
	}
	sort.SliceStable(lines, func(i, j int) bool {
		wi, wj := strings.Split(lines[i], " "), strings.Split(lines[j], " ")
		if len(wi) < 5 || len(wj) < 5 {
			return false
		}
		if wi[1] != wj[1] {
			return objectOrder[wi[1]] > objectOrder[wj[1]]
		}
		if wi[4] != wj[4] {
			return wi[4] < wj[4]
		}
		if wi[1] == "rule" {
			return false
		}
		return lines[i] < lines[j]
	})
	return strings.Join(lines, "\n")
}

// asUpstream rewrites our mark (kube-proxy's production %#08x form) to the 0x4000 its
// tests configure.
func asUpstream(text string) string { return strings.ReplaceAll(text, "0x00004000", "0x4000") }

// diffLines returns a small line diff of two sorted texts ("" if equal).
func diffLines(want, got string) string {
	if want == got {
		return ""
	}
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	wset, gset := map[string]int{}, map[string]int{}
	for _, l := range wl {
		wset[l]++
	}
	for _, l := range gl {
		gset[l]++
	}
	var b strings.Builder
	for _, l := range wl {
		if gset[l] == 0 {
			b.WriteString("- " + l + "\n")
		} else {
			gset[l]--
		}
	}
	for _, l := range gl {
		if wset[l] == 0 {
			b.WriteString("+ " + l + "\n")
		} else {
			wset[l]--
		}
	}
	if b.Len() == 0 {
		return "same lines, different order:\nwant:\n" + want + "\ngot:\n" + got
	}
	return b.String()
}
