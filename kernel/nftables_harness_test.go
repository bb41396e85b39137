package kernel

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy"
)

// smokeRuleset is a minimal hand-written ruleset in kube-proxy's nftables style, its
// 1.36+ layout (the reference's §4; the same rules appear in `nft list table ip
// kube-proxy` of real 1.36 nodes): the services chain marks ClusterIP traffic from
// outside the cluster CIDR for masquerade and dispatches through the service-ips
// verdict map to a service chain that DNATs with one numgen random mod 2 map to two
// endpoints; postrouting masquerades marked connections and hairpin ones
// (hairpin-connections set).
func smokeRuleset(fam knftables.Family, vip, clusterCIDR, a, b string) string {
	ip, addrType := "ip", "ipv4_addr"
	if fam == knftables.IPv6Family {
		ip, addrType = "ip6", "ipv6_addr"
	}
	svc := "service-SMOKE000-default/web/tcp/http"
	return strings.NewReplacer("$F", string(fam), "$IP", ip, "$T", addrType, "$VIP", vip, "$CIDR", clusterCIDR,
		"$A", a, "$B", b, "$SVC", svc).Replace(`add table $F kube-proxy { comment "rules for kube-proxy" ; }
add chain $F kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain $F kube-proxy nat-output { type nat hook output priority -100 ; }
add chain $F kube-proxy nat-postrouting { type nat hook postrouting priority 100 ; }
add chain $F kube-proxy services
add chain $F kube-proxy masquerading
add chain $F kube-proxy $SVC
add set $F kube-proxy cluster-ips { type $T ; comment "Active ClusterIPs" ; }
add map $F kube-proxy service-ips { type $T . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }
add set $F kube-proxy hairpin-connections { type $T . $T . inet_proto . inet_service ; comment "service hairpin connections" ; }
add rule $F kube-proxy nat-prerouting jump services
add rule $F kube-proxy nat-output jump services
add rule $F kube-proxy nat-postrouting jump masquerading
add rule $F kube-proxy services $IP daddr @cluster-ips $IP saddr != $CIDR mark set mark or 0x4000 comment "masquerade clusterIP traffic from outside cluster"
add rule $F kube-proxy services $IP daddr . meta l4proto . th dport vmap @service-ips
add rule $F kube-proxy masquerading mark and 0x4000 != 0 mark set mark xor 0x4000 masquerade fully-random
add rule $F kube-proxy masquerading ct status dnat $IP saddr . $IP daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random
add rule $F kube-proxy $SVC meta l4proto tcp dnat $IP addr . port to numgen random mod 2 map { 0 : $A . 8080 , 1 : $B . 8080 }
add rule $F kube-proxy $SVC meta l4proto udp dnat $IP addr . port to numgen random mod 2 map { 0 : $A . 8080 , 1 : $B . 8080 }
add element $F kube-proxy cluster-ips { $VIP }
add element $F kube-proxy service-ips { $VIP . tcp . 80 : goto $SVC }
add element $F kube-proxy service-ips { $VIP . udp . 80 : goto $SVC }
add element $F kube-proxy hairpin-connections { $A . $A . tcp . 8080 }
add element $F kube-proxy hairpin-connections { $B . $B . tcp . 8080 }
add element $F kube-proxy hairpin-connections { $A . $A . udp . 8080 }
add element $F kube-proxy hairpin-connections { $B . $B . udp . 8080 }
`)
}

