package emulator

import (
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// The conntrack and state match modules: state names and bits, status names,
// address and range specs.

var ctStateNames = []struct {
	name string
	bit  uint8
}{{"INVALID", ctbInvalid}, {"NEW", ctbNew}, {"RELATED", ctbRelated}, {"ESTABLISHED", ctbEstablished},
	{"UNTRACKED", ctbUntracked}, {"SNAT", ctbSNAT}, {"DNAT", ctbDNAT}}

// State bits of the conntrack and state matches.
const (
	ctbInvalid uint8 = 1 << iota
	ctbNew
	ctbRelated
	ctbEstablished
	ctbUntracked
	ctbSNAT
	ctbDNAT
)

func parseStates(s string, allowNAT bool) (uint8, error) {
	var v uint8
	for _, part := range strings.Split(s, ",") {
		found := false
		for _, n := range ctStateNames {
			if strings.EqualFold(part, n.name) && (allowNAT || n.bit < ctbSNAT) {
				v |= n.bit
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("bad state %q", part)
		}
	}
	return v, nil
}

func appendStates(b []byte, v uint8) []byte {
	first := true
	for _, n := range ctStateNames {
		if v&n.bit != 0 {
			if !first {
				b = append(b, ',')
			}
			b = append(b, n.name...)
			first = false
		}
	}
	return b
}

// packetStateBits returns the state bits of a packet (without the SNAT/DNAT ones).
func packetStateBits(p *Packet) uint8 {
	switch p.CT.State {
	case netfilter.CtNew:
		return ctbNew
	case netfilter.CtEstablished:
		return ctbEstablished
	case netfilter.CtRelated:
		return ctbRelated
	case netfilter.CtUntracked:
		return ctbUntracked
	}
	return ctbInvalid
}

func hasCT(p *Packet) bool {
	return p.CT.State != netfilter.CtInvalid && p.CT.State != netfilter.CtUntracked
}

var ctStatusNames = []struct {
	name string
	bit  netfilter.CtStatus
}{{"EXPECTED", netfilter.StatusExpected}, {"SEEN_REPLY", netfilter.StatusSeenReply}, {"ASSURED", netfilter.StatusAssured}, {"CONFIRMED", netfilter.StatusConfirmed}}

// CTAddrSpec is a negatable conntrack address prefix.
type CTAddrSpec struct {
	Prefix netip.Prefix
	Neg    bool
}

// CTRangeSpec is a negatable range (ports, expiry seconds).
type CTRangeSpec struct {
	Min, Max uint32
	Neg      bool
}

// ConntrackMatch is -m conntrack.
type ConntrackMatch struct {
	State                                              *uint8 // state bits
	StateNeg                                           bool
	Proto                                              *uint8
	ProtoNeg                                           bool
	OrigSrc, OrigDst, ReplSrc, ReplDst                 *CTAddrSpec
	OrigSrcPort, OrigDstPort, ReplSrcPort, ReplDstPort *CTRangeSpec
	Status                                             *netfilter.CtStatus
	StatusNeg                                          bool
	Expire                                             *CTRangeSpec
	Dir                                                string // "", "ORIGINAL" or "REPLY"
}

// Module implements Match.
func (*ConntrackMatch) Module() string { return "conntrack" }

func parseCTRange(s string, neg bool, max uint64) (*CTRangeSpec, error) {
	lo, hi, isRange := strings.Cut(s, ":")
	a, err := strconv.ParseUint(lo, 10, 32)
	if err != nil || a > max {
		return nil, fmt.Errorf("invalid value %q", s)
	}
	b := a
	if isRange {
		if b, err = strconv.ParseUint(hi, 10, 32); err != nil || b > max || b < a {
			return nil, fmt.Errorf("invalid range %q", s)
		}
	}
	return &CTRangeSpec{uint32(a), uint32(b), neg}, nil
}

func (m *ConntrackMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	s := args[0].val
	var err error
	switch opt {
	case "--ctstate":
		var v uint8
		v, err = parseStates(s, true)
		m.State, m.StateNeg = &v, neg
	case "--ctproto":
		var p uint8
		p, err = ParseProto(s)
		if err == nil && p == 0 {
			err = fmt.Errorf("--ctproto needs a protocol")
		}
		m.Proto, m.ProtoNeg = &p, neg
	case "--ctorigsrc", "--ctorigdst", "--ctreplsrc", "--ctrepldst":
		var p netip.Prefix
		p, err = parsePrefix(s, rc.family)
		spec := &CTAddrSpec{p, neg}
		switch opt {
		case "--ctorigsrc":
			m.OrigSrc = spec
		case "--ctorigdst":
			m.OrigDst = spec
		case "--ctreplsrc":
			m.ReplSrc = spec
		default:
			m.ReplDst = spec
		}
	case "--ctorigsrcport", "--ctorigdstport", "--ctreplsrcport", "--ctrepldstport":
		var r *CTRangeSpec
		r, err = parseCTRange(s, neg, 65535)
		switch opt {
		case "--ctorigsrcport":
			m.OrigSrcPort = r
		case "--ctorigdstport":
			m.OrigDstPort = r
		case "--ctreplsrcport":
			m.ReplSrcPort = r
		default:
			m.ReplDstPort = r
		}
	case "--ctstatus":
		var v netfilter.CtStatus
		for _, part := range strings.Split(s, ",") {
			found := strings.EqualFold(part, "NONE")
			for _, n := range ctStatusNames {
				if strings.EqualFold(part, n.name) {
					v |= n.bit
					found = true
				}
			}
			if !found {
				return fmt.Errorf("bad status %q", part)
			}
		}
		m.Status, m.StatusNeg = &v, neg
	case "--ctexpire":
		m.Expire, err = parseCTRange(s, neg, math.MaxUint32)
	case "--ctdir":
		switch strings.ToUpper(s) {
		case "ORIGINAL", "REPLY":
			m.Dir = strings.ToUpper(s)
		default:
			err = fmt.Errorf("bad direction %q (want ORIGINAL or REPLY)", s)
		}
	}
	return err
}

func (m *ConntrackMatch) finish(*ruleCtx) error { return nil }

func appendCTRange(b []byte, opt string, r *CTRangeSpec) []byte {
	if r == nil {
		return b
	}
	b = appendNeg(b, r.Neg)
	b = append(b, ' ')
	b = append(b, opt...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(r.Min), 10)
	if r.Max != r.Min {
		b = append(b, ':')
		b = strconv.AppendUint(b, uint64(r.Max), 10)
	}
	return b
}

func appendCTAddrOpt(b []byte, opt string, a *CTAddrSpec) []byte {
	if a == nil {
		return b
	}
	b = appendNeg(b, a.Neg)
	b = append(b, ' ')
	b = append(b, opt...)
	b = append(b, ' ')
	return appendCTAddr(b, a.Prefix)
}

func (m *ConntrackMatch) appendArgs(b []byte) []byte {
	if m.State != nil {
		b = appendNeg(b, m.StateNeg)
		b = append(b, " --ctstate "...)
		b = appendStates(b, *m.State)
	}
	if m.Proto != nil {
		b = appendNeg(b, m.ProtoNeg)
		b = append(b, " --ctproto "...)
		b = strconv.AppendUint(b, uint64(*m.Proto), 10)
	}
	b = appendCTAddrOpt(b, "--ctorigsrc", m.OrigSrc)
	b = appendCTAddrOpt(b, "--ctorigdst", m.OrigDst)
	b = appendCTAddrOpt(b, "--ctreplsrc", m.ReplSrc)
	b = appendCTAddrOpt(b, "--ctrepldst", m.ReplDst)
	b = appendCTRange(b, "--ctorigsrcport", m.OrigSrcPort)
	b = appendCTRange(b, "--ctorigdstport", m.OrigDstPort)
	b = appendCTRange(b, "--ctreplsrcport", m.ReplSrcPort)
	b = appendCTRange(b, "--ctrepldstport", m.ReplDstPort)
	if m.Status != nil {
		b = appendNeg(b, m.StatusNeg)
		b = append(b, " --ctstatus "...)
		if *m.Status == 0 {
			b = append(b, "NONE"...)
		} else {
			first := true
			for _, n := range ctStatusNames {
				if *m.Status&n.bit != 0 {
					if !first {
						b = append(b, ',')
					}
					b = append(b, n.name...)
					first = false
				}
			}
		}
	}
	b = appendCTRange(b, "--ctexpire", m.Expire)
	if m.Dir != "" {
		b = append(b, " --ctdir "...)
		b = append(b, m.Dir...)
	}
	return b
}

func (m *ConntrackMatch) eval(c *evalCtx) tri {
	p := c.pkt
	if m.State != nil {
		bits := packetStateBits(p)
		if hasCT(p) {
			if p.CT.Status&netfilter.StatusSrcNAT != 0 {
				bits |= ctbSNAT
			}
			if p.CT.Status&netfilter.StatusDstNAT != 0 {
				bits |= ctbDNAT
			}
		}
		if (*m.State&bits != 0) == m.StateNeg {
			return no
		}
	}
	if !hasCT(p) {
		return triOf(m.State != nil && m.Proto == nil && m.OrigSrc == nil && m.OrigDst == nil &&
			m.ReplSrc == nil && m.ReplDst == nil && m.OrigSrcPort == nil && m.OrigDstPort == nil &&
			m.ReplSrcPort == nil && m.ReplDstPort == nil && m.Status == nil && m.Expire == nil && m.Dir == "")
	}
	if m.Dir != "" && (m.Dir == "REPLY") != p.CT.Reply {
		return no
	}
	if m.Proto != nil && (p.Proto == *m.Proto) == m.ProtoNeg {
		return no
	}
	o, r := p.origTuple(), p.replyTuple()
	addr := func(a *CTAddrSpec, v netip.Addr) bool { return a == nil || a.Prefix.Contains(v) != a.Neg }
	port := func(s *CTRangeSpec, v uint16) bool {
		return s == nil || (uint32(v) >= s.Min && uint32(v) <= s.Max) != s.Neg
	}
	if !addr(m.OrigSrc, o.Src) || !addr(m.OrigDst, o.Dst) || !addr(m.ReplSrc, r.Src) || !addr(m.ReplDst, r.Dst) {
		return no
	}
	if !port(m.OrigSrcPort, o.SrcPort) || !port(m.OrigDstPort, o.DstPort) || !port(m.ReplSrcPort, r.SrcPort) || !port(m.ReplDstPort, r.DstPort) {
		return no
	}
	if m.Status != nil && (p.CT.Status&*m.Status != 0) == m.StatusNeg {
		return no
	}
	if m.Expire != nil {
		s := uint64(p.CT.Expire.Seconds())
		if (s >= uint64(m.Expire.Min) && s <= uint64(m.Expire.Max)) == m.Expire.Neg {
			return no
		}
	}
	return yes
}

// StateMatch is -m state --state LIST.
type StateMatch struct {
	States uint8
	Neg    bool
}

// Module implements Match.
func (*StateMatch) Module() string { return "state" }

func (m *StateMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	v, err := parseStates(args[0].val, false)
	m.States, m.Neg = v, neg
	return err
}

func (m *StateMatch) finish(rc *ruleCtx) error {
	if !rc.has(m, "--state") {
		return fmt.Errorf("-m state needs --state")
	}
	return nil
}

func (m *StateMatch) appendArgs(b []byte) []byte {
	b = appendNeg(b, m.Neg)
	b = append(b, " --state "...)
	return appendStates(b, m.States)
}

func (m *StateMatch) eval(c *evalCtx) tri {
	return triOf((m.States&packetStateBits(c.pkt) != 0) != m.Neg)
}
