package emulator

import (
	"encoding/binary"
	"math/bits"
	"net/netip"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// ---- dh ----

const dhTabBits = 8 // CONFIG_IP_VS_DH_TAB_BITS

// dhSched is ip_vs_dh.c: 256 buckets filled round-robin over the list (weights unused),
// rebuilt on add and delete only; the key is the packet's destination address.
type dhSched struct {
	noHooks
	buckets [1 << dhTabBits]*dest
}

func (h *dhSched) reassign(s *service) {
	n := len(s.dests)
	for i := range h.buckets {
		if n == 0 {
			h.buckets[i] = nil
		} else {
			h.buckets[i] = s.dests[i%n]
		}
	}
}

func (h *dhSched) init(_ *Model, s *service)                    { h.reassign(s) }
func (h *dhSched) addDest(_ *Model, s *service, _ *dest)        { h.reassign(s) }
func (h *dhSched) delDest(_ *Model, s *service, _ *dest, _ int) { h.reassign(s) }

func (h *dhSched) schedule(_ *Model, s *service, in *schedInput, _ bool) *dest {
	d := h.buckets[hash32(foldFor(s.key.v6, in.daddr), dhTabBits)]
	if d == nil || !d.available || d.weight <= 0 || d.overload {
		return nil
	}
	return d
}

// foldFor folds an address the way a scheduler of a service of the given family reads it
// from union nf_inet_addr: IPv4 services read the first 32 bits, IPv6 services XOR all four.
func foldFor(v6 bool, a netip.Addr) uint32 {
	if !v6 {
		if a.Is4() || a.Is4In6() {
			b := a.Unmap().As4()
			return binary.BigEndian.Uint32(b[:])
		}
		b := a.As16()
		return binary.BigEndian.Uint32(b[:4])
	}
	if a.Is4() {
		b := a.As4()
		return binary.BigEndian.Uint32(b[:]) // the other three words are zero
	}
	return addrFold(a)
}

// unavailable is is_unavailable() of sh and mh.
func unavailable(d *dest) bool { return d.weight <= 0 || d.overload }

// hashPort is ip_vs_sh_get_port()/ip_vs_mh_get_port(): the client's source port for TCP,
// UDP and SCTP, 0 otherwise.
func hashPort(in *schedInput) uint16 {
	switch in.proto {
	case netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoSCTP:
		return in.sport
	}
	return 0
}

// ---- sh ----

// shSched is ip_vs_sh.c: 2^SH_TAB_BITS buckets, each dest taking weight consecutive
// buckets per round (a weight-0 dest still one), rebuilt on add, delete and update.
type shSched struct {
	noHooks
	bits    uint
	buckets []*dest
}

func (h *shSched) reassign(s *service) {
	n := len(s.dests)
	p, count := 0, 0
	for i := range h.buckets {
		if n == 0 {
			h.buckets[i] = nil
			continue
		}
		if p == n {
			p = 0
		}
		d := s.dests[p]
		h.buckets[i] = d
		count++
		if count >= d.weight {
			p++
			count = 0
		}
	}
}

func (h *shSched) init(m *Model, s *service) {
	h.bits = m.shBits
	h.buckets = make([]*dest, 1<<h.bits)
	h.reassign(s)
}
func (h *shSched) done(*Model, *service)                        { h.buckets = nil }
func (h *shSched) addDest(_ *Model, s *service, _ *dest)        { h.reassign(s) }
func (h *shSched) delDest(_ *Model, s *service, _ *dest, _ int) { h.reassign(s) }
func (h *shSched) updDest(_ *Model, s *service, _ *dest)        { h.reassign(s) }

func (h *shSched) hashkey(v6 bool, addr netip.Addr, port uint16, offset uint32) uint32 {
	mask := uint32(len(h.buckets) - 1)
	return (offset + hash32(uint32(port)+foldFor(v6, addr), h.bits)) & mask
}

func (h *shSched) schedule(_ *Model, s *service, in *schedInput, _ bool) *dest {
	var port uint16
	if s.flags&ipvs.FlagSchedSH2 != 0 {
		port = hashPort(in)
	}
	v6 := s.key.v6
	ihash := h.hashkey(v6, in.saddr, port, 0)
	d := h.buckets[ihash]
	if s.flags&ipvs.FlagSchedSH1 == 0 {
		if d == nil || unavailable(d) {
			return nil
		}
		return d
	}
	if d == nil {
		return nil
	}
	if !unavailable(d) {
		return d
	}
	size := uint32(len(h.buckets))
	for off := uint32(0); off < size; off++ {
		roff := (off + ihash) % size
		d = h.buckets[h.hashkey(v6, in.saddr, port, roff)]
		if d == nil {
			break
		}
		if !unavailable(d) {
			return d
		}
	}
	return nil
}

// ---- mh ----

// The mh scheduler's fixed hsiphash keys (generate_hash_secret()).
var (
	mhKey1 = hsipKey{2654435761, 2654435761}
	mhKey2 = hsipKey{2654446892, 2654446892}
)

// mhSched is ip_vs_mh.c: a Maglev lookup table of a prime size (4093 by default) built
// from each dest's hsiphash permutation and last_weight.
type mhSched struct {
	noHooks
	size   int
	tbits  int
	lookup []*dest
	gcd    int
	rshift int
}

func mhHash(v6 bool, addr netip.Addr, port uint16, key hsipKey, offset uint32) uint32 {
	return hsiphashU32(offset+uint32(port)+foldFor(v6, addr), key)
}

func (h *mhSched) init(m *Model, s *service) {
	h.size = m.mhSize
	h.tbits = m.mhBits
	h.lookup = make([]*dest, h.size)
	h.changed(s)
}

func (h *mhSched) done(*Model, *service)                        { h.lookup = nil }
func (h *mhSched) addDest(_ *Model, s *service, _ *dest)        { h.changed(s) }
func (h *mhSched) delDest(_ *Model, s *service, _ *dest, _ int) { h.changed(s) }
func (h *mhSched) updDest(_ *Model, s *service, _ *dest)        { h.changed(s) }

// changed is ip_vs_mh_dest_changed(): gcd and shift over last_weight, then reassign.
func (h *mhSched) changed(s *service) {
	g := 0
	for _, d := range s.dests {
		if w := d.lastWeight; w > 0 {
			if g > 0 {
				g = gcd(w, g)
			} else {
				g = w
			}
		}
	}
	h.gcd = g
	h.rshift = 0
	if g >= 1 {
		mw := 0
		for _, d := range s.dests {
			if d.lastWeight > mw {
				mw = d.lastWeight
			}
		}
		if sh := bits.Len(uint(mw/g)) - h.tbits; sh > 0 {
			h.rshift = sh
		}
	}
	h.reassign(s)
}

type mhSetup struct {
	skip  uint32
	perm  uint32
	turns int
}

func (h *mhSched) reassign(s *service) {
	if len(s.dests) > h.size {
		return // -EINVAL, ignored by the caller: the table is left as it was
	}
	if h.gcd < 1 {
		for i := range h.lookup {
			h.lookup[i] = nil
		}
		return
	}
	m := uint32(h.size)
	ds := make([]mhSetup, len(s.dests))
	for i, d := range s.dests {
		offset := mhHash(s.key.v6, d.addr, d.port, mhKey1, 0) % m
		ds[i].skip = mhHash(s.key.v6, d.addr, d.port, mhKey2, 0)%(m-1) + 1
		ds[i].perm = offset
		lw := d.lastWeight
		t := (lw / h.gcd) >> h.rshift
		if t == 0 && lw != 0 {
			t = 1
		}
		ds[i].turns = t
	}
	taken := make([]bool, h.size)
	n, dtCount := 0, 0
	for n < h.size {
		for i := 0; i < len(s.dests); {
			if ds[i].turns < 1 {
				i++
				continue
			}
			c := ds[i].perm
			for taken[c] {
				ds[i].perm += ds[i].skip
				if ds[i].perm >= m {
					ds[i].perm -= m
				}
				c = ds[i].perm
			}
			taken[c] = true
			h.lookup[c] = s.dests[i]
			n++
			if n == h.size {
				return
			}
			dtCount++
			if dtCount >= ds[i].turns {
				dtCount = 0
				i++
			}
		}
	}
}

func (h *mhSched) schedule(_ *Model, s *service, in *schedInput, _ bool) *dest {
	var port uint16
	if s.flags&ipvs.FlagSchedSH2 != 0 {
		port = hashPort(in)
	}
	v6 := s.key.v6
	m := uint32(h.size)
	ihash := mhHash(v6, in.saddr, port, mhKey1, 0) % m
	d := h.lookup[ihash]
	if s.flags&ipvs.FlagSchedSH1 == 0 {
		if d == nil || unavailable(d) {
			return nil
		}
		return d
	}
	if d == nil {
		return nil
	}
	if !unavailable(d) {
		return d
	}
	for off := uint32(0); off < m; off++ {
		roff := (off + ihash) % m
		d = h.lookup[mhHash(v6, in.saddr, port, mhKey1, roff)%m]
		if d == nil {
			break
		}
		if !unavailable(d) {
			return d
		}
	}
	return nil
}
