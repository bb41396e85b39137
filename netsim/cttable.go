package netsim

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"github.com/clusterlab/clusterlab/netfilter"
)

// ctTable maps the tuples of both directions of every confirmed conntrack entry to the
// entry. IPv4 tuples (and IPv4-mapped IPv6 ones) sit in an open-addressing table keyed by
// the tuple packed into two words; IPv6 tuples in a Go map keyed by the long form.
//
// The IPv4 table is the datapath's: every packet looks its tuple up there. Its slots hold
// the packed key beside the entry, so a lookup hashes 16 bytes with two multiplications
// and reads one slot (32 bytes; usually one cache line) before it reaches the entry,
// where a Go map keyed by a struct runs the generic hasher and reads a control word and
// then a slot in another line. Linear probing, at most 5/8 full; deletion shifts later
// slots of the run back (Knuth's algorithm R), so there are no tombstones and a lookup
// stops at the first empty slot. The table grows and never shrinks on deletions, as the
// kernel's conntrack hash keeps its buckets: a burst of connections expiring and the
// next burst arriving reallocate nothing (halving it on the way down and doubling it on
// the way up again cost a probe benchmark a fifth of its time, much of it faulting in
// the new slices' pages). release empties it when the last entry is gone by a flush.
type ctTable struct {
	slots []ctSlot // len is zero or a power of two
	shift uint8    // 64 - log2(len(slots)): the hash's top bits index the table
	n4    int      // slots in use
	v6    map[ctKey]ctRef
}

// ctSlot is one slot of the IPv4 table; c is nil when the slot is empty.
type ctSlot struct {
	k     ctKey4
	c     *Conn
	reply bool
}

// ctKey4 is an IPv4 tuple packed into two words.
type ctKey4 struct {
	addrs uint64 // source << 32 | destination
	rest  uint64 // source port << 32 | destination port << 16 | protocol
}

// ctKey is a tuple packed for hashing (netip.Addr carries a zone pointer that makes map
// keys bigger and slower).
type ctKey struct {
	src, dst         [16]byte
	srcPort, dstPort uint16
	proto            uint8
	v6               bool
}

const ctMinSlots = 16

func newCtTable() ctTable {
	return ctTable{v6: make(map[ctKey]ctRef)}
}

func key4Of(t netfilter.Tuple) (ctKey4, bool) {
	src, dst := t.Src, t.Dst
	if src.Is4In6() {
		src = src.Unmap()
	}
	if dst.Is4In6() {
		dst = dst.Unmap()
	}
	if !src.Is4() || !dst.Is4() {
		return ctKey4{}, false
	}
	s, d := src.As4(), dst.As4()
	return ctKey4{
		addrs: uint64(binary.BigEndian.Uint32(s[:]))<<32 | uint64(binary.BigEndian.Uint32(d[:])),
		rest:  uint64(t.SrcPort)<<32 | uint64(t.DstPort)<<16 | uint64(t.Proto),
	}, true
}

func keyOf(t netfilter.Tuple) ctKey {
	return ctKey{src: t.Src.As16(), dst: t.Dst.As16(), srcPort: t.SrcPort, dstPort: t.DstPort, proto: t.Proto, v6: t.Src.Is6() && !t.Src.Is4In6()}
}

// hash mixes both words (splitmix64's finaliser over their combination); the table uses
// the top bits.
func (k ctKey4) hash() uint64 {
	h := k.addrs*0x9e3779b97f4a7c15 ^ k.rest
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	return h ^ h>>31
}

// home is the slot where k's probe starts.
func (m *ctTable) home(k ctKey4) int { return int(k.hash() >> m.shift) }

// find returns the slot holding k, or -1.
func (m *ctTable) find(k ctKey4) int {
	if m.n4 == 0 {
		return -1
	}
	mask := len(m.slots) - 1
	for i := m.home(k); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.c == nil {
			return -1
		}
		if s.k == k {
			return i
		}
	}
}

func (m *ctTable) get(t netfilter.Tuple) (ctRef, bool) {
	if k, ok := key4Of(t); ok {
		if i := m.find(k); i >= 0 {
			s := &m.slots[i]
			return ctRef{c: s.c, reply: s.reply}, true
		}
		return ctRef{}, false
	}
	r, ok := m.v6[keyOf(t)]
	return r, ok
}

func (m *ctTable) put(t netfilter.Tuple, r ctRef) {
	if k, ok := key4Of(t); ok {
		m.put4(k, r)
		return
	}
	m.v6[keyOf(t)] = r
}

func (m *ctTable) put4(k ctKey4, r ctRef) {
	if (m.n4+1)*8 > len(m.slots)*5 {
		m.resize(max(ctMinSlots, 2*len(m.slots)))
	}
	mask := len(m.slots) - 1
	i := m.home(k)
	for ; m.slots[i].c != nil; i = (i + 1) & mask {
		if m.slots[i].k == k {
			m.slots[i].c, m.slots[i].reply = r.c, r.reply
			return
		}
	}
	m.slots[i] = ctSlot{k: k, c: r.c, reply: r.reply}
	m.n4++
}

// slot4 returns the slot holding k and true or, when k is absent, the empty slot that
// ends k's run (where put4 would place it, the table not growing) and false. The table
// must have slots.
func (m *ctTable) slot4(k ctKey4) (int, bool) {
	mask := len(m.slots) - 1
	i := m.home(k)
	for ; m.slots[i].c != nil; i = (i + 1) & mask {
		if m.slots[i].k == k {
			return i, true
		}
	}
	return i, false
}

