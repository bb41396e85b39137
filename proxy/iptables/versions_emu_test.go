package iptables_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
)

// The behaviour changes of proxy/behaviour_iptables.go, shown with packets through the
// emulator: the rules kube-proxy of each release writes, evaluated at the hooks.

const emuNodeIP = "192.168.0.2"

// emuAt syncs a Proxier of kube-proxy release version (with cfg's other fields) into a
// fresh emulator, jump rules included.
func emuAt(t *testing.T, version string, cfg iptables.Config, services []*corev1.Service, slices []*discoveryv1.EndpointSlice) *emulator.Emulator {
	t.Helper()
	v, err := proxy.ParseVersion(version)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Node.Name = "test-node"
	cfg.Node.IPs = []netip.Addr{netip.MustParseAddr(emuNodeIP)}
	cfg.Node.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	cfg.Node.Version = v
	e := emulator.New(emulator.IPv4)
	p, err := iptables.NewProxier(e, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Sync(context.Background(), services, slices); err != nil {
		t.Fatalf("kube-proxy %s: %v\n%s", version, err, res.Data)
	}
	return e
}

func emuEnv() *emulator.StaticEnv {
	return emulator.NewStaticEnv(1, netip.MustParseAddr(emuNodeIP), netip.MustParseAddr("127.0.0.1"))
}

func tcpPacket(src, dst string, dport uint16, in, out string) *emulator.Packet {
	return &emulator.Packet{Proto: 6, Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst),
		SrcPort: 40000, DstPort: dport, InIface: in, OutIface: out, Len: 60}
}

// decidedBy names the chain and rule that decided a hook ("policy" when none did).
func decidedBy(r emulator.HookResult) string {
	if r.Decision.Rule == nil {
		return "policy"
	}
	return r.Decision.Rule.Text(r.Decision.Chain)
}

// 1.19 (kubernetes#92035): KUBE-POSTROUTING clears the masquerade mark before
// MASQUERADE. A masqueraded packet that runs POSTROUTING again (re-encapsulated by a
// VXLAN device, say) is masqueraded a second time on 1.18, not on 1.19.
func TestMasqueradeClearsMarkFrom119(t *testing.T) {
	for _, tc := range []struct {
		version    string
		markAfter  uint32
		secondMasq bool
	}{
		{"1.18", 0x4000, true},
		{"1.19", 0, false},
	} {
		t.Run(tc.version, func(t *testing.T) {
			e := emuAt(t, tc.version, iptables.Config{}, nil, nil)
			env := emuEnv()
			pkt := tcpPacket("10.0.0.5", "10.1.0.7", 8080, "", "eth0")
			pkt.Mark = 0x4000
			first := e.EvalTable(env, iptables.TableNAT, netfilter.Postrouting, pkt, nil)
			if first.NAT == nil || first.NAT.Kind != netfilter.Masquerade {
				t.Fatalf("marked packet not masqueraded: %+v", first)
			}
			if pkt.Mark != tc.markAfter {
				t.Errorf("mark after POSTROUTING = %#x, want %#x", pkt.Mark, tc.markAfter)
			}
			again := e.EvalTable(env, iptables.TableNAT, netfilter.Postrouting, pkt, nil)
			if got := again.NAT != nil; got != tc.secondMasq {
				t.Errorf("second pass through POSTROUTING masqueraded: %v, want %v", got, tc.secondMasq)
			}
		})
	}
}

// 1.25 (KEP-3178): an external client reaching the NodePort of an eTP=Local Service
// with no endpoint on this node is dropped in both releases, but 1.24 marks it 0x8000
// in nat (KUBE-EXT … -j KUBE-MARK-DROP) for kubelet's KUBE-FIREWALL to drop in filter
// INPUT, while 1.25 drops it unmarked in filter KUBE-EXTERNAL-SERVICES.
func TestETPLocalNoEndpointDropMovesToFilter(t *testing.T) {
	svc := &corev1.Service{}
	svc.Namespace, svc.Name = "ns", "web"
	svc.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "172.30.0.10",
		ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 30999,
		Ports: []corev1.ServicePort{{Name: "p", Port: 80, Protocol: corev1.ProtocolTCP, NodePort: 30080}}}
	slice := sliceOf("ns", "web", 80, "10.1.0.7")
	slice.Endpoints[0].NodeName = ptrTo("other-node")
	for _, tc := range []struct {
		version, mark string
		markVal       uint32
		droppedBy     string
	}{
		{"1.24", "0x8000", 0x8000, `-A KUBE-FIREWALL -m comment --comment "kubernetes firewall for dropping marked packets" -m mark --mark 0x8000/0x8000 -j DROP`},
		{"1.25", "none", 0, `-A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment "ns/web:p has no local endpoints" -m addrtype --dst-type LOCAL -m tcp --dport 30080 -j DROP`},
	} {
		t.Run(tc.version, func(t *testing.T) {
			e := emuAt(t, tc.version, iptables.Config{}, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{slice})
			env := emuEnv()
			pkt := tcpPacket("203.0.113.2", emuNodeIP, 30080, "eth0", "")
			pre := e.EvalHook(env, netfilter.Prerouting, pkt, nil)
			if pre.Verdict != emulator.Accept || pre.NAT != nil {
				t.Fatalf("PREROUTING: %v (NAT %v), want accepted without NAT", pre.Verdict, pre.NAT)
			}
			if pkt.Mark != tc.markVal {
				t.Errorf("mark after nat = %#x, want %s", pkt.Mark, tc.mark)
			}
			in := e.EvalHook(env, netfilter.Input, pkt, nil)
			if in.Verdict != emulator.Drop {
				t.Fatalf("INPUT: %v, want DROP", in.Verdict)
			}
			if got := decidedBy(in); got != tc.droppedBy {
				t.Errorf("dropped by\n  %s\nwant\n  %s", got, tc.droppedBy)
			}
		})
	}
}

