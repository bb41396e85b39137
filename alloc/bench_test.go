package alloc

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// BenchmarkAllocateNext measures AllocateNext at a steady fill level: each
// iteration allocates one address and releases it again. Kubernetes' own
// BenchmarkAllocateNextIPv4Size1048574 (a /12 filling up from empty, on
// math/big) is the anchor.
func BenchmarkAllocateNext(b *testing.B) {
	for _, tc := range []struct {
		cidr string
		fill float64
	}{
		{"10.96.0.0/12", 0},
		{"10.96.0.0/12", 0.5},
		{"10.96.0.0/12", 0.99},
		{"10.96.0.0/12", 0.9999},
		{"fd00::/64", 0.5},
		{"fd00::/64", 0.99},
	} {
		b.Run(fmt.Sprintf("%s/%g%%", tc.cidr, tc.fill*100), func(b *testing.B) {
			a, err := NewIPAllocator(netip.MustParsePrefix(tc.cidr), rand.New(rand.NewPCG(1, 1)))
			if err != nil {
				b.Fatal(err)
			}
			for a.Used() < int(float64(a.Usable())*tc.fill) {
				if _, err := a.AllocateNext(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				ip, err := a.AllocateNext()
				if err != nil {
					b.Fatal(err)
				}
				a.Release(ip)
			}
		})
	}
}

// BenchmarkAllocateNextFromEmpty is the upstream shape: keep allocating a
// /12 from empty (released every 2^19 allocations so it never fills).
func BenchmarkAllocateNextFromEmpty(b *testing.B) {
	a, err := NewIPAllocator(netip.MustParsePrefix("10.0.0.0/12"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if _, err := a.AllocateNext(); err != nil {
			b.Fatal(err)
		}
		if n++; n == 1<<19 {
			b.StopTimer()
			_ = a.Restore(Snapshot{Range: a.CIDR().String()})
			n = 0
			b.StartTimer()
		}
	}
}

func BenchmarkPortAllocateNext(b *testing.B) {
	for _, fill := range []float64{0.5, 0.99} {
		b.Run(fmt.Sprintf("30000-32767/%g%%", fill*100), func(b *testing.B) {
			a, _ := NewPortAllocator(DefaultNodePortRange, rand.New(rand.NewPCG(1, 1)))
			for a.Used() < int(float64(a.Usable())*fill) {
				_, _ = a.AllocateNext()
			}
			b.ReportAllocs()
			for b.Loop() {
				p, err := a.AllocateNext()
				if err != nil {
					b.Fatal(err)
				}
				a.Release(p)
			}
		})
	}
}

func BenchmarkSnapshotRestore(b *testing.B) {
	a, _ := NewIPAllocator(netip.MustParsePrefix("10.96.0.0/12"), nil)
	for a.Used() < a.Usable()/2 {
		_, _ = a.AllocateNext()
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := a.Restore(a.Snapshot()); err != nil {
			b.Fatal(err)
		}
	}
}

// bigBitmap is the anchor for BenchmarkAllocateNext: the upstream
// allocator's data structure and walk (a math/big.Int bitmap tested bit by
// bit from a random start, dynamic band first), re-implemented here so both
// run in the same process on the same machine.
type bigBitmap struct {
	bits        *big.Int
	max, static int
	count       int
	rng         *rand.Rand
}

func (b *bigBitmap) next() (int, bool) {
	if b.count >= b.max {
		return 0, false
	}
	scan := func(lo, hi int) int {
		if hi <= lo {
			return -1
		}
		n := hi - lo
		start := b.rng.IntN(n)
		for i := 0; i < n; i++ {
			at := lo + (start+i)%n
			if b.bits.Bit(at) == 0 {
				return at
			}
		}
		return -1
	}
	at := scan(b.static, b.max)
	if at < 0 {
		at = scan(0, b.static)
	}
	b.bits.SetBit(b.bits, at, 1)
	b.count++
	return at, true
}

func (b *bigBitmap) release(at int) {
	if b.bits.Bit(at) == 1 {
		b.bits.SetBit(b.bits, at, 0)
		b.count--
	}
}

func BenchmarkAllocateNextBigIntAnchor(b *testing.B) {
	for _, fill := range []float64{0, 0.5, 0.99} {
		b.Run(fmt.Sprintf("10.96.0.0/12/%g%%", fill*100), func(b *testing.B) {
			bm := &bigBitmap{bits: new(big.Int), max: 1<<20 - 2, static: 256, rng: rand.New(rand.NewPCG(1, 1))}
			for bm.count < int(float64(bm.max)*fill) {
				bm.next()
			}
			b.ReportAllocs()
			for b.Loop() {
				at, ok := bm.next()
				if !ok {
					b.Fatal("full")
				}
				bm.release(at)
			}
		})
	}
}
