package proxy

// The behaviour changes of the shared proxy code (endpoint selection, conntrack
// cleanup). Each area's changes live beside this file (behaviour_<area>.go).
func init() {
	registerChanges(
		Change{Name: "prefer-same-node-hints", Row: 31, Area: "endpoint selection",
			Gate: "PreferSameTrafficDistribution", Ref: "KEP-3015",
			Doc:      "EndpointSlice node hints (trafficDistribution PreferSameNode): when every endpoint has a forNodes hint and one names this node, only those endpoints are used; before the gate, node hints are ignored and the zone hints (or all endpoints) decide.",
			Modelled: ModelledYes, Test: "proxy.TestNodeHintsFollowTheGate"},
	)
}
