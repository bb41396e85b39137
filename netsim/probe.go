package netsim

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// ProbeMode says how much of an exchange a probe plays.
type ProbeMode uint8

// Probe modes.
const (
	// ProbePacket sends one packet (a TCP SYN, a UDP datagram, an ICMP echo request) and
	// reports where it ends.
	ProbePacket ProbeMode = iota
	// ProbeConnect plays a whole exchange: a TCP handshake (SYN, SYN-ACK, ACK), or a UDP
	// request and its reply, as the endpoints' kernels would answer (a listening socket
	// answers; a closed port answers RST or ICMP port unreachable).
	ProbeConnect
)

// Probe describes a synthetic packet or exchange injected into the datapath. Probes run
// the same datapath code as real traffic, synchronously and without apps, so their
// outcome is a pure function of the seed, the cluster's state and the probe.
type Probe struct {
	// From is where the probe starts: "pod:NAMESPACE/NAME", "node:NAME" (the node's host
	// network) or "external:NAME" (an external host).
	From    string
	Proto   uint8
	Dst     netip.AddrPort
	SrcPort uint16     // 0: an ephemeral port chosen from the seed
	Src     netip.Addr // zero: the source's primary address of the destination's family
	Mode    ProbeMode
	// AllBranches follows every outcome of every choice point (iptables statistic
	// matches, IPVS random choices) and reports each distinct outcome with its
	// probability. It implies a dry run: no state changes. Only with ProbePacket.
	AllBranches bool
	// Trace records every step.
	Trace bool
	// Payload of the packet (UDP datagram, TCP data in connect mode is not sent).
	Payload []byte
	// Timeout is how long the client waits, in virtual time spent on links (their
	// configured latency and jitter): for the packet to arrive (ProbePacket), or for the
	// reply or refusal to come back. Past it the outcome is ResultTimedOut. Zero means
	// DefaultProbeTimeout; a negative Timeout waits for ever.
	Timeout time.Duration
}

// DefaultProbeTimeout is a probe's default Timeout: 1 s, the kernel's initial
// retransmission timeout (TCP_TIMEOUT_INIT, RFC 6298), after which a client's first SYN
// is sent again, i.e. a handshake not answered within it did not complete at the first
// try.
const DefaultProbeTimeout = time.Second

// Result kinds of a probe outcome.
const (
	ResultDelivered = "delivered" // the packet reached a socket's host (pod, node, external host)
	ResultConnected = "connected" // a TCP handshake completed (connect mode)
	ResultReplied   = "replied"   // a UDP request got its reply back (connect mode)
	ResultRefused   = "refused"   // a RST or ICMP unreachable came back
	ResultDropped   = "dropped"   // the packet (or the reply) vanished: the client would time out
	ResultStolen    = "stolen"    // a handler took the packet
	ResultTimedOut  = "timed out" // the packet or its answer took longer than the probe's Timeout on the links
)

// Outcome is where a probe ended.
type Outcome struct {
	Result string `json:"result"`
	// Where the packet was delivered (or dropped): the pod "namespace/name", the node, or
	// the external host.
	Pod      string `json:"pod,omitempty"`
	Node     string `json:"node,omitempty"`
	External string `json:"external,omitempty"`
	// Addr is the destination as it arrived (after NAT); SeenSrc the source the receiver saw.
	Addr    netip.AddrPort `json:"addr,omitzero"`
	SeenSrc netip.AddrPort `json:"seen_src,omitzero"`
	// Listening says whether a socket listens where the packet arrived.
	Listening bool `json:"listening"`
	// ReplyFrom is the source of the reply the client got (connect mode, refusals).
	ReplyFrom netip.AddrPort `json:"reply_from,omitzero"`
	// Reason explains drops and refusals.
	Reason string `json:"reason,omitempty"`
	// Delay is the virtual time the exchange spent on links (their latency and jitter)
	// until the outcome reached the client: the packet's way (ProbePacket), or its way
	// and the answer's.
	Delay time.Duration `json:"delay,omitzero"`
}

