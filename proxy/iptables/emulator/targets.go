package emulator

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// Target is what a rule does when it matches: a verdict, a jump or goto to a chain, or
// an extension target. UnknownTarget keeps extension targets the emulator does not model.
type Target interface {
	// Name is the target name as written after -j (the chain name for a jump).
	Name() string
	// appendTarget appends " -j NAME options" (or " -g CHAIN").
	appendTarget(b []byte) []byte
}

// FormatTarget renders a target as iptables-save prints it: "-j DNAT --to-destination ...".
func FormatTarget(t Target) string { return strings.TrimPrefix(string(t.appendTarget(nil)), " ") }

type targetBuilder interface {
	builder
	Target
}

type targetDef struct {
	opts  map[string]optSpec
	new   func() targetBuilder
	table string           // the only table the target is valid in ("" for any)
	hooks []netfilter.Hook // the hooks from which the target may be reached (nil for any)
}

var targets map[string]*targetDef

// passTargets are extension targets the emulator keeps verbatim and steps over (they
// do not end the traversal: logging, packet editing the emulator does not model).
var passTargets = map[string]bool{
	"AUDIT": true, "CHECKSUM": true, "CLASSIFY": true, "CONNSECMARK": true, "CT": true, "DSCP": true,
	"ECN": true, "HL": true, "HMARK": true, "IDLETIMER": true, "LED": true, "NFLOG": true,
	"RATEEST": true, "SECMARK": true, "SET": true, "TCPMSS": true, "TCPOPTSTRIP": true, "TEE": true,
	"TOS": true, "TRACE": true, "TTL": true, "ULOG": true,
}

// stopTargets are extension targets that decide a packet's fate in a way the emulator
// does not model; reaching one ends the evaluation with an UNKNOWN verdict.
var stopTargets = map[string]bool{
	"CLUSTERIP": true, "DNPT": true, "SNPT": true, "MIRROR": true, "NETMAP": true, "NFQUEUE": true,
	"QUEUE": true, "SAME": true, "SYNPROXY": true, "TPROXY": true,
}

func init() {
	natHooksDst := []netfilter.Hook{netfilter.Prerouting, netfilter.Output}
	targets = map[string]*targetDef{
		"REJECT": {opts("--reject-with", 1, false), func() targetBuilder { return &RejectTarget{} }, "", []netfilter.Hook{netfilter.Input, netfilter.Forward, netfilter.Output}},
		"DNAT": {opts("--to-destination", 1, false, "--random", 0, false, "--persistent", 0, false),
			func() targetBuilder { return &NATTarget{Kind: "DNAT"} }, TableNAT, natHooksDst},
		"SNAT": {opts("--to-source", 1, false, "--random", 0, false, "--random-fully", 0, false, "--persistent", 0, false),
			func() targetBuilder { return &NATTarget{Kind: "SNAT"} }, TableNAT, []netfilter.Hook{netfilter.Postrouting, netfilter.Input}},
		"MASQUERADE": {opts("--to-ports", 1, false, "--random", 0, false, "--random-fully", 0, false),
			func() targetBuilder { return &MasqueradeTarget{} }, TableNAT, []netfilter.Hook{netfilter.Postrouting}},
		"REDIRECT": {opts("--to-ports", 1, false, "--random", 0, false),
			func() targetBuilder { return &RedirectTarget{} }, TableNAT, natHooksDst},
		"MARK": {opts("--set-xmark", 1, false, "--set-mark", 1, false, "--and-mark", 1, false, "--or-mark", 1, false, "--xor-mark", 1, false),
			func() targetBuilder { return &MarkTarget{} }, "", nil},
		"CONNMARK": {opts("--set-xmark", 1, false, "--set-mark", 1, false, "--and-mark", 1, false, "--or-mark", 1, false,
			"--xor-mark", 1, false, "--save-mark", 0, false, "--restore-mark", 0, false, "--nfmask", 1, false,
			"--ctmask", 1, false, "--mask", 1, false),
			func() targetBuilder { return &ConnmarkTarget{} }, "", nil},
		"LOG": {opts("--log-level", 1, false, "--log-prefix", 1, false, "--log-tcp-sequence", 0, false,
			"--log-tcp-options", 0, false, "--log-ip-options", 0, false, "--log-uid", 0, false, "--log-macdecode", 0, false),
			func() targetBuilder { return &LogTarget{Level: 4} }, "", nil},
		"NOTRACK": {opts(), func() targetBuilder { return &NotrackTarget{} }, TableRaw, nil},
	}
	for _, m := range []map[string]bool{passTargets, stopTargets, {"ACCEPT": true, "DROP": true, "RETURN": true, "QUEUE": true}} {
		for name := range m {
			targetLens |= 1 << min(len(name), 63)
		}
	}
	for name := range targets {
		targetLens |= 1 << min(len(name), 63)
	}
}

