// Command clusterip-trace follows one packet from a client pod to a ClusterIP Service
// through kube-proxy's iptables rules, rule by rule, and then follows every branch of the
// random choice to show each backend's probability.
package main

import (
	"fmt"
	"io"
	"log"
	"net/netip"
	"os"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"

	corev1 "k8s.io/api/core/v1"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer) error {
	c, err := cluster.New(cluster.Config{Seed: 1, ManualClock: true,
		Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}},
		Proxy: kubeproxy.Factory(kubeproxy.Options{Mode: kubeproxy.IPTables})})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Apply(service.NewService("default/my-service", service.Selector("app=MyApp"), service.Port("", 80, 9376))); err != nil {
		return err
	}
	for i, node := range []string{"node-a", "node-b", "node-b"} {
		pod := service.NewPod(fmt.Sprintf("default/backend-%d", i), service.Labels("app=MyApp"),
			service.ContainerPort("", 9376, corev1.ProtocolTCP), service.OnNode(node))
		if _, err := c.CreatePod(pod); err != nil {
			return err
		}
	}
	if _, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a"))); err != nil {
		return err
	}
	svc, _ := c.Store().GetService("default", "my-service")
	vip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)

	// One SYN, with every hook, rule, conntrack lookup, NAT and route it met.
	r, err := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, Trace: true})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "one SYN to my-service (%s): %s\n\n", vip, r.Outcome)
	fmt.Fprintln(w, "the rules that matched, in order:")
	for _, s := range r.Trace.Find(netsim.StepRule) {
		if s.Matched != nil && *s.Matched {
			fmt.Fprintf(w, "  [%s %s] %s/%s line %d: %s => %s\n", s.Node, s.Hook, s.Table, s.Chain, s.Line, s.Rule, s.Verdict)
		}
	}
	for _, s := range r.Trace.Find(netsim.StepNAT) {
		fmt.Fprintf(w, "  [%s] %s: %s\n", s.Node, s.Verdict, s.Detail)
	}

	// Every branch of the statistic rules, with its probability; nothing changes.
	rs, err := c.Probe(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, AllBranches: true})
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "\nevery branch:")
	for _, r := range rs {
		fmt.Fprintf(w, "  p=%.4f  %s\n", r.Probability, r.Outcome)
	}
	return nil
}
