package kubeproxy

import (
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
)

// emulatorTrain is an emulatorHandler's state between netsim's PeekTrain and
// CommitTrain calls (both under the node's lock).
type emulatorTrain struct {
	mid, last emulator.Packet
	stash     emulator.TrainStash
}

var _ netsim.TrainHandler = (*emulatorHandler)(nil)

// PeekTrain implements netsim.TrainHandler: a table answers for a train when its flow
// cache holds the traversal of both of the train's shapes (emulator.PeekTrain); a
// traced or dry-run packet, a table of the ruleset without such entries, the raw
// table's untracked case and an emulator shared under a lock do not answer.
func (h *emulatorHandler) PeekTrain(ctx *netsim.Context, p *netsim.Packet, t netsim.Train) (netsim.Verdict, bool) {
	e := h.e
	if p.IPv6 != (e.Family() == emulator.IPv6) {
		return netsim.VerdictContinue, true
	}
	if ctx.Tracing() || ctx.DryRun() || h.lock != nil {
		return netsim.Verdict{}, false
	}
	if !e.HasChainAt(h.table, h.hook) {
		if h.table == emulator.TableRaw && p.Conn != nil && p.CtState == netfilter.CtUntracked {
			return netsim.Verdict{}, false
		}
		return netsim.VerdictContinue, true
	}
	if h.train == nil {
		h.train = new(emulatorTrain)
	}
	tr := h.train
	fromNetsim(&tr.mid, p, ctx, h.table)
	tr.last = tr.mid
	tr.mid.TCPFlags, tr.mid.Len = t.Flags, t.Len
	tr.last.Len = t.LastLen
	v, ok := e.PeekTrain(h.table, h.hook, emulator.TrainShape{P: &tr.mid, N: t.Segments - 1}, emulator.TrainShape{P: &tr.last, N: 1}, &tr.stash)
	if !ok || v.Decided() {
		return netsim.Verdict{}, false
	}
	p.Mark = tr.mid.Mark
	return netsim.VerdictContinue, true
}

// CommitTrain implements netsim.TrainHandler.
func (h *emulatorHandler) CommitTrain() {
	if h.train != nil {
		h.e.CommitTrain(&h.train.stash)
	}
}
