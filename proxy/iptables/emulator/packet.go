package emulator

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// Family is the address family a ruleset serves: iptables (IPv4) or ip6tables (IPv6).
type Family uint8

// The two families.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

func (f Family) bits() int {
	if f == IPv6 {
		return 128
	}
	return 32
}

// FamilyOf returns the family of addr.
func FamilyOf(addr netip.Addr) Family {
	if addr.Is4() || addr.Is4In6() {
		return IPv4
	}
	return IPv6
}

// protoNames are the names iptables-save prints for -p: getprotobynumber's, i.e. the
// usual /etc/protocols (Debian netbase) names; other protocols print as numbers.
var protoNames = map[uint8]string{1: "icmp", 2: "igmp", 3: "ggp", 4: "ipencap", 5: "st", 6: "tcp", 8: "egp", 9: "igp", 12: "pup", 17: "udp", 20: "hmp", 22: "xns-idp", 27: "rdp", 29: "iso-tp4", 33: "dccp", 36: "xtp", 37: "ddp", 38: "idpr-cmtp", 41: "ipv6", 43: "ipv6-route", 44: "ipv6-frag", 45: "idrp", 46: "rsvp", 47: "gre", 50: "esp", 51: "ah", 57: "skip", 58: "ipv6-icmp", 59: "ipv6-nonxt", 60: "ipv6-opts", 73: "rspf", 81: "vmtp", 88: "eigrp", 89: "ospf", 93: "ax.25", 94: "ipip", 97: "etherip", 98: "encap", 103: "pim", 108: "ipcomp", 112: "vrrp", 115: "l2tp", 124: "isis", 132: "sctp", 133: "fc", 135: "mobility-header", 136: "udplite", 137: "mpls-in-ip", 138: "manet", 139: "hip", 140: "shim6", 141: "wesp", 142: "rohc", 143: "ethernet"}

// protoByName accepts what iptables accepts for -p: /etc/protocols names, iptables'
// own aliases, "all" and numbers.
var protoByName = map[string]uint8{"icmp": 1, "igmp": 2, "ggp": 3, "ipencap": 4, "st": 5, "tcp": 6, "egp": 8, "igp": 9, "pup": 12, "udp": 17, "hmp": 20, "xns-idp": 22, "rdp": 27, "iso-tp4": 29, "dccp": 33, "xtp": 36, "ddp": 37, "idpr-cmtp": 38, "ipv6": 41, "ipv6-route": 43, "ipv6-frag": 44, "idrp": 45, "rsvp": 46, "gre": 47, "esp": 50, "ah": 51, "skip": 57, "ipv6-icmp": 58, "ipv6-nonxt": 59, "ipv6-opts": 60, "rspf": 73, "vmtp": 81, "eigrp": 88, "ospf": 89, "ax.25": 93, "ipip": 94, "etherip": 97, "encap": 98, "pim": 103, "ipcomp": 108, "vrrp": 112, "l2tp": 115, "isis": 124, "sctp": 132, "fc": 133, "mobility-header": 135, "udplite": 136, "mpls-in-ip": 137, "manet": 138, "hip": 139, "shim6": 140, "wesp": 141, "rohc": 142, "ethernet": 143,
	"icmpv6": netfilter.ProtoICMPv6, "ipv6-mh": netfilter.ProtoMH, "mh": netfilter.ProtoMH, "all": 0}

// ProtoName returns the name iptables-save prints for an IP protocol number.
func ProtoName(p uint8) string {
	if n, ok := protoNames[p]; ok {
		return n
	}
	return fmt.Sprint(p)
}

// ParseProto parses a protocol as -p accepts it: a name ("tcp", "ipv6-icmp", "all") or a
// number. "all" and 0 mean any protocol.
func ParseProto(s string) (uint8, error) {
	if p, ok := protoByName[strings.ToLower(s)]; ok {
		return p, nil
	}
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err == nil && fmt.Sprint(n) == s && n >= 0 && n <= 255 {
		return uint8(n), nil
	}
	return 0, fmt.Errorf("unknown protocol %q", s)
}

// Conntrack is what the kernel knows about the packet's connection.
type Conntrack struct {
	State  netfilter.CtState
	Status netfilter.CtStatus
	// Reply is true when the packet travels in the reply direction (--ctdir REPLY).
	Reply bool
	// Orig and ReplyTuple are the connection's tuples; a zero Orig means "the packet's
	// own tuple" (a first packet).
	Orig, ReplyTuple netfilter.Tuple
	// Mark is the connection mark (CONNMARK, -m connmark).
	Mark uint32
	// Expire is the remaining lifetime (--ctexpire).
	Expire time.Duration
}

