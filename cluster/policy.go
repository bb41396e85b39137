package cluster

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netpol"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"
)

// NetworkPolicy enforcement, as a CNI plugin does it on each node.
//
// The cluster keeps a netpol.Index of the store's NetworkPolicies, Pods (labels, IPs,
// node, hostNetwork, named container ports) and Namespaces (labels), updated on every
// change. Once the store holds a NetworkPolicy, every node gets the handler
// PolicyHandlerName at two places of its datapath:
//
//	POSTROUTING, priority 0 (after kube-proxy's DNAT and IPVS's rewrite, before the SNAT
//	step at 100 where MASQUERADE happens): egress of a pod of this node, ingress of a
//	pod of this node (a packet leaving by the pod's bridge port);
//	INPUT, priority 110 (after IPVS's INPUT hook, which reroutes a Service's packets to
//	POSTROUTING): egress of a pod of this node to an address of the node itself.
//
// So rules see pod IPs and target ports, never ClusterIPs (an egress ipBlock naming a
// ClusterIP matches nothing); egress is checked on the source pod's node and ingress on
// the destination pod's node, with the source as it arrives there (a NodePort hop whose
// masquerade replaced the client's address shows as the first node's address). Calico
// does the same in its filter-table chains (cali-from-wl-dispatch, cali-to-wl-dispatch),
// Cilium in its per-endpoint BPF programs after kube-proxy's DNAT.
//
// Only a connection's first packets are checked (conntrack state NEW, or untracked):
// packets of established and related connections pass, so the replies of an allowed
// connection are allowed and a policy change affects new connections only, as both
// Calico (ctstate ESTABLISHED,RELATED accepted before the policy chains) and Cilium
// (its connection-tracking map) do. A denied packet is dropped, silently (Calico's
// default ActionOnDrop, Cilium's policy drop): the client times out.
//
// Traffic from and to nodes depends on the CNI, a node setting (NodeConfig.NetworkPolicy,
// Node.SetNetworkPolicy); see PolicyCalico and PolicyCilium.
const PolicyHandlerName = "NetworkPolicy"

// The CNI flavours of NetworkPolicy enforcement: how node and hostNetwork traffic is
// treated. Both allow traffic from a node's own addresses (its processes, its
// hostNetwork pods, kubelet's probes) to the node's pods.
const (
	// PolicyCalico follows Calico: "Calico allows all connections from processes running
	// on the host to guest workloads on the host" (docs.tigera.io/calico/latest/
	// network-policy/hosts/protect-hosts); other addresses, other nodes' included, are
	// plain addresses that ipBlock rules match; a pod's traffic to its own node is
	// subject to its egress policy (then DefaultEndpointToHostAction, ACCEPT as the
	// operator installs it). The default.
	PolicyCalico = "calico"
	// PolicyCilium follows Cilium: the local host reaches its endpoints whatever the
	// policy (--allow-localhost=auto, cilium/cilium#754); other nodes carry the
	// remote-node identity, and the local node the host identity, which ipBlock rules do
	// not select (ipBlock selects the world: "As of v1.15, ipBlock can now optionally
	// select node IPs. Previously, nodes were excluded", docs.cilium.io network/kubernetes/
	// policy, with policy-cidr-match-mode unset by default): a NodePort hop's masqueraded
	// traffic from another node reaches an ingress-isolated pod only through a rule
	// allowing every peer.
	PolicyCilium = "cilium"
)

// PolicyFlavours lists the flavours NodeConfig.NetworkPolicy takes.
var PolicyFlavours = []string{PolicyCalico, PolicyCilium}

// CheckPolicyFlavour reports whether name is a flavour ("" is the default, calico).
func CheckPolicyFlavour(name string) error {
	switch name {
	case "", PolicyCalico, PolicyCilium:
		return nil
	}
	return fmt.Errorf("network policy flavour %q: want calico or cilium", name)
}

// policyState is the cluster's NetworkPolicy view.
type policyState struct {
	ix        *netpol.Index
	mu        sync.Mutex
	installed bool
	nodeAddrs atomic.Pointer[map[netip.Addr]string] // every node's local addresses → node name
}

func (c *Cluster) initPolicy() {
	ix, _ := netpol.NewIndex(nil, nil, nil) // nothing to compile: no error
	c.pol.ix = ix
}

// NetworkPolicyIndex returns the index the datapath decides with: the store's
// NetworkPolicies, pods and namespaces.
func (c *Cluster) NetworkPolicyIndex() *netpol.Index { return c.pol.ix }

