package service

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"pgregory.net/rapid"
)

// Generators of valid objects for property tests.

var (
	genNamespace = rapid.SampledFrom([]string{"default", "shop", "kube-system"})
	genDNS1035   = rapid.StringMatching(`[a-z]([-a-z0-9]{0,8}[a-z0-9])?`)
	genPortName  = rapid.StringMatching(`[a-z]([a-z0-9]{0,6})?`)
	genProtocol  = rapid.SampledFrom([]corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP})
)

// svcShape says what kind of service to generate.
type svcShape struct {
	// allocated: fill clusterIPs, nodePorts and healthCheckNodePort as the
	// Store would (for Validate); otherwise leave them for the Store, except
	// for the occasional explicit request when requests is set.
	allocated bool
	requests  bool
}

// genService draws a valid Service, defaulted.
func genService(t *rapid.T, shape svcShape) *corev1.Service {
	typ := rapid.SampledFrom([]string{"ClusterIP", "ClusterIP", "NodePort", "LoadBalancer", "ExternalName", "Headless"}).Draw(t, "type")
	svc := NewService(genNamespace.Draw(t, "ns") + "/" + genDNS1035.Draw(t, "name"))
	s := &svc.Spec
	switch typ {
	case "Headless":
		s.Type = corev1.ServiceTypeClusterIP
		s.ClusterIP, s.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	case "ExternalName":
		s.Type = corev1.ServiceTypeExternalName
		s.ExternalName = rapid.SampledFrom([]string{"db.example.com", "example.org.", "a.b.c"}).Draw(t, "externalName")
	default:
		s.Type = corev1.ServiceType(typ)
	}

	minPorts := 1
	if typ == "Headless" || typ == "ExternalName" {
		minPorts = 0
	}
	n := rapid.IntRange(minPorts, 4).Draw(t, "nports")
	names := map[string]bool{}
	keys := map[string]bool{}
	for i := 0; i < n; i++ {
		p := corev1.ServicePort{Protocol: genProtocol.Draw(t, "proto")}
		if typ == "LoadBalancer" {
			p.Protocol = corev1.ProtocolTCP
		}
		p.Port = int32(rapid.IntRange(1, 65535).Draw(t, "port"))
		if keys[fmt.Sprint(p.Protocol, p.Port)] {
			continue
		}
		keys[fmt.Sprint(p.Protocol, p.Port)] = true
		if n > 1 || rapid.Bool().Draw(t, "named") {
			name := genPortName.Draw(t, "portName")
			for base, k := name, i; names[name]; k++ {
				name = fmt.Sprintf("%s%d", base, k)
			}
			names[name] = true
			p.Name = name
		}
		switch rapid.IntRange(0, 2).Draw(t, "targetKind") {
		case 0: // defaulted
		case 1:
			p.TargetPort = intstr.FromInt32(int32(rapid.IntRange(1, 65535).Draw(t, "targetPort")))
		case 2:
			p.TargetPort = intstr.FromString(rapid.StringMatching(`[a-z]([a-z0-9]{0,8}[a-z])?`).Draw(t, "targetName"))
		}
		if rapid.IntRange(0, 4).Draw(t, "appProtocol") == 0 {
			ap := rapid.SampledFrom([]string{"http", "h2c", "kubernetes.io/ws", "example.com/custom"}).Draw(t, "appProtocolName")
			p.AppProtocol = &ap
		}
		s.Ports = append(s.Ports, p)
	}
	if len(s.Ports) > 1 {
		for i := range s.Ports {
			if s.Ports[i].Name == "" {
				s.Ports[i].Name = fmt.Sprintf("p%d", i)
			}
		}
	}
	if typ != "ExternalName" && rapid.IntRange(0, 4).Draw(t, "selector") > 0 {
		s.Selector = map[string]string{"app": genDNS1035.Draw(t, "app")}
	}
	if typ != "ExternalName" && rapid.IntRange(0, 3).Draw(t, "affinity") == 0 {
		s.SessionAffinity = corev1.ServiceAffinityClientIP
		if rapid.Bool().Draw(t, "timeout") {
			to := int32(rapid.IntRange(1, int(MaxClientIPAffinitySeconds)).Draw(t, "timeoutSeconds"))
			s.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &to}}
		}
	}
	if typ != "ExternalName" && typ != "Headless" && rapid.IntRange(0, 4).Draw(t, "externalIPs") == 0 {
		s.ExternalIPs = []string{fmt.Sprintf("203.0.113.%d", rapid.IntRange(1, 254).Draw(t, "externalIP"))}
	}
	if typ == "NodePort" || typ == "LoadBalancer" || len(s.ExternalIPs) > 0 {
		if rapid.Bool().Draw(t, "etpLocal") {
			s.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
	}
	if typ != "ExternalName" && rapid.IntRange(0, 3).Draw(t, "itpLocal") == 0 {
		p := corev1.ServiceInternalTrafficPolicyLocal
		s.InternalTrafficPolicy = &p
	}
	if typ == "LoadBalancer" && rapid.IntRange(0, 2).Draw(t, "noLBNodePorts") == 0 {
		f := false
		s.AllocateLoadBalancerNodePorts = &f
	}
	if typ == "LoadBalancer" {
		if rapid.IntRange(0, 2).Draw(t, "sourceRanges") == 0 {
			s.LoadBalancerSourceRanges = rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"10.0.0.0/8", "192.168.0.0/16", "203.0.113.0/24", "2001:db8::/32"}), 1, 3, rapid.ID[string]).Draw(t, "ranges")
		}
		if rapid.IntRange(0, 3).Draw(t, "lbClass") == 0 {
			c := "example.com/lb"
			s.LoadBalancerClass = &c
		}
		if rapid.Bool().Draw(t, "ingress") {
			svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("198.51.100.%d", rapid.IntRange(1, 254).Draw(t, "ingressIP"))}}
		}
	}
	if typ != "ExternalName" && rapid.IntRange(0, 4).Draw(t, "trafficDistribution") == 0 {
		td := rapid.SampledFrom([]string{corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameZone,
			corev1.ServiceTrafficDistributionPreferSameNode}).Draw(t, "td")
		s.TrafficDistribution = &td
	}
	if rapid.IntRange(0, 2).Draw(t, "labels") == 0 {
		svc.Labels = map[string]string{"app.kubernetes.io/name": genDNS1035.Draw(t, "labelValue")}
		svc.Annotations = map[string]string{"example.com/note": rapid.StringMatching(`[ -~]{0,20}`).Draw(t, "annotation")}
	}
	if typ == "Headless" && rapid.Bool().Draw(t, "publishNotReady") {
		s.PublishNotReadyAddresses = true
	}

	wantIP := shape.allocated || (shape.requests && rapid.IntRange(0, 3).Draw(t, "requestIP") == 0)
	if typ != "ExternalName" && typ != "Headless" && wantIP {
		ip := netip.AddrFrom4([4]byte{10, 96, byte(rapid.IntRange(0, 15).Draw(t, "ipHi")), byte(rapid.IntRange(1, 254).Draw(t, "ipLo"))})
		s.ClusterIP, s.ClusterIPs = ip.String(), []string{ip.String()}
	}
	if shape.allocated && typ != "ExternalName" {
		// What the Store's family initialisation writes: families matching
		// the IPs, IPv6 primary or dual-stack now and then.
		pol := corev1.IPFamilyPolicySingleStack
		v6 := netip.MustParseAddr("fd00:10:96::").As16()
		v6[14], v6[15] = byte(rapid.IntRange(0, 255).Draw(t, "v6Hi")), byte(rapid.IntRange(1, 255).Draw(t, "v6Lo"))
		v6ip := netip.AddrFrom16(v6).String()
		switch {
		case typ == "Headless":
			s.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
			if len(s.Selector) == 0 {
				pol = corev1.IPFamilyPolicyRequireDualStack
				s.IPFamilies = append(s.IPFamilies, corev1.IPv6Protocol)
			}
		case rapid.IntRange(0, 3).Draw(t, "family") == 0:
			s.ClusterIP, s.ClusterIPs = v6ip, []string{v6ip}
			s.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
		case rapid.IntRange(0, 2).Draw(t, "dual") == 0:
			pol = rapid.SampledFrom([]corev1.IPFamilyPolicy{corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack}).Draw(t, "policy")
			s.ClusterIPs = append(s.ClusterIPs, v6ip)
			s.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		default:
			s.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		}
		s.IPFamilyPolicy = &pol
	}
	if typ == "NodePort" || typ == "LoadBalancer" {
		for i := range s.Ports {
			if shape.allocated || (shape.requests && rapid.IntRange(0, 3).Draw(t, "requestNodePort") == 0) {
				s.Ports[i].NodePort = int32(30000 + i*1000 + rapid.IntRange(0, 999).Draw(t, "nodePort"))
			}
		}
	}
	DefaultService(svc)
	if NeedsHealthCheck(svc) && (shape.allocated || (shape.requests && rapid.IntRange(0, 3).Draw(t, "requestHCNP") == 0)) {
		s.HealthCheckNodePort = int32(rapid.IntRange(32700, 32767).Draw(t, "hcnp"))
	}
	return svc
}
