package nftables

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/internal/rapiddraw"
)

// drawCluster draws up to six Services of one family (every type, both traffic
// policies, affinity with random timeouts, external IPs, load-balancer IPs with source
// ranges that may include the node) and EndpointSlices for them and for Services that
// do not exist, with random nodes and conditions.
func drawCluster(t *rapid.T, family corev1.IPFamily) ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	v6 := family == corev1.IPv6Protocol
	addr := func(v4, v6f string, i int) string {
		if v6 {
			return fmt.Sprintf(v6f, i)
		}
		return fmt.Sprintf(v4, i)
	}
	types := []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer}
	protos := []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}
	var services []*corev1.Service
	var slices []*discoveryv1.EndpointSlice
	for i := 0; i < rapid.IntRange(0, 6).Draw(t, "services"); i++ {
		name := fmt.Sprintf("svc%d", i)
		nPorts := rapid.IntRange(1, 3).Draw(t, "ports")
		if rapid.IntRange(0, 5).Draw(t, "exists") > 0 {
			s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
			s.Spec.Type = rapid.SampledFrom(types).Draw(t, "type")
			s.Spec.ClusterIP = addr("172.30.0.%d", "fd00:10:96::%x", 10+i)
			for j := 0; j < nPorts; j++ {
				p := corev1.ServicePort{Name: fmt.Sprintf("p%d", j), Port: int32(80 + j), Protocol: protos[j]}
				if s.Spec.Type != corev1.ServiceTypeClusterIP {
					p.NodePort = int32(30000 + 10*i + j)
				}
				s.Spec.Ports = append(s.Spec.Ports, p)
			}
			if rapid.Bool().Draw(t, "etpLocal") && s.Spec.Type != corev1.ServiceTypeClusterIP {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			}
			if rapid.Bool().Draw(t, "itpLocal") {
				s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
			}
			if rapid.Bool().Draw(t, "affinity") {
				// One timeout per Service name: knftables.Fake keeps an existing
				// set's properties on "add set", while the kernel (6.18, nft
				// 1.0.6: checked) updates the timeout, so a changed timeout cannot
				// be compared on the Fake.
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{
					TimeoutSeconds: ptr.To(int32(60 * (i + 1)))}}
			}
			if rapid.Bool().Draw(t, "externalIP") {
				s.Spec.ExternalIPs = []string{addr("192.168.99.%d", "2001:db8:99::%x", i)}
			}
			if s.Spec.Type == corev1.ServiceTypeLoadBalancer && rapid.Bool().Draw(t, "ingress") {
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: addr("1.2.3.%d", "5555::%x", i)}}
				switch rapid.IntRange(0, 2).Draw(t, "ranges") {
				case 1:
					s.Spec.LoadBalancerSourceRanges = []string{addr("203.0.113.0/%d", "2001:db8:203::/%d", 25+i%8*0)}
				case 2:
					s.Spec.LoadBalancerSourceRanges = []string{addr("203.0.113.0/%d", "2001:db8:203::/%d", 25+i%8*0), addr("192.168.0.0/%d", "2001:db8::/%d", 24+i%8*0)}
				}
			}
			services = append(services, s)
		}
		for k := 0; k < rapid.IntRange(0, 2).Draw(t, "slices"); k++ {
			slices = append(slices, drawSlice(t, family, i, k, name, nPorts, protos))
		}
	}
	return services, slices
}

func drawSlice(t *rapid.T, family corev1.IPFamily, i, k int, svc string, nPorts int, protos []corev1.Protocol) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("%s-%d", svc, k), Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressType(family),
	}
	for j := 0; j < nPorts; j++ {
		sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: ptr.To(fmt.Sprintf("p%d", j)), Port: ptr.To(int32(8080 + j)), Protocol: ptr.To(protos[j])})
	}
	for e := 0; e < rapid.IntRange(0, 4).Draw(t, "endpoints"); e++ {
		host := rapid.IntRange(1, 6).Draw(t, "host")
		a := fmt.Sprintf("10.%d.%d.%d", i, k, host)
		if family == corev1.IPv6Protocol {
			a = fmt.Sprintf("fd00:10:%x:%x::%x", i, k, host)
		}
		ep := discoveryv1.Endpoint{Addresses: []string{a}}
		rapiddraw.EndpointPlacement(t, &ep, testNodeName)
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	return sl
}

