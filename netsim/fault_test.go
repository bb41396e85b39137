package netsim

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// Every fault decision comes from the link's own source, seeded from the cluster seed and
// the link's name: the same seed and the same packets give the same losses, delays,
// reorderings and duplicates, for real traffic and for probes; another seed does not.
func TestLinkFaultsAreSeeded(t *testing.T) {
	traffic := func(seed uint64) (order string, lost, dups, reordered int) {
		c := newTestCluster(t, Config{Seed: seed, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}}})
		l := c.Node("node-a").Uplink()
		l.SetFaults(LinkFaults{Loss: 0.2, Latency: time.Millisecond, Jitter: 3 * time.Millisecond, Reorder: 0.2, Duplicate: 0.2})
		var got []int
		for i := 0; i < 300; i++ {
			l.send(c, plainFrame([]byte{byte(i), byte(i >> 8)}), func(f frame) { got = append(got, int(f.b[0])|int(f.b[1])<<8) })
			c.Clock().Advance(100 * time.Microsecond)
		}
		c.Clock().Advance(time.Second)
		seen := map[int]bool{}
		for i, v := range got {
			if seen[v] {
				dups++
			}
			seen[v] = true
			if i > 0 && v < got[i-1] {
				reordered++
			}
		}
		_, lostN := l.Counters()
		return fmt.Sprint(got), int(lostN), dups, reordered
	}
	a, lost, dups, reordered := traffic(7)
	if lost == 0 || dups == 0 || reordered == 0 {
		t.Fatalf("faults did not act: %d lost, %d duplicated, %d out of order", lost, dups, reordered)
	}
	if b, _, _, _ := traffic(7); a != b {
		t.Errorf("seed 7 twice gave different deliveries:\n%s\n%s", a, b)
	}
	if c, _, _, _ := traffic(8); a == c {
		t.Error("seeds 7 and 8 gave the same deliveries")
	}

	probes := func(seed uint64) string {
		c := newTestCluster(t, Config{Seed: seed, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
		web := startPod(t, c, "node-b", "default/web", 8080)
		startPod(t, c, "node-a", "default/client")
		c.Node("node-a").Uplink().SetFaults(LinkFaults{Loss: 0.3})
		var b strings.Builder
		for i := 0; i < 100; i++ {
			r, err := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoUDP, Dst: netip.AddrPortFrom(web.IP(), 8080), SrcPort: uint16(20000 + i)})
			if err != nil {
				t.Fatal(err)
			}
			switch r.Result {
			case ResultDelivered:
				b.WriteByte('.')
			case ResultDropped:
				b.WriteByte('x')
			default:
				t.Fatalf("probe %d: %s", i, r.Outcome)
			}
		}
		return b.String()
	}
	p := probes(7)
	if !strings.Contains(p, ".") || !strings.Contains(p, "x") {
		t.Fatalf("30%% loss over 100 probes: %s", p)
	}
	if q := probes(7); p != q {
		t.Errorf("seed 7 twice gave different probe losses:\n%s\n%s", p, q)
	}
	if q := probes(8); p == q {
		t.Errorf("seeds 7 and 8 gave the same probe losses: %s", p)
	}
}

