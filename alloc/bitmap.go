package alloc

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
)

// DefaultSeed seeds the random source of an allocator created with a nil
// *rand.Rand: rand.New(rand.NewPCG(DefaultSeed, 0)). Every such allocator
// starts from the same sequence, so runs are reproducible; pass your own
// seeded source to vary it.
const DefaultSeed uint64 = 0x636c757374657221 // "cluster!"

func defaultRand() *rand.Rand { return rand.New(rand.NewPCG(DefaultSeed, 0)) }

// bitmap is the state shared by both allocators: one bit per usable value,
// offset 0 first. Offsets [0, static) form the static band, [static, max)
// the dynamic band. It is not safe for concurrent use; the allocators lock.
type bitmap struct {
	max    int // usable values
	static int // size of the static band, always < max unless max == 0
	count  int // set bits
	words  []uint64
	rng    *rand.Rand
}

func newBitmap(max, static int, rng *rand.Rand) *bitmap {
	if max < 0 {
		panic(fmt.Sprintf("alloc: negative bitmap size %d", max))
	}
	if static >= max {
		// Only reachable for degenerate sizes; keep a dynamic band of at
		// least one value so AllocateNext has somewhere to start.
		static = 0
	}
	if rng == nil {
		rng = defaultRand()
	}
	return &bitmap{max: max, static: static, words: make([]uint64, (max+63)/64), rng: rng}
}

func (b *bitmap) has(i int) bool {
	return b.words[i>>6]&(1<<(uint(i)&63)) != 0
}

// set marks offset i; it reports false when i was already set.
func (b *bitmap) set(i int) bool {
	w, m := i>>6, uint64(1)<<(uint(i)&63)
	if b.words[w]&m != 0 {
		return false
	}
	b.words[w] |= m
	b.count++
	return true
}

// clear unmarks offset i; it reports false when i was not set.
func (b *bitmap) clear(i int) bool {
	w, m := i>>6, uint64(1)<<(uint(i)&63)
	if b.words[w]&m == 0 {
		return false
	}
	b.words[w] &^= m
	b.count--
	return true
}

// firstClear returns the lowest clear offset in [from, to), or -1.
func (b *bitmap) firstClear(from, to int) int {
	for i := from; i < to; {
		w := i >> 6
		free := ^b.words[w] & (^uint64(0) << (uint(i) & 63))
		if free != 0 {
			if j := w<<6 + bits.TrailingZeros64(free); j < to {
				return j
			}
			return -1
		}
		i = (w + 1) << 6
	}
	return -1
}

// scanBand picks a random start in [lo, hi) and returns the first clear
// offset at or after it, wrapping to lo; -1 when the band is full.
func (b *bitmap) scanBand(lo, hi int) int {
	if hi <= lo {
		return -1
	}
	start := lo + b.rng.IntN(hi-lo)
	if j := b.firstClear(start, hi); j >= 0 {
		return j
	}
	return b.firstClear(lo, start)
}

// next marks and returns a free offset chosen as Kubernetes' random scan with
// offset does: a random start in the dynamic band scanning forward with
// wrap, then likewise in the static band. ok is false when the range is full.
func (b *bitmap) next() (int, bool) {
	if b.count >= b.max {
		return 0, false
	}
	j := b.scanBand(b.static, b.max)
	if j < 0 {
		j = b.scanBand(0, b.static)
	}
	if j < 0 {
		return 0, false // unreachable while count is accurate
	}
	b.set(j)
	return j, true
}

// forEach calls fn for every set offset in ascending order.
func (b *bitmap) forEach(fn func(int)) {
	for w, word := range b.words {
		for word != 0 {
			t := bits.TrailingZeros64(word)
			fn(w<<6 + t)
			word &= word - 1
		}
	}
}

// bytes encodes the bitmap as Kubernetes' RangeAllocation.Data does: the
// big-endian bytes of an integer whose bit i is offset i, without leading
// zero bytes (empty when nothing is set).
func (b *bitmap) bytes() []byte {
	n := len(b.words)
	for n > 0 && b.words[n-1] == 0 {
		n--
	}
	if n == 0 {
		return []byte{}
	}
	top := b.words[n-1]
	topBytes := (bits.Len64(top) + 7) / 8
	out := make([]byte, topBytes+8*(n-1))
	pos := 0
	for k := topBytes - 1; k >= 0; k-- {
		out[pos] = byte(top >> (8 * uint(k)))
		pos++
	}
	for w := n - 2; w >= 0; w-- {
		word := b.words[w]
		for k := 7; k >= 0; k-- {
			out[pos] = byte(word >> (8 * uint(k)))
			pos++
		}
	}
	return out
}

// decodeBitmap parses data in the format of bytes into a fresh word slice
// for a bitmap of max values, returning the words and the number of set bits.
// A bit at or past max is an error.
func decodeBitmap(data []byte, max int) ([]uint64, int, error) {
	words := make([]uint64, (max+63)/64)
	count := 0
	for k := range data {
		v := data[len(data)-1-k] // k-th least significant byte
		if v == 0 {
			continue
		}
		bit := 8 * k
		if top := bit + bits.Len8(v) - 1; top >= max {
			return nil, 0, fmt.Errorf("snapshot data marks offset %d but the range has only %d usable values", top, max)
		}
		words[bit>>6] |= uint64(v) << (uint(bit) & 63)
		count += bits.OnesCount8(v)
	}
	return words, count, nil
}
