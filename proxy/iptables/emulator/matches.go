package emulator

import (
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
)

// Match is one match module of a rule ("-m NAME options"). The concrete types in this
// file are the modules the emulator understands; UnknownMatch keeps any other module
// verbatim.
type Match interface {
	// Module is the module name as written after -m.
	Module() string
	// appendArgs appends the module's options as iptables-save prints them, each
	// preceded by a space.
	appendArgs(b []byte) []byte
	// eval decides whether the packet matches.
	eval(c *evalCtx) tri
}

// FormatMatch renders a match as iptables-save prints it: "-m tcp --dport 80".
func FormatMatch(m Match) string {
	return string(m.appendArgs([]byte("-m " + m.Module())))
}

// tri is a three-valued match result.
type tri uint8

const (
	no tri = iota
	yes
	unknown // the emulator cannot decide (an unknown module, an unmodelled option)
)

func triOf(b bool) tri {
	if b {
		return yes
	}
	return no
}

// neg applies an inversion flag to a decided result.
func (t tri) neg(inv bool) tri {
	if t == unknown || !inv {
		return t
	}
	return 1 - t
}

// optSpec describes an option of a known module or target.
type optSpec struct {
	canon     string // the option's canonical name (aliases map to it)
	nargs     int
	negatable bool
}

// builder is a match or target under construction. option is called once per option
// with its arguments; finish validates the whole and returns the result.
type builder interface {
	option(rc *ruleCtx, opt string, neg bool, args []token) error
	finish(rc *ruleCtx) error
}

// moduleDef describes a known match module.
type moduleDef struct {
	opts map[string]optSpec
	new  func() matchBuilder
}

type matchBuilder interface {
	builder
	Match
}

func opts(specs ...any) map[string]optSpec {
	m := make(map[string]optSpec)
	for i := 0; i < len(specs); i += 3 {
		names := strings.Split(specs[i].(string), "|")
		s := optSpec{canon: names[0], nargs: specs[i+1].(int), negatable: specs[i+2].(bool)}
		for _, n := range names {
			m[n] = s
		}
	}
	return m
}

var modules map[string]*moduleDef

func init() {
	portOpts := opts("--sport|--source-port", 1, true, "--dport|--destination-port", 1, true)
	modules = map[string]*moduleDef{
		"tcp": {opts("--sport|--source-port", 1, true, "--dport|--destination-port", 1, true,
			"--tcp-flags", 2, true, "--syn", 0, true, "--tcp-option", 1, true),
			func() matchBuilder { return &TCPMatch{} }},
		"udp": {portOpts, func() matchBuilder { return &UDPMatch{} }},
		"sctp": {opts("--sport|--source-port", 1, true, "--dport|--destination-port", 1, true, "--chunk-types", 2, true),
			func() matchBuilder { return &SCTPMatch{} }},
		"icmp":      {opts("--icmp-type", 1, true), func() matchBuilder { return &ICMPMatch{} }},
		"icmp6":     {opts("--icmpv6-type", 1, true), func() matchBuilder { return &ICMPMatch{V6: true} }},
		"multiport": {opts("--sports|--source-ports", 1, true, "--dports|--destination-ports", 1, true, "--ports", 1, true), func() matchBuilder { return &MultiportMatch{} }},
		"addrtype":  {opts("--src-type", 1, true, "--dst-type", 1, true, "--limit-iface-in", 0, false, "--limit-iface-out", 0, false), func() matchBuilder { return &AddrTypeMatch{} }},
		"comment":   {opts("--comment", 1, false), func() matchBuilder { return &CommentMatch{} }},
		"statistic": {opts("--mode", 1, false, "--probability", 1, true, "--every", 1, true, "--packet", 1, false), func() matchBuilder { return &StatisticMatch{} }},
		"recent": {opts("--set", 0, true, "--rcheck", 0, true, "--update", 0, true, "--remove", 0, true,
			"--seconds", 1, false, "--reap", 0, false, "--hitcount", 1, false, "--rttl", 0, false,
			"--name", 1, false, "--rsource", 0, false, "--rdest", 0, false, "--mask", 1, false),
			func() matchBuilder { return &RecentMatch{} }},
		"conntrack": {opts("--ctstate", 1, true, "--ctproto", 1, true, "--ctorigsrc", 1, true, "--ctorigdst", 1, true,
			"--ctreplsrc", 1, true, "--ctrepldst", 1, true, "--ctorigsrcport", 1, true, "--ctorigdstport", 1, true,
			"--ctreplsrcport", 1, true, "--ctrepldstport", 1, true, "--ctstatus", 1, true, "--ctexpire", 1, true,
			"--ctdir", 1, false), func() matchBuilder { return &ConntrackMatch{} }},
		"state":    {opts("--state", 1, true), func() matchBuilder { return &StateMatch{} }},
		"mark":     {opts("--mark", 1, true), func() matchBuilder { return &MarkMatch{} }},
		"connmark": {opts("--mark", 1, true), func() matchBuilder { return &MarkMatch{Conn: true} }},
		"set": {opts("--match-set|--set", 2, true, "--return-nomatch", 0, false, "--update-counters", 0, true,
			"--update-subcounters", 0, true, "--packets-eq", 1, true, "--packets-lt", 1, false, "--packets-gt", 1, false,
			"--bytes-eq", 1, true, "--bytes-lt", 1, false, "--bytes-gt", 1, false), func() matchBuilder { return &SetMatch{} }},
		"nfacct":  {opts("--nfacct-name", 1, false), func() matchBuilder { return &NfacctMatch{} }},
		"iprange": {opts("--src-range", 1, true, "--dst-range", 1, true), func() matchBuilder { return &IPRangeMatch{} }},
	}
}

