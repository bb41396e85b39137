package cluster

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clusterlab/clusterlab/alloc"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Config describes a cluster: its network (the first block of fields, passed to
// netsim), its API server and its nodes' proxies. Zero fields take the defaults
// documented on each; the zero Config is a one-node IPv4 cluster without a proxy.
type Config struct {
	// Seed drives every random choice in the simulation: datapath handler decisions,
	// NAT port choice, link faults, netstack ISNs and ephemeral ports, the store's
	// allocations.
	Seed uint64
	// Nodes lists the nodes. Default: one node named "node-a".
	Nodes []NodeConfig
	// NodeCIDRs are the networks node IPs come from, one per family, primary first.
	// Default [172.18.0.0/16] (as kind uses); node i gets .2+i.
	NodeCIDRs []netip.Prefix
	// ClusterCIDRs are the pod networks, one per family. Default [10.244.0.0/16]; node i
	// gets the i-th /NodeCIDRMaskSize (IPv4) or /64 (IPv6).
	ClusterCIDRs []netip.Prefix
	// NodeCIDRMaskSize is the size of each node's IPv4 pod range (default 24: 256 nodes
	// in the default cluster CIDR; see netsim.Config.NodeCIDRMaskSize).
	NodeCIDRMaskSize int
	// ExternalCIDR is the network of external hosts. Default 203.0.113.0/24.
	ExternalCIDR netip.Prefix
	// MTU of every link. Default 1500; 65536 gives the fast mode.
	MTU int
	// ManualClock makes virtual time move only through Clock().Advance. Default: the
	// clock runs with the wall clock (and Advance jumps it).
	ManualClock bool
	// QueueLen bounds each node's input queue (see netsim.Config). Default 4096.
	QueueLen int
	// Replay makes runs reproducible byte for byte (see netsim.Network.Run).
	Replay bool
	// LowestFreePodIP gives a new pod the lowest free address of its node's pod CIDR
	// (a pod started right after a deletion gets the deleted pod's address); default
	// round robin, as host-local IPAM (see netsim.Config.LowestFreePodIP).
	LowestFreePodIP bool
	// NoOffload turns off the pods' TCP segmentation offload (see netsim.Config.NoOffload).
	NoOffload bool
	// NoTrains cuts every GSO packet at the pod's link (see netsim.Config.NoTrains).
	NoTrains bool
	// NoAPIServer leaves default/kubernetes without an endpoint. By default the first
	// node is the control plane: the Service's endpoint is its address, port 6443,
	// where the API server (the built-in whoami server) answers, as on a kind cluster.
	// Only for a new store (Store nil).
	NoAPIServer bool

	// Store is the API server the cluster follows; nil makes a new one with
	// ServiceCIDRs, NodePortRange, the seed and the virtual clock (and the master
	// service default/kubernetes).
	Store *service.Store
	// ServiceCIDRs and NodePortRange configure a new store (defaults 10.96.0.0/12 and
	// 30000-32767).
	ServiceCIDRs  []netip.Prefix
	NodePortRange alloc.PortRange
	// Proxy builds each node's service proxy (a kube-proxy mode: proxy/kubeproxy); nil
	// runs none.
	Proxy ProxyFactory
	// SyncDelay is how long after a change in the store the proxies sync (per node:
	// Node.SetSyncDelay). Zero syncs at once.
	SyncDelay time.Duration
	// LoadBalancerCIDR is the pool the simulated cloud load balancer assigns ingress IPs
	// from. Default 198.51.100.0/24.
	LoadBalancerCIDR netip.Prefix
	// LoadBalancerMode is how the simulated cloud load balancer forwards to nodes:
	// "nodeport" (default: it rewrites the destination to a node's IP and the service's
	// node port, keeping the client's address, as a network load balancer with instance
	// targets does) or "vip" (it forwards the packet unchanged to a node, which handles
	// the load-balancer IP itself, as GCE and MetalLB do).
	LoadBalancerMode string
	// LoadBalancerIdleTimeout is how long the simulated cloud load balancer remembers a
	// client flow's node after the flow's last packet, on the virtual clock (its
	// connection tracking). Default 60 s, the default idle timeout of GCE's external
	// passthrough network load balancer (BackendServiceConnectionTrackingPolicy
	// idleTimeoutSec). A packet of a forgotten flow is placed again, as a new one.
	LoadBalancerIdleTimeout time.Duration
}

