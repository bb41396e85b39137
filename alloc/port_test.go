package alloc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func newPorts(t testing.TB, r string) *PortAllocator {
	t.Helper()
	pr, err := ParsePortRange(r)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewPortAllocator(pr, rand.New(rand.NewPCG(3, 4)))
	if err != nil {
		t.Fatalf("NewPortAllocator(%s): %v", r, err)
	}
	return a
}

// Mirrors upstream portallocator TestAllocate.
func TestPortAllocateFillAndRelease(t *testing.T) {
	r := newPorts(t, "10000-10200")
	if r.Free() != 201 || r.Used() != 0 {
		t.Fatalf("fresh: Free()=%d Used()=%d", r.Free(), r.Used())
	}
	seen := map[int]bool{}
	for r.Free() > 0 {
		p, err := r.AllocateNext()
		if err != nil {
			t.Fatalf("AllocateNext @%d: %v", len(seen), err)
		}
		if p < 10000 || p > 10200 || seen[p] {
			t.Fatalf("AllocateNext returned %d (out of range or twice)", p)
		}
		seen[p] = true
	}
	if _, err := r.AllocateNext(); err != ErrFull {
		t.Fatalf("AllocateNext on full range: %v", err)
	}
	r.Release(10005)
	if r.Free() != 1 || r.Used() != 200 {
		t.Fatalf("after release: Free()=%d Used()=%d", r.Free(), r.Used())
	}
	if p, err := r.AllocateNext(); err != nil || p != 10005 {
		t.Fatalf("AllocateNext = %d, %v; want 10005", p, err)
	}
	r.Release(10005)
	for _, p := range []int{1, 9999, 10201, 20000, -1} {
		err := r.Allocate(p)
		var nr *NotInRangeError
		if !errors.As(err, &nr) || nr.Port != p || nr.Resource != ResourceNodePort || nr.ValidRange != "10000-10200" {
			t.Errorf("Allocate(%d) = %v, want NotInRangeError", p, err)
		}
	}
	if err := r.Allocate(10001); err != ErrPortAllocated {
		t.Errorf("Allocate(10001) = %v, want ErrPortAllocated", err)
	}
	if err := r.Allocate(10005); err != nil {
		t.Fatal(err)
	}
	if r.Free() != 0 || r.Used() != 201 {
		t.Fatalf("full: Free()=%d Used()=%d", r.Free(), r.Used())
	}
}

func TestPortStaticBand(t *testing.T) {
	tests := []struct {
		r                string
		static           int
		staticLastPort   int // last port of the static band; 0 when none
		firstDynamicPort int
	}{
		{"30000-32767", 86, 30085, 30086},
		{"30000-30128", 16, 30015, 30016}, // size 129
		{"30000-30016", 16, 30015, 30016}, // size 17: one dynamic port
		{"30000-30015", 0, 0, 30000},      // size 16
		{"30000", 0, 0, 30000},
		{"1-65535", 128, 128, 129},
		{"20000-21023", 32, 20031, 20032}, // size 1024
		{"10000-10200", 16, 10015, 10016},
	}
	for _, tc := range tests {
		t.Run(tc.r, func(t *testing.T) {
			a := newPorts(t, tc.r)
			if a.StaticBand() != tc.static {
				t.Fatalf("StaticBand() = %d, want %d", a.StaticBand(), tc.static)
			}
			if tc.static > 0 && (!a.InStaticBand(a.Range().Base) || !a.InStaticBand(tc.staticLastPort) || a.InStaticBand(tc.firstDynamicPort)) {
				t.Errorf("static band is not %d-%d", a.Range().Base, tc.staticLastPort)
			}
			if tc.static == 0 && a.InStaticBand(a.Range().Base) {
				t.Errorf("InStaticBand(%d) true without a static band", a.Range().Base)
			}
			// The static band is used last.
			for i := 0; i < a.Usable()-a.StaticBand(); i++ {
				p, err := a.AllocateNext()
				if err != nil || a.InStaticBand(p) {
					t.Fatalf("dynamic AllocateNext #%d = %d, %v", i, p, err)
				}
			}
			for i := 0; i < a.StaticBand(); i++ {
				p, err := a.AllocateNext()
				if err != nil || !a.InStaticBand(p) {
					t.Fatalf("static AllocateNext #%d = %d, %v", i, p, err)
				}
			}
			if _, err := a.AllocateNext(); err != ErrFull {
				t.Fatalf("AllocateNext = %v, want ErrFull", err)
			}
		})
	}
}

