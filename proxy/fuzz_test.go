package proxy

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// FuzzServicePortsForService parses arbitrary address strings the way a Service
// carries them: no panic; an error names a field; every address kept is of the
// family asked for, and source ranges are in network form.
func FuzzServicePortsForService(f *testing.F) {
	f.Add("172.30.0.1", "fd00::1", "192.168.99.1", " 203.0.113.0/25", "1.2.3.4", true)
	f.Add("010.0.0.1", "::ffff:10.0.0.1", "fe80::1%eth0", "10.0.0.1/8", "::", false)
	f.Fuzz(func(t *testing.T, cip, cip2, ext, rng, ingress string, dual bool) {
		s := svc("ns", "f", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = cip
			if dual {
				s.Spec.ClusterIPs = []string{cip, cip2}
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
			}
			s.Spec.ExternalIPs = []string{ext}
			s.Spec.LoadBalancerSourceRanges = []string{rng}
			s.Spec.Ports = []corev1.ServicePort{{Name: "p", Port: 80, NodePort: 30080}}
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ingress}}
		})
		for _, fam := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
			m, err := ServicePortsForService(s, fam)
			if err != nil {
				if !strings.HasPrefix(err.Error(), "service ns/f: ") || !strings.Contains(err.Error(), "spec.") && !strings.Contains(err.Error(), "status.") {
					t.Fatalf("error does not name the field: %v", err)
				}
				continue
			}
			for _, sp := range m {
				for _, a := range append(append([]netipAddr{sp.ClusterIP}, sp.ExternalIPs...), sp.LoadBalancerVIPs...) {
					if familyOf(a) != fam || a.Zone() != "" || a.Is4In6() {
						t.Fatalf("%s proxy got address %s", fam, a)
					}
				}
				for _, p := range sp.LoadBalancerSourceRanges {
					if familyOf(p.Addr()) != fam || p.Masked() != p {
						t.Fatalf("%s proxy got range %s", fam, p)
					}
				}
			}
		}
	})
}

// FuzzEndpointsFromSlice: arbitrary endpoint addresses give an error naming the entry
// or endpoints whose strings are consistent.
func FuzzEndpointsFromSlice(f *testing.F) {
	f.Add("10.0.0.1", "10.0.0.1", int32(80), true)
	f.Add("fd00::1", "::ffff:1.2.3.4", int32(0), false)
	f.Fuzz(func(t *testing.T, a, b string, port int32, v6 bool) {
		s := slice("ns", "svc", 1, func(s *discoveryv1.EndpointSlice) {
			if v6 {
				s.AddressType = discoveryv1.AddressTypeIPv6
			}
			s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("p"), Port: ptr.To(port)}}
			s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{a}}, {Addresses: []string{b}, Conditions: discoveryv1.EndpointConditions{Terminating: ptr.To(true)}}}
		})
		fam := corev1.IPv4Protocol
		if v6 {
			fam = corev1.IPv6Protocol
		}
		em, err := BuildEndpointsMap([]*discoveryv1.EndpointSlice{s}, fam, &NodeConfig{})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "endpointslice ns/svc-1: endpoints[") {
				t.Fatalf("error does not name the entry: %v", err)
			}
			return
		}
		for _, eps := range em {
			for i, ep := range eps {
				if ep.String() != joinHostPort(ep.IP.String(), ep.Port) || ep.IPString() != ep.IP.String() {
					t.Fatalf("endpoint strings %q %q for %s:%d", ep.String(), ep.IPString(), ep.IP, ep.Port)
				}
				if i > 0 && eps[i-1].String() >= ep.String() {
					t.Fatalf("endpoints not sorted and unique: %s, %s", eps[i-1], ep)
				}
			}
		}
	})
}

type netipAddr = netip.Addr

func joinHostPort(h string, p int) string { return net.JoinHostPort(h, strconv.Itoa(p)) }
