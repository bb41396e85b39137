package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/proxy"
)

// cacheWorld is the evolving cluster of TestCachedSyncsMatchUncached: per Service
// index, the Service (nil: none) and its EndpointSlices. Unchanged objects are passed
// again as the same pointers, as an informer cache would.
type cacheWorld struct {
	svcs   [6]*corev1.Service
	slices [6][]*discoveryv1.EndpointSlice
	bulk   *discoveryv1.EndpointSlice // nil, or more endpoints than the large-cluster threshold
	bulkOn bool
}

var cacheTypes = []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer}

// genCacheService draws Service i: type, ports (numbers and protocols), traffic
// policies, affinity, external and load-balancer IPs, source ranges, traffic
// distribution.
func genCacheService(t *rapid.T, i int) *corev1.Service {
	typ := rapid.SampledFrom(cacheTypes).Draw(t, "type")
	s := mkService("ns", fmt.Sprintf("svc%d", i), fmt.Sprintf("172.30.0.%d", 10+i), nil)
	s.Spec.Type = typ
	ports := []corev1.ServicePort{
		{Name: "p80", Port: int32(rapid.SampledFrom([]int{80, 8080}).Draw(t, "port")), Protocol: corev1.ProtocolTCP},
		{Name: "dns", Port: 53, Protocol: rapid.SampledFrom([]corev1.Protocol{corev1.ProtocolUDP, corev1.ProtocolTCP}).Draw(t, "dnsProto")},
	}
	for j, p := range ports[:rapid.IntRange(1, 2).Draw(t, "ports")] {
		if typ != corev1.ServiceTypeClusterIP {
			p.NodePort = int32(30000 + 10*i + j + rapid.IntRange(0, 1).Draw(t, "nodePortShift")*5)
		}
		s.Spec.Ports = append(s.Spec.Ports, p)
	}
	if typ != corev1.ServiceTypeClusterIP && rapid.Bool().Draw(t, "etpLocal") {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = int32(32000 + i)
	}
	if rapid.Bool().Draw(t, "itpLocal") {
		s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	}
	if rapid.Bool().Draw(t, "affinity") {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		if rapid.Bool().Draw(t, "timeout") {
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](600)}}
		}
	}
	if rapid.Bool().Draw(t, "externalIP") {
		s.Spec.ExternalIPs = []string{fmt.Sprintf("192.168.99.%d", i)}
	}
	if typ == corev1.ServiceTypeLoadBalancer && rapid.Bool().Draw(t, "ingress") {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("1.2.3.%d", i)}}
		if rapid.Bool().Draw(t, "ranges") {
			s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/25", "192.168.0.0/24"}
		}
	}
	if rapid.Bool().Draw(t, "distribution") {
		s.Spec.TrafficDistribution = ptr.To(rapid.SampledFrom([]string{corev1.ServiceTrafficDistributionPreferClose, "PreferSameNode"}).Draw(t, "mode"))
	}
	return s
}

// genCacheSlices draws Service i's EndpointSlices: endpoints on this node, another or
// none, ready, serving-terminating or not serving, with zone and node hints.
func genCacheSlices(t *rapid.T, i int) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for k := range rapid.IntRange(0, 2).Draw(t, "slices") {
		sl := mkSlice("ns", fmt.Sprintf("svc%d", i), k, "p80", int32(rapid.SampledFrom([]int{8080, 8081}).Draw(t, "targetPort")), corev1.ProtocolTCP)
		sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: ptr.To("dns"), Port: ptr.To[int32](5353), Protocol: ptr.To(rapid.SampledFrom([]corev1.Protocol{corev1.ProtocolUDP, corev1.ProtocolTCP}).Draw(t, "dnsProto"))})
		for range rapid.IntRange(0, 4).Draw(t, "endpoints") {
			ep := drawEndpoint(t, i)
			if rapid.Bool().Draw(t, "hints") {
				ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: rapid.SampledFrom([]string{"zone-a", "zone-b"}).Draw(t, "zone")}}}
				if rapid.Bool().Draw(t, "nodeHint") {
					ep.Hints.ForNodes = []discoveryv1.ForNode{{Name: rapid.SampledFrom([]string{testNodeName, "other"}).Draw(t, "hintNode")}}
				}
			}
			sl.Endpoints = append(sl.Endpoints, ep)
		}
		out = append(out, sl)
	}
	return out
}

