// Package kernelrun runs a scenario's traffic on the real Linux kernel: `clusterlab run
// --backend kernel|both`.
//
// The simulated cluster stays the control plane: its API server, controllers and
// kubelets decide which pods run where with which addresses, which endpoints are ready
// and terminating, and what every node's kube-proxy is configured with. Datapath (a
// scenario.Datapath) mirrors that state onto a kernel.Harness, a namespace per node (with
// its bridge, veths and uplink), per running pod (its address, routes and echo servers
// on its containerPorts) and one for the outside world (the external hosts' addresses):
// after the cluster is built and after every step it starts and stops pods' namespaces
// and re-programs each node with the rules the node's kube-proxy mode and version
// generate (iptables-restore, nft, or IPVS over netlink with ipsets), through the same
// proxiers the simulation runs, and applies the node settings it can (hairpin,
// route_localnet, ip_forward, rp_filter, tcp_be_liberal, the UDP conntrack timeouts, the
// IPVS sysctls). The steps' connections, datagrams, conntrack checks and short waits
// then happen on the kernel; steps it cannot carry out are refused, or adapted, with a
// message (Verdict).
//
// Every namespace is named after the run (PREFIX<pid>-<n>-...), deleted at the end, by
// the kernel package's reaper if the process dies, and by the next run if even that
// failed (kernel.Harness).
package kernelrun

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/dns"
	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/proxy/nftables"
	"github.com/clusterlab/clusterlab/scenario"
)

// MaxWait is the longest clock jump (advance, at) the kernel back end waits for for
// real; a longer one moves the simulation's clock (pods end, proxies sync) while the
// kernel's own timers (conntrack, affinity) do not run out (the step says so).
const MaxWait = 3 * time.Second

// DefaultTimeout is how long an attempt waits for each answer before it counts as
// dropped.
const DefaultTimeout = 500 * time.Millisecond

// Options configure a Datapath.
type Options struct {
	// Prefix starts every namespace name (kernel.HarnessConfig.Prefix); default "clk".
	Prefix string
	// Backend is the iptables backend for the iptables and ipvs modes (default nft).
	Backend kernel.Backend
	// Timeout bounds each wait for an answer; default DefaultTimeout.
	Timeout time.Duration
}

// Datapath is the kernel back end of a run (scenario.Datapath).
type Datapath struct {
	opts  Options
	info  scenario.DatapathInfo
	h     *kernel.Harness
	nodes map[string]*node // by the simulated node's name
	order []*node
	// podNode maps a harness pod (NS/NAME) to its node's name.
	podNode map[string]string
	ipvs    []*kernel.IPVSProxier
	once    sync.Once
	// dnsSrv answers the DNS pods' queries (nil without kube-dns); dnsStops stops
	// each DNS pod's server.
	dnsSrv   *dns.Server
	dnsStops map[string]func()
	dnsPods  map[string]bool // the DNS pods' names
}

// node is a harness node and its kube-proxy.
type node struct {
	name string
	kn   *kernel.Node
	sync func(ctx context.Context, c *cluster.Cluster) error
	// synced is the simulated proxy's sync count the kernel's rules follow
	// (cluster.Node.ProxySyncs); -1 before the first sync.
	synced int
	// ct is the conntrack kube-proxy cleans up through, which can keep the cleanup
	// back (sync: rules_only, hold_conntrack); holding says hold_conntrack holds it
	// until clean_conntrack, rulesOnly and clean are a step's wishes for Sync.
	ct                        *heldConntrack
	holding, rulesOnly, clean bool
	applied                   map[string]string // sysctls written last
	hairpin                   *bool
	localnet                  bool // route_localnet is the node's to decide (not the nftables mode)
}