// NodeConfig describes a node: its place in the network and its Node object.
type NodeConfig struct {
	Name string
	// IPs are the node's addresses, one per family; default from Config.NodeCIDRs.
	IPs []netip.Addr
	// PodCIDRs are the node's pod ranges, one per family; default from ClusterCIDRs.
	PodCIDRs []netip.Prefix
	// Settings are the node's kernel settings; nil means netsim.DefaultNodeSettings().
	Settings *netsim.NodeSettings
	// Zone is the node's topology.kubernetes.io/zone label.
	Zone string
	// Labels are extra node labels.
	Labels map[string]string
	// ProxyName names the node's service proxy: "" (default) is kube-proxy, which
	// ignores Services labelled service.kubernetes.io/service-proxy-name; a name makes
	// it the alternative proxy serving only the Services labelled with that name
	// (proxy.NodeConfig.ProxyName).
	ProxyName string
	// NetworkPolicy is how the node's CNI enforces NetworkPolicy for node and
	// hostNetwork traffic: PolicyCalico (default) or PolicyCilium.
	NetworkPolicy string
}

func (nc NodeConfig) network() netsim.NodeConfig {
	return netsim.NodeConfig{Name: nc.Name, IPs: nc.IPs, PodCIDRs: nc.PodCIDRs, Settings: nc.Settings}
}

// DefaultLoadBalancerIdleTimeout is the default of Config.LoadBalancerIdleTimeout: GCE's
// external passthrough network load balancer forgets a connection-tracking entry 60 s
// after its last packet (BackendServiceConnectionTrackingPolicy.idleTimeoutSec).
const DefaultLoadBalancerIdleTimeout = 60 * time.Second

// network returns the network's part of the configuration; the cluster's service CIDRs
// are destinations pod traffic reaches without the CNI's masquerade.
func (cfg *Config) network(serviceCIDRs []netip.Prefix) netsim.Config {
	nc := netsim.Config{
		Seed:               cfg.Seed,
		NodeCIDRs:          cfg.NodeCIDRs,
		ClusterCIDRs:       cfg.ClusterCIDRs,
		ExternalCIDR:       cfg.ExternalCIDR,
		MTU:                cfg.MTU,
		ManualClock:        cfg.ManualClock,
		QueueLen:           cfg.QueueLen,
		Replay:             cfg.Replay,
		NonMasqueradeCIDRs: serviceCIDRs,
		LowestFreePodIP:    cfg.LowestFreePodIP,
		NoOffload:          cfg.NoOffload,
		NoTrains:           cfg.NoTrains,
		NodeCIDRMaskSize:   cfg.NodeCIDRMaskSize,
	}
	for _, n := range cfg.Nodes {
		nc.Nodes = append(nc.Nodes, n.network())
	}
	return nc
}

