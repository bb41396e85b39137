package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/nodebundle"
	"github.com/clusterlab/clusterlab/proxy/iptables"
)

// TestBridgeHairpinOnARealNode (root, br_netfilter): a node namespace with pods on a
// real bridge cbr0 and kube-proxy's rules from `clusterlab generate iptables` for two
// Services, solo (endpoint web-0) and web (endpoint web-1). For each setting of web-0's
// port (hairpin off, then on) and of bridge-nf-call-iptables (1, then 0), the collect
// script gathers a bundle, trace --node predicts what happens to web-0's packet to its
// own Service and to the other one, and a real connection from web-0 shows what the
// kernel does: the trace's verdict must be the kernel's (ACCEPT: answered, by the
// endpoint; DROP: no answer), and a predicted reply that bypasses conntrack must fail.
func TestBridgeHairpinOnARealNode(t *testing.T) {
	kernel.RequireHarness(t)
	kernel.RequireTools(t, "iptables-save", "iptables-restore", "ip", "bridge", "tar", "sh", "conntrack")
	soloVIP, webVIP := netip.MustParseAddrPort("10.96.8.50:80"), netip.MustParseAddrPort("10.96.8.60:80")
	h, err := kernel.NewHarness(kernel.HarnessConfig{Prefix: "clhp", Topology: kernel.TopologyBridge,
		Pods: []kernel.PodConfig{{Name: "web-0", Node: 0, TCPPorts: []uint16{8080}}, {Name: "web-1", Node: 0, TCPPorts: []uint16{8080}}}})
	if err != nil {
		if strings.Contains(err.Error(), "bridge netfilter") {
			t.Skip("no br_netfilter in a fresh network namespace (module not loaded?): " + err.Error())
		}
		t.Fatal(err)
	}
	defer h.Close()
	node, web0, web1 := h.Nodes[0], h.Pod("web-0"), h.Pod("web-1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exec := func(args ...string) {
		t.Helper()
		if out, err := h.Exec(ctx, node.Netns, args...); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	// kube-proxy's rules, as `clusterlab generate iptables` writes them.
	dir := t.TempDir()
	manifests := filepath.Join(dir, "cluster.yaml")
	svc := func(name string, vip netip.AddrPort, ep *kernel.Pod) string {
		return fmt.Sprintf(`- {apiVersion: v1, kind: Service, metadata: {name: %[1]s, namespace: default}, spec: {clusterIP: %[2]s, ports: [{name: http, port: %[3]d, targetPort: 8080}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: %[1]s-1, namespace: default, labels: {kubernetes.io/service-name: %[1]s}}
  addressType: IPv4
  ports: [{name: http, port: 8080, protocol: TCP}]
  endpoints: [{addresses: [%[4]s], conditions: {ready: true}, nodeName: node0, targetRef: {kind: Pod, name: %[5]s, namespace: default}}]
`, name, vip.Addr(), vip.Port(), ep.IP, ep.Name)
	}
	if err := os.WriteFile(manifests, []byte("apiVersion: v1\nkind: List\nitems:\n"+indent(svc("solo", soloVIP, web0)+svc("web", webVIP, web1))), 0o644); err != nil {
		t.Fatal(err)
	}
	rules, errOut, err := runCmd(t, "generate", "iptables", "-f", manifests, "--node", "node0", "--node-ip", node.IP.String(), "--cluster-cidr", "10.244.0.0/16", "--jumps")
	if err != nil {
		t.Fatalf("generate: %v\n%s", err, errOut)
	}
	// This kernel may lack nfacct; the counter decides nothing here.
	rules = strings.ReplaceAll(rules, " -m nfacct --nfacct-name ct_state_invalid_dropped_pkts", "")
	if err := node.IPTables.Restore(ctx, []byte(rules), iptables.RestoreOptions{NoFlush: true}); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "collect.sh")
	if err := os.WriteFile(script, []byte(nodebundle.CollectScript), 0o755); err != nil {
		t.Fatal(err)
	}
	// The node learns the pods' MACs (neighbour table, forwarding database).
	for _, p := range []*kernel.Pod{web0, web1} {
		h.Dial(p.Netns, "tcp", netip.AddrPortFrom(node.Gateway, 9))
	}

	type outcome struct {
		Verdict   string `json:"verdict"`
		DecidedBy string `json:"decided_by"`
		Bridge    *struct {
			Path   string `json:"path"`
			InPort string `json:"in_port"`
			Reply  string `json:"reply"`
		} `json:"bridge"`
	}
	run := 0
	check := func(setting string, vip netip.AddrPort, want *kernel.Pod) {
		t.Helper()
		run++
		bundle := filepath.Join(dir, fmt.Sprintf("node-%d", run))
		if out, err := h.Exec(ctx, node.Netns, "sh", script, bundle); err != nil {
			t.Fatalf("collect: %v\n%s", err, out)
		}
		js, errOut, err := runCmd(t, "trace", "--node", bundle, "--src", web0.IP.String(), "--dst", vip.Addr().String(), "--dport", fmt.Sprint(vip.Port()), "-o", "json")
		if err != nil {
			t.Fatalf("%s: trace --node: %v\n%s", setting, err, errOut)
		}
		var outs []outcome
		if err := json.Unmarshal([]byte(js), &outs); err != nil || len(outs) != 1 || outs[0].Bridge == nil {
			t.Fatalf("%s: want one outcome with the bridge's hop: %v\n%s\n%s", setting, err, js, errOut)
		}
		o := outs[0]
		if o.Bridge.InPort != web0.HostVeth {
			t.Errorf("%s: in port %q, want web-0's %s\n%s", setting, o.Bridge.InPort, web0.HostVeth, errOut)
		}
		exec("conntrack", "-F")
		r := h.Dial(web0.Netns, "tcp", vip)
		answered := r.Outcome == kernel.Answered && r.Server == want.Name
		predicted := o.Verdict == "ACCEPT" && o.Bridge.Reply == ""
		t.Logf("%s: web-0 -> %s: trace %s by %s (%s), kernel: %v", setting, vip, o.Verdict, o.DecidedBy, o.Bridge.Path, r)
		if answered != predicted {
			t.Errorf("%s: web-0 -> %s: the trace says %s (decided by %s, path %s, reply %q), the kernel: %v", setting, vip, o.Verdict, o.DecidedBy, o.Bridge.Path, o.Bridge.Reply, r)
		}
	}
	for _, c := range []struct {
		hairpin, brnf string
	}{{"off", "1"}, {"on", "1"}, {"off", "0"}, {"on", "0"}} {
		exec("ip", "link", "set", web0.HostVeth, "type", "bridge_slave", "hairpin", c.hairpin)
		exec("sysctl", "-qw", "net.bridge.bridge-nf-call-iptables="+c.brnf)
		exec("ip", "link", "set", "cbr0", "type", "bridge", "nf_call_iptables", c.brnf)
		setting := fmt.Sprintf("hairpin %s, bridge-nf-call-iptables=%s", c.hairpin, c.brnf)
		check(setting, soloVIP, web0)
		check(setting, webVIP, web1)
	}
}

// indent indents YAML list items under items:.
func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ") + "\n"
}
