package proptest

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ProxyFor builds the proxy of every node of a case's cluster. The case carries
// kube-proxy flags (--nodeport-addresses) that a proxy should honour.
type ProxyFor func(c ClusterSpec) cluster.ProxyFactory

// KubeProxy is kube-proxy's mode (kubeproxy.IPTables, ...) with the case's flags.
func KubeProxy(mode kubeproxy.Mode) ProxyFor {
	return func(c ClusterSpec) cluster.ProxyFactory {
		return kubeproxy.Factory(kubeproxy.Options{Mode: mode, Node: c.KubeProxyFlags})
	}
}

// KubeProxyFlags sets the case's kube-proxy flags in a node's configuration (use it as
// kubeproxy.Options.Node when building a factory by hand).
func (c ClusterSpec) KubeProxyFlags(nc *proxy.NodeConfig) {
	nc.NodePortAddresses = append([]string(nil), c.NodePortAddresses...)
}

// World is a case running on a simulated cluster: the network, the store, and what the
// checkers need to remember about the steps (addresses that stopped being service
// VIPs, pods that were deleted).
type World struct {
	Case    *Case
	Cluster *cluster.Cluster
	// Mode labels the proxy in messages ("iptables", "my-cni", ...).
	Mode string
	// Semantics are the proxy's behaviours that checkers allow for (kube-proxy's
	// iptables mode by default).
	Semantics Semantics
	// FormerVIPs are cluster IPs that services gave up (deleted, turned ExternalName),
	// with the ports they had, keyed by address.
	FormerVIPs map[netip.Addr]FormerVIP
	// DeletedPods are the addresses of pods deleted (at once) by steps or checkers.
	DeletedPods map[netip.Addr]string
	// Notes record steps that did nothing (a pod already gone, say).
	Notes []string

	// idle marks the case's steps (by index) that found nothing to change: the
	// scenario leaves them out.
	idle map[int]bool

	paused map[string]bool
	killed map[string]bool
	// created are the services as the API server allocated them, before any step.
	created map[string]*corev1.Service
}

// FormerVIP is an address a service held.
type FormerVIP struct {
	Service string
	Ports   []corev1.ServicePort
}

// Build runs a case: it makes the cluster (proxy from proxy; kube-proxy's reference
// mode, iptables, if nil), creates external hosts, services, pods (each started by the simulated
// kubelet at its generated address, readiness and termination as the case says) and
// hand-written EndpointSlices, then applies the steps. Close the world when done.
func Build(c *Case, proxyFor ProxyFor) (*World, error) {
	mode := ""
	if proxyFor == nil {
		ref := kubeproxy.Reference().Mode
		proxyFor, mode = KubeProxy(ref), string(ref)
	}
	cfg := cluster.Config{
		Seed:             c.Cluster.Seed,
		ManualClock:      true,
		LoadBalancerMode: c.Cluster.LoadBalancerMode,
		NodeCIDRs:        []netip.Prefix{NodeCIDR4},
		ClusterCIDRs:     []netip.Prefix{ClusterCIDR4},
		ServiceCIDRs:     []netip.Prefix{ServiceCIDR4},
		ExternalCIDR:     ExternalCIDR,
		Proxy:            proxyFor(c.Cluster),
	}
	if c.Cluster.DualStack {
		cfg.NodeCIDRs = append(cfg.NodeCIDRs, NodeCIDR6)
		cfg.ClusterCIDRs = append(cfg.ClusterCIDRs, ClusterCIDR6)
		cfg.ServiceCIDRs = append(cfg.ServiceCIDRs, ServiceCIDR6)
	}
	for _, n := range c.Cluster.Nodes {
		nc := cluster.NodeConfig{Name: n.Name, Zone: n.Zone}
		if c.Cluster.NoHairpin {
			st := netsim.DefaultNodeSettings()
			st.Hairpin = false
			nc.Settings = &st
		}
		cfg.Nodes = append(cfg.Nodes, nc)
	}
	cl, err := cluster.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("proptest: cluster: %w", err)
	}
	w := &World{Case: c, Cluster: cl, Mode: mode, Semantics: IPTablesSemantics,
		FormerVIPs: map[netip.Addr]FormerVIP{}, DeletedPods: map[netip.Addr]string{},
		paused: map[string]bool{}, killed: map[string]bool{}, idle: map[int]bool{}}
	if err := w.populate(); err != nil {
		cl.Close()
		return nil, err
	}
	return w, nil
}

