package emulator

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// The icmp and icmp6 match modules and their type names.

// ICMPMatch is -m icmp --icmp-type or -m icmp6 --icmpv6-type. Any is the "any" type.
type ICMPMatch struct {
	V6               bool
	Any              bool
	Type             uint8
	CodeMin, CodeMax uint8
	Neg              bool
	set              bool
}

type icmpName struct {
	name             string
	typ              uint8
	codeMin, codeMax uint8
}

var icmpNames = []icmpName{
	{"echo-reply", 0, 0, 255}, {"pong", 0, 0, 255},
	{"destination-unreachable", 3, 0, 255},
	{"network-unreachable", 3, 0, 0}, {"host-unreachable", 3, 1, 1}, {"protocol-unreachable", 3, 2, 2},
	{"port-unreachable", 3, 3, 3}, {"fragmentation-needed", 3, 4, 4}, {"source-route-failed", 3, 5, 5},
	{"network-unknown", 3, 6, 6}, {"host-unknown", 3, 7, 7}, {"network-prohibited", 3, 9, 9},
	{"host-prohibited", 3, 10, 10}, {"TOS-network-unreachable", 3, 11, 11}, {"TOS-host-unreachable", 3, 12, 12},
	{"communication-prohibited", 3, 13, 13}, {"host-precedence-violation", 3, 14, 14},
	{"precedence-cutoff", 3, 15, 15}, {"source-quench", 4, 0, 255}, {"redirect", 5, 0, 255},
	{"network-redirect", 5, 0, 0}, {"host-redirect", 5, 1, 1}, {"TOS-network-redirect", 5, 2, 2},
	{"TOS-host-redirect", 5, 3, 3}, {"echo-request", 8, 0, 255}, {"ping", 8, 0, 255},
	{"router-advertisement", 9, 0, 255}, {"router-solicitation", 10, 0, 255},
	{"time-exceeded", 11, 0, 255}, {"ttl-exceeded", 11, 0, 255}, {"ttl-zero-during-transit", 11, 0, 0},
	{"ttl-zero-during-reassembly", 11, 1, 1}, {"parameter-problem", 12, 0, 255}, {"ip-header-bad", 12, 0, 0},
	{"required-option-missing", 12, 1, 1}, {"timestamp-request", 13, 0, 255}, {"timestamp-reply", 14, 0, 255},
	{"address-mask-request", 17, 0, 255}, {"address-mask-reply", 18, 0, 255},
}

var icmp6Names = []icmpName{
	{"destination-unreachable", 1, 0, 255}, {"no-route", 1, 0, 0}, {"communication-prohibited", 1, 1, 1},
	{"beyond-scope", 1, 2, 2}, {"address-unreachable", 1, 3, 3}, {"port-unreachable", 1, 4, 4},
	{"failed-policy", 1, 5, 5}, {"reject-route", 1, 6, 6}, {"packet-too-big", 2, 0, 255},
	{"time-exceeded", 3, 0, 255}, {"ttl-exceeded", 3, 0, 255}, {"ttl-zero-during-transit", 3, 0, 0},
	{"ttl-zero-during-reassembly", 3, 1, 1}, {"parameter-problem", 4, 0, 255},
	{"bad-header", 4, 0, 0}, {"unknown-header-type", 4, 1, 1}, {"unknown-option", 4, 2, 2},
	{"echo-request", 128, 0, 255}, {"ping", 128, 0, 255}, {"echo-reply", 129, 0, 255}, {"pong", 129, 0, 255},
	{"router-solicitation", 133, 0, 255}, {"router-advertisement", 134, 0, 255},
	{"neighbour-solicitation", 135, 0, 255}, {"neighbor-solicitation", 135, 0, 255},
	{"neighbour-advertisement", 136, 0, 255}, {"neighbor-advertisement", 136, 0, 255},
	{"redirect", 137, 0, 255},
}

// Module implements Match.
func (m *ICMPMatch) Module() string {
	if m.V6 {
		return "icmp6"
	}
	return "icmp"
}

