package proxy

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestLocalTrafficDetector(t *testing.T) {
	base := NodeConfig{
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00:10::/64")},
		PodCIDRs:     []netip.Prefix{netip.MustParsePrefix("10.0.3.0/24")},
	}
	cases := []struct {
		name          string
		mode          LocalMode
		family        corev1.IPFamily
		local, nolocl string
		src           string
		iface         string
		isLocal       bool
	}{
		{"default is ClusterCIDR", "", corev1.IPv4Protocol, "-s 10.0.0.0/8", "! -s 10.0.0.0/8", "10.9.9.9", "", true},
		{"ClusterCIDR v6", LocalModeClusterCIDR, corev1.IPv6Protocol, "-s fd00:10::/64", "! -s fd00:10::/64", "fd00:11::1", "", false},
		{"NodeCIDR", LocalModeNodeCIDR, corev1.IPv4Protocol, "-s 10.0.3.0/24", "! -s 10.0.3.0/24", "10.0.4.1", "", false},
		{"NodeCIDR without a v6 pod CIDR: none", LocalModeNodeCIDR, corev1.IPv6Protocol, "", "", "fd00::1", "", false},
		{"BridgeInterface", LocalModeBridgeInterface, corev1.IPv4Protocol, "-i cbr0", "! -i cbr0", "1.2.3.4", "cbr0", true},
		{"InterfaceNamePrefix", LocalModeInterfaceNamePrefix, corev1.IPv4Protocol, "-i veth+", "! -i veth+", "1.2.3.4", "veth12ab", true},
		{"None", LocalModeNone, corev1.IPv4Protocol, "", "", "10.0.0.1", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.DetectLocalMode = tc.mode
			c.BridgeInterface = "cbr0"
			c.InterfaceNamePrefix = "veth"
			d := c.NewLocalTrafficDetector(tc.family)
			if got := strings.Join(d.IfLocal(), " "); got != tc.local {
				t.Errorf("IfLocal %q want %q", got, tc.local)
			}
			if got := strings.Join(d.IfNotLocal(), " "); got != tc.nolocl {
				t.Errorf("IfNotLocal %q want %q", got, tc.nolocl)
			}
			if d.IsImplemented() != (tc.local != "") {
				t.Errorf("IsImplemented %v", d.IsImplemented())
			}
			if got := d.IsLocal(netip.MustParseAddr(tc.src), tc.iface); got != tc.isLocal {
				t.Errorf("IsLocal(%s, %q) = %v", tc.src, tc.iface, got)
			}
		})
	}
}

func TestNodePortAddresses(t *testing.T) {
	node := NodeConfig{
		IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2"), netip.MustParseAddr("2001:db8::1")},
		Addresses: []netip.Addr{
			netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1"),
			netip.MustParseAddr("192.168.1.2"), netip.MustParseAddr("192.168.0.2"), netip.MustParseAddr("192.168.99.11"),
			netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8:1::2"),
		},
	}
	cases := []struct {
		name     string
		specs    []string
		family   corev1.IPFamily
		matchAll bool
		loopback bool
		ips      string
	}{
		{"default v4", nil, corev1.IPv4Protocol, true, true, "127.0.0.1,192.168.0.2,192.168.1.2,192.168.99.11"},
		{"default v6", nil, corev1.IPv6Protocol, true, false, "::1,2001:db8::1,2001:db8:1::2"},
		{"two v4 CIDRs and one v6", []string{"192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64"}, corev1.IPv4Protocol, false, false, "192.168.0.2,192.168.1.2"},
		{"same, v6 proxy", []string{"192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64"}, corev1.IPv6Protocol, false, false, "2001:db8::1"},
		{"localhost included", []string{"192.168.0.0/24", "127.0.0.1/32"}, corev1.IPv4Protocol, false, true, "127.0.0.1,192.168.0.2"},
		{"no v4 CIDR means all v4", []string{"2001:db8::/64"}, corev1.IPv4Protocol, true, true, "127.0.0.1,192.168.0.2,192.168.1.2,192.168.99.11"},
		{"zero CIDR wins", []string{"192.168.0.0/24", "0.0.0.0/0"}, corev1.IPv4Protocol, true, true, "127.0.0.1,192.168.0.2,192.168.1.2,192.168.99.11"},
		{"primary", []string{"primary"}, corev1.IPv4Protocol, false, false, "192.168.0.2"},
		{"primary v6", []string{"primary"}, corev1.IPv6Protocol, false, false, "2001:db8::1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := node
			c.NodePortAddresses = tc.specs
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			npa, err := c.ResolveNodePortAddresses(tc.family)
			if err != nil {
				t.Fatal(err)
			}
			if npa.MatchAll() != tc.matchAll || npa.ContainsIPv4Loopback() != tc.loopback {
				t.Errorf("matchAll=%v loopback=%v", npa.MatchAll(), npa.ContainsIPv4Loopback())
			}
			if got := addrs(npa.NodeIPs(c.LocalAddresses())); got != tc.ips {
				t.Errorf("NodeIPs %s want %s", got, tc.ips)
			}
		})
	}
}

func TestNodeConfigValidateAndDefaults(t *testing.T) {
	var c NodeConfig
	if c.MasqueradeMark() != 0x4000 || !c.LocalhostNodePortsEnabled() {
		t.Errorf("defaults: mark %#x localhost %v", c.MasqueradeMark(), c.LocalhostNodePortsEnabled())
	}
	c.MasqueradeBit = ptr.To(0)
	c.LocalhostNodePorts = ptr.To(false)
	if c.MasqueradeMark() != 1 || c.LocalhostNodePortsEnabled() {
		t.Errorf("explicit: mark %#x", c.MasqueradeMark())
	}
	bad := NodeConfig{
		MasqueradeBit:     ptr.To(32),
		DetectLocalMode:   LocalModeBridgeInterface,
		NodePortAddresses: []string{"10.0.0.0/8", "primary"},
		IPs:               []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")},
	}
	err := bad.Validate()
	for _, want := range []string{
		"masqueradeBit: 32 is not in 0..31",
		"bridgeInterface: required",
		`nodePortAddresses[1]: invalid CIDR "primary"`,
		"ips[1]: second IPv4 address 10.0.0.2",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
	if (&NodeConfig{DetectLocalMode: "Weird"}).Validate() == nil {
		t.Error("unknown mode accepted")
	}
}
