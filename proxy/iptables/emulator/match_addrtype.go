package emulator

import (
	"fmt"
	"net/netip"
	"strings"
)

// The addrtype match module: the IPv4 test (one type per address) and the IPv6 one
// (match_type6).

// AddrTypeMatch is -m addrtype.
type AddrTypeMatch struct {
	Src, Dst          AddrType // 0: not given
	SrcNeg, DstNeg    bool
	LimitIn, LimitOut bool
}

// Module implements Match.
func (*AddrTypeMatch) Module() string { return "addrtype" }

func parseAddrTypes(s string) (AddrType, error) {
	var t AddrType
	for _, part := range strings.Split(s, ",") {
		found := false
		for i, n := range addrTypeNames {
			if strings.EqualFold(part, n) {
				t |= 1 << i
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown address type %q", part)
		}
	}
	return t, nil
}

func (m *AddrTypeMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	var err error
	switch opt {
	case "--src-type":
		m.Src, err = parseAddrTypes(args[0].val)
		m.SrcNeg = neg
	case "--dst-type":
		m.Dst, err = parseAddrTypes(args[0].val)
		m.DstNeg = neg
	case "--limit-iface-in":
		m.LimitIn = true
	case "--limit-iface-out":
		m.LimitOut = true
	}
	return err
}

func (m *AddrTypeMatch) finish(rc *ruleCtx) error {
	if m.LimitIn && m.LimitOut {
		return fmt.Errorf("addrtype: --limit-iface-in and --limit-iface-out together")
	}
	// addrtype_mt_checkentry_v1 refuses IPv6 types match_type6 cannot test: BLACKHOLE,
	// PROHIBIT and any type after it (THROW, NAT, XRESOLVE), BROADCAST.
	if bad := (m.Src | m.Dst) & AddrTypesNot6; rc.family == IPv6 && bad != 0 {
		return fmt.Errorf("addrtype: IPv6 does not support %s matching", bad)
	}
	return nil
}

// AddrTypesNot6 are the address types the kernel refuses in an ip6tables addrtype match.
const AddrTypesNot6 = AddrBroadcast | AddrBlackhole | AddrProhibit | AddrThrow | AddrNAT | AddrXResolve

func (m *AddrTypeMatch) appendArgs(b []byte) []byte {
	if m.Src != 0 {
		b = appendNeg(b, m.SrcNeg)
		b = append(b, " --src-type "...)
		b = append(b, m.Src.String()...)
	}
	if m.Dst != 0 {
		b = appendNeg(b, m.DstNeg)
		b = append(b, " --dst-type "...)
		b = append(b, m.Dst.String()...)
	}
	if m.LimitIn {
		b = append(b, " --limit-iface-in"...)
	}
	if m.LimitOut {
		b = append(b, " --limit-iface-out"...)
	}
	return b
}

func (m *AddrTypeMatch) eval(c *evalCtx) tri {
	iface := ""
	if m.LimitIn {
		iface = c.pkt.InIface
	} else if m.LimitOut {
		iface = c.pkt.OutIface
	}
	six := c.pkt.Family() == IPv6
	if m.Src != 0 && c.addrType(six, c.pkt.Src, rdSrc, iface, m.Src) == m.SrcNeg {
		return no
	}
	if m.Dst != 0 && c.addrType(six, c.pkt.Dst, rdDst, iface, m.Dst) == m.DstNeg {
		return no
	}
	return yes
}

// addrTypeMatch is the IPv4 test (xt_addrtype.c match_type): inet_dev_addr_type gives
// the address one RTN type, and the address matches when that type is in mask.
func addrTypeMatch(env Env, a netip.Addr, iface string, mask AddrType) bool {
	return env.AddrType(a, iface)&mask != 0
}

// addrTypeMatch6 is the IPv6 test, as xt_addrtype.c's match_type6 computes it: the
// address's own kind (ipv6_addr_type) is a condition for each of MULTICAST, UNICAST and
// UNSPEC in mask — all of them must hold, so UNICAST,LOCAL matches only a local unicast
// address and MULTICAST,UNICAST nothing — and when mask names any of LOCAL, ANYCAST and
// UNREACHABLE the route lookup (match_lookup_rt6) must find one of those it names. A
// local unicast address is thus both UNICAST and LOCAL. The lookup's answer is
// Env.AddrType: LOCAL (RTF_LOCAL; with an interface, the address on that device),
// ANYCAST or UNREACHABLE when the Env says so, nothing else otherwise (an Env without
// routes finds every address reachable and no anycast).
func addrTypeMatch6(env Env, a netip.Addr, iface string, mask AddrType) bool {
	kind := IPv6AddrKind(a)
	for _, t := range [...]AddrType{AddrMulticast, AddrUnicast, AddrUnspec} {
		if mask&t != 0 && kind != t {
			return false
		}
	}
	if lookup := mask & (AddrLocal | AddrAnycast | AddrUnreachable); lookup != 0 {
		return env.AddrType(a, iface)&lookup != 0
	}
	return true
}

// IPv6AddrKind is what the kernel's ipv6_addr_type says of an IPv6 address by its bits
// alone, as addrtype uses it: MULTICAST for ff00::/8, UNSPEC for :: (IPV6_ADDR_ANY),
// nothing for an IPv4-mapped address (::ffff:0:0/96, IPV6_ADDR_MAPPED only) and
// UNICAST for any other (loopback, link-local, unique-local, IPv4-compatible,
// global and unassigned space alike).
func IPv6AddrKind(a netip.Addr) AddrType {
	switch {
	case a.Is4In6():
		return 0
	case a.Is4():
		return 0 // not an IPv6 address
	case !a.IsValid() || a.IsUnspecified():
		return AddrUnspec
	case a.As16()[0] == 0xff:
		return AddrMulticast
	}
	return AddrUnicast
}