// targetLens has bit n set when some target name (isTargetName) is n bytes long (63:
// 63 or more): most chain names (KUBE-SEP-..., 25 bytes) are told apart from target
// names without a map lookup.
var targetLens uint64

// ---------------------------------------------------------------------------------

// VerdictTarget is -j ACCEPT, -j DROP or -j RETURN.
type VerdictTarget struct{ Verdict string }

// Name implements Target.
func (t *VerdictTarget) Name() string { return t.Verdict }

func (t *VerdictTarget) appendTarget(b []byte) []byte {
	b = append(b, " -j "...)
	return append(b, t.Verdict...)
}

// JumpTarget is -j CHAIN (a call that returns) or -g CHAIN (a goto: the chain's end
// returns to the caller of the chain that did the goto).
type JumpTarget struct {
	Chain string
	Goto  bool

	// to is the chain called Chain that the restore which parsed the rule found, a
	// hint for that restore's validation (resolveJumps), which checks that it is still
	// its table's chain of that name before using it. Written only while the rule is
	// the parsing transaction's own.
	to *Chain
}

// Name implements Target.
func (t *JumpTarget) Name() string { return t.Chain }

func (t *JumpTarget) appendTarget(b []byte) []byte {
	if t.Goto {
		b = append(b, " -g "...)
	} else {
		b = append(b, " -j "...)
	}
	return append(b, t.Chain...)
}

// ---------------------------------------------------------------------------------

// rejectName is one entry of libxt's reject_table: the canonical name iptables-save
// prints and its alias.
type rejectName struct{ name, alias string }

// rejectV4 and rejectV6 are libipt_REJECT's and libip6t_REJECT's reject_table, in table
// order: the tools take the first entry whose name or alias begins with the argument,
// ignoring case ("icmp-p" is icmp-proto-unreachable, "T" tcp-reset, "" the first entry).
var rejectV4 = []rejectName{
	{"icmp-net-unreachable", "net-unreach"},
	{"icmp-host-unreachable", "host-unreach"},
	{"icmp-proto-unreachable", "proto-unreach"},
	{"icmp-port-unreachable", "port-unreach"},
	{"icmp-net-prohibited", "net-prohib"},
	{"icmp-host-prohibited", "host-prohib"},
	{"tcp-reset", "tcp-rst"},
	{"icmp-admin-prohibited", "admin-prohib"},
}

var rejectV6 = []rejectName{
	{"icmp6-no-route", "no-route"},
	{"icmp6-adm-prohibited", "adm-prohibited"},
	{"icmp6-addr-unreachable", "addr-unreach"},
	{"icmp6-port-unreachable", "port-unreach"},
	{"tcp-reset", "tcp-reset"},
	{"icmp6-policy-fail", "policy-fail"},
	{"icmp6-reject-route", "reject-route"},
}

// lookupReject resolves a --reject-with argument as REJECT_parse does.
func lookupReject(table []rejectName, arg string) (string, bool) {
	prefix := func(s string) bool { return len(arg) <= len(s) && strings.EqualFold(s[:len(arg)], arg) }
	for _, e := range table {
		if prefix(e.name) || prefix(e.alias) {
			return e.name, true
		}
	}
	return "", false
}

// RejectTarget is -j REJECT --reject-with TYPE (canonical names; the default is
// icmp-port-unreachable, icmp6-port-unreachable for IPv6).
type RejectTarget struct{ With string }

// Name implements Target.
func (*RejectTarget) Name() string { return "REJECT" }

func (t *RejectTarget) option(rc *ruleCtx, opt string, _ bool, args []token) error {
	if err := once(rc, t, opt); err != nil {
		return err
	}
	names := rejectV4
	if rc.family == IPv6 {
		names = rejectV6
	}
	w, ok := lookupReject(names, args[0].val)
	if !ok {
		return fmt.Errorf("unknown reject type %q for %s", args[0].val, rc.family)
	}
	t.With = w
	return nil
}

