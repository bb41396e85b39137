package cluster

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"
	"gvisor.dev/gvisor/pkg/tcpip"
	corev1 "k8s.io/api/core/v1"
)

// loadBalancer is the simulated cloud load balancer of one LoadBalancer Service: it owns
// the service's ingress address on the cluster network, enforces
// loadBalancerSourceRanges, and spreads flows over the healthy nodes (with
// externalTrafficPolicy Local only the nodes that pass its HTTP health checks of the
// service's healthCheckNodePort, see lbhealth.go), either rewriting the destination to
// the node's IP and node port ("nodeport" mode) or passing the packet through unchanged
// ("vip" mode).
type loadBalancer struct {
	c   *Cluster
	ip  netip.Addr
	key string

	mu  sync.Mutex
	svc *corev1.Service
	// health checks (externalTrafficPolicy Local): the port checked (0: none), its
	// generation (bumped when the port changes or the load balancer goes), the view of
	// each node, and the timer of the next periodic round.
	hcPort  uint16
	hcGen   uint64
	targets map[string]*nodeTarget
	tick    tcpip.Timer
	removed bool
	// connection tracking: client → ingress flow → its node (and, in nodeport mode, the
	// reply tuple registered in Cluster.replies). Entries idle for
	// Config.LoadBalancerIdleTimeout are forgotten; sweep is when the next pass over
	// flows drops them (virtual nanoseconds since Epoch).
	flows map[netfilter.Tuple]*lbFlow
	sweep int64
}

// lbFlow is one client flow the load balancer has placed on a node.
type lbFlow struct {
	node  *Node
	port  uint16          // nodeport mode: the node port packets go to
	reply netfilter.Tuple // nodeport mode: the tuple of the node's replies (zero in vip mode)
	// nodeport mode: the address the client sent to, which replies come from
	ingress netip.AddrPort
	last    atomic.Int64 // virtual nanoseconds since Epoch of the flow's last packet, either way
}

// expired reports whether a flow last seen at last is forgotten at now.
func (c *Cluster) lbExpired(last, now int64) bool {
	return now-last >= int64(c.cfg.LoadBalancerIdleTimeout)
}

// HealthChecker answers the health check of a node's healthCheckNodePort for a service:
// an HTTP status (200 with local endpoints, 503 without, as kube-proxy answers).
type HealthChecker func(namespace, name string) int

// SetHealthChecker replaces how the cloud load balancer judges a node whose proxy serves
// no health checks (no proxy, or a Proxy that is not a HealthCheckServer): by default it
// counts the ready endpoints the store's EndpointSlices place on the node. Nodes whose
// proxy serves health checks are asked over the network instead (see lbhealth.go).
func (n *Node) SetHealthChecker(h HealthChecker) {
	n.healthMu.Lock()
	n.health = h
	n.healthMu.Unlock()
}

// healthy reports whether the load balancer sees the node as a good target for svc when
// it cannot ask the node: from the health checker set on it, or from the API.
func (n *Node) healthy(svc *corev1.Service) bool {
	if n.Down() {
		return false
	}
	if svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		return true
	}
	n.healthMu.Lock()
	h := n.health
	n.healthMu.Unlock()
	if h != nil {
		return h(svc.Namespace, svc.Name) == 200
	}
	for _, s := range n.c.store.EndpointSlicesFor(svc.Namespace, svc.Name) {
		for _, ep := range s.Endpoints {
			if ep.NodeName != nil && *ep.NodeName == n.Name() && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
				return true
			}
		}
	}
	return false
}

// lbController keeps a load balancer per LoadBalancer Service and publishes its ingress
// address in the Service's status, as a cloud controller does.
func (c *Cluster) lbController(ev service.Event) {
	var svc *corev1.Service
	if ev.New != nil {
		svc = ev.New.(*corev1.Service)
	} else {
		svc = ev.Old.(*corev1.Service)
	}
	key := svc.Namespace + "/" + svc.Name
	want := ev.Type != service.Deleted && svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.LoadBalancerClass == nil
	c.mu.Lock()
	lb := c.lbs[key]
	c.mu.Unlock()
	if !want {
		if lb != nil {
			c.removeLB(lb)
		}
		return
	}
	if lb == nil {
		ip, err := c.lbAddress(svc)
		if err != nil {
			c.recordErr(fmt.Errorf("cloud load balancer for %s: %w", key, err))
			return
		}
		lb = &loadBalancer{c: c, ip: ip, key: key, flows: map[netfilter.Tuple]*lbFlow{}, targets: map[string]*nodeTarget{}}
		if err := c.AttachMiddlebox(ip, lb); err != nil {
			c.recordErr(fmt.Errorf("cloud load balancer for %s: %w", key, err))
			return
		}
		c.SetFabricNAT(&c.replies)
		c.mu.Lock()
		c.lbs[key] = lb
		c.mu.Unlock()
	}
	lb.mu.Lock()
	lb.svc = svc
	gen := lb.setHealthCheckLocked(svc)
	lb.mu.Unlock()
	if gen != 0 {
		lb.armChecks(gen, time.Time{})
	}
	// ipMode Proxy tells kube-proxy the load balancer delivers to node ports itself (no
	// rules for the ingress IP); VIP that packets arrive addressed to it.
	mode := corev1.LoadBalancerIPModeProxy
	if c.cfg.LoadBalancerMode == "vip" {
		mode = corev1.LoadBalancerIPModeVIP
	}
	ing := svc.Status.LoadBalancer.Ingress
	if len(ing) == 1 && ing[0].IP == lb.ip.String() && ing[0].IPMode != nil && *ing[0].IPMode == mode {
		return
	}
	st := svc.DeepCopy()
	st.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: lb.ip.String(), IPMode: &mode}}
	if _, err := c.store.UpdateStatus(st); err != nil {
		c.recordErr(fmt.Errorf("cloud load balancer for %s: status: %w", key, err))
	}
}

