package nftables

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"
)

// tracer follows one new connection's first packet through kube-proxy's table in a
// knftables.Fake, the way kube-proxy's tests trace (reference §7): it evaluates only
// the rule fragments kube-proxy writes (anything else is an error), treats "ct state
// new" as true, follows every numgen branch (recording every endpoint), and walks
// filter-prerouting-pre-dnat, nat-prerouting, filter-forward, filter-input and
// nat-postrouting. fib "type local" means one of nodeIPs.
type tracer struct {
	table   *knftables.FakeTable
	nodeIPs []netip.Addr

	src, dst netip.Addr
	proto    string
	dport    int

	outputs []string // DNAT targets, "ip:port", or DROP/REJECT
	marked  bool
	masq    bool
	dnatted bool
	err     error
}

type verdict int

const (
	vContinue verdict = iota // fell off the chain or returned
	vAccept                  // dnat, masquerade: this base chain is done
	vDrop
	vReject
)

// trace runs the packet and returns the output ("ip:port, ..." or DROP/REJECT, "" if
// nothing happened) and whether it was masqueraded.
func trace(fake *knftables.Fake, nodeIPs []string, src, proto, dst string, dport int) (string, bool, error) {
	tr := &tracer{table: fake.Table, src: netip.MustParseAddr(src), dst: netip.MustParseAddr(dst), proto: proto, dport: dport}
	for _, ip := range nodeIPs {
		tr.nodeIPs = append(tr.nodeIPs, netip.MustParseAddr(ip))
	}
	walk := []string{ChainFilterPreroutingPreDNAT, ChainNATPrerouting, ChainFilterForward, ChainFilterInput, ChainNATPostrouting}
	switch {
	case fake.Table.Chains[ChainEndpointsCheck] != nil:
		// 1.29: the filter chains (priority -101) run before DNAT.
		walk = []string{ChainFilterForward, ChainFilterInput, ChainNATPrerouting, ChainNATPostrouting}
	case fake.Table.Chains[ChainFilterPrerouting] != nil:
		walk[0] = ChainFilterPrerouting // 1.30-1.33
	}
	for _, c := range walk {
		if c == ChainFilterForward && tr.dnatted {
			// The packet now goes to the first endpoint.
			ap := netip.MustParseAddrPort(tr.outputs[0])
			tr.dst, tr.dport = ap.Addr(), int(ap.Port())
		}
		v := tr.chain(c, 0)
		if tr.err != nil {
			return "", false, tr.err
		}
		if v == vDrop || v == vReject {
			return strings.Join(tr.outputs, ", "), false, nil
		}
	}
	return strings.Join(tr.outputs, ", "), tr.masq, nil
}

func (tr *tracer) fail(format string, args ...any) verdict {
	if tr.err == nil {
		tr.err = fmt.Errorf(format, args...)
	}
	return vDrop
}

func (tr *tracer) chain(name string, depth int) verdict {
	ch := tr.table.Chains[name]
	if ch == nil {
		return tr.fail("no chain %s", name)
	}
	if depth > 20 {
		return tr.fail("jump loop at %s", name)
	}
	for _, r := range ch.Rules {
		v, stop := tr.rule(strings.Fields(r.Rule), depth)
		if tr.err != nil {
			tr.err = fmt.Errorf("chain %s, rule %q: %w", name, r.Rule, tr.err)
			return vDrop
		}
		if stop {
			return v
		}
	}
	return vContinue
}

// rule evaluates one rule's words; stop says whether the chain ends with v.
func (tr *tracer) rule(w []string, depth int) (verdict, bool) {
	for len(w) > 0 {
		ok, rest, v, stop := tr.fragment(w, depth)
		if tr.err != nil || stop {
			return v, stop
		}
		if !ok {
			return vContinue, false
		}
		w = rest
	}
	return vContinue, false
}