func (t *RejectTarget) finish(rc *ruleCtx) error {
	if t.With == "" {
		t.With = "icmp-port-unreachable"
		if rc.family == IPv6 {
			t.With = "icmp6-port-unreachable"
		}
	}
	if t.With == "tcp-reset" {
		return needProto(rc, "--reject-with tcp-reset", netfilter.ProtoTCP)
	}
	return nil
}

func (t *RejectTarget) appendTarget(b []byte) []byte {
	b = append(b, " -j REJECT --reject-with "...)
	return append(b, t.With...)
}

// ---------------------------------------------------------------------------------

// NATTarget is -j DNAT --to-destination or -j SNAT --to-source:
// ADDR[-ADDR][:PORT[-PORT]] (IPv6: [ADDR[-ADDR]]:PORT[-PORT]). A zero AddrMin keeps the
// address; zero ports keep the port.
type NATTarget struct {
	Kind                string // "DNAT" or "SNAT"
	AddrMin, AddrMax    netip.Addr
	PortMin, PortMax    uint16
	Random, RandomFully bool
	Persistent          bool
	toSet               bool
}

// Name implements Target.
func (t *NATTarget) Name() string { return t.Kind }

func (t *NATTarget) option(rc *ruleCtx, opt string, _ bool, args []token) error {
	if err := once(rc, t, opt); err != nil {
		return fmt.Errorf("%s can only be used once", opt)
	}
	switch opt {
	case "--to-destination", "--to-source":
		t.toSet = true
		return t.parseRange(args[0].val, rc.family)
	case "--random":
		t.Random = true
	case "--random-fully":
		t.RandomFully = true
	case "--persistent":
		t.Persistent = true
	}
	return nil
}

func (t *NATTarget) parseRange(s string, f Family) error {
	bad := func() error { return fmt.Errorf("invalid %s address/port range %q", f, s) }
	var addrs, ports string
	switch {
	case f == IPv6 && strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return bad()
		}
		addrs = s[1:end]
		rest := s[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return bad()
			}
			ports = rest[1:]
			if ports == "" {
				return bad()
			}
		}
	case f == IPv6:
		if strings.HasPrefix(s, ":") && !strings.HasPrefix(s, "::") {
			ports = s[1:]
		} else {
			addrs = s
		}
	default:
		var hasPort bool
		addrs, ports, hasPort = strings.Cut(s, ":")
		if hasPort && ports == "" {
			return bad()
		}
	}
	if addrs != "" {
		lo, hi, isRange := strings.Cut(addrs, "-")
		a, err := netip.ParseAddr(lo)
		if err != nil || FamilyOf(a) != f || a.Zone() != "" {
			return bad()
		}
		t.AddrMin, t.AddrMax = a, a
		if isRange {
			b, err := netip.ParseAddr(hi)
			if err != nil || FamilyOf(b) != f || !addrLE(a, b) {
				return bad()
			}
			t.AddrMax = b
		}
	}
	if ports != "" {
		lo, hi, isRange := strings.Cut(ports, "-")
		a, err := strconv.ParseUint(lo, 10, 16)
		if err != nil {
			return bad()
		}
		t.PortMin, t.PortMax = uint16(a), uint16(a)
		if isRange {
			b, err := strconv.ParseUint(hi, 10, 16)
			if err != nil || b < a {
				return bad()
			}
			t.PortMax = uint16(b)
		}
		if t.PortMin == 0 {
			return bad()
		}
	}
	if addrs == "" && ports == "" {
		return bad()
	}
	return nil
}

func natPortProtos(rc *ruleCtx, what string) error {
	// The accepted case first: the module name below is built (and escapes into the
	// error) only when the check fails, not once per DNAT rule with a port.
	if rc.proto.Set && !rc.proto.Neg {
		switch rc.proto.Num {
		case netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoSCTP, netfilter.ProtoDCCP:
			return nil
		}
	}
	return needProto(rc, what+" with ports", natPortProtoList[:]...)
}

// natPortProtoList is what a NAT target with ports accepts, in needProto's order.
var natPortProtoList = [...]uint8{netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoSCTP, netfilter.ProtoDCCP}

func (t *NATTarget) finish(rc *ruleCtx) error {
	if !t.toSet {
		if t.Kind == "DNAT" {
			return fmt.Errorf("DNAT needs --to-destination")
		}
		return fmt.Errorf("SNAT needs --to-source")
	}
	if t.PortMin != 0 {
		return natPortProtos(rc, t.Kind)
	}
	return nil
}

