package netsim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// Config describes a cluster network. Zero fields take the defaults documented on each;
// the zero Config is a one-node IPv4 cluster.
type Config struct {
	// Seed drives every random choice in the simulation: datapath handler decisions,
	// NAT port choice, link faults, netstack ISNs and ephemeral ports.
	Seed uint64
	// Nodes lists the nodes. Default: one node named "node-a".
	Nodes []NodeConfig
	// NodeCIDRs are the networks node IPs come from, one per family, primary first.
	// Default [172.18.0.0/16] (as kind uses); node i gets .2+i.
	NodeCIDRs []netip.Prefix
	// ClusterCIDRs are the pod networks, one per family. Default [10.244.0.0/16]; node i
	// gets the i-th /NodeCIDRMaskSize (IPv4) or /64 (IPv6).
	ClusterCIDRs []netip.Prefix
	// NodeCIDRMaskSize is the size of each node's IPv4 pod range carved from the
	// cluster CIDR (kube-controller-manager's --node-cidr-mask-size-ipv4). Default 24:
	// 254 pods a node, and 256 nodes in the default /16; a cluster of 5,000 nodes
	// needs a larger cluster CIDR (10.0.0.0/8 holds 65,536 /24s) or a longer mask.
	NodeCIDRMaskSize int
	// ExternalCIDR is the network of external hosts. Default 203.0.113.0/24.
	ExternalCIDR netip.Prefix
	// MTU of every link. Default 1500; 65536 gives the fast mode.
	MTU int
	// ManualClock makes virtual time move only through Clock().Advance. Default: the
	// clock runs with the wall clock (and Advance jumps it).
	ManualClock bool
	// QueueLen bounds each node's input queue (packets beyond it are tail-dropped and
	// counted). Default 4096.
	QueueLen int

	// Replay makes runs reproducible byte for byte (see Network.Run): a manual clock, and
	// packets delivered one at a time by Run. About a hundred times slower.
	Replay bool
	// NonMasqueradeCIDRs are destinations, besides the cluster and node CIDRs, that pod
	// traffic leaving a node reaches without the CNI's masquerade (see
	// NodeSettings.EgressMasquerade): ip-masq-agent's nonMasqueradeCIDRs. A Kubernetes
	// cluster puts its service CIDRs here.
	NonMasqueradeCIDRs []netip.Prefix
	// LowestFreePodIP makes a new pod get the lowest free address of its node's pod
	// CIDR, so that a pod started right after one was deleted gets the deleted pod's
	// address. Default: round robin, as host-local IPAM allocates (each allocation
	// goes on after the last one, wrapping around at the end of the range), so a freed
	// address is taken again only once the range has been gone through.
	LowestFreePodIP bool
	// NoOffload turns off the pods' segmentation offload (GSO when sending, GRO when
	// receiving; see gro.go in package netsim): every TCP segment is then built and
	// received alone. Offload changes nothing the datapath, its rules, counters, faults
	// or captures see (they see the MTU-sized segments either way), only CPU time.
	// Replay mode never uses it.
	NoOffload bool
	// NoTrains makes the pods' links cut every GSO packet into its segments at once, as
	// before trains (train.go in package netsim): with trains a super-packet crosses the
	// datapath whole where every hook can answer for all its segments, with the same
	// counters, conntrack entries, captures and traces as its segments.
	NoTrains bool
}

// NodeConfig describes a node.
type NodeConfig struct {
	Name string
	// IPs are the node's addresses, one per family; default from Config.NodeCIDRs.
	IPs []netip.Addr
	// PodCIDRs are the node's pod ranges, one per family; default from ClusterCIDRs.
	PodCIDRs []netip.Prefix
	// Settings are the node's kernel settings; nil means DefaultNodeSettings().
	Settings *NodeSettings
}

