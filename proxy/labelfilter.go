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
	// another proxy: kube-proxy ignores every Service and EndpointSlice carrying it,
	// whatever its value (KEP-2447, "Make kube-proxy service abstraction optional";
	// kube-proxy 1.14). The EndpointSlice controller copies it from the Service onto its
	// slices, as it copies every Service label.
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	// LabelHeadless (service.kubernetes.io/headless) marks a headless Service's
	// EndpointSlices (the EndpointSlice controller sets it when the Service has no
	// cluster IP, and strips it otherwise); kube-proxy ignores every Service and
	// EndpointSlice carrying it, so a Service that carries it itself gets no rules even
	// with a cluster IP.
	LabelHeadless = corev1.IsHeadlessService
)

// WatchSelector returns the label selector the node's proxy lists and watches Services
// and EndpointSlices with. kube-proxy (ProxyName "") uses
// "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless"
// (cmd/kube-proxy/app/server.go, in every release this model covers, 1.18 on); a proxy
// named N, an alternative proxy built from the same logic, selects
// "service.kubernetes.io/service-proxy-name=N,!service.kubernetes.io/headless", as
// alternative proxies the label is meant for do (kpng, nfproxy, AntreaProxy).
func (c *NodeConfig) WatchSelector() labels.Selector {
	name := mustRequirement(LabelServiceProxyName, labelsel.DoesNotExist)
	if c.ProxyName != "" {
		name = mustRequirement(LabelServiceProxyName, labelsel.Equals, c.ProxyName)
	}
	return labels.NewSelector().Add(name, mustRequirement(LabelHeadless, labelsel.DoesNotExist))
}

func mustRequirement(key string, op labelsel.Operator, vals ...string) labels.Requirement {
	r, err := labels.NewRequirement(key, op, vals)
	if err != nil {
		panic(err) // programmer error: constant keys, and ProxyName is validated first
	}
	return *r
}

// Watches reports whether the node's proxy sees an object with these labels (WatchSelector
// matches them). An object it does not see is, to it, an object that does not exist: a
// Service that gains a filtered label is deleted from its view, and loses its rules.
func (c *NodeConfig) Watches(objLabels map[string]string) bool {
	if c.ProxyName == "" { // the fast path of every sync: no selector built
		_, named := objLabels[LabelServiceProxyName]
		_, headless := objLabels[LabelHeadless]
		return !named && !headless
	}
	v, named := objLabels[LabelServiceProxyName]
	_, headless := objLabels[LabelHeadless]
	return named && v == c.ProxyName && !headless
}

// watched returns the Services and EndpointSlices the node's proxy sees (the lists
// themselves when it sees them all).
func (c *NodeConfig) watched(services []*corev1.Service, slices []*discoveryv1.EndpointSlice) ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	var outSvc []*corev1.Service
	for i, s := range services {
		if s == nil || c.Watches(s.Labels) {
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
		if s == nil || c.Watches(s.Labels) {
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
