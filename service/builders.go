package service

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Builders make test and example objects in one line:
//
//	web := service.NewService("shop/web", service.Selector("app=web"), service.Port("http", 80, 8080))
//	pod := service.NewPod("shop/web-1", service.Labels("app=web"),
//		service.ContainerPort("http", 8080, "TCP"), service.OnNode("node-a"),
//		service.PodIP("10.244.1.5"), service.Ready(true))
//
// Keys are "namespace/name" ("name" alone means namespace "default"). The
// objects are not defaulted; the Store (or Default) does that. An option
// that does not apply to the kind it is given to panics: that is a
// programming error in the test.

// DefaultImage is the container image NewPod gives its first container.
const DefaultImage = "registry.k8s.io/pause:3.10"

// Option adjusts an object made by one of the New* builders.
type Option func(obj runtime.Object)

func apply(obj runtime.Object, opts []Option) {
	for _, o := range opts {
		o(obj)
	}
}

func wrongKind(option string, obj runtime.Object) {
	panic(fmt.Sprintf("service.%s does not apply to %T", option, obj))
}

func parseLabels(s string) map[string]string {
	m, err := labels.ConvertSelectorToLabelsMap(s)
	if err != nil {
		panic(fmt.Sprintf("service: bad label list %q: %v", s, err))
	}
	return m
}

// NewService returns a ClusterIP-type Service (unless options say otherwise).
func NewService(key string, opts ...Option) *corev1.Service {
	ns, name := splitKey(key)
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	setTypeMeta(s)
	apply(s, opts)
	return s
}

// NewPod returns a Pod with one container ("app", DefaultImage).
func NewPod(key string, opts ...Option) *corev1.Pod {
	ns, name := splitKey(key)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: DefaultImage}}},
	}
	setTypeMeta(p)
	apply(p, opts)
	return p
}

// NewNode returns a Node.
func NewNode(name string, opts ...Option) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	setTypeMeta(n)
	apply(n, opts)
	return n
}

// NewNamespace returns a Namespace.
func NewNamespace(name string, opts ...Option) *corev1.Namespace {
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	setTypeMeta(n)
	apply(n, opts)
	return n
}

// NewEndpoints returns a core/v1 Endpoints (for a selectorless service of the same name).
func NewEndpoints(key string, opts ...Option) *corev1.Endpoints {
	ns, name := splitKey(key)
	e := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	setTypeMeta(e)
	apply(e, opts)
	return e
}

// NewEndpointSlice returns an EndpointSlice. Use ForService to link it to a
// service; its address type is taken from the first address unless
// AddressType says otherwise.
func NewEndpointSlice(key string, opts ...Option) *discoveryv1.EndpointSlice {
	ns, name := splitKey(key)
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	setTypeMeta(s)
	apply(s, opts)
	if s.AddressType == "" {
		s.AddressType = discoveryv1.AddressTypeIPv4
		if len(s.Endpoints) > 0 && len(s.Endpoints[0].Addresses) > 0 && isIPv6String(s.Endpoints[0].Addresses[0]) {
			s.AddressType = discoveryv1.AddressTypeIPv6
		}
	}
	return s
}

// --- any kind --------------------------------------------------------------

// Labels adds labels given as "k=v,k2=v2".
func Labels(s string) Option {
	return func(obj runtime.Object) {
		m := objectMeta(obj)
		if m == nil {
			wrongKind("Labels", obj)
		}
		if m.Labels == nil {
			m.Labels = map[string]string{}
		}
		for k, v := range parseLabels(s) {
			m.Labels[k] = v
		}
	}
}

// Annotation sets one annotation.
func Annotation(key, value string) Option {
	return func(obj runtime.Object) {
		m := objectMeta(obj)
		if m == nil {
			wrongKind("Annotation", obj)
		}
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[key] = value
	}
}

// Deleting sets metadata.deletionTimestamp (a terminating object).
func Deleting(at time.Time) Option {
	return func(obj runtime.Object) {
		m := objectMeta(obj)
		if m == nil {
			wrongKind("Deleting", obj)
		}
		t := metav1.NewTime(at)
		m.DeletionTimestamp = &t
	}
}

// --- Service ---------------------------------------------------------------

func svcOpt(name string, f func(*corev1.Service)) Option {
	return func(obj runtime.Object) {
		s, ok := obj.(*corev1.Service)
		if !ok {
			wrongKind(name, obj)
		}
		f(s)
	}
}

// Selector sets the pod selector, "k=v,k2=v2".
func Selector(s string) Option {
	return svcOpt("Selector", func(svc *corev1.Service) { svc.Spec.Selector = parseLabels(s) })
}

