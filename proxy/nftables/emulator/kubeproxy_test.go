package emulator

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
)

// packetFlowTest is one of kube-proxy's tracer vectors (pkg/proxy/nftables
// proxier_test.go, packetFlowTest): a packet and the endpoints it may reach
// ("ip:port, ip:port"), "DROP", "REJECT", or "" (not NATed, accepted), and whether it is
// masqueraded.
type packetFlowTest struct {
	name     string
	sourceIP string
	protocol string // default tcp
	destIP   string
	destPort uint16
	output   string
	masq     bool
}

// testNodeIPs are the fake proxier's node addresses (fib ... type local).
var testNodeIPs = []string{"192.168.0.2", "192.168.1.2", "192.168.99.11", "2001:db8::1", "2001:db8:1::2"}

// loadKubeProxy loads base-rules.nft then the named test's ruleset, or (for a
// self-contained file) the file alone.
func loadKubeProxy(t *testing.T, name string) *Emulator {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata/kube-proxy", name))
	if err != nil {
		t.Fatal(err)
	}
	if name == "overall.nft" {
		base, err := os.ReadFile("testdata/kube-proxy/base-rules.nft")
		if err != nil {
			t.Fatal(err)
		}
		data = append(base, data...)
	}
	e, err := Load(sortDump(data), name)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// sortDump orders kube-proxy's expected text as knftables' Fake dumps it (and so as a
// real transaction must be): tables, chains, sets, maps, rules, elements, each kind in
// its original order; comments and blank lines dropped.
func sortDump(data []byte) []byte {
	order := []string{"table", "chain", "set", "map", "counter", "rule", "element"}
	groups := map[string][]string{}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || strings.HasPrefix(l, "#") {
			continue
		}
		groups[f[1]] = append(groups[f[1]], l)
	}
	var out []string
	for _, k := range order {
		out = append(out, groups[k]...)
	}
	return []byte(strings.Join(out, "\n") + "\n")
}

// flowOutput walks the packet with all branches and renders the outcome as
// kube-proxy's tracer does.
func flowOutput(t *testing.T, e *Emulator, tc packetFlowTest) (string, bool) {
	t.Helper()
	proto := map[string]uint8{"": netfilter.ProtoTCP, "tcp": netfilter.ProtoTCP, "udp": netfilter.ProtoUDP, "sctp": netfilter.ProtoSCTP}[tc.protocol]
	var local []netip.Addr
	for _, s := range testNodeIPs {
		local = append(local, netip.MustParseAddr(s))
	}
	res, err := e.Walk(WalkInput{Packet: Packet{Proto: proto, Src: netip.MustParseAddr(tc.sourceIP), Dst: netip.MustParseAddr(tc.destIP),
		SrcPort: 40000, DstPort: tc.destPort}, Local: local, AllBranches: true})
	if err != nil {
		t.Fatal(err)
	}
	var dests []string
	verdicts := map[string]bool{}
	masq := map[bool]bool{}
	total := 0.0
	for _, o := range res.Outcomes {
		total += o.Probability
		masq[o.Masqueraded] = true
		switch o.Verdict {
		case "DROP", "REJECT":
			verdicts[o.Verdict] = true
		default:
			if o.DNATDestination != nil {
				dests = append(dests, *o.DNATDestination)
			} else {
				verdicts[""] = true
			}
		}
	}
	if total < 0.999999 || total > 1.000001 {
		t.Errorf("%s: probabilities sum to %v", tc.name, total)
	}
	if len(masq) > 1 {
		t.Errorf("%s: some outcomes masqueraded, some not:\n%s", tc.name, res.Text())
	}
	if len(verdicts)+min(len(dests), 1) > 1 {
		t.Errorf("%s: mixed outcomes:\n%s", tc.name, res.Text())
	}
	slices.Sort(dests)
	switch {
	case len(dests) > 0:
		return strings.Join(dests, ", "), masq[true]
	case verdicts["DROP"]:
		return "DROP", false
	case verdicts["REJECT"]:
		return "REJECT", false
	}
	return "", masq[true]
}

