package service

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"pgregory.net/rapid"
	"sigs.k8s.io/yaml"
)

// Every generated valid Service validates, and survives a YAML round trip
// through the manifest loader unchanged.
func TestPropServiceYAMLRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		svc := genService(t, svcShape{allocated: true})
		if errs := ValidateService(svc); len(errs) != 0 {
			t.Fatalf("generated service is invalid: %v", errs)
		}
		data, err := yaml.Marshal(svc)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := Load("gen.yaml", data)
		if err != nil {
			t.Fatalf("%v\n%s", err, data)
		}
		if len(ms) != 1 {
			t.Fatalf("got %d manifests", len(ms))
		}
		if diff := cmp.Diff(svc, ms[0].Object); diff != "" {
			t.Fatalf("round trip changed the service (-want +got):\n%s\n%s", diff, data)
		}
	})
}

// breaker breaks one field of a valid service and says which path must be
// reported; ok is false when it does not apply to this service.
type breaker struct {
	name  string
	apply func(t *rapid.T, s *corev1.Service) (path string, ok bool)
}

func anyPort(t *rapid.T, s *corev1.Service) (int, bool) {
	if len(s.Spec.Ports) == 0 {
		return 0, false
	}
	return rapid.IntRange(0, len(s.Spec.Ports)-1).Draw(t, "portIndex"), true
}

func portPath(i int, child string) string { return fmt.Sprintf("spec.ports[%d].%s", i, child) }

