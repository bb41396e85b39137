// Package kubeproxy runs kube-proxy's proxy modes — iptables, IPVS and userspace — on
// clusterlab's simulated cluster. It joins pieces that are built and tested on their
// own: the shared proxy view (package proxy), a mode's rule writer (proxy/iptables's
// Proxier, proxy/ipvs's Proxier, proxy/userspace's Proxier) and the back ends that
// evaluate what it writes (the iptables emulator with its ipsets, the IPVS model, the
// userspace proxy's listeners on the node's host network), attached to the node's netsim
// datapath. The iptables mode, for example:
//
//	service store ──▶ cluster (Proxy.Sync on every change, after the node's delay)
//	                     │
//	                     ▼
//	   kubeproxy.Node: services, slices ──▶ iptables.Proxier ──▶ emulator.Emulator
//	                                             │ (restore text)        │ (handlers at the
//	                                             ▼                       ▼  node's hooks)
//	                                   netsim conntrack cleanup   packets of the node
//
// ipvs.go and userspace.go register the other two modes; each file's doc says how its
// mode sits on the datapath. health.go runs kube-proxy's health servers in every mode
// (each healthCheckNodePort, which the simulated cloud load balancer checks over the
// network, and /healthz on 10256). Use Factory as a cluster.Config's Proxy:
//
//	c, err := cluster.New(cluster.Config{Nodes: ..., Proxy: kubeproxy.Factory(kubeproxy.Options{Mode: kubeproxy.IPTables})})
package kubeproxy

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	corev1 "k8s.io/api/core/v1"
)

// Mode names a kube-proxy proxy mode.
type Mode string

// The modes.
const (
	IPTables  Mode = "iptables"
	IPVS      Mode = "ipvs"
	Userspace Mode = "userspace"
)

// Options configure the proxies of every node.
type Options struct {
	Mode Mode
	// Scheduler is the IPVS scheduler (--ipvs-scheduler; default rr).
	Scheduler string
	// Node adjusts each node's kube-proxy flags (detect-local mode, --nodeport-addresses,
	// --masquerade-all, ...) after they are filled in from the node: nil keeps
	// kube-proxy's defaults.
	Node func(*proxy.NodeConfig)
	// Seed seeds randomness the mode owns itself (IPVS twos); default the cluster's.
	Seed uint64
}

// factories of modes other than iptables register here (from their own packages, to
// keep package dependencies one way).
var (
	modesMu sync.Mutex
	modes   = map[Mode]func(n *cluster.Node, opts Options, cfg proxy.NodeConfig) (cluster.Proxy, error){}
)

// Register adds a mode's factory.
func Register(m Mode, f func(n *cluster.Node, opts Options, cfg proxy.NodeConfig) (cluster.Proxy, error)) {
	modesMu.Lock()
	defer modesMu.Unlock()
	modes[m] = f
}

// Modes lists the registered modes.
func Modes() []Mode {
	modesMu.Lock()
	defer modesMu.Unlock()
	out := []Mode{IPTables}
	for m := range modes {
		if m != IPTables {
			out = append(out, m)
		}
	}
	return out
}

// Factory returns the cluster.ProxyFactory of a mode.
func Factory(opts Options) cluster.ProxyFactory {
	if opts.Mode == "" {
		opts.Mode = IPTables
	}
	return func(n *cluster.Node) (cluster.Proxy, error) {
		cfg := NodeConfigFor(n)
		if opts.Node != nil {
			opts.Node(&cfg)
		}
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("kube-proxy on %s: %w", n.Name(), err)
		}
		if opts.Mode == IPTables {
			return newIPTablesProxy(n, cfg)
		}
		modesMu.Lock()
		f := modes[opts.Mode]
		modesMu.Unlock()
		if f == nil {
			return nil, fmt.Errorf("kube-proxy mode %q is not available (have %v)", opts.Mode, Modes())
		}
		return f(n, opts, cfg)
	}
}

// NodeConfigFor fills a node's kube-proxy view of itself from the simulated node: name,
// labels (from its Node object), IPs, every local address, pod CIDRs, and the cluster
// CIDRs as --cluster-cidr.
func NodeConfigFor(n *cluster.Node) proxy.NodeConfig {
	c := n.Cluster()
	cfg := proxy.NodeConfig{
		Name:            n.Name(),
		IPs:             n.IPs(),
		PodCIDRs:        n.PodCIDRs(),
		ClusterCIDRs:    c.Config().ClusterCIDRs,
		DetectLocalMode: proxy.LocalModeClusterCIDR,
		BridgeInterface: "cbr0",
	}
	if obj, ok := c.Store().GetNode(n.Name()); ok {
		cfg.Labels = obj.Labels
	}
	for _, i := range n.Interfaces() {
		for _, p := range i.Addrs {
			cfg.Addresses = append(cfg.Addresses, p.Addr())
		}
	}
	return cfg
}