// fragment evaluates the match or statement at the start of w. It returns whether it
// matched, the remaining words, and, for a statement ending the rule, its verdict.
func (tr *tracer) fragment(w []string, depth int) (ok bool, rest []string, v verdict, stop bool) {
	has := func(words ...string) bool {
		return len(w) >= len(words) && slices.Equal(w[:len(words)], words)
	}
	switch {
	case has("ct", "state", "new"):
		return true, w[3:], 0, false
	case has("ct", "status", "dnat"):
		return tr.dnatted, w[3:], 0, false
	case has("fib", "saddr", "type", "local"):
		return slices.Contains(tr.nodeIPs, tr.src), w[4:], 0, false
	case has("fib", "daddr", "type", "local"):
		return slices.Contains(tr.nodeIPs, tr.dst), w[4:], 0, false
	case has("meta", "l4proto", ".", "th", "dport", "vmap"):
		return tr.vmapLookup(w[6], []string{tr.proto, strconv.Itoa(tr.dport)}, w[7:], depth)
	case has("meta", "l4proto"):
		return w[2] == tr.proto, w[3:], 0, false
	case len(w) >= 3 && (w[0] == "ip" || w[0] == "ip6") && w[2] == ".":
		return tr.concat(w, depth)
	case len(w) >= 3 && (w[0] == "ip" || w[0] == "ip6"):
		return tr.addrMatch(w)
	case has("mark", "and") && len(w) > 3 && w[3] == "==":
		// "mark and M == 0" (up to 1.35): the masquerade mark is not set.
		return !tr.marked, w[5:], 0, false
	case has("mark", "and"):
		// "mark and M != 0": the masquerade mark is set.
		return tr.marked, w[5:], 0, false
	case has("ct", "state", "invalid"):
		return false, nil, 0, false // only new connections are traced
	case len(w) >= 3 && (w[0] == "tcp" || w[0] == "udp" || w[0] == "sctp") && w[1] == "dport":
		return w[0] == tr.proto && w[2] == strconv.Itoa(tr.dport), w[3:], 0, false
	case has("mark", "set", "mark", "or"):
		tr.marked = true
		return true, w[5:], 0, false
	case has("mark", "set", "mark", "xor"):
		tr.marked = false
		return true, w[5:], 0, false
	case has("masquerade", "fully-random"):
		tr.masq = true
		return true, nil, vAccept, true
	case has("update"):
		i := slices.Index(w, "}")
		return true, w[i+1:], 0, false
	case has("counter", "name"):
		return true, w[3:], 0, false
	case has("numgen", "random", "mod"):
		return tr.numgenVmap(w, depth)
	case has("dnat", "to"):
		tr.outputs, tr.dnatted = append(tr.outputs, w[2]), true
		return true, nil, vAccept, true
	case has("dnat") && len(w) > 5 && w[2] == "addr":
		return tr.numgenMap(w)
	}
	v, stop, known := tr.verdict(w, depth)
	if !known {
		return false, nil, tr.fail("unknown fragment %q", strings.Join(w, " ")), true
	}
	return true, nil, v, stop
}

// verdict executes a verdict statement (also a vmap element's value): its verdict,
// whether the calling chain stops, and whether w was a verdict at all.
func (tr *tracer) verdict(w []string, depth int) (v verdict, stop, known bool) {
	switch {
	case len(w) == 1 && w[0] == "drop":
		tr.outputs = append(tr.outputs, "DROP")
		return vDrop, true, true
	case len(w) == 1 && w[0] == "reject":
		tr.outputs = append(tr.outputs, "REJECT")
		return vReject, true, true
	case len(w) == 1 && w[0] == "return":
		return vContinue, true, true
	case len(w) == 1 && w[0] == "accept":
		return vAccept, true, true
	case len(w) == 2 && w[0] == "goto":
		return tr.chain(w[1], depth+1), true, true
	case len(w) == 2 && w[0] == "jump":
		v := tr.chain(w[1], depth+1)
		return v, v != vContinue, true
	}
	return vContinue, false, false
}

// addrMatch: ip saddr|daddr [!=] ADDR|CIDR|@set|{ list }.
func (tr *tracer) addrMatch(w []string) (bool, []string, verdict, bool) {
	a := tr.src
	if w[1] == "daddr" {
		a = tr.dst
	} else if w[1] != "saddr" {
		return false, nil, tr.fail("unknown address match %q", strings.Join(w, " ")), true
	}
	w = w[2:]
	neg := w[0] == "!="
	if neg {
		w = w[1:]
	}
	var in bool
	switch {
	case strings.HasPrefix(w[0], "@"):
		s := tr.table.Sets[w[0][1:]]
		if s == nil {
			return false, nil, tr.fail("no set %s", w[0]), true
		}
		in, w = s.FindElement(a.String()) != nil, w[1:]
	case w[0] == "{":
		end := slices.Index(w, "}")
		for _, item := range w[1:end] {
			if item != "," && containsAddr(item, a) {
				in = true
			}
		}
		w = w[end+1:]
	default:
		in, w = containsAddr(w[0], a), w[1:]
	}
	return in != neg, w, 0, false
}

