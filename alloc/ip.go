package alloc

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

const (
	// maxIPv6Entries caps an IPv6 allocator's bitmap as Kubernetes does:
	// usable = min(size, 65536) - 1, from network+1.
	maxIPv6Entries = 1 << 16
	// minIPv4Bits is the shortest IPv4 prefix accepted (2^24 addresses, a
	// 2 MiB bitmap). kube-apiserver itself refuses anything shorter than /12.
	minIPv4Bits = 8
)

// IPAllocator hands out ClusterIPs from one CIDR, as kube-apiserver's bitmap
// allocator (pkg/registry/core/service/ipallocator) does. It is safe for
// concurrent use; the *rand.Rand it was given is used only under its lock.
type IPAllocator struct {
	cidr   netip.Prefix
	family corev1.IPFamily
	base   netip.Addr // network+1: offset 0

	mu sync.Mutex
	bm *bitmap
}

// NewIPAllocator returns an empty allocator for cidr (masked to its network).
// Usable addresses are network+1 onwards: for IPv4 all but the network and
// broadcast addresses, for IPv6 min(size, 65536)-1 addresses; a /32, /31 or
// /128 has none. The static band is the first min(max(16, size/16), 256)
// usable addresses (none when size <= 16), where size is the raw CIDR size.
//
// rng drives AllocateNext's random choice; nil means a source seeded with
// DefaultSeed. IPv4 prefixes shorter than /8 are refused (bitmap size).
func NewIPAllocator(cidr netip.Prefix, rng *rand.Rand) (*IPAllocator, error) {
	if !cidr.IsValid() {
		return nil, fmt.Errorf("invalid service CIDR %q", cidr)
	}
	if cidr.Addr().Is4In6() {
		return nil, fmt.Errorf("service CIDR %s: IPv4-mapped IPv6 prefixes are not supported", cidr)
	}
	if cidr.Addr().Zone() != "" {
		return nil, fmt.Errorf("service CIDR %s: zoned addresses are not supported", cidr)
	}
	cidr = cidr.Masked()
	hostBits := cidr.Addr().BitLen() - cidr.Bits()
	a := &IPAllocator{cidr: cidr}
	var size uint64 // raw CIDR size, saturating
	var usable int
	if cidr.Addr().Is4() {
		if cidr.Bits() < minIPv4Bits {
			return nil, fmt.Errorf("service CIDR %s is too large: IPv4 prefixes must be /%d or longer", cidr, minIPv4Bits)
		}
		a.family = corev1.IPv4Protocol
		size = 1 << uint(hostBits)
		usable = max(int(size)-2, 0)
	} else {
		a.family = corev1.IPv6Protocol
		if hostBits >= 63 {
			size = 1 << 63
		} else {
			size = 1 << uint(hostBits)
		}
		usable = int(min(size, maxIPv6Entries)) - 1
	}
	a.base = cidr.Addr().Next()
	a.bm = newBitmap(usable, ipStaticBand(size), rng)
	return a, nil
}

// NewIPAllocatorFromSnapshot returns an allocator for the snapshot's range
// holding the snapshot's allocations.
func NewIPAllocatorFromSnapshot(s Snapshot, rng *rand.Rand) (*IPAllocator, error) {
	cidr, err := netip.ParsePrefix(s.Range)
	if err != nil {
		return nil, fmt.Errorf("snapshot range: %w", err)
	}
	a, err := NewIPAllocator(cidr, rng)
	if err != nil {
		return nil, err
	}
	if err := a.Restore(s); err != nil {
		return nil, err
	}
	return a, nil
}

// ipStaticBand is Kubernetes' calculateRangeOffset for service CIDRs:
// min(max(16, size/16), 256), or 0 when size <= 16.
func ipStaticBand(size uint64) int {
	const lo, hi, step = 16, 256, 16
	if size <= lo {
		return 0
	}
	return int(min(max(lo, size/step), hi))
}

// CIDR returns the allocator's range (masked).
func (a *IPAllocator) CIDR() netip.Prefix { return a.cidr }

// Family returns "IPv4" or "IPv6".
func (a *IPAllocator) Family() corev1.IPFamily { return a.family }

// Usable returns how many addresses the allocator manages (Used+Free).
func (a *IPAllocator) Usable() int { return a.bm.max }

// StaticBand returns how many addresses, from network+1 on, form the static
// band that AllocateNext uses only when the dynamic band is exhausted.
func (a *IPAllocator) StaticBand() int { return a.bm.static }

// InStaticBand reports whether ip is a usable address of the static band.
func (a *IPAllocator) InStaticBand(ip netip.Addr) bool {
	off, ok := a.offset(ip)
	return ok && off < a.bm.static
}

