package ipvs_test

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy"
	ipvsemu "github.com/clusterlab/clusterlab/proxy/ipvs/emulator"
)

// versionHarness is defaultHarness for kube-proxy release v on kernel kernel ("" a
// current one), with the sysctls the proxier wrote applied to the model as the kernel
// would.
func versionHarness(t *testing.T, v proxy.Version, kernel string) *modeHarness {
	t.Helper()
	cfg := defaultConfig()
	cfg.Node.Version = v
	cfg.KernelVersion = kernel
	h := newModeHarness(t, cfg, []string{"192.168.0.2"}, nil)
	h.model.SetSysctls(ipvsemu.ApplySysctls(h.model.Sysctls(), h.px.Sysctls()))
	if kernel != "" {
		h.model.SetKernel(netfilter.MustParseKernelVersion(kernel))
	}
	return h
}

// TestLocalPolicyFallbackByVersion (change "ipvs-local-policy-falls-back-to-cluster",
// row 35): a pod on a node without a local endpoint of an externalTrafficPolicy Local
// NodePort service is refused by kube-proxy 1.23 (the virtual server has no real
// server) and served by the cluster's endpoint from 1.24.
func TestLocalPolicyFallbackByVersion(t *testing.T) {
	svc := testService("web", "10.96.0.10", 80, corev1.ProtocolTCP)
	svc.Spec.Type = corev1.ServiceTypeNodePort
	svc.Spec.Ports[0].NodePort = 30080
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	slices := []*discoveryv1.EndpointSlice{testSlice("web", 8080, corev1.ProtocolTCP, "10.0.1.1")} // on node-b
	for _, c := range []struct {
		v                  proxy.Version
		realServers, flows string
	}{
		{23, "", "reject -"},
		{24, "10.0.1.1:8080 w=1", "forward 10.0.1.1:8080"},
	} {
		t.Run(c.v.String(), func(t *testing.T) {
			h := versionHarness(t, c.v, "")
			h.sync(t, []*corev1.Service{svc}, slices)
			if got := realServers(t, h.model, "192.168.0.2:30080", "TCP"); got != c.realServers {
				t.Errorf("real servers of the node port: %q, want %q", got, c.realServers)
			}
			d := h.model.In(tcpPkt("10.0.0.5:40000", "192.168.0.2:30080", netfilter.TCPSyn))
			dest := "-"
			if d.Verdict == ipvsemu.VerdictForward {
				dest = d.Dest.String()
			}
			if got := d.Verdict.String() + " " + dest; got != c.flows {
				t.Errorf("pod to the node port: %s, want %s (%s)", got, c.flows, d.Reason)
			}
		})
	}
}

// closeConn plays a connection's close from the client (FIN, FIN-ACK, ACK): the entry
// goes to TIME_WAIT.
func closeConn(h *modeHarness, client, vip string, dest netip.AddrPort) {
	h.model.In(tcpPkt(client, vip, netfilter.TCPFin|netfilter.TCPAck))
	h.model.Out(ipvsemu.Packet{Protocol: netfilter.ProtoTCP, Src: dest, Dst: netip.MustParseAddrPort(client), TCPFlags: netfilter.TCPFin | netfilter.TCPAck})
	h.model.In(tcpPkt(client, vip, netfilter.TCPAck))
}

// openConn plays a handshake and returns the SYN's decision.
func openConn(h *modeHarness, client, vip string) ipvsemu.Decision {
	d := h.model.In(tcpPkt(client, vip, netfilter.TCPSyn))
	if d.Verdict == ipvsemu.VerdictForward {
		h.model.Out(ipvsemu.Packet{Protocol: netfilter.ProtoTCP, Src: d.Dest, Dst: netip.MustParseAddrPort(client), TCPFlags: netfilter.TCPSyn | netfilter.TCPAck})
		h.model.In(tcpPkt(client, vip, netfilter.TCPAck))
	}
	return d
}

