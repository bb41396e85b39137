// Command service-proxy-name shows the labels that make kube-proxy leave a Service
// alone. kube-proxy lists Services with the selector
// "!service.kubernetes.io/service-proxy-name", so a Service labelled for another proxy
// does not exist for it: no rule, and its cluster IP is dead as a deleted Service's,
// while its EndpointSlice and DNS name are there as usual. node-c runs the proxy named
// my-proxy instead: it serves only the Service labelled for it. Before 1.35 kube-proxy
// also left out Services labelled service.kubernetes.io/headless (node-a runs 1.34, node-b
// the current release).
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/netip"
	"os"
	"slices"
	"strings"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/dns"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer) error {
	// node-a runs kube-proxy 1.34, from before the watches split.
	tune := func(nc *proxy.NodeConfig) {
		if nc.Name == "node-a" {
			nc.Version = 34
		}
	}
	c, err := cluster.New(cluster.Config{Seed: 1, ManualClock: true,
		Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c", ProxyName: "my-proxy"}},
		Proxy: kubeproxy.Factory(kubeproxy.Options{Mode: kubeproxy.IPTables, Node: tune})})
	if err != nil {
		return err
	}
	defer c.Close()
	cd, err := dns.InstallClusterDNS(c, dns.ClusterDNSOptions{})
	if err != nil {
		return err
	}
	svc := func(name, labels string) *corev1.Service {
		opts := []service.Option{service.Selector("app=web"), service.Port("http", 80, 8080)}
		if labels != "" {
			opts = append(opts, service.Labels(labels))
		}
		return service.NewService("default/"+name, opts...)
	}
	if err := c.Apply(
		svc("web", ""),
		svc("mesh", proxy.LabelServiceProxyName+"=my-proxy"),
		svc("unproxied", proxy.LabelHeadless+"="),
	); err != nil {
		return err
	}
	if _, err := c.CreatePod(service.NewPod("default/web-0", service.Labels("app=web"),
		service.ContainerPort("http", 8080, corev1.ProtocolTCP), service.OnNode("node-b"))); err != nil {
		return err
	}
	for _, n := range []string{"a", "b", "c"} {
		if _, err := c.CreatePod(service.NewPod("default/client-"+n, service.OnNode("node-"+n))); err != nil {
			return err
		}
	}

	vips := map[string]netip.AddrPort{}
	for _, name := range []string{"web", "mesh", "unproxied"} {
		s, _ := c.Store().GetService("default", name)
		vips[name] = netip.AddrPortFrom(netip.MustParseAddr(s.Spec.ClusterIP), 80)
		labels := "no labels"
		for k, v := range s.Labels { // one at most here
			labels = "label " + k + "=" + v
		}
		fmt.Fprintf(w, "service default/%s %s, %s\n", name, vips[name], labels)
	}

	// Which Services each node's proxy wrote rules for: the KUBE-SERVICES jumps.
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		n := c.Node(node)
		nc := kubeproxy.NodeConfigFor(n)
		tune(&nc)
		who := "kube-proxy " + nc.Version.Resolved().String()
		if nc.ProxyName != "" {
			who = "proxy " + nc.ProxyName
		}
		fmt.Fprintf(w, "\n%s (%s) watches Services %q, EndpointSlices %q; nat KUBE-SERVICES:\n",
			node, who, nc.ServiceSelector(), nc.EndpointSliceSelector())
		save, err := kubeproxy.Emulator(n, netip.Addr{}).Save(context.Background(), "nat")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(save), "\n") {
			if strings.HasPrefix(line, "-A KUBE-SERVICES ") && strings.Contains(line, "default/") {
				fmt.Fprintf(w, "  %s\n", line)
			}
		}
	}

	// A TCP connection from a pod on each node to each cluster IP.
	fmt.Fprintln(w)
	for _, from := range []string{"client-a", "client-b", "client-c"} {
		for _, name := range []string{"web", "mesh", "unproxied"} {
			r, err := c.ProbeOne(netsim.Probe{From: "pod:default/" + from, Proto: netfilter.ProtoTCP, Dst: vips[name], Mode: netsim.ProbeConnect})
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%s -> %-9s %s\n", from, name, r.Outcome)
		}
	}

	// What the API server and DNS say about them: as for any Service.
	fmt.Fprintln(w)
	for _, name := range []string{"mesh", "unproxied"} {
		for _, sl := range c.Store().EndpointSlicesFor("default", name) {
			var keys []string
			for k, v := range sl.Labels {
				keys = append(keys, k+"="+v)
			}
			slices.Sort(keys)
			fmt.Fprintf(w, "EndpointSlice %s: %d endpoint(s), labels %s\n", sl.Name, len(sl.Endpoints), strings.Join(keys, ","))
		}
	}
	client := c.Pod("default", "client-a")
	for _, name := range []string{"mesh", "unproxied"} {
		m, err := cd.Query(context.Background(), client.Net(), "udp", name+".default.svc.cluster.local.", mdns.TypeA)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "A %s.default.svc.cluster.local.: %s", name, mdns.RcodeToString[m.Rcode])
		for _, rr := range m.Answer {
			fmt.Fprintf(w, " %s", rr.(*mdns.A).A)
		}
		fmt.Fprintln(w)
	}
	return nil
}
