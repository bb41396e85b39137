package kernel

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
)

// kubeRules is a small ruleset in kube-proxy's layout and spelling (input syntax, not
// iptables-save's normalised one).
const kubeRules = `*filter
:KUBE-SERVICES - [0:0]
:KUBE-FORWARD - [0:0]
-A KUBE-SERVICES -m comment --comment "ns1/svc2:p80 has no endpoints" -m tcp -p tcp -d 10.96.0.20 --dport 80 -j REJECT
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
COMMIT
*nat
:KUBE-SERVICES - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]
:KUBE-SEP-BBBBBBBBBBBBBBBB - [0:0]
:KUBE-SEP-CCCCCCCCCCCCCCCC - [0:0]
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j KUBE-SVC-AAAAAAAAAAAAAAAA
-A KUBE-SVC-AAAAAAAAAAAAAAAA -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 80 ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ
-A KUBE-SVC-AAAAAAAAAAAAAAAA -m comment --comment "ns1/svc1:p80 -> 10.244.0.2:8080" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-BBBBBBBBBBBBBBBB
-A KUBE-SVC-AAAAAAAAAAAAAAAA -m comment --comment "ns1/svc1:p80 -> 10.244.0.3:8080" -j KUBE-SEP-CCCCCCCCCCCCCCCC
-A KUBE-SEP-BBBBBBBBBBBBBBBB -m comment --comment ns1/svc1:p80 -s 10.244.0.2 -j KUBE-MARK-MASQ
-A KUBE-SEP-BBBBBBBBBBBBBBBB -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.244.0.2:8080
-A KUBE-SEP-CCCCCCCCCCCCCCCC -m comment --comment ns1/svc1:p80 -s 10.244.0.3 -j KUBE-MARK-MASQ
-A KUBE-SEP-CCCCCCCCCCCCCCCC -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.244.0.3:8080
COMMIT
`

// stripSaveComments drops iptables-save's "# Generated/Completed/Warning" lines, which
// carry dates, and zeroes chain counters (the legacy backend prints real ones even
// without -c, and stray packets such as IGMP reports move them).
func stripSaveComments(b []byte) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, ":") {
			if i := strings.LastIndex(l, " ["); i >= 0 {
				l = l[:i] + " [0:0]"
			}
		}
		if !strings.HasPrefix(l, "#") && l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n") + "\n"
}

