package kubeproxy

import (
	"testing"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"

	corev1 "k8s.io/api/core/v1"
)

// The node's kernel release (netsim.NodeSettings.Kernel) reaches the IPVS mode: kube-proxy
// writes conn_reuse_mode=0 on a 5.4 kernel and leaves it at 1 on a current one, the
// model follows the node's release, and the node's own IPVS sysctls
// (NodeSettings.IPVS) win over kube-proxy's, at start and when changed at run time.
func TestIPVSModeNodeKernelAndSysctls(t *testing.T) {
	withSettings := func(f func(*netsim.NodeSettings)) func(*cluster.Config) {
		return func(cfg *cluster.Config) {
			st := netsim.DefaultNodeSettings()
			f(&st)
			for i := range cfg.Nodes {
				cfg.Nodes[i].Settings = &st
			}
		}
	}
	k54 := netfilter.KernelVersion{Major: 5, Minor: 4}
	for _, c := range []struct {
		name      string
		settings  func(*netsim.NodeSettings)
		kernel    netfilter.KernelVersion
		reuseMode int
		nodest    bool
	}{
		{"current kernel", func(*netsim.NodeSettings) {}, netfilter.KernelVersion{}, 1, true},
		{"5.4", func(s *netsim.NodeSettings) { s.Kernel = k54 }, k54, 0, true},
		{"5.4, the administrator's conn_reuse_mode=1 and expire_nodest_conn=0", func(s *netsim.NodeSettings) {
			s.Kernel = k54
			s.IPVS.ConnReuseMode = netsim.SetTo(1)
			s.IPVS.ExpireNodestConn = netsim.SetTo(0)
		}, k54, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := ipvsClusterWith(t, "rr", withSettings(c.settings))
			m := IPVSModel(cl.Node("node-a"))
			if m.Kernel() != c.kernel {
				t.Errorf("model kernel %v, want %v", m.Kernel(), c.kernel)
			}
			if s := m.Sysctls(); s.ConnReuseMode != c.reuseMode || s.ExpireNodestConn != c.nodest || !s.Conntrack {
				t.Errorf("sysctls %+v, want conn_reuse_mode=%d expire_nodest_conn=%v", s, c.reuseMode, c.nodest)
			}
		})
	}
	t.Run("changed at run time", func(t *testing.T) {
		cl := ipvsClusterWith(t, "rr", withSettings(func(s *netsim.NodeSettings) { s.Kernel = k54 }))
		if err := cl.Apply(service.NewService("default/web", service.Selector("app=MyApp"), service.Port("", 80, 9376))); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.CreatePod(service.NewPod("default/web-0", service.Labels("app=MyApp"), service.ContainerPort("http", 9376, corev1.ProtocolTCP), service.OnNode("node-b"))); err != nil {
			t.Fatal(err)
		}
		client, err := cl.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
		if err != nil {
			t.Fatal(err)
		}
		node := cl.Node("node-a")
		node.UpdateSettings(func(s *netsim.NodeSettings) { s.IPVS.ConnReuseMode = netsim.SetTo(2) })
		askClosed(t, client.Net(), vipOf(t, cl, "web", 80).String()) // a packet through the handlers
		if got := IPVSModel(node).Sysctls().ConnReuseMode; got != 2 {
			t.Errorf("conn_reuse_mode after the change: %d, want 2", got)
		}
		node.UpdateSettings(func(s *netsim.NodeSettings) { s.IPVS.ConnReuseMode = netsim.Sysctl{} })
		askClosed(t, client.Net(), vipOf(t, cl, "web", 80).String())
		if got := IPVSModel(node).Sysctls().ConnReuseMode; got != 0 {
			t.Errorf("conn_reuse_mode with the override taken away: %d, want kube-proxy's 0", got)
		}
	})
}
