package kubeproxy_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/internal/scale"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// BenchmarkScale builds a cluster of nodes/services/pods (internal/scale) in the iptables
// mode, once per size, and reports the build (every pod started, every node's first
// full sync: s/build, CPU cpu-s/build), the live heap a node (KiB/node) and the warm
// probe cost through random nodes (ns/probe, b.N probes). Sizes are sub-benchmarks;
// CLUSTERLAB_SCALE="N/S/P[,N/S/P...]" replaces them (e.g. 5000/10000/150000);
// CLUSTERLAB_SCALE_SHARE=0 turns Options.ShareRules off.
func BenchmarkScale(b *testing.B) {
	sizes := []string{"10/100/300", "50/1000/3000"}
	if v := os.Getenv("CLUSTERLAB_SCALE"); v != "" {
		sizes = strings.Split(v, ",")
	}
	for _, sz := range sizes {
		var cfg scale.Config
		if _, err := fmt.Sscanf(sz, "%d/%d/%d", &cfg.Nodes, &cfg.Services, &cfg.Pods); err != nil {
			b.Fatalf("CLUSTERLAB_SCALE size %q: want nodes/services/pods: %v", sz, err)
		}
		cfg.Seed, cfg.Mode = 1, kubeproxy.IPTables
		cfg.ShareRules = os.Getenv("CLUSTERLAB_SCALE_SHARE") != "0"
		b.Run(sz, func(b *testing.B) {
			bl, err := scale.Build(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer bl.Close()
			p := bl.NewProber(1)
			if _, _, err := p.Rate(2000); err != nil { // warm
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := p.Probe(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric((bl.Fill + bl.Start).Seconds(), "s/build")
			b.ReportMetric(bl.CPU.Seconds(), "cpu-s/build")
			b.ReportMetric(float64(bl.HeapAfter)/1024/float64(cfg.Nodes), "KiB/node")
		})
	}
}
