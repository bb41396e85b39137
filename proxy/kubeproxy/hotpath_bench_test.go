package kubeproxy

import (
	"flag"
	"fmt"
	"testing"

	"github.com/clusterlab/clusterlab/internal/benchutil"
)

// BenchmarkHotPath is BenchmarkModes's subject alone (no anchors): a probe
// or a connection through one mode at 10 Services, for profiling the per-packet path
// (-cpuprofile, -memprofile, -benchmem count the subject's work only); cpu-ns/op is the
// process's CPU time (getrusage) per op.
//
//	go test ./proxy/kubeproxy/ -run '^$' -bench '^BenchmarkHotPath$/kind=probe/mode=iptables' -benchmem -cpuprofile cpu.out
//
// -hotpath.services sets the Service count (10 by default), to compare with
// BenchmarkModes's 10,000-Service rows.
func BenchmarkHotPath(b *testing.B) {
	for _, mode := range Modes() {
		var mb *modeBench
		for _, kind := range []string{"probe", "connect"} {
			b.Run(fmt.Sprintf("kind=%s/mode=%s", kind, mode), func(b *testing.B) {
				if mb == nil {
					mb = newModeBench(b, mode, *hotServices)
				}
				op := mb.probeOnce
				if kind == "connect" {
					op = mb.connect
				}
				b.ResetTimer()
				cpu := benchutil.CPUTime()
				for range b.N {
					if err := op(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(benchutil.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
		if mb != nil {
			mb.close()
		}
	}
}

var hotServices = flag.Int("hotpath.services", 10, "BenchmarkHotPath's Service count")
