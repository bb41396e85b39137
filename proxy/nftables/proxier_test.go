package nftables

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/knftables"
)

// makeService returns a ClusterIP Service with one TCP port.
func makeService(ns, name, ip, portName string, port int32, mut ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: ip,
			Ports: []corev1.ServicePort{{Name: portName, Port: port, Protocol: corev1.ProtocolTCP}},
		},
	}
	for _, m := range mut {
		m(s)
	}
	return s
}

// makeSlice returns an EndpointSlice for a Service with one TCP port and ready
// endpoints at addrs on the test node.
func makeSlice(ns, svc, portName string, port int32, addrs ...string) *discoveryv1.EndpointSlice {
	proto, node := corev1.ProtocolTCP, testNodeName
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{},
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: &proto}},
	}
	if strings.Contains(strings.Join(addrs, ""), ":") {
		s.AddressType = discoveryv1.AddressTypeIPv6
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, NodeName: &node})
	}
	return s
}

// writeOnly hides knftables.Fake's List methods: the Proxier must then rely on its
// own record of the table.
type writeOnly struct{ nft Interface }

func (w writeOnly) NewTransaction() *knftables.Transaction { return w.nft.NewTransaction() }
func (w writeOnly) Run(ctx context.Context, tx *knftables.Transaction) error {
	return w.nft.Run(ctx, tx)
}

// checkDump compares the Fake's table with base + the upstream step file.
func checkDump(t *testing.T, fake *knftables.Fake, step string) {
	t.Helper()
	want := sortTransaction(upstreamText(t, []string{"base", step}))
	got := sortTransaction(asUpstream(fake.Dump()))
	if d := diffLines(want, got); d != "" {
		t.Errorf("%s: table differs from kube-proxy's:\n%s", step, d)
	}
}

func checkOps(t *testing.T, res *SyncResult, want int) {
	t.Helper()
	if n := res.Transaction.NumOperations(); n != want {
		t.Errorf("transaction has %d operations, want %d:\n%s", n, want, res.Transaction)
	}
}

// TestSyncRepeated is kube-proxy's TestSyncProxyRulesRepeated: after each change the
// table equals kube-proxy's expected one, and the partial transaction has exactly
// the operations kube-proxy's test counts. It runs with the Fake's read-back and
// without it (the Proxier's own record).
func TestSyncRepeated(t *testing.T) {
	for _, withLister := range []bool{true, false} {
		t.Run(fmt.Sprintf("lister=%v", withLister), func(t *testing.T) { testSyncRepeated(t, withLister) })
	}
}

