package proxy

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func TestServicePortNameString(t *testing.T) {
	nn := types.NamespacedName{Namespace: "ns1", Name: "svc1"}
	if got := (ServicePortName{NamespacedName: nn, Port: "p80", Protocol: corev1.ProtocolTCP}).String(); got != "ns1/svc1:p80" {
		t.Errorf("named port: got %q", got)
	}
	if got := (ServicePortName{NamespacedName: nn, Protocol: corev1.ProtocolUDP}).String(); got != "ns1/svc1" {
		t.Errorf("unnamed port: got %q", got)
	}
}

// describe renders the fields of a ServicePort that tests assert on.
func describe(sp *ServicePort) string {
	return fmt.Sprintf("cip=%s port=%d/%s np=%d ext=[%s] lb=[%s] ranges=%v hc=%d aff=%s/%d eLocal=%v iLocal=%v accessible=%v cluster=%v local=%v",
		sp.ClusterIP, sp.Port, sp.Protocol, sp.NodePort, addrs(sp.ExternalIPs), addrs(sp.LoadBalancerVIPs),
		sp.LoadBalancerSourceRanges, sp.HealthCheckNodePort, sp.SessionAffinity, sp.StickyMaxAgeSeconds,
		sp.ExternalPolicyLocal, sp.InternalPolicyLocal, sp.ExternallyAccessible(), sp.UsesClusterEndpoints(), sp.UsesLocalEndpoints())
}

