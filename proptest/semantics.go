package proptest

// Semantics are the behaviours in which proxy modes legitimately differ; the checkers
// hold a World to its Semantics. IPTablesSemantics are kube-proxy's iptables mode's.
type Semantics struct {
	// Name labels the semantics in messages.
	Name string
	// LocalhostNodePorts: NodePorts answer on 127.0.0.1 from the node itself (iptables
	// mode with --iptables-localhost-nodeports, IPv4 only).
	LocalhostNodePorts bool
	// AffinityExpires: once the ClientIP timeout has passed since a client's last
	// connection, its next one may go to any backend (iptables' recent match). IPVS
	// keeps a persistence template while connections that use it live.
	AffinityExpires bool
	// NoLocalEndpoints is what a connection gets where a traffic policy of Local leaves
	// no endpoint on the node: "dropped" (iptables' DROP; the default), "refused", or
	// "cluster": the cluster's endpoints are used instead (IPVS gives the virtual server
	// the cluster endpoints then, kubernetes#97081, so that pods on the node still get
	// through).
	NoLocalEndpoints string
	// Branches: every endpoint a new connection may go to is a branch of a probe
	// (iptables' random statistic rules), so coverage is checked on one probe. IPVS's
	// default scheduler (rr) decides without a random choice.
	Branches bool
	// NoEndpoints is what a connection to a service port without endpoints gets:
	// "refused" (the default).
	NoEndpoints string
	// ShortCircuit: traffic from a pod to a service's external IP goes to the cluster
	// endpoints whatever the external traffic policy (iptables' "pod traffic for ...
	// external destinations" rule). IPVS applies the policy to pods too.
	ShortCircuit bool
	// Terminates: the proxy terminates connections on the node and opens its own to
	// the backend (userspace), so a probe ends at its listener and the backend sees the
	// node as the client: traffic is observed with real connections (World.Dial).
	Terminates bool
}

// adjust rewrites an expectation without endpoints to what the mode does.
func (s Semantics) adjust(e Expect) Expect {
	switch {
	case e.Why == WhyNoLocalEndpoints && s.NoLocalEndpoints == "cluster":
		e.Endpoints, e.Verdict, e.Why = e.Fallback, "", ""
		e.Reason = "the cluster endpoints (" + s.Name + " uses them where a traffic policy of Local finds none on the node)"
		if e.External {
			e.MayDrop = true
			e.Reason += ", or lost: outside traffic reaches another node's pod unmasqueraded"
		}
		if len(e.Endpoints) == 0 {
			e.Verdict, e.Reason = "refused", "no destinations: the service port keeps no cluster endpoints (internalTrafficPolicy Local, no outside access)"
		}
	case e.Why == WhyNoLocalEndpoints && s.NoLocalEndpoints != "" && s.NoLocalEndpoints != e.Verdict:
		e.Verdict = s.NoLocalEndpoints
		e.Reason += " (" + s.Name + ": " + s.NoLocalEndpoints + ")"
	case e.Why == WhyNoEndpoints && s.NoEndpoints != "" && s.NoEndpoints != e.Verdict:
		e.Verdict = s.NoEndpoints
		e.Reason += " (" + s.Name + ": " + s.NoEndpoints + ")"
	}
	return e
}

// IPTablesSemantics are kube-proxy's iptables mode's.
var IPTablesSemantics = Semantics{Name: "iptables", LocalhostNodePorts: true, AffinityExpires: true, Branches: true, ShortCircuit: true}

// IPVSSemantics are kube-proxy's IPVS mode's: no localhost NodePorts (IPVS serves
// node ports on the node's addresses only), cluster endpoints where a traffic policy of
// Local finds none on the node, a round-robin scheduler without random branches.
var IPVSSemantics = Semantics{Name: "ipvs", AffinityExpires: true, NoLocalEndpoints: "cluster"}

// UserspaceSemantics are the userspace mode's.
var UserspaceSemantics = Semantics{Name: "userspace", AffinityExpires: true, Terminates: true}

// SemanticsFor returns the semantics of a kube-proxy mode by name (iptables for names
// it does not know: a proxy of your own is held to kube-proxy's iptables behaviour).
func SemanticsFor(mode string) Semantics {
	switch mode {
	case "ipvs":
		return IPVSSemantics
	case "userspace":
		return UserspaceSemantics
	}
	return IPTablesSemantics
}
