package scenario

import (
	"strings"
	"testing"
)

// dumpScenario is the manifests of a `kubectl get -A -o yaml` dump: a Service with a
// selector and its EndpointSlice (three endpoints, one not ready, one on a node the
// scenario does not have), without the Pods behind them.
const dumpScenario = `cluster:
  %s
  nodes: [{name: node-a}, {name: node-b}]
manifests:
  - apiVersion: v1
    kind: List
    items:
      - apiVersion: v1
        kind: Service
        metadata: {name: web, namespace: shop}
        spec: {clusterIP: 10.96.5.5, selector: {app: web}, ports: [{name: http, port: 80, targetPort: http}]}
      - apiVersion: discovery.k8s.io/v1
        kind: EndpointSlice
        metadata:
          name: web-x7k2p
          namespace: shop
          labels: {kubernetes.io/service-name: web, endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io}
        addressType: IPv4
        ports: [{name: http, port: 8080, protocol: TCP}]
        endpoints:
          - {addresses: [10.244.0.7], conditions: {ready: true}, nodeName: node-a, targetRef: {kind: Pod, name: web-5d9f-abcde, namespace: shop}}
          - {addresses: [10.244.1.9], conditions: {ready: true}, nodeName: node-b, targetRef: {kind: Pod, name: web-5d9f-fghij, namespace: shop}}
          - {addresses: [10.244.1.10], conditions: {ready: false}, nodeName: node-b, targetRef: {kind: Pod, name: web-5d9f-klmno, namespace: shop}}
          - {addresses: [10.244.2.3], conditions: {ready: true}, nodeName: node-gone, targetRef: {kind: Pod, name: web-5d9f-pqrst, namespace: shop}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-a, containers: [{name: c, image: i}]}}
steps:
  - name: traffic as in the real cluster
    connect: {from: pod:default/client, to: service:shop/web:80, count: 20}
    expect: {result: connected, reaches: [shop/web-5d9f-abcde, shop/web-5d9f-fghij], backends: 2}
  - name: the endpoints kept
    check: {endpoints: {service: shop/web}}
    expect:
      endpoints:
        - {address: 10.244.0.7, port: 8080, node: node-a, ready: true}
        - {address: 10.244.1.9, port: 8080, node: node-b, ready: true}
        - {address: 10.244.1.10, port: 8080, node: node-b, ready: false}
`

// TestEndpointsOfADump: the EndpointSlices of a dump without its Pods are kept as the
// cluster's state (cluster.endpoints: keep, the default): each endpoint gets a stand-in
// pod at its address on its node, ready as the endpoint says, so traffic reaches the
// ready ones, and the report's notes say what was stood in and what was left out (the
// endpoint on a node the scenario does not have). With cluster.endpoints: derive the
// slices are ignored, said so, and the Service has no endpoints.
func TestEndpointsOfADump(t *testing.T) {
	rep := mustRun(t, mustParse(t, strings.Replace(dumpScenario, "%s", "dns: off", 1)), "iptables")
	if !rep.Passed {
		t.Fatalf("%s", reportText(rep))
	}
	notes := strings.Join(rep.Notes, "\n")
	for _, want := range []string{
		"endpoints: shop/web keeps the 3 endpoints the manifests give for Pods they do not have, each a stand-in pod at its address (cluster.endpoints: keep)",
		"stand-in pod shop/web-5d9f-abcde at 10.244.0.7 on node-a",
		"endpoints: shop/web's endpoint 10.244.2.3 (Pod web-5d9f-pqrst) has node node-gone, which is not in the cluster: left out",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes:\n%s\nwant %q", notes, want)
		}
	}
	derive := strings.Replace(dumpScenario, "%s", "dns: off\n  endpoints: derive", 1)
	rep = mustRun(t, mustParse(t, derive), "iptables")
	if st := step(t, rep, "traffic as in the real cluster"); st.Status != "failed" || st.Traffic.Results["refused"] != 20 {
		t.Errorf("derive: %s %v, want every connection refused (no endpoints)", st.Status, st.Traffic.Results)
	}
	if notes := strings.Join(rep.Notes, "\n"); !strings.Contains(notes, "endpoints: 4 endpoints of shop/web in the manifests ignored (cluster.endpoints: derive)") {
		t.Errorf("derive notes:\n%s", notes)
	}
	if _, err := Parse("test.yaml", []byte("cluster: {endpoints: mirror}\n")); err == nil || !strings.Contains(err.Error(), `cluster.endpoints: want keep or derive, got "mirror"`) {
		t.Errorf("bad value: %v", err)
	}
}
