package netsim

import (
	"fmt"
	"net/netip"
	"sync/atomic"
)

// ExternalHost is a machine outside the cluster (a client on the internet, a host in the
// same VPC, a cloud's health prober): its own netstack on the external network, reaching
// node IPs (NodePorts), middlebox addresses and externalIPs through the cluster network.
type ExternalHost struct {
	cluster *Network
	name    string
	ip      netip.Addr   // the first of ips
	ips     []netip.Addr // at most one per family
	stack   *netStack
	net     *Net
	link    *Link
	dead    atomic.Bool
	// capturePoint names the host's link for Network.Capture: "external/<name>".
	capturePoint string
	recv         func(frame) // receive, bound once
	onSend       func(pk *Packet, to Hop) func(*Node, *Trace)
	routes       []ExternalRoute
	deliver      func([]byte) // a raw host's receiver (no netstack); nil: the stack
}

// ExternalRoute sends an external host's packets to Prefix, which the cluster network
// does not route, to the node Via: what `ip route add 10.96.0.0/12 via NODE-IP` does on
// a real machine next to a cluster, so that ClusterIPs reach a node's kube-proxy.
type ExternalRoute struct {
	Prefix netip.Prefix
	Via    *Node
}

// ExternalHostConfig describes an external host for AddExternalHostWith.
type ExternalHostConfig struct {
	Name string
	// Addrs are the host's addresses, at most one per family. Empty: the next free
	// address of the external CIDR. An address outside the external CIDR is the host's
	// alone (a /32 or /128 of its own, as a cloud's prober ranges are).
	Addrs []netip.Addr
	// OnSend, if set, is told of every packet the host sends into the cluster network
	// and where the network takes it (before any link fault acts). It may return a
	// function that receives the packet's trace through the node it reaches, once that
	// node is done with it (not in replay mode, and only for packets to a node); nil
	// leaves the packet untraced. It runs on the host's netstack goroutine.
	OnSend func(pk *Packet, to Hop) (traced func(at *Node, tr *Trace))
	// Routes are the host's routes through nodes, used for destinations the cluster
	// network has no route for (the first that contains the destination wins).
	Routes []ExternalRoute
	// Deliver, if set, makes a raw host: it has no netstack (Net returns nil), every
	// packet the network delivers to it is handed to Deliver (a copy the callee owns; on
	// the network's goroutine, so it must not block), and Send puts packets into the
	// network as if the host had sent them. A TUN device bridging a real kernel into the
	// simulation is one.
	Deliver func(packet []byte)
}

// Hop is where the cluster network takes a packet: a node, an external host or a
// middlebox; all nil when no route leads there (or a partition cuts it off).
type Hop struct {
	Node      *Node
	External  *ExternalHost
	Middlebox Middlebox
}

// String says where the hop is ("node node-a", "nowhere").
func (h Hop) String() string { return h.dest().String() }

func (h Hop) dest() fabricDest {
	switch {
	case h.Node != nil:
		return fabricDest{kind: hopNode, node: h.Node}
	case h.External != nil:
		return fabricDest{kind: hopExternal, host: h.External}
	case h.Middlebox != nil:
		return fabricDest{kind: hopMiddlebox, mb: &attached{m: h.Middlebox}}
	}
	return fabricDest{}
}

func (d fabricDest) hop() Hop {
	h := Hop{Node: d.node, External: d.host}
	if d.mb != nil {
		h.Middlebox = d.mb.m
	}
	return h
}

// Name returns the host's name.
func (h *ExternalHost) Name() string { return h.name }

// IP returns the host's (first) address.
func (h *ExternalHost) IP() netip.Addr { return h.ip }

// IPs returns the host's addresses.
func (h *ExternalHost) IPs() []netip.Addr { return append([]netip.Addr(nil), h.ips...) }

// Net returns the host's network: Dial, Listen, ListenPacket (nil for a raw host).
func (h *ExternalHost) Net() *Net { return h.net }

// Send puts an IP packet into the cluster network as if the host had sent it (it is
// captured on the host's link, routed, and crosses the link's faults). b is copied.
// Packets that do not parse are dropped (an error says why).
func (h *ExternalHost) Send(b []byte) error {
	var pk Packet
	if err := pk.parse(b); err != nil {
		return err
	}
	h.send(plainFrame(append([]byte(nil), b...)))
	return nil
}

// Link returns the host's link to the cluster network, whose faults can be set.
func (h *ExternalHost) Link() *Link { return h.link }

func (h *ExternalHost) receive(f frame) {
	if h.dead.Load() {
		return
	}
	h.cluster.captureAt(h.capturePoint, f.b)
	if h.deliver != nil {
		h.deliver(append([]byte(nil), f.b...))
		return
	}
	h.stack.link.inject(f)
}

