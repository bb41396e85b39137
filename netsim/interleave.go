package netsim

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
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
	// cluster network on the node's uplink (PREROUTING), or from Pod.
	Host bool
	// Pod, when set, sends it from this pod of the node, in at its bridge port
	// (PREROUTING). A hostNetwork pod sends from the host stack.
	Pod *Pod
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
	ch, pickStep := n.interleavingChoosers(il)
	fl, err := n.parseFlights(pkts)
	if err != nil {
		return nil, err
	}
	res, _, err := n.sendTogether(fl, ch, stepper(il, pickStep))
	return res, err
}

// stepper returns the schedule il asks for: the packet taking each step (pickStep, when
// set, picks it at random).
func stepper(il Interleaving, pickStep chooser) func(step int, runnable []int) (int, error) {
	return func(step int, runnable []int) (int, error) {
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
	}
}

// interleavingChoosers returns the chooser of the handlers' choices and, for a random
// interleaving, of the steps (nil: il.Steps says).
func (n *Node) interleavingChoosers(il Interleaving) (ch, pickStep chooser) {
	ch = randChooser{n.rng}
	if il.Random {
		rc := randChooser{rand.New(rand.NewPCG(il.Seed, il.Seed^0x9e3779b97f4a7c15))}
		ch, pickStep = rc, rc
	}
	return ch, pickStep
}

// flight is one packet of a set in flight together, parsed, with where it comes from.
type flight struct {
	pk   *Packet
	src  queueSource // fromUplink, fromPort (src.port) or fromHost
	live bool        // carry out the packet's fate (send it on) as for real traffic
}

