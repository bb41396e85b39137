package netsim

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// TestProbeAllocations: an untraced probe through a DNAT handler allocates its result
// and the two nodes' conntrack entries, and nothing per node it crosses (each node's
// copy of the probe's environment lives in the walk's frames) nor for its packet (the
// packet, its bytes and the delay counter are one object the Network reuses from probe
// to probe). A probe made 7 allocations when the environment copies were heap objects,
// and the packet's bytes and the delay counter separate ones; 4 while each probe
// allocated its packet.
func TestProbeAllocations(t *testing.T) {
	c := newTestCluster(t, Config{Seed: 1, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	server, _ := c.StartPod("node-b", "default", "server", nil, false)
	c.StartPod("node-a", "default", "client", nil, false)
	vip := netip.MustParseAddrPort("10.96.0.1:80")
	backend := netip.AddrPortFrom(server.IP(), 8080)
	dnat := HandlerFunc(func(ctx *Context, p *Packet) Verdict { // staticDNAT without its reason's text
		if p.Dst != vip.Addr() || p.DstPort != vip.Port() {
			return VerdictContinue
		}
		return DNATTo(backend, "")
	})
	c.Node("node-a").AddHandler(HandlerSpec{Name: "dnat", Hook: netfilter.Prerouting, Priority: netfilter.PriorityNATDst, NAT: true, Handler: dnat})
	for _, proto := range []uint8{netfilter.ProtoTCP, netfilter.ProtoUDP} {
		p := Probe{From: "pod:default/client", Proto: proto, Dst: vip}
		port := 1024
		probe := func() {
			port++
			p.SrcPort = uint16(port)
			r, err := c.ProbeOne(p)
			if err != nil || r.Result != ResultDelivered || r.Pod != "default/server" {
				t.Fatalf("probe from port %d: %v %v", port, r.Outcome, err)
			}
		}
		for range 2000 { // the conntrack tables' growth, out of the count
			probe()
		}
		// Probe's result slice, two entries.
		if got := testing.AllocsPerRun(1000, probe); got > 3 {
			t.Errorf("%s probe: %v allocations, want at most 3", ProtoName(proto), got)
		}
	}
}

// TestProbeReusesPacketUnlessStolen: the packet a handler stole from a probe stays
// the handler's (the next probes do not reuse it), and probes after it, reusing one
// packet between them, each start from a clean packet: the same outcome as the first.
func TestProbeReusesPacketUnlessStolen(t *testing.T) {
	c := newTestCluster(t, Config{Seed: 1, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	server, _ := c.StartPod("node-b", "default", "server", nil, false)
	c.StartPod("node-a", "default", "client", nil, false)
	trap := netip.MustParseAddrPort("10.96.0.9:99")
	var stolen *Packet
	var stolenText string
	c.Node("node-a").AddHandler(HandlerSpec{Name: "thief", Hook: netfilter.Prerouting, Priority: 0, Handler: HandlerFunc(func(ctx *Context, p *Packet) Verdict {
		if p.Dst != trap.Addr() {
			return VerdictContinue
		}
		stolen, stolenText = p, p.String()
		return Verdict{Kind: Stolen}
	})})
	dst := netip.AddrPortFrom(server.IP(), 8080)
	want, err := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: dst, SrcPort: 1000})
	if err != nil || want.Result != ResultDelivered {
		t.Fatalf("first probe: %v %v", want.Outcome, err)
	}
	r, err := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoUDP, Dst: trap, SrcPort: 1001, Payload: []byte("mine")})
	if err != nil || r.Result != ResultStolen || stolen == nil {
		t.Fatalf("probe to the thief: %v %v", r.Outcome, err)
	}
	for i := range 3 {
		port := uint16(1002 + i)
		r, err := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: dst, SrcPort: port})
		if err != nil || r.Result != want.Result || r.Pod != want.Pod || r.Addr != want.Addr || r.SeenSrc.Port() != port {
			t.Fatalf("probe %d after the theft: %v %v, want %v from port %d", i, r.Outcome, err, want.Outcome, port)
		}
		if got := stolen.String(); got != stolenText || stolen.Proto != netfilter.ProtoUDP || stolen.SrcPort != 1001 || string(stolen.Payload()) != "mine" {
			t.Fatalf("the stolen packet changed under its thief after probe %d: %s, was %s", i, got, stolenText)
		}
	}
}

// idleCounter is an IdleHandler that counts its calls.
type idleCounter struct {
	idle          bool
	handles, asks int
}

func (h *idleCounter) Handle(ctx *Context, p *Packet) Verdict {
	h.handles++
	return VerdictContinue
}

func (h *idleCounter) Idle(p *Packet) bool {
	h.asks++
	return h.idle
}

