package kernel

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// Sockets made with Netns.Listen/ListenPacket/DialContext live in the namespace: pods
// reach a node-namespace listener at the node's gateway address (which exists only
// there), and a dial from the node namespace reaches a pod from that address.
func TestNetnsSockets(t *testing.T) {
	h := newTestHarness(t, HarnessConfig{})
	node := h.Nodes[0]
	pod := h.Pods[0]

	ln, err := node.Netns.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "node-listener %s\n", c.RemoteAddr())
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	wantAnswer(t, "pod -> listener in the node namespace", h.Dial(pod.Netns, "tcp", netip.AddrPortFrom(node.Gateway, uint16(port))), "node-listener", pod.IP)

	pc, err := node.Netns.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(fmt.Sprintf("node-udp %s\n", from)), from)
		}
	}()
	uport := pc.LocalAddr().(*net.UDPAddr).Port
	wantAnswer(t, "pod -> UDP socket in the node namespace", h.Dial(pod.Netns, "udp", netip.AddrPortFrom(node.Gateway, uint16(uport))), "node-udp", pod.IP)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := node.Netns.DialContext(ctx, "tcp4", netip.AddrPortFrom(pod.IP, 8080).String())
	if err != nil {
		t.Fatalf("dial from the node namespace: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, pod.Name+" "+node.Gateway.String()+":") {
		t.Errorf("dial from the node namespace: %q, %v; want %s seeing %v", line, err, pod.Name, node.Gateway)
	}

	var none Netns
	if _, err := none.Listen("tcp4", "0.0.0.0:0"); !errors.Is(err, errNoNamespace) {
		t.Errorf("Netns without a namespace: %v", err)
	}
}