func containsAddr(item string, a netip.Addr) bool {
	if p, err := netip.ParsePrefix(item); err == nil {
		return p.Contains(a)
	}
	b, err := netip.ParseAddr(item)
	return err == nil && a == b
}

// concat: ip daddr . meta l4proto . th dport vmap @map, and
// ip saddr . ip daddr . meta l4proto . th dport @set.
func (tr *tracer) concat(w []string, depth int) (bool, []string, verdict, bool) {
	var key []string
	for len(w) > 0 {
		switch {
		case len(w) >= 2 && w[1] == "saddr":
			key, w = append(key, tr.src.String()), w[2:]
		case len(w) >= 2 && w[1] == "daddr":
			key, w = append(key, tr.dst.String()), w[2:]
		case len(w) >= 2 && w[0] == "meta" && w[1] == "l4proto":
			key, w = append(key, tr.proto), w[2:]
		case len(w) >= 2 && w[0] == "th" && w[1] == "dport":
			key, w = append(key, strconv.Itoa(tr.dport)), w[2:]
		default:
			return false, nil, tr.fail("unknown concatenation %q", strings.Join(w, " ")), true
		}
		if len(w) > 0 && w[0] == "." {
			w = w[1:]
			continue
		}
		break
	}
	if len(w) >= 2 && w[0] == "vmap" {
		return tr.vmapLookup(w[1], key, w[2:], depth)
	}
	if len(w) >= 1 && strings.HasPrefix(w[0], "@") {
		s := tr.table.Sets[w[0][1:]]
		if s == nil {
			return false, nil, tr.fail("no set %s", w[0]), true
		}
		return s.FindElement(key...) != nil, w[1:], 0, false
	}
	return false, nil, tr.fail("unknown concatenation use %q", strings.Join(w, " ")), true
}

// vmapLookup looks key up in a named verdict map and runs the element's verdict; a
// miss is no match. The vmap must end the rule.
func (tr *tracer) vmapLookup(name string, key, rest []string, depth int) (bool, []string, verdict, bool) {
	m := tr.table.Maps[strings.TrimPrefix(name, "@")]
	if m == nil {
		return false, nil, tr.fail("no map %s", name), true
	}
	if len(rest) > 0 {
		return false, nil, tr.fail("vmap does not end the rule: %q", strings.Join(rest, " ")), true
	}
	e := m.FindElement(key...)
	if e == nil {
		return false, nil, 0, false
	}
	v, stop, known := tr.verdict(strings.Fields(strings.Join(e.Value, " ")), depth)
	if !known {
		return false, nil, tr.fail("unknown verdict %q", e.Value), true
	}
	return true, nil, v, stop
}

// numgenVmap: numgen random mod N vmap { 0 : goto X , 1 : goto Y }; every branch is
// followed.
func (tr *tracer) numgenVmap(w []string, depth int) (bool, []string, verdict, bool) {
	if len(w) < 6 || w[4] != "vmap" || w[5] != "{" {
		return false, nil, tr.fail("unknown numgen %q", strings.Join(w, " ")), true
	}
	body := strings.Join(w[6:slices.Index(w, "}")], " ")
	v := vContinue
	for _, el := range strings.Split(body, " , ") {
		_, val, _ := strings.Cut(el, " : ")
		var known bool
		if v, _, known = tr.verdict(strings.Fields(val), depth); !known {
			return false, nil, tr.fail("unknown vmap value %q", val), true
		}
	}
	return true, nil, v, true
}

// numgenMap: dnat ip addr . port to numgen random mod N map { 0 : A . P , ... }; every
// endpoint is recorded.
func (tr *tracer) numgenMap(w []string) (bool, []string, verdict, bool) {
	i := slices.Index(w, "{")
	body := strings.Join(w[i+1:slices.Index(w, "}")], " ")
	for _, el := range strings.Split(body, " , ") {
		_, val, _ := strings.Cut(el, " : ")
		ip, port, ok := strings.Cut(val, " . ")
		if !ok {
			return false, nil, tr.fail("bad numgen map element %q", el), true
		}
		a := netip.MustParseAddr(ip)
		tr.outputs = append(tr.outputs, netip.AddrPortFrom(a, uint16(mustAtoi(port))).String())
	}
	tr.dnatted = true
	return true, nil, vAccept, true
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}
