package emulator

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// The tcp, udp and sctp match modules: ports (with the kernel's full-range
// elision), TCP flags and options, SCTP chunk types.

// PortSpec is a negatable port range.
type PortSpec struct {
	PortRange
	Neg bool
}

func parsePortSpec(s string, neg bool) (*PortSpec, error) {
	r, err := parsePortRange(s)
	return portSpec(r, err, neg)
}

// parseUDPPortSpec is parsePortSpec for -m udp, which takes a reversed range.
func parseUDPPortSpec(s string, neg bool) (*PortSpec, error) {
	r, err := parsePortRangeAnyOrder(s)
	return portSpec(r, err, neg)
}

func portSpec(r PortRange, err error, neg bool) (*PortSpec, error) {
	if err != nil {
		return nil, err
	}
	if r.Min == 0 && r.Max == 65535 && !neg {
		return nil, nil // the kernel drops a full range; iptables-save prints nothing
	}
	return &PortSpec{r, neg}, nil
}

func appendPortOpt(b []byte, opt string, p *PortSpec) []byte {
	if p == nil {
		return b
	}
	if p.Neg {
		b = append(b, " !"...)
	}
	b = append(b, ' ')
	b = append(b, opt...)
	b = append(b, ' ')
	return appendPortRange(b, p.PortRange)
}

func (p *PortSpec) match(port uint16) bool {
	return p == nil || p.contains(port) != p.Neg
}

// TCPFlags is --tcp-flags MASK COMP (or --syn): (flags & Mask) == Comp.
type TCPFlags struct {
	Mask, Comp uint8
	Neg        bool
}

var tcpFlagNames = []struct {
	name string
	bit  uint8
}{{"FIN", 0x01}, {"SYN", 0x02}, {"RST", 0x04}, {"PSH", 0x08}, {"ACK", 0x10}, {"URG", 0x20}, {"ECE", 0x40}, {"CWR", 0x80}}

func parseTCPFlags(s string) (uint8, error) {
	switch s {
	case "ALL":
		return 0x3f, nil
	case "NONE":
		return 0, nil
	}
	var v uint8
	for _, part := range strings.Split(s, ",") {
		found := false
		for _, f := range tcpFlagNames {
			if strings.EqualFold(part, f.name) {
				v |= f.bit
				found = true
			}
		}
		if strings.EqualFold(part, "ALL") {
			v |= 0x3f
			found = true
		} else if strings.EqualFold(part, "NONE") {
			found = true
		}
		if !found {
			return 0, fmt.Errorf("unknown TCP flag %q", part)
		}
	}
	return v, nil
}

func appendTCPFlags(b []byte, v uint8) []byte {
	if v == 0 {
		return append(b, "NONE"...)
	}
	first := true
	for _, f := range tcpFlagNames {
		if v&f.bit != 0 {
			if !first {
				b = append(b, ',')
			}
			b = append(b, f.name...)
			first = false
		}
	}
	return b
}

// TCPMatch is -m tcp.
type TCPMatch struct {
	Sport, Dport *PortSpec
	Flags        *TCPFlags
	// Option is --tcp-option N; the emulator does not model TCP options, so a rule
	// with it is undecidable.
	Option    int // 0: absent
	OptionNeg bool
}

// Module implements Match.
func (*TCPMatch) Module() string { return "tcp" }

func (m *TCPMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	var err error
	switch opt {
	case "--sport":
		m.Sport, err = parsePortSpec(args[0].val, neg)
	case "--dport":
		m.Dport, err = parsePortSpec(args[0].val, neg)
	case "--syn":
		if m.Flags != nil {
			return fmt.Errorf("--syn and --tcp-flags together")
		}
		m.Flags = &TCPFlags{Mask: netfilter.TCPFin | netfilter.TCPSyn | netfilter.TCPRst | netfilter.TCPAck, Comp: netfilter.TCPSyn, Neg: neg}
	case "--tcp-flags":
		if m.Flags != nil {
			return fmt.Errorf("--syn and --tcp-flags together")
		}
		f := &TCPFlags{Neg: neg}
		if f.Mask, err = parseTCPFlags(args[0].val); err == nil {
			f.Comp, err = parseTCPFlags(args[1].val)
		}
		m.Flags = f
	case "--tcp-option":
		var n uint64
		n, err = strconv.ParseUint(args[0].val, 10, 8)
		if err != nil || n == 0 {
			return fmt.Errorf("invalid TCP option %q", args[0].val)
		}
		m.Option, m.OptionNeg = int(n), neg
	}
	return err
}

