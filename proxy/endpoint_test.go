package proxy

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// dumpEndpoints renders an EndpointsMap one service port per line, endpoints with
// their flags: "ns1/svc1:p80/TCP: 10.0.1.1:80(rsl) ..." where r=ready s=serving
// t=terminating l=local.
func dumpEndpoints(em EndpointsMap) string {
	var lines []string
	for spn, eps := range em {
		var parts []string
		for _, ep := range eps {
			flags := ""
			for _, f := range []struct {
				on bool
				c  string
			}{{ep.Ready, "r"}, {ep.Serving, "s"}, {ep.Terminating, "t"}, {ep.Local, "l"}} {
				if f.on {
					flags += f.c
				}
			}
			parts = append(parts, fmt.Sprintf("%s(%s)", ep, flags))
		}
		lines = append(lines, fmt.Sprintf("%s/%s: %s", spn, spn.Protocol, strings.Join(parts, " ")))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func TestBuildEndpointsMap(t *testing.T) {
	node := &NodeConfig{Name: testNodeName}
	cases := []struct {
		name   string
		family corev1.IPFamily
		slices []*discoveryv1.EndpointSlice
		want   string
	}{{
		name:   "conditions default to ready, serving, not terminating; only addresses[0]",
		family: corev1.IPv4Protocol,
		slices: []*discoveryv1.EndpointSlice{slice("ns1", "svc1", 1, func(s *discoveryv1.EndpointSlice) {
			s.Ports = []discoveryv1.EndpointPort{port("p80", 80, corev1.ProtocolTCP)}
			s.Endpoints = []discoveryv1.Endpoint{
				{Addresses: []string{"10.0.1.1", "10.0.1.99"}, NodeName: ptr.To(testNodeName)},
				{Addresses: []string{"10.0.1.2"}, NodeName: ptr.To("other"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
				{Addresses: []string{"10.0.1.3"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}},
				{Addresses: nil},
			}
		})},
		want: "ns1/svc1:p80/TCP: 10.0.1.1:80(rsl) 10.0.1.2:80(s) 10.0.1.3:80(st)",
	}, {
		name:   "sorted by ip:port string; ports by name and protocol; unnamed or unnumbered ports ignored",
		family: corev1.IPv4Protocol,
		slices: []*discoveryv1.EndpointSlice{slice("ns1", "ep1", 1, func(s *discoveryv1.EndpointSlice) {
			s.Ports = []discoveryv1.EndpointPort{
				port("p11", 11, corev1.ProtocolUDP), port("p11", 11, corev1.ProtocolTCP),
				{Name: nil, Port: ptr.To[int32](12)}, {Name: ptr.To("noport")}, port("zero", 0, corev1.ProtocolTCP),
				{Name: ptr.To("defaulted"), Port: ptr.To[int32](13)},
			}
			s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.1.1.1"}}, {Addresses: []string{"10.1.1.11"}}}
		})},
		want: "ns1/ep1:defaulted/TCP: 10.1.1.11:13(rs) 10.1.1.1:13(rs)\n" +
			"ns1/ep1:p11/TCP: 10.1.1.11:11(rs) 10.1.1.1:11(rs)\n" +
			"ns1/ep1:p11/UDP: 10.1.1.11:11(rs) 10.1.1.1:11(rs)",
	}, {
		name:   "duplicates across slices collapse; a terminating duplicate never replaces a live one",
		family: corev1.IPv4Protocol,
		slices: []*discoveryv1.EndpointSlice{
			slice("ns1", "svc1", 1, func(s *discoveryv1.EndpointSlice) {
				s.Ports = []discoveryv1.EndpointPort{port("", 80, corev1.ProtocolTCP)}
				s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, NodeName: ptr.To("a")}}
			}),
			slice("ns1", "svc1", 2, func(s *discoveryv1.EndpointSlice) {
				s.Ports = []discoveryv1.EndpointPort{port("", 80, corev1.ProtocolTCP)}
				s.Endpoints = []discoveryv1.Endpoint{
					{Addresses: []string{"10.0.0.1"}, NodeName: ptr.To(testNodeName), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Terminating: ptr.To(true)}},
					{Addresses: []string{"10.0.0.2"}, NodeName: ptr.To(testNodeName), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Terminating: ptr.To(true)}},
				}
			}),
			slice("ns1", "svc1", 3, func(s *discoveryv1.EndpointSlice) {
				s.Ports = []discoveryv1.EndpointPort{port("", 80, corev1.ProtocolTCP)}
				s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.2"}, NodeName: ptr.To("b")}}
			}),
		},
		want: "ns1/svc1/TCP: 10.0.0.1:80(rs) 10.0.0.2:80(rs)",
	}, {
		name:   "other address types and unlabeled slices are ignored",
		family: corev1.IPv4Protocol,
		slices: []*discoveryv1.EndpointSlice{
			slice("ns1", "svc1", 1, func(s *discoveryv1.EndpointSlice) {
				s.AddressType = discoveryv1.AddressTypeIPv6
				s.Ports = []discoveryv1.EndpointPort{port("p", 80, corev1.ProtocolTCP)}
				s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"fd00::1"}}}
			}),
			slice("ns1", "svc1", 2, func(s *discoveryv1.EndpointSlice) {
				s.AddressType = discoveryv1.AddressTypeFQDN
				s.Ports = []discoveryv1.EndpointPort{port("p", 80, corev1.ProtocolTCP)}
				s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"example.com"}}}
			}),
			slice("ns1", "svc1", 3, func(s *discoveryv1.EndpointSlice) {
				s.Labels = nil
				s.Ports = []discoveryv1.EndpointPort{port("p", 80, corev1.ProtocolTCP)}
				s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}}
			}),
		},
		want: "",
	}, {
		name:   "IPv6 endpoints are bracketed",
		family: corev1.IPv6Protocol,
		slices: []*discoveryv1.EndpointSlice{slice("ns1", "svc1", 1, func(s *discoveryv1.EndpointSlice) {
			s.AddressType = discoveryv1.AddressTypeIPv6
			s.Ports = []discoveryv1.EndpointPort{port("p80", 80, corev1.ProtocolTCP)}
			s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"fd00:10:180:0::1"}}}
		})},
		want: "ns1/svc1:p80/TCP: [fd00:10:180::1]:80(rs)",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			em, err := BuildEndpointsMap(tc.slices, tc.family, node)
			if err != nil {
				t.Fatal(err)
			}
			if got := dumpEndpoints(em); got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestBuildEndpointsMapErrorsAndHints(t *testing.T) {
	bad := slice("ns1", "svc1", 1, func(s *discoveryv1.EndpointSlice) {
		s.Ports = []discoveryv1.EndpointPort{port("p", 80, corev1.ProtocolTCP)}
		s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}, {Addresses: []string{"10.0.0.256"}}}
	})
	_, err := BuildEndpointsMap([]*discoveryv1.EndpointSlice{bad}, corev1.IPv4Protocol, &NodeConfig{})
	if want := `endpointslice ns1/svc1-1: endpoints[1].addresses[0]: invalid IP address "10.0.0.256"`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	hinted := slice("ns1", "svc1", 1, func(s *discoveryv1.EndpointSlice) {
		s.Ports = []discoveryv1.EndpointPort{port("p", 80, corev1.ProtocolTCP)}
		s.Endpoints = []discoveryv1.Endpoint{{
			Addresses: []string{"10.0.0.1"}, Zone: ptr.To("zone-a"),
			Hints: &discoveryv1.EndpointHints{
				ForZones: []discoveryv1.ForZone{{Name: "zone-a"}, {Name: "zone-b"}},
				ForNodes: []discoveryv1.ForNode{{Name: "n1"}},
			},
		}}
	})
	for _, ignore := range []bool{false, true} {
		em, err := BuildEndpointsMap([]*discoveryv1.EndpointSlice{hinted}, corev1.IPv4Protocol, &NodeConfig{IgnoreNodeHints: ignore})
		if err != nil {
			t.Fatal(err)
		}
		for _, eps := range em {
			ep := eps[0]
			if ep.Zone != "zone-a" || !ep.HasZoneHint("zone-b") || ep.HasZoneHint("zone-c") {
				t.Errorf("zone fields wrong: %+v", ep)
			}
			if ep.HasNodeHint("n1") == ignore {
				t.Errorf("IgnoreNodeHints=%v: node hints %v", ignore, ep.NodeHints)
			}
		}
	}
}

func TestLocalReadyEndpoints(t *testing.T) {
	em, err := BuildEndpointsMap([]*discoveryv1.EndpointSlice{slice("ns1", "svc1", 1, func(s *discoveryv1.EndpointSlice) {
		s.Ports = []discoveryv1.EndpointPort{port("a", 80, corev1.ProtocolTCP), port("b", 443, corev1.ProtocolTCP)}
		s.Endpoints = []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.1"}, NodeName: ptr.To(testNodeName)},
			{Addresses: []string{"10.0.0.2"}, NodeName: ptr.To(testNodeName), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Terminating: ptr.To(true)}},
			{Addresses: []string{"10.0.0.3"}, NodeName: ptr.To("other")},
		}
	})}, corev1.IPv4Protocol, &NodeConfig{Name: testNodeName})
	if err != nil {
		t.Fatal(err)
	}
	got := em.LocalReadyEndpoints()
	// One IP counted once although it serves two ports; the terminating one not at all.
	if len(got) != 1 {
		t.Fatalf("got %v", got)
	}
	for nn, n := range got {
		if nn.String() != "ns1/svc1" || n != 1 {
			t.Errorf("got %v=%d", nn, n)
		}
	}
}
