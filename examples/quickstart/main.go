// Command quickstart is clusterlab as a library in about 30 lines: a two-node cluster with
// kube-proxy's iptables mode and cluster DNS, a Service with two backends, and a client
// pod that connects to the Service by name with ordinary Go networking code.
package main

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/dns"
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
	c, err := cluster.New(cluster.Config{Seed: 1,
		Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}},
		Proxy: kubeproxy.Factory(kubeproxy.Options{Mode: kubeproxy.IPTables})})
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := dns.InstallClusterDNS(c, dns.ClusterDNSOptions{}); err != nil {
		return err
	}
	if err := c.Apply(service.NewService("default/web", service.Selector("app=web"), service.Port("http", 80, 8080))); err != nil {
		return err
	}
	for i, node := range []string{"node-a", "node-b"} {
		pod := service.NewPod(fmt.Sprintf("default/web-%d", i), service.Labels("app=web"),
			service.ContainerPort("http", 8080, corev1.ProtocolTCP), service.OnNode(node))
		if _, err := c.CreatePod(pod); err != nil { // the kubelet runs a "whoami" server on 8080
			return err
		}
	}
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		return err
	}
	for i := 0; i < 4; i++ {
		conn, err := client.Net().Dial("tcp", "web:80") // resolved by kube-dns, DNATed by kube-proxy
		if err != nil {
			return err
		}
		fmt.Fprintln(conn, "hello")
		line, err := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if err != nil {
			return err
		}
		who, err := netsim.ParseWhoami(line)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "web:80 answered by %s on %s; it saw the client as %s\n", who.Pod, who.Node, who.Client)
	}
	return nil
}
