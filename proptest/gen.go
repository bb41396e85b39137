package proptest

import (
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"
)

// Options bound what the generators draw. The zero value gives small cases: up to 3
// nodes, 3 services, 3 endpoint pods per service and 2 client pods, dual-stack
// sometimes, every service type, a few changes after creation, no faults.
type Options struct {
	MaxNodes        int // default 3
	MaxServices     int // default 3
	MaxEndpointPods int // per service; default 3
	MaxClients      int // client pods (no labels, no ports); default 2
	// Kinds restricts the service kinds drawn (default all of them).
	Kinds []ServiceKind
	// NoDualStack keeps every cluster single-stack IPv4.
	NoDualStack bool
	// NoSteps draws no changes after creation (deletions, readiness flips, ...).
	NoSteps bool
	// Faults adds faults to the steps: partitions, dead nodes, paused proxies, lossy
	// links. Checkers then tolerate lost traffic but still hold delivered traffic to
	// the rules.
	Faults bool
	// LoadBalancerMode fixes the cloud load balancer's mode ("nodeport" or "vip");
	// default drawn.
	LoadBalancerMode string
	// NodePortAddresses fixes --nodeport-addresses (use []string{} for "all addresses");
	// nil draws it.
	NodePortAddresses []string
	// NoHairpin builds every cluster with the bridge's hairpin mode off
	// (ClusterSpec.NoHairpin), a node misconfiguration the invariants catch.
	NoHairpin bool
}

func (o Options) withDefaults() Options {
	if o.MaxNodes <= 0 {
		o.MaxNodes = 3
	}
	if o.MaxServices <= 0 {
		o.MaxServices = 3
	}
	if o.MaxEndpointPods <= 0 {
		o.MaxEndpointPods = 3
	}
	if o.MaxClients <= 0 {
		o.MaxClients = 2
	}
	if len(o.Kinds) == 0 {
		o.Kinds = AllKinds
	}
	return o
}

// ServiceKind is the shape of a generated Service.
type ServiceKind string

// Service kinds. AllKinds lists them simplest first (the order shrinking goes).
const (
	KindClusterIP    ServiceKind = "ClusterIP"
	KindNodePort     ServiceKind = "NodePort"
	KindLoadBalancer ServiceKind = "LoadBalancer"
	KindHeadless     ServiceKind = "Headless"
	KindExternalName ServiceKind = "ExternalName"
)

// AllKinds are every service kind.
var AllKinds = []ServiceKind{KindClusterIP, KindNodePort, KindLoadBalancer, KindHeadless, KindExternalName}

var nodeNames = []string{"node-a", "node-b", "node-c", "node-d", "node-e", "node-f", "node-g", "node-h"}

// Externals are the outside hosts cases draw from: one inside the source ranges the
// generator uses (203.0.113.0/25, 203.0.113.10/32) and one outside them.
var Externals = []ExternalSpec{
	{Name: "ext-a", IP: netip.MustParseAddr("203.0.113.10")},
	{Name: "ext-b", IP: netip.MustParseAddr("203.0.113.200")},
}

// nodePortAddressChoices are the --nodeport-addresses values drawn: all addresses,
// the primary IPs, the node network, one node only, a range with no node address in it,
// and the node network plus loopback.
var nodePortAddressChoices = [][]string{
	nil,
	{"primary"},
	{"172.18.0.0/16"},
	{"172.18.0.2/32"},
	{"10.244.0.0/16"},
	{"172.18.0.0/16", "127.0.0.0/8"},
}

var sourceRangeChoices = [][]string{
	nil,
	{"203.0.113.0/25"},
	{"203.0.113.128/25"},
	{"203.0.113.10/32", "10.244.0.0/16"},
}

// Clusters draws a cluster: 1 to MaxNodes nodes in up to two zones, single- or
// dual-stack, --nodeport-addresses, the load balancer's mode and the seed.
func Clusters(o Options) *rapid.Generator[ClusterSpec] {
	o = o.withDefaults()
	return rapid.Custom(func(t *rapid.T) ClusterSpec { return drawCluster(t, o) })
}

