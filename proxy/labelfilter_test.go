package proxy

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestWatchSelector(t *testing.T) {
	if got, want := (&NodeConfig{}).WatchSelector().String(), "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name"; got != want {
		t.Errorf("kube-proxy's selector %q, want %q", got, want)
	}
	if got, want := (&NodeConfig{ProxyName: "alt"}).WatchSelector().String(), "!service.kubernetes.io/headless,service.kubernetes.io/service-proxy-name=alt"; got != want {
		t.Errorf("named proxy's selector %q, want %q", got, want)
	}
	cases := []struct {
		labels       map[string]string
		kubeProxy    bool // ProxyName ""
		named, other bool // ProxyName "alt", "other"
	}{
		{nil, true, false, false},
		{map[string]string{"app": "web"}, true, false, false},
		{map[string]string{LabelServiceProxyName: "alt"}, false, true, false},
		{map[string]string{LabelServiceProxyName: ""}, false, false, false},
		{map[string]string{LabelServiceProxyName: "other"}, false, false, true},
		{map[string]string{LabelHeadless: ""}, false, false, false},
		{map[string]string{LabelHeadless: "", LabelServiceProxyName: "alt"}, false, false, false},
	}
	for _, c := range cases {
		for name, want := range map[string]bool{"": c.kubeProxy, "alt": c.named, "other": c.other} {
			n := NodeConfig{ProxyName: name}
			if got := n.Watches(c.labels); got != want {
				t.Errorf("proxy %q, labels %v: Watches %v, want %v", name, c.labels, got, want)
			}
			if got := n.WatchSelector().Matches(labels.Set(c.labels)); got != want {
				t.Errorf("proxy %q, labels %v: selector matches %v, want %v", name, c.labels, got, want)
			}
		}
	}
}

func TestNodeConfigValidateProxyName(t *testing.T) {
	if err := (&NodeConfig{ProxyName: "my-proxy.v2"}).Validate(); err != nil {
		t.Errorf("valid name: %v", err)
	}
	err := (&NodeConfig{ProxyName: "not a label"}).Validate()
	if err == nil || !strings.Contains(err.Error(), "proxyName") {
		t.Errorf("invalid name: %v, want an error naming proxyName", err)
	}
}

// labelledObjects returns three ClusterIP Services with one UDP port and one endpoint
// each, labelled and with slices labelled as the EndpointSlice controller does: "web"
// (no label), "alt" (service-proxy-name=alt, copied to its slice) and "hl"
// (service.kubernetes.io/headless on the Service; the controller strips it from the
// slice of a Service with a cluster IP).
func labelledObjects(webLabels map[string]string) ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	mk := func(name, ip, ep string, svcLabels, sliceLabels map[string]string) (*corev1.Service, *discoveryv1.EndpointSlice) {
		s := svc("ns", name, func(s *corev1.Service) {
			s.Labels = svcLabels
			s.Spec.ClusterIP = ip
			s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}
		})
		sl := slice("ns", name, 1, func(s *discoveryv1.EndpointSlice) {
			maps.Copy(s.Labels, sliceLabels)
			s.Ports = []discoveryv1.EndpointPort{port("dns", 53, corev1.ProtocolUDP)}
			s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{ep}}}
		})
		return s, sl
	}
	web, webSl := mk("web", "172.30.0.1", "10.0.0.1", webLabels, webLabels)
	alt, altSl := mk("alt", "172.30.0.2", "10.0.0.2", map[string]string{LabelServiceProxyName: "alt"}, map[string]string{LabelServiceProxyName: "alt"})
	hl, hlSl := mk("hl", "172.30.0.3", "10.0.0.3", map[string]string{LabelHeadless: ""}, nil)
	return []*corev1.Service{web, alt, hl}, []*discoveryv1.EndpointSlice{webSl, altSl, hlSl}
}

func serviceNames(m ServicePortMap) string {
	var out []string
	for _, n := range m.SortedNames() {
		out = append(out, n.Name)
	}
	return strings.Join(slices.Compact(out), ",")
}

