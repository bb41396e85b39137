package ipvs

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/proxy"
)

// portSync programs one service port in a Sync: the body of kube-proxy's per-service
// loop in syncProxyRules.
type portSync struct {
	r     *syncRun
	name  proxy.ServicePortName
	sp    *proxy.ServicePort
	proto string // the protocol in set entries: "tcp", "udp", "sctp"
	cat   proxy.Categorized
}

// servicePort programs the service port name: hairpin entries for its local endpoints,
// then a virtual server (with its real servers and set entries) for its ClusterIP, each
// external IP, each LoadBalancer ingress IP and each node IP × NodePort, and its health
// check node port.
func (r *syncRun) servicePort(name proxy.ServicePortName) {
	sp := r.st.Services[name]
	eps := r.st.Endpoints[name]
	s := &portSync{r: r, name: name, sp: sp, proto: strings.ToLower(string(sp.Protocol))}
	// Hairpin: traffic from a local endpoint to itself is masqueraded.
	for _, ep := range eps {
		if ep.Local {
			r.sets[SetLoopBack].add(entryIPPortIP(ep.IP, s.proto, ep.Port, ep.IP))
		}
	}
	s.cat = proxy.CategorizeEndpoints(eps, sp, r.p.cfg.Node.Name, r.p.cfg.Node.Labels)
	s.clusterIP()
	s.externalIPs()
	s.loadBalancerIPs()
	if sp.NodePort != 0 {
		if len(r.nodeIPs) == 0 {
			// kube-proxy skips the rest of this service port (health check included).
			return
		}
		s.nodePorts()
	}
	if sp.HealthCheckNodePort != 0 {
		r.sets[SetHealthCheckNodePort].add(strconv.Itoa(sp.HealthCheckNodePort))
	}
}

// endpoints returns the endpoints a virtual server gets: the local ones for a Local
// traffic policy, but from 1.24 the cluster ones when the node has no local endpoint, so
// that pods on this node still reach the service (k8s #97081, change
// "ipvs-local-policy-falls-back-to-cluster"); before, none.
func (s *portSync) endpoints(onlyLocal bool) []*proxy.Endpoint {
	if onlyLocal && (len(s.cat.Local) > 0 || !s.r.p.cfg.Node.Has("ipvs-local-policy-falls-back-to-cluster")) {
		return s.cat.Local
	}
	return s.cat.Cluster
}

// newVS returns the service port's virtual server at addr:port: the scheduler,
// ClientIP affinity as persistence, mh-port with mh.
func (s *portSync) newVS(addr netip.Addr, port int) *VirtualServer {
	sp, sched := s.sp, s.r.p.sched
	vs := &VirtualServer{Address: addr, Port: uint16(port), Protocol: string(sp.Protocol), Scheduler: sched}
	if sp.SessionAffinity == corev1.ServiceAffinityClientIP {
		vs.Flags |= FlagPersistent
		vs.Timeout = uint32(sp.StickyMaxAgeSeconds)
	}
	if sched == "mh" {
		vs.Flags |= FlagSchedSH2
	}
	return vs
}

// program creates or updates vs (binding its address to the dummy interface if bind)
// and its real servers; failures are warnings, as kube-proxy only logs them.
func (s *portSync) program(vs *VirtualServer, bind, onlyLocal bool) {
	r := s.r
	if err := r.p.syncService(vs, bind, r.alreadyBound, r.res); err != nil {
		r.res.warn(fmt.Errorf("service %s: virtual server %s: %w", s.name, vsString(vs), err))
		return
	}
	r.active[vsString(vs)] = true
	if bind {
		r.activeBind[vs.Address] = true
	}
	if err := r.p.syncEndpoints(vs, s.endpoints(onlyLocal), r.res); err != nil {
		r.res.warn(fmt.Errorf("service %s: real servers of %s: %w", s.name, vsString(vs), err))
	}
}

