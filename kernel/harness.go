package kernel

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/knftables"
)

// Topology is how a harness node connects its pods.
type Topology string

// Topologies.
const (
	// TopologyAuto is TopologyBridge when the node namespace has bridge netfilter
	// (net.bridge.bridge-nf-call-iptables), else TopologyRouted.
	TopologyAuto Topology = ""
	// TopologyBridge: pods hang off a Linux bridge cbr0 on the node (kubenet style) with
	// hairpin mode on every pod port. Pod-to-pod traffic on one node is bridged, so it
	// passes iptables only through br_netfilter (bridge-nf-call-iptables=1); without
	// br_netfilter a pod reaching a Service whose endpoint is on the same bridge would
	// bypass DNAT un-NAT on the reply and break.
	TopologyBridge Topology = "bridge"
	// TopologyRouted: one veth per pod and no bridge (CNI ptp / Calico style). The pod has
	// a /32 and a default route via the node's gateway address, which sits on every
	// host-side veth; the node routes each pod's /32 to its veth. Every packet between
	// pods is routed by the node, so iptables sees it without br_netfilter.
	TopologyRouted Topology = "routed"
)

// PodConfig describes one pod.
type PodConfig struct {
	Name string     // reported by the pod's echo servers; required, unique
	Node int        // index of the node it runs on (0, or 1 with SecondNode)
	IP   netip.Addr // optional; default: the next free address of the node's pod subnet
	IP6  netip.Addr // optional, with IPv6; default: the same host number in the IPv6 subnet
	// TCPPorts and UDPPorts, when either is non-nil, are the ports the pod's echo
	// servers listen on, per protocol, instead of HarnessConfig.PodPorts on both (as a
	// pod's containerPorts declare a protocol each).
	TCPPorts, UDPPorts []uint16
}

// HarnessConfig describes the mini-cluster a Harness builds. Zero values get defaults.
type HarnessConfig struct {
	// Prefix starts every namespace name; default "clh". Names are
	// PREFIX<pid>-<n>-<role>, unique per process and harness; at start, namespaces
	// named PREFIX<pid>-... whose pid is no longer running are deleted as leftovers of
	// a crashed run. Must be letters and digits only.
	Prefix string
	// Topology of the pod network; TopologyAuto picks bridge when br_netfilter is there.
	Topology Topology
	// Pods to create; default two pods "pod0" and "pod1" on node 0.
	Pods []PodConfig
	// PodPorts: every pod runs a TCP and a UDP echo server on each port; default 8080.
	// Use an empty non-nil slice for none.
	PodPorts []uint16
	// SecondNode adds node 1, with its own pod subnet, on the same node network.
	SecondNode bool
	// NodeCount, when above zero, is how many nodes the harness has (node i with the
	// i-th /24 of ClusterCIDR), instead of one (or two with SecondNode); at most 50.
	NodeCount int
	// NodeNetwork is the network between the nodes and the external client (a /24 or
	// bigger): node i gets host address i+1 (or NodeIPs[i]), the external client host
	// address 100. Default 192.168.77.0/24.
	NodeNetwork netip.Prefix
	// NodeIPs, when set, are the nodes' addresses on NodeNetwork, one per node (for a
	// harness that mirrors a simulated cluster's address plan).
	NodeIPs []netip.Addr
	// ClusterCIDR is the pod network (/16 or bigger); node i's pod subnet is its i-th
	// /24, with the node's gateway address at .1. Default 10.244.0.0/16.
	ClusterCIDR netip.Prefix
	// ExternalAddrs are extra client addresses of the external namespace (any
	// addresses; the nodes' default routes lead back to it), for tests that need
	// several outside sources, such as LoadBalancer source ranges: use DialFrom with one
	// of them as the source.
	ExternalAddrs []netip.Addr
	// ExternalRoutes are the prefixes the external client routes via node 0 (Service
	// VIPs, externalIPs, LoadBalancer IPs). Default 10.96.0.0/12 and 203.0.113.0/24.
	ExternalRoutes []netip.Prefix
	// IPv6 makes the harness dual-stack: every namespace also gets IPv6 addresses and
	// routes, nodes forward IPv6 and get IPTables6/Conntrack6, and the pods' echo
	// servers listen on both families.
	IPv6 bool
	// NodeNetwork6 is the IPv6 node network (a /64 or bigger), numbered like
	// NodeNetwork. Default fd00:77::/64.
	NodeNetwork6 netip.Prefix
	// ClusterCIDR6 is the IPv6 pod network (a /56 or bigger); node i's pod subnet is
	// its i-th /64, gateway ::1. Default fd00:10:244::/56.
	ClusterCIDR6 netip.Prefix
	// ExternalRoutes6 are routed from the external client via node 0 over IPv6.
	// Default fd00:10:96::/108 and 2001:db8::/64.
	ExternalRoutes6 []netip.Prefix
	// Backend for the nodes' IPTables; BackendAuto means nft (a fresh namespace has no
	// rules for detection to go by).
	Backend Backend
	// NFTables sets the nodes up for kube-proxy's nftables mode: each node gets
	// NFTables adapters (table ip kube-proxy, and ip6 kube-proxy with IPv6) beside its
	// IPTables ones, and route_localnet stays 0, because the nftables mode never sets
	// it (it does not support localhost NodePorts; see nodeSysctls). Needs the nft tool.
	NFTables bool
	// NodeSysctls are written in every node namespace after the defaults (keys as for
	// sysctl(8): "net.ipv4.ip_forward").
	NodeSysctls map[string]string
	// Timeout bounds each client operation (connect, and wait for the answer); default
	// 1 s, so a dropped packet costs at most this much.
	Timeout time.Duration
}

// Netns is one network namespace of a harness.
type Netns struct {
	Name string // under /run/netns: `ip netns exec NAME ...` works
	Role string // "node0", "node1", "external" or "pod/NAME"
	h    *nsHandle
}

func (n *Netns) String() string { return n.Role + "(" + n.Name + ")" }

// Node is a node namespace: the "host" whose iptables a test programs.
type Node struct {
	Index   int
	Netns   *Netns
	IP      netip.Addr   // node IP on eth0, the node network
	PodCIDR netip.Prefix // this node's pod subnet
	// Gateway is the node's address on the pod network: on cbr0 (bridge) or on every
	// host-side pod veth (routed); pods route via it.
	Gateway   netip.Addr
	IPTables  *IPTables  // IPv4 iptables in this namespace
	Conntrack *Conntrack // conntrack in this namespace (IPv4 table)
	// NFTables, with HarnessConfig.NFTables, programs table ip kube-proxy in this
	// namespace (its ApplyScript, ListRuleset and DeleteTable reach every table).
	NFTables *NFTables
	Pods     []*Pod
	// HairpinOff says the node's pod ports on cbr0 have hairpin mode off (SetHairpin).
	HairpinOff bool

	// With HarnessConfig.IPv6 (zero otherwise):
	IP6        netip.Addr
	PodCIDR6   netip.Prefix
	Gateway6   netip.Addr
	IPTables6  *IPTables  // ip6tables
	Conntrack6 *Conntrack // conntrack, IPv6 table
	NFTables6  *NFTables  // table ip6 kube-proxy, with HarnessConfig.NFTables too
}