// String renders the outcome in one line.
func (o Outcome) String() string {
	var b strings.Builder
	b.WriteString(o.Result)
	switch {
	case o.Pod != "":
		fmt.Fprintf(&b, " pod %s", o.Pod)
	case o.External != "":
		fmt.Fprintf(&b, " external %s", o.External)
	case o.Node != "" && o.Result != ResultDropped:
		fmt.Fprintf(&b, " node %s", o.Node)
	}
	if o.Addr.IsValid() {
		fmt.Fprintf(&b, " at %s", o.Addr)
	}
	if o.SeenSrc.IsValid() {
		fmt.Fprintf(&b, " from %s", o.SeenSrc)
	}
	if o.ReplyFrom.IsValid() {
		fmt.Fprintf(&b, " reply from %s", o.ReplyFrom)
	}
	if o.Reason != "" {
		fmt.Fprintf(&b, " (%s", o.Reason)
		if o.Result == ResultDropped && o.Node != "" {
			fmt.Fprintf(&b, " at %s", o.Node)
		}
		b.WriteString(")")
	}
	return b.String()
}

// ProbeResult is one outcome of a probe, with its probability (1 unless exploring all
// branches) and its trace.
type ProbeResult struct {
	Outcome
	Probability float64 `json:"probability"`
	Trace       *Trace  `json:"trace,omitempty"`
}

// place is a location in the simulation where a packet can start or end.
type place struct {
	pod  *Pod
	node *Node // host network (hostNetwork pods included)
	ext  *ExternalHost
}

func (p place) same(q place) bool { return p.pod == q.pod && p.node == q.node && p.ext == q.ext }

func (p place) net() *Net {
	switch {
	case p.pod != nil:
		return p.pod.netIfStarted() // nil: no stack yet, so nothing listens
	case p.node != nil:
		return p.node.hostNet
	case p.ext != nil:
		return p.ext.net
	}
	return nil
}

func (p place) addrs() []netip.Addr {
	switch {
	case p.pod != nil:
		return p.pod.ips
	case p.node != nil:
		return p.node.ips
	case p.ext != nil:
		return p.ext.ips
	}
	return nil
}

func (c *Network) parsePlace(s string) (place, error) {
	kind, name, ok := strings.Cut(s, ":")
	if !ok {
		return place{}, fmt.Errorf("probe source %q: want pod:NAMESPACE/NAME, node:NAME or external:NAME", s)
	}
	switch kind {
	case "pod":
		// The spec's NAMESPACE/NAME is the pod's key as it stands: no key is built
		// from the parts again.
		ns, pn, ok := strings.Cut(name, "/")
		key := name
		if !ok {
			ns, pn, key = "default", name, "default/"+name
		}
		p := c.podByKey(key)
		if p == nil {
			return place{}, fmt.Errorf("probe source %q: no running pod %s/%s", s, ns, pn)
		}
		if p.hostNetwork {
			return place{node: p.node}, nil
		}
		return place{pod: p}, nil
	case "node":
		n := c.Node(name)
		if n == nil {
			return place{}, fmt.Errorf("probe source %q: no node %q", s, name)
		}
		return place{node: n}, nil
	case "external":
		h := c.ExternalHost(name)
		if h == nil {
			return place{}, fmt.Errorf("probe source %q: no external host %q", s, name)
		}
		return place{ext: h}, nil
	}
	return place{}, fmt.Errorf("probe source %q: unknown kind %q (want pod, node or external)", s, kind)
}

