package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/clusterlab/clusterlab/proxy"
)

func mkService(ns, name, ip string, f func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip},
	}
	if f != nil {
		f(s)
	}
	return s
}

func withPort(name string, port int32, proto corev1.Protocol) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: name, Port: port, Protocol: proto})
	}
}

func mkSlice(ns, svc string, n int, portName string, port int32, proto corev1.Protocol, ips ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: fmt.Sprintf("%s-%d", svc, n),
			Labels: map[string]string{discoveryv1.LabelServiceName: svc},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Port: ptr.To(port), Protocol: ptr.To(proto)}},
	}
	if len(ips) > 0 && strings.Contains(ips[0], ":") {
		s.AddressType = discoveryv1.AddressTypeIPv6
	}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}})
	}
	return s
}

// fakeClock is a settable clock.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

func newClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

// kube-proxy's TestSyncProxyRulesRepeated: what each sync writes as Services and
// endpoints come and go. Each step's restore text is compared with kube-proxy's
// expected text (after its test sort) and byte for byte with our golden file.
func TestPartialSyncsRepeated(t *testing.T) {
	ctx := context.Background()
	ipt := newFakeIPT()
	cfg := upstreamConfig(corev1.IPv4Protocol)
	clock := newClock()
	cfg.Clock = clock.Now
	p, err := NewProxier(ipt, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	svc1 := mkService("ns1", "svc1", "172.30.0.41", withPort("p80", 80, corev1.ProtocolTCP))
	svc2 := mkService("ns2", "svc2", "172.30.0.42", withPort("p8080", 8080, corev1.ProtocolTCP))
	svc3 := mkService("ns3", "svc3", "172.30.0.43", withPort("p80", 80, corev1.ProtocolTCP))
	svc4 := mkService("ns4", "svc4", "172.30.0.44", withPort("p80", 80, corev1.ProtocolTCP))
	eps1 := mkSlice("ns1", "svc1", 1, "p80", 80, corev1.ProtocolTCP, "10.0.1.1")
	eps2 := mkSlice("ns2", "svc2", 1, "p8080", 8080, corev1.ProtocolTCP, "10.0.2.1")
	eps3 := mkSlice("ns3", "svc3", 1, "p80", 80, corev1.ProtocolTCP, "10.0.3.1")
	eps4 := mkSlice("ns4", "svc4", 1, "p80", 80, corev1.ProtocolTCP, "10.0.4.1")
	eps3b := mkSlice("ns3", "svc3", 1, "p80", 80, corev1.ProtocolTCP, "10.0.3.2")
	eps3c := mkSlice("ns3", "svc3", 1, "p80", 80, corev1.ProtocolTCP, "10.0.3.2", "10.0.3.3")

	type step struct {
		name     string
		services []*corev1.Service
		slices   []*discoveryv1.EndpointSlice
		full     bool
		before   func()
		fails    bool
	}
	steps := []step{
		{name: "1-initial", services: []*corev1.Service{svc1, svc2}, slices: []*discoveryv1.EndpointSlice{eps1, eps2}, full: true},
		{name: "2-add-svc3", services: []*corev1.Service{svc1, svc2, svc3}, slices: []*discoveryv1.EndpointSlice{eps1, eps2, eps3}},
		{name: "3-delete-svc2", services: []*corev1.Service{svc1, svc3}, slices: []*discoveryv1.EndpointSlice{eps1, eps2, eps3}},
		{name: "4-add-svc4-no-endpoints", services: []*corev1.Service{svc1, svc3, svc4}, slices: []*discoveryv1.EndpointSlice{eps1, eps2, eps3}},
		{name: "5-svc4-endpoints", services: []*corev1.Service{svc1, svc3, svc4}, slices: []*discoveryv1.EndpointSlice{eps1, eps2, eps3, eps4}},
		{name: "6-change-endpoint", services: []*corev1.Service{svc1, svc3, svc4}, slices: []*discoveryv1.EndpointSlice{eps1, eps2, eps3b, eps4}},
		{name: "7-add-endpoint", services: []*corev1.Service{svc1, svc3, svc4}, slices: []*discoveryv1.EndpointSlice{eps1, eps2, eps3c, eps4}},
		{name: "8-no-change", services: []*corev1.Service{svc1, svc3, svc4}, slices: []*discoveryv1.EndpointSlice{eps1, eps2, eps3c, eps4}},
		{
			// A rule jumping from svc3's chain to svc4's endpoint makes the partial
			// sync that deletes svc4 fail: its chain is still referenced.
			name: "deleting a referenced chain fails", fails: true,
			services: []*corev1.Service{svc1, svc3}, slices: []*discoveryv1.EndpointSlice{eps1, eps2, eps3c, eps4},
			before: func() {
				nat := ipt.tables[TableNAT]
				nat.chains["KUBE-SVC-X27LE4BHSL4DOUIK"] = append(nat.chains["KUBE-SVC-X27LE4BHSL4DOUIK"], "-j KUBE-SEP-AYCN5HPXMIRJNJXU")
			},
		},
		{name: "9-full-resync-after-failure", full: true, services: []*corev1.Service{svc1, svc3}, slices: []*discoveryv1.EndpointSlice{eps1, eps2, eps3c, eps4}},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		res, err := p.Sync(ctx, s.services, s.slices)
		if s.fails {
			if err == nil || !strings.Contains(err.Error(), "CHAIN_DEL failed") {
				t.Fatalf("%s: got error %v", s.name, err)
			}
			if !ipt.hasChain(TableNAT, "KUBE-SEP-AYCN5HPXMIRJNJXU") || !ipt.hasChain(TableNAT, "KUBE-SVC-4SW47YFZTEDKD3PK") {
				t.Fatalf("%s: the failed restore was partly applied", s.name)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if res.Full != s.full {
			t.Errorf("%s: full=%v, want %v", s.name, res.Full, s.full)
		}
		up, err := os.ReadFile(filepath.Join(caseDir, "upstream", "repeated", s.name+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(sortRestore(t, string(up)), sortRestore(t, asUpstream(string(res.Data)))); diff != "" {
			t.Errorf("%s: differs from kube-proxy's expected text (-kube-proxy +ours):\n%s", s.name, diff)
		}
		golden := filepath.Join(caseDir, "partial", s.name+".golden")
		if *update {
			_ = os.MkdirAll(filepath.Dir(golden), 0o755)
			if err := os.WriteFile(golden, res.Data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, res.Data) {
			t.Errorf("%s: differs from %s:\n%s", s.name, golden, cmp.Diff(string(want), string(res.Data)))
		}
	}
	// The node ends up exactly as a fresh node given the final objects.
	final := steps[len(steps)-1]
	assertSameAsFresh(t, ipt, final.services, final.slices, cfg)
}

// assertSameAsFresh checks that the fake's kube-proxy chains equal those a fresh
// Proxier writes on a fresh node for the same objects.
func assertSameAsFresh(t *testing.T, ipt *fakeIPT, services []*corev1.Service, slices []*discoveryv1.EndpointSlice, cfg Config) {
	t.Helper()
	fresh := newFakeIPT()
	p, err := NewProxier(fresh, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sync(context.Background(), services, slices); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{TableFilter, TableNAT} {
		a, _ := fresh.Save(context.Background(), table)
		b, _ := ipt.Save(context.Background(), table)
		if diff := cmp.Diff(string(a), string(b)); diff != "" {
			t.Errorf("%s table after partial syncs differs from a fresh full sync (-fresh +synced):\n%s", table, diff)
		}
	}
}

// kube-proxy's TestSyncProxyRulesLargeClusterMode: over 1000 endpoints the per-endpoint
// comments go, and stale chains are deleted at most once per sync period.
func TestLargeClusterMode(t *testing.T) {
	ctx := context.Background()
	ipt := newFakeIPT()
	cfg := upstreamConfig(corev1.IPv4Protocol)
	cfg.Node.MasqueradeAll = true
	cfg.SyncPeriod = 30 * time.Second
	clock := newClock()
	cfg.Clock = clock.Now
	p, err := NewProxier(ipt, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	half := LargeClusterEndpointsThreshold/2 - 1
	many := func(ns, svc, port string, portNum int32, prefix string) *discoveryv1.EndpointSlice {
		var ips []string
		for i := 0; i < half; i++ {
			ips = append(ips, fmt.Sprintf("%s.%d.%d", prefix, i%256, i/256))
		}
		return mkSlice(ns, svc, 1, port, portNum, corev1.ProtocolTCP, ips...)
	}
	services := []*corev1.Service{
		mkService("ns1", "svc1", "172.30.0.41", withPort("p80", 80, corev1.ProtocolTCP)),
		mkService("ns2", "svc2", "172.30.0.42", withPort("p8080", 8080, corev1.ProtocolTCP)),
		mkService("ns3", "svc3", "172.30.0.43", withPort("p8081", 8081, corev1.ProtocolTCP)),
	}
	slices := []*discoveryv1.EndpointSlice{many("ns1", "svc1", "p80", 80, "10.0"), many("ns2", "svc2", "p8080", 8080, "10.1")}
	count := func(data []byte, match string) (line string, endpoints, comments int) {
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "-A KUBE-SEP-") && strings.Contains(l, "-j DNAT") {
				endpoints++
				if strings.Contains(l, "--comment") {
					comments++
				}
				if strings.Contains(l, match) {
					line = l
				}
			}
		}
		return
	}

	res, err := p.Sync(ctx, services, slices)
	if err != nil {
		t.Fatal(err)
	}
	first, n, c := count(res.Data, "10.0.0.0")
	if first != "-A KUBE-SEP-DKGQUZGBKLTPAR56 -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.0.0:80" || n != 2*half || c != n || res.LargeCluster {
		t.Errorf("below the threshold: %q, %d endpoints, %d comments, large=%v", first, n, c, res.LargeCluster)
	}

	// Three more endpoints cross the threshold; the partial sync writes only svc3.
	slices = append(slices, mkSlice("ns3", "svc3", 1, "p8081", 8081, corev1.ProtocolTCP, "203.0.113.4", "203.0.113.8", "203.0.113.12"))
	res, _ = p.Sync(ctx, services, slices)
	first, n, c = count(res.Data, "203.0.113.4")
	if first != "-A KUBE-SEP-RUVVH7YV3PHQBDOS -m tcp -p tcp -j DNAT --to-destination 203.0.113.4:8081" || n != 3 || c != 0 || !res.LargeCluster {
		t.Errorf("partial sync over the threshold: %q, %d endpoints, %d comments, large=%v", first, n, c, res.LargeCluster)
	}
	if strings.Contains(string(res.Data), `"ns3/svc3:p8081 -> 203.0.113.4:8081"`) {
		t.Error("per-endpoint comment in large-cluster mode")
	}

	// A full sync rewrites everything without comments.
	p.ForceFullSync()
	res, _ = p.Sync(ctx, services, slices)
	first, n, c = count(res.Data, "10.0.0.0")
	if first != "-A KUBE-SEP-DKGQUZGBKLTPAR56 -m tcp -p tcp -j DNAT --to-destination 10.0.0.0:80" || n != 2*half+3 || c != 0 {
		t.Errorf("full sync over the threshold: %q, %d endpoints, %d comments", first, n, c)
	}

	// A new service, then its deletion: no cleanup within the sync period...
	svc4 := mkService("ns4", "svc4", "172.30.0.44", withPort("p8082", 8082, corev1.ProtocolTCP))
	eps4 := mkSlice("ns4", "svc4", 1, "p8082", 8082, corev1.ProtocolTCP, "10.4.0.1")
	res, _ = p.Sync(ctx, append(services, svc4), append(slices, eps4))
	if line, n, _ := count(res.Data, "10.4.0.1"); line != "-A KUBE-SEP-SU5STNODRYEWJAUF -m tcp -p tcp -j DNAT --to-destination 10.4.0.1:8082" || n != 1 {
		t.Errorf("svc4 creation: %q, %d endpoints", line, n)
	}
	res, _ = p.Sync(ctx, services, append(slices, eps4))
	if strings.Contains(string(res.Data), "-X ") || len(res.StaleChains) != 0 {
		t.Errorf("stale chains deleted within the sync period: %v", res.StaleChains)
	}
	// ...but after it.
	clock.Advance(31 * time.Second)
	res, _ = p.Sync(ctx, services, append(slices, eps4))
	for _, want := range []string{"-X KUBE-SVC-EBDQOQU5SJFXRIL3", "-X KUBE-SEP-SU5STNODRYEWJAUF"} {
		if !strings.Contains(string(res.Data), want) {
			t.Errorf("missing %q after the sync period", want)
		}
	}
	if _, n, _ := count(res.Data, "10.4.0.1"); n != 0 {
		t.Errorf("deleted service still has %d endpoints written", n)
	}
	assertSameAsFresh(t, ipt, services, append(slices, eps4), cfg)
}

// recordingConntrack records Delete calls.
type recordingConntrack struct{ calls []string }

func (r *recordingConntrack) Delete(f proxy.ConntrackFilter) (int, error) {
	r.calls = append(r.calls, f.String())
	return 1, nil
}

// As kube-proxy's TestDeleteEndpointConnections: adding a UDP service's first endpoint
// clears entries to its (IP, port); removing the endpoint clears entries DNATed to it;
// TCP and SCTP services clear nothing.
func TestConntrackCleanup(t *testing.T) {
	cases := []struct {
		proto corev1.Protocol
		ip    string
		ep    string
		want  []string
	}{
		{corev1.ProtocolUDP, "172.30.1.1", "10.240.0.3", []string{
			"-D -p udp --orig-dst 172.30.1.1 --orig-port-dst 80",
			"-D -p udp --orig-dst 172.30.1.1 --reply-src 10.240.0.3"}},
		{corev1.ProtocolTCP, "172.30.2.2", "10.240.0.4", nil},
		{corev1.ProtocolSCTP, "172.30.3.3", "10.240.0.5", nil},
		{corev1.ProtocolUDP, "fd00:1234::20", "2001:db8::2", []string{
			"-D -p udp --orig-dst fd00:1234::20 --orig-port-dst 80",
			"-D -p udp --orig-dst fd00:1234::20 --reply-src 2001:db8::2"}},
	}
	for _, tc := range cases {
		t.Run(string(tc.proto)+" "+tc.ip, func(t *testing.T) {
			family := corev1.IPv4Protocol
			if strings.Contains(tc.ip, ":") {
				family = corev1.IPv6Protocol
			}
			ct := &recordingConntrack{}
			p, err := NewProxier(newFakeIPT(), ct, upstreamConfig(family))
			if err != nil {
				t.Fatal(err)
			}
			svc := mkService("ns1", "svc", tc.ip, withPort("p80", 80, tc.proto))
			sl := mkSlice("ns1", "svc", 1, "p80", 80, tc.proto, tc.ep)
			ctx := context.Background()
			if _, err := p.Sync(ctx, []*corev1.Service{svc}, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Sync(ctx, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{sl}); err != nil {
				t.Fatal(err)
			}
			res, err := p.Sync(ctx, []*corev1.Service{svc}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, ct.calls); diff != "" {
				t.Errorf("conntrack deletions (-want +got):\n%s", diff)
			}
			if len(tc.want) > 0 && res.ConntrackDeleted != 1 {
				t.Errorf("ConntrackDeleted = %d", res.ConntrackDeleted)
			}
		})
	}
}

// The jump rules: inserted once, at the top of chains that already hold other rules,
// missing ones restored on the next full sync.
func TestEnsureJumps(t *testing.T) {
	ctx := context.Background()
	ipt := newFakeIPT()
	// Another program's rule and chain already in place.
	if err := ipt.Restore(ctx, []byte("*filter\n:DOCKER - [0:0]\n-A INPUT -j DOCKER\nCOMMIT\n"), RestoreOptions{NoFlush: true}); err != nil {
		t.Fatal(err)
	}
	p, err := NewProxier(ipt, nil, upstreamConfig(corev1.IPv4Protocol))
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantInput := []string{
		"-j KUBE-FIREWALL",
		`-m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL`,
		`-m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS`,
		`-m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES`,
		"-j DOCKER",
	}
	if diff := cmp.Diff(wantInput, ipt.rules(TableFilter, "INPUT")); diff != "" {
		t.Errorf("filter INPUT (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(res.JumpData), ":KUBE-SERVICES - [0:0]\n") || !strings.Contains(string(res.JumpData), "-I PREROUTING -m comment") {
		t.Errorf("jump restore:\n%s", res.JumpData)
	}
	// A partial sync does not look at the jumps; a full one finds them all present.
	if res, _ = p.Sync(ctx, nil, nil); res.Full || res.JumpData != nil {
		t.Errorf("second sync: full=%v jumps=%q", res.Full, res.JumpData)
	}
	p.ForceFullSync()
	if res, _ = p.Sync(ctx, nil, nil); !res.Full || res.JumpData != nil {
		t.Errorf("forced full sync with jumps in place: full=%v jumps=%q", res.Full, res.JumpData)
	}
	// Someone deletes the PREROUTING jump: the next full sync puts it back, alone.
	ipt.tables[TableNAT].chains["PREROUTING"] = nil
	p.ForceFullSync()
	res, _ = p.Sync(ctx, nil, nil)
	if want := "*nat\n-I PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\nCOMMIT\n"; string(res.JumpData) != want {
		t.Errorf("repair:\n%s\nwant:\n%s", res.JumpData, want)
	}
	// An hour without a full sync makes the next one full.
	clock := newClock()
	cfg := upstreamConfig(corev1.IPv4Protocol)
	cfg.Clock = clock.Now
	p2, _ := NewProxier(newFakeIPT(), nil, cfg)
	p2.Sync(ctx, nil, nil)
	clock.Advance(59 * time.Minute)
	if res, _ := p2.Sync(ctx, nil, nil); res.Full {
		t.Error("full sync before the hour")
	}
	clock.Advance(2 * time.Minute)
	if res, _ := p2.Sync(ctx, nil, nil); !res.Full {
		t.Error("no full sync after the hour")
	}
}

// failingIPT fails Restore or Save on demand.
type failingIPT struct {
	*fakeIPT
	restoreErr error
}

func (f *failingIPT) Restore(ctx context.Context, data []byte, opts RestoreOptions) error {
	if f.restoreErr != nil {
		return f.restoreErr
	}
	return f.fakeIPT.Restore(ctx, data, opts)
}

func TestProxierErrors(t *testing.T) {
	ctx := context.Background()
	svc := mkService("ns1", "svc1", "172.30.0.41", withPort("p80", 80, corev1.ProtocolTCP))
	eps := mkSlice("ns1", "svc1", 1, "p80", 80, corev1.ProtocolTCP, "10.0.1.1")

	// Bad objects: an error naming the field, nothing written.
	ipt := &failingIPT{fakeIPT: newFakeIPT()}
	p, _ := NewProxier(ipt, nil, upstreamConfig(corev1.IPv4Protocol))
	bad := mkSlice("ns1", "svc1", 1, "p80", 80, corev1.ProtocolTCP, "10.0.1.300")
	if _, err := p.Sync(ctx, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{bad}); err == nil ||
		!strings.Contains(err.Error(), `endpointslice ns1/svc1-1: endpoints[0].addresses[0]: invalid IP address "10.0.1.300"`) {
		t.Errorf("bad slice: %v", err)
	}
	if len(ipt.restores) != 0 || ipt.saves != 0 {
		t.Errorf("bad input reached iptables: %d restores, %d saves", len(ipt.restores), ipt.saves)
	}

	// A failed restore makes the next sync full.
	if _, err := p.Sync(ctx, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{eps}); err != nil {
		t.Fatal(err)
	}
	ipt.restoreErr = errors.New("iptables-restore: line 3 failed")
	if _, err := p.Sync(ctx, []*corev1.Service{svc}, nil); err == nil || !strings.Contains(err.Error(), "line 3 failed") {
		t.Errorf("restore error not returned: %v", err)
	}
	ipt.restoreErr = nil
	res, err := p.Sync(ctx, []*corev1.Service{svc}, nil)
	if err != nil || !res.Full {
		t.Errorf("after a failure: full=%v err=%v", res != nil && res.Full, err)
	}
	if !strings.Contains(string(res.Data), `"ns1/svc1:p80 has no endpoints"`) || !strings.Contains(string(res.Data), "-X KUBE-SVC-XPGD46QRK7WJZT7O") {
		t.Errorf("full resync did not write the new state:\n%s", res.Data)
	}

	// iptables-save failing: a warning, no stale-chain cleanup, the sync still applies.
	ipt.saveErr = errors.New("iptables-save: permission denied")
	res, err = p.Sync(ctx, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{eps})
	if err != nil || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0].Error(), "stale chains not deleted") {
		t.Errorf("save failure: err=%v warnings=%v", err, res.Warnings)
	}

	// Bad configuration.
	if _, err := NewProxier(newFakeIPT(), nil, Config{Family: "IPv5"}); err == nil || !strings.Contains(err.Error(), `family: "IPv5"`) {
		t.Errorf("bad family: %v", err)
	}
	cfg := upstreamConfig(corev1.IPv4Protocol)
	cfg.Node.NodePortAddresses = []string{"10.0.0.0/33"}
	if _, err := Render(nil, nil, cfg, RenderOptions{}); err == nil || !strings.Contains(err.Error(), `nodePortAddresses[0]: invalid CIDR "10.0.0.0/33"`) {
		t.Errorf("bad nodePortAddresses: %v", err)
	}
	if _, err := NewProxier(nil, nil, Config{}); err == nil {
		t.Error("nil Interface accepted")
	}
}
