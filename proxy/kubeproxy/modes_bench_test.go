package kubeproxy

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/internal/benchutil"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/service"
)

// BenchmarkModes measures what a user runs: ClusterIP connections, probes and bulk
// transfers through each registered kube-proxy mode (the iptables emulator, the IPVS
// model, the nftables evaluator, the userspace proxy) on a simulated cluster with 10 and
// with 10,000 Services, each beside its anchors in the same run, measured in alternating
// blocks so that the load of a shared machine falls on both alike:
//
//   - loopback: the same operation over the host kernel's loopback (no rules);
//   - kernel: the same operation, the same client and server code, through a real
//     kernel in network namespaces (the kernel.Harness: a client pod, three backend
//     pods, the node between them) running the iptables rules the iptables mode
//     generated for the same Services (node-a's ruleset, backend addresses rewritten to
//     the harness's pods), at the same count. The client runs a whole block in one
//     Harness.Do (one OS thread in the pod's namespace), not a thread per dial. Root
//     only; skipped with the reason otherwise.
//
// The cluster: node-a holds a client pod, node-b three backend pods; every Service
// selects the three backends (port 80 → 9376, one port, so that 10,000 Services make
// kube-proxy's 10,000 KUBE-SVC and 30,000 KUBE-SEP chains). The operation goes to the
// last Service created. One op is: connect — dial the VIP, 64 bytes each way, the
// backend closes; probe — one netsim TCP probe from the client pod to the VIP (the
// property test's path; its anchor is the kernel connection through the same rules,
// the thing a probe stands for); bulk — one connection carrying 16 MiB to the backend
// (4 MiB with -short). It reports per op the wall time and the CPU time of the whole
// process (getrusage, user + system: the simulation's goroutines and the kernel's work
// for the anchors' sockets alike), the anchors' figures, the ratios x-loopback and
// x-kernel (anchor time / subject time: above 1 the simulation is faster) and the load
// average (1 min) at the start and the end. ns/op is the whole round (subject and
// anchors); read ns/conn or ns/probe. `go run ./internal/bench` runs it and prints
// the tables of docs/PERFORMANCE.md; -short keeps to 10 Services.
//
//	go test ./proxy/kubeproxy/ -run '^$' -bench '^BenchmarkModes$' -benchtime 400x
func BenchmarkModes(b *testing.B) {
	counts := []int{10, 10000}
	if testing.Short() {
		counts = counts[:1]
	}
	for _, n := range counts {
		// Clusters and the kernel harness are built on the first sub-benchmark that
		// needs them (so -bench can pick rows without building the rest).
		var kh *kernelAnchor
		kernelWhy, kernelTried := "", false
		kernelFor := func(b *testing.B, mb *modeBench) (*kernelAnchor, string) {
			if !kernelTried {
				kernelTried = true
				if mb.mode != IPTables {
					ipt := newModeBench(b, IPTables, n)
					defer ipt.close()
					mb = ipt
				}
				kh, kernelWhy = newKernelAnchor(b, mb)
			}
			return kh, kernelWhy
		}
		for _, mode := range Modes() {
			var mb *modeBench
			for _, kind := range []string{"connect", "probe", "bulk"} {
				b.Run(fmt.Sprintf("kind=%s/mode=%s/services=%d", kind, mode, n), func(b *testing.B) {
					if mb == nil {
						mb = newModeBench(b, mode, n)
					}
					k, why := kernelFor(b, mb)
					mb.run(b, kind, k, why)
				})
			}
			if mb != nil {
				mb.close()
			}
		}
		if kh != nil {
			kh.close()
		}
	}
}

// modeBench is a simulated cluster under one mode with n Services.
type modeBench struct {
	mode   Mode
	c      *cluster.Cluster
	client *netsim.Pod
	vip    netip.AddrPort
	backs  []netip.Addr
	lns    []net.Listener
	// loopback anchor
	loLn   net.Listener
	loAddr string
	probe  netsim.Probe
	probes int
	// sinceJump counts the probes since the clock last jumped an hour (expireAll).
	sinceJump int
	warm      map[string]int // the largest b.N each kind of op was warmed up for (see run)
}

