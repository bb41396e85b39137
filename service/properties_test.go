package service

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
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
}

// Breaking any one field of a valid Service is reported at that field's path.
func TestPropInvalidFieldReportedWithPath(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		svc := genService(t, svcShape{allocated: true})
		b := rapid.SampledFrom(breakers).Draw(t, "breaker")
		path, ok := b.apply(t, svc)
		if !ok {
			t.Skip("breaker does not apply")
		}
		errs := ValidateService(svc)
		if !hasPath(errs, path) {
			t.Fatalf("%s: no error at %s; got %v", b.name, path, errs)
		}
		// The 422 text names the field too.
		if msg := InvalidError(svc, errs).Error(); !strings.Contains(msg, path+":") {
			t.Fatalf("422 text %q lacks %s", msg, path)
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
