package scenario

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

const apiServerRestartScenario = `cluster:
  service_cidr: 10.96.0.0/24
  node_port_range: 30000-30099
  nodes: [{name: node-a}, {name: node-b}]
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {type: NodePort, clusterIP: 10.96.0.20, selector: {app: web}, ports: [{port: 80, targetPort: 8080, nodePort: 30010}]}}
  - {apiVersion: v1, kind: Service, metadata: {name: kept}, spec: {clusterIP: 10.96.0.200, selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-0, labels: {app: web}}, spec: {nodeName: node-b, containers: [{name: w, image: i, ports: [{containerPort: 8080}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-a, containers: [{name: c, image: i}]}}
steps:
  - name: same flags
    restart_apiserver: {}
    expect: {repair: []}
  - name: new ranges
    restart_apiserver: {service_cidr: 10.96.0.128/25, node_port_range: 30050-30149}
    expect:
      repair:
        - "the ClusterIP 10.96.0.1 for service default/kubernetes is not within the service CIDR 10.96.0.128/25"
        - "the ClusterIP 10.96.0.10 for service kube-system/kube-dns is not within the service CIDR 10.96.0.128/25"
        - "the ClusterIP 10.96.0.20 for service default/web is not within the service CIDR 10.96.0.128/25"
        - "the node port 30010 for service default/web is not within the port range 30050-30149"
  - name: the old address still works
    connect: {from: pod:default/client, to: service:default/web:80}
    expect: {result: connected}
  - name: and the old node port
    connect: {from: pod:default/client, to: "nodeport:default/web@node-b"}
    expect: {result: connected}
  - name: a new service
    apply:
      - {apiVersion: v1, kind: Service, metadata: {name: fresh}, spec: {type: NodePort, selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}}
  - connect: {from: pod:default/client, to: service:default/fresh:80}
    expect: {result: connected}
`

// TestRestartAPIServerStep: restart_apiserver with the same flags reports nothing; with
// new ranges the repair pass reports the Services (default/kubernetes among them) whose
// cluster IP or node port is outside them, and they keep working; a new Service gets
// its values from the new ranges. A wrong expectation fails the step.
func TestRestartAPIServerStep(t *testing.T) {
	rep := mustRun(t, mustParse(t, apiServerRestartScenario), "iptables")
	if !rep.Passed {
		t.Fatalf("%s", reportText(rep))
	}
	// The new service's values come from the new ranges.
	var ip string
	var port int
	for _, d := range step(t, rep, "a new service").Details {
		if strings.HasPrefix(d, "service default/fresh: NodePort ") {
			fmt.Sscanf(d, "service default/fresh: NodePort %s 80/TCP -> 8080, node port %d", &ip, &port)
		}
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(ip, ",")); err != nil || !netip.MustParsePrefix("10.96.0.128/25").Contains(a) || port < 30050 || port > 30149 {
		t.Errorf("default/fresh got %q and node port %d, want them from the new ranges", ip, port)
	}
	wrong := strings.Replace(apiServerRestartScenario, `        - "the node port 30010 for service default/web is not within the port range 30050-30149"
`, "", 1)
	rep = mustRun(t, mustParse(t, wrong), "iptables")
	if st := step(t, rep, "new ranges"); st.Status != "failed" || !strings.Contains(reportText(rep), "unexpected: the node port 30010") {
		t.Errorf("an unexpected repair problem passed:\n%s", reportText(rep))
	}

	_, err := Parse("test.yaml", []byte(`cluster: {nodes: [{name: node-a}]}
steps:
  - restart_apiserver: {service_cidr: "fd00::/112", node_port_range: 300-200}
  - restart_apiserver: {service_cidr: "10.0.0.0/8,10.1.0.0/16"}
  - connect: {from: node:node-a, to: 10.0.0.1:80}
    expect: {repair: []}
`))
	for _, want := range []string{
		`test.yaml:3: steps[0].restart_apiserver.service_cidr: the cluster's service families are IPv4: a restart cannot change them, got "fd00::/112"`,
		`test.yaml:3: steps[0].restart_apiserver.node_port_range: want FIRST-LAST such as 30000-32767, got "300-200"`,
		`test.yaml:4: steps[1].restart_apiserver.service_cidr: the two CIDRs of a dual-stack service_cidr must be one IPv4 and one IPv6`,
		`test.yaml:6: steps[2].expect.repair: only restart_apiserver steps have repair`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in:\n%v", want, err)
		}
	}
}
