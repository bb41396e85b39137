package netsim

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/clusterlab/clusterlab/netfilter"
)

// NodeSettings are the kernel settings of a node that change outcomes.
type NodeSettings struct {
	// Hairpin is the bridge's hairpin mode on pod ports (kubelet --hairpin-mode
	// hairpin-veth): with it off, a packet the node sends back out the bridge port it came
	// in on is lost, so a pod cannot reach itself through its own Service.
	Hairpin bool
	// RouteLocalnet is net.ipv4.conf.all.route_localnet: with it off, packets to or from
	// 127.0.0.0/8 on a non-loopback interface are martians and dropped (localhost
	// NodePorts need it on; kube-proxy sets it).
	RouteLocalnet bool
	// IPForward is net.ipv4.ip_forward: with it off the node forwards nothing.
	IPForward bool
	// RPFilter is net.ipv4.conf.all.rp_filter: 0 off, 1 strict (the route back to the
	// source must leave through the interface the packet came in on), 2 loose (there must
	// be some route back).
	RPFilter int
	// Conntrack holds the nf_conntrack sysctls (tcp_be_liberal, timeouts).
	Conntrack ConntrackSettings
	// EgressMasquerade masquerades pod traffic leaving the cluster network (to
	// destinations outside the cluster, node and service CIDRs) behind the node IP, as
	// CNIs and ip-masq-agent do, so external hosts see nodes, not pod IPs.
	EgressMasquerade bool
	// Kernel is the node's Linux release; the zero value is a current kernel
	// (netfilter.CurrentKernel). Kernel-behaviour changes (proxy.KernelHas) and what
	// kube-proxy writes at start-up (IPVS conn_reuse_mode) follow it.
	Kernel netfilter.KernelVersion
	// IPVS holds net.ipv4.vs sysctls the node's administrator set over kube-proxy's:
	// unset fields keep what kube-proxy's IPVS mode wrote (or the kernel's default).
	IPVS IPVSSysctls
}

// IPVSSysctls are net.ipv4.vs settings that override kube-proxy's; each is applied only
// when Set.
type IPVSSysctls struct {
	ConnReuseMode           Sysctl // conn_reuse_mode (0, 1 or 2)
	ExpireNodestConn        Sysctl // expire_nodest_conn (0 or 1)
	ExpireQuiescentTemplate Sysctl // expire_quiescent_template (0 or 1)
	Conntrack               Sysctl // conntrack (0 or 1)
}

// Sysctl is an optional integer setting: Value applies only when Set.
type Sysctl struct {
	Set   bool
	Value int
}

// SetTo returns a Sysctl set to v.
func SetTo(v int) Sysctl { return Sysctl{Set: true, Value: v} }

// DefaultNodeSettings are a Kubernetes node's usual settings: hairpin on, forwarding
// on, route_localnet off, rp_filter off, egress masquerade on, conntrack defaults with
// loose pickup.
func DefaultNodeSettings() NodeSettings {
	return NodeSettings{Hairpin: true, IPForward: true, EgressMasquerade: true, Conntrack: ConntrackSettings{TCPLoose: true}}
}

// Interface kinds.
const (
	IfLoopback = "loopback"
	IfUplink   = "uplink" // the node's link to the cluster network (eth0)
	IfBridge   = "bridge" // the pod bridge (cbr0)
	IfDummy    = "dummy"  // a dummy interface holding VIPs (kube-ipvs0)
)

// Iface is a network interface of a node.
type Iface struct {
	Name  string
	Kind  string
	Addrs []netip.Prefix
}

// Primary returns the interface's first address of the family of like, if any.
func (i *Iface) Primary(like netip.Addr) (netip.Addr, bool) {
	for _, p := range i.Addrs {
		if p.Addr().Is4() == like.Is4() {
			return p.Addr(), true
		}
	}
	return netip.Addr{}, false
}

type handlerEntry struct {
	spec HandlerSpec
	id   uint64
}

