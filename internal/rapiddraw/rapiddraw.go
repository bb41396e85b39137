// Package rapiddraw holds rapid generators that several packages' property tests share,
// so that their draws (and with them the fixed-seed cases) stay the same in each.
package rapiddraw

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"
)

// EndpointPlacement draws where endpoint ep runs and its conditions, in this order:
// "node" (node, "other" or no node name), then "conditions" (ready; serving and
// terminating; terminating and not serving; not ready).
func EndpointPlacement(t *rapid.T, ep *discoveryv1.Endpoint, node string) {
	switch rapid.IntRange(0, 2).Draw(t, "node") {
	case 0:
		ep.NodeName = ptr.To(node)
	case 1:
		ep.NodeName = ptr.To("other")
	}
	switch rapid.IntRange(0, 3).Draw(t, "conditions") {
	case 1:
		ep.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
	case 2:
		ep.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(true)}
	case 3:
		ep.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false)}
	}
}
