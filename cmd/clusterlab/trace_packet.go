package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"

	"github.com/spf13/pflag"
)

// The packet flags beyond a first TCP, UDP or SCTP packet: an ICMP message (--proto
// icmp --icmp-type) and a packet of an existing connection (--ctstate, --reply), for
// --iptables-save and --nft-ruleset.

const tracePacketLong = `

--proto icmp traces an ICMP message (ICMPv6 with IPv6 addresses) instead: --icmp-type
names its type as iptables does (echo-request, the default; echo-reply,
fragmentation-needed, port-unreachable, packet-too-big, ...; or TYPE or TYPE/CODE),
--icmp-code its code; ICMP has no ports (no --dport or --sport).

By default the packet is the first of a new connection (conntrack state NEW).
--ctstate ESTABLISHED, RELATED or INVALID traces a later packet instead, and --reply a
packet in the reply direction of an established connection (--ctdir REPLY; ESTABLISHED
unless --ctstate says RELATED). As in the kernel, the nat table (nftables: nat chains)
runs only for a connection's first packet: for ESTABLISHED and RELATED packets the
conntrack entry's binding applies, and a packet conntrack has no entry for (INVALID)
is not translated at all; the trace says so and follows the packet with the addresses
given (give them as they are on the wire at the node). A TCP packet of an existing
connection has ACK set instead of SYN; --ctstate NEW is the default first packet.`

// addPacketTraceFlags adds the ICMP and connection-state flags.
func addPacketTraceFlags(f *pflag.FlagSet, o *traceOptions) {
	f.StringVar(&o.icmpType, "icmp-type", "", "with --proto icmp: the ICMP type, a name (echo-request, fragmentation-needed, ...) or TYPE[/CODE] (default echo-request)")
	f.IntVar(&o.icmpCode, "icmp-code", -1, "with --proto icmp: the ICMP code (-1: the --icmp-type name's code, else 0)")
	f.StringVar(&o.ctstate, "ctstate", "", "the packet's conntrack state: NEW (a first packet, the default), ESTABLISHED, RELATED or INVALID (nat tables are skipped for all but NEW)")
	f.BoolVar(&o.reply, "reply", false, "trace a packet in the reply direction of an existing connection (conntrack ESTABLISHED unless --ctstate RELATED)")
}

// packetProto is the --proto flag's protocol number; it checks the ports (ICMP has none).
func (o *traceOptions) packetProto(v6 bool) (uint8, error) {
	var proto uint8
	switch strings.ToLower(o.proto) {
	case "tcp":
		proto = netfilter.ProtoTCP
	case "udp":
		proto = netfilter.ProtoUDP
	case "sctp":
		proto = netfilter.ProtoSCTP
	case "icmp", "icmpv6", "icmp6", "ipv6-icmp":
		if o.dport != 0 || o.sportSet {
			return 0, fmt.Errorf("--dport, --sport: not for --proto icmp (ICMP has no ports)")
		}
		if v6 {
			return netfilter.ProtoICMPv6, nil
		}
		return netfilter.ProtoICMP, nil
	default:
		return 0, fmt.Errorf("--proto %q: want tcp, udp, sctp or icmp", o.proto)
	}
	if o.icmpType != "" || o.icmpCode >= 0 {
		return 0, fmt.Errorf("--icmp-type, --icmp-code: only with --proto icmp")
	}
	if o.dport < 1 || o.dport > 65535 {
		return 0, fmt.Errorf("--dport %d: want a port in 1-65535", o.dport)
	}
	if o.sport < 1 || o.sport > 65535 {
		return 0, fmt.Errorf("--sport %d: want a port in 1-65535", o.sport)
	}
	return proto, nil
}

// ctStates are the --ctstate values.
var ctStates = map[string]netfilter.CtState{"NEW": netfilter.CtNew, "ESTABLISHED": netfilter.CtEstablished,
	"RELATED": netfilter.CtRelated, "INVALID": netfilter.CtInvalid}

// packetState sets the packet's ICMP type and code, its TCP flags and, for a packet of
// an existing connection, the walk's conntrack state.
func (o *traceOptions) packetState(p *emulator.Packet, in *emulator.WalkInput) error {
	if p.Proto == netfilter.ProtoICMP || p.Proto == netfilter.ProtoICMPv6 {
		name := o.icmpType
		if name == "" {
			name = "echo-request"
		}
		t, c, _, err := emulator.ParseICMPType(name, p.Proto == netfilter.ProtoICMPv6)
		if err != nil {
			return fmt.Errorf("--icmp-type: %w", err)
		}
		if o.icmpCode > 255 {
			return fmt.Errorf("--icmp-code %d: want 0-255", o.icmpCode)
		}
		if o.icmpCode >= 0 {
			c = uint8(o.icmpCode)
		}
		p.ICMPType, p.ICMPCode = t, c
		p.SrcPort, p.DstPort = 0, 0
	}
	state := netfilter.CtNew
	if o.ctstate != "" {
		s, ok := ctStates[strings.ToUpper(o.ctstate)]
		if !ok {
			return fmt.Errorf("--ctstate %q: want NEW, ESTABLISHED, RELATED or INVALID", o.ctstate)
		}
		state = s
	}
	if o.reply {
		switch {
		case o.ctstate == "":
			state = netfilter.CtEstablished
		case state == netfilter.CtNew || state == netfilter.CtInvalid:
			return errors.New("--reply: a reply belongs to an existing connection (--ctstate ESTABLISHED or RELATED)")
		}
	}
	if p.Proto == netfilter.ProtoTCP {
		p.TCPFlags = netfilter.TCPSyn
		if state != netfilter.CtNew {
			p.TCPFlags = netfilter.TCPAck
		}
	}
	if state == netfilter.CtNew {
		return nil // the walk's default: a first packet
	}
	ct := &emulator.Conntrack{State: state}
	if state != netfilter.CtInvalid {
		tuple := netfilter.Tuple{Proto: p.Proto, Src: p.Src, Dst: p.Dst, SrcPort: p.SrcPort, DstPort: p.DstPort}
		ct.Status = netfilter.StatusConfirmed | netfilter.StatusSeenReply | netfilter.StatusAssured
		ct.Orig, ct.ReplyTuple = tuple, tuple.Invert()
		if o.reply {
			ct.Reply = true
			ct.Orig, ct.ReplyTuple = ct.ReplyTuple, ct.Orig
		}
	}
	in.Conntrack = ct
	return nil
}
