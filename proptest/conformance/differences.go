package conformance

import (
	"net/netip"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proptest"
)

// Difference is a way a proxy mode differs from the reference (kube-proxy's iptables
// mode) by design: what kube-proxy's own modes do differently, not a bug. Each one
// explains a mismatch from the flow, the service and the outcomes alone.
type Difference struct {
	Name string
	// Mode is the mode the difference belongs to.
	Mode string
	// Doc says what differs and why.
	Doc string
	// Explains reports whether the difference accounts for a mismatch.
	Explains func(w *proptest.World, m Mismatch) bool
}

// Differences are the by-design differences the suite knows, per mode.
var Differences = []Difference{
	{
		Name: "ipvs-rejects-other-ports-of-service-ips", Mode: "ipvs",
		Doc: "The IPVS mode binds every service IP to kube-ipvs0, so the node owns it, and " +
			"its KUBE-IPVS-FILTER chain rejects new connections to a service IP on a port no " +
			"virtual service has. The iptables mode has no rule for such a port: the packet " +
			"is routed on like any other, and lost.",
		Explains: func(_ *proptest.World, m Mismatch) bool {
			return m.Flow.Kind == KindClusterIPOtherPort && m.Got.Class == Refused
		},
	},
	{
		Name: "ipvs-no-localhost-nodeports", Mode: "ipvs",
		Doc: "Only the iptables mode serves node ports on 127.0.0.1 (route_localnet and a " +
			"nat OUTPUT rule); IPVS has virtual servers for the node's addresses only, so a " +
			"connection to 127.0.0.1:NODEPORT finds no listener.",
		Explains: func(_ *proptest.World, m Mismatch) bool {
			return m.Flow.Kind == KindLocalhostNodePort && m.Got.Class == Refused
		},
	},
	{
		Name: "ipvs-local-policy-falls-back-to-cluster-endpoints", Mode: "ipvs",
		Doc: "Where internalTrafficPolicy or externalTrafficPolicy Local finds no endpoint " +
			"on the node, the iptables mode drops the traffic; the IPVS mode gives the " +
			"virtual server the cluster's endpoints instead (kubernetes#97081), so it is " +
			"answered from another node, refused when there are none, or, for outside " +
			"traffic sent on unmasqueraded, lost on the way back.",
		Explains: func(_ *proptest.World, m Mismatch) bool {
			e := expectation(m.Flow)
			if e.Why != proptest.WhyNoLocalEndpoints {
				return false
			}
			switch m.Got.Class {
			case Answered:
				return hasPod(e.Fallback, m.Got.Backend)
			case Refused:
				return len(e.Fallback) == 0 || hasPod(e.Fallback, m.Got.Backend)
			case Dropped:
				return e.External
			}
			return false
		},
	},
	{
		Name: "ipvs-external-policy-applies-to-pods", Mode: "ipvs",
		Doc: "Traffic from a pod to a service's external IP: the iptables mode sends it to " +
			"the cluster's endpoints whatever the externalTrafficPolicy (its \"pod traffic " +
			"for external destinations\" rule); the IPVS mode applies the policy to it like " +
			"to outside traffic (the node's endpoints, its serving terminating ones when none is " +
			"ready, the client's address kept).",
		Explains: func(_ *proptest.World, m Mismatch) bool {
			v := m.Flow.View
			if m.Flow.Kind != KindExternalIP || !v.ExternalTrafficLocal() {
				return false
			}
			b := m.Got.Backend
			return m.Got.Class != Answered || hasPod(v.ClusterEndpoints(), b) || hasPod(v.LocalEndpoints(m.Flow.Node), b)
		},
	},
	{
		Name: "ipvs-node-ports-closed-outside-nodeport-addresses", Mode: "ipvs",
		Doc: "A node port without (local) endpoints: the iptables mode's KUBE-EXTERNAL-SERVICES " +
			"rules drop or reject it on every local address (addrtype LOCAL, whatever " +
			"--nodeport-addresses says); the IPVS mode has no virtual server on addresses " +
			"--nodeport-addresses leaves out, so there the port is simply closed.",
		Explains: func(w *proptest.World, m Mismatch) bool {
			return m.Flow.Kind == KindNodePort && m.Got.Class == Refused && !nodePortAllowed(w, m.Flow)
		},
	},
	{
		Name: "ipvs-hairpin-needs-a-local-endpoint", Mode: "ipvs",
		Doc: "A pod reaching itself through its service: the IPVS mode masquerades such " +
			"hairpin traffic through the KUBE-LOOP-BACK ipset, which lists only the node's " +
			"own endpoints; an endpoint whose EndpointSlice names another node (or none) " +
			"gets its own packets unmasqueraded, answers itself directly, and the answer " +
			"never comes back from the service address. The iptables mode masquerades every " +
			"endpoint's traffic to itself (KUBE-SEP-* -s ENDPOINT -j KUBE-MARK-MASQ).",
		Explains: func(_ *proptest.World, m Mismatch) bool {
			pod, ok := strings.CutPrefix(m.Flow.From, "pod:")
			if !ok || m.Got.Class == Answered {
				return false
			}
			for _, e := range m.Flow.View.Endpoints {
				if e.Pod == pod && e.Node != m.Flow.Node {
					return true
				}
			}
			return false
		},
	},
	{
		Name: "ipvs-affinity-per-virtual-server", Mode: "ipvs",
		Doc: "ClientIP affinity: the iptables mode keeps its recent lists per service port " +
			"(one per endpoint chain, shared by the port's cluster IP, external IPs and node " +
			"ports), so a client pinned through the cluster IP stays on that endpoint through " +
			"the external IP too. The IPVS mode gives each address its own virtual server " +
			"with its own persistence, so the client is pinned separately at each and may " +
			"land on different endpoints (a pod's external-IP traffic under " +
			"externalTrafficPolicy Local, whose virtual server has only the node's " +
			"endpoints, often does).",
		Explains: func(_ *proptest.World, m Mismatch) bool {
			return m.Scope != nil && m.Scope.Other.Dst != m.Flow.Dst && m.Got.Class == Answered
		},
	},
	{
		Name: "userspace-never-rejects", Mode: "userspace",
		Doc: "A service port without endpoints: the iptables mode rejects new connections; " +
			"the userspace mode's listener accepts a TCP connection and closes it, and " +
			"drops a UDP datagram.",
		Explains: func(_ *proptest.World, m Mismatch) bool {
			return expectation(m.Flow).Why == proptest.WhyNoEndpoints && (m.Got.Class == Closed || m.Got.Class == Dropped)
		},
	},
	{
		Name: "userspace-backends-see-the-node", Mode: "userspace",
		Doc: "The userspace proxy is a program on the node that accepts the client's " +
			"connection and opens its own to the endpoint, so every backend sees an address " +
			"of the node (its IP, or its bridge address toward its own pods) as the client. " +
			"The iptables mode only DNATs, and masquerades where its rules say so: a pod's " +
			"traffic to a cluster IP, or outside traffic under externalTrafficPolicy Local, " +
			"reaches the backend with the client's own address.",
		Explains: func(_ *proptest.World, m Mismatch) bool {
			return m.Got.Class == Answered && m.Got.Seen == SeenNode && m.Ref.AnsweredBy(m.Got.Backend)
		},
	},
	{
		Name: "userspace-ready-endpoints-only", Mode: "userspace",
		Doc: "The userspace mode (removed in Kubernetes 1.26) balances over ready endpoints " +
			"only; the iptables mode falls back to serving terminating endpoints when a " +
			"service has no ready one (KEP-1669), so there the userspace mode has nowhere " +
			"to send the connection.",
		Explains: func(_ *proptest.World, m Mismatch) bool {
			if m.Got.Class != Closed && m.Got.Class != Dropped {
				return false
			}
			// Every backend the iptables mode reaches is an endpoint that is not ready.
			n := 0
			for _, o := range m.Ref.Possible {
				if o.Class != Answered {
					continue
				}
				n++
				for _, e := range m.Flow.View.Endpoints {
					if e.Pod == o.Backend && e.Ready {
						return false
					}
				}
			}
			return n > 0
		},
	},
	{
		Name: "userspace-hides-endpoint-failures", Mode: "userspace",
		Doc: "The userspace proxy connects to the endpoint itself: an endpoint that refuses " +
			"or does not answer makes it try the next one, and when none answers it closes " +
			"the client's TCP connection (a UDP client just gets no answer). Under the " +
			"iptables mode the client meets the endpoint's RST, ICMP error or silence " +
			"itself.",
		Explains: func(_ *proptest.World, m Mismatch) bool {
			return (m.Got.Class == Closed || m.Got.Class == Dropped) && (m.Ref.HasClass(Dropped) || m.Ref.HasClass(Refused))
		},
	},
	{
		Name: "userspace-ignores-traffic-policies", Mode: "userspace",
		Doc: "The userspace mode predates internalTrafficPolicy and externalTrafficPolicy: it " +
			"balances every connection over all the service's endpoints (and one the policy " +
			"keeps the iptables mode away from may not answer).",
		Explains: func(_ *proptest.World, m Mismatch) bool {
			v := m.Flow.View
			local := v.InternalTrafficLocal()
			if m.Flow.Kind != KindClusterIP && m.Flow.Kind != KindClusterIPOtherPort {
				local = v.ExternalTrafficLocal()
			}
			if !local {
				return false
			}
			if m.Got.Class == Answered {
				return hasPod(v.ClusterEndpoints(), m.Got.Backend)
			}
			// Closed or dropped: it may have gone to an endpoint the policy keeps the
			// reference away from (one that does not answer).
			for _, e := range v.ClusterEndpoints() {
				if e.Pod == "" || !m.Ref.AnsweredBy(e.Pod) {
					return m.Got.Class == Closed || m.Got.Class == Dropped
				}
			}
			return false
		},
	},
	{
		Name: "userspace-external-ips-not-from-pods", Mode: "userspace",
		Doc: "The userspace mode redirects external-IP traffic only when it did not come " +
			"in through a bridge port (-m physdev ! --physdev-is-in) or is for a local " +
			"address: traffic from a pod on the node's bridge is routed on toward the " +
			"external IP unchanged.",
		Explains: func(_ *proptest.World, m Mismatch) bool {
			return m.Flow.Kind == KindExternalIP && strings.HasPrefix(m.Flow.From, "pod:") && m.Got.Class != Answered
		},
	},
	{
		Name: "userspace-node-ports-on-every-address", Mode: "userspace",
		Doc: "The userspace mode has no --nodeport-addresses: its node-port rules match " +
			"every local address (127.0.0.1 included), so a node port answers where the " +
			"iptables mode leaves it closed.",
		Explains: func(w *proptest.World, m Mismatch) bool {
			switch m.Flow.Kind {
			case KindNodePort, KindLocalhostNodePort:
				return !nodePortAllowed(w, m.Flow)
			case KindLoadBalancer:
				return w.Case.Cluster.LoadBalancerMode == "nodeport" && len(w.Case.Cluster.NodePortAddresses) > 0
			}
			return false
		},
	},
	{
		Name: "userspace-udp-to-localhost-answers-from-the-wrong-address", Mode: "userspace",
		Doc: "The userspace proxy answers a UDP client from its listener's wildcard socket, " +
			"so the kernel picks the answer's source by route: for a client on 127.0.0.1 " +
			"that is 127.0.0.1, not the node address the datagram was DNATed to, conntrack " +
			"cannot undo the DNAT, and the client drops an answer from the wrong port.",
		Explains: func(_ *proptest.World, m Mismatch) bool {
			return m.Flow.Kind == KindLocalhostNodePort && m.Flow.Proto == netfilter.ProtoUDP && m.Got.Class == Dropped
		},
	},
}