func testSyncRepeated(t *testing.T, withLister bool) {
	ctx := context.Background()
	fake := newFake(corev1.IPv4Protocol)
	cfg := upstreamConfig(corev1.IPv4Protocol)
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg.Clock = clock.Now
	var nft Interface = fake
	if !withLister {
		nft = writeOnly{fake}
	}
	p, err := NewProxier(nft, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	svcs := []*corev1.Service{
		makeService("ns1", "svc1", "172.30.0.41", "p80", 80),
		makeService("ns2", "svc2", "172.30.0.42", "p8080", 8080),
	}
	eps := []*discoveryv1.EndpointSlice{
		makeSlice("ns1", "svc1", "p80", 80, "10.0.1.1"),
		makeSlice("ns2", "svc2", "p8080", 8080, "10.0.2.1"),
	}
	sync := func(step string, ops int) *SyncResult {
		t.Helper()
		clock.Advance(100 * time.Millisecond)
		res, err := p.Sync(ctx, svcs, eps)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		checkDump(t, fake, step)
		if ops >= 0 {
			checkOps(t, res, ops)
		}
		return res
	}
	if res := sync("repeated-1", -1); !res.Full {
		t.Error("first sync is not full")
	}

	// Add a service and its endpoints: 3 elements, add+flush chain, 1 rule.
	svcs = append(svcs, makeService("ns3", "svc3", "172.30.0.43", "p80", 80))
	eps3 := makeSlice("ns3", "svc3", "p80", 80, "10.0.3.1")
	eps = append(eps, eps3)
	if res := sync("repeated-2", 6); res.Full {
		t.Error("second sync is full")
	}

	// Delete svc2: 3 element deletions, its chain flushed, not yet deleted.
	svcs = slices.Delete(svcs, 1, 2)
	res := sync("repeated-3", 4)
	if want := []string{"service-MHHHYRWA-ns2/svc2/tcp/p8080"}; !slices.Equal(res.StaleChains, want) {
		t.Errorf("stale chains %v, want %v", res.StaleChains, want)
	}
	// A second later the stale chain goes in a transaction of its own.
	clock.Advance(2 * time.Second)
	res = sync("repeated-4", 0)
	if res.Cleanup == nil || res.Cleanup.NumOperations() != 1 || !strings.Contains(res.Cleanup.String(), "delete chain ip kube-proxy service-MHHHYRWA-ns2/svc2/tcp/p8080") {
		t.Errorf("cleanup transaction: %v", res.Cleanup)
	}

	// A service without endpoints, then its endpoints.
	svcs = append(svcs, makeService("ns4", "svc4", "172.30.0.44", "p80", 80))
	sync("repeated-5", 2)
	eps = append(eps, makeSlice("ns4", "svc4", "p80", 80, "10.0.4.1"))
	sync("repeated-6", 6)

	// Change, add, remove and restore svc3's endpoints.
	eps3b := makeSlice("ns3", "svc3", "p80", 80, "10.0.3.2")
	eps[2] = eps3b
	sync("repeated-7", 5)
	clock.Advance(2 * time.Second)
	eps3c := makeSlice("ns3", "svc3", "p80", 80, "10.0.3.2", "10.0.3.3")
	eps[2] = eps3c
	sync("repeated-8", 4)
	eps3d := makeSlice("ns3", "svc3", "p80", 80)
	eps[2] = eps3d
	sync("repeated-9", 5)
	if want := []string{"service-4AT6LBPK-ns3/svc3/tcp/p80"}; !slices.Equal(p.StaleChains(), want) {
		t.Errorf("stale chains %v, want %v", p.StaleChains(), want)
	}
	eps[2] = eps3c
	sync("repeated-10", 7)
	if len(p.StaleChains()) != 0 {
		t.Errorf("unexpected stale chains %v", p.StaleChains())
	}

	// Empty, and restore once the stale chain is old enough: it is deleted first,
	// then created again.
	eps[2] = eps3d
	sync("repeated-9", 5)
	clock.Advance(2 * time.Second)
	eps[2] = eps3c
	res = sync("repeated-10", -1)
	if !slices.Equal(res.DeletedChains, []string{"service-4AT6LBPK-ns3/svc3/tcp/p80"}) {
		t.Errorf("deleted chains %v", res.DeletedChains)
	}
	// Nothing changed: an empty transaction.
	sync("repeated-10", 0)
}

// TestSyncStartup is kube-proxy's TestSyncProxyRulesStartup: a new Proxier finding
// part of the wanted state in the table (read back from the Fake) writes only what
// is missing on top of the setup.
func TestSyncStartup(t *testing.T) {
	ctx := context.Background()
	cfg := upstreamConfig(corev1.IPv4Protocol)
	empty := newFake(corev1.IPv4Protocol)
	p0, err := NewProxier(empty, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p0.Sync(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	setupOps := res.Transaction.NumOperations()

	fake := newFake(corev1.IPv4Protocol)
	if err := fake.ParseDump(upstreamText(t, []string{"base", "startup-loaded"})); err != nil {
		t.Fatal(err)
	}
	p, err := NewProxier(fake, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	svcs := []*corev1.Service{
		makeService("ns1", "svc1", "172.30.0.41", "p80", 80),
		makeService("ns2", "svc2", "172.30.0.42", "p8080", 8080),
		makeService("ns3", "svc3", "172.30.0.43", "p80", 80),
	}
	eps := []*discoveryv1.EndpointSlice{
		makeSlice("ns1", "svc1", "p80", 80, "10.0.1.1", "10.0.1.2"),
		makeSlice("ns2", "svc2", "p8080", 8080, "10.0.2.1"),
	}
	res, err = p.Sync(ctx, svcs, eps)
	if err != nil {
		t.Fatal(err)
	}
	checkDump(t, fake, "startup")
	// setup, 1 hairpin element, svc3 in cluster-ips and no-endpoint-services,
	// add+flush of 2 service chains with a rule each.
	checkOps(t, res, setupOps+1+2+6)
}

// failing fails the next Run it is told to.
type failing struct {
	*knftables.Fake
	fail bool
}

func (f *failing) Run(ctx context.Context, tx *knftables.Transaction) error {
	if f.fail {
		f.fail = false
		return errors.New("injected failure")
	}
	return f.Fake.Run(ctx, tx)
}

// TestSyncFailure: a failed transaction leaves the table as it was, and the next sync
// is full and brings it to the wanted state (with and without read-back).
func TestSyncFailure(t *testing.T) {
	for _, withLister := range []bool{true, false} {
		t.Run(fmt.Sprintf("lister=%v", withLister), func(t *testing.T) {
			ctx := context.Background()
			f := &failing{Fake: newFake(corev1.IPv4Protocol)}
			var nft Interface = f
			if !withLister {
				nft = writeOnly{f}
			}
			p, err := NewProxier(nft, nil, upstreamConfig(corev1.IPv4Protocol))
			if err != nil {
				t.Fatal(err)
			}
			svcs := []*corev1.Service{makeService("ns1", "svc1", "172.30.0.41", "p80", 80)}
			eps := []*discoveryv1.EndpointSlice{makeSlice("ns1", "svc1", "p80", 80, "10.0.1.1")}
			if _, err := p.Sync(ctx, svcs, eps); err != nil {
				t.Fatal(err)
			}
			before := f.Dump()
			svcs = append(svcs, makeService("ns3", "svc3", "172.30.0.43", "p80", 80))
			eps = append(eps, makeSlice("ns3", "svc3", "p80", 80, "10.0.3.1"))
			f.fail = true
			if _, err := p.Sync(ctx, svcs, eps); err == nil {
				t.Fatal("no error from a failed transaction")
			}
			if f.Dump() != before {
				t.Error("failed sync changed the table")
			}
			res, err := p.Sync(ctx, svcs, eps)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Full {
				t.Error("sync after a failure is not full")
			}
			checkDump(t, f.Fake, "startup-like-2")
		})
	}
}
