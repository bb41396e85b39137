package emulator

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator/emutest"
)

// peakHeap samples the heap while fn runs and returns the largest HeapAlloc seen.
func peakHeap(fn func()) uint64 {
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	fn()
	close(stop)
	wg.Wait()
	return peak.Load()
}

func countLines(b []byte) int { return bytes.Count(b, []byte{'\n'}) }

// BenchmarkParseDump parses a ~700,000-line kube-proxy dump (16,000 NodePort services ×
// 10 endpoints). It reports lines, the peak heap during parsing and the heap the
// ruleset keeps.
func BenchmarkParseDump(b *testing.B) {
	data := emutest.KubeDump(16000, 10)
	lines := countLines(data)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var rs *Ruleset
	var peak uint64
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rs = nil
		p := peakHeap(func() {
			var err error
			rs, err = ParseDump(data, IPv4, "bench")
			if err != nil {
				b.Fatal(err)
			}
		})
		peak = max(peak, p)
	}
	b.StopTimer()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(lines), "lines")
	b.ReportMetric(float64(peak-before.HeapAlloc)/(1<<20), "peak-MiB")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "kept-MiB")
	runtime.KeepAlive(rs)
}

// BenchmarkEvalServices: the first packet of a pod → ClusterIP connection through
// PREROUTING (nat: KUBE-SERVICES → KUBE-SVC → KUBE-SEP) and FORWARD (filter), at 100 and
// at 10,000 services. "hot" sends to 64 services picked at random among all (the
// algorithmic cost: lookups in chains and indexes whose size grows with the services);
// "cold" to 1024, so that at 10,000 services the rules touched do not stay in the CPU
// caches.
func BenchmarkEvalServices(b *testing.B) {
	for _, bc := range []struct {
		n, distinct int
		name        string
	}{{100, 64, "hot"}, {10000, 64, "hot"}, {100, 1024, "cold"}, {10000, 1024, "cold"}} {
		n := bc.n
		b.Run(fmt.Sprintf("%s/services=%d", bc.name, n), func(b *testing.B) {
			e, err := Load(emutest.KubeDump(n, 10), IPv4, "bench")
			if err != nil {
				b.Fatal(err)
			}
			env := dryEnv{NewStaticEnv(1, netip.MustParseAddr("192.168.0.2"))}
			r := rand.New(rand.NewPCG(1, 2))
			targets := make([]netip.Addr, bc.distinct)
			for i := range targets {
				targets[i] = netip.MustParseAddr(emutest.ClusterIP(r.IntN(n)))
			}
			// Warm the chain indexes.
			for _, d := range targets {
				p := Packet{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("10.0.0.2"), Dst: d, SrcPort: 40000, DstPort: 80, TCPFlags: netfilter.TCPSyn, Len: 60}
				e.EvalHook(env, netfilter.Prerouting, &p, nil)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := Packet{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("10.0.0.2"), Dst: targets[i%len(targets)], SrcPort: 40000, DstPort: 80, TCPFlags: netfilter.TCPSyn, Len: 60}
				hr := e.EvalHook(env, netfilter.Prerouting, &p, nil)
				if hr.NAT == nil {
					b.Fatalf("no DNAT for %v", targets[i%len(targets)])
				}
				if hr := e.EvalHook(env, netfilter.Forward, &p, nil); hr.Verdict != Accept {
					b.Fatal("not accepted")
				}
			}
		})
	}
}

// TestBenchDumpLoads keeps the benchmark's generator honest: a small dump of the same
// layout loads, traces to an endpoint, and has the layout's line count.
func TestBenchDumpLoads(t *testing.T) {
	data := emutest.KubeDump(20, 10)
	e, err := Load(data, IPv4, "bench")
	if err != nil {
		t.Fatal(err)
	}
	r := walk(t, e, WalkInput{Packet: *pkt("tcp 10.0.0.2:40000 172.30.0.8:80"), AllBranches: true})
	if len(r.Outcomes) != 10 || *r.Outcomes[3].DNATDestination != "10.0.7.3:80" {
		t.Errorf("walk: %d outcomes, 4th %v", len(r.Outcomes), *r.Outcomes[3].DNATDestination)
	}
	if string(e.Ruleset().Save(false)) != stripComments(string(data)) {
		t.Error("the generated dump is not in kernel-normalised form")
	}
}
