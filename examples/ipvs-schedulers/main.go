// Command ipvs-schedulers compares the IPVS schedulers kube-proxy's IPVS mode can use
// (--ipvs-scheduler): six client pods open ten connections each to a Service with three
// backends, under each scheduler, and the program counts where they went.
package main

import (
	"fmt"
	"io"
	"log"
	"net/netip"
	"os"
	"strings"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"

	corev1 "k8s.io/api/core/v1"
)

func main() {
	if err := run(os.Stdout, ipvs.Schedulers()); err != nil {
		log.Fatal(err)
	}
}

const clients, perClient = 6, 10

// result is where one scheduler sent the connections.
type result struct {
	perBackend [3]int // connections per backend
	failed     int    // connections that got no backend
	pinned     int    // clients whose connections all went to one backend
}

func run(w io.Writer, schedulers []string) error {
	fmt.Fprintf(w, "%d clients x %d connections to a Service with 3 backends (IPVS mode)\n", clients, perClient)
	fmt.Fprintf(w, "%-6s  %-14s  %-6s  %s\n", "sched", "web-0/1/2", "failed", "clients pinned to one backend")
	for _, s := range schedulers {
		r, err := measure(s)
		if err != nil {
			return fmt.Errorf("scheduler %s: %w", s, err)
		}
		fmt.Fprintf(w, "%-6s  %4d %4d %4d  %6d  %d of %d\n", s, r.perBackend[0], r.perBackend[1], r.perBackend[2], r.failed, r.pinned, clients)
	}
	return nil
}

func measure(sched string) (result, error) {
	var res result
	c, err := cluster.New(cluster.Config{Seed: 3, ManualClock: true,
		Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}},
		Proxy: kubeproxy.Factory(kubeproxy.Options{Mode: kubeproxy.IPVS, Scheduler: sched})})
	if err != nil {
		return res, err
	}
	defer c.Close()
	if err := c.Apply(service.NewService("default/web", service.Selector("app=web"), service.Port("", 80, 8080))); err != nil {
		return res, err
	}
	for i := 0; i < 3; i++ {
		pod := service.NewPod(fmt.Sprintf("default/web-%d", i), service.Labels("app=web"), service.ContainerPort("", 8080, corev1.ProtocolTCP))
		if _, err := c.CreatePod(pod); err != nil {
			return res, err
		}
	}
	for i := 0; i < clients; i++ {
		// All clients on node-a: one IPVS table sees every connection.
		if _, err := c.CreatePod(service.NewPod(fmt.Sprintf("default/client-%d", i), service.OnNode("node-a"))); err != nil {
			return res, err
		}
	}
	svc, _ := c.Store().GetService("default", "web")
	vip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
	for i := 0; i < clients; i++ {
		seen := map[string]bool{}
		for j := 0; j < perClient; j++ {
			r, err := c.ProbeOne(netsim.Probe{From: fmt.Sprintf("pod:default/client-%d", i), Proto: netfilter.ProtoTCP, Dst: vip, Mode: netsim.ProbeConnect})
			if err != nil {
				return res, err
			}
			if r.Result != netsim.ResultConnected {
				res.failed++
				continue
			}
			var k int
			fmt.Sscanf(strings.TrimPrefix(r.Pod, "default/web-"), "%d", &k)
			res.perBackend[k]++
			seen[r.Pod] = true
		}
		if len(seen) == 1 {
			res.pinned++
		}
	}
	return res, nil
}
