package proxy

import (
	"net/netip"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"
)

func changedNames(m map[types.NamespacedName]bool) string {
	var s []string
	for nn := range m {
		s = append(s, nn.String())
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

func filterStrings(fs []ConntrackFilter) string {
	var s []string
	for _, f := range fs {
		s = append(s, f.String())
	}
	return strings.Join(s, "\n")
}

// fakeConntrack holds entries and deletes those a filter matches, like the real table.
type fakeConntrack struct {
	entries []ctEntry
	calls   []string
}

type ctEntry struct {
	proto    uint8
	dst      netip.Addr
	dport    uint16
	replySrc netip.Addr
}

func (f *fakeConntrack) Delete(flt ConntrackFilter) (int, error) {
	f.calls = append(f.calls, flt.String())
	kept := f.entries[:0]
	n := 0
	for _, e := range f.entries {
		match := (flt.Protocol == 0 || flt.Protocol == e.proto) &&
			(!flt.OrigDst.IsValid() || flt.OrigDst == e.dst) &&
			(flt.OrigDstPort == 0 || flt.OrigDstPort == e.dport) &&
			(!flt.ReplySrc.IsValid() || flt.ReplySrc == e.replySrc)
		if match {
			n++
			continue
		}
		kept = append(kept, e)
	}
	f.entries = kept
	return n, nil
}

func TestChangeTracker(t *testing.T) {
	tr := NewChangeTracker(corev1.IPv4Protocol, NodeConfig{Name: testNodeName})
	dns := svc("kube-system", "dns", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.ClusterIP = "172.30.0.10"
		s.Spec.ExternalIPs = []string{"192.168.99.10"}
		s.Spec.Ports = []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, NodePort: 30053},
			{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP},
		}
	})
	web := svc("ns1", "web", func(s *corev1.Service) {
		s.Spec.ClusterIP = "172.30.0.41"
		s.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80}}
	})
	dnsSlice := func(ips ...string) *discoveryv1.EndpointSlice {
		return slice("kube-system", "dns", 1, func(s *discoveryv1.EndpointSlice) {
			s.Ports = []discoveryv1.EndpointPort{port("dns", 53, corev1.ProtocolUDP), port("dns-tcp", 53, corev1.ProtocolTCP)}
			for _, ip := range ips {
				s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}})
			}
		})
	}
	webSlice := slice("ns1", "web", 1, func(s *discoveryv1.EndpointSlice) {
		s.Ports = []discoveryv1.EndpointPort{port("http", 80, corev1.ProtocolTCP)}
		s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.0.2.1"}}}
	})

	// 1. Services without endpoints: everything is new.
	st, err := tr.Update([]*corev1.Service{dns, web}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := changedNames(st.ServicesChanged); got != "kube-system/dns,ns1/web" {
		t.Errorf("1: services changed %q", got)
	}
	if len(st.Services) != 3 || len(st.Endpoints) != 0 || len(st.StaleConntrackFilters()) != 0 {
		t.Errorf("1: unexpected state %d %d %v", len(st.Services), len(st.Endpoints), st.StaleConntrackFilters())
	}

	// 2. DNS gets endpoints: newly active UDP service.
	st, err = tr.Update([]*corev1.Service{dns, web}, []*discoveryv1.EndpointSlice{dnsSlice("10.0.1.1", "10.0.1.2"), webSlice})
	if err != nil {
		t.Fatal(err)
	}
	if got := changedNames(st.ServicesChanged); got != "" {
		t.Errorf("2: services changed %q", got)
	}
	if got := changedNames(st.EndpointsChanged); got != "kube-system/dns,ns1/web" {
		t.Errorf("2: endpoints changed %q", got)
	}
	want := "-D -p udp --orig-dst 172.30.0.10 --orig-port-dst 53\n" +
		"-D -p udp --orig-dst 192.168.99.10 --orig-port-dst 53\n" +
		"-D -p udp --orig-port-dst 30053"
	if got := filterStrings(st.StaleConntrackFilters()); got != want {
		t.Errorf("2: filters:\n%s\nwant:\n%s", got, want)
	}

	// 3. Same objects again (new copies): nothing changed.
	st, err = tr.Update([]*corev1.Service{dns.DeepCopy(), web.DeepCopy()}, []*discoveryv1.EndpointSlice{dnsSlice("10.0.1.1", "10.0.1.2"), webSlice.DeepCopy()})
	if err != nil {
		t.Fatal(err)
	}
	if st.Changed(types.NamespacedName{Namespace: "kube-system", Name: "dns"}) || len(st.EndpointsChanged)+len(st.ServicesChanged) != 0 {
		t.Errorf("3: unexpected changes %v %v", st.ServicesChanged, st.EndpointsChanged)
	}

	// 4. A service label change is no service change; a slice label change is an
	// endpoints change (kube-proxy compares slice objects).
	web2 := web.DeepCopy()
	web2.Labels = map[string]string{"x": "y"}
	ws2 := webSlice.DeepCopy()
	ws2.Labels["extra"] = "1"
	st, _ = tr.Update([]*corev1.Service{dns, web2}, []*discoveryv1.EndpointSlice{dnsSlice("10.0.1.1", "10.0.1.2"), ws2})
	if got := changedNames(st.ServicesChanged) + "|" + changedNames(st.EndpointsChanged); got != "|ns1/web" {
		t.Errorf("4: got %q", got)
	}

	// 5. One DNS endpoint goes: its UDP conntrack entries are cleared (NAT and NodePort).
	ct := &fakeConntrack{entries: []ctEntry{
		{ProtoUDP, netip.MustParseAddr("172.30.0.10"), 53, netip.MustParseAddr("10.0.1.2")},
		{ProtoUDP, netip.MustParseAddr("172.30.0.10"), 53, netip.MustParseAddr("10.0.1.1")},
		{ProtoUDP, netip.MustParseAddr("192.168.0.2"), 30053, netip.MustParseAddr("10.0.1.2")},
		{ProtoTCP, netip.MustParseAddr("172.30.0.10"), 53, netip.MustParseAddr("10.0.1.2")},
	}}
	st, _ = tr.Update([]*corev1.Service{dns, web2}, []*discoveryv1.EndpointSlice{dnsSlice("10.0.1.1"), ws2})
	want = "-D -p udp --orig-port-dst 30053 --reply-src 10.0.1.2\n" +
		"-D -p udp --orig-dst 172.30.0.10 --reply-src 10.0.1.2\n" +
		"-D -p udp --orig-dst 192.168.99.10 --reply-src 10.0.1.2"
	if got := filterStrings(st.StaleConntrackFilters()); got != want {
		t.Errorf("5: filters:\n%s\nwant:\n%s", got, want)
	}
	n, err := CleanStaleConntrack(ct, st.StaleConntrackFilters())
	if err != nil || n != 2 || len(ct.entries) != 2 {
		t.Errorf("5: removed %d (%v), left %v", n, err, ct.entries)
	}

	// 6. The UDP port is removed from the Service: deleted UDP service port.
	dns2 := dns.DeepCopy()
	dns2.Spec.Ports = dns2.Spec.Ports[1:]
	st, _ = tr.Update([]*corev1.Service{dns2, web2}, []*discoveryv1.EndpointSlice{dnsSlice("10.0.1.1"), ws2})
	if len(st.DeletedUDPServicePorts) != 1 || st.DeletedUDPServicePorts[0].Name.Port != "dns" {
		t.Errorf("6: deleted %v", st.DeletedUDPServicePorts)
	}
	if got := changedNames(st.ServicesChanged); got != "kube-system/dns" {
		t.Errorf("6: services changed %q", got)
	}

	// 7. Bad input leaves the tracker unchanged.
	bad := web2.DeepCopy()
	bad.Spec.ExternalIPs = []string{"bogus"}
	if _, err := tr.Update([]*corev1.Service{dns2, bad}, nil); err == nil {
		t.Fatal("7: no error for a bad external IP")
	}
	st, _ = tr.Update([]*corev1.Service{dns2, web2}, []*discoveryv1.EndpointSlice{dnsSlice("10.0.1.1"), ws2})
	if len(st.ServicesChanged)+len(st.EndpointsChanged) != 0 {
		t.Errorf("7: state moved after a failed update: %v %v", st.ServicesChanged, st.EndpointsChanged)
	}

	// 8. Everything deleted.
	st, _ = tr.Update(nil, nil)
	if got := changedNames(st.ServicesChanged) + "|" + changedNames(st.EndpointsChanged); got != "kube-system/dns,ns1/web|kube-system/dns,ns1/web" {
		t.Errorf("8: got %q", got)
	}
}

