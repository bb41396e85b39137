package netfilter

import "fmt"

// RejectWith says what a REJECT sends back (iptables' --reject-with, nftables' reject
// with).
type RejectWith uint8

// Reject types. The zero value is ICMP port unreachable, the REJECT target's default.
const (
	RejectPortUnreachable  RejectWith = iota // icmp-port-unreachable / icmp6-port-unreachable
	RejectNetUnreachable                     // icmp-net-unreachable / icmp6-no-route
	RejectHostUnreachable                    // icmp-host-unreachable / icmp6-addr-unreachable
	RejectProtoUnreachable                   // icmp-proto-unreachable
	RejectNetProhibited                      // icmp-net-prohibited
	RejectHostProhibited                     // icmp-host-prohibited
	RejectAdminProhibited                    // icmp-admin-prohibited / icmp6-adm-prohibited
	RejectTCPReset                           // tcp-reset
)

var rejectNames = [...]string{"icmp-port-unreachable", "icmp-net-unreachable", "icmp-host-unreachable", "icmp-proto-unreachable", "icmp-net-prohibited", "icmp-host-prohibited", "icmp-admin-prohibited", "tcp-reset"}

// String returns the IPv4 name iptables gives the type.
func (r RejectWith) String() string {
	if int(r) < len(rejectNames) {
		return rejectNames[r]
	}
	return fmt.Sprintf("reject(%d)", uint8(r))
}

// rejectByName maps every --reject-with name of iptables and ip6tables to its type;
// ip6tables' icmp6-policy-fail and icmp6-reject-route send what icmp6-adm-prohibited
// does here.
var rejectByName = map[string]RejectWith{
	"icmp-port-unreachable": RejectPortUnreachable, "icmp6-port-unreachable": RejectPortUnreachable,
	"icmp-net-unreachable": RejectNetUnreachable, "icmp6-no-route": RejectNetUnreachable,
	"icmp-host-unreachable": RejectHostUnreachable, "icmp6-addr-unreachable": RejectHostUnreachable,
	"icmp-proto-unreachable": RejectProtoUnreachable, "icmp-net-prohibited": RejectNetProhibited,
	"icmp-host-prohibited": RejectHostProhibited, "icmp-admin-prohibited": RejectAdminProhibited,
	"icmp6-adm-prohibited": RejectAdminProhibited, "icmp6-policy-fail": RejectAdminProhibited,
	"icmp6-reject-route": RejectAdminProhibited, "tcp-reset": RejectTCPReset,
}

// RejectWithName returns the type of an iptables or ip6tables --reject-with name.
func RejectWithName(name string) (RejectWith, bool) {
	r, ok := rejectByName[name]
	return r, ok
}

// ICMPTypeCode returns the ICMP (v6: ICMPv6) type and code a reject of this type sends
// (a TCP reset sends none: the caller builds the RST).
func (r RejectWith) ICMPTypeCode(v6 bool) (typ, code uint8) {
	if v6 {
		switch r {
		case RejectNetUnreachable:
			return 1, 0
		case RejectHostUnreachable:
			return 1, 3
		case RejectAdminProhibited, RejectNetProhibited, RejectHostProhibited:
			return 1, 1
		default:
			return 1, 4
		}
	}
	switch r {
	case RejectNetUnreachable:
		return 3, 0
	case RejectHostUnreachable:
		return 3, 1
	case RejectProtoUnreachable:
		return 3, 2
	case RejectNetProhibited:
		return 3, 9
	case RejectHostProhibited:
		return 3, 10
	case RejectAdminProhibited:
		return 3, 13
	default:
		return 3, 3
	}
}

// NATKind is the kind of a NAT action.
type NATKind uint8

// NAT kinds; the zero value is no NAT.
const (
	DNAT       NATKind = iota + 1 // rewrite the destination (PREROUTING, OUTPUT)
	Redirect                      // DNAT to the node itself (the input interface's address, 127.0.0.1 for OUTPUT)
	SNAT                          // rewrite the source (INPUT, POSTROUTING)
	Masquerade                    // SNAT to the output interface's address (POSTROUTING)
)

var natNames = [...]string{"", "DNAT", "REDIRECT", "SNAT", "MASQUERADE"}

// String returns the kind's target name ("DNAT", "MASQUERADE").
func (k NATKind) String() string {
	if k != 0 && int(k) < len(natNames) {
		return natNames[k]
	}
	return "NAT?"
}

// ParseNATKind parses a target name ("DNAT", "SNAT", "MASQUERADE", "REDIRECT").
func ParseNATKind(s string) (NATKind, bool) {
	for i, n := range natNames {
		if i != 0 && n == s {
			return NATKind(i), true
		}
	}
	return 0, false
}

// Source reports whether the kind rewrites the source (SNAT, MASQUERADE).
func (k NATKind) Source() bool { return k == SNAT || k == Masquerade }
