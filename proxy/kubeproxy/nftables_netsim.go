package kubeproxy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	nftemu "github.com/clusterlab/clusterlab/proxy/nftables/emulator"
)

// This file runs an nftables evaluator as a netsim node's nftables: every base chain of
// every table becomes a netsim handler at its hook and priority (nat chains as NAT
// handlers, which netsim calls for a connection's first packet only), beside any
// iptables emulator's tables on the same hooks, ordered by priority as the kernel runs
// them. The base chains change with the ruleset, so the handlers follow the evaluator's
// generation: AttachNFT's sync re-registers them when a transaction changed them.

// NFTAttachment keeps a node's handlers in step with an evaluator's base chains.
type NFTAttachment struct {
	mu      sync.Mutex
	emu     *nftemu.Emulator
	node    *netsim.Node
	name    string
	gen     uint64
	chains  []nftemu.BaseChain
	removes []func()
}

// AttachNFT registers handlers for the evaluator's base chains on a node, named
// "<name> <family> <table> <chain>", and returns the attachment; call Sync after every
// change to the ruleset (NFTRunner does) and Detach to remove them.
func AttachNFT(e *nftemu.Emulator, n *netsim.Node, name string) *NFTAttachment {
	a := &NFTAttachment{emu: e, node: n, name: name}
	a.Sync()
	return a
}

// Sync re-registers the handlers if the evaluator's base chains changed.
func (a *NFTAttachment) Sync() {
	a.mu.Lock()
	defer a.mu.Unlock()
	g := a.emu.Generation()
	if g == a.gen && a.removes != nil {
		return
	}
	a.gen = g
	var chains []nftemu.BaseChain
	for h := netfilter.Prerouting; h <= netfilter.Postrouting; h++ {
		chains = append(chains, a.emu.BaseChains(h)...)
	}
	if a.removes != nil && slices.Equal(chains, a.chains) {
		return
	}
	a.detachLocked()
	a.chains = chains
	a.removes = []func(){}
	for _, bc := range chains {
		a.removes = append(a.removes, a.node.AddHandler(netsim.HandlerSpec{
			Name: a.name + " " + bc.Family.String() + " " + bc.Table + " " + bc.Chain, Hook: bc.Hook,
			Priority: bc.Priority, NAT: bc.Type == "nat",
			Handler: &nftHandler{e: a.emu, bc: bc}}))
	}
}

// Detach removes the handlers.
func (a *NFTAttachment) Detach() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.detachLocked()
}

func (a *NFTAttachment) detachLocked() {
	for _, r := range a.removes {
		r()
	}
	a.removes = nil
}

// NFTRunner is the nftables a kube-proxy Proxier writes to in netsim: its transactions
// (built with knftables for one family and table) are applied to the evaluator as the
// `nft -f` text kube-proxy would hand the kernel, all or nothing, and the node's
// handlers follow.
type NFTRunner struct {
	fake *knftables.Fake // builds transactions with the family and table filled in
	emu  *nftemu.Emulator
	att  *NFTAttachment
}

// NewNFTRunner returns a runner for one family's table in the evaluator.
func NewNFTRunner(e *nftemu.Emulator, att *NFTAttachment, family knftables.Family, table string) *NFTRunner {
	return &NFTRunner{fake: knftables.NewFake(family, table), emu: e, att: att}
}

// NewTransaction returns an empty transaction for the runner's family and table.
func (r *NFTRunner) NewTransaction() *knftables.Transaction { return r.fake.NewTransaction() }

// Run applies a transaction to the evaluator.
func (r *NFTRunner) Run(ctx context.Context, tx *knftables.Transaction) error {
	text := tx.String()
	if i := strings.Index(text, "# ERROR: "); i >= 0 {
		return errors.New("nftables transaction: " + strings.TrimSpace(text[i+len("# ERROR: "):]))
	}
	if err := r.emu.ApplyScript([]byte(text), "kube-proxy transaction"); err != nil {
		return err
	}
	if r.att != nil {
		r.att.Sync()
	}
	return nil
}

// nftEnv is the nftemu.Env of a packet in netsim.
type nftEnv struct{ ctx *netsim.Context }

func (v nftEnv) Now() time.Time            { return v.ctx.Now() }
func (v nftEnv) Pick(n int) int            { return v.ctx.Pick(n) }
func (v nftEnv) DryRun() bool              { return v.ctx.DryRun() }
func (v nftEnv) IsLocal(a netip.Addr) bool { return v.ctx.IsLocalAddr(a) }

// nftHandler is one base chain. Netsim calls a node's handlers one packet at a time,
// under the node's lock, so the packet buffer q is the handler's own.
type nftHandler struct {
	e  *nftemu.Emulator
	bc nftemu.BaseChain
	q  nftemu.Packet
	// train is the state between PeekTrain and CommitTrain (nil until a first train).
	train *nftTrain
}

// nftTrain is an nftHandler's state between netsim's PeekTrain and CommitTrain calls
// (both under the node's lock).
type nftTrain struct {
	mid, last nftemu.Packet
	stash     nftemu.TrainStash
}