func runPacketFlowTests(t *testing.T, file string, tests []packetFlowTest) {
	t.Helper()
	e := loadKubeProxy(t, file)
	for _, tc := range tests {
		got, masq := flowOutput(t, e, tc)
		want := strings.Split(tc.output, ", ")
		slices.Sort(want)
		if got != strings.Join(want, ", ") || masq != tc.masq {
			t.Errorf("%s: %s: got %q masq=%v, want %q masq=%v", file, tc.name, got, masq, tc.output, tc.masq)
		}
	}
}

// The vectors below are kube-proxy's (proxier_test.go @ 030880a5), for the rulesets in
// testdata/kube-proxy; TestOverallNFTablesRules has no vectors upstream, so its
// vectors are ours, from the rules' documented behaviour.

func TestKubeProxyOverall(t *testing.T) {
	runPacketFlowTests(t, "overall.nft", []packetFlowTest{
		{name: "pod to ClusterIP", sourceIP: "10.0.0.2", destIP: "172.30.0.41", destPort: 80, output: "10.180.0.1:80"},
		{name: "hairpin", sourceIP: "10.180.0.1", destIP: "172.30.0.41", destPort: 80, output: "10.180.0.1:80", masq: true},
		{name: "external to ClusterIP is masqueraded", sourceIP: "203.0.113.2", destIP: "172.30.0.41", destPort: 80, output: "10.180.0.1:80", masq: true},
		{name: "two endpoints", sourceIP: "10.0.0.2", destIP: "172.30.0.44", destPort: 80, output: "10.180.0.4:80, 10.180.0.5:80"},
		{name: "externalIP, eTP Cluster", sourceIP: "203.0.113.2", destIP: "192.168.99.33", destPort: 80, output: "10.180.0.4:80, 10.180.0.5:80", masq: true},
		{name: "eTP Local without local endpoints drops external NodePort traffic", sourceIP: "203.0.113.2", destIP: "192.168.0.2", destPort: 3001, output: "DROP"},
		{name: "eTP Local without local endpoints drops external LB traffic", sourceIP: "203.0.113.2", destIP: "1.2.3.4", destPort: 80, output: "DROP"},
		{name: "eTP Local short-circuits pod traffic", sourceIP: "10.0.0.2", destIP: "1.2.3.4", destPort: 80, output: "10.180.0.2:80"},
		{name: "NodePort, eTP Cluster", sourceIP: "203.0.113.2", destIP: "192.168.0.2", destPort: 3003, output: "10.180.0.3:80", masq: true},
		{name: "LB source range allows", sourceIP: "203.0.113.2", destIP: "5.6.7.8", destPort: 80, output: "10.180.0.3:80", masq: true},
		{name: "LB source range blocks", sourceIP: "203.0.113.130", destIP: "5.6.7.8", destPort: 80, output: "DROP"},
		{name: "no endpoints", sourceIP: "10.0.0.2", destIP: "172.30.0.46", destPort: 80, output: "REJECT"},
		{name: "unknown port of a ClusterIP", sourceIP: "10.0.0.2", destIP: "172.30.0.41", destPort: 81, output: "REJECT"},
		{name: "unallocated ClusterIP", sourceIP: "10.0.0.2", destIP: "172.30.0.99", destPort: 80, output: "DROP"},
		{name: "node to NodePort", sourceIP: "192.168.0.2", destIP: "192.168.0.2", destPort: 3003, output: "10.180.0.3:80", masq: true},
	})
}

