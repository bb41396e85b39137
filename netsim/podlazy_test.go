package netsim

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
)

// A pod's netstack is made when first needed. Probes (packet and connect mode) reach a
// pod without making it, with the outcome a stack without sockets gives; a real
// connection to it makes it on its first packet and is refused, as by a stack that
// was there all along; Net makes it, and a server in it answers.
func TestPodStackLazy(t *testing.T) {
	c, err := New(Config{Seed: 1, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	idle, err := c.StartPod("node-b", "ns", "idle", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	client, err := c.StartPod("node-a", "ns", "client", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if idle.stack.Load() != nil || client.stack.Load() != nil {
		t.Fatal("a new pod has a netstack before anything needs one")
	}
	dst := netip.AddrPortFrom(idle.IP(), 8080)
	for _, mode := range []ProbeMode{ProbePacket, ProbeConnect} {
		rs, err := c.Probe(Probe{From: "pod:ns/client", Proto: netfilter.ProtoTCP, Dst: dst, Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		want := ResultDelivered
		if mode == ProbeConnect {
			want = ResultRefused // nothing listens: RST
		}
		if len(rs) != 1 || rs[0].Result != want || rs[0].Listening {
			t.Fatalf("probe mode %d: %v, want %s, not listening", mode, rs, want)
		}
	}
	if idle.stack.Load() != nil || client.stack.Load() != nil {
		t.Fatal("a probe made a netstack")
	}
	// A real dial: the client's stack is made by Net, the idle pod's by the SYN, which
	// its kernel refuses.
	conn, derr := client.Net().Dial("tcp", dst.String())
	if conn != nil {
		conn.Close()
	}
	if !errors.Is(derr, syscall.ECONNREFUSED) {
		t.Fatalf("dial to a pod without a listener: %v, want connection refused", derr)
	}
	if idle.stack.Load() == nil {
		t.Fatal("a packet reached the pod and made no netstack")
	}
	// A server: Net makes the stack (here it exists), the probe finds the listener.
	ln, err := idle.Net().Listen("tcp", ":8080")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rs, err := c.Probe(Probe{From: "pod:ns/client", Proto: netfilter.ProtoTCP, Dst: dst, Mode: ProbeConnect})
	if err != nil || len(rs) != 1 || rs[0].Result != ResultConnected {
		t.Fatalf("probe to a listener: %v %v", rs, err)
	}
	// A dead pod's stack made late is closed at once.
	late, err := c.StartPod("node-a", "ns", "late", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	late.kill()
	if _, err := late.Net().Listen("tcp", ":80"); err == nil {
		t.Error("a killed pod's late netstack listens")
	}
}
