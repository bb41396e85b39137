package nftables

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/knftables"

	"github.com/clusterlab/clusterlab/proxy/iptables"
)

// benchInput returns n ClusterIP Services with one TCP port and an EndpointSlice each
// of eps ready endpoints on 50 nodes, one endpoint in fifty on the test node.
func benchInput(n, eps int) ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	services := make([]*corev1.Service, n)
	slices := make([]*discoveryv1.EndpointSlice, n)
	for i := range n {
		ns, name := fmt.Sprintf("ns%d", i%100), fmt.Sprintf("svc%d", i)
		services[i] = makeService(ns, name, fmt.Sprintf("172.%d.%d.%d", 16+i>>16, (i>>8)&255, i&255), "http", 80)
		ips := make([]string, eps)
		for e := range ips {
			k := i*eps + e
			ips[e] = fmt.Sprintf("10.%d.%d.%d", k>>16, (k>>8)&255, k&255)
		}
		sl := makeSlice(ns, name, "http", 8080, ips...)
		for e := range sl.Endpoints {
			if (i+e)%50 != 0 {
				node := fmt.Sprintf("node-%d", (i+e)%50)
				sl.Endpoints[e].NodeName = &node
			}
		}
		slices[i] = sl
	}
	return services, slices
}

// BenchmarkRender10kServices10Endpoints is issue 14's target: kube-proxy's first
// nftables transaction for 10,000 services × 10 endpoints (objects → nft -f text),
// under 300 ms.
func BenchmarkRender10kServices10Endpoints(b *testing.B) {
	services, slices := benchInput(10000, 10)
	cfg := upstreamConfig(corev1.IPv4Protocol)
	b.ReportAllocs()
	var size int
	for b.Loop() {
		out, err := Render(services, slices, cfg)
		if err != nil {
			b.Fatal(err)
		}
		size = len(out)
	}
	b.ReportMetric(float64(size)/1e6, "MB/ruleset")
}

// BenchmarkIptablesRender10kServices10Endpoints is the anchor: the iptables mode's
// full ruleset for the same objects and node.
func BenchmarkIptablesRender10kServices10Endpoints(b *testing.B) {
	services, slices := benchInput(10000, 10)
	cfg := iptables.Config{Node: testNode()}
	b.ReportAllocs()
	var size int
	for b.Loop() {
		out, err := iptables.Render(services, slices, cfg, iptables.RenderOptions{})
		if err != nil {
			b.Fatal(err)
		}
		size = len(out)
	}
	b.ReportMetric(float64(size)/1e6, "MB/ruleset")
}

// discard is an Interface that takes every transaction and keeps nothing.
type discard struct{}

func (discard) NewTransaction() *knftables.Transaction { return NewTransaction(corev1.IPv4Protocol) }
func (discard) Run(context.Context, *knftables.Transaction) error {
	return nil
}

// BenchmarkPartialSync10kServices measures a Proxier sync (change tracking and the
// transaction, not its text) after one Service's endpoints changed, with 10,000
// services × 10 endpoints in place.
func BenchmarkPartialSync10kServices(b *testing.B) {
	services, slices := benchInput(10000, 10)
	p, err := NewProxier(discard{}, nil, upstreamConfig(corev1.IPv4Protocol))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.Sync(ctx, services, slices); err != nil {
		b.Fatal(err)
	}
	alt := []*discoveryv1.EndpointSlice{slices[0], slices[0].DeepCopy()}
	alt[1].Endpoints = alt[1].Endpoints[:5]
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		slices[0] = alt[i%2]
		res, err := p.Sync(ctx, services, slices)
		if err != nil {
			b.Fatal(err)
		}
		if res.Full {
			b.Fatal("full sync")
		}
	}
}
