package iptables

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// tokenize splits a rule into words; a double-quoted string is one word (quotes
// removed, \" and \\ unescaped).
func tokenize(s string) []string {
	var out []string
	var cur strings.Builder
	in, have := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case in && c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case c == '"':
			in = !in
			have = true
		case !in && (c == ' ' || c == '\t'):
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

// traceRule is the part of a rule the tracer looks at (the fields kube-proxy's test
// parser fills in).
type traceRule struct {
	raw                string
	src, dst           *negValue
	srcType, dstType   *negValue
	proto, dport       *negValue
	jump, dnatTo       string
	probability        bool
	stateful           bool // --rcheck, --mark, --ctstate: never matches in the tracer
	comment            string
	hasComment         bool
	inIface, inIfaceOK bool
}

type negValue struct {
	neg bool
	v   string
}

func parseTraceRule(spec string) traceRule {
	r := traceRule{raw: spec}
	w := tokenize(spec)
	neg := false
	val := func(i int) *negValue {
		v := &negValue{neg: neg}
		if i+1 < len(w) {
			v.v = w[i+1]
		}
		neg = false
		return v
	}
	for i := 0; i < len(w); i++ {
		switch w[i] {
		case "!":
			neg = true
			continue
		case "-m":
			i++
		case "-s":
			r.src = val(i)
			i++
		case "-d":
			r.dst = val(i)
			i++
		case "--src-type":
			r.srcType = val(i)
			i++
		case "--dst-type":
			r.dstType = val(i)
			i++
		case "-p":
			r.proto = val(i)
			i++
		case "--dport":
			r.dport = val(i)
			i++
		case "-j":
			r.jump = w[i+1]
			i++
		case "--to-destination":
			r.dnatTo = w[i+1]
			i++
		case "--probability":
			r.probability = true
			i++
		case "--comment":
			r.comment, r.hasComment = w[i+1], true
			i++
		case "--rcheck", "--mark", "--ctstate":
			r.stateful = true
		}
		neg = false
	}
	return r
}

func addrMatches(t *testing.T, v *negValue, ip string) bool {
	a := netip.MustParseAddr(ip)
	var m bool
	if strings.Contains(v.v, "/") {
		p, err := netip.ParsePrefix(v.v)
		if err != nil {
			t.Fatalf("bad CIDR in rules: %q", v.v)
		}
		m = p.Contains(a)
	} else {
		b, err := netip.ParseAddr(v.v)
		if err != nil {
			t.Fatalf("bad IP in rules: %q", v.v)
		}
		m = a == b
	}
	return m != v.neg
}

func strMatches(v *negValue, s string) bool { return (v.v == s) != v.neg }

// tracer walks a packet through the fake's rules the way kube-proxy's test tracer does:
// nat PREROUTING (LOCAL = 127.0.0.1, ::1 and the node IPs; stateful matches never
// match; KUBE-MARK-MASQ marks and continues; DNAT/ACCEPT/DROP/REJECT are outcomes; a
// terminal outcome reached through a --probability rule does not stop the caller, so
// every endpoint is listed), then, with the destination rewritten to the first DNAT
// target, filter KUBE-SERVICES, KUBE-EXTERNAL-SERVICES, KUBE-NODEPORTS and
// KUBE-PROXY-FIREWALL.
type tracer struct {
	t        *testing.T
	ipt      *fakeIPT
	local    map[string]bool
	matches  []string
	outputs  []string
	markMasq bool
}

func (tr *tracer) ruleMatches(r traceRule, src, proto, dst, dport string) bool {
	if r.src != nil && !addrMatches(tr.t, r.src, src) {
		return false
	}
	if r.srcType != nil {
		typ := "not-matched"
		if tr.local[src] {
			typ = "LOCAL"
		}
		if !strMatches(r.srcType, typ) {
			return false
		}
	}
	if r.proto != nil && !strMatches(r.proto, proto) {
		return false
	}
	if r.dst != nil && !addrMatches(tr.t, r.dst, dst) {
		return false
	}
	if r.dstType != nil {
		typ := "not-matched"
		if tr.local[dst] {
			typ = "LOCAL"
		}
		if !strMatches(r.dstType, typ) {
			return false
		}
	}
	if r.dport != nil && !strMatches(r.dport, dport) {
		return false
	}
	return !r.stateful
}

func (tr *tracer) runChain(table, chain, src, proto, dst, dport string) bool {
	for _, spec := range tr.ipt.rules(table, chain) {
		r := parseTraceRule(spec)
		if r.jump == "" || !tr.ruleMatches(r, src, proto, dst, dport) {
			continue
		}
		tr.matches = append(tr.matches, "-A "+chain+" "+spec)
		switch r.jump {
		case ChainMarkMasq:
			tr.markMasq = true
		case ChainMarkDrop:
			// Before 1.25: the packet carries 0x8000 on, for kubelet's KUBE-FIREWALL
			// (in filter INPUT/OUTPUT) to drop; nat goes on.
			tr.outputs = append(tr.outputs, ChainMarkDrop)
		case "ACCEPT", "REJECT", "DROP":
			tr.outputs = append(tr.outputs, r.jump)
			return true
		case "DNAT":
			tr.outputs = append(tr.outputs, r.dnatTo)
			return true
		default:
			if tr.runChain(table, r.jump, src, proto, dst, dport) && !r.probability {
				return true
			}
		}
	}
	return false
}

func tracePacket(t *testing.T, ipt *fakeIPT, src, proto, dst string, dport int, nodeIPs []string) ([]string, string, bool) {
	tr := &tracer{t: t, ipt: ipt, local: map[string]bool{"127.0.0.1": true, "::1": true}}
	for _, ip := range nodeIPs {
		tr.local[ip] = true
	}
	port := fmt.Sprint(dport)
	tr.runChain(TableNAT, "PREROUTING", src, proto, dst, port)
	if len(tr.outputs) != 0 {
		if ap, err := netip.ParseAddrPort(tr.outputs[0]); err == nil {
			dst = ap.Addr().String()
		}
	}
	for _, c := range []string{ChainServices, ChainExternalServices, ChainNodePorts, ChainProxyFirewall} {
		tr.runChain(TableFilter, c, src, proto, dst, port)
	}
	return tr.matches, strings.Join(tr.outputs, ", "), tr.markMasq
}

// flow is kube-proxy's packetFlowTest.
type flow struct {
	name   string
	src    string
	proto  string // "" = tcp
	dst    string
	dport  int
	output string
	masq   bool
}

func runFlows(t *testing.T, ipt *fakeIPT, nodeIPs []string, flows []flow) {
	t.Helper()
	for _, f := range flows {
		t.Run(f.name, func(t *testing.T) {
			proto := f.proto
			if proto == "" {
				proto = "tcp"
			}
			matches, out, masq := tracePacket(t, ipt, f.src, proto, f.dst, f.dport, nodeIPs)
			if out != f.output || masq != f.masq {
				t.Errorf("%s packet %s -> %s:%d: got output %q masq %v, want %q masq %v\nmatched:\n%s",
					proto, f.src, f.dst, f.dport, out, masq, f.output, f.masq, strings.Join(matches, "\n"))
			}
		})
	}
}

func TestTokenize(t *testing.T) {
	got := tokenize(`-m comment --comment "ns1/svc1:p80 cluster IP" -j X --comment "a \"q\""`)
	want := []string{"-m", "comment", "--comment", "ns1/svc1:p80 cluster IP", "-j", "X", "--comment", `a "q"`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q", got)
	}
}
