package emulator

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// optError is an error about one option of a rule.
type optError struct {
	opt string
	err error
}

func (e *optError) Error() string { return e.opt + ": " + e.err.Error() }
func (e *optError) Unwrap() error { return e.err }

func optErr(opt string, format string, args ...any) error {
	return &optError{opt, fmt.Errorf(format, args...)}
}

// owner is something that takes options: a known match or target (opts set), or an
// unknown one (opts nil) that swallows what follows it.
type owner struct {
	opts    map[string]optSpec
	b       builder
	unknown *[]string // the raw argument list of an unknown module or target
}

// ruleSpec is a parsed rule spec: the rule, plus the extra addresses of comma lists
// (iptables expands "-s a,b" into one rule per address).
type ruleSpec struct {
	rule       *Rule
	srcs, dsts []netip.Prefix
	counters   *Counters // -c P B
	skip       bool      // -4 in an IPv6 ruleset or -6 in an IPv4 one
}

// noOpts is the options of a verdict target: none.
var noOpts = map[string]optSpec{}

// specParser parses rule specs; it keeps scratch space between rules.
type specParser struct {
	family Family
	rc     ruleCtx
	owners []owner

	// Slabs the parsed rules are carved from (a full load parses hundreds of thousands
	// of rules: one allocation per chunk instead of several per rule, and less for the
	// garbage collector to track). Each rule gets its own elements, never shared; a
	// chunk lives as long as any rule carved from it. Chunks grow from small (a partial
	// restore parses a few rules) to slabMax elements.
	rules   []ruleAndSpec
	matches []Match
	jumps   []JumpTarget
	nRules  int // size of the last chunk of each slab
	nMatch  int
	nJumps  int
	// jumpChunks are the chunks jumps were carved from (every JumpTarget this parser
	// made): the transaction clears their hints (JumpTarget.to) when it ends.
	jumpChunks [][]JumpTarget
	// The kube-proxy rules' match and target objects, from slabs: a -m tcp and a DNAT
	// per endpoint, a -m statistic per endpoint but the last, a -m comment per rule in
	// the small-cluster mode.
	tcps     slab[TCPMatch]
	stats    slab[StatisticMatch]
	comments slab[CommentMatch]
	nats     slab[NATTarget]
	spec     ruleSpec // the result of parse, valid until the next parse
	one      [1]*Rule // expand's result for a rule without address lists
}

// ruleAndSpec is a parsed rule and its Spec, allocated together.
type ruleAndSpec struct {
	r Rule
	s Spec
}

// slabMax is the largest chunk of a parser's slabs.
const slabMax = 1024

func nextChunk(last, least int) int { return max(min(2*last, slabMax), 16, least) }

// slab hands out zero values of T carved from chunks (of nextChunk's sizes), one
// allocation per chunk instead of one per value. A chunk lives as long as any of its
// values, as the parser's rule slab does.
type slab[T any] struct {
	free []T
	n    int // size of the last chunk
}

func (s *slab[T]) get() *T {
	if len(s.free) == 0 {
		s.n = nextChunk(s.n, 1)
		s.free = make([]T, s.n)
	}
	v := &s.free[0]
	s.free = s.free[1:]
	return v
}

// noModuleSlabs makes matchOption and targetOption allocate each tcp, statistic and
// comment match and DNAT target on its own, as they did before the slabs (for the test
// comparing the two).
var noModuleSlabs = false

// newRule returns a zero Rule with its own zero Spec.
func (sp *specParser) newRule() *Rule {
	if len(sp.rules) == 0 {
		sp.nRules = nextChunk(sp.nRules, 1)
		sp.rules = make([]ruleAndSpec, sp.nRules)
	}
	b := &sp.rules[0]
	sp.rules = sp.rules[1:]
	b.r.Spec = &b.s
	return &b.r
}

// newMatches returns an empty match list with room for n matches (appending more
// reallocates it: the capacity is the rule's own).
func (sp *specParser) newMatches(n int) []Match {
	if n == 0 {
		return nil
	}
	if len(sp.matches) < n {
		sp.nMatch = nextChunk(sp.nMatch, n)
		sp.matches = make([]Match, sp.nMatch)
	}
	m := sp.matches[:0:n]
	sp.matches = sp.matches[n:]
	return m
}

