// Command dns-insert-race reproduces the 5-second DNS timeouts of Kubernetes nodes on
// Linux kernels before 5.6: glibc's resolver sends the A and AAAA queries of a lookup
// back to back from one UDP socket; on a node with several CPUs both packets can be
// between conntrack (where each gets an unconfirmed entry and kube-proxy's DNAT picks a
// CoreDNS pod) and confirmation at once. If the picks differ, the kernel drops the one
// that confirms second (conntrack -S counts insert_failed), and the resolver waits its
// 5 s timeout before asking again, one query at a time.
//
// The client's node holds its DNS packets so they are in flight together (HoldTogether)
// with the order of their steps picked at random from a seed, the proxy's CoreDNS pick
// too. The example runs 200 lookups on a 5.4 kernel, on 5.6 and on 5.4 with
// single-request-reopen, and compares the rate of 5 s waits with the probability the
// all-branches enumeration of the two packets gives.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/netip"
	"os"
	"time"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/dns"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"
)

func main() {
	if err := run(os.Stdout, 200); err != nil {
		log.Fatal(err)
	}
}

// lookups is what n lookups on one node did.
type lookups struct {
	n, waited    int
	insertFailed uint64
	clashResolve uint64
	allBranches  float64 // the probability of a lost query over every interleaving and pick
}

func run(w io.Writer, n int) error {
	for _, c := range []struct {
		name    string
		kernel  netfilter.KernelVersion
		options []string
	}{
		{"Linux 5.4", netfilter.KernelVersion{Major: 5, Minor: 4}, nil},
		{"Linux 5.6", netfilter.KernelVersion{Major: 5, Minor: 6}, nil},
		{"Linux 5.4, single-request-reopen", netfilter.KernelVersion{Major: 5, Minor: 4}, []string{"single-request-reopen"}},
	} {
		l, err := measure(c.kernel, c.options, n)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		odds := fmt.Sprintf("all branches %.3f", l.allBranches)
		if len(c.options) > 0 {
			odds = "never in flight together" // the AAAA query leaves after the A reply
		}
		fmt.Fprintf(w, "%-34s %3d of %d lookups waited 5s (%.3f; %s)  insert_failed=%d clash_resolve=%d\n",
			c.name+":", l.waited, l.n, float64(l.waited)/float64(l.n), odds, l.insertFailed, l.clashResolve)
	}
	return nil
}

func measure(kernel netfilter.KernelVersion, options []string, n int) (lookups, error) {
	c, err := cluster.New(cluster.Config{Seed: 1, ManualClock: true,
		Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}},
		Proxy: kubeproxy.Factory(kubeproxy.Options{Mode: kubeproxy.IPTables})})
	if err != nil {
		return lookups{}, err
	}
	defer c.Close()
	cd, err := dns.InstallClusterDNS(c, dns.ClusterDNSOptions{}) // two CoreDNS pods behind kube-dns
	if err != nil {
		return lookups{}, err
	}
	if err := c.Apply(service.NewService("default/web", service.Selector("app=web"), service.Port("http", 80, 8080))); err != nil {
		return lookups{}, err
	}
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		return lookups{}, err
	}
	node := c.Node("node-a").Node
	node.UpdateSettings(func(s *netsim.NodeSettings) { s.Kernel = kernel })

	// Every way the A and AAAA packets of one socket can go through node-a together,
	// with its probability: the order of their steps and kube-proxy's pick for each.
	vip, src := netip.AddrPortFrom(cd.ServiceIP(), 53), netip.AddrPortFrom(client.IP(), 40000)
	branches, err := netsim.SendTogetherBranches(func() (*netsim.Node, []netsim.InFlight) {
		node.Conntrack().Flush()
		return node, []netsim.InFlight{
			{Data: netsim.BuildUDP(src, vip, []byte("A")), Pod: client},
			{Data: netsim.BuildUDP(src, vip, []byte("AAAA")), Pod: client},
		}
	}, 0)
	if err != nil {
		return lookups{}, err
	}
	node.Conntrack().Flush()
	before := node.Conntrack().Stats()
	out := lookups{n: n}
	for _, b := range branches {
		for _, r := range b.Results {
			if r.Dropped() {
				out.allBranches += b.Prob
				break
			}
		}
	}

	pr := cd.Resolver("default", "client")
	conf := pr.Conf
	conf.Options = append(append([]string(nil), conf.Options...), options...)
	for seed := uint64(1); seed <= uint64(n); seed++ {
		node.HoldTogether(netsim.Together{
			Match: func(p *netsim.Packet) bool {
				return p.Proto == netfilter.ProtoUDP && p.DstPort == 53 && p.Src == client.IP()
			},
			Interleaving: netsim.Interleaving{Random: true, Seed: seed},
		})
		stub := dns.NewStub(conf, pr.Stub.Dial) // a new process: glibc's fallback state is fresh
		res, err := dns.LookupOnClock(context.Background(), c, stub, "web.default.svc.cluster.local.", dns.FamilyAny)
		if err != nil {
			return out, err
		}
		if res.Waited >= 5*time.Second {
			out.waited++
		}
	}
	after := node.Conntrack().Stats()
	out.insertFailed = after.InsertFailed - before.InsertFailed
	out.clashResolve = after.ClashResolve - before.ClashResolve
	return out, nil
}
