package alloc

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
)

// DefaultNodePortRange is kube-apiserver's default --service-node-port-range,
// 30000-32767.
var DefaultNodePortRange = PortRange{Base: 30000, Size: 2768}

// PortRange is an inclusive range of ports, Base..Base+Size-1, as
// k8s.io/apimachinery/pkg/util/net.PortRange.
type PortRange struct {
	Base int
	Size int
}

// ParsePortRange parses "min-max" (inclusive), "min+offset" (min..min+offset)
// or a single port, as kube-apiserver's --service-node-port-range flag does.
// Surrounding space is ignored; ports must lie in 0..65535 and max >= min.
func ParsePortRange(s string) (PortRange, error) {
	v := strings.TrimSpace(s)
	if v == "" {
		return PortRange{}, fmt.Errorf("port range %q is empty", s)
	}
	num := func(part, what string) (int, error) {
		if part == "" || strings.TrimLeft(part, "0123456789") != "" {
			return 0, fmt.Errorf("port range %q: %s %q is not a number", s, what, part)
		}
		n, err := strconv.Atoi(part)
		if err != nil || n > 65535 {
			return 0, fmt.Errorf("port range %q: the port range cannot be greater than 65535", s)
		}
		return n, nil
	}
	var lo, hi int
	var err error
	switch hy, plus := strings.Index(v, "-"), strings.Index(v, "+"); {
	case hy >= 0 && plus >= 0:
		return PortRange{}, fmt.Errorf("port range %q: use either min-max or min+offset", s)
	case hy >= 0:
		if lo, err = num(v[:hy], "start port"); err != nil {
			return PortRange{}, err
		}
		if hi, err = num(v[hy+1:], "end port"); err != nil {
			return PortRange{}, err
		}
	case plus >= 0:
		if lo, err = num(v[:plus], "start port"); err != nil {
			return PortRange{}, err
		}
		var off int
		if off, err = num(v[plus+1:], "offset"); err != nil {
			return PortRange{}, err
		}
		hi = lo + off
		if hi > 65535 {
			return PortRange{}, fmt.Errorf("port range %q: the port range cannot be greater than 65535", s)
		}
	default:
		if lo, err = num(v, "port"); err != nil {
			return PortRange{}, err
		}
		hi = lo
	}
	if hi < lo {
		return PortRange{}, fmt.Errorf("port range %q: end port cannot be less than start port", s)
	}
	return PortRange{Base: lo, Size: hi - lo + 1}, nil
}

// String returns "<base>-<last>", or "" for an empty range.
func (r PortRange) String() string {
	if r.Size == 0 {
		return ""
	}
	return fmt.Sprintf("%d-%d", r.Base, r.Base+r.Size-1)
}

// Contains reports whether port p lies in the range.
func (r PortRange) Contains(p int) bool { return p >= r.Base && p-r.Base < r.Size }

// Last returns the highest port of the range.
func (r PortRange) Last() int { return r.Base + r.Size - 1 }

// portStaticBand is Kubernetes' calculateRangeOffset for node ports:
// min(max(16, size/32), 128), or 0 when size <= 16.
func portStaticBand(size int) int {
	const lo, hi, step = 16, 128, 32
	if size <= lo {
		return 0
	}
	return min(max(lo, size/step), hi)
}

// PortAllocator hands out node ports from a PortRange, as kube-apiserver's
// portallocator does. It is safe for concurrent use; the *rand.Rand it was
// given is used only under its lock.
type PortAllocator struct {
	r PortRange

	mu sync.Mutex
	bm *bitmap
}

// NewPortAllocator returns an empty allocator for r. Every port of r is
// usable; the static band is the first min(max(16, size/32), 128) ports (none
// when size <= 16), so the default 30000-32767 has static 30000-30085.
//
// rng drives AllocateNext's random choice; nil means a source seeded with
// DefaultSeed.
func NewPortAllocator(r PortRange, rng *rand.Rand) (*PortAllocator, error) {
	if r.Size < 1 {
		return nil, fmt.Errorf("port range %d+%d is empty", r.Base, r.Size)
	}
	if r.Base < 0 || r.Last() > 65535 {
		return nil, fmt.Errorf("port range %s is outside 0-65535", r)
	}
	return &PortAllocator{r: r, bm: newBitmap(r.Size, portStaticBand(r.Size), rng)}, nil
}

