package alloc

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"testing"

	"pgregory.net/rapid"
)

// harness drives an IP or port allocator through integer indexes: index i is
// the i-th usable value; indexes below 0 or at/after usable are out of range.
type harness struct {
	name           string
	usable, static int
	allocate       func(i int) error
	next           func() (int, error)
	release        func(i int)
	has            func(i int) bool
	used, free     func() int
	forEach        func(fn func(int))
	errAllocated   error
}

func ipHarness(a *IPAllocator) harness {
	idx := func(ip netip.Addr) int {
		off, ok := a.offset(ip)
		if !ok {
			panic(fmt.Sprintf("allocator returned unusable %s", ip))
		}
		return off
	}
	return harness{
		name: a.CIDR().String(), usable: a.Usable(), static: a.StaticBand(),
		allocate: func(i int) error { return a.Allocate(a.addr(i)) },
		next: func() (int, error) {
			ip, err := a.AllocateNext()
			if err != nil {
				return -1, err
			}
			return idx(ip), nil
		},
		release: func(i int) { a.Release(a.addr(i)) },
		has:     func(i int) bool { return a.Has(a.addr(i)) },
		used:    a.Used, free: a.Free,
		forEach:      func(fn func(int)) { a.ForEach(func(ip netip.Addr) { fn(idx(ip)) }) },
		errAllocated: ErrIPAllocated,
	}
}

func portHarness(a *PortAllocator) harness {
	b := a.Range().Base
	return harness{
		name: a.Range().String(), usable: a.Usable(), static: a.StaticBand(),
		allocate: func(i int) error { return a.Allocate(b + i) },
		next: func() (int, error) {
			p, err := a.AllocateNext()
			return p - b, err
		},
		release: func(i int) { a.Release(b + i) },
		has:     func(i int) bool { return a.Has(b + i) },
		used:    a.Used, free: a.Free,
		forEach:      func(fn func(int)) { a.ForEach(func(p int) { fn(p - b) }) },
		errAllocated: ErrPortAllocated,
	}
}

var propCIDRs = []string{
	"10.0.0.0/30", "10.0.0.0/28", "10.0.0.0/27", "10.0.0.0/26", "10.0.0.0/24", "10.0.0.0/23",
	"fd00::/127", "fd00::/124", "fd00::/123", "fd00::/120", "fd00::/118",
}

func drawHarness(t *rapid.T) harness {
	seed := rapid.Uint64().Draw(t, "seed")
	rng := rand.New(rand.NewPCG(seed, 0))
	if rapid.Bool().Draw(t, "ports") {
		size := rapid.IntRange(1, 300).Draw(t, "size")
		a, err := NewPortAllocator(PortRange{Base: 30000, Size: size}, rng)
		if err != nil {
			t.Fatal(err)
		}
		return portHarness(a)
	}
	cidr := rapid.SampledFrom(propCIDRs).Draw(t, "cidr")
	a, err := NewIPAllocator(netip.MustParsePrefix(cidr), rng)
	if err != nil {
		t.Fatal(err)
	}
	return ipHarness(a)
}

