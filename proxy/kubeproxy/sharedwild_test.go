package kubeproxy

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"
	corev1 "k8s.io/api/core/v1"
)

// TestSharedWildCacheSameAsPerNode: the nodes of a ShareRules group keep one wildcard
// cache per ruleset version (emulator.ShareWildCache); with a cache per node instead
// (noSharedWild), the same steps give the same probe outcomes (where each ends, the
// source the backend saw: masquerade), the same conntrack entries and the same rule
// counters (iptables-save -c) on every node. The probes come from clients and from the
// backends themselves (a backend reaching its own Service is masqueraded: the hairpin
// rule compares the source with the endpoint's address, which a shared entry asks of
// each packet again), with random source ports, over Services with one to three
// endpoints (random draws), some with ClientIP affinity, while backends come and go.
func TestSharedWildCacheSameAsPerNode(t *testing.T) {
	defer func() { noSharedWild = false }()
	rapid.Check(t, func(t *rapid.T) {
		nodes := rapid.IntRange(2, 4).Draw(t, "nodes")
		tw := &shareTwin{nodes: nodes, labels: [2]string{"shared", "per-node"}}
		tw.c[0] = newShareCluster(t, nodes, 7, true)
		noSharedWild = true
		tw.c[1] = newShareCluster(t, nodes, 7, true)
		noSharedWild = false
		defer tw.close()
		cs := tw.c
		both := func(what string, f func(c *cluster.Cluster) string) { tw.both(t, what, f) }
		var pods []string // every pod: clients and backends
		for j := 0; j < nodes; j++ {
			name := fmt.Sprintf("client-%d", j)
			both("client "+name, func(c *cluster.Cluster) string {
				_, err := c.CreatePod(service.NewPod("default/"+name, service.OnNode(fmt.Sprintf("node-%d", j))))
				return fmt.Sprint(err)
			})
			pods = append(pods, name)
		}
		services := rapid.IntRange(1, 3).Draw(t, "services")
		for s := 0; s < services; s++ {
			opts := []service.Option{service.Selector(fmt.Sprintf("app=s%d", s)), service.Port("http", 80, 8080), service.UDPPort("dns", 53, 8080)}
			if rapid.IntRange(0, 3).Draw(t, "affinity") == 0 {
				opts = append(opts, service.ClientIPAffinity(0))
			}
			both(fmt.Sprintf("service s%d", s), func(c *cluster.Cluster) string {
				return fmt.Sprint(c.Apply(service.NewService(fmt.Sprintf("default/s%d", s), opts...)))
			})
		}
		backends := 0
		addBackend := func() {
			backends++
			name := fmt.Sprintf("b%d", backends)
			s := rapid.IntRange(0, services-1).Draw(t, "backend of")
			j := rapid.IntRange(0, nodes-1).Draw(t, "backend node")
			both("backend "+name, func(c *cluster.Cluster) string {
				_, err := c.CreatePod(service.NewPod("default/"+name, service.Labels(fmt.Sprintf("app=s%d", s)),
					service.ContainerPort("http", 8080, corev1.ProtocolTCP), service.ContainerPort("dns", 8080, corev1.ProtocolUDP),
					service.OnNode(fmt.Sprintf("node-%d", j))))
				return fmt.Sprint(err)
			})
			pods = append(pods, name)
		}
		for n := rapid.IntRange(services, 3*services).Draw(t, "backends"); n > 0; n-- {
			addBackend()
		}
		view := func(c *cluster.Cluster) string {
			var b strings.Builder
			for _, n := range c.Nodes() {
				fmt.Fprintf(&b, "%s\n%s", n.Name(), Emulator(n, netip.Addr{}).SaveCounters("nat", "filter"))
				var cts []string
				for _, e := range n.Conntrack().Entries() {
					cts = append(cts, fmt.Sprintf("%v %v %v", e.Orig, e.Reply, e.TCPState))
				}
				sort.Strings(cts)
				fmt.Fprintf(&b, "conntrack: %s\n", strings.Join(cts, "; "))
			}
			return b.String()
		}
		steps := rapid.IntRange(10, 60).Draw(t, "steps")
		for step := 0; step < steps; step++ {
			switch rapid.IntRange(0, 19).Draw(t, "op") {
			case 0:
				addBackend()
				continue
			case 1:
				if len(pods) == nodes {
					continue
				}
				k := rapid.IntRange(nodes, len(pods)-1).Draw(t, "deleted")
				name := pods[k]
				both("delete "+name, func(c *cluster.Cluster) string {
					return fmt.Sprint(c.Store().DeletePod("default", name, 0))
				})
				pods = append(pods[:k:k], pods[k+1:]...)
				continue
			}
			from := rapid.SampledFrom(pods).Draw(t, "from")
			s := rapid.IntRange(0, services-1).Draw(t, "to")
			udp := rapid.Bool().Draw(t, "udp")
			mode := netsim.ProbePacket
			if rapid.IntRange(0, 3).Draw(t, "connect") == 0 {
				mode = netsim.ProbeConnect
			}
			sport := uint16(rapid.IntRange(30000, 30040).Draw(t, "sport"))
			what := fmt.Sprintf("step %d: %s to s%d (udp %v, mode %d, port %d)", step, from, s, udp, mode, sport)
			both(what, func(c *cluster.Cluster) string {
				svc, ok := c.Store().GetService("default", fmt.Sprintf("s%d", s))
				if !ok {
					return "no service"
				}
				proto, port := netfilter.ProtoTCP, uint16(80)
				if udp {
					proto, port = netfilter.ProtoUDP, 53
				}
				rs, err := c.Probe(netsim.Probe{From: "pod:default/" + from, Proto: proto, Mode: mode,
					Dst: netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), port), SrcPort: sport})
				return fmt.Sprintf("%v %v", err, rs)
			})
			if step%5 == 4 || step == steps-1 {
				both(what+": nodes", view)
			}
		}
		for i, c := range cs {
			if errs := c.Errors(); len(errs) > 0 {
				t.Fatalf("cluster %d: %v", i, errs)
			}
		}
	})
}

