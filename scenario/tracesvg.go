package scenario

import (
	"fmt"
	"html"
	"strings"

	"github.com/clusterlab/clusterlab/netsim"
)

// The vertical picture of a traced packet: its way top to bottom, node by node and hook
// by hook, with the rules that matched (chain, dump line and rule text), the conntrack
// entries, the NAT done and the routing decisions; an outcome a column (with
// AllBranches, side by side with their probabilities) and the answer's way (Reply) in a
// column of its own. Drawn here, without Graphviz, for `clusterlab trace --svg` and
// `clusterlab ui`.

// Sizes of the vertical picture, in pixels.
const (
	vColW     = 640 // a column
	vGap      = 24  // between columns
	vPad      = 12  // inside a node's frame and a hook's box
	vLine     = 15  // a line of text
	vCharW    = 6.6 // a character of the 11 px monospace font
	vTitleH   = 20
	vArrowH   = 30
	vMaxChars = (vColW - 4*vPad) * 10 / 66 // characters of a line: vCharW each
)

// vItem is one line inside a hook's box.
type vItem struct {
	class string // rule, ruletext, ct, nat, masq, route, note, handler, fault
	text  string
	full  string // the whole text, as a tooltip, when text is cut
	chain string // table/chain, for rules
	line  int
}

// vHook is a hook a node ran the packet through.
type vHook struct {
	node, hook, packet string
	linkIn             string // the link the packet crossed to get here ("" when none)
	items              []vItem
}

// vColumn is one packet's way: a source, hooks, an end.
type vColumn struct {
	heading string // "outcome 1 of 3, p=0.3333", "reply"
	from    string
	packet  string // the packet as it left the source
	hooks   []vHook
	endLink string
	end     netsim.Outcome
	endText string
	prob    float64
}

func vColumnOf(heading, from string, o netsim.ProbeResult) vColumn {
	c := vColumn{heading: heading, from: from, end: o.Outcome, prob: o.Probability}
	if o.Trace == nil {
		return c
	}
	link := ""
	cur := -1
	add := func(it vItem) {
		if cur < 0 {
			return
		}
		if len([]rune(it.text)) > vMaxChars {
			it.full = it.text
			it.text = string([]rune(it.text)[:vMaxChars-1]) + "…"
		}
		c.hooks[cur].items = append(c.hooks[cur].items, it)
	}
	for _, s := range o.Trace.Snapshot() {
		switch s.Kind {
		case netsim.StepLink:
			link = s.Detail
			if c.packet == "" {
				c.packet = s.Packet
			}
		case netsim.StepHook:
			c.hooks = append(c.hooks, vHook{node: s.Node, hook: s.Hook, packet: s.Packet, linkIn: link})
			cur, link = len(c.hooks)-1, ""
		case netsim.StepRule:
			matched := s.Matched != nil && *s.Matched
			policy := s.Rule == "" && s.Verdict != ""
			if !matched && !(policy && isFinalVerdict(s.Verdict)) {
				continue
			}
			head := s.Table + "/" + s.Chain
			if s.Line > 0 {
				head += fmt.Sprintf(" line %d", s.Line)
			}
			if policy {
				head += ": policy"
			}
			if s.Verdict != "" {
				head += " → " + s.Verdict
			}
			add(vItem{class: "rule", text: head, chain: s.Table + "/" + s.Chain, line: s.Line})
			if s.Rule != "" {
				add(vItem{class: "ruletext", text: s.Rule, chain: s.Table + "/" + s.Chain, line: s.Line})
			}
		case netsim.StepConntrack:
			add(vItem{class: "ct", text: strings.TrimSpace("conntrack " + s.Verdict + ": " + s.Detail)})
		case netsim.StepNAT:
			before, after, ok := strings.Cut(s.Detail, "=> ")
			if !ok {
				continue // the binding's reply tuple: the entry line says what changed
			}
			_ = before
			class := "nat"
			if v := strings.ToUpper(s.Verdict); strings.Contains(v, "MASQ") || strings.Contains(v, "SNAT") {
				class = "masq"
			}
			label := s.Verdict
			if s.Handler != "" {
				label = s.Handler + " " + label
			}
			add(vItem{class: class, text: label + " → " + strings.TrimSuffix(after, ")")})
		case netsim.StepRoute:
			add(vItem{class: "route", text: "route: " + s.Detail})
		case netsim.StepHandler:
			v := strings.ToLower(s.Verdict)
			if s.Verdict == "" || strings.HasPrefix(v, "continue") {
				continue
			}
			t := s.Handler + ": " + s.Verdict
			if s.Detail != "" {
				t += " (" + s.Detail + ")"
			}
			add(vItem{class: "handler", text: t})
		case netsim.StepNote:
			t := s.Detail
			if s.Handler != "" {
				t = s.Handler + ": " + t
			}
			if s.Verdict != "" {
				t = s.Handler + ": " + s.Verdict + " (" + s.Detail + ")"
			}
			add(vItem{class: "note", text: t})
		case netsim.StepFault:
			add(vItem{class: "fault", text: "fault: " + s.Verdict + " " + s.Detail})
		case netsim.StepEnd:
			c.endLink = link
			c.endText = s.Verdict
			if s.Detail != "" {
				c.endText += " (" + s.Detail + ")"
			}
		}
	}
	if c.endLink == "" {
		c.endLink = link
	}
	return c
}