// Packet is what the emulator evaluates: the header fields rules look at and the
// metadata the kernel keeps beside a packet. Targets change Mark, Conntrack.Mark and,
// for NAT targets, the addresses and ports.
type Packet struct {
	Proto            uint8
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16 // TCP, UDP, SCTP, DCCP, UDP-Lite ports
	TCPFlags         uint8
	ICMPType         uint8 // ICMP / ICMPv6
	ICMPCode         uint8
	TTL              uint8
	// Fragment is true for a non-first fragment (-f); such a packet has no ports.
	Fragment bool
	// InIface and OutIface are the interface names -i and -o see (empty where the
	// kernel has none: no input interface in OUTPUT, no output interface before routing).
	InIface, OutIface string
	Mark              uint32
	Len               int // bytes, for counters
	CT                Conntrack
}

// Family returns the packet's address family.
func (p *Packet) Family() Family { return FamilyOf(p.Dst) }

func (p *Packet) hasPorts() bool {
	if p.Fragment {
		return false
	}
	switch p.Proto {
	case netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoSCTP, netfilter.ProtoDCCP, netfilter.ProtoUDPLite:
		return true
	}
	return false
}

// origTuple returns the connection's original tuple, or the packet's own when unknown.
func (p *Packet) origTuple() netfilter.Tuple {
	if p.CT.Orig.Src.IsValid() {
		return p.CT.Orig
	}
	return netfilter.Tuple{Proto: p.Proto, Src: p.Src, Dst: p.Dst, SrcPort: p.SrcPort, DstPort: p.DstPort}
}

// replyTuple returns the connection's reply tuple, or the original one inverted when
// unknown.
func (p *Packet) replyTuple() netfilter.Tuple {
	if p.CT.ReplyTuple.Src.IsValid() {
		return p.CT.ReplyTuple
	}
	return p.origTuple().Invert()
}

// String renders the packet briefly: "tcp 10.0.0.1:1234 -> 10.96.0.1:80 mark 0x4000".
func (p *Packet) String() string {
	var b strings.Builder
	b.WriteString(ProtoName(p.Proto))
	b.WriteByte(' ')
	if p.hasPorts() {
		b.WriteString(netip.AddrPortFrom(p.Src, p.SrcPort).String())
		b.WriteString(" -> ")
		b.WriteString(netip.AddrPortFrom(p.Dst, p.DstPort).String())
	} else {
		b.WriteString(p.Src.String())
		b.WriteString(" -> ")
		b.WriteString(p.Dst.String())
	}
	if p.InIface != "" {
		b.WriteString(" in " + p.InIface)
	}
	if p.OutIface != "" {
		b.WriteString(" out " + p.OutIface)
	}
	if p.Mark != 0 {
		fmt.Fprintf(&b, " mark %#x", p.Mark)
	}
	return b.String()
}

// AddrType is a routing address type, as the addrtype match names them (RTN_*).
type AddrType uint16

// Address types, as bits (addrtype --src-type LOCAL,UNICAST).
const (
	AddrUnspec AddrType = 1 << iota
	AddrUnicast
	AddrLocal
	AddrBroadcast
	AddrAnycast
	AddrMulticast
	AddrBlackhole
	AddrUnreachable
	AddrProhibit
	AddrThrow
	AddrNAT
	AddrXResolve
)

var addrTypeNames = []string{"UNSPEC", "UNICAST", "LOCAL", "BROADCAST", "ANYCAST", "MULTICAST",
	"BLACKHOLE", "UNREACHABLE", "PROHIBIT", "THROW", "NAT", "XRESOLVE"}

