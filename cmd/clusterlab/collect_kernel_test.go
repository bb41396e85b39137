package main

import (
	"context"
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

// TestCollectOnARealNode (root): the collect script gathers a bundle from a node
// network namespace whose iptables hold kube-proxy-like rules for a ClusterIP, and
// trace --node on that bundle says where a packet from outside goes, DNATed to the
// pod, as a real connection from outside through the node shows.
func TestCollectOnARealNode(t *testing.T) {
	kernel.RequireHarness(t)
	kernel.RequireTools(t, "iptables-save", "iptables-restore", "ip", "tar", "sh")
	vip := netip.MustParseAddrPort("10.96.7.10:80")
	h, err := kernel.NewHarness(kernel.HarnessConfig{Prefix: "clcoll",
		Pods:           []kernel.PodConfig{{Name: "web-0", Node: 0, TCPPorts: []uint16{8080}}, {Name: "web-1", Node: 0, TCPPorts: []uint16{8080}}},
		ExternalRoutes: []netip.Prefix{netip.PrefixFrom(vip.Addr(), 32)}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	web1 := h.Pod("web-1")
	rules := fmt.Sprintf(`*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-WEB - [0:0]
:KUBE-SEP-WEB1 - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d %s/32 -p tcp -m comment --comment "default/web cluster IP" -m tcp --dport %d -j KUBE-SVC-WEB
-A KUBE-SVC-WEB -m comment --comment "default/web -> %s:8080" -j KUBE-SEP-WEB1
-A KUBE-SEP-WEB1 -p tcp -m comment --comment default/web -m tcp -j DNAT --to-destination %s:8080
COMMIT
`, vip.Addr(), vip.Port(), web1.IP, web1.IP)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node := h.Nodes[0]
	if err := node.IPTables.Restore(ctx, []byte(rules), iptables.RestoreOptions{NoFlush: true}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "collect.sh")
	if err := os.WriteFile(script, []byte(nodebundle.CollectScript), 0o755); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, "node0")
	out, err := h.Exec(ctx, node.Netns, "sh", script, bundle)
	if err != nil {
		t.Fatalf("collect: %v\n%s", err, out)
	}
	if strings.TrimSpace(string(out)) != bundle {
		t.Errorf("collect printed %q, want the bundle's directory", out)
	}
	for _, f := range []string{nodebundle.IPTablesSave, nodebundle.IPAddr, nodebundle.IPRoute} {
		if st, err := os.Stat(filepath.Join(bundle, f)); err != nil || st.Size() == 0 {
			t.Errorf("the bundle has no %s: %v", f, err)
		}
	}
	if _, err := os.Stat(bundle + ".tar.gz"); err != nil {
		t.Errorf("no tarball: %v", err)
	}

	// The trace from the bundle, as the node saw it.
	js, errOut, err := runCmd(t, "trace", "--node", bundle+".tar.gz", "--src", h.ExternalIP.String(), "--dst", vip.Addr().String(),
		"--dport", fmt.Sprint(vip.Port()), "--in-interface", "eth0", "-o", "json")
	if err != nil {
		t.Fatalf("trace --node: %v\n%s", err, errOut)
	}
	want := fmt.Sprintf(`"dnat_destination": "%s:8080"`, web1.IP)
	if !strings.Contains(js, want) || !strings.Contains(js, `"verdict": "ACCEPT"`) {
		t.Errorf("trace --node:\n%s\nwant %s, accepted", js, want)
	}
	// The real node.
	if r := h.Dial(h.External, "tcp", vip); r.Outcome != kernel.Answered || r.Server != "web-1" {
		t.Errorf("a real connection from outside to %s: %v, want web-1 to answer", vip, r)
	}
}
