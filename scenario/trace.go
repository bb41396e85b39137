package scenario

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"strings"
	"sync"

	"github.com/clusterlab/clusterlab/netsim"
)

// TraceOptions say which packet to trace in a scenario's cluster.
type TraceOptions struct {
	// From is pod:NS/NAME, node:NAME or external:NAME.
	From string
	// To is a destination as a connect step's To: IP:PORT, NAME:PORT (resolved by the
	// pod's resolver), service:NS/NAME:PORT, nodeport:NS/NAME[:PORT]@NODE, ...; a name or
	// address without a port takes Port.
	To string
	// Port is the destination port when To has none (default 80).
	Port int
	// Proto is tcp (default), udp or sctp.
	Proto string
	// SrcPort fixes the source port (0: one from the seed).
	SrcPort int
	// AllBranches follows every random choice and reports every outcome with its
	// probability.
	AllBranches bool
	// AfterStep runs the scenario's first AfterStep steps before the packet is traced
	// (0: right after the manifests are applied).
	AfterStep int
	// Mode overrides the scenario's kube-proxy mode.
	Mode string
	// Reply also traces the answer: after the packet (one drawn path, which leaves its
	// conntrack entries, also with AllBranches), the receiver sends a packet back from
	// the address and port it was delivered to, to the source it saw, and that packet is
	// traced the same way (the un-DNAT of a Service's reply shows where it happens). For
	// TCP the answer carries a probe's SYN flag, not a SYN-ACK: conntrack finds the
	// connection's entry by its tuple either way.
	Reply bool
	// Pcap, when set, receives a pcap of a real exchange along the same way (a TCP
	// connection with one request and its answer, or a UDP datagram and its answer),
	// captured on every node's interfaces and the external hosts' links.
	Pcap io.Writer
	// PcapClassic writes the classic libpcap format (every point's packets in one
	// stream, no interface names) instead of pcapng (an interface per capture point).
	PcapClassic bool
}

// TraceResult is a traced packet: where it went, every step, and the resolved
// destination.
type TraceResult struct {
	From     string               `json:"from"`
	To       string               `json:"to"`
	Dst      string               `json:"dst"`
	Resolved string               `json:"resolved,omitempty"`
	Proto    string               `json:"proto"`
	Mode     string               `json:"mode"`
	Outcomes []netsim.ProbeResult `json:"outcomes"`
	// Reply is the answer's way (Reply): From is where it started.
	Reply *TraceReply `json:"reply,omitempty"`
	// Pcap says what the capture holds (when one was asked for).
	Pcap string `json:"pcap,omitempty"`
}

// TraceReply is the way of a traced packet's answer.
type TraceReply struct {
	From    string              `json:"from"`
	Src     string              `json:"src"`
	Dst     string              `json:"dst"`
	Outcome *netsim.ProbeResult `json:"outcome,omitempty"`
	// Note says why there is no answer to trace (the packet was not delivered).
	Note string `json:"note,omitempty"`
}

// parseTraceTarget parses trace's --to: a target, where a name or an address
// without a port takes port.
func parseTraceTarget(to string, port int) (target, error) {
	tg, err := parseTarget(to, false)
	if err == nil {
		return tg, nil
	}
	if t2, err2 := parseTarget(fmt.Sprintf("%s:%d", to, port), false); err2 == nil && !strings.Contains(strings.TrimPrefix(to, "["), ":") {
		return t2, nil
	}
	if strings.Count(to, ":") > 1 && !strings.HasPrefix(to, "[") && !strings.Contains(to, "/") {
		if t3, err3 := parseTarget(fmt.Sprintf("[%s]:%d", to, port), false); err3 == nil {
			return t3, nil
		}
	}
	return target{}, err
}

