package kubeproxy

import (
	"fmt"
	"testing"

	"github.com/clusterlab/clusterlab/internal/benchutil"
)

// BenchmarkHotPathBulk is BenchmarkModes's bulk subject alone (no anchors, no
// alternation): one connection through a ClusterIP carrying 16 MiB (4 MiB with -short)
// per op, at 10 Services (-hotpath.services), for profiling the bulk path and for A/B
// pairs of the subject's CPU, which the anchors' blocks do not disturb;
// cpu-ns/op is the process's CPU time (getrusage) per op.
//
//	go test ./proxy/kubeproxy/ -run '^$' -bench '^BenchmarkHotPathBulk$/mode=iptables' -benchtime 40x -cpuprofile cpu.out
func BenchmarkHotPathBulk(b *testing.B) {
	size := 16 << 20
	if testing.Short() {
		size = 4 << 20
	}
	for _, mode := range Modes() {
		b.Run(fmt.Sprintf("mode=%s", mode), func(b *testing.B) {
			mb := newModeBench(b, mode, *hotServices)
			defer mb.close()
			op := func() error { return bulkOnce(mb.client.Net().DialContext, mb.vip.String(), size) }
			for range 3 { // warm-up: the first connections fault the heap's pages in
				if err := op(); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			cpu := benchutil.CPUTime()
			for range b.N {
				if err := op(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(benchutil.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(size)/(float64(b.Elapsed().Nanoseconds())/float64(b.N))*1e3, "MB/s")
			// Trains (netsim's train.go) passed whole and cut at a node's entry, per op,
			// both nodes and the warm-up included.
			var whole, cut uint64
			for _, n := range mb.c.Nodes() {
				w, k := n.TrainCounts()
				whole, cut = whole+w, cut+k
			}
			b.ReportMetric(float64(whole)/float64(b.N), "trains-whole/op")
			b.ReportMetric(float64(cut)/float64(b.N), "trains-cut/op")
		})
	}
}