// newJump returns a jump to chain (a goto with gotoChain).
func (sp *specParser) newJump(chain string, gotoChain bool) *JumpTarget {
	if len(sp.jumps) == 0 {
		sp.nJumps = nextChunk(sp.nJumps, 1)
		sp.jumps = make([]JumpTarget, sp.nJumps)
		sp.jumpChunks = append(sp.jumpChunks, sp.jumps)
	}
	j := &sp.jumps[0]
	sp.jumps = sp.jumps[1:]
	j.Chain, j.Goto = chain, gotoChain
	return j
}

// countMatches counts the -m options among toks (an upper bound of the rule's matches
// but for the ones a protocol option loads implicitly).
func countMatches(toks []token) int {
	n := 0
	for _, t := range toks {
		if !t.quoted && (t.val == "-m" || t.val == "--match") {
			n++
		}
	}
	return n
}

func isGenericOpt(s string) bool {
	switch s {
	case "-s", "--source", "--src", "-d", "--destination", "--dst", "-p", "--protocol",
		"-i", "--in-interface", "-o", "--out-interface", "-f", "--fragment", "-m", "--match",
		"-j", "--jump", "-g", "--goto", "-c", "--set-counters", "-4", "--ipv4", "-6", "--ipv6":
		return true
	}
	return false
}

// isOptToken reports whether a token looks like an option (ends an unknown option's
// argument list).
func isOptToken(t token) bool {
	return !t.quoted && (t.val == "!" || (len(t.val) > 1 && t.val[0] == '-' && (t.val[1] < '0' || t.val[1] > '9')))
}

var protoModules = map[uint8]string{netfilter.ProtoTCP: "tcp", netfilter.ProtoUDP: "udp", netfilter.ProtoSCTP: "sctp", netfilter.ProtoICMP: "icmp", netfilter.ProtoICMPv6: "icmp6"}

// parse parses the tokens of a rule spec (everything after "-A CHAIN").
func (sp *specParser) parse(toks []token) (*ruleSpec, error) {
	r := sp.newRule()
	r.Matches = sp.newMatches(countMatches(toks))
	sp.spec = ruleSpec{rule: r}
	out := &sp.spec
	sp.rc = ruleCtx{family: sp.family, seen: sp.rc.seen[:0]}
	sp.owners = sp.owners[:0]
	neg := false
	for i := 0; i < len(toks); {
		t := toks[i]
		i++
		if t.val == "!" && !t.quoted {
			if neg {
				return nil, optErr("!", "multiple ! flags not allowed")
			}
			neg = true
			continue
		}
		if t.quoted || !strings.HasPrefix(t.val, "-") {
			return nil, optErr(t.raw, "unexpected argument (not an option)")
		}
		if err := sp.option(out, toks, &i, t.val, neg); err != nil {
			return nil, err
		}
		neg = false
	}
	if neg {
		return nil, optErr("!", "nothing follows !")
	}
	if err := sp.finish(out.rule); err != nil {
		return nil, err
	}
	return out, nil
}

// option parses one option, opt (negated by a "!" before it if neg), taking its
// arguments from toks at *i: a generic option sets the rule's header fields, -m and
// -j/-g add a match or the target, any other option goes to the module or target that
// owns it.
func (sp *specParser) option(out *ruleSpec, toks []token, i *int, opt string, neg bool) error {
	r := out.rule
	switch opt {
	case "-s", "--source", "--src", "-d", "--destination", "--dst":
		return sp.addrOption(out, toks, i, opt, neg)
	case "-p", "--protocol":
		return sp.protoOption(r, toks, i, opt, neg)
	case "-i", "--in-interface", "-o", "--out-interface":
		return ifaceOption(r, toks, i, opt, neg)
	case "-f", "--fragment":
		if sp.family == IPv6 {
			return optErr(opt, "not available for IPv6 (use -m frag)")
		}
		r.Fragment = FragOnly
		if neg {
			r.Fragment = FragNone
		}
	case "-c", "--set-counters":
		return countersOption(out, toks, i, opt)
	case "-4", "--ipv4":
		out.skip = out.skip || sp.family != IPv4
	case "-6", "--ipv6":
		out.skip = out.skip || sp.family != IPv6
	case "-m", "--match":
		return sp.matchOption(r, toks, i, opt, neg)
	case "-j", "--jump", "-g", "--goto":
		return sp.targetOption(r, toks, i, opt, neg)
	default:
		return sp.moduleOption(out, toks, i, opt, neg)
	}
	return nil
}