// NewPortAllocatorFromSnapshot returns an allocator for the snapshot's range
// holding the snapshot's allocations.
func NewPortAllocatorFromSnapshot(s Snapshot, rng *rand.Rand) (*PortAllocator, error) {
	r, err := ParsePortRange(s.Range)
	if err != nil {
		return nil, fmt.Errorf("snapshot range: %w", err)
	}
	a, err := NewPortAllocator(r, rng)
	if err != nil {
		return nil, err
	}
	if err := a.Restore(s); err != nil {
		return nil, err
	}
	return a, nil
}

// Range returns the allocator's port range.
func (a *PortAllocator) Range() PortRange { return a.r }

// Usable returns how many ports the allocator manages (Used+Free).
func (a *PortAllocator) Usable() int { return a.bm.max }

// StaticBand returns how many ports, from Base on, form the static band that
// AllocateNext uses only when the dynamic band is exhausted.
func (a *PortAllocator) StaticBand() int { return a.bm.static }

// InStaticBand reports whether port lies in the static band.
func (a *PortAllocator) InStaticBand(port int) bool {
	return a.r.Contains(port) && port-a.r.Base < a.bm.static
}

// Allocate reserves port, which may be any port of the range (static band or
// not). It returns a *NotInRangeError outside the range and ErrPortAllocated
// for a taken port.
func (a *PortAllocator) Allocate(port int) error {
	if !a.r.Contains(port) {
		return &NotInRangeError{Resource: ResourceNodePort, Port: port, ValidRange: a.r.String()}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.bm.set(port - a.r.Base) {
		return ErrPortAllocated
	}
	return nil
}

// AllocateNext reserves a free port: a random one of the dynamic band while
// it has room, else a random one of the static band, else ErrFull.
func (a *PortAllocator) AllocateNext() (int, error) {
	a.mu.Lock()
	off, ok := a.bm.next()
	a.mu.Unlock()
	if !ok {
		return 0, ErrFull
	}
	return a.r.Base + off, nil
}

// Release frees port. Releasing a free or out-of-range port does nothing.
func (a *PortAllocator) Release(port int) {
	if !a.r.Contains(port) {
		return
	}
	a.mu.Lock()
	a.bm.clear(port - a.r.Base)
	a.mu.Unlock()
}

// Has reports whether port is allocated (false outside the range).
func (a *PortAllocator) Has(port int) bool {
	if !a.r.Contains(port) {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bm.has(port - a.r.Base)
}

// Free returns how many ports are not allocated.
func (a *PortAllocator) Free() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bm.max - a.bm.count
}

// Used returns how many ports are allocated.
func (a *PortAllocator) Used() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bm.count
}

// ForEach calls fn for every allocated port in ascending order. fn runs
// without the allocator's lock held, over a copy of the state taken first.
func (a *PortAllocator) ForEach(fn func(int)) {
	var offs []int
	a.mu.Lock()
	a.bm.forEach(func(i int) { offs = append(offs, i) })
	a.mu.Unlock()
	for _, off := range offs {
		fn(a.r.Base + off)
	}
}

// Snapshot returns the allocator's state: its range and its bitmap in
// Kubernetes' RangeAllocation encoding.
func (a *PortAllocator) Snapshot() Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Snapshot{Range: a.r.String(), Data: a.bm.bytes()}
}

// Restore replaces the allocator's state with s. It returns
// ErrMismatchedPortRange (which matches ErrMismatchedNetwork) when s is of
// another range, and an error when s marks a port outside the range; on error
// nothing changes.
func (a *PortAllocator) Restore(s Snapshot) error {
	if s.Range != a.r.String() {
		return ErrMismatchedPortRange
	}
	words, count, err := decodeBitmap(s.Data, a.bm.max)
	if err != nil {
		return fmt.Errorf("restore %s: %w", a.r, err)
	}
	a.mu.Lock()
	a.bm.words, a.bm.count = words, count
	a.mu.Unlock()
	return nil
}

// String describes the allocator, e.g. "30000-32767 (2 used, 2766 free)".
func (a *PortAllocator) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Sprintf("%s (%d used, %d free)", a.r, a.bm.count, a.bm.max-a.bm.count)
}
