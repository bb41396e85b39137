package iptables_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/internal/benchutil"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
)

// recordingIPT is an emulator that keeps the last restore input it was given: the
// Proxier's own buffer, valid until its next sync (readers that keep a text across
// syncs copy it). Not a copy: copying the 32 MB full-sync text took 3-5 % of the
// full benchmark's time, the harness's cost, not kube-proxy's or the emulator's.
type recordingIPT struct {
	*emulator.Emulator
	last []byte
}

func (r *recordingIPT) Restore(ctx context.Context, data []byte, opts iptables.RestoreOptions) error {
	r.last = data
	return r.Emulator.Restore(ctx, data, opts)
}

// cpuMetric reports the CPU time per iteration since start as "cpu-ms/op".
func cpuMetric(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(benchutil.CPUTime()-start)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
}

// emulatorSync builds a Proxier writing into a new emulator and runs its first (full)
// sync of services and slices.
func emulatorSync(tb testing.TB, services []*corev1.Service, slices []*discoveryv1.EndpointSlice) (*iptables.Proxier, *recordingIPT) {
	rec := &recordingIPT{Emulator: emulator.New(emulator.IPv4)}
	// Without nfacct counters, so that the kernel anchor loads the same text without
	// creating nfacct objects first.
	cfg := iptables.UpstreamConfig(corev1.IPv4Protocol)
	cfg.NoNFAcct = true
	p, err := iptables.NewProxier(rec, nil, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	res, err := p.Sync(context.Background(), services, slices)
	if err != nil {
		tb.Fatal(err)
	}
	if !res.Full {
		tb.Fatal("first sync is not full")
	}
	return p, rec
}

// BenchmarkEmulatorSync10kServices is issue 24's first goal, measured through what the
// simulated node runs: kube-proxy's iptables Proxier writing into the emulator, with
// 10,000 ClusterIP services × 10 endpoints.
//
//   - full: a new Proxier and emulator, one full sync (change tracking, generation,
//     the emulator's restore of the whole ruleset). Goal: under 300 ms.
//   - load: the emulator's restore of that full sync's text alone, into a new emulator.
//   - partial: a sync after one service's endpoints changed (alternately dropping and
//     restoring one endpoint): change tracking, generation, the emulator applying the
//     partial restore. Goal: under 5 ms.
//   - partial-restore: the emulator's share of partial, the restore alone.
//
// BenchmarkKernelRestore10kServices loads the same full-sync text into the kernel.
func BenchmarkEmulatorSync10kServices(b *testing.B) {
	services, slices := iptables.BenchCluster(10000, 10)
	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		var rec *recordingIPT
		start := benchutil.CPUTime()
		for b.Loop() {
			_, rec = emulatorSync(b, services, slices)
		}
		cpuMetric(b, start)
		b.ReportMetric(float64(rec.Ruleset().Rules()), "rules")
	})
	b.Run("load", func(b *testing.B) {
		_, rec := emulatorSync(b, services, slices)
		data := rec.last
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		start := benchutil.CPUTime()
		for b.Loop() {
			e := emulator.New(emulator.IPv4)
			if err := e.Restore(context.Background(), data, iptables.RestoreOptions{NoFlush: true, Counters: true}); err != nil {
				b.Fatal(err)
			}
		}
		cpuMetric(b, start)
	})
	b.Run("partial", func(b *testing.B) {
		p, rec := emulatorSync(b, services, slices)
		alt := append([]*discoveryv1.EndpointSlice(nil), slices...)
		changed := slices[17].DeepCopy()
		changed.Endpoints = changed.Endpoints[1:]
		alt[17] = changed
		ctx := context.Background()
		// The setup's full sync left hundreds of MB of garbage: collect it now, or the
		// first timed syncs pay for it (tens of ms each at -benchtime 5x). The syncs'
		// own garbage is collected while they run: run enough of them (1,000 allocate
		// more than the live heap) for their GC cycles to be counted.
		runtime.GC()
		b.ReportAllocs()
		i := 0
		start := benchutil.CPUTime()
		for b.Loop() {
			in := slices
			if i%2 == 0 {
				in = alt
			}
			i++
			res, err := p.Sync(ctx, services, in)
			if err != nil {
				b.Fatal(err)
			}
			if res.Full {
				b.Fatal("sync is full")
			}
		}
		cpuMetric(b, start)
		b.ReportMetric(float64(len(rec.last)), "restore-bytes")
	})
	b.Run("partial-restore", func(b *testing.B) {
		// The emulator's share of a partial sync: the two restore texts kube-proxy
		// wrote for one service's endpoints changing and changing back, applied
		// alternately to the emulator holding the full ruleset.
		p, rec := emulatorSync(b, services, slices)
		alt := append([]*discoveryv1.EndpointSlice(nil), slices...)
		changed := slices[17].DeepCopy()
		changed.Endpoints = changed.Endpoints[1:]
		alt[17] = changed
		ctx := context.Background()
		var texts [2][]byte
		for i, in := range [][]*discoveryv1.EndpointSlice{alt, slices} {
			if _, err := p.Sync(ctx, services, in); err != nil {
				b.Fatal(err)
			}
			texts[i] = append([]byte(nil), rec.last...)
		}
		opts := iptables.RestoreOptions{NoFlush: true, Counters: true}
		runtime.GC() // the setup's garbage (see partial)
		b.ReportAllocs()
		i := 0
		start := benchutil.CPUTime()
		for b.Loop() {
			if err := rec.Emulator.Restore(ctx, texts[i%2], opts); err != nil {
				b.Fatal(err)
			}
			i++
		}
		cpuMetric(b, start)
		b.ReportMetric(float64(len(texts[0])), "restore-bytes")
	})
}

// BenchmarkKernelRestore10kServices is the anchor of BenchmarkEmulatorSync10kServices:
// iptables-restore --noflush --counters of the same full-sync text into a fresh network
// namespace, per backend (root and the iptables tools; skipped otherwise). Each
// iteration gets a new namespace (created outside the timer). Slow: legacy took 62 s
// on the 2-core VM, nft more than 14 minutes; run it with -benchtime 1x and a long
// -timeout.
func BenchmarkKernelRestore10kServices(b *testing.B) {
	kernel.RequireHarness(b)
	services, slices := iptables.BenchCluster(10000, 10)
	_, rec := emulatorSync(b, services, slices)
	data := rec.last
	for _, backend := range []kernel.Backend{kernel.BackendNFT, kernel.BackendLegacy} {
		b.Run(string(backend), func(b *testing.B) {
			kernel.RequireTools(b, "iptables-"+string(backend)+"-restore")
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				b.StopTimer()
				h, err := kernel.NewHarness(kernel.HarnessConfig{Backend: backend, Pods: []kernel.PodConfig{{Name: "a"}}, PodPorts: []uint16{}})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				err = h.IPTables.Restore(context.Background(), data, iptables.RestoreOptions{NoFlush: true, Counters: true})
				b.StopTimer()
				h.Close()
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
