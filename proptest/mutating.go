package proptest

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
)

// The checkers in this file change the world: they make real connections (which fill
// ClientIP affinity tables and conntrack), advance the virtual clock and delete pods.
// CheckAll runs them last.

// connect makes one real (not dry-run) connection probe, traced.
func (r *run) connect(p netsim.Probe) (netsim.ProbeResult, error) {
	p.Mode, p.Trace, p.AllBranches = netsim.ProbeConnect, true, false
	rs, err := r.w.Cluster.Probe(p)
	if err != nil {
		return netsim.ProbeResult{}, fmt.Errorf("probe %s -> %s: %w", p.From, p.Dst, err)
	}
	if len(rs) != 1 {
		return netsim.ProbeResult{}, fmt.Errorf("probe %s -> %s: %d outcomes", p.From, p.Dst, len(rs))
	}
	return rs[0], nil
}

// answeredBy says which endpoint a connection landed on: the pod its request reached
// (whatever became of the answer: a pod that does not listen refuses it).
func answeredBy(o netsim.ProbeResult, exp Expect) (Endpoint, bool) {
	if o.Pod == "" {
		return Endpoint{}, false
	}
	ep, ok := endpointAt(exp, o.Addr)
	return ep, ok && ep.Pod == o.Pod
}

// CheckAffinity: for every service port with ClientIP affinity and at least two
// endpoints a client could reach, a client's connections (each from a new source port)
// all land on the backend the first one reached, also after half the timeout has
// passed on the virtual clock; once the timeout has passed without a connection, every
// backend is possible again (where the mode's Semantics say affinity expires so and
// choices are random branches a probe can follow).
func CheckAffinity(w *World) error {
	r := &run{w: w, inv: InvAffinity}
	port := uint16(40000)
	for _, v := range w.ServicePorts() {
		if v.Affinity() == 0 || !v.ClusterIP.IsValid() || !v.HasEndpoints() {
			continue
		}
		timeout := time.Duration(v.Affinity()) * time.Second
		srcs := w.clientSources(v.V6())
		var pods []Source
		for _, s := range srcs {
			if strings.HasPrefix(s.From, "pod:") {
				pods = append(pods, s)
			}
		}
		if len(pods) > 2 {
			pods = pods[:2]
		}
		dst := addrPort(v.ClusterIP, v.Port.Port)
		proto := protoNum(v.Port.Protocol)
		for _, src := range pods {
			exp := v.Internal(src.Node)
			if len(exp.Endpoints) < 2 {
				continue
			}
			var first Endpoint
			var seq []string
			ok := true
			advanced := false
			to := dst.String()
			// The reproduction: one connection, (the wait,) then every branch of the next
			// packet must go to one backend.
			repro := func() []Action {
				a := []Action{{Kind: "connect", From: src.From, Proto: proto, To: to, Count: 1}}
				if advanced {
					a = append(a, Action{Kind: "advance", Duration: timeout / 2})
				}
				return append(a, Action{Kind: "send", From: src.From, Proto: proto, To: to, AllBranches: true, Expect: &Want{Backends: 1}})
			}
			step := func(what string) {
				if !ok {
					return
				}
				port++
				p := netsim.Probe{From: src.From, Proto: proto, Dst: dst, SrcPort: port}
				o, err := r.connect(p)
				if err != nil {
					r.vs = append(r.vs, &Violation{Invariant: r.inv, Service: v.Key(), Probe: p, Expected: exp.String(), Got: err.Error()})
					ok = false
					return
				}
				ep, hit := answeredBy(o, exp)
				seq = append(seq, fmt.Sprintf("%s: %s", what, o.Outcome))
				if !hit {
					if w.Faulty() && o.Result == netsim.ResultDropped {
						ok = false
						return
					}
					r.fail(v.Key(), p, exp, nil, exp.String(), []netsim.ProbeResult{o}, &o)
					ok = false
					return
				}
				if first.Addr == (netip.AddrPort{}) {
					first = ep
					return
				}
				if ep.Addr != first.Addr {
					p.Mode = netsim.ProbeConnect
					r.vs = append(r.vs, &Violation{Invariant: r.inv, Service: v.Key(), Probe: p,
						Expected: fmt.Sprintf("every connection from %s within %s of the last lands on %s, as the first did", src.From, timeout, first),
						Got:      strings.Join(seq, "\n"), Trace: o.Trace, Repro: repro()})
					ok = false
				}
			}
			step("connection 1")
			step("connection 2 (new source port)")
			step("connection 3 (new source port)")
			if !ok {
				continue
			}
			w.Cluster.Clock().Advance(timeout / 2)
			advanced = true
			step(fmt.Sprintf("connection 4, %s later", timeout/2))
			if !ok || !w.Semantics.AffinityExpires || !w.Semantics.Branches {
				continue
			}
			w.Cluster.Clock().Advance(timeout + time.Second)
			p := netsim.Probe{From: src.From, Proto: proto, Dst: dst, AllBranches: true}
			rs, err := r.probe(p, true)
			if err != nil {
				return err
			}
			p.AllBranches = true
			reached := map[netip.AddrPort]bool{}
			for _, o := range rs {
				if ep, hit := answeredBy(o, exp); hit {
					reached[ep.Addr] = true
				}
			}
			if len(reached) < 2 && !w.Faulty() {
				want := wantFor(exp)
				r.vs = append(r.vs, &Violation{Invariant: r.inv, Service: v.Key(), Probe: p,
					Expected: fmt.Sprintf("after %s without a connection (more than the %s timeout) any of %d endpoints again", timeout+time.Second, timeout, len(exp.Endpoints)),
					Got:      describe(rs) + "\nearlier: " + strings.Join(seq, "; "),
					Repro: []Action{{Kind: "connect", From: src.From, Proto: proto, To: to, Count: 1},
						{Kind: "advance", Duration: timeout + time.Second},
						{Kind: "send", From: src.From, Proto: proto, To: to, AllBranches: true, Expect: &Want{Backends: len(want.Reaches)}}}})
			}
		}
	}
	return r.result()
}

