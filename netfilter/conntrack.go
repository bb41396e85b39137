package netfilter

import (
	"fmt"
	"net/netip"
	"strings"
)

// CtState is a packet's conntrack state as the conntrack and state matches see it.
type CtState uint8

// Conntrack states. The zero value is NEW: a packet that opens a connection.
const (
	CtNew         CtState = iota
	CtEstablished         // the packet belongs to a connection seen both ways (or a reply)
	CtRelated             // an ICMP error about, or an expectation of, a known connection
	CtInvalid             // no conntrack entry could be made or found
	CtUntracked           // not tracked: the raw table's NOTRACK, or before conntrack's lookup
)

var ctStateNames = [...]string{"NEW", "ESTABLISHED", "RELATED", "INVALID", "UNTRACKED"}

func (s CtState) String() string {
	if int(s) < len(ctStateNames) {
		return ctStateNames[s]
	}
	return fmt.Sprintf("CtState(%d)", uint8(s))
}

// CtStatus holds a conntrack entry's status bits: the IPS_* bits the kernel and the
// conntrack match name, and two of the datapath's own.
type CtStatus uint16

// Status bits.
const (
	StatusExpected   CtStatus = 1 << iota // IPS_EXPECTED
	StatusSeenReply                       // IPS_SEEN_REPLY
	StatusAssured                         // IPS_ASSURED
	StatusConfirmed                       // IPS_CONFIRMED: the entry is in the table
	StatusSrcNAT                          // IPS_SRC_NAT: the source is translated
	StatusDstNAT                          // IPS_DST_NAT: the destination is translated
	StatusSrcNATDone                      // IPS_SRC_NAT_DONE: the SNAT decision was taken (maybe a null binding)
	StatusDstNATDone                      // IPS_DST_NAT_DONE: the DNAT decision was taken (maybe a null binding)
)

var ctStatusNames = [...]string{"EXPECTED", "SEEN_REPLY", "ASSURED", "CONFIRMED", "SRC_NAT", "DST_NAT", "SRC_NAT_DONE", "DST_NAT_DONE"}

// String lists the bits set, comma-separated, as conntrack -L prints them.
func (s CtStatus) String() string {
	var parts []string
	for i, n := range ctStatusNames {
		if s&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	return strings.Join(parts, ",")
}

// Tuple is one direction of a connection as conntrack keys it: the protocol, the
// addresses and the ports (for ICMP echo, the identifier in both).
type Tuple struct {
	Proto            uint8
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
}

// Invert returns the tuple of the other direction.
func (t Tuple) Invert() Tuple {
	return Tuple{Proto: t.Proto, Src: t.Dst, Dst: t.Src, SrcPort: t.DstPort, DstPort: t.SrcPort}
}

// String renders the tuple as conntrack -L does.
func (t Tuple) String() string {
	return fmt.Sprintf("src=%s dst=%s sport=%d dport=%d", t.Src, t.Dst, t.SrcPort, t.DstPort)
}

// NATBinding is an existing connection's NAT binding, as the original direction's
// packets get it from its conntrack entry: the destination DNAT gave it and the source
// SNAT or MASQUERADE gave it (invalid: none). The rule engines' walks apply it to a
// packet of an established connection, whose nat chains do not run.
type NATBinding struct {
	DNAT  netip.AddrPort
	SNAT  netip.AddrPort
	Entry string // the conntrack entry, for the trace
}
