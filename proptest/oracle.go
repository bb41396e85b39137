package proptest

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/clusterlab/clusterlab/proxy"
)

// This file is the checkers' oracle: what kube-proxy should do with a service port,
// computed from the store's objects by the rules of the Kubernetes docs and kube-proxy
// (written here independently of package proxy, so that the two can disagree).

// Endpoint is one endpoint of a service port, as kube-proxy reads EndpointSlices: the
// first address, conditions with unset ones defaulted (ready and serving true,
// terminating false), entries for the same address and port collapsed (a
// non-terminating one wins).
type Endpoint struct {
	Addr                        netip.AddrPort
	Ready, Serving, Terminating bool
	Node                        string // nodeName ("" if unset)
	Pod                         string // the running pod at the address ("" if none)
}

func (e Endpoint) String() string {
	s := e.Addr.String()
	var extra []string
	if e.Pod != "" {
		extra = append(extra, "pod "+e.Pod)
	} else {
		extra = append(extra, "no pod")
	}
	if e.Node != "" {
		extra = append(extra, "node "+e.Node)
	}
	switch {
	case e.Ready:
	case e.Serving && e.Terminating:
		extra = append(extra, "serving, terminating")
	case e.Terminating:
		extra = append(extra, "terminating, not serving")
	default:
		extra = append(extra, "not ready")
	}
	return s + " (" + strings.Join(extra, ", ") + ")"
}

// PortView is one port of one Service in one IP family, with its addresses and
// endpoints.
type PortView struct {
	Service         *corev1.Service
	Port            corev1.ServicePort
	Family          corev1.IPFamily
	ClusterIP       netip.Addr   // invalid for headless services
	ExternalIPs     []netip.Addr // of this family
	LoadBalancerIPs []netip.Addr // ingress IPs of this family that kube-proxy handles (ipMode VIP)
	// ProxiedLoadBalancerIPs are ingress IPs with ipMode Proxy: the load balancer
	// delivers to node ports itself.
	ProxiedLoadBalancerIPs []netip.Addr
	Endpoints              []Endpoint // every endpoint, sorted by address
}

// V6 reports whether the view is of the IPv6 family.
func (v PortView) V6() bool { return v.Family == corev1.IPv6Protocol }

// Key names the service port: "ns/name:port (80/TCP, IPv4)".
func (v PortView) Key() string {
	name := v.Service.Namespace + "/" + v.Service.Name
	if v.Port.Name != "" {
		name += ":" + v.Port.Name
	}
	return fmt.Sprintf("%s (%d/%s, %s)", name, v.Port.Port, protoOr(v.Port.Protocol), v.Family)
}

// Name is "ns/name".
func (v PortView) Name() string { return v.Service.Namespace + "/" + v.Service.Name }

// ClusterEndpoints are the endpoints any node uses for cluster-wide traffic: the ready
// ones, or, when none is ready, the serving terminating ones.
func (v PortView) ClusterEndpoints() []Endpoint {
	if r := v.filter(func(e Endpoint) bool { return e.Ready }); len(r) > 0 {
		return r
	}
	return v.filter(func(e Endpoint) bool { return e.Serving && e.Terminating })
}

// LocalEndpoints are the endpoints node uses for node-local traffic: its ready ones, or,
// when none is ready, its serving terminating ones.
func (v PortView) LocalEndpoints(node string) []Endpoint {
	if r := v.filter(func(e Endpoint) bool { return e.Ready && e.Node == node }); len(r) > 0 {
		return r
	}
	return v.filter(func(e Endpoint) bool { return e.Serving && e.Terminating && e.Node == node })
}

// HasEndpoints reports whether the port has any usable endpoint anywhere (ready, or
// serving and terminating). Without one, kube-proxy rejects its traffic.
func (v PortView) HasEndpoints() bool { return len(v.ClusterEndpoints()) > 0 }

// InternalTrafficLocal reports whether internalTrafficPolicy is Local.
func (v PortView) InternalTrafficLocal() bool {
	p := v.Service.Spec.InternalTrafficPolicy
	return p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal
}

// ExternalTrafficLocal reports whether externalTrafficPolicy is Local (only meaningful
// for externally reachable services).
func (v PortView) ExternalTrafficLocal() bool {
	return v.Service.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && v.ExternallyReachable()
}

