// Command nodeport-local compares externalTrafficPolicy Cluster and Local on a NodePort
// Service whose one backend runs on node-b, reached by a client outside the cluster
// through node-a and through node-b.
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
	laptop, err := c.AddExternalHost("laptop", netip.Addr{})
	if err != nil {
		return err
	}
	err = c.Apply(
		service.NewService("default/web-cluster", service.Selector("app=web"), service.Port("", 80, 8080), service.NodePort(),
			service.WithNodePort("", 30080), service.ExternalTrafficPolicy(corev1.ServiceExternalTrafficPolicyCluster)),
		service.NewService("default/web-local", service.Selector("app=web"), service.Port("", 80, 8080), service.NodePort(),
			service.WithNodePort("", 30081), service.ExternalTrafficPolicy(corev1.ServiceExternalTrafficPolicyLocal)))
	if err != nil {
		return err
	}
	pod := service.NewPod("default/web-0", service.Labels("app=web"), service.ContainerPort("", 8080, corev1.ProtocolTCP), service.OnNode("node-b"))
	if _, err := c.CreatePod(pod); err != nil {
		return err
	}
	fmt.Fprintf(w, "laptop %s; node-a %s; node-b %s (runs web-0)\n", laptop.IP(), c.Node("node-a").IP(), c.Node("node-b").IP())
	for _, svc := range []struct {
		name   string
		port   uint16
		policy string
	}{{"web-cluster", 30080, "Cluster"}, {"web-local", 30081, "Local"}} {
		for _, node := range []string{"node-a", "node-b"} {
			dst := netip.AddrPortFrom(c.Node(node).IP(), svc.port)
			r, err := c.ProbeOne(netsim.Probe{From: "external:laptop", Proto: netfilter.ProtoTCP, Dst: dst, Mode: netsim.ProbeConnect})
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "externalTrafficPolicy %-7s via %s: ", svc.policy, node)
			switch {
			case r.Result != netsim.ResultConnected:
				fmt.Fprintf(w, "%s (%s)\n", r.Result, r.Reason)
			case r.SeenSrc.Addr() == laptop.IP():
				fmt.Fprintf(w, "%s answered and saw the laptop's own address %s\n", r.Pod, r.SeenSrc.Addr())
			default:
				fmt.Fprintf(w, "%s answered but saw %s, not the laptop\n", r.Pod, r.SeenSrc.Addr())
			}
		}
	}
	return nil
}
