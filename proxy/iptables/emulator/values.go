package emulator

import (
	"fmt"
	"math/bits"
	"net/netip"
	"strconv"
	"strings"
)

// Parsing and printing of the values options take: ports, marks, addresses, names.

// PortRange is an inclusive port range; Min == Max for a single port.
type PortRange struct{ Min, Max uint16 }

func (r PortRange) contains(p uint16) bool { return p >= r.Min && p <= r.Max }

// services are the service names iptables accepts for ports (getservbyname) that
// show up in real rules.
var services = map[string]uint16{
	"ftp": 21, "ssh": 22, "telnet": 23, "smtp": 25, "domain": 53, "http": 80, "www": 80,
	"kerberos": 88, "pop3": 110, "ntp": 123, "imap": 143, "snmp": 161, "ldap": 389,
	"https": 443, "syslog": 514, "ldaps": 636, "imaps": 993, "pop3s": 995,
}

func parsePort(s string) (uint16, error) {
	if n, err := strconv.ParseUint(s, 10, 16); err == nil {
		return uint16(n), nil
	}
	if p, ok := services[s]; ok {
		return p, nil
	}
	return 0, fmt.Errorf("invalid port/service %q", s)
}

// parsePortRange parses "N", "N:M", ":M" and "N:" (N and M may be service names), as
// the tcp and sctp matches take them: a start above the end is refused.
func parsePortRange(s string) (PortRange, error) {
	r, err := parsePortRangeAnyOrder(s)
	if err == nil && r.Min > r.Max {
		return r, fmt.Errorf("invalid port range %q: start is above end", s)
	}
	return r, err
}

// parsePortRangeAnyOrder is parsePortRange without the order check: the udp match
// (iptables 1.8's guided parser, XTTYPE_PORTRC) takes "81:80", a range that never
// matches, and iptables-save prints it so.
func parsePortRangeAnyOrder(s string) (PortRange, error) {
	lo, hi, isRange := strings.Cut(s, ":")
	if !isRange {
		p, err := parsePort(s)
		return PortRange{p, p}, err
	}
	r := PortRange{0, 65535}
	var err error
	if lo != "" {
		if r.Min, err = parsePort(lo); err != nil {
			return r, err
		}
	}
	if hi != "" {
		if r.Max, err = parsePort(hi); err != nil {
			return r, err
		}
	}
	return r, nil
}

// parseMultiportRange parses one element of a multiport list, as libxt_multiport's
// parse_multi_ports_v1 does: "N" or "N:M" with both ends given and N below M
// ("invalid portrange specified" otherwise; "80:" and ":80" name an empty port).
func parseMultiportRange(s string) (PortRange, error) {
	lo, hi, isRange := strings.Cut(s, ":")
	if isRange && (lo == "" || hi == "") {
		return PortRange{}, fmt.Errorf("invalid port/service %q specified", "")
	}
	r, err := parsePortRangeAnyOrder(s)
	if err == nil && isRange && r.Min >= r.Max {
		return r, fmt.Errorf("invalid portrange specified: %q (the start must be below the end)", s)
	}
	return r, err
}

// appendPortRange prints "N" or "N:M".
func appendPortRange(b []byte, r PortRange) []byte {
	b = strconv.AppendUint(b, uint64(r.Min), 10)
	if r.Max != r.Min {
		b = append(b, ':')
		b = strconv.AppendUint(b, uint64(r.Max), 10)
	}
	return b
}

func parseUint32(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return 0, fmt.Errorf("invalid number %q", s)
	}
	return uint32(n), nil
}

// parseMarkMask parses "V" or "V/M" (hex, octal or decimal); the mask defaults to all ones.
func parseMarkMask(s string) (v, m uint32, hasMask bool, err error) {
	vs, ms, hasMask := strings.Cut(s, "/")
	if v, err = parseUint32(vs); err != nil {
		return
	}
	m = 0xffffffff
	if hasMask {
		m, err = parseUint32(ms)
	}
	return
}

func appendHex(b []byte, v uint32) []byte {
	b = append(b, "0x"...)
	return strconv.AppendUint(b, uint64(v), 16)
}

