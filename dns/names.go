package dns

import (
	"errors"
	"net/netip"
	"strings"
)

// errNameError means the name does not exist: the answer is NXDOMAIN.
var errNameError = errors.New("name does not exist")

// request is a parsed name below the cluster domain, all labels lower case.
// The five shapes (right to left, as CoreDNS parses them):
//
//	<zone>, svc.<zone>, pod.<zone>             → nothing asked (podOrSvc == "")
//	<ns>.svc|pod.<zone>                        → namespace only
//	<svc>.<ns>.svc.<zone>                      → service (pod: dashed IP)
//	<endpoint>.<svc>.<ns>.svc.<zone>           → one endpoint
//	_<port>._<proto>.<svc>.<ns>.svc.<zone>     → named port (underscores optional)
type request struct {
	podOrSvc  string // "svc", "pod" or "" (apex)
	namespace string
	service   string // for pods: the dashed IP
	endpoint  string
	port      string
	protocol  string
	portSet   bool // the name had the <port>.<proto> shape
}

// parseRequest parses base, the part of a lower-case query name in front of
// the zone (no trailing dot; "" for the apex), into r. Anything that cannot be
// a cluster name is errNameError.
func parseRequest(base string, r *request) error {
	*r = request{}
	if base == "" || base == "svc" || base == "pod" {
		return nil
	}
	// Labels are taken from the right, without splitting the name into a slice.
	rest, more := "", false
	rest, r.podOrSvc, more = lastLabel(base)
	if r.podOrSvc != "svc" && r.podOrSvc != "pod" {
		return errNameError
	}
	if !more {
		return nil // not reached: a lone "svc" or "pod" is the apex case above
	}
	rest, r.namespace, more = lastLabel(rest)
	if !more {
		return nil
	}
	rest, r.service, more = lastLabel(rest)
	if !more {
		return nil
	}
	first, second, two := strings.Cut(rest, ".")
	switch {
	case !two:
		r.endpoint = rest
	case strings.IndexByte(second, '.') < 0:
		r.port = strings.TrimPrefix(first, "_")
		r.protocol = strings.TrimPrefix(second, "_")
		r.portSet = true
	default:
		return errNameError
	}
	return nil
}

// lastLabel splits name at its last dot into what comes before it and the label after
// it; more is false when name has no dot (label is then the whole name).
func lastLabel(name string) (rest, label string, more bool) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return "", name, false
	}
	return name[:i], name[i+1:], true
}

// matchPortProto reports whether a service or endpoint port (name, protocol)
// matches the asked port and protocol; an empty ask matches anything.
func matchPortProto(askPort, askProto string, p portInfo) bool {
	return (askPort == "" || askPort == p.name) && (askProto == "" || askProto == p.protocol)
}

// podIPFromLabel turns the dashed label of a pod name into an IP address:
// exactly three dashes and no "--" is IPv4 (1-2-3-4), anything else is IPv6
// with '-' for ':' (fd00--1).
func podIPFromLabel(label string) (netip.Addr, bool) {
	var s string
	if strings.Count(label, "-") == 3 && !strings.Contains(label, "--") {
		s = strings.ReplaceAll(label, "-", ".")
	} else {
		s = strings.ReplaceAll(label, "-", ":")
	}
	ip, err := netip.ParseAddr(s)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}

const (
	reverseV4 = "in-addr.arpa."
	reverseV6 = "ip6.arpa."
)

// isReverseZone reports whether the lower-case FQDN zone is in in-addr.arpa
// or ip6.arpa.
func isReverseZone(zone string) bool {
	return zone == reverseV4 || strings.HasSuffix(zone, "."+reverseV4) ||
		zone == reverseV6 || strings.HasSuffix(zone, "."+reverseV6)
}

