package conformance

import (
	"fmt"
	"net/netip"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proptest"

	corev1 "k8s.io/api/core/v1"
)

// Flow kinds: where a flow's traffic goes.
const (
	KindClusterIP          = "cluster-ip"            // a service port's cluster IP
	KindClusterIPOtherPort = "cluster-ip-other-port" // a cluster IP on a port no service has
	KindExternalIP         = "external-ip"           // a service's external IP, from a pod
	KindNodePort           = "node-port"             // a node address and node port, from outside
	KindLocalhostNodePort  = "localhost-node-port"   // 127.0.0.1 and a node port, from the node
	KindLoadBalancer       = "load-balancer"         // a load-balancer IP, from outside
)

// Flow is one kind of traffic the suite sends under every mode: from a source to a
// service address (or to a port of a cluster IP that no service has).
type Flow struct {
	// From is the probe source ("pod:ns/name", "node:NAME", "external:NAME").
	From string
	// Node is the source's node ("" for external hosts).
	Node string
	// Client is the source address the traffic leaves with.
	Client netip.Addr
	// Kind is where the traffic goes (KindClusterIP, ...).
	Kind string
	// Service names the service port ("ns/name" or "ns/name:port").
	Service string
	Proto   uint8
	Dst     netip.AddrPort
	// To is how scenario files name the destination.
	To string
	// View is the service port in the reference world.
	View proptest.PortView
	// EntryNode is the node whose address a node-port flow goes to.
	EntryNode string
}

func (f Flow) String() string {
	return fmt.Sprintf("%s %s -> %s %s (%s, %s)", f.From, netsim.ProtoName(f.Proto), f.Kind, f.Dst, f.Service, f.View.Family)
}

// UnusedPort is the port flows of KindClusterIPOtherPort go to.
const UnusedPort = 9999

// Flows lists the flows of a world: from every pod and node to every cluster IP port,
// and to an unused port of each cluster IP; from every pod to every external IP port;
// from every external host to every node port on every node IP and to every
// load-balancer IP; and from every node to its localhost node ports.
func Flows(w *proptest.World) []Flow {
	var out []Flow
	pods, nodes, exts := w.PodSources(), w.NodeSources(), w.ExternalSources()
	seenVIP := map[netip.Addr]bool{}
	for _, v := range w.ServicePorts() {
		if !v.ClusterIP.IsValid() {
			continue
		}
		name := v.Name()
		if v.Port.Name != "" {
			name += ":" + v.Port.Name
		}
		proto := protoNum(v.Port.Protocol)
		add := func(src proptest.Source, kind string, dst netip.AddrPort, to, entry string) {
			a, ok := src.Addr(dst.Addr().Is6())
			if !ok {
				return
			}
			if kind == KindLocalhostNodePort {
				a = dst.Addr()
			}
			if to == "" {
				to = dst.String()
			}
			out = append(out, Flow{From: src.From, Node: src.Node, Client: a, Kind: kind, Service: name,
				Proto: proto, Dst: dst, To: to, View: v, EntryNode: entry})
		}
		for _, src := range append(append([]proptest.Source(nil), pods...), nodes...) {
			add(src, KindClusterIP, netip.AddrPortFrom(v.ClusterIP, uint16(v.Port.Port)), "", "")
			if !seenVIP[v.ClusterIP] && v.Port.Port != UnusedPort {
				add(src, KindClusterIPOtherPort, netip.AddrPortFrom(v.ClusterIP, UnusedPort), "", "")
			}
		}
		seenVIP[v.ClusterIP] = true
		for _, a := range v.ExternalIPs {
			for _, src := range pods {
				add(src, KindExternalIP, netip.AddrPortFrom(a, uint16(v.Port.Port)), "", "")
			}
		}
		if v.Port.NodePort != 0 && !v.V6() {
			for _, n := range w.Cluster.Nodes() {
				if w.NodeDown(n.Name()) {
					continue
				}
				for _, src := range exts {
					add(src, KindNodePort, netip.AddrPortFrom(n.IP(), uint16(v.Port.NodePort)), "", n.Name())
				}
				for _, src := range nodes {
					if src.Node == n.Name() {
						lo := netip.MustParseAddr("127.0.0.1")
						add(src, KindLocalhostNodePort, netip.AddrPortFrom(lo, uint16(v.Port.NodePort)), "", n.Name())
					}
				}
			}
		}
		for _, a := range append(append([]netip.Addr(nil), v.LoadBalancerIPs...), v.ProxiedLoadBalancerIPs...) {
			for _, src := range exts {
				add(src, KindLoadBalancer, netip.AddrPortFrom(a, uint16(v.Port.Port)), fmt.Sprintf("loadbalancer:%s:%d", v.Name(), v.Port.Port), "")
			}
		}
	}
	return out
}

func protoNum(p corev1.Protocol) uint8 {
	switch p {
	case corev1.ProtocolUDP:
		return netfilter.ProtoUDP
	case corev1.ProtocolSCTP:
		return netfilter.ProtoSCTP
	}
	return netfilter.ProtoTCP
}
