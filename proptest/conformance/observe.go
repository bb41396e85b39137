package conformance

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proptest"
)

// Outcome classes: what the client of a flow sees.
const (
	Answered = "answered" // a pod (or a node's host network) answered: TCP connected, UDP replied
	Refused  = "refused"  // a RST or an ICMP error came back (from a rule, a node, or the pod itself)
	Dropped  = "dropped"  // nothing came back: the request or its answer was lost
	Closed   = "closed"   // the connection was accepted and closed without an answer (a proxy that terminates connections)
)

// What the answering backend saw as the source of the traffic.
const (
	SeenClient = "client" // the client's own address (for a node: any of the node's addresses)
	SeenNode   = "node"   // an address of another node, or of the client's node for a pod: masqueraded
	SeenOther  = "other"  // something else
)

// Outcome is one outcome of a flow as the suite compares them.
type Outcome struct {
	Class string
	// Backend answered (or, for a refusal, refused itself: its port was closed): "ns/name"
	// for a pod, "node:NAME" for a node's host network.
	Backend string
	// Seen classifies the source the backend saw (SeenClient, SeenNode, SeenOther).
	Seen string
	// Reason says why a flow was refused, dropped or closed.
	Reason string
}

func (o Outcome) String() string {
	s := o.Class
	if o.Backend != "" {
		s += " by " + o.Backend
	}
	if o.Seen != "" {
		s += " seeing " + o.Seen
	}
	if o.Reason != "" {
		s += " (" + o.Reason + ")"
	}
	return s
}

// key identifies an outcome for set membership (the reason does not count).
func (o Outcome) key() string {
	if o.Class != Answered {
		return o.Class
	}
	return o.Class + "|" + o.Backend + "|" + o.Seen
}

// Observation is what a flow got under one mode.
type Observation struct {
	// Possible are the outcomes the mode can give (the reference mode: every branch
	// of an all-branches probe and every attempt; other modes: their attempts).
	Possible []Outcome
	// Attempts are the outcomes of the flow's real attempts, in order.
	Attempts []Outcome
}

func (o Observation) String() string {
	var parts []string
	for _, p := range o.Possible {
		parts = append(parts, p.String())
	}
	return strings.Join(parts, "; ")
}

// has reports whether the observation allows an outcome: the same class, and for an
// answer the same backend and, unless ignoreSeen, the same view of the source.
func (o Observation) has(x Outcome, ignoreSeen bool) bool {
	for _, p := range o.Possible {
		if p.Class != x.Class {
			continue
		}
		if x.Class == Answered && (p.Backend != x.Backend || !ignoreSeen && p.Seen != x.Seen) {
			continue
		}
		return true
	}
	return false
}

