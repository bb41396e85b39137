package kubeproxy

import (
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
)

// TestNetsimAdapter runs the emulator as a netsim node's netfilter tables: a
// kube-proxy-style ClusterIP with three endpoints, masquerade for off-cluster sources,
// and a REJECT for a service without endpoints.
func TestNetsimAdapter(t *testing.T) {
	c, client, eps := backendsNode(t)
	rules := fmt.Sprintf(`*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-X - [0:0]
:KUBE-SEP-1 - [0:0]
:KUBE-SEP-2 - [0:0]
:KUBE-SEP-3 - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-SERVICES -m comment --comment "ns/svc cluster IP" -m tcp -p tcp -d 10.96.0.50 --dport 80 -j KUBE-SVC-X
-A KUBE-SVC-X -m comment --comment "ns/svc cluster IP" -m tcp -p tcp -d 10.96.0.50 --dport 80 ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ
-A KUBE-SVC-X -m statistic --mode random --probability 0.3333333333 -j KUBE-SEP-1
-A KUBE-SVC-X -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-2
-A KUBE-SVC-X -j KUBE-SEP-3
-A KUBE-SEP-1 -m tcp -p tcp -j DNAT --to-destination %s:8080
-A KUBE-SEP-2 -m tcp -p tcp -j DNAT --to-destination %s:8080
-A KUBE-SEP-3 -m tcp -p tcp -j DNAT --to-destination %s:8080
-A KUBE-MARK-MASQ -j MARK --or-mark 0x00004000
-A KUBE-POSTROUTING -m mark ! --mark 0x00004000/0x00004000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x00004000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
COMMIT
*filter
:KUBE-SERVICES - [0:0]
-A FORWARD -m conntrack --ctstate NEW -j KUBE-SERVICES
-A OUTPUT -m conntrack --ctstate NEW -j KUBE-SERVICES
-A KUBE-SERVICES -m comment --comment "ns/none has no endpoints" -m tcp -p tcp -d 10.96.0.60 --dport 80 -j REJECT
COMMIT
`, eps[0], eps[1], eps[2])
	e := loadEmulator(t, emulator.IPv4, rules)
	detach := AttachEmulator(e, c.Node("node-a").Node, "iptables")
	defer detach()

	t.Run("all branches of the ladder", func(t *testing.T) {
		rs, err := c.Probe(netsim.Probe{From: "pod:ns/client", Proto: netfilter.ProtoTCP, Dst: netip.MustParseAddrPort("10.96.0.50:80"), AllBranches: true})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rs {
			if math.Abs(r.Probability-1.0/3) > 1e-8 || r.Result != netsim.ResultDelivered || r.SeenSrc.Addr() != client.IP() {
				t.Errorf("outcome %v p=%v", r.Outcome, r.Probability)
			}
			got = append(got, r.Pod)
		}
		sort.Strings(got)
		if strings.Join(got, " ") != "ns/b1 ns/b2 ns/b3" {
			t.Errorf("endpoints reached: %v", got)
		}
	})

	t.Run("connections through netstack", func(t *testing.T) {
		seen := map[string]int{}
		for i := 0; i < 30; i++ {
			r, err := c.ProbeOne(netsim.Probe{From: "pod:ns/client", Proto: netfilter.ProtoTCP, Dst: netip.MustParseAddrPort("10.96.0.50:80"), Mode: netsim.ProbeConnect})
			if err != nil {
				t.Fatal(err)
			}
			if r.Result != netsim.ResultConnected {
				t.Fatalf("connect: %v", r.Outcome)
			}
			seen[r.Pod]++
		}
		if len(seen) != 3 {
			t.Errorf("30 connections reached %v", seen)
		}
	})

	t.Run("node traffic is masqueraded", func(t *testing.T) {
		r, err := c.ProbeOne(netsim.Probe{From: "node:node-a", Proto: netfilter.ProtoTCP, Dst: netip.MustParseAddrPort("10.96.0.50:80"), Mode: netsim.ProbeConnect, Trace: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.Result != netsim.ResultConnected || r.SeenSrc.Addr() == c.Node("node-a").IP() {
			t.Errorf("outcome %v: want connected, seen from the node's bridge address\n%s", r.Outcome, r.Trace)
		}
		if !strings.Contains(r.Trace.String(), "KUBE-MARK-MASQ") || !strings.Contains(r.Trace.String(), "MASQUERADE") {
			t.Errorf("trace lacks the masquerade rules:\n%s", r.Trace)
		}
	})

	t.Run("reject for a service without endpoints", func(t *testing.T) {
		r, err := c.ProbeOne(netsim.Probe{From: "pod:ns/client", Proto: netfilter.ProtoTCP, Dst: netip.MustParseAddrPort("10.96.0.60:80"), Mode: netsim.ProbeConnect, Trace: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.Result != netsim.ResultRefused {
			t.Errorf("outcome %v, want refused\n%s", r.Outcome, r.Trace)
		}
		var rule *netsim.TraceStep
		for _, s := range r.Trace.Find(netsim.StepRule) {
			if s.Chain == "KUBE-SERVICES" && s.Table == "filter" && s.Matched != nil && *s.Matched {
				rule = &s
			}
		}
		if rule == nil || rule.Line != 29 || !strings.Contains(rule.Rule, "has no endpoints") {
			t.Errorf("trace step of the REJECT rule: %+v\n%s", rule, r.Trace)
		}
	})
}

// Each family's emulator sees only its own family's packets, as iptables and ip6tables do.
func TestNetsimAdapterFamilies(t *testing.T) {
	c, err := cluster.New(cluster.Config{Seed: 3, Nodes: []cluster.NodeConfig{{Name: "node-a"}},
		NodeCIDRs:    []netip.Prefix{netip.MustParsePrefix("172.18.0.0/16"), netip.MustParsePrefix("fc00:f853:ccd:e793::/64")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	web, err := c.StartPod("node-a", "ns", "web", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartPod("node-a", "ns", "client", nil, false); err != nil {
		t.Fatal(err)
	}
	e := emulator.New(emulator.IPv4)
	if err := e.RestoreText([]byte("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"), emulator.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	AttachEmulator(e, c.Node("node-a").Node, "v4")
	ips := web.IPs()
	if len(ips) != 2 {
		t.Fatalf("pod IPs %v, want one per family", ips)
	}
	for _, ip := range ips {
		r, err := c.ProbeOne(netsim.Probe{From: "pod:ns/client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(ip, 80)})
		if err != nil {
			t.Fatal(err)
		}
		want := netsim.ResultDelivered
		if ip.Is4() {
			want = netsim.ResultDropped
		}
		if r.Result != want {
			t.Errorf("to %s with an IPv4 FORWARD DROP policy: %s, want %s", ip, r.Outcome, want)
		}
	}
}

// addrtype --limit-iface-in on a netsim node: an address is LOCAL only for a packet that
// came in on the interface holding it (the pod bridge's address for a pod's packet), not
// for the node's other addresses (its uplink address, a VIP bound to kube-ipvs0), as the
// kernel's lookup restricted to the input device answers.
func TestNetsimAddrTypeLimitIface(t *testing.T) {
	c, err := cluster.New(cluster.Config{Seed: 5, Nodes: []cluster.NodeConfig{{Name: "node-a"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.StartPod("node-a", "ns", "client", nil, false); err != nil {
		t.Fatal(err)
	}
	n := c.Node("node-a")
	n.AddInterface("kube-ipvs0")
	vip := netip.MustParseAddr("10.96.0.10")
	if err := n.AddAddress("kube-ipvs0", netip.PrefixFrom(vip, 32)); err != nil {
		t.Fatal(err)
	}
	var gateway netip.Addr
	for _, i := range n.Interfaces() {
		if i.Kind == netsim.IfBridge {
			gateway, _ = i.Primary(n.IP())
		}
	}
	if !gateway.IsValid() {
		t.Fatalf("no bridge address among %+v", n.Interfaces())
	}
	e := loadEmulator(t, emulator.IPv4, `*filter
-A INPUT -p tcp -m addrtype --dst-type LOCAL --limit-iface-in -j REJECT
-A INPUT -p tcp -m addrtype --dst-type LOCAL -j DROP
COMMIT
`)
	defer AttachEmulator(e, n.Node, "iptables")()
	for _, tc := range []struct {
		dst  netip.Addr
		want string
	}{
		{gateway, netsim.ResultRefused}, // on cbr0, where the pod's packet comes in
		{n.IP(), netsim.ResultDropped},  // on eth0
		{vip, netsim.ResultDropped},     // on kube-ipvs0
	} {
		r, err := c.ProbeOne(netsim.Probe{From: "pod:ns/client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(tc.dst, 80), Trace: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.Result != tc.want {
			t.Errorf("pod → %s: %s, want %s\n%s", tc.dst, r.Outcome, tc.want, r.Trace)
		}
	}
}

// loadEmulator builds an emulator from iptables-restore text.
func loadEmulator(t testing.TB, f emulator.Family, text string) *emulator.Emulator {
	t.Helper()
	e := emulator.New(f)
	if err := e.RestoreText([]byte(text), emulator.RestoreOptions{File: "rules"}); err != nil {
		t.Fatal(err)
	}
	return e
}
