// Command headless-dns shows a headless Service (clusterIP: None) and its DNS records:
// the name answers with every ready pod's own address, SRV records name each pod, and
// pods with hostname and subdomain get names of their own.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/dns"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"
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
	cd, err := dns.InstallClusterDNS(c, dns.ClusterDNSOptions{})
	if err != nil {
		return err
	}
	if err := c.Apply(service.NewService("default/db", service.Headless(), service.Selector("app=db"), service.Port("pg", 5432, 5432))); err != nil {
		return err
	}
	for i, node := range []string{"node-a", "node-b"} {
		name := fmt.Sprintf("db-%d", i)
		pod := service.NewPod("default/"+name, service.Labels("app=db"), service.Hostname(name), service.Subdomain("db"),
			service.ContainerPort("pg", 5432, corev1.ProtocolTCP), service.OnNode(node))
		if _, err := c.CreatePod(pod); err != nil {
			return err
		}
	}
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		return err
	}
	// dig @10.96.0.10 from the client pod, through kube-proxy to a CoreDNS-like pod.
	ask := func(name string, qtype uint16) error {
		m, err := cd.Query(context.Background(), client.Net(), "udp", name, qtype)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s %s: %s\n", mdns.TypeToString[qtype], name, mdns.RcodeToString[m.Rcode])
		for _, rr := range m.Answer {
			fmt.Fprintf(w, "  %s\n", rr)
		}
		for _, rr := range m.Extra {
			fmt.Fprintf(w, "  (additional) %s\n", rr)
		}
		return nil
	}
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"db.default.svc.cluster.local.", mdns.TypeA},
		{"db-1.db.default.svc.cluster.local.", mdns.TypeA},
		{"_pg._tcp.db.default.svc.cluster.local.", mdns.TypeSRV},
	} {
		if err := ask(q.name, q.qtype); err != nil {
			return err
		}
	}
	// The pod's own resolver walks its search list: "db" is enough inside the namespace.
	r := cd.Resolver("default", "client")
	addrs, err := r.Resolve(context.Background(), "db")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "the client's resolver: db -> %v\n", addrs)
	// A pod that is not ready leaves the answer.
	if err := c.SetPodReady("default", "db-1", false); err != nil {
		return err
	}
	return ask("db.default.svc.cluster.local.", mdns.TypeA)
}
