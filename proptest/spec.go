package proptest

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// The address plan of every generated cluster. It is netsim's default plan, made
// explicit so that generators can pick pod addresses (and hand-written EndpointSlices can
// name them) before the cluster exists.
var (
	NodeCIDR4     = netip.MustParsePrefix("172.18.0.0/16")
	NodeCIDR6     = netip.MustParsePrefix("fc00:f853:ccd:e793::/64")
	ClusterCIDR4  = netip.MustParsePrefix("10.244.0.0/16")
	ClusterCIDR6  = netip.MustParsePrefix("fd00:10:244::/56")
	ServiceCIDR4  = netip.MustParsePrefix("10.96.0.0/12")
	ServiceCIDR6  = netip.MustParsePrefix("fd00:10:96::/112")
	ExternalCIDR  = netip.MustParsePrefix("203.0.113.0/24")
	ExternalIPNet = netip.MustParsePrefix("192.0.2.0/24") // spec.externalIPs come from here
)

// ClusterSpec is the cluster a Case runs on.
type ClusterSpec struct {
	// Nodes in order; node i has IP 172.18.0.(2+i) (and fc00:f853:ccd:e793::(2+i) when
	// dual-stack) and pod CIDR 10.244.i.0/24 (and fd00:10:244:i::/64).
	Nodes []NodeSpec
	// DualStack gives nodes, pods and the service network both families (IPv4 primary).
	DualStack bool
	// NodePortAddresses is kube-proxy's --nodeport-addresses on every node (empty: all
	// local addresses).
	NodePortAddresses []string
	// LoadBalancerMode is how the simulated cloud load balancer hands traffic to nodes:
	// "nodeport" (rewritten to a node's NodePort; the load balancer enforces
	// loadBalancerSourceRanges) or "vip" (passed on unchanged; kube-proxy's rules for the
	// load-balancer IP and its source ranges do the work).
	LoadBalancerMode string
	// Seed seeds the simulation (iptables probabilities, ports).
	Seed uint64
	// NoHairpin turns the bridge's hairpin mode off on every node (kubelet
	// --hairpin-mode=none): a pod then cannot reach itself through its own Service.
	// Generators never draw it; Options.NoHairpin sets it.
	NoHairpin bool
}

// NodeSpec is one node.
type NodeSpec struct {
	Name string
	Zone string // topology.kubernetes.io/zone; "" for none
}

// NodeIndex returns the index of the named node, or -1.
func (c ClusterSpec) NodeIndex(name string) int {
	for i, n := range c.Nodes {
		if n.Name == name {
			return i
		}
	}
	return -1
}

// NodeIPs returns node i's addresses, primary family first.
func (c ClusterSpec) NodeIPs(i int) []netip.Addr {
	out := []netip.Addr{nthAddr(NodeCIDR4.Addr(), 2+i)}
	if c.DualStack {
		out = append(out, nthAddr(NodeCIDR6.Addr(), 2+i))
	}
	return out
}

// PodCIDRs returns node i's pod ranges.
func (c ClusterSpec) PodCIDRs(i int) []netip.Prefix {
	v4 := netip.PrefixFrom(nthAddr(ClusterCIDR4.Addr(), i<<8), 24)
	out := []netip.Prefix{v4}
	if c.DualStack {
		b := ClusterCIDR6.Addr().As16()
		b[7] = byte(i)
		out = append(out, netip.PrefixFrom(netip.AddrFrom16(b), 64))
	}
	return out
}

// PodIPs returns the addresses of the k-th pod placed on node i: host number 10+k of
// each of the node's pod ranges.
func (c ClusterSpec) PodIPs(i, k int) []netip.Addr {
	var out []netip.Addr
	for _, p := range c.PodCIDRs(i) {
		out = append(out, nthAddr(p.Addr(), 10+k))
	}
	return out
}

// Families returns the cluster's IP families, primary first.
func (c ClusterSpec) Families() []corev1.IPFamily {
	if c.DualStack {
		return []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}
	return []corev1.IPFamily{corev1.IPv4Protocol}
}

// ExternalSpec is a host outside the cluster (a client on the internet).
type ExternalSpec struct {
	Name string
	IP   netip.Addr
}

// PodState is what happens to a generated pod after it starts.
type PodState string