// ExternallyReachable reports whether the port has a node port, an external IP or a
// load-balancer IP.
func (v PortView) ExternallyReachable() bool {
	return v.Port.NodePort != 0 || len(v.ExternalIPs) > 0 || len(v.LoadBalancerIPs) > 0
}

// Affinity returns the ClientIP affinity timeout in seconds (0 without affinity).
func (v PortView) Affinity() int32 {
	s := v.Service.Spec
	if s.SessionAffinity != corev1.ServiceAffinityClientIP {
		return 0
	}
	if s.SessionAffinityConfig != nil && s.SessionAffinityConfig.ClientIP != nil && s.SessionAffinityConfig.ClientIP.TimeoutSeconds != nil {
		return *s.SessionAffinityConfig.ClientIP.TimeoutSeconds
	}
	return proxy.DefaultStickyMaxAgeSeconds
}

func (v PortView) filter(f func(Endpoint) bool) []Endpoint {
	var out []Endpoint
	for _, e := range v.Endpoints {
		if f(e) {
			out = append(out, e)
		}
	}
	return out
}

// Expect is what kube-proxy does with a new connection: deliver to one of Endpoints,
// or, when there are none, Verdict (ResultRefused for kube-proxy's REJECT,
// ResultDropped for its DROP), for the Reason given.
type Expect struct {
	Endpoints []Endpoint
	Verdict   string
	Reason    string
	// Why classifies an expectation without endpoints (WhyNoEndpoints,
	// WhyNoLocalEndpoints), so that a mode's Semantics can say what it does instead.
	Why string
	// Fallback are the cluster endpoints a mode that ignores a traffic policy of Local
	// without local endpoints uses instead (IPVS, kubernetes#97081).
	Fallback []Endpoint
	// External marks an expectation for outside traffic (externalTrafficPolicy).
	External bool
	// MayDrop tolerates lost packets (outside traffic sent to another node's endpoint
	// without masquerading: the kernel may drop it as a martian, or its reply).
	MayDrop bool
}

// Why values.
const (
	WhyNoEndpoints      = "no-endpoints"
	WhyNoLocalEndpoints = "no-local-endpoints"
)

func (e Expect) String() string {
	if len(e.Endpoints) == 0 {
		return e.Verdict + " (" + e.Reason + ")"
	}
	var eps []string
	for _, ep := range e.Endpoints {
		eps = append(eps, ep.String())
	}
	return "delivered to one of " + e.Reason + ": " + strings.Join(eps, "; ")
}

// Has reports whether addr is one of the expected endpoints.
func (e Expect) Has(addr netip.AddrPort) bool {
	for _, ep := range e.Endpoints {
		if ep.Addr == addr {
			return true
		}
	}
	return false
}

// Internal is what a new connection to the cluster IP from a source on node gets.
func (v PortView) Internal(node string) Expect {
	if !v.HasEndpoints() {
		return Expect{Verdict: "refused", Reason: "the service port has no endpoints", Why: WhyNoEndpoints}
	}
	if v.InternalTrafficLocal() {
		if eps := v.LocalEndpoints(node); len(eps) > 0 {
			return Expect{Endpoints: eps, Reason: "the endpoints on " + node + " (internalTrafficPolicy Local)"}
		}
		e := Expect{Verdict: "dropped", Reason: "internalTrafficPolicy Local and no endpoint on " + node, Why: WhyNoLocalEndpoints}
		if v.ExternallyReachable() {
			// kube-proxy keeps the cluster endpoint set only for ports that also take
			// outside traffic (CategorizeEndpoints' usesCluster).
			e.Fallback = v.ClusterEndpoints()
		}
		return e
	}
	return Expect{Endpoints: v.ClusterEndpoints(), Reason: readyOrTerminating(v.ClusterEndpoints())}
}

// External is what a new connection from outside the cluster to a node port (or a
// load-balancer IP handled by kube-proxy) on node gets.
func (v PortView) External(node string) Expect {
	if !v.HasEndpoints() {
		return Expect{Verdict: "refused", Reason: "the service port has no endpoints", Why: WhyNoEndpoints}
	}
	if v.ExternalTrafficLocal() {
		if eps := v.LocalEndpoints(node); len(eps) > 0 {
			return Expect{Endpoints: eps, Reason: "the endpoints on " + node + " (externalTrafficPolicy Local)"}
		}
		return Expect{Verdict: "dropped", Reason: "externalTrafficPolicy Local and no endpoint on " + node, Why: WhyNoLocalEndpoints, Fallback: v.ClusterEndpoints(), External: true}
	}
	return Expect{Endpoints: v.ClusterEndpoints(), Reason: readyOrTerminating(v.ClusterEndpoints())}
}