// appendNATRange prints a range as libxt_NAT does.
func appendNATRange(b []byte, amin, amax netip.Addr, pmin, pmax uint16) []byte {
	v6 := amin.IsValid() && amin.Is6()
	if amin.IsValid() {
		if v6 && pmin != 0 {
			b = append(b, '[')
		}
		b = amin.AppendTo(b)
		if amax != amin {
			b = append(b, '-')
			b = amax.AppendTo(b)
		}
		if v6 && pmin != 0 {
			b = append(b, ']')
		}
	}
	if pmin != 0 {
		b = append(b, ':')
		b = strconv.AppendUint(b, uint64(pmin), 10)
		if pmax != pmin {
			b = append(b, '-')
			b = strconv.AppendUint(b, uint64(pmax), 10)
		}
	}
	return b
}

func (t *NATTarget) appendTarget(b []byte) []byte {
	b = append(b, " -j "...)
	b = append(b, t.Kind...)
	if t.Kind == "DNAT" {
		b = append(b, " --to-destination "...)
	} else {
		b = append(b, " --to-source "...)
	}
	b = appendNATRange(b, t.AddrMin, t.AddrMax, t.PortMin, t.PortMax)
	if t.Random {
		b = append(b, " --random"...)
	}
	if t.RandomFully {
		b = append(b, " --random-fully"...)
	}
	if t.Persistent {
		b = append(b, " --persistent"...)
	}
	return b
}

func parseToPorts(s string) (uint16, uint16, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	a, err := strconv.ParseUint(lo, 10, 16)
	if err != nil || a == 0 {
		return 0, 0, fmt.Errorf("invalid port range %q", s)
	}
	b := a
	if isRange {
		if b, err = strconv.ParseUint(hi, 10, 16); err != nil || b < a {
			return 0, 0, fmt.Errorf("invalid port range %q", s)
		}
	}
	return uint16(a), uint16(b), nil
}

func appendToPorts(b []byte, lo, hi uint16) []byte {
	if lo == 0 {
		return b
	}
	b = append(b, " --to-ports "...)
	b = strconv.AppendUint(b, uint64(lo), 10)
	if hi != lo {
		b = append(b, '-')
		b = strconv.AppendUint(b, uint64(hi), 10)
	}
	return b
}

// MasqueradeTarget is -j MASQUERADE: SNAT to the output interface's address.
type MasqueradeTarget struct {
	PortMin, PortMax    uint16
	Random, RandomFully bool
}

// Name implements Target.
func (*MasqueradeTarget) Name() string { return "MASQUERADE" }

func (t *MasqueradeTarget) option(rc *ruleCtx, opt string, _ bool, args []token) error {
	if err := once(rc, t, opt); err != nil {
		return err
	}
	var err error
	switch opt {
	case "--to-ports":
		t.PortMin, t.PortMax, err = parseToPorts(args[0].val)
	case "--random":
		t.Random = true
	case "--random-fully":
		t.RandomFully = true
	}
	return err
}

func (t *MasqueradeTarget) finish(rc *ruleCtx) error {
	if t.PortMin != 0 {
		return natPortProtos(rc, "MASQUERADE")
	}
	return nil
}

func (t *MasqueradeTarget) appendTarget(b []byte) []byte {
	b = append(b, " -j MASQUERADE"...)
	b = appendToPorts(b, t.PortMin, t.PortMax)
	if t.Random {
		b = append(b, " --random"...)
	}
	if t.RandomFully {
		b = append(b, " --random-fully"...)
	}
	return b
}

// RedirectTarget is -j REDIRECT: DNAT to the node itself (the input interface's primary
// address; 127.0.0.1 or ::1 for locally generated packets).
type RedirectTarget struct {
	PortMin, PortMax uint16
	Random           bool
}

// Name implements Target.
func (*RedirectTarget) Name() string { return "REDIRECT" }

func (t *RedirectTarget) option(rc *ruleCtx, opt string, _ bool, args []token) error {
	if err := once(rc, t, opt); err != nil {
		return err
	}
	var err error
	if opt == "--to-ports" {
		t.PortMin, t.PortMax, err = parseToPorts(args[0].val)
	} else {
		t.Random = true
	}
	return err
}

func (t *RedirectTarget) finish(rc *ruleCtx) error {
	if t.PortMin != 0 {
		return natPortProtos(rc, "REDIRECT")
	}
	return nil
}

func (t *RedirectTarget) appendTarget(b []byte) []byte {
	b = append(b, " -j REDIRECT"...)
	b = appendToPorts(b, t.PortMin, t.PortMax)
	if t.Random {
		b = append(b, " --random"...)
	}
	return b
}

