package proxy

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The topology annotations a Service opts in to zone hints with (before trafficDistribution).
const (
	// AnnotationTopologyAwareHints is the original opt-in annotation (1.21-1.26).
	AnnotationTopologyAwareHints = "service.kubernetes.io/topology-aware-hints"
	// AnnotationTopologyMode replaces it from 1.27 (and wins when both are set).
	AnnotationTopologyMode = "service.kubernetes.io/topology-mode"
)

// selection holds how the node's release and feature gates select a service port's
// endpoints, for CategorizeEndpoints. The zero value is the newest release's behaviour.
type selection struct {
	// noTerminatingFallback: serving terminating endpoints are never used for the
	// cluster set; noLocalTerminatingFallback: nor for the local set.
	noTerminatingFallback      bool
	noLocalTerminatingFallback bool
	// ignoreZoneHints: zone hints do not narrow the cluster set.
	ignoreZoneHints bool
}

// selectFlags are the node's answers to the behaviour changes selectServicePorts
// depends on, asked once per call (or once per ChangeTracker.Update) rather than once
// per service port.
type selectFlags struct {
	terminatingFallback, terminatingAllPolicy, internalTrafficPolicy, lbIPModeProxy bool
	topologyHints, trafficDistribution, topologyModeAnnot                           bool
}

func (c *NodeConfig) selectFlags() selectFlags {
	return selectFlags{
		terminatingFallback:   c.Has(chTerminatingFallback),
		terminatingAllPolicy:  c.Has(chTerminatingAllPolicy),
		internalTrafficPolicy: c.Has(chInternalTrafficPolicy),
		lbIPModeProxy:         c.Has(chLBIPModeProxy),
		topologyHints:         c.Has(chTopologyHints),
		trafficDistribution:   c.Has(chTrafficDistribution),
		topologyModeAnnot:     c.Has(chTopologyModeAnnot),
	}
}

// selectServicePorts applies the node's release and gates to service ports freshly built
// from the Services (the parts of kube-proxy's ServicePort construction and
// CategorizeEndpoints that changed between releases).
func (c *NodeConfig) selectServicePorts(m ServicePortMap, services []*corev1.Service) {
	if len(m) == 0 {
		return
	}
	byName := make(map[types.NamespacedName]*corev1.Service, len(services))
	for _, svc := range services {
		if svc != nil {
			byName[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}] = svc
		}
	}
	f := c.selectFlags()
	for _, sp := range m {
		if svc := byName[sp.Name.NamespacedName]; svc != nil {
			f.selectServicePort(sp, svc)
		}
	}
}

// selectServicePort is selectServicePorts for one service port of svc.
func (f *selectFlags) selectServicePort(sp *ServicePort, svc *corev1.Service) {
	sp.selection = selection{
		noTerminatingFallback:      !f.terminatingFallback || !f.terminatingAllPolicy,
		noLocalTerminatingFallback: !f.terminatingFallback,
		ignoreZoneHints:            !f.zoneHintsAllowed(svc),
	}
	if !f.internalTrafficPolicy {
		sp.InternalPolicyLocal = false
	}
	if !f.lbIPModeProxy {
		sp.LoadBalancerVIPs = ingressIPsIgnoringMode(svc, familyOf(sp.ClusterIP))
	}
}

// zoneHintsAllowed is kube-proxy's canUseTopology before its zone test: the
// TopologyAwareHints gate, and either the ServiceTrafficDistribution gate or the
// Service's opt-in annotation ("Auto").
func (f *selectFlags) zoneHintsAllowed(svc *corev1.Service) bool {
	if !f.topologyHints {
		return false
	}
	if f.trafficDistribution {
		return true
	}
	v := svc.Annotations[AnnotationTopologyAwareHints]
	if m, ok := svc.Annotations[AnnotationTopologyMode]; ok && f.topologyModeAnnot {
		v = m
	}
	return v == "Auto" || v == "auto"
}

// ingressIPsIgnoringMode lists the Service's LoadBalancer ingress IPs of the family in
// status order, whatever their ipMode (releases before the LoadBalancerIPMode gate).
func ingressIPsIgnoringMode(svc *corev1.Service, family corev1.IPFamily) []netip.Addr {
	var out []netip.Addr
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if a, ok := ParseIPSloppy(ing.IP); ok && familyOf(a) == family {
			out = append(out, a)
		}
	}
	return out
}

// newlyActive is the 0 to N test of the stale UDP cleanup: the port had no serving
// endpoint and now has one; in 1.22 (the regression of row 21) any endpoint counted.
func (c *NodeConfig) newlyActive(old, cur []*Endpoint) bool {
	if c.Has(chUDPActiveCountsAny) && !c.Has(chUDPActiveCountsReady) {
		return len(cur) > 0 && len(old) == 0
	}
	return countServing(cur) > 0 && countServing(old) == 0
}
