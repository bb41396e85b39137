package kubeproxy

import (
	"net/netip"
	"testing"

	"github.com/clusterlab/clusterlab/proxy"
)

// TestHoldConntrackCleanup: while a table's cleanup is held, the deletions kube-proxy
// asks for wait (and are listed); releasing carries them out; forgetting drops them.
func TestHoldConntrackCleanup(t *testing.T) {
	c := newCluster(t, IPTables)
	n := c.Node("node-a")
	tbl := n.Conntrack()
	ct := Conntrack{T: tbl, Family: "IPv4"}
	f := proxy.ConntrackFilter{Protocol: proxy.ProtoUDP, OrigDst: netip.MustParseAddr("10.96.0.10"), OrigDstPort: 53}
	HoldConntrackCleanup(tbl, true)
	if k, err := ct.Delete(f); k != 0 || err != nil {
		t.Fatalf("held delete: %d, %v", k, err)
	}
	if got := HeldConntrackCleanup(tbl); len(got) != 1 || got[0] != f.String() {
		t.Errorf("held: %q", got)
	}
	HoldConntrackCleanup(tbl, false) // what waits keeps waiting
	if got := HeldConntrackCleanup(tbl); len(got) != 1 {
		t.Errorf("after hold off: %q", got)
	}
	if k := ReleaseConntrackCleanup(tbl); k != 0 || len(HeldConntrackCleanup(tbl)) != 0 {
		t.Errorf("release: %d deleted, %q left", k, HeldConntrackCleanup(tbl))
	}
	HoldConntrackCleanup(tbl, true)
	ct.Delete(f)
	ForgetConntrackCleanup(tbl)
	if got := HeldConntrackCleanup(tbl); len(got) != 0 {
		t.Errorf("forgotten: %q", got)
	}
	if !ForceFullSync(n) {
		t.Error("the iptables mode has partial syncs: ForceFullSync should apply")
	}
	if ForceFullSync(newCluster(t, IPVS).Node("node-a")) {
		t.Error("the IPVS mode has no partial syncs")
	}
}