// Pod states.
const (
	PodReady    PodState = "ready"     // Ready condition true
	PodNotReady PodState = "not-ready" // Ready false (its endpoints are not ready, not serving)
	// PodTerminating pods are deleted with a long grace period after they start: their
	// endpoints turn terminating (serving while the pod is still ready).
	PodTerminating PodState = "terminating"
	// PodTerminatingNotReady: terminating and not ready (not serving).
	PodTerminatingNotReady PodState = "terminating-not-ready"
)

// TerminationGrace is the grace period of generated terminating pods: long enough that
// they stay terminating through every check (affinity checks advance the clock by
// hours at most).
const TerminationGrace = 48 * time.Hour

// Case is one generated world: a cluster, the objects created in it, and what happens
// afterwards. It holds plain Kubernetes objects, so it prints as manifests.
type Case struct {
	Cluster ClusterSpec
	// Services as created: cluster IPs and node ports are left to the API server.
	Services []*corev1.Service
	// Pods, bound to nodes (spec.nodeName) with their addresses chosen
	// (status.podIPs, which the simulated kubelet keeps).
	Pods []*corev1.Pod
	// PodStates says what happens to each pod after it starts (default ready).
	PodStates map[string]PodState
	// Slices are hand-written EndpointSlices (for selectorless Services).
	Slices []*discoveryv1.EndpointSlice
	// Externals are hosts outside the cluster.
	Externals []ExternalSpec
	// Steps happen after everything above exists and before the checks.
	Steps []Step
}

// StepKind names a change made to a running world.
type StepKind string

// Step kinds.
const (
	// StepDeletePod deletes Target (a pod "ns/name") with Grace.
	StepDeletePod StepKind = "delete-pod"
	// StepSetReady sets Target's (a pod) Ready condition to Ready.
	StepSetReady StepKind = "set-ready"
	// StepDeleteService deletes Target (a service "ns/name").
	StepDeleteService StepKind = "delete-service"
	// StepToExternalName turns Target (a service) into an ExternalName service
	// (releasing its cluster IP and node ports).
	StepToExternalName StepKind = "to-external-name"
	// StepAdvance advances the virtual clock by Duration.
	StepAdvance StepKind = "advance"
	// Faults.
	StepPartition  StepKind = "partition"   // cut the cluster network into Groups
	StepKillNode   StepKind = "kill-node"   // Target (a node) dies with its pods
	StepPauseProxy StepKind = "pause-proxy" // Target's (a node) proxy stops syncing
	StepLinkLoss   StepKind = "link-loss"   // Target's (a node) uplink loses Loss of its packets
)

// Step is one change to a running world.
type Step struct {
	Kind     StepKind
	Target   string
	Grace    time.Duration
	Ready    bool
	Duration time.Duration
	Groups   [][]string
	Loss     float64
}

// IsFault reports whether the step is a fault (after which traffic may be lost).
func (s Step) IsFault() bool {
	switch s.Kind {
	case StepPartition, StepKillNode, StepPauseProxy, StepLinkLoss:
		return true
	}
	return false
}

func (s Step) String() string {
	switch s.Kind {
	case StepDeletePod:
		return fmt.Sprintf("delete pod %s (grace %s)", s.Target, s.Grace)
	case StepSetReady:
		return fmt.Sprintf("set pod %s ready=%v", s.Target, s.Ready)
	case StepDeleteService:
		return "delete service " + s.Target
	case StepToExternalName:
		return "turn service " + s.Target + " into an ExternalName service"
	case StepAdvance:
		return "advance the clock by " + s.Duration.String()
	case StepPartition:
		var gs []string
		for _, g := range s.Groups {
			gs = append(gs, "["+strings.Join(g, " ")+"]")
		}
		return "partition the network into " + strings.Join(gs, " ")
	case StepKillNode:
		return "kill node " + s.Target
	case StepPauseProxy:
		return "pause the proxy of node " + s.Target
	case StepLinkLoss:
		return fmt.Sprintf("lose %.0f%% of node %s's uplink packets", s.Loss*100, s.Target)
	}
	return string(s.Kind) + " " + s.Target
}

// Faulty reports whether any step is a fault.
func (c *Case) Faulty() bool {
	for _, s := range c.Steps {
		if s.IsFault() {
			return true
		}
	}
	return false
}

