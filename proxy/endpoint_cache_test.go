package proxy

import (
	"net"
	"net/netip"
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

// TestCacheEndpointsMatchesCache checks that the strings cacheEndpoints computes for
// a slice's endpoints with one allocation are those each endpoint's cache computes
// (and net.JoinHostPort's form), for IPv4, IPv6 and IPv4-mapped addresses, up to and
// beyond the 64 endpoints it shares one allocation for.
func TestCacheEndpointsMatchesCache(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 70).Draw(t, "n")
		eps := make([]Endpoint, n)
		for i := range eps {
			var a [16]byte
			for j := range a {
				a[j] = byte(rapid.IntRange(0, 255).Draw(t, "byte"))
			}
			var ip netip.Addr
			switch rapid.IntRange(0, 2).Draw(t, "kind") {
			case 0:
				ip = netip.AddrFrom4([4]byte(a[:4]))
			case 1:
				ip = netip.AddrFrom16(a)
			default:
				ip = netip.AddrFrom16(netip.AddrFrom4([4]byte(a[:4])).As16())
			}
			eps[i] = Endpoint{IP: ip, Port: rapid.IntRange(0, 65535).Draw(t, "port")}
		}
		cacheEndpoints(eps)
		for i := range eps {
			want := Endpoint{IP: eps[i].IP, Port: eps[i].Port}
			want.cache()
			if eps[i].str != want.str || eps[i].ipStr != want.ipStr {
				t.Fatalf("endpoint %d: %q %q, cache gives %q %q", i, eps[i].str, eps[i].ipStr, want.str, want.ipStr)
			}
			if j := net.JoinHostPort(eps[i].IP.String(), strconv.Itoa(eps[i].Port)); eps[i].String() != j || eps[i].IPString() != eps[i].IP.String() {
				t.Fatalf("endpoint %d: %q %q, want %q %q", i, eps[i].String(), eps[i].IPString(), j, eps[i].IP.String())
			}
		}
	})
}