func TestIPTablesRoundTripKernel(t *testing.T) {
	for _, b := range []Backend{BackendNFT, BackendLegacy} {
		t.Run(string(b), func(t *testing.T) {
			RequireTools(t, "iptables-"+string(b)+"-restore", "ip6tables-"+string(b)+"-restore")
			h := newTestHarness(t, HarnessConfig{Backend: b, SecondNode: true, PodPorts: []uint16{}})
			ctx := ctxT(t)
			ipt0, ipt1 := h.Nodes[0].IPTables, h.Nodes[1].IPTables
			if ipt0.Backend() != b {
				t.Fatalf("backend %q, want %q", ipt0.Backend(), b)
			}
			wantMode := map[Backend]string{BackendNFT: "nf_tables", BackendLegacy: "legacy"}[b]
			if v := ipt0.Version(); v.Mode != wantMode || !v.AtLeast(IPTablesVersion{Major: 1, Minor: 6}) {
				t.Errorf("version %v, want >= 1.6 in mode %s", v, wantMode)
			}
			restore(t, ipt0, kubeRules)
			saved, err := ipt0.Save(ctx, "filter", "nat")
			if err != nil {
				t.Fatal(err)
			}
			text := stripSaveComments(saved)
			// The kernel's normalised spelling of what we wrote.
			for _, want := range []string{
				"*filter\n", "*nat\n", ":KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]\n",
				`-A KUBE-SERVICES -d 10.96.0.20/32 -p tcp -m comment --comment "ns1/svc2:p80 has no endpoints" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable` + "\n",
				`-A KUBE-SVC-AAAAAAAAAAAAAAAA -m comment --comment "ns1/svc1:p80 -> 10.244.0.2:8080" -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-BBBBBBBBBBBBBBBB` + "\n",
				`-A KUBE-SEP-BBBBBBBBBBBBBBBB -p tcp -m comment --comment "ns1/svc1:p80" -m tcp -j DNAT --to-destination 10.244.0.2:8080` + "\n",
				"-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n",
			} {
				if !strings.Contains(text, want) {
					t.Errorf("iptables-save output lacks %q\n%s", want, text)
				}
			}
			// Saved text restores (without --noflush) into another namespace and saves
			// back identically.
			if err := ipt1.Restore(ctx, []byte(text), iptables.RestoreOptions{}); err != nil {
				t.Fatalf("restore saved text into node1: %v", err)
			}
			again, err := ipt1.Save(ctx, "filter", "nat")
			if err != nil {
				t.Fatal(err)
			}
			if got := stripSaveComments(again); got != text {
				t.Errorf("round trip changed the ruleset:\nfirst:\n%s\nsecond:\n%s", text, got)
			}
			// --noflush: a chain line flushes only that chain.
			restore(t, ipt0, "*nat\n:KUBE-SEP-CCCCCCCCCCCCCCCC - [0:0]\nCOMMIT\n")
			saved, _ = ipt0.Save(ctx, "nat")
			if strings.Contains(string(saved), "-A KUBE-SEP-CCCCCCCCCCCCCCCC") || !strings.Contains(string(saved), "-A KUBE-SEP-BBBBBBBBBBBBBBBB") {
				t.Errorf("--noflush with one chain line: want only KUBE-SEP-CCC flushed, got\n%s", saved)
			}
			// A failing restore names the line and changes nothing.
			bad := "*nat\n:KUBE-SEP-BBBBBBBBBBBBBBBB - [0:0]\n-A KUBE-SEP-BBBBBBBBBBBBBBBB -j KUBE-NO-SUCH-CHAIN\nCOMMIT\n"
			err = ipt0.Restore(ctx, []byte(bad), iptables.RestoreOptions{NoFlush: true})
			var re *RestoreError
			if !errors.As(err, &re) || re.Line < 3 || re.Line > 4 || re.Err.Stderr == "" {
				t.Errorf("bad restore: got %v, want a *RestoreError at line 3 or 4 with the tool's stderr", err)
			}
			after, _ := ipt0.Save(ctx, "nat")
			if stripSaveComments(after) != stripSaveComments(saved) {
				t.Errorf("failed restore changed the ruleset:\nbefore:\n%s\nafter:\n%s", saved, after)
			}
			// Hook jump rules, kube-proxy style: -C then -I; the second time it exists.
			jump := []string{"-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}
			for i, wantExisted := range []bool{false, true} {
				existed, err := ipt0.EnsureRule(ctx, Prepend, "nat", "PREROUTING", jump...)
				if err != nil || existed != wantExisted {
					t.Errorf("EnsureRule #%d: existed=%v err=%v, want existed=%v", i+1, existed, err, wantExisted)
				}
			}
			saved, _ = ipt0.Save(ctx, "nat")
			if n := strings.Count(string(saved), `-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`); n != 1 {
				t.Errorf("want exactly one PREROUTING jump, found %d in\n%s", n, saved)
			}
			if existed, err := ipt0.EnsureChain(ctx, "filter", "KUBE-FORWARD"); err != nil || !existed {
				t.Errorf("EnsureChain existing: existed=%v err=%v", existed, err)
			}
			if existed, err := ipt0.EnsureChain(ctx, "filter", "KUBE-NEW"); err != nil || existed {
				t.Errorf("EnsureChain new: existed=%v err=%v", existed, err)
			}
			if existed, err := ipt0.DeleteRule(ctx, "nat", "PREROUTING", jump...); err != nil || !existed {
				t.Errorf("DeleteRule: existed=%v err=%v", existed, err)
			}
			// IPv6 through ip6tables in the same namespace.
			ip6, err := NewIPTables(ctx, IPTablesOptions{Backend: b, Family: IPv6, Netns: h.Nodes[0].Netns.Name})
			if err != nil {
				t.Fatal(err)
			}
			restore(t, ip6, "*nat\n:KUBE-SEP-V6 - [0:0]\n-A KUBE-SEP-V6 -p tcp -m tcp -j DNAT --to-destination [fd00::2]:8080\nCOMMIT\n")
			saved6, err := ip6.Save(ctx, "nat")
			if err != nil || !strings.Contains(string(saved6), "-A KUBE-SEP-V6 -p tcp -m tcp -j DNAT --to-destination [fd00::2]:8080\n") {
				t.Errorf("ip6tables round trip: %v\n%s", err, saved6)
			}
			// Auto detection in the namespace finds the backend holding the rules.
			if got, err := DetectBackend(ctx, h.Nodes[0].Netns.Name); err != nil || got != b {
				t.Errorf("DetectBackend = %q, %v; want %q", got, err, b)
			}
		})
	}
}

// The DNAT/MASQUERADE/REJECT/DROP behaviour the differential tests rely on.
func TestKernelNATAndFilter(t *testing.T) {
	for _, topo := range []Topology{TopologyBridge, TopologyRouted} {
		t.Run(string(topo), func(t *testing.T) {
			h := newTestHarness(t, HarnessConfig{Topology: topo, SecondNode: true,
				Pods:          []PodConfig{{Name: "a"}, {Name: "b"}, {Name: "c", Node: 1}},
				ExternalAddrs: []netip.Addr{netip.MustParseAddr("198.51.100.7")}})
			a, b, c := h.Pod("a"), h.Pod("b"), h.Pod("c")
			node := h.Nodes[0]
			rules := strings.NewReplacer("$A", a.IP.String(), "$B", b.IP.String(), "$C", c.IP.String(), "$GW", node.Gateway.String()).Replace(`*nat
:VIPS - [0:0]
:MASQ - [0:0]
-A PREROUTING -j VIPS
-A OUTPUT -j VIPS
-A POSTROUTING -j MASQ
-A VIPS -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination $A:8080
-A VIPS -d 10.96.0.10/32 -p udp -m udp --dport 80 -j DNAT --to-destination $A:8080
-A VIPS -d 10.96.0.11/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination $B:8080
-A VIPS -d 10.96.0.11/32 -p udp -m udp --dport 80 -j DNAT --to-destination $B:8080
-A VIPS -d 10.96.0.12/32 -j DNAT --to-destination $C
-A VIPS -d 10.96.0.13/32 -j DNAT --to-destination $A
-A VIPS -d 127.0.0.1/32 -p tcp -m tcp --dport 30080 -j DNAT --to-destination $B:8080
-A VIPS -d 10.96.0.14/32 -m statistic --mode random --probability 0.5 -j DNAT --to-destination $A
-A VIPS -d 10.96.0.14/32 -j DNAT --to-destination $B
-A MASQ -d $B/32 -j MASQUERADE
-A MASQ -d $C/32 -j MASQUERADE
-A MASQ -s $A/32 -d $A/32 -j MASQUERADE
-A MASQ -s 127.0.0.0/8 -j MASQUERADE
COMMIT
*filter
:FILT - [0:0]
-A FORWARD -j FILT
-A INPUT -j FILT
-A FILT -d 10.96.0.20/32 -j REJECT
-A FILT -d 10.96.0.21/32 -j DROP
COMMIT
`)
			restore(t, h.IPTables, rules)
			vip := func(last byte, port uint16) netip.AddrPort {
				return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 96, 0, last}), port)
			}
			ext := h.External
			for _, proto := range []string{"tcp", "udp"} {
				// DNAT, no masquerade: the pod sees the external client.
				wantAnswer(t, proto+" ext -> VIP .10 (DNAT to a)", h.Dial(ext, proto, vip(10, 80)), "a", h.ExternalIP)
				extra := netip.MustParseAddr("198.51.100.7")
				wantAnswer(t, proto+" ext from an extra address -> VIP .10", h.DialFrom(ext, proto, netip.AddrPortFrom(extra, 0), vip(10, 80)), "a", extra)
				// MASQUERADE: the pod sees the node's address on the pod network.
				wantAnswer(t, proto+" ext -> VIP .11 (DNAT to b, masquerade)", h.Dial(ext, proto, vip(11, 80)), "b", node.Gateway)
				// Other node's pod: works only because of the masquerade (else c would
				// answer the client directly via node1, skipping the un-DNAT).
				wantAnswer(t, proto+" ext -> VIP .12 (DNAT to c on node1, masquerade)", h.Dial(ext, proto, vip(12, 8080)), "c", node.IP)
				// Pod to a VIP whose endpoint is another pod on the same node: needs the
				// reply to go back through the node (br_netfilter or routed topology).
				wantAnswer(t, proto+" pod a -> VIP .11 (same-node endpoint)", h.Dial(a.Netns, proto, vip(11, 80)), "b", node.Gateway)
				wantAnswer(t, proto+" pod a -> VIP .10 (no masquerade, same-node endpoint b? no: a itself is .10)", h.Dial(b.Netns, proto, vip(10, 80)), "a", b.IP)
				// Hairpin: a pod reaching itself through a VIP (bridge hairpin mode).
				wantAnswer(t, proto+" pod a -> VIP .13 (hairpin to itself)", h.Dial(a.Netns, proto, vip(13, 8080)), "a", node.Gateway)
				// Node's own traffic to a VIP goes through OUTPUT.
				wantAnswer(t, proto+" node -> VIP .10", h.Dial(node.Netns, proto, vip(10, 80)), "a", node.IP)
				// REJECT gives connection refused.
				wantOutcome(t, proto+" ext -> REJECT", h.Dial(ext, proto, vip(20, 80)), Refused)
				wantOutcome(t, proto+" pod -> REJECT", h.Dial(a.Netns, proto, vip(20, 80)), Refused)
			}
			// Many connections: every REJECT answered (no ICMP rate limit), and a random
			// 50/50 DNAT reaches both pods.
			for _, r := range h.DialN(ext, "udp", vip(20, 80), 60, 4) {
				wantOutcome(t, "udp ext -> REJECT (x60)", r, Refused)
			}
			seen := map[string]int{}
			for _, r := range h.DialN(a.Netns, "tcp", vip(14, 8080), 60, 4) {
				seen[r.Server]++
				if r.Outcome != Answered || r.Source.Addr() != a.IP && r.Source.Addr() != node.Gateway {
					t.Errorf("tcp pod a -> VIP .14: %v", r)
				}
			}
			if seen["a"] == 0 || seen["b"] == 0 || seen["a"]+seen["b"] != 60 {
				t.Errorf("60 connections to a 50/50 VIP: %v; want both a and b", seen)
			}
			// Counters show which rules the traffic took.
			counted, err := h.IPTables.SaveCounters(ctxT(t), "nat")
			if err != nil {
				t.Fatal(err)
			}
			// nat sees only the first packet of each connection: the two .14 rules
			// together counted exactly the 60 connections, and both matched some.
			var hits []int
			for _, l := range strings.Split(string(counted), "\n") {
				if strings.Contains(l, "-A VIPS -d 10.96.0.14/32") {
					var pkts, bytes int
					if _, err := fmt.Sscanf(l, "[%d:%d]", &pkts, &bytes); err != nil {
						t.Fatalf("counter line %q: %v", l, err)
					}
					hits = append(hits, pkts)
				}
			}
			if len(hits) != 2 || hits[0] == 0 || hits[1] == 0 || hits[0]+hits[1] != 60 {
				t.Errorf("packet counters of the two VIP .14 rules: %v; want two non-zero counts adding up to 60\n%s", hits, counted)
			}
			// Localhost NodePort-style DNAT from the node needs route_localnet.
			wantAnswer(t, "node -> 127.0.0.1:30080", h.Dial(node.Netns, "tcp", netip.MustParseAddrPort("127.0.0.1:30080")), "b", node.Gateway)
			// DROP gives a timeout (bounded by the harness Timeout); both protocols at once.
			done := make(chan Result, 2)
			for _, proto := range []string{"tcp", "udp"} {
				go func() { done <- h.Dial(ext, proto, vip(21, 80)) }()
			}
			for range 2 {
				wantOutcome(t, "ext -> DROP", <-done, TimedOut)
			}
		})
	}
}

