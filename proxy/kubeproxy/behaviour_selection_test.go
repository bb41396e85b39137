package kubeproxy

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/service"
)

// versionCluster is a three-node cluster (node-a in zone-1, node-b and node-c in
// zone-2) whose kube-proxies run the iptables mode as release v with the gate overrides,
// a client pod on node-a, and web pods (TCP 9376) on the given nodes.
func versionCluster(t *testing.T, v proxy.Version, gates map[string]bool, webNodes ...string) *cluster.Cluster {
	t.Helper()
	c, err := cluster.New(cluster.Config{Seed: 11, ManualClock: true,
		Nodes: []cluster.NodeConfig{{Name: "node-a", Zone: "zone-1"}, {Name: "node-b", Zone: "zone-2"}, {Name: "node-c", Zone: "zone-2"}},
		Proxy: Factory(Options{Mode: IPTables, Node: func(nc *proxy.NodeConfig) { nc.Version, nc.FeatureGates = v, gates }})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a"))); err != nil {
		t.Fatal(err)
	}
	for i, node := range webNodes {
		pod := service.NewPod(fmt.Sprintf("default/web-%d", i), service.Labels("app=MyApp"), service.ContainerPort("http", 9376, corev1.ProtocolTCP), service.OnNode(node))
		if _, err := c.CreatePod(pod); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// reached connects from the client pod to dst with 12 source ports and returns the pods
// that answered, or the results that were not a connection, sorted and joined.
func reached(t *testing.T, c *cluster.Cluster, dst netip.AddrPort) string {
	t.Helper()
	seen := map[string]bool{}
	for port := uint16(41000); port < 41012; port++ {
		r, err := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: dst, SrcPort: port, Mode: netsim.ProbeConnect})
		if err != nil {
			t.Fatal(err)
		}
		if r.Result == netsim.ResultConnected {
			seen[r.Pod] = true
		} else {
			seen[r.Result] = true
		}
	}
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func applyWeb(t *testing.T, c *cluster.Cluster, opts ...service.Option) netip.AddrPort {
	t.Helper()
	opts = append([]service.Option{service.Selector("app=MyApp"), service.Port("http", 80, 9376)}, opts...)
	if err := c.Apply(service.NewService("default/web", opts...)); err != nil {
		t.Fatal(err)
	}
	return vipOf(t, c, "web", 80)
}

// Row 27: every pod of a ClusterIP service is terminating but still serving. With
// ProxyTerminatingEndpoints off (its default before 1.26) the service has no endpoint and
// the connection is REJECTed; from 1.26 (beta, on) the terminating pod serves it. In
// 1.23 with the gate turned on, the fallback covers only the node-local set, so the
// ClusterIP still REJECTs.
func TestTerminatingFallbackByVersion(t *testing.T) {
	for _, tc := range []struct {
		v     proxy.Version
		gates map[string]bool
		want  string
	}{
		{25, nil, netsim.ResultRefused},
		{26, nil, "default/web-0"},
		{23, map[string]bool{"ProxyTerminatingEndpoints": true}, netsim.ResultRefused},
		{24, map[string]bool{"ProxyTerminatingEndpoints": true}, "default/web-0"},
		{37, nil, "default/web-0"},
	} {
		t.Run(fmt.Sprintf("%s%v", tc.v, tc.gates), func(t *testing.T) {
			c := versionCluster(t, tc.v, tc.gates, "node-b")
			vip := applyWeb(t, c)
			if got := reached(t, c, vip); got != "default/web-0" {
				t.Fatalf("before the pod terminates: %s", got)
			}
			if err := c.DeletePod("default", "web-0", 30*time.Second); err != nil {
				t.Fatal(err)
			}
			if got := reached(t, c, vip); got != tc.want {
				t.Errorf("all pods terminating: %s, want %s", got, tc.want)
			}
		})
	}
}

// Row 28: internalTrafficPolicy Local, the only endpoint on node-b, the client on
// node-a. 1.21 (ServiceInternalTrafficPolicy alpha, off) ignores the field and connects;
// 1.22 (beta, on) finds no local endpoint and, until 1.23, treats the service as one
// without endpoints: REJECT ("has no endpoints", kubernetes#112233); from 1.24 the
// KUBE-SVL layout drops it ("has no local endpoints", kubernetes#106497).
func TestInternalTrafficPolicyByVersion(t *testing.T) {
	for _, tc := range []struct {
		v    proxy.Version
		want string
	}{{21, "default/web-0"}, {22, netsim.ResultRefused}, {23, netsim.ResultRefused}, {24, netsim.ResultDropped}, {37, netsim.ResultDropped}} {
		t.Run(tc.v.String(), func(t *testing.T) {
			c := versionCluster(t, tc.v, nil, "node-b")
			vip := applyWeb(t, c, service.InternalTrafficPolicy(corev1.ServiceInternalTrafficPolicyLocal))
			if got := reached(t, c, vip); got != tc.want {
				t.Errorf("ITP Local from a node without an endpoint: %s, want %s", got, tc.want)
			}
		})
	}
}

// Rows 29-30: a service whose slices carry zone hints (trafficDistribution PreferClose),
// one endpoint per node, the client in zone-1 (node-a, with web-0). Whether kube-proxy
// keeps to the zone depends on the release, its gates and the Service's annotation.
func TestTopologyHintsByVersion(t *testing.T) {
	const all, zone = "default/web-0,default/web-1,default/web-2", "default/web-0"
	for _, tc := range []struct {
		name  string
		v     proxy.Version
		annot [2]string // annotation key and value, if any
		want  string
	}{
		{"topology-aware-hints beta off", 23, [2]string{proxy.AnnotationTopologyAwareHints, "Auto"}, all},
		{"topology-aware-hints beta on", 24, [2]string{proxy.AnnotationTopologyAwareHints, "Auto"}, zone},
		{"topology-mode before 1.27", 26, [2]string{proxy.AnnotationTopologyMode, "Auto"}, all},
		{"topology-mode", 27, [2]string{proxy.AnnotationTopologyMode, "Auto"}, zone},
		{"no annotation, trafficDistribution alpha", 30, [2]string{}, all},
		{"no annotation, trafficDistribution beta", 31, [2]string{}, zone},
		{"no annotation, newest", 37, [2]string{}, zone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := versionCluster(t, tc.v, nil, "node-a", "node-b", "node-c")
			opts := []service.Option{service.TrafficDistribution(corev1.ServiceTrafficDistributionPreferClose)}
			if tc.annot[0] != "" {
				opts = append(opts, service.Annotation(tc.annot[0], tc.annot[1]))
			}
			vip := applyWeb(t, c, opts...)
			if got := reached(t, c, vip); got != tc.want {
				t.Errorf("kube-proxy %s: reached %s, want %s", tc.v, got, tc.want)
			}
		})
	}
}

// Row 32: the simulated cloud load balancer marks its ingress IP ipMode Proxy. A pod
// connecting to the LB IP: 1.29 (LoadBalancerIPMode alpha, off) DNATs it on the pod's
// own node, so the packet never leaves node-a; 1.30 (beta, on) writes no rule for the IP,
// so the connection goes out to the load balancer, which forwards it to a node.
func TestLoadBalancerIPModeByVersion(t *testing.T) {
	for _, tc := range []struct {
		v          proxy.Version
		viaBalance bool
	}{{29, false}, {30, true}, {37, true}} {
		t.Run(tc.v.String(), func(t *testing.T) {
			c := versionCluster(t, tc.v, nil, "node-b")
			applyWeb(t, c, service.LoadBalancer())
			lbIP, ok := c.LoadBalancerIP("default", "web")
			if !ok {
				t.Fatal("no load balancer")
			}
			r, err := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(lbIP, 80), SrcPort: 42000, Mode: netsim.ProbeConnect, Trace: true})
			if err != nil {
				t.Fatal(err)
			}
			if r.Result != netsim.ResultConnected || r.Pod != "default/web-0" {
				t.Fatalf("pod to LB IP: %s\n%s", r.Outcome, r.Trace)
			}
			// On node-a, the pod's own packet to the LB IP is DNATed (1.29) or not (1.30).
			if got := !strings.Contains(r.Trace.String(), "DNAT (entry #1: tcp 10.244.0.2:42000 -> "+lbIP.String()); got != tc.viaBalance {
				t.Errorf("kube-proxy %s: went through the load balancer = %v, want %v\n%s", tc.v, got, tc.viaBalance, r.Trace)
			}
		})
	}
}

// Row 14: with --nodeport-addresses leaving out loopback (10.0.0.0/8), kube-proxy 1.23
// still sets route_localnet on the node and 1.24 does not (kubernetes#107684); with no
// --nodeport-addresses (every address, loopback included) both set it.
func TestRouteLocalnetWhenNeededFrom124(t *testing.T) {
	for _, tc := range []struct {
		v     proxy.Version
		addrs []string
		want  bool
	}{
		{23, []string{"10.0.0.0/8"}, true},
		{24, []string{"10.0.0.0/8"}, false},
		{23, nil, true},
		{24, nil, true},
		{24, []string{"127.0.0.0/8"}, true},
	} {
		c, err := cluster.New(cluster.Config{Seed: 11, ManualClock: true, Nodes: []cluster.NodeConfig{{Name: "node-a"}},
			Proxy: Factory(Options{Mode: IPTables, Node: func(nc *proxy.NodeConfig) { nc.Version, nc.NodePortAddresses = tc.v, tc.addrs }})})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Node("node-a").Settings().RouteLocalnet; got != tc.want {
			t.Errorf("kube-proxy %s, --nodeport-addresses %v: route_localnet %v, want %v", tc.v, tc.addrs, got, tc.want)
		}
		c.Close()
	}
}
