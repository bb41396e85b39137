package kernel

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
	ipvsemu "github.com/clusterlab/clusterlab/proxy/ipvs/emulator"
)

// The IPVS netlink adapter's exact command lines, and how it reads the tool's answers.
func TestIPVSNetlinkCommands(t *testing.T) {
	f := newFake()
	l := &IPVSNetlink{netns: "n1", run: f}
	pre := "ip netns exec n1 ip "

	// A missing device is created; an existing one is reported.
	f.on(pre+"-o link show dev kube-ipvs0", 1, "", `Device "kube-ipvs0" does not exist.`)
	existed, err := l.EnsureDummyDevice("kube-ipvs0")
	if err != nil || existed {
		t.Fatalf("EnsureDummyDevice on a fresh node: existed %v, %v", existed, err)
	}
	if want := []string{pre + "-o link show dev kube-ipvs0", pre + "link add kube-ipvs0 type dummy"}; !reflect.DeepEqual(f.calls, want) {
		t.Errorf("commands:\n%q\nwant\n%q", f.calls, want)
	}
	f.reset()
	delete(f.answers, pre+"-o link show dev kube-ipvs0")
	if existed, err := l.EnsureDummyDevice("kube-ipvs0"); err != nil || !existed {
		t.Errorf("EnsureDummyDevice again: existed %v, %v", existed, err)
	}
	if len(f.calls) != 1 {
		t.Errorf("an existing device is only looked at: %q", f.calls)
	}
	// Any other failure is the caller's.
	f.on(pre+"-o link show dev kube-ipvs0", 255, "", "Cannot open netlink socket: Operation not permitted")
	if _, err := l.EnsureDummyDevice("kube-ipvs0"); err == nil || !strings.Contains(err.Error(), "Operation not permitted") {
		t.Errorf("EnsureDummyDevice with ip failing: %v", err)
	}

	// Addresses: /32 and /128 host routes; one already there is success.
	f.reset()
	if err := l.BindAddress("kube-ipvs0", netip.MustParseAddr("10.96.0.10")); err != nil {
		t.Fatal(err)
	}
	if err := l.BindAddress("kube-ipvs0", netip.MustParseAddr("::ffff:10.96.0.11")); err != nil {
		t.Fatal(err)
	}
	if err := l.BindAddress("kube-ipvs0", netip.MustParseAddr("fd00:10:96::1")); err != nil {
		t.Fatal(err)
	}
	f.on(pre+"addr add 10.96.0.12/32 dev kube-ipvs0", 2, "", "RTNETLINK answers: File exists")
	if err := l.BindAddress("kube-ipvs0", netip.MustParseAddr("10.96.0.12")); err != nil {
		t.Errorf("binding a bound address: %v", err)
	}
	f.on(pre+"addr del 10.96.0.13/32 dev kube-ipvs0", 2, "", "RTNETLINK answers: Cannot assign requested address")
	if err := l.UnbindAddress("kube-ipvs0", netip.MustParseAddr("10.96.0.13")); !errors.Is(err, ipvs.ErrNotFound) {
		t.Errorf("unbinding an address that is not there: %v, want ErrNotFound", err)
	}
	if err := l.UnbindAddress("kube-ipvs0", netip.MustParseAddr("10.96.0.10")); err != nil {
		t.Fatal(err)
	}
	want := []string{pre + "addr add 10.96.0.10/32 dev kube-ipvs0", pre + "addr add 10.96.0.11/32 dev kube-ipvs0",
		pre + "addr add fd00:10:96::1/128 dev kube-ipvs0", pre + "addr add 10.96.0.12/32 dev kube-ipvs0",
		pre + "addr del 10.96.0.13/32 dev kube-ipvs0", pre + "addr del 10.96.0.10/32 dev kube-ipvs0"}
	if !reflect.DeepEqual(f.calls, want) {
		t.Errorf("commands:\n%q\nwant\n%q", f.calls, want)
	}

	// Listing: every address of `ip -o addr show`, link lines ignored.
	f.reset()
	f.on(pre+"-o addr show", 0, "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"+
		"1: lo    inet6 ::1/128 scope host \\       valid_lft forever preferred_lft forever\n"+
		"2: eth0    inet 192.168.77.1/24 brd 192.168.77.255 scope global eth0\\       valid_lft forever preferred_lft forever\n"+
		"5: kube-ipvs0    inet 10.96.0.10/32 scope global kube-ipvs0\\       valid_lft forever preferred_lft forever\n", "")
	got, err := l.LocalAddresses("")
	if err != nil {
		t.Fatal(err)
	}
	wantAddrs := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback(), netip.MustParseAddr("192.168.77.1"), netip.MustParseAddr("10.96.0.10")}
	if !slices.Equal(got, wantAddrs) {
		t.Errorf("LocalAddresses(\"\") = %v, want %v", got, wantAddrs)
	}
	f.on(pre+"-o addr show dev kube-ipvs0", 0, "", "")
	if got, err := l.LocalAddresses("kube-ipvs0"); err != nil || len(got) != 0 {
		t.Errorf("an interface without addresses: %v %v", got, err)
	}
	f.on(pre+"-o addr show dev nope0", 1, "", `Device "nope0" does not exist.`)
	if _, err := l.LocalAddresses("nope0"); !errors.Is(err, ipvs.ErrNotFound) {
		t.Errorf("a missing interface: %v, want ErrNotFound", err)
	}
	f.on(pre+"-o addr show dev bad0", 0, "9: bad0    inet 10.1.2.300/32 scope global bad0\n", "")
	if _, err := l.LocalAddresses("bad0"); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("an unparseable address: %v, want an error naming the line", err)
	}

	// Bad names never reach a command line.
	f.reset()
	for _, name := range []string{"", "a/b", "has space", "kube-ipvs0-much-too-long"} {
		if _, err := l.EnsureDummyDevice(name); err == nil {
			t.Errorf("EnsureDummyDevice(%q) accepted", name)
		}
		if err := l.BindAddress(name, netip.MustParseAddr("10.0.0.1")); err == nil {
			t.Errorf("BindAddress(%q) accepted", name)
		}
	}
	if len(f.calls) != 0 {
		t.Errorf("bad names ran %q", f.calls)
	}
	if _, err := NewIPVSNetlink(""); !errors.Is(err, ErrNoNamespace) {
		t.Errorf("NewIPVSNetlink(\"\"): %v, want ErrNoNamespace", err)
	}
}

