//go:build linux

package kernel

import (
	"errors"
	"net/netip"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

func TestIPVSKernel(t *testing.T) {
	_, statErr := os.Stat("/proc/net/ip_vs")
	err := CheckIPVS()
	if os.IsNotExist(statErr) {
		// No IPVS loaded (this machine: CONFIG_IP_VS missing). The adapter must say so.
		if !errors.Is(err, ErrIPVSUnsupported) || !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("CheckIPVS without /proc/net/ip_vs: %v; want ErrIPVSUnsupported wrapping ENOENT", err)
		}
		var ue *IPVSUnsupportedError
		if !errors.As(err, &ue) || ue.Reason == "" || !errors.Is(ue.Err, syscall.ENOENT) {
			t.Fatalf("CheckIPVS: %#v; want an *IPVSUnsupportedError with a reason and the netlink ENOENT", err)
		}
		v, err := NewIPVS(HostNamespace)
		if v != nil || !errors.Is(err, ErrIPVSUnsupported) {
			t.Fatalf("NewIPVS: %v, %v; want nil and ErrIPVSUnsupported", v, err)
		}
		t.Skip("kernel IPVS unavailable, error checked: " + err.Error())
	}
	if err != nil {
		t.Fatalf("/proc/net/ip_vs exists but CheckIPVS: %v", err)
	}
	testIPVSRoundTrip(t)
}

// testIPVSRoundTrip programs virtual servers in a harness node namespace and reads them
// back. It runs only on kernels with IPVS.
func testIPVSRoundTrip(t *testing.T) {
	h := newTestHarness(t, HarnessConfig{PodPorts: []uint16{}})
	v, err := NewIPVS(h.Nodes[0].Netns.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	vs := &ipvs.VirtualServer{Address: netip.MustParseAddr("10.96.0.10"), Protocol: "TCP", Port: 80, Scheduler: "rr",
		Flags: ipvs.FlagPersistent | ipvs.FlagHashed, Timeout: 10800, Netmask: 32}
	if err := v.AddVirtualServer(vs); err != nil {
		t.Fatal(err)
	}
	rs := &ipvs.RealServer{Address: h.Pods[0].IP, Port: 8080, Weight: 1}
	if err := v.AddRealServer(vs, rs); err != nil {
		t.Fatal(err)
	}
	got, err := v.GetVirtualServer(vs)
	if err != nil {
		t.Fatal(err)
	}
	if got.Address != vs.Address || got.Port != 80 || got.Protocol != "TCP" || got.Scheduler != "rr" || got.Timeout != 10800 ||
		got.Netmask != 32 || got.Flags&ipvs.FlagPersistent == 0 {
		t.Errorf("GetVirtualServer = %+v, want %+v", got, vs)
	}
	rss, err := v.GetRealServers(vs)
	if err != nil || len(rss) != 1 || rss[0].Address != rs.Address || rss[0].Port != 8080 || rss[0].Weight != 1 {
		t.Errorf("GetRealServers = %+v, %v", rss, err)
	}
	rs.Weight = 0
	if err := v.UpdateRealServer(vs, rs); err != nil {
		t.Fatal(err)
	}
	if err := v.ConfigureTimeouts(900*time.Second, 120*time.Second, 300*time.Second); err != nil {
		t.Fatal(err)
	}
	all, err := v.GetVirtualServers()
	if err != nil || len(all) != 1 {
		t.Errorf("GetVirtualServers = %v, %v", all, err)
	}
	if err := v.DeleteRealServer(vs, rs); err != nil {
		t.Fatal(err)
	}
	if err := v.Flush(); err != nil {
		t.Fatal(err)
	}
	if all, err := v.GetVirtualServers(); err != nil || len(all) != 0 {
		t.Errorf("after Flush: %v, %v", all, err)
	}
}

// The translation to moby/ipvs's types, checked without a kernel.
func TestIPVSTranslation(t *testing.T) {
	cases := []struct {
		name string
		vs   ipvs.VirtualServer
	}{
		{"tcp v4 persistent", ipvs.VirtualServer{Address: netip.MustParseAddr("10.96.0.10"), Protocol: "TCP", Port: 80, Scheduler: "rr", Flags: ipvs.FlagPersistent | ipvs.FlagHashed, Timeout: 10800, Netmask: 32}},
		{"udp v4 /24 netmask", ipvs.VirtualServer{Address: netip.MustParseAddr("10.96.0.11"), Protocol: "UDP", Port: 53, Scheduler: "sh", Flags: ipvs.FlagSchedSH1 | ipvs.FlagSchedSH2, Netmask: 24}},
		{"sctp v6", ipvs.VirtualServer{Address: netip.MustParseAddr("fd00::10"), Protocol: "SCTP", Port: 9, Scheduler: "mh", Netmask: 64}},
		{"fwmark", ipvs.VirtualServer{FWMark: 7, Scheduler: "lblc", Netmask: 32}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := toLibService(&tc.vs)
			if err != nil {
				t.Fatal(err)
			}
			back, err := fromLibService(s)
			if err != nil {
				t.Fatal(err)
			}
			if *back != tc.vs {
				t.Errorf("round trip: got %+v, want %+v (library form %+v)", *back, tc.vs, *s)
			}
		})
	}
	// The IPv4 netmask attribute is the mask in network byte order; the IPv6 one a prefix length.
	s, _ := toLibService(&cases[1].vs)
	var b [4]byte
	b[0], b[1], b[2], b[3] = byte(s.Netmask), byte(s.Netmask>>8), byte(s.Netmask>>16), byte(s.Netmask>>24)
	if got := netip.AddrFrom4(b).String(); got != "255.255.255.0" && got != "0.255.255.255" {
		t.Errorf("v4 /24 netmask attribute bytes %v", b)
	}
	if s6, _ := toLibService(&cases[2].vs); s6.Netmask != 64 || s6.AddressFamily != 10 || s6.Protocol != 132 {
		t.Errorf("v6 service: %+v", s6)
	}
	// Defaults kube-proxy relies on: no netmask means a host mask.
	s0, _ := toLibService(&ipvs.VirtualServer{Address: netip.MustParseAddr("10.0.0.1"), Protocol: "tcp", Port: 1})
	if s0.Netmask != 0xffffffff || s0.Protocol != 6 {
		t.Errorf("default netmask/protocol: %+v", s0)
	}
	for _, bad := range []ipvs.VirtualServer{{Protocol: "TCP", Port: 80}, {Address: netip.MustParseAddr("10.0.0.1"), Protocol: "ICMP"}} {
		if _, err := toLibService(&bad); err == nil {
			t.Errorf("toLibService(%+v): want an error", bad)
		}
	}
	rs := ipvs.RealServer{Address: netip.MustParseAddr("10.244.0.2"), Port: 8080, Weight: 3, Forward: ipvs.DirectRoute, UpperThreshold: 9, LowerThreshold: 2}
	_, d, err := toLibPair(&cases[0].vs, &rs)
	if err != nil {
		t.Fatal(err)
	}
	d.ConnectionFlags |= 0x100 // other IP_VS_CONN_F_* bits the kernel may report
	d.ActiveConnections, d.InactiveConnections = 4, 5
	back, err := fromLibDestination(d)
	if err != nil {
		t.Fatal(err)
	}
	want := rs
	want.ActiveConn, want.InactiveConn = 4, 5
	if *back != want {
		t.Errorf("real server round trip: got %+v, want %+v", *back, want)
	}
	if _, _, err := toLibPair(&cases[0].vs, &ipvs.RealServer{Port: 1}); err == nil {
		t.Error("real server without address: want an error")
	}
	_ = slices.Equal[[]int]
}