// TestLeavingNodeKeepsItsOwnWildCache: a group's nodes share their ruleset's wildcard
// cache; a node that leaves the group (a Service with a Local policy makes its rules
// its own) keeps a cache of a node's size, not a shared one of its own (thousands of
// nodes leaving would each hold 16,384 entries).
func TestLeavingNodeKeepsItsOwnWildCache(t *testing.T) {
	c, err := cluster.New(cluster.Config{Seed: 1, ManualClock: true,
		Nodes: []cluster.NodeConfig{{Name: "node-0"}, {Name: "node-1"}},
		Proxy: Factory(Options{Mode: IPTables, ShareRules: true})})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	shares := func() string {
		var b strings.Builder
		for _, n := range c.Nodes() {
			fmt.Fprintf(&b, "%s %v; ", n.Name(), Emulator(n, netip.Addr{}).SharesWildCache())
		}
		return b.String()
	}
	if err := c.Apply(service.NewService("default/web", service.Selector("app=web"), service.Port("http", 80, 8080))); err != nil {
		t.Fatal(err)
	}
	if got := shares(); got != "node-0 true; node-1 true; " {
		t.Fatalf("in the group: %s", got)
	}
	if err := c.Apply(service.NewService("default/local", service.Selector("app=web"), service.Port("http", 80, 8080),
		service.NodePort(), service.ExternalTrafficPolicy(corev1.ServiceExternalTrafficPolicyLocal))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreatePod(service.NewPod("default/web-1", service.Labels("app=web"),
		service.ContainerPort("http", 8080, corev1.ProtocolTCP), service.OnNode("node-1"))); err != nil {
		t.Fatal(err)
	}
	if got := shares(); got != "node-0 false; node-1 false; " {
		t.Fatalf("after leaving the group: %s", got)
	}
}