// New returns a kernel data path; Run starts it (scenario.Options.Datapath).
func New(o Options) *Datapath {
	if o.Prefix == "" {
		o.Prefix = "clk"
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Backend == kernel.BackendAuto {
		o.Backend = kernel.BackendNFT
	}
	return &Datapath{opts: o, nodes: map[string]*node{}, podNode: map[string]string{}, dnsStops: map[string]func(){}, dnsPods: map[string]bool{}}
}

// Name implements scenario.Datapath.
func (d *Datapath) Name() string { return "kernel" }

// Supported says why the kernel back end cannot run mode here (nil if it can): root,
// network namespaces and the ip tool; per mode the iptables tools of the backend, the
// nft tool, or the kernel's IPVS (the ip_vs module) and the ipset tool.
func Supported(mode kubeproxy.Mode, backend kernel.Backend) error {
	if os.Geteuid() != 0 {
		return errors.New("the kernel back end needs root (it makes network namespaces and programs netfilter in them)")
	}
	if err := kernel.HarnessSupported(); err != nil {
		return err
	}
	if backend == kernel.BackendAuto {
		backend = kernel.BackendNFT
	}
	need := []string{"conntrack"}
	switch mode {
	case "", kubeproxy.IPTables:
		need = append(need, "iptables-"+string(backend)+"-restore", "iptables-"+string(backend)+"-save")
	case kubeproxy.NFTables:
		need = append(need, "nft")
	case kubeproxy.IPVS:
		if err := kernel.CheckIPVS(); err != nil {
			return fmt.Errorf("the ipvs mode needs the kernel's IPVS (module ip_vs): %w", err)
		}
		need = append(need, "ipset", "iptables-"+string(backend)+"-restore", "iptables-"+string(backend)+"-save")
	default:
		return fmt.Errorf("the kernel back end runs the iptables, nftables and ipvs modes; the %s mode's proxy is a program of the simulation", mode)
	}
	for _, t := range need {
		if !kernel.HaveTool(t) {
			return fmt.Errorf("the %s mode on the kernel needs the %s tool, which is not installed", modeName(mode), t)
		}
	}
	return nil
}

func modeName(m kubeproxy.Mode) string {
	if m == "" {
		return string(kubeproxy.IPTables)
	}
	return string(m)
}

// Start implements scenario.Datapath: it builds the harness that mirrors the cluster
// and a kube-proxy for each node.
func (d *Datapath) Start(ctx context.Context, c *cluster.Cluster, info scenario.DatapathInfo) error {
	d.info = info
	if err := Supported(info.Mode, d.opts.Backend); err != nil {
		return err
	}
	cfg := c.Config()
	sims := c.Nodes()
	hc := kernel.HarnessConfig{Prefix: d.opts.Prefix, NodeCount: len(sims), Backend: d.opts.Backend, Timeout: d.opts.Timeout,
		PodPorts: []uint16{}, NFTables: info.Mode == kubeproxy.NFTables}
	if len(cfg.NodeCIDRs) == 0 || !cfg.NodeCIDRs[0].Addr().Is4() || len(cfg.ClusterCIDRs) == 0 || !cfg.ClusterCIDRs[0].Addr().Is4() {
		return errors.New("the kernel back end builds IPv4 clusters (node and pod networks), and this one is not")
	}
	for _, n := range sims {
		for _, ip := range n.IPs() {
			if ip.Is6() {
				return fmt.Errorf("node %s has an IPv6 address: the kernel back end builds IPv4 clusters only", n.Name())
			}
		}
	}
	hc.NodeNetwork, hc.ClusterCIDR = cfg.NodeCIDRs[0], cfg.ClusterCIDRs[0]
	if hc.NodeNetwork.Bits() > 24 {
		hc.NodeNetwork = netip.PrefixFrom(hc.NodeNetwork.Addr(), 24).Masked()
	}
	for _, n := range sims {
		hc.NodeIPs = append(hc.NodeIPs, n.IP())
	}
	names := make([]string, 0, len(info.ExternalHosts))
	for name := range info.ExternalHosts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		hc.ExternalAddrs = append(hc.ExternalAddrs, info.ExternalHosts[name])
	}
	hc.ExternalRoutes = append(hc.ExternalRoutes, cfg.ServiceCIDRs...)
	if cfg.LoadBalancerCIDR.IsValid() {
		hc.ExternalRoutes = append(hc.ExternalRoutes, cfg.LoadBalancerCIDR)
	}
	if err := d.startDNSServer(c); err != nil {
		return err
	}
	pods, err := d.wantPods(c)
	if err != nil {
		return err
	}
	hc.Pods = pods
	if len(hc.Pods) == 0 {
		// A harness without pods gets two default ones; a cluster without pods
		// gets none (they are removed by the first Sync).
		hc.Pods = nil
	}
	h, err := kernel.NewHarness(hc)
	if err != nil {
		return fmt.Errorf("building the cluster's namespaces: %w", err)
	}
	d.h = h
	for i, sim := range sims {
		kn := h.Nodes[i]
		if want := sim.PodCIDRs(); len(want) == 0 || want[0] != kn.PodCIDR {
			return fmt.Errorf("node %s: pod CIDR %v, the harness's %v: the kernel back end gives node i the i-th /24 of the cluster CIDR", sim.Name(), want, kn.PodCIDR)
		}
		n := &node{name: sim.Name(), kn: kn, applied: map[string]string{}, localnet: info.Mode != kubeproxy.NFTables, synced: -1,
			ct: &heldConntrack{ct: kn.Conntrack}}
		if err := d.newProxy(ctx, c, n); err != nil {
			return fmt.Errorf("kube-proxy (%s) on %s: %w", modeName(info.Mode), sim.Name(), err)
		}
		d.nodes[sim.Name()] = n
		d.order = append(d.order, n)
	}
	for _, p := range h.Pods {
		d.podNode[p.Name] = d.order[p.Node.Index].name
		if d.dnsPods[p.Name] {
			if err := d.serveDNS(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// nodeConfig is a node's kube-proxy flags as the simulation's kube-proxy has them, with
// the harness node's own addresses.
func (d *Datapath) nodeConfig(c *cluster.Cluster, n *node) (proxy.NodeConfig, error) {
	nc := kubeproxy.NodeConfigFor(c.Node(n.name))
	if d.info.ProxyNode != nil {
		d.info.ProxyNode(&nc)
	}
	local, err := d.h.LocalAddrs(n.kn.Netns)
	if err != nil {
		return nc, err
	}
	nc.Addresses = nil
	for _, a := range local {
		if a.Is4() {
			nc.Addresses = append(nc.Addresses, a)
		}
	}
	nc.BridgeInterface = "cbr0"
	return nc, nil
}

// newProxy makes the node's kube-proxy of the run's mode, writing into the node's
// namespace.
func (d *Datapath) newProxy(ctx context.Context, c *cluster.Cluster, n *node) error {
	nc, err := d.nodeConfig(c, n)
	if err != nil {
		return err
	}
	kn := n.kn
	switch d.info.Mode {
	case "", kubeproxy.IPTables:
		px, err := d.h.NewIPTablesProxier(kn, n.ct, iptables.Config{Family: corev1.IPv4Protocol, Node: nc,
			ConntrackTCPBeLiberal: c.Node(n.name).Settings().Conntrack.TCPBeLiberal})
		if err != nil {
			return err
		}
		n.sync = func(ctx context.Context, c *cluster.Cluster) error {
			_, err := px.Sync(ctx, c.Store().ListServices(), c.Store().ListEndpointSlices())
			return err
		}
	case kubeproxy.NFTables:
		var cidrs []netip.Prefix
		for _, p := range c.Config().ServiceCIDRs {
			if p.Addr().Is4() {
				cidrs = append(cidrs, p)
			}
		}
		px, err := nftables.NewProxier(kn.NFTables, n.ct, nftables.Config{Family: corev1.IPv4Protocol, Node: nc, ServiceCIDRs: cidrs})
		if err != nil {
			return err
		}
		n.sync = func(ctx context.Context, c *cluster.Cluster) error {
			_, err := px.Sync(ctx, c.Store().ListServices(), c.Store().ListEndpointSlices())
			return err
		}
	case kubeproxy.IPVS:
		px, err := d.h.NewIPVSProxier(kn, n.ct, ipvs.ProxierConfig{Family: corev1.IPv4Protocol, Node: nc, Scheduler: d.info.Scheduler})
		if err != nil {
			return err
		}
		d.ipvs = append(d.ipvs, px)
		n.sync = func(ctx context.Context, c *cluster.Cluster) error {
			res, err := px.Sync(ctx, c.Store().ListServices(), c.Store().ListEndpointSlices())
			if err == nil && len(res.Warnings) > 0 {
				err = errors.Join(res.Warnings...)
			}
			return err
		}
	default:
		return fmt.Errorf("mode %s: not on the kernel", d.info.Mode)
	}
	return nil
}

// wantPods are the pods the kernel should run: the cluster's running pods with a pod
// network address (host-network pods are their node's), serving their
// containerPorts.
func (d *Datapath) wantPods(c *cluster.Cluster) ([]kernel.PodConfig, error) {
	idx := map[string]int{}
	for i, n := range c.Nodes() {
		idx[n.Name()] = i
	}
	var out []kernel.PodConfig
	for _, p := range c.Pods() {
		if p.HostNetwork() || !p.Alive() {
			continue
		}
		obj, ok := c.Store().GetPod(p.Namespace(), p.Name())
		if !ok {
			continue
		}
		dnsPod := d.dnsSrv != nil && isDNSPod(obj.Namespace, obj.Labels)
		ip := p.IP()
		if !ip.Is4() {
			return nil, fmt.Errorf("pod %s has an IPv6 address: the kernel back end builds IPv4 clusters only", p.Key())
		}
		pc := kernel.PodConfig{Name: p.Key(), Node: idx[p.Node().Name()], IP: ip, TCPPorts: []uint16{}, UDPPorts: []uint16{}}
		// Port 53 of a DNS pod is its DNS server's (serveDNS); init containers' ports are
		// sidecars'.
		skipDNS := func(cp corev1.ContainerPort) bool { return dnsPod && cp.ContainerPort == 53 }
		pc.AddContainerPorts(obj.Spec.InitContainers, skipDNS)
		pc.AddContainerPorts(obj.Spec.Containers, skipDNS)
		out = append(out, pc)
		if dnsPod {
			d.dnsPods[pc.Name] = true
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Sync implements scenario.Datapath: pods started and stopped, node settings, then
// every node's rules from the cluster's Services and EndpointSlices.
func (d *Datapath) Sync(ctx context.Context, c *cluster.Cluster) error {
	want, err := d.wantPods(c)
	if err != nil {
		return err
	}
	byName := map[string]kernel.PodConfig{}
	for _, pc := range want {
		byName[pc.Name] = pc
	}
	for _, p := range append([]*kernel.Pod(nil), d.h.Pods...) {
		pc, ok := byName[p.Name]
		if ok && pc.IP == p.IP && pc.Node == p.Node.Index && samePorts(pc, p) {
			delete(byName, p.Name)
			continue
		}
		d.stopDNS(p.Name)
		if err := d.h.RemovePod(ctx, p.Name); err != nil {
			return err
		}
		delete(d.podNode, p.Name)
	}
	for _, pc := range want {
		if _, ok := byName[pc.Name]; !ok {
			continue
		}
		p, err := d.h.AddPod(ctx, pc)
		if err != nil {
			return fmt.Errorf("starting pod %s: %w", pc.Name, err)
		}
		d.podNode[pc.Name] = d.order[pc.Node].name
		if d.dnsPods[pc.Name] {
			if err := d.serveDNS(p); err != nil {
				return err
			}
		}
	}
	for _, p := range d.h.Pods {
		ns, name, _ := strings.Cut(p.Name, "/")
		if err := d.h.SetListening(p, c.PodListening(ns, name)); err != nil {
			return err
		}
	}
	for _, n := range d.order {
		if err := d.applySettings(ctx, n, c.Node(n.name).Settings()); err != nil {
			return fmt.Errorf("node %s: %w", n.name, err)
		}
	}
	for _, n := range d.order {
		if err := d.syncNode(ctx, c, n); err != nil {
			return fmt.Errorf("kube-proxy (%s) sync on %s: %w", modeName(d.info.Mode), n.name, err)
		}
	}
	return nil
}

// syncNode re-programs a node's rules when the simulated node's kube-proxy synced
// since the last time (so that a paused proxy, a sync delay or a restart leave the
// kernel's rules as they leave the simulation's: they change when the simulation's
// do), holding the conntrack cleanup back as the step asked.
func (d *Datapath) syncNode(ctx context.Context, c *cluster.Cluster, n *node) error {
	if n.clean {
		n.clean, n.holding = false, false
		n.ct.hold = false
		if err := n.ct.release(); err != nil {
			return err
		}
	}
	if n.rulesOnly {
		n.ct.hold = true
	}
	defer func() { n.rulesOnly, n.ct.hold = false, n.holding }()
	syncs := c.Node(n.name).ProxySyncs()
	if syncs == n.synced {
		return nil
	}
	n.synced = syncs
	return n.sync(ctx, c)
}

// heldConntrack is kube-proxy's conntrack cleanup on a kernel node, which a step can
// keep back (hold) and run later (release).
type heldConntrack struct {
	ct      *kernel.Conntrack
	hold    bool
	pending []proxy.ConntrackFilter
}

// Delete implements proxy.Conntrack.
func (h *heldConntrack) Delete(f proxy.ConntrackFilter) (int, error) {
	if h.hold {
		h.pending = append(h.pending, f)
		return 0, nil
	}
	return h.ct.Delete(f)
}

func (h *heldConntrack) release() error {
	var errs []error
	for _, f := range h.pending {
		if _, err := h.ct.Delete(f); err != nil {
			errs = append(errs, err)
		}
	}
	h.pending = nil
	return errors.Join(errs...)
}

func samePorts(pc kernel.PodConfig, p *kernel.Pod) bool {
	eq := func(a, b []uint16) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	return eq(pc.TCPPorts, p.TCPPorts) && eq(pc.UDPPorts, p.UDPPorts)
}

// applySettings writes the node's kernel settings that changed since the last time.
func (d *Datapath) applySettings(ctx context.Context, n *node, s netsim.NodeSettings) error {
	if n.hairpin == nil || *n.hairpin != s.Hairpin {
		if err := d.h.SetHairpin(ctx, n.kn.Index, s.Hairpin); err != nil {
			return err
		}
		v := s.Hairpin
		n.hairpin = &v
	}
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	m := map[string]string{
		"net.ipv4.ip_forward":                           b(s.IPForward),
		"net.ipv4.conf.all.rp_filter":                   fmt.Sprint(s.RPFilter),
		"net.netfilter.nf_conntrack_tcp_be_liberal":     b(s.Conntrack.TCPBeLiberal),
		"net.netfilter.nf_conntrack_udp_timeout":        secs(s.Conntrack.UDPTimeout, 30),
		"net.netfilter.nf_conntrack_udp_timeout_stream": secs(s.Conntrack.UDPStream, 120),
	}
	if n.localnet {
		m["net.ipv4.conf.all.route_localnet"] = b(s.RouteLocalnet)
	}
	if d.info.Mode == kubeproxy.IPVS {
		for key, v := range map[string]netsim.Sysctl{"conn_reuse_mode": s.IPVS.ConnReuseMode, "expire_nodest_conn": s.IPVS.ExpireNodestConn,
			"expire_quiescent_template": s.IPVS.ExpireQuiescentTemplate, "conntrack": s.IPVS.Conntrack} {
			if v.Set {
				m["net.ipv4.vs."+key] = fmt.Sprint(v.Value)
			}
		}
	}
	changed := map[string]string{}
	for k, v := range m {
		if n.applied[k] != v {
			changed[k] = v
		}
	}
	if len(changed) == 0 {
		return nil
	}
	if err := d.h.WriteSysctls(n.kn.Netns, changed); err != nil {
		return err
	}
	for k, v := range changed {
		n.applied[k] = v
	}
	return nil
}

func secs(d time.Duration, def int) string {
	if d <= 0 {
		return fmt.Sprint(def)
	}
	return fmt.Sprint(int(d / time.Second))
}

// Dial implements scenario.Datapath: one connection or datagram from the step's source
// namespace, bound to the client address (and port) the simulation chose.
func (d *Datapath) Dial(ctx context.Context, dd scenario.DatapathDial) scenario.Dialed {
	ns, err := d.source(dd.From)
	if err != nil {
		return scenario.Dialed{Result: netsim.ResultDropped, Reason: err.Error()}
	}
	src := netip.AddrPortFrom(dd.Client, dd.SrcPort)
	res := d.h.DialFromTimeout(ns, dd.Proto, src, dd.Dst, d.opts.Timeout)
	switch res.Outcome {
	case kernel.Answered:
		out := scenario.Dialed{Result: netsim.ResultDelivered, Seen: res.Source.Addr().Unmap()}
		if dd.Connect {
			out.Result = netsim.ResultConnected
			if dd.Proto == "udp" {
				out.Result = netsim.ResultReplied
			}
		}
		if name, ok := strings.CutPrefix(res.Server, "node:"); ok {
			out.Node = name
		} else {
			out.Pod, out.Node = res.Server, d.podNode[res.Server]
		}
		return out
	case kernel.Refused:
		return scenario.Dialed{Result: netsim.ResultRefused, Reason: "refused on the kernel: " + errText(res.Err)}
	case kernel.Unreachable:
		return scenario.Dialed{Result: netsim.ResultRefused, Reason: "unreachable on the kernel: " + errText(res.Err)}
	case kernel.TimedOut:
		return scenario.Dialed{Result: netsim.ResultDropped, Reason: fmt.Sprintf("no answer on the kernel within %v", d.opts.Timeout)}
	}
	if errors.Is(res.Err, syscall.EPERM) {
		return scenario.Dialed{Result: netsim.ResultDropped, Reason: "on the kernel: EPERM (netfilter dropped the node's own packet)"}
	}
	return scenario.Dialed{Result: netsim.ResultDropped, Reason: "on the kernel: " + errText(res.Err)}
}

func errText(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// source is the namespace a step's traffic leaves from.
func (d *Datapath) source(from string) (*kernel.Netns, error) {
	kind, name, _ := strings.Cut(from, ":")
	switch kind {
	case "pod":
		if !strings.Contains(name, "/") {
			name = "default/" + name
		}
		if p := d.h.Pod(name); p != nil {
			return p.Netns, nil
		}
		return nil, fmt.Errorf("no pod %s runs on the kernel", name)
	case "node":
		if n := d.nodes[name]; n != nil {
			return n.kn.Netns, nil
		}
	case "external":
		if _, ok := d.info.ExternalHosts[name]; ok {
			return d.h.External, nil
		}
	}
	return nil, fmt.Errorf("no source %s on the kernel", from)
}

// Conntrack implements scenario.Datapath: the node's `conntrack -L`.
func (d *Datapath) Conntrack(ctx context.Context, name string) ([]netsim.Conn, error) {
	n := d.nodes[name]
	if n == nil {
		return nil, fmt.Errorf("no node %q on the kernel", name)
	}
	entries, err := n.kn.Conntrack.List(ctx, proxy.ConntrackFilter{})
	if err != nil {
		return nil, err
	}
	out := make([]netsim.Conn, 0, len(entries))
	for _, e := range entries {
		if e.Family != kernel.IPv4 {
			continue
		}
		c := netsim.Conn{
			Orig:  netfilter.Tuple{Proto: e.Protocol, Src: e.Orig.Src, Dst: e.Orig.Dst, SrcPort: e.Orig.SrcPort, DstPort: e.Orig.DstPort},
			Reply: netfilter.Tuple{Proto: e.Protocol, Src: e.Reply.Src, Dst: e.Reply.Dst, SrcPort: e.Reply.SrcPort, DstPort: e.Reply.DstPort},
		}
		if e.Status&kernel.StatusAssured != 0 {
			c.Status |= netfilter.StatusAssured
		}
		if e.Status&kernel.StatusUnreplied == 0 {
			c.Status |= netfilter.StatusSeenReply
		}
		c.Mark = e.Mark
		for st := netsim.TCPNone; st.String() != "INVALID"; st++ {
			if e.State != "" && st.String() == e.State {
				c.TCPState = st
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// Advance implements scenario.Datapath: a jump of at most MaxWait is waited for.
func (d *Datapath) Advance(ctx context.Context, dur time.Duration) string {
	if dur <= MaxWait {
		t := time.NewTimer(dur)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return fmt.Sprintf("waited %v for real", dur)
	}
	return fmt.Sprintf("not waited for (longer than %v): the simulation's clock moved (pods ended, proxies synced), the kernel's timers (conntrack entries, affinity) did not run out", MaxWait)
}

// State implements scenario.Datapath: each node's ruleset and conntrack table.
func (d *Datapath) State(ctx context.Context) []scenario.NodeState {
	var out []scenario.NodeState
	for _, n := range d.order {
		st := scenario.NodeState{Node: n.name}
		var rules []string
		switch d.info.Mode {
		case kubeproxy.NFTables:
			rules = append(rules, d.exec(ctx, n, "nft", "list", "ruleset"))
		case kubeproxy.IPVS:
			rules = append(rules, d.exec(ctx, n, "iptables-"+string(d.opts.Backend)+"-save"), d.exec(ctx, n, "ipset", "list"))
			if kernel.HaveTool("ipvsadm") {
				rules = append(rules, d.exec(ctx, n, "ipvsadm", "-Ln"))
			}
		default:
			rules = append(rules, d.exec(ctx, n, "iptables-"+string(d.opts.Backend)+"-save"))
		}
		st.Rules = strings.Join(rules, "\n")
		st.Conntrack = d.exec(ctx, n, "conntrack", "-L")
		st.Counters = d.counters(n)
		out = append(out, st)
	}
	return out
}

// counters are the nonzero packet counters of node n's namespace and of its pods'
// (NodeState.Counters), an error in the place of a namespace's counters that could
// not be read.
func (d *Datapath) counters(n *node) string {
	line := func(label string, ns *kernel.Netns) string {
		c, err := d.h.Counters(ns)
		if err != nil {
			c = "# " + err.Error()
		}
		return label + ": " + c + "\n"
	}
	var b strings.Builder
	b.WriteString(line("node", n.kn.Netns))
	for _, p := range d.h.Pods {
		if d.podNode[p.Name] == n.name {
			b.WriteString(line("pod "+p.Name, p.Netns))
		}
	}
	return b.String()
}

func (d *Datapath) exec(ctx context.Context, n *node, args ...string) string {
	out, err := d.h.Exec(ctx, n.kn.Netns, args...)
	if err != nil {
		return fmt.Sprintf("# %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Namespaces are the names of the namespaces the data path has now.
func (d *Datapath) Namespaces() []string {
	if d.h == nil {
		return nil
	}
	var out []string
	for _, ns := range d.h.Namespaces() {
		out = append(out, ns.Name)
	}
	return out
}

// Close implements scenario.Datapath: it deletes every namespace.
func (d *Datapath) Close() error {
	var err error
	d.once.Do(func() {
		for name := range d.dnsStops {
			d.stopDNS(name)
		}
		if d.dnsSrv != nil {
			d.dnsSrv.Close()
		}
		for _, v := range d.ipvs {
			v.Close()
		}
		if d.h != nil {
			err = d.h.Close()
		}
	})
	return err
}
