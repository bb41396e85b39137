// Command scale builds a large simulated cluster — by default 20 nodes, 200 Services and
// 600 pods, in seconds; kube-proxy's published limits are -nodes 5000 -services 10000
// -pods 150000 — and prints what it cost: the time to fill the API server, to start every
// pod and run every node's first full kube-proxy sync, the memory held (live heap after
// a GC, the process's peak RSS) per node, and the cost of a probe (one TCP SYN from a
// pod on a random node to a random Service whose pods are on other nodes, through that
// node's kube-proxy rules) beside the same probe in a two-node cluster with the same
// Services, as many pods each (scale.Config.Twin).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime/pprof"
	"time"

	"github.com/clusterlab/clusterlab/internal/scale"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

func main() {
	cfg := scale.Config{Seed: 1}
	var mode string
	var probes int
	flag.IntVar(&cfg.Nodes, "nodes", 20, "nodes")
	flag.IntVar(&cfg.Services, "services", 200, "ClusterIP Services (TCP 80 → 8080)")
	flag.IntVar(&cfg.Pods, "pods", 600, "pods, spread evenly over the nodes and the Services")
	flag.StringVar(&mode, "mode", string(kubeproxy.IPTables), "kube-proxy mode")
	flag.IntVar(&probes, "probes", 20000, "probes to time in each cluster")
	flag.IntVar(&within, "within", 0, "also time probes kept within the large cluster's first N nodes (clients and the Services' pods)")
	flag.BoolVar(&cfg.ShareRules, "share", true, "share identical kube-proxy rules between nodes (iptables mode)")
	flag.BoolVar(&cfg.Serve, "serve", false, "every pod serves TCP 8080 (a whoami server in its netstack)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the build (fill, start) to this file")
	probeprofile := flag.String("probeprofile", "", "write a CPU profile of the warm probes (both clusters' blocks) to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		cfg.AfterBuild = func() { pprof.StopCPUProfile(); f.Close() }
	}
	cfg.Mode = kubeproxy.Mode(mode)
	if *probeprofile != "" {
		f, err := os.Create(*probeprofile)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		warmProfile = f
	}
	if err := run(os.Stdout, cfg, probes); err != nil {
		log.Fatal(err)
	}
}

// warmProfile, if set, receives a CPU profile of the warm probe blocks.
var warmProfile io.Writer

// within, if positive, adds a third prober in the large cluster kept within its first
// within nodes (scale.Prober.Within).
var within int

func run(w io.Writer, cfg scale.Config, probes int) error {
	if _, ok := kubeproxy.Lookup(cfg.Mode); !ok {
		return fmt.Errorf("mode %q: want one of %v", cfg.Mode, kubeproxy.ModeNames())
	}
	b, err := scale.Build(cfg)
	if err != nil {
		return err
	}
	defer b.Close()
	_, peak := scale.RSS()
	fmt.Fprintf(w, "cluster: %d nodes, %d services, %d pods, %s mode, shared rules %v\n", cfg.Nodes, cfg.Services, cfg.Pods, cfg.Mode, cfg.ShareRules)
	fmt.Fprintf(w, "fill the API server: %.2f s\n", b.Fill.Seconds())
	fmt.Fprintf(w, "start pods and first sync of every node: %.2f s (CPU %.2f s over both)\n", b.Start.Seconds(), b.CPU.Seconds())
	fmt.Fprintf(w, "memory: heap %.1f MiB after GC (%.1f KiB a node), peak RSS %.1f MiB\n",
		mib(b.HeapAfter), float64(b.HeapAfter)/1024/float64(cfg.Nodes), mib(peak))

	// The same Services in a two-node cluster, probed in alternating blocks: in both,
	// probes go to the Services that have as many pods as in the large cluster, from a
	// node none of those pods is on.
	small, probed := cfg.Twin()
	s, err := scale.Build(small)
	if err != nil {
		return err
	}
	defer s.Close()
	pl, ps := b.NewProber(1), s.NewProber(1)
	for _, p := range []*scale.Prober{pl, ps} {
		p.Services, p.Remote = probed, true
	}
	fmt.Fprintf(w, "probes: to the first %d services (%d pods each in both clusters), each from a node without the service's pods\n",
		probed, small.Pods/max(1, probed))
	// The first pass: every node compiles what it meets first.
	coldL, _, err := pl.Rate(probes)
	if err != nil {
		return err
	}
	coldS, _, err := ps.Rate(probes)
	if err != nil {
		return err
	}
	// With -within: a prober kept within the large cluster's first nodes, beside one
	// in the 2-node cluster to the same Services.
	var pw, pws *scale.Prober
	if within > 0 {
		pw = b.NewProber(2)
		pw.Services, pw.Remote, pw.Within = probed, true, within
		pws = s.NewProber(2)
		pws.Among, pws.Remote = pw.WithinServices(), true
		for _, p := range []*scale.Prober{pw, pws} {
			if _, _, err := p.Rate(probes); err != nil {
				return err
			}
		}
	}
	var wl, cl, ws, cs, ww, cw, wws, cws float64
	// Many short blocks, so that both clusters see the same load on a shared machine.
	const blocks = 16
	if warmProfile != nil {
		if err := pprof.StartCPUProfile(warmProfile); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	// The profile's samples carry the label cluster=large or cluster=small
	// (go tool pprof -tagfocus cluster=large).
	rate := func(p *scale.Prober, label string) (wall, cpu time.Duration, err error) {
		pprof.Do(context.Background(), pprof.Labels("cluster", label), func(context.Context) {
			wall, cpu, err = p.Rate(probes / blocks)
		})
		return wall, cpu, err
	}
	for i := 0; i < blocks; i++ {
		a, b, err := rate(pl, "large")
		if err != nil {
			return err
		}
		c, d, err := rate(ps, "small")
		if err != nil {
			return err
		}
		wl, cl, ws, cs = wl+a.Seconds(), cl+b.Seconds(), ws+c.Seconds(), cs+d.Seconds()
		if pw != nil {
			e, f, err := rate(pw, "within")
			if err != nil {
				return err
			}
			g, h, err := rate(pws, "within-small")
			if err != nil {
				return err
			}
			ww, cw, wws, cws = ww+e.Seconds(), cw+f.Seconds(), wws+g.Seconds(), cws+h.Seconds()
		}
	}
	fmt.Fprintf(w, "probes, first pass: %.0f/s through random nodes, %.0f/s in 2 nodes\n", 1/coldL.Seconds(), 1/coldS.Seconds())
	fmt.Fprintf(w, "probes, warm: %.0f/s through random nodes, %.0f/s in 2 nodes (%.2f× the wall time, %.2f× the CPU)\n",
		blocks/wl, blocks/ws, wl/ws, cl/cs)
	if pw != nil {
		fmt.Fprintf(w, "probes, warm, within the large cluster's first %d nodes (%d services): %.0f/s, %.0f/s in 2 nodes to the same services (%.2f× the wall time, %.2f× the CPU)\n",
			within, len(pw.WithinServices()), blocks/ww, blocks/wws, ww/wws, cw/cws)
	}
	return nil
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