// TestConnReuseModeByVersion (change "ipvs-conn-reuse-mode-left-on-5.9", row 36): on a
// 6.6 kernel kube-proxy 1.21 sets conn_reuse_mode=0, so a client that reuses the source
// port of a closed connection (its entry in TIME_WAIT) goes back to the old real server,
// whatever the scheduler would say; 1.22 leaves the kernel's 1, and the reused port is
// scheduled afresh (rr: the other endpoint). On a 5.4 kernel both set 0.
func TestConnReuseModeByVersion(t *testing.T) {
	const vip, client = "10.96.0.10:80", "10.0.0.5:40000"
	svc := testService("web", "10.96.0.10", 80, corev1.ProtocolTCP)
	both := []*discoveryv1.EndpointSlice{testSlice("web", 8080, corev1.ProtocolTCP, "10.0.1.1", "10.0.2.1")}
	for _, c := range []struct {
		v             proxy.Version
		kernel        string
		reuseMode     bool // conn_reuse_mode=0 written
		dest          string
		newConnection bool
	}{
		{21, "6.6", true, "10.0.2.1:8080", false},
		{22, "6.6", false, "10.0.1.1:8080", true},
		{22, "5.4", true, "10.0.2.1:8080", false},
	} {
		t.Run(c.v.String()+" on "+c.kernel, func(t *testing.T) {
			h := versionHarness(t, c.v, c.kernel)
			var written []string
			for _, s := range h.px.Sysctls() {
				written = append(written, s.String())
			}
			if got := strings.Contains(strings.Join(written, " "), "net/ipv4/vs/conn_reuse_mode=0"); got != c.reuseMode {
				t.Errorf("conn_reuse_mode=0 written: %v, want %v (%v)", got, c.reuseMode, written)
			}
			h.sync(t, []*corev1.Service{svc}, both)
			d := openConn(h, client, vip)
			if d.Dest.String() != "10.0.2.1:8080" {
				t.Fatalf("first connection: %+v", d)
			}
			closeConn(h, client, vip, d.Dest)
			d = h.model.In(tcpPkt(client, vip, netfilter.TCPSyn)) // the same source port again
			if d.Dest.String() != c.dest || d.New != c.newConnection {
				t.Errorf("reused source port: %s new=%v, want %s new=%v (%s)", d.Dest, d.New, c.dest, c.newConnection, d.Reason)
			}
		})
	}
}

// TestExpireSysctlsFlow (change "ipvs-expire-sysctls", row 37): with the sysctls
// kube-proxy writes, a packet on the connection of a deleted real server finds its
// entry expired (a new SYN is scheduled to a live endpoint); on a kernel left at its
// defaults (expire_nodest_conn=0) the packet is dropped and the entry lives on.
func TestExpireSysctlsFlow(t *testing.T) {
	const vip, client = "10.96.0.10:53", "10.0.0.5:5353"
	svc := testService("dns", "10.96.0.10", 53, corev1.ProtocolUDP)
	for _, c := range []struct {
		name      string
		kubeProxy bool
		want      string
	}{
		{"kube-proxy's sysctls", true, "forward 10.0.1.1:53"},
		{"kernel defaults", false, "drop -"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := defaultConfig()
			h := newModeHarness(t, cfg, []string{"192.168.0.2"}, nil)
			if c.kubeProxy {
				h.model.SetSysctls(ipvsemu.ApplySysctls(h.model.Sysctls(), h.px.Sysctls()))
			}
			h.sync(t, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{testSlice("dns", 53, corev1.ProtocolUDP, "10.0.1.1", "10.0.2.1")})
			udp := ipvsemu.Packet{Protocol: netfilter.ProtoUDP, Src: netip.MustParseAddrPort(client), Dst: netip.MustParseAddrPort(vip)}
			if d := h.model.In(udp); d.Dest.String() != "10.0.2.1:53" {
				t.Fatalf("first datagram: %+v", d)
			}
			h.sync(t, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{testSlice("dns", 53, corev1.ProtocolUDP, "10.0.1.1")}) // UDP: deleted at once
			d := h.model.In(udp)
			dest := "-"
			if d.Verdict == ipvsemu.VerdictForward {
				dest = d.Dest.String()
			}
			if got := d.Verdict.String() + " " + dest; got != c.want {
				t.Errorf("next datagram of the flow: %s, want %s (%s)", got, c.want, d.Reason)
			}
		})
	}
}
