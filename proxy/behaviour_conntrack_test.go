package proxy

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// A UDP NodePort service (cluster IP 172.30.0.10:53, NodePort 30053) for the cleanup
// tests, and its slice of endpoints (ready unless named in notReady).
func udpService() *corev1.Service {
	return svc("ns", "dns", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.ClusterIP = "172.30.0.10"
		s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, NodePort: 30053}}
	})
}

func udpSlice(ips []string, notReady ...string) []*discoveryv1.EndpointSlice {
	return []*discoveryv1.EndpointSlice{slice("ns", "dns", 1, func(s *discoveryv1.EndpointSlice) {
		s.Ports = []discoveryv1.EndpointPort{port("dns", 53, corev1.ProtocolUDP)}
		for _, ip := range ips {
			ready := true
			for _, nr := range notReady {
				ready = ready && nr != ip
			}
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready)}})
		}
	})}
}

var (
	clusterIP = netip.MustParseAddr("172.30.0.10")
	nodeIP    = netip.MustParseAddr("192.168.0.2")
)

// udpEntry is a UDP entry to the cluster IP (nodePort false) or to the node's NodePort,
// whose reply comes from replySrc (the endpoint it was DNATed to, or the address itself
// for a "black hole" entry made while the service had no endpoint).
func udpEntry(nodePort bool, replySrc string) ctEntry {
	if nodePort {
		return ctEntry{ProtoUDP, nodeIP, 30053, netip.MustParseAddr(replySrc)}
	}
	return ctEntry{ProtoUDP, clusterIP, 53, netip.MustParseAddr(replySrc)}
}

// step is one sync of a cleanup scenario: the objects, then the entries clients make
// after the sync (and its cleanup).
type step struct {
	services []*corev1.Service
	slices   []*discoveryv1.EndpointSlice
	add      []ctEntry
}

// replay runs the steps through a ChangeTracker of the node and a conntrack table that
// deletes what each sync's filters match, and returns whether the watched entry is still
// in the table at the end.
func replay(t *testing.T, node NodeConfig, watched ctEntry, steps ...step) bool {
	t.Helper()
	tr := NewChangeTracker(corev1.IPv4Protocol, node)
	ct := &fakeConntrack{}
	for i, s := range steps {
		st, err := tr.Update(s.services, s.slices)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if _, err := CleanStaleConntrack(ct, st.StaleConntrackFilters()); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		ct.entries = append(ct.entries, s.add...)
	}
	for _, e := range ct.entries {
		if e == watched {
			return true
		}
	}
	return false
}