// ---------------------------------------------------------------------------------

// parseXMark turns the MARK/CONNMARK set options into (value, mask) with
// new = (old &^ mask) ^ value.
func parseXMark(opt, s string) (v, m uint32, err error) {
	val, mask, hasMask, err := parseMarkMask(s)
	if err != nil {
		return 0, 0, err
	}
	switch opt {
	case "--set-xmark":
		return val, mask, nil
	case "--set-mark":
		if !hasMask {
			mask = 0xffffffff
		}
		return val, val | mask, nil
	}
	if hasMask {
		return 0, 0, fmt.Errorf("%s takes no mask", opt)
	}
	switch opt {
	case "--and-mark":
		return 0, ^val, nil
	case "--or-mark":
		return val, val, nil
	default: // --xor-mark
		return val, 0, nil
	}
}

// MarkTarget is -j MARK: mark = (mark &^ Mask) ^ Value (iptables-save prints every form
// as --set-xmark Value/Mask).
type MarkTarget struct {
	Value, Mask uint32
	set         bool
}

// Name implements Target.
func (*MarkTarget) Name() string { return "MARK" }

func (t *MarkTarget) option(_ *ruleCtx, opt string, _ bool, args []token) error {
	if t.set {
		return fmt.Errorf("MARK takes only one of --set-xmark, --set-mark, --and-mark, --or-mark, --xor-mark")
	}
	var err error
	t.Value, t.Mask, err = parseXMark(opt, args[0].val)
	t.set = true
	return err
}

func (t *MarkTarget) finish(*ruleCtx) error {
	if !t.set {
		return fmt.Errorf("MARK needs one of --set-xmark, --set-mark, --and-mark, --or-mark, --xor-mark")
	}
	return nil
}

func (t *MarkTarget) appendTarget(b []byte) []byte {
	b = append(b, " -j MARK --set-xmark "...)
	b = appendHex(b, t.Value)
	b = append(b, '/')
	return appendHex(b, t.Mask)
}

// Connmark modes.
const (
	ConnmarkSet     = "set"
	ConnmarkSave    = "save"
	ConnmarkRestore = "restore"
)

// ConnmarkTarget is -j CONNMARK. Set: ctmark = (ctmark &^ Mask) ^ Value. Save:
// ctmark = (ctmark &^ CtMask) ^ (mark & NfMask). Restore: mark = (mark &^ NfMask) ^
// (ctmark & CtMask).
type ConnmarkTarget struct {
	Mode           string
	Value, Mask    uint32
	NfMask, CtMask uint32
	nf, ct, mask   bool
}

// Name implements Target.
func (*ConnmarkTarget) Name() string { return "CONNMARK" }

func (t *ConnmarkTarget) option(rc *ruleCtx, opt string, _ bool, args []token) error {
	if err := once(rc, t, opt); err != nil {
		return err
	}
	setMode := func(m string) error {
		if t.Mode != "" {
			return fmt.Errorf("CONNMARK takes only one action")
		}
		t.Mode = m
		return nil
	}
	var err error
	switch opt {
	case "--save-mark":
		return setMode(ConnmarkSave)
	case "--restore-mark":
		return setMode(ConnmarkRestore)
	case "--nfmask":
		t.NfMask, err = parseUint32(args[0].val)
		t.nf = true
	case "--ctmask":
		t.CtMask, err = parseUint32(args[0].val)
		t.ct = true
	case "--mask":
		var v uint32
		v, err = parseUint32(args[0].val)
		t.NfMask, t.CtMask, t.mask = v, v, true
	default:
		if err := setMode(ConnmarkSet); err != nil {
			return err
		}
		t.Value, t.Mask, err = parseXMark(opt, args[0].val)
	}
	return err
}

func (t *ConnmarkTarget) finish(*ruleCtx) error {
	switch t.Mode {
	case "":
		return fmt.Errorf("CONNMARK needs an action (--set-xmark, --save-mark, --restore-mark, ...)")
	case ConnmarkSet:
		if t.nf || t.ct || t.mask {
			return fmt.Errorf("CONNMARK --set-* takes no --nfmask/--ctmask/--mask")
		}
	default:
		if t.mask && (t.nf || t.ct) {
			return fmt.Errorf("CONNMARK --mask with --nfmask/--ctmask")
		}
		if !t.nf && !t.mask {
			t.NfMask = 0xffffffff
		}
		if !t.ct && !t.mask {
			t.CtMask = 0xffffffff
		}
	}
	return nil
}