// Port adds a TCP port; targetPort 0 means "same as port".
func Port(name string, port, targetPort int32) Option {
	return ProtocolPort(name, corev1.ProtocolTCP, port, targetPort)
}

// UDPPort adds a UDP port.
func UDPPort(name string, port, targetPort int32) Option {
	return ProtocolPort(name, corev1.ProtocolUDP, port, targetPort)
}

// ProtocolPort adds a port of any protocol.
func ProtocolPort(name string, proto corev1.Protocol, port, targetPort int32) Option {
	return svcOpt("Port", func(svc *corev1.Service) {
		p := corev1.ServicePort{Name: name, Protocol: proto, Port: port}
		if targetPort != 0 {
			p.TargetPort = intstr.FromInt32(targetPort)
		}
		svc.Spec.Ports = append(svc.Spec.Ports, p)
	})
}

// NamedPort adds a TCP port whose targetPort is a container port name,
// resolved per pod.
func NamedPort(name string, port int32, targetPortName string) Option {
	return svcOpt("NamedPort", func(svc *corev1.Service) {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name: name, Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromString(targetPortName)})
	})
}

// ServicePort adds a port given in full.
func ServicePort(p corev1.ServicePort) Option {
	return svcOpt("ServicePort", func(svc *corev1.Service) { svc.Spec.Ports = append(svc.Spec.Ports, p) })
}

// NodePort makes the service type NodePort.
func NodePort() Option {
	return svcOpt("NodePort", func(svc *corev1.Service) { svc.Spec.Type = corev1.ServiceTypeNodePort })
}

// LoadBalancer makes the service type LoadBalancer.
func LoadBalancer() Option {
	return svcOpt("LoadBalancer", func(svc *corev1.Service) { svc.Spec.Type = corev1.ServiceTypeLoadBalancer })
}

// WithNodePort requests a specific nodePort for the port named portName
// (added before this option).
func WithNodePort(portName string, nodePort int32) Option {
	return svcOpt("WithNodePort", func(svc *corev1.Service) {
		for i := range svc.Spec.Ports {
			if svc.Spec.Ports[i].Name == portName {
				svc.Spec.Ports[i].NodePort = nodePort
				return
			}
		}
		panic(fmt.Sprintf("service.WithNodePort: service %s has no port named %q (add the port first)", svc.Name, portName))
	})
}

// HealthCheckNodePort requests a specific healthCheckNodePort.
func HealthCheckNodePort(port int32) Option {
	return svcOpt("HealthCheckNodePort", func(svc *corev1.Service) { svc.Spec.HealthCheckNodePort = port })
}

// Headless sets clusterIP "None".
func Headless() Option {
	return svcOpt("Headless", func(svc *corev1.Service) {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
		svc.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
	})
}

// ClusterIP requests specific cluster IPs (primary first).
func ClusterIP(ips ...string) Option {
	return svcOpt("ClusterIP", func(svc *corev1.Service) {
		if len(ips) == 0 {
			return
		}
		svc.Spec.ClusterIP = ips[0]
		svc.Spec.ClusterIPs = append([]string(nil), ips...)
	})
}

// ExternalName makes an ExternalName service pointing at host.
func ExternalName(host string) Option {
	return svcOpt("ExternalName", func(svc *corev1.Service) {
		svc.Spec.Type = corev1.ServiceTypeExternalName
		svc.Spec.ExternalName = host
	})
}

// IPFamilyPolicy sets spec.ipFamilyPolicy.
func IPFamilyPolicy(p corev1.IPFamilyPolicy) Option {
	return svcOpt("IPFamilyPolicy", func(svc *corev1.Service) { svc.Spec.IPFamilyPolicy = &p })
}

// IPFamilies sets spec.ipFamilies.
func IPFamilies(fams ...corev1.IPFamily) Option {
	return svcOpt("IPFamilies", func(svc *corev1.Service) { svc.Spec.IPFamilies = fams })
}

// DualStack asks for both families (ipFamilyPolicy PreferDualStack).
func DualStack() Option { return IPFamilyPolicy(corev1.IPFamilyPolicyPreferDualStack) }

// ClientIPAffinity sets sessionAffinity ClientIP; timeoutSeconds 0 means the
// default (10800).
func ClientIPAffinity(timeoutSeconds int32) Option {
	return svcOpt("ClientIPAffinity", func(svc *corev1.Service) {
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		if timeoutSeconds != 0 {
			t := timeoutSeconds
			svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &t}}
		}
	})
}

