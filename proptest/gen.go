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
	return c
}

// Cases draws a whole world: a cluster, services of every kind with pods (or
// hand-written EndpointSlices) behind them, client pods, external hosts, and changes
// made after creation. Every object is valid (Default then Validate passes) and the
// case shrinks toward one node, one ClusterIP service on 80/TCP, no pods.
func Cases(o Options) *rapid.Generator[*Case] {
	o = o.withDefaults()
	return rapid.Custom(func(t *rapid.T) *Case { return drawCase(t, o) })
}

// book hands out pod addresses per node.
type book struct {
	c    ClusterSpec
	next map[string]int
}

func (b *book) podIPs(node string) []netip.Addr {
	if b.next == nil {
		b.next = map[string]int{}
	}
	k := b.next[node]
	b.next[node] = k + 1
	return b.c.PodIPs(b.c.NodeIndex(node), k)
}

func drawCase(t *rapid.T, o Options) *Case {
	c := &Case{Cluster: drawCluster(t, o), PodStates: map[string]PodState{}}
	b := &book{c: c.Cluster}
	nsvc := rapid.IntRange(1, o.MaxServices).Draw(t, "services")
	var apps []string
	for i := 0; i < nsvc; i++ {
		name := fmt.Sprintf("svc-%d", i)
		svc := drawService(t, c.Cluster, "default/"+name, i, o, apps)
		c.Services = append(c.Services, svc)
		if svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		if svc.Spec.Selector != nil {
			app := svc.Spec.Selector["app"]
			if app != name {
				continue // shares another service's pods
			}
			apps = append(apps, app)
			pods, states := drawPods(t, b, svc, o, true)
			c.Pods = append(c.Pods, pods...)
			for k, v := range states {
				c.PodStates[k] = v
			}
			continue
		}
		pods, _ := drawPods(t, b, svc, o, false)
		c.Pods = append(c.Pods, pods...)
		c.Slices = append(c.Slices, drawSlices(t, c.Cluster, svc, pods)...)
	}
	nc := rapid.IntRange(1, o.MaxClients).Draw(t, "clients")
	for i := 0; i < nc; i++ {
		node := rapid.SampledFrom(nodeNamesOf(c.Cluster)).Draw(t, "clientNode")
		c.Pods = append(c.Pods, newPod(b, fmt.Sprintf("default/client-%d", i), node, nil, nil))
	}
	ne := rapid.IntRange(1, len(Externals)).Draw(t, "externals")
	c.Externals = append(c.Externals, Externals[:ne]...)
	if !o.NoSteps || o.Faults {
		c.Steps = drawSteps(t, c, o)
	}
	return c
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

// Service draws one Service named key (ns/name) for cluster c: of one of o.Kinds, with
// one or two ports (TCP or UDP, named when there are two, targetPort defaulted, a
// number or a name), ClientIP affinity, internal and external traffic policies,
// externalIPs (192.0.2.(10+index)), loadBalancerSourceRanges and, in a dual-stack
// cluster, an IP family policy. Its selector is app=<name>, or one of apps (a selector
// shared with earlier services), or none (a selectorless service; draw its slices with
// Slices). Cluster IPs and node ports are left to the API server.
func Service(c ClusterSpec, key string, index int, o Options, apps []string) *rapid.Generator[*corev1.Service] {
	o = o.withDefaults()
	return rapid.Custom(func(t *rapid.T) *corev1.Service { return drawService(t, c, key, index, o, apps) })
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

// Pods draws the pods behind svc: up to MaxEndpointPods, on any node, labelled with the
// service's selector (labelled says so; pods for selectorless services carry no
// labels), each with a container port for every service port (named ones under their
// targetPort's name; now and then a pod lacks a named port, as real pods do), ready,
// not ready, or terminating. Addresses come from the book so that they are known
// before the cluster runs.
func drawPods(t *rapid.T, b *book, svc *corev1.Service, o Options, labelled bool) ([]*corev1.Pod, map[string]PodState) {
	n := rapid.IntRange(0, o.MaxEndpointPods).Draw(t, "endpointPods")
	states := map[string]PodState{}
	var pods []*corev1.Pod
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("%s/%s-%d", svc.Namespace, svc.Name, i)
		node := rapid.SampledFrom(nodeNamesOf(b.c)).Draw(t, "podNode")
		var cps []corev1.ContainerPort
		seen := map[string]bool{}
		for _, sp := range svc.Spec.Ports {
			num, name := targetOf(sp)
			if name != "" {
				if !labelled || rapid.IntRange(0, 4).Draw(t, "lacksNamedPort") < 4 {
					num = rapid.SampledFrom(targetNumbers).Draw(t, "namedPortNumber")
				} else {
					continue
				}
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
			cps = append(cps, corev1.ContainerPort{Name: name, ContainerPort: num, Protocol: protoOr(sp.Protocol)})
		}
		var labels map[string]string
		if labelled {
			labels = map[string]string{"app": svc.Spec.Selector["app"]}
			states[key] = rapid.SampledFrom([]PodState{PodReady, PodNotReady, PodTerminating, PodTerminatingNotReady}).Draw(t, "podState")
		}
		pods = append(pods, newPod(b, key, node, labels, cps))
	}
	return pods, states
}

func newPod(b *book, key, node string, labels map[string]string, ports []corev1.ContainerPort) *corev1.Pod {
	pod := service.NewPod(key, service.OnNode(node))
	pod.Labels = labels
	pod.Spec.Containers[0].Ports = ports
	for _, ip := range b.podIPs(node) {
		pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip.String()})
	}
	pod.Status.PodIP = pod.Status.PodIPs[0].IP
	return pod
}

