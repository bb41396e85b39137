package scenario

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
)

// CraftedPacket is a send step's crafted packet (send.packet): a packet a stack would
// not send on its own, sent once through the datapath from the step's source to its
// destination (with src_port as the source port), or, with reply, from the other end
// of the step's existing connection. Expectations: result, reaches, decided_by (the rule
// that dropped it, e.g. {chain: KUBE-FORWARD, rule: "--ctstate INVALID"}) and ctstate
// (the conntrack state it got at nodes: {node-a: INVALID}).
type CraftedPacket struct {
	// TCPFlags are the segment's flags, comma-separated: SYN, ACK, FIN, RST, PSH, URG
	// (proto tcp, the default; ACK when empty).
	TCPFlags string `yaml:"tcp_flags,omitempty"`
	// Seq, Ack and Window are the segment's sequence and acknowledgement numbers and
	// window. Seq "next" (or "next+N", "next-N") is the next sequence number the
	// sending side of the connection is expected to send, as conntrack saw it.
	Seq    string `yaml:"seq,omitempty"`
	Ack    int    `yaml:"ack,omitempty"`
	Window int    `yaml:"window,omitempty"`
	// Reply sends the segment from the server's side of the existing connection from
	// src_port to the destination (its conntrack entry on any node: the reply tuple's
	// source, a pod), to the client.
	Reply bool `yaml:"reply,omitempty"`
	// ICMPType is the ICMP message (proto icmp): echo-request (the default), or an
	// error about the step's connection (fragmentation-needed, port-unreachable, TYPE/CODE
	// ...), sent by the server's side (reply: true) about the last segment it got.
	ICMPType string `yaml:"icmp_type,omitempty"`
	// Deliver hands the packet, where it arrives, to the receiving stack (a pod's, a
	// node's or an external host's), as a real packet would be, and reports what that
	// stack sends back to the source (expect answered_with): a RST for a connection it
	// does not know, an ACK for a segment outside its window, nothing. Its answers go on
	// through the datapath, and the stack's connections change as they would. Without
	// it the packet stops at the receiver's door, so a whole exchange can be crafted.
	Deliver bool `yaml:"deliver,omitempty"`
}

// tcpFlagNames are the tcp_flags names.
var tcpFlagNames = map[string]uint8{"SYN": netfilter.TCPSyn, "ACK": netfilter.TCPAck, "FIN": netfilter.TCPFin,
	"RST": netfilter.TCPRst, "PSH": netfilter.TCPPsh, "URG": netfilter.TCPUrg}

func parseTCPFlags(s string) (uint8, error) {
	if s == "" {
		return netfilter.TCPAck, nil
	}
	var f uint8
	for _, n := range strings.Split(s, ",") {
		b, ok := tcpFlagNames[strings.ToUpper(strings.TrimSpace(n))]
		if !ok {
			return 0, fmt.Errorf("unknown TCP flag %q: want SYN, ACK, FIN, RST, PSH or URG", n)
		}
		f |= b
	}
	return f, nil
}

// parseSeq parses seq: a number, or next[+-N] relative to next.
func parseSeq(s string, next func() (uint32, error)) (uint32, error) {
	if s == "" {
		s = "next"
	}
	if !strings.HasPrefix(s, "next") {
		var v uint32
		if _, err := fmt.Sscanf(s, "%d", &v); err != nil || fmt.Sprint(v) != s {
			return 0, fmt.Errorf("seq %q: want a number or next, next+N, next-N", s)
		}
		return v, nil
	}
	var off int64
	if rest := s[len("next"):]; rest != "" {
		if _, err := fmt.Sscanf(rest, "%d", &off); err != nil || (rest[0] != '+' && rest[0] != '-') {
			return 0, fmt.Errorf("seq %q: want a number or next, next+N, next-N", s)
		}
	}
	if next == nil {
		return 0, nil // validation only
	}
	n, err := next()
	if err != nil {
		return 0, err
	}
	return uint32(int64(n) + off), nil
}

var ctStateNames = []string{"NEW", "ESTABLISHED", "RELATED", "INVALID", "UNTRACKED"}