var _ netsim.TrainHandler = (*nftHandler)(nil)

// PeekTrain implements netsim.TrainHandler: the base chain answers for a train when
// evaluating it once for the mid segments' shape and once for the last's changes nothing
// a segment's evaluation would not (nftemu.Emulator.PeekTrain) and lets both continue
// alike; a traced or dry-run packet does not answer.
func (h *nftHandler) PeekTrain(ctx *netsim.Context, p *netsim.Packet, t netsim.Train) (netsim.Verdict, bool) {
	if !h.bc.Family.Sees(p.IPv6) {
		return netsim.VerdictContinue, true
	}
	if ctx.Tracing() || ctx.DryRun() {
		return netsim.Verdict{}, false
	}
	if h.train == nil {
		h.train = new(nftTrain)
	}
	tr := h.train
	nftFromNetsim(&tr.mid, p, ctx, h.bc.Priority)
	tr.last = tr.mid
	tr.mid.TCPFlags, tr.mid.Len = t.Flags, t.Len
	tr.last.Len = t.LastLen
	v, ok := h.e.PeekTrain(nftEnv{ctx}, h.bc, nftemu.TrainShape{P: &tr.mid, N: t.Segments - 1}, nftemu.TrainShape{P: &tr.last, N: 1}, &tr.stash)
	if !ok || v.Decided() {
		return netsim.Verdict{}, false
	}
	p.Mark = tr.mid.Mark
	return netsim.VerdictContinue, true
}

// CommitTrain implements netsim.TrainHandler.
func (h *nftHandler) CommitTrain() {
	if h.train != nil {
		h.e.CommitTrain(&h.train.stash)
	}
}

// Handle implements netsim.Handler.
func (h *nftHandler) Handle(ctx *netsim.Context, p *netsim.Packet) netsim.Verdict {
	if !h.bc.Family.Sees(p.IPv6) {
		return netsim.VerdictContinue
	}
	var tr *nftemu.Trace
	if ctx.Tracing() {
		tr = &nftemu.Trace{}
	}
	q := &h.q
	nftFromNetsim(q, p, ctx, h.bc.Priority)
	v := h.e.RunChain(nftEnv{ctx}, h.bc, q, tr)
	if tr != nil {
		traceNFT(ctx, tr)
	}
	p.Mark = q.Mark
	if p.Conn != nil && !ctx.DryRun() {
		p.Conn.Mark = q.CT.Mark
	}
	if !v.Decided() {
		return netsim.VerdictContinue
	}
	d := engineNAT
	switch v.Verdict {
	case nftemu.Drop:
		d = engineDrop
	case nftemu.Reject:
		d = engineReject
	case nftemu.Unknown:
		d = engineUnknown
	}
	if d == engineNAT && !v.HasNAT {
		return netsim.VerdictContinue
	}
	n := &v.NAT
	return netsimVerdict(d, v.Reject, netsimNAT(n.Kind, n.Addr, n.Port, n.PortMax, n.Random, n.RandomFully), v.Reason, "statement")
}

// traceNFT copies the evaluator's rule and policy steps into the packet's netsim trace.
func traceNFT(ctx *netsim.Context, tr *nftemu.Trace) {
	for _, s := range tr.Steps {
		ts := netsim.TraceStep{Kind: netsim.StepRule, Table: s.Family + " " + s.Table, Chain: s.Chain, Line: s.Line,
			Rule: s.Rule, Verdict: s.Verdict, Detail: joinDetail(s.Element, s.Detail)}
		switch s.Kind {
		case nftemu.StepRule:
			m := s.Matched
			ts.Matched = &m
			if s.Handle != 0 {
				// The line is one in some transaction's text; the handle names the rule
				// as `nft -a list ruleset` shows it.
				ts.Line = 0
				ts.Rule += fmt.Sprintf(" # handle %d", s.Handle)
			}
		case nftemu.StepPolicy:
			ts.Rule, ts.Verdict = "policy "+s.Verdict, s.Verdict
		case nftemu.StepNote:
			ts.Kind = netsim.StepNote
		default:
			continue
		}
		ctx.Trace(ts)
	}
}

// joinDetail is a trace step's detail: the element that matched, then the rest.
func joinDetail(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return "element " + a
	}
	return "element " + a + "; " + b
}

// nftFromNetsim builds the evaluator's view of a netsim packet in q, field by field
// like fromNetsim (q is the handler's, on the heap: see conntrackInto).
func nftFromNetsim(q *nftemu.Packet, p *netsim.Packet, ctx *netsim.Context, prio int) {
	q.Proto, q.Src, q.Dst, q.SrcPort, q.DstPort = p.Proto, p.Src, p.Dst, p.SrcPort, p.DstPort
	q.TCPFlags, q.ICMPType, q.ICMPCode, q.TTL = p.TCPFlags, p.ICMPType, p.ICMPCode, p.TTL
	q.InIface, q.OutIface, q.Mark, q.Len = p.InIface, p.OutIface, p.Mark, len(p.Data)
	conntrackInto((*ctView)(&q.CT), p, ctx, prio < netfilter.PriorityConntrack) // a chain before conntrack's lookup
}
