package dns

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// perfQueries is the query mix of the benchmarks and of the dnsperf run in
// docs/PERFORMANCE.md: services, headless and endpoint names, SRV, PTR and
// the NXDOMAINs a pod's search list produces.
var perfQueries = []struct {
	name  string
	qtype uint16
}{
	{"svc1.testns.svc.cluster.local.", mdns.TypeA},
	{"svc1.testns.svc.cluster.local.", mdns.TypeAAAA},
	{"svc-dual-stack.testns.svc.cluster.local.", mdns.TypeAAAA},
	{"hdls1.testns.svc.cluster.local.", mdns.TypeA},
	{"web-0.web.testns.svc.cluster.local.", mdns.TypeA},
	{"_http._tcp.web.testns.svc.cluster.local.", mdns.TypeSRV},
	{"_http._tcp.hdls1.testns.svc.cluster.local.", mdns.TypeSRV},
	{"1.0.0.10.in-addr.arpa.", mdns.TypePTR},
	{"kube-dns.kube-system.svc.cluster.local.", mdns.TypeA},
	{"svc1.testns.default.svc.cluster.local.", mdns.TypeA},
	{"example.com.testns.svc.cluster.local.", mdns.TypeA},
	{"example.com.svc.cluster.local.", mdns.TypeAAAA},
}

func perfMsgs() []*mdns.Msg {
	var out []*mdns.Msg
	for _, q := range perfQueries {
		m := new(mdns.Msg)
		m.SetQuestion(q.name, q.qtype)
		out = append(out, m)
	}
	return out
}

// BenchmarkHandle: one query answered in process (parse, lookup, reply).
func BenchmarkHandle(b *testing.B) {
	s := newTestServer(b, nil)
	msgs := perfMsgs()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if s.Handle(ctx, msgs[i%len(msgs)], "udp") == nil {
			b.Fatal("no reply")
		}
	}
}

// BenchmarkHandleWire: the same from and to wire format.
func BenchmarkHandleWire(b *testing.B) {
	s := newTestServer(b, nil)
	var wires [][]byte
	for _, m := range perfMsgs() {
		wires = append(wires, wire(m))
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if s.HandleWire(ctx, wires[i%len(wires)], "udp") == nil {
			b.Fatal("no reply")
		}
	}
}

// BenchmarkUDPLoopback: queries per second through a real UDP socket on
// 127.0.0.1 with 8 concurrent clients (b.RunParallel), miekg/dns on both
// ends; the Go load tool beside dnsperf.
func BenchmarkUDPLoopback(b *testing.B) {
	s := newTestServer(b, nil)
	udp, _ := listen(b, s)
	msgs := perfMsgs()
	b.SetParallelism(4) // × GOMAXPROCS clients
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := &mdns.Client{Net: "udp"}
		conn, err := c.Dial(udp)
		if err != nil {
			b.Error(err)
			return
		}
		defer conn.Close()
		i := 0
		for pb.Next() {
			m := msgs[i%len(msgs)].Copy()
			m.Id = mdns.Id()
			if _, _, err := c.ExchangeWithConn(m, conn); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "queries/s")
}

// bigCluster is n services in 10 namespaces, every 10th headless, each with
// 3 ready endpoints.
func bigCluster(n int) []runtime.Object {
	var objs []runtime.Object
	for i := 0; i < n; i++ {
		ns := fmt.Sprintf("ns%d", i%10)
		name := fmt.Sprintf("svc%d", i)
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.ServiceSpec{
				ClusterIP: fmt.Sprintf("10.96.%d.%d", i/250, i%250+1),
				Ports:     []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
			},
		}
		if i%10 == 0 {
			svc.Spec.ClusterIP = corev1.ClusterIPNone
		}
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-x", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		for j := 0; j < 3; j++ {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", 100+j, i/250, i%250+1)}})
		}
		objs = append(objs, svc, sl)
	}
	return objs
}

// BenchmarkIndexBuild: rebuilding the index after a change, 10,000 services.
func BenchmarkIndexBuild(b *testing.B) {
	src := NewStaticSource(bigCluster(10000)...)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buildIndex(src, "cluster.local.", false, nil)
	}
}

// BenchmarkHandleLargeCluster: query cost does not grow with the cluster
// (compare with BenchmarkHandle on the 20-service fixture).
func BenchmarkHandleLargeCluster(b *testing.B) {
	s, err := New(NewStaticSource(bigCluster(10000)...), DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	var msgs []*mdns.Msg
	for i := 0; i < 100; i++ {
		m := new(mdns.Msg)
		m.SetQuestion(fmt.Sprintf("svc%d.ns%d.svc.cluster.local.", i*97%10000, i*97%10), mdns.TypeA)
		msgs = append(msgs, m)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := s.Handle(ctx, msgs[i%len(msgs)], "udp"); r == nil || len(r.Answer) == 0 {
			b.Fatal("no answer")
		}
	}
}

var perfOut = flag.String("perf-out", "", "write the dnsperf query file and equivalent zone files for the reference server into this directory (see docs/PERFORMANCE.md)")

// TestWritePerfFiles writes, when -perf-out is given, what the dnsperf
// comparison needs: queries.txt (dnsperf's "name type" lines for
// perfQueries) and zone files holding every record the server gives for
// them (cluster.local.zone, in-addr.arpa.zone) so that CoreDNS's file plugin
// serves the same answers.
func TestWritePerfFiles(t *testing.T) {
	if *perfOut == "" {
		t.Skip("only with -perf-out DIR")
	}
	s := newTestServer(t, nil)
	zones := map[string]map[string]bool{"cluster.local.": {}, "in-addr.arpa.": {}}
	var queries strings.Builder
	for _, m := range perfMsgs() {
		q := m.Question[0]
		fmt.Fprintf(&queries, "%s %s\n", q.Name, mdns.TypeToString[q.Qtype])
		r := direct(s, m, "udp")
		for _, rr := range append(append([]mdns.RR{}, r.Answer...), r.Extra...) {
			if rr.Header().Rrtype == mdns.TypeOPT {
				continue
			}
			for z, set := range zones {
				if inZone(strings.ToLower(rr.Header().Name), z) {
					set[rr.String()] = true
				}
			}
		}
	}
	for z, set := range zones {
		ns := "ns.dns." + z
		lines := []string{
			fmt.Sprintf("%s 5 IN SOA %s hostmaster.%s %d 7200 1800 86400 5", z, ns, z, fixedSerial),
			fmt.Sprintf("%s 5 IN NS %s", z, ns),
		}
		if z == "cluster.local." {
			lines = append(lines, ns+" 5 IN A 10.96.0.10")
		}
		var recs []string
		for rr := range set {
			recs = append(recs, rr)
		}
		sort.Strings(recs)
		lines = append(lines, recs...)
		if err := os.WriteFile(filepath.Join(*perfOut, strings.TrimSuffix(z, ".")+".zone"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(*perfOut, "queries.txt"), []byte(queries.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