// StaleUDPException names the conntrack entries the modelled kube-proxy (1.29–1.30, which
// clears UDP entries by (IP, port) filters after a sync) leaves behind when a pod goes:
// entries for endpoints that EndpointSlices still list (a selectorless service's
// hand-written slice naming a deleted pod), which kube-proxy rightly keeps using. TCP
// entries are never cleared, but a new TCP connection never reuses one.
const StaleUDPException = "stale UDP conntrack entries for endpoints still listed in EndpointSlices"

// flow is a connection made before a pod deletion.
type flow struct {
	v    PortView
	src  Source
	port uint16
	dst  netip.AddrPort
	ep   Endpoint
}

// CheckDeletedPods: clients open UDP and TCP flows to every cluster IP port with
// endpoints; the pods that answered are deleted at once; after the proxies sync (and
// kube-proxy's conntrack cleanup), neither a new flow (new source port) nor a UDP
// datagram from the same source port (the same conntrack entry) reaches a deleted
// pod's address, unless the address is still an endpoint (StaleUDPException).
func CheckDeletedPods(w *World) error {
	r := &run{w: w, inv: InvDeletedPod}
	if w.Faulty() {
		return nil // paused proxies and dead nodes keep stale rules by design
	}
	var flows []flow
	port := uint16(41000)
	victims := map[string]bool{}
	for _, v := range w.ServicePorts() {
		if !v.ClusterIP.IsValid() || !v.HasEndpoints() {
			continue
		}
		for _, src := range w.clientSources(v.V6()) {
			if !strings.HasPrefix(src.From, "pod:") {
				continue
			}
			exp := v.Internal(src.Node)
			if len(exp.Endpoints) == 0 {
				continue
			}
			port++
			dst := addrPort(v.ClusterIP, v.Port.Port)
			p := netsim.Probe{From: src.From, Proto: protoNum(v.Port.Protocol), Dst: dst, SrcPort: port}
			o, err := r.connect(p)
			if err != nil {
				return err
			}
			ep, hit := answeredBy(o, exp)
			if !hit || ep.Pod == "" {
				continue // CheckClusterIPs reports wrong landings
			}
			if pod := w.Cluster.Store(); pod != nil {
				ns, name := splitKey(ep.Pod)
				if obj, ok := pod.GetPod(ns, name); !ok || obj.Labels == nil || obj.DeletionTimestamp != nil {
					continue // only pods the endpoints controller tracks, not terminating
				}
			}
			victims[ep.Pod] = true
			flows = append(flows, flow{v: v, src: src, port: port, dst: dst, ep: ep})
		}
	}
	if len(flows) == 0 {
		return nil
	}
	var names []string
	for k := range victims {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if err := w.Apply(Step{Kind: StepDeletePod, Target: k}); err != nil {
			return fmt.Errorf("delete %s: %w", k, err)
		}
	}
	w.Cluster.SyncProxies()
	still := map[netip.AddrPort]bool{}
	for _, v := range w.ServicePorts() {
		for _, e := range v.Endpoints {
			still[e.Addr] = true
		}
	}
	for _, f := range flows {
		if ns, name := splitKey(strings.TrimPrefix(f.src.From, "pod:")); w.Cluster.Pod(ns, name) == nil {
			continue // the client was one of the deleted pods
		}
		probes := []netsim.Probe{{From: f.src.From, Proto: protoNum(f.v.Port.Protocol), Dst: f.dst, SrcPort: f.port + 10000}}
		if f.v.Port.Protocol == "UDP" {
			probes = append(probes, netsim.Probe{From: f.src.From, Proto: netfilter.ProtoUDP, Dst: f.dst, SrcPort: f.port})
		}
		for _, p := range probes {
			o, err := r.connect(p)
			if err != nil {
				return err
			}
			to := w.flowTarget(f.src, p)
			if !to.IsValid() {
				to = o.Addr
			}
			gone, isDeleted := w.DeletedPods[to.Addr()]
			if !isDeleted {
				continue
			}
			if still[to] {
				continue // StaleUDPException: the address is still an endpoint
			}
			what := "a new flow (new source port)"
			if p.SrcPort == f.port {
				what = "a datagram from the same source port (the old conntrack entry)"
			}
			// The reproduction deletes every endpoint pod the client could have reached,
			// so that the replay's first flow surely lands on one of them.
			var gonePods []string
			deleted := map[netip.Addr]bool{}
			for _, ep := range f.v.Internal(f.src.Node).Endpoints {
				ns, name := splitKey(ep.Pod)
				if obj, ok := w.Cluster.Store().GetPod(ns, name); ep.Pod != "" && (!ok || obj.Labels != nil) && "pod:"+ep.Pod != f.src.From {
					gonePods = append(gonePods, ep.Pod)
					deleted[ep.Addr.Addr()] = true
				}
			}
			after := f.v
			after.Endpoints = nil
			for _, ep := range f.v.Endpoints {
				if !deleted[ep.Addr.Addr()] {
					after.Endpoints = append(after.Endpoints, ep)
				}
			}
			// The last step asks where the packet lands on every branch, as the invariant
			// does (the pod a request reaches, whatever becomes of it): a connection would
			// ask that an endpoint left answer, and one may not listen on the port.
			repro := []Action{
				{Kind: "connect", From: f.src.From, Proto: p.Proto, To: f.dst.String(), SrcPort: f.port},
				{Kind: "delete-pod", Pods: gonePods},
				{Kind: "sync"},
				{Kind: "send", From: f.src.From, Proto: p.Proto, To: f.dst.String(), SrcPort: p.SrcPort, AllBranches: true, Expect: wantFor(after.Internal(f.src.Node))},
			}
			r.vs = append(r.vs, &Violation{Invariant: r.inv, Service: f.v.Key(), Probe: p,
				Expected: fmt.Sprintf("%s after %s (at %s) was deleted and the proxies synced: not to %s", what, gone, f.ep.Addr, to.Addr()),
				Got:      fmt.Sprintf("%s (the flow's conntrack entry on %s translates it to %s)", o.Outcome, f.src.Node, to), Trace: o.Trace, Repro: repro})
		}
	}
	return r.result()
}

// flowTarget returns where the source node's conntrack translated a probe's flow: the
// reply source of the entry for (source address, source port, destination).
func (w *World) flowTarget(src Source, p netsim.Probe) netip.AddrPort {
	n := w.Cluster.Node(src.Node)
	a, ok := src.Addr(p.Dst.Addr().Is6())
	if n == nil || !ok {
		return netip.AddrPort{}
	}
	for _, e := range n.Conntrack().List(netsim.CtFilter{Proto: p.Proto, OrigSrc: a, OrigSrcPort: p.SrcPort, OrigDst: p.Dst.Addr(), OrigDstPort: p.Dst.Port()}) {
		return netip.AddrPortFrom(e.Reply.Src, e.Reply.SrcPort)
	}
	return netip.AddrPort{}
}
