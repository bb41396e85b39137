package emulator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy"
	kp "github.com/clusterlab/clusterlab/proxy/iptables"
)

// diffService is a Service for the differential test: ports 80/TCP and 80/UDP to
// targetPort 8080 on the named pods.
func diffService(fam Family, name, clusterIP string, typ corev1.ServiceType, nodePort int32, affinity bool, pods []*kernel.Pod, nodeName string) (*corev1.Service, *discoveryv1.EndpointSlice) {
	ipFamily, addrType := corev1.IPv4Protocol, discoveryv1.AddressTypeIPv4
	if fam == IPv6 {
		ipFamily, addrType = corev1.IPv6Protocol, discoveryv1.AddressTypeIPv6
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "diff", Name: name},
		Spec: corev1.ServiceSpec{Type: typ, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP},
			IPFamilies: []corev1.IPFamily{ipFamily}, SessionAffinity: corev1.ServiceAffinityNone,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster},
	}
	if typ != corev1.ServiceTypeNodePort {
		svc.Spec.ExternalTrafficPolicy = ""
	}
	if affinity {
		timeout := int32(10800)
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout}}
	}
	for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
		p := corev1.ServicePort{Name: strings.ToLower(string(proto)), Protocol: proto, Port: 80, TargetPort: intstr.FromInt32(8080)}
		if nodePort != 0 {
			p.NodePort = nodePort
		}
		svc.Spec.Ports = append(svc.Spec.Ports, p)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "diff", Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: addrType,
	}
	for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
		n, port, pr := strings.ToLower(string(proto)), int32(8080), proto
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: &n, Port: &port, Protocol: &pr})
	}
	for _, pod := range pods {
		ready := true
		node := nodeName
		ip := pod.IP
		if fam == IPv6 {
			ip = pod.IP6
		}
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: &node})
	}
	return svc, slice
}

// TestKernelDifferential applies the same generated kube-proxy rules to a real kernel
// (a harness node namespace) and to the emulator, sends real TCP and UDP through the
// kernel, and holds the emulator to it: every kernel outcome (which pod answered, the
// source it saw, refused, timed out where the rules drop) is one of the emulator's
// outcomes for that packet, the spread
// over 300 connections fits the emulator's probabilities (chi-square), and the
// kernel's iptables-save output loads into the emulator as the same ruleset.
//
// It runs for both iptables backends (nf_tables, then legacy x_tables) and both families.
func TestKernelDifferential(t *testing.T) {
	kernel.RequireHarness(t)
	for _, b := range []kernel.Backend{kernel.BackendNFT, kernel.BackendLegacy} {
		t.Run(string(b), func(t *testing.T) {
			kernel.RequireTools(t, "iptables-"+string(b)+"-restore", "iptables-"+string(b)+"-save",
				"ip6tables-"+string(b)+"-restore", "ip6tables-"+string(b)+"-save")
			for _, fam := range []Family{IPv4, IPv6} {
				t.Run(fam.String(), func(t *testing.T) { kernelDifferential(t, b, fam) })
			}
		})
	}
}