// policyEvent keeps the index in line with the store (on the cluster's event goroutine).
func (c *Cluster) policyEvent(ev service.Event) {
	ix := c.pol.ix
	switch ev.Kind {
	case service.KindPod:
		if ev.Type == service.Deleted {
			old := ev.Old.(*corev1.Pod)
			ix.DeletePod(old.Namespace, old.Name)
			return
		}
		ix.SetPod(policyView(ev.New.(*corev1.Pod)))
	case service.KindNamespace:
		if ev.Type == service.Deleted {
			ix.DeleteNamespace(ev.Old.(*corev1.Namespace).Name)
			return
		}
		ix.SetNamespace(netpol.NamespaceFromCore(ev.New.(*corev1.Namespace)))
	case service.KindNetworkPolicy:
		if ev.Type == service.Deleted {
			old := ev.Old.(*networkingv1.NetworkPolicy)
			ix.DeletePolicy(old.Namespace, old.Name)
			return
		}
		if err := ix.SetPolicy(ev.New.(*networkingv1.NetworkPolicy)); err != nil {
			c.recordErr(fmt.Errorf("network policy: %w", err))
		}
		c.installPolicy()
	}
}

// policyView is a pod as NetworkPolicy sees it (netpol.PodFromCore), without
// addresses once it has ended: its network is gone and the addresses may be reused.
func policyView(p *corev1.Pod) netpol.Pod {
	pp := netpol.PodFromCore(p)
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		pp.IPs = nil
	}
	return pp
}

// installPolicy puts the policy handler on every node, once: a cluster without
// NetworkPolicies has no handler (and no trace step) of it. No lock of the cluster's is
// held while it takes nodes' locks (the handler runs under a node's lock).
func (c *Cluster) installPolicy() {
	c.pol.mu.Lock()
	done := c.pol.installed
	c.pol.installed = true
	c.pol.mu.Unlock()
	if done {
		return
	}
	c.refreshNodeAddrs()
	for _, n := range c.Nodes() {
		n.addPolicyHandlers()
	}
}

// refreshNodeAddrs records every node's addresses (node IPs, bridge gateways): the
// sources the policy handler treats as nodes. The map is replaced whole, and read
// without a lock.
func (c *Cluster) refreshNodeAddrs() {
	m := map[netip.Addr]string{}
	for _, n := range c.Nodes() {
		for _, i := range n.Interfaces() {
			if i.Kind != netsim.IfUplink && i.Kind != netsim.IfBridge {
				continue // not kube-ipvs0's VIPs, nor loopback
			}
			for _, p := range i.Addrs {
				m[p.Addr()] = n.Name()
			}
		}
		for _, a := range n.IPs() {
			m[a] = n.Name()
		}
	}
	c.pol.nodeAddrs.Store(&m)
}

// policyNodeAdded installs the handler on a node added after policies existed.
func (c *Cluster) policyNodeAdded(n *Node) {
	c.pol.mu.Lock()
	installed := c.pol.installed
	c.pol.mu.Unlock()
	if !installed {
		return
	}
	c.refreshNodeAddrs()
	n.addPolicyHandlers()
}

func (c *Cluster) nodeOfAddr(a netip.Addr) (string, bool) {
	m := c.pol.nodeAddrs.Load()
	if m == nil {
		return "", false
	}
	name, ok := (*m)[a.Unmap()]
	return name, ok
}

func (n *Node) addPolicyHandlers() {
	n.AddHandler(netsim.HandlerSpec{Name: PolicyHandlerName, Hook: netfilter.Postrouting, Priority: netfilter.PriorityFilter, Handler: netsim.HandlerFunc(n.policyHandle)})
	n.AddHandler(netsim.HandlerSpec{Name: PolicyHandlerName, Hook: netfilter.Input, Priority: netfilter.PriorityNATSrc + 10, Handler: netsim.HandlerFunc(n.policyHandle)})
}

// NetworkPolicyFlavour returns the node's NetworkPolicy flavour (PolicyCalico or
// PolicyCilium).
func (n *Node) NetworkPolicyFlavour() string {
	n.polMu.Lock()
	defer n.polMu.Unlock()
	if n.polFlavour == "" {
		return PolicyCalico
	}
	return n.polFlavour
}

// SetNetworkPolicy sets the node's NetworkPolicy flavour ("" for the default, calico).
func (n *Node) SetNetworkPolicy(flavour string) error {
	if err := CheckPolicyFlavour(flavour); err != nil {
		return err
	}
	n.polMu.Lock()
	n.polFlavour = flavour
	n.polMu.Unlock()
	return nil
}

// policyProto maps an IP protocol to NetworkPolicy's; other protocols (ICMP) get a name
// no ports entry has, so only rules without ports match them.
func policyProto(p uint8) corev1.Protocol {
	switch p {
	case netfilter.ProtoTCP:
		return corev1.ProtocolTCP
	case netfilter.ProtoUDP:
		return corev1.ProtocolUDP
	case netfilter.ProtoSCTP:
		return corev1.ProtocolSCTP
	}
	return corev1.Protocol(netsim.ProtoName(p))
}