const benchBackendPort = 9376

func newModeBench(b *testing.B, mode Mode, n int) *modeBench {
	start := time.Now()
	c, err := cluster.New(cluster.Config{Seed: 11, Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}}, Proxy: Factory(Options{Mode: mode})})
	if err != nil {
		b.Fatal(err)
	}
	mb := &modeBench{mode: mode, c: c}
	for _, node := range c.Nodes() {
		node.PauseProxy() // one sync with everything, not one per Service
	}
	for i := range 3 {
		p, err := c.CreatePod(service.NewPod(fmt.Sprintf("default/web-%d", i), service.Labels("app=bench"), service.OnNode("node-b")))
		if err != nil {
			b.Fatal(err)
		}
		ln, err := p.Net().Listen("tcp", fmt.Sprintf(":%d", benchBackendPort))
		if err != nil {
			b.Fatal(err)
		}
		go benchServe(ln)
		mb.lns = append(mb.lns, ln)
		mb.backs = append(mb.backs, p.IP())
	}
	if mb.client, err = c.CreatePod(service.NewPod("default/client", service.OnNode("node-a"))); err != nil {
		b.Fatal(err)
	}
	const batch = 500
	for i := 0; i < n; i += batch {
		var objs []k8sruntime.Object
		for j := i; j < min(n, i+batch); j++ {
			objs = append(objs, service.NewService(fmt.Sprintf("default/svc-%05d", j), service.Selector("app=bench"), service.Port("http", 80, benchBackendPort)))
		}
		if err := c.Apply(objs...); err != nil {
			b.Fatal(err)
		}
	}
	for _, node := range c.Nodes() {
		node.ResumeProxy()
	}
	if errs := c.Errors(); len(errs) > 0 {
		b.Fatalf("cluster: %v", errs)
	}
	svc, ok := c.Store().GetService("default", fmt.Sprintf("svc-%05d", n-1))
	if !ok {
		b.Fatalf("service svc-%05d missing", n-1)
	}
	mb.vip = netip.MustParseAddrPort(svc.Spec.ClusterIP + ":80")
	mb.probe = netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: mb.vip}
	if mb.loLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	go benchServe(mb.loLn)
	mb.loAddr = mb.loLn.Addr().String()
	if err := mb.connect(); err != nil {
		b.Fatalf("%s, %d services: first connection: %v", mode, n, err)
	}
	b.Logf("%s with %d services built and synced in %v", mode, n, time.Since(start).Round(time.Millisecond))
	return mb
}

func (mb *modeBench) close() {
	for _, ln := range mb.lns {
		ln.Close()
	}
	mb.loLn.Close()
	mb.c.Close()
}

// benchServe serves the benchmark's protocol: a first byte 'p' asks for a ping (63 more
// bytes, answered with 64), 'b' for a bulk sink (everything up to the client's FIN,
// answered with one byte); the server closes first, so no client port waits in TIME_WAIT.
func benchServe(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 64)
			if _, err := io.ReadFull(c, buf[:1]); err != nil {
				return
			}
			switch buf[0] {
			case 'p':
				if _, err := io.ReadFull(c, buf[1:]); err == nil {
					c.Write(buf)
				}
			case 'b':
				if _, err := io.Copy(io.Discard, c); err == nil {
					c.Write(buf[:1])
				}
			}
		}()
	}
}

type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func pingOnce(dial dialFunc, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	msg := make([]byte, 64)
	msg[0] = 'p'
	if _, err := c.Write(msg); err != nil {
		return err
	}
	_, err = io.ReadFull(c, msg)
	return err
}

var bulkChunk = make([]byte, 64<<10)

