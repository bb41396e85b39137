package kubeproxy

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/service"
)

// nftablesCluster is a two-node cluster running the nftables mode of kube-proxy v.
func nftablesCluster(t *testing.T, v proxy.Version) *cluster.Cluster {
	t.Helper()
	c, err := cluster.New(cluster.Config{Seed: 3, ManualClock: true,
		Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}},
		Proxy: Factory(Options{Mode: NFTables, Node: func(nc *proxy.NodeConfig) { nc.Version = v }})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// The masquerade redesign (nftables-masquerade-redesign, 1.36): a pod reaching itself
// through a selectorless service whose EndpointSlice names another node. Up to 1.35
// the endpoint's chain marks its own traffic for masquerade whatever node the slice
// names, so the pod answers the node and the reply comes back from the service; from
// 1.36 hairpin is masqueraded only for the node's own endpoints (hairpin-connections),
// so the pod answers itself directly and the connection never completes.
func TestNFTablesHairpinRemoteEndpointBefore136(t *testing.T) {
	for _, tc := range []struct {
		v    proxy.Version
		want string
	}{{35, netsim.ResultConnected}, {36, netsim.ResultDropped}} {
		t.Run(tc.v.String(), func(t *testing.T) {
			c := nftablesCluster(t, tc.v)
			if err := c.Apply(service.NewService("default/self", service.Port("", 80, 8080))); err != nil {
				t.Fatal(err)
			}
			pod, err := c.CreatePod(service.NewPod("default/web-0", service.ContainerPort("http", 8080, corev1.ProtocolTCP), service.OnNode("node-a")))
			if err != nil {
				t.Fatal(err)
			}
			sl := service.NewEndpointSlice("default/self-manual", service.ForService("self"), service.AddressType(discoveryv1.AddressTypeIPv4))
			sl.Labels[discoveryv1.LabelManagedBy] = "test"
			name, proto, port, ready, node := "", corev1.ProtocolTCP, int32(8080), true, "node-b"
			sl.Ports = []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}}
			sl.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{pod.IP().String()},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: &node}}
			if err := c.Apply(sl); err != nil {
				t.Fatal(err)
			}
			svc, _ := c.Store().GetService("default", "self")
			vip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
			r, err := c.ProbeOne(netsim.Probe{From: "pod:default/web-0", Proto: netfilter.ProtoTCP, Dst: vip, Mode: netsim.ProbeConnect})
			if err != nil {
				t.Fatal(err)
			}
			if r.Result != tc.want {
				t.Errorf("pod to itself through its service (slice names node-b): %s, want %s", r.Outcome, tc.want)
			}
		})
	}
}

// The pre-DNAT base chains (nftables-pre-dnat-chains, 1.34): a connection from a node
// to an externalTrafficPolicy Local external IP whose only endpoint is on the other
// node. In 1.30-1.33 filter-output (priority -110) runs before nat-output and finds the
// external IP in no-endpoint-services (drop); from 1.34 it runs at priority 0, after
// nat-output has short-circuited the host's traffic to the service's endpoint.
func TestNFTablesHostToLocalPolicyExternalIPFrom134(t *testing.T) {
	for _, tc := range []struct {
		v    proxy.Version
		want string
	}{{33, netsim.ResultDropped}, {34, netsim.ResultConnected}} {
		t.Run(tc.v.String(), func(t *testing.T) {
			c := nftablesCluster(t, tc.v)
			if err := c.Apply(service.NewService("default/web", service.Selector("app=web"), service.Port("", 80, 8080),
				service.ExternalIPs("192.0.2.10"), service.ExternalTrafficPolicy(corev1.ServiceExternalTrafficPolicyLocal))); err != nil {
				t.Fatal(err)
			}
			if _, err := c.CreatePod(service.NewPod("default/web-0", service.Labels("app=web"), service.ContainerPort("http", 8080, corev1.ProtocolTCP), service.OnNode("node-b"))); err != nil {
				t.Fatal(err)
			}
			r, err := c.ProbeOne(netsim.Probe{From: "node:node-a", Proto: netfilter.ProtoTCP, Dst: netip.MustParseAddrPort("192.0.2.10:80"), Mode: netsim.ProbeConnect})
			if err != nil {
				t.Fatal(err)
			}
			if r.Result != tc.want {
				t.Errorf("node-a to the external IP (its endpoint on node-b): %s, want %s", r.Outcome, tc.want)
			}
		})
	}
}

// nftables-layout-1.30 through netsim: a pod's connection to a port its ClusterIP does
// not serve is routed on unDNATed by 1.29 (and lost), and rejected by 1.30's
// cluster-ips-check.
func TestNFTablesClusterIPOtherPortFrom130(t *testing.T) {
	for _, tc := range []struct {
		v    proxy.Version
		want string
	}{{29, netsim.ResultDropped}, {30, netsim.ResultRefused}} {
		t.Run(tc.v.String(), func(t *testing.T) {
			c, err := cluster.New(cluster.Config{Seed: 3, ManualClock: true,
				Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}},
				Proxy: Factory(Options{Mode: NFTables, Node: func(nc *proxy.NodeConfig) {
					nc.Version = tc.v
					nc.FeatureGates = map[string]bool{"NFTablesProxyMode": true}
				}})})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			if err := c.Apply(service.NewService("default/web", service.Selector("app=web"), service.Port("", 80, 8080))); err != nil {
				t.Fatal(err)
			}
			for _, p := range []*corev1.Pod{
				service.NewPod("default/web-0", service.Labels("app=web"), service.ContainerPort("http", 8080, corev1.ProtocolTCP), service.OnNode("node-b")),
				service.NewPod("default/client", service.OnNode("node-a")),
			} {
				if _, err := c.CreatePod(p); err != nil {
					t.Fatal(err)
				}
			}
			svc, _ := c.Store().GetService("default", "web")
			r, err := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 22), Mode: netsim.ProbeConnect})
			if err != nil {
				t.Fatal(err)
			}
			if r.Result != tc.want {
				t.Errorf("client to the ClusterIP's port 22: %s, want %s", r.Outcome, tc.want)
			}
		})
	}
}