// policyHandle is the NetworkPolicy handler (see PolicyHandlerName).
func (n *Node) policyHandle(ctx *netsim.Context, p *netsim.Packet) netsim.Verdict {
	if p.Conn != nil && (p.CtState != netfilter.CtNew || p.CtReply) {
		if ctx.Tracing() { // established or related: allowed when it began
			return netsim.Verdict{Reason: "conntrack " + p.CtState.String() + ": decided when the connection began"}
		}
		return netsim.VerdictContinue
	}
	if p.IsICMPError() {
		return netsim.VerdictContinue
	}
	ix := n.c.pol.ix
	local := func(a netip.Addr) *netpol.Pod {
		if pod := ix.PodByIP(a); pod != nil && pod.Node == n.Name() {
			return pod
		}
		return nil
	}
	src := local(p.Src)
	var dst *netpol.Pod
	if ctx.Hook() == netfilter.Postrouting {
		dst = local(p.Dst)
	}
	if src == nil && dst == nil {
		if ctx.Tracing() {
			return netsim.Verdict{Reason: "no pod of " + n.Name() + " at either end"}
		}
		return netsim.VerdictContinue
	}
	port, proto := p.DstPort, policyProto(p.Proto)
	if p.Proto == netfilter.ProtoICMP || p.Proto == netfilter.ProtoICMPv6 {
		port = 0 // an echo's identifier is no port
	}
	flavour := n.NetworkPolicyFlavour()
	if src != nil {
		d := ix.Decide(netpol.Egress, src, n.policyPeer(p.Dst, flavour), port, proto)
		if v, stop := n.policyVerdict(ctx, p, d); stop {
			return v
		}
	}
	if dst != nil {
		if name, isNode := n.c.nodeOfAddr(p.Src); isNode && name == n.Name() && src == nil {
			if ctx.Tracing() {
				ctx.Trace(netsim.TraceStep{Verdict: "ALLOW", Packet: p.String(),
					Detail: fmt.Sprintf("from node %s's own address %s to its pod %s: the local host reaches its pods whatever the policy (%s)", n.Name(), p.Src, dst.Key(), flavour)})
			}
			return netsim.VerdictContinue
		}
		peer := netpol.Peer{Pod: src, IP: p.Src}
		if src == nil {
			peer = n.policyPeer(p.Src, flavour)
		}
		d := ix.Decide(netpol.Ingress, dst, peer, port, proto)
		if v, stop := n.policyVerdict(ctx, p, d); stop {
			return v
		}
	}
	return netsim.VerdictContinue
}

// policyPeer is the other end of a connection as the flavour sees an address: with
// Cilium a node's address (host or remote-node identity) is no address ipBlock matches.
func (n *Node) policyPeer(a netip.Addr, flavour string) netpol.Peer {
	if flavour == PolicyCilium {
		if _, isNode := n.c.nodeOfAddr(a); isNode {
			return netpol.Peer{}
		}
	}
	return netpol.Peer{IP: a}
}

// policyVerdict traces a decision and, when it denies, returns the drop.
func (n *Node) policyVerdict(ctx *netsim.Context, p *netsim.Packet, d netpol.Decision) (netsim.Verdict, bool) {
	if ctx.Tracing() {
		v := "ALLOW"
		if !d.Allowed {
			v = "DENY"
		}
		ctx.Trace(netsim.TraceStep{Verdict: v, Packet: p.String(), Detail: d.String(), Decision: policyTraceOf(d)})
	}
	if d.Allowed {
		return netsim.Verdict{}, false
	}
	return netsim.Verdict{Kind: netsim.Drop, Reason: d.String()}, true
}

// PolicyTrace is the NetworkPolicy handler's decision as its trace step carries it
// (netsim.TraceStep.Decision), with JSON names for programs reading traces.
type PolicyTrace struct {
	Direction string `json:"direction"` // ingress or egress
	Pod       string `json:"pod"`       // NS/NAME of the pod the policies are for
	Isolated  bool   `json:"isolated"`
	Allowed   bool   `json:"allowed"`
	// Selecting are the policies isolating the pod for the direction (NS/NAME).
	Selecting []string `json:"selecting,omitempty"`
	// Policy, RuleIndex and Rule name the rule that allowed the packet.
	Policy    string `json:"policy,omitempty"`
	RuleIndex *int   `json:"rule_index,omitempty"`
	Rule      string `json:"rule,omitempty"`
	// Decision is netpol's own.
	Decision netpol.Decision `json:"-"`
}

func policyTraceOf(d netpol.Decision) *PolicyTrace {
	t := &PolicyTrace{Direction: d.Direction.String(), Pod: d.Pod, Isolated: d.Isolated, Allowed: d.Allowed, Decision: d}
	for _, r := range d.Selecting {
		t.Selecting = append(t.Selecting, r.String())
	}
	if d.Rule != nil {
		i := d.Rule.Index
		t.Policy, t.RuleIndex, t.Rule = d.Rule.Policy.String(), &i, d.Rule.Text
	}
	return t
}