func TestChangeTrackerEndpointGoesNotServing(t *testing.T) {
	tr := NewChangeTracker(corev1.IPv4Protocol, NodeConfig{Name: testNodeName})
	s := svc("ns", "u", func(s *corev1.Service) {
		s.Spec.ClusterIP = "172.30.0.9"
		s.Spec.Ports = []corev1.ServicePort{{Name: "p", Port: 9, Protocol: corev1.ProtocolUDP}}
	})
	mk := func(serving bool) *discoveryv1.EndpointSlice {
		return slice("ns", "u", 1, func(sl *discoveryv1.EndpointSlice) {
			sl.Ports = []discoveryv1.EndpointPort{port("p", 9, corev1.ProtocolUDP)}
			sl.Endpoints = []discoveryv1.Endpoint{
				{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(serving), Serving: ptr.To(serving), Terminating: ptr.To(!serving)}},
				{Addresses: []string{"10.0.0.2"}},
			}
		})
	}
	if _, err := tr.Update([]*corev1.Service{s}, []*discoveryv1.EndpointSlice{mk(true)}); err != nil {
		t.Fatal(err)
	}
	st, _ := tr.Update([]*corev1.Service{s}, []*discoveryv1.EndpointSlice{mk(false)})
	if len(st.DeletedUDPEndpoints) != 1 || st.DeletedUDPEndpoints[0].Endpoint != "10.0.0.1:9" {
		t.Errorf("got %v", st.DeletedUDPEndpoints)
	}
	if len(st.NewlyActiveUDPServices) != 0 {
		t.Errorf("still had a serving endpoint; got newly active %v", st.NewlyActiveUDPServices)
	}
}