// ruleCtx is what builders may look at: the family and the rule's -p.
type ruleCtx struct {
	family Family
	proto  ProtoSpec
	seen   []seenOpt
}

type seenOpt struct {
	owner any
	opt   string
}

// has reports whether owner has seen opt.
func (rc *ruleCtx) has(owner any, opt string) bool {
	for _, s := range rc.seen {
		if s.owner == owner && s.opt == opt {
			return true
		}
	}
	return false
}

// once reports an error for an option given twice in one module.
func once(rc *ruleCtx, owner any, opt string) error {
	if rc.has(owner, opt) {
		return fmt.Errorf("%s given twice", opt)
	}
	rc.seen = append(rc.seen, seenOpt{owner, opt})
	return nil
}

func needProto(rc *ruleCtx, module string, protos ...uint8) error {
	if rc.proto.Set && !rc.proto.Neg {
		for _, p := range protos {
			if rc.proto.Num == p {
				return nil
			}
		}
	}
	names := make([]string, len(protos))
	for i, p := range protos {
		names[i] = "-p " + ProtoName(p)
	}
	return fmt.Errorf("%s needs %s", module, strings.Join(names, " or "))
}

// ---------------------------------------------------------------------------------
// tcp, udp, sctp

// PortSpec is a negatable port range.
type PortSpec struct {
	PortRange
	Neg bool
}

func parsePortSpec(s string, neg bool) (*PortSpec, error) {
	r, err := parsePortRange(s)
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
		m.Flags = &TCPFlags{Mask: TCPFin | TCPSyn | TCPRst | TCPAck, Comp: TCPSyn, Neg: neg}
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

func (m *TCPMatch) finish(rc *ruleCtx) error { return needProto(rc, "-m tcp", ProtoTCP) }

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
	if p.Fragment || p.Proto != ProtoTCP {
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
		m.Sport, err = parsePortSpec(args[0].val, neg)
	} else {
		m.Dport, err = parsePortSpec(args[0].val, neg)
	}
	return err
}

func (m *UDPMatch) finish(rc *ruleCtx) error { return needProto(rc, "-m udp", ProtoUDP) }

func (m *UDPMatch) appendArgs(b []byte) []byte {
	return appendPortOpt(appendPortOpt(b, "--sport", m.Sport), "--dport", m.Dport)
}

