package emulator

import (
	"fmt"
	"strings"
)

// Match is one match module of a rule ("-m NAME options"). The concrete types, in the
// files match_*.go (one per module or family of modules), are the modules the emulator
// understands; UnknownMatch keeps any other module verbatim.
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

// The modules kube-proxy's rules load on nearly every line, looked up without hashing
// (lookupModule).
var modComment, modTCP, modUDP, modStatistic, modMark *moduleDef

// lookupModule is modules[name].
func lookupModule(name string) (*moduleDef, bool) {
	var d *moduleDef
	switch name {
	case "comment":
		d = modComment
	case "tcp":
		d = modTCP
	case "udp":
		d = modUDP
	case "statistic":
		d = modStatistic
	case "mark":
		d = modMark
	default:
		d, ok := modules[name]
		return d, ok
	}
	return d, d != nil
}

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
	modComment, modTCP, modUDP, modStatistic, modMark = modules["comment"], modules["tcp"], modules["udp"], modules["statistic"], modules["mark"]
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