func endpointServiceNames(m EndpointsMap) string {
	var out []string
	for n := range m {
		out = append(out, n.Name)
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ",")
}

// TestLabelFilterView: kube-proxy's view leaves out the Services labelled
// service-proxy-name or headless and the slices labelled so; a proxy named "alt" sees
// only the Service labelled for it. NewSyncState (generate) and the ChangeTracker (every
// mode) agree.
func TestLabelFilterView(t *testing.T) {
	svcs, sls := labelledObjects(nil)
	for _, c := range []struct {
		proxyName               string
		wantServices, wantSlice string
	}{
		// hl's slice has no headless label (its Service has a cluster IP), so kube-proxy
		// sees its endpoints, but no Service: no rules, as for a slice without a Service.
		{"", "web", "hl,web"},
		{"alt", "alt", "alt"},
		{"nobody", "", ""},
	} {
		node := NodeConfig{Name: testNodeName, ProxyName: c.proxyName}
		st, err := NewSyncState(svcs, sls, corev1.IPv4Protocol, node)
		if err != nil {
			t.Fatal(err)
		}
		tst, err := NewChangeTracker(corev1.IPv4Protocol, node).Update(svcs, sls)
		if err != nil {
			t.Fatal(err)
		}
		for what, s := range map[string]*SyncState{"NewSyncState": st, "ChangeTracker": tst} {
			if got := serviceNames(s.Services); got != c.wantServices {
				t.Errorf("proxy %q, %s: services %q, want %q", c.proxyName, what, got, c.wantServices)
			}
			if got := endpointServiceNames(s.Endpoints); got != c.wantSlice {
				t.Errorf("proxy %q, %s: endpoints of %q, want %q", c.proxyName, what, got, c.wantSlice)
			}
		}
	}
}

// TestLabelFilterChanges: a Service that gains the service-proxy-name label (and the
// controller copies it onto its slice) is a deleted Service to kube-proxy: its service
// ports and endpoints go, and its UDP conntrack entries are cleared; losing the label
// brings it back as a new Service. A proxy named for the label sees the opposite.
func TestLabelFilterChanges(t *testing.T) {
	kp := NewChangeTracker(corev1.IPv4Protocol, NodeConfig{Name: testNodeName})
	alt := NewChangeTracker(corev1.IPv4Protocol, NodeConfig{Name: testNodeName, ProxyName: "alt"})
	update := func(step string, webLabels map[string]string) (*SyncState, *SyncState) {
		t.Helper()
		svcs, sls := labelledObjects(webLabels)
		a, err := kp.Update(svcs, sls)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		b, err := alt.Update(svcs, sls)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return a, b
	}
	update("start", nil)

	a, b := update("labelled", map[string]string{LabelServiceProxyName: "alt"})
	if got := serviceNames(a.Services); got != "" {
		t.Errorf("labelled: kube-proxy still serves %q", got)
	}
	if got := changedNames(a.ServicesChanged); got != "ns/web" {
		t.Errorf("labelled: kube-proxy's changed services %q, want ns/web", got)
	}
	if got, want := filterStrings(a.StaleConntrackFilters()), "-D -p udp --orig-dst 172.30.0.1 --orig-port-dst 53"; got != want {
		t.Errorf("labelled: kube-proxy clears %q, want %q", got, want)
	}
	if got := serviceNames(b.Services); got != "alt,web" {
		t.Errorf("labelled: proxy alt serves %q, want alt,web", got)
	}
	if got := changedNames(b.ServicesChanged); got != "ns/web" {
		t.Errorf("labelled: proxy alt's changed services %q, want ns/web", got)
	}

	a, b = update("unlabelled", nil)
	if got := serviceNames(a.Services); got != "web" || changedNames(a.ServicesChanged) != "ns/web" {
		t.Errorf("unlabelled: kube-proxy serves %q (changed %q), want web back", got, changedNames(a.ServicesChanged))
	}
	if got := serviceNames(b.Services); got != "alt" {
		t.Errorf("unlabelled: proxy alt serves %q, want alt", got)
	}
}