func (cfg *Config) setDefaults() error {
	if len(cfg.Nodes) == 0 {
		cfg.Nodes = []NodeConfig{{Name: "node-a"}}
	}
	if len(cfg.NodeCIDRs) == 0 {
		cfg.NodeCIDRs = []netip.Prefix{netip.MustParsePrefix("172.18.0.0/16")}
	}
	if len(cfg.ClusterCIDRs) == 0 {
		cfg.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	}
	if !cfg.ExternalCIDR.IsValid() {
		cfg.ExternalCIDR = netip.MustParsePrefix("203.0.113.0/24")
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.MTU < 1280 || cfg.MTU > 65536 {
		return fmt.Errorf("MTU %d: must be between 1280 and 65536", cfg.MTU)
	}
	if cfg.QueueLen == 0 {
		cfg.QueueLen = 4096
	}
	if cfg.NodeCIDRMaskSize == 0 {
		cfg.NodeCIDRMaskSize = 24
	}
	if cfg.NodeCIDRMaskSize < 1 || cfg.NodeCIDRMaskSize > 30 {
		return fmt.Errorf("nodeCIDRMaskSize %d: must be between 1 and 30", cfg.NodeCIDRMaskSize)
	}
	if cfg.Replay {
		cfg.ManualClock = true
	}
	for i, p := range cfg.ClusterCIDRs {
		cfg.ClusterCIDRs[i] = p.Masked()
	}
	for i, p := range cfg.NodeCIDRs {
		cfg.NodeCIDRs[i] = p.Masked()
	}
	seen := map[string]bool{}
	for i, n := range cfg.Nodes {
		if n.Name == "" {
			return fmt.Errorf("nodes[%d].name: required", i)
		}
		if seen[n.Name] {
			return fmt.Errorf("nodes[%d].name: duplicate node %q", i, n.Name)
		}
		seen[n.Name] = true
	}
	return nil
}

// Network is a simulated cluster network at run time.
type Network struct {
	cfg    Config
	clock  *Clock
	fabric *fabric
	caps   captures
	done   chan struct{}
	rng    *rand.Rand

	probeMu sync.Mutex // probes run one at a time
	// probePk is the last probe's first packet, for the next probe to reuse (guarded by
	// probeMu; nil while a probe uses it, or after a handler stole it).
	probePk *probePacket
	mu      sync.Mutex
	// reservedPoints are capture points Capture takes before they exist (guarded by mu).
	reservedPoints map[string]bool
	nodes          map[string]*Node
	order          []*Node
	allNodes       []*Node // every node ever added, removed ones too: Close stops them all
	pods           map[string]*Pod
	external       map[string]*ExternalHost
	nextExternal   netip.Addr
	closed         bool
	nodeIndex      int // the index the next added node takes

	flowMu      sync.Mutex
	flowTracers atomic.Pointer[[]*FlowTracer] // running TraceFlows tracers; nil: none
	replayQ     replayQueue

	// id and labels mark the cluster's goroutines (pprof label netsim-cluster=id) so
	// that Quiesce can tell them from other clusters' (see idle.go).
	id     string
	labels context.Context
}

// New builds the cluster network: nodes with their bridges, host stacks and datapaths.
func New(cfg Config) (c *Network, err error) {
	labels, id := newClusterLabels()
	// Everything New starts (node datapaths, netstack's goroutines, the proxies')
	// inherits the cluster's label.
	tmp := &Network{labels: labels}
	tmp.labeled(func() { c, err = newCluster(cfg, labels, id) })
	return c, err
}

func newCluster(cfg Config, labels context.Context, id string) (*Network, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("netsim: config: %w", err)
	}
	c := &Network{
		cfg:      cfg,
		clock:    NewClock(cfg.ManualClock),
		done:     make(chan struct{}),
		rng:      rand.New(rand.NewChaCha8(seedFor(cfg.Seed, "cluster"))),
		nodes:    map[string]*Node{},
		pods:     map[string]*Pod{},
		external: map[string]*ExternalHost{},
		id:       id,
		labels:   labels,
	}
	c.clock.labels = labels
	c.fabric = newFabric(c)
	c.nextExternal = cfg.ExternalCIDR.Addr().Next().Next().Next().Next().Next().Next().Next().Next().Next()
	// Stacks start one TCP processor goroutine per GOMAXPROCS; build them under 1 (see
	// netstack.md: it halves their memory and goroutines).
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	c.fabric.deferPublish = true // published once below, with every node
	for i, nc := range cfg.Nodes {
		if _, err := c.addNode(i, nc); err != nil {
			c.fabric.mu.Lock()
			c.fabric.deferPublish = false
			c.fabric.unlock()
			c.Close()
			return nil, err
		}
	}
	c.fabric.mu.Lock()
	c.fabric.deferPublish = false
	c.fabric.unlock()
	runtime.GOMAXPROCS(prev)
	c.nodeIndex = len(cfg.Nodes)
	return c, nil
}

