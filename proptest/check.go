package proptest

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
)

// Invariant names, as violations report them.
const (
	InvClusterIP      = "cluster-ip-reachability"
	InvNoEndpoints    = "no-endpoints-refused"
	InvETPLocal       = "external-traffic-policy-local"
	InvNodePorts      = "node-port-addresses"
	InvSourceRanges   = "load-balancer-source-ranges"
	InvNoVIP          = "no-vip-for-headless-and-external-name"
	InvAffinity       = "client-ip-affinity"
	InvDeletedPod     = "deleted-pod-unreachable"
	InvObjectsInvalid = "objects-valid"
)

// Checker is one invariant with its check.
type Checker struct {
	Name string
	// Doc says what the invariant is.
	Doc string
	// Mutates says whether the check changes the world (advances the clock, deletes
	// pods): such checks run last.
	Mutates bool
	Check   func(*World) error
}

// Checkers are every invariant, in the order CheckAll runs them: read-only probes
// first, then the checks that advance the clock or delete pods.
var Checkers = []Checker{
	{Name: InvNoVIP, Doc: "headless and ExternalName services get no VIP: no cluster IP in the API, traffic to their pods is not translated, and an address a service gave up answers nothing", Check: CheckNoVIP},
	{Name: InvClusterIP, Doc: "every pod and node reaches every cluster IP port that has endpoints and lands on a ready endpoint of that service and port (serving terminating ones when none is ready; the node's own with internalTrafficPolicy Local), every such endpoint with some probability", Check: CheckClusterIPs},
	{Name: InvNoEndpoints, Doc: "a service port without endpoints is refused (ICMP port unreachable) at its cluster IP, external IPs, node ports and load-balancer IPs, as kube-proxy's REJECT rules do", Check: CheckNoEndpoints},
	{Name: InvNodePorts, Doc: "a NodePort answers on every node address that --nodeport-addresses allows (and on 127.0.0.1 where localhost NodePorts apply), and on no other", Check: CheckNodePorts},
	{Name: InvETPLocal, Doc: "externalTrafficPolicy Local keeps the client's source IP and never crosses nodes: outside traffic to a node port or load-balancer IP lands on an endpoint of the node it entered, seeing the client's address, or is dropped there", Check: CheckExternalTrafficLocal},
	{Name: InvSourceRanges, Doc: "loadBalancerSourceRanges are enforced: a source outside them never reaches a load-balancer IP's endpoints; one inside does", Check: CheckSourceRanges},
	{Name: InvAffinity, Doc: "ClientIP session affinity keeps a client on one backend within its timeout (virtual clock), and lets it go after", Mutates: true, Check: CheckAffinity},
	{Name: InvDeletedPod, Doc: "after a pod is deleted, the proxies sync and kube-proxy's conntrack cleanup runs, no new connection reaches the deleted pod's address (known exception: StaleUDPException)", Mutates: true, Check: CheckDeletedPods},
}

// CheckAll runs every checker on the world, in order, and returns their violations
// together (a Violations error), or nil.
func CheckAll(w *World) error { return Check(w, Checkers...) }

// Check runs the given checkers in order and joins their violations.
func Check(w *World, cs ...Checker) error {
	var all Violations
	var errs []error
	for _, c := range cs {
		err := c.Check(w)
		var vs Violations
		switch {
		case err == nil:
		case errors.As(err, &vs):
			all = append(all, vs...)
		default:
			errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
		}
	}
	if len(errs) > 0 {
		if len(all) > 0 {
			errs = append(errs, all)
		}
		return errors.Join(errs...)
	}
	return all.err()
}

// CheckerNamed returns the named checker.
func CheckerNamed(name string) (Checker, bool) {
	for _, c := range Checkers {
		if c.Name == name {
			return c, true
		}
	}
	return Checker{}, false
}

// ProbeCheck is one probe held to an expectation: the building block of the checkers,
// for writing invariants of your own.
type ProbeCheck struct {
	// Invariant names the rule in violations.
	Invariant string
	// Service is the service port the probe is about (optional: it names the service in
	// violations and says what an unexpected address is).
	Service *PortView
	// Probe is sent as a dry run following every branch when AllBranches is set (then
	// every outcome must meet the expectation), else once for real.
	Probe  netsim.Probe
	Expect Expect
	// Cover asks that every expected endpoint be reached by some branch.
	Cover bool
	// KeepsSource, when valid, is the address the endpoint must see as the source.
	KeepsSource netip.Addr
	// To is how a scenario reproduction names the destination (default: the address;
	// "loadbalancer:NS/NAME:PORT" for a load-balancer IP).
	To string
}