// TestIdleHandlerSkipped: a node does not call an IdleHandler for an untraced packet it
// says it is idle for; it calls it when it is not idle, and for a traced packet, which
// shows the handler; the outcome is the same either way.
func TestIdleHandlerSkipped(t *testing.T) {
	c := newTestCluster(t, Config{Seed: 1, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	server, _ := c.StartPod("node-b", "default", "server", nil, false)
	c.StartPod("node-a", "default", "client", nil, false)
	h := &idleCounter{idle: true}
	c.Node("node-a").AddHandler(HandlerSpec{Name: "idle-forward", Hook: netfilter.Forward, Priority: 0, Handler: h})
	p := Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(server.IP(), 8080)}
	var first Outcome
	for i, tc := range []struct {
		idle, trace bool
		handles     int
	}{{true, false, 0}, {false, false, 1}, {true, true, 1}, {false, true, 1}} {
		h.idle, h.handles, h.asks = tc.idle, 0, 0
		p.SrcPort, p.Trace = uint16(2000+i), tc.trace
		r, err := c.ProbeOne(p)
		if err != nil || r.Result != ResultDelivered {
			t.Fatalf("case %d: %v %v", i, r.Outcome, err)
		}
		if i == 0 {
			first = r.Outcome
		} else if r.SeenSrc.Port() != p.SrcPort || r.Pod != first.Pod || r.Addr != first.Addr {
			t.Errorf("case %d: %v, first %v", i, r.Outcome, first)
		}
		if h.handles != tc.handles {
			t.Errorf("case %d (idle %v, trace %v): Handle called %d times, want %d (Idle asked %d times)", i, tc.idle, tc.trace, h.handles, tc.handles, h.asks)
		}
		if tc.trace && !strings.Contains(r.Trace.String(), "idle-forward") {
			t.Errorf("case %d: the trace does not show the handler:\n%s", i, r.Trace)
		}
	}
}

// TestProbeReadsTheClockOnce: a probe happens at one instant of the virtual clock, even
// a clock that follows the wall: the conntrack entries its connection left on the two
// nodes it crossed were created at the same time, and expire together. (Each node read
// the clock anew before, a vDSO call per node and packet: 4 % of a probe.)
func TestProbeReadsTheClockOnce(t *testing.T) {
	c := newTestCluster(t, Config{Seed: 1, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	server, _ := c.StartPod("node-b", "default", "server", nil, false)
	c.StartPod("node-a", "default", "client", nil, false)
	vip := netip.MustParseAddrPort("10.96.0.1:80")
	backend := netip.AddrPortFrom(server.IP(), 8080)
	c.Node("node-a").AddHandler(HandlerSpec{Name: "dnat", Hook: netfilter.Prerouting, Priority: netfilter.PriorityNATDst, NAT: true, Handler: HandlerFunc(func(ctx *Context, p *Packet) Verdict {
		if p.Dst != vip.Addr() || p.DstPort != vip.Port() {
			return VerdictContinue
		}
		return DNATTo(backend, "")
	})})
	for i := range 20 {
		port := uint16(3000 + i)
		r, err := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: vip, SrcPort: port})
		if err != nil || r.Result != ResultDelivered {
			t.Fatalf("probe %d: %v %v", i, r.Outcome, err)
		}
		entry := func(node string) Conn {
			for _, e := range c.Node(node).Conntrack().Entries() {
				if e.Orig.SrcPort == port {
					return e
				}
			}
			t.Fatalf("probe %d: no entry from port %d on %s", i, port, node)
			return Conn{}
		}
		a, b := entry("node-a"), entry("node-b")
		if !a.Created.Equal(b.Created) || !a.Expires.Equal(b.Expires) {
			t.Fatalf("probe %d: node-a's entry created %v, expires %v; node-b's %v, %v", i, a.Created, a.Expires, b.Created, b.Expires)
		}
	}
}

// TestContextWritesEveryField: Node.context writes the reused Context field by field
// (a literal stored whole goes through the GC's bulk write barrier): it must write
// every one, so a field added to Context must be added there too.
func TestContextWritesEveryField(t *testing.T) {
	c := newTestCluster(t, Config{Seed: 1, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}}})
	n := c.Node("node-a")
	tr := &Trace{}
	n.hctx = Context{node: nil, hook: netfilter.Output, now: Epoch.Add(time.Hour), chooser: randChooser{n.rng}, trace: tr, dryRun: true, handler: "stale"}
	env := &penv{}
	got := *n.context(netfilter.Prerouting, "fresh", env)
	want := Context{node: n, hook: netfilter.Prerouting, now: env.now(n), handler: "fresh"}
	if got != want {
		t.Errorf("context over a stale one: %+v, want %+v", got, want)
	}
	if nf := reflect.TypeFor[Context]().NumField(); nf != 7 {
		t.Errorf("Context has %d fields; Node.context writes 7, one by one: write the new ones there and here", nf)
	}
}