func drawCluster(t *rapid.T, o Options) ClusterSpec {
	max := o.MaxNodes
	if max > len(nodeNames) {
		max = len(nodeNames)
	}
	n := rapid.IntRange(1, max).Draw(t, "nodes")
	var c ClusterSpec
	for i := 0; i < n; i++ {
		zone := rapid.SampledFrom([]string{"zone-a", "zone-b"}).Draw(t, "zone")
		c.Nodes = append(c.Nodes, NodeSpec{Name: nodeNames[i], Zone: zone})
	}
	if !o.NoDualStack {
		c.DualStack = rapid.Bool().Draw(t, "dualStack")
	}
	if o.NodePortAddresses != nil {
		c.NodePortAddresses = append([]string(nil), o.NodePortAddresses...)
	} else {
		c.NodePortAddresses = rapid.SampledFrom(nodePortAddressChoices).Draw(t, "nodePortAddresses")
	}
	if o.LoadBalancerMode != "" {
		c.LoadBalancerMode = o.LoadBalancerMode
	} else {
		c.LoadBalancerMode = rapid.SampledFrom([]string{"nodeport", "vip"}).Draw(t, "loadBalancerMode")
	}
	c.Seed = rapid.Uint64Range(1, 1000).Draw(t, "seed")
	c.NoHairpin = o.NoHairpin
	return c
}

// Cases draws a whole world: a cluster, services of every kind with pods (or
// hand-written EndpointSlices) behind them, client pods, external hosts, and changes
// made after creation. Every object is valid (Default then Validate passes) and the
// case shrinks toward one node, one ClusterIP service on 80/TCP, no pods: services,
// pods, clients and steps are drawn as lists whose elements rapid can drop one by one.
func Cases(o Options) *rapid.Generator[*Case] {
	o = o.withDefaults()
	return rapid.Custom(func(t *rapid.T) *Case { return drawCase(t, o) })
}

// Addresses hands out pod addresses per node: the k-th pod placed on node i gets host
// 10+k of each of the node's pod ranges (ClusterSpec.PodIPs).
type Addresses struct {
	c    ClusterSpec
	next map[string]int
}

// NewAddresses returns an empty address book for cluster c.
func NewAddresses(c ClusterSpec) *Addresses { return &Addresses{c: c, next: map[string]int{}} }

// Next returns the addresses of the next pod placed on node.
func (b *Addresses) Next(node string) []netip.Addr {
	k := b.next[node]
	b.next[node] = k + 1
	return b.c.PodIPs(b.c.NodeIndex(node), k)
}

// serviceDraft is a service with what stands behind it, before names and addresses
// are given out.
type serviceDraft struct {
	svc         *corev1.Service
	externalIPs bool
	share       bool // select the previous service's pods instead of pods of its own
	pods        []podDraft
	slices      int // hand-written slices per family (selectorless services)
}

// podDraft is a pod behind a service: where it runs, what it listens on, what happens
// to it and, for selectorless services, how its hand-written endpoint reads.
type podDraft struct {
	node       string
	state      PodState
	ports      []corev1.ContainerPort
	cond       string
	slice      int
	noNodeName bool
}

// stepDraft is a step whose target is an index into the case's pods, services or
// nodes (taken modulo their number when the case is put together).
type stepDraft struct {
	step  Step
	index int
}