// clusterIP programs the ClusterIP's virtual server, always bound.
func (s *portSync) clusterIP() {
	sp := s.sp
	s.r.sets[SetClusterIP].add(entryIPPort(sp.ClusterIP, s.proto, sp.Port))
	s.program(s.newVS(sp.ClusterIP, sp.Port), true, sp.InternalPolicyLocal)
}

// externalIPs programs a virtual server per external IP, bound unless the address is
// already the node's.
func (s *portSync) externalIPs() {
	sp, sets := s.sp, s.r.sets
	for _, ip := range sp.ExternalIPs {
		if sp.ExternalPolicyLocal {
			sets[SetExternalIPLocal].add(entryIPPort(ip, s.proto, sp.Port))
		} else {
			sets[SetExternalIP].add(entryIPPort(ip, s.proto, sp.Port))
		}
		s.program(s.newVS(ip, sp.Port), !s.r.nodeAddrs[ip], sp.ExternalPolicyLocal)
	}
}

// loadBalancerIPs programs a virtual server per LoadBalancer ingress IP, with the
// firewall sets of its source ranges.
func (s *portSync) loadBalancerIPs() {
	sp, sets := s.sp, s.r.sets
	for _, ip := range sp.LoadBalancerVIPs {
		e := entryIPPort(ip, s.proto, sp.Port)
		sets[SetLoadBalancer].add(e)
		if sp.ExternalPolicyLocal {
			sets[SetLoadBalancerLocal].add(e)
		}
		if len(sp.LoadBalancerSourceRanges) > 0 {
			s.sourceRanges(ip, e)
		}
		s.program(s.newVS(ip, sp.Port), !s.r.nodeAddrs[ip], sp.ExternalPolicyLocal)
	}
}

// sourceRanges fills the firewall sets of the LB VIP ip (set entry e). Node traffic to
// its own LB VIP never reaches the load balancer: it is allowed when the ranges include
// the node, else dropped (#119656).
func (s *portSync) sourceRanges(ip netip.Addr, e string) {
	sp, sets, nodeIP := s.sp, s.r.sets, s.r.p.nodeIP
	sets[SetLoadBalancerFW].add(e)
	allowFromNode := false
	for _, cidr := range sp.LoadBalancerSourceRanges {
		sets[SetLoadBalancerSourceCIDR].add(entryIPPortNet(ip, s.proto, sp.Port, cidr))
		if nodeIP.IsValid() && cidr.Contains(nodeIP) {
			allowFromNode = true
		}
	}
	if allowFromNode {
		sets[SetLoadBalancerSourceIP].add(entryIPPortIP(ip, s.proto, sp.Port, ip))
	} else {
		s.r.noNode = append(s.r.noNode, noNodeAccess{ip: ip.String(), proto: s.proto, port: sp.Port})
	}
}

// nodePorts programs a virtual server per node IP × NodePort (never bound), with the
// NodePort set entries: the port for TCP and UDP, node IP and port for SCTP.
func (s *portSync) nodePorts() {
	sp, sets := s.sp, s.r.sets
	var npSet, npLocal string
	var entries []string
	switch sp.Protocol {
	case corev1.ProtocolTCP:
		npSet, npLocal = SetNodePortTCP, SetNodePortLocalTCP
		entries = []string{strconv.Itoa(sp.NodePort)}
	case corev1.ProtocolUDP:
		npSet, npLocal = SetNodePortUDP, SetNodePortLocalUDP
		entries = []string{strconv.Itoa(sp.NodePort)}
	case corev1.ProtocolSCTP:
		npSet, npLocal = SetNodePortSCTP, SetNodePortLocalSCTP
		for _, ip := range s.r.nodeIPs {
			entries = append(entries, entryIPPort(ip, s.proto, sp.NodePort))
		}
	}
	for _, e := range entries {
		sets[npSet].add(e)
		if sp.ExternalPolicyLocal {
			sets[npLocal].add(e)
		}
	}
	for _, ip := range s.r.nodeIPs {
		s.program(s.newVS(ip, sp.NodePort), false, sp.ExternalPolicyLocal)
	}
}
