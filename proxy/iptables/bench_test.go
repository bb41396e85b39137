package iptables

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/clusterlab/clusterlab/internal/benchutil"
	"github.com/clusterlab/clusterlab/proxy"
)

// benchCluster builds n ClusterIP Services with one TCP port each and an EndpointSlice
// of eps ready endpoints spread over 50 nodes (one in fifty on this node).
func benchCluster(n, eps int) ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	services := make([]*corev1.Service, 0, n)
	slices := make([]*discoveryv1.EndpointSlice, 0, n)
	for i := 0; i < n; i++ {
		ns, name := fmt.Sprintf("ns%d", i%100), fmt.Sprintf("svc%d", i)
		services = append(services, mkService(ns, name, fmt.Sprintf("172.%d.%d.%d", 16+i>>16, (i>>8)&255, i&255), withPort("http", 80, corev1.ProtocolTCP)))
		var ips []string
		for e := 0; e < eps; e++ {
			k := i*eps + e
			ips = append(ips, fmt.Sprintf("10.%d.%d.%d", k>>16, (k>>8)&255, k&255))
		}
		sl := mkSlice(ns, name, 1, "http", 8080, corev1.ProtocolTCP, ips...)
		for e := range sl.Endpoints {
			node := fmt.Sprintf("node-%d", (i+e)%50)
			if node == "node-0" {
				node = testNodeName
			}
			sl.Endpoints[e].NodeName = &node
		}
		slices = append(slices, sl)
	}
	return services, slices
}

// BenchmarkRender10kServices10Endpoints is the target: the full ruleset for
// 10,000 services × 10 endpoints (objects → restore text), under 300 ms.
func BenchmarkRender10kServices10Endpoints(b *testing.B) {
	services, slices := benchCluster(10000, 10)
	cfg := upstreamConfig(corev1.IPv4Protocol)
	b.ReportAllocs()
	var size int
	for b.Loop() {
		out, err := Render(services, slices, cfg, RenderOptions{})
		if err != nil {
			b.Fatal(err)
		}
		size = len(out)
	}
	b.ReportMetric(float64(size)/1e6, "MB/ruleset")
}

// BenchmarkGenerate10kServices10Endpoints is the text generation alone, from a view
// already built (what a Proxier's full sync spends after its change tracker).
func BenchmarkGenerate10kServices10Endpoints(b *testing.B) {
	services, slices := benchCluster(10000, 10)
	cfg := upstreamConfig(corev1.IPv4Protocol)
	st, err := proxy.NewChangeTracker(corev1.IPv4Protocol, cfg.Node).Update(services, slices)
	if err != nil {
		b.Fatal(err)
	}
	r, _ := resolve(cfg)
	g := newGenerator(r)
	b.ReportAllocs()
	for b.Loop() {
		g.begin()
		g.services(st, true)
		g.finish(false)
	}
}

// BenchmarkFirstSync10kServices is the generator's and the change tracker's share of
// BenchmarkEmulatorSync10kServices/full: a new Proxier's first (full) sync of 10,000
// services × 10 endpoints into an Interface that discards the restore input (change
// tracking, the stale-chain check, generation; no emulator). It reports the process's
// CPU time per sync (GC workers included) as cpu-ms/op.
func BenchmarkFirstSync10kServices(b *testing.B) {
	services, slices := benchCluster(10000, 10)
	cfg := upstreamConfig(corev1.IPv4Protocol)
	cfg.NoNFAcct = true
	ctx := context.Background()
	b.ReportAllocs()
	start := benchutil.CPUTime()
	for b.Loop() {
		p, err := NewProxier(discardIPT{}, nil, cfg)
		if err != nil {
			b.Fatal(err)
		}
		res, err := p.Sync(ctx, services, slices)
		if err != nil {
			b.Fatal(err)
		}
		if !res.Full {
			b.Fatal("first sync is not full")
		}
	}
	b.ReportMetric(float64(benchutil.CPUTime()-start)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
}

// BenchmarkPartialSync10kServices measures a Proxier sync after one Service's
// endpoints changed, with 10,000 services × 10 endpoints in place.
func BenchmarkPartialSync10kServices(b *testing.B) {
	services, slices := benchCluster(10000, 10)
	cfg := upstreamConfig(corev1.IPv4Protocol)
	p, err := NewProxier(discardIPT{}, nil, cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.Sync(ctx, services, slices); err != nil {
		b.Fatal(err)
	}
	alt := append([]*discoveryv1.EndpointSlice(nil), slices...)
	changed := slices[17].DeepCopy()
	changed.Endpoints = changed.Endpoints[1:]
	alt[17] = changed
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		in := slices
		if i%2 == 0 {
			in = alt
		}
		i++
		if _, err := p.Sync(ctx, services, in); err != nil {
			b.Fatal(err)
		}
	}
}

// discardIPT accepts every restore and has no state.
type discardIPT struct{}

func (discardIPT) Restore(context.Context, []byte, RestoreOptions) error { return nil }
func (discardIPT) Save(context.Context, ...string) ([]byte, error)       { return nil, nil }