// Clock returns the cluster's virtual clock.
func (c *Network) Clock() *Clock { return c.clock }

// Config returns the cluster's configuration with defaults filled in.
func (c *Network) Config() Config { return c.cfg }

// Node returns the named node, or nil.
func (c *Network) Node(name string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[name]
}

// Nodes returns the nodes in configuration order.
func (c *Network) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Node(nil), c.order...)
}

// Pod returns the running pod "namespace/name", or nil.
func (c *Network) Pod(namespace, name string) *Pod {
	return c.podByKey(namespace + "/" + name)
}

// podByKey returns the running pod whose key is "namespace/name", or nil.
func (c *Network) podByKey(key string) *Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pods[key]
}

// Pods returns the running pods sorted by key.
func (c *Network) Pods() []*Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Pod, 0, len(c.pods))
	for _, p := range c.pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

// nthAddr returns the address n after base.
func nthAddr(base netip.Addr, n int) netip.Addr {
	b := base.AsSlice()
	carry := n
	for i := len(b) - 1; i >= 0 && carry > 0; i-- {
		v := int(b[i]) + carry
		b[i] = byte(v)
		carry = v >> 8
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// nthSubnet returns the i-th subnet of the given size inside p.
func nthSubnet(p netip.Prefix, bits, i int) (netip.Prefix, error) {
	if bits < p.Bits() {
		return netip.Prefix{}, fmt.Errorf("%s is smaller than a /%d", p, bits)
	}
	if shift := bits - p.Bits(); shift < 31 && i >= 1<<shift {
		return netip.Prefix{}, fmt.Errorf("%s has no room for a %d-th /%d", p, i+1, bits)
	}
	b := p.Addr().AsSlice()
	// add i << (len*8 - bits)
	hostBits := len(b)*8 - bits
	for k := 0; k < 64 && i > 0; k++ {
		if i&1 != 0 {
			bit := hostBits + k
			idx := len(b) - 1 - bit/8
			if idx < 0 {
				return netip.Prefix{}, errors.New("subnet index overflow")
			}
			// add with carry
			add := 1 << (bit % 8)
			for j := idx; j >= 0 && add > 0; j-- {
				v := int(b[j]) + add
				b[j] = byte(v)
				add = v >> 8
			}
		}
		i >>= 1
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(a, bits), nil
}

func (c *Network) addNode(i int, nc NodeConfig) (*Node, error) {
	n := &Node{
		cluster:  c,
		name:     nc.Name,
		cfg:      nc,
		ifaces:   map[string]*Iface{},
		local:    map[netip.Addr]*Iface{},
		ports:    map[netip.Addr]*podPort{},
		stopped:  make(chan struct{}),
		settings: DefaultNodeSettings(),
		rng:      rand.New(rand.NewChaCha8(seedFor(c.cfg.Seed, "node/"+nc.Name))),
	}
	if nc.Settings != nil {
		n.settings = *nc.Settings
	}
	ipvs := n.settings.IPVS
	n.ipvs.Store(&ipvs)
	n.q = packetQueue{wake: make(chan struct{}, 1), limit: c.cfg.QueueLen}
	n.fromFabric = func(f frame) { n.fromUplinkNow(f, nil) }
	n.hot = new(nodeHot)
	for h := range netfilter.NumHooks {
		n.planLocked(netfilter.Hook(h)) // n is not shared yet
	}
	n.mu = &n.hot.mu
	n.ct = NewConntrack(c.clock.Now, n.settings.Conntrack)
	n.ct.mu = n.mu
	n.uplinkLink = newLink("node "+nc.Name+" uplink", c.cfg.Seed)
	// Addresses.
	n.ips = nc.IPs
	if len(n.ips) == 0 {
		for _, p := range c.cfg.NodeCIDRs {
			n.ips = append(n.ips, nthAddr(p.Addr(), 2+i))
		}
	}
	n.podCIDR = nc.PodCIDRs
	if len(n.podCIDR) == 0 {
		for _, p := range c.cfg.ClusterCIDRs {
			bits := c.cfg.NodeCIDRMaskSize
			if p.Addr().Is6() {
				bits = 64
			}
			sub, err := nthSubnet(p, bits, i)
			if err != nil {
				return nil, fmt.Errorf("node %s: pod CIDR: %w (a larger clusterCIDRs range or nodeCIDRMaskSize makes room)", nc.Name, err)
			}
			n.podCIDR = append(n.podCIDR, sub)
		}
	}
	for _, p := range n.podCIDR {
		n.gateway = append(n.gateway, p.Addr().Next())
		if p4, ok := prefix4Of(p); ok {
			n.pod4 = append(n.pod4, p4)
		}
	}
	// Interfaces.
	n.lo = &Iface{Name: "lo", Kind: IfLoopback, Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8"), netip.MustParsePrefix("::1/128")}}
	n.uplink = &Iface{Name: "eth0", Kind: IfUplink}
	for j, ip := range n.ips {
		bits := 32
		for _, p := range c.cfg.NodeCIDRs {
			if p.Contains(ip) {
				bits = p.Bits()
			}
		}
		_ = j
		n.uplink.Addrs = append(n.uplink.Addrs, netip.PrefixFrom(ip, bits))
	}
	n.bridge = &Iface{Name: "cbr0", Kind: IfBridge}
	for j, gw := range n.gateway {
		n.bridge.Addrs = append(n.bridge.Addrs, netip.PrefixFrom(gw, n.podCIDR[j].Bits()))
	}
	for _, i := range []*Iface{n.lo, n.uplink, n.bridge} {
		n.ifaces[i.Name] = i
		if i == n.lo {
			continue
		}
		for _, p := range i.Addrs {
			n.setLocalLocked(p.Addr(), i) // n is not shared yet
		}
	}
	// The host network stack.
	var hostAddrs []netip.Prefix
	for _, ip := range n.ips {
		hostAddrs = append(hostAddrs, netip.PrefixFrom(ip, ip.BitLen()))
	}
	for _, gw := range n.gateway {
		hostAddrs = append(hostAddrs, netip.PrefixFrom(gw, gw.BitLen()))
	}
	var srcRoutes []srcRoute
	for j, p := range n.podCIDR {
		srcRoutes = append(srcRoutes, srcRoute{dst: p, src: n.gateway[j]})
	}
	st, err := newNetStack(stackOptions{
		srcRoutes:  srcRoutes,
		defaultSrc: n.ips,
		name:       "node/" + nc.Name,
		seed:       c.cfg.Seed,
		clock:      c.clock,
		mtu:        uint32(c.cfg.MTU),
		addrs:      hostAddrs,
		out:        func(f frame) { n.enqueue(f, queueSource{kind: fromHost}) },
		loopOut:    func(f frame) { n.enqueue(f, queueSource{kind: fromHostLo}) },
	})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", nc.Name, err)
	}
	n.host = st
	n.hostNet = newNet("node "+nc.Name, st, n.ips)
	n.hostNet.srcFor = n.SourceFor
	// The cluster network's routes to it.
	c.fabric.mu.Lock()
	for _, ip := range n.ips {
		if d, ok := c.fabric.nodeIPs[ip]; ok {
			c.fabric.unlock()
			st.close()
			return nil, fmt.Errorf("node %s: IP %s already belongs to node %s", nc.Name, ip, d.name)
		}
		c.fabric.nodeIPs[ip] = n
	}
	for _, p := range n.podCIDR {
		for _, r := range c.fabric.podCIDRs {
			if r.p.Overlaps(p) {
				c.fabric.unlock()
				st.close()
				return nil, fmt.Errorf("node %s: pod CIDR %s overlaps node %s's %s", nc.Name, p, r.node.name, r.p)
			}
		}
		c.fabric.podCIDRs = append(c.fabric.podCIDRs, cidrRoute{p: p, node: n})
	}
	c.fabric.unlock()
	n.AddHandler(HandlerSpec{Name: "cni-masquerade", Hook: netfilter.Postrouting, Priority: netfilter.PriorityNATSrc + 10, NAT: true, Handler: HandlerFunc(n.egressMasq)})
	c.mu.Lock()
	c.nodes[nc.Name] = n
	c.order = append(c.order, n)
	c.allNodes = append(c.allNodes, n)
	c.mu.Unlock()
	if c.cfg.Replay {
		close(n.stopped)
	} else {
		go n.run()
	}
	return n, nil
}

// Close stops the simulation: every stack is torn down and every goroutine ends.
// Connections in flight are aborted (a dial returns an error), and sockets opened while
// or after it runs fail with net.ErrClosed: nothing a program does makes it wait.
func (c *Network) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	pods := make([]*Pod, 0, len(c.pods))
	for _, p := range c.pods {
		pods = append(pods, p)
	}
	nodes := append([]*Node(nil), c.allNodes...)
	hosts := make([]*ExternalHost, 0, len(c.external))
	for _, h := range c.external {
		hosts = append(hosts, h)
	}
	c.mu.Unlock()
	close(c.done)
	for _, n := range nodes {
		select {
		case n.q.wake <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
	for _, p := range pods {
		p.kill()
	}
	for _, h := range hosts {
		h.dead.Store(true)
		if h.stack != nil {
			h.stack.close()
		}
	}
	for _, n := range nodes {
		<-n.stopped
		if n.host != nil {
			n.host.close()
		}
	}
}

// Wait a moment of virtual time for in-flight packets: Settle advances a manual clock by
// d, or, for a running clock, does nothing. (Real traffic needs no settling: callers wait
// on their connections.)
func (c *Network) Settle(d time.Duration) {
	if c.clock.Manual() {
		c.clock.Advance(d)
	}
}

// StartPod starts a pod's network on a node with the given IPs (nil: the next free
// addresses of the node's pod CIDRs; hostNetwork: the node's). A Kubernetes cluster's
// kubelet calls this for the pods it runs; tests of the bare network call it directly.
func (c *Network) StartPod(node, namespace, name string, ips []netip.Addr, hostNetwork bool) (p *Pod, err error) {
	c.labeled(func() { p, err = c.startPod(node, namespace, name, ips, hostNetwork) })
	return p, err
}

func (c *Network) startPod(node, namespace, name string, ips []netip.Addr, hostNetwork bool) (*Pod, error) {
	n := c.Node(node)
	if n == nil {
		return nil, fmt.Errorf("pod %s/%s: no node %q", namespace, name, node)
	}
	key := namespace + "/" + name
	c.mu.Lock()
	if _, dup := c.pods[key]; dup {
		c.mu.Unlock()
		return nil, fmt.Errorf("pod %s already runs", key)
	}
	c.mu.Unlock()
	if !hostNetwork && len(ips) == 0 {
		var err error
		if ips, err = n.nextPodIPs(); err != nil {
			return nil, fmt.Errorf("pod %s: %w", key, err)
		}
	}
	p, err := n.newPod(namespace, name, ips, hostNetwork)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.pods[key] = p
	c.mu.Unlock()
	return p, nil
}

// StopPod kills a pod's network (its sockets die) and forgets it.
func (c *Network) StopPod(namespace, name string) {
	key := namespace + "/" + name
	c.mu.Lock()
	p := c.pods[key]
	delete(c.pods, key)
	c.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// nextPodIPs allocates an address of each pod CIDR, as host-local IPAM does: the
// next free one after the last allocated (round robin, wrapping around after the end
// of the range), or with Config.LowestFreePodIP the lowest free one. The network
// address, the gateway (cbr0) and an IPv4 broadcast address are never allocated.
func (n *Node) nextPodIPs() ([]netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.lastPodIP) != len(n.podCIDR) {
		n.lastPodIP = make([]netip.Addr, len(n.podCIDR))
	}
	var out []netip.Addr
	for j, p := range n.podCIDR {
		first := n.gateway[j].Next()
		start := first
		if last := n.lastPodIP[j]; !n.cluster.cfg.LowestFreePodIP && last.IsValid() && p.Contains(last.Next()) {
			start = last.Next()
		}
		a, ok := n.freePodIP(p, start, first)
		if !ok {
			return nil, fmt.Errorf("node %s: pod CIDR %s is full", n.name, p)
		}
		out = append(out, a)
	}
	for j, a := range out {
		n.lastPodIP[j] = a
	}
	return out, nil
}

// freePodIP returns the first free pod address of p from start on, wrapping around to
// first after the end of the range; false when every address is taken.
func (n *Node) freePodIP(p netip.Prefix, start, first netip.Addr) (netip.Addr, bool) {
	usable := func(a netip.Addr) bool {
		if _, used := n.ports[a]; used || a == p.Addr() {
			return false
		}
		return !a.Is4() || p.Contains(a.Next()) // not the broadcast address
	}
	for a := start; p.Contains(a); a = a.Next() {
		if usable(a) {
			return a, true
		}
	}
	for a := first; p.Contains(a) && a != start; a = a.Next() {
		if usable(a) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// AddNode adds a node to a running network (a new machine joining). Its index among the
// nodes picks its default IPs and pod CIDRs, so they do not collide with existing nodes'.
func (c *Network) AddNode(nc NodeConfig) (n *Node, err error) {
	c.labeled(func() { n, err = c.addNodeLive(nc) })
	return n, err
}

func (c *Network) addNodeLive(nc NodeConfig) (*Node, error) {
	if nc.Name == "" {
		return nil, fmt.Errorf("add node: name required")
	}
	if c.Node(nc.Name) != nil {
		return nil, fmt.Errorf("add node: node %q exists", nc.Name)
	}
	c.mu.Lock()
	idx := c.nodeIndex
	c.nodeIndex++
	c.mu.Unlock()
	return c.addNode(idx, nc)
}

// RemoveNode takes a node out of the network: it dies (its pods with it, see KillNode)
// and the cluster network forgets its routes.
func (c *Network) RemoveNode(name string) error {
	n := c.Node(name)
	if n == nil {
		return fmt.Errorf("remove node: no node %q", name)
	}
	if err := c.KillNode(name); err != nil {
		return err
	}
	c.forgetNode(n)
	return nil
}

// forgetNode removes a dead node's routes and its place among the nodes.
func (c *Network) forgetNode(n *Node) {
	c.fabric.mu.Lock()
	for ip, m := range c.fabric.nodeIPs {
		if m == n {
			delete(c.fabric.nodeIPs, ip)
		}
	}
	var keep []cidrRoute
	for _, r := range c.fabric.podCIDRs {
		if r.node != n {
			keep = append(keep, r)
		}
	}
	c.fabric.podCIDRs = keep
	c.fabric.unlock()
	c.mu.Lock()
	delete(c.nodes, n.name)
	var order []*Node
	for _, m := range c.order {
		if m != n {
			order = append(order, m)
		}
	}
	c.order = order
	c.mu.Unlock()
}
