package netsim

import (
	"fmt"
	"net/netip"
	"strings"
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

// NodeCIDRMaskSize sizes each node's IPv4 pod range: a /22 gives node 1 the second
// /22, room for more than 256 nodes is there with a larger cluster CIDR, and a node
// past the cluster CIDR's room is an error naming the fields that make room.
func TestNodeCIDRMaskSize(t *testing.T) {
	var nodes []NodeConfig
	for i := 0; i < 300; i++ {
		nodes = append(nodes, NodeConfig{Name: fmt.Sprintf("n%d", i)})
	}
	c, err := New(Config{Seed: 1, ManualClock: true, Nodes: nodes[:2], NodeCIDRMaskSize: 22})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Node("n1").PodCIDRs(); len(got) != 1 || got[0] != netip.MustParsePrefix("10.244.4.0/22") {
		t.Errorf("n1's pod CIDRs %v, want [10.244.4.0/22]", got)
	}
	c.Close()
	c, err = New(Config{Seed: 1, ManualClock: true, Nodes: nodes, ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Node("n299").PodCIDRs(); len(got) != 1 || got[0] != netip.MustParsePrefix("10.1.43.0/24") {
		t.Errorf("n299's pod CIDRs %v, want [10.1.43.0/24]", got)
	}
	c.Close()
	_, err = New(Config{Seed: 1, ManualClock: true, Nodes: nodes})
	if err == nil || !strings.Contains(err.Error(), "nodeCIDRMaskSize") {
		t.Errorf("300 nodes in 10.244.0.0/16: %v", err)
	}
	if _, err := New(Config{Nodes: nodes[:1], NodeCIDRMaskSize: 31}); err == nil {
		t.Error("a /31 a node was taken")
	}
}
