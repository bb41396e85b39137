package proxy

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilnet "k8s.io/utils/net"
)

// DefaultStickyMaxAgeSeconds is the ClientIP affinity timeout the API server fills in
// when sessionAffinityConfig.clientIP.timeoutSeconds is unset (3 hours).
const DefaultStickyMaxAgeSeconds = 10800

// ServicePortName identifies one port of one Service: namespace, name, port name and
// protocol. It is the key of ServicePortMap and EndpointsMap, as in kube-proxy.
type ServicePortName struct {
	types.NamespacedName
	Port     string
	Protocol corev1.Protocol
}

// String returns "namespace/name:port", or "namespace/name" for an unnamed port. The
// protocol is not part of it; this is the string kube-proxy hashes into chain names and
// writes into rule comments.
func (n ServicePortName) String() string {
	if n.Port == "" {
		return n.Namespace + "/" + n.Name
	}
	return n.Namespace + "/" + n.Name + ":" + n.Port
}

// Less orders service port names by namespace, name, port name and protocol. Every proxy
// mode in this module walks services in this order so its output is deterministic
// (kube-proxy walks a Go map, so its order differs from run to run).
func (n ServicePortName) Less(o ServicePortName) bool {
	if n.Namespace != o.Namespace {
		return n.Namespace < o.Namespace
	}
	if n.Name != o.Name {
		return n.Name < o.Name
	}
	if n.Port != o.Port {
		return n.Port < o.Port
	}
	return n.Protocol < o.Protocol
}

// ServicePort is kube-proxy's view of one Service port for one IP family (its
// BaseServicePortInfo): only the addresses of that family, policies resolved.
type ServicePort struct {
	Name ServicePortName
	// Type is the Service's spec.type (informational; the fields below carry its effect).
	Type corev1.ServiceType
	// ClusterIP is the Service's cluster IP of this family.
	ClusterIP  netip.Addr
	Port       int
	Protocol   corev1.Protocol
	TargetPort intstr.IntOrString
	// NodePort is 0 when the port has none.
	NodePort int
	// ExternalIPs are spec.externalIPs of this family, in spec order.
	ExternalIPs []netip.Addr
	// LoadBalancerVIPs are status.loadBalancer.ingress[].ip of this family whose ipMode
	// is VIP or unset, in status order. Proxy-mode ingress IPs get no rules (unless the
	// node's release has the LoadBalancerIPMode gate off: then every ingress IP).
	LoadBalancerVIPs []netip.Addr
	// LoadBalancerSourceRanges are spec.loadBalancerSourceRanges of this family, trimmed
	// and in network form. A zero-length range (0.0.0.0/0, ::/0) means "allow all", which
	// kube-proxy treats as no ranges at all, so the list is then empty.
	LoadBalancerSourceRanges []netip.Prefix
	// HealthCheckNodePort is set only for type LoadBalancer with externalTrafficPolicy
	// Local.
	HealthCheckNodePort int
	// SessionAffinity is ClientIP or None; StickyMaxAgeSeconds is the ClientIP timeout.
	SessionAffinity     corev1.ServiceAffinity
	StickyMaxAgeSeconds int
	// ExternalPolicyLocal is externalTrafficPolicy Local on a NodePort or LoadBalancer
	// Service, or on any Service with externalIPs.
	ExternalPolicyLocal bool
	// InternalPolicyLocal is internalTrafficPolicy Local.
	InternalPolicyLocal bool
	// TrafficDistribution is spec.trafficDistribution (informational: kube-proxy acts on
	// the EndpointSlice hints the controller derives from it, not on the field).
	TrafficDistribution string

	// selection is how the node's release selects the port's endpoints (set by the
	// ChangeTracker and NewSyncState; the zero value is the newest release's).
	selection selection
}

// String returns "clusterIP:port/protocol", as kube-proxy logs a service port.
func (sp *ServicePort) String() string {
	return net.JoinHostPort(sp.ClusterIP.String(), fmt.Sprint(sp.Port)) + "/" + string(sp.Protocol)
}

// ExternallyAccessible reports whether the port is reachable other than by its cluster
// IP: it has a NodePort, a LoadBalancer VIP or an external IP.
func (sp *ServicePort) ExternallyAccessible() bool {
	return sp.NodePort != 0 || len(sp.LoadBalancerVIPs) != 0 || len(sp.ExternalIPs) != 0
}