func isFinalVerdict(v string) bool {
	v = strings.ToUpper(v)
	return strings.HasPrefix(v, "DROP") || strings.HasPrefix(v, "REJECT")
}

// svgWriter accumulates the picture.
type svgWriter struct {
	b strings.Builder
}

func (w *svgWriter) text(x, y int, class, s string, attrs ...string) {
	fmt.Fprintf(&w.b, `<text x="%d" y="%d" class="%s"%s>%s</text>`+"\n", x, y, class, strings.Join(attrs, ""), html.EscapeString(s))
}

func attr(name, v string) string { return fmt.Sprintf(` %s="%s"`, name, html.EscapeString(v)) }

// column draws c at x from y and returns the y below it.
func (w *svgWriter) column(c vColumn, x, y int) int {
	if c.heading != "" {
		w.text(x, y+14, "heading", c.heading)
		y += vTitleH + 4
	}
	// The source.
	srcH := 2*vLine + 2*vPad - 6
	fmt.Fprintf(&w.b, `<g class="src"%s><rect x="%d" y="%d" width="%d" height="%d" rx="14"/>`+"\n", attr("data-from", c.from), x, y, vColW, srcH)
	w.text(x+vPad, y+vPad+10, "title", "from "+c.from)
	w.text(x+vPad, y+vPad+10+vLine, "packet", c.packet)
	w.b.WriteString("</g>\n")
	y += srcH
	node := ""
	frameTop := 0
	closeFrame := func() {
		if node == "" {
			return
		}
		fmt.Fprintf(&w.b, `<rect class="nodeframe" x="%d" y="%d" width="%d" height="%d" rx="8"%s/>`+"\n", x, frameTop, vColW, y-frameTop+vPad, attr("data-node", node))
		y += vPad
		node = ""
	}
	for _, h := range c.hooks {
		if h.node != node {
			closeFrame()
			y = w.arrow(x, y, h.linkIn)
			node, frameTop = h.node, y
			w.text(x+vPad, y+16, "nodename", "node "+h.node)
			y += vTitleH + 6
		} else {
			y = w.arrow(x, y, h.linkIn)
		}
		bh := vPad + vLine*(2+len(h.items)) + vPad/2
		fmt.Fprintf(&w.b, `<g class="hook"%s%s>`+"\n", attr("data-node", h.node), attr("data-hook", h.hook))
		fmt.Fprintf(&w.b, `<rect x="%d" y="%d" width="%d" height="%d" rx="4"/>`+"\n", x+vPad, y, vColW-2*vPad, bh)
		ty := y + vPad + 4
		w.text(x+2*vPad, ty, "hookname", h.hook)
		ty += vLine
		w.text(x+2*vPad, ty, "packet", h.packet)
		for _, it := range h.items {
			ty += vLine
			attrs := []string{}
			if it.chain != "" {
				attrs = append(attrs, attr("data-chain", it.chain))
			}
			if it.line > 0 {
				attrs = append(attrs, attr("data-line", fmt.Sprint(it.line)))
			}
			if it.class == "nat" || it.class == "masq" {
				fmt.Fprintf(&w.b, `<rect class="%sbg" x="%d" y="%d" width="%d" height="%d" rx="3"/>`+"\n", it.class, x+2*vPad-4, ty-11, int(float64(len([]rune(it.text)))*vCharW)+8, vLine)
			}
			indent := 0
			if it.class == "ruletext" {
				indent = 12
			}
			if it.full != "" {
				fmt.Fprintf(&w.b, "<g><title>%s</title>", html.EscapeString(it.full))
			}
			w.text(x+2*vPad+indent, ty, it.class, it.text, attrs...)
			if it.full != "" {
				w.b.WriteString("</g>\n")
			}
		}
		w.b.WriteString("</g>\n")
		y += bh + 6
	}
	closeFrame()
	y = w.arrow(x, y, c.endLink)
	endH := 2*vLine + 2*vPad - 6
	ok := c.end.Result == netsim.ResultDelivered || c.end.Result == netsim.ResultConnected || c.end.Result == netsim.ResultReplied
	cls := "end ok"
	if !ok {
		cls = "end bad"
	}
	fmt.Fprintf(&w.b, `<g class="%s"%s%s><rect x="%d" y="%d" width="%d" height="%d" rx="14"/>`+"\n", cls, attr("data-result", c.end.Result), attr("data-pod", c.end.Pod), x, y, vColW, endH)
	w.text(x+vPad, y+vPad+10, "title", cut(c.end.String(), vMaxChars))
	w.text(x+vPad, y+vPad+10+vLine, "packet", cut(c.endText, vMaxChars))
	w.b.WriteString("</g>\n")
	return y + endH
}

func cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// arrow draws a downward arrow from y with the link's label beside it.
func (w *svgWriter) arrow(x, y int, label string) int {
	cx := x + 28
	fmt.Fprintf(&w.b, `<line class="arrow" x1="%d" y1="%d" x2="%d" y2="%d" marker-end="url(#head)"/>`+"\n", cx, y+2, cx, y+vArrowH-2)
	if label != "" {
		w.text(cx+12, y+vArrowH/2+4, "link", cut(label, vMaxChars-6))
	}
	return y + vArrowH
}

const vStyle = `
text { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 11px; fill: #1d2733; }
.heading { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; font-size: 14px; font-weight: bold; }
.caption { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; font-size: 15px; font-weight: bold; }
.subcaption { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; font-size: 12px; fill: #475569; }
.title { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; font-size: 12px; font-weight: bold; }
.nodename { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; font-size: 13px; font-weight: bold; fill: #1e3a8a; }
.hookname { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; font-size: 12px; font-weight: bold; fill: #0f172a; }
.packet { fill: #334155; }
.rule { fill: #14532d; }
.ruletext { fill: #64748b; }
.ct { fill: #6b21a8; }
.nat { fill: #7c2d12; font-weight: bold; }
.masq { fill: #831843; font-weight: bold; }
.natbg { fill: #fed7aa; }
.masqbg { fill: #fbcfe8; }
.route { fill: #475569; font-style: italic; }
.handler, .note { fill: #0e7490; }
.fault { fill: #b91c1c; font-weight: bold; }
.link { fill: #475569; font-style: italic; }
.src rect { fill: #e0f2fe; stroke: #0369a1; stroke-width: 1.5; }
.end.ok rect { fill: #dcfce7; stroke: #15803d; stroke-width: 1.5; }
.end.bad rect { fill: #fee2e2; stroke: #b91c1c; stroke-width: 1.5; }
.nodeframe { fill: none; stroke: #1e3a8a; stroke-width: 1.5; stroke-dasharray: 6 3; }
.hook rect { fill: #f8fafc; stroke: #94a3b8; }
.arrow { stroke: #334155; stroke-width: 2; }
`

// VerticalSVG draws the packet's way top to bottom (see the comment above vColW): an
// outcome a column, side by side, and the answer's way in a column after them.
func (t *TraceResult) VerticalSVG() []byte {
	var cols []vColumn
	for i, o := range t.Outcomes {
		h := ""
		if len(t.Outcomes) > 1 {
			h = fmt.Sprintf("outcome %d of %d, probability %.4f", i+1, len(t.Outcomes), o.Probability)
		}
		cols = append(cols, vColumnOf(h, t.From, o))
	}
	if rp := t.Reply; rp != nil && rp.Outcome != nil {
		cols = append(cols, vColumnOf("the answer, from "+rp.From, rp.From, *rp.Outcome))
	}
	w := &svgWriter{}
	y0 := 52
	bottom := y0
	for i, c := range cols {
		if b := w.column(c, vGap/2+i*(vColW+vGap), y0); b > bottom {
			bottom = b
		}
	}
	body := w.b.String()
	n := max(len(cols), 1)
	width := n*(vColW+vGap) + 0
	height := bottom + vGap
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="tracesvg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`+"\n",
		width, height, width, height, html.EscapeString(t.caption()))
	fmt.Fprintf(&b, "<title>%s</title>\n<style>%s</style>\n", html.EscapeString(t.caption()), vStyle)
	b.WriteString(`<defs><marker id="head" viewBox="0 0 10 10" refX="8" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#334155"/></marker></defs>` + "\n")
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	sw := &svgWriter{}
	sw.text(vGap/2, 20, "caption", cut(t.caption(), width*10/88)) // about 8.8 px a character
	sub := fmt.Sprintf("kube-proxy %s mode", t.Mode)
	if t.Resolved != "" {
		sub += " · " + t.Resolved
	}
	sw.text(vGap/2, 38, "subcaption", cut(sub, width*10/70))
	b.WriteString(sw.b.String())
	b.WriteString(body)
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

func (t *TraceResult) caption() string {
	return fmt.Sprintf("%s packet from %s to %s (%s)", t.Proto, t.From, t.To, t.Dst)
}