// Probe runs a probe and returns its outcomes: one, or with AllBranches every distinct
// outcome with its probability (most likely first).
func (c *Network) Probe(p Probe) ([]ProbeResult, error) {
	from, err := c.parsePlace(p.From)
	if err != nil {
		return nil, err
	}
	if !p.Dst.IsValid() {
		return nil, errors.New("probe: no destination")
	}
	switch p.Proto {
	case netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoSCTP, netfilter.ProtoICMP, netfilter.ProtoICMPv6:
	default:
		return nil, fmt.Errorf("probe: unsupported protocol %d", p.Proto)
	}
	src := p.Src
	if !src.IsValid() && p.Dst.Addr().IsLoopback() {
		src = p.Dst.Addr() // a socket connecting to loopback gets a loopback source
		if src.Is4() {
			src = netip.MustParseAddr("127.0.0.1")
		}
	}
	if !src.IsValid() {
		for _, a := range from.addrs() {
			if a.Is4() == p.Dst.Addr().Is4() {
				src = a
				break
			}
		}
		if !src.IsValid() {
			return nil, fmt.Errorf("probe: %s has no address of %s's family", p.From, p.Dst.Addr())
		}
	}
	sport := p.SrcPort
	if sport == 0 {
		c.mu.Lock()
		sport = uint16(32768 + c.rng.IntN(60999-32768+1))
		c.mu.Unlock()
	}
	c.probeMu.Lock()
	defer c.probeMu.Unlock()
	if !p.AllBranches {
		env := &penv{}
		if p.Trace {
			env.trace = &Trace{}
		}
		r := c.runProbe(p, from, src, sport, env, nil)
		r.Trace = env.trace
		r.Probability = 1
		return []ProbeResult{r}, nil
	}
	if p.Mode != ProbePacket {
		return nil, errors.New("probe: AllBranches explores single packets (mode packet)")
	}
	var results []ProbeResult
	var forced []int
	for i := 0; i < 100000; i++ {
		ch := &pathChooser{forced: forced, prob: 1}
		env := &penv{ch: ch, dry: true}
		if p.Trace {
			env.trace = &Trace{}
		}
		r := c.runProbe(p, from, src, sport, env, ch)
		r.Probability = ch.prob
		r.Trace = env.trace
		merged := false
		for j := range results {
			if results[j].Outcome == r.Outcome {
				results[j].Probability += r.Probability
				merged = true
				break
			}
		}
		if !merged {
			results = append(results, r)
		}
		next, more := nextPath(ch.taken)
		if !more {
			break
		}
		forced = next
	}
	sort.SliceStable(results, func(i, j int) bool { return results[i].Probability > results[j].Probability })
	return results, nil
}

// ProbeOne runs a probe that is expected to have one outcome and returns it.
func (c *Network) ProbeOne(p Probe) (ProbeResult, error) {
	p.AllBranches = false
	rs, err := c.Probe(p)
	if err != nil {
		return ProbeResult{}, err
	}
	return rs[0], nil
}

// runProbe plays one probe along one path.
func (c *Network) runProbe(p Probe, from place, src netip.Addr, sport uint16, env *penv, ch chooser) ProbeResult {
	r := c.runProbeWalks(p, from, src, sport, env, ch)
	if env.delay == nil || *env.delay == 0 {
		return r
	}
	switch r.Result {
	case ResultDropped, ResultStolen:
		return r
	}
	r.Delay = *env.delay
	timeout := p.Timeout
	if timeout == 0 {
		timeout = DefaultProbeTimeout
	}
	if timeout > 0 && r.Delay > timeout {
		what := "the answer"
		if p.Mode == ProbePacket && r.Result == ResultDelivered {
			what = "the packet"
		}
		r.Reason = fmt.Sprintf("%s took %s on the links, past the probe's timeout of %s (was: %s)", what, r.Delay, timeout, r.Result)
		r.Result = ResultTimedOut
	}
	return r
}

