package proxy

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// RestartConntrackFilters returns the conntrack entries kube-proxy clears, beyond what
// any sync clears, when it starts (or restarts) and syncs for the first time with the
// given Services and EndpointSlices. Before the 1.32 conntrack reconciler
// (restart-keeps-udp-conntrack), kube-proxy starts with no previous view: every UDP
// service port with a serving endpoint is "newly active" to it, and its first sync
// flushes the UDP entries to the port's service IPs and node port, live flows included
// (kubernetes#122740). From 1.32 a restart clears nothing of its own: the reconciler
// deletes only entries that do not match a serving endpoint, as in every sync.
func RestartConntrackFilters(services []*corev1.Service, slices []*discoveryv1.EndpointSlice, family corev1.IPFamily, node NodeConfig) ([]ConntrackFilter, error) {
	if node.Has("restart-keeps-udp-conntrack") {
		return nil, nil
	}
	st, err := NewChangeTracker(family, node).Update(services, slices)
	if err != nil {
		return nil, err
	}
	return st.StaleConntrackFilters(), nil
}
