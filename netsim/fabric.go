package netsim

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// fabric is the cluster network between nodes, external hosts and middleboxes (a cloud
// load balancer): a flat L3 network that routes node IPs and pod CIDRs to their nodes (as
// cloud routes or a flat overlay do), external host addresses to their hosts, middlebox
// addresses to their middleboxes, and externalIPs to the nodes an administrator routed
// them to. Anything else has no route: a packet to a ClusterIP that no node DNATed ends
// here, as it would at a real cluster's default gateway.
type fabric struct {
	c  *Network
	mu sync.Mutex // held while the routes below change; unlock publishes them
	// routes
	nodeIPs     map[netip.Addr]*Node
	podCIDRs    []cidrRoute
	hosts       map[netip.Addr]*ExternalHost
	extIP       map[netip.Addr]*Node
	middleboxes map[netip.Addr]*attached
	partition   map[string]int // node name (or "external") → group; 0: not partitioned
	// deferPublish, while New adds the configured nodes, makes unlock leave publishing to
	// the end of New (once, instead of once per node: O(nodes²) at thousands of nodes).
	deferPublish bool
	// nat rewrites packets from nodes before they are routed (SetFabricNAT); nil: none.
	nat natPointer

	// published is a copy of the routes that packets read without locking.
	published atomic.Pointer[fabricRoutes]
}

// fabricRoutes is an immutable copy of the fabric's routes: one map for every address
// routed as a whole (node IPs over external hosts over middlebox addresses over
// externalIPs, as lookups have always preferred them), then the pod CIDRs. The IPv4
// addresses of exact are also in exact4, keyed by their four bytes (a shorter key to hash
// than netip.Addr's 24 bytes), which lookups of IPv4 addresses use.
type fabricRoutes struct {
	exact    map[netip.Addr]fabricDest
	exact4   map[uint32]fabricDest
	podCIDRs []cidrRoute
	pod4     []cidr4Route // the IPv4 pod CIDRs, in podCIDRs' order
	// pod4By indexes pod4 by mask and network when there are many (pod CIDRs do not
	// overlap, so at most one holds an address): masks lists the distinct masks.
	pod4By    map[prefix4]*Node
	pod4Masks []uint32
	partition map[string]int
}

// pod4IndexMin is the number of IPv4 pod CIDRs from which lookups use pod4By rather than
// a scan of pod4.
const pod4IndexMin = 32

type cidr4Route struct {
	p    prefix4
	node *Node
}

// unlock publishes the routes as they now are and releases mu; every change of the routes
// ends with it.
func (f *fabric) unlock() {
	if f.deferPublish {
		f.mu.Unlock()
		return
	}
	r := &fabricRoutes{
		exact:     make(map[netip.Addr]fabricDest, len(f.nodeIPs)+len(f.hosts)+len(f.middleboxes)+len(f.extIP)),
		podCIDRs:  append([]cidrRoute(nil), f.podCIDRs...),
		partition: make(map[string]int, len(f.partition)),
	}
	for a, n := range f.extIP {
		r.exact[a] = fabricDest{kind: hopNode, node: n}
	}
	for a, m := range f.middleboxes {
		r.exact[a] = fabricDest{kind: hopMiddlebox, mb: m}
	}
	for a, h := range f.hosts {
		r.exact[a] = fabricDest{kind: hopExternal, host: h}
	}
	for a, n := range f.nodeIPs {
		r.exact[a] = fabricDest{kind: hopNode, node: n}
	}
	for k, g := range f.partition {
		r.partition[k] = g
	}
	for _, cr := range r.podCIDRs {
		if p4, ok := prefix4Of(cr.p); ok {
			r.pod4 = append(r.pod4, cidr4Route{p: p4, node: cr.node})
		}
	}
	if len(r.pod4) >= pod4IndexMin {
		r.pod4By = make(map[prefix4]*Node, len(r.pod4))
		for _, cr := range r.pod4 {
			r.pod4By[cr.p] = cr.node
			if !slices.Contains(r.pod4Masks, cr.p.mask) {
				r.pod4Masks = append(r.pod4Masks, cr.p.mask)
			}
		}
	}
	r.exact4 = make(map[uint32]fabricDest, len(r.exact))
	for a, d := range r.exact {
		if k, ok := addr4(a); ok {
			r.exact4[k] = d
		}
	}
	f.published.Store(r)
	f.mu.Unlock()
}

type cidrRoute struct {
	p    netip.Prefix
	node *Node
}

// hopKind is the kind of place the fabric delivers to.
type hopKind uint8

const (
	hopNone hopKind = iota
	hopNode
	hopExternal
	hopMiddlebox
)

type fabricDest struct {
	kind hopKind
	node *Node
	host *ExternalHost
	mb   *attached // hopMiddlebox
}

// attached is a middlebox on the fabric, with its receive function bound once (a
// fabricDest stays four words: routes hold and return it by value for every packet).
type attached struct {
	m  Middlebox
	in func(frame) // takes real traffic in at m
}

func newFabric(c *Network) *fabric {
	f := &fabric{c: c, nodeIPs: map[netip.Addr]*Node{}, hosts: map[netip.Addr]*ExternalHost{}, extIP: map[netip.Addr]*Node{}, middleboxes: map[netip.Addr]*attached{}, partition: map[string]int{}}
	f.mu.Lock()
	f.unlock()
	return f
}

func (f *fabric) lookup(dst netip.Addr) fabricDest {
	return f.published.Load().lookup(dst)
}