// runProbeWalks plays the packets of one probe along one path; the delay on links adds
// up in env.delay until the outcome is known at the client.
func (c *Network) runProbeWalks(p Probe, from place, src netip.Addr, sport uint16, env *penv, ch chooser) ProbeResult {
	pp := c.probePk
	if pp == nil {
		pp = new(probePacket)
	} else {
		c.probePk = nil
		*pp = probePacket{}
	}
	if env.delay == nil {
		env.delay = &pp.delay
	}
	if env.t.IsZero() {
		// A probe happens at one instant of the virtual clock (its links' delays add up
		// in env.delay, not on the clock): read it once, not at each node it enters.
		env.t = c.clock.Now()
	}
	nodeEnv := nodeEnvs{base: env, nodeCh: ch == nil}
	var data []byte
	dst := p.Dst
	srcAP := netip.AddrPortFrom(src, sport)
	var isn uint32
	switch p.Proto {
	case netfilter.ProtoTCP:
		c.mu.Lock()
		isn = c.rng.Uint32()
		c.mu.Unlock()
		data = buildTCP(pp.buf[:0], TCPSegment{Src: srcAP, Dst: dst, Flags: netfilter.TCPSyn, Seq: isn, MSS: uint16(c.cfg.MTU - 40), WindowScale: 7, SACKPermitted: true})
	case netfilter.ProtoUDP:
		data = buildUDP(pp.buf[:0], srcAP, dst, p.Payload)
	case netfilter.ProtoSCTP:
		data = BuildSCTPInit(srcAP, dst)
	case netfilter.ProtoICMP, netfilter.ProtoICMPv6:
		data = BuildICMPEcho(src, dst.Addr(), false, sport, 1, p.Payload)
	}
	pk := &pp.pk // ParsePacket(data), in pp
	if err := pk.parse(data); err != nil {
		return ProbeResult{Outcome: Outcome{Result: ResultDropped, Reason: "bad probe packet: " + err.Error()}}
	}
	end := c.walk(from, pk, env, nodeEnv)
	if end.kind != endStolen {
		// The next probe may have pp once this one is over: nothing keeps a probe's
		// packet past its walk (handlers and middleboxes must not) except a handler
		// that stole it. The caller reads env.delay, in pp, before the next probe.
		c.probePk = pp
	}
	out := end.outcome(p.Proto, pk)
	if p.Mode == ProbePacket || end.kind != endDelivered && end.kind != endRefused {
		if end.kind == endRefused && end.reply != nil {
			return c.followBack(from, end, env, nodeEnv, out)
		}
		return ProbeResult{Outcome: out}
	}
	if end.kind == endRefused {
		return c.followBack(from, end, env, nodeEnv, out)
	}
	// Connect mode: the receiver answers as its kernel would.
	recvNet := end.at.net()
	listening := recvNet != nil && recvNet.Listening(p.Proto, end.pk.DstPort)
	var reply []byte
	rsrc := netip.AddrPortFrom(end.pk.Dst, end.pk.DstPort)
	rdst := netip.AddrPortFrom(end.pk.Src, end.pk.SrcPort)
	switch {
	case p.Proto == netfilter.ProtoTCP && listening:
		reply = BuildTCP(TCPSegment{Src: rsrc, Dst: rdst, Flags: netfilter.TCPSyn | netfilter.TCPAck, Seq: isn ^ 0x5a5a5a5a, Ack: isn + 1, MSS: uint16(c.cfg.MTU - 40), WindowScale: 7, SACKPermitted: true})
	case p.Proto == netfilter.ProtoTCP:
		reply = BuildTCP(TCPSegment{Src: rsrc, Dst: rdst, Flags: netfilter.TCPRst | netfilter.TCPAck, Ack: isn + 1, WindowScale: -1})
	case p.Proto == netfilter.ProtoUDP && listening:
		reply = BuildUDP(rsrc, rdst, []byte("reply"))
	case p.Proto == netfilter.ProtoUDP:
		reply = BuildICMPError(rsrc.Addr(), end.pk.Data, 3, 3)
	case p.Proto == netfilter.ProtoICMP || p.Proto == netfilter.ProtoICMPv6:
		reply = BuildICMPEcho(rsrc.Addr(), rdst.Addr(), true, end.pk.SrcPort, 1, nil)
	default:
		return ProbeResult{Outcome: out}
	}
	rpk, err := ParsePacket(reply)
	if err != nil {
		return ProbeResult{Outcome: out}
	}
	back := c.walk(end.at, rpk, env, nodeEnv)
	if back.kind != endDelivered || !back.at.same(from) {
		out.Result = ResultDropped
		out.Reason = "the reply did not come back: " + back.describe()
		return ProbeResult{Outcome: out}
	}
	out.ReplyFrom = netip.AddrPortFrom(back.pk.Src, back.pk.SrcPort)
	switch {
	case p.Proto == netfilter.ProtoTCP && !listening, p.Proto == netfilter.ProtoUDP && !listening:
		out.Result = ResultRefused
		out.Reason = "nothing listens on " + ProtoName(p.Proto) + fmt.Sprintf("/%d", end.pk.DstPort)
		return ProbeResult{Outcome: out}
	case back.pk.Src != dst.Addr() || p.Proto != netfilter.ProtoICMP && p.Proto != netfilter.ProtoICMPv6 && back.pk.SrcPort != dst.Port():
		// The client's stack sees a reply from an address it did not talk to. A TCP
		// client answers such a SYN-ACK with a RST (no socket matches it) while its own
		// connect goes on waiting for the SYN-ACK it expects, and times out.
		if p.Proto == netfilter.ProtoTCP {
			out.Result = ResultDropped
			out.Reason = fmt.Sprintf("SYN-ACK came from %s, not %s: the client resets it and its connection times out", out.ReplyFrom, dst)
		} else {
			out.Result = ResultDropped
			out.Reason = fmt.Sprintf("reply came from %s, not %s: the client drops it", out.ReplyFrom, dst)
		}
		return ProbeResult{Outcome: out}
	}
	if p.Proto != netfilter.ProtoTCP {
		out.Result = ResultReplied
		return ProbeResult{Outcome: out}
	}
	// The final ACK: the client's connect has returned; its way does not count.
	waited := *env.delay
	defer func() { *env.delay = waited }()
	ack := BuildTCP(TCPSegment{Src: srcAP, Dst: dst, Flags: netfilter.TCPAck, Seq: isn + 1, Ack: (isn ^ 0x5a5a5a5a) + 1, WindowScale: -1})
	apk, _ := ParsePacket(ack)
	fin := c.walk(from, apk, env, nodeEnv)
	if fin.kind != endDelivered || !fin.at.same(end.at) {
		out.Result = ResultDropped
		out.Reason = "the handshake's ACK did not arrive: " + fin.describe()
		return ProbeResult{Outcome: out}
	}
	out.Result = ResultConnected
	// Abort the connection as a port scanner would, so it does not linger as ESTABLISHED
	// in conntrack (and in IPVS's connection table): conntrack moves it to CLOSE.
	rst := BuildTCP(TCPSegment{Src: srcAP, Dst: dst, Flags: netfilter.TCPRst, Seq: isn + 1, WindowScale: -1})
	if rpk, err := ParsePacket(rst); err == nil {
		c.walk(from, rpk, &penv{dry: env.dry, ch: env.ch}, nodeEnv)
	}
	return ProbeResult{Outcome: out}
}