// bulkSlice is an EndpointSlice of a Service "bulk" with more endpoints than the
// large-cluster threshold (its Service exists whenever the world's bulk is on).
func bulkSlice() *discoveryv1.EndpointSlice {
	ips := make([]string, LargeClusterEndpointsThreshold+1)
	for i := range ips {
		ips[i] = fmt.Sprintf("10.9.%d.%d", i/250, 1+i%250)
	}
	return mkSlice("ns", "bulk", 0, "p80", 8080, corev1.ProtocolTCP, ips...)
}

// step changes the world: per Service index keep, replace the Service, replace its
// slices, both, or delete the Service; and switch the bulk Service on or off.
func (w *cacheWorld) step(t *rapid.T) {
	for i := range w.svcs {
		switch rapid.IntRange(0, 5).Draw(t, fmt.Sprintf("op%d", i)) {
		case 0, 1: // unchanged
		case 2:
			w.svcs[i] = genCacheService(t, i)
		case 3:
			w.slices[i] = genCacheSlices(t, i)
		case 4:
			w.svcs[i], w.slices[i] = genCacheService(t, i), genCacheSlices(t, i)
		case 5:
			w.svcs[i] = nil
		}
	}
	if rapid.IntRange(0, 7).Draw(t, "bulkToggle") == 0 {
		w.bulkOn = !w.bulkOn
	}
}

var bulkService = mkService("ns", "bulk", "172.30.1.1", withPort("p80", 80, corev1.ProtocolTCP))

func (w *cacheWorld) lists() ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	var svcs []*corev1.Service
	var sls []*discoveryv1.EndpointSlice
	for i, s := range w.svcs {
		if s != nil {
			svcs = append(svcs, s)
		}
		sls = append(sls, w.slices[i]...)
	}
	if w.bulkOn {
		if w.bulk == nil {
			w.bulk = bulkSlice()
		}
		svcs = append(svcs, bulkService)
		sls = append(sls, w.bulk)
	}
	return svcs, sls
}

// errSave makes Save fail (a failed full sync, or a skipped stale-chain cleanup in a
// partial one).
var errSave = errors.New("save failed (test)")