// sliceManager labels the EndpointSlices the generator writes by hand.
const sliceManager = "proptest.clusterlab.io"

// Slices draws hand-written EndpointSlices for a selectorless svc whose endpoints are
// pods (addresses known): per address family of the service, the endpoints spread over
// one or two slices, each with drawn conditions (unset = ready, ready, not ready,
// serving and terminating, terminating and not serving) and, mostly, its pod's node.
func Slices(c ClusterSpec, svc *corev1.Service, pods []*corev1.Pod) *rapid.Generator[[]*discoveryv1.EndpointSlice] {
	return rapid.Custom(func(t *rapid.T) []*discoveryv1.EndpointSlice { return drawSlices(t, c, svc, pods) })
}

func drawSlices(t *rapid.T, c ClusterSpec, svc *corev1.Service, pods []*corev1.Pod) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, fam := range serviceFamilies(c, svc) {
		nslices := rapid.IntRange(1, 2).Draw(t, "slices")
		addrType := discoveryv1.AddressTypeIPv4
		if fam == corev1.IPv6Protocol {
			addrType = discoveryv1.AddressTypeIPv6
		}
		var slices []*discoveryv1.EndpointSlice
		for i := 0; i < nslices; i++ {
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
			if name != "" || num == 0 {
				num = targetNumbers[0]
				if len(pods) > 0 {
					if n := containerPort(pods[0], sp); n != 0 {
						num = n
					}
				}
			} else if len(pods) > 0 {
				if n := containerPort(pods[0], sp); n != 0 {
					num = n
				}
			}
			pname, proto, port := sp.Name, protoOr(sp.Protocol), num
			for _, sl := range slices {
				sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: &pname, Protocol: &proto, Port: &port})
			}
		}
		for _, pod := range pods {
			addr := podAddr(pod, fam)
			if !addr.IsValid() {
				continue
			}
			sl := slices[rapid.IntRange(0, nslices-1).Draw(t, "slice")]
			ep := discoveryv1.Endpoint{Addresses: []string{addr.String()}}
			switch rapid.SampledFrom([]string{"unset", "ready", "not-ready", "serving-terminating", "terminating"}).Draw(t, "conditions") {
			case "ready":
				ep.Conditions = conditions(true, true, false)
			case "not-ready":
				ep.Conditions = conditions(false, false, false)
			case "serving-terminating":
				ep.Conditions = conditions(false, true, true)
			case "terminating":
				ep.Conditions = conditions(false, false, true)
			}
			if rapid.IntRange(0, 4).Draw(t, "noNodeName") < 4 {
				node := pod.Spec.NodeName
				ep.NodeName = &node
			}
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name}
			sl.Endpoints = append(sl.Endpoints, ep)
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

// drawSteps draws up to two changes (and, with o.Faults, a fault) made after creation.
func drawSteps(t *rapid.T, c *Case, o Options) []Step {
	kinds := []StepKind{}
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
	n := rapid.IntRange(0, max).Draw(t, "steps")
	var steps []Step
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
	nodes := nodeNamesOf(c.Cluster)
	for i := 0; i < n; i++ {
		k := rapid.SampledFrom(kinds).Draw(t, "step")
		switch k {
		case StepDeletePod, StepSetReady:
			if len(pods) == 0 {
				continue
			}
			s := Step{Kind: k, Target: rapid.SampledFrom(pods).Draw(t, "stepPod")}
			if k == StepDeletePod {
				s.Grace = rapid.SampledFrom([]time.Duration{0, TerminationGrace}).Draw(t, "grace")
			} else {
				s.Ready = rapid.Bool().Draw(t, "ready")
			}
			steps = append(steps, s)
		case StepDeleteService, StepToExternalName:
			if len(svcs) == 0 {
				continue
			}
			steps = append(steps, Step{Kind: k, Target: rapid.SampledFrom(svcs).Draw(t, "stepService")})
		case StepAdvance:
			steps = append(steps, Step{Kind: k, Duration: rapid.SampledFrom([]time.Duration{time.Second, time.Minute, time.Hour}).Draw(t, "advance")})
		case StepPauseProxy, StepKillNode, StepLinkLoss:
			if k == StepKillNode && len(nodes) < 2 {
				continue
			}
			s := Step{Kind: k, Target: rapid.SampledFrom(nodes).Draw(t, "stepNode")}
			if k == StepLinkLoss {
				s.Loss = 0.5
			}
			steps = append(steps, s)
		case StepPartition:
			cut := rapid.IntRange(0, len(nodes)-1).Draw(t, "partitionAt")
			groups := [][]string{append([]string(nil), nodes[:cut]...), append([]string(nil), nodes[cut:]...)}
			groups[0] = append(groups[0], "external")
			steps = append(steps, Step{Kind: k, Groups: groups})
		}
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
