package netsim

import (
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// dnsClashSetup is a node (node-a) whose host stack sends DNS queries to a ClusterIP-like
// VIP DNATed to two DNS pods on node-b, on Linux kernel k. It returns the node, the
// handler and the two packets of one flow (glibc's A and AAAA queries from one socket:
// the same 5-tuple).
func dnsClashSetup(t *testing.T, k netfilter.KernelVersion, ladder bool) (*Node, *staticDNAT, []InFlight) {
	t.Helper()
	c := newTestCluster(t, Config{Seed: 7, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	vip := netip.MustParseAddrPort("10.96.0.10:53")
	d := &staticDNAT{vip: vip, ladder: ladder}
	for _, name := range []string{"kube-system/coredns-0", "kube-system/coredns-1"} {
		p := startPod(t, c, "node-b", name)
		d.backends = append(d.backends, netip.AddrPortFrom(p.IP(), 53))
	}
	n := c.Node("node-a")
	n.AddHandler(HandlerSpec{Name: "test-dnat", Hook: netfilter.Output, Priority: netfilter.PriorityNATDst, NAT: true, Handler: d})
	n.UpdateSettings(func(s *NodeSettings) { s.Kernel = k })
	src := netip.AddrPortFrom(n.IP(), 40000)
	pkts := []InFlight{
		{Data: BuildUDP(src, vip, []byte("A example.com")), Host: true, Trace: true},
		{Data: BuildUDP(src, vip, []byte("AAAA example.com")), Host: true, Trace: true},
	}
	return n, d, pkts
}

var (
	kernel54 = netfilter.KernelVersion{Major: 5, Minor: 4}
	kernel56 = netfilter.KernelVersion{Major: 5, Minor: 6}
)

func drops(res []FlightResult) int {
	n := 0
	for _, r := range res {
		if r.Dropped() {
			n++
		}
	}
	return n
}

// TestConntrackUDPClashInsert: two UDP packets of one flow (DNS A and AAAA from one
// socket) both pass NAT, to different DNS pods, before either confirms. On Linux 5.4 the
// second to confirm is dropped (insert_failed +1, drop +1); from 5.6 its entry is
// inserted by its reply tuple only and both packets leave, each to its own pod
// (clash_resolve +1). With one pod both get the same NAT result and the second is merged
// into the first's entry on either kernel (clash_resolve +1). The default schedule (one packet at a time) loses nothing: the
// second packet finds the first's entry and follows it.
func TestConntrackUDPClashInsert(t *testing.T) {
	both := Interleaving{Steps: []int{0, 1, 0, 1}}
	for _, tc := range []struct {
		name    string
		k       netfilter.KernelVersion
		il      Interleaving
		drops   int
		stats   CtStats
		pods    int // distinct destinations of the packets that left
		entries int // entries conntrack -L lists
		onePod  bool
	}{
		{"5.4 together", kernel54, both, 1, CtStats{Insert: 1, InsertFailed: 1, Drop: 1}, 1, 1, false},
		{"5.6 together", kernel56, both, 0, CtStats{Insert: 2, ClashResolve: 1}, 2, 1, false},
		{"current together", netfilter.KernelVersion{}, both, 0, CtStats{Insert: 2, ClashResolve: 1}, 2, 1, false},
		{"5.4 together, one pod", kernel54, both, 0, CtStats{Insert: 1, ClashResolve: 1}, 1, 1, true},
		{"5.4 one at a time", kernel54, Interleaving{}, 0, CtStats{Insert: 1}, 1, 1, false},
		{"5.6 one at a time", kernel56, Interleaving{}, 0, CtStats{Insert: 1}, 1, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, d, pkts := dnsClashSetup(t, tc.k, false)
			if tc.onePod {
				d.backends = d.backends[:1] // the same NAT result: the later packet is merged
			}
			res, err := n.SendTogether(pkts, tc.il)
			if err != nil {
				t.Fatal(err)
			}
			if got := drops(res); got != tc.drops {
				t.Errorf("%d packets dropped, want %d: %+v", got, tc.drops, res)
			}
			if got := n.Conntrack().Stats(); got != tc.stats {
				t.Errorf("conntrack -S: %s, want %s", got, tc.stats)
			}
			dst := map[string]bool{}
			for _, r := range res {
				if !r.Dropped() {
					dst[r.Packet[strings.Index(r.Packet, ">"):]] = true
				}
			}
			if len(dst) != tc.pods {
				t.Errorf("packets left to %d destinations, want %d: %+v", len(dst), tc.pods, res)
			}
			if got := n.Conntrack().Len(); got != tc.entries {
				t.Errorf("%d entries listed, want %d", got, tc.entries)
			}
			if tc.drops == 1 && !strings.Contains(res[1].Trace.String(), "conntrack insert clash") {
				t.Errorf("the dropped packet's trace does not say why:\n%s", res[1].Trace)
			}
			if tc.stats.ClashResolve == 1 && !strings.Contains(res[1].Trace.String(), "insert clash resolved") {
				t.Errorf("the trace does not show the resolved clash:\n%s", res[1].Trace)
			}
		})
	}
}

// TestConntrackUDPClashProbability: with the DNS pod picked at random (one chance in
// two each) and the interleaving picked at random, a 5.4 node loses one of the two
// queries with probability 1/4 (the packets are both between NAT and confirmation in
// half of the interleavings, and pick different pods in half of those), which the
// all-branches enumeration gives exactly and seeded random schedules approach; a 5.6
// node loses none.
func TestConntrackUDPClashProbability(t *testing.T) {
	for _, tc := range []struct {
		k    netfilter.KernelVersion
		want float64
	}{{kernel54, 0.25}, {kernel56, 0}} {
		n, _, pkts := dnsClashSetup(t, tc.k, true)
		build := func() (*Node, []InFlight) {
			n.Conntrack().Flush()
			return n, pkts
		}
		branches, err := SendTogetherBranches(build, 0)
		if err != nil {
			t.Fatal(err)
		}
		var total, loss float64
		for _, b := range branches {
			total += b.Prob
			if drops(b.Results) > 0 {
				loss += b.Prob
			}
		}
		if math.Abs(total-1) > 1e-9 || math.Abs(loss-tc.want) > 1e-9 {
			t.Errorf("kernel %s: %d branches, total probability %v, loss %v; want 1 and %v", tc.k, len(branches), total, loss, tc.want)
		}
		const runs = 4000
		lost := 0
		for seed := uint64(1); seed <= runs; seed++ {
			n.Conntrack().Flush()
			res, err := n.SendTogether(pkts, Interleaving{Random: true, Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			if drops(res) > 0 {
				lost++
			}
		}
		// 4000 runs: the standard deviation of the rate is under 0.007.
		if rate := float64(lost) / runs; math.Abs(rate-loss) > 0.03 {
			t.Errorf("kernel %s: seeded random interleavings lose %v, all branches say %v", tc.k, rate, loss)
		}
	}
}

// TestSNATPortClash: two connections from different clients that a node masquerades
// (the same source port, the same server) both pick their port before either confirms.
// Without randomisation each keeps its source port, the two reply tuples are one, and
// the second insert fails on any kernel (a reply-tuple clash is not resolvable); with
// --random-fully (nf_nat_core's random offset) they pick different ports and both leave.
func TestSNATPortClash(t *testing.T) {
	for _, tc := range []struct {
		randomFully bool
		drops       int
		stats       CtStats
	}{
		{false, 1, CtStats{Insert: 1, InsertFailed: 1, Drop: 1}},
		{true, 0, CtStats{Insert: 2}},
	} {
		c := newTestCluster(t, Config{Seed: 7, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
		server := startPod(t, c, "node-b", "default/dns")
		dst := netip.AddrPortFrom(server.IP(), 53)
		n := c.Node("node-a")
		n.AddHandler(HandlerSpec{Name: "masq", Hook: netfilter.Postrouting, Priority: netfilter.PriorityNATSrc, NAT: true, Handler: HandlerFunc(func(_ *Context, p *Packet) Verdict {
			return MasqueradeVerdict(tc.randomFully, "")
		})})
		pkts := []InFlight{
			{Data: BuildUDP(netip.MustParseAddrPort("192.168.50.1:1000"), dst, []byte("q1"))},
			{Data: BuildUDP(netip.MustParseAddrPort("192.168.50.2:1000"), dst, []byte("q2"))},
		}
		res, err := n.SendTogether(pkts, Interleaving{Steps: []int{0, 1, 0, 1}})
		if err != nil {
			t.Fatal(err)
		}
		if got := drops(res); got != tc.drops {
			t.Errorf("random-fully=%v: %d dropped, want %d: %+v", tc.randomFully, got, tc.drops, res)
		}
		if got := n.Conntrack().Stats(); got != tc.stats {
			t.Errorf("random-fully=%v: conntrack -S: %s, want %s", tc.randomFully, got, tc.stats)
		}
	}
}

// TestSendTogetherBadStep: a step of a packet already done is an error, and the packets
// held at their confirmation are let on, so the node is not left locked.
func TestSendTogetherBadStep(t *testing.T) {
	n, _, pkts := dnsClashSetup(t, kernel56, false)
	if _, err := n.SendTogether(pkts, Interleaving{Steps: []int{0, 1, 0, 0}}); err == nil || !strings.Contains(err.Error(), "packet 0 is not in flight") {
		t.Fatalf("err = %v", err)
	}
	if _, err := n.SendTogether(pkts, Interleaving{Steps: []int{2}}); err == nil {
		t.Fatal("a step of packet 2 of two: no error")
	}
	if st := n.Conntrack().Stats(); st.Insert != 2 || st.ClashResolve != 1 {
		t.Errorf("conntrack -S: %s", st)
	}
}

// TestHoldTogetherLiveTraffic: a pod's socket sends two datagrams back to back to a VIP
// DNATed (round robin) to two pods on another node, and its node holds them so they are
// in flight together, both past NAT before either confirms. On Linux 5.4 the second is
// lost at confirmation (insert_failed +1) and only the first pod hears anything; on 5.6
// both go on, each to its own pod, and the client's socket gets both answers, the second
// through the clash entry's reply tuple, from the VIP. Packets the hold does not select
// pass as usual, and a hold whose window passes with one packet sends that one alone.
func TestHoldTogetherLiveTraffic(t *testing.T) {
	for _, tc := range []struct {
		name    string
		k       netfilter.KernelVersion
		il      Interleaving
		replies int
		stats   CtStats
	}{
		{"5.4 together", kernel54, Interleaving{Steps: []int{0, 1, 0, 1}}, 1, CtStats{Insert: 1, InsertFailed: 1, Drop: 1}},
		{"5.6 together", kernel56, Interleaving{Steps: []int{0, 1, 0, 1}}, 2, CtStats{Insert: 2, ClashResolve: 1}},
		{"5.4 one at a time", kernel54, Interleaving{}, 2, CtStats{Insert: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, Config{Seed: 7, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
			vip := netip.MustParseAddrPort("10.96.0.10:53")
			d := &staticDNAT{vip: vip}
			heard := make(chan string, 8)
			for _, name := range []string{"kube-system/coredns-0", "kube-system/coredns-1"} {
				p := startPod(t, c, "node-b", name)
				d.backends = append(d.backends, netip.AddrPortFrom(p.IP(), 53))
				pc, err := p.Net().ListenPacket("udp", ":53")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { pc.Close() })
				go func() {
					buf := make([]byte, 512)
					for {
						n, from, err := pc.ReadFrom(buf)
						if err != nil {
							return
						}
						heard <- name
						pc.WriteTo(append([]byte(name+" "), buf[:n]...), from)
					}
				}()
			}
			attachDNAT(c, d)
			na := c.Node("node-a")
			na.UpdateSettings(func(s *NodeSettings) { s.Kernel = tc.k })
			client := startPod(t, c, "node-a", "default/client")
			g := na.HoldTogether(Together{
				Match:        func(p *Packet) bool { return p.Proto == netfilter.ProtoUDP && p.DstPort == 53 },
				Interleaving: tc.il,
			})
			conn, err := client.Net().DialContext(ctxT(t), "udp", vip.String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			for _, q := range []string{"A", "AAAA"} {
				if _, err := conn.Write([]byte(q)); err != nil {
					t.Fatal(err)
				}
			}
			<-g.Done()
			c.Quiesce()
			res, steps, err := g.Results()
			if err != nil || len(res) != 2 {
				t.Fatalf("results %+v, steps %v, err %v; want two packets", res, steps, err)
			}
			if tc.il.Steps != nil && !slices.Equal(steps, tc.il.Steps) {
				t.Errorf("steps %v, want %v", steps, tc.il.Steps)
			}
			if got := na.Conntrack().Stats(); got != tc.stats {
				t.Errorf("conntrack -S: %s, want %s", got, tc.stats)
			}
			if got := len(heard); got != tc.replies {
				t.Errorf("the DNS pods heard %d queries, want %d: %+v", got, tc.replies, res)
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			from := map[string]bool{}
			for i := 0; i < tc.replies; i++ {
				buf := make([]byte, 512)
				n, err := conn.Read(buf)
				if err != nil {
					t.Fatalf("reply %d: %v", i, err)
				}
				from[strings.Fields(string(buf[:n]))[0]] = true
			}
			if tc.k == kernel56 && tc.il.Steps != nil && len(from) != 2 {
				t.Errorf("answers from %v, want both DNS pods", from)
			}
		})
	}

	t.Run("window", func(t *testing.T) {
		c := newTestCluster(t, Config{Seed: 7, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
		srv := startPod(t, c, "node-b", "default/srv")
		pc, err := srv.Net().ListenPacket("udp", ":53")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		client := startPod(t, c, "node-a", "default/client")
		na := c.Node("node-a")
		g := na.HoldTogether(Together{Match: func(p *Packet) bool { return p.DstPort == 53 }})
		conn, err := client.Net().DialContext(ctxT(t), "udp", netip.AddrPortFrom(srv.IP(), 53).String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("one")); err != nil {
			t.Fatal(err)
		}
		c.Quiesce()
		select {
		case <-g.Done():
			t.Fatal("the hold ran before its window passed")
		default:
		}
		c.Clock().Advance(time.Millisecond)
		<-g.Done()
		res, _, _ := g.Results()
		if len(res) != 1 || res[0].Verdict != "FORWARD" {
			t.Fatalf("results %+v, want the one packet forwarded", res)
		}
		pc.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 64)
		if n, _, err := pc.ReadFrom(buf); err != nil || string(buf[:n]) != "one" {
			t.Fatalf("server read %q, %v", buf[:n], err)
		}
		// The hold is over: the next packet passes at once.
		if _, err := conn.Write([]byte("two")); err != nil {
			t.Fatal(err)
		}
		if n, _, err := pc.ReadFrom(buf); err != nil || string(buf[:n]) != "two" {
			t.Fatalf("server read %q, %v", buf[:n], err)
		}
	})
}