// UsesClusterEndpoints reports whether any traffic to the port is sent to endpoints
// chosen by "Cluster" policy: internal traffic with iTP Cluster, or any external traffic
// (even with eTP Local, pod and node traffic to external addresses is short-circuited to
// the cluster endpoints).
func (sp *ServicePort) UsesClusterEndpoints() bool {
	return !sp.InternalPolicyLocal || sp.ExternallyAccessible()
}

// UsesLocalEndpoints reports whether any traffic to the port is sent to endpoints chosen
// by "Local" policy.
func (sp *ServicePort) UsesLocalEndpoints() bool {
	return sp.InternalPolicyLocal || (sp.ExternalPolicyLocal && sp.ExternallyAccessible())
}

// ServicePortMap holds every proxied service port of one IP family.
type ServicePortMap map[ServicePortName]*ServicePort

// SortedNames returns the map's keys in ServicePortName.Less order.
func (m ServicePortMap) SortedNames() []ServicePortName {
	names := make([]ServicePortName, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sortNames(names)
	return names
}

// HealthCheckNodePorts maps each Service with a health-check node port to that port.
func (m ServicePortMap) HealthCheckNodePorts() map[types.NamespacedName]uint16 {
	ports := make(map[types.NamespacedName]uint16)
	for name, sp := range m {
		if sp.HealthCheckNodePort != 0 {
			ports[name.NamespacedName] = uint16(sp.HealthCheckNodePort)
		}
	}
	return ports
}

// ShouldSkipService reports whether kube-proxy ignores the Service entirely: headless
// (clusterIP None or empty) and ExternalName Services are not proxied.
func ShouldSkipService(svc *corev1.Service) bool {
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return true
	}
	return svc.Spec.Type == corev1.ServiceTypeExternalName
}

// ClusterIPForFamily returns the Service's cluster IP of the family, or "" if it has
// none, following kube-proxy: spec.ipFamilies indexes spec.clusterIPs; without
// ipFamilies (objects from before dual stack) spec.clusterIP is used if its family
// matches.
func ClusterIPForFamily(family corev1.IPFamily, svc *corev1.Service) string {
	if len(svc.Spec.IPFamilies) == 0 {
		ip := svc.Spec.ClusterIP
		if ip == "" || ip == corev1.ClusterIPNone {
			return ""
		}
		if (family == corev1.IPv6Protocol) == utilnet.IsIPv6String(ip) {
			return ip
		}
		return ""
	}
	for i, f := range svc.Spec.IPFamilies {
		if f == family && i < len(svc.Spec.ClusterIPs) {
			return svc.Spec.ClusterIPs[i]
		}
	}
	return ""
}

// ExternalPolicyLocal reports externalTrafficPolicy Local, which only applies to
// NodePort and LoadBalancer Services and to Services with externalIPs.
func ExternalPolicyLocal(svc *corev1.Service) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer && svc.Spec.Type != corev1.ServiceTypeNodePort &&
		len(svc.Spec.ExternalIPs) == 0 {
		return false
	}
	return svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

// InternalPolicyLocal reports internalTrafficPolicy Local.
func InternalPolicyLocal(svc *corev1.Service) bool {
	return svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
}

// NeedsHealthCheck reports whether the Service gets a health-check node port: type
// LoadBalancer with externalTrafficPolicy Local.
func NeedsHealthCheck(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && ExternalPolicyLocal(svc)
}

