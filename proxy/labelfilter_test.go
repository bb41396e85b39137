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

// TestWatchSelectorsByVersion: the selectors' text and what they match, before the
// split (1.34: one selector for both kinds) and after (1.35), for kube-proxy and for a
// proxy named "alt"; WatchesService/WatchesEndpointSlice agree with the selectors.
func TestWatchSelectorsByVersion(t *testing.T) {
	texts := []struct {
		version             Version
		proxyName           string
		services, endpoints string
	}{
		{34, "", "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name", "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name"},
		{34, "alt", "!service.kubernetes.io/headless,service.kubernetes.io/service-proxy-name=alt", "!service.kubernetes.io/headless,service.kubernetes.io/service-proxy-name=alt"},
		{35, "", "!service.kubernetes.io/service-proxy-name", "!service.kubernetes.io/headless"},
		{0, "alt", "service.kubernetes.io/service-proxy-name=alt", "!service.kubernetes.io/headless"},
	}
	for _, c := range texts {
		n := NodeConfig{Version: c.version, ProxyName: c.proxyName}
		if got := n.ServiceSelector().String(); got != c.services {
			t.Errorf("%s, proxy %q: Services selector %q, want %q", c.version, c.proxyName, got, c.services)
		}
		if got := n.EndpointSliceSelector().String(); got != c.endpoints {
			t.Errorf("%s, proxy %q: EndpointSlices selector %q, want %q", c.version, c.proxyName, got, c.endpoints)
		}
	}
	named := map[string]string{LabelServiceProxyName: "alt"}
	headless := map[string]string{LabelHeadless: ""}
	cases := []struct {
		version   Version
		proxyName string
		labels    map[string]string
		svc, sl   bool
	}{
		{34, "", nil, true, true},
		{34, "", named, false, false},
		{34, "", headless, false, false},
		{34, "alt", nil, false, false},
		{34, "alt", named, true, true},
		{34, "alt", map[string]string{LabelServiceProxyName: "alt", LabelHeadless: ""}, false, false},
		{34, "", map[string]string{LabelServiceProxyName: ""}, false, false},
		{35, "", nil, true, true},
		{35, "", named, false, true},
		{35, "", headless, true, false},
		{35, "alt", nil, false, true},
		{35, "alt", named, true, true},
		{35, "alt", map[string]string{LabelServiceProxyName: "other"}, false, true},
		{35, "alt", headless, false, false},
		{0, "", headless, true, false},
	}
	for _, c := range cases {
		n := NodeConfig{Version: c.version, ProxyName: c.proxyName}
		if got := n.WatchesService(c.labels); got != c.svc {
			t.Errorf("%s, proxy %q, labels %v: WatchesService %v, want %v", c.version, c.proxyName, c.labels, got, c.svc)
		}
		if got := n.ServiceSelector().Matches(labels.Set(c.labels)); got != c.svc {
			t.Errorf("%s, proxy %q, labels %v: Services selector matches %v, want %v", c.version, c.proxyName, c.labels, got, c.svc)
		}
		if got := n.WatchesEndpointSlice(c.labels); got != c.sl {
			t.Errorf("%s, proxy %q, labels %v: WatchesEndpointSlice %v, want %v", c.version, c.proxyName, c.labels, got, c.sl)
		}
		if got := n.EndpointSliceSelector().Matches(labels.Set(c.labels)); got != c.sl {
			t.Errorf("%s, proxy %q, labels %v: EndpointSlices selector matches %v, want %v", c.version, c.proxyName, c.labels, got, c.sl)
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

// TestLabelFilterView: kube-proxy's view leaves out the Service labelled
// service-proxy-name (in every release) and the one labelled headless (before 1.35); a
// proxy named "alt" sees only the Service labelled for it. NewSyncState (generate) and
// the ChangeTracker (every mode) agree.
func TestLabelFilterView(t *testing.T) {
	svcs, sls := labelledObjects(nil)
	for _, c := range []struct {
		version                 Version
		proxyName               string
		wantServices, wantSlice string
	}{
		// hl's slice has no headless label (its Service has a cluster IP), so kube-proxy
		// sees its endpoints, but before 1.35 not its Service: no rules, as for a slice
		// without a Service. From 1.35 it sees both, and proxies hl.
		{34, "", "web", "hl,web"},
		{35, "", "hl,web", "alt,hl,web"},
		{34, "alt", "alt", "alt"},
		{35, "alt", "alt", "alt,hl,web"},
		{0, "nobody", "", "alt,hl,web"},
	} {
		node := NodeConfig{Name: testNodeName, Version: c.version, ProxyName: c.proxyName}
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
				t.Errorf("%s, proxy %q, %s: services %q, want %q", c.version, c.proxyName, what, got, c.wantServices)
			}
			if got := endpointServiceNames(s.Endpoints); got != c.wantSlice {
				t.Errorf("%s, proxy %q, %s: endpoints of %q, want %q", c.version, c.proxyName, what, got, c.wantSlice)
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
	if got := serviceNames(a.Services); got != "hl" { // hl: proxied from 1.35 (see TestLabelFilterView)
		t.Errorf("labelled: kube-proxy serves %q, want hl only", got)
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
	if got := serviceNames(a.Services); got != "hl,web" || changedNames(a.ServicesChanged) != "ns/web" {
		t.Errorf("unlabelled: kube-proxy serves %q (changed %q), want web back", got, changedNames(a.ServicesChanged))
	}
	if got := serviceNames(b.Services); got != "alt" {
		t.Errorf("unlabelled: proxy alt serves %q, want alt", got)
	}
}