func readyOrTerminating(eps []Endpoint) string {
	if len(eps) > 0 && !eps[0].Ready {
		return "the serving terminating endpoints (none is ready)"
	}
	return "the ready endpoints"
}

// ServicePorts returns a view of every port of every Service with a cluster IP or
// endpoints, in each of its families, from the store as it is now. Headless services
// are included (ClusterIP invalid); ExternalName services are not.
func (w *World) ServicePorts() []PortView {
	st := w.Cluster.Store()
	pods := map[netip.Addr]string{}
	for _, p := range w.Cluster.Pods() {
		if p.HostNetwork() || !p.Alive() {
			continue
		}
		for _, a := range p.IPs() {
			pods[a] = p.Key()
		}
	}
	var out []PortView
	for _, svc := range st.ListServices() {
		if svc.Spec.Type == corev1.ServiceTypeExternalName || svc.Namespace == "default" && svc.Name == "kubernetes" {
			continue
		}
		slices := st.EndpointSlicesFor(svc.Namespace, svc.Name)
		fams := svc.Spec.IPFamilies
		for fi, fam := range fams {
			for _, sp := range svc.Spec.Ports {
				v := PortView{Service: svc, Port: sp, Family: fam}
				if fi < len(svc.Spec.ClusterIPs) {
					if a, err := netip.ParseAddr(svc.Spec.ClusterIPs[fi]); err == nil {
						v.ClusterIP = a
					}
				}
				for _, s := range svc.Spec.ExternalIPs {
					if a, err := netip.ParseAddr(s); err == nil && a.Is6() == (fam == corev1.IPv6Protocol) {
						v.ExternalIPs = append(v.ExternalIPs, a)
					}
				}
				for _, ing := range svc.Status.LoadBalancer.Ingress {
					a, err := netip.ParseAddr(ing.IP)
					if err != nil || a.Is6() != (fam == corev1.IPv6Protocol) {
						continue
					}
					if ing.IPMode != nil && *ing.IPMode == corev1.LoadBalancerIPModeProxy {
						v.ProxiedLoadBalancerIPs = append(v.ProxiedLoadBalancerIPs, a)
					} else {
						v.LoadBalancerIPs = append(v.LoadBalancerIPs, a)
					}
				}
				v.Endpoints = endpointsOf(slices, sp, fam, pods)
				out = append(out, v)
			}
		}
	}
	return out
}

func endpointsOf(slices []*discoveryv1.EndpointSlice, sp corev1.ServicePort, fam corev1.IPFamily, pods map[netip.Addr]string) []Endpoint {
	want := discoveryv1.AddressTypeIPv4
	if fam == corev1.IPv6Protocol {
		want = discoveryv1.AddressTypeIPv6
	}
	byAddr := map[netip.AddrPort]Endpoint{}
	for _, s := range slices {
		if s.AddressType != want {
			continue
		}
		var port int32
		found := false
		for _, p := range s.Ports {
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			proto := corev1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			if name == sp.Name && proto == protoOr(sp.Protocol) && p.Port != nil {
				port, found = *p.Port, true
				break
			}
		}
		if !found {
			continue
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 0 {
				continue
			}
			a, err := netip.ParseAddr(e.Addresses[0])
			if err != nil {
				continue
			}
			ep := Endpoint{Addr: netip.AddrPortFrom(a, uint16(port)), Ready: true, Serving: true, Pod: pods[a]}
			if e.Conditions.Ready != nil {
				ep.Ready = *e.Conditions.Ready
			}
			if e.Conditions.Serving != nil {
				ep.Serving = *e.Conditions.Serving
			}
			if e.Conditions.Terminating != nil {
				ep.Terminating = *e.Conditions.Terminating
			}
			if e.NodeName != nil {
				ep.Node = *e.NodeName
			}
			if old, dup := byAddr[ep.Addr]; dup && !old.Terminating {
				continue
			}
			byAddr[ep.Addr] = ep
		}
	}
	out := make([]Endpoint, 0, len(byAddr))
	for _, e := range byAddr {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr.String() < out[j].Addr.String() })
	return out
}