var breakers = []breaker{
	{"name", func(t *rapid.T, s *corev1.Service) (string, bool) {
		s.Name = rapid.SampledFrom([]string{"Web", "1web", "web_", "-web", strings.Repeat("a", 64)}).Draw(t, "badName")
		return "metadata.name", true
	}},
	{"namespace", func(t *rapid.T, s *corev1.Service) (string, bool) {
		s.Namespace = "Bad_NS"
		return "metadata.namespace", true
	}},
	{"port number", func(t *rapid.T, s *corev1.Service) (string, bool) {
		i, ok := anyPort(t, s)
		if ok {
			s.Spec.Ports[i].Port = int32(rapid.SampledFrom([]int{0, -1, 65536, 100000}).Draw(t, "badPort"))
		}
		return portPath(i, "port"), ok
	}},
	{"port name", func(t *rapid.T, s *corev1.Service) (string, bool) {
		i, ok := anyPort(t, s)
		if ok {
			s.Spec.Ports[i].Name = rapid.SampledFrom([]string{"HTTP", "a_b", "-x", "x-"}).Draw(t, "badPortName")
		}
		return portPath(i, "name"), ok
	}},
	{"missing port name", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if len(s.Spec.Ports) < 2 {
			return "", false
		}
		i, _ := anyPort(t, s)
		s.Spec.Ports[i].Name = ""
		return portPath(i, "name"), true
	}},
	{"duplicate port name", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if len(s.Spec.Ports) < 2 {
			return "", false
		}
		s.Spec.Ports[1].Name = s.Spec.Ports[0].Name
		return portPath(1, "name"), true
	}},
	{"duplicate port", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if len(s.Spec.Ports) < 2 {
			return "", false
		}
		s.Spec.Ports[1].Port, s.Spec.Ports[1].Protocol = s.Spec.Ports[0].Port, s.Spec.Ports[0].Protocol
		return "spec.ports[1]", true
	}},
	{"protocol", func(t *rapid.T, s *corev1.Service) (string, bool) {
		i, ok := anyPort(t, s)
		if ok {
			s.Spec.Ports[i].Protocol = rapid.SampledFrom([]corev1.Protocol{"", "ICMP", "tcp"}).Draw(t, "badProto")
		}
		return portPath(i, "protocol"), ok
	}},
	{"target port number", func(t *rapid.T, s *corev1.Service) (string, bool) {
		i, ok := anyPort(t, s)
		if ok {
			s.Spec.Ports[i].TargetPort = intstr.FromInt32(int32(rapid.SampledFrom([]int{0, 65536}).Draw(t, "badTarget")))
		}
		return portPath(i, "targetPort"), ok
	}},
	{"target port name", func(t *rapid.T, s *corev1.Service) (string, bool) {
		i, ok := anyPort(t, s)
		if ok {
			s.Spec.Ports[i].TargetPort = intstr.FromString(rapid.SampledFrom([]string{"8080", "a--b", "-ab", "Http", "abcdefghijklmnop"}).Draw(t, "badTargetName"))
		}
		return portPath(i, "targetPort"), ok
	}},
	{"nodePort on ClusterIP", func(t *rapid.T, s *corev1.Service) (string, bool) {
		i, ok := anyPort(t, s)
		if !ok || s.Spec.Type != corev1.ServiceTypeClusterIP {
			return "", false
		}
		s.Spec.Ports[i].NodePort = 30001
		return portPath(i, "nodePort"), true
	}},
	{"type", func(t *rapid.T, s *corev1.Service) (string, bool) {
		s.Spec.Type = "Internal"
		return "spec.type", true
	}},
	{"session affinity", func(t *rapid.T, s *corev1.Service) (string, bool) {
		s.Spec.SessionAffinity = "Sticky"
		return "spec.sessionAffinity", true
	}},
	{"affinity timeout", func(t *rapid.T, s *corev1.Service) (string, bool) {
		to := int32(rapid.SampledFrom([]int{0, -5, 86401}).Draw(t, "badTimeout"))
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &to}}
		return "spec.sessionAffinityConfig.clientIP.timeoutSeconds", true
	}},
	{"clusterIP", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if !HasClusterIP(s) {
			return "", false
		}
		bad := rapid.SampledFrom([]string{"10.96.0.256", "abc", "10.096.0.1"}).Draw(t, "badIP")
		s.Spec.ClusterIP, s.Spec.ClusterIPs = bad, []string{bad}
		return "spec.clusterIPs[0]", true
	}},
	{"headless external type", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if s.Spec.Type != corev1.ServiceTypeNodePort && s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			return "", false
		}
		s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
		return "spec.clusterIPs[0]", true
	}},
	{"ip family", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if s.Spec.Type == corev1.ServiceTypeExternalName {
			return "", false
		}
		s.Spec.IPFamilies = []corev1.IPFamily{"IPv5"}
		return "spec.ipFamilies[0]", true
	}},
	{"external IP", func(t *rapid.T, s *corev1.Service) (string, bool) {
		s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, rapid.SampledFrom([]string{"127.0.0.1", "169.254.1.2", "0.0.0.0", "::1", "fe80::2", "x"}).Draw(t, "badExternalIP"))
		return fmt.Sprintf("spec.externalIPs[%d]", len(s.Spec.ExternalIPs)-1), true
	}},
	{"selector", func(t *rapid.T, s *corev1.Service) (string, bool) {
		s.Spec.Selector = map[string]string{"app": "a b"}
		return "spec.selector", true
	}},
	{"external traffic policy", func(t *rapid.T, s *corev1.Service) (string, bool) {
		s.Spec.ExternalTrafficPolicy = "Nearest"
		return "spec.externalTrafficPolicy", true
	}},
	{"internal traffic policy", func(t *rapid.T, s *corev1.Service) (string, bool) {
		p := corev1.ServiceInternalTrafficPolicy("Node")
		s.Spec.InternalTrafficPolicy = &p
		return "spec.internalTrafficPolicy", true
	}},
	{"health check node port", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if NeedsHealthCheck(s) {
			return "", false
		}
		s.Spec.HealthCheckNodePort = 30555
		return "spec.healthCheckNodePort", true
	}},
	{"LB-only field", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
			return "", false
		}
		b := true
		s.Spec.AllocateLoadBalancerNodePorts = &b
		return "spec.allocateLoadBalancerNodePorts", true
	}},
	{"external name", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if s.Spec.Type != corev1.ServiceTypeExternalName {
			return "", false
		}
		s.Spec.ExternalName = rapid.SampledFrom([]string{"", "under_score.com", "-x.com"}).Draw(t, "badExternalName")
		return "spec.externalName", true
	}},
	{"cluster IP fields on ExternalName", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if s.Spec.Type != corev1.ServiceTypeExternalName {
			return "", false
		}
		switch rapid.IntRange(0, 2).Draw(t, "which") {
		case 0:
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.9", []string{"10.96.0.9"}
			return "spec.clusterIPs", true
		case 1:
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
			return "spec.ipFamilies", true
		}
		p := corev1.IPFamilyPolicySingleStack
		s.Spec.IPFamilyPolicy = &p
		return "spec.ipFamilyPolicy", true
	}},
	{"ip family policy", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if s.Spec.Type == corev1.ServiceTypeExternalName {
			return "", false
		}
		p := corev1.IPFamilyPolicy(rapid.SampledFrom([]string{"Sometimes", "singlestack", "DualStack"}).Draw(t, "badPolicy"))
		s.Spec.IPFamilyPolicy = &p
		return "spec.ipFamilyPolicy", true
	}},
	{"cluster IP of the other family", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if !HasClusterIP(s) || len(s.Spec.IPFamilies) == 0 {
			return "", false
		}
		other := map[corev1.IPFamily]string{corev1.IPv4Protocol: "fd00::77", corev1.IPv6Protocol: "10.96.0.77"}[s.Spec.IPFamilies[0]]
		s.Spec.ClusterIP, s.Spec.ClusterIPs[0] = other, other
		return "spec.clusterIPs[0]", true
	}},
	{"clusterIPs out of step with clusterIP", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if !HasClusterIP(s) {
			return "", false
		}
		s.Spec.ClusterIPs = append([]string{"10.96.200.200"}, s.Spec.ClusterIPs[1:]...)
		return "spec.clusterIPs", true
	}},
	{"three cluster IPs", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if !HasClusterIP(s) {
			return "", false
		}
		s.Spec.ClusterIP = "10.96.0.1"
		s.Spec.ClusterIPs = []string{"10.96.0.1", "fd00::1", "10.96.0.2"}
		return "spec.clusterIPs", true
	}},
	{"app protocol", func(t *rapid.T, s *corev1.Service) (string, bool) {
		i, ok := anyPort(t, s)
		if ok {
			ap := rapid.SampledFrom([]string{"not a name", "-http", "a/b/c"}).Draw(t, "badAppProtocol")
			s.Spec.Ports[i].AppProtocol = &ap
		}
		return portPath(i, "appProtocol"), ok
	}},
	{"duplicate node port", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if len(s.Spec.Ports) < 2 || (s.Spec.Type != corev1.ServiceTypeNodePort && s.Spec.Type != corev1.ServiceTypeLoadBalancer) {
			return "", false
		}
		p0, p1 := &s.Spec.Ports[0], &s.Spec.Ports[1]
		p1.Protocol, p0.NodePort, p1.NodePort = p0.Protocol, 30123, 30123
		return "spec.ports[1].nodePort", true
	}},
	{"source range", func(t *rapid.T, s *corev1.Service) (string, bool) {
		s.Spec.LoadBalancerSourceRanges = []string{rapid.SampledFrom([]string{"10.0.0.0/33", "10.0.0.1", "x"}).Draw(t, "badRange")}
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			return "spec.LoadBalancerSourceRanges", true // the API server's spelling
		}
		return "spec.LoadBalancerSourceRanges[0]", true
	}},
	{"load balancer class", func(t *rapid.T, s *corev1.Service) (string, bool) {
		c := "example.com/lb"
		if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
			c = "not a class"
		}
		s.Spec.LoadBalancerClass = &c
		return "spec.loadBalancerClass", true
	}},
	{"allocateLoadBalancerNodePorts unset", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			return "", false
		}
		s.Spec.AllocateLoadBalancerNodePorts = nil
		return "allocateLoadBalancerNodePorts", true // the API server drops "spec." here
	}},
	{"health check node port missing", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if !NeedsHealthCheck(s) {
			return "", false
		}
		s.Spec.HealthCheckNodePort = 0
		return "spec.healthCheckNodePort", true
	}},
	{"affinity config without ClientIP", func(t *rapid.T, s *corev1.Service) (string, bool) {
		to := int32(60)
		s.Spec.SessionAffinity = corev1.ServiceAffinityNone
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &to}}
		return "spec.sessionAffinityConfig", true
	}},
	{"internal traffic policy unset", func(t *rapid.T, s *corev1.Service) (string, bool) {
		if s.Spec.Type == corev1.ServiceTypeExternalName {
			return "", false
		}
		s.Spec.InternalTrafficPolicy = nil
		return "spec.internalTrafficPolicy", true
	}},
	{"traffic distribution", func(t *rapid.T, s *corev1.Service) (string, bool) {
		td := rapid.SampledFrom([]string{"Anywhere", "preferclose", ""}).Draw(t, "badTD")
		s.Spec.TrafficDistribution = &td
		return "spec.trafficDistribution", true
	}},
	{"label", func(t *rapid.T, s *corev1.Service) (string, bool) {
		s.Labels = map[string]string{"app": rapid.SampledFrom([]string{"a b", "-x", strings.Repeat("v", 64)}).Draw(t, "badLabel")}
		return "metadata.labels", true
	}},
}