func TestServicePortsForService(t *testing.T) {
	proxyMode := corev1.LoadBalancerIPModeProxy
	vipMode := corev1.LoadBalancerIPModeVIP
	cases := []struct {
		name   string
		family corev1.IPFamily
		svc    *corev1.Service
		want   map[string]string // ServicePortName.String()/proto -> describe
	}{{
		name:   "plain ClusterIP, protocol defaults to TCP",
		family: corev1.IPv4Protocol,
		svc: svc("ns1", "svc1", func(s *corev1.Service) {
			s.Spec.ClusterIP = "172.30.0.41"
			s.Spec.Ports = []corev1.ServicePort{{Name: "p80", Port: 80}}
		}),
		want: map[string]string{"ns1/svc1:p80/TCP": "cip=172.30.0.41 port=80/TCP np=0 ext=[] lb=[] ranges=[] hc=0 aff=None/0 eLocal=false iLocal=false accessible=false cluster=true local=false"},
	}, {
		name:   "headless is skipped",
		family: corev1.IPv4Protocol,
		svc: svc("ns1", "h", func(s *corev1.Service) {
			s.Spec.ClusterIP = corev1.ClusterIPNone
			s.Spec.Ports = []corev1.ServicePort{{Name: "p", Port: 80}}
		}),
		want: map[string]string{},
	}, {
		name:   "ExternalName is skipped even with a cluster IP",
		family: corev1.IPv4Protocol,
		svc: svc("ns1", "x", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ClusterIP = "172.30.55.4"
			s.Spec.Ports = []corev1.ServicePort{{Name: "p", Port: 80}}
		}),
		want: map[string]string{},
	}, {
		name:   "dual-stack service in the IPv6 proxy: second cluster IP, IPv6 addresses only",
		family: corev1.IPv6Protocol,
		svc: svc("ns1", "ds", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = "172.30.0.41"
			s.Spec.ClusterIPs = []string{"172.30.0.41", "fd00:172:30::41"}
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
			s.Spec.ExternalIPs = []string{"192.168.99.11", "2001:db8::99"}
			s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/25", "2001:db8:1::/48"}
			s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, NodePort: 30053}}
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "1.2.3.4"}, {IP: "2001:db8::1:4"}}
		}),
		want: map[string]string{"ns1/ds:dns/UDP": "cip=fd00:172:30::41 port=53/UDP np=30053 ext=[2001:db8::99] lb=[2001:db8::1:4] ranges=[2001:db8:1::/48] hc=0 aff=None/0 eLocal=false iLocal=false accessible=true cluster=true local=false"},
	}, {
		name:   "single-stack IPv4 service has nothing for the IPv6 proxy",
		family: corev1.IPv6Protocol,
		svc: svc("ns1", "v4", func(s *corev1.Service) {
			s.Spec.ClusterIP = "172.30.0.41"
			s.Spec.Ports = []corev1.ServicePort{{Name: "p", Port: 80}}
		}),
		want: map[string]string{},
	}, {
		name:   "LoadBalancer eTP Local: health check port, Proxy-mode ingress ignored, ranges trimmed and in network form",
		family: corev1.IPv4Protocol,
		svc: svc("ns2", "lb", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = "172.30.0.42"
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 30000
			s.Spec.LoadBalancerSourceRanges = []string{" 203.0.113.7/25", "192.168.0.0/24 "}
			s.Spec.Ports = []corev1.ServicePort{{Name: "p80", Port: 80, NodePort: 3001}}
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
				{IP: "1.2.3.4"}, {IP: "5.6.7.8", IPMode: &proxyMode}, {IP: "9.10.11.12", IPMode: &vipMode}, {Hostname: "lb.example"},
			}
		}),
		want: map[string]string{"ns2/lb:p80/TCP": "cip=172.30.0.42 port=80/TCP np=3001 ext=[] lb=[1.2.3.4,9.10.11.12] ranges=[203.0.113.0/25 192.168.0.0/24] hc=30000 aff=None/0 eLocal=true iLocal=false accessible=true cluster=true local=true"},
	}, {
		name:   "a zero-length source range allows everything: no ranges",
		family: corev1.IPv4Protocol,
		svc: svc("ns2", "open", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = "172.30.0.42"
			s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/25", "0.0.0.0/0"}
			s.Spec.Ports = []corev1.ServicePort{{Name: "p80", Port: 80, NodePort: 3001}}
		}),
		want: map[string]string{"ns2/open:p80/TCP": "cip=172.30.0.42 port=80/TCP np=3001 ext=[] lb=[] ranges=[] hc=0 aff=None/0 eLocal=false iLocal=false accessible=true cluster=true local=false"},
	}, {
		name:   "eTP Local on a plain ClusterIP service means nothing; iTP Local; ClientIP default timeout",
		family: corev1.IPv4Protocol,
		svc: svc("ns3", "itp", func(s *corev1.Service) {
			s.Spec.ClusterIP = "172.30.0.43"
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.Ports = []corev1.ServicePort{{Name: "a", Port: 80}, {Name: "b", Port: 81, Protocol: corev1.ProtocolSCTP}}
		}),
		want: map[string]string{
			"ns3/itp:a/TCP":  "cip=172.30.0.43 port=80/TCP np=0 ext=[] lb=[] ranges=[] hc=0 aff=ClientIP/10800 eLocal=false iLocal=true accessible=false cluster=false local=true",
			"ns3/itp:b/SCTP": "cip=172.30.0.43 port=81/SCTP np=0 ext=[] lb=[] ranges=[] hc=0 aff=ClientIP/10800 eLocal=false iLocal=true accessible=false cluster=false local=true",
		},
	}, {
		name:   "eTP Local applies to a ClusterIP service with externalIPs; explicit affinity timeout",
		family: corev1.IPv4Protocol,
		svc: svc("ns4", "ext", func(s *corev1.Service) {
			s.Spec.ClusterIP = "172.30.0.44"
			s.Spec.ExternalIPs = []string{"192.168.99.33"}
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
			s.Spec.Ports = []corev1.ServicePort{{Port: 80}}
		}),
		want: map[string]string{"ns4/ext/TCP": "cip=172.30.0.44 port=80/TCP np=0 ext=[192.168.99.33] lb=[] ranges=[] hc=0 aff=ClientIP/60 eLocal=true iLocal=false accessible=true cluster=true local=true"},
	}, {
		name:   "leading zeros in IPv4 are accepted, as by the API server",
		family: corev1.IPv4Protocol,
		svc: svc("ns5", "z", func(s *corev1.Service) {
			s.Spec.ClusterIP = "172.030.000.045"
			s.Spec.Ports = []corev1.ServicePort{{Name: "p", Port: 80}}
		}),
		want: map[string]string{"ns5/z:p/TCP": "cip=172.30.0.45 port=80/TCP np=0 ext=[] lb=[] ranges=[] hc=0 aff=None/0 eLocal=false iLocal=false accessible=false cluster=true local=false"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ServicePortsForService(tc.svc, tc.family)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for name, sp := range m {
				if name != sp.Name {
					t.Errorf("key %v != Name %v", name, sp.Name)
				}
				got[name.String()+"/"+string(name.Protocol)] = describe(sp)
			}
			if len(got) != len(tc.want) {
				t.Errorf("got %d ports %v, want %d", len(got), got, len(tc.want))
			}
			for k, w := range tc.want {
				if got[k] != w {
					t.Errorf("%s:\n got %s\nwant %s", k, got[k], w)
				}
			}
		})
	}
}