// lookupLocked looks dst up in the routes being changed (under mu), in lookup's order.
func (f *fabric) lookupLocked(dst netip.Addr) fabricDest {
	if n, ok := f.nodeIPs[dst]; ok {
		return fabricDest{kind: hopNode, node: n}
	}
	if h, ok := f.hosts[dst]; ok {
		return fabricDest{kind: hopExternal, host: h}
	}
	if m, ok := f.middleboxes[dst]; ok {
		return fabricDest{kind: hopMiddlebox, mb: m}
	}
	if n, ok := f.extIP[dst]; ok {
		return fabricDest{kind: hopNode, node: n}
	}
	for _, cr := range f.podCIDRs {
		if cr.p.Contains(dst) {
			return fabricDest{kind: hopNode, node: cr.node}
		}
	}
	return fabricDest{}
}

// route finds where a packet from place from (a node name, or "external") to dst goes:
// nowhere when there is no route or a partition lies between.
func (f *fabric) route(from string, dst netip.Addr) fabricDest {
	r := f.published.Load()
	d := r.lookup(dst)
	if d.kind == hopNone || len(r.partition) == 0 {
		return d
	}
	if r.cut(from, d.name()) {
		return fabricDest{}
	}
	return d
}

func (r *fabricRoutes) lookup(dst netip.Addr) fabricDest {
	if k, ok := addr4(dst); ok {
		if d, ok := r.exact4[k]; ok {
			return d
		}
		if r.pod4By != nil {
			for _, m := range r.pod4Masks {
				if n := r.pod4By[prefix4{net: k & m, mask: m}]; n != nil {
					return fabricDest{kind: hopNode, node: n}
				}
			}
			return fabricDest{}
		}
		for _, cr := range r.pod4 {
			if cr.p.contains(k) {
				return fabricDest{kind: hopNode, node: cr.node}
			}
		}
		return fabricDest{}
	} else if d, ok := r.exact[dst]; ok {
		return d
	}
	for _, cr := range r.podCIDRs {
		if cr.p.Contains(dst) {
			return fabricDest{kind: hopNode, node: cr.node}
		}
	}
	return fabricDest{}
}

func (r *fabricRoutes) cut(a, b string) bool {
	ga, gb := r.partition[a], r.partition[b]
	return ga != 0 && gb != 0 && ga != gb
}

// partitioned reports whether two places (node names, or "external") are cut off.
func (f *fabric) partitioned(a, b string) bool {
	return f.published.Load().cut(a, b)
}

func (d fabricDest) name() string {
	switch d.kind {
	case hopNode:
		return d.node.name
	case hopExternal, hopMiddlebox:
		return "external"
	}
	return ""
}

func (d fabricDest) String() string {
	switch d.kind {
	case hopNode:
		return "node " + d.node.name
	case hopExternal:
		return "external host " + d.host.name
	case hopMiddlebox:
		return d.mb.m.String()
	}
	return "nowhere"
}

// fromNode carries a packet a node sent out its uplink at virtual time t (zero: unknown).
// To another node over a link without faults it hands the parsed packet on at once
// (fromUplinkPacket); otherwise the receiver takes the packet's bytes.
func (f *fabric) fromNode(n *Node, pk *Packet, tr *Trace, t time.Time) {
	if pk.trainMSS != 0 {
		f.trainFromNode(n, pk, tr, t)
		return
	}
	if f.nat.Load() != nil {
		f.fabricNAT(pk)
	}
	d := f.route(n.name, pk.Dst)
	if d.kind == hopNone {
		return
	}
	if d.kind == hopNode && !f.c.cfg.Replay && !d.node.down.Load() && n.uplinkLink.pass(0) {
		d.node.fromUplinkPacket(pk, tr, t)
		return
	}
	n.uplinkLink.send(f.c, pk.frame(), d.receiver(tr))
}

// receiver returns what takes a packet in at d: bound once per place, so that untraced
// packets need no closure.
func (d fabricDest) receiver(tr *Trace) func(frame) {
	switch d.kind {
	case hopNode:
		if tr != nil {
			return func(fr frame) { d.node.fromUplinkNow(fr, tr) }
		}
		return d.node.fromFabric
	case hopExternal:
		return d.host.recv
	case hopMiddlebox:
		return d.mb.in
	}
	return func(frame) {}
}

func (f *fabric) deliver(d fabricDest, fr frame, tr *Trace) {
	d.receiver(tr)(fr)
}

// RouteExternalIP routes an address to a node through the cluster network, as an
// administrator routes a Service's externalIPs (or a BGP speaker announces them): packets
// to it from anywhere in the cluster network go to that node. A zero node name removes
// the route.
func (c *Network) RouteExternalIP(ip netip.Addr, node string) error {
	c.fabric.mu.Lock()
	defer c.fabric.unlock()
	if node == "" {
		delete(c.fabric.extIP, ip)
		return nil
	}
	n := c.Node(node)
	if n == nil {
		return fmt.Errorf("route external IP %s: no node %q", ip, node)
	}
	if _, ok := c.fabric.nodeIPs[ip]; ok {
		return fmt.Errorf("route external IP %s: it is a node IP", ip)
	}
	if _, ok := c.fabric.hosts[ip]; ok {
		return fmt.Errorf("route external IP %s: it belongs to an external host", ip)
	}
	c.fabric.extIP[ip] = n
	return nil
}