// ParseIPSloppy parses an IP address the way Kubernetes does (IPv4 octets may carry
// leading zeros, as the API server has always accepted). IPv4-mapped IPv6 addresses are
// returned as IPv4, as Go's net.IP prints them.
func ParseIPSloppy(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	ip := utilnet.ParseIPSloppy(s)
	if ip == nil {
		return netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// ParseCIDRSloppy parses a CIDR the way Kubernetes does and returns it in network form
// (host bits cleared), as net.ParseCIDR's *IPNet prints.
func ParseCIDRSloppy(s string) (netip.Prefix, bool) {
	_, n, err := utilnet.ParseCIDRSloppy(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	a = a.Unmap()
	if a.Is4() && ones > 32 {
		ones -= 96
	}
	return netip.PrefixFrom(a, ones).Masked(), true
}

func familyOf(a netip.Addr) corev1.IPFamily {
	if a.Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

// protocolOrTCP applies the API default for a port protocol.
func protocolOrTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// ServicePortsForService returns kube-proxy's view of each port of the Service for the
// family, keyed by ServicePortName, or nil if the Service is not proxied in that family
// (headless, ExternalName, or no cluster IP of the family). An address that does not
// parse is an error naming the field: the API server would have rejected the object.
func ServicePortsForService(svc *corev1.Service, family corev1.IPFamily) (ServicePortMap, error) {
	if svc == nil || ShouldSkipService(svc) {
		return nil, nil
	}
	where := func(field string, i int) string {
		return fmt.Sprintf("service %s/%s: %s[%d]", svc.Namespace, svc.Name, field, i)
	}
	cipStr := ClusterIPForFamily(family, svc)
	if cipStr == "" {
		return nil, nil
	}
	cip, ok := ParseIPSloppy(cipStr)
	if !ok {
		return nil, fmt.Errorf("service %s/%s: spec.clusterIPs: invalid IP address %q", svc.Namespace, svc.Name, cipStr)
	}

	var externalIPs []netip.Addr
	for i, s := range svc.Spec.ExternalIPs {
		a, ok := ParseIPSloppy(s)
		if !ok {
			return nil, fmt.Errorf("%s: invalid IP address %q", where("spec.externalIPs", i), s)
		}
		if familyOf(a) == family {
			externalIPs = append(externalIPs, a)
		}
	}
	var ranges []netip.Prefix
	allowAll := false
	for i, s := range svc.Spec.LoadBalancerSourceRanges {
		s = strings.TrimSpace(s)
		p, ok := ParseCIDRSloppy(s)
		if !ok {
			return nil, fmt.Errorf("%s: invalid CIDR %q", where("spec.loadBalancerSourceRanges", i), s)
		}
		if familyOf(p.Addr()) != family {
			continue
		}
		if p.Bits() == 0 {
			allowAll = true
		}
		ranges = append(ranges, p)
	}
	if allowAll {
		ranges = nil
	}
	var vips []netip.Addr
	for i, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue
		}
		if ing.IPMode != nil && *ing.IPMode != corev1.LoadBalancerIPModeVIP {
			continue
		}
		a, ok := ParseIPSloppy(ing.IP)
		if !ok {
			return nil, fmt.Errorf("%s.ip: invalid IP address %q", where("status.loadBalancer.ingress", i), ing.IP)
		}
		if familyOf(a) == family {
			vips = append(vips, a)
		}
	}

	affinity := svc.Spec.SessionAffinity
	sticky := 0
	if affinity == corev1.ServiceAffinityClientIP {
		sticky = DefaultStickyMaxAgeSeconds
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			sticky = int(*c.ClientIP.TimeoutSeconds)
		}
	} else {
		affinity = corev1.ServiceAffinityNone
	}
	hc := 0
	if NeedsHealthCheck(svc) {
		hc = int(svc.Spec.HealthCheckNodePort)
	}
	td := ""
	if svc.Spec.TrafficDistribution != nil {
		td = *svc.Spec.TrafficDistribution
	}
	eLocal, iLocal := ExternalPolicyLocal(svc), InternalPolicyLocal(svc)

	m := make(ServicePortMap, len(svc.Spec.Ports))
	nn := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		proto := protocolOrTCP(p.Protocol)
		name := ServicePortName{NamespacedName: nn, Port: p.Name, Protocol: proto}
		m[name] = &ServicePort{
			Name:                     name,
			Type:                     svc.Spec.Type,
			ClusterIP:                cip,
			Port:                     int(p.Port),
			Protocol:                 proto,
			TargetPort:               p.TargetPort,
			NodePort:                 int(p.NodePort),
			ExternalIPs:              externalIPs,
			LoadBalancerVIPs:         vips,
			LoadBalancerSourceRanges: ranges,
			HealthCheckNodePort:      hc,
			SessionAffinity:          affinity,
			StickyMaxAgeSeconds:      sticky,
			ExternalPolicyLocal:      eLocal,
			InternalPolicyLocal:      iLocal,
			TrafficDistribution:      td,
		}
	}
	return m, nil
}

// BuildServicePortMap returns the service ports of every proxied Service for the family.
// Two Services with the same namespace/name are an error.
func BuildServicePortMap(services []*corev1.Service, family corev1.IPFamily) (ServicePortMap, error) {
	out := make(ServicePortMap, len(services))
	seen := make(map[types.NamespacedName]bool, len(services))
	for _, svc := range services {
		if svc == nil {
			continue
		}
		nn := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
		if seen[nn] {
			return nil, fmt.Errorf("service %s: listed twice", nn)
		}
		seen[nn] = true
		m, err := ServicePortsForService(svc, family)
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			out[k] = v
		}
	}
	return out, nil
}