// Property: CategorizeEndpoints' sets are consistent with its inputs.
func TestCategorizeEndpointsProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 8).Draw(t, "n")
		var eps []*Endpoint
		for i := 0; i < n; i++ {
			e := NewEndpoint(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 80)
			e.Ready = rapid.Bool().Draw(t, "ready")
			e.Serving = e.Ready || rapid.Bool().Draw(t, "serving")
			e.Terminating = !e.Ready && rapid.Bool().Draw(t, "terminating")
			e.Local = rapid.Bool().Draw(t, "local")
			if rapid.Bool().Draw(t, "zoned") {
				e.ZoneHints = []string{rapid.SampledFrom([]string{"a", "b"}).Draw(t, "zone")}
			}
			eps = append(eps, e)
		}
		sortEndpoints(eps)
		sp := &ServicePort{
			InternalPolicyLocal: rapid.Bool().Draw(t, "itp"),
			ExternalPolicyLocal: rapid.Bool().Draw(t, "etp"),
		}
		if rapid.Bool().Draw(t, "nodeport") {
			sp.NodePort = 30000
		}
		c := CategorizeEndpoints(eps, sp, testNodeName, map[string]string{corev1.LabelTopologyZone: "a"})

		usable := false
		anyReady, anyLocalReady := false, false
		for _, e := range eps {
			usable = usable || e.Ready || (e.Serving && e.Terminating)
			anyReady = anyReady || e.Ready
			anyLocalReady = anyLocalReady || (e.Ready && e.Local)
		}
		if c.HasAnyEndpoints != usable {
			t.Fatalf("HasAnyEndpoints=%v, usable=%v", c.HasAnyEndpoints, usable)
		}
		union := map[string]bool{}
		for _, e := range c.Cluster {
			union[e.String()] = true
			if anyReady && !e.Ready {
				t.Fatalf("cluster has unready %s although ready endpoints exist", e)
			}
			if !e.Ready && !(e.Serving && e.Terminating) {
				t.Fatalf("cluster has unusable %s", e)
			}
		}
		for _, e := range c.Local {
			union[e.String()] = true
			if !e.Local {
				t.Fatalf("local set has remote %s", e)
			}
			if anyLocalReady && !e.Ready {
				t.Fatalf("local set has unready %s although local ready endpoints exist", e)
			}
		}
		if len(c.AllReachable) != len(union) {
			t.Fatalf("AllReachable %v is not the union %v", epStrings(c.AllReachable), union)
		}
		for i, e := range c.AllReachable {
			if !union[e.String()] || (i > 0 && c.AllReachable[i-1].String() >= e.String()) {
				t.Fatalf("AllReachable %v not the sorted union", epStrings(c.AllReachable))
			}
		}
		if (c.Cluster != nil) != sp.UsesClusterEndpoints() {
			t.Fatalf("cluster set presence %v vs UsesClusterEndpoints %v", c.Cluster != nil, sp.UsesClusterEndpoints())
		}
	})
}