// CheckProbe runs one probe check and returns its Violations, or nil.
func (w *World) CheckProbe(pc ProbeCheck) error {
	r := &run{w: w, inv: pc.Invariant, to: pc.To, view: pc.Service}
	svc := ""
	if pc.Service != nil {
		svc = pc.Service.Key()
	}
	r.landing(svc, pc.Probe, pc.Expect, pc.Cover, pc.KeepsSource)
	return r.result()
}

// run collects the violations of one invariant.
type run struct {
	w   *World
	inv string
	vs  Violations
	// to, when set, is how reproductions name the destination (a load-balancer target).
	to string
	// view is the service port being checked (for saying what an unexpected address is).
	view *PortView
}

// whatIs says what an address is to the service port being checked: one of its
// endpoints in another condition, or a deleted pod's.
func (r *run) whatIs(a netip.AddrPort) string {
	if r.view != nil {
		for _, ep := range r.view.Endpoints {
			if ep.Addr == a {
				return fmt.Sprintf(" (%s is an endpoint of the service: %s)", a, ep)
			}
		}
	}
	if k, ok := r.w.DeletedPods[a.Addr()]; ok {
		return fmt.Sprintf(" (%s was deleted pod %s's)", a.Addr(), k)
	}
	return ""
}

func (r *run) result() error { return r.vs.err() }

// probe runs a probe; with all it follows every branch (a dry run).
func (r *run) probe(p netsim.Probe, all bool) ([]netsim.ProbeResult, error) {
	if all {
		p.AllBranches = true
		p.Mode = netsim.ProbePacket
	}
	rs, err := r.w.Cluster.Probe(p)
	if err != nil {
		return nil, fmt.Errorf("probe %s -> %s: %w", p.From, p.Dst, err)
	}
	return rs, nil
}

// fail records a violation of exp (explained by expected). For a dry-run probe the
// trace is taken by running it again with tracing and picking the outcome like bad.
func (r *run) fail(svc string, p netsim.Probe, exp Expect, want *Want, expected string, rs []netsim.ProbeResult, bad *netsim.ProbeResult) {
	v := &Violation{Invariant: r.inv, Service: svc, Probe: p, Expected: expected, Got: describe(rs), Repro: r.repro(p, exp, want)}
	if bad != nil {
		if bad.Trace != nil {
			v.Trace = bad.Trace
		} else if p.AllBranches || p.Mode == netsim.ProbePacket && len(rs) == 1 && rs[0].Probability == 1 {
			tp := p
			tp.Trace = true
			if trs, err := r.w.Cluster.Probe(tp); err == nil {
				for i := range trs {
					if sameOutcome(trs[i].Outcome, bad.Outcome) {
						v.Trace = trs[i].Trace
						break
					}
				}
			}
		}
	}
	r.vs = append(r.vs, v)
}

// repro is probeRepro for the service port being checked: with its session affinity,
// and the world's pods that are not among want's.
func (r *run) repro(p netsim.Probe, exp Expect, want *Want) []Action {
	sticky := r.view != nil && r.view.Service.Spec.SessionAffinity == corev1.ServiceAffinityClientIP
	var others []string
	if sticky {
		expected := map[string]bool{}
		for _, pod := range want.Reaches {
			expected[pod] = true
		}
		for _, pod := range r.w.Cluster.Store().ListPods() {
			if key := pod.Namespace + "/" + pod.Name; !expected[key] {
				others = append(others, key)
			}
		}
		sort.Strings(others)
	}
	return probeRepro(p, r.to, exp, want, sticky, others)
}

func sameOutcome(a, b netsim.Outcome) bool {
	return a.Result == b.Result && a.Pod == b.Pod && a.Node == b.Node && a.Addr == b.Addr && a.External == b.External
}

