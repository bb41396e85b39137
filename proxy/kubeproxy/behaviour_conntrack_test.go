package kubeproxy

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/service"
)

// Rows 25-26 in every mode that shares kube-proxy's conntrack cleanup: a one-way UDP
// client's entry to the only pod of a service that is scaled to 0 is deleted by 1.31,
// kept by 1.32 (kubernetes#139628) and deleted again by 1.36.
func TestStaleUDPScaleToZeroEveryMode(t *testing.T) {
	for _, mode := range []Mode{IPTables, IPVS, NFTables} {
		for _, tc := range []struct {
			v    proxy.Version
			kept int
		}{{31, 0}, {32, 1}, {36, 0}} {
			t.Run(fmt.Sprintf("%s/%s", mode, tc.v), func(t *testing.T) {
				c, err := cluster.New(cluster.Config{Seed: 3, ManualClock: true,
					Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}},
					Proxy: Factory(Options{Mode: mode, Node: func(nc *proxy.NodeConfig) { nc.Version = tc.v }})})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(c.Close)
				if err := c.Apply(service.NewService("default/stats", service.Selector("app=stats"), service.UDPPort("", 8125, 8125))); err != nil {
					t.Fatal(err)
				}
				for _, p := range []*corev1.Pod{
					service.NewPod("default/stats-0", service.Labels("app=stats"), service.ContainerPort("", 8125, corev1.ProtocolUDP), service.OnNode("node-b")),
					service.NewPod("default/client", service.OnNode("node-a")),
				} {
					if _, err := c.CreatePod(p); err != nil {
						t.Fatal(err)
					}
				}
				dead := c.Pod("default", "stats-0").IP()
				svc, _ := c.Store().GetService("default", "stats")
				vip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 8125)
				r, err := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoUDP, Dst: vip, SrcPort: 5000, Mode: netsim.ProbeConnect})
				if err != nil || r.Result != netsim.ResultReplied {
					t.Fatalf("first datagram: %v %v", r.Outcome, err)
				}
				if err := c.DeletePod("default", "stats-0", 0); err != nil {
					t.Fatal(err)
				}
				got := len(c.Node("node-a").Conntrack().List(netsim.CtFilter{Proto: netfilter.ProtoUDP, OrigDst: vip.Addr(), ReplySrc: dead}))
				if got != tc.kept {
					t.Errorf("entries to the dead pod after scaling to 0: %d, want %d", got, tc.kept)
				}
			})
		}
	}
}
