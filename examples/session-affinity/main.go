// Command session-affinity shows sessionAffinity: ClientIP. Every new connection from a
// client goes to the backend its first one went to, as long as the client comes back
// within timeoutSeconds; another client gets its own draw; without affinity the same
// connections spread over every backend.
package main

import (
	"fmt"
	"io"
	"log"
	"net/netip"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"

	corev1 "k8s.io/api/core/v1"
)

func main() {
	if err := run(os.Stdout, kubeproxy.IPTables); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer, mode kubeproxy.Mode) error {
	c, err := cluster.New(cluster.Config{Seed: 7, ManualClock: true,
		Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}},
		Proxy: kubeproxy.Factory(kubeproxy.Options{Mode: mode})})
	if err != nil {
		return err
	}
	defer c.Close()
	err = c.Apply(
		service.NewService("default/sticky", service.Selector("app=web"), service.Port("", 80, 8080), service.ClientIPAffinity(60)),
		service.NewService("default/spread", service.Selector("app=web"), service.Port("", 80, 8080)))
	if err != nil {
		return err
	}
	for i := 0; i < 4; i++ {
		pod := service.NewPod(fmt.Sprintf("default/web-%d", i), service.Labels("app=web"), service.ContainerPort("", 8080, corev1.ProtocolTCP))
		if _, err := c.CreatePod(pod); err != nil {
			return err
		}
	}
	for _, name := range []string{"client-1", "client-2"} {
		if _, err := c.CreatePod(service.NewPod("default/" + name)); err != nil {
			return err
		}
	}
	// connect makes n connections (probes: each a full TCP handshake from a new port)
	// and counts the backends that answered.
	connect := func(from, svc string, n int) string {
		s, _ := c.Store().GetService("default", svc)
		vip := netip.AddrPortFrom(netip.MustParseAddr(s.Spec.ClusterIP), 80)
		counts := map[string]int{}
		for i := 0; i < n; i++ {
			r, err := c.ProbeOne(netsim.Probe{From: "pod:default/" + from, Proto: netfilter.ProtoTCP, Dst: vip, Mode: netsim.ProbeConnect})
			if err != nil || r.Result != netsim.ResultConnected {
				counts["failed: "+r.Outcome.String()]++
				continue
			}
			counts[strings.TrimPrefix(r.Pod, "default/")]++
		}
		var parts []string
		for k, v := range counts {
			parts = append(parts, fmt.Sprintf("%s x%d", k, v))
		}
		sort.Strings(parts)
		return strings.Join(parts, ", ")
	}
	fmt.Fprintf(w, "%s mode, sessionAffinity ClientIP, timeoutSeconds 60\n", mode)
	fmt.Fprintf(w, "client-1, 20 connections:         %s\n", connect("client-1", "sticky", 20))
	fmt.Fprintf(w, "client-2, 20 connections:         %s\n", connect("client-2", "sticky", 20))
	c.Clock().Advance(50 * time.Second)
	fmt.Fprintf(w, "client-1 again after 50s idle:    %s\n", connect("client-1", "sticky", 10))
	c.Clock().Advance(61 * time.Second)
	fmt.Fprintf(w, "client-1 after 61s idle (expired): %s\n", connect("client-1", "sticky", 10))
	fmt.Fprintf(w, "no affinity, client-1, 40:        %s\n", connect("client-1", "spread", 40))
	return nil
}