func (t *ConnmarkTarget) appendTarget(b []byte) []byte {
	b = append(b, " -j CONNMARK"...)
	switch t.Mode {
	case ConnmarkSet:
		b = append(b, " --set-xmark "...)
		b = appendHex(b, t.Value)
		b = append(b, '/')
		return appendHex(b, t.Mask)
	case ConnmarkSave:
		b = append(b, " --save-mark"...)
	default:
		b = append(b, " --restore-mark"...)
	}
	b = append(b, " --nfmask "...)
	b = appendHex(b, t.NfMask)
	b = append(b, " --ctmask "...)
	return appendHex(b, t.CtMask)
}

// ---------------------------------------------------------------------------------

var logLevels = map[string]uint8{"emerg": 0, "alert": 1, "crit": 2, "error": 3, "err": 3,
	"warning": 4, "warn": 4, "notice": 5, "info": 6, "debug": 7}

var logFlags = []string{"--log-tcp-sequence", "--log-tcp-options", "--log-ip-options", "--log-uid", "--log-macdecode"}

// LogTarget is -j LOG: a no-op for the emulator that shows in traces.
type LogTarget struct {
	Prefix string
	Level  uint8
	Flags  []string // the --log-* flag options given, in iptables-save order
}

// Name implements Target.
func (*LogTarget) Name() string { return "LOG" }

func (t *LogTarget) option(rc *ruleCtx, opt string, _ bool, args []token) error {
	if err := once(rc, t, opt); err != nil {
		return err
	}
	switch opt {
	case "--log-level":
		if l, ok := logLevels[strings.ToLower(args[0].val)]; ok {
			t.Level = l
			return nil
		}
		n, err := strconv.ParseUint(args[0].val, 10, 8)
		if err != nil || n > 7 {
			return fmt.Errorf("invalid log level %q", args[0].val)
		}
		t.Level = uint8(n)
	case "--log-prefix":
		if len(args[0].val) > 29 {
			return fmt.Errorf("log prefix longer than 29 characters")
		}
		t.Prefix = args[0].val
	default:
		t.Flags = append(t.Flags, opt)
	}
	return nil
}

func (t *LogTarget) finish(*ruleCtx) error {
	var ordered []string
	for _, f := range logFlags {
		for _, g := range t.Flags {
			if f == g {
				ordered = append(ordered, f)
			}
		}
	}
	t.Flags = ordered
	return nil
}

func (t *LogTarget) appendTarget(b []byte) []byte {
	b = append(b, " -j LOG"...)
	if t.Prefix != "" {
		b = append(b, " --log-prefix "...)
		b = saveString(b, t.Prefix)
	}
	if t.Level != 4 {
		b = append(b, " --log-level "...)
		b = strconv.AppendUint(b, uint64(t.Level), 10)
	}
	for _, f := range t.Flags {
		b = append(b, ' ')
		b = append(b, f...)
	}
	return b
}

// NotrackTarget is -j NOTRACK (raw table): the packet becomes untracked.
type NotrackTarget struct{}

// Name implements Target.
func (*NotrackTarget) Name() string { return "NOTRACK" }

func (*NotrackTarget) option(*ruleCtx, string, bool, []token) error { return nil }
func (*NotrackTarget) finish(*ruleCtx) error                        { return nil }
func (*NotrackTarget) appendTarget(b []byte) []byte                 { return append(b, " -j NOTRACK"...) }

// UnknownTarget is an extension target the emulator does not model, kept verbatim.
// Pass-through ones (NFLOG, TCPMSS, CT, ...) are stepped over, others (NFQUEUE, TPROXY,
// ...) end the evaluation with an UNKNOWN verdict. CT --notrack is honoured.
type UnknownTarget struct {
	Target string
	Args   []string // raw option tokens
}

// Name implements Target.
func (t *UnknownTarget) Name() string { return t.Target }

func (t *UnknownTarget) appendTarget(b []byte) []byte {
	b = append(b, " -j "...)
	b = append(b, t.Target...)
	for _, a := range t.Args {
		b = append(b, ' ')
		b = append(b, a...)
	}
	return b
}

// passThrough reports whether evaluation continues after the target.
func (t *UnknownTarget) passThrough() bool { return passTargets[t.Target] }

func (t *UnknownTarget) notrack() bool {
	if t.Target != "CT" {
		return false
	}
	for _, a := range t.Args {
		if a == "--notrack" {
			return true
		}
	}
	return false
}