// Node is a node of the simulated cluster at run time: a small Linux router with a pod
// bridge, an uplink to the cluster network, a host network stack, conntrack, and the
// handlers registered at its hooks.
type Node struct {
	// ipvs is settings.IPVS for readers that may hold no lock (IPVSSettings).
	ipvs atomic.Pointer[IPVSSysctls]
	// gather is the hold on the next packets armed by HoldTogether (nil: none).
	gather  atomic.Pointer[Gathering]
	cluster *Network
	name    string
	cfg     NodeConfig
	ips     []netip.Addr   // node IPs, primary family first
	podCIDR []netip.Prefix // per family
	pod4    []prefix4      // the IPv4 ones, for route4Locked
	gateway []netip.Addr   // cbr0 addresses (first address of each pod CIDR)
	// lastPodIP is the address nextPodIPs allocated last, per pod CIDR (host-local's
	// last reserved IP; guarded by mu).
	lastPodIP []netip.Addr

	// mu is the datapath lock, held while a packet is processed (&hot.mu); it is the
	// node's conntrack table's lock too, so that a packet's pass takes one lock.
	mu        *sync.Mutex
	hot       *nodeHot
	settings  NodeSettings
	ifaces    map[string]*Iface
	lo        *Iface
	uplink    *Iface
	bridge    *Iface
	local     map[netip.Addr]*Iface
	ports     map[netip.Addr]*podPort // pod IP → bridge port
	addrs     addrTable               // local and ports in one, for the datapath
	hooks     [netfilter.NumHooks][]handlerEntry
	plans     [netfilter.NumHooks][]hookStep // what runHookLocked runs, from hooks (planLocked)
	bare      [netfilter.NumHooks]bool       // the hook's plan is its built-in steps alone
	nextID    uint64
	ct        *Conntrack
	rng       *rand.Rand
	host      *netStack
	hostNet   *Net
	down      atomic.Bool
	partition int

	q          packetQueue
	stopped    chan struct{}
	uplinkLink *Link
	hctx       Context  // reused for every handler call (under mu)
	pkt        Packet   // reused by the datapath goroutine for each queued packet
	gro        groBatch // pod links holding merged segments until the batch ends (gro.go)
	train      trainRun // the train passing the datapath (train.go; under mu)
	// noTrains: a handler at PREROUTING, FORWARD or POSTROUTING (NAT handlers aside) is
	// no TrainHandler, so a train would be cut at once: its pods' links make none
	// (planLocked keeps it).
	noTrains atomic.Bool
	// trains counts the trains the node passed whole [0] and cut at its entry [1] (tests).
	// [2]: trains delivered into its pods whole (injectTrain).
	trains     [3]atomic.Uint64
	fromFabric func(frame) // takes a packet in from the cluster network (bound once)
}

// nodeHot is what every pass of a packet through a node writes besides the packet and its
// conntrack entry: the datapath lock and the counters. It is allocated on its own and is
// 64 bytes, so it fills one cache line of its own: a pass that has taken the lock finds the
// counters in the same line, and no other data shares it. (Passes through a node run on
// different goroutines, hence often on different cores: each line a pass writes moves
// between the cores' caches.)
type nodeHot struct {
	mu    sync.Mutex
	stats NodeStats
	_     [64 - unsafe.Sizeof(sync.Mutex{}) - unsafe.Sizeof(NodeStats{})]byte
}

var _ [64 - unsafe.Sizeof(nodeHot{})]byte // no bigger than a line

// NodeStats counts what the datapath did.
type NodeStats struct {
	Received, Forwarded, Delivered, Dropped, Rejected, QueueDrops uint64
}

// podPort is a pod's port on the node's bridge.
type podPort struct {
	name string // vethXXXXXXXX, as the host side of the pod's veth
	pod  *Pod
	link *Link
	// toNode and toPod deliver at the two ends of the veth (bound once, so that sending a
	// packet allocates no closure).
	toNode, toPod func(frame)
}

// Name returns the node's name.
func (n *Node) Name() string { return n.name }

// IPs returns the node's IPs, primary family first.
func (n *Node) IPs() []netip.Addr { return append([]netip.Addr(nil), n.ips...) }

// IP returns the node's primary IP.
func (n *Node) IP() netip.Addr { return n.ips[0] }