func TestKubeProxyNoEndpointsReject(t *testing.T) {
	runPacketFlowTests(t, "no-endpoints-reject.nft", []packetFlowTest{
		{name: "pod to cluster IP with no endpoints", sourceIP: "10.0.0.2", destIP: "172.30.0.41", destPort: 80, output: "REJECT"},
		{name: "external to external IP with no endpoints", sourceIP: "203.0.113.2", destIP: "192.168.99.11", destPort: 80, output: "REJECT"},
		{name: "pod to NodePort with no endpoints", sourceIP: "10.0.0.2", destIP: "192.168.0.2", destPort: 3001, output: "REJECT"},
		{name: "external to NodePort with no endpoints", sourceIP: "203.0.113.2", destIP: "192.168.0.2", destPort: 3001, output: "REJECT"},
		{name: "pod to LoadBalancer IP with no endpoints", sourceIP: "10.0.0.2", destIP: "1.2.3.4", destPort: 80, output: "REJECT"},
		{name: "external to LoadBalancer IP with no endpoints", sourceIP: "203.0.113.2", destIP: "1.2.3.4", destPort: 80, output: "REJECT"},
	})
}

func TestKubeProxyClusterIPGeneral(t *testing.T) {
	runPacketFlowTests(t, "clusterip-general.nft", []packetFlowTest{
		{name: "simple clusterIP", sourceIP: "10.180.0.2", destIP: "172.30.0.41", destPort: 80, output: "10.180.0.1:80"},
		{name: "hairpin to cluster IP", sourceIP: "10.180.0.1", destIP: "172.30.0.41", destPort: 80, output: "10.180.0.1:80", masq: true},
		{name: "clusterIP with multiple endpoints", sourceIP: "10.180.0.2", destIP: "172.30.0.42", destPort: 80, output: "10.180.0.1:80, 10.180.2.1:80"},
		{name: "clusterIP with TargetPort", sourceIP: "10.180.0.2", destIP: "172.30.0.42", destPort: 443, output: "10.180.0.1:8443, 10.180.2.1:8443"},
		{name: "clusterIP with TCP, UDP, and SCTP on same port (TCP)", sourceIP: "10.180.0.2", protocol: "tcp", destIP: "172.30.0.42", destPort: 53, output: "10.180.0.1:5353, 10.180.2.1:5353"},
		{name: "clusterIP with TCP, UDP, and SCTP on same port (UDP)", sourceIP: "10.180.0.2", protocol: "udp", destIP: "172.30.0.42", destPort: 53, output: "10.180.0.1:53, 10.180.2.1:53"},
		{name: "clusterIP with TCP, UDP, and SCTP on same port (SCTP)", sourceIP: "10.180.0.2", protocol: "sctp", destIP: "172.30.0.42", destPort: 53, output: "10.180.0.1:53, 10.180.2.1:53"},
		{name: "TCP-only port does not match UDP traffic", sourceIP: "10.180.0.2", protocol: "udp", destIP: "172.30.0.42", destPort: 80, output: "REJECT"},
		{name: "svc1 does not accept svc2's ports", sourceIP: "10.180.0.2", destIP: "172.30.0.41", destPort: 443, output: "REJECT"},
		{name: "packet to unallocated cluster ip", sourceIP: "10.180.0.2", destIP: "172.30.0.50", destPort: 80, output: "DROP"},
	})
}