// Breaking any one field of a valid Service is reported at that field's
// path. Every breaker that applies is tried on each generated service.
func TestPropInvalidFieldReportedWithPath(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		base := genService(t, svcShape{allocated: true})
		for _, b := range breakers {
			svc := base.DeepCopy()
			path, ok := b.apply(t, svc)
			if !ok {
				continue
			}
			errs := ValidateService(svc)
			if !hasPath(errs, path) {
				t.Fatalf("%s: no error at %s; got %v", b.name, path, errs)
			}
			// The 422 text names the field too.
			if msg := InvalidError(svc, errs).Error(); !strings.Contains(msg, path+":") {
				t.Fatalf("%s: 422 text %q lacks %s", b.name, msg, path)
			}
		}
	})
}

func hasPath(errs field.ErrorList, path string) bool {
	for _, e := range errs {
		if e.Field == path {
			return true
		}
	}
	return false
}

// causeFields returns the field paths of a 422's causes.
func causeFields(err error) []string {
	var out []string
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Details != nil {
		for _, c := range st.Status().Details.Causes {
			out = append(out, c.Field)
		}
	}
	return out
}

// An address that may not be an endpoint — unspecified, loopback, link-local,
// link-local multicast, not an IP, or a Service's cluster IP — in a
// hand-written Endpoints or EndpointSlice is reported at that address's path
// (by Validate, and by the Store as a 422), while the same object with only
// good addresses is accepted.
func TestPropBadEndpointAddressReportedWithPath(t *testing.T) {
	const clusterIP4, clusterIP6 = "10.96.0.50", "fd00:10:96::50"
	bad4 := []string{"0.0.0.0", "127.0.0.1", "127.4.5.6", "169.254.169.254", "224.0.0.251", "10.0.0.300", "not-an-ip", clusterIP4}
	bad6 := []string{"::", "::1", "fe80::1", "ff02::fb", clusterIP6}
	rapid.Check(t, func(t *rapid.T) {
		s, err := NewStore(dualCfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Create(NewService("default/web", Port("http", 80, 0), ClusterIP(clusterIP4, clusterIP6), DualStack())); err != nil {
			t.Fatal(err)
		}
		v6 := rapid.Bool().Draw(t, "v6")
		n := rapid.IntRange(1, 5).Draw(t, "n")
		var addrs []string
		for i := 0; i < n; i++ {
			if v6 {
				addrs = append(addrs, fmt.Sprintf("fd00:192:168::%x", i+1))
			} else {
				addrs = append(addrs, fmt.Sprintf("192.168.1.%d", i+1))
			}
		}
		ready := make([]bool, n)
		for i := range ready {
			ready[i] = rapid.Bool().Draw(t, "ready")
		}
		slice := rapid.Bool().Draw(t, "slice")
		build := func(addrs []string) (runtime.Object, map[int]string) {
			paths := map[int]string{}
			if slice {
				opts := []Option{ForService("web"), SlicePort("http", 80, corev1.ProtocolTCP), AddressType(discoveryv1.AddressTypeIPv4)}
				if v6 {
					opts[2] = AddressType(discoveryv1.AddressTypeIPv6)
				}
				for i, a := range addrs {
					opts = append(opts, Endpoint(SliceEndpoint(a, ready[i], ready[i], false)))
					paths[i] = fmt.Sprintf("endpoints[%d].addresses[0]", i)
				}
				return NewEndpointSlice("default/web-hand", opts...), paths
			}
			var r, nr []string
			for i, a := range addrs {
				if ready[i] {
					paths[i] = fmt.Sprintf("subsets[0].addresses[%d].ip", len(r))
					r = append(r, a)
				} else {
					paths[i] = fmt.Sprintf("subsets[0].notReadyAddresses[%d].ip", len(nr))
					nr = append(nr, a)
				}
			}
			return NewEndpoints("default/web", Subset(r, nr, EndpointPort("http", 80, corev1.ProtocolTCP))), paths
		}

		// The good object passes.
		good, _ := build(addrs)
		if errs := Validate(good.DeepCopyObject()); len(errs) != 0 {
			t.Fatalf("good object invalid: %v", errs)
		}

		// One bad address is reported at its path.
		k := rapid.IntRange(0, n-1).Draw(t, "k")
		badList := bad4
		if v6 {
			badList = bad6
		}
		broken := append([]string(nil), addrs...)
		broken[k] = rapid.SampledFrom(badList).Draw(t, "bad")
		obj, paths := build(broken)
		path := paths[k]
		isClusterIP := broken[k] == clusterIP4 || broken[k] == clusterIP6
		if !isClusterIP {
			if errs := Validate(obj.DeepCopyObject()); !hasPath(errs, path) {
				t.Fatalf("%s: Validate: no error at %s; got %v", broken[k], path, errs)
			}
		}
		_, err = s.Create(obj)
		if !apierrors.IsInvalid(err) || !slices.Contains(causeFields(err), path) {
			t.Fatalf("%s: Store.Create: want a 422 at %s, got %v", broken[k], path, err)
		}
		if _, err := s.Create(good); err != nil {
			t.Fatalf("good object after a failed create: %v", err)
		}
	})
}
