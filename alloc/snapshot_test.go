package alloc

import (
	"bytes"
	"encoding/json"
	"math/big"
	"net/netip"
	"testing"
)

// Mirrors upstream TestSnapshot: a snapshot restores into an allocator of the
// same range, and not into another.
func TestIPSnapshotRestore(t *testing.T) {
	r := newIP(t, "192.168.1.0/24")
	var ips []netip.Addr
	for i := 0; i < 10; i++ {
		ip, err := r.AllocateNext()
		if err != nil {
			t.Fatal(err)
		}
		ips = append(ips, ip)
	}
	s := r.Snapshot()
	if s.Range != "192.168.1.0/24" {
		t.Fatalf("snapshot range %q", s.Range)
	}
	other := newIP(t, "192.168.2.0/24")
	if err := other.Restore(s); err != ErrMismatchedNetwork {
		t.Fatalf("restore into another CIDR: %v", err)
	}
	if other.Used() != 0 {
		t.Fatal("failed restore changed state")
	}
	same := newIP(t, "192.168.1.0/24")
	_ = same.Allocate(netip.MustParseAddr("192.168.1.2")) // replaced by Restore
	if err := same.Restore(s); err != nil {
		t.Fatal(err)
	}
	for _, ip := range ips {
		if !same.Has(ip) {
			t.Errorf("restored allocator lacks %s", ip)
		}
	}
	if same.Free() != r.Free() || same.Used() != 10 || same.Has(netip.MustParseAddr("192.168.1.2")) {
		t.Errorf("restored counts Free()=%d Used()=%d", same.Free(), same.Used())
	}
}

