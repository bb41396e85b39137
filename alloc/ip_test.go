package alloc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func newIP(t testing.TB, cidr string) *IPAllocator {
	t.Helper()
	a, err := NewIPAllocator(netip.MustParsePrefix(cidr), rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatalf("NewIPAllocator(%s): %v", cidr, err)
	}
	return a
}

// Mirrors upstream ipallocator TestAllocate: fill the range with AllocateNext,
// check uniqueness and membership, release one and get it back, then the
// out-of-range and already-allocated errors.
func TestIPAllocateFillAndRelease(t *testing.T) {
	tests := []struct {
		cidr             string
		family           corev1.IPFamily
		free             int
		released         string
		outOfRange       []string
		alreadyAllocated string
	}{
		{
			cidr: "192.168.1.0/24", family: corev1.IPv4Protocol, free: 254, released: "192.168.1.5",
			outOfRange:       []string{"192.168.0.1", "192.168.1.0", "192.168.1.255", "192.168.2.2"},
			alreadyAllocated: "192.168.1.1",
		},
		{
			cidr: "10.0.0.0/15", family: corev1.IPv4Protocol, free: 131070, released: "10.0.0.5",
			outOfRange:       []string{"10.0.0.0", "10.1.255.255", "10.255.255.2"},
			alreadyAllocated: "10.0.0.1",
		},
		{
			cidr: "2001:db8:1::/48", family: corev1.IPv6Protocol, free: 65535, released: "2001:db8:1::5",
			outOfRange:       []string{"2001:db8::1", "2001:db8:1::", "2001:db8:1::1:0", "2001:db8:2::2"},
			alreadyAllocated: "2001:db8:1::1",
		},
		{
			// "IPv6 clusterIP range is capped to 2^16 and consider the broadcast address as valid"
			cidr: "2001:db8::/112", family: corev1.IPv6Protocol, free: 65535, released: "2001:db8::ffff",
			outOfRange:       []string{"2001:db8::", "2001:db8::1:0", "10.0.0.1"},
			alreadyAllocated: "2001:db8::1",
		},
	}
	for _, tc := range tests {
		t.Run(tc.cidr, func(t *testing.T) {
			r := newIP(t, tc.cidr)
			if got := r.CIDR().String(); got != tc.cidr {
				t.Errorf("CIDR() = %s, want %s", got, tc.cidr)
			}
			if got := r.Family(); got != tc.family {
				t.Errorf("Family() = %s, want %s", got, tc.family)
			}
			if f, u := r.Free(), r.Used(); f != tc.free || u != 0 {
				t.Fatalf("fresh: Free()=%d Used()=%d, want %d 0", f, u, tc.free)
			}
			prefix := netip.MustParsePrefix(tc.cidr)
			seen := map[netip.Addr]bool{}
			for r.Free() > 0 {
				ip, err := r.AllocateNext()
				if err != nil {
					t.Fatalf("AllocateNext @%d: %v", len(seen), err)
				}
				if !prefix.Contains(ip) || !r.usable(ip) {
					t.Fatalf("AllocateNext returned %s outside the usable range", ip)
				}
				if seen[ip] {
					t.Fatalf("AllocateNext returned %s twice", ip)
				}
				seen[ip] = true
			}
			if len(seen) != tc.free {
				t.Fatalf("allocated %d addresses, want %d", len(seen), tc.free)
			}
			if _, err := r.AllocateNext(); err != ErrFull {
				t.Fatalf("AllocateNext on a full range: %v, want ErrFull", err)
			}
			released := netip.MustParseAddr(tc.released)
			r.Release(released)
			if f, u := r.Free(), r.Used(); f != 1 || u != tc.free-1 {
				t.Fatalf("after release: Free()=%d Used()=%d, want 1 %d", f, u, tc.free-1)
			}
			ip, err := r.AllocateNext()
			if err != nil || ip != released {
				t.Fatalf("AllocateNext after release = %s, %v; want %s", ip, err, released)
			}
			r.Release(released)
			for _, s := range tc.outOfRange {
				err := r.Allocate(netip.MustParseAddr(s))
				var nr *NotInRangeError
				if !errors.As(err, &nr) || nr.IP != netip.MustParseAddr(s) || nr.ValidRange != tc.cidr {
					t.Errorf("Allocate(%s) = %v, want NotInRangeError", s, err)
				}
			}
			if err := r.Allocate(netip.MustParseAddr(tc.alreadyAllocated)); err != ErrIPAllocated {
				t.Errorf("Allocate(%s) = %v, want ErrIPAllocated", tc.alreadyAllocated, err)
			}
			if f, u := r.Free(), r.Used(); f != 1 || u != tc.free-1 {
				t.Fatalf("after failed allocations: Free()=%d Used()=%d, want 1 %d", f, u, tc.free-1)
			}
			if err := r.Allocate(released); err != nil {
				t.Fatalf("Allocate(%s): %v", released, err)
			}
			if f, u := r.Free(), r.Used(); f != 0 || u != tc.free {
				t.Fatalf("full again: Free()=%d Used()=%d, want 0 %d", f, u, tc.free)
			}
		})
	}
}

