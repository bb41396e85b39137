package netsim

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
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
			r, err := c.ProbeOne(Probe{From: "pod:default/client", Proto: ProtoUDP, Dst: netip.AddrPortFrom(web.IP(), 8080), SrcPort: uint16(20000 + i)})
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