func kernelDifferential(t *testing.T, backend kernel.Backend, fam Family) {
	h, err := kernel.NewHarness(kernel.HarnessConfig{Prefix: "clemu", IPv6: fam == IPv6, Backend: backend,
		Pods: []kernel.PodConfig{{Name: "client"}, {Name: "ep1"}, {Name: "ep2"}, {Name: "ep3"}}})
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("harness close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := h.Nodes[0]
	client, ep1, ep2, ep3 := h.Pod("client"), h.Pod("ep1"), h.Pod("ep2"), h.Pod("ep3")
	podByName := map[string]*kernel.Pod{"client": client, "ep1": ep1, "ep2": ep2, "ep3": ep3}
	local, err := h.LocalAddrs(node.Netns)
	if err != nil {
		t.Fatal(err)
	}
	// Per family: the addresses, the node's ip(6)tables, the service network.
	ipOf := func(p *kernel.Pod) netip.Addr { return p.IP }
	nodeIP, ipt, extIP := node.IP, node.IPTables, h.ExternalIP
	vipNet, clusterCIDR, podCIDR := "10.96.0.", "10.244.0.0/16", node.PodCIDR
	if fam == IPv6 {
		ipOf = func(p *kernel.Pod) netip.Addr { return p.IP6 }
		nodeIP, ipt, extIP = node.IP6, node.IPTables6, h.ExternalIP6
		vipNet, clusterCIDR, podCIDR = "fd00:10:96::", "fd00:10:244::/56", node.PodCIDR6
	}
	vipAddr := func(host int) string { return fmt.Sprintf("%s%d", vipNet, host) }
	vip := func(host int) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(vipAddr(host)), 80) }
	isLocal := func(a netip.Addr) bool {
		for _, l := range local {
			if l == a {
				return true
			}
		}
		return false
	}

	const nodeName = "node0"
	var services []*corev1.Service
	var slices []*discoveryv1.EndpointSlice
	add := func(s *corev1.Service, e *discoveryv1.EndpointSlice) {
		services, slices = append(services, s), append(slices, e)
	}
	add(diffService(fam, "three", vipAddr(10), corev1.ServiceTypeClusterIP, 0, false, []*kernel.Pod{ep1, ep2, ep3}, nodeName))
	add(diffService(fam, "empty", vipAddr(20), corev1.ServiceTypeClusterIP, 0, false, nil, nodeName))
	add(diffService(fam, "np", vipAddr(30), corev1.ServiceTypeNodePort, 30080, false, []*kernel.Pod{ep2}, nodeName))
	add(diffService(fam, "sticky", vipAddr(40), corev1.ServiceTypeClusterIP, 0, true, []*kernel.Pod{ep1, ep3}, nodeName))
	// externalTrafficPolicy Local with its only endpoint on another node: the NodePort's
	// KUBE-EXT chain has no final jump, and filter KUBE-EXTERNAL-SERVICES drops the
	// packet ("has no local endpoints" -j DROP).
	etpLocal, etpLocalSlice := diffService(fam, "local", vipAddr(50), corev1.ServiceTypeNodePort, 30090, false, []*kernel.Pod{ep3}, "node1")
	etpLocal.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	add(etpLocal, etpLocalSlice)

	cfg := kp.Config{Node: proxy.NodeConfig{Name: nodeName, IPs: []netip.Addr{nodeIP}, Addresses: local,
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix(clusterCIDR)}, PodCIDRs: []netip.Prefix{podCIDR}}}
	if fam == IPv6 {
		cfg.Family = corev1.IPv6Protocol
	}
	nfacct := true
	for _, name := range []string{"localhost_nps_accepted_pkts", "ct_state_invalid_dropped_pkts"} {
		if err := kernel.EnsureNFAcct(node.Netns.Name, name); err != nil {
			t.Logf("nfacct objects unavailable (%v): generating rules without -m nfacct", err)
			nfacct = false
		}
	}
	cfg.NoNFAcct = !nfacct

	emu := New(fam)
	for _, ipt := range []kp.Interface{ipt, emu} {
		p, err := kp.NewProxier(ipt, nil, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Sync(ctx, services, slices); err != nil {
			t.Fatalf("sync through %T: %v", ipt, err)
		}
	}

	t.Run("kernel save is the emulator's ruleset", func(t *testing.T) {
		for _, table := range []string{"filter", "nat"} {
			ks, err := ipt.Save(ctx, table)
			if err != nil {
				t.Fatal(err)
			}
			es, err := emu.Save(ctx, table)
			if err != nil {
				t.Fatal(err)
			}
			// The legacy backend prints chain counters even without -c, and stray
			// packets (IGMP, neighbour discovery) move them: compare without.
			if got := zeroChainCounters(stripComments(string(ks))); got != string(es) {
				t.Errorf("%s: kernel and emulator saves differ:\n%s", table, lineDiff(got, string(es)))
			}
			rs, err := ParseDump(ks, fam, "kernel")
			if err != nil {
				t.Fatalf("kernel save does not load: %v", err)
			}
			if got := rs.Save(false); string(got) != string(es) {
				t.Errorf("%s: kernel save loaded and saved differs from the emulator's:\n%s", table, lineDiff(string(es), string(got)))
			}
		}
	})

	// emuOutcomes walks the emulator for a packet and returns its outcomes.
	emuOutcomes := func(t *testing.T, proto string, from kernel.Netns, src netip.Addr, dst netip.AddrPort, fromNode bool) []*Outcome {
		t.Helper()
		p := Packet{Src: src, Dst: dst.Addr(), SrcPort: 40000, DstPort: dst.Port(), TTL: 64, Len: 60}
		if proto == "tcp" {
			p.Proto, p.TCPFlags = netfilter.ProtoTCP, netfilter.TCPSyn
		} else {
			p.Proto = netfilter.ProtoUDP
		}
		f := FromExternal
		if fromNode {
			f = FromNode
		}
		r, err := emu.Walk(WalkInput{Packet: p, From: f, Local: local, AllBranches: true})
		if err != nil {
			t.Fatal(err)
		}
		return r.Outcomes
	}
	// check says whether a kernel result is one of the emulator's outcomes, and which.
	check := func(res kernel.Result, client netip.Addr, outs []*Outcome) (int, string) {
		for i, o := range outs {
			switch res.Outcome {
			case kernel.Answered:
				if o.DNATDestination == nil || (o.Verdict != "ACCEPT" && o.Verdict != "LOCAL") {
					continue
				}
				dst := netip.MustParseAddrPort(*o.DNATDestination)
				pod := podByName[res.Server]
				if pod == nil || ipOf(pod) != dst.Addr() {
					continue
				}
				if o.Masqueraded != isLocal(res.Source.Addr()) || (!o.Masqueraded && res.Source.Addr() != client) {
					continue
				}
				return i, ""
			case kernel.Refused:
				if o.Verdict == "REJECT" {
					return i, ""
				}
			case kernel.TimedOut:
				if o.Verdict == "DROP" {
					return i, ""
				}
			case kernel.Failed:
				// A locally generated packet that netfilter drops or rejects in OUTPUT
				// fails the send with EPERM.
				if errors.Is(res.Err, syscall.EPERM) && (o.Verdict == "DROP" || o.Verdict == "REJECT") &&
					o.Decision != nil && o.Decision.Hook == "OUTPUT" {
					return i, ""
				}
			}
		}
		var want []string
		for _, o := range outs {
			want = append(want, o.summary())
		}
		return -1, fmt.Sprintf("kernel %v is none of the emulator's outcomes %q", res, want)
	}

	type flow struct {
		name     string
		from     *kernel.Netns
		src      netip.Addr
		dst      netip.AddrPort
		fromNode bool
		n        int
		// drop: the emulator's only outcome is DROP, so every kernel connection must
		// time out (check matches a timeout only with a DROP).
		drop bool
	}
	flows := []flow{
		{"pod -> 3-endpoint ClusterIP", client.Netns, ipOf(client), vip(10), false, 150, false},
		{"pod -> ClusterIP without endpoints", client.Netns, ipOf(client), vip(20), false, 5, false},
		{"external -> NodePort", h.External, extIP, netip.AddrPortFrom(nodeIP, 30080), false, 5, false},
		{"node -> ClusterIP", node.Netns, nodeIP, vip(30), true, 5, false},
		{"node -> ClusterIP without endpoints", node.Netns, nodeIP, vip(20), true, 3, false},
		{"pod -> ClientIP affinity", client.Netns, ipOf(client), vip(40), false, 10, false},
		{"external -> eTP=Local NodePort without a local endpoint", h.External, extIP, netip.AddrPortFrom(nodeIP, 30090), false, 3, true},
	}
	for _, fl := range flows {
		for _, proto := range []string{"tcp", "udp"} {
			t.Run(proto+" "+fl.name, func(t *testing.T) {
				outs := emuOutcomes(t, proto, *fl.from, fl.src, fl.dst, fl.fromNode)
				counts := make([]int, len(outs))
				servers := map[string]int{}
				parallel := 8
				if fl.name == "pod -> ClientIP affinity" {
					parallel = 1 // concurrent first connections race the recent --set
				}
				canDrop := false
				for _, o := range outs {
					canDrop = canDrop || o.Verdict == "DROP"
				}
				if fl.drop && (len(outs) != 1 || outs[0].Verdict != "DROP") {
					var got []string
					for _, o := range outs {
						got = append(got, o.summary())
					}
					t.Fatalf("emulator outcomes %q, want one DROP", got)
				}
				if d := outs[0].Decision; fl.drop && (d == nil || d.Chain != "KUBE-EXTERNAL-SERVICES" || !strings.Contains(d.Rule, "has no local endpoints")) {
					t.Fatalf("emulator's DROP decided by %+v, want KUBE-EXTERNAL-SERVICES' \"has no local endpoints\" rule", d)
				}
				for _, res := range h.DialN(fl.from, proto, fl.dst, fl.n, parallel) {
					// On a loaded machine an ICMP error can arrive after the client gave
					// up; where the emulator says nothing drops, retry such a timeout.
					for try := 0; try < 2 && res.Outcome == kernel.TimedOut && !canDrop; try++ {
						t.Logf("retrying a timeout: %v", res)
						res = h.Dial(fl.from, proto, fl.dst)
					}
					i, msg := check(res, fl.src, outs)
					if i < 0 {
						t.Error(msg)
						continue
					}
					counts[i]++
					servers[res.Server]++
				}
				if fl.name == "pod -> ClientIP affinity" && len(servers) != 1 {
					t.Errorf("ClientIP affinity: connections spread over %v", servers)
				}
				if len(outs) < 2 || fl.name == "pod -> ClientIP affinity" {
					return
				}
				// Chi-square of the kernel's spread against the emulator's probabilities.
				chi, n := 0.0, 0
				for _, c := range counts {
					n += c
				}
				for i, o := range outs {
					exp := o.Probability * float64(n)
					chi += (float64(counts[i]) - exp) * (float64(counts[i]) - exp) / exp
				}
				// df = k-1; critical values at p = 1e-4 so that a correct emulator fails
				// one run in ten thousand.
				crit := map[int]float64{1: 15.14, 2: 18.42, 3: 21.11, 4: 23.51}[len(outs)-1]
				t.Logf("%d connections: counts %v, emulator probabilities %v, chi-square %.2f (critical %.2f)", n, counts, probs(outs), chi, crit)
				if crit == 0 || chi > crit {
					t.Errorf("kernel spread %v does not fit the emulator's probabilities %v: chi-square %.2f > %.2f", counts, probs(outs), chi, crit)
				}
			})
		}
	}

	t.Run("chi-square over 300 connections", func(t *testing.T) {
		// Both protocols of the 3-endpoint service together: each endpoint 1/3.
		outs := emuOutcomes(t, "tcp", *client.Netns, ipOf(client), vip(10), false)
		count := map[string]int{}
		for _, proto := range []string{"tcp", "udp"} {
			for _, res := range h.DialN(client.Netns, proto, vip(10), 150, 8) {
				if res.Outcome == kernel.Answered {
					count[netip.AddrPortFrom(ipOf(podByName[res.Server]), 8080).String()]++
				}
			}
		}
		chi, n := 0.0, 300
		for _, o := range outs {
			exp := o.Probability * float64(n)
			c := float64(count[*o.DNATDestination])
			chi += (c - exp) * (c - exp) / exp
		}
		t.Logf("300 connections: %v; chi-square %.2f", count, chi)
		if len(outs) != 3 || chi > 18.42 {
			t.Errorf("spread %v against %v: chi-square %.2f > 18.42", count, probs(outs), chi)
		}
	})

	t.Run("counters after real traffic load back", func(t *testing.T) {
		ks, err := ipt.SaveCounters(ctx, "nat")
		if err != nil {
			t.Fatal(err)
		}
		rs, err := ParseDump(ks, fam, "kernel -c")
		if err != nil {
			t.Fatal(err)
		}
		if got := rs.Save(true); !bytes.Equal(got, []byte(stripComments(string(ks)))) {
			t.Errorf("counted save does not round-trip:\n%s", lineDiff(stripComments(string(ks)), string(got)))
		}
	})
}