func TestPortErrorMessages(t *testing.T) {
	a := newPorts(t, "30000-32767")
	_ = a.Allocate(30080)
	one := newPorts(t, "30000")
	_, _ = one.AllocateNext()
	_, fullErr := one.AllocateNext()
	other := newPorts(t, "200-300")
	tests := []struct {
		err  error
		want string
	}{
		{a.Allocate(30080), "provided port is already allocated"},
		{a.Allocate(80), "provided port is not in the valid range. The range of valid ports is 30000-32767"},
		{a.Allocate(32768), "provided port is not in the valid range. The range of valid ports is 30000-32767"},
		{fullErr, "range is full"},
		{a.Restore(other.Snapshot()), "the provided port range does not match the current port range"},
	}
	for _, tc := range tests {
		if tc.err == nil || tc.err.Error() != tc.want {
			t.Errorf("error = %v\nwant    %s", tc.err, tc.want)
		}
	}
	if err := a.Allocate(30080); !IsAllocated(err) || !errors.Is(err, ErrPortAllocated) || errors.Is(err, ErrIPAllocated) {
		t.Errorf("ErrPortAllocated predicates wrong: %v", err)
	}
	if err := fmt.Errorf("restore: %w", a.Restore(other.Snapshot())); !IsMismatchedNetwork(err) || !errors.Is(err, ErrMismatchedPortRange) {
		t.Errorf("mismatched port range predicates wrong: %v", err)
	}
}

func TestParsePortRange(t *testing.T) {
	tests := []struct {
		in      string
		want    PortRange
		wantErr string
	}{
		{in: "30000-32767", want: PortRange{30000, 2768}},
		{in: " 30000-32767\n", want: PortRange{30000, 2768}},
		{in: "30000+2767", want: PortRange{30000, 2768}},
		{in: "8080", want: PortRange{8080, 1}},
		{in: "0-65535", want: PortRange{0, 65536}},
		{in: "", wantErr: `port range "" is empty`},
		{in: "   ", wantErr: `port range "   " is empty`},
		{in: "32767-30000", wantErr: `port range "32767-30000": end port cannot be less than start port`},
		{in: "30000-70000", wantErr: `port range "30000-70000": the port range cannot be greater than 65535`},
		{in: "65000+1000", wantErr: `port range "65000+1000": the port range cannot be greater than 65535`},
		{in: "-5", wantErr: `port range "-5": start port "" is not a number`},
		{in: "a-b", wantErr: `port range "a-b": start port "a" is not a number`},
		{in: "1-2-3", wantErr: `port range "1-2-3": end port "2-3" is not a number`},
		{in: "1-2+3", wantErr: `port range "1-2+3": use either min-max or min+offset`},
		{in: "30000 - 32767", wantErr: `port range "30000 - 32767": start port "30000 " is not a number`},
		{in: "99999999999999999999999", wantErr: `port range "99999999999999999999999": the port range cannot be greater than 65535`},
	}
	for _, tc := range tests {
		got, err := ParsePortRange(tc.in)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("ParsePortRange(%q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParsePortRange(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if back, err := ParsePortRange(got.String()); err != nil || back != got {
			t.Errorf("round trip of %q via %q = %+v, %v", tc.in, got.String(), back, err)
		}
	}
	if s := (PortRange{}).String(); s != "" {
		t.Errorf("empty PortRange.String() = %q", s)
	}
}

func TestNewPortAllocatorRejects(t *testing.T) {
	for _, tc := range []struct {
		r    PortRange
		want string
	}{
		{PortRange{}, "port range 0+0 is empty"},
		{PortRange{Base: 30000, Size: -1}, "port range 30000+-1 is empty"},
		{PortRange{Base: -1, Size: 10}, "port range -1-8 is outside 0-65535"},
		{PortRange{Base: 65000, Size: 1000}, "port range 65000-65999 is outside 0-65535"},
	} {
		if _, err := NewPortAllocator(tc.r, nil); err == nil || err.Error() != tc.want {
			t.Errorf("NewPortAllocator(%+v) = %v, want %q", tc.r, err, tc.want)
		}
	}
}

func TestPortForEachAscendingAndRelease(t *testing.T) {
	for _, set := range [][]int{{}, {10000}, {10200, 10000}, {10099, 10200, 10000, 10063, 10064}} {
		a := newPorts(t, "10000-10200")
		for _, p := range set {
			if err := a.Allocate(p); err != nil {
				t.Fatal(err)
			}
		}
		want := slices.Sorted(slices.Values(set))
		var got []int
		a.ForEach(func(p int) { got = append(got, p) })
		if !slices.Equal(got, want) {
			t.Errorf("ForEach = %v, want %v", got, want)
		}
		a.Release(1)
		a.Release(99999)
		a.Release(10150)
		if a.Used() != len(set) {
			t.Errorf("lenient releases changed Used() to %d", a.Used())
		}
	}
}