// ExternalTrafficPolicy sets spec.externalTrafficPolicy ("Cluster", "Local").
func ExternalTrafficPolicy(p corev1.ServiceExternalTrafficPolicy) Option {
	return svcOpt("ExternalTrafficPolicy", func(svc *corev1.Service) { svc.Spec.ExternalTrafficPolicy = p })
}

// InternalTrafficPolicy sets spec.internalTrafficPolicy ("Cluster", "Local").
func InternalTrafficPolicy(p corev1.ServiceInternalTrafficPolicy) Option {
	return svcOpt("InternalTrafficPolicy", func(svc *corev1.Service) { svc.Spec.InternalTrafficPolicy = &p })
}

// TrafficDistribution sets spec.trafficDistribution ("PreferClose", ...).
func TrafficDistribution(d string) Option {
	return svcOpt("TrafficDistribution", func(svc *corev1.Service) { svc.Spec.TrafficDistribution = &d })
}

// ExternalIPs sets spec.externalIPs.
func ExternalIPs(ips ...string) Option {
	return svcOpt("ExternalIPs", func(svc *corev1.Service) { svc.Spec.ExternalIPs = ips })
}

// PublishNotReadyAddresses marks every selected pod ready in the service's endpoints.
func PublishNotReadyAddresses() Option {
	return svcOpt("PublishNotReadyAddresses", func(svc *corev1.Service) { svc.Spec.PublishNotReadyAddresses = true })
}

// AllocateLoadBalancerNodePorts sets spec.allocateLoadBalancerNodePorts.
func AllocateLoadBalancerNodePorts(b bool) Option {
	return svcOpt("AllocateLoadBalancerNodePorts", func(svc *corev1.Service) { svc.Spec.AllocateLoadBalancerNodePorts = &b })
}

// LoadBalancerSourceRanges sets spec.loadBalancerSourceRanges.
func LoadBalancerSourceRanges(cidrs ...string) Option {
	return svcOpt("LoadBalancerSourceRanges", func(svc *corev1.Service) { svc.Spec.LoadBalancerSourceRanges = cidrs })
}

// LoadBalancerIngress sets status.loadBalancer.ingress to the IPs (mode VIP).
func LoadBalancerIngress(ips ...string) Option {
	return svcOpt("LoadBalancerIngress", func(svc *corev1.Service) {
		svc.Status.LoadBalancer.Ingress = nil
		for _, ip := range ips {
			mode := corev1.LoadBalancerIPModeVIP
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip, IPMode: &mode})
		}
	})
}

// --- Pod -----------------------------------------------------------------

func podOpt(name string, f func(*corev1.Pod)) Option {
	return func(obj runtime.Object) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			wrongKind(name, obj)
		}
		f(p)
	}
}

// Container adds a container; ContainerPort options after it add to it.
func Container(name, image string) Option {
	return podOpt("Container", func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name, Image: image})
	})
}

// ContainerPort adds a port to the last container.
func ContainerPort(name string, port int32, proto corev1.Protocol) Option {
	return podOpt("ContainerPort", func(p *corev1.Pod) {
		c := &p.Spec.Containers[len(p.Spec.Containers)-1]
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: name, ContainerPort: port, Protocol: proto})
	})
}

// OnNode sets spec.nodeName.
func OnNode(node string) Option {
	return podOpt("OnNode", func(p *corev1.Pod) { p.Spec.NodeName = node })
}

// PodIP sets status.podIP and status.podIPs (primary first) and phase Running.
func PodIP(ips ...string) Option {
	return podOpt("PodIP", func(p *corev1.Pod) {
		p.Status.PodIP, p.Status.PodIPs = "", nil
		for i, ip := range ips {
			if i == 0 {
				p.Status.PodIP = ip
			}
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		if p.Status.Phase == "" {
			p.Status.Phase = corev1.PodRunning
		}
	})
}

// Ready sets the pod's Ready condition.
func Ready(ready bool) Option {
	return podOpt("Ready", func(p *corev1.Pod) { SetPodReady(p, ready) })
}

// Phase sets status.phase.
func Phase(ph corev1.PodPhase) Option {
	return podOpt("Phase", func(p *corev1.Pod) { p.Status.Phase = ph })
}

// Hostname sets spec.hostname.
func Hostname(h string) Option {
	return podOpt("Hostname", func(p *corev1.Pod) { p.Spec.Hostname = h })
}

// Subdomain sets spec.subdomain (a headless service's name gives the pod a DNS name).
func Subdomain(s string) Option {
	return podOpt("Subdomain", func(p *corev1.Pod) { p.Spec.Subdomain = s })
}

// HostNetwork runs the pod in its node's network namespace.
func HostNetwork() Option {
	return podOpt("HostNetwork", func(p *corev1.Pod) { p.Spec.HostNetwork = true })
}

// EnableServiceLinks sets spec.enableServiceLinks.
func EnableServiceLinks(b bool) Option {
	return podOpt("EnableServiceLinks", func(p *corev1.Pod) { p.Spec.EnableServiceLinks = &b })
}

// SetPodReady sets or adds the pod's Ready condition (and ContainersReady).
func SetPodReady(p *corev1.Pod, ready bool) {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	for _, t := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
		found := false
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == t {
				p.Status.Conditions[i].Status = st
				found = true
			}
		}
		if !found {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: st})
		}
	}
}