// Pod is a pod namespace.
type Pod struct {
	Name     string
	Node     *Node
	Netns    *Netns
	IP       netip.Addr
	IP6      netip.Addr // with HarnessConfig.IPv6
	HostVeth string     // the node-side interface of its veth pair
	// Ports its echo servers listen on over both TCP and UDP (HarnessConfig.PodPorts),
	// or, for a pod given ports per protocol, TCPPorts and UDPPorts.
	Ports              []uint16
	TCPPorts, UDPPorts []uint16
	// NotListening says its echo servers are stopped (SetListening).
	NotListening bool
}

// Harness is a mini-cluster of network namespaces:
//
//	 external client ns ("external")          node ns ("node0")                  pod ns ("pod/NAME")
//	┌─────────────────────────┐   veth   ┌──────────────────────────────┐  veth  ┌──────────────┐
//	│ fab0 (bridge)           │──n0──eth0│ eth0 192.168.77.1/24          │        │ eth0         │
//	│  192.168.77.100/24      │          │ default via 192.168.77.100    │ vethK──│ 10.244.0.K+2 │
//	│ routes 10.96.0.0/12,    │          │ cbr0 10.244.0.1/24 (bridge)   │        │ default via  │
//	│  203.0.113.0/24 via .1  │          │  ports vethK, hairpin on      │        │  10.244.0.1  │
//	│                         │──n1──┐   │ ip_forward, route_localnet=1  │        └──────────────┘
//	└─────────────────────────┘      │   │ iptables + conntrack here     │
//	                                 │   └──────────────────────────────┘
//	                                 └─eth0 node1 192.168.77.2, pods 10.244.1.0/24 (SecondNode)
//
// The external namespace is the outside world and the nodes' default gateway (it
// forwards nothing, so traffic to unknown destinations ends there). Nodes route each
// other's pod subnets via their node IPs. Nothing is created or changed in the caller's
// own namespace except the namespace files under /run/netns.
type Harness struct {
	Prefix      string
	Topology    Topology
	ClusterCIDR netip.Prefix
	Nodes       []*Node
	External    *Netns
	ExternalIP  netip.Addr
	ExternalIP6 netip.Addr // with HarnessConfig.IPv6
	Pods        []*Pod
	// BrNetfilter says whether the node namespaces have bridge netfilter (so bridged
	// traffic passes iptables).
	BrNetfilter bool
	// IPTables and Conntrack are node 0's; IPTables6 and Conntrack6 too, with IPv6.
	IPTables   *IPTables
	Conntrack  *Conntrack
	IPTables6  *IPTables
	Conntrack6 *Conntrack
	// NFTables and NFTables6 are node 0's, with HarnessConfig.NFTables.
	NFTables, NFTables6 *NFTables

	cfg       HarnessConfig
	run       runner
	next      []uint32 // per node, the next host number to try for a pod
	podSeq    int      // pods made so far (names their namespaces and veths)
	mu        sync.Mutex
	created   []*Netns
	servers   []*echoServer
	closeOnce sync.Once
	closeErr  error
}