func TestKubeProxyLoadBalancer(t *testing.T) {
	ep := "10.180.0.1:80"
	runPacketFlowTests(t, "load-balancer.nft", []packetFlowTest{
		{name: "pod to cluster IP", sourceIP: "10.0.0.2", destIP: "172.30.0.41", destPort: 80, output: ep},
		{name: "external to nodePort", sourceIP: "203.0.113.2", destIP: "192.168.0.2", destPort: 3001, output: ep, masq: true},
		{name: "nodePort bypasses LoadBalancerSourceRanges", sourceIP: "203.0.113.130", destIP: "192.168.0.2", destPort: 3001, output: ep, masq: true},
		{name: "accepted external to LB1", sourceIP: "203.0.113.2", destIP: "1.2.3.4", destPort: 80, output: ep, masq: true},
		{name: "accepted external to LB2", sourceIP: "203.0.113.2", destIP: "5.6.7.8", destPort: 80, output: ep, masq: true},
		{name: "blocked external to LB1", sourceIP: "203.0.113.130", destIP: "1.2.3.4", destPort: 80, output: "DROP"},
		{name: "blocked external to LB2", sourceIP: "203.0.113.130", destIP: "5.6.7.8", destPort: 80, output: "DROP"},
		{name: "pod to LB1 (blocked by LoadBalancerSourceRanges)", sourceIP: "10.0.0.2", destIP: "1.2.3.4", destPort: 80, output: "DROP"},
		{name: "pod to LB2 (blocked by LoadBalancerSourceRanges)", sourceIP: "10.0.0.2", destIP: "5.6.7.8", destPort: 80, output: "DROP"},
		{name: "node to LB1 (allowed by LoadBalancerSourceRanges)", sourceIP: "192.168.0.2", destIP: "1.2.3.4", destPort: 80, output: ep, masq: true},
		{name: "node to LB2 (allowed by LoadBalancerSourceRanges)", sourceIP: "192.168.0.2", destIP: "5.6.7.8", destPort: 80, output: ep, masq: true},
		{name: "same node to LB1, SNATted to LB1 (implicitly allowed)", sourceIP: "1.2.3.4", destIP: "1.2.3.4", destPort: 80, output: ep, masq: true},
		{name: "same node to LB2, SNATted to LB2 (implicitly allowed)", sourceIP: "5.6.7.8", destIP: "5.6.7.8", destPort: 80, output: ep, masq: true},
	})
}

func TestKubeProxyNodePorts(t *testing.T) {
	for _, tc := range []struct {
		file                                string
		podIP, extIP, nodeIP, altIP, output string
		allowAlt                            bool
	}{
		{"nodeports-ipv4.nft", "10.0.0.2", "203.0.113.2", "192.168.0.2", "192.168.1.2", "10.180.0.1:80, 10.180.2.1:80", false},
		{"nodeports-ipv4-multi.nft", "10.0.0.2", "203.0.113.2", "192.168.0.2", "192.168.1.2", "10.180.0.1:80, 10.180.2.1:80", true},
		{"nodeports-ipv6.nft", "fd00:10::2", "2600:5200::1", "2001:db8::1", "2001:db8:1::2", "[fd00:10:180::1]:80, [fd00:10:180::2:1]:80", false},
		{"nodeports-ipv6-multi.nft", "fd00:10::2", "2600:5200::1", "2001:db8::1", "2001:db8:1::2", "[fd00:10:180::1]:80, [fd00:10:180::2:1]:80", true},
	} {
		svcIP := "172.30.0.41"
		if strings.Contains(tc.podIP, ":") {
			svcIP = "fd00:172:30::41"
		}
		tests := []packetFlowTest{
			{name: "pod to cluster IP", sourceIP: tc.podIP, destIP: svcIP, destPort: 80, output: tc.output},
			{name: "external to nodePort", sourceIP: tc.extIP, destIP: tc.nodeIP, destPort: 3001, output: tc.output, masq: true},
			{name: "node to nodePort", sourceIP: tc.nodeIP, destIP: tc.nodeIP, destPort: 3001, output: tc.output, masq: true},
		}
		if tc.allowAlt {
			tests = append(tests, packetFlowTest{name: "external to nodePort on secondary IP", sourceIP: tc.extIP, destIP: tc.altIP, destPort: 3001, output: tc.output, masq: true})
		} else {
			tests = append(tests, packetFlowTest{name: "secondary nodeIP ignores NodePorts", sourceIP: tc.extIP, destIP: tc.altIP, destPort: 3001, output: ""})
		}
		runPacketFlowTests(t, tc.file, tests)
	}
}

