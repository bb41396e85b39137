package iptables_test

import (
	"context"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/clusterlab/clusterlab/proxy/iptables"
)

func TestZZFirstPartials(t *testing.T) {
	services, slices := iptables.BenchCluster(10000, 10)
	f, _ := os.Create("/tmp/firstonly.prof")
	var total time.Duration
	for rep := range 10 {
		p, _ := emulatorSync(t, services, slices)
		alt := append([]*discoveryv1.EndpointSlice(nil), slices...)
		changed := slices[17].DeepCopy()
		changed.Endpoints = changed.Endpoints[1:]
		alt[17] = changed
		runtime.GC()
		if rep == 0 {
			pprof.StartCPUProfile(f)
		}
		t0 := time.Now()
		if _, err := p.Sync(context.Background(), services, alt); err != nil {
			t.Fatal(err)
		}
		total += time.Since(t0)
		pprof.StopCPUProfile()
		if rep < 9 {
			// keep profiling only first syncs
		}
		if rep == 0 {
			f.Close()
			f, _ = os.Create("/dev/null")
		}
	}
	t.Logf("first partial mean %v", total/10)
}