var harnessSeq atomic.Int64

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,7}$`)

func (c *HarnessConfig) setDefaults() error {
	if c.Prefix == "" {
		c.Prefix = "clh"
	}
	if !prefixRE.MatchString(c.Prefix) {
		return fmt.Errorf("harness: Prefix %q: want 1-8 lower-case letters and digits, starting with a letter", c.Prefix)
	}
	if len(c.Pods) == 0 {
		c.Pods = []PodConfig{{Name: "pod0"}, {Name: "pod1"}}
	}
	if c.PodPorts == nil {
		c.PodPorts = []uint16{8080}
	}
	if !c.NodeNetwork.IsValid() {
		c.NodeNetwork = netip.MustParsePrefix("192.168.77.0/24")
	}
	if !c.ClusterCIDR.IsValid() {
		c.ClusterCIDR = netip.MustParsePrefix("10.244.0.0/16")
	}
	if c.ExternalRoutes == nil {
		c.ExternalRoutes = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("203.0.113.0/24")}
	}
	if !c.NodeNetwork6.IsValid() {
		c.NodeNetwork6 = netip.MustParsePrefix("fd00:77::/64")
	}
	if !c.ClusterCIDR6.IsValid() {
		c.ClusterCIDR6 = netip.MustParsePrefix("fd00:10:244::/56")
	}
	if c.ExternalRoutes6 == nil {
		c.ExternalRoutes6 = []netip.Prefix{netip.MustParsePrefix("fd00:10:96::/108"), netip.MustParsePrefix("2001:db8::/64")}
	}
	if c.IPv6 {
		if !c.NodeNetwork6.Addr().Is6() || c.NodeNetwork6.Addr().Is4In6() || c.NodeNetwork6.Bits() > 64 {
			return fmt.Errorf("harness: NodeNetwork6 %v: want an IPv6 /64 or bigger", c.NodeNetwork6)
		}
		if !c.ClusterCIDR6.Addr().Is6() || c.ClusterCIDR6.Addr().Is4In6() || c.ClusterCIDR6.Bits() > 56 {
			return fmt.Errorf("harness: ClusterCIDR6 %v: want an IPv6 /56 or bigger", c.ClusterCIDR6)
		}
		c.NodeNetwork6, c.ClusterCIDR6 = c.NodeNetwork6.Masked(), c.ClusterCIDR6.Masked()
	}
	if c.Backend == BackendAuto {
		c.Backend = BackendNFT
	}
	if c.Timeout <= 0 {
		c.Timeout = time.Second
	}
	switch c.Topology {
	case TopologyAuto, TopologyBridge, TopologyRouted:
	default:
		return fmt.Errorf("harness: unknown Topology %q", c.Topology)
	}
	if !c.NodeNetwork.Addr().Is4() || c.NodeNetwork.Bits() > 24 {
		return fmt.Errorf("harness: NodeNetwork %v: want an IPv4 /24 or bigger", c.NodeNetwork)
	}
	if !c.ClusterCIDR.Addr().Is4() || c.ClusterCIDR.Bits() > 16 {
		return fmt.Errorf("harness: ClusterCIDR %v: want an IPv4 /16 or bigger", c.ClusterCIDR)
	}
	c.NodeNetwork, c.ClusterCIDR = c.NodeNetwork.Masked(), c.ClusterCIDR.Masked()
	nodes := c.nodeCount()
	if nodes > 50 {
		return fmt.Errorf("harness: NodeCount %d: at most 50 nodes", nodes)
	}
	if c.NodeIPs != nil {
		if len(c.NodeIPs) != nodes {
			return fmt.Errorf("harness: NodeIPs: %d addresses for %d nodes", len(c.NodeIPs), nodes)
		}
		ext := addOffset(c.NodeNetwork.Addr(), 100)
		for i, a := range c.NodeIPs {
			if !a.Is4() || !c.NodeNetwork.Contains(a) || a == c.NodeNetwork.Addr() || a == ext || i > 0 && a == c.NodeIPs[0] {
				return fmt.Errorf("harness: NodeIPs[%d] %v: want a free host address of NodeNetwork %v (not .0, not the external client's %v, not another node's)", i, a, c.NodeNetwork, ext)
			}
		}
	}
	seen := map[string]bool{}
	seenIP := map[netip.Addr]string{}
	for i, p := range c.Pods {
		for _, a := range []netip.Addr{p.IP, p.IP6} {
			if !a.IsValid() {
				continue
			}
			if other, dup := seenIP[a]; dup {
				return fmt.Errorf("harness: Pods[%d] (%s): IP %v already belongs to pod %s", i, p.Name, a, other)
			}
			seenIP[a] = p.Name
		}
		if p.IP6.IsValid() && !c.IPv6 {
			return fmt.Errorf("harness: Pods[%d] (%s): IP6 set but IPv6 is off", i, p.Name)
		}
		if p.Name == "" || strings.ContainsAny(p.Name, " \n\t") {
			return fmt.Errorf("harness: Pods[%d].Name %q: want a non-empty name without spaces", i, p.Name)
		}
		if seen[p.Name] {
			return fmt.Errorf("harness: Pods[%d].Name %q: duplicate", i, p.Name)
		}
		seen[p.Name] = true
		if p.Node < 0 || p.Node >= nodes {
			return fmt.Errorf("harness: Pods[%d] (%s): Node %d does not exist", i, p.Name, p.Node)
		}
	}
	return nil
}

// nodeCount is how many nodes the configuration asks for.
func (c *HarnessConfig) nodeCount() int {
	switch {
	case c.NodeCount > 0:
		return c.NodeCount
	case c.SecondNode:
		return 2
	}
	return 1
}

// addOffset returns the address n after a (IPv4).
func addOffset(a netip.Addr, n uint32) netip.Addr {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += n
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// addOffset6 returns the address n after a (IPv6, low 64 bits).
func addOffset6(a netip.Addr, n uint64) netip.Addr {
	b := a.As16()
	lo := binary.BigEndian.Uint64(b[8:]) + n
	binary.BigEndian.PutUint64(b[8:], lo)
	return netip.AddrFrom16(b)
}

// subnet6 returns the i-th /64 of p.
func subnet6(p netip.Prefix, i uint64) netip.Prefix {
	b := p.Addr().As16()
	hi := binary.BigEndian.Uint64(b[:8]) + i
	binary.BigEndian.PutUint64(b[:8], hi)
	return netip.PrefixFrom(netip.AddrFrom16(b), 64)
}

// NewHarness builds the namespaces, links, addresses, routes and sysctls of cfg, starts
// the pods' echo servers and returns the harness. On any error it removes whatever it
// had made and returns the error. The caller must Close the harness. Skipping when the
// machine cannot do this is the caller's job (RequireHarness).
func NewHarness(cfg HarnessConfig) (*Harness, error) {
	if err := HarnessSupported(); err != nil {
		return nil, err
	}
	return newHarness(context.Background(), cfg, execRunner{})
}

func newHarness(ctx context.Context, cfg HarnessConfig, r runner) (h *Harness, err error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	removeStaleNetns(ctx, r, netnsDir, cfg.Prefix)
	h = &Harness{
		Prefix:      fmt.Sprintf("%s%d-%d-", cfg.Prefix, os.Getpid(), harnessSeq.Add(1)),
		ClusterCIDR: cfg.ClusterCIDR,
		cfg:         cfg,
		run:         r,
	}
	defer func() {
		if err != nil {
			if cerr := h.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("cleanup after failure: %w", cerr))
			}
			h = nil
		}
	}()
	if err := h.build(ctx); err != nil {
		return h, fmt.Errorf("harness %s: %w", h.Prefix, err)
	}
	return h, nil
}

func (h *Harness) addNetns(ctx context.Context, suffix, role string) (*Netns, error) {
	name := h.Prefix + suffix
	if _, isExec := h.run.(execRunner); isExec {
		registerNetns(name) // for the signal handler and the reaper (cleanup.go)
	}
	c := command{argv: []string{"ip", "netns", "add", name}}
	if ce := commandError(c, h.run.run(ctx, c)); ce != nil {
		unregisterNetns(name)
		return nil, ce
	}
	n := &Netns{Name: name, Role: role}
	h.mu.Lock()
	h.created = append(h.created, n)
	h.mu.Unlock()
	hd, err := openNetns(name)
	if err != nil {
		return nil, err
	}
	n.h = hd
	return n, nil
}

// batch runs `ip -n NS -batch -` with the given lines: one process for many changes;
// ip stops at the first failing line and names it.
func (h *Harness) batch(ctx context.Context, ns *Netns, lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	c := command{argv: []string{"ip", "-n", ns.Name, "-batch", "-"}, stdin: []byte(strings.Join(lines, "\n") + "\n")}
	if ce := commandError(c, h.run.run(ctx, c)); ce != nil {
		return fmt.Errorf("configure %s: %w (input: %q)", ns, ce, strings.Join(lines, "; "))
	}
	return nil
}

// build makes the harness, phase by phase.
func (h *Harness) build(ctx context.Context) error {
	// Namespaces first, so that every later failure is cleaned up by Close.
	if err := h.addNamespaces(ctx); err != nil {
		return err
	}
	// Sysctls before links, so that new interfaces inherit conf/default.
	if err := h.configureSysctls(); err != nil {
		return err
	}
	if err := h.addLinks(ctx); err != nil {
		return err
	}
	// Every link must be really up before the harness is used (see waitLinksUp).
	for _, ns := range h.Namespaces() {
		if err := ns.h.waitLinksUp(5 * time.Second); err != nil {
			return err
		}
	}
	// Servers, then the adapters.
	if err := h.startServers(); err != nil {
		return err
	}
	return h.addAdapters(ctx)
}

// addNamespaces makes the external, node and pod namespaces and lays out their
// addresses.
func (h *Harness) addNamespaces(ctx context.Context) error {
	cfg := h.cfg
	ext, err := h.addNetns(ctx, "ext", "external")
	if err != nil {
		return err
	}
	h.External = ext
	h.ExternalIP = addOffset(cfg.NodeNetwork.Addr(), 100)
	if cfg.IPv6 {
		h.ExternalIP6 = addOffset6(cfg.NodeNetwork6.Addr(), 100)
	}
	nodeCount := cfg.nodeCount()
	for i := 0; i < nodeCount; i++ {
		if err := h.addNode(ctx, i); err != nil {
			return err
		}
	}
	h.next = make([]uint32, nodeCount) // per node, the next host number to try for a pod
	for _, pc := range cfg.Pods {
		if err := h.addPod(ctx, pc, h.next); err != nil {
			return err
		}
	}
	return nil
}

// addNode makes node i's namespace: node IP i+1 on the node network (or NodeIPs[i]),
// the i-th /24 of the cluster CIDR (and /64 of the IPv6 one) as its pod subnet.
func (h *Harness) addNode(ctx context.Context, i int) error {
	cfg := h.cfg
	ns, err := h.addNetns(ctx, "node"+strconv.Itoa(i), "node"+strconv.Itoa(i))
	if err != nil {
		return err
	}
	subnet := netip.PrefixFrom(addOffset(cfg.ClusterCIDR.Addr(), uint32(i)<<8), 24)
	if !cfg.ClusterCIDR.Contains(subnet.Addr()) {
		return fmt.Errorf("ClusterCIDR %v has no room for node %d's /24", cfg.ClusterCIDR, i)
	}
	node := &Node{
		Index:   i,
		Netns:   ns,
		IP:      addOffset(cfg.NodeNetwork.Addr(), uint32(i+1)),
		PodCIDR: subnet,
		Gateway: addOffset(subnet.Addr(), 1),
	}
	if cfg.NodeIPs != nil {
		node.IP = cfg.NodeIPs[i]
	}
	if cfg.IPv6 {
		node.IP6 = addOffset6(cfg.NodeNetwork6.Addr(), uint64(i+1))
		node.PodCIDR6 = subnet6(cfg.ClusterCIDR6, uint64(i))
		node.Gateway6 = addOffset6(node.PodCIDR6.Addr(), 1)
	}
	h.Nodes = append(h.Nodes, node)
	return nil
}

// addPod makes the namespace of pod i and picks its addresses: the configured ones, or
// the next free host of its node's subnet (next counts per node) and, with IPv6, the
// same host number in the node's IPv6 subnet.
func (h *Harness) addPod(ctx context.Context, pc PodConfig, next []uint32) error {
	cfg := h.cfg
	node := h.Nodes[pc.Node]
	i := h.podSeq
	h.podSeq++
	ns, err := h.addNetns(ctx, "p"+strconv.Itoa(i), "pod/"+pc.Name)
	if err != nil {
		return err
	}
	ip := pc.IP
	if !ip.IsValid() {
		for {
			ip = addOffset(node.PodCIDR.Addr(), 2+next[pc.Node])
			next[pc.Node]++
			if !slices.ContainsFunc(cfg.Pods, func(o PodConfig) bool { return o.IP == ip }) &&
				!slices.ContainsFunc(h.Pods, func(o *Pod) bool { return o.IP == ip }) {
				break
			}
		}
	}
	if !ip.Is4() || !node.PodCIDR.Contains(ip) || ip == node.Gateway || ip == node.PodCIDR.Addr() {
		return fmt.Errorf("pod %s: IP %v is not a pod address of node %d's subnet %v", pc.Name, ip, pc.Node, node.PodCIDR)
	}
	p := &Pod{Name: pc.Name, Node: node, Netns: ns, IP: ip, HostVeth: "veth" + strconv.Itoa(i), Ports: cfg.PodPorts}
	if pc.TCPPorts != nil || pc.UDPPorts != nil {
		p.Ports, p.TCPPorts, p.UDPPorts = nil, pc.TCPPorts, pc.UDPPorts
	}
	if cfg.IPv6 {
		p.IP6 = pc.IP6
		if !p.IP6.IsValid() {
			host := binary.BigEndian.Uint32(ip.AsSlice()) & 0xff
			p.IP6 = addOffset6(node.PodCIDR6.Addr(), uint64(host))
		}
		if !node.PodCIDR6.Contains(p.IP6) || p.IP6 == node.Gateway6 || p.IP6 == node.PodCIDR6.Addr() {
			return fmt.Errorf("pod %s: IP6 %v is not a pod address of node %d's subnet %v", pc.Name, p.IP6, pc.Node, node.PodCIDR6)
		}
	}
	h.Pods = append(h.Pods, p)
	node.Pods = append(node.Pods, p)
	return nil
}

// configureSysctls writes every namespace's sysctls (IPv6 first, where asked) and picks
// the topology, which depends on whether the nodes have bridge netfilter.
func (h *Harness) configureSysctls() error {
	cfg := h.cfg
	if cfg.IPv6 {
		for _, ns := range h.Namespaces() {
			if ok, err := sysctlExists(ns, "net.ipv6.conf.all.disable_ipv6"); err != nil || !ok {
				return fmt.Errorf("IPv6 requested but %s has no IPv6 (%v)", ns, err)
			}
			if err := writeSysctls(ns, ipv6Sysctls); err != nil {
				return err
			}
		}
	}
	if err := writeSysctls(h.External, leafSysctls); err != nil {
		return err
	}
	if err := writeOptionalSysctls(h.External, optionalSysctls); err != nil {
		return err
	}
	if err := h.pickTopology(); err != nil {
		return err
	}
	for _, n := range h.Nodes {
		if err := writeSysctls(n.Netns, h.nodeSysctls()); err != nil {
			return err
		}
		if err := writeOptionalSysctls(n.Netns, optionalSysctls); err != nil {
			return err
		}
		if cfg.IPv6 {
			if err := writeSysctls(n.Netns, map[string]string{"net.ipv6.conf.all.forwarding": "1"}); err != nil {
				return err
			}
		}
		if err := writeSysctls(n.Netns, cfg.NodeSysctls); err != nil {
			return err
		}
	}
	for _, p := range h.Pods {
		if err := writeSysctls(p.Netns, leafSysctls); err != nil {
			return err
		}
		if err := writeOptionalSysctls(p.Netns, optionalSysctls); err != nil {
			return err
		}
	}
	return nil
}

// pickTopology looks for bridge netfilter in the node namespaces (node 0's answer is
// BrNetfilter) and sets Topology: the configured one, or with TopologyAuto bridge when
// there is bridge netfilter and routed when not.
func (h *Harness) pickTopology() error {
	for _, n := range h.Nodes {
		brnf, err := sysctlExists(n.Netns, "net.bridge.bridge-nf-call-iptables")
		if err != nil {
			return err
		}
		if n.Index == 0 {
			h.BrNetfilter = brnf
		}
	}
	switch h.cfg.Topology {
	case TopologyAuto:
		h.Topology = TopologyRouted
		if h.BrNetfilter {
			h.Topology = TopologyBridge
		}
	case TopologyBridge:
		if !h.BrNetfilter {
			return errors.New("TopologyBridge needs bridge netfilter (net.bridge.bridge-nf-call-iptables) in the node namespace, and it is missing (br_netfilter not loaded?): use TopologyRouted")
		}
		h.Topology = TopologyBridge
	default:
		h.Topology = h.cfg.Topology
	}
	return nil
}

// addLinks makes the links, addresses and routes: the external namespace's fabric
// bridge with a veth to each node, each node's, each pod's, then the external routes to
// node 0. One `ip -batch` per namespace.
func (h *Harness) addLinks(ctx context.Context) error {
	extLines, err := h.externalLinks()
	if err != nil {
		return err
	}
	if err := h.batch(ctx, h.External, extLines); err != nil {
		return err
	}
	for _, n := range h.Nodes {
		if err := h.batch(ctx, n.Netns, h.nodeLinks(n)); err != nil {
			return err
		}
	}
	for _, p := range h.Pods {
		if err := h.batch(ctx, p.Netns, h.podLinks(p)); err != nil {
			return err
		}
	}
	return h.batch(ctx, h.External, h.externalRoutes())
}

// externalLinks are the `ip -batch` lines of the external namespace: the fabric bridge
// fab0 with the external client's addresses, and a veth to each node's eth0 on it.
func (h *Harness) externalLinks() ([]string, error) {
	cfg, v6 := h.cfg, h.cfg.IPv6
	lines := []string{"link set lo up", "link add fab0 type bridge", "link set fab0 up",
		fmt.Sprintf("addr add %s/%d dev fab0", h.ExternalIP, cfg.NodeNetwork.Bits())}
	if v6 {
		lines = append(lines, fmt.Sprintf("addr add %s/%d dev fab0 nodad", h.ExternalIP6, cfg.NodeNetwork6.Bits()))
	}
	for _, a := range cfg.ExternalAddrs {
		switch {
		case a.Is4():
			lines = append(lines, fmt.Sprintf("addr add %s/32 dev fab0", a))
		case v6 && !a.Is4In6():
			lines = append(lines, fmt.Sprintf("addr add %s/128 dev fab0 nodad", a))
		default:
			return nil, fmt.Errorf("ExternalAddrs: %v: want IPv4, or IPv6 with IPv6 on", a)
		}
	}
	for _, n := range h.Nodes {
		port := "n" + strconv.Itoa(n.Index)
		lines = append(lines,
			fmt.Sprintf("link add %s type veth peer name eth0 netns %s", port, n.Netns.Name),
			fmt.Sprintf("link set %s master fab0", port),
			fmt.Sprintf("link set %s up", port))
	}
	return lines, nil
}

// nodeLinks are the `ip -batch` lines of a node namespace: eth0 on the node network
// with the default route to the external namespace, the pods' veths (on the bridge
// cbr0, or each with the gateway address and a route to its pod), and routes to the
// other nodes' pod subnets.
func (h *Harness) nodeLinks(n *Node) []string {
	cfg, v6 := h.cfg, h.cfg.IPv6
	lines := []string{"link set lo up", "link set eth0 up",
		fmt.Sprintf("addr add %s/%d dev eth0", n.IP, cfg.NodeNetwork.Bits()),
		fmt.Sprintf("route add default via %s dev eth0", h.ExternalIP)}
	if v6 {
		lines = append(lines, fmt.Sprintf("addr add %s/%d dev eth0 nodad", n.IP6, cfg.NodeNetwork6.Bits()),
			fmt.Sprintf("route add default via %s dev eth0", h.ExternalIP6))
	}
	if h.Topology == TopologyBridge {
		lines = append(lines, "link add cbr0 type bridge nf_call_iptables 1 nf_call_ip6tables 1",
			fmt.Sprintf("addr add %s/24 dev cbr0", n.Gateway), "link set cbr0 up")
		if v6 {
			lines = append(lines, fmt.Sprintf("addr add %s/64 dev cbr0 nodad", n.Gateway6))
		}
	}
	for _, p := range n.Pods {
		lines = append(lines, h.podHostLinks(p)...)
	}
	for _, o := range h.Nodes {
		if o != n {
			lines = append(lines, fmt.Sprintf("route add %s via %s dev eth0", o.PodCIDR, o.IP))
			if v6 {
				lines = append(lines, fmt.Sprintf("route add %s via %s dev eth0", o.PodCIDR6, o.IP6))
			}
		}
	}
	return lines
}

// podHostLinks are the `ip -batch` lines, in the pod's node's namespace, of the pod's
// veth: on the bridge with hairpin on, or with the gateway address and a route to the
// pod.
func (h *Harness) podHostLinks(p *Pod) []string {
	n, v6 := p.Node, h.cfg.IPv6
	var lines []string
	lines = append(lines, fmt.Sprintf("link add %s type veth peer name eth0 netns %s", p.HostVeth, p.Netns.Name))
	if h.Topology == TopologyBridge {
		lines = append(lines,
			fmt.Sprintf("link set %s master cbr0", p.HostVeth),
			fmt.Sprintf("link set %s type bridge_slave hairpin %s", p.HostVeth, onOff(!n.HairpinOff)),
			fmt.Sprintf("link set %s up", p.HostVeth))
		return lines
	}
	lines = append(lines,
		fmt.Sprintf("addr add %s/32 dev %s", n.Gateway, p.HostVeth),
		fmt.Sprintf("link set %s up", p.HostVeth),
		fmt.Sprintf("route add %s/32 dev %s src %s", p.IP, p.HostVeth, n.Gateway))
	if v6 {
		lines = append(lines,
			fmt.Sprintf("addr add %s/128 dev %s nodad", n.Gateway6, p.HostVeth),
			fmt.Sprintf("route add %s/128 dev %s", p.IP6, p.HostVeth))
	}
	return lines
}

// podLinks are the `ip -batch` lines of a pod namespace: eth0 with the pod's
// addresses and the default route via its node's gateway (on the bridge's subnet, or
// a /32 with an on-link route to the gateway).
func (h *Harness) podLinks(p *Pod) []string {
	v6 := h.cfg.IPv6
	gw, gw6 := p.Node.Gateway, p.Node.Gateway6
	lines := []string{"link set lo up"}
	if h.Topology == TopologyBridge {
		lines = append(lines, fmt.Sprintf("addr add %s/24 dev eth0", p.IP), "link set eth0 up",
			fmt.Sprintf("route add default via %s dev eth0", gw))
		if v6 {
			lines = append(lines, fmt.Sprintf("addr add %s/64 dev eth0 nodad", p.IP6),
				fmt.Sprintf("route add default via %s dev eth0", gw6))
		}
		return lines
	}
	lines = append(lines, fmt.Sprintf("addr add %s/32 dev eth0", p.IP), "link set eth0 up",
		fmt.Sprintf("route add %s dev eth0 scope link", gw),
		fmt.Sprintf("route add default via %s dev eth0 src %s", gw, p.IP))
	if v6 {
		lines = append(lines, fmt.Sprintf("addr add %s/128 dev eth0 nodad", p.IP6),
			fmt.Sprintf("route add %s/128 dev eth0", gw6),
			fmt.Sprintf("route add default via %s dev eth0 src %s", gw6, p.IP6))
	}
	return lines
}

// externalRoutes are the external client's routes to ExternalRoutes (and
// ExternalRoutes6) via node 0.
func (h *Harness) externalRoutes() []string {
	var lines []string
	for _, r := range h.cfg.ExternalRoutes {
		lines = append(lines, fmt.Sprintf("route add %s via %s dev fab0", r.Masked(), h.Nodes[0].IP))
	}
	if h.cfg.IPv6 {
		for _, r := range h.cfg.ExternalRoutes6 {
			lines = append(lines, fmt.Sprintf("route add %s via %s dev fab0", r.Masked(), h.Nodes[0].IP6))
		}
	}
	return lines
}

// startServers starts every pod's echo servers on the wildcard address (a dual-stack
// socket with IPv6): on each port of Ports over TCP and UDP, or on TCPPorts and
// UDPPorts.
func (h *Harness) startServers() error {
	for _, p := range h.Pods {
		if err := h.startPodServers(p); err != nil {
			return err
		}
	}
	return nil
}

// startPodServers starts one pod's echo servers (see startServers).
func (h *Harness) startPodServers(p *Pod) error {
	wildcard := netip.IPv4Unspecified()
	if h.cfg.IPv6 {
		wildcard = netip.IPv6Unspecified() // a dual-stack socket
	}
	if p.TCPPorts != nil || p.UDPPorts != nil {
		for _, s := range []struct {
			proto string
			ports []uint16
		}{{"tcp", p.TCPPorts}, {"udp", p.UDPPorts}} {
			for _, port := range s.ports {
				if err := h.ServeProto(p.Netns, p.Name, s.proto, netip.AddrPortFrom(wildcard, port)); err != nil {
					return fmt.Errorf("pod %s: %w", p.Name, err)
				}
			}
		}
		return nil
	}
	for _, port := range p.Ports {
		if err := h.Serve(p.Netns, p.Name, netip.AddrPortFrom(wildcard, port)); err != nil {
			return fmt.Errorf("pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// addAdapters gives each node its IPTables and Conntrack (and their IPv6 twins), its
// NFTables with HarnessConfig.NFTables, and the harness node 0's.
func (h *Harness) addAdapters(ctx context.Context) error {
	cfg := h.cfg
	for _, n := range h.Nodes {
		ipt, err := newIPTables(ctx, IPTablesOptions{Backend: cfg.Backend, Family: IPv4, Netns: n.Netns.Name}, h.run)
		if err != nil {
			return err
		}
		n.IPTables = ipt
		n.Conntrack = newConntrack(ConntrackOptions{Netns: n.Netns.Name}, h.run)
		if cfg.NFTables {
			if n.NFTables, err = newNFTables(ctx, NFTablesOptions{Family: knftables.IPv4Family, Netns: n.Netns.Name}, h.run); err != nil {
				return err
			}
		}
		if cfg.IPv6 {
			ipt6, err := newIPTables(ctx, IPTablesOptions{Backend: cfg.Backend, Family: IPv6, Netns: n.Netns.Name}, h.run)
			if err != nil {
				return err
			}
			n.IPTables6 = ipt6
			n.Conntrack6 = newConntrack(ConntrackOptions{Netns: n.Netns.Name, Family: IPv6}, h.run)
			if cfg.NFTables {
				if n.NFTables6, err = newNFTables(ctx, NFTablesOptions{Family: knftables.IPv6Family, Netns: n.Netns.Name}, h.run); err != nil {
					return err
				}
			}
		}
	}
	h.IPTables, h.Conntrack = h.Nodes[0].IPTables, h.Nodes[0].Conntrack
	h.IPTables6, h.Conntrack6 = h.Nodes[0].IPTables6, h.Nodes[0].Conntrack6
	h.NFTables, h.NFTables6 = h.Nodes[0].NFTables, h.Nodes[0].NFTables6
	return nil
}

// ipv6Sysctls go everywhere with IPv6: addresses usable at once (no duplicate address
// detection, which would hold them "tentative" for a second or more) and no ICMPv6
// rate limit (REJECT must always answer).
var ipv6Sysctls = map[string]string{
	"net.ipv6.conf.all.disable_ipv6":     "0",
	"net.ipv6.conf.default.disable_ipv6": "0",
	"net.ipv6.conf.all.accept_dad":       "0",
	"net.ipv6.conf.default.accept_dad":   "0",
	"net.ipv6.icmp.ratelimit":            "0",
}

// leafSysctls are for the pod and external namespaces: no reverse-path filtering and no
// ICMP rate limit (see nodeSysctls).
var leafSysctls = map[string]string{
	"net.ipv4.conf.all.rp_filter":     "0",
	"net.ipv4.conf.default.rp_filter": "0",
	"net.ipv4.icmp_ratelimit":         "0",
}

// nodeSysctls are what a kube-proxy node has: forwarding, localhost NodePorts
// (route_localnet), no reverse-path filtering (asymmetric paths through NAT), and
// bridged traffic through iptables (br_netfilter hands bridged packets to the IP
// family's hooks, where nftables' ip/ip6 chains see them too).
//
// With HarnessConfig.NFTables, route_localnet stays at the kernel's default 0:
// kube-proxy's iptables mode sets net.ipv4.conf.all.route_localnet=1 for localhost
// NodePorts, but its nftables mode never sets it and does not support localhost
// NodePorts at all (a documented difference: CVE-2020-8558, and no IPv6 equivalent), so
// a harness node that had it would accept 127.0.0.1:NODEPORT where a real nftables node
// does not. Two more make REJECT deterministic: without them a
// REJECTed packet that the node would route back out of the interface it came in on
// first triggers an ICMP redirect, and the per-host ICMP rate limit (1/s) then swallows
// the port-unreachable, so REJECT would look like DROP; and a test making hundreds of
// connections to a REJECTed service must see every one refused.
func (h *Harness) nodeSysctls() map[string]string {
	m := map[string]string{
		"net.ipv4.conf.all.send_redirects":     "0",
		"net.ipv4.conf.default.send_redirects": "0",
		"net.ipv4.icmp_ratelimit":              "0",
		"net.ipv4.ip_forward":                  "1",
		"net.ipv4.conf.all.forwarding":         "1",
		"net.ipv4.conf.all.route_localnet":     "1",
		"net.ipv4.conf.default.route_localnet": "1",
		"net.ipv4.conf.all.rp_filter":          "0",
		"net.ipv4.conf.default.rp_filter":      "0",
	}
	if h.cfg.NFTables {
		delete(m, "net.ipv4.conf.all.route_localnet")
		delete(m, "net.ipv4.conf.default.route_localnet")
	}
	if h.BrNetfilter {
		m["net.bridge.bridge-nf-call-iptables"] = "1"
		m["net.bridge.bridge-nf-call-ip6tables"] = "1"
	}
	return m
}

// optionalSysctls are written where the kernel has them: the conntrack values
// kube-proxy sets by default (when nf_conntrack is there), and the global ICMP rate
// limit, per namespace since Linux 6.x (a sysctl that is global to the kernel does not
// appear under a child namespace's /proc/sys/net at all, so writing only what exists
// there can never change the host).
var optionalSysctls = map[string]string{
	"net.ipv4.icmp_msgs_per_sec":                         "100000",
	"net.ipv4.icmp_msgs_burst":                           "10000",
	"net.netfilter.nf_conntrack_tcp_timeout_established": "86400",
	"net.netfilter.nf_conntrack_tcp_timeout_close_wait":  "3600",
}

func sysctlPath(key string) (string, error) {
	if key == "" || strings.Contains(key, "..") || strings.ContainsAny(key, " \n") || !strings.HasPrefix(key, "net.") {
		return "", fmt.Errorf("bad sysctl key %q (want net.*)", key)
	}
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/")), nil
}

// writeSysctls writes sysctls inside ns (a thread in the namespace opens /proc/sys/net,
// which shows the namespace of the opening thread) and reads each back.
func writeSysctls(ns *Netns, m map[string]string) error {
	return writeSysctlsMode(ns, m, false)
}

// writeOptionalSysctls skips keys whose file does not exist.
func writeOptionalSysctls(ns *Netns, m map[string]string) error {
	return writeSysctlsMode(ns, m, true)
}

func writeSysctlsMode(ns *Netns, m map[string]string, optional bool) error {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return ns.h.do(func() error {
		for _, k := range keys {
			p, err := sysctlPath(k)
			if err != nil {
				return err
			}
			if err := os.WriteFile(p, []byte(m[k]+"\n"), 0o644); err != nil {
				if optional && errors.Is(err, os.ErrNotExist) {
					continue
				}
				return fmt.Errorf("sysctl %s=%s in %s: %w", k, m[k], ns, err)
			}
			got, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("sysctl %s in %s: read back: %w", k, ns, err)
			}
			if strings.TrimSpace(string(got)) != strings.TrimSpace(m[k]) {
				return fmt.Errorf("sysctl %s in %s: wrote %q, reads %q", k, ns, m[k], strings.TrimSpace(string(got)))
			}
		}
		return nil
	})
}

func sysctlExists(ns *Netns, key string) (bool, error) {
	p, err := sysctlPath(key)
	if err != nil {
		return false, err
	}
	var ok bool
	err = ns.h.do(func() error {
		_, err := os.Stat(p)
		ok = err == nil
		return nil
	})
	return ok, err
}

// Sysctl reads a sysctl inside ns.
func (h *Harness) Sysctl(ns *Netns, key string) (string, error) {
	p, err := sysctlPath(key)
	if err != nil {
		return "", err
	}
	var v string
	err = ns.h.do(func() error {
		b, err := os.ReadFile(p)
		v = strings.TrimSpace(string(b))
		return err
	})
	return v, err
}

// LocalAddrs returns every address configured in ns, sorted, loopback included: for a
// node, what iptables' `-m addrtype --dst-type LOCAL` matches (the emulator's local
// IPs).
func (h *Harness) LocalAddrs(ns *Netns) ([]netip.Addr, error) {
	return ns.h.addrs()
}

// Namespaces returns every namespace of the harness: external, nodes, pods.
func (h *Harness) Namespaces() []*Netns {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.created)
}

// Pod returns the named pod, or nil.
func (h *Harness) Pod(name string) *Pod {
	for _, p := range h.Pods {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Do runs fn on an OS thread inside ns and returns its error: the sockets fn opens
// (net.Dial, net.Listen) belong to ns and keep working after fn returns, from any
// goroutine. Goroutines fn starts do not run in ns. One Do can carry many operations,
// which makes it the way to time the kernel: each Dial pays for a new thread.
func (h *Harness) Do(ns *Netns, fn func() error) error {
	return ns.h.do(fn)
}

// Exec runs a command inside ns (`ip netns exec NAME args...`) and returns its standard
// output; a failure is a *CommandError carrying the exit code and standard error.
func (h *Harness) Exec(ctx context.Context, ns *Netns, args ...string) ([]byte, error) {
	if len(args) == 0 {
		return nil, errors.New("harness exec: no command")
	}
	c := command{argv: inNetnsArgv(ns.Name, args)}
	res := h.run.run(ctx, c)
	if ce := commandError(c, res); ce != nil {
		return res.stdout, ce
	}
	return res.stdout, nil
}

// Close stops the servers and deletes every namespace the harness made (which deletes
// their links too). It is safe to call more than once and after a partial build.
func (h *Harness) Close() error {
	h.closeOnce.Do(func() {
		var errs []error
		h.mu.Lock()
		servers := h.servers
		h.servers = nil
		created := h.created
		h.mu.Unlock()
		for _, s := range servers {
			s.close()
		}
		for i := len(created) - 1; i >= 0; i-- {
			n := created[i]
			if n.h != nil {
				_ = n.h.close()
			}
			c := command{argv: []string{"ip", "netns", "del", n.Name}}
			if ce := commandError(c, h.run.run(context.Background(), c)); ce != nil {
				errs = append(errs, ce)
			} else {
				unregisterNetns(n.Name)
			}
		}
		h.closeErr = errors.Join(errs...)
	})
	return h.closeErr
}

// removeStaleNetns deletes namespaces named PREFIX<pid>-<n>-... whose process is gone:
// leftovers of a crashed or killed run. Namespaces of live processes (other test
// binaries running in parallel) and names not matching the pattern are left alone.
func removeStaleNetns(ctx context.Context, r runner, dir, prefix string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `([0-9]+)-[0-9]+-[a-z0-9]+$`)
	for _, e := range entries {
		m := re.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", m[1])); err == nil || !errors.Is(err, os.ErrNotExist) {
			continue // alive (or cannot tell): not ours to touch
		}
		r.run(ctx, command{argv: []string{"ip", "netns", "del", e.Name()}})
	}
}

// AddPod adds a pod to a built harness, as a kubelet starts one: its namespace, its
// veth to its node (on cbr0, or routed), its addresses and routes, its sysctls, and its
// echo servers (PodConfig.TCPPorts and UDPPorts, or HarnessConfig.PodPorts). The pod's
// name must be new; its address, if not given, is the next free one of its node's
// subnet (never one a live pod has). On failure, whatever was made for the pod is
// removed again.
func (h *Harness) AddPod(ctx context.Context, pc PodConfig) (p *Pod, err error) {
	if h.Pod(pc.Name) != nil {
		return nil, fmt.Errorf("harness: AddPod %s: a pod of that name exists", pc.Name)
	}
	if pc.Name == "" || strings.ContainsAny(pc.Name, " \n\t") {
		return nil, fmt.Errorf("harness: AddPod: bad name %q", pc.Name)
	}
	if pc.Node < 0 || pc.Node >= len(h.Nodes) {
		return nil, fmt.Errorf("harness: AddPod %s: node %d does not exist", pc.Name, pc.Node)
	}
	if pc.IP.IsValid() && slices.ContainsFunc(h.Pods, func(o *Pod) bool { return o.IP == pc.IP }) {
		return nil, fmt.Errorf("harness: AddPod %s: IP %v belongs to another pod", pc.Name, pc.IP)
	}
	if pc.IP6.IsValid() && !h.cfg.IPv6 {
		return nil, fmt.Errorf("harness: AddPod %s: IP6 set but IPv6 is off", pc.Name)
	}
	if err := h.addPod(ctx, pc, h.next); err != nil {
		if len(h.Pods) > 0 && h.Pods[len(h.Pods)-1].Name == pc.Name {
			_ = h.RemovePod(ctx, pc.Name)
		}
		return nil, err
	}
	p = h.Pods[len(h.Pods)-1]
	defer func() {
		if err != nil {
			if rerr := h.RemovePod(ctx, pc.Name); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()
	if h.cfg.IPv6 {
		if err := writeSysctls(p.Netns, ipv6Sysctls); err != nil {
			return nil, err
		}
	}
	if err := writeSysctls(p.Netns, leafSysctls); err != nil {
		return nil, err
	}
	if err := writeOptionalSysctls(p.Netns, optionalSysctls); err != nil {
		return nil, err
	}
	if err := h.batch(ctx, p.Node.Netns, h.podHostLinks(p)); err != nil {
		return nil, err
	}
	if err := h.batch(ctx, p.Netns, h.podLinks(p)); err != nil {
		return nil, err
	}
	for _, ns := range []*Netns{p.Node.Netns, p.Netns} {
		if err := ns.h.waitLinksUp(5 * time.Second); err != nil {
			return nil, err
		}
	}
	if err := h.startPodServers(p); err != nil {
		return nil, err
	}
	return p, nil
}

// RemovePod stops a pod's echo servers, deletes its veth pair (and with it the node's
// routes through it) and then its namespace. The veth goes first, by name: deleting a
// namespace only drops its name, and the kernel tears the namespace down later, from a
// work queue (on 6.18 kernels, long enough for packets to the pod's address to reach its
// dying stack and be refused there, where a deleted pod's are dropped).
func (h *Harness) RemovePod(ctx context.Context, name string) error {
	idx := slices.IndexFunc(h.Pods, func(p *Pod) bool { return p.Name == name })
	if idx < 0 {
		return fmt.Errorf("harness: RemovePod %s: no such pod", name)
	}
	p := h.Pods[idx]
	h.StopServers(p.Netns)
	h.Pods = slices.Delete(h.Pods, idx, idx+1)
	if i := slices.Index(p.Node.Pods, p); i >= 0 {
		p.Node.Pods = slices.Delete(p.Node.Pods, i, i+1)
	}
	if err := h.batch(ctx, p.Node.Netns, []string{"link del " + p.HostVeth}); err != nil {
		return err
	}
	return h.deleteNetns(ctx, p.Netns)
}

// StopServers stops the echo servers running in ns (a pod that no longer listens).
func (h *Harness) StopServers(ns *Netns) {
	h.mu.Lock()
	var stop, keep []*echoServer
	for _, s := range h.servers {
		if s.ns == ns {
			stop = append(stop, s)
		} else {
			keep = append(keep, s)
		}
	}
	h.servers = keep
	h.mu.Unlock()
	for _, s := range stop {
		s.close()
	}
}

// deleteNetns deletes one namespace of the harness.
func (h *Harness) deleteNetns(ctx context.Context, n *Netns) error {
	h.mu.Lock()
	if i := slices.Index(h.created, n); i >= 0 {
		h.created = slices.Delete(h.created, i, i+1)
	}
	h.mu.Unlock()
	if n.h != nil {
		_ = n.h.close()
	}
	c := command{argv: []string{"ip", "netns", "del", n.Name}}
	if ce := commandError(c, h.run.run(ctx, c)); ce != nil {
		return ce
	}
	unregisterNetns(n.Name)
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// SetHairpin turns hairpin mode on or off on every pod port of node's bridge (and for
// the pods added later): off, a pod's packet that the node sends back out of the port it
// came in on (the pod reaching itself through a Service) is not forwarded. It changes
// nothing in the routed topology, where no bridge decides.
func (h *Harness) SetHairpin(ctx context.Context, node int, on bool) error {
	n := h.Nodes[node]
	n.HairpinOff = !on
	if h.Topology != TopologyBridge {
		return nil
	}
	var lines []string
	for _, p := range n.Pods {
		lines = append(lines, fmt.Sprintf("link set %s type bridge_slave hairpin %s", p.HostVeth, onOff(on)))
	}
	return h.batch(ctx, n.Netns, lines)
}

// WriteSysctls writes sysctls (keys as for sysctl(8), net.* only) in ns and reads each
// back; a key the namespace does not have is an error.
func (h *Harness) WriteSysctls(ns *Netns, m map[string]string) error { return writeSysctls(ns, m) }

// SetListening stops a pod's echo servers (off: connections to its ports are refused,
// as to an app that closed its sockets) or starts them again (on).
func (h *Harness) SetListening(p *Pod, on bool) error {
	if on == !p.NotListening {
		return nil
	}
	if !on {
		h.StopServers(p.Netns)
		p.NotListening = true
		return nil
	}
	if err := h.startPodServers(p); err != nil {
		return err
	}
	p.NotListening = false
	return nil
}