// probePacket is a probe's first packet, its bytes when they fit, and the probe's delay
// counter (penv.delay): one allocation instead of three, and one a Network reuses from
// probe to probe (Network.probePk).
type probePacket struct {
	pk    Packet
	buf   [64]byte // an IPv4 TCP SYN with the probe's options is 52 bytes
	delay time.Duration
}

// nodeEnvs makes the environment a probe's packet has at each node it enters: a copy
// of the probe's environment as it is then (its virtual time the probe's, read once),
// with the node's seeded chooser unless the probe resolves choices itself (nodeCh
// false: AllBranches). The copy is the caller's variable, not a heap object: a probe
// made two such allocations (one per node) when this was a closure returning a
// pointer.
type nodeEnvs struct {
	base   *penv
	nodeCh bool
}

// at fills e with the environment of a packet entering n.
func (m nodeEnvs) at(n *Node, e *penv) {
	*e = *m.base
	if m.nodeCh {
		e.ch = randChooser{n.rng}
	}
}

// followBack carries a refusal (RST, ICMP error) the network generated back toward the
// probe's source.
func (c *Network) followBack(from place, end walkEnd, env *penv, nodeEnv nodeEnvs, out Outcome) ProbeResult {
	var e penv
	nodeEnv.at(end.node, &e)
	eg := end.node.output(end.reply, &e)
	back := c.follow(end.node, eg, &e, nodeEnv)
	if back.kind != endDelivered || !back.at.same(from) {
		out.Result = ResultDropped
		out.Reason += "; the refusal did not come back: " + back.describe()
		return ProbeResult{Outcome: out}
	}
	out.ReplyFrom = netip.AddrPortFrom(back.pk.Src, back.pk.SrcPort)
	if back.pk.IsICMPError() {
		out.ReplyFrom = netip.AddrPortFrom(back.pk.Src, 0)
	}
	return ProbeResult{Outcome: out}
}

