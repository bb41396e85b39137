package main

import (
	"bytes"
	"testing"

	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
)

// The three outcomes of kubernetes#139628: before it (1.31) the scaled-to-0 service's
// entry to the dead pod is deleted and the next datagram is REJECTed; with it
// (1.32-1.35) the entry survives and the datagrams vanish into the dead pod's address;
// after the fix (1.36) the entry is deleted again. Every release recovers once a new pod
// serves the service.
func TestRegressionAcrossVersions(t *testing.T) {
	want := map[proxy.Version]Outcome{
		31: {Result: netsim.ResultRefused, StaleEntries: 0, Recovered: true},
		32: {Result: netsim.ResultDropped, StaleEntries: 1, Recovered: true},
		35: {Result: netsim.ResultDropped, StaleEntries: 1, Recovered: true},
		36: {Result: netsim.ResultRefused, StaleEntries: 0, Recovered: true},
	}
	for _, v := range Versions {
		var out bytes.Buffer
		got, err := Replay(&out, v)
		if err != nil {
			t.Fatal(err)
		}
		if got != want[v] {
			t.Errorf("kube-proxy %s: %+v, want %+v\n%s", v, got, want[v], out.String())
		}
	}
}
