package netsim

import (
	"net/netip"
	"testing"
	"time"
)

// TestPodIPsRoundRobin: a pod started after one stopped gets the next address (as
// host-local IPAM does), not the freed one, unless Config.LowestFreePodIP; at the end of
// the range the allocation wraps around to the lowest free address.
func TestPodIPsRoundRobin(t *testing.T) {
	for _, tc := range []struct {
		lowest bool
		want   string
	}{{false, "10.244.0.4"}, {true, "10.244.0.2"}} {
		nw, err := New(Config{ManualClock: true, LowestFreePodIP: tc.lowest})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"a", "b"} {
			if _, err := nw.StartPod("node-a", "default", name, nil, false); err != nil {
				t.Fatal(err)
			}
		}
		nw.StopPod("default", "a")
		p, err := nw.StartPod("node-a", "default", "c", nil, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.IPs()[0].String(); got != tc.want {
			t.Errorf("lowest-free %v: the new pod got %s, want %s", tc.lowest, got, tc.want)
		}
		nw.Close()
	}
	n := &Node{ports: map[netip.Addr]*podPort{netip.MustParseAddr("10.0.0.3"): nil}}
	p := netip.MustParsePrefix("10.0.0.0/29") // .2-.6 usable (.1 the gateway, .7 broadcast)
	first := netip.MustParseAddr("10.0.0.2")
	if a, ok := n.freePodIP(p, netip.MustParseAddr("10.0.0.7"), first); !ok || a != first {
		t.Errorf("wrap around: %s %v, want 10.0.0.2", a, ok)
	}
	if a, ok := n.freePodIP(p, netip.MustParseAddr("10.0.0.3"), first); !ok || a.String() != "10.0.0.4" {
		t.Errorf("next free: %s %v, want 10.0.0.4", a, ok)
	}
}

// TestConntrackStats: inserts are counted, and an insert that clashes with an entry
// holding its reply tuple counts in insert_failed and drop.
func TestConntrackStats(t *testing.T) {
	now := Epoch
	ct := NewConntrack(func() time.Time { return now }, ConntrackSettings{})
	dst := netip.MustParseAddrPort("10.0.0.2:53")
	newConn := func(src string) *Conn {
		pk, _ := ParsePacket(BuildUDP(netip.MustParseAddrPort(src), dst, nil))
		return ct.in(pk, now).conn
	}
	a := newConn("10.0.0.1:1000")
	if !ct.confirm(a) {
		t.Fatal("confirm a")
	}
	b := newConn("10.0.0.3:1000")
	b.Reply = a.Reply // both SNATed to the same source: the clash
	if ct.confirm(b) {
		t.Fatal("b confirmed over a's reply tuple")
	}
	if got := ct.Stats(); got != (CtStats{Insert: 1, InsertFailed: 1, Drop: 1}) {
		t.Errorf("stats %+v", got)
	}
}