// 1.19 (kubernetes#91569, CVE-2020-8558): a neighbour sending to 127.0.0.1 through the
// node's interface (route_localnet on, for localhost NodePorts) reaches a host service
// bound to localhost on 1.18; from 1.19 kubelet's KUBE-FIREWALL drops it (kube-proxy's
// own copy of the rule from 1.25).
func TestLocalnetMartianRuleFrom119(t *testing.T) {
	for _, tc := range []struct {
		version string
		verdict emulator.Verdict
	}{
		{"1.18", emulator.Accept},
		{"1.19", emulator.Drop},
		{"1.24", emulator.Drop},
		{"1.25", emulator.Drop},
	} {
		t.Run(tc.version, func(t *testing.T) {
			e := emuAt(t, tc.version, iptables.Config{}, nil, nil)
			pkt := tcpPacket("192.168.0.9", "127.0.0.1", 8080, "eth0", "")
			in := e.EvalHook(emuEnv(), netfilter.Input, pkt, nil)
			if in.Verdict != tc.verdict {
				t.Errorf("INPUT: %v by %s, want %v", in.Verdict, decidedBy(in), tc.verdict)
			}
			if tc.verdict == emulator.Drop && !strings.Contains(decidedBy(in), "block incoming localnet connections") {
				t.Errorf("dropped by %s, want the localnet rule", decidedBy(in))
			}
		})
	}
}

// 1.29 (kubernetes#120412): with nf_conntrack_tcp_be_liberal set, a forwarded packet
// conntrack finds INVALID is dropped by KUBE-FORWARD on 1.28, forwarded on 1.29 (no
// rule); with the sysctl unset both drop it.
func TestInvalidDropFollowsTCPLiberalFrom129(t *testing.T) {
	for _, tc := range []struct {
		version string
		liberal bool
		verdict emulator.Verdict
	}{
		{"1.28", true, emulator.Drop},
		{"1.29", true, emulator.Accept},
		{"1.28", false, emulator.Drop},
	} {
		t.Run(tc.version, func(t *testing.T) {
			e := emuAt(t, tc.version, iptables.Config{ConntrackTCPBeLiberal: tc.liberal, NoNFAcct: true}, nil, nil)
			pkt := tcpPacket("10.0.0.5", "10.1.0.7", 8080, "cbr0", "eth0")
			pkt.CT.State = netfilter.CtInvalid
			fwd := e.EvalHook(emuEnv(), netfilter.Forward, pkt, nil)
			if fwd.Verdict != tc.verdict {
				t.Errorf("liberal=%v: FORWARD %v by %s, want %v", tc.liberal, fwd.Verdict, decidedBy(fwd), tc.verdict)
			}
		})
	}
}

func sliceOf(ns, svc string, port int32, ips ...string) *discoveryv1.EndpointSlice {
	return eps(ns, svc, port, corev1.ProtocolTCP, ips...)
}

func ptrTo[T any](v T) *T { return &v }

// 1.23 (kubernetes#97279): a forwarded reply of an established connection is accepted
// in both releases (FORWARD policy DROP here), by the "pod source rule" of 1.22's two
// identical KUBE-FORWARD rules, by the one "conntrack rule" of 1.23.
func TestKubeForwardConntrackRulesMergedIn123(t *testing.T) {
	for _, tc := range []struct{ version, acceptedBy string }{
		{"1.22", `-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack pod source rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`},
		{"1.23", `-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`},
	} {
		t.Run(tc.version, func(t *testing.T) {
			e := emuAt(t, tc.version, iptables.Config{}, nil, nil)
			if err := e.RestoreText([]byte("*filter\n:FORWARD DROP [0:0]\nCOMMIT\n"), emulator.RestoreOptions{NoFlush: true}); err != nil {
				t.Fatal(err)
			}
			pkt := tcpPacket("192.168.5.5", "10.1.0.7", 8080, "eth0", "cbr0")
			pkt.CT.State = netfilter.CtEstablished
			fwd := e.EvalHook(emuEnv(), netfilter.Forward, pkt, nil)
			if fwd.Verdict != emulator.Accept || decidedBy(fwd) != tc.acceptedBy {
				t.Errorf("FORWARD %v by\n  %s\nwant ACCEPT by\n  %s", fwd.Verdict, decidedBy(fwd), tc.acceptedBy)
			}
		})
	}
}

