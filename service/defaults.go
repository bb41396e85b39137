package service

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// MaxClientIPAffinitySeconds is the largest sessionAffinityConfig.clientIP.timeoutSeconds
// the API server accepts (one day).
const MaxClientIPAffinitySeconds int32 = 86400

// Default sets the fields the API server's defaulting sets when an object is
// decoded (kubernetes pkg/apis/core/v1/defaults.go and discovery/v1), in
// place. It is idempotent. Allocation-time defaults that depend on the
// cluster (ipFamilies, ipFamilyPolicy, clusterIPs, nodePorts) are the
// Store's job.
func Default(obj runtime.Object) {
	switch o := obj.(type) {
	case *corev1.Service:
		DefaultService(o)
	case *corev1.Pod:
		DefaultPod(o)
	case *corev1.Namespace:
		defaultNamespace(o)
	case *corev1.Node:
		defaultNode(o)
	case *corev1.Endpoints:
		defaultEndpoints(o)
	case *discoveryv1.EndpointSlice:
		defaultEndpointSlice(o)
	case *networkingv1.NetworkPolicy:
		DefaultNetworkPolicy(o)
	}
}

// ExternallyAccessible reports whether a service can be reached from outside
// the cluster: NodePort and LoadBalancer services, and ClusterIP services
// with externalIPs.
func ExternallyAccessible(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer ||
		svc.Spec.Type == corev1.ServiceTypeNodePort ||
		(svc.Spec.Type == corev1.ServiceTypeClusterIP && len(svc.Spec.ExternalIPs) > 0)
}

// NeedsHealthCheck reports whether the service gets a healthCheckNodePort
// (type LoadBalancer with externalTrafficPolicy Local).
func NeedsHealthCheck(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

// IsHeadless reports whether the service is headless (clusterIP "None").
func IsHeadless(svc *corev1.Service) bool {
	return svc.Spec.ClusterIP == corev1.ClusterIPNone ||
		(len(svc.Spec.ClusterIPs) == 1 && svc.Spec.ClusterIPs[0] == corev1.ClusterIPNone)
}

// HasClusterIP reports whether the service has an allocated cluster IP
// (neither ExternalName, headless nor still unallocated).
func HasClusterIP(svc *corev1.Service) bool {
	return svc.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone
}

// DefaultService applies SetDefaults_Service.
func DefaultService(svc *corev1.Service) {
	s := &svc.Spec
	if s.SessionAffinity == "" {
		s.SessionAffinity = corev1.ServiceAffinityNone
	}
	if s.SessionAffinity == corev1.ServiceAffinityNone {
		s.SessionAffinityConfig = nil
	}
	if s.SessionAffinity == corev1.ServiceAffinityClientIP {
		if s.SessionAffinityConfig == nil || s.SessionAffinityConfig.ClientIP == nil || s.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil {
			t := corev1.DefaultClientIPServiceAffinitySeconds
			s.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &t}}
		}
	}
	if s.Type == "" {
		s.Type = corev1.ServiceTypeClusterIP
	}
	for i := range s.Ports {
		p := &s.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort == intstr.FromInt32(0) || p.TargetPort == intstr.FromString("") {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	if ExternallyAccessible(svc) && s.ExternalTrafficPolicy == "" {
		s.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	if s.InternalTrafficPolicy == nil {
		switch s.Type {
		case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
			p := corev1.ServiceInternalTrafficPolicyCluster
			s.InternalTrafficPolicy = &p
		}
	}
	if s.Type == corev1.ServiceTypeLoadBalancer {
		if s.AllocateLoadBalancerNodePorts == nil {
			t := true
			s.AllocateLoadBalancerNodePorts = &t
		}
		for i := range svc.Status.LoadBalancer.Ingress {
			ing := &svc.Status.LoadBalancer.Ingress[i]
			if ing.IP != "" && ing.IPMode == nil {
				m := corev1.LoadBalancerIPModeVIP
				ing.IPMode = &m
			}
		}
	}
}

// DefaultPod applies SetDefaults_Pod, SetDefaults_PodSpec and the container
// and container-port defaults, and syncs status.podIP with status.podIPs
// (and hostIP with hostIPs) as the v1 conversion does.
func DefaultPod(pod *corev1.Pod) {
	s := &pod.Spec
	if s.EnableServiceLinks == nil {
		t := corev1.DefaultEnableServiceLinks
		s.EnableServiceLinks = &t
	}
	if s.DNSPolicy == "" {
		s.DNSPolicy = corev1.DNSClusterFirst
	}
	if s.RestartPolicy == "" {
		s.RestartPolicy = corev1.RestartPolicyAlways
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &corev1.PodSecurityContext{}
	}
	if s.TerminationGracePeriodSeconds == nil {
		g := int64(corev1.DefaultTerminationGracePeriodSeconds)
		s.TerminationGracePeriodSeconds = &g
	}
	if s.SchedulerName == "" {
		s.SchedulerName = corev1.DefaultSchedulerName
	}
	for _, cs := range [][]corev1.Container{s.InitContainers, s.Containers} {
		for i := range cs {
			defaultContainer(&cs[i], s.HostNetwork)
		}
	}
	// The v1 conversion keeps the singular and plural status IPs in step,
	// the singular field winning when they disagree.
	st := &pod.Status
	if st.PodIP != "" && (len(st.PodIPs) == 0 || st.PodIPs[0].IP != st.PodIP) {
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	}
	if len(st.PodIPs) > 0 {
		st.PodIP = st.PodIPs[0].IP
	}
	if st.HostIP != "" && (len(st.HostIPs) == 0 || st.HostIPs[0].IP != st.HostIP) {
		st.HostIPs = []corev1.HostIP{{IP: st.HostIP}}
	}
	if len(st.HostIPs) > 0 {
		st.HostIP = st.HostIPs[0].IP
	}
}

func defaultContainer(c *corev1.Container, hostNetwork bool) {
	if c.ImagePullPolicy == "" {
		if imageTag(c.Image) == "latest" {
			c.ImagePullPolicy = corev1.PullAlways
		} else {
			c.ImagePullPolicy = corev1.PullIfNotPresent
		}
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for j := range c.Ports {
		p := &c.Ports[j]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if hostNetwork && p.HostPort == 0 {
			p.HostPort = p.ContainerPort
		}
	}
}

// imageTag returns an image reference's tag, "latest" when it has neither
// tag nor digest.
func imageTag(image string) string {
	if strings.Contains(image, "@") {
		return ""
	}
	name := image
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		return name[i+1:]
	}
	return "latest"
}

func defaultNamespace(ns *corev1.Namespace) {
	if ns.Name != "" {
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[corev1.LabelMetadataName] = ns.Name
	}
	if ns.Status.Phase == "" {
		ns.Status.Phase = corev1.NamespaceActive
	}
}

func defaultNode(n *corev1.Node) {
	if n.Status.Allocatable == nil && n.Status.Capacity != nil {
		n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	}
}

func defaultEndpoints(ep *corev1.Endpoints) {
	for i := range ep.Subsets {
		for j := range ep.Subsets[i].Ports {
			if ep.Subsets[i].Ports[j].Protocol == "" {
				ep.Subsets[i].Ports[j].Protocol = corev1.ProtocolTCP
			}
		}
	}
}

func defaultEndpointSlice(s *discoveryv1.EndpointSlice) {
	for i := range s.Ports {
		p := &s.Ports[i]
		if p.Name == nil {
			empty := ""
			p.Name = &empty
		}
		if p.Protocol == nil {
			tcp := corev1.ProtocolTCP
			p.Protocol = &tcp
		}
	}
}