// nextArg takes the token at *i as opt's argument.
func nextArg(toks []token, i *int, opt string) (token, error) {
	if *i >= len(toks) {
		return token{}, optErr(opt, "missing argument")
	}
	*i++
	return toks[*i-1], nil
}

// addrOption parses -s or -d with an address or a comma list of them: the rule gets the
// first, a list is kept in out.srcs or out.dsts (expand makes a rule per address).
func (sp *specParser) addrOption(out *ruleSpec, toks []token, i *int, opt string, neg bool) error {
	a, err := nextArg(toks, i, opt)
	if err != nil {
		return err
	}
	var list []netip.Prefix
	if !strings.Contains(a.val, ",") {
		// A single address (kube-proxy's rules): no list to allocate.
		p, err := parsePrefix(a.val, sp.family)
		if err != nil {
			return &optError{opt, err}
		}
		return sp.setAddr(out, opt, AddrSpec{Prefix: p, Neg: neg}, nil)
	}
	for _, part := range strings.Split(a.val, ",") {
		p, err := parsePrefix(part, sp.family)
		if err != nil {
			return &optError{opt, err}
		}
		list = append(list, p)
	}
	return sp.setAddr(out, opt, AddrSpec{Prefix: list[0], Neg: neg}, list)
}

// setAddr sets the rule's -s or -d (opt) to spec, the first of list when -s or -d
// named a comma list (nil for a single address).
func (sp *specParser) setAddr(out *ruleSpec, opt string, spec AddrSpec, list []netip.Prefix) error {
	neg := spec.Neg
	if spec.Prefix.Bits() == 0 && !neg && len(list) <= 1 {
		spec = AddrSpec{} // 0/0 matches everything; iptables-save prints nothing
	}
	r := out.rule
	if opt == "-s" || opt == "--source" || opt == "--src" {
		if r.Src.IsSet() || out.srcs != nil {
			return optErr(opt, "given twice")
		}
		r.Src = spec
		if len(list) > 1 {
			out.srcs = list
		}
	} else {
		if r.Dst.IsSet() || out.dsts != nil {
			return optErr(opt, "given twice")
		}
		r.Dst = spec
		if len(list) > 1 {
			out.dsts = list
		}
	}
	if len(list) > 1 && neg {
		return optErr(opt, "! cannot be used with multiple addresses")
	}
	return nil
}

// protoOption parses -p; the protocol is what implicit protocol modules and
// protocol-bound modules look at.
func (sp *specParser) protoOption(r *Rule, toks []token, i *int, opt string, neg bool) error {
	a, err := nextArg(toks, i, opt)
	if err != nil {
		return err
	}
	if r.Proto.Set {
		return optErr(opt, "given twice")
	}
	p, err := ParseProto(a.val)
	if err != nil {
		return &optError{opt, err}
	}
	if p == 0 {
		if neg {
			return optErr(opt, "rule would never match protocol")
		}
	} else {
		r.Proto = ProtoSpec{Set: true, Num: p, Neg: neg}
	}
	sp.rc.proto = r.Proto
	return nil
}

// ifaceOption parses -i or -o.
func ifaceOption(r *Rule, toks []token, i *int, opt string, neg bool) error {
	a, err := nextArg(toks, i, opt)
	if err != nil {
		return err
	}
	if a.val == "" || len(a.val) > 15 || strings.ContainsAny(a.val, " /") {
		return optErr(opt, "invalid interface name %q", a.val)
	}
	spec := IfaceSpec{Name: a.val, Neg: neg}
	if opt == "-i" || opt == "--in-interface" {
		r.InIface = spec
	} else {
		r.OutIface = spec
	}
	return nil
}