func bulkOnce(dial dialFunc, addr string, total int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte{'b'}); err != nil {
		return err
	}
	for sent := 0; sent < total; sent += len(bulkChunk) {
		if _, err := c.Write(bulkChunk); err != nil {
			return err
		}
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		return err
	}
	ack := make([]byte, 1)
	_, err = io.ReadFull(c, ack)
	return err
}

func (mb *modeBench) connect() error {
	return pingOnce(mb.client.Net().DialContext, mb.vip.String())
}

func (mb *modeBench) probeOnce() error {
	mb.probes++
	mb.probe.SrcPort = uint16(1024 + mb.probes%60000)
	res, err := mb.c.Probe(mb.probe)
	if err != nil {
		return err
	}
	if len(res) != 1 || res[0].Result != netsim.ResultDelivered {
		return fmt.Errorf("probe to %v: %v", mb.probe.Dst, res)
	}
	// The userspace mode's probe ends at the node's proxy listener (delivered to
	// node-a); every other mode's at a backend.
	if mb.mode != Userspace && (!slices.Contains(mb.backs, res[0].Addr.Addr()) || res[0].Addr.Port() != benchBackendPort) {
		return fmt.Errorf("probe to %v ended at %v, not at a backend", mb.probe.Dst, res[0].Addr)
	}
	if mb.sinceJump++; mb.sinceJump == 50000 {
		mb.expireAll() // let conntrack entries expire as they would
	}
	return nil
}

// expireAll moves the cluster's clock on an hour: every probe's conntrack entry
// expires (the next packet through each node collects them; a table keeps its slots).
func (mb *modeBench) expireAll() {
	mb.c.Clock().Advance(time.Hour)
	mb.sinceJump = 0
}

var loDialer net.Dialer

// kernelAnchor is a kernel.Harness whose node runs the iptables mode's ruleset.
type kernelAnchor struct {
	h      *kernel.Harness
	client *kernel.Pod
	vip    netip.AddrPort
}

// newKernelAnchor loads node-a's ruleset of an iptables-mode modeBench into a harness
// node, the backends' addresses rewritten to the harness's three backend pods.
func newKernelAnchor(b *testing.B, mb *modeBench) (*kernelAnchor, string) {
	if why := kernelSkipReason(); why != "" {
		return nil, why
	}
	start := time.Now()
	h, err := kernel.NewHarness(kernel.HarnessConfig{
		Pods:     []kernel.PodConfig{{Name: "client"}, {Name: "web-0"}, {Name: "web-1"}, {Name: "web-2"}},
		PodPorts: []uint16{}, // the benchmark's own servers, below
		Timeout:  5 * time.Second,
	})
	if err != nil {
		return nil, fmt.Sprintf("no kernel harness: %v", err)
	}
	emu := Emulator(mb.c.Node("node-a"), netip.Addr{})
	dump, err := emu.Save(context.Background(), "filter", "nat")
	if err != nil {
		h.Close()
		b.Fatal(err)
	}
	for i, a := range mb.backs {
		to := h.Pods[i+1].IP.String()
		dump = bytes.ReplaceAll(dump, []byte(a.String()+":"), []byte(to+":"))
		dump = bytes.ReplaceAll(dump, []byte(a.String()+"/32"), []byte(to+"/32"))
	}
	// kube-proxy counts dropped packets with nfacct objects, which this kernel may lack
	// (RULE_APPEND fails): the match is left out, the rule kept.
	dump = nfacctRE.ReplaceAll(dump, nil)
	if err := h.IPTables.Restore(context.Background(), dump, iptables.RestoreOptions{NoFlush: true}); err != nil {
		h.Close()
		b.Fatalf("loading the iptables mode's ruleset into the kernel: %v", err)
	}
	ka := &kernelAnchor{h: h, client: h.Pods[0], vip: mb.vip}
	for _, p := range h.Pods[1:] {
		var ln net.Listener
		if err := h.Do(p.Netns, func() (err error) {
			ln, err = net.Listen("tcp", netip.AddrPortFrom(p.IP, benchBackendPort).String())
			return err
		}); err != nil {
			h.Close()
			b.Fatal(err)
		}
		go benchServe(ln) // closed with the namespace
	}
	if err := ka.in(ka.connect); err != nil {
		h.Close()
		b.Fatalf("kernel warm-up: %v", err)
	}
	b.Logf("kernel harness with the ruleset (%d KiB) loaded in %v", len(dump)>>10, time.Since(start).Round(time.Millisecond))
	return ka, ""
}

