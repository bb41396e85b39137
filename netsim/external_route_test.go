package netsim

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// An external host's own route takes a destination the cluster network does not route
// (a ClusterIP) to a node, whose handlers DNAT it; without the route the SYN goes nowhere.
// The backend is on that node, so the reply passes it and is un-NATed (the test's DNAT
// does not masquerade).
func TestExternalHostRouteViaNode(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-a", "default/web", 8080)
	vip := netip.MustParseAddrPort("10.96.0.50:80")
	attachDNAT(c, &staticDNAT{vip: vip, backends: []netip.AddrPort{netip.AddrPortFrom(web.IP(), 8080)}})
	via, err := c.AddExternalHostWith(ExternalHostConfig{Name: "laptop",
		Routes: []ExternalRoute{{Prefix: netip.MustParsePrefix("10.96.0.0/12"), Via: c.Node("node-a")}}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := ask(t, via.Net(), vip.String())
	if err != nil {
		t.Fatalf("through the route: %v", err)
	}
	if w.Pod != "default/web" {
		t.Errorf("answered by %q, want default/web", w.Pod)
	}
	plain, err := c.AddExternalHost("plain", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := askCtx(ctx, plain.Net(), vip.String()); err == nil {
		t.Errorf("a host without the route reached %s", vip)
	}
}

// A raw external host has no stack: what the network delivers to it goes to Deliver,
// and Send puts its packets into the network.
func TestRawExternalHost(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	got := make(chan []byte, 4)
	h, err := c.AddExternalHostWith(ExternalHostConfig{Name: "tun", Deliver: func(b []byte) { got <- b }})
	if err != nil {
		t.Fatal(err)
	}
	if h.Net() != nil {
		t.Fatalf("a raw host has a Net")
	}
	src := netip.AddrPortFrom(h.IP(), 40000)
	if err := h.Send(BuildUDP(src, netip.AddrPortFrom(web.IP(), 8080), []byte("hello\n"))); err != nil {
		t.Fatal(err)
	}
	if err := h.Send([]byte{0x45, 1}); err == nil {
		t.Errorf("Send of a truncated packet: no error")
	}
	select {
	case b := <-got:
		var pk Packet
		if err := pk.parse(b); err != nil {
			t.Fatal(err)
		}
		if pk.Src != web.IP() || pk.Dst != h.IP() || pk.DstPort != 40000 {
			t.Fatalf("reply %s, want from %s to %s", pk.String(), web.IP(), src)
		}
		if !strings.Contains(string(pk.Payload()), h.IP().String()) {
			t.Errorf("whoami reply %q does not name the client %s", pk.Payload(), h.IP())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reply delivered to the raw host")
	}
}
