package scenario

import (
	"strings"
	"testing"
)

// The expectations of this file are the ones Kubernetes' sig-network Service e2e tests
// need (issue 22): result failed, expected rejections, HTTP answers, endpoint details,
// and the API-level steps.

const failedScenario = `cluster: {dns: off, nodes: [{name: node-a}, {name: node-b}]}
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: empty}, spec: {clusterIP: 10.96.0.50, selector: {app: none}, ports: [{port: 80}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-b, containers: [{name: c, image: i}]}}
steps:
  - name: no endpoints
    connect: {from: pod:default/client, to: service:default/empty:80}
    expect: {result: failed}
  - name: a port the service does not have
    connect: {from: pod:default/client, to: 10.96.0.50:8080}
    expect: {result: failed}
`

// TestResultFailed: result failed holds for connections that fail differently by mode
// (to a port a cluster IP does not serve: no rule in the iptables mode, so the packet
// is lost; the IPVS mode's kube-ipvs0 address answers with a reset; the nftables mode
// rejects), so one file passes under all three; it fails for a connection that is
// answered, and an exact result fails where the mode ends the attempt otherwise.
func TestResultFailed(t *testing.T) {
	want := map[string]string{"iptables": "dropped 1", "ipvs": "refused 1", "nftables": "refused 1"}
	for _, mode := range []string{"iptables", "ipvs", "nftables"} {
		rep := mustRun(t, mustParse(t, failedScenario), mode)
		if !rep.Passed {
			t.Fatalf("%s: %s", mode, reportText(rep))
		}
		if got := summaryCounts(step(t, rep, "a port the service does not have").Traffic.Results); got != want[mode] {
			t.Errorf("%s: got %s, want %s", mode, got, want[mode])
		}
	}
	exact := strings.Replace(failedScenario, "to: 10.96.0.50:8080}\n    expect: {result: failed}", "to: 10.96.0.50:8080}\n    expect: {result: refused}", 1)
	if rep := mustRun(t, mustParse(t, exact), "iptables"); rep.Passed || rep.Failed != 1 {
		t.Errorf("result refused held for a dropped connection: %s", reportText(rep))
	}
	answered := failedScenario + `  - {apply: [{apiVersion: v1, kind: Pod, metadata: {name: web-0, labels: {app: none}}, spec: {nodeName: node-a, containers: [{name: w, image: i, ports: [{containerPort: 80}]}]}}]}
  - name: answered
    connect: {from: pod:default/client, to: service:default/empty:80}
    expect: {result: failed}
`
	rep := mustRun(t, mustParse(t, answered), "iptables")
	st := step(t, rep, "answered")
	if rep.Passed || len(st.Expectations) != 1 || st.Expectations[0].OK || st.Expectations[0].Got != "connected 1" {
		t.Errorf("result failed held for an answered connection: %s", reportText(rep))
	}
}
