package kernel

import (
	"context"
	"net/netip"
	"os"
	"testing"
)

// TestHarnessLivePods: a harness of three nodes (NodeCount) gets a pod added on the
// third node while it runs, reachable from a pod of the first across the node network
// and answering on its own ports only; SetListening stops and restarts its servers;
// RemovePod deletes its namespace, and a new pod may take its address.
func TestHarnessLivePods(t *testing.T) {
	h := newTestHarness(t, HarnessConfig{Prefix: "clhlive", NodeCount: 3, Pods: []PodConfig{{Name: "a", Node: 0}}})
	ctx := context.Background()
	if len(h.Nodes) != 3 || h.Nodes[2].PodCIDR != netip.MustParsePrefix("10.244.2.0/24") {
		t.Fatalf("nodes: %d, node 2's pod CIDR %v", len(h.Nodes), h.Nodes[2].PodCIDR)
	}
	p, err := h.AddPod(ctx, PodConfig{Name: "late", Node: 2, TCPPorts: []uint16{9000}, UDPPorts: []uint16{}})
	if err != nil {
		t.Fatal(err)
	}
	if !h.Nodes[2].PodCIDR.Contains(p.IP) {
		t.Fatalf("late pod at %v, not in node 2's %v", p.IP, h.Nodes[2].PodCIDR)
	}
	a := h.Pod("a")
	if r := h.Dial(a.Netns, "tcp", netip.AddrPortFrom(p.IP, 9000)); r.Outcome != Answered || r.Server != "late" || r.Source.Addr() != a.IP {
		t.Fatalf("a -> late:9000: %v", r)
	}
	if r := h.Dial(a.Netns, "tcp", netip.AddrPortFrom(p.IP, 8080)); r.Outcome != Refused {
		t.Errorf("a -> late:8080 (no server): %v, want refused", r)
	}
	if _, err := h.AddPod(ctx, PodConfig{Name: "late"}); err == nil {
		t.Error("a second pod named late was added")
	}
	if err := h.SetListening(p, false); err != nil {
		t.Fatal(err)
	}
	if r := h.Dial(a.Netns, "tcp", netip.AddrPortFrom(p.IP, 9000)); r.Outcome != Refused {
		t.Errorf("late not listening: %v, want refused", r)
	}
	if err := h.SetListening(p, true); err != nil {
		t.Fatal(err)
	}
	if r := h.Dial(a.Netns, "tcp", netip.AddrPortFrom(p.IP, 9000)); r.Outcome != Answered {
		t.Errorf("late listening again: %v", r)
	}
	if err := h.SetHairpin(ctx, 2, false); err != nil {
		t.Fatal(err)
	}
	ns, ip := p.Netns.Name, p.IP
	if err := h.RemovePod(ctx, "late"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(netnsDir + "/" + ns); !os.IsNotExist(err) {
		t.Errorf("late's namespace %s still there: %v", ns, err)
	}
	if h.Pod("late") != nil || len(h.Nodes[2].Pods) != 0 {
		t.Errorf("late still listed")
	}
	if r := h.Dial(a.Netns, "tcp", netip.AddrPortFrom(ip, 9000)); r.Outcome == Answered {
		t.Errorf("the removed pod answered: %v", r)
	}
	again, err := h.AddPod(ctx, PodConfig{Name: "again", Node: 2, IP: ip})
	if err != nil {
		t.Fatalf("a new pod at the removed one's address: %v", err)
	}
	if r := h.Dial(a.Netns, "udp", netip.AddrPortFrom(again.IP, 8080)); r.Outcome != Answered || r.Server != "again" {
		t.Errorf("a -> again:8080/udp: %v", r)
	}
}