type endKind uint8

const (
	endDelivered endKind = iota
	endRefused
	endDropped
	endStolen
)

// walkEnd is where a walked packet ended.
type walkEnd struct {
	kind   endKind
	at     place
	pk     *Packet
	node   *Node // the node that dropped or refused it
	reason string
	reply  *Packet // a refusal to send back (from node)
}

func (w walkEnd) describe() string {
	switch w.kind {
	case endDelivered:
		switch {
		case w.at.pod != nil:
			return "delivered to pod " + w.at.pod.key()
		case w.at.node != nil:
			return "delivered to node " + w.at.node.name
		case w.at.ext != nil:
			return "delivered to external host " + w.at.ext.name
		}
	case endRefused:
		return "refused: " + w.reason
	case endStolen:
		return "stolen"
	}
	s := "dropped: " + w.reason
	if w.node != nil {
		s += " at " + w.node.name
	}
	return s
}

func (w walkEnd) outcome(proto uint8, orig *Packet) Outcome {
	var o Outcome
	switch w.kind {
	case endDelivered:
		o.Result = ResultDelivered
		switch {
		case w.at.pod != nil:
			o.Pod, o.Node = w.at.pod.key(), w.at.pod.node.name
		case w.at.node != nil:
			o.Node = w.at.node.name
		case w.at.ext != nil:
			o.External = w.at.ext.name
		}
		o.Addr = netip.AddrPortFrom(w.pk.Dst, w.pk.DstPort)
		o.SeenSrc = netip.AddrPortFrom(w.pk.Src, w.pk.SrcPort)
		if proto == netfilter.ProtoICMP || proto == netfilter.ProtoICMPv6 {
			o.Addr = netip.AddrPortFrom(w.pk.Dst, 0)
			o.SeenSrc = netip.AddrPortFrom(w.pk.Src, 0)
		}
		if n := w.at.net(); n != nil {
			o.Listening = n.Listening(proto, w.pk.DstPort)
		}
	case endRefused:
		o.Result = ResultRefused
		o.Reason = w.reason
		if w.node != nil {
			o.Node = w.node.name
		}
	case endStolen:
		o.Result = ResultStolen
	default:
		o.Result = ResultDropped
		o.Reason = w.reason
		if w.node != nil {
			o.Node = w.node.name
		}
	}
	return o
}