func drawCase(t *rapid.T, o Options) *Case {
	c := &Case{Cluster: drawCluster(t, o), PodStates: map[string]PodState{}}
	b := NewAddresses(c.Cluster)
	nodes := nodeNamesOf(c.Cluster)
	draft := rapid.Custom(func(t *rapid.T) serviceDraft { return drawServiceDraft(t, c.Cluster, o) })
	drafts := rapid.SliceOfN(draft, 1, o.MaxServices).Draw(t, "services")
	prevApp := ""
	for i, d := range drafts {
		svc := d.svc
		svc.Name = fmt.Sprintf("svc-%d", i)
		if d.externalIPs {
			svc.Spec.ExternalIPs = []string{nthAddr(ExternalIPNet.Addr(), 10+i).String()}
		}
		c.Services = append(c.Services, svc)
		switch {
		case svc.Spec.Type == corev1.ServiceTypeExternalName:
			continue
		case svc.Spec.Selector == nil:
			var pods []*corev1.Pod
			for k, pd := range d.pods {
				pods = append(pods, newPod(b, fmt.Sprintf("%s/%s-%d", svc.Namespace, svc.Name, k), pd.node, nil, pd.ports))
			}
			c.Pods = append(c.Pods, pods...)
			c.Slices = append(c.Slices, handSlices(c.Cluster, svc, pods, d)...)
			continue
		case d.share && prevApp != "":
			svc.Spec.Selector = map[string]string{"app": prevApp}
			continue
		}
		svc.Spec.Selector = map[string]string{"app": svc.Name}
		prevApp = svc.Name
		for k, pd := range d.pods {
			key := fmt.Sprintf("%s/%s-%d", svc.Namespace, svc.Name, k)
			c.Pods = append(c.Pods, newPod(b, key, pd.node, map[string]string{"app": svc.Name}, pd.ports))
			c.PodStates[key] = pd.state
		}
	}
	clients := rapid.SliceOfN(rapid.SampledFrom(nodes), 1, o.MaxClients).Draw(t, "clients")
	for i, node := range clients {
		c.Pods = append(c.Pods, newPod(b, fmt.Sprintf("default/client-%d", i), node, nil, nil))
	}
	ne := rapid.IntRange(1, len(Externals)).Draw(t, "externals")
	c.Externals = append(c.Externals, Externals[:ne]...)
	if !o.NoSteps || o.Faults {
		c.Steps = drawSteps(t, c, o)
	}
	return c
}

func drawServiceDraft(t *rapid.T, c ClusterSpec, o Options) serviceDraft {
	d := serviceDraft{svc: drawService(t, c, "default/svc", 0, o, nil)}
	d.externalIPs = len(d.svc.Spec.ExternalIPs) > 0
	d.svc.Spec.ExternalIPs = nil
	if d.svc.Spec.Type == corev1.ServiceTypeExternalName {
		return d
	}
	selectorless := d.svc.Spec.Selector == nil
	if !selectorless {
		d.share = rapid.IntRange(0, 3).Draw(t, "shareSelector") == 3
	} else {
		d.slices = rapid.IntRange(1, 2).Draw(t, "handSlices")
	}
	pod := rapid.Custom(func(t *rapid.T) podDraft { return drawPodDraft(t, c, d.svc, !selectorless, d.slices) })
	d.pods = rapid.SliceOfN(pod, 0, o.MaxEndpointPods).Draw(t, "endpointPods")
	return d
}

func drawPodDraft(t *rapid.T, c ClusterSpec, svc *corev1.Service, labelled bool, nslices int) podDraft {
	pd := podDraft{node: rapid.SampledFrom(nodeNamesOf(c)).Draw(t, "podNode")}
	seen := map[string]bool{}
	for _, sp := range svc.Spec.Ports {
		num, name := targetOf(sp)
		if name != "" {
			if labelled && rapid.IntRange(0, 4).Draw(t, "lacksNamedPort") == 4 {
				continue
			}
			num = rapid.SampledFrom(targetNumbers).Draw(t, "namedPortNumber")
		}
		k := fmt.Sprint(num, protoOr(sp.Protocol))
		if name == "" && seen[k] {
			continue // another service port already targets this container port
		}
		for seen[k] {
			num++
			k = fmt.Sprint(num, protoOr(sp.Protocol))
		}
		seen[k] = true
		pd.ports = append(pd.ports, corev1.ContainerPort{Name: name, ContainerPort: num, Protocol: protoOr(sp.Protocol)})
	}
	if labelled {
		pd.state = rapid.SampledFrom([]PodState{PodReady, PodNotReady, PodTerminating, PodTerminatingNotReady}).Draw(t, "podState")
		return pd
	}
	pd.cond = rapid.SampledFrom([]string{"unset", "ready", "not-ready", "serving-terminating", "terminating"}).Draw(t, "conditions")
	pd.slice = rapid.IntRange(0, nslices-1).Draw(t, "slice")
	pd.noNodeName = rapid.IntRange(0, 4).Draw(t, "noNodeName") == 4
	return pd
}