// Trace builds the scenario's cluster (running its first opts.AfterStep steps) and
// traces one packet from opts.From to opts.To, rule by rule.
func Trace(ctx context.Context, s *Scenario, opts TraceOptions) (*TraceResult, error) {
	fromErr := func(field, format string, args ...any) error {
		return &Error{File: s.File, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if _, err := parsePlace(opts.From, false); err != nil {
		return nil, fromErr("--from", "%v", err)
	}
	to := opts.To
	if opts.Port == 0 {
		opts.Port = 80
	}
	if opts.Port < 1 || opts.Port > 65535 {
		return nil, fromErr("--port", "%d: want a port in 1-65535", opts.Port)
	}
	tg, err := parseTraceTarget(to, opts.Port)
	if err != nil {
		return nil, fromErr("--to", "%v", err)
	}
	if tg.kind == "name" && !strings.HasPrefix(opts.From, "pod:") {
		return nil, fromErr("--to", "%q is a DNS name: only pods resolve cluster names", to)
	}
	proto := strings.ToLower(opts.Proto)
	if proto == "" {
		proto = "tcp"
	}
	pnum, err := netsim.ParseProto(proto)
	if err != nil || proto != "tcp" && proto != "udp" && proto != "sctp" {
		return nil, fromErr("--proto", "want tcp, udp or sctp, got %q", opts.Proto)
	}
	if opts.AfterStep < 0 || opts.AfterStep > len(s.Steps) {
		return nil, fromErr("--after-step", "want 0-%d (the scenario has %d steps), got %d", len(s.Steps), len(s.Steps), opts.AfterStep)
	}
	if opts.SrcPort < 0 || opts.SrcPort > 65535 {
		return nil, fromErr("--sport", "want 1-65535, got %d", opts.SrcPort)
	}
	p, err := s.prepare(opts.Mode)
	if err != nil {
		return nil, err
	}
	r, err := p.start()
	if err != nil {
		return nil, err
	}
	defer r.close()
	for i := 0; i < opts.AfterStep; i++ {
		r.runStep(ctx, i)
	}
	// A source or destination the scenario does not have (at this step) is the
	// caller's input error, named by its flag.
	if _, err := r.netOf(opts.From); err != nil {
		return nil, fromErr("--from", "%v", err)
	}
	dst, how, err := r.resolveTarget(ctx, tg, opts.From)
	if err != nil {
		return nil, fromErr("--to", "%v", err)
	}
	res := &TraceResult{From: opts.From, To: to, Dst: dst.String(), Resolved: how, Proto: proto, Mode: string(p.mode)}
	rs, err := r.c.Probe(netsim.Probe{From: opts.From, Proto: pnum, Dst: dst, SrcPort: uint16(opts.SrcPort), Mode: netsim.ProbePacket, AllBranches: opts.AllBranches, Trace: true, Payload: []byte("clusterlab\n")})
	if err != nil {
		return nil, err
	}
	res.Outcomes = rs
	r.lastProbe = rs
	if opts.Reply {
		fwd := rs
		if opts.AllBranches { // the dry run left no state: play one path for real
			fwd, err = r.c.Probe(netsim.Probe{From: opts.From, Proto: pnum, Dst: dst, SrcPort: uint16(opts.SrcPort), Mode: netsim.ProbePacket, Payload: []byte("clusterlab\n")})
			if err != nil {
				return nil, err
			}
		}
		if res.Reply, err = r.traceReply(pnum, fwd[0]); err != nil {
			return nil, err
		}
	}
	if opts.Pcap != nil {
		if proto == "sctp" {
			return nil, fromErr("--pcap", "the capture replays the exchange with real sockets, which have no SCTP")
		}
		// The exchange runs in a fresh copy of the cluster, brought to the same state: its
		// first packet meets the same random draws the traced packet met (a probe leaves a
		// conntrack entry that a real connection must not inherit).
		r2, err := p.start()
		if err != nil {
			return nil, err
		}
		defer r2.close()
		for i := 0; i < opts.AfterStep; i++ {
			r2.runStep(ctx, i)
		}
		r2.lastProbe = rs
		if _, _, err := r2.resolveTarget(ctx, tg, opts.From); err != nil { // the same DNS traffic
			return nil, err
		}
		desc, err := r2.capture(ctx, opts.From, proto, uint16(opts.SrcPort), dst, opts.Pcap, opts.PcapClassic)
		if err != nil {
			return nil, err
		}
		res.Pcap = desc
	}
	return res, nil
}

// traceReply traces the answer to a packet that ended as o: from where it was delivered,
// from the address it arrived at, to the source the receiver saw.
func (r *runner) traceReply(proto uint8, o netsim.ProbeResult) (*TraceReply, error) {
	rep := &TraceReply{}
	switch {
	case o.Result != netsim.ResultDelivered || !o.Addr.IsValid() || !o.SeenSrc.IsValid():
		rep.Note = "no answer to trace: the packet was not delivered (" + o.Outcome.String() + ")"
		return rep, nil
	case o.Pod != "":
		rep.From = "pod:" + o.Pod
	case o.External != "":
		rep.From = "external:" + o.External
	default:
		rep.From = "node:" + o.Node
	}
	rep.Src, rep.Dst = o.Addr.String(), o.SeenSrc.String()
	rs, err := r.c.Probe(netsim.Probe{From: rep.From, Proto: proto, Src: o.Addr.Addr(), SrcPort: o.Addr.Port(), Dst: o.SeenSrc, Mode: netsim.ProbePacket, Trace: true, Payload: []byte("answer\n")})
	if err != nil {
		return nil, fmt.Errorf("tracing the answer from %s: %w", rep.From, err)
	}
	rep.Outcome = &rs[0]
	return rep, nil
}

// capture makes one real exchange and writes what crossed every capture point, in
// order, as one pcap.
func (r *runner) capture(ctx context.Context, from, proto string, sport uint16, dst netip.AddrPort, w io.Writer, classic bool) (string, error) {
	n, err := r.netOf(from)
	if err != nil {
		return "", err
	}
	m := &pcapMerge{}
	var points []string
	for _, nd := range r.c.Nodes() {
		points = append(points, nd.Name()+"/cbr0", nd.Name()+"/eth0", nd.Name()+"/lo")
	}
	if pl, _ := parsePlace(from, false); pl.kind == "external" {
		points = append(points, "external/"+pl.name)
	}
	var stops []func()
	ng := &countingWriter{}
	if classic {
		for _, pt := range points {
			stop, err := r.c.Capture(pt, &pcapPoint{m: m})
			if err != nil {
				return "", err
			}
			stops = append(stops, stop)
		}
	} else {
		ng.w = w
		stop, err := r.c.CaptureNG(points, ng)
		if err != nil {
			return "", err
		}
		stops = append(stops, stop)
	}
	a := r.netstackAttempt(ctx, n, proto, sport, dst)
	for _, stop := range stops {
		stop()
	}
	count := ng.writes - 1 // the header
	if classic {
		if _, err := w.Write(m.bytes()); err != nil {
			return "", err
		}
		count = m.count()
	} else if ng.err != nil {
		return "", ng.err
	}
	desc := fmt.Sprintf("%d packets of one %s exchange (%s", count, proto, a.result)
	if a.pod != "" {
		desc += " by " + a.pod
	}
	desc += "), each as it crossed the nodes' interfaces (cbr0: to and from pods, eth0: the cluster network)"
	if !classic {
		desc += "; pcapng, an interface per capture point"
	}
	if len(r.lastProbe) > 1 {
		desc += "; the traced packet had several possible ways, the exchange took one"
	} else if len(r.lastProbe) == 1 && r.lastProbe[0].Pod != "" && a.pod != "" && a.pod != r.lastProbe[0].Pod {
		desc += "; it went to another backend than the traced packet"
	}
	return desc, nil
}

// pcapMerge collects pcap records from several capture points in the order they were
// written.
type pcapMerge struct {
	mu      sync.Mutex
	records [][]byte
}

func (m *pcapMerge) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.records)
}