// walk carries a packet from a place until it is delivered somewhere or ends.
func (c *Network) walk(from place, pk *Packet, env *penv, nodeEnv nodeEnvs) walkEnd {
	switch {
	case from.pod != nil:
		pod := from.pod
		for _, a := range pod.ips {
			if a == pk.Dst {
				if env.trace != nil {
					env.step(TraceStep{Kind: StepEnd, Verdict: "LOCAL", Detail: "delivered inside pod " + pod.key() + " (its own address)"})
				}
				return walkEnd{kind: endDelivered, at: from, pk: pk}
			}
		}
		if pk.Dst.IsLoopback() {
			return walkEnd{kind: endDelivered, at: from, pk: pk}
		}
		if pod.dead.Load() {
			return walkEnd{kind: endDropped, pk: pk, reason: "pod " + pod.key() + " is dead"}
		}
		n := pod.node
		if env.trace != nil {
			env.step(TraceStep{Kind: StepLink, Node: n.name, Detail: fmt.Sprintf("pod %s eth0 -> %s port %s", pod.key(), n.bridge.Name, pod.port.name), Packet: pk.String()})
		}
		if pod.port.link.probeLost(env) {
			return walkEnd{kind: endDropped, pk: pk, node: n, reason: "lost on link " + pod.port.link.name}
		}
		if n.down.Load() {
			return walkEnd{kind: endDropped, pk: pk, node: n, reason: "node " + n.name + " is down"}
		}
		var e penv
		nodeEnv.at(n, &e)
		return c.follow(n, n.ingress(pk, n.bridge, pod.port, &e), &e, nodeEnv)
	case from.node != nil:
		n := from.node
		if n.down.Load() {
			return walkEnd{kind: endDropped, pk: pk, node: n, reason: "node " + n.name + " is down"}
		}
		var e penv
		nodeEnv.at(n, &e)
		return c.follow(n, n.output(pk, &e), &e, nodeEnv)
	case from.ext != nil:
		if from.ext.link.probeLost(env) {
			return walkEnd{kind: endDropped, pk: pk, reason: "lost on link " + from.ext.link.name}
		}
		return c.fromFabric(pk, "external", env, nodeEnv)
	}
	return walkEnd{kind: endDropped, pk: pk, reason: "no source"}
}

// fromFabric routes a packet through the cluster network.
func (c *Network) fromFabric(pk *Packet, fromName string, env *penv, nodeEnv nodeEnvs) walkEnd {
	if fromName != "external" {
		var before string
		if env.trace != nil { // the packet's text costs six allocations: only for traces
			before = pk.String()
		}
		if c.fabric.nat.Load() != nil {
			if nat, ok := c.fabric.fabricNAT(pk); ok && env.trace != nil {
				env.step(TraceStep{Kind: StepLink, Detail: nat.String() + ": " + before + " => " + pk.String()})
			}
		}
	}
	pk.resetMeta()
	d := c.fabric.lookup(pk.Dst)
	if env.trace != nil {
		env.step(TraceStep{Kind: StepLink, Detail: "cluster network: " + pk.Dst.String() + " -> " + d.String(), Packet: pk.String()})
	}
	switch {
	case d.kind == hopNone:
		return walkEnd{kind: endDropped, pk: pk, reason: "no route to " + pk.Dst.String() + " in the cluster network"}
	case c.fabric.partitioned(fromName, d.name()):
		if env.trace != nil {
			env.step(TraceStep{Kind: StepFault, Detail: "partition between " + fromName + " and " + d.name()})
		}
		return walkEnd{kind: endDropped, pk: pk, reason: "network partition between " + fromName + " and " + d.name()}
	}
	switch d.kind {
	case hopNode:
		if d.node.down.Load() {
			return walkEnd{kind: endDropped, pk: pk, node: d.node, reason: "node " + d.node.name + " is down"}
		}
		var e penv
		nodeEnv.at(d.node, &e)
		return c.follow(d.node, d.node.ingress(pk, d.node.uplink, nil, &e), &e, nodeEnv)
	case hopExternal:
		if env.trace != nil {
			env.step(TraceStep{Kind: StepEnd, Verdict: "DELIVERED", Detail: "external host " + d.host.name, Packet: pk.String()})
		}
		return walkEnd{kind: endDelivered, at: place{ext: d.host}, pk: pk}
	case hopMiddlebox:
		return c.middleboxProbe(d.mb.m, pk, env, nodeEnv)
	}
	return walkEnd{kind: endDropped, pk: pk, reason: "unroutable"}
}

