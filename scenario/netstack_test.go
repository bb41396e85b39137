package scenario

import (
	"context"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
)

const slowScenario = `name: a slow machine
cluster:
  seed: 1
  nodes: [{name: node-a}, {name: node-b}, {name: node-c}]
  proxy: {mode: userspace}
manifests:
  - apiVersion: v1
    kind: Service
    metadata: {name: my-service}
    spec:
      selector: {app: MyApp}
      ports: [{port: 80, targetPort: 9376}]
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: my-app}
    spec:
      replicas: 3
      selector: {matchLabels: {app: MyApp}}
      template:
        metadata: {labels: {app: MyApp}}
        spec: {containers: [{name: b, image: i, ports: [{containerPort: 9376}]}]}
  - apiVersion: v1
    kind: Pod
    metadata: {name: client}
    spec: {nodeName: node-a, containers: [{name: c, image: i}]}
steps:
  - name: requests in turn
    connect:
      from: pod:default/client
      to: service:default/my-service:80
      count: 6
`

// TestNetstackTrafficOnASlowMachine: real connections through the userspace proxy come
// out the same however long the machine takes to carry their packets. Every SYN to a
// backend costs 30ms of CPU in the datapath here (a loaded machine); the virtual clock
// must not move meanwhile, or the proxy's first dial timeout (250ms of virtual time)
// fires in a healthy dial, the proxy retries on the next endpoint and round robin
// skips one (the demo's 31/30/29 under load).
func TestNetstackTrafficOnASlowMachine(t *testing.T) {
	r := mustStart(t, slowScenario, "userspace")
	slow := netsim.HandlerFunc(func(_ *netsim.Context, pk *netsim.Packet) netsim.Verdict {
		if pk.Proto == netfilter.ProtoTCP && pk.DstPort == 9376 && pk.TCPFlags&netfilter.TCPSyn != 0 && pk.TCPFlags&netfilter.TCPAck == 0 {
			for start := time.Now(); time.Since(start) < 30*time.Millisecond; {
			}
		}
		return netsim.Verdict{}
	})
	for _, n := range r.c.Nodes() {
		defer n.AddHandler(netsim.HandlerSpec{Name: "slow", Hook: netfilter.Postrouting, Handler: slow})()
	}
	r.runStep(context.Background(), 0)
	tr := r.rep.Steps[0].Traffic
	if tr == nil || tr.Via != "netstack" {
		t.Fatalf("step: %+v", r.rep.Steps[0])
	}
	if tr.Results["connected"] != 6 || len(tr.Backends) != 3 {
		t.Fatalf("results %v, backends %v", tr.Results, tr.Backends)
	}
	for b, n := range tr.Backends {
		if n != 2 {
			t.Errorf("round robin over 3 backends, 6 connections: %s got %d (%v)", b, n, tr.Backends)
		}
	}
	if e := r.elapsed(); e >= 250*time.Millisecond {
		t.Errorf("the virtual clock moved %s while the connections waited on the CPU", e)
	}
}