// --- Node ------------------------------------------------------------------

func nodeOpt(name string, f func(*corev1.Node)) Option {
	return func(obj runtime.Object) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			wrongKind(name, obj)
		}
		f(n)
	}
}

// Zone sets the node's topology.kubernetes.io/zone label.
func Zone(z string) Option {
	return nodeOpt("Zone", func(n *corev1.Node) {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[corev1.LabelTopologyZone] = z
	})
}

// NodeIP sets the node's InternalIP addresses.
func NodeIP(ips ...string) Option {
	return nodeOpt("NodeIP", func(n *corev1.Node) {
		for _, ip := range ips {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
	})
}

// PodCIDR sets spec.podCIDR(s).
func PodCIDR(cidrs ...string) Option {
	return nodeOpt("PodCIDR", func(n *corev1.Node) {
		if len(cidrs) > 0 {
			n.Spec.PodCIDR = cidrs[0]
		}
		n.Spec.PodCIDRs = cidrs
	})
}

// --- Endpoints -------------------------------------------------------------

// EndpointPort is a helper for Subset.
func EndpointPort(name string, port int32, proto corev1.Protocol) corev1.EndpointPort {
	return corev1.EndpointPort{Name: name, Port: port, Protocol: proto}
}

// Subset adds a subset to an Endpoints: ready and not-ready addresses and ports.
func Subset(ready, notReady []string, ports ...corev1.EndpointPort) Option {
	return func(obj runtime.Object) {
		e, ok := obj.(*corev1.Endpoints)
		if !ok {
			wrongKind("Subset", obj)
		}
		ss := corev1.EndpointSubset{Ports: ports}
		for _, ip := range ready {
			ss.Addresses = append(ss.Addresses, corev1.EndpointAddress{IP: ip})
		}
		for _, ip := range notReady {
			ss.NotReadyAddresses = append(ss.NotReadyAddresses, corev1.EndpointAddress{IP: ip})
		}
		e.Subsets = append(e.Subsets, ss)
	}
}

// --- EndpointSlice -----------------------------------------------------------

func sliceOpt(name string, f func(*discoveryv1.EndpointSlice)) Option {
	return func(obj runtime.Object) {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			wrongKind(name, obj)
		}
		f(s)
	}
}

// ForService sets the kubernetes.io/service-name label.
func ForService(name string) Option {
	return sliceOpt("ForService", func(s *discoveryv1.EndpointSlice) {
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[discoveryv1.LabelServiceName] = name
	})
}

// AddressType sets the slice's address type.
func AddressType(t discoveryv1.AddressType) Option {
	return sliceOpt("AddressType", func(s *discoveryv1.EndpointSlice) { s.AddressType = t })
}

// SlicePort adds a port to an EndpointSlice.
func SlicePort(name string, port int32, proto corev1.Protocol) Option {
	return sliceOpt("SlicePort", func(s *discoveryv1.EndpointSlice) {
		n, p, pr := name, port, proto
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: &n, Port: &p, Protocol: &pr})
	})
}

// ReadyAddresses adds one ready (and serving, not terminating) endpoint per address.
func ReadyAddresses(addrs ...string) Option {
	return sliceOpt("ReadyAddresses", func(s *discoveryv1.EndpointSlice) {
		for _, a := range addrs {
			s.Endpoints = append(s.Endpoints, SliceEndpoint(a, true, true, false))
		}
	})
}

// Endpoint adds an endpoint given in full (see SliceEndpoint).
func Endpoint(e discoveryv1.Endpoint) Option {
	return sliceOpt("Endpoint", func(s *discoveryv1.EndpointSlice) { s.Endpoints = append(s.Endpoints, e) })
}

// SliceEndpoint returns an endpoint with one address and explicit conditions.
func SliceEndpoint(addr string, ready, serving, terminating bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
	}
}
