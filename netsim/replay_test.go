package netsim

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"testing"
)

// replayRun builds a cluster in replay mode, makes three requests through a DNAT
// handler, and returns the pcap of every node interface.
func replayRun(t *testing.T, seed uint64) []byte {
	c := newTestCluster(t, Config{Seed: seed, Replay: true, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	var web []netip.AddrPort
	for i, node := range []string{"node-a", "node-b"} {
		p := startPod(t, c, node, fmt.Sprintf("default/web-%d", i), 8080)
		web = append(web, netip.AddrPortFrom(p.IP(), 8080))
	}
	attachDNAT(c, &staticDNAT{vip: netip.MustParseAddrPort("10.96.0.5:80"), backends: web, ladder: true})
	client := startPod(t, c, "node-a", "default/client")
	var bufs [4]bytes.Buffer
	for i, point := range []string{"node-a/cbr0", "node-a/eth0", "node-b/eth0", "node-b/cbr0"} {
		stop, err := c.Capture(point, &bufs[i])
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
	}
	err := c.Run(func() error {
		for i := 0; i < 3; i++ {
			if _, err := ask(t, client.Net(), "10.96.0.5:80"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for i := range bufs {
		all = append(all, bufs[i].Bytes()...)
	}
	return all
}

func TestReplayIsByteIdentical(t *testing.T) {
	if testing.Short() {
		t.Skip("replay mode is slow")
	}
	a := replayRun(t, 42)
	b := replayRun(t, 42)
	if len(a) < 1000 {
		t.Fatalf("capture too small: %d bytes", len(a))
	}
	if !bytes.Equal(a, b) {
		t.Errorf("two replay runs with seed 42 differ: %x vs %x (%d vs %d bytes)", sha256.Sum256(a), sha256.Sum256(b), len(a), len(b))
	}
	c := replayRun(t, 43)
	if bytes.Equal(a, c) {
		t.Errorf("runs with seeds 42 and 43 are identical: the seed does not reach the wire")
	}
}
