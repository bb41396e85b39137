// Package alloc allocates Service ClusterIPs (IPv4 and IPv6) and node ports
// the way kube-apiserver's bitmap allocators do
// (pkg/registry/core/service/ipallocator and portallocator), with the
// registry's transactions and its periodic repair pass on top.
//
// # Ranges, bitmaps and bands
//
// An IPAllocator owns one service CIDR, a PortAllocator one node port range.
// Each keeps one bit per usable value:
//
//	10.96.0.0/24   .0 | .1 ........ .16 | .17 ................ .254 | .255
//	               net|   static band   |      dynamic band         | bcast
//	               (never usable)                                    (never)
//
//	30000-32767       30000 ... 30085   |  30086 ............. 32767
//	                  static (86 ports) |  dynamic
//
// IPv4 loses the network and broadcast addresses; IPv6 loses the network
// address and is capped at 65536 entries, so usable = min(size, 65536) - 1
// from network+1 (a /48 offers ::1 to ::ffff only). A /32, /31 or /128 has
// no usable address. The static band is the first min(max(16, size/16), 256)
// addresses of a CIDR of raw size `size` (none when size <= 16), and the
// first min(max(16, size/32), 128) ports of a port range (none when size <=
// 16): /28 → 0, /27 /25 /24 → 16, /20 and larger → 256; 30000-32767 → 86.
//
// # Allocating
//
//	Allocate(v)    any usable value, static band or not  → nil, ErrIPAllocated /
//	                                                       ErrPortAllocated, *NotInRangeError
//	AllocateNext() random start in the dynamic band, scan forward with wrap;
//	               if the dynamic band is full, the same in the static band;
//	               then ErrFull ("range is full")
//	Release(v)     free or out-of-range values: no-op
//
// So automatically assigned values stay out of the static band (where users
// put well-known IPs such as kube-dns at .10) until the dynamic band is
// exhausted, and they are never sequential. The random source is a seeded
// math/rand/v2 *rand.Rand passed to the constructor (nil: DefaultSeed), so a
// simulation is reproducible. Errors carry the API server's exact texts and
// match errors.Is/As (IsFull, IsAllocated, IsNotInRange,
// IsMismatchedNetwork).
//
// Snapshot/Restore move an allocator's state as a plain struct (range text +
// bitmap bytes in Kubernetes' RangeAllocation encoding); a snapshot restores
// only into an allocator of the same range.
//
// # Transactions
//
// Allocators bundles a cluster's ClusterIP allocators (one per family,
// primary first) and its node port allocator. A Service create, update or
// delete runs in a Tx (Allocators.Begin):
//
//	Begin ──► AllocateIP / AllocateNextIP / AllocatePort / AllocateNextPort   (take now)
//	      └─► ReleaseIP / ReleasePort                                         (deferred)
//	      ──► store the object ──► Commit: perform the deferred releases
//	                           └─► Revert: release what this Tx took, drop the releases
//
// A failed create therefore leaves nothing allocated, and a value released by
// an update cannot be taken by another request before the update is stored.
// The service store decides what to allocate (clusterIPs per ipFamilies, one
// node port per port number with TCP and UDP sharing it, a
// healthCheckNodePort) and wraps errors as the registry does.
//
// # Repair
//
// A Repairer compares the allocators with the live []*corev1.Service
// (spec.clusterIPs, spec.ports[].nodePort, spec.healthCheckNodePort) and
// reports leaked values (allocated, used by no service), missing ones (used,
// not marked), duplicates (claimed twice), out-of-range and invalid ones.
// Check only reports; Repair also marks missing values and frees a leaked
// value once it has been seen leaked on LeakPasses (3, like Kubernetes)
// consecutive passes, so a create still in flight is not robbed.
package alloc