func nodeNamesOf(c ClusterSpec) []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Name)
	}
	return out
}

var (
	portNumbers   = []int32{80, 53, 443, 8080}
	portNames     = []string{"http", "dns", "metrics", "admin"}
	targetNumbers = []int32{8080, 9376, 5353}
	// targetNames maps a service port's name to the container port name its named
	// targetPort refers to (IANA service names: at most 15 characters).
	targetNames = map[string]string{"": "web", "http": "web", "dns": "dns-srv", "metrics": "prom", "admin": "adm"}
)

// Services draws one Service for cluster c, named default/svc: of one of o.Kinds, with
// one or two ports (TCP or UDP, named when there are two, targetPort defaulted, a
// number or a name), ClientIP affinity, internal and external traffic policies, an
// externalIP (192.0.2.10), loadBalancerSourceRanges and, in a dual-stack cluster, an IP
// family policy; its selector is app=svc, or none (a selectorless service: write its
// EndpointSlices by hand). Cluster IPs and node ports are left to the API server.
// Rename it before use when drawing several.
func Services(c ClusterSpec, o Options) *rapid.Generator[*corev1.Service] {
	o = o.withDefaults()
	return rapid.Custom(func(t *rapid.T) *corev1.Service { return drawService(t, c, "default/svc", 0, o, nil) })
}

