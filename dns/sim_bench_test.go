package dns

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"
)

// BenchmarkClusterDNSLookup: one stub lookup of an FQDN (A and AAAA on one
// UDP socket) per op. "simulated": from a pod on node-b through the kube-dns
// VIP (iptables mode, conntrack, DNAT) to the DNS pod on node-a and back,
// every packet through two simulated nodes and two netstacks. "loopback"
// (the anchor, same run): the same stub and a server over the same store on
// a real 127.0.0.1 UDP socket.
func BenchmarkClusterDNSLookup(b *testing.B) {
	c, err := cluster.New(cluster.Config{Seed: 7, Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}},
		Proxy: kubeproxy.Factory(kubeproxy.Options{Mode: kubeproxy.IPTables})})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	cd, err := InstallClusterDNS(c, ClusterDNSOptions{Replicas: 1, Nodes: []string{"node-a"}})
	if err != nil {
		b.Fatal(err)
	}
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-b")))
	if err != nil {
		b.Fatal(err)
	}
	const name = "kubernetes.default.svc.cluster.local."
	run := func(b *testing.B, st *Stub) {
		ctx := context.Background()
		for b.Loop() {
			res, err := st.Lookup(ctx, name, FamilyAny)
			if err != nil || len(res.Addrs) != 1 {
				b.Fatalf("%v %v", res, err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
	}
	b.Run("simulated", func(b *testing.B) {
		st := NewStub(cd.Resolver("default", "client").Conf, client.Net().DialContext)
		st.Timeout = 5 * time.Second
		run(b, st)
	})
	b.Run("loopback", func(b *testing.B) {
		srv, err := New(c.Store(), Config{Zones: []string{"cluster.local"}, TTL: 30, Pods: PodsInsecure})
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Close()
		udp, tcp := listen(b, srv)
		st := NewStub(cd.Resolver("default", "client").Conf, func(ctx context.Context, network, _ string) (net.Conn, error) {
			addr := udp
			if network == "tcp" {
				addr = tcp
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		})
		st.Timeout = 5 * time.Second
		run(b, st)
	})
}