func (m *pcapMerge) bytes() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b bytes.Buffer
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], 262144)
	binary.LittleEndian.PutUint32(h[20:], 101) // LINKTYPE_RAW
	b.Write(h[:])
	for _, r := range m.records {
		b.Write(r)
	}
	return b.Bytes()
}

// pcapPoint receives one capture point's pcap stream and hands whole records to the
// merge.
type pcapPoint struct {
	m      *pcapMerge
	header int // bytes of the file header seen
	buf    []byte
}

func (p *pcapPoint) Write(b []byte) (int, error) {
	n := len(b)
	if p.header < 24 {
		k := min(24-p.header, len(b))
		p.header += k
		b = b[k:]
	}
	p.buf = append(p.buf, b...)
	for len(p.buf) >= 16 {
		caplen := int(binary.LittleEndian.Uint32(p.buf[8:]))
		if len(p.buf) < 16+caplen {
			break
		}
		rec := append([]byte(nil), p.buf[:16+caplen]...)
		p.buf = p.buf[16+caplen:]
		p.m.mu.Lock()
		p.m.records = append(p.m.records, rec)
		p.m.mu.Unlock()
	}
	return n, nil
}

// JSON returns the trace as indented JSON.
func (t *TraceResult) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteText writes each outcome and its trace.
func (t *TraceResult) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s packet from %s to %s (%s), kube-proxy %s mode\n", t.Proto, t.From, t.To, t.Dst, t.Mode)
	if t.Resolved != "" {
		fmt.Fprintf(&b, "%s\n", t.Resolved)
	}
	for i, o := range t.Outcomes {
		b.WriteString("\n")
		if len(t.Outcomes) > 1 {
			fmt.Fprintf(&b, "outcome %d of %d, probability %.4f: %s\n", i+1, len(t.Outcomes), o.Probability, o.Outcome.String())
		} else {
			fmt.Fprintf(&b, "outcome: %s\n", o.Outcome.String())
		}
		b.WriteString(o.Trace.String())
	}
	if rp := t.Reply; rp != nil {
		if rp.Outcome == nil {
			fmt.Fprintf(&b, "\nreply: %s\n", rp.Note)
		} else {
			fmt.Fprintf(&b, "\nreply from %s (%s) to %s: %s\n", rp.From, rp.Src, rp.Dst, rp.Outcome.Outcome.String())
			b.WriteString(rp.Outcome.Trace.String())
		}
	}
	if t.Pcap != "" {
		fmt.Fprintf(&b, "\npcap: %s\n", t.Pcap)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ---- pictures ----

// graph is a packet's way as vertices (the source, each hook a node ran it through, the
// end) and edges in the order the packet took them.
type graph struct {
	vertices []vertex
	index    map[string]int
	edges    []edge
	clusters []string // node names, in order of first appearance
}

type vertex struct {
	id      string
	cluster string // the node it belongs to ("" outside any node)
	title   string
	lines   []string
	shape   string // box, ellipse, doubleoctagon (dropped), ...
}

type edge struct {
	from, to int
	label    string
}

func (g *graph) vertex(key, cluster, title, shape string) int {
	if i, ok := g.index[key]; ok {
		return i
	}
	g.index[key] = len(g.vertices)
	g.vertices = append(g.vertices, vertex{id: fmt.Sprintf("v%d", len(g.vertices)), cluster: cluster, title: title, shape: shape})
	if cluster != "" {
		seen := false
		for _, c := range g.clusters {
			seen = seen || c == cluster
		}
		if !seen {
			g.clusters = append(g.clusters, cluster)
		}
	}
	return g.index[key]
}

func (g *graph) edge(from, to int, label string) {
	for _, e := range g.edges {
		if e.from == from && e.to == to && e.label == label {
			return
		}
	}
	g.edges = append(g.edges, edge{from, to, label})
}

func addLine(v *vertex, l string) {
	for _, x := range v.lines {
		if x == l {
			return
		}
	}
	v.lines = append(v.lines, l)
}

// buildGraph turns the outcomes' traces into one graph; with several outcomes, the edge
// into each end carries its probability.
func (t *TraceResult) buildGraph() *graph {
	g := &graph{index: map[string]int{}}
	src := g.vertex("src", "", t.From, "box")
	g.vertices[src].lines = []string{t.Proto + " to " + t.To}
	for oi, o := range t.Outcomes {
		if o.Trace == nil {
			continue
		}
		prev := src
		label := ""
		visits := map[string]int{}
		cur := -1
		for _, s := range o.Trace.Steps {
			switch s.Kind {
			case netsim.StepLink:
				label = s.Detail
			case netsim.StepHook:
				key := s.Node + "/" + s.Hook
				visits[key]++
				vkey := fmt.Sprintf("%s#%d", key, visits[key])
				cur = g.vertex(vkey, s.Node, s.Hook, "box")
				edgeLabel := s.Packet
				if label != "" {
					edgeLabel = label + "\n" + s.Packet
				}
				g.edge(prev, cur, edgeLabel)
				prev, label = cur, ""
			case netsim.StepRule:
				if cur >= 0 && s.Matched != nil && *s.Matched && s.Rule != "" && s.Verdict != "" {
					addLine(&g.vertices[cur], fmt.Sprintf("%s/%s: %s", s.Table, s.Chain, ruleTail(s.Rule)))
				}
			case netsim.StepNAT:
				if cur >= 0 && strings.Contains(s.Detail, "=>") {
					if _, after, ok := strings.Cut(s.Detail, "=> "); ok {
						addLine(&g.vertices[cur], s.Verdict+" => "+after)
					}
				}
			case netsim.StepHandler:
				if cur >= 0 && len(o.Trace.Find(netsim.StepRule)) == 0 && s.Verdict != "" && !strings.HasPrefix(strings.ToLower(s.Verdict), "continue") {
					addLine(&g.vertices[cur], s.Handler+": "+s.Verdict)
				}
			case netsim.StepNote:
				if cur >= 0 && s.Detail != "" {
					addLine(&g.vertices[cur], s.Detail)
				}
			}
		}
		end := g.vertex(fmt.Sprintf("end%d", oi), "", o.Outcome.Result, endShape(o.Result))
		g.vertices[end].lines = []string{o.Outcome.String()}
		el := label
		if len(t.Outcomes) > 1 {
			el = strings.TrimSpace(fmt.Sprintf("p=%.4f %s", o.Probability, el))
		}
		g.edge(prev, end, el)
	}
	return g
}

func endShape(result string) string {
	switch result {
	case netsim.ResultDelivered, netsim.ResultConnected, netsim.ResultReplied:
		return "ellipse"
	}
	return "octagon"
}

// DOT draws the packet's way as a Graphviz digraph: a box per hook a node ran the
// packet through (with the rules that matched and the NAT done), grouped by node; edges
// carry the packet as it was on each hop.
func (t *TraceResult) DOT() string {
	g := t.buildGraph()
	var b strings.Builder
	b.WriteString("digraph trace {\n  rankdir=LR;\n  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=9];\n")
	fmt.Fprintf(&b, "  label=%s;\n  labelloc=t;\n", dotQuote(fmt.Sprintf("%s %s -> %s (%s), kube-proxy %s mode", t.Proto, t.From, t.To, t.Dst, t.Mode)))
	write := func(v vertex, indent string) {
		label := v.title
		for _, l := range v.lines {
			label += "\n" + l
		}
		fmt.Fprintf(&b, "%s%s [shape=%s, label=%s];\n", indent, v.id, v.shape, dotQuote(label))
	}
	for _, v := range g.vertices {
		if v.cluster == "" {
			write(v, "  ")
		}
	}
	for i, c := range g.clusters {
		fmt.Fprintf(&b, "  subgraph cluster_%d {\n    label=%s;\n    style=rounded;\n", i, dotQuote("node "+c))
		for _, v := range g.vertices {
			if v.cluster == c {
				write(v, "    ")
			}
		}
		b.WriteString("  }\n")
	}
	for _, e := range g.edges {
		fmt.Fprintf(&b, "  %s -> %s [label=%s];\n", g.vertices[e.from].id, g.vertices[e.to].id, dotQuote(e.label))
	}
	b.WriteString("}\n")
	return b.String()
}

func dotQuote(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	s = strings.ReplaceAll(s, "\n", `\l`)
	if strings.Contains(s, `\l`) {
		s += `\l`
	}
	return `"` + s + `"`
}

// Mermaid draws the same picture as Mermaid flowchart text (for Markdown renderers).
func (t *TraceResult) Mermaid() string {
	g := t.buildGraph()
	var b strings.Builder
	b.WriteString("flowchart LR\n")
	write := func(v vertex, indent string) {
		label := "<b>" + mermaidText(v.title) + "</b>"
		for _, l := range v.lines {
			label += "<br/>" + mermaidText(l)
		}
		open, close := "[", "]"
		switch v.shape {
		case "ellipse":
			open, close = "([", "])"
		case "octagon":
			open, close = "{{", "}}"
		}
		fmt.Fprintf(&b, "%s%s%s\"%s\"%s\n", indent, v.id, open, label, close)
	}
	for _, v := range g.vertices {
		if v.cluster == "" {
			write(v, "  ")
		}
	}
	for i, c := range g.clusters {
		fmt.Fprintf(&b, "  subgraph n%d[\"node %s\"]\n", i, mermaidText(c))
		for _, v := range g.vertices {
			if v.cluster == c {
				write(v, "    ")
			}
		}
		b.WriteString("  end\n")
	}
	for _, e := range g.edges {
		if e.label == "" {
			fmt.Fprintf(&b, "  %s --> %s\n", g.vertices[e.from].id, g.vertices[e.to].id)
		} else {
			fmt.Fprintf(&b, "  %s -- \"%s\" --> %s\n", g.vertices[e.from].id, mermaidText(strings.ReplaceAll(e.label, "\n", " ")), g.vertices[e.to].id)
		}
	}
	return b.String()
}

func mermaidText(s string) string {
	r := strings.NewReplacer(`"`, "#quot;", "<", "#lt;", ">", "#gt;", "\n", "<br/>")
	return r.Replace(s)
}

// ErrNoGraphviz is returned by SVG when the dot command is not installed.
var ErrNoGraphviz = errors.New("Graphviz's dot command is not installed (apt-get install graphviz); --dot writes the picture's source, --mermaid a Markdown-friendly one")

// SVG renders the DOT picture with Graphviz's dot command.
func (t *TraceResult) SVG(ctx context.Context) ([]byte, error) {
	path, err := exec.LookPath("dot")
	if err != nil {
		return nil, ErrNoGraphviz
	}
	cmd := exec.CommandContext(ctx, path, "-Tsvg")
	cmd.Stdin = strings.NewReader(t.DOT())
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("dot -Tsvg: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}

// countingWriter counts the writes (pcapng blocks: the header, then a block a packet).
type countingWriter struct {
	w      io.Writer
	writes int
	err    error
}

func (c *countingWriter) Write(b []byte) (int, error) {
	c.writes++
	n, err := c.w.Write(b)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}