func TestIPRangeSizes(t *testing.T) {
	tests := []struct {
		cidr           string
		usable, static int
		first, last    string // first and last usable address; "" when none
		staticLast     string // last address of the static band; "" when none
	}{
		{"192.168.1.1/32", 0, 0, "", "", ""},
		{"192.168.1.0/31", 0, 0, "", "", ""},
		{"192.168.1.0/30", 2, 0, "192.168.1.1", "192.168.1.2", ""},
		{"192.168.1.0/28", 14, 0, "192.168.1.1", "192.168.1.14", ""},
		{"192.168.1.0/27", 30, 16, "192.168.1.1", "192.168.1.30", "192.168.1.16"},
		{"192.168.1.0/25", 126, 16, "192.168.1.1", "192.168.1.126", "192.168.1.16"},
		{"192.168.1.0/24", 254, 16, "192.168.1.1", "192.168.1.254", "192.168.1.16"},
		{"192.168.0.0/22", 1022, 64, "192.168.0.1", "192.168.3.254", "192.168.0.64"},
		{"10.96.0.0/20", 4094, 256, "10.96.0.1", "10.96.15.254", "10.96.1.0"},
		{"10.96.0.0/16", 65534, 256, "10.96.0.1", "10.96.255.254", "10.96.1.0"},
		{"10.96.0.0/12", 1048574, 256, "10.96.0.1", "10.111.255.254", "10.96.1.0"},
		{"10.0.0.0/8", 16777214, 256, "10.0.0.1", "10.255.255.254", "10.0.1.0"},
		{"fd00::1/128", 0, 0, "", "", ""},
		{"fd00::/127", 1, 0, "fd00::1", "fd00::1", ""},
		{"fd00::/126", 3, 0, "fd00::1", "fd00::3", ""},
		{"fd00::/124", 15, 0, "fd00::1", "fd00::f", ""},
		{"fd00::/122", 63, 16, "fd00::1", "fd00::3f", "fd00::10"},
		{"fd00::/120", 255, 16, "fd00::1", "fd00::ff", "fd00::10"},
		{"fd00::/118", 1023, 64, "fd00::1", "fd00::3ff", "fd00::40"},
		{"fd00::/112", 65535, 256, "fd00::1", "fd00::ffff", "fd00::100"},
		{"fd00::/64", 65535, 256, "fd00::1", "fd00::ffff", "fd00::100"},
		{"2001:db8:1::/48", 65535, 256, "2001:db8:1::1", "2001:db8:1::ffff", "2001:db8:1::100"},
		{"fd00::/12", 65535, 256, "fd00::1", "fd00::ffff", "fd00::100"},
		{"::/0", 65535, 256, "::1", "::ffff", "::100"},
	}
	for _, tc := range tests {
		t.Run(tc.cidr, func(t *testing.T) {
			r := newIP(t, tc.cidr)
			if r.Usable() != tc.usable || r.Free() != tc.usable || r.StaticBand() != tc.static {
				t.Fatalf("Usable()=%d Free()=%d StaticBand()=%d, want %d %d %d", r.Usable(), r.Free(), r.StaticBand(), tc.usable, tc.usable, tc.static)
			}
			if tc.usable == 0 {
				if _, err := r.AllocateNext(); err != ErrFull {
					t.Fatalf("AllocateNext = %v, want ErrFull", err)
				}
				return
			}
			first, last := netip.MustParseAddr(tc.first), netip.MustParseAddr(tc.last)
			for _, ip := range slices.Compact([]netip.Addr{first, last}) {
				if err := r.Allocate(ip); err != nil {
					t.Errorf("Allocate(%s): %v", ip, err)
				}
			}
			for _, ip := range []netip.Addr{first.Prev(), last.Next()} {
				if err := r.Allocate(ip); !IsNotInRange(err) {
					t.Errorf("Allocate(%s) = %v, want not in range", ip, err)
				}
			}
			if tc.staticLast == "" {
				if r.InStaticBand(first) {
					t.Errorf("%s reported in the static band of a range without one", first)
				}
				return
			}
			sl := netip.MustParseAddr(tc.staticLast)
			if !r.InStaticBand(first) || !r.InStaticBand(sl) || r.InStaticBand(sl.Next()) {
				t.Errorf("static band is not %s-%s", first, sl)
			}
		})
	}
}