func TestConntrackKernel(t *testing.T) {
	h := newTestHarness(t, HarnessConfig{})
	a, b := h.Pods[0], h.Pods[1]
	restore(t, h.IPTables, "*nat\n-A PREROUTING -d 10.96.0.10/32 -p udp -m udp --dport 53 -j DNAT --to-destination "+a.IP.String()+":8080\n"+
		"-A PREROUTING -d 10.96.0.10/32 -p tcp -m tcp --dport 53 -j DNAT --to-destination "+b.IP.String()+":8080\nCOMMIT\n")
	ctx := ctxT(t)
	vip := netip.MustParseAddr("10.96.0.10")
	r := h.Dial(h.External, "udp", netip.AddrPortFrom(vip, 53))
	wantAnswer(t, "udp via DNAT", r, a.Name, h.ExternalIP)
	wantAnswer(t, "tcp via DNAT", h.Dial(h.External, "tcp", netip.AddrPortFrom(vip, 53)), b.Name, h.ExternalIP)

	udpFilter := proxy.ConntrackFilter{Protocol: 17, OrigDst: vip, OrigDstPort: 53}
	entries, err := h.Conntrack.List(ctx, udpFilter)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("want 1 UDP entry for %v:53, got %v", vip, entries)
	}
	e := entries[0]
	if e.Family != IPv4 || e.Protocol != 17 || e.ProtoName != "udp" || e.Orig.Src != h.ExternalIP || e.Orig.SrcPort != r.Local.Port() ||
		e.Orig.Dst != vip || e.Orig.DstPort != 53 || e.Reply.Src != a.IP || e.Reply.SrcPort != 8080 || e.Reply.Dst != h.ExternalIP ||
		!e.DNATed() || e.SNATed() || e.Timeout <= 0 {
		t.Errorf("UDP entry %+v: want ext:%d -> %v:53 DNATed to %v:8080", e, r.Local.Port(), vip, a.IP)
	}
	all, err := h.Conntrack.List(ctx, proxy.ConntrackFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var sawTCP bool
	for _, e := range all {
		if e.Protocol == 6 && e.Orig.Dst == vip && e.Reply.Src == b.IP {
			sawTCP = true
		}
	}
	if !sawTCP {
		t.Errorf("no TCP entry towards %v DNATed to %v in %v", vip, b.IP, all)
	}
	// Delete what kube-proxy deletes for a stale UDP endpoint: by the endpoint.
	n, err := h.Conntrack.Delete(proxy.ConntrackFilter{Protocol: 17, ReplySrc: a.IP, ReplySrcPort: 8080})
	if err != nil || n != 1 {
		t.Errorf("Delete by reply source: n=%d err=%v, want 1", n, err)
	}
	if left, err := h.Conntrack.List(ctx, udpFilter); err != nil || len(left) != 0 {
		t.Errorf("after delete: %v, %v; want none", left, err)
	}
	// Nothing left to delete is success with 0.
	if n, err := h.Conntrack.Delete(udpFilter); err != nil || n != 0 {
		t.Errorf("second Delete: n=%d err=%v, want 0, nil", n, err)
	}
	// The TCP entry is untouched.
	if left, err := h.Conntrack.List(ctx, proxy.ConntrackFilter{Protocol: 6, OrigDst: vip}); err != nil || len(left) != 1 {
		t.Errorf("TCP entries after the UDP delete: %v, %v; want 1", left, err)
	}
	// An empty filter matches everything.
	if n, err := h.Conntrack.Delete(proxy.ConntrackFilter{}); err != nil || n < 1 {
		t.Errorf("Delete(all): n=%d err=%v, want at least the TCP entry", n, err)
	}
	if left, err := h.Conntrack.List(ctx, proxy.ConntrackFilter{OrigDst: vip}); err != nil || len(left) != 0 {
		t.Errorf("after Delete(all): %v, %v; want none", left, err)
	}
	// Flush empties the table too.
	wantAnswer(t, "udp via DNAT again", h.Dial(h.External, "udp", netip.AddrPortFrom(vip, 53)), a.Name, h.ExternalIP)
	if err := h.Conntrack.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if left, err := h.Conntrack.List(ctx, proxy.ConntrackFilter{OrigDst: vip}); err != nil || len(left) != 0 {
		t.Errorf("after Flush: %v, %v; want none", left, err)
	}
}