func TestServicePortsForServiceErrors(t *testing.T) {
	cases := []struct {
		name string
		f    func(*corev1.Service)
		want string
	}{
		{"bad cluster IP", func(s *corev1.Service) { s.Spec.ClusterIP = "172.30.0.x" }, `service ns1/bad: spec.clusterIPs: invalid IP address "172.30.0.x"`},
		{"bad external IP", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"1.2.3.4", "nope"} }, `service ns1/bad: spec.externalIPs[1]: invalid IP address "nope"`},
		{"bad source range", func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/33"} }, `service ns1/bad: spec.loadBalancerSourceRanges[0]: invalid CIDR "10.0.0.0/33"`},
		{"bad ingress IP", func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "1.2.3"}}
		}, `service ns1/bad: status.loadBalancer.ingress[0].ip: invalid IP address "1.2.3"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := svc("ns1", "bad", func(s *corev1.Service) {
				s.Spec.ClusterIP = "172.30.0.41"
				s.Spec.Ports = []corev1.ServicePort{{Name: "p", Port: 80}}
			})
			tc.f(s)
			_, err := ServicePortsForService(s, corev1.IPv4Protocol)
			if err == nil || err.Error() != tc.want {
				t.Errorf("got error %v, want %q", err, tc.want)
			}
		})
	}
	// Duplicates in a list.
	a := svc("ns1", "dup", func(s *corev1.Service) { s.Spec.ClusterIP = "172.30.0.1" })
	_, err := BuildServicePortMap([]*corev1.Service{a, a}, corev1.IPv4Protocol)
	if err == nil || !strings.Contains(err.Error(), "ns1/dup: listed twice") {
		t.Errorf("duplicate: got %v", err)
	}
}

func TestHealthCheckNodePorts(t *testing.T) {
	services := []*corev1.Service{
		svc("somewhere", "only-local-load-balancer", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = "172.30.55.12"
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 345
			s.Spec.Ports = []corev1.ServicePort{{Name: "a", Port: 1, NodePort: 30063}, {Name: "b", Port: 2, NodePort: 30064}}
		}),
		svc("somewhere", "nodeport-local", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.ClusterIP = "172.30.55.13"
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 346 // not a LoadBalancer: no health check
			s.Spec.Ports = []corev1.ServicePort{{Name: "a", Port: 1, NodePort: 30065}}
		}),
	}
	m, err := BuildServicePortMap(services, corev1.IPv4Protocol)
	if err != nil {
		t.Fatal(err)
	}
	hc := m.HealthCheckNodePorts()
	if len(hc) != 1 || hc[types.NamespacedName{Namespace: "somewhere", Name: "only-local-load-balancer"}] != 345 {
		t.Errorf("got %v", hc)
	}
}