// 1.20 (kubernetes#95252): a pod's packet to the external IP (not a node address) of a
// Service without endpoints is forwarded on 1.19 (FORWARD does not reach
// KUBE-EXTERNAL-SERVICES), REJECTed from 1.20.
func TestExternalServicesFromForwardFrom120(t *testing.T) {
	svc := &corev1.Service{}
	svc.Namespace, svc.Name = "ns", "ext"
	svc.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "172.30.0.11", ExternalIPs: []string{"192.168.99.99"},
		Ports: []corev1.ServicePort{{Name: "p", Port: 80, Protocol: corev1.ProtocolTCP}}}
	for _, tc := range []struct {
		version string
		verdict emulator.Verdict
		by      string
	}{
		{"1.19", emulator.Accept, "policy"},
		{"1.20", emulator.Reject, `-A KUBE-EXTERNAL-SERVICES -d 192.168.99.99/32 -p tcp -m comment --comment "ns/ext:p has no endpoints" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable`},
	} {
		t.Run(tc.version, func(t *testing.T) {
			e := emuAt(t, tc.version, iptables.Config{}, []*corev1.Service{svc}, nil)
			pkt := tcpPacket("10.0.0.5", "192.168.99.99", 80, "cbr0", "eth0")
			fwd := e.EvalHook(emuEnv(), netfilter.Forward, pkt, nil)
			if fwd.Verdict != tc.verdict || decidedBy(fwd) != tc.by {
				t.Errorf("FORWARD %v by\n  %s\nwant %v by\n  %s", fwd.Verdict, decidedBy(fwd), tc.verdict, tc.by)
			}
		})
	}
}

// 1.21 (kubernetes#97824): with INPUT's policy DROP, a load balancer's health check
// to an eTP=Local Service's health-check node port is dropped on 1.20 and accepted by
// filter KUBE-NODEPORTS on 1.21.
func TestHealthCheckNodePortAcceptFrom121(t *testing.T) {
	svc := &corev1.Service{}
	svc.Namespace, svc.Name = "ns", "web"
	svc.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "172.30.0.10",
		ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 30999,
		Ports: []corev1.ServicePort{{Name: "p", Port: 80, Protocol: corev1.ProtocolTCP, NodePort: 30080}}}
	slice := sliceOf("ns", "web", 80, "10.1.0.7")
	for _, tc := range []struct {
		version string
		verdict emulator.Verdict
	}{
		{"1.20", emulator.Drop},
		{"1.21", emulator.Accept},
	} {
		t.Run(tc.version, func(t *testing.T) {
			e := emuAt(t, tc.version, iptables.Config{}, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{slice})
			if err := e.RestoreText([]byte("*filter\n:INPUT DROP [0:0]\nCOMMIT\n"), emulator.RestoreOptions{NoFlush: true}); err != nil {
				t.Fatal(err)
			}
			pkt := tcpPacket("203.0.113.2", emuNodeIP, 30999, "eth0", "")
			in := e.EvalHook(emuEnv(), netfilter.Input, pkt, nil)
			if in.Verdict != tc.verdict {
				t.Errorf("INPUT %v by %s, want %v", in.Verdict, decidedBy(in), tc.verdict)
			}
		})
	}
}

// 1.24 (kubernetes#109060): a host process connecting to an external IP that is not a
// node address is not DNATed on 1.23 (the external IP jump required a source that is
// not the node's), DNATed to the endpoint on 1.24 (KUBE-EXT takes all of it).
func TestExternalIPFromTheNodeDNATedFrom124(t *testing.T) {
	svc := &corev1.Service{}
	svc.Namespace, svc.Name = "ns", "ext"
	svc.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "172.30.0.11", ExternalIPs: []string{"192.168.99.99"},
		Ports: []corev1.ServicePort{{Name: "p", Port: 80, Protocol: corev1.ProtocolTCP}}}
	slice := sliceOf("ns", "ext", 80, "10.1.0.7")
	for _, tc := range []struct {
		version string
		dnat    bool
	}{
		{"1.23", false},
		{"1.24", true},
	} {
		t.Run(tc.version, func(t *testing.T) {
			e := emuAt(t, tc.version, iptables.Config{}, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{slice})
			pkt := tcpPacket(emuNodeIP, "192.168.99.99", 80, "", "eth0")
			out := e.EvalHook(emuEnv(), netfilter.Output, pkt, nil)
			if got := out.NAT != nil && out.NAT.Dest() == "10.1.0.7:80"; got != tc.dnat {
				t.Errorf("OUTPUT: NAT %v, want DNAT to 10.1.0.7:80: %v", out.NAT, tc.dnat)
			}
		})
	}
}