var nfacctRE = regexp.MustCompile(`-m nfacct --nfacct-name +\S+ `)

func kernelSkipReason() string {
	if os.Geteuid() != 0 {
		return "the kernel anchor needs root (network namespaces)"
	}
	for _, t := range []string{"ip", "iptables-nft-restore"} {
		if _, err := lookPath(t); err != nil {
			return fmt.Sprintf("the kernel anchor needs %s: %v", t, err)
		}
	}
	return ""
}

func lookPath(t string) (string, error) {
	for _, dir := range append(strings.Split(os.Getenv("PATH"), ":"), "/usr/sbin", "/sbin") {
		p := dir + "/" + t
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("not found in PATH, /usr/sbin or /sbin")
}

// in runs f in the client pod's namespace.
func (ka *kernelAnchor) in(f func() error) error { return ka.h.Do(ka.client.Netns, f) }

func (ka *kernelAnchor) connect() error {
	return pingOnce(loDialer.DialContext, ka.vip.String())
}

func (ka *kernelAnchor) close() {
	if err := ka.h.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "closing the kernel harness:", err)
	}
}

// meter accumulates the wall and CPU time of blocks of ops.
type meter struct {
	wall, cpu time.Duration
	ops       int
	slow      int             // ops that took over slowOp
	slowest   time.Duration   // the longest op
	use       benchutil.Usage // user and system time, minor faults, GC cycles
}

// slowOp is an op's time counted as slow: a kernel connection that took this long
// waited for a retransmission (a lost or refused SYN), not for the work measured.
const slowOp = 100 * time.Millisecond

