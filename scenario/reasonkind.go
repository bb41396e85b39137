package scenario

import "strings"

// ReasonKind sorts why an attempt failed (a probe's or a dial's reason) into the kind
// of failure, without the parts that name a mode's rules: "a rule rejected it
// (icmp-port-unreachable)" whether an iptables rule, an nftables rule or IPVS did, "a
// rule dropped it", "routing: no route", "nothing listens", and so on. Comparisons of
// modes and versions compare kinds, so that the same outcome for a different reason
// (a rule's drop against a routing failure) shows as a difference while the same
// reason in another mode's words does not.
func ReasonKind(reason string) string {
	r := reason
	switch {
	case strings.HasPrefix(r, "the reply did not come back: "):
		return "the reply did not come back: " + ReasonKind(strings.TrimPrefix(r, "the reply did not come back: "))
	case strings.HasPrefix(r, "the handshake's ACK did not arrive: "):
		return "the handshake's ACK did not arrive: " + ReasonKind(strings.TrimPrefix(r, "the handshake's ACK did not arrive: "))
	case strings.HasPrefix(r, "rejected ("):
		with, _, _ := strings.Cut(strings.TrimPrefix(r, "rejected ("), ")")
		return "a rule rejected it (" + with + ")"
	case strings.HasPrefix(r, "dropped by NetworkPolicy "):
		return "NetworkPolicy dropped it"
	case strings.HasPrefix(r, "dropped by "):
		return "a rule dropped it"
	case strings.HasPrefix(r, "no route to "), strings.HasPrefix(r, "rerouted to a local address"):
		return "routing: no route"
	case strings.HasPrefix(r, "no neighbour"):
		return "routing: no neighbour answers ARP"
	case strings.HasPrefix(r, "martian"):
		return "routing: martian address"
	case strings.HasPrefix(r, "ip_forward=0"):
		return "routing: the node does not forward"
	case strings.HasPrefix(r, "bridge hairpin mode off"):
		return "the bridge does not hairpin"
	case strings.HasPrefix(r, "conntrack insert clash"):
		return "conntrack insert clash"
	case strings.HasPrefix(r, "nothing listens on "):
		return "nothing listens"
	case strings.HasPrefix(r, "SYN-ACK came from "), strings.HasPrefix(r, "reply came from "):
		return "the reply came from the wrong address"
	case strings.Contains(r, "past the probe's timeout"):
		return "too slow: past the timeout"
	case strings.HasPrefix(r, "TTL exceeded"):
		return "TTL exceeded"
	}
	return r
}
