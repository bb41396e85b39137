package emulator

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
)

// TestModuleSlabsThroughProxier syncs kube-proxy's iptables Proxier into three
// emulators, one parsing with the module slabs and the fast rule shapes (fastRule), one
// without the slabs (noModuleSlabs) and one without the fast shapes (noFastRule): random Services of
// every type, protocol, traffic policy and affinity, random endpoints, a full sync then
// 1-3 partial ones with endpoints changed; after each sync the save output (with
// counters) and every chain's rule Specs must be the same.
func TestModuleSlabsThroughProxier(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 30).Draw(rt, "services")
		var svcs []*corev1.Service
		var slices []*discoveryv1.EndpointSlice
		protos := []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}
		for i := 0; i < n; i++ {
			ns, name := "ns", fmt.Sprintf("svc%d", i)
			proto := rapid.SampledFrom(protos).Draw(rt, "proto")
			s := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: corev1.ServiceSpec{
					Type:      rapid.SampledFrom([]corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer}).Draw(rt, "type"),
					ClusterIP: fmt.Sprintf("172.30.%d.%d", i>>8, i&255+1),
					Ports:     []corev1.ServicePort{{Name: "p", Port: int32(rapid.IntRange(1, 65535).Draw(rt, "port")), Protocol: proto}},
				},
			}
			if s.Spec.Type != corev1.ServiceTypeClusterIP {
				s.Spec.Ports[0].NodePort = int32(30000 + i)
				s.Spec.ExternalTrafficPolicy = rapid.SampledFrom([]corev1.ServiceExternalTrafficPolicy{corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal}).Draw(rt, "etp")
			}
			if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("192.0.2.%d", i+1)}}
			}
			if rapid.Bool().Draw(rt, "itpLocal") {
				s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
			}
			if rapid.Bool().Draw(rt, "affinity") {
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			}
			svcs = append(svcs, s)
			sl := &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-0", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("p"), Port: ptr.To(int32(rapid.IntRange(1, 65535).Draw(rt, "tport"))), Protocol: ptr.To(proto)}},
			}
			for j := rapid.IntRange(0, 12).Draw(rt, "endpoints"); j > 0; j-- {
				sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
					Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", i, j, rapid.IntRange(1, 254).Draw(rt, "ep"))},
					NodeName:   ptr.To(rapid.SampledFrom([]string{"node", "other"}).Draw(rt, "node")),
					Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(rapid.IntRange(0, 5).Draw(rt, "ready") > 0)},
				})
			}
			slices = append(slices, sl)
		}
		newProxier := func() (*iptables.Proxier, *Emulator) {
			e := New(IPv4)
			cfg := iptables.Config{Family: corev1.IPv4Protocol, NoNFAcct: true,
				Node: proxy.NodeConfig{Name: "node", IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}}}
			p, err := iptables.NewProxier(e, nil, cfg)
			if err != nil {
				rt.Fatal(err)
			}
			return p, e
		}
		ps, es := newProxier()
		po, eo := newProxier()
		pf, ef := newProxier()
		syncs := 1 + rapid.IntRange(1, 3).Draw(rt, "syncs")
		for k := 0; k < syncs; k++ {
			if k > 0 {
				for c := rapid.IntRange(1, 3).Draw(rt, "changes"); c > 0; c-- {
					i := rapid.IntRange(0, n-1).Draw(rt, "changed")
					sl := slices[i].DeepCopy()
					if len(sl.Endpoints) > 0 && rapid.Bool().Draw(rt, "drop") {
						sl.Endpoints = sl.Endpoints[1:]
					} else {
						sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.99.%d", i, k)}})
					}
					slices[i] = sl
				}
			}
			sync := func(p *iptables.Proxier, separate, general bool) error {
				oldSlabs, oldFast := noModuleSlabs, noFastRule
				noModuleSlabs, noFastRule = separate, general
				defer func() { noModuleSlabs, noFastRule = oldSlabs, oldFast }()
				_, err := p.Sync(context.Background(), svcs, slices)
				return err
			}
			errS, errO, errF := sync(ps, false, false), sync(po, true, false), sync(pf, false, true)
			if fmt.Sprint(errS) != fmt.Sprint(errO) || fmt.Sprint(errS) != fmt.Sprint(errF) {
				rt.Fatalf("sync %d: error with slabs %v, without %v, general parse only %v", k, errS, errO, errF)
			}
			rs := es.Ruleset()
			for _, other := range []struct {
				what string
				e    *Emulator
			}{{"without slabs", eo}, {"general parse only", ef}} {
				ro := other.e.Ruleset()
				if s, o := rs.Save(true), ro.Save(true); string(s) != string(o) {
					rt.Fatalf("sync %d: save differs:\nslabs, fast rules:\n%s\n%s:\n%s", k, s, other.what, o)
				}
				for _, tn := range []string{"nat", "filter"} {
					ts, to := rs.Table(tn), ro.Table(tn)
					if ts == nil || to == nil {
						continue
					}
					for _, c := range ts.AllChains() {
						co := to.Chain(c.Name)
						if co == nil || len(co.Rules) != len(c.Rules) {
							rt.Fatalf("sync %d: chain %s differs (%s)", k, c.Name, other.what)
						}
						for i := range c.Rules {
							if !reflect.DeepEqual(c.Rules[i].Spec, co.Rules[i].Spec) || c.Rules[i].Line != co.Rules[i].Line {
								rt.Fatalf("sync %d: chain %s rule %d: %+v / %s %+v", k, c.Name, i, c.Rules[i].Spec, other.what, co.Rules[i].Spec)
							}
						}
					}
				}
			}
		}
	})
}