// Explain returns the names of the differences of the mismatch's mode that account
// for it (several may: a node port outside --nodeport-addresses with a traffic policy
// of Local, say), in the order of Differences.
func Explain(w *proptest.World, m Mismatch) []string {
	var out []string
	for i := range Differences {
		d := &Differences[i]
		if d.Mode == m.Mode && d.Explains(w, m) {
			out = append(out, d.Name)
		}
	}
	return out
}

// expectation is what kube-proxy's iptables mode does with a flow's new connection
// according to the kit's oracle (from the source's node, or the node a node port
// belongs to).
func expectation(f Flow) proptest.Expect {
	v := f.View
	switch f.Kind {
	case KindLocalhostNodePort:
		// The node's own traffic to a node port goes to the cluster's endpoints whatever
		// the external traffic policy ("-m addrtype --src-type LOCAL" in KUBE-EXT).
		if v.ExternalTrafficLocal() && v.HasEndpoints() {
			return proptest.Expect{Endpoints: v.ClusterEndpoints()}
		}
		return v.External(f.EntryNode)
	case KindNodePort:
		return v.External(f.EntryNode)
	case KindLoadBalancer:
		return v.External("")
	case KindExternalIP:
		if !v.HasEndpoints() {
			return v.Internal(f.Node)
		}
		return proptest.Expect{Endpoints: v.ClusterEndpoints()}
	}
	return v.Internal(f.Node)
}

func hasPod(eps []proptest.Endpoint, pod string) bool {
	for _, e := range eps {
		if e.Pod != "" && e.Pod == pod {
			return true
		}
	}
	return false
}

// nodePortAllowed reports whether --nodeport-addresses lets a node port answer on the
// flow's destination (127.0.0.1: only where a range holds it or there is no list).
func nodePortAllowed(w *proptest.World, f Flow) bool {
	list := w.Case.Cluster.NodePortAddresses
	if len(list) == 0 {
		return true
	}
	a := f.Dst.Addr()
	for _, s := range list {
		if s == "primary" {
			if i := w.Case.Cluster.NodeIndex(f.EntryNode); i >= 0 {
				for _, ip := range w.Case.Cluster.NodeIPs(i) {
					if ip == a {
						return true
					}
				}
			}
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil && p.Contains(a) {
			return true
		}
	}
	return false
}

func inRanges(ranges []string, a netip.Addr) bool {
	for _, r := range ranges {
		if p, err := netip.ParsePrefix(strings.TrimSpace(r)); err == nil && p.Contains(a) {
			return true
		}
	}
	return false
}