func TestHarnessIPv6(t *testing.T) {
	for _, topo := range []Topology{TopologyBridge, TopologyRouted} {
		t.Run(string(topo), func(t *testing.T) {
			RequireTools(t, "ip6tables-nft-restore")
			h := newTestHarness(t, HarnessConfig{Topology: topo, IPv6: true, SecondNode: true,
				Pods: []PodConfig{{Name: "a"}, {Name: "b"}, {Name: "c", Node: 1}}})
			a, b, c := h.Pod("a"), h.Pod("b"), h.Pod("c")
			node := h.Nodes[0]
			if a.IP6.String() != "fd00:10:244::2" || c.IP6.String() != "fd00:10:244:1::2" || node.Gateway6.String() != "fd00:10:244::1" ||
				h.ExternalIP6.String() != "fd00:77::64" || node.IP6.String() != "fd00:77::1" {
				t.Fatalf("addresses: a %v c %v gw %v ext %v node %v", a.IP6, c.IP6, node.Gateway6, h.ExternalIP6, node.IP6)
			}
			for _, proto := range []string{"tcp", "udp"} {
				wantAnswer(t, proto+" v6 pod a -> pod b", h.Dial(a.Netns, proto, netip.AddrPortFrom(b.IP6, 8080)), "b", a.IP6)
				wantAnswer(t, proto+" v6 pod a -> pod c (other node)", h.Dial(a.Netns, proto, netip.AddrPortFrom(c.IP6, 8080)), "c", a.IP6)
				wantAnswer(t, proto+" v4 pod a -> pod b (dual-stack server)", h.Dial(a.Netns, proto, netip.AddrPortFrom(b.IP, 8080)), "b", a.IP)
			}
			rules := strings.NewReplacer("$A", a.IP6.String(), "$B", b.IP6.String()).Replace(`*nat
:VIPS - [0:0]
-A PREROUTING -j VIPS
-A VIPS -d fd00:10:96::10/128 -p tcp -m tcp --dport 80 -j DNAT --to-destination [$A]:8080
-A VIPS -d fd00:10:96::10/128 -p udp -m udp --dport 80 -j DNAT --to-destination [$A]:8080
-A VIPS -d fd00:10:96::11/128 -j DNAT --to-destination $B
-A POSTROUTING -d $B/128 -j MASQUERADE
COMMIT
*filter
-A FORWARD -d fd00:10:96::20/128 -j REJECT
COMMIT
`)
			restore(t, h.IPTables6, rules)
			vip10, vip11 := netip.MustParseAddr("fd00:10:96::10"), netip.MustParseAddr("fd00:10:96::11")
			for _, proto := range []string{"tcp", "udp"} {
				wantAnswer(t, proto+" ext -> v6 VIP (DNAT to a)", h.Dial(h.External, proto, netip.AddrPortFrom(vip10, 80)), "a", h.ExternalIP6)
				wantAnswer(t, proto+" pod a -> v6 VIP (DNAT to b, masquerade)", h.Dial(a.Netns, proto, netip.AddrPortFrom(vip11, 8080)), "b", node.Gateway6)
				wantOutcome(t, proto+" ext -> v6 REJECT", h.Dial(h.External, proto, netip.MustParseAddrPort("[fd00:10:96::20]:80")), Refused)
			}
			entries, err := h.Conntrack6.List(ctxT(t), proxy.ConntrackFilter{Protocol: 17, OrigDst: vip10})
			if err != nil || len(entries) != 1 || entries[0].Family != IPv6 || entries[0].Reply.Src != a.IP6 {
				t.Errorf("IPv6 conntrack entries for %v: %v, %v; want one, DNATed to %v", vip10, entries, err, a.IP6)
			}
			if n, err := h.Conntrack6.Delete(proxy.ConntrackFilter{Protocol: 17, OrigDst: vip10}); err != nil || n != 1 {
				t.Errorf("IPv6 conntrack delete: %d, %v", n, err)
			}
		})
	}
}