// offset maps ip to its bitmap offset; ok is false when ip is not usable.
func (a *IPAllocator) offset(ip netip.Addr) (int, bool) {
	ip = ip.Unmap().WithZone("")
	if !a.cidr.Contains(ip) {
		return 0, false
	}
	var d uint64
	if ip.Is4() {
		b, n := ip.As4(), a.cidr.Addr().As4()
		d = uint64(binary.BigEndian.Uint32(b[:]) - binary.BigEndian.Uint32(n[:]))
	} else {
		b, n := ip.As16(), a.cidr.Addr().As16()
		if binary.BigEndian.Uint64(b[:8]) != binary.BigEndian.Uint64(n[:8]) {
			return 0, false // past the 65536 cap (prefix shorter than /64)
		}
		d = binary.BigEndian.Uint64(b[8:]) - binary.BigEndian.Uint64(n[8:])
	}
	// d is ip - network; offset 0 is network+1.
	if d == 0 || d-1 >= uint64(a.bm.max) {
		return 0, false
	}
	return int(d - 1), true
}

// addr maps a bitmap offset back to its address.
func (a *IPAllocator) addr(off int) netip.Addr {
	if a.cidr.Addr().Is4() {
		n := a.cidr.Addr().As4()
		v := binary.BigEndian.Uint32(n[:]) + uint32(off) + 1
		var out [4]byte
		binary.BigEndian.PutUint32(out[:], v)
		return netip.AddrFrom4(out)
	}
	n := a.cidr.Addr().As16()
	lo := binary.BigEndian.Uint64(n[8:]) + uint64(off) + 1 // no carry: off < 2^16 and prefix masked
	binary.BigEndian.PutUint64(n[8:], lo)
	return netip.AddrFrom16(n)
}

func (a *IPAllocator) notInRange(ip netip.Addr) error {
	return &NotInRangeError{Resource: ResourceClusterIP, IP: ip.Unmap().WithZone(""), ValidRange: a.cidr.String()}
}

// Allocate reserves ip, which may be any usable address (static band or not).
// It returns a *NotInRangeError for an address outside the usable range and
// ErrIPAllocated for one already taken.
func (a *IPAllocator) Allocate(ip netip.Addr) error {
	off, ok := a.offset(ip)
	if !ok {
		return a.notInRange(ip)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.bm.set(off) {
		return ErrIPAllocated
	}
	return nil
}

// AllocateNext reserves a free address: a random one of the dynamic band
// while it has room, else a random one of the static band, else ErrFull.
func (a *IPAllocator) AllocateNext() (netip.Addr, error) {
	a.mu.Lock()
	off, ok := a.bm.next()
	a.mu.Unlock()
	if !ok {
		return netip.Addr{}, ErrFull
	}
	return a.addr(off), nil
}

// Release frees ip. Releasing a free or out-of-range address does nothing.
func (a *IPAllocator) Release(ip netip.Addr) {
	off, ok := a.offset(ip)
	if !ok {
		return
	}
	a.mu.Lock()
	a.bm.clear(off)
	a.mu.Unlock()
}

// Has reports whether ip is allocated (false for out-of-range addresses).
func (a *IPAllocator) Has(ip netip.Addr) bool {
	off, ok := a.offset(ip)
	if !ok {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bm.has(off)
}

// Free returns how many usable addresses are not allocated.
func (a *IPAllocator) Free() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bm.max - a.bm.count
}

// Used returns how many addresses are allocated.
func (a *IPAllocator) Used() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bm.count
}

// ForEach calls fn for every allocated address in ascending order. fn runs
// without the allocator's lock held, over a copy of the state taken first.
func (a *IPAllocator) ForEach(fn func(netip.Addr)) {
	var offs []int
	a.mu.Lock()
	a.bm.forEach(func(i int) { offs = append(offs, i) })
	a.mu.Unlock()
	for _, off := range offs {
		fn(a.addr(off))
	}
}

// Snapshot returns the allocator's state: its CIDR and its bitmap in
// Kubernetes' RangeAllocation encoding.
func (a *IPAllocator) Snapshot() Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Snapshot{Range: a.cidr.String(), Data: a.bm.bytes()}
}

// Restore replaces the allocator's state with s. It returns
// ErrMismatchedNetwork when s is of another CIDR, and an error when s marks
// an address outside the usable range; on error nothing changes.
func (a *IPAllocator) Restore(s Snapshot) error {
	if s.Range != a.cidr.String() {
		return ErrMismatchedNetwork
	}
	words, count, err := decodeBitmap(s.Data, a.bm.max)
	if err != nil {
		return fmt.Errorf("restore %s: %w", a.cidr, err)
	}
	a.mu.Lock()
	a.bm.words, a.bm.count = words, count
	a.mu.Unlock()
	return nil
}

// String describes the allocator, e.g. "10.96.0.0/12 (3 used, 1048571 free)".
func (a *IPAllocator) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Sprintf("%s (%d used, %d free)", a.cidr, a.bm.count, a.bm.max-a.bm.count)
}