// countersOption parses -c PACKETS BYTES.
func countersOption(out *ruleSpec, toks []token, i *int, opt string) error {
	p, err := nextArg(toks, i, opt)
	if err != nil {
		return err
	}
	b, err := nextArg(toks, i, opt)
	if err != nil {
		return err
	}
	pn, err1 := strconv.ParseUint(p.val, 10, 64)
	bn, err2 := strconv.ParseUint(b.val, 10, 64)
	if err1 != nil || err2 != nil {
		return optErr(opt, "invalid counters %q %q", p.val, b.val)
	}
	out.counters = &Counters{pn, bn}
	return nil
}

// matchOption parses -m NAME: a known module becomes the owner of the options it has,
// an unknown one is kept verbatim with every option that follows it.
func (sp *specParser) matchOption(r *Rule, toks []token, i *int, opt string, neg bool) error {
	a, err := nextArg(toks, i, opt)
	if err != nil {
		return err
	}
	if neg {
		return optErr(opt, "! is not allowed before -m")
	}
	if def, ok := lookupModule(a.val); ok {
		b := sp.moduleMatch(def)
		r.Matches = append(r.Matches, b)
		sp.owners = append(sp.owners, owner{opts: def.opts, b: b})
		return nil
	}
	if a.val == "" || strings.HasPrefix(a.val, "-") || !extName(a.val) {
		return optErr(opt, "invalid match name %q", a.val)
	}
	u := &UnknownMatch{Name: a.val}
	r.Matches = append(r.Matches, u)
	sp.owners = append(sp.owners, owner{unknown: &u.Args})
	return nil
}

// targetOption parses -j NAME or -g CHAIN. A -j NAME is a verdict, a target the
// emulator models, an extension target it keeps verbatim (a known one, or a name
// followed by options no module of the rule has), or else a jump to a chain.
func (sp *specParser) targetOption(r *Rule, toks []token, i *int, opt string, neg bool) error {
	a, err := nextArg(toks, i, opt)
	if err != nil {
		return err
	}
	if neg {
		return optErr(opt, "cannot be negated")
	}
	if r.Target != nil {
		return optErr(opt, "only one -j or -g per rule")
	}
	name := a.val
	if opt == "-g" || opt == "--goto" {
		if err := validChainName(name); err != nil {
			return &optError{opt, err}
		}
		r.Target = sp.newJump(name, true)
		return nil
	}
	// A name of a length no target name has (KUBE-SEP-...) is a chain, or an
	// extension target the emulator does not know: no map lookups.
	known := targetLens&(1<<min(len(name), 63)) != 0
	var def *targetDef
	if known {
		def = targets[name]
	}
	switch {
	case name == "ACCEPT" || name == "DROP" || name == "RETURN":
		r.Target = &VerdictTarget{Verdict: name}
		sp.owners = append(sp.owners, owner{opts: noOpts})
	case def != nil:
		var b targetBuilder
		if name == "DNAT" {
			b = sp.dnat()
		} else {
			b = def.new()
		}
		r.Target = b
		sp.owners = append(sp.owners, owner{opts: def.opts, b: b})
	case known && (passTargets[name] || stopTargets[name]) || sp.looksLikeExtension(toks, toks[*i:]) && extName(name):
		// (A name no extension can have, a quoted one with a space or quote, is taken
		// for a chain's below and refused there.)
		u := &UnknownTarget{Target: name}
		r.Target = u
		sp.owners = append(sp.owners, owner{unknown: &u.Args})
	default:
		if err := validChainName(name); err != nil {
			return &optError{opt, err}
		}
		r.Target = sp.newJump(name, false)
	}
	return nil
}

// finish completes a rule whose options are all read: -m ipvs's options are parsed for
// the evaluator, and each known module and target checks its options as a whole.
func (sp *specParser) finish(r *Rule) error {
	for _, m := range r.Matches {
		if u, ok := m.(*UnknownMatch); ok && u.Name == "ipvs" {
			spec, err := parseIPVS(u.Args, sp.rc.family)
			if err != nil {
				return &optError{"-m ipvs", err}
			}
			u.ipvs = spec
		}
	}
	for _, o := range sp.owners {
		if o.b != nil {
			if err := o.b.finish(&sp.rc); err != nil {
				var name string
				if m, ok := o.b.(Match); ok {
					name = "-m " + m.Module()
				} else if tg, ok := o.b.(Target); ok {
					name = "-j " + tg.Name()
				}
				return &optError{name, err}
			}
		}
	}
	return nil
}