func TestKubeProxyExternalTrafficPolicyLocal(t *testing.T) {
	both, local := "10.180.0.1:80, 10.180.2.1:80", "10.180.2.1:80"
	runPacketFlowTests(t, "etp-local.nft", []packetFlowTest{
		{name: "pod to cluster IP hits both endpoints, unmasqueraded", sourceIP: "10.0.0.2", destIP: "172.30.0.41", destPort: 80, output: both},
		{name: "pod to external IP hits both endpoints, unmasqueraded", sourceIP: "10.0.0.2", destIP: "192.168.99.11", destPort: 80, output: both},
		{name: "external to external IP hits only local endpoint, unmasqueraded", sourceIP: "203.0.113.2", destIP: "192.168.99.11", destPort: 80, output: local},
		{name: "pod to LB IP hits only both endpoints, unmasqueraded", sourceIP: "10.0.0.2", destIP: "1.2.3.4", destPort: 80, output: both},
		{name: "external to LB IP hits only local endpoint, unmasqueraded", sourceIP: "203.0.113.2", destIP: "1.2.3.4", destPort: 80, output: local},
		{name: "pod to NodePort hits both endpoints, unmasqueraded", sourceIP: "10.0.0.2", destIP: "192.168.0.2", destPort: 3001, output: both},
		{name: "external to NodePort hits only local endpoint, unmasqueraded", sourceIP: "203.0.113.2", destIP: "192.168.0.2", destPort: 3001, output: local},
	})
}

func TestKubeProxyExternalTrafficPolicyCluster(t *testing.T) {
	both := "10.180.0.1:80, 10.180.2.1:80"
	runPacketFlowTests(t, "etp-cluster.nft", []packetFlowTest{
		{name: "pod to cluster IP hits both endpoints, unmasqueraded", sourceIP: "10.0.0.2", destIP: "172.30.0.41", destPort: 80, output: both},
		{name: "pod to external IP hits both endpoints, masqueraded", sourceIP: "10.0.0.2", destIP: "192.168.99.11", destPort: 80, output: both, masq: true},
		{name: "external to external IP hits both endpoints, masqueraded", sourceIP: "203.0.113.2", destIP: "192.168.99.11", destPort: 80, output: both, masq: true},
		{name: "pod to LB IP hits both endpoints, masqueraded", sourceIP: "10.0.0.2", destIP: "1.2.3.4", destPort: 80, output: both, masq: true},
		{name: "external to LB IP hits both endpoints, masqueraded", sourceIP: "203.0.113.2", destIP: "1.2.3.4", destPort: 80, output: both, masq: true},
		{name: "pod to NodePort hits both endpoints, masqueraded", sourceIP: "10.0.0.2", destIP: "192.168.0.2", destPort: 3001, output: both, masq: true},
		{name: "external to NodePort hits both endpoints, masqueraded", sourceIP: "203.0.113.2", destIP: "192.168.0.2", destPort: 3001, output: both, masq: true},
	})
}