func TestIPStaticBandFormula(t *testing.T) {
	// Upstream Test_calculateRangeOffset, on the raw CIDR size.
	tests := []struct {
		size uint64
		want int
	}{
		{1, 0}, {4, 0}, {16, 0}, {17, 16}, {32, 16}, {256, 16}, {512, 32}, {1024, 64},
		{4096, 256}, {1 << 24, 256}, {1 << 63, 256},
	}
	for _, tc := range tests {
		if got := ipStaticBand(tc.size); got != tc.want {
			t.Errorf("ipStaticBand(%d) = %d, want %d", tc.size, got, tc.want)
		}
	}
}

// Mirrors upstream TestAllocateReserved: AllocateNext fills the whole dynamic
// band before it touches the static band, and only then reports full.
func TestIPStaticBandLast(t *testing.T) {
	for _, cidr := range []string{"192.168.1.0/27", "192.168.1.0/25", "192.168.1.0/24", "10.0.0.0/20", "fd00::/120", "fd00::/116"} {
		t.Run(cidr, func(t *testing.T) {
			r := newIP(t, cidr)
			dynamic := r.Usable() - r.StaticBand()
			var order []netip.Addr
			for i := 0; i < dynamic; i++ {
				ip, err := r.AllocateNext()
				if err != nil {
					t.Fatalf("AllocateNext #%d: %v", i, err)
				}
				if r.InStaticBand(ip) {
					t.Fatalf("AllocateNext #%d returned %s from the static band while the dynamic band had room", i, ip)
				}
				order = append(order, ip)
			}
			if r.Free() != r.StaticBand() {
				t.Fatalf("after the dynamic band: Free()=%d, want %d", r.Free(), r.StaticBand())
			}
			if slices.IsSortedFunc(order, netip.Addr.Compare) {
				t.Errorf("dynamic allocations came out in ascending order; want a random scan")
			}
			for i := 0; i < r.StaticBand(); i++ {
				ip, err := r.AllocateNext()
				if err != nil {
					t.Fatalf("AllocateNext (static) #%d: %v", i, err)
				}
				if !r.InStaticBand(ip) {
					t.Fatalf("AllocateNext returned %s outside the static band after the dynamic band was full", ip)
				}
			}
			if _, err := r.AllocateNext(); err != ErrFull {
				t.Fatalf("AllocateNext = %v, want ErrFull", err)
			}
			// Release one static and one dynamic address: the dynamic one
			// comes back first.
			r.Release(r.addr(3))
			r.Release(r.addr(r.Usable() - 1))
			if ip, _ := r.AllocateNext(); ip != r.addr(r.Usable()-1) {
				t.Fatalf("AllocateNext = %s, want the freed dynamic address %s", ip, r.addr(r.Usable()-1))
			}
			if ip, _ := r.AllocateNext(); ip != r.addr(3) {
				t.Fatalf("AllocateNext = %s, want the freed static address %s", ip, r.addr(3))
			}
		})
	}
}

// Mirrors upstream TestAllocateSmall.
func TestIPAllocateSmall(t *testing.T) {
	r := newIP(t, "192.168.1.240/30")
	if r.Free() != 2 {
		t.Fatalf("Free() = %d, want 2", r.Free())
	}
	got := map[netip.Addr]bool{}
	for i := 0; i < 2; i++ {
		ip, err := r.AllocateNext()
		if err != nil {
			t.Fatal(err)
		}
		got[ip] = true
	}
	want := map[netip.Addr]bool{netip.MustParseAddr("192.168.1.241"): true, netip.MustParseAddr("192.168.1.242"): true}
	if !maps_equal(got, want) {
		t.Fatalf("allocated %v, want %v", got, want)
	}
	for ip := range got {
		if !r.Has(ip) || r.Allocate(ip) != ErrIPAllocated {
			t.Errorf("%s: Has=%v, Allocate=%v", ip, r.Has(ip), r.Allocate(ip))
		}
	}
	for i := 0; i < 100; i++ {
		if _, err := r.AllocateNext(); err != ErrFull {
			t.Fatalf("suddenly not full: %v", err)
		}
	}
}

