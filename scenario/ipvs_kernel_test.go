package scenario

import (
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
)

// node_settings name the kernel (kernel: {version: ...}) and IPVS sysctls, for every
// node and per node; bad values are errors naming the file, line and field.
func TestNodeSettingsKernelAndIPVS(t *testing.T) {
	s := mustParse(t, `cluster:
  dns: off
  proxy: {mode: ipvs}
  node_settings: {kernel: {version: "4.19"}, ipvs: {conn_reuse_mode: 1}}
  nodes:
    - {name: node-a}
    - {name: node-b, settings: {kernel: {version: "6.6.8"}, ipvs: {expire_nodest_conn: 0}}}
`)
	p, err := s.prepare("")
	if err != nil {
		t.Fatal(err)
	}
	want := []netsim.NodeSettings{netsim.DefaultNodeSettings(), netsim.DefaultNodeSettings()}
	want[0].Kernel = netfilter.KernelVersion{Major: 4, Minor: 19}
	want[0].IPVS.ConnReuseMode = netsim.SetTo(1)
	want[1].Kernel = netfilter.KernelVersion{Major: 6, Minor: 6}
	want[1].IPVS.ConnReuseMode = netsim.SetTo(1)
	want[1].IPVS.ExpireNodestConn = netsim.SetTo(0)
	for i, n := range p.cfg.Nodes {
		if *n.Settings != want[i] {
			t.Errorf("%s: settings %+v, want %+v", n.Name, *n.Settings, want[i])
		}
	}

	_, err = Parse("test.yaml", []byte(`cluster:
  node_settings:
    kernel: {version: "five"}
    ipvs: {conn_reuse_mode: 3, conntrack: -1}
`))
	for _, w := range []string{"test.yaml:3", "cluster.node_settings.kernel.version", "test.yaml:4", "cluster.node_settings.ipvs.conn_reuse_mode: want 0 to 2, got 3",
		"cluster.node_settings.ipvs.conntrack: want 0 to 1, got -1"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v lacks %q", err, w)
		}
	}
}

// Row 35 through a scenario: a pod reaching the node port of an externalTrafficPolicy
// Local service from a node without a local endpoint is refused under the IPVS mode of
// kube-proxy 1.23 and served by the other node's endpoint from 1.24.
func TestIPVSLocalPolicyFallbackScenario(t *testing.T) {
	text := `cluster:
  dns: off
  nodes: [{name: node-a}, {name: node-b}]
  proxy: {mode: ipvs, version: "VERSION"}
  node_settings: {kernel: {version: "5.4"}}
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {type: NodePort, externalTrafficPolicy: Local, selector: {app: web}, ports: [{port: 80, targetPort: 8080, nodePort: 30080}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-b, labels: {app: web}}, spec: {nodeName: node-b, containers: [{name: c, image: i, ports: [{containerPort: 8080}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-a, containers: [{name: c, image: i}]}}
steps:
  - connect: {from: pod:default/client, to: "node:node-a:30080", count: 3}
`
	for _, tc := range []struct{ version, result string }{{"1.23", "refused"}, {"1.24", "connected"}} {
		rep := mustRun(t, mustParse(t, strings.Replace(text, "VERSION", tc.version, 1)), "")
		if got := rep.Steps[0].Traffic.Results; got[tc.result] != 3 {
			t.Errorf("kube-proxy %s: results %v, want 3 %s", tc.version, got, tc.result)
		}
	}
}