// parsePrefix parses an address as -s/-d accept it: "A", "A/len" or "A/dotted-mask",
// masking the address as the kernel stores it. A host address gets a full-length prefix.
func parsePrefix(s string, f Family) (netip.Prefix, error) {
	as, ms, hasMask := strings.Cut(s, "/")
	if as == "0" && f == IPv4 {
		as = "0.0.0.0"
	}
	addr, err := netip.ParseAddr(as)
	if err != nil || addr.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("invalid address %q (host names are not resolved)", s)
	}
	if addr.Is4In6() && f == IPv4 {
		addr = addr.Unmap()
	}
	if FamilyOf(addr) != f || (f == IPv6 && addr.Is4()) {
		return netip.Prefix{}, fmt.Errorf("address %q is not %s", s, f)
	}
	bitsLen := f.bits()
	if hasMask {
		if n, err := strconv.Atoi(ms); err == nil {
			if n < 0 || n > bitsLen {
				return netip.Prefix{}, fmt.Errorf("invalid prefix length in %q", s)
			}
			bitsLen = n
		} else {
			mask, err := netip.ParseAddr(ms)
			if err != nil || FamilyOf(mask) != f {
				return netip.Prefix{}, fmt.Errorf("invalid mask in %q", s)
			}
			n, ok := maskBits(mask)
			if !ok {
				return netip.Prefix{}, fmt.Errorf("non-contiguous mask in %q is not supported", s)
			}
			bitsLen = n
		}
	}
	return addr.Prefix(bitsLen)
}

// maskBits returns the prefix length of a contiguous netmask.
func maskBits(mask netip.Addr) (int, bool) {
	raw := mask.AsSlice()
	n := 0
	seenZero := false
	for _, by := range raw {
		for i := 7; i >= 0; i-- {
			if by&(1<<i) != 0 {
				if seenZero {
					return 0, false
				}
				n++
			} else {
				seenZero = true
			}
		}
	}
	return n, true
}

// fullMask returns the all-ones mask address of a family.
func fullMask(f Family) netip.Addr {
	if f == IPv6 {
		var a [16]byte
		for i := range a {
			a[i] = 0xff
		}
		return netip.AddrFrom16(a)
	}
	return netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// maskAddr applies a netmask to an address.
func maskAddr(a, mask netip.Addr) netip.Addr {
	if a.Is4() && mask.Is4() {
		x, m := a.As4(), mask.As4()
		for i := range x {
			x[i] &= m[i]
		}
		return netip.AddrFrom4(x)
	}
	x, m := a.As16(), mask.As16()
	for i := range x {
		x[i] &= m[i]
	}
	return netip.AddrFrom16(x)
}

// appendCTAddr prints a conntrack/iprange address: no "/len" for a host address.
func appendCTAddr(b []byte, p netip.Prefix) []byte {
	b = p.Addr().AppendTo(b)
	if p.Bits() != p.Addr().BitLen() {
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(p.Bits()), 10)
	}
	return b
}

// addrLess compares addresses numerically.
func addrLE(a, b netip.Addr) bool { return a.Compare(b) <= 0 }

func onesCount(v uint32) int { return bits.OnesCount32(v) }

// validChainName checks a user chain name as iptables does.
func validChainName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty chain name")
	case len(s) > 28:
		return fmt.Errorf("chain name %q is longer than 28 characters", s)
	case s[0] == '-' || s[0] == '!':
		return fmt.Errorf("invalid chain name %q", s)
	case containsChainNameBreak(s):
		return fmt.Errorf("invalid chain name %q", s)
	case isTargetName(s):
		return fmt.Errorf("chain name %q may not clash with target name", s)
	}
	return nil
}

// containsChainNameBreak reports whether s holds a byte a chain name may not: a space,
// a tab or a quote (strings.ContainsAny(s, " \t\"'") without its set's setup).
func containsChainNameBreak(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '"', '\'':
			return true
		}
	}
	return false
}

// isTargetName reports whether s names a standard or extension target.
func isTargetName(s string) bool {
	if targetLens&(1<<min(len(s), 63)) == 0 {
		return false
	}
	switch s {
	case "ACCEPT", "DROP", "RETURN", "QUEUE":
		return true
	}
	return targets[s] != nil || passTargets[s] || stopTargets[s]
}