// Mirrors upstream TestNewFromSnapshot.
func TestNewFromSnapshot(t *testing.T) {
	r := newIP(t, "192.168.0.0/24")
	for i := 0; i < 128; i++ {
		if _, err := r.AllocateNext(); err != nil {
			t.Fatal(err)
		}
	}
	n, err := NewIPAllocatorFromSnapshot(r.Snapshot(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n.Free() != 126 || n.Used() != 128 {
		t.Fatalf("Free()=%d Used()=%d, want 126 128", n.Free(), n.Used())
	}
	r.ForEach(func(ip netip.Addr) {
		if !n.Has(ip) {
			t.Errorf("missing %s", ip)
		}
	})

	p := newPorts(t, "200-300")
	for i := 0; i < 50; i++ {
		if _, err := p.AllocateNext(); err != nil {
			t.Fatal(err)
		}
	}
	np, err := NewPortAllocatorFromSnapshot(p.Snapshot(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if np.Free() != 51 || np.Used() != 50 || np.Range() != p.Range() {
		t.Fatalf("Free()=%d Used()=%d Range()=%v", np.Free(), np.Used(), np.Range())
	}
	if _, err := NewIPAllocatorFromSnapshot(Snapshot{Range: "nonsense"}, nil); err == nil {
		t.Error("bad snapshot range accepted")
	}
	if _, err := NewPortAllocatorFromSnapshot(Snapshot{Range: "300-200"}, nil); err == nil {
		t.Error("bad snapshot port range accepted")
	}
}

// The data is Kubernetes' RangeAllocation encoding: big.Int bytes with bit i
// for offset i (offset 0 = network+1).
func TestSnapshotEncoding(t *testing.T) {
	tests := []struct {
		cidr string
		ips  []string
		want []byte
	}{
		{"10.0.0.0/24", nil, []byte{}},
		{"10.0.0.0/24", []string{"10.0.0.1"}, []byte{0x01}},
		{"10.0.0.0/24", []string{"10.0.0.1", "10.0.0.10"}, []byte{0x02, 0x01}},
		{"10.0.0.0/24", []string{"10.0.0.254"}, append([]byte{0x20}, make([]byte, 31)...)},
		{"10.0.0.0/16", []string{"10.0.0.65", "10.0.0.64"}, []byte{0x01, 0x80, 0, 0, 0, 0, 0, 0, 0}},
	}
	for _, tc := range tests {
		r := newIP(t, tc.cidr)
		want := new(big.Int)
		for _, s := range tc.ips {
			ip := netip.MustParseAddr(s)
			if err := r.Allocate(ip); err != nil {
				t.Fatal(err)
			}
			off, _ := r.offset(ip)
			want.SetBit(want, off, 1)
		}
		got := r.Snapshot().Data
		if !bytes.Equal(got, tc.want) || !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%s %v: data % x, want % x (big.Int % x)", tc.cidr, tc.ips, got, tc.want, want.Bytes())
		}
	}
}

func TestSnapshotJSONRoundTrip(t *testing.T) {
	r := newIP(t, "fd00::/112")
	for i := 0; i < 300; i++ {
		if _, err := r.AllocateNext(); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.Marshal(r.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	n := newIP(t, "fd00::/112")
	if err := n.Restore(s); err != nil {
		t.Fatal(err)
	}
	var a, c []netip.Addr
	r.ForEach(func(ip netip.Addr) { a = append(a, ip) })
	n.ForEach(func(ip netip.Addr) { c = append(c, ip) })
	if len(a) != 300 || len(a) != len(c) {
		t.Fatalf("round trip: %d vs %d", len(a), len(c))
	}
	for i := range a {
		if a[i] != c[i] {
			t.Fatalf("round trip differs at %d: %s vs %s", i, a[i], c[i])
		}
	}
}

func TestRestoreRejectsBitsOutsideRange(t *testing.T) {
	r := newIP(t, "10.0.0.0/24") // 254 usable: offsets 0..253
	_ = r.Allocate(netip.MustParseAddr("10.0.0.1"))
	bad := new(big.Int).SetBit(new(big.Int), 254, 1) // would be the broadcast
	err := r.Restore(Snapshot{Range: "10.0.0.0/24", Data: bad.Bytes()})
	if err == nil || err.Error() != "restore 10.0.0.0/24: snapshot data marks offset 254 but the range has only 254 usable values" {
		t.Fatalf("Restore = %v", err)
	}
	if r.Used() != 1 {
		t.Fatal("failed Restore changed state")
	}
	// Leading zero bytes are accepted.
	if err := r.Restore(Snapshot{Range: "10.0.0.0/24", Data: []byte{0, 0, 0x03}}); err != nil || r.Used() != 2 {
		t.Fatalf("Restore with leading zeros: %v, Used()=%d", err, r.Used())
	}

	p := newPorts(t, "30000-30009")
	if err := p.Restore(Snapshot{Range: "30000-30009", Data: []byte{0x04, 0x00}}); err == nil {
		t.Fatal("port Restore accepted a bit past the range")
	}
}

// FuzzRestore feeds arbitrary snapshot data: Restore either refuses it and
// leaves the allocator alone, or takes it, and then the counts agree with the
// bits and the snapshot re-encodes canonically.
func FuzzRestore(f *testing.F) {
	f.Add("10.0.0.0/24", []byte{0x01})
	f.Add("10.0.0.0/28", []byte{0x3f, 0xff})
	f.Add("fd00::/120", []byte{0, 0, 0x80, 0x01})
	f.Add("30000-30100", []byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, rng string, data []byte) {
		if len(data) > 1<<14 {
			return
		}
		var snap func() Snapshot
		var restore func(Snapshot) error
		var used, free, usable func() int
		var walk func(func())
		if pfx, err := netip.ParsePrefix(rng); err == nil {
			if pfx.Addr().Is4() && pfx.Bits() < 16 {
				return
			}
			a, err := NewIPAllocator(pfx, nil)
			if err != nil {
				return
			}
			snap, restore, used, free, usable = a.Snapshot, a.Restore, a.Used, a.Free, a.Usable
			walk = func(fn func()) { a.ForEach(func(netip.Addr) { fn() }) }
		} else if pr, err := ParsePortRange(rng); err == nil {
			a, err := NewPortAllocator(pr, nil)
			if err != nil {
				return
			}
			snap, restore, used, free, usable = a.Snapshot, a.Restore, a.Used, a.Free, a.Usable
			walk = func(fn func()) { a.ForEach(func(int) { fn() }) }
		} else {
			return
		}
		before := snap()
		err := restore(Snapshot{Range: before.Range, Data: data})
		if err != nil {
			if after := snap(); !bytes.Equal(after.Data, before.Data) {
				t.Fatalf("failed Restore changed state")
			}
			return
		}
		n := 0
		walk(func() { n++ })
		if used() != n || used()+free() != usable() {
			t.Fatalf("Used()=%d Free()=%d Usable()=%d, ForEach saw %d", used(), free(), usable(), n)
		}
		want := new(big.Int).SetBytes(data).Bytes()
		if got := snap().Data; !bytes.Equal(got, want) {
			t.Fatalf("re-encoded % x, want % x", got, want)
		}
	})
}

func FuzzParsePortRange(f *testing.F) {
	for _, s := range []string{"30000-32767", "30000+2767", "8080", "", "1-2-3", "65535", "0-0", " 1-2 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParsePortRange(s)
		if err != nil {
			if r != (PortRange{}) {
				t.Fatalf("error with non-zero range %+v", r)
			}
			return
		}
		if r.Size < 1 || r.Base < 0 || r.Last() > 65535 {
			t.Fatalf("ParsePortRange(%q) = %+v, outside 0-65535", s, r)
		}
		back, err := ParsePortRange(r.String())
		if err != nil || back != r {
			t.Fatalf("round trip %q → %q → %+v, %v", s, r.String(), back, err)
		}
		if _, err := NewPortAllocator(r, nil); err != nil {
			t.Fatalf("NewPortAllocator(%+v): %v", r, err)
		}
	})
}
