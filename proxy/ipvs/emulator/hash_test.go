package emulator

import (
	"net/netip"
	"testing"
)

// The kernel's own hsiphash self-test vectors for 64-bit machines (lib/test_siphash.c):
// key 00..0f, input bytes 0..i-1 for vector i.
var hsiphashVectors64 = [64]uint32{
	0x050fc4dc, 0x7d57ca93, 0x4dc7d44d, 0xe7ddf7fb, 0x88d38328, 0x49533b67,
	0xc59f22a7, 0x9bb11140, 0x8d299a8e, 0x6c063de4, 0x92ff097f, 0xf94dc352,
	0x57b4d9a2, 0x1229ffa7, 0xc0f95d34, 0x2a519956, 0x7d908b66, 0x63dbd80c,
	0xb473e63e, 0x8d297d1c, 0xa6cce040, 0x2b45f844, 0xa320872e, 0xdae6c123,
	0x67349c8c, 0x705b0979, 0xca9913a5, 0x4ade3b35, 0xef6cd00d, 0x4ab1e1f4,
	0x43c5e663, 0x8c21d1bc, 0x16a7b60d, 0x7a8ff9bf, 0x1f2a753e, 0xbf186b91,
	0xada26206, 0xa3c33057, 0xae3a36a1, 0x7b108392, 0x99e41531, 0x3f1ad944,
	0xc8138825, 0xc28949a6, 0xfaf8876b, 0x9f042196, 0x68b1d623, 0x8b5114fd,
	0xdf074c46, 0x12cc86b3, 0x0a52098f, 0x9d292f9a, 0xa2f41f12, 0x43a71ed0,
	0x73f0bce6, 0x70a7e980, 0x243c6d75, 0xfdb71513, 0xa67d8a08, 0xb7e8f148,
	0xf7a644ee, 0x0f1837f2, 0x4b6694e0, 0xb7bbb3a8,
}

func TestHsiphashKernelSelfTest(t *testing.T) {
	key := hsipKey{0x0706050403020100, 0x0f0e0d0c0b0a0908}
	in := make([]byte, 64)
	for i := range in {
		in[i] = byte(i)
	}
	for i := 0; i < 64; i++ {
		if got := hsiphash(in[:i], key); got != hsiphashVectors64[i] {
			t.Errorf("hsiphash(len %d) = %#08x, kernel self-test wants %#08x", i, got, hsiphashVectors64[i])
		}
	}
	// hsiphash_1u32(0x03020100) must equal the 4-byte vector.
	if got := hsiphashU32(0x03020100, key); got != hsiphashVectors64[4] {
		t.Errorf("hsiphashU32 = %#08x, want %#08x", got, hsiphashVectors64[4])
	}
}

func TestHash32(t *testing.T) {
	// hash_32 keeps the top bits of val*0x61C88647 (mod 2^32).
	cases := []struct {
		val  uint32
		bits uint
		want uint32
	}{
		{0, 8, 0},
		{1, 8, 0x61},                 // 0x61C88647 >> 24
		{2, 8, 0xc3},                 // 0xC3910C8E >> 24
		{0x0a000001, 8, 0x27},        // 10.0.0.1: 0x61C88647 + (0x0a*0x47 mod 256)<<24
		{0xffffffff, 32, 0x9e3779b9}, // -0x61C88647 mod 2^32
		{3, 10, (3 * 0x61C88647 & 0xffffffff) >> 22},
	}
	for _, c := range cases {
		if got := hash32(c.val, c.bits); got != c.want {
			t.Errorf("hash32(%#x, %d) = %#x, want %#x", c.val, c.bits, got, c.want)
		}
	}
}

func TestAddrFold(t *testing.T) {
	if got := addrFold(netip.MustParseAddr("10.1.2.3")); got != 0x0a010203 {
		t.Errorf("v4 fold = %#x", got)
	}
	// 2001:db8::1 → 0x20010db8 ^ 0 ^ 0 ^ 1
	if got := addrFold(netip.MustParseAddr("2001:db8::1")); got != 0x20010db9 {
		t.Errorf("v6 fold = %#x", got)
	}
}