// looksLikeExtension reports whether the words after "-j NAME" are options that no known
// module of the rule (loaded anywhere in it, or implied by its -p) has, which makes
// NAME an extension target rather than a chain. Looking at the whole rule keeps the
// answer the same whatever order the options come in (iptables-save prints the target
// last).
func (sp *specParser) looksLikeExtension(toks []token, rest []token) bool {
	if len(rest) == 0 || !strings.HasPrefix(rest[0].val, "--") || rest[0].quoted || isGenericOpt(rest[0].val) {
		return false
	}
	opt := rest[0].val
	for i := 0; i+1 < len(toks); i++ {
		if toks[i].quoted {
			continue
		}
		var def *moduleDef
		switch toks[i].val {
		case "-m", "--match":
			def = modules[toks[i+1].val]
		case "-p", "--protocol":
			if p, err := ParseProto(toks[i+1].val); err == nil {
				def = modules[protoModules[p]]
			}
		}
		if def != nil {
			if _, ok := def.opts[opt]; ok {
				return false
			}
		}
	}
	return true
}

// moduleOption hands an option to the module or target that owns it, newest first, as
// iptables does: a known module or target takes the options it has; a module or target
// the emulator does not know takes every option that follows it (with the words after
// each) until the next -m, -j or header option, which is how iptables-save prints them;
// an option nobody loaded takes loads the protocol's module implicitly (-p tcp --dport
// 80 is -p tcp -m tcp --dport 80), as iptables does.
func (sp *specParser) moduleOption(out *ruleSpec, toks []token, i *int, opt string, neg bool) error {
	r := out.rule
	for j := len(sp.owners) - 1; j >= 0; j-- {
		o := sp.owners[j]
		if o.unknown != nil {
			if neg {
				*o.unknown = append(*o.unknown, "!")
			}
			*o.unknown = append(*o.unknown, toks[*i-1].raw)
			for *i < len(toks) && !isOptToken(toks[*i]) {
				*o.unknown = append(*o.unknown, toks[*i].raw)
				*i++
			}
			return nil
		}
		if spec, ok := o.opts[opt]; ok {
			return sp.give(o, spec, toks, i, opt, neg)
		}
	}
	// getopt_long, which iptables-restore parses a rule with, takes an unambiguous
	// prefix of a long option of the options known so far (the generic ones and the
	// loaded modules' and target's): "-m multiport --dport 80,443" is --dports.
	if full, err := sp.abbreviation(opt, nil); err != nil {
		return err
	} else if full != "" {
		return sp.option(out, toks, i, full, neg)
	}
	// An option no loaded module has loads the protocol's module (-p tcp: -m tcp), as
	// iptables does, and is looked up again among its options.
	if r.Proto.Set && !r.Proto.Neg {
		if name, ok := protoModules[r.Proto.Num]; ok {
			def := modules[name]
			spec, ok := def.opts[opt]
			if !ok {
				full, err := sp.abbreviation(opt, def.opts)
				if err != nil {
					return err
				}
				spec, ok = def.opts[full]
			}
			if ok {
				b := def.new()
				r.Matches = append(r.Matches, b)
				o := owner{opts: def.opts, b: b}
				sp.owners = append(sp.owners, o)
				return sp.give(o, spec, toks, i, spec.canon, neg)
			}
		}
	}
	return optErr(opt, "unknown option")
}

// genericLongOpts are iptables' own long options (iptables.c original_opts), each
// with the option it stands for: what getopt_long matches an abbreviation against
// besides the modules' options. Commands are in the table too, so "--de" is
// ambiguous (--delete, --delete-chain, --destination) as in iptables.
var genericLongOpts = map[string]string{
	"--append": "-A", "--delete": "-D", "--insert": "-I", "--replace": "-R", "--check": "-C",
	"--list": "-L", "--list-rules": "-S", "--flush": "-F", "--zero": "-Z", "--new-chain": "-N",
	"--delete-chain": "-X", "--rename-chain": "-E", "--policy": "-P", "--source": "-s", "--src": "-s",
	"--destination": "-d", "--dst": "-d", "--protocol": "-p", "--in-interface": "-i", "--jump": "-j",
	"--table": "-t", "--match": "-m", "--numeric": "-n", "--out-interface": "-o", "--verbose": "-v",
	"--wait": "-w", "--exact": "-x", "--fragment": "-f", "--version": "-V", "--help": "-h",
	"--line-numbers": "--line-numbers", "--modprobe": "--modprobe", "--set-counters": "-c",
	"--goto": "-g", "--ipv4": "-4", "--ipv6": "-6",
}