// PodCIDRs returns the node's pod CIDRs.
func (n *Node) PodCIDRs() []netip.Prefix { return append([]netip.Prefix(nil), n.podCIDR...) }

// Conntrack returns the node's connection-tracking table.
func (n *Node) Conntrack() *Conntrack { return n.ct }

// HostNet returns the node's host network: hostNetwork pods, NodePort listeners and the
// userspace proxy use it.
func (n *Node) HostNet() *Net { return n.hostNet }

// Settings returns the node's kernel settings.
func (n *Node) Settings() NodeSettings {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.settings
}

// SetSettings changes the node's kernel settings (the conntrack part included).
func (n *Node) SetSettings(s NodeSettings) {
	n.mu.Lock()
	n.settings = s
	n.ct.settings = s.Conntrack // n.mu is the table's lock
	ipvs := s.IPVS
	n.ipvs.Store(&ipvs)
	n.mu.Unlock()
}

// IPVSSettings returns the node's IPVS sysctl overrides (NodeSettings.IPVS) without
// taking the node's lock, so that a packet handler (which runs under it) may ask.
func (n *Node) IPVSSettings() IPVSSysctls { return *n.ipvs.Load() }

// UpdateSettings changes the node's settings through f.
func (n *Node) UpdateSettings(f func(*NodeSettings)) {
	s := n.Settings()
	f(&s)
	n.SetSettings(s)
}