func maps_equal[K comparable](a, b map[K]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func TestIPForEachAscending(t *testing.T) {
	for _, set := range [][]string{
		{},
		{"192.168.1.1"},
		{"192.168.1.254", "192.168.1.1"},
		{"192.168.1.128", "192.168.1.254", "192.168.1.1", "192.168.1.64"},
	} {
		r := newIP(t, "192.168.1.0/24")
		var want []netip.Addr
		for _, s := range set {
			ip := netip.MustParseAddr(s)
			if err := r.Allocate(ip); err != nil {
				t.Fatal(err)
			}
			want = append(want, ip)
		}
		slices.SortFunc(want, netip.Addr.Compare)
		var got []netip.Addr
		r.ForEach(func(ip netip.Addr) { got = append(got, ip) })
		if !slices.Equal(got, want) {
			t.Errorf("ForEach = %v, want %v", got, want)
		}
	}
}

func TestIPErrorMessages(t *testing.T) {
	r4 := newIP(t, "10.96.0.0/12")
	r6 := newIP(t, "fd00:10:96::/112")
	if err := r4.Allocate(netip.MustParseAddr("10.96.0.10")); err != nil {
		t.Fatal(err)
	}
	full := newIP(t, "10.0.0.0/31")
	_, fullErr := full.AllocateNext()
	tests := []struct {
		err  error
		want string
	}{
		{r4.Allocate(netip.MustParseAddr("10.96.0.10")), "provided IP is already allocated"},
		{r4.Allocate(netip.MustParseAddr("10.112.0.1")), "the provided IP (10.112.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/12"},
		{r4.Allocate(netip.MustParseAddr("10.96.0.0")), "the provided IP (10.96.0.0) is not in the valid range. The range of valid IPs is 10.96.0.0/12"},
		{r4.Allocate(netip.MustParseAddr("10.111.255.255")), "the provided IP (10.111.255.255) is not in the valid range. The range of valid IPs is 10.96.0.0/12"},
		{r4.Allocate(netip.MustParseAddr("::ffff:10.112.0.1")), "the provided IP (10.112.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/12"},
		{r6.Allocate(netip.MustParseAddr("fd00:10:97::1")), "the provided IP (fd00:10:97::1) is not in the valid range. The range of valid IPs is fd00:10:96::/112"},
		{r6.Allocate(netip.MustParseAddr("10.96.0.1")), "the provided IP (10.96.0.1) is not in the valid range. The range of valid IPs is fd00:10:96::/112"},
		{r4.Allocate(netip.Addr{}), "the provided IP (invalid IP) is not in the valid range. The range of valid IPs is 10.96.0.0/12"},
		{fullErr, "range is full"},
		{r4.Restore(r6.Snapshot()), "the provided network does not match the current range"},
	}
	for _, tc := range tests {
		if tc.err == nil || tc.err.Error() != tc.want {
			t.Errorf("error = %v\nwant    %s", tc.err, tc.want)
		}
	}
	// Predicates and wrapping.
	wrapped := fmt.Errorf("failed to allocate IP 10.96.0.10: %w", r4.Allocate(netip.MustParseAddr("10.96.0.10")))
	if !IsAllocated(wrapped) || !errors.Is(wrapped, ErrIPAllocated) || errors.Is(wrapped, ErrPortAllocated) {
		t.Errorf("wrapped ErrIPAllocated not recognised: %v", wrapped)
	}
	if !IsNotInRange(fmt.Errorf("x: %w", r4.Allocate(netip.MustParseAddr("1.2.3.4")))) || IsNotInRange(ErrFull) {
		t.Errorf("IsNotInRange wrong")
	}
	if !IsFull(fmt.Errorf("failed to allocate a serviceIP: %w", fullErr)) || IsFull(ErrIPAllocated) {
		t.Errorf("IsFull wrong")
	}
	if !IsMismatchedNetwork(r4.Restore(r6.Snapshot())) {
		t.Errorf("IsMismatchedNetwork wrong")
	}
}

func TestNewIPAllocatorRejects(t *testing.T) {
	for _, tc := range []struct {
		prefix netip.Prefix
		want   string
	}{
		{netip.Prefix{}, `invalid service CIDR "invalid Prefix"`},
		{netip.MustParsePrefix("10.0.0.0/7"), "service CIDR 10.0.0.0/7 is too large: IPv4 prefixes must be /8 or longer"},
		{netip.MustParsePrefix("::ffff:10.0.0.0/120"), "service CIDR ::ffff:10.0.0.0/120: IPv4-mapped IPv6 prefixes are not supported"},
	} {
		_, err := NewIPAllocator(tc.prefix, nil)
		if err == nil || err.Error() != tc.want {
			t.Errorf("NewIPAllocator(%v) = %v, want %q", tc.prefix, err, tc.want)
		}
	}
	// An unmasked prefix is masked, as ParseCIDR does.
	a, err := NewIPAllocator(netip.MustParsePrefix("10.96.3.7/16"), nil)
	if err != nil || a.CIDR().String() != "10.96.0.0/16" {
		t.Errorf("NewIPAllocator(10.96.3.7/16) = %v, %v", a.CIDR(), err)
	}
}

func TestIPReleaseIsLenient(t *testing.T) {
	r := newIP(t, "10.0.0.0/24")
	ip := netip.MustParseAddr("10.0.0.7")
	_ = r.Allocate(ip)
	for _, s := range []string{"10.0.0.0", "10.0.0.255", "10.0.1.1", "fd00::1", "10.0.0.8"} {
		r.Release(netip.MustParseAddr(s))
	}
	r.Release(netip.Addr{})
	if r.Used() != 1 || !r.Has(ip) {
		t.Fatalf("lenient releases changed state: Used()=%d", r.Used())
	}
	r.Release(ip)
	r.Release(ip)
	if r.Used() != 0 || r.Has(ip) {
		t.Fatalf("release failed: Used()=%d", r.Used())
	}
	if r.Has(netip.Addr{}) || r.Has(netip.MustParseAddr("10.0.0.0")) {
		t.Fatal("Has true for an unusable address")
	}
}

func TestDefaultSeedIsDeterministicAndRandom(t *testing.T) {
	seq := func() []netip.Addr {
		a, err := NewIPAllocator(netip.MustParsePrefix("10.96.0.0/16"), nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []netip.Addr
		for i := 0; i < 20; i++ {
			ip, _ := a.AllocateNext()
			out = append(out, ip)
		}
		return out
	}
	a, b := seq(), seq()
	if !slices.Equal(a, b) {
		t.Fatalf("nil rng is not deterministic:\n%v\n%v", a, b)
	}
	// Not sequential: consecutive picks are not neighbours.
	neighbours := 0
	for i := 1; i < len(a); i++ {
		if a[i] == a[i-1].Next() {
			neighbours++
		}
	}
	if neighbours > 2 {
		t.Fatalf("%d of 19 consecutive picks were neighbours: %v", neighbours, a)
	}
	// A different seed gives a different sequence.
	c, _ := NewIPAllocator(netip.MustParsePrefix("10.96.0.0/16"), rand.New(rand.NewPCG(7, 7)))
	first, _ := c.AllocateNext()
	if first == a[0] {
		t.Errorf("seed 7 and the default seed picked the same first address %s", first)
	}
}

// Concurrent callers never receive the same address (run with -race).
func TestIPAllocateNextConcurrent(t *testing.T) {
	a := newIP(t, "10.0.0.0/22")
	const workers, each = 4, 200
	results := make(chan netip.Addr, workers*each)
	done := make(chan struct{})
	for w := 0; w < workers; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < each; i++ {
				ip, err := a.AllocateNext()
				if err != nil {
					t.Error(err)
					return
				}
				results <- ip
				_ = a.Has(ip)
				_ = a.Snapshot()
			}
		}()
	}
	for w := 0; w < workers; w++ {
		<-done
	}
	close(results)
	seen := map[netip.Addr]bool{}
	for ip := range results {
		if seen[ip] {
			t.Fatalf("%s handed out twice", ip)
		}
		seen[ip] = true
	}
	if len(seen) != workers*each || a.Used() != workers*each {
		t.Fatalf("got %d addresses, Used()=%d", len(seen), a.Used())
	}
}