// Probes add up the links' latency and jitter on their way; an answer later than the
// probe's timeout (default 1 s) is a distinct "timed out" outcome.
func TestProbeTimeoutFromLinkLatency(t *testing.T) {
	build := func() (*Network, *Pod) {
		c := newTestCluster(t, threeNodes())
		startPod(t, c, "node-a", "default/client")
		return c, startPod(t, c, "node-b", "default/web", 80)
	}
	c, web := build()
	dst := netip.AddrPortFrom(web.IP(), 80)
	probe := func(c *Network, mode ProbeMode, timeout time.Duration) ProbeResult {
		t.Helper()
		r, err := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: dst, Mode: mode, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := probe(c, ProbeConnect, 0); r.Result != ResultConnected || r.Delay != 0 {
		t.Fatalf("without latency: %s delay %s", r.Outcome, r.Delay)
	}
	up := c.Node("node-a").Uplink()
	up.SetFaults(LinkFaults{Latency: 10 * time.Second})
	r := probe(c, ProbeConnect, 0)
	if r.Result != ResultTimedOut || r.Delay != 10*time.Second || r.Pod != "default/web" || !strings.Contains(r.Reason, "timeout of 1s") {
		t.Errorf("10 s uplink latency, default timeout: %s delay %s; want timed out after 10s", r.Outcome, r.Delay)
	}
	if r := probe(c, ProbeConnect, 20*time.Second); r.Result != ResultConnected || r.Delay != 10*time.Second {
		t.Errorf("10 s latency, 20 s timeout: %s delay %s", r.Outcome, r.Delay)
	}
	if r := probe(c, ProbeConnect, -1); r.Result != ResultConnected {
		t.Errorf("no timeout: %s", r.Outcome)
	}
	if r := probe(c, ProbePacket, 0); r.Result != ResultTimedOut || r.Delay != 10*time.Second {
		t.Errorf("one packet, 10 s latency: %s delay %s", r.Outcome, r.Delay)
	}
	// Latency both ways adds up: 600 ms a way is 1.2 s for the handshake's answer.
	up.SetFaults(LinkFaults{Latency: 300 * time.Millisecond})
	back := c.Node("node-b").Uplink()
	back.SetFaults(LinkFaults{Latency: 300 * time.Millisecond})
	if r := probe(c, ProbeConnect, 0); r.Result != ResultConnected || r.Delay != 600*time.Millisecond {
		t.Errorf("300 ms each way: %s delay %s", r.Outcome, r.Delay)
	}
	up.SetFaults(LinkFaults{Latency: 600 * time.Millisecond})
	back.SetFaults(LinkFaults{Latency: 600 * time.Millisecond})
	if r := probe(c, ProbeConnect, 0); r.Result != ResultTimedOut || r.Delay != 1200*time.Millisecond {
		t.Errorf("600 ms each way: %s delay %s", r.Outcome, r.Delay)
	}
	// A refusal's way back counts too.
	if r, _ := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(web.IP(), 81), Mode: ProbeConnect}); r.Result != ResultTimedOut || !strings.Contains(r.Reason, "was: refused") {
		t.Errorf("a refusal after 1.2 s: %s", r.Outcome)
	}
	// Exploring all branches: latency without jitter draws, outcome carries the delay.
	up.SetFaults(LinkFaults{Latency: 2 * time.Second, Jitter: time.Second})
	back.SetFaults(LinkFaults{})
	rs, err := c.Probe(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: dst, AllBranches: true})
	if err != nil || len(rs) != 1 || rs[0].Result != ResultTimedOut || rs[0].Delay != 2*time.Second {
		t.Errorf("all branches: %v %v", rs, err)
	}
	// Jitter is drawn from the link's seeded source: with 0.9 s + [0, 0.2 s) some
	// handshakes make the second and some do not, the same ones with the same seed.
	run := func(c *Network) []string {
		c.Node("node-a").Uplink().SetFaults(LinkFaults{Latency: 900 * time.Millisecond, Jitter: 200 * time.Millisecond})
		var out []string
		for i := 0; i < 40; i++ {
			r := probe(c, ProbeConnect, 0)
			if r.Delay < 900*time.Millisecond || r.Delay >= 1100*time.Millisecond {
				t.Errorf("delay %s outside [0.9 s, 1.1 s)", r.Delay)
			}
			if (r.Result == ResultTimedOut) != (r.Delay > time.Second) {
				t.Errorf("%s after %s", r.Result, r.Delay)
			}
			out = append(out, r.Result)
		}
		return out
	}
	c1, _ := build()
	first := run(c1)
	c2, _ := build()
	if second := run(c2); strings.Join(first, ",") != strings.Join(second, ",") {
		t.Errorf("same seed, different outcomes:\n%v\n%v", first, second)
	}
	n := strings.Count(strings.Join(first, ","), ResultTimedOut)
	if n == 0 || n == len(first) {
		t.Errorf("%d of %d timed out; want some of each", n, len(first))
	}
	js, _ := json.Marshal(rs[0].Outcome)
	if !strings.Contains(string(js), `"result":"timed out"`) || !strings.Contains(string(js), `"delay":2000000000`) {
		t.Errorf("JSON: %s", js)
	}
}