// Interfaces returns the node's interfaces sorted by name.
func (n *Node) Interfaces() []Iface {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []Iface
	for _, i := range n.ifaces {
		c := *i
		c.Addrs = append([]netip.Prefix(nil), i.Addrs...)
		out = append(out, c)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// IsLocalAddr reports whether addr is one of the node's own addresses (any interface,
// loopback included), as addrtype LOCAL does.
func (n *Node) IsLocalAddr(addr netip.Addr) bool {
	if addr.IsLoopback() {
		return true
	}
	_, ok := n.local[addr]
	return ok
}

// SourceFor returns the source address the node's kernel would give a connection to
// dst that its program did not bind, as Linux's routes decide it: dst itself when dst
// is local to the node (its own addresses, VIPs bound to kube-ipvs0, loopback), the
// bridge address toward the node's own pod range, and otherwise the node's primary
// address of dst's family (the uplink's source). Invalid if the node has no address of
// the family.
func (n *Node) SourceFor(dst netip.Addr) netip.Addr {
	dst = dst.Unmap()
	n.mu.Lock()
	_, local := n.local[dst]
	n.mu.Unlock()
	if local || dst.IsLoopback() {
		return dst
	}
	for j, p := range n.podCIDR {
		if p.Contains(dst) {
			return n.gateway[j]
		}
	}
	for _, ip := range n.ips {
		if ip.Is4() == dst.Is4() {
			return ip
		}
	}
	return netip.Addr{}
}

// AddHandler registers a handler at a hook and returns a function that removes it.
func (n *Node) AddHandler(spec HandlerSpec) (remove func()) {
	if spec.Handler == nil {
		panic("netsim: AddHandler with a nil Handler")
	}
	if spec.NAT {
		switch spec.Hook {
		case netfilter.Prerouting, netfilter.Output, netfilter.Input, netfilter.Postrouting:
		default:
			panic(fmt.Sprintf("netsim: NAT handler %q at %s: NAT is done in PREROUTING, OUTPUT, INPUT and POSTROUTING", spec.Name, spec.Hook))
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nextID++
	id := n.nextID
	hs := append([]handlerEntry(nil), n.hooks[spec.Hook]...)
	hs = append(hs, handlerEntry{spec: spec, id: id})
	sort.SliceStable(hs, func(i, j int) bool { return hs[i].spec.Priority < hs[j].spec.Priority })
	n.hooks[spec.Hook] = hs
	n.planLocked(spec.Hook)
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		var out []handlerEntry
		for _, h := range n.hooks[spec.Hook] {
			if h.id != id {
				out = append(out, h)
			}
		}
		n.hooks[spec.Hook] = out
		n.planLocked(spec.Hook)
	}
}

// hookStep is one step of a hook's plan: a built-in step (spec nil) or a handler.
type hookStep struct {
	builtin int
	spec    *HandlerSpec
	idle    IdleHandler // spec's handler when it is an IdleHandler
}

// planLocked lays out the steps of hook h in the order runHookLocked takes them: the
// hook's handlers that are not NAT handlers (those run inside the NAT step) by priority,
// each after the built-in steps of the same or a lower priority, then the remaining
// built-in steps. It runs whenever the hook's handlers change, so that a packet's pass
// walks one short list.
func (n *Node) planLocked(h netfilter.Hook) {
	bs := hookBuiltins[h]
	bi := 0
	var plan []hookStep
	hs := n.hooks[h]
	for i := range hs {
		spec := &hs[i].spec
		if spec.NAT {
			continue
		}
		for ; bi < len(bs) && bs[bi].prio <= spec.Priority; bi++ {
			plan = append(plan, hookStep{builtin: bs[bi].kind})
		}
		idle, _ := spec.Handler.(IdleHandler)
		plan = append(plan, hookStep{spec: spec, idle: idle})
	}
	for ; bi < len(bs); bi++ {
		plan = append(plan, hookStep{builtin: bs[bi].kind})
	}
	n.plans[h] = plan
	n.bare[h] = len(plan) == len(bs)
	no := false
	for _, h := range []netfilter.Hook{netfilter.Prerouting, netfilter.Forward, netfilter.Postrouting} {
		for _, st := range n.plans[h] {
			if st.spec == nil {
				continue
			}
			if _, is := st.spec.Handler.(TrainHandler); !is {
				no = true
			}
		}
	}
	n.noTrains.Store(no)
}

// AddInterface adds a dummy interface (e.g. kube-ipvs0), or returns the existing one.
func (n *Node) AddInterface(name string) *Iface {
	n.mu.Lock()
	defer n.mu.Unlock()
	if i, ok := n.ifaces[name]; ok {
		return i
	}
	i := &Iface{Name: name, Kind: IfDummy}
	n.ifaces[name] = i
	return i
}

// AddAddress binds an address to one of the node's interfaces (as `ip addr add`): it
// becomes local to the node and its host stack answers for it. IPVS mode binds every VIP
// to kube-ipvs0 this way.
func (n *Node) AddAddress(iface string, p netip.Prefix) error {
	n.mu.Lock()
	i, ok := n.ifaces[iface]
	if !ok {
		n.mu.Unlock()
		return fmt.Errorf("node %s: no interface %q", n.name, iface)
	}
	if _, dup := n.local[p.Addr()]; dup {
		n.mu.Unlock()
		return nil
	}
	i.Addrs = append(i.Addrs, p)
	n.setLocalLocked(p.Addr(), i)
	n.mu.Unlock()
	if n.host != nil && !p.Addr().IsLoopback() {
		return addStackAddr(n.host.s, nicMain, netip.PrefixFrom(p.Addr(), p.Addr().BitLen()))
	}
	return nil
}

// RemoveAddress unbinds an address from the node.
func (n *Node) RemoveAddress(iface string, addr netip.Addr) error {
	n.mu.Lock()
	i, ok := n.ifaces[iface]
	if !ok {
		n.mu.Unlock()
		return fmt.Errorf("node %s: no interface %q", n.name, iface)
	}
	var keep []netip.Prefix
	found := false
	for _, p := range i.Addrs {
		if p.Addr() == addr {
			found = true
			continue
		}
		keep = append(keep, p)
	}
	i.Addrs = keep
	if found {
		n.setLocalLocked(addr, nil)
	}
	n.mu.Unlock()
	if found && n.host != nil {
		n.host.s.RemoveAddress(nicMain, addrOf(addr))
	}
	return nil
}

// routeKind is what routing decided for a packet.
type routeKind uint8

const (
	routeLocal   routeKind = iota // deliver to the node itself
	routeBridge                   // out cbr0 to a pod port
	routeUplink                   // out eth0 into the cluster network
	routeNone                     // no route
	routeNoNeigh                  // on-link (pod CIDR) but nobody there: ARP fails
)

type route struct {
	kind  routeKind
	iface *Iface
	port  *podPort
}

// routeLocked decides where a packet to dst goes (the FIB lookup).
func (n *Node) routeLocked(dst netip.Addr) route {
	if dst.Is4() {
		return n.route4Locked(dst)
	}
	e := n.addrLocked(dst)
	if e.local != nil {
		return route{kind: routeLocal, iface: e.local}
	}
	if dst.IsLoopback() {
		return route{kind: routeLocal, iface: n.lo}
	}
	for _, p := range n.podCIDR {
		if p.Contains(dst) {
			if e.port != nil {
				return route{kind: routeBridge, iface: n.bridge, port: e.port}
			}
			return route{kind: routeNoNeigh, iface: n.bridge}
		}
	}
	if dst.IsUnspecified() || dst.IsMulticast() {
		return route{kind: routeNone}
	}
	return route{kind: routeUplink, iface: n.uplink}
}

// route4Locked is routeLocked for an IPv4 destination: the same decisions, with the
// address as a number.
func (n *Node) route4Locked(dst netip.Addr) route {
	b := dst.As4()
	a := binary.BigEndian.Uint32(b[:])
	e := n.addrs.v4.get(a)
	if e.local != nil {
		return route{kind: routeLocal, iface: e.local}
	}
	if b[0] == 127 { // loopback
		return route{kind: routeLocal, iface: n.lo}
	}
	for _, p := range n.pod4 {
		if p.contains(a) {
			if e.port != nil {
				return route{kind: routeBridge, iface: n.bridge, port: e.port}
			}
			return route{kind: routeNoNeigh, iface: n.bridge}
		}
	}
	if a == 0 || b[0]&0xf0 == 0xe0 { // unspecified, multicast
		return route{kind: routeNone}
	}
	return route{kind: routeUplink, iface: n.uplink}
}

// addrTable maps each of a node's own addresses to its interface and each of its pods' IPs
// to its bridge port: the local and ports maps of a node in one, keyed by the address's
// bits (four bytes for IPv4), so that routing a packet costs one lookup of a short key
// instead of two of netip.Addr (24 bytes with its zone). Addresses with a zone are not in
// it (packets never carry one): addrLocked looks those up in local and ports.
type addrTable struct {
	v4 addr4Table
	v6 map[[16]byte]addrEntry
}

// addr4Table maps IPv4 addresses, as numbers, to entries: open addressing with linear
// probing, at most half full, an empty slot being one with the zero entry (which is
// never stored). A lookup reads one slot after the slice header, where a Go map of a
// node's few dozen addresses read its header, directory and group: in a cluster of
// thousands of nodes a probe meets each node's table cold, and each of those reads was
// a cache miss (Node.addrLocked, 7 % of a warm probe's time at 1,000 nodes).
type addr4Table struct {
	slots []addr4Slot // len zero or a power of two
	shift uint8       // 32 - log2(len(slots))
	n     int
}

type addr4Slot struct {
	k uint32
	e addrEntry
}

func (t *addr4Table) home(k uint32) int { return int((k * 0x9e3779b1) >> t.shift) }

// get returns k's entry (zero when k is absent).
func (t *addr4Table) get(k uint32) addrEntry {
	if t.n == 0 {
		return addrEntry{}
	}
	mask := len(t.slots) - 1
	for i := t.home(k); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == (addrEntry{}) || s.k == k {
			return s.e
		}
	}
}

// set makes e k's entry; the zero entry deletes k.
func (t *addr4Table) set(k uint32, e addrEntry) {
	if e == (addrEntry{}) {
		t.del(k)
		return
	}
	if 2*(t.n+1) > len(t.slots) {
		old := t.slots
		size := max(8, 2*len(t.slots))
		t.slots, t.shift, t.n = make([]addr4Slot, size), uint8(32-bits.TrailingZeros(uint(size))), 0
		for _, s := range old {
			if s.e != (addrEntry{}) {
				t.set(s.k, s.e)
			}
		}
	}
	mask := len(t.slots) - 1
	i := t.home(k)
	for ; t.slots[i].e != (addrEntry{}); i = (i + 1) & mask {
		if t.slots[i].k == k {
			t.slots[i].e = e
			return
		}
	}
	t.slots[i] = addr4Slot{k: k, e: e}
	t.n++
}

// del removes k, moving the later slots of its run back (no tombstones).
func (t *addr4Table) del(k uint32) {
	if t.n == 0 {
		return
	}
	mask := len(t.slots) - 1
	i := t.home(k)
	for ; t.slots[i].k != k || t.slots[i].e == (addrEntry{}); i = (i + 1) & mask {
		if t.slots[i].e == (addrEntry{}) {
			return
		}
	}
	for j := i; ; {
		j = (j + 1) & mask
		if t.slots[j].e == (addrEntry{}) {
			break
		}
		// The entry at j stays when its home is cyclically in (i, j].
		if cyclicIn(t.home(t.slots[j].k), i, j) {
			continue
		}
		t.slots[i], i = t.slots[j], j
	}
	t.slots[i] = addr4Slot{}
	t.n--
}

type addrEntry struct {
	local *Iface   // the address is the node's own, on this interface
	port  *podPort // the address is a pod's, behind this bridge port
}

// addrLocked returns what the node knows about an address.
func (n *Node) addrLocked(a netip.Addr) addrEntry {
	if a.Is4() {
		b := a.As4()
		return n.addrs.v4.get(binary.BigEndian.Uint32(b[:]))
	}
	if a.Zone() != "" {
		return addrEntry{local: n.local[a], port: n.ports[a]}
	}
	return n.addrs.v6[a.As16()]
}

// setAddrLocked records a change of local or ports for a in the table.
func (n *Node) setAddrLocked(a netip.Addr) {
	e := addrEntry{local: n.local[a], port: n.ports[a]}
	switch {
	case a.Is4():
		b := a.As4()
		n.addrs.v4.set(binary.BigEndian.Uint32(b[:]), e)
	case a.Zone() != "":
	default:
		if n.addrs.v6 == nil {
			n.addrs.v6 = map[[16]byte]addrEntry{}
		}
		if e == (addrEntry{}) {
			delete(n.addrs.v6, a.As16())
		} else {
			n.addrs.v6[a.As16()] = e
		}
	}
}

// setLocalLocked makes a one of the node's own addresses, on interface i (nil: no longer).
func (n *Node) setLocalLocked(a netip.Addr, i *Iface) {
	if i == nil {
		delete(n.local, a)
	} else {
		n.local[a] = i
	}
	n.setAddrLocked(a)
}

// setPortLocked makes port the bridge port for pod IP a (nil: none).
func (n *Node) setPortLocked(a netip.Addr, port *podPort) {
	if port == nil {
		delete(n.ports, a)
	} else {
		n.ports[a] = port
	}
	n.setAddrLocked(a)
}

// packetQueue is a node's input queue: a bounded FIFO with a wake-up channel.
type packetQueue struct {
	mu    sync.Mutex
	items []queued
	segs  int // packets in items, a train counting its segments
	wake  chan struct{}
	limit int
}

type queued struct {
	data frame
	from queueSource
}

// queueSource says where a queued packet came from.
type queueSource struct {
	kind  uint8 // fromPort, fromHost, fromHostLo, fromUplink
	port  *podPort
	trace *Trace
}

// describe says where a live packet came from, for its trace.
func (q queueSource) describe(n *Node) string {
	switch q.kind {
	case fromPort:
		if q.port != nil && q.port.pod != nil {
			return "from pod " + q.port.pod.key() + " on " + n.bridge.Name + " port " + q.port.name
		}
		return "from " + n.bridge.Name
	case fromHost:
		return "from node " + n.name + "'s host stack"
	case fromHostLo:
		return "from node " + n.name + "'s host stack on " + n.lo.Name
	}
	return "from the cluster network on " + n.uplink.Name
}

const (
	fromPort uint8 = iota
	fromHost
	fromHostLo
	fromUplink
)

func (q *packetQueue) push(d frame, from queueSource) bool { return q.pushN(d, from, 1) }

// pushN is push for a frame that counts as k packets (a train's segments): it is queued
// only when all of them fit.
func (q *packetQueue) pushN(d frame, from queueSource, k int) bool {
	q.mu.Lock()
	if q.segs+k > q.limit {
		q.mu.Unlock()
		return false
	}
	q.segs += k
	q.items = append(q.items, queued{data: d, from: from})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

func (q *packetQueue) take(buf []queued) []queued {
	q.mu.Lock()
	buf = append(buf[:0], q.items...)
	clear(q.items)
	q.items = q.items[:0]
	q.segs = 0
	q.mu.Unlock()
	return buf
}

// enqueue hands a packet to the node's datapath goroutine.
func (n *Node) enqueue(d frame, from queueSource) {
	if n.down.Load() {
		return
	}
	if n.cluster.cfg.Replay {
		n.cluster.replayQ.push(n, queued{data: d, from: from})
		return
	}
	if d.mss != 0 {
		if k := d.segments(); !n.q.pushN(d, from, k) {
			// Not room for all: the segments one by one, as they would have come.
			cutTrain(d, func(s frame) { n.enqueue(s, from) })
		}
		return
	}
	if !n.q.push(d, from) {
		atomic.AddUint64(&n.hot.stats.QueueDrops, 1)
	}
}

// run is the node's datapath goroutine.
func (n *Node) run() {
	defer close(n.stopped)
	var batch []queued
	for {
		<-n.q.wake // one channel, not a select with done: the cheaper wake-up per packet
		select {
		case <-n.cluster.done: // Close wakes every node after closing done
			return
		default:
		}
		batch = n.q.take(batch)
		// One reading of the clock for the batch: its packets were all queued by now,
		// and they are handled within microseconds of each other (a node's conntrack
		// keeps time in the same units as the kernel's, whose jiffies are 1-4 ms). A
		// stream's batch is one GSO send's worth of segments, each of which read the
		// running clock on its own before (runtime.nanotime, 4-5 % of the bulk row).
		t := n.cluster.clock.Now()
		for _, it := range batch {
			if n.down.Load() {
				continue
			}
			n.handleQueuedAt(it, t)
		}
		n.gro.flush()
		clear(batch)
	}
}

func (n *Node) handleQueued(it queued) { n.handleQueuedAt(it, time.Time{}) }

// handleQueuedAt is handleQueued at virtual time t (zero: read the clock when the packet
// first needs it).
func (n *Node) handleQueuedAt(it queued, t time.Time) {
	n.pkt.gro = &n.gro
	n.handle(it, &n.pkt, t)
	n.pkt = Packet{} // for the next packet, and let go of what this one referred to
}

// packetPool holds the Packets of node passes run outside a node's own goroutine.
var packetPool = sync.Pool{New: func() any { return new(Packet) }}

// fromUplinkNow runs a packet that arrives from the cluster network through the node at
// once, on the goroutine that carried it there (usually the sending node's datapath
// goroutine), instead of queueing it for the node's own goroutine: the wire between two
// nodes costs no goroutine hand-off. The node lock orders it with the node's other
// packets. Replay mode queues it, to keep its one packet at a time.
func (n *Node) fromUplinkNow(f frame, tr *Trace) {
	if n.cluster.cfg.Replay || n.down.Load() {
		n.enqueue(f, queueSource{kind: fromUplink, trace: tr})
		return
	}
	pk := packetPool.Get().(*Packet)
	n.handle(queued{data: f, from: queueSource{kind: fromUplink, trace: tr}}, pk, time.Time{})
	*pk = Packet{} // zero for the next use, and let go of what the packet referred to
	packetPool.Put(pk)
}

// handle runs a packet through the node at virtual time t (zero: read the clock when the
// packet first needs it). pk is the Packet to parse it into, zero.
func (n *Node) handle(it queued, pk *Packet, t time.Time) {
	if it.data.mss != 0 {
		n.handleTrain(it, pk, t)
		return
	}
	if err := pk.parse(it.data.b); err != nil {
		atomic.AddUint64(&n.hot.stats.Dropped, 1)
		return
	}
	pk.view, pk.sumsOK = it.data.v, it.data.sumsOK
	if g := n.gather.Load(); g != nil {
		if it.from.kind == fromPort {
			pk.inPort = it.from.port
		}
		if g.hold(pk, it.from) {
			return
		}
	}
	if it.from.trace == nil && n.cluster.flowTracers.Load() != nil {
		it.from.trace = n.cluster.flowTrace(n, pk, it.from.describe(n))
	}
	var eg egress
	env := n.packetEnv(it.from.trace)
	env.t = t
	switch it.from.kind {
	case fromPort:
		n.capture(n.bridge.Name, it.data.b)
		eg = n.ingress(pk, n.bridge, it.from.port, env)
	case fromUplink:
		n.capture(n.uplink.Name, it.data.b)
		eg = n.ingress(pk, n.uplink, nil, env)
	case fromHost, fromHostLo:
		eg = n.output(pk, env)
	}
	n.execute(eg, it.from.trace, env.t)
}

// fromUplinkPacket runs a packet that another node sends over the cluster network
// through this node at once, on the sending node's goroutine (see fromUplinkNow), taking
// over the sender's parsed Packet instead of parsing its bytes again: what the sender
// knew about it (conntrack, mark, interfaces) is dropped, as an skb's metadata does not
// cross a wire, and it arrives at the virtual time t the sender read for it.
func (n *Node) fromUplinkPacket(pk *Packet, tr *Trace, t time.Time) {
	pk.resetMeta()
	if pk.trainMSS != 0 {
		n.trainFromUplink(pk, tr, t)
		return
	}
	if g := n.gather.Load(); g != nil && g.hold(pk, queueSource{kind: fromUplink, trace: tr}) {
		return
	}
	n.capture(n.uplink.Name, pk.Data)
	if tr == nil && n.cluster.flowTracers.Load() != nil {
		tr = n.cluster.flowTrace(n, pk, "from the cluster network on "+n.uplink.Name)
	}
	env := n.packetEnv(tr)
	env.t = t
	n.execute(n.ingress(pk, n.uplink, nil, env), tr, env.t)
}

// packetEnv is the environment a packet of real traffic is processed in.
func (n *Node) packetEnv(tr *Trace) *penv {
	return &penv{ch: randChooser{n.rng}, trace: tr}
}

// Stats returns the node's datapath counters.
func (n *Node) Stats() NodeStats {
	return NodeStats{
		Received:   atomic.LoadUint64(&n.hot.stats.Received),
		Forwarded:  atomic.LoadUint64(&n.hot.stats.Forwarded),
		Delivered:  atomic.LoadUint64(&n.hot.stats.Delivered),
		Dropped:    atomic.LoadUint64(&n.hot.stats.Dropped),
		Rejected:   atomic.LoadUint64(&n.hot.stats.Rejected),
		QueueDrops: atomic.LoadUint64(&n.hot.stats.QueueDrops),
	}
}

// Network returns the cluster the node belongs to.
func (n *Node) Network() *Network { return n.cluster }

// egressMasq is the CNI's masquerade of pod traffic leaving the cluster network: a NAT
// handler at POSTROUTING after kube-proxy's.
func (n *Node) egressMasq(ctx *Context, p *Packet) Verdict {
	if !n.settings.EgressMasquerade || p.OutIface != n.uplink.Name || !containsAny(n.podCIDR, p.Src) {
		return VerdictContinue
	}
	cfg := &n.cluster.cfg
	for _, set := range [][]netip.Prefix{cfg.ClusterCIDRs, cfg.NodeCIDRs, cfg.NonMasqueradeCIDRs} {
		if containsAny(set, p.Dst) {
			return VerdictContinue
		}
	}
	return MasqueradeVerdict(false, "pod traffic leaving the cluster network")
}

func containsAny(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// PodAt returns the pod plugged into the node's bridge with address a, or nil when the
// address is free.
func (n *Node) PodAt(a netip.Addr) *Pod {
	n.mu.Lock()
	defer n.mu.Unlock()
	if pp := n.ports[a]; pp != nil {
		return pp.pod
	}
	return nil
}
