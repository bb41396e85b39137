package scenario

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
)

const dialScenario = `name: two pods
cluster:
  seed: 1
  nodes: [{name: node-a}, {name: node-b}]
manifests:
  - apiVersion: v1
    kind: Pod
    metadata: {name: server}
    spec: {nodeName: node-b, containers: [{name: s, image: i, ports: [{containerPort: 8080}, {containerPort: 8080, protocol: UDP}, {containerPort: 8081}]}]}
  - apiVersion: v1
    kind: Pod
    metadata: {name: client}
    spec: {nodeName: node-a, containers: [{name: c, image: i}]}
`

// TestDialWhoami: a real connection through DialWhoami reports who answered and the
// source it saw, hands errors to Failed, and gives up after its budget of virtual time
// when nothing answers.
func TestDialWhoami(t *testing.T) {
	r := mustStart(t, dialScenario, "iptables")
	client, server := r.c.Pod("default", "client"), r.c.Pod("default", "server")
	// Port 8081 is a black hole: node-b drops what is sent to it.
	drop := netsim.HandlerFunc(func(_ *netsim.Context, pk *netsim.Packet) netsim.Verdict {
		if pk.DstPort == 8081 {
			return netsim.VerdictDrop
		}
		return netsim.Verdict{}
	})
	defer server.Node().AddHandler(netsim.HandlerSpec{Name: "drop 8081", Hook: netfilter.Forward, Handler: drop})()
	var failedWith error
	record := func(err error) Dialed {
		failedWith = err
		return Dialed{Result: "failed", Reason: "test"}
	}
	cases := []struct {
		name    string
		network string
		port    uint16
		failed  func(error) Dialed
		want    Dialed
		wantErr bool // Failed saw an error
		waited  time.Duration
	}{
		{name: "tcp answer", network: "tcp", port: 8080, want: Dialed{Result: netsim.ResultConnected, Pod: "default/server", Node: "node-b", Seen: client.IP()}},
		{name: "udp answer", network: "udp", port: 8080, want: Dialed{Result: netsim.ResultReplied, Pod: "default/server", Node: "node-b", Seen: client.IP()}},
		{name: "refused, to Failed", network: "tcp", port: 9, failed: record, want: Dialed{Result: "failed", Reason: "test"}, wantErr: true},
		{name: "no answer", network: "tcp", port: 8081, want: Dialed{Result: netsim.ResultDropped, Reason: "no answer within 2s"}, waited: 2 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			failedWith = nil
			start := r.c.Clock().Now()
			got := DialWhoami(context.Background(), r.c, WhoamiDial{Net: client.Net(), Network: tc.network,
				Dst: netip.AddrPortFrom(server.IP(), tc.port), Line: "test", Budget: 2 * time.Second, Failed: tc.failed})
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if (failedWith != nil) != tc.wantErr {
				t.Errorf("Failed saw %v", failedWith)
			}
			if waited := r.c.Clock().Now().Sub(start); waited != tc.waited {
				t.Errorf("the virtual clock moved %s, want %s", waited, tc.waited)
			}
		})
	}
	// Without Failed an error is a drop with the error's text.
	got := DialWhoami(context.Background(), r.c, WhoamiDial{Net: client.Net(), Network: "tcp", Dst: netip.AddrPortFrom(server.IP(), 9), Line: "test", Budget: time.Second})
	if got.Result != netsim.ResultDropped || !strings.Contains(got.Reason, "refused") {
		t.Errorf("without Failed: %+v", got)
	}
}