// Conntrack adapts a netsim conntrack table to proxy.Conntrack for one family.
type Conntrack struct {
	T      *netsim.Conntrack
	Family corev1.IPFamily
}

// Delete implements proxy.Conntrack.
func (c Conntrack) Delete(f proxy.ConntrackFilter) (int, error) {
	cf := netsim.CtFilter{Proto: f.Protocol, OrigSrc: f.OrigSrc, OrigDst: f.OrigDst, OrigDstPort: f.OrigDstPort, ReplySrc: f.ReplySrc, ReplySrcPort: f.ReplySrcPort}
	v6 := c.Family == corev1.IPv6Protocol
	n := 0
	for _, e := range c.T.List(cf) {
		if e.Orig.Src.Is6() != v6 {
			continue
		}
		one := netsim.CtFilter{Proto: e.Orig.Proto, OrigSrc: e.Orig.Src, OrigDst: e.Orig.Dst, OrigSrcPort: e.Orig.SrcPort, OrigDstPort: e.Orig.DstPort}
		n += c.T.Delete(one)
	}
	return n, nil
}

// iptablesProxy is kube-proxy's iptables mode on one node: a Proxier per IP family of
// the node, writing into emulators attached to the node's datapath.
type iptablesProxy struct {
	n    *cluster.Node
	fams []*iptablesFamily
	hs   *healthServer
}

type iptablesFamily struct {
	family corev1.IPFamily
	emu    *emulator.Emulator
	px     *iptables.Proxier
}

func newIPTablesProxy(n *cluster.Node, cfg proxy.NodeConfig) (*iptablesProxy, error) {
	p := &iptablesProxy{n: n}
	seen := map[corev1.IPFamily]bool{}
	for _, ip := range n.IPs() {
		fam, efam := corev1.IPv4Protocol, emulator.IPv4
		if ip.Is6() {
			fam, efam = corev1.IPv6Protocol, emulator.IPv6
		}
		if seen[fam] {
			continue
		}
		seen[fam] = true
		emu := emulator.New(efam)
		clock := n.Cluster().Clock()
		// kube-proxy reads nf_conntrack_tcp_be_liberal at start: with it set, it does
		// not drop ctstate INVALID packets in KUBE-FORWARD.
		px, err := iptables.NewProxier(emu, Conntrack{T: n.Conntrack(), Family: fam}, iptables.Config{Family: fam, Node: cfg, Clock: clock.Now,
			ConntrackTCPBeLiberal: n.Settings().Conntrack.TCPBeLiberal})
		if err != nil {
			return nil, fmt.Errorf("kube-proxy (iptables) on %s: %w", n.Name(), err)
		}
		emu.AttachNetsim(n.Node, "kube-proxy "+string(fam))
		p.fams = append(p.fams, &iptablesFamily{family: fam, emu: emu, px: px})
	}
	// kube-proxy sets route_localnet for localhost NodePorts.
	if cfg.LocalhostNodePortsEnabled() {
		n.UpdateSettings(func(s *netsim.NodeSettings) { s.RouteLocalnet = true })
	}
	p.hs = newHealthServer(n)
	return p, nil
}

// Sync implements cluster.Proxy: the rules of each family, then the health servers.
func (p *iptablesProxy) Sync() error {
	st := p.n.Cluster().Store()
	svcs, slices := st.ListServices(), st.ListEndpointSlices()
	var states []*proxy.SyncState
	for _, f := range p.fams {
		if _, err := f.px.Sync(context.Background(), svcs, slices); err != nil {
			return err
		}
		states = append(states, f.px.State())
	}
	return p.hs.sync(healthState(states...))
}

// ServesHealthCheckNodePorts implements cluster.HealthCheckServer.
func (p *iptablesProxy) ServesHealthCheckNodePorts() bool { return true }

// Emulator returns the node's emulator for a family (for traces and iptables-save).
func (p *iptablesProxy) Emulator(family corev1.IPFamily) *emulator.Emulator {
	for _, f := range p.fams {
		if f.family == family {
			return f.emu
		}
	}
	return nil
}

// Emulator returns the iptables emulator of a node running the iptables mode, for the
// primary family of addr (IPv4 when addr is invalid).
func Emulator(n *cluster.Node, addr netip.Addr) *emulator.Emulator {
	p, ok := n.Proxy().(*iptablesProxy)
	if !ok {
		return nil
	}
	fam := corev1.IPv4Protocol
	if addr.Is6() {
		fam = corev1.IPv6Protocol
	}
	return p.Emulator(fam)
}