// setDefaults fills in the cluster's own defaults (the network fills in its own).
func (cfg *Config) setDefaults() error {
	if len(cfg.Nodes) == 0 {
		cfg.Nodes = []NodeConfig{{Name: "node-a"}}
	}
	for _, n := range cfg.Nodes {
		if err := CheckPolicyFlavour(n.NetworkPolicy); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	if !cfg.LoadBalancerCIDR.IsValid() {
		cfg.LoadBalancerCIDR = netip.MustParsePrefix("198.51.100.0/24")
	}
	if cfg.LoadBalancerIdleTimeout < 0 {
		return fmt.Errorf("loadBalancerIdleTimeout %s: must not be negative", cfg.LoadBalancerIdleTimeout)
	}
	if cfg.LoadBalancerIdleTimeout == 0 {
		cfg.LoadBalancerIdleTimeout = DefaultLoadBalancerIdleTimeout
	}
	switch cfg.LoadBalancerMode {
	case "":
		cfg.LoadBalancerMode = "nodeport"
	case "nodeport", "vip":
	default:
		return fmt.Errorf("loadBalancerMode %q: want nodeport or vip", cfg.LoadBalancerMode)
	}
	return nil
}

// Cluster is a simulated Kubernetes cluster at run time: a netsim network (whose
// methods it has: Probe, Pod, AddExternalHost, Partition, Capture, ...) driven by an API
// server (the store), with a kubelet and a proxy per node and a cloud load balancer.
type Cluster struct {
	*netsim.Network
	cfg   Config
	store *service.Store

	mu          sync.Mutex
	closed      bool
	cancelWatch func()
	nodes       map[string]*Node // the live nodes by name
	finalizing  map[string]bool  // pods whose grace period is running
	apps        map[string]App
	runs        map[string]*podRun // the kubelet's running pods by key (containers.go)
	probePort   uint16             // the last probe's source port
	podStart    []func(*netsim.Pod, *corev1.Pod)

	errMu sync.Mutex
	errs  []error

	// The cloud load balancer (lb.go, lbhealth.go).
	lbs     map[string]*loadBalancer // service key → its load balancer
	nextLB  netip.Addr
	checker *lbChecker // the health checker, made on first use
	replies lbReplies  // the load balancers' reply bindings (nodeport mode)

	pol policyState // NetworkPolicy enforcement (policy.go)

	proxiesUp atomic.Bool // the proxies have started: store changes request syncs
}

// New builds the cluster: the network with its nodes, the store (Config.Store or a new
// one) with the nodes registered, the kubelets, the proxies (synced once) and the cloud
// load balancer.
func New(cfg Config) (*Cluster, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("cluster: config: %w", err)
	}
	serviceCIDRs := cfg.ServiceCIDRs
	if cfg.Store != nil {
		serviceCIDRs = cfg.Store.Config().ServiceCIDRs
	} else if len(serviceCIDRs) == 0 {
		serviceCIDRs = []netip.Prefix{service.DefaultServiceCIDR} // what a new store takes
	}
	nw, err := netsim.New(cfg.network(serviceCIDRs))
	if err != nil {
		return nil, err
	}
	// The load balancer's health checker is made on first use; it can be captured before.
	nw.ReserveCapturePoint("external/" + HealthCheckerName)
	// The configuration as it is: with the network's defaults filled in.
	ncfg := nw.Config()
	cfg.NodeCIDRs, cfg.ClusterCIDRs, cfg.ExternalCIDR = ncfg.NodeCIDRs, ncfg.ClusterCIDRs, ncfg.ExternalCIDR
	cfg.MTU, cfg.ManualClock, cfg.QueueLen = ncfg.MTU, ncfg.ManualClock, ncfg.QueueLen
	cfg.NodeCIDRMaskSize = ncfg.NodeCIDRMaskSize
	c := &Cluster{
		Network:    nw,
		cfg:        cfg,
		store:      cfg.Store,
		nodes:      map[string]*Node{},
		finalizing: map[string]bool{},
		apps:       map[string]App{},
		runs:       map[string]*podRun{},
		lbs:        map[string]*loadBalancer{},
	}
	c.initPolicy()
	c.replies.c = c
	c.replies.m = map[netfilter.Tuple]*lbFlow{}
	for i, n := range nw.Nodes() {
		c.nodes[n.Name()] = c.newNode(n, cfg.Nodes[i])
	}
	nw.Do(func() { err = c.start() })
	if err != nil {
		c.Close()
		return nil, err
	}
	st := c.store.Config()
	c.cfg.ServiceCIDRs, c.cfg.NodePortRange = st.ServiceCIDRs, st.NodePortRange
	return c, nil
}