// Classes returns the outcome classes an observation allows, sorted.
func (o Observation) Classes() []string {
	set := map[string]bool{}
	for _, p := range o.Possible {
		set[p.Class] = true
	}
	var out []string
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Only reports whether every outcome the observation allows has one of the classes.
func (o Observation) Only(classes ...string) bool {
	for _, p := range o.Possible {
		ok := false
		for _, c := range classes {
			ok = ok || p.Class == c
		}
		if !ok {
			return false
		}
	}
	return len(o.Possible) > 0
}

// HasClass reports whether the observation allows an outcome of the class.
func (o Observation) HasClass(class string) bool {
	for _, p := range o.Possible {
		if p.Class == class {
			return true
		}
	}
	return false
}

// AnsweredBy reports whether the observation allows an answer from backend.
func (o Observation) AnsweredBy(backend string) bool {
	for _, p := range o.Possible {
		if p.Class == Answered && p.Backend == backend {
			return true
		}
	}
	return false
}

func (o *Observation) add(x Outcome, attempt bool) {
	if attempt {
		o.Attempts = append(o.Attempts, x)
	}
	for _, p := range o.Possible {
		if p.key() == x.key() {
			return
		}
	}
	o.Possible = append(o.Possible, x)
}

// ObserveReference observes a flow in the reference world: every branch of an
// all-branches packet probe (where the first packet can go, with what the receiver
// would answer), then attempts connect probes (which also see whether the answer makes
// it back). Compare takes the branches of every flow first, before any attempt: an
// attempt pins its client under ClientIP affinity, and a mode's own first choice for a
// later flow may then be any endpoint, not the one the reference happened to pin.
func ObserveReference(w *proptest.World, f Flow, attempts int) (Observation, error) {
	o, err := observeBranches(w, f)
	if err != nil {
		return o, err
	}
	return o, observeAttempts(w, f, attempts, &o)
}

// lbSourcePorts is how many source ports a load-balancer flow's branches are taken
// from: the cloud load balancer picks a node by a hash of the 5-tuple, which all
// branches of one packet do not vary, and another mode's attempts come from other
// ports. With 64 ports every node of three is covered but for a chance of 5e-12.
const lbSourcePorts = 64

func observeBranches(w *proptest.World, f Flow) (Observation, error) {
	var o Observation
	ports := []uint16{0}
	if f.Kind == KindLoadBalancer {
		ports = ports[:0]
		for i := 0; i < lbSourcePorts; i++ {
			ports = append(ports, uint16(40000+i*97))
		}
	}
	for _, port := range ports {
		rs, err := w.Cluster.Probe(netsim.Probe{From: f.From, Proto: f.Proto, Dst: f.Dst, Src: f.Client, SrcPort: port, AllBranches: true})
		if err != nil {
			return o, err
		}
		for _, r := range rs {
			o.add(branchOutcome(w, f, r), false)
		}
	}
	return o, nil
}

func observeAttempts(w *proptest.World, f Flow, attempts int, o *Observation) error {
	for i := 0; i < attempts; i++ {
		x, err := probeAttempt(w, f)
		if err != nil {
			return err
		}
		o.add(x, true)
	}
	return nil
}

// Observe sends a flow's traffic attempts times (each from a new source port) in a
// mode's world. Modes whose proxy terminates connections on the node (userspace) are
// observed with real connections (World.Dial); the others with connect probes.
func Observe(w *proptest.World, f Flow, attempts int) (Observation, error) {
	var o Observation
	for i := 0; i < attempts; i++ {
		var x Outcome
		var err error
		if w.Semantics.Terminates {
			x, err = dialAttempt(w, f)
		} else {
			x, err = probeAttempt(w, f)
		}
		if err != nil {
			return o, err
		}
		o.add(x, true)
	}
	return o, nil
}

// branchOutcome turns one branch of an all-branches packet probe into the outcome a
// connection taking that branch would have.
func branchOutcome(w *proptest.World, f Flow, r netsim.ProbeResult) Outcome {
	switch r.Result {
	case netsim.ResultDelivered:
		who := backendOf(r.Pod, r.Node, r.External)
		if !r.Listening {
			return Outcome{Class: Refused, Backend: who, Reason: who + " does not listen on " + r.Addr.String()}
		}
		return Outcome{Class: Answered, Backend: who, Seen: seenClass(w, f, r.SeenSrc.Addr())}
	case netsim.ResultRefused:
		return Outcome{Class: Refused, Reason: r.Reason}
	}
	return Outcome{Class: Dropped, Reason: r.Reason}
}

func backendOf(pod, node, ext string) string {
	switch {
	case pod != "":
		return pod
	case ext != "":
		return "external:" + ext
	}
	return "node:" + node
}

// probeAttempt makes one connect probe.
func probeAttempt(w *proptest.World, f Flow) (Outcome, error) {
	r, err := w.Cluster.ProbeOne(netsim.Probe{From: f.From, Proto: f.Proto, Dst: f.Dst, Mode: netsim.ProbeConnect, Src: f.Client})
	if err != nil {
		return Outcome{}, fmt.Errorf("probe %s: %w", f, err)
	}
	switch r.Result {
	case netsim.ResultConnected, netsim.ResultReplied:
		return Outcome{Class: Answered, Backend: backendOf(r.Pod, r.Node, r.External), Seen: seenClass(w, f, r.SeenSrc.Addr())}, nil
	case netsim.ResultRefused:
		return Outcome{Class: Refused, Backend: r.Pod, Reason: r.Reason}, nil
	}
	return Outcome{Class: Dropped, Reason: r.Reason}, nil
}

// dialAttempt makes one real connection.
func dialAttempt(w *proptest.World, f Flow) (Outcome, error) {
	d, err := w.Dial(f.From, f.Proto, f.Dst, 0)
	if err != nil {
		return Outcome{}, fmt.Errorf("dial %s: %w", f, err)
	}
	switch d.Result {
	case netsim.ResultConnected, netsim.ResultReplied:
		return Outcome{Class: Answered, Backend: backendOf(d.Pod, d.Node, ""), Seen: seenClass(w, f, d.Seen)}, nil
	case netsim.ResultRefused:
		return Outcome{Class: Refused, Reason: d.Reason}, nil
	case proptest.ResultClosed:
		return Outcome{Class: Closed, Reason: d.Reason}, nil
	}
	return Outcome{Class: Dropped, Reason: d.Reason}, nil
}

// seenClass classifies the source a backend saw.
func seenClass(w *proptest.World, f Flow, seen netip.Addr) string {
	seen = seen.Unmap()
	if seen == f.Client {
		return SeenClient
	}
	if !seen.IsValid() {
		return SeenOther
	}
	for _, n := range w.Cluster.Nodes() {
		if n.IsLocalAddr(seen) {
			if n.Name() == f.Node && nodeSource(f) {
				return SeenClient
			}
			return SeenNode
		}
	}
	return SeenOther
}

func nodeSource(f Flow) bool { return strings.HasPrefix(f.From, "node:") }
