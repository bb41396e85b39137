package netsim

import (
	"testing"
)

// Close ends the datapath goroutine and host stack of every node, removed ones included
// (their goroutines wait on their input queue, which Close wakes).
func TestCloseStopsRemovedNodes(t *testing.T) {
	c, err := New(Config{Seed: 1, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	if err != nil {
		t.Fatal(err)
	}
	b := c.Node("node-b")
	if err := c.RemoveNode("node-b"); err != nil {
		t.Fatal(err)
	}
	c.Close() // waits for every node's goroutine
	for _, n := range []*Node{c.allNodes[0], b} {
		select {
		case <-n.stopped:
		default:
			t.Errorf("node %s: datapath goroutine still running after Close", n.name)
		}
	}
}