// TestKubeProxyInternalExternalMasquerade: kube-proxy's TestInternalExternalMasquerade,
// its 27 vectors in its four variants (local traffic detector or not, --masquerade-all
// or not) with the variants' overrides.
func TestKubeProxyInternalExternalMasquerade(t *testing.T) {
	const node, ext = "192.168.0.2", "203.0.113.2"
	svc1, svc2, svc3 := "10.180.0.1:80, 10.180.1.1:80", "10.180.0.2:80, 10.180.1.2:80", "10.180.0.3:80, 10.180.1.3:80"
	flowTests := []packetFlowTest{
		{name: "pod to ClusterIP", sourceIP: "10.0.0.2", destIP: "172.30.0.41", destPort: 80, output: svc1},
		{name: "pod to NodePort", sourceIP: "10.0.0.2", destIP: node, destPort: 3001, output: svc1, masq: true},
		{name: "pod to LB", sourceIP: "10.0.0.2", destIP: "1.2.3.4", destPort: 80, output: svc1, masq: true},
		{name: "node to ClusterIP", sourceIP: node, destIP: "172.30.0.41", destPort: 80, output: svc1, masq: true},
		{name: "node to NodePort", sourceIP: node, destIP: node, destPort: 3001, output: svc1, masq: true},
		{name: "node to LB", sourceIP: node, destIP: "1.2.3.4", destPort: 80, output: svc1, masq: true},
		{name: "external to ClusterIP", sourceIP: ext, destIP: "172.30.0.41", destPort: 80, output: svc1, masq: true},
		{name: "external to NodePort", sourceIP: ext, destIP: node, destPort: 3001, output: svc1, masq: true},
		{name: "external to LB", sourceIP: ext, destIP: "1.2.3.4", destPort: 80, output: svc1, masq: true},
		{name: "pod to ClusterIP with eTP:Local", sourceIP: "10.0.0.2", destIP: "172.30.0.42", destPort: 80, output: svc2},
		{name: "pod to NodePort with eTP:Local", sourceIP: "10.0.0.2", destIP: node, destPort: 3002, output: svc2},
		{name: "pod to LB with eTP:Local", sourceIP: "10.0.0.2", destIP: "5.6.7.8", destPort: 80, output: svc2},
		{name: "node to ClusterIP with eTP:Local", sourceIP: node, destIP: "172.30.0.42", destPort: 80, output: svc2, masq: true},
		{name: "node to NodePort with eTP:Local", sourceIP: node, destIP: node, destPort: 3001, output: svc1, masq: true},
		{name: "node to LB with eTP:Local", sourceIP: node, destIP: "5.6.7.8", destPort: 80, output: svc2, masq: true},
		{name: "external to ClusterIP with eTP:Local", sourceIP: ext, destIP: "172.30.0.42", destPort: 80, output: svc2, masq: true},
		{name: "external to NodePort with eTP:Local", sourceIP: ext, destIP: node, destPort: 3002, output: "10.180.0.2:80"},
		{name: "external to LB with eTP:Local", sourceIP: ext, destIP: "5.6.7.8", destPort: 80, output: "10.180.0.2:80"},
		{name: "pod to ClusterIP with iTP:Local", sourceIP: "10.0.0.2", destIP: "172.30.0.43", destPort: 80, output: "10.180.0.3:80"},
		{name: "pod to NodePort with iTP:Local", sourceIP: "10.0.0.2", destIP: node, destPort: 3003, output: svc3, masq: true},
		{name: "pod to LB with iTP:Local", sourceIP: "10.0.0.2", destIP: "9.10.11.12", destPort: 80, output: svc3, masq: true},
		{name: "node to ClusterIP with iTP:Local", sourceIP: node, destIP: "172.30.0.43", destPort: 80, output: "10.180.0.3:80", masq: true},
		{name: "node to NodePort with iTP:Local", sourceIP: node, destIP: node, destPort: 3003, output: svc3, masq: true},
		{name: "node to LB with iTP:Local", sourceIP: node, destIP: "9.10.11.12", destPort: 80, output: svc3, masq: true},
		{name: "external to ClusterIP with iTP:Local", sourceIP: ext, destIP: "172.30.0.43", destPort: 80, output: "10.180.0.3:80", masq: true},
		{name: "external to NodePort with iTP:Local", sourceIP: ext, destIP: node, destPort: 3003, output: svc3, masq: true},
		{name: "external to LB with iTP:Local", sourceIP: ext, destIP: "9.10.11.12", destPort: 80, output: svc3, masq: true},
	}
	type override struct {
		output *string
		masq   *bool
	}
	f, tr := false, true
	local2 := "10.180.0.2:80"
	noDetector := map[string]override{
		"node to ClusterIP": {masq: &f}, "node to ClusterIP with eTP:Local": {masq: &f}, "node to ClusterIP with iTP:Local": {masq: &f},
		"external to ClusterIP": {masq: &f}, "external to ClusterIP with eTP:Local": {masq: &f}, "external to ClusterIP with iTP:Local": {masq: &f},
		"pod to NodePort with eTP:Local": {output: &local2}, "pod to LB with eTP:Local": {output: &local2},
	}
	masqAll := map[string]override{"pod to ClusterIP": {masq: &tr}, "pod to ClusterIP with eTP:Local": {masq: &tr}, "pod to ClusterIP with iTP:Local": {masq: &tr}}
	masqAllNoDetector := map[string]override{"pod to NodePort with eTP:Local": {output: &local2}, "pod to LB with eTP:Local": {output: &local2}}
	for k, v := range masqAll {
		masqAllNoDetector[k] = v
	}
	for _, variant := range []struct {
		file      string
		overrides map[string]override
	}{
		{"internal-external-masquerade-base.nft", nil},
		{"internal-external-masquerade-no-detector.nft", noDetector},
		{"internal-external-masquerade-masquerade-all.nft", masqAll},
		{"internal-external-masquerade-masquerade-all-no-detector.nft", masqAllNoDetector},
	} {
		tests := slices.Clone(flowTests)
		applied := 0
		for i := range tests {
			if o, ok := variant.overrides[tests[i].name]; ok {
				applied++
				if o.masq != nil {
					tests[i].masq = *o.masq
				}
				if o.output != nil {
					tests[i].output = *o.output
				}
			}
		}
		if applied != len(variant.overrides) {
			t.Fatalf("%s: %d overrides match no vector", variant.file, len(variant.overrides)-applied)
		}
		runPacketFlowTests(t, variant.file, tests)
	}
}