func (t AddrType) String() string {
	var parts []string
	for i, n := range addrTypeNames {
		if t&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	return strings.Join(parts, ",")
}

// Env is what the emulator needs from its host: the virtual clock, choice points and
// the node's addresses. netsim's per-hook context provides it through an adapter; for
// stand-alone use StaticEnv is enough.
type Env interface {
	// Now is the virtual time (recent --seconds).
	Now() time.Time
	// Chance is a choice point that is true with probability p (statistic --mode random).
	Chance(p float64) bool
	// Pick is a choice point returning a uniform choice in [0, n) (a NAT address range),
	// or -1 to keep the range whole (a walk following every branch).
	Pick(n int) int
	// AddrType classifies addr as the node's routing tables would (addrtype). A
	// non-empty iface limits the lookup to that interface (--limit-iface-in/out). For
	// IPv6 the addrtype match asks it only for the route lookup's answer (LOCAL, and
	// ANYCAST or UNREACHABLE where the Env knows them) and takes UNICAST, MULTICAST
	// and UNSPEC from the address itself (IPv6AddrKind), as match_type6 does.
	AddrType(addr netip.Addr, iface string) AddrType
}

// DryRunner is implemented by an Env whose packets are what-ifs: the emulator then
// changes no state (recent lists, nth counters, rule and nfacct counters).
type DryRunner interface{ DryRun() bool }

// IfaceAddrer is implemented by an Env that knows interface addresses; MASQUERADE and
// REDIRECT then report the address they translate to.
type IfaceAddrer interface {
	IfaceAddr(iface string, f Family) (netip.Addr, bool)
}

// ClassifyAddr returns the address type of addr given the node's local addresses: LOCAL
// for one of them or a loopback address, MULTICAST, BROADCAST (255.255.255.255, and
// 0.0.0.0/8 as the kernel's inet_dev_addr_type answers for IPv4), UNSPEC (IPv6's
// unspecified address), UNICAST otherwise. It is the usual AddrType for an Env.
func ClassifyAddr(addr netip.Addr, local func(netip.Addr) bool) AddrType {
	switch {
	case addr.Is4() && addr.As4()[0] == 0:
		return AddrBroadcast // ipv4_is_zeronet
	case !addr.IsValid() || addr.IsUnspecified():
		return AddrUnspec
	case addr.IsLoopback() || (local != nil && local(addr)):
		return AddrLocal
	case addr.IsMulticast():
		return AddrMulticast
	case addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return AddrBroadcast
	}
	return AddrUnicast
}

// ClassifyAddrOn is ClassifyAddr limited to one interface, as addrtype's
// --limit-iface-in/--limit-iface-out classify an address for the packet's input or
// output device. The kernel then looks the address up as if only that device existed
// (IPv4: inet_dev_addr_type keeps the type of the local table's route only when the
// route's device is that device, and answers UNICAST otherwise; IPv6:
// match_lookup_rt6 finds LOCAL only when ipv6_chk_addr finds the address on that
// device). So an address is LOCAL only when it is on iface — loopback addresses are on
// "lo" — and a local address of another interface is UNICAST. onIface reports whether
// addr is one of iface's addresses. An empty iface (the packet's interface is not
// known) does not limit: ClassifyAddr(addr, onIface).
func ClassifyAddrOn(addr netip.Addr, iface string, onIface func(netip.Addr) bool) AddrType {
	if iface != "" && addr.IsLoopback() {
		if iface == LoopbackIface {
			return AddrLocal
		}
		return AddrUnicast
	}
	return ClassifyAddr(addr, onIface)
}

// LoopbackIface is the name of the loopback interface, which holds 127.0.0.0/8 and ::1.
const LoopbackIface = "lo"

// StaticEnv is a simple Env: a clock you set, a seeded random source and a fixed set of
// local addresses.
type StaticEnv struct {
	Time time.Time
	Rand *rand.Rand
	// Local lists local addresses whose interface is not known: they are local on any
	// interface, addrtype --limit-iface-in/out included.
	Local []netip.Addr
	// IfaceLocal maps an interface name to the addresses on it. An address listed here
	// is local, and on these interfaces only: addrtype with --limit-iface-in/out finds
	// it LOCAL for a packet whose interface is one of them and UNICAST for any other
	// (see ClassifyAddrOn). Loopback addresses are always on "lo".
	IfaceLocal map[string][]netip.Addr
	// IfaceAddrs maps an interface name to its primary address (MASQUERADE, REDIRECT).
	IfaceAddrs map[string]netip.Addr
}

// NewStaticEnv returns a StaticEnv seeded with seed, with the given local addresses.
func NewStaticEnv(seed uint64, local ...netip.Addr) *StaticEnv {
	return &StaticEnv{Time: time.Unix(1_700_000_000, 0).UTC(), Rand: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), Local: local}
}

// Now implements Env.
func (e *StaticEnv) Now() time.Time { return e.Time }

// Advance moves the clock forward.
func (e *StaticEnv) Advance(d time.Duration) { e.Time = e.Time.Add(d) }

// Chance implements Env.
func (e *StaticEnv) Chance(p float64) bool {
	if p >= 1 {
		return true
	}
	if p <= 0 {
		return false
	}
	return e.Rand.Float64() < p
}

// Pick implements Env.
func (e *StaticEnv) Pick(n int) int {
	if n <= 1 {
		return 0
	}
	return e.Rand.IntN(n)
}

// AddrType implements Env: without an interface, an address of Local or of any
// interface of IfaceLocal is LOCAL; with one, as ClassifyAddrOn, an address of
// IfaceLocal counts only on its interfaces and one of Local on any.
func (e *StaticEnv) AddrType(addr netip.Addr, iface string) AddrType {
	return ClassifyAddrOn(addr, iface, func(a netip.Addr) bool { return e.localOn(a, iface) })
}

// localOn reports whether a is local on iface ("": on any interface).
func (e *StaticEnv) localOn(a netip.Addr, iface string) bool {
	listed := false
	for name, addrs := range e.IfaceLocal {
		if slices.Contains(addrs, a) {
			if iface == "" || name == iface {
				return true
			}
			listed = true
		}
	}
	return !listed && slices.Contains(e.Local, a)
}

// IfaceAddr implements IfaceAddrer.
func (e *StaticEnv) IfaceAddr(iface string, _ Family) (netip.Addr, bool) {
	a, ok := e.IfaceAddrs[iface]
	return a, ok
}
