package netsim

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Pod is a pod of the simulated cluster at run time: its own gVisor netstack (one NIC,
// eth0, plugged into its node's bridge, plus loopback), or, for hostNetwork pods, its
// node's host stack.
type Pod struct {
	cluster     *Network
	node        *Node
	namespace   string
	name        string
	ips         []netip.Addr
	hostNetwork bool
	stack       *netStack
	net         *Net
	port        *podPort
	dead        atomic.Bool
	// capturePoint names the pod's veth for Network.Capture: "pod/<namespace>/<name>".
	capturePoint string

	mu      sync.Mutex
	servers []func()
}

func (p *Pod) key() string {
	// capturePoint is "pod/" + key: slicing it costs no allocation (probe outcomes name
	// the pod on every call).
	if k := p.capturePoint[len("pod/"):]; len(k) == len(p.namespace)+1+len(p.name) {
		return k
	}
	return p.namespace + "/" + p.name
}

// Namespace returns the pod's namespace.
func (p *Pod) Namespace() string { return p.namespace }

// Name returns the pod's name.
func (p *Pod) Name() string { return p.name }

// Key returns "namespace/name".
func (p *Pod) Key() string { return p.key() }

// Node returns the node the pod runs on.
func (p *Pod) Node() *Node { return p.node }

// IPs returns the pod's IPs (its node's for hostNetwork pods).
func (p *Pod) IPs() []netip.Addr { return append([]netip.Addr(nil), p.ips...) }

// IP returns the pod's primary IP.
func (p *Pod) IP() netip.Addr { return p.ips[0] }

// HostNetwork reports whether the pod shares its node's network.
func (p *Pod) HostNetwork() bool { return p.hostNetwork }

// Net returns the pod's network: Dial, Listen, ListenPacket.
func (p *Pod) Net() *Net { return p.net }

// Alive reports whether the pod has not been killed.
func (p *Pod) Alive() bool { return !p.dead.Load() }

// Link returns the pod's veth link, whose faults can be set.
func (p *Pod) Link() *Link {
	if p.port == nil {
		return nil
	}
	return p.port.link
}

// receive injects a packet from the node into the pod.
func (p *Pod) receive(f frame) {
	if p.dead.Load() || p.stack == nil {
		return
	}
	p.cluster.captureAt(p.capturePoint, f.b)
	p.stack.link.inject(f)
}

// receiveBatched is receive for a packet delivered during a batch of a node's datapath
// goroutine: TCP segments may wait in the pod link's GRO until the batch ends.
func (p *Pod) receiveBatched(f frame, b *groBatch) {
	if p.dead.Load() || p.stack == nil {
		return
	}
	p.cluster.captureAt(p.capturePoint, f.b)
	p.stack.link.injectBatched(f, b)
}

// kill stops the pod's network: its sockets die (connections reset locally, peers see
// silence), its bridge port goes away.
func (p *Pod) kill() {
	if !p.dead.CompareAndSwap(false, true) {
		return
	}
	p.mu.Lock()
	servers := p.servers
	p.servers = nil
	p.mu.Unlock()
	for _, stop := range servers {
		stop()
	}
	n := p.node
	if p.port != nil {
		n.mu.Lock()
		for _, ip := range p.ips {
			if n.ports[ip] == p.port {
				n.setPortLocked(ip, nil)
			}
		}
		n.mu.Unlock()
	}
	if p.stack != nil {
		p.stack.close()
	}
}

// OnKill registers a function to call when the pod dies (KillNode, StopPod, Close): the
// stop function of a server running in it, say. On a dead pod it runs at once.
func (p *Pod) OnKill(stop func()) {
	p.mu.Lock()
	if !p.dead.Load() {
		p.servers = append(p.servers, stop)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	stop()
}

// vethName is the host side name of a pod's veth, derived from its key like CNIs do.
func vethName(key string) string {
	h := fnv.New32a()
	h.Write([]byte(key))
	return fmt.Sprintf("veth%08x", h.Sum32())
}

// newPod builds a pod's network on node n.
func (n *Node) newPod(namespace, name string, ips []netip.Addr, hostNetwork bool) (*Pod, error) {
	c := n.cluster
	p := &Pod{cluster: c, node: n, namespace: namespace, name: name, hostNetwork: hostNetwork, capturePoint: "pod/" + namespace + "/" + name}
	if hostNetwork {
		p.ips = n.IPs()
		p.net = n.hostNet
		return p, nil
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("pod %s/%s: no IP", namespace, name)
	}
	p.ips = ips
	port := &podPort{name: vethName(namespace + "/" + name), pod: p, link: newLink("pod "+namespace+"/"+name, c.cfg.Seed)}
	port.toNode = func(f frame) { n.enqueue(f, queueSource{kind: fromPort, port: port}) }
	port.toPod = p.receive
	var prefixes []netip.Prefix
	for _, ip := range ips {
		for _, cidr := range n.podCIDR {
			if cidr.Contains(ip) {
				prefixes = append(prefixes, netip.PrefixFrom(ip, cidr.Bits()))
			}
		}
	}
	if len(prefixes) != len(ips) {
		return nil, fmt.Errorf("pod %s/%s: IPs %v are not all inside node %s's pod CIDRs %v", namespace, name, ips, n.name, n.podCIDR)
	}
	st, err := newNetStack(stackOptions{
		name:     "pod/" + namespace + "/" + name,
		seed:     c.cfg.Seed,
		clock:    c.clock,
		mtu:      uint32(c.cfg.MTU),
		addrs:    prefixes,
		gateways: n.gateway,
		loopback: true,
		offload:  !c.cfg.NoOffload && !c.cfg.Replay,
		out: func(f frame) {
			if p.dead.Load() {
				return
			}
			c.captureAt(p.capturePoint, f.b)
			port.link.send(c, f, port.toNode)
		},
	})
	if err != nil {
		return nil, err
	}
	p.stack = st
	p.port = port
	p.net = newNet("pod "+namespace+"/"+name, st, ips)
	n.mu.Lock()
	for _, ip := range ips {
		n.setPortLocked(ip, port)
	}
	n.mu.Unlock()
	return p, nil
}
