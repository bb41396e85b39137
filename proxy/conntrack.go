package proxy

import "net/netip"

// Conntrack is how a proxy mode clears stale connection-tracking entries, as kube-proxy
// does for UDP services whose endpoints went away. Implementations: the netsim datapath's
// conntrack table, and package kernel's wrapper of the conntrack tool.
type Conntrack interface {
	// Delete removes every entry the filter matches and returns how many it removed.
	Delete(ConntrackFilter) (int, error)
}

// ConntrackFilter selects conntrack entries the way the conntrack tool's -D options do.
// Zero fields match anything.
type ConntrackFilter struct {
	Protocol     uint8      // IP protocol number (6 TCP, 17 UDP, 132 SCTP); -p
	OrigSrc      netip.Addr // --orig-src
	OrigDst      netip.Addr // --orig-dst
	OrigDstPort  uint16     // --orig-port-dst
	ReplySrc     netip.Addr // --reply-src: the endpoint a DNAT chose
	ReplySrcPort uint16     // --reply-port-src
}