func drawService(t *rapid.T, c ClusterSpec, key string, index int, o Options, apps []string) *corev1.Service {
	kind := rapid.SampledFrom(o.Kinds).Draw(t, "kind")
	svc := service.NewService(key)
	s := &svc.Spec
	switch kind {
	case KindExternalName:
		s.Type = corev1.ServiceTypeExternalName
		s.ExternalName = rapid.SampledFrom([]string{"db.example.com", "example.org."}).Draw(t, "externalName")
		return svc
	case KindHeadless:
		s.Type = corev1.ServiceTypeClusterIP
		s.ClusterIP, s.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	default:
		s.Type = corev1.ServiceType(kind)
	}
	minPorts := 1
	if kind == KindHeadless {
		minPorts = 0
	}
	nports := rapid.IntRange(minPorts, 2).Draw(t, "ports")
	used := map[string]bool{}
	names := map[string]bool{}
	for i := 0; i < nports; i++ {
		p := corev1.ServicePort{Protocol: rapid.SampledFrom([]corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}).Draw(t, "protocol")}
		p.Port = rapid.SampledFrom(portNumbers).Draw(t, "port")
		if used[fmt.Sprint(p.Protocol, p.Port)] {
			p.Port = int32(9000 + i)
		}
		used[fmt.Sprint(p.Protocol, p.Port)] = true
		if nports > 1 || rapid.Bool().Draw(t, "portNamed") {
			name := rapid.SampledFrom(portNames).Draw(t, "portName")
			if names[name] {
				name = fmt.Sprintf("%s%d", name, i)
			}
			names[name] = true
			p.Name = name
		}
		switch rapid.SampledFrom([]string{"default", "number", "name"}).Draw(t, "targetPort") {
		case "number":
			p.TargetPort = intstr.FromInt32(rapid.SampledFrom(targetNumbers).Draw(t, "targetNumber"))
		case "name":
			tn, ok := targetNames[p.Name]
			if !ok {
				tn = "t-" + p.Name
			}
			p.TargetPort = intstr.FromString(tn)
		}
		s.Ports = append(s.Ports, p)
	}
	selectorless := kind != KindHeadless && rapid.Bool().Draw(t, "selectorless")
	if !selectorless {
		app := svc.Name
		if len(apps) > 0 && rapid.IntRange(0, 3).Draw(t, "shareSelector") == 3 {
			app = rapid.SampledFrom(apps).Draw(t, "sharedApp")
		}
		s.Selector = map[string]string{"app": app}
	}
	if rapid.SampledFrom([]string{"None", "ClientIP"}).Draw(t, "affinity") == "ClientIP" {
		to := rapid.SampledFrom([]int32{10800, 30, 600}).Draw(t, "affinityTimeout")
		s.SessionAffinity = corev1.ServiceAffinityClientIP
		s.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &to}}
	}
	if rapid.SampledFrom([]string{"Cluster", "Local"}).Draw(t, "internalTrafficPolicy") == "Local" {
		p := corev1.ServiceInternalTrafficPolicyLocal
		s.InternalTrafficPolicy = &p
	}
	if kind != KindHeadless && rapid.Bool().Draw(t, "externalIPs") {
		s.ExternalIPs = []string{nthAddr(ExternalIPNet.Addr(), 10+index).String()}
	}
	if kind == KindNodePort || kind == KindLoadBalancer || len(s.ExternalIPs) > 0 {
		if rapid.SampledFrom([]string{"Cluster", "Local"}).Draw(t, "externalTrafficPolicy") == "Local" {
			s.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
	}
	if kind == KindLoadBalancer {
		s.LoadBalancerSourceRanges = rapid.SampledFrom(sourceRangeChoices).Draw(t, "sourceRanges")
	}
	if c.DualStack {
		switch rapid.SampledFrom([]string{"default", "PreferDualStack", "RequireDualStack", "IPv6"}).Draw(t, "ipFamilies") {
		case "PreferDualStack":
			pol := corev1.IPFamilyPolicyPreferDualStack
			s.IPFamilyPolicy = &pol
		case "RequireDualStack":
			pol := corev1.IPFamilyPolicyRequireDualStack
			s.IPFamilyPolicy = &pol
		case "IPv6":
			s.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
		}
	}
	return svc
}

// targetOf returns the container port a pod serving sp needs: its number, its name (""
// for numeric targets) and whether it was asked for by name.
func targetOf(sp corev1.ServicePort) (int32, string) {
	switch {
	case sp.TargetPort.Type == intstr.String && sp.TargetPort.StrVal != "":
		return 0, sp.TargetPort.StrVal
	case sp.TargetPort.IntVal != 0:
		return sp.TargetPort.IntVal, ""
	}
	return sp.Port, ""
}

func newPod(b *Addresses, key, node string, labels map[string]string, ports []corev1.ContainerPort) *corev1.Pod {
	pod := service.NewPod(key, service.OnNode(node))
	pod.Labels = labels
	pod.Spec.Containers[0].Ports = ports
	for _, ip := range b.Next(node) {
		pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip.String()})
	}
	pod.Status.PodIP = pod.Status.PodIPs[0].IP
	return pod
}

// sliceManager labels the EndpointSlices the generator writes by hand.
const sliceManager = "proptest.clusterlab.io"

