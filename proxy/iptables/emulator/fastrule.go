package emulator

import (
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// A first sync of 10,000 Services writes some 300,000 rules, and nearly all of them
// are kube-proxy's per-service rules, made of a few options. Parsing them the general
// way (tokenize the line, dispatch each option to its module by name, then check each
// module's options as a whole) was most of the restore's time. fastRule reads such a
// line by its literal text and builds the rule directly: what parse gives for the
// same line (FuzzFastRule and TestFastRuleMatchesParse compare the two), or nothing,
// and the line goes the general way (which then also gives any error).
//
// The lines it takes are "-A CHAIN", then these options in any order, each at most
// once, words separated by single spaces:
//
//	-s ADDR, ! -s ADDR, -d ADDR      one address each (no lists)
//	-p P                             P tcp or udp
//	-m comment --comment C           C a plain word, or double-quoted without a backslash inside
//	-m P                             the protocol's module, after or before its -p
//	--dport PORT                     after -m P
//	-m statistic --mode random --probability F
//
// and last "-j TARGET" (a chain, ACCEPT, DROP or RETURN) or "-j DNAT --to-destination
// ADDR[:PORT]". Both the order kube-proxy's generator writes (-m comment first, -m tcp
// -p tcp) and iptables-save's (-s, -d, -p, then the matches) are of this form.

// noFastRule sends every line the general way (tests compare the two).
var noFastRule = false

// fastRule parses line (trimmed, as run passes it) when it is an -A line of the form
// above, returning its chain and spec (valid until the parser's next parse); ok is
// false for any other line, or one with a value the general parse would refuse.
func (sp *specParser) fastRule(line string) (chain string, spec *ruleSpec, ok bool) {
	s, ok := strings.CutPrefix(line, "-A ")
	if !ok {
		return "", nil, false
	}
	if chain, s = plainWord(s); chain == "" || namesTable(chain) {
		return "", nil, false
	}
	// The options, read before anything is built: words, as they come.
	var (
		src, dst, proto, comment, prob, target, to string
		srcNeg, hasComment, hasProb                bool
		module, dport                              string // -m tcp or -m udp, and its --dport
		modAt, commentAt, probAt                   int    // 1 + the position of each -m among the matches
		nm                                         int    // the -m options read
	)
	for {
		var w string
		// The option's letter (upper case: the module of -m), to try one case only.
		var k byte
		if len(s) > 4 {
			switch k = s[2]; {
			case s[1] == '!':
				k = 's'
			case k == 'm':
				k = s[4] &^ 0x20
			}
		}
		switch {
		case k == 'j' && strings.HasPrefix(s, " -j "):
			if target, s = plainWord(s[len(" -j "):]); target == "" {
				return "", nil, false
			}
			if s != "" {
				if target != "DNAT" || !strings.HasPrefix(s, " --to-destination ") {
					return "", nil, false
				}
				if to, s = plainWord(s[len(" --to-destination "):]); to == "" || s != "" {
					return "", nil, false
				}
			}
			goto build
		case k == 's' && (strings.HasPrefix(s, " -s ") || strings.HasPrefix(s, " ! -s ")):
			neg := s[1] == '!'
			if w, s = plainWord(s[len(" -s ")+2*b2i(neg):]); w == "" || src != "" {
				return "", nil, false
			}
			src, srcNeg = w, neg
		case k == 'd' && strings.HasPrefix(s, " -d "):
			if w, s = plainWord(s[len(" -d "):]); w == "" || dst != "" {
				return "", nil, false
			}
			dst = w
		case k == 'p' && (strings.HasPrefix(s, " -p tcp") || strings.HasPrefix(s, " -p udp")):
			if proto != "" {
				return "", nil, false
			}
			proto, s = s[len(" -p "):len(" -p tcp")], s[len(" -p tcp"):]
		case k == 'C' && strings.HasPrefix(s, " -m comment --comment "):
			if hasComment {
				return "", nil, false
			}
			rest := s[len(" -m comment --comment "):]
			if comment, s, ok = commentWord(rest); !ok || len(comment) > 255 || !strings.HasPrefix(rest, `"`) && namesTable(comment) {
				return "", nil, false
			}
			hasComment, nm = true, nm+1
			commentAt = nm
		case (k == 'T' || k == 'U') && (strings.HasPrefix(s, " -m tcp") || strings.HasPrefix(s, " -m udp")):
			if module != "" {
				return "", nil, false
			}
			module, s = s[len(" -m "):len(" -m tcp")], s[len(" -m tcp"):]
			nm++
			modAt = nm
		case k == '-' && strings.HasPrefix(s, " --dport "):
			// The newest match with a --dport takes it: the protocol's module (no
			// other module taken here has one). Before it, the general parse would
			// load the module implicitly, after the matches so far.
			if w, s = plainWord(s[len(" --dport "):]); w == "" || module == "" || dport != "" {
				return "", nil, false
			}
			dport = w
		case k == 'S' && strings.HasPrefix(s, " -m statistic --mode random --probability "):
			if prob, s = plainWord(s[len(" -m statistic --mode random --probability "):]); prob == "" || hasProb {
				return "", nil, false
			}
			hasProb, nm = true, nm+1
			probAt = nm
		default:
			return "", nil, false
		}
		// Each option ends at a space before the next one (" -j" at the latest).
		if s == "" || s[0] != ' ' {
			return "", nil, false
		}
	}

build:
	// A protocol module needs its -p (needProto), as does a DNAT with a port
	// (natPortProtos, checked below).
	if module != "" && module != proto {
		return "", nil, false
	}
	r := sp.newRule()
	r.Matches = sp.newMatches(nm)
	sp.spec = ruleSpec{rule: r}
	out := &sp.spec
	if proto != "" {
		r.Proto = ProtoSpec{Set: true, Num: netfilter.ProtoTCP}
		if proto == "udp" {
			r.Proto.Num = netfilter.ProtoUDP
		}
	}
	if src != "" && !sp.fastAddr(out, "-s", src, srcNeg) || dst != "" && !sp.fastAddr(out, "-d", dst, false) {
		return "", nil, false
	}
	// The matches, in the order of their -m options.
	for at := 1; at <= nm; at++ {
		switch at {
		case commentAt:
			m := sp.moduleMatch(modComment).(*CommentMatch)
			m.Comment = comment
			r.Matches = append(r.Matches, m)
		case probAt:
			m := sp.moduleMatch(modStatistic).(*StatisticMatch)
			p, err := parseProbability(prob)
			if err != nil {
				return "", nil, false
			}
			m.Probability, m.modeSet = p, true
			r.Matches = append(r.Matches, m)
		case modAt:
			var err error
			if module == "tcp" {
				m := sp.moduleMatch(modTCP).(*TCPMatch)
				if dport != "" {
					m.Dport, err = parsePortSpec(dport, false)
				}
				r.Matches = append(r.Matches, m)
			} else {
				m := sp.moduleMatch(modUDP).(*UDPMatch)
				if dport != "" {
					m.Dport, err = parseUDPPortSpec(dport, false)
				}
				r.Matches = append(r.Matches, m)
			}
			if err != nil {
				return "", nil, false
			}
		}
	}
	if to != "" {
		t := sp.dnat()
		t.toSet = true
		if t.parseRange(to, sp.family) != nil || t.PortMin != 0 && proto == "" {
			return "", nil, false
		}
		r.Target = t
	} else if !sp.fastTarget(r, target) {
		return "", nil, false
	}
	return chain, out, true
}

// plainWord splits s at the end of its first word as tokenize reads a word without
// quotes: up to a blank, a line end or a quote. word is "" when s begins with one, or
// when the word ends at a quote (a quoted part follows: not a plain word).
func plainWord(s string) (word, rest string) {
	i := 0
	for i < len(s) && !wordEnd[s[i]] {
		i++
	}
	if i < len(s) && s[i] == '"' {
		return "", s
	}
	return s[:i], s[i:]
}

// namesTable reports whether a plain word is -t or --table.
func namesTable(w string) bool { return w == "-t" || w == "--table" }

// commentWord takes a --comment argument from the front of s: a plain word, or a
// double-quoted one without backslashes inside (tokenize's simple case), which must be
// followed by a space or the end.
func commentWord(s string) (val, rest string, ok bool) {
	if !strings.HasPrefix(s, `"`) {
		val, rest = plainWord(s)
		return val, rest, val != ""
	}
	j := strings.IndexByte(s[1:], '"')
	if j < 0 {
		return "", s, false
	}
	val, rest = s[1:1+j], s[2+j:]
	if strings.IndexByte(val, '\\') >= 0 || (rest != "" && rest[0] != ' ') {
		return "", s, false
	}
	return val, rest, true
}

// fastAddr sets the rule's -s or -d from a single address, as addrOption does.
func (sp *specParser) fastAddr(out *ruleSpec, opt, a string, neg bool) bool {
	if strings.IndexByte(a, ',') >= 0 {
		return false
	}
	p, err := parsePrefix(a, sp.family)
	if err != nil {
		return false
	}
	return sp.setAddr(out, opt, AddrSpec{Prefix: p, Neg: neg}, nil) == nil
}

// fastTarget sets -j name, the last option of the line, when targetOption would make
// it a verdict or a jump to a chain (false for any other target).
func (sp *specParser) fastTarget(r *Rule, name string) bool {
	switch name {
	case "ACCEPT", "DROP", "RETURN":
		r.Target = &VerdictTarget{Verdict: name}
		return true
	}
	if targetLens&(1<<min(len(name), 63)) != 0 && (targets[name] != nil || passTargets[name] || stopTargets[name]) {
		return false
	}
	// Nothing follows the name, so it is no extension target (looksLikeExtension).
	if validChainName(name) != nil {
		return false
	}
	r.Target = sp.newJump(name, false)
	return true
}

// moduleMatch returns a new match of a known module, from the parser's slab for the
// modules kube-proxy's rules use most.
func (sp *specParser) moduleMatch(def *moduleDef) matchBuilder {
	switch {
	case noModuleSlabs:
		return def.new()
	case def == modTCP:
		return sp.tcps.get()
	case def == modStatistic:
		return sp.stats.get()
	case def == modComment:
		return sp.comments.get()
	}
	return def.new()
}

// dnat returns a new DNAT target (targetOption's).
func (sp *specParser) dnat() *NATTarget {
	if noModuleSlabs {
		return &NATTarget{Kind: "DNAT"}
	}
	t := sp.nats.get()
	t.Kind = "DNAT"
	return t
}