// Property: a Proxier whose generator reuses the rules of unchanged Services writes,
// at every sync, exactly the restore input of one that computes every Service — through
// random sequences of Services and endpoints added, changed and deleted (ports, types,
// traffic policies, affinity, endpoint conditions and nodes, hints), large-cluster mode
// switching on and off, stale-chain cleanups coming due, failed syncs, forced full
// syncs, kube-proxy restarting with another release, every release and several node
// configurations.
//
// The cached Proxier's generator also shares the service ports to compute among
// goroutines (servicesSharded) whenever there are at least a drawn few, the uncached
// one never does: the sharded output is the same bytes.
func TestCachedSyncsMatchUncached(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4)) // up to four shards
	defer func(n int) { shardMinFresh = n }(shardMinFresh)
	sharded := 0
	rapid.Check(t, func(rt *rapid.T) {
		shardMinFresh = rapid.SampledFrom([]int{1, 2, 3, 5, 8, 1 << 30}).Draw(rt, "shardMinFresh")
		ctx := context.Background()
		cfg := upstreamConfig(corev1.IPv4Protocol)
		if rapid.IntRange(0, 2).Draw(rt, "oldRelease") == 0 {
			cfg.Node.Version = proxy.Version(rapid.IntRange(int(proxy.OldestVersion), int(proxy.NewestVersion)).Draw(rt, "version"))
		}
		cfg.Node.MasqueradeAll = rapid.Bool().Draw(rt, "masqueradeAll")
		v125, _ := proxy.ParseVersion("1.25")
		if (cfg.Node.Version == 0 || cfg.Node.Version >= v125) && rapid.Bool().Draw(rt, "noLocalhostNodePorts") {
			cfg.Node.LocalhostNodePorts = ptr.To(false)
		}
		if rapid.Bool().Draw(rt, "nodePortAddresses") {
			cfg.Node.NodePortAddresses = []string{testNodeIP + "/32", "127.0.0.0/8"}
		}
		if rapid.Bool().Draw(rt, "zone") {
			cfg.Node.Labels = map[string]string{corev1.LabelTopologyZone: "zone-a"}
		}
		clock := newClock()
		cfg.Clock = clock.Now
		ipts := [2]*fakeIPT{newFakeIPT(), newFakeIPT()}
		var ps [2]*Proxier

		newProxiers := func() {
			for k := range ps {
				p, err := NewProxier(ipts[k], nil, cfg)
				if err != nil {
					rt.Fatal(err)
				}
				ps[k] = p
			}
			ps[1].gen.noCache, ps[1].gen.noShard = true, true
		}
		newProxiers()

		var w cacheWorld
		steps := rapid.IntRange(1, 8).Draw(rt, "steps")
		for s := range steps {
			if s > 0 && cfg.Node.LocalhostNodePorts == nil && rapid.IntRange(0, 7).Draw(rt, "restart") == 0 {
				// kube-proxy restarted, upgraded or downgraded: new Proxiers on the
				// same tables.
				cfg.Node.Version = proxy.Version(rapid.IntRange(int(proxy.OldestVersion), int(proxy.NewestVersion)).Draw(rt, "newVersion"))
				newProxiers()
			}
			w.step(rt)
			services, sls := w.lists()
			clock.Advance(time.Duration(rapid.IntRange(0, 40).Draw(rt, "seconds")) * time.Second)
			saveFails := rapid.IntRange(0, 5).Draw(rt, "saveFails") == 0
			forceFull := rapid.IntRange(0, 5).Draw(rt, "forceFull") == 0
			var res [2]*SyncResult
			var errs [2]error
			for k, p := range ps {
				ipts[k].saveErr = nil
				if saveFails {
					ipts[k].saveErr = errSave
				}
				if forceFull {
					p.ForceFullSync()
				}
				res[k], errs[k] = p.Sync(ctx, services, sls)
			}
			sharded += ps[0].gen.sharded
			ps[0].gen.sharded = 0
			if (errs[0] == nil) != (errs[1] == nil) {
				rt.Fatalf("step %d: errors differ: cached %v, uncached %v", s, errs[0], errs[1])
			}
			if res[0] == nil || res[1] == nil {
				continue
			}
			if res[0].Full != res[1].Full || res[0].LargeCluster != res[1].LargeCluster || res[0].Endpoints != res[1].Endpoints {
				rt.Fatalf("step %d: results differ: cached full %v large %v endpoints %d, uncached full %v large %v endpoints %d",
					s, res[0].Full, res[0].LargeCluster, res[0].Endpoints, res[1].Full, res[1].LargeCluster, res[1].Endpoints)
			}
			if !slices.Equal(res[0].StaleChains, res[1].StaleChains) {
				rt.Fatalf("step %d: stale chains differ:\ncached %v\nuncached %v", s, res[0].StaleChains, res[1].StaleChains)
			}
			if !bytes.Equal(res[0].Data, res[1].Data) {
				rt.Fatalf("step %d (full %v): restore input differs:\ncached:\n%s\nuncached:\n%s", s, res[0].Full, res[0].Data, res[1].Data)
			}
		}
		for _, table := range []string{TableFilter, TableNAT} {
			ipts[0].saveErr, ipts[1].saveErr = nil, nil
			a, _ := ipts[0].Save(ctx, table)
			b, _ := ipts[1].Save(ctx, table)
			if !bytes.Equal(a, b) {
				rt.Fatalf("%s differs after %d syncs:\ncached:\n%s\nuncached:\n%s", table, steps, a, b)
			}
		}
	})
	if sharded == 0 {
		t.Fatal("no sync shared its service ports among goroutines")
	}
}

