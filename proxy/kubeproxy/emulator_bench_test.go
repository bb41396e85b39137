package kubeproxy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator/emutest"
)

// probeBench is a netsim network whose node runs n services of kube-proxy's layout (10
// endpoints each, all of them pods of the node serving TCP 8080) in the emulator.
type probeBench struct {
	c       *netsim.Network
	detach  func()
	targets []netip.Addr
	p       netsim.Probe
	i       int
}

func newProbeBench(b *testing.B, n, distinct int) *probeBench {
	c, err := netsim.New(netsim.Config{Seed: 1, ManualClock: true, Nodes: []netsim.NodeConfig{{Name: "node-a"}}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.StartPod("node-a", "ns", "client", nil, false); err != nil {
		b.Fatal(err)
	}
	var eps []string
	for j := 0; j < 10; j++ {
		p, err := c.StartPod("node-a", "ns", fmt.Sprintf("ep%d", j), nil, false)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Serve(netfilter.ProtoTCP, 8080); err != nil {
			b.Fatal(err)
		}
		eps = append(eps, p.IP().String())
	}
	e, err := emulator.Load(emutest.KubeDumpTo(n, 10, func(_, j int) string { return eps[j] }, 8080), emulator.IPv4, "bench")
	if err != nil {
		b.Fatal(err)
	}
	pb := &probeBench{c: c, detach: AttachEmulator(e, c.Node("node-a"), "iptables"), p: netsim.Probe{From: "pod:ns/client", Proto: netfilter.ProtoTCP}}
	r := rand.New(rand.NewPCG(1, 2))
	var hot []netip.Addr
	for i := 0; i < distinct; i++ {
		hot = append(hot, netip.MustParseAddr(emutest.ClusterIP(r.IntN(n))))
	}
	pb.targets = make([]netip.Addr, 8192)
	for i := range pb.targets {
		if hot != nil {
			pb.targets[i] = hot[i%len(hot)]
		} else {
			pb.targets[i] = netip.MustParseAddr(emutest.ClusterIP(r.IntN(n)))
		}
	}
	for range pb.targets {
		pb.probe(b)
	}
	return pb
}

func (pb *probeBench) close() { pb.detach(); pb.c.Close() }

// probe sends the next probe and checks that it reached an endpoint.
func (pb *probeBench) probe(b *testing.B) {
	i := pb.i
	pb.i++
	pb.p.Dst, pb.p.SrcPort = netip.AddrPortFrom(pb.targets[i%len(pb.targets)], 80), uint16(1024+i%60000)
	res, err := pb.c.Probe(pb.p)
	if err != nil {
		b.Fatal(err)
	}
	if len(res) != 1 || res[0].Result != netsim.ResultDelivered || res[0].Addr.Port() != 8080 {
		b.Fatalf("probe to %v: %v", pb.p.Dst, res)
	}
	if i%50000 == 49999 {
		pb.c.Clock().Advance(time.Hour) // let conntrack entries expire as they would
	}
}

// BenchmarkProbeServices is the probe target: one netsim probe (a TCP SYN from a
// pod through the node's datapath — the emulator's tables at PREROUTING, FORWARD and
// POSTROUTING — delivered to an endpoint pod) at 100 and at 10,000 services of
// kube-proxy's layout with 10 endpoints each. The two clusters are probed in alternating
// blocks of 1,000 in the same run, so that the load of a shared machine falls on both
// alike; it reports the time per probe at each size and their ratio. "spread" draws each
// probe's service at random among all services (at 10,000 services the rules touched
// miss the CPU caches); "hot" cycles through 64 of them.
func BenchmarkProbeServices(b *testing.B) {
	for _, bc := range []struct {
		name     string
		distinct int
	}{{"hot", 64}, {"spread", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			small, large := newProbeBench(b, 100, bc.distinct), newProbeBench(b, 10000, bc.distinct)
			defer small.close()
			defer large.close()
			var tSmall, tLarge time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(1000, b.N-done)
				for k, pb := range []*probeBench{small, large} {
					start := time.Now()
					for j := 0; j < n; j++ {
						pb.probe(b)
					}
					if k == 0 {
						tSmall += time.Since(start)
					} else {
						tLarge += time.Since(start)
					}
				}
				done += n
			}
			b.ReportMetric(float64(tSmall.Nanoseconds())/float64(b.N), "ns/probe@100")
			b.ReportMetric(float64(tLarge.Nanoseconds())/float64(b.N), "ns/probe@10000")
			b.ReportMetric(float64(tLarge)/float64(tSmall), "ratio")
		})
	}
}
