package ipvs_test

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
	ipvsemu "github.com/clusterlab/clusterlab/proxy/ipvs/emulator"
)

func testService(name, clusterIP string, port int32, proto corev1.Protocol) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Type: corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "p", Port: port, Protocol: proto}}},
	}
}

func testSlice(svc string, port int32, proto corev1.Protocol, ips ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns1", Name: svc + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("p"), Port: ptr.To(port), Protocol: ptr.To(proto)}},
	}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr.To("node-b")})
	}
	return s
}

// defaultConfig is the node of defaultHarness: 192.168.0.2, pods in 10.0.0.0/8.
func defaultConfig() ipvs.ProxierConfig {
	return ipvs.ProxierConfig{Node: proxy.NodeConfig{Name: testNodeName, IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")},
		DetectLocalMode: proxy.LocalModeClusterCIDR, ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}
}

func defaultHarness(t *testing.T) *modeHarness {
	t.Helper()
	return newModeHarness(t, defaultConfig(), []string{"192.168.0.2"}, nil)
}

func tcpPkt(client, vip string, flags uint8) ipvsemu.Packet {
	return ipvsemu.Packet{Protocol: netfilter.ProtoTCP, Src: netip.MustParseAddrPort(client), Dst: netip.MustParseAddrPort(vip), TCPFlags: flags}
}

func realServers(t *testing.T, m *ipvsemu.Model, vip string, proto string) string {
	t.Helper()
	ap := netip.MustParseAddrPort(vip)
	rss, err := m.GetRealServers(&ipvs.VirtualServer{Address: ap.Addr(), Port: ap.Port(), Protocol: proto})
	if err != nil {
		return "(" + err.Error() + ")"
	}
	var parts []string
	for _, rs := range rss {
		parts = append(parts, ipvs.RSString(rs)+" w="+strconv.Itoa(rs.Weight))
	}
	return strings.Join(parts, ", ")
}

// An endpoint that goes away while a TCP connection uses it: its real server is
// quiesced (weight 0), the connection keeps flowing, new connections avoid it, and the
// periodic check deletes it once the connection entry has expired. UDP real servers go
// at once; an endpoint that comes back is deleted and added again with weight 1.
func TestProxierGracefulTermination(t *testing.T) {
	h := defaultHarness(t)
	svc := testService("web", "10.96.0.10", 80, corev1.ProtocolTCP)
	h.sync(t, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{testSlice("web", 8080, corev1.ProtocolTCP, "10.0.1.1", "10.0.2.1")})
	if got := realServers(t, h.model, "10.96.0.10:80", "TCP"); got != "10.0.2.1:8080 w=1, 10.0.1.1:8080 w=1" {
		t.Fatalf("real servers (kernel list order): %s", got)
	}
	// rr: the first connection goes to the head of the list, the most recently added.
	d := h.model.In(tcpPkt("10.0.0.5:40000", "10.96.0.10:80", netfilter.TCPSyn))
	if d.Verdict != ipvsemu.VerdictForward || d.Dest.String() != "10.0.2.1:8080" {
		t.Fatalf("first connection: %+v", d)
	}
	h.model.Out(ipvsemu.Packet{Protocol: netfilter.ProtoTCP, Src: d.Dest, Dst: netip.MustParseAddrPort("10.0.0.5:40000"), TCPFlags: netfilter.TCPSyn | netfilter.TCPAck})
	h.model.In(tcpPkt("10.0.0.5:40000", "10.96.0.10:80", netfilter.TCPAck))

	// 10.0.2.1 goes away.
	res := h.sync(t, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{testSlice("web", 8080, corev1.ProtocolTCP, "10.0.1.1")})
	if res.RealServersQuiesced != 1 || res.RealServersDeleted != 0 {
		t.Errorf("sync after the endpoint left: %+v", res)
	}
	if got := realServers(t, h.model, "10.96.0.10:80", "TCP"); got != "10.0.2.1:8080 w=0, 10.0.1.1:8080 w=1" {
		t.Errorf("real servers while terminating: %s", got)
	}
	if got := strings.Join(h.px.Terminating(), " "); got != "10.96.0.10:80/TCP/10.0.2.1:8080" {
		t.Errorf("terminating list: %s", got)
	}
	// The existing connection keeps its real server; new ones avoid it.
	if d := h.model.In(tcpPkt("10.0.0.5:40000", "10.96.0.10:80", netfilter.TCPAck)); d.Dest.String() != "10.0.2.1:8080" || d.Via != ipvsemu.ViaConnection {
		t.Errorf("existing connection after quiescing: %+v", d)
	}
	for i := range 4 {
		d := h.model.In(tcpPkt("10.0.0.6:"+strconv.Itoa(41000+i), "10.96.0.10:80", netfilter.TCPSyn))
		if d.Dest.String() != "10.0.1.1:8080" {
			t.Errorf("new connection %d went to %s", i, d.Dest)
		}
	}
	// A sync changes nothing while the server is being terminated.
	if res := h.sync(t, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{testSlice("web", 8080, corev1.ProtocolTCP, "10.0.1.1")}); res.RealServersQuiesced+res.RealServersDeleted != 0 {
		t.Errorf("second sync while terminating: %+v", res)
	}
	// The check keeps it while the connection lives.
	if gone, err := h.px.GracefulCheck(); err != nil || len(gone) != 0 {
		t.Errorf("check with a live connection: %v %v", gone, err)
	}
	// The connection closes (client FIN, server FIN+ACK, client ACK) and its entry
	// times out; then the check deletes the real server.
	h.model.In(tcpPkt("10.0.0.5:40000", "10.96.0.10:80", netfilter.TCPFin|netfilter.TCPAck))
	h.model.Out(ipvsemu.Packet{Protocol: netfilter.ProtoTCP, Src: netip.MustParseAddrPort("10.0.2.1:8080"), Dst: netip.MustParseAddrPort("10.0.0.5:40000"), TCPFlags: netfilter.TCPFin | netfilter.TCPAck})
	h.model.In(tcpPkt("10.0.0.5:40000", "10.96.0.10:80", netfilter.TCPAck))
	h.clock.Advance(3 * time.Minute)
	gone, err := h.px.GracefulCheck()
	if err != nil || strings.Join(gone, " ") != "10.96.0.10:80/TCP/10.0.2.1:8080" {
		t.Errorf("check after the connection expired: %v %v", gone, err)
	}
	if got := realServers(t, h.model, "10.96.0.10:80", "TCP"); got != "10.0.1.1:8080 w=1" {
		t.Errorf("real servers after termination: %s", got)
	}

	// An endpoint that comes back while being terminated is re-added with weight 1.
	d = h.model.In(tcpPkt("10.0.0.7:42000", "10.96.0.10:80", netfilter.TCPSyn))
	h.sync(t, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{testSlice("web", 8080, corev1.ProtocolTCP, "10.0.2.1")})
	if got := realServers(t, h.model, "10.96.0.10:80", "TCP"); got != "10.0.2.1:8080 w=1, 10.0.1.1:8080 w=0" {
		t.Errorf("real servers after the swap: %s", got)
	}
	res = h.sync(t, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{testSlice("web", 8080, corev1.ProtocolTCP, "10.0.2.1", "10.0.1.1")})
	if res.RealServersAdded != 1 || len(h.px.Terminating()) != 0 {
		t.Errorf("endpoint back: %+v, terminating %v", res, h.px.Terminating())
	}
	if got := realServers(t, h.model, "10.96.0.10:80", "TCP"); got != "10.0.1.1:8080 w=1, 10.0.2.1:8080 w=1" {
		t.Errorf("real servers after the endpoint came back: %s (connection was %v)", got, d.Dest)
	}

	// UDP: no graceful termination.
	dns := testService("dns", "10.96.0.53", 53, corev1.ProtocolUDP)
	h.sync(t, []*corev1.Service{svc, dns}, []*discoveryv1.EndpointSlice{testSlice("dns", 53, corev1.ProtocolUDP, "10.0.3.1", "10.0.4.1")})
	h.model.In(ipvsemu.Packet{Protocol: netfilter.ProtoUDP, Src: netip.MustParseAddrPort("10.0.0.5:5353"), Dst: netip.MustParseAddrPort("10.96.0.53:53")})
	res = h.sync(t, []*corev1.Service{svc, dns}, []*discoveryv1.EndpointSlice{testSlice("dns", 53, corev1.ProtocolUDP, "10.0.3.1")})
	if res.RealServersDeleted != 1 || res.RealServersQuiesced != 0 {
		t.Errorf("UDP endpoint gone: %+v", res)
	}
	if got := realServers(t, h.model, "10.96.0.53:53", "UDP"); got != "10.0.3.1:53 w=1" {
		t.Errorf("UDP real servers: %s", got)
	}
}

// Services that go away: their virtual servers are deleted, their addresses leave
// kube-ipvs0, their set entries are deleted (one ipset restore with del lines); virtual
// servers inside --ipvs-exclude-cidrs and fwmark services are left alone; after a
// restart the real servers' weights go back to 1.
func TestProxierStaleAndRestart(t *testing.T) {
	cfg := defaultConfig()
	cfg.ExcludeCIDRs = []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16")}
	h := newModeHarness(t, cfg, []string{"192.168.0.2"}, nil)
	a := testService("a", "10.96.0.1", 443, corev1.ProtocolTCP)
	b := testService("b", "10.96.0.2", 80, corev1.ProtocolTCP)
	b.Spec.Type, b.Spec.Ports[0].NodePort = corev1.ServiceTypeNodePort, 30080
	slices := []*discoveryv1.EndpointSlice{testSlice("a", 6443, corev1.ProtocolTCP, "192.168.0.2"), testSlice("b", 8080, corev1.ProtocolTCP, "10.0.1.1")}
	// Someone else's virtual servers: one in an excluded range, one fwmark service.
	for _, vs := range []*ipvs.VirtualServer{{Address: netip.MustParseAddr("10.200.0.1"), Port: 53, Protocol: "UDP", Scheduler: "rr"}, {FWMark: 7, Scheduler: "wlc"}} {
		if err := h.model.AddVirtualServer(vs); err != nil {
			t.Fatal(err)
		}
	}
	res := h.sync(t, []*corev1.Service{a, b}, slices)
	if res.VirtualServersAdded != 3 || res.VirtualServers != 3 || len(res.Bound) != 2 {
		t.Errorf("first sync: %+v", res)
	}
	if !strings.Contains(string(res.JumpData), "-I INPUT -m comment --comment \"kubernetes ipvs access filter\" -j KUBE-IPVS-FILTER") {
		t.Errorf("first sync's jump restore:\n%s", res.JumpData)
	}
	res = h.sync(t, []*corev1.Service{a}, slices[:1])
	if res.VirtualServersDeleted != 2 || strings.Join(addrStrings(res.Unbound), " ") != "10.96.0.2" {
		t.Errorf("after b went: %+v", res)
	}
	for _, want := range []string{"del KUBE-CLUSTER-IP 10.96.0.2,tcp:80\n", "del KUBE-NODE-PORT-TCP 30080\n", "del KUBE-IPVS-IPS 10.96.0.2\n"} {
		if !strings.Contains(string(res.IPSetData), want) {
			t.Errorf("ipset restore lacks %q:\n%s", want, res.IPSetData)
		}
	}
	if strings.Contains(string(res.IPSetData), "add ") {
		t.Errorf("ipset restore adds entries that exist:\n%s", res.IPSetData)
	}
	rules := h.model.Rules()
	for _, want := range []string{"-A -u 10.200.0.1:53 -s rr", "-A -f 7 -s wlc", "-A -t 10.96.0.1:443 -s rr"} {
		if !strings.Contains(rules, want) {
			t.Errorf("ipvsadm -Sn lacks %q:\n%s", want, rules)
		}
	}
	if strings.Contains(rules, "10.96.0.2") || strings.Contains(rules, ":30080") {
		t.Errorf("stale virtual servers remain:\n%s", rules)
	}

	// A restart: a new proxier over the same kernel state, where someone left a weight
	// of 5. The first sync resets it; the second leaves it alone.
	if err := h.model.UpdateRealServer(&ipvs.VirtualServer{Address: netip.MustParseAddr("10.96.0.1"), Port: 443, Protocol: "TCP"},
		&ipvs.RealServer{Address: netip.MustParseAddr("192.168.0.2"), Port: 6443, Weight: 5}); err != nil {
		t.Fatal(err)
	}
	px, err := ipvs.NewProxier(ipvs.Writers{IPVS: h.model, IPSets: h.emu, IPTables: h.emu, Netlink: h.nl}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err = px.Sync(context.Background(), []*corev1.Service{a}, slices[:1])
	if err != nil || res.JumpData != nil || res.SetEntriesAdded+res.SetEntriesDeleted != 0 {
		t.Fatalf("restart sync: %+v %v", res, err)
	}
	if got := realServers(t, h.model, "10.96.0.1:443", "TCP"); got != "192.168.0.2:6443 w=1" {
		t.Errorf("after the restart: %s", got)
	}
}

func addrStrings(as []netip.Addr) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

// failingIPT fails its restores after a number of successful ones.
type failingIPT struct {
	*emulator.Emulator
	ok int
}

func (f *failingIPT) Restore(ctx context.Context, data []byte, opts iptables.RestoreOptions) error {
	if f.ok == 0 {
		return errors.New("iptables-restore: line 3 failed")
	}
	f.ok--
	return f.Emulator.Restore(ctx, data, opts)
}

func TestProxierErrors(t *testing.T) {
	emu := emulator.New(emulator.IPv4)
	if _, err := ipvs.NewProxier(ipvs.Writers{IPVS: ipvsemu.MustNew(ipvsemu.Config{}), IPSets: emu, IPTables: emu}, ipvs.ProxierConfig{}); err == nil {
		t.Error("no netlink: no error")
	}
	base := ipvs.Writers{IPVS: ipvsemu.MustNew(ipvsemu.Config{}), IPSets: emu, IPTables: emu, Netlink: ipvs.NewFakeNetlink()}
	for _, tc := range []struct {
		cfg ipvs.ProxierConfig
		msg string
	}{
		{ipvs.ProxierConfig{Scheduler: "roundrobin"}, `scheduler "roundrobin"`},
		{ipvs.ProxierConfig{Family: "IPv5"}, "family"},
		{ipvs.ProxierConfig{KernelVersion: "five"}, `kernel version "five"`},
		{ipvs.ProxierConfig{Node: proxy.NodeConfig{NodePortAddresses: []string{"nope"}}}, "nodePortAddresses[0]"},
	} {
		if _, err := ipvs.NewProxier(base, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.msg)
		}
	}
	// A bad object fails the sync before anything is written.
	p, err := ipvs.NewProxier(base, ipvs.ProxierConfig{})
	if err != nil {
		t.Fatal(err)
	}
	bad := testService("bad", "10.96.0.300", 80, corev1.ProtocolTCP)
	if _, err := p.Sync(context.Background(), []*corev1.Service{bad}, nil); err == nil || !strings.Contains(err.Error(), "10.96.0.300") {
		t.Errorf("bad cluster IP: %v", err)
	}
	if vss, _ := base.IPVS.GetVirtualServers(); len(vss) != 0 {
		t.Errorf("half-applied: %v", vss)
	}
	// A failing iptables-restore is an error of the sync.
	fail := &failingIPT{Emulator: emulator.New(emulator.IPv4), ok: 1}
	p, err = ipvs.NewProxier(ipvs.Writers{IPVS: ipvsemu.MustNew(ipvsemu.Config{}), IPSets: fail.Emulator, IPTables: fail, Netlink: ipvs.NewFakeNetlink()}, ipvs.ProxierConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sync(context.Background(), []*corev1.Service{testService("a", "10.96.0.1", 80, corev1.ProtocolTCP)}, nil); err == nil || !strings.Contains(err.Error(), "iptables-restore") {
		t.Errorf("failing restore: %v", err)
	}
}

func TestKubeProxySysctlSettings(t *testing.T) {
	for _, tc := range []struct {
		kernel string
		strict bool
		want   string
	}{
		{"", false, "net/ipv4/vs/conntrack=1 net/ipv4/vs/expire_nodest_conn=1 net/ipv4/vs/expire_quiescent_template=1 net/ipv4/ip_forward=1"},
		{"5.9.0", false, "net/ipv4/vs/conntrack=1 net/ipv4/vs/expire_nodest_conn=1 net/ipv4/vs/expire_quiescent_template=1 net/ipv4/ip_forward=1"},
		{"5.8.18-100.fc31.x86_64", false, "net/ipv4/vs/conntrack=1 net/ipv4/vs/conn_reuse_mode=0 net/ipv4/vs/expire_nodest_conn=1 net/ipv4/vs/expire_quiescent_template=1 net/ipv4/ip_forward=1"},
		{"4.1", true, "net/ipv4/vs/conntrack=1 net/ipv4/vs/conn_reuse_mode=0 net/ipv4/vs/expire_nodest_conn=1 net/ipv4/vs/expire_quiescent_template=1 net/ipv4/ip_forward=1 net/ipv4/conf/all/arp_ignore=1 net/ipv4/conf/all/arp_announce=2"},
		{"3.10.0", false, "net/ipv4/vs/conntrack=1 net/ipv4/vs/expire_nodest_conn=1 net/ipv4/vs/expire_quiescent_template=1 net/ipv4/ip_forward=1"},
	} {
		s, err := ipvs.KubeProxySysctlSettings(tc.kernel, tc.strict)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, x := range s {
			got = append(got, x.String())
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%s strict=%v: %s", tc.kernel, tc.strict, strings.Join(got, " "))
		}
		// Applied to the model's defaults: kube-proxy's settings.
		sys := ipvsemu.ApplySysctls(ipvsemu.DefaultSysctls(), s)
		if !sys.Conntrack || !sys.ExpireNodestConn || !sys.ExpireQuiescentTemplate {
			t.Errorf("%s: applied %+v", tc.kernel, sys)
		}
		if tc.kernel == "" && sys != ipvsemu.KubeProxySysctls() {
			t.Errorf("current kernel: %+v, want KubeProxySysctls %+v", sys, ipvsemu.KubeProxySysctls())
		}
	}
}