// Real traffic through a kernel programmed with nftables, in kube-proxy's style: a
// node with two pods, a ClusterIP DNATed to both with numgen random mod 2; TCP and UDP
// from a pod (one endpoint is the client itself: hairpin), from outside (masqueraded)
// and from the node reach both endpoints, evenly (chi-square).
func TestNFTablesHarnessSmoke(t *testing.T) {
	RequireTools(t, "nft")
	h := newTestHarness(t, HarnessConfig{NFTables: true, IPv6: true, Pods: []PodConfig{{Name: "a"}, {Name: "b"}}})
	ctx := ctxT(t)
	node, a, b := h.Nodes[0], h.Pod("a"), h.Pod("b")
	if h.NFTables == nil || h.NFTables6 == nil || node.NFTables != h.NFTables || h.NFTables.Netns() != node.Netns.Name ||
		h.NFTables.Family() != knftables.IPv4Family || h.NFTables6.Family() != knftables.IPv6Family {
		t.Fatalf("harness adapters: %+v %+v", h.NFTables, h.NFTables6)
	}
	if h.IPTables == nil || h.Conntrack == nil || h.IPTables6 == nil {
		t.Error("the iptables and conntrack adapters are still there beside the nftables ones")
	}
	// The nftables mode never sets route_localnet.
	for key, want := range map[string]string{"net.ipv4.conf.all.route_localnet": "0", "net.ipv4.ip_forward": "1", "net.ipv4.conf.all.rp_filter": "0"} {
		if got, err := h.Sysctl(node.Netns, key); err != nil || got != want {
			t.Errorf("node sysctl %s = %q, %v; want %q", key, got, err, want)
		}
	}
	families := []struct {
		nft          *NFTables
		vip          netip.AddrPort
		cidr         string
		a, b, gw, ex netip.Addr
	}{
		{h.NFTables, netip.MustParseAddrPort("10.96.0.10:80"), "10.244.0.0/16", a.IP, b.IP, node.Gateway, h.ExternalIP},
		{h.NFTables6, netip.MustParseAddrPort("[fd00:10:96::10]:80"), "fd00:10:244::/56", a.IP6, b.IP6, node.Gateway6, h.ExternalIP6},
	}
	for _, fam := range families {
		rules := smokeRuleset(fam.nft.Family(), fam.vip.Addr().String(), fam.cidr, fam.a.String(), fam.b.String())
		if err := fam.nft.ApplyScript(ctx, rules); err != nil {
			t.Fatalf("apply:\n%s\n%v", rules, err)
		}
	}
	// nft prints it as it prints a real 1.36 node's table.
	listed, err := h.NFTables.ListTable(ctx, NFTListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\t\tip daddr @cluster-ips ip saddr != 10.244.0.0/16 meta mark set meta mark | 0x00004000 comment \"masquerade clusterIP traffic from outside cluster\"\n",
		"\t\tmeta mark & 0x00004000 != 0x00000000 meta mark set meta mark ^ 0x00004000 masquerade fully-random\n",
		"\t\tct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random\n",
		"\t\tmeta l4proto tcp dnat ip to numgen random mod 2 map { 0 : " + a.IP.String() + " . 8080, 1 : " + b.IP.String() + " . 8080 }\n",
	} {
		if !strings.Contains(string(listed), want) {
			t.Errorf("nft list table lacks %q:\n%s", want, listed)
		}
	}
	for _, fam := range families {
		for _, proto := range []string{"tcp", "udp"} {
			name := fmt.Sprintf("%s %s", fam.nft.Family(), proto)
			t.Run(name, func(t *testing.T) {
				// From pod a: b sees a's own address; a itself (hairpin) the node's.
				s := h.DialSpread(a.Netns, proto, fam.vip, 150, 8)
				for _, r := range s.Results {
					if r.Outcome == Answered && (r.Server == "b" && r.Source.Addr() != fam.a || r.Server == "a" && r.Source.Addr() != fam.gw) {
						t.Errorf("pod a -> VIP: %v; want b to see %v and a (hairpin) %v", r, fam.a, fam.gw)
					}
				}
				chi, df, err := s.ChiSquare(map[string]float64{"a": 0.5, "b": 0.5})
				t.Logf("pod a -> %v: %v, chi-square %.2f", fam.vip, s, chi)
				if err != nil || s.Answered() != 150 || chi > ChiSquareCritical(df) {
					t.Errorf("pod a -> %v: %v; chi-square %.2f (df %d, critical %.2f), %v", fam.vip, s, chi, df, ChiSquareCritical(df), err)
				}
				// From outside: masqueraded to the node's pod-network address.
				ext := h.DialSpread(h.External, proto, fam.vip, 40, 8)
				for _, r := range ext.Results {
					if r.Outcome != Answered || r.Source.Addr() != fam.gw {
						t.Errorf("external -> VIP: %v; want an answer seeing %v", r, fam.gw)
					}
				}
				if ext.Servers["a"] == 0 || ext.Servers["b"] == 0 {
					t.Errorf("external -> VIP, 40 connections: %v; want both endpoints", ext)
				}
				// From the node itself (nat-output).
				if n := h.DialSpread(node.Netns, proto, fam.vip, 40, 8); n.Servers["a"] == 0 || n.Servers["b"] == 0 || n.Answered() != 40 {
					t.Errorf("node -> VIP, 40 connections: %v; want both endpoints", n)
				}
				// A port the map does not hold is not DNATed: nothing listens on the VIP.
				if r := h.Dial(a.Netns, proto, netip.AddrPortFrom(fam.vip.Addr(), 81)); r.Outcome == Answered {
					t.Errorf("VIP port 81: %v, want no answer", r)
				}
			})
		}
	}
	// Deleting the table ends the service; the other family's table stays.
	if err := h.NFTables.DeleteTable(ctx, knftables.IPv4Family, "kube-proxy"); err != nil {
		t.Fatal(err)
	}
	if r := h.Dial(a.Netns, "tcp", families[0].vip); r.Outcome == Answered {
		t.Errorf("after DeleteTable: %v, want no answer", r)
	}
	if r := h.Dial(a.Netns, "tcp", families[1].vip); r.Outcome != Answered {
		t.Errorf("IPv6 after deleting the IPv4 table: %v, want an answer", r)
	}
}