// block times n ops, run by in (nil: in this goroutine).
func (m *meter) block(b *testing.B, n int, in func(func() error) error, op func() error) {
	if in == nil {
		in = func(f func() error) error { return f() }
	}
	u0, t0 := benchutil.ReadUsage(), time.Now()
	err := in(func() error {
		for range n {
			t := time.Now()
			if err := op(); err != nil {
				return err
			}
			d := time.Since(t)
			m.slowest = max(m.slowest, d)
			if d > slowOp {
				m.slow++
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	m.wall += time.Since(t0)
	u := benchutil.ReadUsage().Sub(u0)
	m.cpu += u.User + u.Sys
	m.use = m.use.Add(u)
	m.ops += n
}

func (m *meter) perOp() (wall, cpu float64) {
	if m.ops == 0 {
		return 0, 0
	}
	return float64(m.wall.Nanoseconds()) / float64(m.ops), float64(m.cpu.Nanoseconds()) / float64(m.ops)
}

func (mb *modeBench) run(b *testing.B, kind string, kh *kernelAnchor, kernelWhy string) {
	bulk := 16 << 20
	if testing.Short() {
		bulk = 4 << 20
	}
	var subject, lo, kern func() error
	if kh != nil {
		kern = kh.connect
	}
	switch kind {
	case "connect":
		subject = mb.connect
		lo = func() error { return pingOnce(loDialer.DialContext, mb.loAddr) }
	case "probe":
		subject = mb.probeOnce
		lo = func() error { return pingOnce(loDialer.DialContext, mb.loAddr) }
	case "bulk":
		subject = func() error { return bulkOnce(mb.client.Net().DialContext, mb.vip.String(), bulk) }
		lo = func() error { return bulkOnce(loDialer.DialContext, mb.loAddr, bulk) }
		if kh != nil {
			kern = func() error { return bulkOnce(loDialer.DialContext, kh.vip.String(), bulk) }
		}
	}
	load0 := benchutil.LoadAvg1()
	var ms, ml, mk meter
	// Alternating blocks: subject, loopback, kernel, about 20 rounds whatever b.N.
	blk := max(1, b.N/20)
	// The anchors' blocks: as long as the subject's, but a tenth for probes, whose
	// anchors are connections (thousands of probes a row): a row's kernel anchor made
	// as many kernel connections as probes, ~60,000 a minute over the probe rows, and
	// the harness kernel's connect cost then grew twentyfold late in a run (TIME-WAIT
	// sockets piling up; kern-cpu-ns as large as kern-ns, no slow op). Each figure is
	// per op of its own block, so the ratios do not depend on the blocks' lengths.
	ablk := blk
	if kind == "probe" {
		ablk = max(1, blk/10)
	}
	// rounds runs n ops of the subject in alternating blocks of blk, each followed by
	// a block of each anchor, measured by s, l and k.
	rounds := func(n int, s, l, k *meter) {
		for done := 0; done < n; done += blk {
			c := min(blk, n-done)
			a := max(1, c*ablk/blk)
			s.block(b, c, nil, subject)
			l.block(b, a, nil, lo)
			if kern != nil {
				k.block(b, a, kh.in, kern)
			}
		}
	}
	// ns/op is the whole round, subject and anchors (stopping the timer between blocks
	// would read the memory statistics each time, a pause that grows with the heap of a
	// 10,000-Service cluster); the figures are ns/conn (or ns/probe) and the anchors'.
	if b.N > mb.warm[kind] || kind == "probe" || kind == "connect" {
		// Warm-up, untimed, for each larger b.N of a row (the testing package calls a
		// benchmark with b.N = 1 before the -benchtime count: a warm-up sized on the
		// first call alone was 2,000 ops before 4,000 timed): the same ops in the
		// same alternation, at least as many as will be timed. A process's first few
		// thousand connections fault in its heap's pages (3 minor faults a round,
		// tens of µs each in this VM, 0.2-0.4 a round after 3,000 connections), a
		// cost a running simulation has already paid and the 10,000-Service rows
		// never saw (their build's garbage, collected below, leaves pages faulted
		// in): without it the 10-Service connect row measured 214-228 µs against
		// 156-194 µs warm.
		warm := max(b.N, 2000)
		if kind == "bulk" {
			warm = max(b.N/4, 2)
		}
		if kind == "probe" || kind == "connect" {
			// Every round of a probe or connect row measures the same state. The testing
			// package runs a row's -count rounds on this one cluster, and each
			// probe leaves a conntrack entry per node (until the clock moves): the
			// k-th round probed a table 4,000 k entries larger than the first,
			// doubling it in some rounds (fresh pages: 0.8-1.25 minor faults per
			// probe), and only the first round probed it in a process whose heap
			// was fresh (0.55 faults per probe, against 0.2 later). So each round
			// first rehearses (its probes grow the table to the size this round
			// reaches and fault its pages in), then the clock jumps (the entries
			// expire; the table keeps its slots and the next collection frees
			// their memory for the probes to come), then warms up as above: the
			// timed probes meet a table sized for them and recycled memory, as a
			// long-running simulation's do. A table's growth is measured apart
			// (netsim's BenchmarkCtTableGrowth); faults/probe says what is left.
			//
			// A connection leaves more behind than a probe: a conntrack entry per
			// node in TIME_WAIT (2 minutes) and, the backend closing first, the
			// backend's netstack endpoint in TIME_WAIT (its port reservation, its
			// timer on the cluster's clock) for a minute of a clock that follows
			// the wall: a connect row's 400-op call ran beside the 4,000 of the
			// two warm-ups before it, each further round beside 400 more. The
			// jump fires the endpoints' timers (they close) and expires
			// the entries. A connect round jumps before its rehearsal only: the
			// jump frees the endpoints' memory (megabytes), which the runtime's
			// scavenger hands back to the OS within the next second, so a jump
			// just before the warm-up had the timed connections fault it in again
			// (0.4-1.3 minor faults per connection, none with
			// GODEBUG=madvdontneed=0). After the rehearsal the heap has grown back
			// and stays grown: each round times b.N connections beside the
			// rehearsal's and the warm-up's TIME_WAIT leftovers, the same number
			// in every round.
			mb.expireAll()
			for range warm + b.N {
				if err := subject(); err != nil {
					b.Fatal(err)
				}
			}
			if kind == "probe" {
				mb.expireAll()
			}
		}
		var ws, wl, wk meter
		rounds(warm, &ws, &wl, &wk)
		if mb.warm == nil {
			mb.warm = map[string]int{}
		}
		mb.warm[kind] = b.N
	}
	runtime.GC() // the build's garbage is not the benchmark's
	b.ResetTimer()
	rounds(b.N, &ms, &ml, &mk)
	b.StopTimer()
	unit := "op"
	switch kind {
	case "connect", "bulk":
		unit = "conn"
	case "probe":
		unit = "probe"
	}
	sw, sc := ms.perOp()
	lw, lc := ml.perOp()
	b.ReportMetric(sw, "ns/"+unit)
	b.ReportMetric(sc, "cpu-ns/"+unit)
	// Where the subject's CPU went besides its own work: system time (page faults
	// of fresh memory, madvise), minor faults and GC cycles per op.
	if ms.ops > 0 {
		b.ReportMetric(float64(ms.use.Sys.Nanoseconds())/float64(ms.ops), "sys-ns/"+unit)
		b.ReportMetric(float64(ms.use.MinFlt)/float64(ms.ops), "faults/"+unit)
		b.ReportMetric(float64(ms.use.GCs)*1000/float64(ms.ops), "gcs/1k"+unit)
	}
	b.ReportMetric(lw, "lo-ns/op")
	b.ReportMetric(lc, "lo-cpu-ns/op")
	b.ReportMetric(lw/sw, "x-loopback")
	b.ReportMetric(lc/sc, "x-loopback-cpu")
	if kind == "bulk" { // not b.SetBytes: ns/op holds the anchors' blocks too
		b.ReportMetric(float64(bulk)/sw*1e3, "sim-MB/s")
		b.ReportMetric(float64(bulk)/lw*1e3, "lo-MB/s")
		if kern != nil {
			kw, _ := mk.perOp()
			b.ReportMetric(float64(bulk)/kw*1e3, "kern-MB/s")
		}
	}
	if kern != nil {
		kw, kc := mk.perOp()
		b.ReportMetric(kw, "kern-ns/op")
		b.ReportMetric(kc, "kern-cpu-ns/op")
		b.ReportMetric(kw/sw, "x-kernel")
		b.ReportMetric(kc/sc, "x-kernel-cpu")
	} else {
		b.Logf("no kernel anchor: %s", cmp.Or(kernelWhy, "kernel anchor not built"))
	}
	// Ops over slowOp, reported so that a figure moved by a few retransmission waits
	// (a kernel connection's lost SYN waits a second) is seen as such, not as a cost.
	b.ReportMetric(float64(ms.slow), "slow-ops")
	b.ReportMetric(float64(ml.slow), "lo-slow-ops")
	if kern != nil {
		b.ReportMetric(float64(mk.slow), "kern-slow-ops")
		b.ReportMetric(float64(mk.slowest.Microseconds()), "kern-slowest-us")
	}
	b.ReportMetric(float64(ms.slowest.Microseconds()), "slowest-us")
	b.ReportMetric(float64(ml.slowest.Microseconds()), "lo-slowest-us")
	b.ReportMetric(load0, "load-start")
	b.ReportMetric(benchutil.LoadAvg1(), "load-end")
}
