package netsim

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"
)

// With many nodes the fabric finds a pod address's node through an index of the pod
// CIDRs by mask (pod4By) rather than a scan: for nodes with pod ranges of mixed sizes,
// every address in or out of them is routed as the scan routes it.
func TestFabricPodCIDRIndex(t *testing.T) {
	var nodes []NodeConfig
	r := rand.New(rand.NewPCG(1, 2))
	next := netip.MustParseAddr("10.0.0.0")
	for i := 0; i < 3*pod4IndexMin; i++ {
		bits := []int{22, 24, 26}[r.IntN(3)]
		p := netip.PrefixFrom(next, bits).Masked()
		for p.Addr() != next { // align: start the range at the next boundary
			next = next.Next()
			p = netip.PrefixFrom(next, bits).Masked()
		}
		nodes = append(nodes, NodeConfig{Name: fmt.Sprintf("n%d", i), PodCIDRs: []netip.Prefix{p}})
		size := 1 << (32 - bits)
		for j := 0; j < size+256*r.IntN(2); j++ { // now and then a gap
			next = next.Next()
		}
	}
	c, err := New(Config{Seed: 1, ManualClock: true, Nodes: nodes, ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rt := c.fabric.published.Load()
	if rt.pod4By == nil || len(rt.pod4Masks) != 3 {
		t.Fatalf("no index over %d pod CIDRs (masks %v)", len(rt.pod4), rt.pod4Masks)
	}
	scan := *rt
	scan.pod4By, scan.pod4Masks = nil, nil
	for i := 0; i < 20000; i++ {
		a := netip.AddrFrom4([4]byte{10, byte(r.IntN(2)), byte(r.IntN(256)), byte(r.IntN(256))})
		got, want := rt.lookup(a), scan.lookup(a)
		if got != want {
			t.Fatalf("%s: index %+v, scan %+v", a, got, want)
		}
	}
	if d := rt.lookup(nodes[5].PodCIDRs[0].Addr().Next()); d.node == nil || d.node.name != "n5" {
		t.Fatalf("n5's pod address routed to %+v", d)
	}
}

// New publishes the fabric's routes once, after every configured node is added
// (deferPublish): the routes published are those a publish of the finished fabric makes,
// and every node's IPs and pod range route to it.
func TestFabricPublishedOnceAtNew(t *testing.T) {
	var nodes []NodeConfig
	for i := 0; i < 2*pod4IndexMin; i++ {
		nodes = append(nodes, NodeConfig{Name: fmt.Sprintf("n%d", i)})
	}
	c, err := New(Config{Seed: 1, ManualClock: true, Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := c.fabric.published.Load()
	c.fabric.mu.Lock()
	c.fabric.unlock() // publish again from the fabric as it is
	if want := c.fabric.published.Load(); !reflect.DeepEqual(got, want) {
		t.Fatalf("routes published by New differ from the fabric's")
	}
	for _, nc := range nodes {
		n := c.Node(nc.Name)
		for _, ip := range n.IPs() {
			if d := got.lookup(ip); d.node != n {
				t.Fatalf("%s's IP %s routed to %+v", nc.Name, ip, d)
			}
		}
		for _, p := range n.PodCIDRs() {
			if d := got.lookup(p.Addr().Next()); d.node != n {
				t.Fatalf("%s's pod range %s routed to %+v", nc.Name, p, d)
			}
		}
	}
	// A node added later is published at once.
	n, err := c.AddNode(NodeConfig{Name: "late"})
	if err != nil {
		t.Fatal(err)
	}
	if d := c.fabric.lookup(n.IPs()[0]); d.node != n {
		t.Fatalf("the late node's IP routed to %+v", d)
	}
}