// TestKubeProxyInternalTrafficPolicy: kube-proxy's TestInternalTrafficPolicy vectors
// (and each case's "endpoints deleted" vector).
func TestKubeProxyInternalTrafficPolicy(t *testing.T) {
	vec := func(output string) []packetFlowTest {
		return []packetFlowTest{{name: "pod to ClusterIP", sourceIP: "10.0.0.2", destIP: "172.30.1.1", destPort: 80, output: output}}
	}
	runPacketFlowTests(t, "internal-traffic-policy-cluster.nft", vec("10.0.1.1:80, 10.0.1.2:80, 10.0.1.3:80"))
	runPacketFlowTests(t, "internal-traffic-policy-local-one.nft", vec("10.0.1.1:80"))
	runPacketFlowTests(t, "internal-traffic-policy-local-multiple.nft", vec("10.0.1.1:80, 10.0.1.2:80"))
	runPacketFlowTests(t, "internal-traffic-policy-local-none.nft", vec("DROP"))
	runPacketFlowTests(t, "internal-traffic-policy-deleted.nft", vec("REJECT"))
}

// TestKubeProxyTerminatingEndpoints: kube-proxy's TestTerminatingEndpointsTrafficPolicy
// Local and Cluster vectors, on the endpoints each case leaves usable.
func TestKubeProxyTerminatingEndpoints(t *testing.T) {
	vecs := func(pod, ext string, masq bool) []packetFlowTest {
		return []packetFlowTest{
			{name: "pod to clusterIP", sourceIP: "10.0.0.2", destIP: "172.30.1.1", destPort: 80, output: pod},
			{name: "external to LB", sourceIP: "203.0.113.2", destIP: "1.2.3.4", destPort: 80, output: ext, masq: masq},
		}
	}
	runPacketFlowTests(t, "terminating-local-ready.nft", vecs("10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80", "10.0.1.1:80, 10.0.1.2:80", false))
	runPacketFlowTests(t, "terminating-local-only-terminating.nft", vecs("10.0.1.5:80", "10.0.1.2:80, 10.0.1.3:80", false))
	runPacketFlowTests(t, "terminating-local-remote-terminating.nft", vecs("10.0.1.5:80", "DROP", false))
	runPacketFlowTests(t, "terminating-local-none.nft", vecs("REJECT", "REJECT", false))
	runPacketFlowTests(t, "terminating-cluster-ready.nft", vecs("10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80", "10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80", true))
	runPacketFlowTests(t, "terminating-cluster-only-terminating.nft", vecs("10.0.1.2:80, 10.0.1.3:80, 10.0.1.5:80", "10.0.1.2:80, 10.0.1.3:80, 10.0.1.5:80", true))
	runPacketFlowTests(t, "terminating-cluster-remote-terminating.nft", vecs("10.0.1.5:80", "10.0.1.5:80", true))
	runPacketFlowTests(t, "terminating-cluster-none.nft", vecs("REJECT", "REJECT", false))
}
