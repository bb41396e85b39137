package emulator

import (
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// dtype is an nftables data type: what a key component or an expression's value is.
type dtype uint8

// Data types the emulator models; tOther is any other (kept by name, not evaluable).
const (
	tOther dtype = iota
	tIPv4
	tIPv6
	tProto
	tService
	tMark
	tIfname
	tInteger
	tCtState
	tCtStatus
	tFibType
	tNfproto
	tVerdict
	tTCPFlag
)

var dtypeNames = map[string]dtype{
	"ipv4_addr": tIPv4, "ipv6_addr": tIPv6, "inet_proto": tProto, "inet_service": tService,
	"mark": tMark, "ifname": tIfname, "integer": tInteger, "ct_state": tCtState,
	"ct_status": tCtStatus, "fib_addrtype": tFibType, "nf_proto": tNfproto, "verdict": tVerdict, "tcp_flag": tTCPFlag,
}

// width is how many key bytes a value of the type takes.
func (t dtype) width() int {
	switch t {
	case tIPv6, tIfname:
		return 16
	case tProto, tNfproto, tTCPFlag:
		return 1
	case tService:
		return 2
	}
	return 4
}

// maxKey is the largest concatenated key, in bytes.
const maxKey = 48

// key is a value as the kernel compares it: big-endian bytes, concatenated for
// concatenations. It is comparable, so a map keyed by it needs no allocation.
type key struct {
	n uint8
	b [maxKey]byte
}

func (k *key) bytes() []byte { return k.b[:k.n] }

func (k *key) put(p []byte) bool {
	if int(k.n)+len(p) > maxKey {
		return false
	}
	copy(k.b[k.n:], p)
	k.n += uint8(len(p))
	return true
}

func (k *key) putUint(v uint64, w int) bool {
	if int(k.n)+w > maxKey {
		return false
	}
	for i := w - 1; i >= 0; i-- {
		k.b[int(k.n)+i] = byte(v)
		v >>= 8
	}
	k.n += uint8(w)
	return true
}

func cmpKey(a, b *key) int { return bytes.Compare(a.bytes(), b.bytes()) }

// protoNames are inet_proto's symbolic values.
var protoNames = map[string]uint8{"tcp": netfilter.ProtoTCP, "udp": netfilter.ProtoUDP, "sctp": netfilter.ProtoSCTP,
	"icmp": netfilter.ProtoICMP, "icmpv6": netfilter.ProtoICMPv6, "ipv6-icmp": netfilter.ProtoICMPv6,
	"dccp": netfilter.ProtoDCCP, "udplite": netfilter.ProtoUDPLite, "gre": netfilter.ProtoGRE,
	"esp": netfilter.ProtoESP, "ah": netfilter.ProtoAH, "igmp": netfilter.ProtoIGMP}

// ProtoName names an IP protocol as nft prints it (a number when it has no name).
func ProtoName(p uint8) string {
	switch p {
	case netfilter.ProtoTCP:
		return "tcp"
	case netfilter.ProtoUDP:
		return "udp"
	case netfilter.ProtoSCTP:
		return "sctp"
	case netfilter.ProtoICMP:
		return "icmp"
	case netfilter.ProtoICMPv6:
		return "ipv6-icmp"
	}
	for n, v := range protoNames {
		if v == p && n != "icmpv6" {
			return n
		}
	}
	return strconv.Itoa(int(p))
}

// serviceNames are the few inet_service names nft prints or accepts commonly.
var serviceNames = map[string]uint16{"http": 80, "https": 443, "ssh": 22, "domain": 53, "ntp": 123, "smtp": 25}

// ctStateBits are ct_state's bits as nft names them.
var ctStateBits = map[string]uint32{"invalid": 1, "established": 2, "related": 4, "new": 8, "untracked": 64}

// ctStatusBits are ct_status's bits (IPS_*).
var ctStatusBits = map[string]uint32{"expected": 1, "seen-reply": 2, "assured": 4, "confirmed": 8,
	"snat": 16, "dnat": 32, "dying": 512}

// tcpFlagBits are tcp_flag's bits as nft names them (the TCP header's flags byte).
var tcpFlagBits = map[string]uint32{"fin": 0x01, "syn": 0x02, "rst": 0x04, "psh": 0x08, "ack": 0x10, "urg": 0x20,
	"ecn": 0x40, "cwr": 0x80}

// fibTypes are the fib_addrtype values (RTN_*).
var fibTypes = map[string]uint32{"unspec": 0, "unicast": 1, "local": 2, "broadcast": 3, "anycast": 4,
	"multicast": 5, "blackhole": 6, "unreachable": 7, "prohibit": 8}

func ctStateBit(s netfilter.CtState) uint32 {
	switch s {
	case netfilter.CtNew:
		return 8
	case netfilter.CtEstablished:
		return 2
	case netfilter.CtRelated:
		return 4
	case netfilter.CtInvalid:
		return 1
	}
	return 64
}

func ctStatusBitsOf(s netfilter.CtStatus) uint32 {
	var v uint32
	if s&netfilter.StatusExpected != 0 {
		v |= 1
	}
	if s&netfilter.StatusSeenReply != 0 {
		v |= 2
	}
	if s&netfilter.StatusAssured != 0 {
		v |= 4
	}
	if s&netfilter.StatusConfirmed != 0 {
		v |= 8
	}
	if s&netfilter.StatusSrcNAT != 0 {
		v |= 16
	}
	if s&netfilter.StatusDstNAT != 0 {
		v |= 32
	}
	return v
}

// isBitmask reports types whose plain match means "any of these bits".
func (t dtype) isBitmask() bool { return t == tCtState || t == tCtStatus || t == tTCPFlag }

// bitNames are a bitmask type's names for its bits.
func bitNames(t dtype) map[string]uint32 {
	switch t {
	case tCtState:
		return ctStateBits
	case tCtStatus:
		return ctStatusBits
	case tTCPFlag:
		return tcpFlagBits
	}
	return nil
}

// parseValue parses one (non-concatenated) value of type t into lo and hi (equal unless
// the value is a prefix, a range or an interface wildcard).
func parseValue(t dtype, s string) (lo, hi key, isRange bool, err error) {
	switch t {
	case tIPv4, tIPv6:
		return parseAddrValue(t, s)
	case tIfname:
		name := strings.Trim(s, `"`)
		var b [16]byte
		if strings.HasSuffix(name, "*") && !strings.HasSuffix(name, `\*`) {
			p := strings.TrimSuffix(name, "*")
			if len(p) > 15 {
				return lo, hi, false, fmt.Errorf("interface name %q too long", name)
			}
			copy(b[:], p)
			lo.put(b[:])
			for i := len(p); i < 16; i++ {
				b[i] = 0xff
			}
			hi.put(b[:])
			return lo, hi, true, nil
		}
		if len(name) > 15 {
			return lo, hi, false, fmt.Errorf("interface name %q too long", name)
		}
		copy(b[:], name)
		lo.put(b[:])
		return lo, lo, false, nil
	}
	if a, b, ok := strings.Cut(s, "-"); ok && t != tOther && a != "" && b != "" {
		l, _, _, err1 := parseValue(t, a)
		h, _, _, err2 := parseValue(t, b)
		if err1 == nil && err2 == nil {
			if cmpKey(&l, &h) > 0 {
				return lo, hi, false, fmt.Errorf("range %q: start after end", s)
			}
			return l, h, true, nil
		}
	}
	v, err := parseScalar(t, s)
	if err != nil {
		return lo, hi, false, err
	}
	lo.putUint(v, t.width())
	return lo, lo, false, nil
}

func parseScalar(t dtype, s string) (uint64, error) {
	switch t {
	case tProto:
		if p, ok := protoNames[s]; ok {
			return uint64(p), nil
		}
		return parseUint(s, 8, "protocol")
	case tService:
		if p, ok := serviceNames[s]; ok {
			return uint64(p), nil
		}
		return parseUint(s, 16, "port")
	case tCtState, tCtStatus:
		names := ctStateBits
		if t == tCtStatus {
			names = ctStatusBits
		}
		if v, ok := names[s]; ok {
			return uint64(v), nil
		}
		return parseUint(s, 32, "ct bit")
	case tTCPFlag:
		if v, ok := tcpFlagBits[s]; ok {
			return uint64(v), nil
		}
		return parseUint(s, 8, "tcp flag")
	case tFibType:
		if v, ok := fibTypes[s]; ok {
			return uint64(v), nil
		}
		return 0, fmt.Errorf("unknown address type %q", s)
	case tNfproto:
		switch s {
		case "ipv4":
			return 2, nil
		case "ipv6":
			return 10, nil
		}
		return parseUint(s, 8, "nfproto")
	case tMark, tInteger:
		return parseUint(s, 32, "number")
	}
	return 0, fmt.Errorf("values of this type are not modelled (%q)", s)
}

func parseUint(s string, bits int, what string) (uint64, error) {
	v, err := strconv.ParseUint(s, 0, bits)
	if err != nil {
		return 0, fmt.Errorf("bad %s %q", what, s)
	}
	return v, nil
}

func parseAddrValue(t dtype, s string) (lo, hi key, isRange bool, err error) {
	want6 := t == tIPv6
	if a, b, ok := strings.Cut(s, "-"); ok && !strings.Contains(s, "/") {
		x, err1 := netip.ParseAddr(a)
		y, err2 := netip.ParseAddr(b)
		if err1 != nil || err2 != nil || x.Is6() != want6 || y.Is6() != want6 || y.Less(x) {
			return lo, hi, false, fmt.Errorf("bad address range %q", s)
		}
		lo.put(x.AsSlice())
		hi.put(y.AsSlice())
		return lo, hi, true, nil
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Addr().Is6() != want6 {
			return lo, hi, false, fmt.Errorf("bad prefix %q", s)
		}
		p = p.Masked()
		lo.put(p.Addr().AsSlice())
		last := lastAddr(p)
		hi.put(last.AsSlice())
		return lo, hi, p.Bits() != p.Addr().BitLen(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Is6() != want6 || a.Zone() != "" {
		fam := "IPv4"
		if want6 {
			fam = "IPv6"
		}
		return lo, hi, false, fmt.Errorf("bad %s address %q", fam, s)
	}
	lo.put(a.AsSlice())
	return lo, lo, false, nil
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// formatValue prints a value of type t from its key bytes, as nft lists it.
func formatValue(t dtype, b []byte) string {
	switch t {
	case tIPv4, tIPv6:
		a, _ := netip.AddrFromSlice(b)
		return a.String()
	case tProto:
		return ProtoName(b[0])
	case tNfproto:
		switch b[0] {
		case 2:
			return "ipv4"
		case 10:
			return "ipv6"
		}
		return strconv.Itoa(int(b[0]))
	case tService:
		return strconv.Itoa(int(b[0])<<8 | int(b[1]))
	case tIfname:
		return quote(string(bytes.TrimRight(b, "\x00")))
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	switch t {
	case tMark:
		return fmt.Sprintf("0x%08x", v)
	case tCtState, tCtStatus, tTCPFlag:
		return bitsString(t, uint32(v), ",")
	case tFibType:
		for n, x := range fibTypes {
			if uint64(x) == v {
				return n
			}
		}
	}
	return strconv.FormatUint(v, 10)
}

// formatRange prints lo..hi of type t: a prefix when it is one, else a range.
func formatRange(t dtype, lo, hi []byte) string {
	if t == tIPv4 || t == tIPv6 {
		a, _ := netip.AddrFromSlice(lo)
		for bits := a.BitLen(); bits >= 0; bits-- {
			p := netip.PrefixFrom(a, bits)
			if p.Masked().Addr() != a {
				break
			}
			if l := lastAddr(p); bytes.Equal(l.AsSlice(), hi) {
				return p.String()
			}
		}
	}
	if t == tIfname {
		p := bytes.TrimRight(lo, "\x00")
		return quote(string(p) + "*")
	}
	return formatValue(t, lo) + "-" + formatValue(t, hi)
}

// parseDuration parses nft's durations: "3h", "10800s", "2h59m59s996ms", "1d", or a
// plain number of seconds.
func parseDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	var total time.Duration
	rest := s
	for rest != "" {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("bad duration %q", s)
		}
		n, _ := strconv.ParseInt(rest[:i], 10, 64)
		rest = rest[i:]
		j := 0
		for j < len(rest) && (rest[j] < '0' || rest[j] > '9') {
			j++
		}
		var unit time.Duration
		switch rest[:j] {
		case "d":
			unit = 24 * time.Hour
		case "h":
			unit = time.Hour
		case "m":
			unit = time.Minute
		case "s":
			unit = time.Second
		case "ms":
			unit = time.Millisecond
		default:
			return 0, fmt.Errorf("bad duration %q", s)
		}
		rest = rest[j:]
		total += time.Duration(n) * unit
		if total < 0 || total > 1<<62 {
			return 0, fmt.Errorf("duration %q too long", s)
		}
	}
	return total, nil
}

// formatDuration prints a duration as nft does: "3h", "2h59m59s996ms", "0s".
func formatDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	var b strings.Builder
	units := []struct {
		u time.Duration
		s string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}}
	for _, u := range units {
		if n := d / u.u; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.s)
			d -= n * u.u
		}
	}
	if b.Len() == 0 {
		return "0s"
	}
	return b.String()
}

// quote puts a string in double quotes as nft prints it: verbatim (the lexer reads a
// quoted string verbatim too, so printing round-trips).
func quote(s string) string { return `"` + s + `"` }