// On a real kernel: a harness node programmed by kube-proxy's IPVS proxier through the
// node's writers (IPVSWriters), with the userspace IPVS model standing in for the
// kernel's where the kernel has none: kube-ipvs0 is created, holds the cluster IP, and
// loses it when the service goes; the ipsets and the iptables chains are in the
// namespace; ip_forward is set through NetnsSysctl, and net/ipv4/vs/* is an error
// naming the sysctl where the kernel has no IPVS.
func TestIPVSWritersHarness(t *testing.T) {
	RequireHarness(t)
	RequireTools(t, "ipset", "iptables-nft-restore", "iptables-nft-save")
	h, err := NewHarness(HarnessConfig{Prefix: "clipvsw", PodPorts: []uint16{}, Pods: []PodConfig{{Name: "web0"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.Close(); err != nil {
			t.Error(err)
		}
	}()
	n := h.Nodes[0]
	ctx := context.Background()
	var v ipvs.Interface
	if CheckIPVS() == nil {
		kv, err := NewIPVS(n.Netns.Name)
		if err != nil {
			t.Fatal(err)
		}
		defer kv.Close()
		v = kv
	} else {
		v = ipvsemu.MustNew(ipvsemu.Config{})
	}
	w := h.IPVSWriters(n, v)
	sys := w.Sysctl
	if CheckIPVS() != nil {
		err := sys.SetSysctl("net/ipv4/vs/conntrack", 1)
		if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "net/ipv4/vs/conntrack") {
			t.Errorf("vs/conntrack without IPVS: %v, want an error naming it", err)
		}
		w.Sysctl = nil // the proxier would stop at vs/conntrack; the rest is checked below
	}
	if err := sys.SetSysctl("net/ipv4/conf/all/arp_ignore", 1); err != nil {
		t.Fatal(err)
	}
	if v, err := h.Sysctl(n.Netns, "net.ipv4.conf.all.arp_ignore"); err != nil || v != "1" {
		t.Errorf("arp_ignore after SetSysctl: %q %v", v, err)
	}
	if err := sys.SetSysctl("net.ipv4.ip_forward", 1); err == nil {
		t.Errorf("a dotted name was accepted")
	}
	// A kernel without dummy interfaces (this CI host's has none) gets a bridge named
	// kube-ipvs0 in its place, made before the proxier looks: an address on a down
	// bridge without ports is local just the same.
	if _, err := h.Exec(ctx, n.Netns, "ip", "link", "add", "cltestdummy", "type", "dummy"); err != nil {
		if !strings.Contains(err.Error(), "Unknown device type") {
			t.Fatal(err)
		}
		t.Logf("no dummy interfaces in this kernel: kube-ipvs0 is a bridge here")
		if _, err := h.Exec(ctx, n.Netns, "ip", "link", "add", "kube-ipvs0", "type", "bridge"); err != nil {
			t.Fatal(err)
		}
	}
	nc := proxy.NodeConfig{Name: "node0", Addresses: []netip.Addr{n.IP}, ClusterCIDRs: []netip.Prefix{h.ClusterCIDR}}
	px, err := ipvs.NewProxier(w, ipvs.ProxierConfig{Node: nc})
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("10.96.0.10")
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{ClusterIP: vip.String(), ClusterIPs: []string{vip.String()}, Type: corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	port, proto, ready := int32(8080), corev1.ProtocolTCP, true
	name := "http"
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{h.Pods[0].IP.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:     []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}}}
	if _, err := px.Sync(ctx, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{sl}); err != nil {
		t.Fatal(err)
	}
	bound, err := w.Netlink.LocalAddresses("kube-ipvs0")
	if err != nil || !slices.Equal(bound, []netip.Addr{vip}) {
		t.Errorf("kube-ipvs0 holds %v (%v), want the cluster IP", bound, err)
	}
	local, err := h.LocalAddrs(n.Netns)
	if err != nil || !slices.Contains(local, vip) {
		t.Errorf("the node's local addresses %v (%v) lack the cluster IP", local, err)
	}
	sets, err := w.IPSets.SaveIPSets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sets), "add KUBE-CLUSTER-IP 10.96.0.10,tcp:80") {
		t.Errorf("ipset save lacks the cluster IP's entry:\n%s", sets)
	}
	save, err := n.IPTables.Save(ctx, "nat")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(save), "-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT") {
		t.Errorf("iptables-save -t nat lacks the KUBE-CLUSTER-IP rule:\n%s", save)
	}
	// The service goes: the address is unbound.
	if _, err := px.Sync(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if bound, err := w.Netlink.LocalAddresses("kube-ipvs0"); err != nil || len(bound) != 0 {
		t.Errorf("kube-ipvs0 after the service went: %v (%v)", bound, err)
	}
}

// FuzzParseIPAddrShow: any output is read without a panic; what it returns is the
// address of each inet/inet6 line's prefix, in order; an error names the line.
func FuzzParseIPAddrShow(f *testing.F) {
	f.Add("1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n")
	f.Add("5: kube-ipvs0    inet6 fd00:10:96::1/128 scope global \\       valid_lft forever\n2: eth0 inet 10.0.0.300/24\n")
	f.Add("3: x    link/ether 00:11:22:33:44:55 brd ff:ff:ff:ff:ff:ff\n\n")
	f.Fuzz(func(t *testing.T, out string) {
		addrs, err := parseIPAddrShow([]byte(out))
		if err != nil {
			if !strings.Contains(err.Error(), "line ") {
				t.Errorf("error without a line: %v", err)
			}
			return
		}
		var want []netip.Addr
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) >= 4 && (f[2] == "inet" || f[2] == "inet6") {
				p, err := netip.ParsePrefix(f[3])
				if err != nil {
					t.Fatalf("line %q: %v, and no error returned", line, err)
				}
				want = append(want, p.Addr())
			}
		}
		if !slices.Equal(addrs, want) {
			t.Errorf("addresses %v, want %v (one per address line)", addrs, want)
		}
	})
}