// handSlices writes the EndpointSlices of a selectorless service whose endpoints are
// the given pods: per address family, d.slices slices, each endpoint in the slice its
// draft names with the conditions it drew (unset = ready, ready, not ready, serving and
// terminating, terminating and not serving) and, mostly, its pod's node.
func handSlices(c ClusterSpec, svc *corev1.Service, pods []*corev1.Pod, d serviceDraft) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, fam := range serviceFamilies(c, svc) {
		addrType := discoveryv1.AddressTypeIPv4
		if fam == corev1.IPv6Protocol {
			addrType = discoveryv1.AddressTypeIPv6
		}
		var slices []*discoveryv1.EndpointSlice
		for i := 0; i < d.slices; i++ {
			name := fmt.Sprintf("%s-manual-%d", svc.Name, i)
			if fam == corev1.IPv6Protocol {
				name = fmt.Sprintf("%s-manual6-%d", svc.Name, i)
			}
			sl := service.NewEndpointSlice(svc.Namespace+"/"+name, service.ForService(svc.Name), service.AddressType(addrType))
			sl.Labels[discoveryv1.LabelManagedBy] = sliceManager
			slices = append(slices, sl)
		}
		// Ports: the service's ports with the numbers the (first) pod listens on.
		for _, sp := range svc.Spec.Ports {
			num, name := targetOf(sp)
			if name != "" {
				num = targetNumbers[0]
			}
			if len(pods) > 0 {
				if n := containerPort(pods[0], sp); n != 0 {
					num = n
				}
			}
			pname, proto, port := sp.Name, protoOr(sp.Protocol), num
			for _, sl := range slices {
				sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: &pname, Protocol: &proto, Port: &port})
			}
		}
		for k, pod := range pods {
			addr := podAddr(pod, fam)
			if !addr.IsValid() {
				continue
			}
			pd := d.pods[k]
			ep := discoveryv1.Endpoint{Addresses: []string{addr.String()}}
			switch pd.cond {
			case "ready":
				ep.Conditions = conditions(true, true, false)
			case "not-ready":
				ep.Conditions = conditions(false, false, false)
			case "serving-terminating":
				ep.Conditions = conditions(false, true, true)
			case "terminating":
				ep.Conditions = conditions(false, false, true)
			}
			if !pd.noNodeName {
				node := pod.Spec.NodeName
				ep.NodeName = &node
			}
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name}
			slices[pd.slice%len(slices)].Endpoints = append(slices[pd.slice%len(slices)].Endpoints, ep)
		}
		out = append(out, slices...)
	}
	return out
}

func conditions(ready, serving, terminating bool) discoveryv1.EndpointConditions {
	return discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating}
}

// containerPort returns the pod's port number for a service port (by name or number
// and protocol), or 0.
func containerPort(pod *corev1.Pod, sp corev1.ServicePort) int32 {
	if n, ok := service.FindPort(pod, &sp); ok {
		return n
	}
	return 0
}

func podAddr(pod *corev1.Pod, fam corev1.IPFamily) netip.Addr {
	for _, ip := range pod.Status.PodIPs {
		a, err := netip.ParseAddr(ip.IP)
		if err == nil && a.Is6() == (fam == corev1.IPv6Protocol) {
			return a
		}
	}
	return netip.Addr{}
}

// serviceFamilies returns the IP families the API server will give svc in cluster c.
func serviceFamilies(c ClusterSpec, svc *corev1.Service) []corev1.IPFamily {
	if !c.DualStack {
		return []corev1.IPFamily{corev1.IPv4Protocol}
	}
	if svc.Spec.IPFamilyPolicy != nil && *svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack {
		return []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}
	if len(svc.Spec.IPFamilies) > 0 {
		return svc.Spec.IPFamilies[:1]
	}
	return []corev1.IPFamily{corev1.IPv4Protocol}
}

