package difffuzz

import "net/netip"

// Prediction is an emulator walk's outcome, in the terms both emulators' Outcome share.
type Prediction struct {
	Verdict    string // ACCEPT, LOCAL, DROP, REJECT
	RejectWith string // iptables' --reject-with name ("" = icmp-port-unreachable)
	// SendPath: the verdict was decided at OUTPUT or POSTROUTING, on the way out of
	// the node (for the node's own packet: inside the sender's system call).
	SendPath    bool
	DNAT        *string // the DNAT destination, ADDR or ADDR:PORT
	Masqueraded bool
	SNAT        *string // the SNAT source (nil: unknown)
}

// RejectSeen is what a client sees of a reject, by protocol and type. The TCP client
// reads ICMP errors as they come (IP_RECVERR); a connected UDP socket without
// IP_RECVERR reports only the ICMP errors the kernel deems hard (icmp_err_convert's
// fatal flag), so net and host unreachable are a timeout there.
var RejectSeen = map[string]map[string]string{
	"tcp": {"tcp-reset": "refused", "icmp-port-unreachable": "refused", "icmp-net-unreachable": "unreachable",
		"icmp-host-unreachable": "unreachable", "icmp-proto-unreachable": "failed ENOPROTOOPT",
		"icmp-net-prohibited": "unreachable", "icmp-host-prohibited": "unreachable", "icmp-admin-prohibited": "unreachable"},
	"udp": {"icmp-port-unreachable": "refused", "icmp-net-unreachable": "timeout",
		"icmp-host-unreachable": "timeout", "icmp-proto-unreachable": "failed ENOPROTOOPT",
		"icmp-net-prohibited": "unreachable", "icmp-host-prohibited": "unreachable", "icmp-admin-prohibited": "unreachable"},
}

// Expect is what the client should see, by the emulator's outcome: the observation in
// the form Observed gives the kernel's. A result ending in "?" is no prediction.
func Expect(o Prediction, p Packet) string {
	switch o.Verdict {
	case "ACCEPT", "LOCAL":
		dst := p.Dst
		if o.DNAT != nil {
			if ap, err := netip.ParseAddrPort(*o.DNAT); err == nil {
				dst = ap
			} else if a, err := netip.ParseAddr(*o.DNAT); err == nil {
				dst = netip.AddrPortFrom(a, dst.Port())
			} else {
				return "emulator DNAT destination " + *o.DNAT + "?"
			}
		}
		owner := Owner[dst.Addr()]
		if dst.Addr().IsLoopback() {
			// A redirect of the node's own packet: nothing listens on loopback here,
			// so the node's stack refuses it (a reset, or port unreachable).
			return "refused"
		}
		if owner == "" {
			return "no owner for " + dst.Addr().String()
		}
		if !Open[dst.Port()] {
			return "refused"
		}
		src := p.Src.Addr()
		if o.Masqueraded {
			if o.SNAT == nil {
				return "answered " + owner + " from the masquerade address (unknown)"
			}
			ap, err := netip.ParseAddrPort(*o.SNAT)
			if err != nil {
				a, err2 := netip.ParseAddr(*o.SNAT)
				if err2 != nil {
					return "emulator SNAT source " + *o.SNAT + "?"
				}
				ap = netip.AddrPortFrom(a, 0)
			}
			src = ap.Addr()
		}
		return "answered " + owner + " from " + src.String()
	case "DROP":
		if p.From == "node" && o.SendPath && p.Proto == "udp" {
			// The node's own datagram dropped at OUTPUT or POSTROUTING: the send
			// fails with EPERM (nf_hook_slow's -EPERM for NF_DROP, returned through
			// ip_local_out). TCP's connect ignores the error of its SYN's
			// transmission and waits.
			return "eperm"
		}
		return "timeout"
	case "REJECT":
		if p.From == "node" && o.SendPath && p.Proto == "udp" {
			return "eperm"
		}
		w := o.RejectWith
		if w == "" {
			w = "icmp-port-unreachable"
		}
		if s, ok := RejectSeen[p.Proto][w]; ok {
			return s
		}
		return "reject " + w + "?"
	}
	return "verdict " + o.Verdict + "?"
}