// abbreviation resolves opt, a long option that is not the name of a known one, as
// getopt_long does: the one option (counting aliases once) whose name it begins. It
// looks among extra when given, else among the generic options and those of the
// modules and target loaded so far. It returns "" when nothing begins with opt, and an
// error when several options do.
func (sp *specParser) abbreviation(opt string, extra map[string]optSpec) (string, error) {
	if !strings.HasPrefix(opt, "--") || len(opt) < 3 {
		return "", nil
	}
	type cand struct{ full, key string }
	var cands []cand
	add := func(full, key string) {
		for i, c := range cands {
			if c.key == key {
				if len(full) > len(c.full) { // an alias: name it by its long spelling (--source, not --src)
					cands[i].full = full
				}
				return
			}
		}
		cands = append(cands, cand{full, key})
	}
	if extra != nil {
		for name, s := range extra {
			if strings.HasPrefix(name, opt) {
				add(s.canon, s.canon)
			}
		}
	} else {
		for name, short := range genericLongOpts {
			if strings.HasPrefix(name, opt) {
				add(name, "generic "+short)
			}
		}
		for j, o := range sp.owners {
			for name, s := range o.opts {
				if strings.HasPrefix(name, opt) {
					add(s.canon, fmt.Sprintf("owner %d %s", j, s.canon))
				}
			}
		}
	}
	switch len(cands) {
	case 0:
		return "", nil
	case 1:
		full := cands[0].full
		if short := genericLongOpts[full]; short != "" && !isGenericOpt(full) {
			return "", optErr(opt, "%s is not an option of a rule", full)
		}
		return full, nil
	}
	var names []string
	for _, c := range cands {
		names = append(names, c.full)
	}
	slices.Sort(names)
	return "", optErr(opt, "ambiguous abbreviation of %s", strings.Join(names, ", "))
}

func (sp *specParser) give(o owner, spec optSpec, toks []token, i *int, opt string, neg bool) error {
	if neg && !spec.negatable {
		return optErr(opt, "cannot be negated")
	}
	if *i+spec.nargs > len(toks) {
		return optErr(opt, "missing argument")
	}
	args := toks[*i : *i+spec.nargs]
	*i += spec.nargs
	if err := o.b.option(&sp.rc, spec.canon, neg, args); err != nil {
		var oe *optError
		if errors.As(err, &oe) {
			return err
		}
		return &optError{opt, err}
	}
	return nil
}

// expand returns the rules a spec stands for (more than one for comma lists),
// appended to out[:0].
func (s *ruleSpec) expand(out []*Rule) []*Rule {
	out = out[:0]
	if s.srcs == nil && s.dsts == nil {
		return append(out, s.rule)
	}
	srcs := s.srcs
	if srcs == nil {
		srcs = []netip.Prefix{s.rule.Src.Prefix}
	}
	dsts := s.dsts
	if dsts == nil {
		dsts = []netip.Prefix{s.rule.Dst.Prefix}
	}
	for _, sa := range srcs {
		for _, da := range dsts {
			nr := s.rule.withSpec()
			if s.srcs != nil {
				nr.Src = AddrSpec{Prefix: sa}
				if sa.Bits() == 0 {
					nr.Src = AddrSpec{}
				}
			}
			if s.dsts != nil {
				nr.Dst = AddrSpec{Prefix: da}
				if da.Bits() == 0 {
					nr.Dst = AddrSpec{}
				}
			}
			out = append(out, nr)
		}
	}
	return out
}

// extName reports whether name can be an xtables extension's: letters, digits, '_',
// '-' and '.' (a name with a space or a quote, which a quoted token can carry, names no
// module, and a dump would print it unquoted as two words).
func extName(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