// State returns a pod's state (ready unless said otherwise).
func (c *Case) State(key string) PodState {
	if s, ok := c.PodStates[key]; ok {
		return s
	}
	return PodReady
}

// Service returns the case's Service "ns/name", or nil.
func (c *Case) Service(key string) *corev1.Service {
	for _, s := range c.Services {
		if s.Namespace+"/"+s.Name == key {
			return s
		}
	}
	return nil
}

// Summary is a one-line description of the case (for logs).
func (c *Case) Summary() string {
	var svcs []string
	for _, s := range c.Services {
		svcs = append(svcs, s.Name+"("+describeService(s)+")")
	}
	var pods []string
	for _, p := range c.Pods {
		st := c.State(p.Namespace + "/" + p.Name)
		d := p.Name + "@" + p.Spec.NodeName
		if st != PodReady {
			d += "," + string(st)
		}
		pods = append(pods, d)
	}
	var steps []string
	for _, s := range c.Steps {
		steps = append(steps, s.String())
	}
	out := fmt.Sprintf("%d nodes", len(c.Cluster.Nodes))
	if c.Cluster.DualStack {
		out += " dual-stack"
	}
	if len(c.Cluster.NodePortAddresses) > 0 {
		out += " nodeport-addresses=" + strings.Join(c.Cluster.NodePortAddresses, ",")
	}
	out += "; services " + strings.Join(svcs, " ") + "; pods " + strings.Join(pods, " ")
	if len(c.Slices) > 0 {
		out += fmt.Sprintf("; %d hand-written slices", len(c.Slices))
	}
	if len(steps) > 0 {
		out += "; then " + strings.Join(steps, ", ")
	}
	return out
}

// describeService is a compact description of a Service's type and options.
func describeService(s *corev1.Service) string {
	var parts []string
	switch {
	case s.Spec.Type == corev1.ServiceTypeExternalName:
		parts = append(parts, "ExternalName "+s.Spec.ExternalName)
	case s.Spec.ClusterIP == corev1.ClusterIPNone:
		parts = append(parts, "headless")
	case s.Spec.Type == "":
		parts = append(parts, "ClusterIP")
	default:
		parts = append(parts, string(s.Spec.Type))
	}
	if s.Spec.Selector == nil && s.Spec.Type != corev1.ServiceTypeExternalName {
		parts = append(parts, "selectorless")
	}
	for _, p := range s.Spec.Ports {
		d := fmt.Sprintf("%d/%s", p.Port, protoOr(p.Protocol))
		if p.Name != "" {
			d = p.Name + ":" + d
		}
		if p.TargetPort.String() != "0" && p.TargetPort.String() != "" {
			d += "->" + p.TargetPort.String()
		}
		parts = append(parts, d)
	}
	if s.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		parts = append(parts, "ClientIP")
	}
	if s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		parts = append(parts, "eTP=Local")
	}
	if s.Spec.InternalTrafficPolicy != nil && *s.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal {
		parts = append(parts, "iTP=Local")
	}
	if len(s.Spec.ExternalIPs) > 0 {
		parts = append(parts, "externalIPs="+strings.Join(s.Spec.ExternalIPs, ","))
	}
	if len(s.Spec.LoadBalancerSourceRanges) > 0 {
		parts = append(parts, "sourceRanges="+strings.Join(s.Spec.LoadBalancerSourceRanges, ","))
	}
	if s.Spec.IPFamilyPolicy != nil && *s.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack {
		parts = append(parts, string(*s.Spec.IPFamilyPolicy))
	} else if len(s.Spec.IPFamilies) == 1 && s.Spec.IPFamilies[0] == corev1.IPv6Protocol {
		parts = append(parts, "IPv6")
	}
	return strings.Join(parts, " ")
}

func protoOr(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// nthAddr returns the address n after base.
func nthAddr(base netip.Addr, n int) netip.Addr {
	b := base.AsSlice()
	carry := n
	for i := len(b) - 1; i >= 0 && carry > 0; i-- {
		v := int(b[i]) + carry
		b[i] = byte(v)
		carry = v >> 8
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// GoString renders the case as its summary (rapid logs drawn values with %#v).
func (c *Case) GoString() string { return "case{" + c.Summary() + "}" }