// lbAddress picks the ingress address: spec.loadBalancerIP when given, else the next free
// address of the pool.
func (c *Cluster) lbAddress(svc *corev1.Service) (netip.Addr, error) {
	if s := svc.Spec.LoadBalancerIP; s != "" {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("spec.loadBalancerIP %q: %w", s, err)
		}
		if owner := c.Owner(a); owner != "" {
			return netip.Addr{}, fmt.Errorf("spec.loadBalancerIP %s is already used by %s", a, owner)
		}
		return a, nil
	}
	pool := c.cfg.LoadBalancerCIDR
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.nextLB
	if !a.IsValid() {
		a = pool.Addr().Next()
	}
	for ; pool.Contains(a); a = a.Next() {
		if c.Owner(a) == "" {
			c.nextLB = a.Next()
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("the load-balancer pool %s is exhausted", pool)
}

func (c *Cluster) removeLB(lb *loadBalancer) {
	lb.mu.Lock()
	lb.stopChecksLocked()
	for tu, f := range lb.flows {
		lb.forgetLocked(tu, f)
	}
	lb.mu.Unlock()
	c.mu.Lock()
	delete(c.lbs, lb.key)
	c.mu.Unlock()
	c.DetachMiddlebox(lb.ip)
}

// LoadBalancerIP returns the ingress address of a LoadBalancer Service, if it has one.
func (c *Cluster) LoadBalancerIP(namespace, name string) (netip.Addr, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lb := c.lbs[namespace+"/"+name]
	if lb == nil {
		return netip.Addr{}, false
	}
	return lb.ip, true
}

// lbDecision is what the load balancer does with one packet.
type lbDecision struct {
	node   *Node
	port   uint16 // nodeport mode: the node port to rewrite the destination to
	reason string // why it was dropped, if node is nil
}

// decideLocked handles a client packet: source ranges, port, node choice.
//
// A flow keeps its node while packets come (its connection-tracking entry), except that
// a flow whose node died is placed again, and so is a new connection (a TCP SYN without
// ACK) on a reused 5-tuple whose node the health checks now take no new flows on: as
// GCE's passthrough load balancer treats a SYN as a new connection and picks among the
// healthy backends. A flow idle for Config.LoadBalancerIdleTimeout is forgotten.
func (lb *loadBalancer) decideLocked(pk *netsim.Packet) lbDecision {
	svc := lb.svc
	if svc == nil {
		return lbDecision{reason: "load balancer has no service"}
	}
	if rs := svc.Spec.LoadBalancerSourceRanges; len(rs) > 0 {
		ok := false
		for _, r := range rs {
			if p, err := netip.ParsePrefix(trimSpace(r)); err == nil && p.Contains(pk.Src) {
				ok = true
			}
		}
		if !ok {
			return lbDecision{reason: fmt.Sprintf("source %s is outside loadBalancerSourceRanges %v", pk.Src, rs)}
		}
	}
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if int(p.Port) == int(pk.DstPort) && protoOf(p.Protocol) == pk.Proto {
			sp = p
		}
	}
	if sp == nil {
		return lbDecision{reason: fmt.Sprintf("load balancer %s has no listener on %s/%d", lb.ip, netsim.ProtoName(pk.Proto), pk.DstPort)}
	}
	now := lb.c.now()
	tu := pk.Tuple()
	old, ok := lb.flows[tu]
	if ok && lb.c.lbExpired(old.last.Load(), now) {
		lb.forgetLocked(tu, old)
		old, ok = nil, false
	}
	if ok && !old.node.Down() {
		syn := pk.Proto == netfilter.ProtoTCP && pk.TCPFlags&(netfilter.TCPSyn|netfilter.TCPAck) == netfilter.TCPSyn
		if !syn || lb.nodeHealthyLocked(old.node, svc) {
			old.last.Store(now)
			return lbDecision{node: old.node, port: old.port}
		}
	}
	var healthy []*Node
	for _, n := range lb.c.Nodes() {
		if lb.nodeHealthyLocked(n, svc) {
			healthy = append(healthy, n)
		}
	}
	if len(healthy) == 0 {
		return lbDecision{reason: "no healthy backend node (health checks failing)"}
	}
	sort.Slice(healthy, func(i, j int) bool { return healthy[i].Name() < healthy[j].Name() })
	h := fnv.New64a()
	fmt.Fprint(h, tu.String())
	n := healthy[h.Sum64()%uint64(len(healthy))]
	f := &lbFlow{node: n}
	f.last.Store(now)
	if lb.c.cfg.LoadBalancerMode == "nodeport" {
		if sp.NodePort == 0 {
			return lbDecision{reason: "the service port has no node port (allocateLoadBalancerNodePorts=false)"}
		}
		f.port = uint16(sp.NodePort)
		f.ingress = netip.AddrPortFrom(pk.Dst, pk.DstPort)
		f.reply = netfilter.Tuple{Proto: pk.Proto, Src: n.IP(), SrcPort: f.port, Dst: pk.Src, DstPort: pk.SrcPort}
	}
	if old != nil {
		lb.forgetLocked(tu, old)
	}
	if now >= lb.sweep {
		// Forget every idle flow once per idle timeout: the table holds at most the flows
		// seen in the last two timeouts.
		for k, g := range lb.flows {
			if lb.c.lbExpired(g.last.Load(), now) {
				lb.forgetLocked(k, g)
			}
		}
		lb.sweep = now + int64(lb.c.cfg.LoadBalancerIdleTimeout)
	}
	lb.flows[tu] = f
	if f.reply.Proto != 0 {
		lb.c.replies.add(f)
	}
	return lbDecision{node: n, port: f.port}
}