// The kernel's errnos match the ipvs package's errors, as the emulator's do (the
// proxier tells a missing virtual server by ipvs.IsNotFound), and stay errnos.
func TestIPVSErrnoClasses(t *testing.T) {
	for _, c := range []struct {
		errno syscall.Errno
		want  error
	}{{syscall.EEXIST, ipvs.ErrExist}, {syscall.ESRCH, ipvs.ErrNotFound}, {syscall.ENOENT, ipvs.ErrNotFound},
		{syscall.EINVAL, ipvs.ErrInvalid}, {syscall.ERANGE, ipvs.ErrRange}} {
		err := wrapIPVS("add virtual server TCP 10.0.0.1:80", c.errno)
		if !errors.Is(err, c.want) || !errors.Is(err, c.errno) {
			t.Errorf("%v: %v matches neither %v nor the errno", c.errno, err, c.want)
		}
		if got := err.Error(); got != "ipvs: add virtual server TCP 10.0.0.1:80: "+c.errno.Error() {
			t.Errorf("message %q", got)
		}
	}
	err := wrapIPVS("flush", syscall.EPERM)
	if !errors.Is(err, syscall.EPERM) || errors.Is(err, ipvs.ErrNotFound) || errors.Is(err, ipvs.ErrInvalid) {
		t.Errorf("EPERM: %v", err)
	}
	if wrapIPVS("flush", nil) != nil {
		t.Error("nil error wrapped")
	}
}
