package kubeproxy

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"
	corev1 "k8s.io/api/core/v1"
)

// shareTwin is the same cluster twice, with and without Options.ShareRules (or two
// other variants, named by labels), driven through the same steps.
type shareTwin struct {
	c      [2]*cluster.Cluster // unshared, shared
	labels [2]string
	nodes  int
}

// fataler is *testing.T or *rapid.T.
type fataler interface {
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// newShareCluster is a cluster of nodes node-0, node-1, … whose kube-proxy runs the
// iptables mode, with or without ShareRules.
func newShareCluster(t fataler, nodes int, seed uint64, share bool) *cluster.Cluster {
	var ncs []cluster.NodeConfig
	for j := 0; j < nodes; j++ {
		ncs = append(ncs, cluster.NodeConfig{Name: fmt.Sprintf("node-%d", j)})
	}
	c, err := cluster.New(cluster.Config{Seed: seed, ManualClock: true, Nodes: ncs,
		Proxy: Factory(Options{Mode: IPTables, ShareRules: share})})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newShareTwin(t fataler, nodes int) *shareTwin {
	tw := &shareTwin{nodes: nodes, labels: [2]string{"unshared", "shared"}}
	for i, share := range []bool{false, true} {
		c := newShareCluster(t, nodes, 1, share)
		tw.c[i] = c
		for j := 0; j < nodes; j++ {
			if _, err := c.CreatePod(service.NewPod(fmt.Sprintf("default/client-%d", j), service.OnNode(fmt.Sprintf("node-%d", j)))); err != nil {
				t.Fatal(err)
			}
		}
	}
	return tw
}

func (tw *shareTwin) close() { tw.c[0].Close(); tw.c[1].Close() }

// both runs a step on the two clusters; its results must agree.
func (tw *shareTwin) both(t fataler, what string, f func(c *cluster.Cluster) string) {
	var got [2]string
	for i, c := range tw.c {
		got[i] = f(c)
	}
	if got[0] != got[1] {
		t.Fatalf("%s: %s and %s differ:\n--- %s\n%s\n--- %s\n%s", what, tw.labels[0], tw.labels[1], tw.labels[0], got[0], tw.labels[1], got[1])
	}
}

// view is everything the comparison looks at on a cluster: each node's iptables-save,
// its conntrack entries, its syncs, and every outcome (all branches) of a TCP and a UDP
// probe from each node's client to each Service.
func (tw *shareTwin) view(c *cluster.Cluster) string {
	var b strings.Builder
	for _, n := range c.Nodes() {
		save, err := Emulator(n, netip.Addr{}).Save(context.Background(), "nat", "filter")
		if err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "%s syncs %d\n%s", n.Name(), n.ProxySyncs(), save)
		var cts []string
		for _, e := range n.Conntrack().Entries() {
			cts = append(cts, fmt.Sprintf("%v %v", e.Orig, e.Reply))
		}
		sort.Strings(cts)
		fmt.Fprintf(&b, "conntrack: %s\n", strings.Join(cts, "; "))
	}
	for _, svc := range c.Store().ListServices() {
		if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == "None" {
			continue
		}
		vip := netip.MustParseAddr(svc.Spec.ClusterIP)
		for _, sp := range svc.Spec.Ports {
			proto := netfilter.ProtoTCP
			if sp.Protocol == corev1.ProtocolUDP {
				proto = netfilter.ProtoUDP
			}
			for j := 0; j < tw.nodes; j++ {
				rs, err := c.Probe(netsim.Probe{From: fmt.Sprintf("pod:default/client-%d", j), Proto: proto,
					Dst: netip.AddrPortFrom(vip, uint16(sp.Port)), SrcPort: 40000, AllBranches: true})
				fmt.Fprintf(&b, "%s from client-%d: %v", svc.Name, j, err)
				for _, r := range rs {
					fmt.Fprintf(&b, " %s %v %.4f;", r.Result, r.Addr, r.Probability)
				}
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}

// TestShareRulesSameAsUnshared: for random clusters and changes — Services (TCP, UDP,
// ClientIP affinity, now and then one with externalTrafficPolicy Local, which makes
// the nodes leave their group), backends coming and going, paused and lagging proxies,
// restarts, real probes leaving conntrack entries — every node's iptables-save, its
// conntrack entries and every probe outcome are the same with shared rulesets as
// without.
func TestShareRulesSameAsUnshared(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := rapid.IntRange(2, 3).Draw(t, "nodes")
		tw := newShareTwin(t, nodes)
		defer tw.close()
		node := func(c *cluster.Cluster, j int) *cluster.Node { return c.Node(fmt.Sprintf("node-%d", j)) }
		pods := 0
		steps := rapid.IntRange(1, 12).Draw(t, "steps")
		for s := 0; s < steps; s++ {
			op := rapid.IntRange(0, 9).Draw(t, "op")
			svc := rapid.IntRange(0, 2).Draw(t, "svc")
			j := rapid.IntRange(0, nodes-1).Draw(t, "node")
			var what string
			switch op {
			case 0, 1: // a Service (again: an update)
				opts := []service.Option{service.Selector(fmt.Sprintf("app=s%d", svc))}
				if rapid.Bool().Draw(t, "udp") {
					opts = append(opts, service.UDPPort("dns", 53, 8080))
				} else {
					opts = append(opts, service.Port("http", 80, 8080))
				}
				if rapid.IntRange(0, 4).Draw(t, "affinity") == 0 {
					opts = append(opts, service.ClientIPAffinity(0))
				}
				if rapid.IntRange(0, 9).Draw(t, "local") == 0 {
					opts = append(opts, service.NodePort(), service.ExternalTrafficPolicy(corev1.ServiceExternalTrafficPolicyLocal))
				}
				what = fmt.Sprintf("service s%d", svc)
				tw.both(t, what, func(c *cluster.Cluster) string {
					return fmt.Sprint(c.Apply(service.NewService(fmt.Sprintf("default/s%d", svc), opts...)))
				})
			case 2:
				what = fmt.Sprintf("delete service s%d", svc)
				tw.both(t, what, func(c *cluster.Cluster) string {
					return fmt.Sprint(c.Store().Delete(service.KindService, "default", fmt.Sprintf("s%d", svc)))
				})
			case 3, 4:
				pods++
				what = fmt.Sprintf("backend p%d of s%d on node-%d", pods, svc, j)
				tw.both(t, what, func(c *cluster.Cluster) string {
					_, err := c.CreatePod(service.NewPod(fmt.Sprintf("default/p%d", pods), service.Labels(fmt.Sprintf("app=s%d", svc)),
						service.ContainerPort("http", 8080, corev1.ProtocolTCP), service.ContainerPort("dns", 8080, corev1.ProtocolUDP),
						service.OnNode(fmt.Sprintf("node-%d", j))))
					return fmt.Sprint(err)
				})
			case 5:
				if pods == 0 {
					continue
				}
				k := rapid.IntRange(1, pods).Draw(t, "pod")
				what = fmt.Sprintf("delete p%d", k)
				tw.both(t, what, func(c *cluster.Cluster) string {
					err := c.Store().DeletePod("default", fmt.Sprintf("p%d", k), 0)
					return fmt.Sprint(err != nil)
				})
			case 6:
				pause := rapid.Bool().Draw(t, "pause")
				what = fmt.Sprintf("pause node-%d %v", j, pause)
				tw.both(t, what, func(c *cluster.Cluster) string {
					if pause {
						node(c, j).PauseProxy()
					} else {
						node(c, j).ResumeProxy()
					}
					return ""
				})
			case 7:
				d := time.Duration(rapid.IntRange(0, 2).Draw(t, "delay")) * time.Second
				what = fmt.Sprintf("node-%d sync delay %s", j, d)
				tw.both(t, what, func(c *cluster.Cluster) string { node(c, j).SetSyncDelay(d); return "" })
			case 8:
				what = "advance 1s"
				tw.both(t, what, func(c *cluster.Cluster) string { c.Clock().Advance(time.Second); return "" })
			case 9:
				what = fmt.Sprintf("restart kube-proxy on node-%d", j)
				tw.both(t, what, func(c *cluster.Cluster) string {
					ForceFullSync(node(c, j))
					node(c, j).SyncProxy()
					return ""
				})
			}
			// A real probe from a random client to every Service: conntrack entries that a
			// later sync may have to clear.
			from := rapid.IntRange(0, nodes-1).Draw(t, "from")
			tw.both(t, what+": real probes", func(c *cluster.Cluster) string {
				var b strings.Builder
				for _, svc := range c.Store().ListServices() {
					if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == "None" {
						continue
					}
					proto := netfilter.ProtoTCP
					if svc.Spec.Ports[0].Protocol == corev1.ProtocolUDP {
						proto = netfilter.ProtoUDP
					}
					rs, err := c.Probe(netsim.Probe{From: fmt.Sprintf("pod:default/client-%d", from), Proto: proto,
						Dst: netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), uint16(svc.Spec.Ports[0].Port)), SrcPort: uint16(41000 + s)})
					fmt.Fprintf(&b, "%s: %v %v\n", svc.Name, err, rs)
				}
				return b.String()
			})
			tw.both(t, what, tw.view)
			for i, c := range tw.c {
				if errs := c.Errors(); len(errs) > 0 {
					t.Fatalf("cluster %d: %v", i, errs)
				}
			}
		}
	})
}