// follow continues from a node's egress decision.
func (c *Network) follow(n *Node, eg egress, env *penv, nodeEnv nodeEnvs) walkEnd {
	for hops := 0; hops < 64; hops++ {
		switch eg.kind {
		case egDrop:
			if eg.reject && len(eg.replies) > 0 {
				return walkEnd{kind: endRefused, pk: eg.pk, node: n, reason: eg.reason, reply: eg.replies[0]}
			}
			return walkEnd{kind: endDropped, pk: eg.pk, node: n, reason: eg.reason}
		case egStolen:
			return walkEnd{kind: endStolen, pk: eg.pk, node: n}
		case egLocal:
			return walkEnd{kind: endDelivered, at: place{node: n}, pk: eg.pk}
		case egPod:
			pod := eg.port.pod
			if eg.port.link.probeLost(env) {
				return walkEnd{kind: endDropped, pk: eg.pk, node: n, reason: "lost on link " + eg.port.link.name}
			}
			if env.trace != nil {
				env.step(TraceStep{Kind: StepEnd, Node: n.name, Verdict: "DELIVERED", Detail: "pod " + pod.key() + " via " + eg.port.name, Packet: eg.pk.String()})
			}
			if pod.dead.Load() {
				return walkEnd{kind: endDropped, pk: eg.pk, node: n, reason: "pod " + pod.key() + " is dead"}
			}
			return walkEnd{kind: endDelivered, at: place{pod: pod}, pk: eg.pk}
		case egLoopback:
			eg = n.ingress(eg.pk, n.lo, nil, env)
			continue
		case egUplink:
			if n.uplinkLink.probeLost(env) {
				return walkEnd{kind: endDropped, pk: eg.pk, node: n, reason: "lost on link " + n.uplinkLink.name}
			}
			return c.fromFabric(eg.pk, n.name, env, nodeEnv)
		}
	}
	return walkEnd{kind: endDropped, pk: eg.pk, node: n, reason: "routing loop"}
}

// Inject sends a raw IP packet from a place (see Probe.From) through the datapath, as
// if the place's stack had sent it, and reports where it ends. Tests use it for packets
// a stack would not send (out-of-window segments, spoofed sources).
func (c *Network) Inject(from string, data []byte, trace bool) (ProbeResult, error) {
	r, _, err := c.inject(from, data, trace)
	return r, err
}

// inject is Inject, also returning where the packet's walk ended.
func (c *Network) inject(from string, data []byte, trace bool) (ProbeResult, walkEnd, error) {
	pl, err := c.parsePlace(from)
	if err != nil {
		return ProbeResult{}, walkEnd{}, err
	}
	pk, err := ParsePacket(append([]byte(nil), data...))
	if err != nil {
		return ProbeResult{}, walkEnd{}, fmt.Errorf("inject: %w", err)
	}
	c.probeMu.Lock()
	defer c.probeMu.Unlock()
	env := &penv{}
	if trace {
		env.trace = &Trace{}
	}
	nodeEnv := nodeEnvs{base: env, nodeCh: true}
	end := c.walk(pl, pk, env, nodeEnv)
	out := end.outcome(pk.Proto, pk)
	if end.kind == endRefused && end.reply != nil {
		r := c.followBack(pl, end, env, nodeEnv, out)
		r.Probability, r.Trace = 1, env.trace
		return r, end, nil
	}
	return ProbeResult{Outcome: out, Probability: 1, Trace: env.trace}, end, nil
}