func (m *ICMPMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	s := args[0].val
	m.Neg, m.set = neg, true
	if s == "any" && !m.V6 {
		m.Any = true
		return nil
	}
	names := icmpNames
	if m.V6 {
		names = icmp6Names
	}
	for _, n := range names {
		if strings.EqualFold(n.name, s) {
			m.Type, m.CodeMin, m.CodeMax = n.typ, n.codeMin, n.codeMax
			return nil
		}
	}
	ts, cs, hasCode := strings.Cut(s, "/")
	t, err := strconv.ParseUint(ts, 10, 8)
	if err != nil {
		return fmt.Errorf("invalid ICMP type %q", s)
	}
	m.Type, m.CodeMin, m.CodeMax = uint8(t), 0, 255
	if hasCode {
		c, err := strconv.ParseUint(cs, 10, 8)
		if err != nil {
			return fmt.Errorf("invalid ICMP code %q", s)
		}
		m.CodeMin, m.CodeMax = uint8(c), uint8(c)
	}
	return nil
}

func (m *ICMPMatch) finish(rc *ruleCtx) error {
	if m.V6 {
		if rc.family != IPv6 {
			return fmt.Errorf("-m icmp6 is for IPv6 rules")
		}
		return needProto(rc, "-m icmp6", netfilter.ProtoICMPv6)
	}
	if rc.family != IPv4 {
		return fmt.Errorf("-m icmp is for IPv4 rules (use -m icmp6)")
	}
	return needProto(rc, "-m icmp", netfilter.ProtoICMP)
}

func (m *ICMPMatch) appendArgs(b []byte) []byte {
	if !m.set {
		return b
	}
	b = appendNeg(b, m.Neg)
	if m.V6 {
		b = append(b, " --icmpv6-type "...)
	} else {
		b = append(b, " --icmp-type "...)
	}
	if m.Any {
		return append(b, "any"...)
	}
	b = strconv.AppendUint(b, uint64(m.Type), 10)
	if m.CodeMin != 0 || m.CodeMax != 255 {
		b = append(b, '/')
		b = strconv.AppendUint(b, uint64(m.CodeMin), 10)
		if m.CodeMax != m.CodeMin {
			b = append(b, '-')
			b = strconv.AppendUint(b, uint64(m.CodeMax), 10)
		}
	}
	return b
}

func (m *ICMPMatch) eval(c *evalCtx) tri {
	p := c.pkt
	want := netfilter.ProtoICMP
	if m.V6 {
		want = netfilter.ProtoICMPv6
	}
	if p.Fragment || p.Proto != want {
		return no
	}
	if !m.set {
		return yes
	}
	ok := m.Any || (p.ICMPType == m.Type && p.ICMPCode >= m.CodeMin && p.ICMPCode <= m.CodeMax)
	return triOf(ok != m.Neg)
}

// ParseICMPType parses an ICMP (v6: ICMPv6) type as iptables names it: a name
// ("echo-request", "fragmentation-needed"), a number, or "TYPE/CODE". code is the
// name's code when it names exactly one, else 0; hasCode says whether s gave one.
func ParseICMPType(s string, v6 bool) (typ, code uint8, hasCode bool, err error) {
	names := icmpNames
	if v6 {
		names = icmp6Names
	}
	for _, n := range names {
		if strings.EqualFold(n.name, s) {
			if n.codeMin == n.codeMax {
				return n.typ, n.codeMin, true, nil
			}
			return n.typ, 0, false, nil
		}
	}
	ts, cs, withCode := strings.Cut(s, "/")
	t, err := strconv.ParseUint(ts, 10, 8)
	if err != nil {
		return 0, 0, false, fmt.Errorf("unknown ICMP type %q", s)
	}
	if !withCode {
		return uint8(t), 0, false, nil
	}
	c, err := strconv.ParseUint(cs, 10, 8)
	if err != nil {
		return 0, 0, false, fmt.Errorf("invalid ICMP code in %q", s)
	}
	return uint8(t), uint8(c), true, nil
}