// putNew4 maps an entry's original tuple o and reply tuple r, two distinct IPv4 keys the
// table lacks, with one probe of each key, and reports whether it did: it does not
// when a key is not IPv4, the two are equal, either is mapped already, or the table
// must grow first (the caller then looks up and puts each tuple on its own). The slots
// and count it leaves are put4(o)'s then put4(r)'s: o goes where its run ends; r where
// its run ended before o took a slot, or, when that was the same slot, in the next
// empty one (r's run then crossed o's slot).
func (m *ctTable) putNew4(o, r netfilter.Tuple, c *Conn) bool {
	ko, ok := key4Of(o)
	if !ok {
		return false
	}
	kr, ok := key4Of(r)
	if !ok || ko == kr || len(m.slots) == 0 || (m.n4+2)*8 > len(m.slots)*5 {
		return false
	}
	io, found := m.slot4(ko)
	if found {
		return false
	}
	ir, found := m.slot4(kr)
	if found {
		return false
	}
	m.slots[io] = ctSlot{k: ko, c: c}
	if ir == io {
		mask := len(m.slots) - 1
		for ir = (io + 1) & mask; m.slots[ir].c != nil; ir = (ir + 1) & mask {
		}
	}
	m.slots[ir] = ctSlot{k: kr, c: c, reply: true}
	m.n4 += 2
	return true
}

// resize rehashes the IPv4 table into size slots (a power of two).
func (m *ctTable) resize(size int) {
	old := m.slots
	m.slots = make([]ctSlot, size)
	adviseHugePages(unsafe.Pointer(&m.slots[0]), uintptr(size)*unsafe.Sizeof(ctSlot{}))
	shift := uint8(64)
	for s := size; s > 1; s >>= 1 {
		shift--
	}
	m.shift = shift
	mask := size - 1
	for _, s := range old {
		if s.c == nil {
			continue
		}
		i := m.home(s.k)
		for m.slots[i].c != nil {
			i = (i + 1) & mask
		}
		m.slots[i] = s
	}
}

// delIf removes t's mapping when it points at c.
func (m *ctTable) delIf(t netfilter.Tuple, c *Conn) {
	if k, ok := key4Of(t); ok {
		if i := m.find(k); i >= 0 && m.slots[i].c == c {
			m.del4(i)
		}
		return
	}
	k := keyOf(t)
	if r, ok := m.v6[k]; ok && r.c == c {
		delete(m.v6, k)
	}
}

// del4 empties slot i and moves later slots of its run back, so that every key stays
// reachable from its home slot without crossing an empty one (Knuth's algorithm R).
func (m *ctTable) del4(i int) {
	mask := len(m.slots) - 1
	j := i
	for {
		m.slots[i] = ctSlot{}
		for {
			j = (j + 1) & mask
			if m.slots[j].c == nil {
				m.n4--
				return
			}
			// The key at j may fill the hole at i unless its home lies cyclically in (i, j].
			if !cyclicIn(m.home(m.slots[j].k), i, j) {
				break
			}
		}
		m.slots[i] = m.slots[j]
		i = j
	}
}

// cyclicIn reports whether slot h lies in (i, j] going round the table: an open-
// addressing deletion (Knuth's algorithm R) leaves the key at j, homed at h, where it is
// then, and moves it into the hole at i otherwise.
func cyclicIn(h, i, j int) bool {
	if i <= j {
		return i < h && h <= j
	}
	return i < h || h <= j
}

// clear removes every mapping and keeps the slots (sweepLocked empties a table so, and
// puts the few survivors back, rather than deleting tuple by tuple).
func (m *ctTable) clear() {
	clear(m.slots)
	m.n4 = 0
	clear(m.v6)
}

// release returns an empty table's slots (conntrack -F, or a Delete that emptied it).
func (m *ctTable) release() {
	if m.n4 == 0 {
		m.slots, m.shift = nil, 0
	}
}

// len is the number of tuples mapped (two per entry).
func (m *ctTable) len() int { return m.n4 + len(m.v6) }

// conns returns every entry in the table once, in no particular order.
func (m *ctTable) conns() []*Conn {
	n := m.len() / 2
	seen := make(map[*Conn]bool, n)
	out := make([]*Conn, 0, n)
	for i := range m.slots {
		if c := m.slots[i].c; c != nil && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	for _, r := range m.v6 {
		if !seen[r.c] {
			seen[r.c] = true
			out = append(out, r.c)
		}
	}
	return out
}

// prefix4 is an IPv4 prefix as a masked number and its mask, for routing lookups that
// test IPv4 addresses as numbers (netip.Prefix.Contains does the same with more checks).
type prefix4 struct{ net, mask uint32 }

// prefix4Of returns p as a prefix4, or false when p is not an IPv4 prefix.
func prefix4Of(p netip.Prefix) (prefix4, bool) {
	a, ok := addr4(p.Addr())
	if !ok || !p.IsValid() {
		return prefix4{}, false
	}
	var mask uint32
	if p.Bits() > 0 {
		mask = ^uint32(0) << (32 - p.Bits())
	}
	return prefix4{net: a & mask, mask: mask}, true
}

func (p prefix4) contains(a uint32) bool { return a&p.mask == p.net }

// addr4 returns an IPv4 address as a number, or false for any other address.
func addr4(a netip.Addr) (uint32, bool) {
	if !a.Is4() {
		return 0, false
	}
	b := a.As4()
	return binary.BigEndian.Uint32(b[:]), true
}