// zeroChainCounters rewrites the counters of iptables-save's chain lines to [0:0].
func zeroChainCounters(save string) string {
	lines := strings.SplitAfter(save, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, ":") {
			if j := strings.LastIndex(l, " ["); j >= 0 {
				lines[i] = l[:j] + " [0:0]" + l[len(strings.TrimRight(l, "\n")):]
			}
		}
	}
	return strings.Join(lines, "")
}

func probs(outs []*Outcome) []float64 {
	var p []float64
	for _, o := range outs {
		p = append(p, math.Round(o.Probability*1e6)/1e6)
	}
	return p
}

// BenchmarkConnectionSetup: the same generated ruleset (N ClusterIP services of three
// endpoints each) in the kernel and in the emulator. kernel: a TCP connection from a pod
// namespace to the last service's VIP, answered by an endpoint's echo server (connect,
// request, answer); emulator: that connection's first packet through PREROUTING,
// FORWARD and POSTROUTING (what the netsim datapath asks of it per connection), and the
// same as a traced stand-alone Walk. Needs root.
func BenchmarkConnectionSetup(b *testing.B) {
	if err := kernel.HarnessSupported(); err != nil {
		b.Skip(err)
	}
	h, err := kernel.NewHarness(kernel.HarnessConfig{Prefix: "clemub", Topology: kernel.TopologyRouted,
		Pods: []kernel.PodConfig{{Name: "client"}, {Name: "ep1"}, {Name: "ep2"}, {Name: "ep3"}}})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	node, client := h.Nodes[0], h.Pod("client")
	local, err := h.LocalAddrs(node.Netns)
	if err != nil {
		b.Fatal(err)
	}
	eps := []*kernel.Pod{h.Pod("ep1"), h.Pod("ep2"), h.Pod("ep3")}
	for _, n := range []int{10, 10000} {
		var services []*corev1.Service
		var slices []*discoveryv1.EndpointSlice
		for i := 0; i < n; i++ {
			s, e := diffService(IPv4, fmt.Sprintf("s%d", i), fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), corev1.ServiceTypeClusterIP, 0, false, eps, "node0")
			services, slices = append(services, s), append(slices, e)
		}
		vip := netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf("10.96.%d.%d", (n-1)/250, (n-1)%250+1)), 80)
		cfg := kp.Config{NoNFAcct: true, Node: proxy.NodeConfig{Name: "node0", IPs: []netip.Addr{node.IP}, Addresses: local,
			ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}}
		emu := New(IPv4)
		for _, ipt := range []kp.Interface{node.IPTables, emu} {
			p, err := kp.NewProxier(ipt, nil, cfg)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := p.Sync(context.Background(), services, slices); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("kernel/services=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if r := h.Dial(client.Netns, "tcp", vip); r.Outcome != kernel.Answered {
					b.Fatal(r)
				}
			}
		})
		env := dryEnv{NewStaticEnv(1, local...)}
		b.Run(fmt.Sprintf("emulator/services=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				p := Packet{Proto: netfilter.ProtoTCP, Src: client.IP, Dst: vip.Addr(), SrcPort: 40000, DstPort: 80, TCPFlags: netfilter.TCPSyn, Len: 60}
				for _, hk := range []netfilter.Hook{netfilter.Prerouting, netfilter.Forward, netfilter.Postrouting} {
					if hr := emu.EvalHook(env, hk, &p, nil); hr.Verdict != Accept {
						b.Fatal(hr.Verdict)
					}
				}
			}
		})
		b.Run(fmt.Sprintf("emulator-walk/services=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				p := Packet{Proto: netfilter.ProtoTCP, Src: client.IP, Dst: vip.Addr(), SrcPort: 40000, DstPort: 80, TCPFlags: netfilter.TCPSyn, Len: 60}
				if _, err := emu.Walk(WalkInput{Packet: p, From: FromPod, Local: local, Seed: uint64(i)}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
