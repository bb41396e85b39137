// Command stale-udp-conntrack shows a stale UDP conntrack entry. A client that always
// sends from one source port has one conntrack entry, DNATed to one backend. When that
// backend's pod is deleted while kube-proxy on the client's node is not syncing, the
// flow keeps following the entry into the void; kube-proxy's next sync deletes the
// entries of the endpoint it lost, and the flow is DNATed afresh to a live backend.
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
	if err := c.Apply(service.NewService("default/stats", service.Selector("app=stats"), service.UDPPort("", 8125, 8125))); err != nil {
		return err
	}
	statsPod := func(name, node string) *corev1.Pod {
		return service.NewPod("default/"+name, service.Labels("app=stats"), service.ContainerPort("", 8125, corev1.ProtocolUDP), service.OnNode(node))
	}
	if _, err := c.CreatePod(statsPod("stats-0", "node-a")); err != nil {
		return err
	}
	if _, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a"))); err != nil {
		return err
	}
	svc, _ := c.Store().GetService("default", "stats")
	vip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 8125)
	nodeA := c.Node("node-a")
	send := func(what string) error {
		r, err := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoUDP, Dst: vip, SrcPort: 5000, Mode: netsim.ProbeConnect})
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%-34s %s\n", what+":", r.Outcome)
		for _, e := range nodeA.Conntrack().List(netsim.CtFilter{Proto: netfilter.ProtoUDP, OrigDst: vip.Addr()}) {
			fmt.Fprintf(w, "%-34s %s\n", "", e.String())
		}
		return nil
	}
	if err := send("datagram from :5000"); err != nil {
		return err
	}
	if _, err := c.CreatePod(statsPod("stats-1", "node-b")); err != nil {
		return err
	}
	nodeA.PauseProxy() // kube-proxy on node-a hangs
	if err := c.DeletePod("default", "stats-0", 0); err != nil {
		return err
	}
	if err := send("stats-0 deleted, node-a not synced"); err != nil {
		return err
	}
	nodeA.ResumeProxy() // the sync clears conntrack entries DNATed to the lost endpoint
	return send("after node-a's kube-proxy synced")
}