// crafted validates send.packet.
func (c *stepCheck) crafted(f string, t *Traffic) {
	pk := t.Packet
	f += ".packet"
	proto := strings.ToLower(t.Proto)
	switch {
	case c.st.Send == nil:
		c.fail(f, "only send steps send crafted packets")
	case t.AllBranches:
		c.fail(f, "a crafted packet is sent once: not with all_branches")
	case t.SrcPort == 0:
		c.fail(f, "a crafted packet needs the connection's src_port")
	}
	switch proto {
	case "", "tcp":
		if pk.ICMPType != "" {
			c.fail(f+".icmp_type", "icmp_type goes with proto: icmp")
		}
		if _, err := parseTCPFlags(pk.TCPFlags); err != nil {
			c.fail(f+".tcp_flags", "%v", err)
		}
		if _, err := parseSeq(pk.Seq, nil); err != nil {
			c.fail(f+".seq", "%v", err)
		}
		if pk.Ack < 0 || pk.Ack > 1<<32-1 {
			c.fail(f+".ack", "want 0-4294967295, got %d", pk.Ack)
		}
		if pk.Window < 0 || pk.Window > 65535 {
			c.fail(f+".window", "want 0-65535, got %d", pk.Window)
		}
	case "icmp":
		if pk.TCPFlags != "" || pk.Seq != "" || pk.Ack != 0 || pk.Window != 0 {
			c.fail(f, "tcp_flags, seq, ack and window are for TCP segments")
		}
		if _, _, _, err := emulator.ParseICMPType(icmpTypeOr(pk.ICMPType), false); err != nil {
			c.fail(f+".icmp_type", "%v", err)
		}
		if isEcho(pk.ICMPType) == pk.Reply {
			c.fail(f+".reply", "an echo request comes from the client; an ICMP error from the server's side (reply: true)")
		}
	default:
		c.fail("send.proto", "a crafted packet is tcp or icmp, got %q", t.Proto)
	}
}

func icmpTypeOr(s string) string {
	if s == "" {
		return "echo-request"
	}
	return s
}

func isEcho(s string) bool { s = icmpTypeOr(s); return s == "echo-request" || s == "ping" || s == "8" }

// ctStateExpect validates expect.ctstate: nodes of the cluster and known states.
func (c *stepCheck) ctStateExpect() {
	e := c.st.Expect
	if e == nil || e.CtState == nil {
		return
	}
	for _, n := range slices.Sorted(mapKeys(e.CtState)) {
		if !c.nodes[n] {
			c.fail("expect.ctstate."+n, "no node %q", n)
		}
		if !slices.Contains(ctStateNames, strings.ToUpper(e.CtState[n])) {
			c.fail("expect.ctstate."+n, "want one of %s, got %q", strings.Join(ctStateNames, ", "), e.CtState[n])
		}
	}
}

// craft sends a send step's crafted packet.
func (r *runner) craft(st *Step, tp *trafficPlan, tr *TrafficResult, res *StepResult) error {
	t := tp.t
	from, data, err := r.craftedBytes(tp)
	if err != nil {
		return err
	}
	inject := r.c.InjectCrafted
	if t.Packet.Deliver {
		inject = r.c.InjectAnswered
	}
	ir, err := inject(from, data)
	if err != nil {
		return err
	}
	if t.Trace {
		res.Trace = ir.Trace
	}
	tp.firstTrace = ir.Trace
	atts := []attempt{{result: ir.Result, pod: ir.Pod, node: ir.Node, seen: ir.SeenSrc.Addr(), reason: ir.Reason}}
	tr.From = from
	r.tally(tr, atts, tp.client)
	res.Traffic = tr
	var states []string
	for _, s := range ir.States {
		states = append(states, s.Node+" "+s.State.String())
	}
	res.Summary = trafficSummary(tr) + "; conntrack: " + strings.Join(states, ", ")
	answered := "nothing"
	if ir.Delivered {
		tr.Answers = []string{"nothing"}
		if len(ir.Answers) > 0 {
			tr.Answers = ir.Answers
			answered = answerOf(ir.Answers[0])
		}
		res.Details = append(res.Details, "the receiver answered: "+strings.Join(tr.Answers, "; "))
	}
	if st.Expect != nil {
		res.Expectations = r.checkTraffic(st.Expect, tr, atts, tp.client)
		if st.Expect.DecidedBy != nil {
			res.Expectations = append(res.Expectations, checkDecision(st.Expect.DecidedBy, ir.Trace))
		}
		for _, n := range slices.Sorted(mapKeys(st.Expect.CtState)) {
			got, ok := ir.StateAt(n)
			g := "no conntrack lookup"
			if ok {
				g = got.String()
			}
			want := strings.ToUpper(st.Expect.CtState[n])
			res.Expectations = append(res.Expectations, Expectation{Field: "ctstate." + n, Want: want, Got: g, OK: g == want})
		}
		if w := st.Expect.AnsweredWith; w != "" {
			want, _ := answerName(w)
			res.Expectations = append(res.Expectations, Expectation{Field: "answered_with", Want: want, Got: answered, OK: want == answered})
		}
	}
	return nil
}

