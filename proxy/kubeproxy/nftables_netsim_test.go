package kubeproxy

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	nftemu "github.com/clusterlab/clusterlab/proxy/nftables/emulator"
)

// backendsNode is a one-node cluster with a client pod (ns/client) and three backends
// (ns/b1-b3) listening on TCP 8080, for the rule engines' adapter tests.
func backendsNode(t *testing.T) (*cluster.Cluster, *netsim.Pod, []netip.Addr) {
	t.Helper()
	c, err := cluster.New(cluster.Config{Seed: 3, Nodes: []cluster.NodeConfig{{Name: "node-a"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	client, err := c.StartPod("node-a", "ns", "client", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	var eps []netip.Addr
	for i := 1; i <= 3; i++ {
		p, err := c.StartPod("node-a", "ns", fmt.Sprintf("b%d", i), nil, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Serve(netfilter.ProtoTCP, 8080); err != nil {
			t.Fatal(err)
		}
		eps = append(eps, p.IP())
	}
	return c, client, eps
}

// A kube-proxy-style nftables ClusterIP in kube-proxy's 1.36 shape: a verdict map to a
// service chain that DNATs through numgen, masquerade of marked packets, a reject for a
// service without endpoints.
const nftTestRuleset = `table ip kube-proxy {
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.0.50 . tcp . 80 : goto service-X }
	}
	map no-endpoint-services {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.0.60 . tcp . 80 : goto reject-chain }
	}
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}
	chain nat-output {
		type nat hook output priority -100; policy accept;
		jump services
	}
	chain nat-postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		meta mark & 0x00004000 != 0x00000000 meta mark set meta mark ^ 0x00004000 masquerade fully-random
	}
	chain filter-forward {
		type filter hook forward priority filter; policy accept;
		ct state new ip daddr . meta l4proto . th dport vmap @no-endpoint-services
	}
	chain filter-output {
		type filter hook output priority filter; policy accept;
		ct state new ip daddr . meta l4proto . th dport vmap @no-endpoint-services
	}
	chain reject-chain {
		reject
	}
	chain services {
		ip daddr 10.96.0.50 ip saddr != 10.244.0.0/16 meta mark set meta mark | 0x00004000
		ip daddr . meta l4proto . th dport vmap @service-ips
	}
	chain service-X {
		meta l4proto tcp dnat ip to numgen random mod 3 map { 0 : %s . 8080, 1 : %s . 8080, 2 : %s . 8080 }
	}
}
`

// TestNFTAdapter runs an nftables evaluator as a netsim node's nftables: every endpoint
// is a branch, node traffic is masqueraded, a service without endpoints is rejected,
// and the trace names the rule handles and the element that matched.
func TestNFTAdapter(t *testing.T) {
	c, client, eps := backendsNode(t)
	e, err := nftemu.Load([]byte(fmt.Sprintf(nftTestRuleset, eps[0], eps[1], eps[2])), "test.nft")
	if err != nil {
		t.Fatal(err)
	}
	att := AttachNFT(e, c.Node("node-a").Node, "nft")
	defer att.Detach()

	t.Run("all branches of numgen", func(t *testing.T) {
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

	t.Run("node traffic is masqueraded", func(t *testing.T) {
		r, err := c.ProbeOne(netsim.Probe{From: "node:node-a", Proto: netfilter.ProtoTCP, Dst: netip.MustParseAddrPort("10.96.0.50:80"), Mode: netsim.ProbeConnect, Trace: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.Result != netsim.ResultConnected || r.SeenSrc.Addr() == c.Node("node-a").IP() {
			t.Errorf("outcome %v: want connected, seen from the node's bridge address\n%s", r.Outcome, r.Trace)
		}
		if !strings.Contains(r.Trace.String(), "masquerade fully-random") {
			t.Errorf("trace lacks the masquerade rule:\n%s", r.Trace)
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
		var vmap *netsim.TraceStep
		for _, s := range r.Trace.Find(netsim.StepRule) {
			if s.Table == "ip kube-proxy" && s.Chain == "filter-forward" && s.Matched != nil && *s.Matched {
				vmap = &s
			}
		}
		if vmap == nil || !strings.Contains(vmap.Detail, "element 10.96.0.60 . tcp . 80") || vmap.Line != 24 {
			t.Errorf("trace step of the no-endpoints lookup: %+v\n%s", vmap, r.Trace)
		}
	})
}

// The handlers follow the ruleset: a base chain a transaction adds runs at once, one it
// deletes stops, and a failed transaction changes neither the rules nor the handlers.
func TestNFTAdapterFollowsTransactions(t *testing.T) {
	c, _, eps := backendsNode(t)
	e := nftemu.New()
	n := c.Node("node-a").Node
	att := AttachNFT(e, n, "nft")
	defer att.Detach()
	run := NewNFTRunner(e, att, knftables.IPv4Family, "test")
	dst := netip.AddrPortFrom(eps[0], 8080)
	probe := func() string {
		t.Helper()
		r, err := c.ProbeOne(netsim.Probe{From: "pod:ns/client", Proto: netfilter.ProtoTCP, Dst: dst})
		if err != nil {
			t.Fatal(err)
		}
		return r.Result
	}
	if got := probe(); got != netsim.ResultDelivered {
		t.Fatalf("without rules: %s", got)
	}
	ctx := context.Background()
	tx := run.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Chain{Name: "fwd", Type: knftables.PtrTo(knftables.FilterType), Hook: knftables.PtrTo(knftables.ForwardHook), Priority: knftables.PtrTo(knftables.FilterPriority)})
	tx.Add(&knftables.Rule{Chain: "fwd", Rule: "ip daddr " + eps[0].String() + " drop"})
	if err := run.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if got := probe(); got != netsim.ResultDropped {
		t.Errorf("with a forward chain dropping it: %s", got)
	}
	// A transaction's rules get handles, as the kernel gives them; the trace names them
	// (a line of some transaction's text would mean nothing).
	r, err := c.ProbeOne(netsim.Probe{From: "pod:ns/client", Proto: netfilter.ProtoTCP, Dst: dst, Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Trace.String(); !strings.Contains(s, "ip test/fwd: ip daddr "+eps[0].String()+" drop # handle ") {
		t.Errorf("the drop rule's trace step names no handle:\n%s", s)
	}
	bad := run.NewTransaction()
	bad.Delete(&knftables.Chain{Name: "fwd"})
	bad.Add(&knftables.Rule{Chain: "nosuch", Rule: "accept"})
	if err := run.Run(ctx, bad); err == nil {
		t.Fatal("a transaction adding a rule to a missing chain succeeded")
	}
	if got := probe(); got != netsim.ResultDropped {
		t.Errorf("after a failed transaction that would have deleted the chain: %s", got)
	}
	del := run.NewTransaction()
	del.Delete(&knftables.Table{})
	if err := run.Run(ctx, del); err != nil {
		t.Fatal(err)
	}
	if got := probe(); got != netsim.ResultDelivered {
		t.Errorf("after deleting the table: %s", got)
	}
}

// The kernel runs nftables' base chains and iptables' tables on one hook by priority:
// an nftables chain at raw priority (-300) drops before iptables' nat table DNATs, and
// one at filter priority (0) sees the DNATed destination.
func TestNFTAdapterWithIPTables(t *testing.T) {
	c, _, eps := backendsNode(t)
	n := c.Node("node-a").Node
	ipt := loadEmulator(t, 4, fmt.Sprintf("*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p tcp -d 10.96.0.70 --dport 80 -j DNAT --to-destination %s:8080\nCOMMIT\n", eps[1]))
	defer AttachEmulator(ipt, n, "iptables")()
	e, err := nftemu.Load([]byte(fmt.Sprintf(`table inet t {
	chain early {
		type filter hook prerouting priority raw; policy accept;
		tcp dport 81 drop
	}
	chain late {
		type filter hook forward priority filter; policy accept;
		ip daddr %s tcp dport 8080 drop
	}
}
`, eps[1])), "mix.nft")
	if err != nil {
		t.Fatal(err)
	}
	defer AttachNFT(e, n, "nft").Detach()
	for _, tc := range []struct {
		dst  string
		want string
	}{
		{"10.96.0.70:80", netsim.ResultDropped}, // DNATed by iptables, then dropped by the inet chain at FORWARD
		{eps[0].String() + ":81", netsim.ResultDropped},
		{eps[0].String() + ":8080", netsim.ResultDelivered},
	} {
		r, err := c.ProbeOne(netsim.Probe{From: "pod:ns/client", Proto: netfilter.ProtoTCP, Dst: netip.MustParseAddrPort(tc.dst), Trace: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.Result != tc.want {
			t.Errorf("to %s: %s, want %s\n%s", tc.dst, r.Outcome, tc.want, r.Trace)
		}
	}
}