// ClientIP affinity in kube-proxy's nftables style holds on a kernel: the service chain
// first sends a source found in an endpoint's affinity set (a timeout set, filled by
// `update @set { ip saddr }` in the endpoint chain) to that endpoint, and only new
// sources go through numgen.
func TestNFTablesHarnessAffinity(t *testing.T) {
	RequireTools(t, "nft")
	h := newTestHarness(t, HarnessConfig{NFTables: true, Topology: TopologyRouted,
		Pods: []PodConfig{{Name: "client"}, {Name: "a"}, {Name: "b"}}})
	ctx := ctxT(t)
	client, a, b := h.Pod("client"), h.Pod("a"), h.Pod("b")
	svc := "service-AFFINITY-default/web/tcp/http"
	epA, epB := "endpoint-AAAAAAAA-default/web/tcp/http__"+a.IP.String()+"/8080", "endpoint-BBBBBBBB-default/web/tcp/http__"+b.IP.String()+"/8080"
	affA, affB := "affinity-AAAAAAAA-default/web/tcp/http__"+a.IP.String()+"/8080", "affinity-BBBBBBBB-default/web/tcp/http__"+b.IP.String()+"/8080"
	rules := strings.NewReplacer("$SVC", svc, "$EPA", epA, "$EPB", epB, "$AFFA", affA, "$AFFB", affB, "$A", a.IP.String(), "$B", b.IP.String()).Replace(`add table ip kube-proxy
add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip kube-proxy services
add chain ip kube-proxy $SVC
add chain ip kube-proxy $EPA
add chain ip kube-proxy $EPB
add set ip kube-proxy $AFFA { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }
add set ip kube-proxy $AFFB { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }
add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }
add rule ip kube-proxy nat-prerouting jump services
add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip kube-proxy $SVC ip saddr @$AFFA goto $EPA
add rule ip kube-proxy $SVC ip saddr @$AFFB goto $EPB
add rule ip kube-proxy $SVC numgen random mod 2 vmap { 0 : goto $EPA , 1 : goto $EPB }
add rule ip kube-proxy $EPA update @$AFFA { ip saddr }
add rule ip kube-proxy $EPA meta l4proto tcp dnat to $A:8080
add rule ip kube-proxy $EPB update @$AFFB { ip saddr }
add rule ip kube-proxy $EPB meta l4proto tcp dnat to $B:8080
add element ip kube-proxy service-ips { 10.96.0.40 . tcp . 80 : goto $SVC }
`)
	if err := h.NFTables.ApplyScript(ctx, rules); err != nil {
		t.Fatalf("apply:\n%s\n%v", rules, err)
	}
	vip := netip.MustParseAddrPort("10.96.0.40:80")
	s := h.DialSpread(client.Netns, "tcp", vip, 20, 1)
	if s.Answered() != 20 || len(s.Servers) != 1 {
		t.Fatalf("20 connections from one client under ClientIP affinity: %v; want all to one endpoint", s)
	}
	first := s.Results[0].Server
	// The kernel recorded the client in that endpoint's set, with a timeout.
	listed, err := h.NFTables.ListTable(ctx, NFTListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	aff := map[string]string{"a": affA, "b": affB}[first]
	i := strings.Index(string(listed), "set "+aff+" {")
	// Before Linux 6.12 the kernel also dumps the element's timeout when it is the
	// set's (proxy's change nftables-element-timeout-listing; seen on 6.1).
	elem := "elements = { " + client.IP.String() + " expires "
	kv, err := netfilter.ParseKernelVersion(kernelRelease())
	if err != nil {
		t.Fatal(err)
	}
	if !proxy.KernelHas("nftables-element-timeout-listing", kv) {
		elem = "elements = { " + client.IP.String() + " timeout 3h expires "
	}
	if i < 0 || !strings.Contains(string(listed)[i:], elem) {
		t.Errorf("affinity set %s lacks the client %v as Linux %v lists it (%q):\n%s", aff, client.IP, kv, elem, listed)
	}
	// Forget the client: the next connections are spread again (both endpoints seen
	// once the set is flushed before every connection).
	seen := map[string]bool{}
	for range 40 {
		if err := h.NFTables.ApplyScript(ctx, "flush set ip kube-proxy "+affA+"\nflush set ip kube-proxy "+affB+"\n"); err != nil {
			t.Fatal(err)
		}
		if r := h.Dial(client.Netns, "tcp", vip); r.Outcome == Answered {
			seen[r.Server] = true
		}
	}
	if !seen["a"] || !seen["b"] {
		t.Errorf("40 connections with the affinity sets flushed each time reached %v; want both endpoints", seen)
	}
}
