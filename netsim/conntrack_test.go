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
		r := ct.in(pk, now)
		if r.isNew && !ct.confirm(r.conn) {
			t.Fatal("confirm failed")
		}
	}
	for p := uint16(1000); p < 2000; p++ {
		send(p)
	}
	if ct.table.len() != 2000 || len(ct.expq) != 1000 {
		t.Fatalf("table %d keys, queue %d, want 2000 and 1000", ct.table.len(), len(ct.expq))
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
	if ct.table.len() != 2*501 || len(ct.expq) != 501 {
		t.Errorf("expired entries not collected: table %d keys, queue %d", ct.table.len(), len(ct.expq))
	}
	if n := ct.Delete(CtFilter{OrigSrcPort: 1200}); n != 1 || len(ct.expq) != 500 {
		t.Errorf("delete: %d removed, queue %d", n, len(ct.expq))
	}
}

// The table keys IPv4 tuples (and IPv4-mapped IPv6 ones) by a packed two-word key and IPv6
// tuples by the long one; both find their entries from either direction.
func TestConntrackTableKeys(t *testing.T) {
	m := newCtTable()
	c4, c6 := &Conn{ID: 1}, &Conn{ID: 2}
	t4 := Tuple{Proto: ProtoTCP, Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.96.0.1"), SrcPort: 40000, DstPort: 80}
	t6 := Tuple{Proto: ProtoTCP, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), SrcPort: 40000, DstPort: 80}
	m.put(t4, ctRef{c: c4})
	m.put(t4.Invert(), ctRef{c: c4, reply: true})
	m.put(t6, ctRef{c: c6})
	m.put(t6.Invert(), ctRef{c: c6, reply: true})
	for _, tc := range []struct {
		tu    Tuple
		c     *Conn
		reply bool
	}{
		{t4, c4, false}, {t4.Invert(), c4, true}, {t6, c6, false}, {t6.Invert(), c6, true},
		{Tuple{Proto: ProtoTCP, Src: netip.MustParseAddr("::ffff:10.0.0.1"), Dst: netip.MustParseAddr("::ffff:10.96.0.1"), SrcPort: 40000, DstPort: 80}, c4, false},
	} {
		if r, ok := m.get(tc.tu); !ok || r.c != tc.c || r.reply != tc.reply {
			t.Errorf("get(%s) = %+v, %v; want entry %d reply=%v", tc.tu, r, ok, tc.c.ID, tc.reply)
		}
	}
	for _, miss := range []Tuple{
		{Proto: ProtoUDP, Src: t4.Src, Dst: t4.Dst, SrcPort: 40000, DstPort: 80},
		{Proto: ProtoTCP, Src: t4.Src, Dst: t4.Dst, SrcPort: 40001, DstPort: 80},
		{Proto: ProtoTCP, Src: t4.Src, Dst: t4.Dst, SrcPort: 80, DstPort: 40000},
		{Proto: ProtoTCP, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::3"), SrcPort: 40000, DstPort: 80},
	} {
		if _, ok := m.get(miss); ok {
			t.Errorf("get(%s) found an entry", miss)
		}
	}
	if got := len(m.conns()); got != 2 || m.len() != 4 {
		t.Errorf("conns %d, len %d; want 2 and 4", got, m.len())
	}
	m.delIf(t4, c6) // not c6's: stays
	m.delIf(t4, c4)
	m.delIf(t6.Invert(), c6)
	if _, ok := m.get(t4); ok || m.len() != 2 {
		t.Errorf("after deletes: len %d", m.len())
	}
}
