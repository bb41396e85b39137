// Package scale builds large simulated clusters for kube-proxy's published scale limits
// (5,000 nodes, 10,000 Services, 150,000 pods) and measures them: the time to build the
// cluster and run every node's first full proxy sync, the memory it holds, and the cost
// of a probe through a random node beside the same probe in a two-node cluster.
// examples/scale prints these figures; proxy/kubeproxy's BenchmarkScale reports them.
//
// The cluster is built the way that costs least and matches a kube-proxy starting on a
// cluster already full: the store is filled first (Services, then pods bound round robin
// to the nodes), then cluster.New starts every pod and syncs every node's proxy once.
// Service k (ClusterIP, TCP 80 → 8080) selects app=svc-k in namespace ns-(k/100); pod j
// carries app=svc-(j mod services), so the pods spread evenly over the Services.
package scale

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/internal/benchutil"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"
	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
)

// ServicesPerNamespace is how many Services share a namespace.
const ServicesPerNamespace = 100

// Config sizes a cluster.
type Config struct {
	Nodes, Services, Pods int
	Mode                  kubeproxy.Mode // default iptables
	Seed                  uint64
	// Serve makes every pod serve TCP 8080 (the kubelet's whoami server), so a probe is
	// answered by the pod's netstack; without it a probe is refused by the pod.
	Serve bool
	// ShareRules shares identical kube-proxy rules between nodes (kubeproxy.Options).
	ShareRules bool
	// Served, if positive, makes the pods select only the first Served Services (pod j
	// carries app=svc-(j mod Served)); the rest have no endpoints. 0 means all Services.
	// examples/scale's 2-node cluster uses it to give the Services it probes as many
	// endpoints as the large cluster's, within the pods two nodes hold.
	Served int
	// AfterBuild, if set, is called once the cluster is built, before the heap is
	// measured (examples/scale stops its CPU profile there).
	AfterBuild func()
}

// Validate checks the sizes.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1:
		return fmt.Errorf("scale: nodes %d: want at least 1", c.Nodes)
	case c.Services < 1:
		return fmt.Errorf("scale: services %d: want at least 1", c.Services)
	case c.Pods < 0:
		return fmt.Errorf("scale: pods %d: must not be negative", c.Pods)
	case c.Nodes > 16384:
		return fmt.Errorf("scale: nodes %d: at most 16384 (a /22 of pods each in 10.0.0.0/8)", c.Nodes)
	case c.Pods > 1000*c.Nodes:
		return fmt.Errorf("scale: pods %d: at most 1000 a node", c.Pods)
	case c.Served < 0 || c.Served > c.Services:
		return fmt.Errorf("scale: served %d: want 0 (all) to services (%d)", c.Served, c.Services)
	}
	return nil
}

// Built is a cluster built by Build with its figures.
type Built struct {
	*cluster.Cluster
	Config Config
	// Build is the wall time of filling the store; Start the wall time of cluster.New
	// (every pod started, every node's first sync).
	Fill, Start time.Duration
	// CPU is the process's user+system CPU time over Fill and Start.
	CPU time.Duration
	// HeapAfter is the live heap after a GC once built; Sys the runtime's Sys.
	HeapAfter, Sys uint64
	// VIPs are the Services' cluster IPs, Clients one pod per node (the first bound to
	// it), by node index.
	VIPs    []netip.Addr
	Clients []string
	// PodNodes are, by Service index, the indexes of the nodes its pods are bound to
	// (each node once, ascending); empty for a Service without pods.
	PodNodes [][]int32

	clientNodes int // nodes with a pod
}

// served is the number of Services the pods select.
func (c Config) served() int {
	if c.Served > 0 {
		return c.Served
	}
	return c.Services
}

// Twin returns the 2-node configuration examples/scale compares c with, and the number
// of Services to probe in both: the same Services, each of the first probed ones with as
// many pods as in c (c.Pods/c.Services; with fewer pods than Services, the first c.Pods
// Services, one each), within the pods two nodes hold (2,000); the other Services have
// none in the 2-node cluster.
func (c Config) Twin() (Config, int) {
	per, probed := c.Pods/c.Services, c.Services
	switch {
	case c.Pods == 0: // no endpoints anywhere
	case per == 0: // the first Pods Services have one pod each
		per, probed = 1, min(c.Pods, 2000)
	default:
		probed = min(c.Services, 2000/per)
	}
	t := c
	t.Nodes, t.Pods, t.Served = 2, probed*per, probed
	if t.Pods == 0 {
		t.Served = 0
	}
	return t, probed
}

// NodeName is node i's name.
func NodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