func (m *TCPMatch) finish(rc *ruleCtx) error { return needProto(rc, "-m tcp", netfilter.ProtoTCP) }

func (m *TCPMatch) appendArgs(b []byte) []byte {
	b = appendPortOpt(b, "--sport", m.Sport)
	b = appendPortOpt(b, "--dport", m.Dport)
	if m.Option != 0 {
		b = appendNeg(b, m.OptionNeg)
		b = append(b, " --tcp-option "...)
		b = strconv.AppendInt(b, int64(m.Option), 10)
	}
	if m.Flags != nil {
		b = appendNeg(b, m.Flags.Neg)
		b = append(b, " --tcp-flags "...)
		b = appendTCPFlags(b, m.Flags.Mask)
		b = append(b, ' ')
		b = appendTCPFlags(b, m.Flags.Comp)
	}
	return b
}

func (m *TCPMatch) eval(c *evalCtx) tri {
	p := c.pkt
	if p.Fragment || p.Proto != netfilter.ProtoTCP {
		return no
	}
	if !m.Sport.match(p.SrcPort) || !m.Dport.match(p.DstPort) {
		return no
	}
	if m.Flags != nil && ((p.TCPFlags&m.Flags.Mask) == m.Flags.Comp) == m.Flags.Neg {
		return no
	}
	if m.Option != 0 {
		return unknown
	}
	return yes
}

// UDPMatch is -m udp.
type UDPMatch struct{ Sport, Dport *PortSpec }

// Module implements Match.
func (*UDPMatch) Module() string { return "udp" }

func (m *UDPMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	var err error
	if opt == "--sport" {
		m.Sport, err = parseUDPPortSpec(args[0].val, neg)
	} else {
		m.Dport, err = parseUDPPortSpec(args[0].val, neg)
	}
	return err
}

func (m *UDPMatch) finish(rc *ruleCtx) error { return needProto(rc, "-m udp", netfilter.ProtoUDP) }

func (m *UDPMatch) appendArgs(b []byte) []byte {
	return appendPortOpt(appendPortOpt(b, "--sport", m.Sport), "--dport", m.Dport)
}

func (m *UDPMatch) eval(c *evalCtx) tri {
	p := c.pkt
	if p.Fragment || p.Proto != netfilter.ProtoUDP {
		return no
	}
	return triOf(m.Sport.match(p.SrcPort) && m.Dport.match(p.DstPort))
}

// SCTPMatch is -m sctp. --chunk-types is kept but not modelled (undecidable).
type SCTPMatch struct {
	Sport, Dport *PortSpec
	Chunks       []string // raw "--chunk-types" arguments, with "!" first when negated
}

// Module implements Match.
func (*SCTPMatch) Module() string { return "sctp" }

func (m *SCTPMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	var err error
	switch opt {
	case "--sport":
		m.Sport, err = parsePortSpec(args[0].val, neg)
	case "--dport":
		m.Dport, err = parsePortSpec(args[0].val, neg)
	default:
		if neg {
			m.Chunks = append(m.Chunks, "!")
		}
		m.Chunks = append(m.Chunks, args[0].val, args[1].val)
	}
	return err
}

func (m *SCTPMatch) finish(rc *ruleCtx) error { return needProto(rc, "-m sctp", netfilter.ProtoSCTP) }

func (m *SCTPMatch) appendArgs(b []byte) []byte {
	b = appendPortOpt(appendPortOpt(b, "--sport", m.Sport), "--dport", m.Dport)
	if len(m.Chunks) > 0 {
		args := m.Chunks
		if args[0] == "!" {
			b = append(b, " !"...)
			args = args[1:]
		}
		b = append(b, " --chunk-types "...)
		b = append(b, strings.Join(args, " ")...)
	}
	return b
}

func (m *SCTPMatch) eval(c *evalCtx) tri {
	p := c.pkt
	if p.Fragment || p.Proto != netfilter.ProtoSCTP {
		return no
	}
	if !m.Sport.match(p.SrcPort) || !m.Dport.match(p.DstPort) {
		return no
	}
	if len(m.Chunks) > 0 {
		return unknown
	}
	return yes
}
