package conformance

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proptest"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// Difference is a way a proxy mode differs from the reference (kube-proxy's iptables
// mode) by design: what kube-proxy's own modes do differently, not a bug. The mode's
// descriptor (kubeproxy.ModeInfo.Differences) names and documents it; the suite holds
// how it explains a mismatch, from the flow, the service and the outcomes alone.
type Difference struct {
	Name string
	// Mode is the mode the difference belongs to.
	Mode string
	// Doc says what differs and why.
	Doc string
	// Explains reports whether the difference accounts for a mismatch.
	Explains func(w *proptest.World, m Mismatch) bool
}

// Differences are the by-design differences of every registered mode, in the order of
// the modes and of their descriptors' lists.
var Differences = differences()

func differences() []Difference {
	var out []Difference
	for _, m := range kubeproxy.Registered() {
		for _, d := range m.Differences {
			ex := explainers[d.Name]
			if ex == nil {
				panic(fmt.Sprintf("conformance: no explainer for the %s mode's difference %s", m.Mode, d.Name))
			}
			out = append(out, Difference{Name: d.Name, Mode: string(m.Mode), Doc: d.Doc, Explains: ex})
		}
	}
	return out
}

// explainers hold, for each by-design difference a mode's descriptor names, whether it
// accounts for a mismatch.
var explainers = map[string]func(w *proptest.World, m Mismatch) bool{
	"ipvs-rejects-other-ports-of-service-ips": func(_ *proptest.World, m Mismatch) bool {
		return m.Flow.Kind == KindClusterIPOtherPort && m.Got.Class == Refused
	},
	"ipvs-no-localhost-nodeports": func(_ *proptest.World, m Mismatch) bool {
		return m.Flow.Kind == KindLocalhostNodePort && m.Got.Class == Refused
	},
	"ipvs-local-policy-falls-back-to-cluster-endpoints": func(_ *proptest.World, m Mismatch) bool {
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
	"ipvs-external-policy-applies-to-pods": func(_ *proptest.World, m Mismatch) bool {
		v := m.Flow.View
		if m.Flow.Kind != KindExternalIP || !v.ExternalTrafficLocal() {
			return false
		}
		b := m.Got.Backend
		return m.Got.Class != Answered || hasPod(v.ClusterEndpoints(), b) || hasPod(v.LocalEndpoints(m.Flow.Node), b)
	},
	"ipvs-node-ports-closed-outside-nodeport-addresses": nodePortClosedOutsideAddresses,
	"ipvs-hairpin-needs-a-local-endpoint":               hairpinToRemoteEndpoint,
	"ipvs-affinity-per-virtual-server": func(_ *proptest.World, m Mismatch) bool {
		return m.Scope != nil && m.Scope.Other.Dst != m.Flow.Dst && m.Got.Class == Answered
	},
	"nftables-no-localhost-nodeports": func(_ *proptest.World, m Mismatch) bool {
		return m.Flow.Kind == KindLocalhostNodePort && m.Got.Class == Refused
	},
	"nftables-rejects-other-ports-of-cluster-ips": func(_ *proptest.World, m Mismatch) bool {
		return m.Flow.Kind == KindClusterIPOtherPort && m.Got.Class == Refused
	},
	"nftables-hairpin-needs-a-local-endpoint":               hairpinToRemoteEndpoint,
	"nftables-node-ports-closed-outside-nodeport-addresses": nodePortClosedOutsideAddresses,
	"userspace-never-rejects": func(_ *proptest.World, m Mismatch) bool {
		return expectation(m.Flow).Why == proptest.WhyNoEndpoints && (m.Got.Class == Closed || m.Got.Class == Dropped)
	},
	"userspace-backends-see-the-node": func(_ *proptest.World, m Mismatch) bool {
		return m.Got.Class == Answered && m.Got.Seen == SeenNode && m.Ref.AnsweredBy(m.Got.Backend)
	},
	"userspace-ready-endpoints-only": func(_ *proptest.World, m Mismatch) bool {
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
	"userspace-hides-endpoint-failures": func(_ *proptest.World, m Mismatch) bool {
		return (m.Got.Class == Closed || m.Got.Class == Dropped) && (m.Ref.HasClass(Dropped) || m.Ref.HasClass(Refused))
	},
	"userspace-ignores-traffic-policies": func(_ *proptest.World, m Mismatch) bool {
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
	"userspace-external-ips-not-from-pods": func(_ *proptest.World, m Mismatch) bool {
		return m.Flow.Kind == KindExternalIP && strings.HasPrefix(m.Flow.From, "pod:") && m.Got.Class != Answered
	},
	"userspace-node-ports-on-every-address": func(w *proptest.World, m Mismatch) bool {
		switch m.Flow.Kind {
		case KindNodePort, KindLocalhostNodePort:
			return !nodePortAllowed(w, m.Flow)
		case KindLoadBalancer:
			return w.Case.Cluster.LoadBalancerMode == "nodeport" && len(w.Case.Cluster.NodePortAddresses) > 0
		}
		return false
	},
	"userspace-udp-to-localhost-answers-from-the-wrong-address": func(_ *proptest.World, m Mismatch) bool {
		return m.Flow.Kind == KindLocalhostNodePort && m.Flow.Proto == netfilter.ProtoUDP && m.Got.Class == Dropped
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

// nodePortClosedOutsideAddresses: a node port on an address --nodeport-addresses leaves
// out is closed (a mode whose node-port rules look only at the listed addresses).
func nodePortClosedOutsideAddresses(w *proptest.World, m Mismatch) bool {
	return m.Flow.Kind == KindNodePort && m.Got.Class == Refused && !nodePortAllowed(w, m.Flow)
}

// hairpinToRemoteEndpoint: a pod reaching itself through its service, its endpoint
// named on another node than its own, is not answered (a mode that masquerades hairpin
// traffic only for the node's own endpoints).
func hairpinToRemoteEndpoint(_ *proptest.World, m Mismatch) bool {
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
