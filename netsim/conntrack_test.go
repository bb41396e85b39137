package netsim

import (
	"net/netip"
	"testing"
	"time"
)

func TestConntrackCollectsExpiredEntries(t *testing.T) {
	now := Epoch
	ct := NewConntrack(func() time.Time { return now }, ConntrackSettings{})
	src := netip.MustParseAddr("10.0.0.1")
	dst := netip.MustParseAddrPort("10.0.0.2:53")
	send := func(port uint16) {
		pk, _ := ParsePacket(BuildUDP(netip.AddrPortFrom(src, port), dst, nil))
		r := ct.in(pk)
		if r.isNew && !ct.confirm(r.conn) {
			t.Fatal("confirm failed")
		}
	}
	for p := uint16(1000); p < 2000; p++ {
		send(p)
	}
	if len(ct.table) != 2000 || len(ct.expq) != 1000 {
		t.Fatalf("table %d keys, queue %d, want 2000 and 1000", len(ct.table), len(ct.expq))
	}
	// Refresh half of them 20 s later; then step past the first entries' 30 s timeout.
	now = now.Add(20 * time.Second)
	for p := uint16(1000); p < 1500; p++ {
		send(p)
	}
	now = now.Add(15 * time.Second)
	send(5000) // any packet runs the collector
	if got := ct.Len(); got != 501 {
		t.Errorf("%d live entries, want the 500 refreshed ones and the new one", got)
	}
	if len(ct.table) != 2*501 || len(ct.expq) != 501 {
		t.Errorf("expired entries not collected: table %d keys, queue %d", len(ct.table), len(ct.expq))
	}
	if n := ct.Delete(CtFilter{OrigSrcPort: 1200}); n != 1 || len(ct.expq) != 500 {
		t.Errorf("delete: %d removed, queue %d", n, len(ct.expq))
	}
}
