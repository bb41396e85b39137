package proxy

import (
	corev1 "k8s.io/api/core/v1"
)

// Topology modes CategorizeEndpoints can pick for the cluster endpoint set.
const (
	TopologyNone           = ""
	TopologyPreferSameZone = corev1.ServiceTrafficDistributionPreferSameZone
	TopologyPreferSameNode = corev1.ServiceTrafficDistributionPreferSameNode
)

// Categorized is the result of CategorizeEndpoints for one service port on one node.
type Categorized struct {
	// Cluster holds the endpoints "Cluster" traffic policy uses: ready endpoints allowed
	// by the topology mode, or, if there are none, every serving+terminating endpoint
	// (topology ignored). Nil if the port never uses cluster endpoints.
	Cluster []*Endpoint
	// Local holds the endpoints "Local" traffic policy uses: ready endpoints on this node,
	// or, if there are none, serving+terminating endpoints on this node. Nil if the port
	// never uses local endpoints.
	Local []*Endpoint
	// AllReachable is the union of Cluster and Local: every endpoint this node may send
	// the port's traffic to (the endpoints that get KUBE-SEP chains), sorted by string.
	AllReachable []*Endpoint
	// HasAnyEndpoints is true if the port has a usable (ready, or serving and terminating)
	// endpoint anywhere in the cluster, even if none is reachable from this node.
	HasAnyEndpoints bool
	// TopologyMode is the mode chosen for Cluster: TopologyNone, TopologyPreferSameZone
	// or TopologyPreferSameNode.
	TopologyMode string
}

// CategorizeEndpoints splits a service port's endpoints (sorted as in EndpointsMap) into
// the sets kube-proxy routes to, exactly as kube-proxy's pkg/proxy/topology.go does.
// nodeLabels supply the node's zone (topology.kubernetes.io/zone).
func CategorizeEndpoints(endpoints []*Endpoint, sp *ServicePort, nodeName string, nodeLabels map[string]string) Categorized {
	var c Categorized
	useServingTerminating := false

	if sp.UsesClusterEndpoints() {
		zone := nodeLabels[corev1.LabelTopologyZone]
		c.TopologyMode = topologyModeFromHints(endpoints, nodeName, zone)
		if c.TopologyMode == TopologyPreferSameZone && sp.selection.ignoreZoneHints {
			c.TopologyMode = TopologyNone
		}
		c.Cluster = filterEndpoints(endpoints, func(ep *Endpoint) bool {
			return ep.Ready && availableForTopology(ep, c.TopologyMode, nodeName, zone)
		})
		// With no ready endpoint anywhere (the topology mode already fell back to none
		// when the zone or node had none), use serving+terminating endpoints.
		if len(c.Cluster) == 0 && !sp.selection.noTerminatingFallback {
			c.Cluster = filterEndpoints(endpoints, func(ep *Endpoint) bool {
				return ep.Serving && ep.Terminating
			})
		}
		if len(c.Cluster) > 0 {
			c.HasAnyEndpoints = true
		}
	}

	if !sp.UsesLocalEndpoints() {
		c.AllReachable = c.Cluster
		return c
	}

	var hasLocalReady, hasLocalServingTerminating bool
	for _, ep := range endpoints {
		if ep.Ready {
			c.HasAnyEndpoints = true
			if ep.Local {
				hasLocalReady = true
			}
		} else if ep.Serving && ep.Terminating && !sp.selection.noLocalTerminatingFallback {
			c.HasAnyEndpoints = true
			if ep.Local {
				hasLocalServingTerminating = true
			}
		}
	}
	if hasLocalReady {
		c.Local = filterEndpoints(endpoints, func(ep *Endpoint) bool { return ep.Local && ep.Ready })
	} else if hasLocalServingTerminating && !sp.selection.noLocalTerminatingFallback {
		useServingTerminating = true
		c.Local = filterEndpoints(endpoints, func(ep *Endpoint) bool {
			return ep.Local && ep.Serving && ep.Terminating
		})
	}

	if !sp.UsesClusterEndpoints() {
		c.AllReachable = c.Local
		return c
	}
	if c.TopologyMode == TopologyNone && !useServingTerminating {
		// Cluster holds every ready endpoint, Local only ready ones: Cluster ⊇ Local.
		c.AllReachable = c.Cluster
		return c
	}
	// Cluster may hold remote endpoints Local lacks, and Local terminating or
	// topologically excluded local endpoints Cluster lacks: merge. (kube-proxy builds this
	// list from a map, in random order; it is sorted here.)
	seen := make(map[string]*Endpoint, len(c.Cluster)+len(c.Local))
	for _, ep := range c.Cluster {
		seen[ep.String()] = ep
	}
	for _, ep := range c.Local {
		seen[ep.String()] = ep
	}
	c.AllReachable = make([]*Endpoint, 0, len(seen))
	for _, ep := range seen {
		c.AllReachable = append(c.AllReachable, ep)
	}
	sortEndpoints(c.AllReachable)
	return c
}

// topologyModeFromHints picks PreferSameNode if every ready endpoint has node hints and
// one is hinted for this node; else PreferSameZone if every ready endpoint has zone
// hints and one is hinted for this node's zone; else none.
func topologyModeFromHints(endpoints []*Endpoint, nodeName, zone string) string {
	hasForNode, allNodeHints := false, true
	hasForZone, allZoneHints := false, true
	for _, ep := range endpoints {
		if !ep.Ready {
			continue
		}
		if len(ep.NodeHints) == 0 {
			allNodeHints = false
		} else if ep.HasNodeHint(nodeName) {
			hasForNode = true
		}
		if len(ep.ZoneHints) == 0 {
			allZoneHints = false
		} else if ep.HasZoneHint(zone) {
			hasForZone = true
		}
	}
	if allNodeHints && hasForNode {
		return TopologyPreferSameNode
	}
	if allZoneHints && hasForZone {
		return TopologyPreferSameZone
	}
	return TopologyNone
}

func availableForTopology(ep *Endpoint, mode, nodeName, zone string) bool {
	switch mode {
	case TopologyNone:
		return true
	case TopologyPreferSameNode:
		return ep.HasNodeHint(nodeName)
	case TopologyPreferSameZone:
		return ep.HasZoneHint(zone)
	}
	return false
}

func filterEndpoints(endpoints []*Endpoint, keep func(*Endpoint) bool) []*Endpoint {
	out := make([]*Endpoint, 0, len(endpoints))
	for _, ep := range endpoints {
		if keep(ep) {
			out = append(out, ep)
		}
	}
	return out
}
