package proxy

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	labelsel "k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The labels kube-proxy filters Services and EndpointSlices on.
const (
	// LabelServiceProxyName (service.kubernetes.io/service-proxy-name) hands a Service to
	// another proxy: kube-proxy ignores every Service carrying it, whatever its value
	// (KEP-2447, "Make kube-proxy service abstraction optional"; in every release
	// modelled), and before 1.35 its EndpointSlices too. The EndpointSlice controller
	// copies it from the Service onto its slices, as it copies every Service label.
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	// LabelHeadless (service.kubernetes.io/headless) marks a headless Service's
	// EndpointSlices (the EndpointSlice controller sets it when the Service has no
	// cluster IP, and strips it otherwise); kube-proxy ignores every EndpointSlice
	// carrying it, and before 1.35 every Service too, so that a Service that carries it
	// itself got no rules even with a cluster IP (change watch-selector-split).
	LabelHeadless = corev1.IsHeadlessService
)

// The release in which kube-proxy's watches split (read by the selectors below).
const chWatchSelectorSplit = "watch-selector-split"

func init() {
	registerChanges(Change{Name: chWatchSelectorSplit, Area: "watched objects", Version: 35,
		Ref: "kubernetes#134623 (issue kubernetes#134321)",
		Doc: "kube-proxy's Service and EndpointSlice watches get their own selectors: Services " +
			"\"!service.kubernetes.io/service-proxy-name\" (and clusterIP!=None), EndpointSlices " +
			"\"!service.kubernetes.io/headless\"; before, both watched with " +
			"\"!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless\". A Service with a " +
			"cluster IP labelled service.kubernetes.io/headless (whose slices the EndpointSlice controller " +
			"leaves without the label) was dead before and is proxied after; a Service labelled " +
			"service-proxy-name stays dead (its slices are seen, its Service is not).",
		Modelled: ModelledYes, Note: "release from the merge date (October 2025), unverified",
		Test: "proxy.TestWatchSelectorsByVersion"})
}

// ServiceSelector returns the label selector the node's proxy lists and watches
// Services with (cmd/kube-proxy/app/server.go). kube-proxy (ProxyName "") uses
// "!service.kubernetes.io/service-proxy-name", and before 1.35 (change
// watch-selector-split) also "!service.kubernetes.io/headless"; a proxy named N, the
// alternative proxy the label hands Services to, selects
// "service.kubernetes.io/service-proxy-name=N" instead of the first requirement, as
// alternative proxies do (kpng, nfproxy, AntreaProxy). kube-proxy's field selector
// clusterIP!=None (1.32) needs no model: ShouldSkipService skips those Services anyway.
func (c *NodeConfig) ServiceSelector() labels.Selector {
	name := mustRequirement(LabelServiceProxyName, labelsel.DoesNotExist)
	if c.ProxyName != "" {
		name = mustRequirement(LabelServiceProxyName, labelsel.Equals, c.ProxyName)
	}
	if c.Has(chWatchSelectorSplit) {
		return labels.NewSelector().Add(name)
	}
	return labels.NewSelector().Add(name, mustRequirement(LabelHeadless, labelsel.DoesNotExist))
}

// EndpointSliceSelector returns the label selector the node's proxy lists and watches
// EndpointSlices with: "!service.kubernetes.io/headless", and before 1.35 the
// Services' selector (ServiceSelector).
func (c *NodeConfig) EndpointSliceSelector() labels.Selector {
	if c.Has(chWatchSelectorSplit) {
		return labels.NewSelector().Add(mustRequirement(LabelHeadless, labelsel.DoesNotExist))
	}
	return c.ServiceSelector()
}

func mustRequirement(key string, op labelsel.Operator, vals ...string) labels.Requirement {
	r, err := labels.NewRequirement(key, op, vals)
	if err != nil {
		panic(err) // programmer error: constant keys, and ProxyName is validated first
	}
	return *r
}

// WatchesService reports whether the node's proxy sees a Service with these labels
// (ServiceSelector matches them). A Service it does not see is, to it, a Service that
// does not exist: one that gains a filtered label is deleted from its view, and loses
// its rules.
func (c *NodeConfig) WatchesService(objLabels map[string]string) bool {
	return c.watches(objLabels, false)
}

// WatchesEndpointSlice reports whether the node's proxy sees an EndpointSlice with these
// labels (EndpointSliceSelector matches them).
func (c *NodeConfig) WatchesEndpointSlice(objLabels map[string]string) bool {
	return c.watches(objLabels, true)
}

// watches is both selectors without building one (it runs on every object of every
// sync).
func (c *NodeConfig) watches(objLabels map[string]string, slice bool) bool {
	_, headless := objLabels[LabelHeadless]
	split := c.Has(chWatchSelectorSplit)
	if split && slice {
		return !headless
	}
	if headless && !split {
		return false
	}
	v, named := objLabels[LabelServiceProxyName]
	if c.ProxyName == "" {
		return !named
	}
	return named && v == c.ProxyName
}

// watched returns the Services and EndpointSlices the node's proxy sees (the lists
// themselves when it sees them all).
func (c *NodeConfig) watched(services []*corev1.Service, slices []*discoveryv1.EndpointSlice) ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	var outSvc []*corev1.Service
	for i, s := range services {
		if s == nil || c.WatchesService(s.Labels) {
			if outSvc != nil {
				outSvc = append(outSvc, s)
			}
			continue
		}
		if outSvc == nil {
			outSvc = append(make([]*corev1.Service, 0, len(services)), services[:i]...)
		}
	}
	if outSvc == nil {
		outSvc = services
	}
	var outSl []*discoveryv1.EndpointSlice
	for i, s := range slices {
		if s == nil || c.WatchesEndpointSlice(s.Labels) {
			if outSl != nil {
				outSl = append(outSl, s)
			}
			continue
		}
		if outSl == nil {
			outSl = append(make([]*discoveryv1.EndpointSlice, 0, len(slices)), slices[:i]...)
		}
	}
	if outSl == nil {
		outSl = slices
	}
	return outSvc, outSl
}

// validateProxyName checks ProxyName is a label value (the selector compares it with
// one).
func (c *NodeConfig) validateProxyName() error {
	if c.ProxyName == "" {
		return nil
	}
	if msgs := validation.IsValidLabelValue(c.ProxyName); len(msgs) > 0 {
		return fmt.Errorf("node config: proxyName: %q is not a label value: %s", c.ProxyName, msgs[0])
	}
	return nil
}