// drawSteps draws up to two changes (and, with o.Faults, three with faults among them)
// made after creation.
func drawSteps(t *rapid.T, c *Case, o Options) []Step {
	var kinds []StepKind
	if !o.NoSteps {
		kinds = append(kinds, StepDeletePod, StepSetReady, StepDeleteService, StepToExternalName, StepAdvance)
	}
	if o.Faults {
		kinds = append(kinds, StepPauseProxy, StepPartition, StepKillNode, StepLinkLoss)
	}
	max := 2
	if o.Faults {
		max = 3
	}
	nodes := nodeNamesOf(c.Cluster)
	draft := rapid.Custom(func(t *rapid.T) stepDraft {
		d := stepDraft{step: Step{Kind: rapid.SampledFrom(kinds).Draw(t, "step")}, index: rapid.IntRange(0, 7).Draw(t, "target")}
		switch d.step.Kind {
		case StepDeletePod:
			d.step.Grace = rapid.SampledFrom([]time.Duration{0, TerminationGrace}).Draw(t, "grace")
		case StepSetReady:
			d.step.Ready = rapid.Bool().Draw(t, "ready")
		case StepAdvance:
			d.step.Duration = rapid.SampledFrom([]time.Duration{time.Second, time.Minute, time.Hour}).Draw(t, "advance")
		case StepLinkLoss:
			d.step.Loss = rapid.SampledFrom([]float64{0.5, 1}).Draw(t, "loss")
		}
		return d
	})
	drafts := rapid.SliceOfN(draft, 0, max).Draw(t, "steps")
	var pods, svcs []string
	for _, p := range c.Pods {
		if p.Labels != nil {
			pods = append(pods, p.Namespace+"/"+p.Name)
		}
	}
	for _, s := range c.Services {
		if s.Spec.Type != corev1.ServiceTypeExternalName {
			svcs = append(svcs, s.Namespace+"/"+s.Name)
		}
	}
	var steps []Step
	for _, d := range drafts {
		s := d.step
		switch s.Kind {
		case StepDeletePod, StepSetReady:
			if len(pods) == 0 {
				continue
			}
			s.Target = pods[d.index%len(pods)]
		case StepDeleteService, StepToExternalName:
			if len(svcs) == 0 {
				continue
			}
			s.Target = svcs[d.index%len(svcs)]
		case StepPauseProxy, StepLinkLoss:
			s.Target = nodes[d.index%len(nodes)]
		case StepKillNode:
			if len(nodes) < 2 {
				continue
			}
			s.Target = nodes[d.index%len(nodes)]
		case StepPartition:
			cut := d.index % len(nodes)
			s.Groups = [][]string{append(append([]string(nil), nodes[:cut]...), "external"), append([]string(nil), nodes[cut:]...)}
		}
		steps = append(steps, s)
	}
	return steps
}

// Probes draws traffic in a running world: a probe from a pod, a node or an external
// host to a service's cluster IP, external IP, load-balancer IP or NodePort (on any
// node address), or to a pod directly, over TCP or UDP.
func Probes(w *World) *rapid.Generator[netsim.Probe] {
	return rapid.Custom(func(t *rapid.T) netsim.Probe {
		targets := w.Targets()
		sources := w.Sources()
		src := rapid.SampledFrom(sources).Draw(t, "from")
		tg := rapid.SampledFrom(targets).Draw(t, "to")
		mode := rapid.SampledFrom([]netsim.ProbeMode{netsim.ProbePacket, netsim.ProbeConnect}).Draw(t, "probeMode")
		return netsim.Probe{From: src, Proto: tg.Proto, Dst: tg.Dst, Mode: mode}
	})
}

// Faults draws one fault for a cluster: a paused proxy, a partition, a dead node or a
// lossy uplink.
func Faults(c ClusterSpec) *rapid.Generator[Step] {
	return rapid.Custom(func(t *rapid.T) Step {
		nodes := nodeNamesOf(c)
		kinds := []StepKind{StepPauseProxy, StepPartition, StepLinkLoss}
		if len(nodes) > 1 {
			kinds = append(kinds, StepKillNode)
		}
		switch k := rapid.SampledFrom(kinds).Draw(t, "fault"); k {
		case StepPartition:
			cut := rapid.IntRange(0, len(nodes)-1).Draw(t, "partitionAt")
			return Step{Kind: k, Groups: [][]string{append(append([]string(nil), nodes[:cut]...), "external"), append([]string(nil), nodes[cut:]...)}}
		case StepLinkLoss:
			return Step{Kind: k, Target: rapid.SampledFrom(nodes).Draw(t, "faultNode"), Loss: rapid.SampledFrom([]float64{0.5, 1}).Draw(t, "loss")}
		default:
			return Step{Kind: k, Target: rapid.SampledFrom(nodes).Draw(t, "faultNode")}
		}
	})
}
