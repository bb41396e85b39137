package netsim

import (
	"fmt"
	"net/netip"
	"sync/atomic"
)

// ExternalHost is a machine outside the cluster (a client on the internet, a host in the
// same VPC): its own netstack on the external network, reaching node IPs (NodePorts),
// load-balancer addresses and externalIPs through the cluster network.
type ExternalHost struct {
	cluster *Cluster
	name    string
	ip      netip.Addr
	stack   *netStack
	net     *Net
	link    *Link
	dead    atomic.Bool
	// capturePoint names the host's link for Cluster.Capture: "external/<name>".
	capturePoint string
	recv         func(frame) // receive, bound once
	lbChecker    *lbChecker  // set on the cloud load balancer's health checker
}

// Name returns the host's name.
func (h *ExternalHost) Name() string { return h.name }

// IP returns the host's address.
func (h *ExternalHost) IP() netip.Addr { return h.ip }

// Net returns the host's network: Dial, Listen, ListenPacket.
func (h *ExternalHost) Net() *Net { return h.net }

// Link returns the host's link to the cluster network, whose faults can be set.
func (h *ExternalHost) Link() *Link { return h.link }

func (h *ExternalHost) receive(f frame) {
	if h.dead.Load() {
		return
	}
	h.cluster.captureAt(h.capturePoint, f.b)
	h.stack.link.inject(f)
}

// AddExternalHost adds a host on the external network. A zero ip takes the next free
// address of the external CIDR.
func (c *Cluster) AddExternalHost(name string, ip netip.Addr) (h *ExternalHost, err error) {
	c.labeled(func() { h, err = c.addExternalHost(name, ip) })
	return h, err
}

func (c *Cluster) addExternalHost(name string, ip netip.Addr) (*ExternalHost, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.external[name]; dup {
		return nil, fmt.Errorf("external host %q already exists", name)
	}
	if !ip.IsValid() {
		c.nextExternal = c.nextExternal.Next()
		ip = c.nextExternal
	}
	if !c.cfg.ExternalCIDR.Contains(ip) {
		return nil, fmt.Errorf("external host %s: %s is outside the external network %s", name, ip, c.cfg.ExternalCIDR)
	}
	if d := c.fabric.lookup(ip); d.kind != hopNone {
		return nil, fmt.Errorf("external host %s: %s is already used by %s", name, ip, d)
	}
	h := &ExternalHost{cluster: c, name: name, ip: ip, link: newLink("external "+name, c.cfg.Seed), capturePoint: "external/" + name}
	h.recv = h.receive
	st, err := newNetStack(stackOptions{
		name:     "external/" + name,
		seed:     c.cfg.Seed,
		clock:    c.clock,
		mtu:      uint32(c.cfg.MTU),
		addrs:    []netip.Prefix{netip.PrefixFrom(ip, c.cfg.ExternalCIDR.Bits())},
		loopback: true,
		out: func(f frame) {
			if h.dead.Load() {
				return
			}
			c.captureAt(h.capturePoint, f.b)
			c.fabric.fromExternal(h, f)
		},
	})
	if err != nil {
		return nil, err
	}
	h.stack = st
	h.net = newNet("external "+name, st.s, []netip.Addr{ip})
	c.external[name] = h
	c.fabric.mu.Lock()
	c.fabric.hosts[ip] = h
	c.fabric.unlock()
	return h, nil
}

// ExternalHost returns the named external host, or nil.
func (c *Cluster) ExternalHost(name string) *ExternalHost {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.external[name]
}
