package scenario

import (
	"strings"
	"testing"
)

const faultsScenario = `cluster:
  dns: direct
  nodes: [{name: node-a}, {name: node-b}]
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {clusterIP: 10.96.1.80, selector: {app: web}, ports: [{name: http, port: 80, targetPort: 8080}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-b, labels: {app: web}}, spec: {nodeName: node-b, containers: [{name: c, image: i, ports: [{containerPort: 8080}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-a, containers: [{name: c, image: i}]}}
steps:
  - name: baseline
    connect: {from: pod:default/client, to: web:80, count: 3}
    expect: {result: connected, reaches: [default/web-b]}
  - name: dns direct answers SRV
    dns: {from: pod:default/client, name: _http._tcp.web, type: SRV}
    expect: {rcode: NOERROR, answer: ["0 100 80 web.default.svc.cluster.local."]}
  - name: PTR of the service's address, given as an address (as dig -x)
    dns: {from: pod:default/client, name: 10.96.1.80, type: PTR}
    expect: {rcode: NOERROR, answer: ["web.default.svc.cluster.local."]}
  - name: partition
    partition: [[node-a], [node-b]]
  - name: cut off
    connect: {from: pod:default/client, to: service:default/web:80}
    expect: {result: dropped}
  - heal: true
  - name: back
    connect: {from: pod:default/client, to: service:default/web:80}
    expect: {result: connected}
  - name: lossy link
    fault: {link: pod:default/web-b, loss: 100%}
  - name: lost
    connect: {from: pod:default/client, to: service:default/web:80, count: 4}
    expect: {result: dropped}
  - name: lost over real sockets too
    connect: {from: pod:default/client, to: service:default/web:80, via: netstack}
    expect: {result: dropped}
  - fault: {link: pod:default/web-b}
  - name: slow kube-proxy on node-a
    sync: {delay: {node: node-a, duration: 5s}}
  - name: a second backend
    apply:
      - {apiVersion: v1, kind: Pod, metadata: {name: web-a, labels: {app: web}}, spec: {nodeName: node-a, containers: [{name: c, image: i, ports: [{containerPort: 8080}]}]}}
  - name: not in node-a's rules yet
    connect: {from: pod:default/client, to: service:default/web:80, count: 20}
    expect: {reaches: [default/web-b]}
  - name: after the sync delay
    at: 16s
    connect: {from: pod:default/client, to: service:default/web:80, count: 30}
    expect: {backends: 2, min_success: 1}
  - name: endpoints
    check: {endpoints: {service: default/web}}
    expect: {count: 2, ready: 2}
  - name: kill node-b
    kill_node: node-b
  - name: web-b's endpoint is still listed, and draws fail
    connect: {from: pod:default/client, to: service:default/web:80, count: 30}
    expect: {min_success: 0.2}
  - name: not all
    connect: {from: pod:default/client, to: service:default/web:80, count: 30}
    expect: {min_success: 1}
`

// TestFaultsAndSyncs: partitions, link loss (probes and real sockets), sync delays with
// timed steps, node death; the last step's expectation must fail (and only it).
func TestFaultsAndSyncs(t *testing.T) {
	s := mustParse(t, faultsScenario)
	rep := mustRun(t, s, "iptables")
	var b strings.Builder
	rep.WriteText(&b)
	for i, st := range rep.Steps {
		want := "ok"
		if i == len(rep.Steps)-1 {
			want = "failed"
		}
		if st.Status != want {
			t.Errorf("step %d %q: status %s, want %s\n%s", i+1, st.Title, st.Status, want, b.String())
		}
	}
	if rep.Passed || rep.Failed != 1 {
		t.Errorf("want exactly one failed step, got %d", rep.Failed)
	}
	if got := step(t, rep, "after the sync delay").Time; got != "16s" {
		t.Errorf("the timed step ran at t=%s, want 16s", got)
	}
	if got := step(t, rep, "lost over real sockets too").Traffic.Reasons; got["no answer within 10s"] != 1 {
		t.Errorf("the netstack attempt should wait 10s of virtual time: %v", got)
	}
}
