package netsim

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"github.com/clusterlab/clusterlab/netfilter"
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
	t4 := netfilter.Tuple{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.96.0.1"), SrcPort: 40000, DstPort: 80}
	t6 := netfilter.Tuple{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), SrcPort: 40000, DstPort: 80}
	m.put(t4, ctRef{c: c4})
	m.put(t4.Invert(), ctRef{c: c4, reply: true})
	m.put(t6, ctRef{c: c6})
	m.put(t6.Invert(), ctRef{c: c6, reply: true})
	for _, tc := range []struct {
		tu    netfilter.Tuple
		c     *Conn
		reply bool
	}{
		{t4, c4, false}, {t4.Invert(), c4, true}, {t6, c6, false}, {t6.Invert(), c6, true},
		{netfilter.Tuple{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("::ffff:10.0.0.1"), Dst: netip.MustParseAddr("::ffff:10.96.0.1"), SrcPort: 40000, DstPort: 80}, c4, false},
	} {
		if r, ok := m.get(tc.tu); !ok || r.c != tc.c || r.reply != tc.reply {
			t.Errorf("get(%s) = %+v, %v; want entry %d reply=%v", tc.tu, r, ok, tc.c.ID, tc.reply)
		}
	}
	for _, miss := range []netfilter.Tuple{
		{Proto: netfilter.ProtoUDP, Src: t4.Src, Dst: t4.Dst, SrcPort: 40000, DstPort: 80},
		{Proto: netfilter.ProtoTCP, Src: t4.Src, Dst: t4.Dst, SrcPort: 40001, DstPort: 80},
		{Proto: netfilter.ProtoTCP, Src: t4.Src, Dst: t4.Dst, SrcPort: 80, DstPort: 40000},
		{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::3"), SrcPort: 40000, DstPort: 80},
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

// Every CtFilter field selects as the conntrack tool's option does, and Delete and Flush
// remove what the filter selects.
func TestCtFilter(t *testing.T) {
	a := netip.MustParseAddr
	mark := uint32(7)
	other := uint32(8)
	est, syn := TCPEstablished, TCPSynSent
	// A DNATed TCP connection to a ClusterIP, as a node sees it.
	tcp := &Conn{
		Orig:     netfilter.Tuple{Proto: netfilter.ProtoTCP, Src: a("10.244.0.2"), Dst: a("10.96.0.10"), SrcPort: 40000, DstPort: 80},
		Reply:    netfilter.Tuple{Proto: netfilter.ProtoTCP, Src: a("10.244.1.5"), Dst: a("10.244.0.2"), SrcPort: 8080, DstPort: 40000},
		Status:   netfilter.StatusDstNAT | netfilter.StatusConfirmed | netfilter.StatusSeenReply | netfilter.StatusAssured,
		TCPState: TCPEstablished,
		Mark:     7,
	}
	udp6 := &Conn{
		Orig:   netfilter.Tuple{Proto: netfilter.ProtoUDP, Src: a("fd00::2"), Dst: a("fd00:96::a"), SrcPort: 5353, DstPort: 53},
		Reply:  netfilter.Tuple{Proto: netfilter.ProtoUDP, Src: a("fd00:96::a"), Dst: a("fd00::2"), SrcPort: 53, DstPort: 5353},
		Status: netfilter.StatusConfirmed,
	}
	for _, tc := range []struct {
		name      string
		f         CtFilter
		tcp, udp6 bool
	}{
		{"empty", CtFilter{}, true, true},
		{"-f ipv4", CtFilter{Family: 4}, true, false},
		{"-f ipv6", CtFilter{Family: 6}, false, true},
		{"-p tcp", CtFilter{Proto: netfilter.ProtoTCP}, true, false},
		{"-p udp", CtFilter{Proto: netfilter.ProtoUDP}, false, true},
		{"--orig-src", CtFilter{OrigSrc: a("10.244.0.2")}, true, false},
		{"--orig-dst", CtFilter{OrigDst: a("10.96.0.10")}, true, false},
		{"--orig-dst other", CtFilter{OrigDst: a("10.96.0.11")}, false, false},
		{"--orig-port-src", CtFilter{OrigSrcPort: 5353}, false, true},
		{"--orig-port-dst", CtFilter{OrigDstPort: 80}, true, false},
		{"--reply-src (the DNAT target)", CtFilter{ReplySrc: a("10.244.1.5")}, true, false},
		{"--reply-dst", CtFilter{ReplyDst: a("fd00::2")}, false, true},
		{"--reply-port-src", CtFilter{ReplySrcPort: 8080}, true, false},
		{"--reply-port-dst", CtFilter{ReplyDstPort: 5353}, false, true},
		{"--mark", CtFilter{Mark: &mark}, true, false},
		{"--mark other", CtFilter{Mark: &other}, false, false},
		{"--status DST_NAT", CtFilter{Status: netfilter.StatusDstNAT}, true, false},
		{"--status CONFIRMED", CtFilter{Status: netfilter.StatusConfirmed}, true, true},
		{"--state ESTABLISHED", CtFilter{TCPState: &est}, true, false},
		{"--state SYN_SENT", CtFilter{TCPState: &syn}, false, false},
		{"-p udp --orig-dst --dport (kube-proxy's stale UDP clean-up)", CtFilter{Proto: netfilter.ProtoUDP, OrigDst: a("fd00:96::a"), OrigDstPort: 53}, false, true},
		{"two fields, one differs", CtFilter{Proto: netfilter.ProtoTCP, OrigDstPort: 53}, false, false},
	} {
		if got := tc.f.Match(tcp); got != tc.tcp {
			t.Errorf("%s: TCP entry matched %v, want %v", tc.name, got, tc.tcp)
		}
		if got := tc.f.Match(udp6); got != tc.udp6 {
			t.Errorf("%s: UDP/IPv6 entry matched %v, want %v", tc.name, got, tc.udp6)
		}
	}

	// Delete and Flush on a live table.
	now := Epoch
	ct := NewConntrack(func() time.Time { return now }, ConntrackSettings{})
	for _, pkt := range [][]byte{
		BuildUDP(netip.MustParseAddrPort("10.0.0.1:1000"), netip.MustParseAddrPort("10.96.0.10:53"), nil),
		BuildUDP(netip.MustParseAddrPort("10.0.0.1:1001"), netip.MustParseAddrPort("10.96.0.10:53"), nil),
		BuildUDP(netip.MustParseAddrPort("10.0.0.1:1002"), netip.MustParseAddrPort("10.96.0.11:53"), nil),
		BuildUDP(netip.MustParseAddrPort("[fd00::1]:1000"), netip.MustParseAddrPort("[fd00:96::a]:53"), nil),
		BuildTCP(TCPSegment{Src: netip.MustParseAddrPort("10.0.0.1:2000"), Dst: netip.MustParseAddrPort("10.96.0.10:53"), Flags: netfilter.TCPSyn, Seq: 1, WindowScale: -1}),
	} {
		pk, err := ParsePacket(pkt)
		if err != nil {
			t.Fatal(err)
		}
		if r := ct.in(pk, now); !r.isNew || !ct.confirm(r.conn) {
			t.Fatalf("%s: not a new confirmed entry", pk)
		}
	}
	if n := ct.Delete(CtFilter{Family: 4, Proto: netfilter.ProtoUDP, OrigDst: netip.MustParseAddr("10.96.0.10")}); n != 2 {
		t.Errorf("conntrack -D -f ipv4 -p udp --orig-dst 10.96.0.10: %d deleted, want 2", n)
	}
	if got := len(ct.List(CtFilter{})); got != 3 {
		t.Errorf("%d entries left, want 3", got)
	}
	if n := ct.Flush(); n != 3 || ct.Len() != 0 || ct.table.len() != 0 || len(ct.expq) != 0 {
		t.Errorf("flush: %d removed; %d entries, %d keys, %d queued left", n, ct.Len(), ct.table.len(), len(ct.expq))
	}
}

// The IPv4 table (open addressing, deletion by shifting) agrees with a Go map through
// random inserts, overwrites and deletions that grow and shrink it, with keys crowded
// into few addresses and ports as a node's tuples are.
func TestConntrackTableAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	m := newCtTable()
	model := map[netfilter.Tuple]ctRef{}
	conns := make([]*Conn, 64)
	for i := range conns {
		conns[i] = &Conn{ID: uint64(i)}
	}
	tuple := func() netfilter.Tuple {
		return netfilter.Tuple{
			Proto:   []uint8{netfilter.ProtoTCP, netfilter.ProtoUDP}[rng.IntN(2)],
			Src:     netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(4))}),
			Dst:     netip.AddrFrom4([4]byte{10, 96, 0, byte(rng.IntN(4))}),
			SrcPort: uint16(32768 + rng.IntN(3000)),
			DstPort: uint16(80 + rng.IntN(2)),
		}
	}
	var keys []netfilter.Tuple
	check := func(step int) {
		if m.len() != len(model) {
			t.Fatalf("step %d: table holds %d tuples, model %d", step, m.len(), len(model))
		}
		for _, k := range keys {
			got, ok := m.get(k)
			want, wok := model[k]
			if ok != wok || got != want {
				t.Fatalf("step %d: get(%v) = %v %v, want %v %v", step, k, got, ok, want, wok)
			}
		}
	}
	for step := 0; step < 60000; step++ {
		switch {
		case step < 30000 && rng.IntN(4) != 0 || step >= 30000 && rng.IntN(4) == 0:
			k := tuple()
			r := ctRef{c: conns[rng.IntN(len(conns))], reply: rng.IntN(2) == 0}
			m.put(k, r)
			if _, ok := model[k]; !ok {
				keys = append(keys, k)
			}
			model[k] = r
		case len(keys) > 0:
			i := rng.IntN(len(keys))
			k := keys[i]
			c := model[k].c
			if rng.IntN(8) == 0 {
				c = conns[rng.IntN(len(conns))] // delIf with another entry may leave it
			}
			m.delIf(k, c)
			if model[k].c == c {
				delete(model, k)
				keys[i] = keys[len(keys)-1]
				keys = keys[:len(keys)-1]
			}
		}
		if step%1000 == 0 {
			check(step)
		}
	}
	check(60000)
	for len(keys) > 0 {
		k := keys[len(keys)-1]
		m.delIf(k, model[k].c)
		delete(model, k)
		keys = keys[:len(keys)-1]
	}
	size := len(m.slots)
	check(-1)
	if size < 1024 {
		t.Fatalf("the table grew to %d slots only", size)
	}
	// Deletions keep the slots (as the kernel's hash keeps its buckets); release, which
	// a Delete or Flush that empties the table calls, gives them back.
	m.release()
	if m.slots != nil || m.len() != 0 {
		t.Errorf("released table keeps %d slots, %d tuples", len(m.slots), m.len())
	}
	k := tuple()
	m.put(k, ctRef{c: conns[0]})
	if got, ok := m.get(k); !ok || got.c != conns[0] || len(m.slots) != ctMinSlots {
		t.Errorf("after release: get = %v %v, %d slots", got, ok, len(m.slots))
	}
}

// The fields every packet writes (Status to tcp) fill the last two cache lines of an
// entry, and entries are 320 bytes, which the allocator places 64-byte aligned.
func TestConnLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is planned for 64-bit platforms")
	}
	var c Conn
	if size, status, end := unsafe.Sizeof(c), unsafe.Offsetof(c.Status), unsafe.Offsetof(c.tcp)+unsafe.Sizeof(c.tcp); size != 320 || status != 192 || end != 320 {
		t.Errorf("Conn is %d bytes with Status at %d and tcp ending at %d, want 320, 192 and 320", size, status, end)
	}
}
