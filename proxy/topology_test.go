package proxy

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// ep builds a test endpoint: flags r(eady) s(erving) t(erminating) l(ocal).
func ep(addr string, flags string, zones []string, nodes []string) *Endpoint {
	ap := netip.MustParseAddrPort(addr)
	e := NewEndpoint(ap.Addr(), int(ap.Port()))
	e.Ready, e.Serving, e.Terminating, e.Local = false, false, false, false
	for _, c := range flags {
		switch c {
		case 'r':
			e.Ready = true
		case 's':
			e.Serving = true
		case 't':
			e.Terminating = true
		case 'l':
			e.Local = true
		}
	}
	e.ZoneHints, e.NodeHints = zones, nodes
	return e
}

func z(zones ...string) []string { return zones }

func TestCategorizeEndpoints(t *testing.T) {
	zoneA := map[string]string{corev1.LabelTopologyZone: "zone-a"}
	clusterPort := &ServicePort{}
	etpLocal := &ServicePort{ExternalPolicyLocal: true, NodePort: 8080}
	itpLocal := &ServicePort{InternalPolicyLocal: true}
	itpLocalNodePort := &ServicePort{InternalPolicyLocal: true, NodePort: 8080}
	cases := []struct {
		name       string
		labels     map[string]string
		sp         *ServicePort
		eps        []*Endpoint
		cluster    string
		local      string
		all        string
		hasAny     bool
		mode       string
		nilCluster bool
		nilLocal   bool
	}{{
		name:   "zone hints used when every ready endpoint has one and one matches",
		labels: zoneA, sp: clusterPort,
		eps: []*Endpoint{
			ep("10.1.2.3:80", "rs", z("zone-a"), nil), ep("10.1.2.4:80", "rs", z("zone-b"), nil),
			ep("10.1.2.5:80", "rs", z("zone-c"), nil), ep("10.1.2.6:80", "rs", z("zone-a"), nil),
		},
		cluster: "10.1.2.3:80,10.1.2.6:80", all: "10.1.2.3:80,10.1.2.6:80", hasAny: true, mode: TopologyPreferSameZone, nilLocal: true,
	}, {
		name:   "one ready endpoint without a hint disables hints",
		labels: zoneA, sp: clusterPort,
		eps: []*Endpoint{
			ep("10.1.2.3:80", "rs", z("zone-a"), nil), ep("10.1.2.4:80", "rs", z("zone-b"), nil),
			ep("10.1.2.5:80", "rs", nil, nil), ep("10.1.2.6:80", "rs", z("zone-a"), nil),
		},
		cluster: "10.1.2.3:80,10.1.2.4:80,10.1.2.5:80,10.1.2.6:80", all: "10.1.2.3:80,10.1.2.4:80,10.1.2.5:80,10.1.2.6:80", hasAny: true, nilLocal: true,
	}, {
		name:   "node without a zone label ignores zone hints",
		labels: map[string]string{}, sp: clusterPort,
		eps:     []*Endpoint{ep("10.1.2.3:80", "rs", z("zone-a"), nil)},
		cluster: "10.1.2.3:80", all: "10.1.2.3:80", hasAny: true, nilLocal: true,
	}, {
		name:   "no endpoint hinted for this zone: no filtering",
		labels: map[string]string{corev1.LabelTopologyZone: "zone-b"}, sp: clusterPort,
		eps:     []*Endpoint{ep("10.1.2.3:80", "rs", z("zone-a"), nil)},
		cluster: "10.1.2.3:80", all: "10.1.2.3:80", hasAny: true, nilLocal: true,
	}, {
		name:   "unready endpoints neither count for hints nor are used",
		labels: zoneA, sp: clusterPort,
		eps: []*Endpoint{
			ep("10.1.2.3:80", "", z("zone-a"), nil), ep("10.1.2.4:80", "rs", z("zone-b"), nil),
			ep("10.1.2.5:80", "rs", z("zone-c"), nil), ep("10.1.2.6:80", "", z("zone-a"), nil),
		},
		cluster: "10.1.2.4:80,10.1.2.5:80", all: "10.1.2.4:80,10.1.2.5:80", hasAny: true, nilLocal: true,
	}, {
		name:   "multiple zone hints per endpoint",
		labels: map[string]string{corev1.LabelTopologyZone: "zone-c"}, sp: clusterPort,
		eps: []*Endpoint{
			ep("10.1.2.3:80", "rs", z("zone-a", "zone-b", "zone-c"), nil), ep("10.1.2.4:80", "rs", z("zone-b", "zone-c"), nil),
			ep("10.1.2.5:80", "rs", z("zone-b", "zone-d"), nil), ep("10.1.2.6:80", "rs", z("zone-c"), nil),
		},
		cluster: "10.1.2.3:80,10.1.2.4:80,10.1.2.6:80", all: "10.1.2.3:80,10.1.2.4:80,10.1.2.6:80", hasAny: true, mode: TopologyPreferSameZone, nilLocal: true,
	}, {
		name:   "node hints win over zone hints",
		labels: zoneA, sp: clusterPort,
		eps: []*Endpoint{
			ep("10.1.2.3:80", "rs", z("zone-a"), z("node-1")), ep("10.1.2.4:80", "rs", z("zone-a"), z(testNodeName)),
		},
		cluster: "10.1.2.4:80", all: "10.1.2.4:80", hasAny: true, mode: TopologyPreferSameNode, nilLocal: true,
	}, {
		name:   "node hints for other nodes only: zone hints apply",
		labels: zoneA, sp: clusterPort,
		eps: []*Endpoint{
			ep("10.1.2.3:80", "rs", z("zone-a"), z("node-1")), ep("10.1.2.4:80", "rs", z("zone-b"), z("node-2")),
		},
		cluster: "10.1.2.3:80", all: "10.1.2.3:80", hasAny: true, mode: TopologyPreferSameZone, nilLocal: true,
	}, {
		name:   "eTP Local: topology filters cluster endpoints but not local ones; merged",
		labels: zoneA, sp: etpLocal,
		eps: []*Endpoint{
			ep("10.1.2.3:80", "rsl", z("zone-a"), nil), ep("10.1.2.4:80", "rsl", z("zone-b"), nil),
			ep("10.1.2.5:80", "rs", z("zone-c"), nil), ep("10.1.2.6:80", "rs", z("zone-a"), nil),
		},
		cluster: "10.1.2.3:80,10.1.2.6:80", local: "10.1.2.3:80,10.1.2.4:80", all: "10.1.2.3:80,10.1.2.4:80,10.1.2.6:80", hasAny: true, mode: TopologyPreferSameZone,
	}, {
		name:   "iTP Local with a NodePort uses both sets",
		labels: zoneA, sp: itpLocalNodePort,
		eps: []*Endpoint{
			ep("10.0.0.0:80", "rsl", z("zone-a"), nil), ep("10.0.0.1:80", "rsl", z("zone-b"), nil),
			ep("10.0.0.2:80", "rs", z("zone-a"), nil), ep("10.0.0.3:80", "rs", z("zone-b"), nil),
		},
		cluster: "10.0.0.0:80,10.0.0.2:80", local: "10.0.0.0:80,10.0.0.1:80", all: "10.0.0.0:80,10.0.0.1:80,10.0.0.2:80", hasAny: true, mode: TopologyPreferSameZone,
	}, {
		name: "iTP Local, no endpoints", sp: itpLocal,
		nilCluster: true, nilLocal: true,
	}, {
		name: "iTP Local, all endpoints remote: none reachable but some exist", sp: itpLocal,
		eps:        []*Endpoint{ep("10.0.0.0:80", "rs", nil, nil), ep("10.0.0.1:80", "rs", nil, nil)},
		hasAny:     true,
		nilCluster: true, nilLocal: true,
	}, {
		name: "iTP Local, local endpoints only", sp: itpLocal,
		eps:   []*Endpoint{ep("10.0.0.0:80", "rsl", nil, nil), ep("10.0.0.1:80", "rs", nil, nil), ep("10.0.0.2:80", "rsl", nil, nil)},
		local: "10.0.0.0:80,10.0.0.2:80", all: "10.0.0.0:80,10.0.0.2:80", hasAny: true,
		nilCluster: true,
	}, {
		name: "cluster: no ready endpoints, serving+terminating fallback, not-serving never", sp: clusterPort,
		eps:     []*Endpoint{ep("10.0.0.0:80", "st", nil, nil), ep("10.0.0.1:80", "t", nil, nil), ep("10.0.0.2:80", "st", nil, nil)},
		cluster: "10.0.0.0:80,10.0.0.2:80", all: "10.0.0.0:80,10.0.0.2:80", hasAny: true, nilLocal: true,
	}, {
		name: "cluster: ready endpoints win over terminating ones", sp: clusterPort,
		eps:     []*Endpoint{ep("10.0.0.0:80", "rs", nil, nil), ep("10.0.0.1:80", "st", nil, nil)},
		cluster: "10.0.0.0:80", all: "10.0.0.0:80", hasAny: true, nilLocal: true,
	}, {
		name: "eTP Local: local falls back to terminating independently of cluster", sp: etpLocal,
		eps: []*Endpoint{
			ep("10.0.0.1:80", "rs", nil, nil), ep("10.0.0.2:80", "stl", nil, nil), ep("10.0.0.3:80", "tl", nil, nil),
		},
		cluster: "10.0.0.1:80", local: "10.0.0.2:80", all: "10.0.0.1:80,10.0.0.2:80", hasAny: true,
	}, {
		name: "eTP Local: terminating endpoints only on other nodes", sp: etpLocal,
		eps:     []*Endpoint{ep("10.0.1.5:80", "st", nil, nil)},
		cluster: "10.0.1.5:80", all: "10.0.1.5:80", hasAny: true, nilLocal: true,
	}, {
		name: "nothing usable anywhere", sp: etpLocal,
		eps:      []*Endpoint{ep("10.0.1.5:80", "tl", nil, nil), ep("10.0.1.6:80", "t", nil, nil)},
		nilLocal: true,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := CategorizeEndpoints(tc.eps, tc.sp, testNodeName, tc.labels)
			if got := epStrings(c.Cluster); got != tc.cluster {
				t.Errorf("cluster: got %q want %q", got, tc.cluster)
			}
			if got := epStrings(c.Local); got != tc.local {
				t.Errorf("local: got %q want %q", got, tc.local)
			}
			if got := epStrings(c.AllReachable); got != tc.all {
				t.Errorf("all: got %q want %q", got, tc.all)
			}
			if c.HasAnyEndpoints != tc.hasAny {
				t.Errorf("hasAny: got %v", c.HasAnyEndpoints)
			}
			if c.TopologyMode != tc.mode {
				t.Errorf("mode: got %q want %q", c.TopologyMode, tc.mode)
			}
			if tc.nilCluster != (c.Cluster == nil) {
				t.Errorf("cluster nil=%v, want %v", c.Cluster == nil, tc.nilCluster)
			}
			if tc.nilLocal != (c.Local == nil) {
				t.Errorf("local nil=%v, want %v", c.Local == nil, tc.nilLocal)
			}
		})
	}
}