// TestShareRulesLaggingNode: a paused node misses two rounds of its group (a UDP
// backend deleted, another Service added) and keeps its old rules meanwhile; when it
// resumes it clears the stale UDP entry its own kube-proxy would have cleared (the
// change tracker's filters from its round to the latest), as the unshared node does.
func TestShareRulesLaggingNode(t *testing.T) {
	tw := newShareTwin(t, 2)
	defer tw.close()
	var vip netip.Addr
	steps := []struct {
		what string
		f    func(c *cluster.Cluster) string
	}{
		{"udp service", func(c *cluster.Cluster) string {
			return fmt.Sprint(c.Apply(service.NewService("default/dns", service.Selector("app=dns"), service.UDPPort("dns", 53, 8080))))
		}},
		{"backend on node-1", func(c *cluster.Cluster) string {
			_, err := c.CreatePod(service.NewPod("default/dns-0", service.Labels("app=dns"),
				service.ContainerPort("dns", 8080, corev1.ProtocolUDP), service.OnNode("node-1")))
			svc, _ := c.Store().GetService("default", "dns")
			vip = netip.MustParseAddr(svc.Spec.ClusterIP)
			return fmt.Sprint(err)
		}},
		{"udp flow from client-0", func(c *cluster.Cluster) string {
			rs, err := c.Probe(netsim.Probe{From: "pod:default/client-0", Proto: netfilter.ProtoUDP, Dst: netip.AddrPortFrom(vip, 53), SrcPort: 5353})
			return fmt.Sprint(rs, err)
		}},
		{"pause node-0", func(c *cluster.Cluster) string { c.Node("node-0").PauseProxy(); return "" }},
		{"delete the backend", func(c *cluster.Cluster) string { return fmt.Sprint(c.Store().DeletePod("default", "dns-0", 0)) }},
		{"another service", func(c *cluster.Cluster) string {
			return fmt.Sprint(c.Apply(service.NewService("default/web", service.Selector("app=web"), service.Port("http", 80, 8080))))
		}},
		{"node-0 still has the flow", func(c *cluster.Cluster) string {
			if n := len(c.Node("node-0").Conntrack().List(netsim.CtFilter{OrigDst: vip})); n != 1 {
				t.Fatalf("node-0 has %d entries to the UDP service, want the flow's", n)
			}
			return ""
		}},
		{"resume node-0", func(c *cluster.Cluster) string { c.Node("node-0").ResumeProxy(); return "" }},
		{"node-0 cleared the flow", func(c *cluster.Cluster) string {
			return fmt.Sprint(len(c.Node("node-0").Conntrack().List(netsim.CtFilter{OrigDst: vip})))
		}},
	}
	for _, s := range steps {
		tw.both(t, s.what, s.f)
		tw.both(t, s.what, tw.view)
	}
	if n := len(tw.c[1].Node("node-0").Conntrack().List(netsim.CtFilter{OrigDst: vip})); n != 0 {
		t.Errorf("node-0 kept %d entries to the deleted UDP backend", n)
	}
}