// landing checks probe outcomes against an expectation: every outcome is delivered to
// an expected endpoint (the pod at its address), or, when none is expected, has the
// expected verdict. Under faults, lost packets are tolerated. With cover, every
// expected endpoint must be reached by some outcome. A valid client means the endpoint
// must see that address as the source.
func (r *run) landing(svc string, p netsim.Probe, exp Expect, cover bool, client netip.Addr) {
	exp = adjust(r.w.Semantics, exp)
	all := p.AllBranches
	want := wantFor(exp)
	if client.IsValid() && len(exp.Endpoints) > 0 {
		want.SeenSource = "client"
	}
	rs, err := r.probe(p, all)
	if err != nil {
		r.vs = append(r.vs, &Violation{Invariant: r.inv, Service: svc, Probe: p, Expected: exp.String(), Got: err.Error()})
		return
	}
	if all {
		p.AllBranches, p.Mode = true, netsim.ProbePacket
	}
	faulty := r.w.Faulty()
	reached := map[netip.AddrPort]bool{}
	for i := range rs {
		o := rs[i]
		if (faulty || exp.MayDrop) && o.Result == netsim.ResultDropped {
			continue
		}
		if len(exp.Endpoints) == 0 {
			if !verdictIs(o.Outcome, exp.Verdict) {
				r.fail(svc, p, exp, want, exp.String()+r.whatIs(o.Addr), rs, &rs[i])
				return
			}
			continue
		}
		ep, ok := endpointAt(exp, o.Addr)
		switch {
		case !ok || !delivered(o.Result):
			if ok && ep.Pod == "" && o.Result == netsim.ResultDropped {
				reached[ep.Addr] = true // an endpoint without a running pod: lost there
				continue
			}
			r.fail(svc, p, exp, want, exp.String()+r.whatIs(o.Addr), rs, &rs[i])
			return
		case o.Pod != ep.Pod:
			r.fail(svc, p, exp, want, exp.String()+fmt.Sprintf(" (address %s belongs to %s)", ep.Addr, orNone(ep.Pod)), rs, &rs[i])
			return
		case client.IsValid() && o.SeenSrc.Addr() != client:
			r.fail(svc, p, exp, want, fmt.Sprintf("%s; the endpoint must see the client's address %s", exp, client), rs, &rs[i])
			return
		}
		reached[ep.Addr] = true
	}
	if cover && r.w.Semantics.Branches && !faulty && len(exp.Endpoints) > 0 {
		var missed []string
		for _, ep := range exp.Endpoints {
			if !reached[ep.Addr] {
				missed = append(missed, ep.String())
			}
		}
		if len(missed) > 0 {
			r.vs = append(r.vs, &Violation{Invariant: r.inv, Service: svc, Probe: p,
				Expected: exp.String() + ", each with some probability",
				Got:      describe(rs) + "\nnever chosen: " + strings.Join(missed, "; "),
				Repro:    r.repro(p, exp, want)})
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "no running pod"
	}
	return s
}

func delivered(result string) bool {
	switch result {
	case netsim.ResultDelivered, netsim.ResultConnected, netsim.ResultReplied:
		return true
	}
	return false
}

// verdictIs reports whether an outcome has the verdict: "refused" (also a packet
// delivered to a node port nobody listens on, which the node refuses), "dropped",
// "refused-or-dropped", or "not-delivered" (no pod got it and nothing listening
// answered: refused, dropped, or delivered to a host port nobody listens on).
func verdictIs(o netsim.Outcome, verdict string) bool {
	switch verdict {
	case "refused":
		return o.Result == netsim.ResultRefused || hostRefuses(o)
	case "dropped":
		return o.Result == netsim.ResultDropped
	case "refused-or-dropped":
		return o.Result == netsim.ResultRefused || hostRefuses(o) || o.Result == netsim.ResultDropped
	case "not-delivered":
		return !delivered(o.Result) || o.Pod == "" && !o.Listening
	}
	return false
}

// hostRefuses reports whether a single packet reached a node's own stack where nothing
// listens: the node answers it with a RST or an ICMP port unreachable.
func hostRefuses(o netsim.Outcome) bool {
	return o.Result == netsim.ResultDelivered && o.Pod == "" && o.External == "" && o.Node != "" && !o.Listening
}

func endpointAt(exp Expect, a netip.AddrPort) (Endpoint, bool) {
	for _, ep := range exp.Endpoints {
		if ep.Addr == a {
			return ep, true
		}
	}
	return Endpoint{}, false
}

// clientSources are the pods and nodes that can send to a family, on nodes whose proxy
// is current.
func (w *World) clientSources(v6 bool) []Source {
	var out []Source
	for _, s := range append(w.PodSources(), w.NodeSources()...) {
		if _, ok := s.Addr(v6); ok && !w.paused[s.Node] {
			out = append(out, s)
		}
	}
	return out
}

// CheckClusterIPs: every pod and node reaches every cluster IP port that has endpoints
// and lands on an endpoint kube-proxy would pick (ready, else serving terminating; with
// internalTrafficPolicy Local the source node's own, or dropped when it has none),
// every one of them with some probability.
func CheckClusterIPs(w *World) error {
	r := &run{w: w, inv: InvClusterIP}
	for _, v := range w.ServicePorts() {
		r.view = &v
		if !v.ClusterIP.IsValid() || !v.HasEndpoints() {
			continue
		}
		dst := addrPort(v.ClusterIP, v.Port.Port)
		for _, src := range w.clientSources(v.V6()) {
			p := netsim.Probe{From: src.From, Proto: protoNum(v.Port.Protocol), Dst: dst, AllBranches: true}
			r.landing(v.Key(), p, v.Internal(src.Node), true, netip.Addr{})
		}
		// External IPs from inside the cluster: pods are short-circuited to the cluster
		// endpoints, nodes are masqueraded to them.
		if v.InternalTrafficLocal() {
			continue
		}
		for _, a := range v.ExternalIPs {
			for _, src := range w.clientSources(v.V6()) {
				if !strings.HasPrefix(src.From, "pod:") && v.ExternalTrafficLocal() {
					continue
				}
				p := netsim.Probe{From: src.From, Proto: protoNum(v.Port.Protocol), Dst: addrPort(a, v.Port.Port), AllBranches: true}
				exp := Expect{Endpoints: v.ClusterEndpoints(), Reason: "the cluster endpoints (external IP from inside the cluster)"}
				if !w.Semantics.ShortCircuit {
					exp = v.External(src.Node)
				}
				r.landing(v.Key(), p, exp, true, netip.Addr{})
			}
		}
	}
	return r.result()
}

// CheckNoEndpoints: a service port without endpoints is refused as kube-proxy's REJECT
// rules refuse it: at the cluster IP from pods and nodes, at external IPs from pods
// (the rule sits in filter INPUT and FORWARD, so a node's own packets to an external IP
// are routed on instead), at the node ports from outside, and at load-balancer IPs (where a load balancer with
// externalTrafficPolicy Local may instead find no healthy node and drop).
func CheckNoEndpoints(w *World) error {
	r := &run{w: w, inv: InvNoEndpoints}
	for _, v := range w.ServicePorts() {
		r.view = &v
		if !v.ClusterIP.IsValid() || v.HasEndpoints() {
			continue
		}
		proto := protoNum(v.Port.Protocol)
		refused := Expect{Verdict: "refused", Reason: "the service port has no endpoints"}
		for _, src := range w.clientSources(v.V6()) {
			r.landing(v.Key(), netsim.Probe{From: src.From, Proto: proto, Dst: addrPort(v.ClusterIP, v.Port.Port), AllBranches: true}, refused, false, netip.Addr{})
			// External IPs are rejected in filter INPUT and FORWARD: from pods, not from
			// the node itself (OUTPUT), whose packet is routed on as kube-proxy leaves it.
			if !strings.HasPrefix(src.From, "pod:") {
				continue
			}
			for _, a := range v.ExternalIPs {
				r.landing(v.Key(), netsim.Probe{From: src.From, Proto: proto, Dst: addrPort(a, v.Port.Port), AllBranches: true}, refused, false, netip.Addr{})
			}
		}
		if v.V6() {
			continue
		}
		for _, ext := range w.ExternalSources() {
			if v.Port.NodePort != 0 {
				for _, n := range w.Cluster.Nodes() {
					if w.killed[n.Name()] || w.paused[n.Name()] {
						continue
					}
					r.landing(v.Key(), netsim.Probe{From: ext.From, Proto: proto, Dst: addrPort(n.IP(), v.Port.NodePort), AllBranches: true}, refused, false, netip.Addr{})
				}
			}
			lb := refused
			if v.ExternalTrafficLocal() {
				lb = Expect{Verdict: "refused-or-dropped", Reason: "no endpoints (a load balancer with externalTrafficPolicy Local finds no healthy node and may drop)"}
			}
			for _, a := range append(append([]netip.Addr(nil), v.LoadBalancerIPs...), v.ProxiedLoadBalancerIPs...) {
				if !inRanges(v.Service, ext.Addrs[0]) {
					continue
				}
				r.to = lbTarget(v)
				r.landing(v.Key(), netsim.Probe{From: ext.From, Proto: proto, Dst: addrPort(a, v.Port.Port), AllBranches: true}, lb, false, netip.Addr{})
				r.to = ""
			}
		}
	}
	return r.result()
}

// nodePortAddrs resolves --nodeport-addresses for a node and family: whether addr is
// allowed.
func (w *World) nodePortAllowed(n *cluster.Node, addr netip.Addr) bool {
	fam := corev1.IPv4Protocol
	if addr.Is6() {
		fam = corev1.IPv6Protocol
	}
	cfg := proxy.NodeConfig{Name: n.Name(), IPs: n.IPs(), NodePortAddresses: w.Case.Cluster.NodePortAddresses}
	for _, i := range n.Interfaces() {
		for _, p := range i.Addrs {
			cfg.Addresses = append(cfg.Addresses, p.Addr())
		}
	}
	npa, err := cfg.ResolveNodePortAddresses(fam)
	if err != nil {
		return false
	}
	if addr.IsLoopback() {
		return fam == corev1.IPv4Protocol && w.Semantics.LocalhostNodePorts && cfg.LocalhostNodePortsEnabled() && (npa.MatchAll() || npa.ContainsIPv4Loopback())
	}
	if npa.MatchAll() {
		return true
	}
	for _, p := range npa.CIDRs() {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// CheckNodePorts: a NodePort answers on every node address --nodeport-addresses allows,
// from outside (external hosts; other nodes), landing where the external traffic
// policy says, and on 127.0.0.1 from the node itself where localhost NodePorts apply;
// on other addresses no pod answers.
func CheckNodePorts(w *World) error {
	r := &run{w: w, inv: InvNodePorts}
	for _, v := range w.ServicePorts() {
		r.view = &v
		if v.Port.NodePort == 0 || !v.HasEndpoints() {
			continue
		}
		proto := protoNum(v.Port.Protocol)
		for _, n := range w.Cluster.Nodes() {
			if w.killed[n.Name()] || w.paused[n.Name()] {
				continue
			}
			var srcs []Source
			if !v.V6() {
				srcs = append(srcs, w.ExternalSources()...)
			}
			for _, s := range w.NodeSources() {
				if s.Node != n.Name() {
					srcs = append(srcs, s)
				}
			}
			for _, a := range n.IPs() {
				if a.Is6() != v.V6() {
					continue
				}
				dst := addrPort(a, v.Port.NodePort)
				exp := v.External(n.Name())
				if !w.nodePortAllowed(n, a) {
					exp = Expect{Verdict: "not-delivered", Reason: fmt.Sprintf("--nodeport-addresses %v does not allow %s", w.Case.Cluster.NodePortAddresses, a)}
				}
				for _, src := range srcs {
					if _, ok := src.Addr(v.V6()); !ok {
						continue
					}
					r.landing(v.Key(), netsim.Probe{From: src.From, Proto: proto, Dst: dst, AllBranches: true}, exp, false, netip.Addr{})
				}
			}
			if v.V6() {
				continue
			}
			lo := netip.MustParseAddr("127.0.0.1")
			exp := Expect{Endpoints: v.ClusterEndpoints(), Reason: "the cluster endpoints (localhost NodePort)"}
			if !w.nodePortAllowed(n, lo) {
				exp = Expect{Verdict: "not-delivered", Reason: fmt.Sprintf("localhost NodePorts do not apply (--nodeport-addresses %v, %s mode)", w.Case.Cluster.NodePortAddresses, w.Semantics.Name)}
			}
			r.landing(v.Key(), netsim.Probe{From: "node:" + n.Name(), Proto: proto, Dst: addrPort(lo, v.Port.NodePort), AllBranches: true}, exp, false, netip.Addr{})
		}
	}
	return r.result()
}

// CheckExternalTrafficLocal: with externalTrafficPolicy Local, traffic from outside to
// a node port lands on an endpoint of that node, seeing the client's own address, or is
// dropped there when the node has none; traffic to a load-balancer IP lands on an
// endpoint of the node the load balancer handed it to, seeing the client's address.
func CheckExternalTrafficLocal(w *World) error {
	r := &run{w: w, inv: InvETPLocal}
	for _, v := range w.ServicePorts() {
		r.view = &v
		if !v.ExternalTrafficLocal() || !v.HasEndpoints() || v.V6() {
			continue
		}
		proto := protoNum(v.Port.Protocol)
		for _, ext := range w.ExternalSources() {
			client := ext.Addrs[0]
			if v.Port.NodePort != 0 {
				for _, n := range w.Cluster.Nodes() {
					if w.killed[n.Name()] || w.paused[n.Name()] || !w.nodePortAllowed(n, n.IP()) {
						continue
					}
					p := netsim.Probe{From: ext.From, Proto: proto, Dst: addrPort(n.IP(), v.Port.NodePort), AllBranches: true}
					r.landing(v.Key(), p, v.External(n.Name()), false, client)
				}
			}
			if !inRanges(v.Service, client) {
				continue
			}
			lbs := append(append([]netip.Addr(nil), v.LoadBalancerIPs...), v.ProxiedLoadBalancerIPs...)
			for _, a := range lbs {
				if len(v.ProxiedLoadBalancerIPs) > 0 && !w.allNodePortsAllowed() {
					continue // the load balancer hands traffic to node ports some nodes do not answer on
				}
				p := netsim.Probe{From: ext.From, Proto: proto, Dst: addrPort(a, v.Port.Port), AllBranches: true, Trace: true}
				healthy := false
				for _, n := range w.Cluster.Nodes() {
					if !w.killed[n.Name()] && len(v.filter(func(e Endpoint) bool { return e.Ready && e.Node == n.Name() })) > 0 {
						healthy = true
					}
				}
				if !healthy {
					continue // no node passes the health check: the load balancer drops
				}
				r.landingLB(v, p, client)
			}
		}
	}
	return r.result()
}

// landingLB checks load-balancer traffic under externalTrafficPolicy Local: each
// outcome lands on a local endpoint of the node the load balancer chose.
func (r *run) landingLB(v PortView, p netsim.Probe, client netip.Addr) {
	r.to = lbTarget(v)
	defer func() { r.to = "" }()
	var union []Endpoint
	for _, n := range r.w.Cluster.Nodes() {
		if !r.w.killed[n.Name()] {
			union = append(union, v.filter(func(e Endpoint) bool { return e.Ready && e.Node == n.Name() })...)
		}
	}
	uexp := Expect{Endpoints: union, Reason: "the ready endpoints of the nodes the load balancer may choose"}
	want := wantFor(uexp)
	want.SeenSource = "client"
	rs, err := r.probe(p, true)
	if err != nil {
		r.vs = append(r.vs, &Violation{Invariant: r.inv, Service: v.Key(), Probe: p, Expected: "delivered", Got: err.Error()})
		return
	}
	p.AllBranches, p.Mode = true, netsim.ProbePacket
	for i := range rs {
		o := rs[i]
		if r.w.Faulty() && o.Result == netsim.ResultDropped {
			continue
		}
		node := ingressNode(o.Trace)
		exp := adjust(r.w.Semantics, v.External(node))
		if len(exp.Endpoints) == 0 && verdictIs(o.Outcome, exp.Verdict) {
			// The load balancer's health check is per service: a node with a ready
			// endpoint of another port of the service passes it, and drops this port's
			// traffic.
			continue
		}
		ep, ok := endpointAt(exp, o.Addr)
		switch {
		case len(exp.Endpoints) == 0 || !ok || !delivered(o.Result) || o.Pod != ep.Pod:
			r.fail(v.Key(), p, uexp, want, fmt.Sprintf("the load balancer handed the packet to %s: %s", orNone(node), exp), rs, &rs[i])
			return
		case o.SeenSrc.Addr() != client:
			r.fail(v.Key(), p, uexp, want, fmt.Sprintf("%s; the endpoint must see the client's address %s", exp, client), rs, &rs[i])
			return
		}
	}
}

// lbTarget names a view's load-balancer address the way scenario files do.
func lbTarget(v PortView) string {
	return fmt.Sprintf("loadbalancer:%s:%d", v.Name(), v.Port.Port)
}

// allNodePortsAllowed reports whether every node answers node ports on its IP (where a
// load balancer in nodeport mode sends).
func (w *World) allNodePortsAllowed() bool {
	for _, n := range w.Cluster.Nodes() {
		if !w.nodePortAllowed(n, n.IP()) {
			return false
		}
	}
	return true
}

// inRanges reports whether src may reach svc's load balancer (no ranges: everyone).
func inRanges(svc *corev1.Service, src netip.Addr) bool {
	if len(svc.Spec.LoadBalancerSourceRanges) == 0 {
		return true
	}
	for _, s := range svc.Spec.LoadBalancerSourceRanges {
		if p, err := netip.ParsePrefix(strings.TrimSpace(s)); err == nil && p.Contains(src) {
			return true
		}
	}
	return false
}

// CheckSourceRanges: for a LoadBalancer service with loadBalancerSourceRanges, a source
// outside them (an external host, or a pod) never reaches an endpoint through the
// load-balancer IP; a source inside them does.
func CheckSourceRanges(w *World) error {
	r := &run{w: w, inv: InvSourceRanges}
	for _, v := range w.ServicePorts() {
		r.view = &v
		if len(v.Service.Spec.LoadBalancerSourceRanges) == 0 || !v.HasEndpoints() {
			continue
		}
		lbs := append(append([]netip.Addr(nil), v.LoadBalancerIPs...), v.ProxiedLoadBalancerIPs...)
		proto := protoNum(v.Port.Protocol)
		var union []Endpoint
		seen := map[netip.AddrPort]bool{}
		for _, e := range v.Endpoints {
			if (e.Ready || e.Serving && e.Terminating) && !seen[e.Addr] {
				seen[e.Addr] = true
				union = append(union, e)
			}
		}
		r.to = lbTarget(v)
		for _, a := range lbs {
			srcs := w.ExternalSources()
			for _, s := range w.PodSources() {
				if !w.paused[s.Node] {
					srcs = append(srcs, s)
				}
			}
			for _, src := range srcs {
				ca, ok := src.Addr(v.V6())
				if !ok {
					continue
				}
				p := netsim.Probe{From: src.From, Proto: proto, Dst: addrPort(a, v.Port.Port), AllBranches: true}
				if strings.HasPrefix(src.From, "pod:") && len(v.LoadBalancerIPs) == 0 {
					// Through the cloud load balancer, pod traffic leaves the cluster
					// masqueraded to its node's address.
					if n := w.Cluster.Node(src.Node); n != nil {
						ca = n.IP()
					}
				}
				if !inRanges(v.Service, ca) {
					r.landing(v.Key(), p, Expect{Verdict: "not-delivered", Reason: fmt.Sprintf("%s is outside loadBalancerSourceRanges %v", ca, v.Service.Spec.LoadBalancerSourceRanges)}, false, netip.Addr{})
					continue
				}
				if !w.sourceRangePositive(v, src) {
					continue
				}
				exp := Expect{Endpoints: union, Reason: fmt.Sprintf("the service's endpoints (%s is inside loadBalancerSourceRanges)", ca)}
				if viaLB := !strings.HasPrefix(src.From, "pod:") || len(v.LoadBalancerIPs) == 0; viaLB && v.ExternalTrafficLocal() {
					if n := w.lbNodeWithoutPortEndpoint(v); n != "" {
						// The cloud load balancer health-checks a node per Service
						// (healthCheckNodePort), not per port: it may hand this port's
						// traffic to a node with a local endpoint of another port only
						// (or one just gone terminating, before the check fails), whose
						// rules drop it, as in reality.
						exp.MayDrop = true
						exp.Reason += fmt.Sprintf("; or dropped at %s, which the load balancer's per-service health check may pass without a ready endpoint of this port", n)
					}
				}
				r.landing(v.Key(), p, exp, false, netip.Addr{})
			}
		}
		r.to = ""
	}
	return r.result()
}

// lbNodeWithoutPortEndpoint names a live node that a cloud load balancer's per-service
// health check may pass (it has a local endpoint of some port of v's Service, ready or
// terminating) while it has no ready endpoint of v's port; "" when there is none.
func (w *World) lbNodeWithoutPortEndpoint(v PortView) string {
	for _, n := range w.Cluster.Nodes() {
		name := n.Name()
		if w.killed[name] || len(v.filter(func(e Endpoint) bool { return e.Ready && e.Node == name })) > 0 {
			continue
		}
		for _, u := range w.ServicePorts() {
			if u.Service.Namespace != v.Service.Namespace || u.Service.Name != v.Service.Name {
				continue
			}
			if len(u.filter(func(e Endpoint) bool { return e.Node == name && (e.Ready || e.Terminating) })) > 0 {
				return name
			}
		}
	}
	return ""
}

// sourceRangePositive says whether an allowed source must get through: a pod whose
// node's kube-proxy handles the load-balancer IP (vip mode) always does; traffic
// through the cloud load balancer needs a node port that answers (nodeport mode) and,
// under externalTrafficPolicy Local, a node with a ready endpoint (else no node passes
// the health check).
func (w *World) sourceRangePositive(v PortView, src Source) bool {
	if strings.HasPrefix(src.From, "pod:") && len(v.LoadBalancerIPs) > 0 {
		return true
	}
	if len(v.ProxiedLoadBalancerIPs) > 0 && !w.allNodePortsAllowed() {
		return false // the load balancer may hand traffic to a node port that does not answer
	}
	if v.ExternalTrafficLocal() {
		for _, n := range w.Cluster.Nodes() {
			if !w.killed[n.Name()] && len(v.filter(func(e Endpoint) bool { return e.Ready && e.Node == n.Name() })) > 0 {
				return true
			}
		}
		return false
	}
	return true
}

// CheckNoVIP: headless services have cluster IP None and ExternalName services none in
// the API; traffic to a headless service's pods goes to the pods untranslated; and an
// address a service gave up (deleted, turned ExternalName) answers on none of its old
// ports.
func CheckNoVIP(w *World) error {
	r := &run{w: w, inv: InvNoVIP}
	st := w.Cluster.Store()
	current := map[netip.Addr]bool{}
	for _, svc := range st.ListServices() {
		key := svc.Namespace + "/" + svc.Name
		switch {
		case svc.Spec.Type == corev1.ServiceTypeExternalName:
			if svc.Spec.ClusterIP != "" || len(svc.Spec.ClusterIPs) > 0 {
				r.vs = append(r.vs, &Violation{Invariant: r.inv, Service: key, Expected: "no cluster IP", Got: fmt.Sprintf("clusterIPs %v", svc.Spec.ClusterIPs)})
			}
		case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		default:
			for _, ip := range svc.Spec.ClusterIPs {
				if a, err := netip.ParseAddr(ip); err == nil {
					current[a] = true
				}
			}
		}
	}
	for _, v := range w.ServicePorts() {
		r.view = &v
		if v.Service.Spec.ClusterIP != corev1.ClusterIPNone {
			continue
		}
		for _, ep := range v.Endpoints {
			if ep.Pod == "" {
				continue
			}
			for _, src := range w.clientSources(v.V6()) {
				p := netsim.Probe{From: src.From, Proto: protoNum(v.Port.Protocol), Dst: ep.Addr, AllBranches: true}
				exp := Expect{Endpoints: []Endpoint{ep}, Reason: "the pod itself, untranslated (a headless service has no VIP)"}
				r.landing(v.Key(), p, exp, false, netip.Addr{})
			}
		}
	}
	var former []netip.Addr
	for a := range w.FormerVIPs {
		if !current[a] {
			former = append(former, a)
		}
	}
	sort.Slice(former, func(i, j int) bool { return former[i].Less(former[j]) })
	for _, a := range former {
		f := w.FormerVIPs[a]
		for _, sp := range f.Ports {
			for _, src := range w.clientSources(a.Is6()) {
				p := netsim.Probe{From: src.From, Proto: protoNum(sp.Protocol), Dst: addrPort(a, sp.Port), AllBranches: true}
				r.landing(f.Service+" (gone)", p, Expect{Verdict: "not-delivered", Reason: fmt.Sprintf("%s was %s's cluster IP and is no service's now", a, f.Service)}, false, netip.Addr{})
			}
		}
	}
	return r.result()
}