// The cleanup eras (rows 19-26), each as the conntrack table after the syncs of a flow:
//   - scale-to-0: a one-way UDP client's entry to the only endpoint, which goes away.
//     Deleted up to 1.31; kept by the 1.32 reconciler (it skips services with no serving
//     endpoint, #139628); deleted again from 1.36.
//   - nodeport-0-to-N: a NodePort "black hole" entry made while the service had no
//     endpoint, then an endpoint appears: kept up to 1.20, flushed from 1.21.
//   - clusterip-0-to-N: the same through the cluster IP: flushed in every release.
//   - service-deleted: an entry to an endpoint of a UDP service that is deleted: deleted
//     up to 1.31, kept by 1.32-1.35, deleted from 1.36.
//   - endpoint-replaced: one of two endpoints goes: its entry is deleted in every release.
//
// 1.26, 1.27 and 1.28 (the refactors of rows 22 and 23) clean alike.
func TestStaleUDPCleanupEras(t *testing.T) {
	svcs := []*corev1.Service{udpService()}
	scenarios := []struct {
		name    string
		watched ctEntry
		steps   []step
	}{
		{"scale-to-0", udpEntry(false, "10.0.1.1"), []step{
			{svcs, udpSlice([]string{"10.0.1.1"}), []ctEntry{udpEntry(false, "10.0.1.1")}},
			{svcs, udpSlice(nil), nil}}},
		{"nodeport-0-to-N", udpEntry(true, "192.168.0.2"), []step{
			{svcs, nil, []ctEntry{udpEntry(true, "192.168.0.2")}},
			{svcs, udpSlice([]string{"10.0.1.1"}), nil}}},
		{"clusterip-0-to-N", udpEntry(false, "172.30.0.10"), []step{
			{svcs, nil, []ctEntry{udpEntry(false, "172.30.0.10")}},
			{svcs, udpSlice([]string{"10.0.1.1"}), nil}}},
		{"service-deleted", udpEntry(false, "10.0.1.1"), []step{
			{svcs, udpSlice([]string{"10.0.1.1"}), []ctEntry{udpEntry(false, "10.0.1.1")}},
			{nil, nil, nil}}},
		{"endpoint-replaced", udpEntry(false, "10.0.1.1"), []step{
			{svcs, udpSlice([]string{"10.0.1.1", "10.0.1.2"}), []ctEntry{udpEntry(false, "10.0.1.1")}},
			{svcs, udpSlice([]string{"10.0.1.2"}), nil}}},
	}
	var got []string
	for _, v := range []Version{18, 20, 21, 26, 27, 28, 31, 32, 35, 36, 37} {
		var kept []string
		for _, sc := range scenarios {
			if replay(t, NodeConfig{Name: testNodeName, IPs: []netip.Addr{nodeIP}, Version: v}, sc.watched, sc.steps...) {
				kept = append(kept, sc.name)
			}
		}
		got = append(got, fmt.Sprintf("%s: kept %s", v, strings.Join(kept, ",")))
	}
	want := []string{
		"1.18: kept nodeport-0-to-N",
		"1.20: kept nodeport-0-to-N",
		"1.21: kept ",
		"1.26: kept ",
		"1.27: kept ",
		"1.28: kept ",
		"1.31: kept ",
		"1.32: kept scale-to-0,service-deleted",
		"1.35: kept scale-to-0,service-deleted",
		"1.36: kept ",
		"1.37: kept ",
	}
	if g, w := strings.Join(got, "\n"), strings.Join(want, "\n"); g != w {
		t.Errorf("entries left after the syncs:\n%s\nwant:\n%s", g, w)
	}
}

// Row 21: an endpoint appears not ready (no rules yet), a client sends to the cluster IP
// and gets a "black hole" entry, then the endpoint becomes ready. 1.21 and 1.23 flush the
// entry when the endpoint becomes ready; 1.22 flushed when it appeared, before the client
// sent, and keeps it.
func TestUDPZeroToNReadinessRegression(t *testing.T) {
	svcs := []*corev1.Service{udpService()}
	hole := udpEntry(false, "172.30.0.10")
	for _, tc := range []struct {
		v    Version
		kept bool
	}{{21, false}, {22, true}, {23, false}, {37, false}} {
		kept := replay(t, NodeConfig{Name: testNodeName, Version: tc.v}, hole,
			step{svcs, nil, nil},
			step{svcs, udpSlice([]string{"10.0.1.1"}, "10.0.1.1"), []ctEntry{hole}},
			step{svcs, udpSlice([]string{"10.0.1.1"}), nil})
		if kept != tc.kept {
			t.Errorf("kube-proxy %s: black-hole entry kept = %v, want %v", tc.v, kept, tc.kept)
		}
	}
}

// Row 24: without the conntrack binary, releases before 1.32 clean nothing (the entry
// to a removed endpoint stays); 1.32 deletes through netlink.
func TestConntrackBinaryMissing(t *testing.T) {
	svcs := []*corev1.Service{udpService()}
	dead := udpEntry(false, "10.0.1.1")
	for _, tc := range []struct {
		v       Version
		missing bool
		kept    bool
	}{{31, false, false}, {31, true, true}, {32, true, false}, {37, true, false}} {
		node := NodeConfig{Name: testNodeName, Version: tc.v, ConntrackBinaryMissing: tc.missing}
		kept := replay(t, node, dead,
			step{svcs, udpSlice([]string{"10.0.1.1", "10.0.1.2"}), []ctEntry{dead}},
			step{svcs, udpSlice([]string{"10.0.1.2"}), nil})
		if kept != tc.kept {
			t.Errorf("kube-proxy %s, binary missing %v: stale entry kept = %v, want %v", tc.v, tc.missing, kept, tc.kept)
		}
	}
}