// addrFromReverse extracts the address from a full reverse name
// (d.c.b.a.in-addr.arpa. or 32 nibbles under ip6.arpa.); ok is false for
// anything else, including partial names.
func addrFromReverse(name string) (netip.Addr, bool) {
	// Labels are read in place (no strings.Split): this runs on every PTR query.
	switch {
	case strings.HasSuffix(name, "."+reverseV4):
		rest := name[:len(name)-len(reverseV4)-1]
		if !digitsAndDots(rest) {
			// Only decimal labels name an IPv4 address. (The lookup used to read the
			// reversed labels with netip.ParseAddr, which takes "1.20.1.a:b::1" as an
			// IPv6 address with an embedded IPv4 one: a PTR query for
			// 1.20.1.a:b::1.in-addr.arpa. was answered for a:b::1.20.1.1.)
			return netip.Addr{}, false
		}
		var b [4]byte
		for i := 3; i >= 0; i-- { // d.c.b.a: the first label is the last byte
			label := rest
			if i > 0 {
				dot := strings.IndexByte(rest, '.')
				if dot < 0 {
					return netip.Addr{}, false
				}
				label, rest = rest[:dot], rest[dot+1:]
			}
			v, ok := decimalOctet(label)
			if !ok {
				return netip.Addr{}, false
			}
			b[i] = v
		}
		return netip.AddrFrom4(b), true
	case strings.HasSuffix(name, "."+reverseV6):
		rest := name[:len(name)-len(reverseV6)-1]
		if len(rest) != 2*32-1 { // 32 one-character labels
			return netip.Addr{}, false
		}
		var b [16]byte
		for i := 0; i < 32; i++ {
			if i > 0 && rest[2*i-1] != '.' {
				return netip.Addr{}, false
			}
			v, ok := hexNibble(rest[2*i])
			if !ok {
				return netip.Addr{}, false
			}
			pos := 31 - i // labels run from the last nibble to the first
			if pos%2 == 0 {
				b[pos/2] |= v << 4
			} else {
				b[pos/2] |= v
			}
		}
		return netip.AddrFrom16(b), true
	}
	return netip.Addr{}, false
}

// digitsAndDots reports whether s holds nothing but decimal digits and dots.
func digitsAndDots(s string) bool {
	for i := 0; i < len(s); i++ {
		if (s[i] < '0' || s[i] > '9') && s[i] != '.' {
			return false
		}
	}
	return true
}

// decimalOctet parses one field of a dotted IPv4 address as netip.ParseAddr accepts
// it: 1 to 3 decimal digits, no leading zero, at most 255.
func decimalOctet(s string) (byte, bool) {
	if len(s) == 0 || len(s) > 3 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		v = v*10 + int(s[i]-'0')
	}
	if v > 255 {
		return 0, false
	}
	return byte(v), true
}

func hexNibble(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// ReverseName returns the PTR owner name of ip: d.c.b.a.in-addr.arpa. for
// IPv4, the 32 reversed nibbles under ip6.arpa. for IPv6.
func ReverseName(ip netip.Addr) string {
	ip = ip.Unmap()
	if ip.Is4() {
		b := ip.As4()
		return itoa(b[3]) + "." + itoa(b[2]) + "." + itoa(b[1]) + "." + itoa(b[0]) + "." + reverseV4
	}
	const hexdigits = "0123456789abcdef"
	b := ip.As16()
	var sb strings.Builder
	for i := 15; i >= 0; i-- {
		sb.WriteByte(hexdigits[b[i]&0xf])
		sb.WriteByte('.')
		sb.WriteByte(hexdigits[b[i]>>4])
		sb.WriteByte('.')
	}
	sb.WriteString(reverseV6)
	return sb.String()
}

func itoa(b byte) string {
	if b < 10 {
		return string('0' + b)
	}
	var buf [3]byte
	i := len(buf)
	for b > 0 {
		i--
		buf[i] = '0' + b%10
		b /= 10
	}
	return string(buf[i:])
}

// inZone reports whether the lower-case FQDN name is zone or below it.
func inZone(name, zone string) bool {
	return name == zone || strings.HasSuffix(name, "."+zone)
}
