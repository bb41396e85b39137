package netsim

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
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

// Sockets opened after Close fail with net.ErrClosed, on every kind of stack (before,
// dials failed with whatever netstack made of a stack without NICs, "network is
// unreachable", and listens succeeded on a dead stack).
func TestNoSocketsAfterClose(t *testing.T) {
	c, err := New(Config{Seed: 1, ManualClock: true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.AddExternalHost("client", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := c.StartPod("node-a", "default", "web", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	nets := []*Net{h.Net(), pod.Net(), c.Node("node-a").HostNet()}
	c.Close()
	// The context only bounds a regression: a dial that hangs fails instead of
	// stopping the test binary.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range nets {
		for _, network := range []string{"tcp", "udp"} {
			if conn, err := n.DialContext(ctx, network, "172.18.0.2:80"); !errors.Is(err, net.ErrClosed) {
				t.Errorf("%s: %s dial after Close: %v, %v; want net.ErrClosed", n.Name(), network, conn, err)
			}
		}
		if ln, err := n.Listen("tcp", ":8080"); !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s: listen after Close: %v, %v; want net.ErrClosed", n.Name(), ln, err)
		}
		if pc, err := n.ListenPacket("udp", ":8080"); !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s: listen packet after Close: %v, %v; want net.ErrClosed", n.Name(), pc, err)
		}
	}
}

// Close never waits for a connection that is opened while it runs (the cloud load
// balancer's health checker dialing a node as the cluster closed hung Close for good):
// netstack's Close aborts the endpoints registered when it starts and its Wait waits
// for all those registered when it starts, so one registered in between stayed in
// SYN-SENT, on a manual clock, for ever. Dials racing Close either get in first (and
// are aborted) or fail with net.ErrClosed; each returns, and so does Close.
func TestCloseWithDialsInFlight(t *testing.T) {
	for round := 0; round < 50; round++ {
		c, err := New(Config{Seed: uint64(round), ManualClock: true})
		if err != nil {
			t.Fatal(err)
		}
		h, err := c.AddExternalHost("checker", netip.Addr{})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Nobody listens on the node (it would refuse) nor at the blackhole
				// address (its SYN goes unanswered): both kinds of dial in flight.
				dst := "172.18.0.2:10256"
				if i%2 == 1 {
					dst = "172.18.255.254:10256"
				}
				if conn, err := h.Net().Dial("tcp", dst); err == nil {
					conn.Close()
				}
			}()
		}
		c.Close()
		wg.Wait()
	}
}
