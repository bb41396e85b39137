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
//
// A pod's netstack is made when first needed: by Net (an app, a server, a dial) or by
// the first packet that reaches the pod. Probes only ask whether something listens,
// which nothing does in a stack not made yet, so a pod that only probes reach costs no
// netstack. The stack is seeded from the pod's name and runs on the virtual clock, so
// when it is made changes nothing it does.
type Pod struct {
	cluster     *Network
	node        *Node
	namespace   string
	name        string
	ips         []netip.Addr
	hostNetwork bool
	net         *Net // hostNetwork pods: the node's
	port        *podPort

	stackOpts stackOptions
	stackMu   sync.Mutex // held while the stack is made or closed
	stack     atomic.Pointer[netStack]
	podNet    atomic.Pointer[Net]
	dead      atomic.Bool
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
func (p *Pod) Net() *Net {
	if p.hostNetwork {
		return p.net
	}
	if n := p.podNet.Load(); n != nil {
		return n
	}
	n, err := p.startStack()
	if err != nil {
		panic(fmt.Sprintf("netsim: pod %s: netstack: %v", p.key(), err))
	}
	return n
}

// netIfStarted is the pod's network if its stack exists (hostNetwork pods: the node's),
// else nil.
func (p *Pod) netIfStarted() *Net {
	if p.hostNetwork {
		return p.net
	}
	return p.podNet.Load()
}

// startStack makes the pod's netstack if it has none yet (a dead pod's is closed at
// once, as kill would have closed it).
func (p *Pod) startStack() (*Net, error) {
	p.stackMu.Lock()
	defer p.stackMu.Unlock()
	if n := p.podNet.Load(); n != nil {
		return n, nil
	}
	st, err := newNetStack(p.stackOpts)
	if err != nil {
		return nil, err
	}
	n := newNet("pod "+p.namespace+"/"+p.name, st, p.ips)
	p.stack.Store(st)
	p.podNet.Store(n)
	if p.dead.Load() {
		st.close()
	}
	return n, nil
}

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
	st := p.receivingStack()
	if st == nil {
		return
	}
	p.cluster.captureAt(p.capturePoint, f.b)
	st.link.inject(f)
}

// receivingStack is the stack a packet reaching the pod goes into, made now if the pod
// has none yet; nil for a dead pod (or one whose stack cannot be made).
func (p *Pod) receivingStack() *netStack {
	if p.dead.Load() {
		return nil
	}
	if st := p.stack.Load(); st != nil {
		return st
	}
	if _, err := p.startStack(); err != nil {
		return nil
	}
	return p.stack.Load()
}

// receiveBatched is receive for a packet delivered during a batch of a node's datapath
// goroutine: TCP segments may wait in the pod link's GRO until the batch ends.
func (p *Pod) receiveBatched(f frame, b *groBatch) {
	st := p.receivingStack()
	if st == nil {
		return
	}
	p.cluster.captureAt(p.capturePoint, f.b)
	st.link.injectBatched(f, b)
}

// receiveTrain delivers a train into the pod whole (stackLink.injectTrain); false: the
// pod's link cannot take it so (the caller cuts it), nothing done.
func (p *Pod) receiveTrain(f frame, b *groBatch) bool {
	st := p.receivingStack()
	if st == nil {
		return true
	}
	return st.link.injectTrain(f, b)
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
	p.stackMu.Lock()
	st := p.stack.Load()
	p.stackMu.Unlock()
	if st != nil {
		st.close()
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
	p.stackOpts = stackOptions{
		name:     "pod/" + namespace + "/" + name,
		seed:     c.cfg.Seed,
		clock:    c.clock,
		mtu:      uint32(c.cfg.MTU),
		addrs:    prefixes,
		gateways: n.gateway,
		loopback: true,
		offload:  !c.cfg.NoOffload && !c.cfg.Replay,
		trains:   !c.cfg.NoTrains,
		noTrains: &n.noTrains,
	}
	p.stackOpts.out = func(f frame) {
		if p.dead.Load() {
			return
		}
		if f.mss != 0 {
			// A train: on whole while nothing here sees single segments, else cut now.
			if !c.trainBlocked() && port.link.passN(0, f.segments()) {
				port.toNode(f)
			} else {
				cutTrain(f, p.stackOpts.out)
			}
			return
		}
		c.captureAt(p.capturePoint, f.b)
		port.link.send(c, f, port.toNode)
	}
	p.port = port
	n.mu.Lock()
	for _, ip := range ips {
		n.setPortLocked(ip, port)
	}
	n.mu.Unlock()
	return p, nil
}