// The cached path is taken: after a partial sync of one changed Service, only that
// Service's entries were computed (the others kept their svcInfo and bytes), and the
// output still matches Render of the same lists.
func TestPartialSyncComputesOnlyChanged(t *testing.T) {
	ctx := context.Background()
	cfg := upstreamConfig(corev1.IPv4Protocol)
	var services []*corev1.Service
	var sls []*discoveryv1.EndpointSlice
	for i := range 20 {
		name := fmt.Sprintf("svc%02d", i)
		services = append(services, mkService("ns", name, fmt.Sprintf("172.30.0.%d", 10+i), withPort("p80", 80, corev1.ProtocolTCP)))
		sls = append(sls, mkSlice("ns", name, 0, "p80", 8080, corev1.ProtocolTCP, fmt.Sprintf("10.0.%d.1", i), fmt.Sprintf("10.0.%d.2", i)))
	}
	p, err := NewProxier(newFakeIPT(), nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sync(ctx, services, sls); err != nil {
		t.Fatal(err)
	}
	before := slices.Clone(p.gen.entries)
	sls = slices.Clone(sls)
	sls[7] = mkSlice("ns", "svc07", 0, "p80", 8080, corev1.ProtocolTCP, "10.0.7.1")
	res, err := p.Sync(ctx, services, sls)
	if err != nil || res.Full {
		t.Fatalf("second sync: full %v, %v", res != nil && res.Full, err)
	}
	after := p.gen.entries
	if len(after) != len(before) {
		t.Fatalf("%d entries, want %d", len(after), len(before))
	}
	for i := range after {
		if (after[i] != before[i]) != (i == 7) {
			t.Errorf("entry %d (%s) replaced: %v", i, after[i].name, after[i] != before[i])
		}
	}
	want, err := Render(services, sls, cfg, RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Render writes every Service's chains; the partial sync only svc07's, but the
	// shared chains (KUBE-SERVICES and the filter table) must be the same.
	if got, w := sharedLines(res.Data), sharedLines(want); got != w {
		t.Errorf("shared chains differ:\npartial:\n%s\nrender:\n%s", got, w)
	}
}

// sharedLines returns the -A lines of KUBE-SERVICES and the filter table.
func sharedLines(data []byte) string {
	var b bytes.Buffer
	filter := false
	for line := range bytes.Lines(data) {
		switch {
		case bytes.HasPrefix(line, []byte("*filter")):
			filter = true
		case bytes.HasPrefix(line, []byte("*nat")):
			filter = false
		case bytes.HasPrefix(line, []byte("-A ")) && (filter || bytes.HasPrefix(line, []byte("-A KUBE-SERVICES "))):
			b.Write(line)
		}
	}
	return b.String()
}

// A change of the node's labels in place (its zone) between partial syncs changes
// which endpoints topology hints select for every Service, not only the changed ones
// (kube-proxy forces a full sync then; without one, the partial sync deletes the
// unchanged Services' KUBE-SEP chains that their KUBE-SVC chains still jump to, and
// fails): the cached path must write what the uncached one writes, and fail the same.
func TestCachedSyncFollowsNodeLabels(t *testing.T) {
	ctx := context.Background()
	var outs [2][]byte
	var errs [2]error
	for k, noCache := range []bool{false, true} {
		cfg := upstreamConfig(corev1.IPv4Protocol)
		cfg.Node.Labels = map[string]string{corev1.LabelTopologyZone: "zone-a"}
		var services []*corev1.Service
		var sls []*discoveryv1.EndpointSlice
		for i := range 3 {
			name := fmt.Sprintf("svc%d", i)
			services = append(services, mkService("ns", name, fmt.Sprintf("172.30.0.%d", 10+i), withPort("p80", 80, corev1.ProtocolTCP)))
			sl := mkSlice("ns", name, 0, "p80", 8080, corev1.ProtocolTCP, fmt.Sprintf("10.0.%d.1", i), fmt.Sprintf("10.0.%d.2", i))
			sl.Endpoints[0].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}}
			sl.Endpoints[1].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-b"}}}
			sls = append(sls, sl)
		}
		p, err := NewProxier(newFakeIPT(), nil, cfg)
		if err != nil {
			t.Fatal(err)
		}
		p.gen.noCache = noCache
		if _, err := p.Sync(ctx, services, sls); err != nil {
			t.Fatal(err)
		}
		cfg.Node.Labels[corev1.LabelTopologyZone] = "zone-b"
		sls = slices.Clone(sls)
		sls[1] = sls[1].DeepCopy() // one Service changes
		sls[1].Endpoints[1].Conditions.Serving = ptr.To(true)
		res, err := p.Sync(ctx, services, sls)
		if res == nil || res.Full {
			t.Fatalf("second sync: %v (want a partial sync)", err)
		}
		outs[k], errs[k] = bytes.Clone(res.Data), err
	}
	if (errs[0] == nil) != (errs[1] == nil) {
		t.Fatalf("errors differ: cached %v, uncached %v", errs[0], errs[1])
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatalf("restore input differs:\ncached:\n%s\nuncached:\n%s", outs[0], outs[1])
	}
}
