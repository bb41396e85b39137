package emulator

import (
	"math"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// A first sync of 10,000 Services writes some 300,000 rules, and nearly all of them
// have one of a few shapes: kube-proxy's per-service rules. Parsing them the general
// way (tokenize the line, dispatch each option to its module by name, then check each
// module's options as a whole) was most of the restore's time. fastRule recognizes
// those shapes by their literal text and builds the rule directly: what parse gives
// for the same line (FuzzFastRule and TestFastRuleMatchesParse compare the two), or
// nothing, and the line goes the general way (which then also gives any error).
//
// The shapes, after "-A CHAIN" and an optional "-m comment --comment C" (C a plain
// word, or double-quoted without backslashes or quotes inside), words separated by
// single spaces:
//
//	-s ADDR -j TARGET                                         (KUBE-SEP: hairpin masquerade)
//	-m P -p P -j DNAT --to-destination ADDR[:PORT]            (KUBE-SEP: the DNAT)
//	-m statistic --mode random --probability F -j TARGET      (KUBE-SVC: one endpoint's share)
//	-j TARGET                                                 (KUBE-SVC: the last endpoint)
//	-m P -p P -d ADDR --dport PORT [! -s ADDR] -j TARGET      (KUBE-SERVICES, cluster IP masquerade)
//
// P is tcp or udp; TARGET a chain, ACCEPT, DROP or RETURN.

// noFastRule sends every line the general way (tests compare the two).
var noFastRule = false

// fastRule parses line (trimmed, as run passes it) when it is an -A line of one of the
// shapes above, returning its chain and spec (valid until the parser's next parse);
// ok is false for any other line, or one of those shapes with a value parse refuses.
func (sp *specParser) fastRule(line string) (chain string, spec *ruleSpec, ok bool) {
	s, ok := strings.CutPrefix(line, "-A ")
	if !ok {
		return "", nil, false
	}
	if chain, s = plainWord(s); chain == "" || namesTable(chain) {
		return "", nil, false
	}
	var comment string
	hasComment := false
	if rest, ok := strings.CutPrefix(s, " -m comment --comment "); ok {
		// (A plain -t or --table anywhere makes the line an error: checkCommand.)
		if comment, s, ok = commentWord(rest); !ok || len(comment) > 255 || !strings.HasPrefix(rest, `"`) && namesTable(comment) {
			return "", nil, false
		}
		hasComment = true
	}
	const (
		shapeMasq = iota + 1
		shapeDNAT
		shapeRandom
		shapeJump
		shapeVIP
	)
	var shape int
	var addr, proto, to, prob, port, notSrc, target string
	switch {
	case strings.HasPrefix(s, " -s "):
		addr, s = plainWord(s[len(" -s "):])
		if target, s, ok = jumpEnd(s); !ok || addr == "" {
			return "", nil, false
		}
		shape = shapeMasq
	case strings.HasPrefix(s, " -m tcp -p tcp ") || strings.HasPrefix(s, " -m udp -p udp "):
		proto, s = s[len(" -m "):len(" -m tcp")], s[len(" -m tcp -p tcp"):]
		if rest, ok := strings.CutPrefix(s, " -j DNAT --to-destination "); ok {
			if to, s = plainWord(rest); to == "" || s != "" {
				return "", nil, false
			}
			shape = shapeDNAT
			break
		}
		rest, ok := strings.CutPrefix(s, " -d ")
		if !ok {
			return "", nil, false
		}
		if addr, s = plainWord(rest); addr == "" {
			return "", nil, false
		}
		if rest, ok = strings.CutPrefix(s, " --dport "); !ok {
			return "", nil, false
		}
		if port, s = plainWord(rest); port == "" {
			return "", nil, false
		}
		if rest, ok := strings.CutPrefix(s, " ! -s "); ok {
			if notSrc, s = plainWord(rest); notSrc == "" {
				return "", nil, false
			}
		}
		if target, s, ok = jumpEnd(s); !ok {
			return "", nil, false
		}
		shape = shapeVIP
	case strings.HasPrefix(s, " -m statistic --mode random --probability "):
		prob, s = plainWord(s[len(" -m statistic --mode random --probability "):])
		if target, s, ok = jumpEnd(s); !ok || prob == "" {
			return "", nil, false
		}
		shape = shapeRandom
	default:
		if target, s, ok = jumpEnd(s); !ok {
			return "", nil, false
		}
		shape = shapeJump
	}

	// The rule, built as parse builds it: matches in the order of their -m options,
	// each from the slab matchOption takes it from.
	nm := 0
	if hasComment {
		nm++
	}
	if shape == shapeDNAT || shape == shapeVIP || shape == shapeRandom {
		nm++
	}
	r := sp.newRule()
	r.Matches = sp.newMatches(nm)
	sp.spec = ruleSpec{rule: r}
	out := &sp.spec
	if hasComment {
		m := sp.moduleMatch(modComment).(*CommentMatch)
		m.Comment = comment
		r.Matches = append(r.Matches, m)
	}
	switch shape {
	case shapeMasq:
		if !sp.fastAddr(out, "-s", addr, false) {
			return "", nil, false
		}
	case shapeRandom:
		m := sp.moduleMatch(modStatistic).(*StatisticMatch)
		p, err := strconv.ParseFloat(prob, 64)
		if err != nil || p < 0 || p > 1 || math.IsNaN(p) {
			return "", nil, false
		}
		m.Probability, m.modeSet = uint32(math.Round(p*(1<<31))), true
		r.Matches = append(r.Matches, m)
	case shapeDNAT, shapeVIP:
		num := netfilter.ProtoTCP
		var b matchBuilder
		if proto == "tcp" {
			b = sp.moduleMatch(modTCP)
		} else {
			num, b = netfilter.ProtoUDP, sp.moduleMatch(modUDP)
		}
		r.Matches = append(r.Matches, b)
		r.Proto = ProtoSpec{Set: true, Num: num}
		if shape == shapeDNAT {
			t := sp.dnat()
			t.toSet = true
			if t.parseRange(to, sp.family) != nil {
				return "", nil, false
			}
			r.Target = t
			return chain, out, true
		}
		if !sp.fastAddr(out, "-d", addr, false) {
			return "", nil, false
		}
		var err error
		if num == netfilter.ProtoTCP {
			b.(*TCPMatch).Dport, err = parsePortSpec(port, false)
		} else {
			b.(*UDPMatch).Dport, err = parseUDPPortSpec(port, false)
		}
		if err != nil {
			return "", nil, false
		}
		if notSrc != "" && !sp.fastAddr(out, "-s", notSrc, true) {
			return "", nil, false
		}
	}
	if !sp.fastTarget(r, target) {
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

// jumpEnd takes " -j TARGET" ending the line from the front of s.
func jumpEnd(s string) (target, rest string, ok bool) {
	s, ok = strings.CutPrefix(s, " -j ")
	if !ok {
		return "", s, false
	}
	target, rest = plainWord(s)
	return target, rest, target != "" && rest == ""
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