func (m *UDPMatch) eval(c *evalCtx) tri {
	p := c.pkt
	if p.Fragment || p.Proto != ProtoUDP {
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

func (m *SCTPMatch) finish(rc *ruleCtx) error { return needProto(rc, "-m sctp", ProtoSCTP) }

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
	if p.Fragment || p.Proto != ProtoSCTP {
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

// ---------------------------------------------------------------------------------
// icmp, icmp6

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
		return needProto(rc, "-m icmp6", ProtoICMPv6)
	}
	if rc.family != IPv4 {
		return fmt.Errorf("-m icmp is for IPv4 rules (use -m icmp6)")
	}
	return needProto(rc, "-m icmp", ProtoICMP)
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
	want := ProtoICMP
	if m.V6 {
		want = ProtoICMPv6
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

// ---------------------------------------------------------------------------------
// multiport

// MultiportMatch is -m multiport --sports/--dports/--ports LIST.
type MultiportMatch struct {
	Which string // "--sports", "--dports" or "--ports"
	Ports []PortRange
	Neg   bool
}

// Module implements Match.
func (*MultiportMatch) Module() string { return "multiport" }

func (m *MultiportMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if m.Which != "" {
		return fmt.Errorf("multiport takes only one of --sports, --dports, --ports")
	}
	m.Which, m.Neg = opt, neg
	slots := 0
	for _, part := range strings.Split(args[0].val, ",") {
		r, err := parsePortRange(part)
		if err != nil {
			return err
		}
		if strings.Contains(part, ":") {
			slots += 2
		} else {
			slots++
		}
		m.Ports = append(m.Ports, r)
	}
	if slots > 15 {
		return fmt.Errorf("too many ports specified (at most 15, a range counts as two)")
	}
	return nil
}

func (m *MultiportMatch) finish(rc *ruleCtx) error {
	if m.Which == "" {
		return fmt.Errorf("-m multiport needs --sports, --dports or --ports")
	}
	return needProto(rc, "-m multiport", ProtoTCP, ProtoUDP, ProtoUDPLite, ProtoSCTP, ProtoDCCP)
}

func (m *MultiportMatch) appendArgs(b []byte) []byte {
	b = appendNeg(b, m.Neg)
	b = append(b, ' ')
	b = append(b, m.Which...)
	b = append(b, ' ')
	for i, r := range m.Ports {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendPortRange(b, r)
	}
	return b
}

func (m *MultiportMatch) eval(c *evalCtx) tri {
	p := c.pkt
	if !p.hasPorts() {
		return no
	}
	hit := false
	for _, r := range m.Ports {
		switch m.Which {
		case "--sports":
			hit = r.contains(p.SrcPort)
		case "--dports":
			hit = r.contains(p.DstPort)
		default:
			hit = r.contains(p.SrcPort) || r.contains(p.DstPort)
		}
		if hit {
			break
		}
	}
	return triOf(hit != m.Neg)
}

// ---------------------------------------------------------------------------------
// addrtype

// AddrTypeMatch is -m addrtype.
type AddrTypeMatch struct {
	Src, Dst          AddrType // 0: not given
	SrcNeg, DstNeg    bool
	LimitIn, LimitOut bool
}

// Module implements Match.
func (*AddrTypeMatch) Module() string { return "addrtype" }

func parseAddrTypes(s string) (AddrType, error) {
	var t AddrType
	for _, part := range strings.Split(s, ",") {
		found := false
		for i, n := range addrTypeNames {
			if strings.EqualFold(part, n) {
				t |= 1 << i
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown address type %q", part)
		}
	}
	return t, nil
}

func (m *AddrTypeMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	var err error
	switch opt {
	case "--src-type":
		m.Src, err = parseAddrTypes(args[0].val)
		m.SrcNeg = neg
	case "--dst-type":
		m.Dst, err = parseAddrTypes(args[0].val)
		m.DstNeg = neg
	case "--limit-iface-in":
		m.LimitIn = true
	case "--limit-iface-out":
		m.LimitOut = true
	}
	return err
}

func (m *AddrTypeMatch) finish(rc *ruleCtx) error {
	if m.LimitIn && m.LimitOut {
		return fmt.Errorf("addrtype: --limit-iface-in and --limit-iface-out together")
	}
	// addrtype_mt_checkentry_v1 refuses IPv6 types match_type6 cannot test: BLACKHOLE,
	// PROHIBIT and any type after it (THROW, NAT, XRESOLVE), BROADCAST.
	if bad := (m.Src | m.Dst) & AddrTypesNot6; rc.family == IPv6 && bad != 0 {
		return fmt.Errorf("addrtype: IPv6 does not support %s matching", bad)
	}
	return nil
}

// AddrTypesNot6 are the address types the kernel refuses in an ip6tables addrtype match.
const AddrTypesNot6 = AddrBroadcast | AddrBlackhole | AddrProhibit | AddrThrow | AddrNAT | AddrXResolve

func (m *AddrTypeMatch) appendArgs(b []byte) []byte {
	if m.Src != 0 {
		b = appendNeg(b, m.SrcNeg)
		b = append(b, " --src-type "...)
		b = append(b, m.Src.String()...)
	}
	if m.Dst != 0 {
		b = appendNeg(b, m.DstNeg)
		b = append(b, " --dst-type "...)
		b = append(b, m.Dst.String()...)
	}
	if m.LimitIn {
		b = append(b, " --limit-iface-in"...)
	}
	if m.LimitOut {
		b = append(b, " --limit-iface-out"...)
	}
	return b
}

func (m *AddrTypeMatch) eval(c *evalCtx) tri {
	iface := ""
	if m.LimitIn {
		iface = c.pkt.InIface
	} else if m.LimitOut {
		iface = c.pkt.OutIface
	}
	match := addrTypeMatch
	if c.pkt.Family() == IPv6 {
		match = addrTypeMatch6
	}
	if m.Src != 0 && match(c.env, c.pkt.Src, iface, m.Src) == m.SrcNeg {
		return no
	}
	if m.Dst != 0 && match(c.env, c.pkt.Dst, iface, m.Dst) == m.DstNeg {
		return no
	}
	return yes
}

// addrTypeMatch is the IPv4 test (xt_addrtype.c match_type): inet_dev_addr_type gives
// the address one RTN type, and the address matches when that type is in mask.
func addrTypeMatch(env Env, a netip.Addr, iface string, mask AddrType) bool {
	return env.AddrType(a, iface)&mask != 0
}

// addrTypeMatch6 is the IPv6 test, as xt_addrtype.c's match_type6 computes it: the
// address's own kind (ipv6_addr_type) is a condition for each of MULTICAST, UNICAST and
// UNSPEC in mask — all of them must hold, so UNICAST,LOCAL matches only a local unicast
// address and MULTICAST,UNICAST nothing — and when mask names any of LOCAL, ANYCAST and
// UNREACHABLE the route lookup (match_lookup_rt6) must find one of those it names. A
// local unicast address is thus both UNICAST and LOCAL. The lookup's answer is
// Env.AddrType: LOCAL (RTF_LOCAL; with an interface, the address on that device),
// ANYCAST or UNREACHABLE when the Env says so, nothing else otherwise (an Env without
// routes finds every address reachable and no anycast).
func addrTypeMatch6(env Env, a netip.Addr, iface string, mask AddrType) bool {
	kind := IPv6AddrKind(a)
	for _, t := range [...]AddrType{AddrMulticast, AddrUnicast, AddrUnspec} {
		if mask&t != 0 && kind != t {
			return false
		}
	}
	if lookup := mask & (AddrLocal | AddrAnycast | AddrUnreachable); lookup != 0 {
		return env.AddrType(a, iface)&lookup != 0
	}
	return true
}

// IPv6AddrKind is what the kernel's ipv6_addr_type says of an IPv6 address by its bits
// alone, as addrtype uses it: MULTICAST for ff00::/8, UNSPEC for :: (IPV6_ADDR_ANY),
// nothing for an IPv4-mapped address (::ffff:0:0/96, IPV6_ADDR_MAPPED only) and
// UNICAST for any other (loopback, link-local, unique-local, IPv4-compatible,
// global and unassigned space alike).
func IPv6AddrKind(a netip.Addr) AddrType {
	switch {
	case a.Is4In6():
		return 0
	case a.Is4():
		return 0 // not an IPv6 address
	case !a.IsValid() || a.IsUnspecified():
		return AddrUnspec
	case a.As16()[0] == 0xff:
		return AddrMulticast
	}
	return AddrUnicast
}

// ---------------------------------------------------------------------------------
// comment

// CommentMatch is -m comment --comment TEXT.
type CommentMatch struct{ Comment string }

// Module implements Match.
func (*CommentMatch) Module() string { return "comment" }

func (m *CommentMatch) option(rc *ruleCtx, opt string, _ bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	if len(args[0].val) > 255 {
		return fmt.Errorf("comment longer than 255 characters")
	}
	m.Comment = args[0].val
	return nil
}

func (m *CommentMatch) finish(*ruleCtx) error { return nil }

func (m *CommentMatch) appendArgs(b []byte) []byte {
	b = append(b, " --comment "...)
	return saveString(b, m.Comment)
}

func (*CommentMatch) eval(*evalCtx) tri { return yes }

// ---------------------------------------------------------------------------------
// statistic

// StatisticMatch is -m statistic. Random mode matches with probability
// Probability/2^31, the kernel's fixed-point value (iptables stores round(P·2^31)); nth
// mode matches every Every-th packet, starting with packet number Packet (0-based).
type StatisticMatch struct {
	Nth         bool
	Probability uint32 // random mode: P·2^31, rounded
	Every       uint32 // nth mode: N of --every N
	Packet      uint32 // nth mode: --packet
	Neg         bool
	modeSet     bool
}

// Module implements Match.
func (*StatisticMatch) Module() string { return "statistic" }

// Prob returns the random-mode probability as the kernel applies it.
func (m *StatisticMatch) Prob() float64 { return float64(m.Probability) / (1 << 31) }

func (m *StatisticMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	s := args[0].val
	switch opt {
	case "--mode":
		switch s {
		case "random":
		case "nth":
			m.Nth = true
		default:
			return fmt.Errorf("bad mode %q (want random or nth)", s)
		}
		m.modeSet = true
	case "--probability":
		p, err := strconv.ParseFloat(s, 64)
		if err != nil || p < 0 || p > 1 || math.IsNaN(p) {
			return fmt.Errorf("--probability must be between 0 and 1, not %q", s)
		}
		m.Probability = uint32(math.Round(p * (1 << 31)))
		m.Neg = m.Neg || neg
	case "--every":
		n, err := parseUint32(s)
		if err != nil || n == 0 {
			return fmt.Errorf("--every must be a positive number, not %q", s)
		}
		m.Every = n
		m.Neg = m.Neg || neg
	case "--packet":
		n, err := parseUint32(s)
		if err != nil {
			return err
		}
		m.Packet = n
	}
	return nil
}

func (m *StatisticMatch) finish(rc *ruleCtx) error {
	if !m.modeSet {
		return fmt.Errorf("statistic: no --mode given")
	}
	k := func(o string) bool { return rc.has(m, o) }
	if m.Nth {
		if k("--probability") {
			return fmt.Errorf("--probability can only be used in random mode")
		}
		if !k("--every") || !k("--packet") {
			return fmt.Errorf("statistic nth mode needs --every and --packet")
		}
		if m.Packet >= m.Every {
			return fmt.Errorf("--packet must be below --every")
		}
	} else {
		if k("--every") || k("--packet") {
			return fmt.Errorf("--every and --packet can only be used in nth mode")
		}
		if !k("--probability") {
			return fmt.Errorf("statistic random mode needs --probability")
		}
	}
	return nil
}

func (m *StatisticMatch) appendArgs(b []byte) []byte {
	if m.Nth {
		b = append(b, " --mode nth"...)
		b = appendNeg(b, m.Neg)
		b = append(b, " --every "...)
		b = strconv.AppendUint(b, uint64(m.Every), 10)
		b = append(b, " --packet "...)
		return strconv.AppendUint(b, uint64(m.Packet), 10)
	}
	b = append(b, " --mode random"...)
	b = appendNeg(b, m.Neg)
	b = append(b, " --probability "...)
	return strconv.AppendFloat(b, m.Prob(), 'f', 11, 64)
}

func (m *StatisticMatch) eval(c *evalCtx) tri {
	if m.Nth {
		return triOf(c.nth(m) != m.Neg)
	}
	return triOf(c.chance(m.Prob()) != m.Neg)
}

// ---------------------------------------------------------------------------------
// recent

// Recent commands.
const (
	RecentSet    = "--set"
	RecentCheck  = "--rcheck"
	RecentUpdate = "--update"
	RecentRemove = "--remove"
)

// recentMaxHitcount is the largest --hitcount the kernel accepts (XT_RECENT_MAX_NSTAMPS
// less one: 65535 on current kernels, as a 6.18 kernel showed; 255 before the limit
// was raised).
const recentMaxHitcount = 65535

// RecentMatch is -m recent (xt_recent).
type RecentMatch struct {
	Command  string // RecentSet, RecentCheck, RecentUpdate or RecentRemove
	Neg      bool
	Seconds  uint32
	Reap     bool
	Hitcount uint32
	TTL      bool
	Name     string     // default "DEFAULT"
	Mask     netip.Addr // default all ones
	Dest     bool       // --rdest (default --rsource)
	nameSet  bool
}

// Module implements Match.
func (*RecentMatch) Module() string { return "recent" }

func (m *RecentMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	switch opt {
	case RecentSet, RecentCheck, RecentUpdate, RecentRemove:
		if m.Command != "" {
			return fmt.Errorf("recent takes only one of --set, --rcheck, --update, --remove")
		}
		m.Command, m.Neg = opt, neg
	case "--seconds", "--hitcount":
		n, err := parseUint32(args[0].val)
		if err != nil {
			return err
		}
		if opt == "--seconds" {
			m.Seconds = n
		} else {
			m.Hitcount = n
		}
	case "--reap":
		m.Reap = true
	case "--rttl":
		m.TTL = true
	case "--name":
		if args[0].val == "" || len(args[0].val) > 199 {
			return fmt.Errorf("recent: invalid --name %q", args[0].val)
		}
		m.Name, m.nameSet = args[0].val, true
	case "--rsource":
		m.Dest = false
	case "--rdest":
		m.Dest = true
	case "--mask":
		a, err := netip.ParseAddr(args[0].val)
		if err != nil || FamilyOf(a) != rc.family {
			return fmt.Errorf("invalid %s mask %q", rc.family, args[0].val)
		}
		m.Mask = a
	}
	return nil
}

func (m *RecentMatch) finish(rc *ruleCtx) error {
	if m.Command == "" {
		return fmt.Errorf("recent needs one of --set, --rcheck, --update, --remove")
	}
	if (m.Command == RecentSet || m.Command == RecentRemove) && (m.Seconds != 0 || m.Hitcount != 0 || m.Reap || m.TTL) {
		return fmt.Errorf("recent %s takes no --seconds, --hitcount, --reap or --rttl", m.Command)
	}
	if m.Reap && m.Seconds == 0 {
		return fmt.Errorf("recent --reap needs --seconds")
	}
	if m.Hitcount > recentMaxHitcount {
		return fmt.Errorf("recent --hitcount %d is above %d", m.Hitcount, recentMaxHitcount)
	}
	if !m.nameSet {
		m.Name = "DEFAULT"
	}
	if !m.Mask.IsValid() {
		m.Mask = fullMask(rc.family)
	}
	return nil
}

func (m *RecentMatch) appendArgs(b []byte) []byte {
	b = appendNeg(b, m.Neg)
	b = append(b, ' ')
	b = append(b, m.Command...)
	if m.Seconds != 0 {
		b = append(b, " --seconds "...)
		b = strconv.AppendUint(b, uint64(m.Seconds), 10)
	}
	if m.Reap {
		b = append(b, " --reap"...)
	}
	if m.Hitcount != 0 {
		b = append(b, " --hitcount "...)
		b = strconv.AppendUint(b, uint64(m.Hitcount), 10)
	}
	if m.TTL {
		b = append(b, " --rttl"...)
	}
	b = append(b, " --name "...)
	b = append(b, m.Name...)
	b = append(b, " --mask "...)
	b = m.Mask.AppendTo(b)
	if m.Dest {
		return append(b, " --rdest"...)
	}
	return append(b, " --rsource"...)
}

func (m *RecentMatch) eval(c *evalCtx) tri { return c.recent(m) }

// ---------------------------------------------------------------------------------
// conntrack, state

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
	case CTNew:
		return ctbNew
	case CTEstablished:
		return ctbEstablished
	case CTRelated:
		return ctbRelated
	case CTUntracked:
		return ctbUntracked
	}
	return ctbInvalid
}

func hasCT(p *Packet) bool { return p.CT.State != CTInvalid && p.CT.State != CTUntracked }

var ctStatusNames = []struct {
	name string
	bit  CTStatus
}{{"EXPECTED", CTExpected}, {"SEEN_REPLY", CTSeenReply}, {"ASSURED", CTAssured}, {"CONFIRMED", CTConfirmed}}

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
	Status                                             *CTStatus
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
		var v CTStatus
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
			if p.CT.Status&CTSrcNAT != 0 {
				bits |= ctbSNAT
			}
			if p.CT.Status&CTDstNAT != 0 {
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

// ---------------------------------------------------------------------------------
// mark, connmark

// MarkMatch is -m mark --mark V[/M] (or -m connmark, with Conn): (mark & M) == V.
type MarkMatch struct {
	Conn        bool
	Value, Mask uint32
	Neg         bool
}

// Module implements Match.
func (m *MarkMatch) Module() string {
	if m.Conn {
		return "connmark"
	}
	return "mark"
}

func (m *MarkMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	v, mask, _, err := parseMarkMask(args[0].val)
	if err != nil {
		return err
	}
	m.Value, m.Mask, m.Neg = v&mask, mask, neg
	return nil
}

func (m *MarkMatch) finish(rc *ruleCtx) error {
	if !rc.has(m, "--mark") {
		return fmt.Errorf("-m %s needs --mark", m.Module())
	}
	return nil
}

func (m *MarkMatch) appendArgs(b []byte) []byte {
	b = appendNeg(b, m.Neg)
	b = append(b, " --mark "...)
	b = appendHex(b, m.Value)
	if m.Mask != 0xffffffff {
		b = append(b, '/')
		b = appendHex(b, m.Mask)
	}
	return b
}

func (m *MarkMatch) eval(c *evalCtx) tri {
	v := c.pkt.Mark
	if m.Conn {
		if !hasCT(c.pkt) {
			return no
		}
		v = c.pkt.CT.Mark
	}
	return triOf((v&m.Mask == m.Value) != m.Neg)
}

// ---------------------------------------------------------------------------------
// set (ipset)

// SetMatch is -m set --match-set NAME DIRS. Dirs holds one entry per set dimension,
// true for dst and false for src. Packet/byte counter conditions are kept but not
// modelled (the rule is then undecidable).
type SetMatch struct {
	Name                string
	Dirs                []bool
	Neg                 bool
	ReturnNomatch       bool
	NoUpdateCounters    bool
	NoUpdateSubcounters bool
	Counters            []string // raw counter conditions: "--packets-gt 5", "! --bytes-eq 3"
}

// Module implements Match.
func (*SetMatch) Module() string { return "set" }

func (m *SetMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	switch opt {
	case "--match-set":
		m.Name, m.Neg = args[0].val, neg
		for _, d := range strings.Split(args[1].val, ",") {
			switch d {
			case "src":
				m.Dirs = append(m.Dirs, false)
			case "dst":
				m.Dirs = append(m.Dirs, true)
			default:
				return fmt.Errorf("bad set direction %q (want src or dst)", d)
			}
		}
		if len(m.Dirs) > 6 {
			return fmt.Errorf("too many set dimensions")
		}
	case "--return-nomatch":
		m.ReturnNomatch = true
	case "--update-counters":
		if !neg {
			return fmt.Errorf("--update-counters is only meaningful as ! --update-counters")
		}
		m.NoUpdateCounters = true
	case "--update-subcounters":
		if !neg {
			return fmt.Errorf("--update-subcounters is only meaningful as ! --update-subcounters")
		}
		m.NoUpdateSubcounters = true
	default:
		if _, err := strconv.ParseUint(args[0].val, 10, 64); err != nil {
			return fmt.Errorf("invalid number %q", args[0].val)
		}
		s := opt + " " + args[0].val
		if neg {
			s = "! " + s
		}
		m.Counters = append(m.Counters, s)
	}
	return nil
}

func (m *SetMatch) finish(*ruleCtx) error {
	if m.Name == "" {
		return fmt.Errorf("-m set needs --match-set")
	}
	return nil
}

func (m *SetMatch) appendArgs(b []byte) []byte {
	b = appendNeg(b, m.Neg)
	b = append(b, " --match-set "...)
	b = append(b, m.Name...)
	b = append(b, ' ')
	for i, d := range m.Dirs {
		if i > 0 {
			b = append(b, ',')
		}
		if d {
			b = append(b, "dst"...)
		} else {
			b = append(b, "src"...)
		}
	}
	if m.ReturnNomatch {
		b = append(b, " --return-nomatch"...)
	}
	if m.NoUpdateCounters {
		b = append(b, " ! --update-counters"...)
	}
	if m.NoUpdateSubcounters {
		b = append(b, " ! --update-subcounters"...)
	}
	for _, s := range m.Counters {
		b = append(b, ' ')
		b = append(b, s...)
	}
	return b
}

func (m *SetMatch) eval(c *evalCtx) tri {
	set := c.st.ipsets.Get(m.Name)
	if set == nil {
		return unknown
	}
	res := set.test(c.pkt, m.Dirs)
	if res == setNomatch {
		if m.ReturnNomatch {
			return triOf(!m.Neg)
		}
		res = setMiss
	}
	r := triOf((res == setHit) != m.Neg)
	if r == yes && len(m.Counters) > 0 {
		return unknown
	}
	return r
}

// ---------------------------------------------------------------------------------
// nfacct, iprange

// NfacctMatch is -m nfacct --nfacct-name NAME: it always matches and counts the packet
// in the named accounting object.
type NfacctMatch struct{ Name string }

// Module implements Match.
func (*NfacctMatch) Module() string { return "nfacct" }

func (m *NfacctMatch) option(rc *ruleCtx, opt string, _ bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	if args[0].val == "" || len(args[0].val) > 31 {
		return fmt.Errorf("invalid nfacct name %q", args[0].val)
	}
	m.Name = args[0].val
	return nil
}

func (m *NfacctMatch) finish(*ruleCtx) error {
	if m.Name == "" {
		return fmt.Errorf("-m nfacct needs --nfacct-name")
	}
	return nil
}

func (m *NfacctMatch) appendArgs(b []byte) []byte {
	// iptables-save prints two spaces here.
	b = append(b, " --nfacct-name  "...)
	return append(b, m.Name...)
}

func (m *NfacctMatch) eval(c *evalCtx) tri {
	c.countNfacct(m.Name)
	return yes
}

// AddrRange is an inclusive address range, negatable.
type AddrRange struct {
	From, To netip.Addr
	Neg      bool
}

// IPRangeMatch is -m iprange.
type IPRangeMatch struct{ Src, Dst *AddrRange }

// Module implements Match.
func (*IPRangeMatch) Module() string { return "iprange" }

func (m *IPRangeMatch) option(rc *ruleCtx, opt string, neg bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	fs, ts, ok := strings.Cut(args[0].val, "-")
	if !ok {
		ts = fs
	}
	from, err1 := netip.ParseAddr(fs)
	to, err2 := netip.ParseAddr(ts)
	if err1 != nil || err2 != nil || FamilyOf(from) != rc.family || FamilyOf(to) != rc.family || !addrLE(from, to) {
		return fmt.Errorf("invalid %s range %q", rc.family, args[0].val)
	}
	r := &AddrRange{from, to, neg}
	if opt == "--src-range" {
		m.Src = r
	} else {
		m.Dst = r
	}
	return nil
}

func (m *IPRangeMatch) finish(*ruleCtx) error {
	if m.Src == nil && m.Dst == nil {
		return fmt.Errorf("-m iprange needs --src-range or --dst-range")
	}
	return nil
}

func (m *IPRangeMatch) appendArgs(b []byte) []byte {
	for _, x := range []struct {
		opt string
		r   *AddrRange
	}{{" --src-range ", m.Src}, {" --dst-range ", m.Dst}} {
		if x.r == nil {
			continue
		}
		b = appendNeg(b, x.r.Neg)
		b = append(b, x.opt...)
		b = x.r.From.AppendTo(b)
		b = append(b, '-')
		b = x.r.To.AppendTo(b)
	}
	return b
}

func (m *IPRangeMatch) eval(c *evalCtx) tri {
	in := func(r *AddrRange, a netip.Addr) bool {
		return r == nil || (addrLE(r.From, a) && addrLE(a, r.To)) != r.Neg
	}
	return triOf(in(m.Src, c.pkt.Src) && in(m.Dst, c.pkt.Dst))
}

// ---------------------------------------------------------------------------------
// unknown modules

// UnknownMatch is a match module the emulator does not model (physdev, limit, mac,
// owner, ...). It keeps its options exactly as written, is printed back verbatim and
// shown in traces, and is undecidable: a single-path evaluation assumes it does not
// match; an all-branches exploration follows both possibilities.
type UnknownMatch struct {
	Name string
	Args []string // raw option tokens, quotes and "!" included

	ipvs *ipvsSpec // -m ipvs: its options as the evaluator reads them (see ipvs.go)
}

// Module implements Match.
func (m *UnknownMatch) Module() string { return m.Name }

func (m *UnknownMatch) appendArgs(b []byte) []byte {
	for _, a := range m.Args {
		b = append(b, ' ')
		b = append(b, a...)
	}
	return b
}

func (m *UnknownMatch) eval(c *evalCtx) tri {
	if m.ipvs != nil {
		return m.ipvs.eval(c)
	}
	return unknown
}