// craftedBytes builds the step's crafted packet and the place it is sent from.
func (r *runner) craftedBytes(tp *trafficPlan) (string, []byte, error) {
	t, pk := tp.t, tp.t.Packet
	src := netip.AddrPortFrom(tp.client, uint16(t.SrcPort))
	conn, connErr := r.stepConn(tp, src)
	if strings.ToLower(t.Proto) == "icmp" {
		if !pk.Reply {
			return t.From, netsim.BuildICMPEcho(tp.client, tp.dst.Addr(), false, uint16(t.SrcPort), 1, nil), nil
		}
		if connErr != nil {
			return "", nil, connErr
		}
		typ, code, _, _ := emulator.ParseICMPType(pk.ICMPType, false)
		server, err := r.placeOf(conn.Reply.Src)
		if err != nil {
			return "", nil, err
		}
		// The last segment the server got: the client's, after the node's DNAT.
		quoted := netsim.BuildTCP(netsim.TCPSegment{Src: netip.AddrPortFrom(conn.Reply.Dst, conn.Reply.DstPort),
			Dst: netip.AddrPortFrom(conn.Reply.Src, conn.Reply.SrcPort), Flags: netfilter.TCPAck, Seq: conn.NextSeq(false), WindowScale: -1})
		return server, netsim.BuildICMPError(conn.Reply.Src, quoted, typ, code), nil
	}
	flags, err := parseTCPFlags(pk.TCPFlags)
	if err != nil {
		return "", nil, err
	}
	seq, err := parseSeq(pk.Seq, func() (uint32, error) { return conn.NextSeq(pk.Reply), connErr })
	if err != nil {
		return "", nil, err
	}
	if !pk.Reply {
		return t.From, netsim.BuildTCP(netsim.TCPSegment{Src: src, Dst: tp.dst, Flags: flags, Seq: seq, Ack: uint32(pk.Ack), Window: uint16(pk.Window), WindowScale: -1}), nil
	}
	if connErr != nil {
		return "", nil, connErr
	}
	seg, err := netsim.ConnSegment(conn, true, flags, seq, uint32(pk.Ack), uint16(pk.Window))
	if err != nil {
		return "", nil, err
	}
	server, err := r.placeOf(conn.Reply.Src)
	if err != nil {
		return "", nil, err
	}
	return server, netsim.BuildTCP(seg), nil
}

// stepConn is the conntrack entry of the step's connection (client src to the
// destination, TCP) on the first node that has one.
func (r *runner) stepConn(tp *trafficPlan, src netip.AddrPort) (netsim.Conn, error) {
	for _, n := range r.c.Nodes() {
		cs := n.Conntrack().List(netsim.CtFilter{Proto: netfilter.ProtoTCP, OrigSrc: src.Addr(), OrigSrcPort: src.Port(),
			OrigDst: tp.dst.Addr(), OrigDstPort: tp.dst.Port()})
		if len(cs) > 0 {
			return cs[0], nil
		}
	}
	return netsim.Conn{}, fmt.Errorf("no conntrack entry of a TCP connection %s -> %s on any node: connect with src_port first", src, tp.dst)
}

// placeOf is the pod that has addr, as a place (pod:NS/NAME).
func (r *runner) placeOf(addr netip.Addr) (string, error) {
	for _, p := range r.c.Pods() {
		if slices.Contains(p.IPs(), addr) {
			return "pod:" + p.Namespace() + "/" + p.Name(), nil
		}
	}
	return "", fmt.Errorf("no pod has %s (the connection's server side)", addr)
}

// answerFlags are the TCP flags of answered_with, in the order answerName writes them.
var answerFlags = []struct {
	name   string
	letter byte // as netsim.TCPFlagString writes it
}{{"SYN", 'S'}, {"FIN", 'F'}, {"RST", 'R'}, {"PSH", 'P'}, {"ACK", '.'}}

// answerName canonicalises an answered_with value: nothing, ICMP, or TCP flags joined
// by commas in a fixed order.
func answerName(s string) (string, error) {
	switch u := strings.ToUpper(strings.TrimSpace(s)); u {
	case "NOTHING":
		return "nothing", nil
	case "ICMP":
		return "ICMP", nil
	}
	set := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.ToUpper(strings.TrimSpace(f))
		ok := false
		for _, af := range answerFlags {
			ok = ok || af.name == f
		}
		if !ok {
			return "", fmt.Errorf("want nothing, ICMP or TCP flags (RST, ACK, \"RST,ACK\", SYN, FIN, PSH), got %q", s)
		}
		set[f] = true
	}
	var out []string
	for _, af := range answerFlags {
		if set[af.name] {
			out = append(out, af.name)
		}
	}
	return strings.Join(out, ","), nil
}

// answerOf names an answer packet (as netsim.Packet.String renders it) as answered_with
// does.
func answerOf(pk string) string {
	if strings.HasPrefix(pk, "icmp") {
		return "ICMP"
	}
	i, j := strings.LastIndexByte(pk, '['), strings.LastIndexByte(pk, ']')
	if !strings.HasPrefix(pk, "tcp ") || i < 0 || j < i {
		return pk
	}
	var out []string
	for _, af := range answerFlags {
		if strings.IndexByte(pk[i+1:j], af.letter) >= 0 {
			out = append(out, af.name)
		}
	}
	return strings.Join(out, ",")
}