// Any sequence of Allocate / AllocateNext / Release keeps the allocator equal
// to a model set: Used+Free = usable, Has agrees, ForEach lists the set in
// order, AllocateNext never returns a held value and never a static-band value
// while the dynamic band has room.
func TestPropAllocatorMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := drawHarness(t)
		model := map[int]bool{}
		dynamicHeld := func() int {
			n := 0
			for i := range model {
				if i >= h.static {
					n++
				}
			}
			return n
		}
		anyIndex := rapid.IntRange(-2, h.usable+1)
		t.Repeat(map[string]func(*rapid.T){
			"allocate": func(t *rapid.T) {
				i := anyIndex.Draw(t, "i")
				err := h.allocate(i)
				switch {
				case i < 0 || i >= h.usable:
					if !IsNotInRange(err) {
						t.Fatalf("%s: allocate(%d) = %v, want not in range", h.name, i, err)
					}
				case model[i]:
					if err != h.errAllocated {
						t.Fatalf("%s: allocate(%d) held = %v, want already allocated", h.name, i, err)
					}
				default:
					if err != nil {
						t.Fatalf("%s: allocate(%d) = %v", h.name, i, err)
					}
					model[i] = true
				}
			},
			"next": func(t *rapid.T) {
				// Several in a row, so that bands fill up within a run.
				for n := rapid.IntRange(1, 64).Draw(t, "n"); n > 0; n-- {
					dynamicRoom := dynamicHeld() < h.usable-h.static
					i, err := h.next()
					if len(model) == h.usable {
						if err != ErrFull {
							t.Fatalf("%s: next on full = %d, %v", h.name, i, err)
						}
						return
					}
					if err != nil {
						t.Fatalf("%s: next with %d free: %v", h.name, h.usable-len(model), err)
					}
					if i < 0 || i >= h.usable || model[i] {
						t.Fatalf("%s: next returned %d (held=%v)", h.name, i, model[i])
					}
					if dynamicRoom && i < h.static {
						t.Fatalf("%s: next returned static-band index %d while the dynamic band had room", h.name, i)
					}
					model[i] = true
				}
			},
			"release": func(t *rapid.T) {
				i := anyIndex.Draw(t, "i")
				if len(model) > 0 && rapid.Bool().Draw(t, "held") {
					keys := sortedKeys(model)
					i = rapid.SampledFrom(keys).Draw(t, "heldIndex")
				}
				h.release(i)
				delete(model, i)
			},
			"": func(t *rapid.T) {
				if h.used() != len(model) || h.used()+h.free() != h.usable {
					t.Fatalf("%s: Used()=%d Free()=%d usable=%d model=%d", h.name, h.used(), h.free(), h.usable, len(model))
				}
				for _, i := range []int{-1, 0, h.static, h.usable - 1, h.usable} {
					if h.has(i) != model[i] {
						t.Fatalf("%s: has(%d)=%v, model %v", h.name, i, h.has(i), model[i])
					}
				}
				var got []int
				h.forEach(func(i int) { got = append(got, i) })
				if want := sortedKeys(model); !slices.Equal(got, want) {
					t.Fatalf("%s: ForEach %v, model %v", h.name, got, want)
				}
			},
		})
	})
}

func sortedKeys[K int](m map[K]bool) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(a, b int) bool { return out[a] < out[b] })
	return out
}

// Snapshot → Restore into a fresh allocator of the same range reproduces the
// state exactly, whatever it was.
func TestPropSnapshotRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cidr := rapid.SampledFrom(propCIDRs).Draw(t, "cidr")
		a, _ := NewIPAllocator(netip.MustParsePrefix(cidr), rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 1)))
		for _, i := range rapid.SliceOf(rapid.IntRange(0, a.Usable())).Draw(t, "ops") {
			if i == a.Usable() {
				_, _ = a.AllocateNext()
			} else {
				_ = a.Allocate(a.addr(i))
			}
		}
		b, _ := NewIPAllocator(netip.MustParsePrefix(cidr), nil)
		if err := b.Restore(a.Snapshot()); err != nil {
			t.Fatal(err)
		}
		var x, y []netip.Addr
		a.ForEach(func(ip netip.Addr) { x = append(x, ip) })
		b.ForEach(func(ip netip.Addr) { y = append(y, ip) })
		if !slices.Equal(x, y) || a.Free() != b.Free() {
			t.Fatalf("restored %v (free %d), want %v (free %d)", y, b.Free(), x, a.Free())
		}
	})
}

func TestPropStaticBandFormulas(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.IntRange(1, 65536).Draw(t, "size")
		got := portStaticBand(size)
		want := 0
		if size > 16 {
			want = size / 32
			if want < 16 {
				want = 16
			}
			if want > 128 {
				want = 128
			}
		}
		if got != want || (size > 16 && got >= size) {
			t.Fatalf("portStaticBand(%d) = %d, want %d", size, got, want)
		}
	})
}