// kube-proxy's nfacct rules load once the objects exist, and count.
func TestNFAcctKernel(t *testing.T) {
	h := newTestHarness(t, HarnessConfig{PodPorts: []uint16{}, Pods: []PodConfig{{Name: "a"}}})
	node := h.Nodes[0]
	rule := "*filter\n:KUBE-PROXY-TEST - [0:0]\n-A INPUT -j KUBE-PROXY-TEST\n-A KUBE-PROXY-TEST -p udp -m udp --dport 9 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j ACCEPT\nCOMMIT\n"
	err := h.IPTables.Restore(ctxT(t), []byte(rule), iptables.RestoreOptions{NoFlush: true})
	var re *RestoreError
	if !errors.As(err, &re) || re.Line != 4 {
		t.Fatalf("restore before the nfacct object exists: %v; want a RestoreError at line 4", err)
	}
	for range 2 { // idempotent
		if err := EnsureNFAcct(node.Netns.Name, "localhost_nps_accepted_pkts"); err != nil {
			t.Fatal(err)
		}
	}
	restore(t, h.IPTables, rule)
	for range 3 {
		h.Dial(h.External, "udp", netip.AddrPortFrom(node.IP, 9))
	}
	accts, err := ListNFAcct(node.Netns.Name)
	if err != nil || len(accts) != 1 || accts[0].Name != "localhost_nps_accepted_pkts" || accts[0].Packets != 3 || accts[0].Bytes == 0 {
		t.Errorf("ListNFAcct = %+v, %v; want one object with 3 packets", accts, err)
	}
	if err := EnsureNFAcct(node.Netns.Name, "localhost_nps_accepted_pkts"); err != nil {
		t.Fatal(err)
	}
	if again, _ := ListNFAcct(node.Netns.Name); len(again) != 1 || again[0].Packets != 3 {
		t.Errorf("EnsureNFAcct on an existing object changed it: %+v", again)
	}
	if err := EnsureNFAcct(node.Netns.Name, strings.Repeat("x", 40)); err == nil {
		t.Error("overlong name: want an error")
	}
}
