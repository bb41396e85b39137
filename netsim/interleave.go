package netsim

import (
	"fmt"
	"math/rand/v2"
)

// Packets in flight together in one node.
//
// A node's datapath normally takes one packet at a time through all its hooks. A real
// kernel processes packets on several CPUs at once: two packets of one new flow can both
// be between their conntrack hook (PREROUTING or OUTPUT, where each gets an unconfirmed
// entry and its own NAT decision) and their confirmation (the end of POSTROUTING or
// INPUT), and the second to confirm clashes with the first (Conntrack's
// confirmKernelLocked says what the kernel does then). SendTogether runs a small set of
// packets through a node with a chosen interleaving of those two steps;
// SendTogetherBranches enumerates the interleavings with their probabilities.

// InFlight is one packet of a set sent into a node's datapath together.
type InFlight struct {
	// Data is the packet, as BuildUDP and the other builders make it.
	Data []byte
	// Host makes the node's host stack send it (OUTPUT); otherwise it arrives from the
	// cluster network on the node's uplink (PREROUTING).
	Host bool
	// Trace records the packet's way through the node.
	Trace bool
}

// Interleaving says in which order packets in flight together take their steps. Each
// packet takes two: from its arrival to its conntrack confirmation (conntrack, NAT,
// filtering and routing), then the confirmation and the rest of its way. A packet that
// needs no confirmation (one of an entry already in the table, or dropped before) is
// done after its first step.
//
// The zero Interleaving is the default, one packet at a time in index order, as the
// datapath processes packets anyway.
type Interleaving struct {
	// Steps lists the index of the packet taking each step, in order: {0, 1, 0, 1} has
	// both packets pass NAT before either confirms. When the list runs out, the packets
	// not done finish one at a time in index order. A step of a packet already done is
	// an error.
	Steps []int
	// Random picks the packet taking each step at random, uniformly among those not
	// done, from a source seeded with Seed; the handlers' choices draw from it too.
	// Steps is ignored then.
	Random bool
	Seed   uint64
}

// FlightResult is what became of one packet of a set in flight together.
type FlightResult struct {
	// Verdict is how the packet's way through the node ended: FORWARD (out to a pod
	// or the cluster network), LOCAL (delivered to the host stack, or looped back),
	// DROP or STOLEN.
	Verdict string
	// Reason says why a packet was dropped.
	Reason string
	// Packet is the packet as it left (after NAT).
	Packet string
	// Trace is the packet's trace when InFlight.Trace asked for one.
	Trace *Trace
}

// Dropped reports whether the packet was dropped.
func (r FlightResult) Dropped() bool { return r.Verdict == "DROP" }

// FlightBranch is one way a set of packets in flight together can go: the interleaving
// (and handler choices) taken, with its probability.
type FlightBranch struct {
	Prob    float64
	Steps   []int // the packet that took each step
	Results []FlightResult
}

// SendTogether sends packets into the node's datapath together, interleaving their
// steps as il says, and returns what became of each. The packets are not sent on: their
// way ends at the node (the result says where they would go). Conntrack entries,
// counters (Conntrack().Stats) and the node's statistics change as for real traffic.
func (n *Node) SendTogether(pkts []InFlight, il Interleaving) ([]FlightResult, error) {
	var ch chooser = randChooser{n.rng}
	var pickStep chooser
	if il.Random {
		rc := randChooser{rand.New(rand.NewPCG(il.Seed, il.Seed^0x9e3779b97f4a7c15))}
		ch, pickStep = rc, rc
	}
	res, _, err := n.sendTogether(pkts, ch, func(step int, runnable []int) (int, error) {
		if pickStep != nil {
			return runnable[pickStep.pick(len(runnable))], nil
		}
		if step < len(il.Steps) {
			i := il.Steps[step]
			for _, r := range runnable {
				if r == i {
					return i, nil
				}
			}
			return 0, fmt.Errorf("netsim: interleaving step %d: packet %d is not in flight", step, i)
		}
		return runnable[0], nil
	})
	return res, err
}

