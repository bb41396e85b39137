// Command version-regression replays a documented kube-proxy regression on the releases
// before, with and after it: kubernetes#139628, introduced in 1.32 by the conntrack
// reconciler (kubernetes#127318) and fixed by kubernetes#139629 (1.36 assumed).
//
// A one-way UDP client (a statsd or syslog sender) always sends from one source port, so
// it has one conntrack entry, refreshed by every datagram and DNATed to the pod its first
// datagram drew. The service is then scaled to 0. Up to 1.31, kube-proxy's sync deletes
// the entries DNATed to the endpoint it lost: the next datagram is a new flow and meets
// the REJECT of a service without endpoints. The 1.32 reconciler skips services with no
// serving endpoint, so the entry survives and the client keeps sending into the dead
// pod's address for as long as it keeps sending. 1.36 cleans those services again.
package main

import (
	"fmt"
	"io"
	"log"
	"net/netip"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"
)

// Versions are the releases replayed: before the regression, with it (first and last)
// and after the fix.
var Versions = []proxy.Version{31, 32, 35, 36}

func main() {
	for _, v := range Versions {
		if _, err := Replay(os.Stdout, v); err != nil {
			log.Fatal(err)
		}
	}
}

// Outcome is what the client saw after the service was scaled to 0.
type Outcome struct {
	// Result is the probe's result for the next datagram ("refused", "dropped").
	Result string
	// StaleEntries are the client's conntrack entries to the service still DNATed to
	// the deleted pod.
	StaleEntries int
	// Recovered: after a new pod came up, the same flow reached it.
	Recovered bool
}

// Replay runs the story as kube-proxy release v (iptables mode) and prints each step.
func Replay(w io.Writer, v proxy.Version) (Outcome, error) {
	var out Outcome
	c, err := cluster.New(cluster.Config{Seed: 1, ManualClock: true,
		Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}},
		Proxy: kubeproxy.Factory(kubeproxy.Options{Mode: kubeproxy.IPTables, Node: func(nc *proxy.NodeConfig) { nc.Version = v }})})
	if err != nil {
		return out, err
	}
	defer c.Close()
	if err := c.Apply(service.NewService("default/stats", service.Selector("app=stats"), service.UDPPort("", 8125, 8125))); err != nil {
		return out, err
	}
	statsPod := func(name, node string) *corev1.Pod {
		return service.NewPod("default/"+name, service.Labels("app=stats"), service.ContainerPort("", 8125, corev1.ProtocolUDP), service.OnNode(node))
	}
	if _, err := c.CreatePod(statsPod("stats-0", "node-b")); err != nil {
		return out, err
	}
	if _, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a"))); err != nil {
		return out, err
	}
	svc, _ := c.Store().GetService("default", "stats")
	vip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 8125)
	nodeA := c.Node("node-a")
	dead := c.Pod("default", "stats-0").IP()

	fmt.Fprintf(w, "kube-proxy %s:\n", v)
	send := func(what string) (netsim.ProbeResult, error) {
		r, err := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoUDP, Dst: vip, SrcPort: 5000, Mode: netsim.ProbeConnect})
		if err != nil {
			return r, err
		}
		fmt.Fprintf(w, "  %-32s %s\n", what+":", firstLine(r.Outcome.String()))
		entries := nodeA.Conntrack().List(netsim.CtFilter{Proto: netfilter.ProtoUDP, OrigDst: vip.Addr()})
		if len(entries) == 0 {
			fmt.Fprintf(w, "  %-32s (no conntrack entry)\n", "")
		}
		for _, e := range entries {
			fmt.Fprintf(w, "  %-32s %s\n", "", e.String())
		}
		return r, nil
	}
	if _, err := send("datagram from :5000"); err != nil {
		return out, err
	}
	if err := c.DeletePod("default", "stats-0", 0); err != nil { // scaled to 0
		return out, err
	}
	r, err := send("stats scaled to 0, next datagram")
	if err != nil {
		return out, err
	}
	out.Result = r.Result
	out.StaleEntries = len(nodeA.Conntrack().List(netsim.CtFilter{Proto: netfilter.ProtoUDP, OrigDst: vip.Addr(), ReplySrc: dead}))
	if _, err := c.CreatePod(statsPod("stats-1", "node-a")); err != nil { // scaled back to 1, on another node (another IP)
		return out, err
	}
	r, err = send("stats-1 up, next datagram")
	if err != nil {
		return out, err
	}
	out.Recovered = r.Result == netsim.ResultReplied && r.Pod == "default/stats-1"
	return out, nil
}

// firstLine trims a probe outcome to its first line.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