func (c *Cluster) newNode(n *netsim.Node, nc NodeConfig) *Node {
	return &Node{Node: n, c: c, cfg: nc, polFlavour: nc.NetworkPolicy}
}

// Config returns the cluster's configuration with defaults filled in (the network's
// own, with its defaults, is Network.Config()).
func (c *Cluster) Config() Config {
	cfg := c.cfg
	if c.store != nil { // the API server's ranges, which a restart may change
		sc := c.store.Config()
		cfg.ServiceCIDRs, cfg.NodePortRange = sc.ServiceCIDRs, sc.NodePortRange
	}
	return cfg
}

// RestartAPIServer restarts the API server with new service IP and node port ranges
// (nil and the zero PortRange keep the current ones): see
// service.Store.RestartAPIServer for what survives and what the repair pass reports.
// The proxies' informers list again, which changes nothing, and each proxy syncs. The
// network's non-masquerade ranges (netsim.Config.NonMasqueradeCIDRs) stay as they were.
func (c *Cluster) RestartAPIServer(cidrs []netip.Prefix, ports alloc.PortRange) (alloc.Report, error) {
	rep, err := c.store.RestartAPIServer(cidrs, ports)
	if err != nil {
		return rep, err
	}
	c.requestSyncs()
	return rep, nil
}

// Store returns the cluster's service store: its API server.
func (c *Cluster) Store() *service.Store { return c.store }

// Apply creates or updates objects in the store, all or nothing (see service.Store.Apply).
func (c *Cluster) Apply(objs ...runtime.Object) error { return c.store.Apply(objs...) }

// Node returns the named node, or nil.
func (c *Cluster) Node(name string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[name]
}

// Nodes returns the nodes in configuration order.
func (c *Cluster) Nodes() []*Node {
	var out []*Node
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.Network.Nodes() {
		if m := c.nodes[n.Name()]; m != nil {
			out = append(out, m)
		}
	}
	return out
}

// Errors returns what went wrong in the background (a pod that could not start, a proxy
// sync that failed), oldest first.
func (c *Cluster) Errors() []error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return append([]error(nil), c.errs...)
}

func (c *Cluster) recordErr(err error) {
	c.errMu.Lock()
	c.errs = append(c.errs, err)
	c.errMu.Unlock()
}

func (c *Cluster) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Close stops the simulation: the watches end, the cloud load balancer's health checks
// in flight end (without a result), then every stack is torn down and every goroutine
// ends, the checks' requests included.
func (c *Cluster) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	cancel := c.cancelWatch
	k := c.checker
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if k != nil {
		k.close()
	}
	c.Network.Close()
	if k != nil {
		k.wait()
	}
}

// Node is a node of the cluster: the network's node (its datapath, conntrack, host
// stack, handlers) with what Kubernetes runs on it: the Node object's labels, the proxy
// and its syncs, and how the cloud load balancer judges it.
type Node struct {
	*netsim.Node
	c     *Cluster
	cfg   NodeConfig
	proxy Proxy
	ps    proxyState

	healthMu sync.Mutex
	health   HealthChecker

	polMu      sync.Mutex
	polFlavour string // NetworkPolicy flavour (policy.go)
}

// Cluster returns the cluster the node belongs to.
func (n *Node) Cluster() *Cluster { return n.c }

// Config returns the node's configuration.
func (n *Node) Config() NodeConfig { return n.cfg }

// lbReplies are the reply bindings of the load balancers in nodeport mode: the tuple of
// a node's reply → the client's flow. It is the network's FabricNAT.
type lbReplies struct {
	c  *Cluster
	mu sync.RWMutex
	m  map[netfilter.Tuple]*lbFlow
	n  atomic.Int64 // len(m), read for every packet
}