// send carries a packet the host's stack sent into the cluster network.
func (h *ExternalHost) send(f frame) {
	if h.dead.Load() {
		return
	}
	c := h.cluster
	c.captureAt(h.capturePoint, f.b)
	var pk Packet
	if err := pk.parse(f.b); err != nil {
		return
	}
	d := c.fabric.route("external", pk.Dst)
	if d.kind == hopNone {
		d = h.viaRoute(pk.Dst)
	}
	var traced func(*Node, *Trace)
	if h.onSend != nil {
		traced = h.onSend(&pk, d.hop())
	}
	if d.kind == hopNone || d.kind == hopExternal && d.host == h {
		return
	}
	if d.kind == hopNode && traced == nil && !c.cfg.Replay {
		// Queued for the node's goroutine, not run through the node at once on this
		// one: the host's stack is inside its send (holding the endpoint's lock), and
		// an answer the node makes at once (a REJECT's ICMP error or RST) would come
		// back into that stack on the same goroutine and deadlock.
		n := d.node
		h.link.send(c, f, func(fr frame) { n.enqueue(fr, queueSource{kind: fromUplink}) })
		return
	}
	if traced == nil || d.kind != hopNode || c.cfg.Replay {
		h.link.send(c, f, d.receiver(nil))
		return
	}
	tr := &Trace{}
	recv := d.receiver(tr)
	n := d.node
	h.link.send(c, f, func(fr frame) {
		recv(fr)
		traced(n, tr)
	})
}

// viaRoute is where the host's own routes take dst: a node, or nowhere.
func (h *ExternalHost) viaRoute(dst netip.Addr) fabricDest {
	for _, r := range h.routes {
		if r.Via != nil && r.Prefix.Contains(dst) {
			if h.cluster.fabric.partitioned("external", r.Via.name) {
				return fabricDest{}
			}
			return fabricDest{kind: hopNode, node: r.Via}
		}
	}
	return fabricDest{}
}

// AddExternalHost adds a host on the external network. A zero ip takes the next free
// address of the external CIDR.
func (c *Network) AddExternalHost(name string, ip netip.Addr) (*ExternalHost, error) {
	cfg := ExternalHostConfig{Name: name}
	if ip.IsValid() {
		if !c.cfg.ExternalCIDR.Contains(ip) {
			return nil, fmt.Errorf("external host %s: %s is outside the external network %s", name, ip, c.cfg.ExternalCIDR)
		}
		cfg.Addrs = []netip.Addr{ip}
	}
	return c.AddExternalHostWith(cfg)
}

// AddExternalHostWith adds a host as cfg describes it.
func (c *Network) AddExternalHostWith(cfg ExternalHostConfig) (h *ExternalHost, err error) {
	c.labeled(func() { h, err = c.addExternalHost(cfg) })
	return h, err
}

func (c *Network) addExternalHost(cfg ExternalHostConfig) (*ExternalHost, error) {
	name := cfg.Name
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("external host %s: the network is closed", name)
	}
	if _, dup := c.external[name]; dup {
		return nil, fmt.Errorf("external host %q already exists", name)
	}
	ips := cfg.Addrs
	if len(ips) == 0 {
		c.nextExternal = c.nextExternal.Next()
		ip := c.nextExternal
		if !c.cfg.ExternalCIDR.Contains(ip) {
			return nil, fmt.Errorf("external host %s: %s is outside the external network %s", name, ip, c.cfg.ExternalCIDR)
		}
		ips = []netip.Addr{ip}
	}
	var prefixes []netip.Prefix
	fams := map[bool]bool{}
	for _, ip := range ips {
		if !ip.IsValid() || ip.IsUnspecified() || ip.IsLoopback() {
			return nil, fmt.Errorf("external host %s: %s is not a usable address", name, ip)
		}
		if fams[ip.Is4()] {
			return nil, fmt.Errorf("external host %s: a second address of the same family (%s)", name, ip)
		}
		fams[ip.Is4()] = true
		if d := c.fabric.lookup(ip); d.kind != hopNone {
			return nil, fmt.Errorf("external host %s: %s is already used by %s", name, ip, d)
		}
		bits := ip.BitLen()
		if c.cfg.ExternalCIDR.Contains(ip) {
			bits = c.cfg.ExternalCIDR.Bits()
		}
		prefixes = append(prefixes, netip.PrefixFrom(ip, bits))
	}
	h := &ExternalHost{cluster: c, name: name, ip: ips[0], ips: append([]netip.Addr(nil), ips...), link: newLink("external "+name, c.cfg.Seed),
		capturePoint: "external/" + name, onSend: cfg.OnSend, routes: append([]ExternalRoute(nil), cfg.Routes...), deliver: cfg.Deliver}
	h.recv = h.receive
	if h.deliver != nil {
		c.addExternalLocked(h, ips)
		return h, nil
	}
	st, err := newNetStack(stackOptions{
		name:     "external/" + name,
		seed:     c.cfg.Seed,
		clock:    c.clock,
		mtu:      uint32(c.cfg.MTU),
		addrs:    prefixes,
		loopback: true,
		out:      h.send,
	})
	if err != nil {
		return nil, fmt.Errorf("external host %s: %w", name, err)
	}
	h.stack = st
	h.net = newNet("external "+name, st, h.IPs())
	c.addExternalLocked(h, ips)
	return h, nil
}

func (c *Network) addExternalLocked(h *ExternalHost, ips []netip.Addr) {
	c.external[h.name] = h
	c.fabric.mu.Lock()
	for _, ip := range ips {
		c.fabric.hosts[ip] = h
	}
	c.fabric.unlock()
}

// ExternalHost returns the named external host, or nil.
func (c *Network) ExternalHost(name string) *ExternalHost {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.external[name]
}