func (w *World) populate() error {
	c, cl := w.Case, w.Cluster
	for _, e := range c.Externals {
		if _, err := cl.AddExternalHost(e.Name, e.IP); err != nil {
			return fmt.Errorf("proptest: external host %s: %w", e.Name, err)
		}
	}
	var objs []runtime.Object
	for _, s := range c.Services {
		objs = append(objs, s.DeepCopy())
	}
	if err := cl.Apply(objs...); err != nil {
		return fmt.Errorf("proptest: services: %w", err)
	}
	for _, p := range c.Pods {
		pod := p.DeepCopy()
		st := c.State(p.Namespace + "/" + p.Name)
		if st == PodNotReady || st == PodTerminatingNotReady {
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[cluster.AnnotationReady] = "false"
		}
		if _, err := cl.CreatePod(pod); err != nil {
			return fmt.Errorf("proptest: pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	objs = objs[:0]
	for _, s := range c.Slices {
		objs = append(objs, s.DeepCopy())
	}
	if len(objs) > 0 {
		if err := cl.Apply(objs...); err != nil {
			return fmt.Errorf("proptest: endpoint slices: %w", err)
		}
	}
	for _, p := range c.Pods {
		if st := c.State(p.Namespace + "/" + p.Name); st == PodTerminating || st == PodTerminatingNotReady {
			if err := cl.DeletePod(p.Namespace, p.Name, TerminationGrace); err != nil {
				return fmt.Errorf("proptest: terminate pod %s/%s: %w", p.Namespace, p.Name, err)
			}
		}
	}
	w.created = map[string]*corev1.Service{}
	for _, s := range cl.Store().ListServices() {
		w.created[s.Namespace+"/"+s.Name] = s.DeepCopy()
	}
	for i, s := range c.Steps {
		changed, err := w.apply(s)
		if err != nil {
			return fmt.Errorf("proptest: step %d (%s): %w", i+1, s, err)
		}
		if !changed {
			w.idle[i] = true
		}
	}
	if errs := cl.Errors(); len(errs) > 0 {
		return fmt.Errorf("proptest: the cluster reported errors: %w", errors.Join(errs...))
	}
	return nil
}

// Close stops the simulation.
func (w *World) Close() { w.Cluster.Close() }

// Apply makes one change to the running world (a case's step, or a checker's own). A
// step that finds nothing to change (a pod or service already gone) does nothing and
// leaves a note.
func (w *World) Apply(s Step) error {
	_, err := w.apply(s)
	return err
}

// apply is Apply, reporting whether the step changed anything.
func (w *World) apply(s Step) (changed bool, err error) {
	cl := w.Cluster
	st := cl.Store()
	switch s.Kind {
	case StepDeletePod:
		ns, name := splitKey(s.Target)
		pod, ok := st.GetPod(ns, name)
		if !ok {
			w.Notes = append(w.Notes, s.String()+": no such pod")
			return false, nil
		}
		if s.Grace == 0 {
			for _, ip := range pod.Status.PodIPs {
				if a, err := netip.ParseAddr(ip.IP); err == nil {
					w.DeletedPods[a] = s.Target
				}
			}
		}
		return true, cl.DeletePod(ns, name, s.Grace)
	case StepSetReady:
		ns, name := splitKey(s.Target)
		if _, ok := st.GetPod(ns, name); !ok {
			w.Notes = append(w.Notes, s.String()+": no such pod")
			return false, nil
		}
		return true, cl.SetPodReady(ns, name, s.Ready)
	case StepDeleteService, StepToExternalName:
		ns, name := splitKey(s.Target)
		svc, ok := st.GetService(ns, name)
		if !ok || svc.Spec.Type == corev1.ServiceTypeExternalName {
			w.Notes = append(w.Notes, s.String()+": no such service")
			return false, nil
		}
		w.rememberVIPs(svc)
		if s.Kind == StepDeleteService {
			return true, st.Delete(service.KindService, ns, name)
		}
		_, err = st.Update(toExternalName(svc))
		return true, err
	case StepAdvance:
		cl.Clock().Advance(s.Duration)
		return true, nil
	case StepPartition:
		return true, cl.Partition(s.Groups...)
	case StepKillNode:
		w.killed[s.Target] = true
		return true, cl.KillNode(s.Target)
	case StepPauseProxy:
		n := cl.Node(s.Target)
		if n == nil {
			return false, fmt.Errorf("no node %q", s.Target)
		}
		w.paused[s.Target] = true
		n.PauseProxy()
		return true, nil
	case StepLinkLoss:
		n := cl.Node(s.Target)
		if n == nil {
			return false, fmt.Errorf("no node %q", s.Target)
		}
		n.Uplink().SetFaults(netsim.LinkFaults{Loss: s.Loss})
		return true, nil
	}
	return false, fmt.Errorf("unknown step kind %q", s.Kind)
}

// toExternalName returns svc turned into an ExternalName service, with what the API
// server requires cleared (cluster IPs, families, node ports, policies).
func toExternalName(svc *corev1.Service) *corev1.Service {
	n := svc.DeepCopy()
	s := &n.Spec
	s.Type = corev1.ServiceTypeExternalName
	s.ExternalName = "moved.example.com"
	s.ClusterIP, s.ClusterIPs, s.IPFamilies, s.IPFamilyPolicy = "", nil, nil, nil
	s.Selector = nil
	s.ExternalIPs = nil
	s.ExternalTrafficPolicy = ""
	s.InternalTrafficPolicy = nil
	s.HealthCheckNodePort = 0
	s.LoadBalancerSourceRanges = nil
	s.AllocateLoadBalancerNodePorts = nil
	s.LoadBalancerClass = nil
	s.SessionAffinity = corev1.ServiceAffinityNone
	s.SessionAffinityConfig = nil
	s.PublishNotReadyAddresses = false
	for i := range s.Ports {
		s.Ports[i].NodePort = 0
	}
	n.Status = corev1.ServiceStatus{}
	return n
}

func (w *World) rememberVIPs(svc *corev1.Service) {
	for _, ip := range svc.Spec.ClusterIPs {
		if a, err := netip.ParseAddr(ip); err == nil {
			w.FormerVIPs[a] = FormerVIP{Service: svc.Namespace + "/" + svc.Name, Ports: append([]corev1.ServicePort(nil), svc.Spec.Ports...)}
		}
	}
}

func splitKey(key string) (string, string) {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[:i], key[i+1:]
	}
	return "default", key
}

// NodeDown reports whether a step killed the node.
func (w *World) NodeDown(node string) bool { return w.killed[node] }

// ProxyPaused reports whether a step paused the node's proxy (its rules may be stale).
func (w *World) ProxyPaused(node string) bool { return w.paused[node] }

// Faulty reports whether the case has faults: checkers then tolerate lost traffic.
func (w *World) Faulty() bool { return w.Case.Faulty() }

// Source is a place probes start from.
type Source struct {
	// From is the probe's From ("pod:ns/name", "node:NAME", "external:NAME").
	From string
	// Node is the node the source is on ("" for external hosts).
	Node string
	// Addrs are its addresses.
	Addrs []netip.Addr
}

// Addr returns the source's address of fam's family, if it has one.
func (s Source) Addr(v6 bool) (netip.Addr, bool) {
	for _, a := range s.Addrs {
		if a.Is6() == v6 {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// PodSources returns every running pod on a live node whose proxy is current.
func (w *World) PodSources() []Source {
	var out []Source
	for _, p := range w.Cluster.Pods() {
		node := p.Node().Name()
		if !p.Alive() || w.killed[node] {
			continue
		}
		out = append(out, Source{From: "pod:" + p.Key(), Node: node, Addrs: p.IPs()})
	}
	return out
}

// NodeSources returns every live node's host network.
func (w *World) NodeSources() []Source {
	var out []Source
	for _, n := range w.Cluster.Nodes() {
		if w.killed[n.Name()] {
			continue
		}
		out = append(out, Source{From: "node:" + n.Name(), Node: n.Name(), Addrs: n.IPs()})
	}
	return out
}

// ExternalSources returns the external hosts.
func (w *World) ExternalSources() []Source {
	var out []Source
	for _, e := range w.Case.Externals {
		if h := w.Cluster.ExternalHost(e.Name); h != nil {
			out = append(out, Source{From: "external:" + e.Name, Addrs: []netip.Addr{h.IP()}})
		}
	}
	return out
}

// Sources returns every probe source as a probe's From.
func (w *World) Sources() []string {
	var out []string
	for _, s := range append(append(w.PodSources(), w.NodeSources()...), w.ExternalSources()...) {
		out = append(out, s.From)
	}
	return out
}

// Target is an address traffic can be sent to.
type Target struct {
	Kind    string // "cluster-ip", "external-ip", "load-balancer", "node-port", "pod"
	Service string // ns/name (pods: the pod)
	Port    string // the service port's name
	Proto   uint8
	Dst     netip.AddrPort
}

func (t Target) String() string {
	return fmt.Sprintf("%s %s %s/%s", t.Kind, t.Service, t.Dst, netsim.ProtoName(t.Proto))
}

// Targets lists every service address of the world (cluster IPs, external IPs,
// load-balancer IPs, NodePorts on every node address) and every pod's container ports.
func (w *World) Targets() []Target {
	var out []Target
	for _, v := range w.ServicePorts() {
		svc := v.Service.Namespace + "/" + v.Service.Name
		proto := protoNum(v.Port.Protocol)
		add := func(kind string, a netip.Addr, port int32) {
			out = append(out, Target{Kind: kind, Service: svc, Port: v.Port.Name, Proto: proto, Dst: netip.AddrPortFrom(a, uint16(port))})
		}
		if v.ClusterIP.IsValid() {
			add("cluster-ip", v.ClusterIP, v.Port.Port)
		}
		for _, a := range v.ExternalIPs {
			add("external-ip", a, v.Port.Port)
		}
		for _, a := range v.LoadBalancerIPs {
			add("load-balancer", a, v.Port.Port)
		}
		if v.Port.NodePort != 0 {
			for _, n := range w.Cluster.Nodes() {
				for _, a := range n.IPs() {
					if a.Is6() == v.V6() {
						add("node-port", a, v.Port.NodePort)
					}
				}
			}
		}
	}
	for _, p := range w.Cluster.Store().ListPods() {
		for _, ct := range p.Spec.Containers {
			for _, cp := range ct.Ports {
				for _, ip := range p.Status.PodIPs {
					a, err := netip.ParseAddr(ip.IP)
					if err != nil {
						continue
					}
					out = append(out, Target{Kind: "pod", Service: p.Namespace + "/" + p.Name, Port: cp.Name, Proto: protoNum(cp.Protocol), Dst: netip.AddrPortFrom(a, uint16(cp.ContainerPort))})
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func protoNum(p corev1.Protocol) uint8 {
	switch p {
	case corev1.ProtocolUDP:
		return netfilter.ProtoUDP
	case corev1.ProtocolSCTP:
		return netfilter.ProtoSCTP
	}
	return netfilter.ProtoTCP
}

// podAt returns the running pod that owns addr ("" if none).
func (w *World) podAt(a netip.Addr) string {
	for _, p := range w.Cluster.Pods() {
		if p.HostNetwork() {
			continue
		}
		for _, ip := range p.IPs() {
			if ip == a {
				return p.Key()
			}
		}
	}
	return ""
}