// forgetLocked drops a flow and its reply entry.
func (lb *loadBalancer) forgetLocked(tu netfilter.Tuple, f *lbFlow) {
	if lb.flows[tu] == f {
		delete(lb.flows, tu)
	}
	if f.reply.Proto == 0 {
		return
	}
	lb.c.replies.remove(f)
}

func trimSpace(s string) string {
	for len(s) > 0 && s[0] == ' ' {
		s = s[1:]
	}
	for len(s) > 0 && s[len(s)-1] == ' ' {
		s = s[:len(s)-1]
	}
	return s
}

func protoOf(p corev1.Protocol) uint8 {
	switch p {
	case corev1.ProtocolUDP:
		return netfilter.ProtoUDP
	case corev1.ProtocolSCTP:
		return netfilter.ProtoSCTP
	}
	return netfilter.ProtoTCP
}

// rewrite rewrites a client packet for the chosen node (nodeport mode).
func (lb *loadBalancer) rewrite(pk *netsim.Packet, d lbDecision) {
	if lb.c.cfg.LoadBalancerMode != "nodeport" {
		return
	}
	pk.SetDst(d.node.IP(), d.port)
}

// String names the load balancer where the cluster network routes to it.
func (lb *loadBalancer) String() string { return "load balancer " + lb.ip.String() }

// Forward handles a packet addressed to the load balancer (netsim.Middlebox): real
// traffic and probes alike.
func (lb *loadBalancer) Forward(pk *netsim.Packet, traced bool) netsim.MiddleboxVerdict {
	lb.mu.Lock()
	d := lb.decideLocked(pk)
	lb.mu.Unlock()
	if d.node == nil {
		return netsim.MiddleboxVerdict{Drop: "cloud load balancer: " + d.reason}
	}
	var before string
	if traced {
		before = pk.String()
	}
	lb.rewrite(pk, d)
	v := netsim.MiddleboxVerdict{To: d.node.Node}
	if traced {
		v.Note = fmt.Sprintf("cloud load balancer %s: %s -> node %s as %s", lb.ip, before, d.node.Name(), pk.String())
	}
	return v
}

// now is the virtual time in nanoseconds since netsim.Epoch, as flows record it.
func (c *Cluster) now() int64 { return int64(c.Clock().Now().Sub(netsim.Epoch)) }

func (r *lbReplies) add(f *lbFlow) {
	r.mu.Lock()
	r.m[f.reply] = f
	r.n.Store(int64(len(r.m)))
	r.mu.Unlock()
}

func (r *lbReplies) remove(f *lbFlow) {
	r.mu.Lock()
	if r.m[f.reply] == f {
		delete(r.m, f.reply)
		r.n.Store(int64(len(r.m)))
	}
	r.mu.Unlock()
}

// Active implements netsim.FabricNAT: whether any flow waits for replies.
func (r *lbReplies) Active() bool { return r.n.Load() != 0 }

// String implements netsim.FabricNAT.
func (r *lbReplies) String() string { return "cloud load balancer un-NATs the reply" }

// Rewrite rewrites a node's reply to a flow the load balancer forwarded in nodeport mode
// (the load balancer's connection tracking) and reports whether it did
// (netsim.FabricNAT). A reply to a flow idle past the timeout is not rewritten: the load
// balancer has forgotten it.
func (r *lbReplies) Rewrite(pk *netsim.Packet) bool {
	r.mu.RLock()
	f, ok := r.m[pk.Tuple()]
	r.mu.RUnlock()
	if !ok {
		return false
	}
	now := r.c.now()
	if r.c.lbExpired(f.last.Load(), now) {
		return false
	}
	f.last.Store(now)
	// The client's flow is the reply tuple reversed, with the ingress address and the
	// service port as its destination.
	pk.SetSrc(f.ingress.Addr(), f.ingress.Port())
	return true
}