// parseFlights parses the packets of SendTogether (copies: NAT rewrites a packet in place).
func (n *Node) parseFlights(pkts []InFlight) ([]flight, error) {
	fl := make([]flight, len(pkts))
	for i, f := range pkts {
		pk, err := ParsePacket(append([]byte(nil), f.Data...))
		if err != nil {
			return nil, fmt.Errorf("netsim: packet %d: %w", i, err)
		}
		fl[i] = flight{pk: pk, src: queueSource{kind: fromUplink}}
		switch {
		case f.Host || f.Pod != nil && f.Pod.hostNetwork:
			fl[i].src.kind = fromHost
		case f.Pod != nil:
			if f.Pod.node != n || f.Pod.port == nil {
				return nil, fmt.Errorf("netsim: packet %d: pod %s is not on node %s", i, f.Pod.key(), n.name)
			}
			fl[i].src = queueSource{kind: fromPort, port: f.Pod.port}
		}
		if f.Trace {
			fl[i].src.trace = &Trace{}
		}
	}
	return fl, nil
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
		fl, err := n.parseFlights(pkts)
		if err != nil {
			return out, err
		}
		pc := &pathChooser{forced: forced, prob: 1}
		res, steps, err := n.sendTogether(fl, pc, func(_ int, runnable []int) (int, error) {
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
func (n *Node) sendTogether(pkts []flight, ch chooser, next func(step int, runnable []int) (int, error)) ([]FlightResult, []int, error) {
	res := make([]FlightResult, len(pkts))
	for i, f := range pkts {
		res[i].Trace = f.src.trace
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
			go n.fly(pkts[i], gates[i], ch, &res[i])
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
func (n *Node) fly(f flight, g *flightGate, ch chooser, out *FlightResult) {
	defer func() {
		if p := recover(); p != nil {
			g.stopped <- flightStop{idx: g.idx, done: true, panic: p}
		}
	}()
	pk := f.pk
	env := &penv{ch: ch, trace: out.Trace, gate: g}
	var eg egress
	switch f.src.kind {
	case fromHost, fromHostLo:
		eg = n.output(pk, env)
	case fromPort:
		eg = n.ingress(pk, n.bridge, f.src.port, env)
	default:
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
	if f.live {
		n.execute(eg, out.Trace, env.t)
	}
	g.stopped <- flightStop{idx: g.idx, done: true}
}

// Together says which packets of a node's live traffic to hold so that they are in
// flight together (see Node.HoldTogether).
type Together struct {
	// Count is how many packets to gather (0: 2). They run together as soon as the
	// last arrives.
	Count int
	// Match selects the packets to gather, as they enter the node's datapath (before
	// any hook). Nil gathers every packet.
	Match func(p *Packet) bool
	// Window is how long, on the network's clock, the first packet held waits for the
	// others: when it has passed, the packets gathered so far run together (0: 1 ms).
	// Packets that do not arrive within it were not in flight together. On a manual
	// clock the window passes when the clock is moved (dns.RunOnClock does it when
	// the simulation is quiet).
	Window time.Duration
	// Interleaving is the order of their steps, as for SendTogether.
	Interleaving Interleaving
}

// Gathering is a node's hold on its next packets (Node.HoldTogether).
type Gathering struct {
	n        *Node
	spec     Together
	mu       sync.Mutex
	held     []flight
	timer    tcpip.Timer
	finished bool
	done     chan struct{}
	results  []FlightResult
	steps    []int
	err      error
}

// HoldTogether makes the node hold the next packets of its live traffic that
// t.Match selects, from any source (its pods, its host stack, the cluster network),
// until t.Count of them are held or t.Window has passed since the first, and then run
// them through the datapath together with t.Interleaving, as SendTogether does, and send
// each on as its way through the node ends: two queries of one socket can both be NEW
// and race to confirm, as on a real node's CPUs. It holds one set of packets; a call
// while another hold is armed replaces it (the packets it held run at once). The returned
// Gathering reports what became of them.
func (n *Node) HoldTogether(t Together) *Gathering {
	if t.Count <= 0 {
		t.Count = 2
	}
	if t.Window <= 0 {
		t.Window = time.Millisecond
	}
	g := &Gathering{n: n, spec: t, done: make(chan struct{})}
	if old := n.gather.Swap(g); old != nil {
		old.release()
	}
	return g
}

// Done is closed once the packets held have run.
func (g *Gathering) Done() <-chan struct{} { return g.done }

// Results returns what became of each packet held, in arrival order, and the packet
// that took each step (nil until Done).
func (g *Gathering) Results() ([]FlightResult, []int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.results, g.steps, g.err
}

// Cancel ends the hold: the packets held so far run together now (none: nothing runs).
func (g *Gathering) Cancel() { g.release() }

// hold takes a packet entering the datapath if the gathering wants it, and reports
// whether it did. The packet that completes the set runs them all, on the caller's
// goroutine.
func (g *Gathering) hold(pk *Packet, src queueSource) bool {
	if g.spec.Match != nil && !g.spec.Match(pk) {
		return false
	}
	g.mu.Lock()
	if g.finished {
		g.mu.Unlock()
		return false
	}
	cp, err := ParsePacket(append([]byte(nil), pk.Data...))
	if err != nil { // it parsed once already
		g.mu.Unlock()
		return false
	}
	cp.inPort = pk.inPort
	g.held = append(g.held, flight{pk: cp, src: src, live: true})
	if len(g.held) == 1 {
		g.timer = g.n.cluster.clock.AfterFunc(g.spec.Window, g.release)
	}
	full := len(g.held) >= g.spec.Count
	g.mu.Unlock()
	if full {
		g.release()
	}
	return true
}

// release runs the packets held so far together, once.
func (g *Gathering) release() {
	g.n.gather.CompareAndSwap(g, nil)
	g.mu.Lock()
	if g.finished {
		g.mu.Unlock()
		return
	}
	g.finished = true
	if g.timer != nil {
		g.timer.Stop()
	}
	held := g.held
	g.mu.Unlock()
	var res []FlightResult
	var steps []int
	var err error
	if len(held) > 0 {
		ch, pickStep := g.n.interleavingChoosers(g.spec.Interleaving)
		strict := stepper(g.spec.Interleaving, pickStep)
		res, steps, _ = g.n.sendTogether(held, ch, func(step int, runnable []int) (int, error) {
			i, e := strict(step, runnable)
			if e != nil {
				// A step the packets held cannot take (fewer came than the
				// interleaving names): the rest go on one at a time.
				if err == nil {
					err = e
				}
				return runnable[0], nil
			}
			return i, nil
		})
	}
	g.mu.Lock()
	g.results, g.steps, g.err = res, steps, err
	g.mu.Unlock()
	close(g.done)
}