// drawConfig draws the family and node flags.
func drawConfig(t *rapid.T) Config {
	family := rapid.SampledFrom([]corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}).Draw(t, "family")
	cfg := upstreamConfig(family)
	cfg.Version = rapid.SampledFrom(Versions).Draw(t, "version")
	cfg.LocalhostNodePorts = cfg.Version == Version137 && rapid.Bool().Draw(t, "localhostGate")
	switch rapid.IntRange(0, 2).Draw(t, "nodePortAddresses") {
	case 1:
		cfg.Node.NodePortAddresses = nil // primary
	case 2:
		cfg.Node.NodePortAddresses = []string{"0.0.0.0/0", "::/0"} // match all
	}
	cfg.Node.MasqueradeAll = rapid.Bool().Draw(t, "masqueradeAll")
	if rapid.Bool().Draw(t, "noDetector") {
		cfg.Node.DetectLocalMode = "None"
	}
	return cfg
}

// Property: whatever sequence of states a node goes through, every transaction is
// accepted by knftables.Fake (every jump, goto, @set and vmap value refers to an
// existing object; nothing deleted is still referenced); once stale chains are gone
// the table equals the one a fresh full sync writes; a sync without changes is
// empty; and Render's first sync is the same whatever the order of the input lists.
func TestPartialSyncsConverge(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		cfg := drawConfig(rt)
		clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		cfg.Clock = clock.Now
		fake := newFake(cfg.Family)
		p, err := NewProxier(fake, nil, cfg)
		if err != nil {
			rt.Fatal(err)
		}
		var services []*corev1.Service
		var slices []*discoveryv1.EndpointSlice
		steps := rapid.IntRange(1, 5).Draw(rt, "steps")
		for s := 0; s < steps; s++ {
			services, slices = drawCluster(rt, cfg.Family)
			if _, err := p.Sync(ctx, services, slices); err != nil {
				rt.Fatalf("step %d: %v", s, err)
			}
			clock.Advance(time.Duration(rapid.IntRange(0, 3000).Draw(rt, "ms")) * time.Millisecond)
		}
		clock.Advance(2 * time.Second)
		if _, err := p.Sync(ctx, services, slices); err != nil {
			rt.Fatal(err)
		}
		res, err := p.Sync(ctx, services, slices)
		if err != nil {
			rt.Fatal(err)
		}
		if !p.r.partialSyncs {
			// Before 1.31 every sync is a full rewrite.
			if !res.Full {
				rt.Fatalf("kube-proxy %s: a sync without changes is partial", cfg.Version)
			}
		} else if n := res.Transaction.NumOperations(); n != 0 {
			rt.Fatalf("a sync without changes has %d operations:\n%s", n, res.Transaction)
		}
		fresh := newFake(cfg.Family)
		fp, _ := NewProxier(fresh, nil, cfg)
		if _, err := fp.Sync(ctx, services, slices); err != nil {
			rt.Fatal(err)
		}
		if d := diffLines(sortTransaction(fresh.Dump()), sortTransaction(fake.Dump())); d != "" {
			rt.Fatalf("table after %d syncs differs from a fresh full sync:\n%s", steps, d)
		}

		text, err := Render(services, slices, cfg)
		if err != nil {
			rt.Fatal(err)
		}
		r := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 1))
		r.Shuffle(len(services), func(i, j int) { services[i], services[j] = services[j], services[i] })
		r.Shuffle(len(slices), func(i, j int) { slices[i], slices[j] = slices[j], slices[i] })
		text2, err := Render(services, slices, cfg)
		if err != nil {
			rt.Fatal(err)
		}
		if string(text) != string(text2) {
			rt.Fatalf("Render depends on input order")
		}
	})
}

// Property, as root with nft: every first sync Render writes passes nft --check in a
// throwaway network namespace.
func TestRealNFTCheckProperty(t *testing.T) {
	ns := newNetns(t)
	rapid.Check(t, func(rt *rapid.T) {
		cfg := drawConfig(rt)
		services, slices := drawCluster(rt, cfg.Family)
		text, err := Render(services, slices, cfg)
		if err != nil {
			rt.Fatal(err)
		}
		n := &netnsNFT{ns: ns, family: cfg.Family}
		if err := n.check(context.Background(), string(text)); err != nil {
			rt.Fatalf("%v\n%s", err, text)
		}
	})
}