// Build builds the cluster. Close it when done.
func Build(cfg Config) (*Built, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Mode == "" {
		cfg.Mode = kubeproxy.IPTables
	}
	b := &Built{Config: cfg}
	cpu0 := benchutil.CPUTime()
	t0 := time.Now()
	st, err := service.NewStore(service.Config{Seed: cfg.Seed, MasterService: false})
	if err != nil {
		return nil, err
	}
	var objs []k8sruntime.Object
	nss := (cfg.Services + ServicesPerNamespace - 1) / ServicesPerNamespace
	for i := 0; i < nss; i++ {
		objs = append(objs, service.NewNamespace(fmt.Sprintf("ns-%d", i)))
	}
	for k := 0; k < cfg.Services; k++ {
		objs = append(objs, service.NewService(fmt.Sprintf("ns-%d/svc-%d", k/ServicesPerNamespace, k),
			service.Selector("app=svc-"+strconv.Itoa(k)), service.Port("http", 80, 8080)))
	}
	if err := applyAll(st, objs); err != nil {
		return nil, err
	}
	objs = objs[:0]
	b.Clients = make([]string, cfg.Nodes)
	b.PodNodes = make([][]int32, cfg.Services)
	served := cfg.served()
	for j := 0; j < cfg.Pods; j++ {
		k := j % served
		node := j % cfg.Nodes
		if pn := b.PodNodes[k]; !slices.Contains(pn, int32(node)) {
			b.PodNodes[k] = append(pn, int32(node))
			slices.Sort(b.PodNodes[k])
		}
		key := fmt.Sprintf("ns-%d/pod-%d", k/ServicesPerNamespace, j)
		opts := []service.Option{service.Labels("app=svc-" + strconv.Itoa(k)), service.OnNode(NodeName(node))}
		if cfg.Serve {
			opts = append(opts, service.ContainerPort("http", 8080, corev1.ProtocolTCP))
		}
		objs = append(objs, service.NewPod(key, opts...))
		if b.Clients[node] == "" {
			b.Clients[node] = "pod:" + key
			b.clientNodes++
		}
	}
	if err := applyAll(st, objs); err != nil {
		return nil, err
	}
	for k := 0; k < cfg.Services; k++ {
		svc, ok := st.GetService(fmt.Sprintf("ns-%d", k/ServicesPerNamespace), "svc-"+strconv.Itoa(k))
		if !ok {
			return nil, fmt.Errorf("scale: service %d missing", k)
		}
		b.VIPs = append(b.VIPs, netip.MustParseAddr(svc.Spec.ClusterIP))
	}
	b.Fill = time.Since(t0)
	t1 := time.Now()
	nodes := make([]cluster.NodeConfig, cfg.Nodes)
	for i := range nodes {
		nodes[i].Name = NodeName(i)
	}
	c, err := cluster.New(cluster.Config{Seed: cfg.Seed, ManualClock: true, Store: st, Nodes: nodes,
		NodeCIDRs: []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12")},
		// A /22 of pods a node (1,022 pods), 16,384 nodes in 10.0.0.0/8.
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, NodeCIDRMaskSize: 22,
		Proxy: kubeproxy.Factory(kubeproxy.Options{Mode: cfg.Mode, ShareRules: cfg.ShareRules})})
	if err != nil {
		return nil, err
	}
	b.Cluster = c
	b.Start = time.Since(t1)
	b.CPU = benchutil.CPUTime() - cpu0
	if errs := c.Errors(); len(errs) > 0 {
		c.Close()
		return nil, fmt.Errorf("scale: %d errors building the cluster, the first: %w", len(errs), errs[0])
	}
	if cfg.AfterBuild != nil {
		cfg.AfterBuild()
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	b.HeapAfter, b.Sys = ms.HeapAlloc, ms.Sys
	return b, nil
}

func applyAll(st *service.Store, objs []k8sruntime.Object) error {
	const chunk = 5000
	for len(objs) > 0 {
		n := min(chunk, len(objs))
		if err := st.Apply(objs[:n]...); err != nil {
			return err
		}
		objs = objs[n:]
	}
	return nil
}

// Prober sends TCP SYN probes (netsim.ProbePacket) from a client pod on a random node to
// a random Service, from a fixed seed.
type Prober struct {
	b *Built
	r *rand.Rand
	n int
	// Services, if positive, limits the probes to the first Services Services.
	Services int
	// Among, if not empty, limits the probes to these Services (indexes); Within
	// ignores it.
	Among []int
	// Remote sends each probe from a node none of the Service's pods is on (where there
	// is such a node with a client pod), so the probe always crosses the cluster network
	// to another node: a 2-node cluster then takes the same path as a large one, where
	// nearly every random node is remote.
	Remote bool
	// Within, if positive, keeps the probes within the first Within nodes: the client's
	// node and every pod of the Service (a Service with pods elsewhere is not probed).
	// It measures a large cluster's probe with the working set of a small one: what is
	// left of the difference is then software that grows with the cluster, not the
	// caches' misses on many nodes' state.
	Within int

	within []int // the Services Within allows
	seed   uint64
	// advWall and advCPU add up the time the clock's advances took (Probe).
	advWall, advCPU time.Duration
	advances        int
	expireEvery     int // probes between advances; 0: 50,000
}

// NewProber returns a prober over the built cluster.
func (b *Built) NewProber(seed uint64) *Prober {
	return &Prober{b: b, r: rand.New(rand.NewPCG(seed, 7)), seed: seed}
}

// WithinServices returns the indexes of the Services a Within prober probes (nil
// without Within), ascending.
func (p *Prober) WithinServices() []int {
	if p.Within > 0 && p.within == nil {
		p.pick() // fills p.within
		p.r = rand.New(rand.NewPCG(p.seed, 7))
	}
	return p.within
}

// pick draws the next probe's client node and Service index.
func (p *Prober) pick() (node, svc int) {
	b := p.b
	n := len(b.VIPs)
	if p.Services > 0 {
		n = min(n, p.Services)
	}
	svc = p.r.IntN(n)
	if len(p.Among) > 0 {
		svc = p.Among[p.r.IntN(len(p.Among))]
	}
	nodes := len(b.Clients)
	if p.Within > 0 {
		if p.within == nil {
			for k := range n {
				if pn := b.PodNodes[k]; len(pn) > 0 && int(pn[len(pn)-1]) < p.Within {
					p.within = append(p.within, k)
				}
			}
			if len(p.within) == 0 || !slices.ContainsFunc(b.Clients[:min(p.Within, len(b.Clients))], func(c string) bool { return c != "" }) {
				p.Within, p.within = 0, nil // nothing within: the whole cluster
				return p.pick()
			}
		}
		svc = p.within[p.r.IntN(len(p.within))]
		nodes = min(nodes, p.Within)
	}
	var avoid []int32
	if p.Remote && p.remoteExists(svc) {
		avoid = b.PodNodes[svc]
	}
	if p.Within > 0 && p.Remote && len(avoid) >= nodes {
		avoid = nil // no remote node within
	}
	node = p.r.IntN(nodes)
	for b.Clients[node] == "" || slices.Contains(avoid, int32(node)) { // another
		node = p.r.IntN(nodes)
	}
	return node, svc
}

// remoteExists reports whether a node with a client pod holds none of svc's pods (a
// node with one of its pods has a client pod).
func (p *Prober) remoteExists(svc int) bool {
	return len(p.b.PodNodes[svc]) < p.b.clientNodes
}

// Probe sends one probe and checks that it reached a pod of the Service (delivered, or
// refused by a pod that does not serve): an error otherwise.
func (p *Prober) Probe() error {
	b := p.b
	node, svc := p.pick()
	vip := b.VIPs[svc]
	p.n++
	pr := netsim.Probe{From: b.Clients[node], Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(vip, 80),
		SrcPort: uint16(1024 + p.n%60000)}
	res, err := b.Probe(pr)
	if err != nil {
		return err
	}
	if len(res) != 1 {
		return fmt.Errorf("scale: probe %s → %s: %d outcomes", pr.From, pr.Dst, len(res))
	}
	r := res[0]
	ok := r.Result == netsim.ResultDelivered || r.Result == netsim.ResultRefused
	if !ok || r.Addr.Port() != 8080 && r.Result == netsim.ResultDelivered {
		return fmt.Errorf("scale: probe %s → %s: %v", pr.From, pr.Dst, r)
	}
	if every := cmp.Or(p.expireEvery, 50000); p.n%every == 0 {
		// Conntrack entries expire as they would. The hour also fires every node's
		// timers (kube-proxy's periodic syncs, the kubelet's): work that is not the
		// probes', which Rate leaves out of its times.
		c0, t0 := benchutil.CPUTime(), time.Now()
		b.Clock().Advance(time.Hour)
		p.advWall, p.advCPU = p.advWall+time.Since(t0), p.advCPU+benchutil.CPUTime()-c0
		p.advances++
	}
	return nil
}

// Rate sends n probes and returns the wall and CPU time per probe, without the clock's
// advances (see Probe).
func (p *Prober) Rate(n int) (wall, cpu time.Duration, err error) {
	aw, ac := p.advWall, p.advCPU
	c0, t0 := benchutil.CPUTime(), time.Now()
	for i := 0; i < n; i++ {
		if err := p.Probe(); err != nil {
			return 0, 0, err
		}
	}
	wall = time.Since(t0) - (p.advWall - aw)
	cpu = benchutil.CPUTime() - c0 - (p.advCPU - ac)
	return wall / time.Duration(n), cpu / time.Duration(n), nil
}

// RSS returns the process's resident set size and its peak (VmRSS, VmHWM), 0 where
// /proc is missing.
func RSS() (cur, peak uint64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseUint(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			cur = v << 10
		case "VmHWM:":
			peak = v << 10
		}
	}
	return cur, peak
}
