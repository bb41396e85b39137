package emulator

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// goldenRatio32 is GOLDEN_RATIO_32 from include/linux/hash.h.
const goldenRatio32 = 0x61C88647

// hash32 is the kernel's generic hash_32(val, bits): a multiply-shift on the 32-bit
// product, keeping its top bits. The dh, sh, lblc and lblcr schedulers use it since
// Linux 4.18.
func hash32(val uint32, nbits uint) uint32 {
	return (val * goldenRatio32) >> (32 - nbits)
}

// addrFold is the 32-bit key the hashing schedulers derive from an address, in host
// order: the IPv4 address itself, or the XOR of the four 32-bit words of an IPv6 address.
func addrFold(a netip.Addr) uint32 {
	if a.Is4() || a.Is4In6() {
		b := a.Unmap().As4()
		return binary.BigEndian.Uint32(b[:])
	}
	b := a.As16()
	return binary.BigEndian.Uint32(b[0:]) ^ binary.BigEndian.Uint32(b[4:]) ^
		binary.BigEndian.Uint32(b[8:]) ^ binary.BigEndian.Uint32(b[12:])
}

// hsipKey is an hsiphash_key_t on a 64-bit kernel: two unsigned longs.
type hsipKey [2]uint64

// hsiphash is the kernel's hsiphash() on a 64-bit kernel, where "HalfSipHash-1-3" is
// in fact SipHash-1-3 over 64-bit state, truncated to 32 bits (lib/siphash.c). The mh
// scheduler hashes one host-endian (little-endian on x86_64) u32 with it.
func hsiphash(data []byte, key hsipKey) uint32 {
	v0 := uint64(0x736f6d6570736575) ^ key[0]
	v1 := uint64(0x646f72616e646f6d) ^ key[1]
	v2 := uint64(0x6c7967656e657261) ^ key[0]
	v3 := uint64(0x7465646279746573) ^ key[1]
	b := uint64(len(data)) << 56
	round := func() {
		v0 += v1
		v1 = bits.RotateLeft64(v1, 13)
		v1 ^= v0
		v0 = bits.RotateLeft64(v0, 32)
		v2 += v3
		v3 = bits.RotateLeft64(v3, 16)
		v3 ^= v2
		v0 += v3
		v3 = bits.RotateLeft64(v3, 21)
		v3 ^= v0
		v2 += v1
		v1 = bits.RotateLeft64(v1, 17)
		v1 ^= v2
		v2 = bits.RotateLeft64(v2, 32)
	}
	n := len(data) - len(data)%8
	for i := 0; i < n; i += 8 {
		m := binary.LittleEndian.Uint64(data[i:])
		v3 ^= m
		round()
		v0 ^= m
	}
	var tail [8]byte
	copy(tail[:], data[n:])
	b |= binary.LittleEndian.Uint64(tail[:])
	v3 ^= b
	round()
	v0 ^= b
	v2 ^= 0xff
	round()
	round()
	round()
	return uint32((v0 ^ v1) ^ (v2 ^ v3))
}

// hsiphashU32 hashes one u32 the way the mh scheduler does: hsiphash(&v, 4, key) on a
// little-endian 64-bit machine.
func hsiphashU32(v uint32, key hsipKey) uint32 {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return hsiphash(b[:], key)
}