// SendTogetherBranches enumerates every interleaving of a small set of packets in
// flight together, each step's packet picked uniformly among those not done (the odds
// of Interleaving.Random), together with every choice the handlers make, and returns
// each branch with its probability. Since a branch changes the node's state, build is
// called before each one and returns the node (fresh, or reset: Conntrack().Flush) and
// the packets. It fails after limit branches (0: 10,000).
func SendTogetherBranches(build func() (*Node, []InFlight), limit int) ([]FlightBranch, error) {
	if limit <= 0 {
		limit = 10000
	}
	var out []FlightBranch
	var forced []int
	for {
		if len(out) == limit {
			return out, fmt.Errorf("netsim: more than %d interleavings", limit)
		}
		n, pkts := build()
		pc := &pathChooser{forced: forced, prob: 1}
		res, steps, err := n.sendTogether(pkts, pc, func(_ int, runnable []int) (int, error) {
			return runnable[pc.pick(len(runnable))], nil
		})
		if err != nil {
			return out, err
		}
		out = append(out, FlightBranch{Prob: pc.prob, Steps: steps, Results: res})
		var more bool
		if forced, more = nextPath(pc.taken); !more {
			return out, nil
		}
	}
}

// flightGate holds one packet at its confirmation until the schedule lets it on.
type flightGate struct {
	stopped chan<- flightStop
	turn    chan struct{}
	idx     int
	waited  bool
}

// flightStop tells the scheduler a packet stopped: at its confirmation, or done.
type flightStop struct {
	idx   int
	done  bool
	panic any
}

// wait hands the node back while the packet waits for its turn. The node lock is
// released meanwhile, so the other packets in flight can take their steps.
func (g *flightGate) wait(n *Node) {
	if g.waited {
		return
	}
	g.waited = true
	n.mu.Unlock()
	g.stopped <- flightStop{idx: g.idx}
	<-g.turn
	n.mu.Lock()
}

// sendTogether runs the packets, asking next for the packet taking each step (among
// those not done, in index order). Only one packet runs at a time: the interleaving is
// exactly the schedule's.
func (n *Node) sendTogether(pkts []InFlight, ch chooser, next func(step int, runnable []int) (int, error)) ([]FlightResult, []int, error) {
	res := make([]FlightResult, len(pkts))
	parsed := make([]*Packet, len(pkts))
	for i, f := range pkts {
		pk, err := ParsePacket(append([]byte(nil), f.Data...)) // NAT rewrites the packet in place
		if err != nil {
			return nil, nil, fmt.Errorf("netsim: packet %d: %w", i, err)
		}
		parsed[i] = pk
		if f.Trace {
			res[i].Trace = &Trace{}
		}
	}
	stopped := make(chan flightStop)
	gates := make([]*flightGate, len(pkts))
	started := make([]bool, len(pkts))
	done := make([]bool, len(pkts))
	var steps []int
	for step := 0; ; step++ {
		var runnable []int
		for i := range pkts {
			if !done[i] {
				runnable = append(runnable, i)
			}
		}
		if len(runnable) == 0 {
			return res, steps, nil
		}
		i, err := next(step, runnable)
		if err != nil {
			// Let the packets waiting at their confirmation finish, in order.
			for _, j := range runnable {
				if started[j] {
					gates[j].turn <- struct{}{}
					<-stopped
				}
			}
			return nil, nil, err
		}
		steps = append(steps, i)
		if !started[i] {
			started[i] = true
			gates[i] = &flightGate{stopped: stopped, turn: make(chan struct{}), idx: i}
			go n.fly(parsed[i], pkts[i].Host, gates[i], ch, &res[i])
		} else {
			gates[i].turn <- struct{}{}
		}
		st := <-stopped
		if st.panic != nil {
			panic(st.panic)
		}
		done[i] = st.done
	}
}

// fly runs one packet in flight through the node, on its own goroutine, and reports
// its end to the scheduler.
func (n *Node) fly(pk *Packet, host bool, g *flightGate, ch chooser, out *FlightResult) {
	defer func() {
		if p := recover(); p != nil {
			g.stopped <- flightStop{idx: g.idx, done: true, panic: p}
		}
	}()
	env := &penv{ch: ch, trace: out.Trace, gate: g}
	var eg egress
	if host {
		eg = n.output(pk, env)
	} else {
		eg = n.ingress(pk, n.uplink, nil, env)
	}
	switch eg.kind {
	case egDrop:
		out.Verdict, out.Reason = "DROP", eg.reason
	case egLocal, egLoopback:
		out.Verdict = "LOCAL"
	case egStolen:
		out.Verdict = "STOLEN"
	default:
		out.Verdict = "FORWARD"
	}
	out.Packet = pk.String()
	g.stopped <- flightStop{idx: g.idx, done: true}
}
