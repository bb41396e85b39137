package netsim

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
)

// Every handler a traced packet meets leaves a step: a plain CONTINUE too, unless the
// handler traced steps of its own; NAT handlers of a connection's first packet as well.
func TestTraceRecordsEveryHandler(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	startPod(t, c, "node-a", "default/client")
	web := startPod(t, c, "node-b", "default/web", 80)
	for _, n := range c.Nodes() {
		n.AddHandler(HandlerSpec{Name: "quiet", Hook: netfilter.Forward, Priority: netfilter.PriorityFilter, Handler: HandlerFunc(func(*Context, *Packet) Verdict { return VerdictContinue })})
		n.AddHandler(HandlerSpec{Name: "chatty", Hook: netfilter.Forward, Priority: netfilter.PriorityFilter + 1, Handler: HandlerFunc(func(ctx *Context, _ *Packet) Verdict {
			ctx.Tracef("chatty looked")
			return VerdictContinue
		})})
	}
	attachDNAT(c, &staticDNAT{vip: netip.MustParseAddrPort("10.96.0.10:80"), backends: []netip.AddrPort{netip.AddrPortFrom(web.IP(), 80)}})
	r, err := c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(web.IP(), 80), Trace: true})
	if err != nil || r.Result != ResultDelivered {
		t.Fatalf("%s %v", r.Outcome, err)
	}
	var got []string
	for _, s := range r.Trace.Find(StepHandler) {
		got = append(got, s.Node+" "+s.Hook+" "+s.Handler+" "+s.Verdict)
	}
	want := []string{
		"node-a PREROUTING test-dnat CONTINUE",
		"node-a FORWARD quiet CONTINUE",
		"node-a POSTROUTING cni-masquerade CONTINUE", // the built-in CNI masquerade: not off-cluster
		"node-b PREROUTING test-dnat CONTINUE",
		"node-b FORWARD quiet CONTINUE",
		"node-b POSTROUTING cni-masquerade CONTINUE",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("handler steps:\n%s\nwant:\n%s\ntrace:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), r.Trace)
	}
	notes := 0
	for _, s := range r.Trace.Find(StepNote) {
		if s.Handler == "chatty" && s.Detail == "chatty looked" {
			notes++
		}
	}
	if notes != 2 {
		t.Errorf("chatty's notes: %d, want 2 (one a node)\n%s", notes, r.Trace)
	}
	if !strings.Contains(r.Trace.String(), "handler quiet: CONTINUE") {
		t.Errorf("text trace lacks the plain CONTINUE:\n%s", r.Trace)
	}
	// A verdict other than CONTINUE is recorded as before.
	r, _ = c.ProbeOne(Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: netip.MustParseAddrPort("10.96.0.10:80"), Trace: true})
	found := false
	for _, s := range r.Trace.Find(StepHandler) {
		if s.Handler == "test-dnat" && s.Node == "node-a" && strings.HasPrefix(s.Verdict, "DNAT") {
			found = true
		}
		if s.Handler == "test-dnat" && s.Node == "node-a" && s.Verdict == "CONTINUE" {
			t.Errorf("a DNAT handler's connection also got a CONTINUE step: %+v", s)
		}
	}
	if !found {
		t.Errorf("no DNAT step:\n%s", r.Trace)
	}
}

// TraceFlows traces live netstack packets: a real TCP connection to a VIP is traced
// through the DNAT on the client's node, across the cluster network and into the backend
// on another node, and its replies back through the un-DNAT; packets that do not match
// the filter, and packets after Stop, are not traced.
func TestTraceFlowsLiveConnectionThroughDNAT(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	client := startPod(t, c, "node-a", "default/client")
	web := startPod(t, c, "node-b", "default/web", 80, 81)
	vip := netip.MustParseAddrPort("10.96.0.10:80")
	attachDNAT(c, &staticDNAT{vip: vip, backends: []netip.AddrPort{netip.AddrPortFrom(web.IP(), 80)}})
	// Untraced traffic before the tracer starts.
	if _, err := ask(t, client.Net(), vip.String()); err != nil {
		t.Fatal(err)
	}
	ft := c.TraceFlows(FlowFilter{Proto: netfilter.ProtoTCP, Addr: client.IP(), Port: 80})
	if w, err := ask(t, client.Net(), vip.String()); err != nil || w.Pod != "default/web" {
		t.Fatalf("through the VIP: %+v %v", w, err)
	}
	if _, err := ask(t, client.Net(), netip.AddrPortFrom(web.IP(), 81).String()); err != nil {
		t.Fatal(err) // port 81: not traced
	}
	c.Quiesce()
	ft.Stop()
	traces := ft.Traces()
	if len(traces) < 6 {
		t.Fatalf("%d traced packets, want the connection's (at least SYN, SYN-ACK, ACK, data both ways, FINs)", len(traces))
	}
	var syn, synack *Trace
	for _, tr := range traces {
		first := tr.Steps[0]
		// (A packet of the earlier connection sent just before the tracer started is
		// traced from the node it reaches next: "from the cluster network".)
		if first.Kind != StepLink || !strings.Contains(first.Detail, "live packet from ") {
			t.Errorf("trace does not start with where the packet came from: %+v", first)
		}
		if strings.Contains(first.Packet, ":81") {
			t.Errorf("a packet to port 81 was traced: %s", first.Packet)
		}
		switch {
		case strings.HasSuffix(first.Packet, "[S]") && strings.Contains(first.Packet, "-> "+vip.String()):
			syn = tr
		case strings.HasSuffix(first.Packet, "[SA]"), strings.HasSuffix(first.Packet, "[S.]"):
			synack = tr
		}
	}
	if syn == nil || synack == nil {
		var firsts []string
		for _, tr := range traces {
			firsts = append(firsts, tr.Steps[0].Packet)
		}
		t.Fatalf("no SYN to the VIP or no SYN-ACK among the traces:\n%s", strings.Join(firsts, "\n"))
	}
	text := syn.String()
	for _, want := range []string{
		"[node-a] PREROUTING",
		"conntrack: NEW",
		"handler test-dnat: DNAT to " + web.IP().String() + ":80",
		"cluster network: " + web.IP().String() + " -> node node-b",
		"[node-b] PREROUTING",
		"end: DELIVERED (pod default/web via",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the SYN's trace lacks %q:\n%s", want, text)
		}
	}
	if len(syn.Find(StepNAT)) == 0 {
		t.Errorf("the SYN's trace has no NAT step:\n%s", text)
	}
	back := synack.String()
	if !strings.Contains(back, "[node-b] PREROUTING") || !strings.Contains(back, "[node-a] PREROUTING") ||
		!strings.Contains(back, "end: DELIVERED (pod default/client via") || !strings.Contains(back, vip.String()) {
		t.Errorf("the SYN-ACK's trace should cross both nodes and reach the client from the VIP:\n%s", back)
	}
	// Stopped: nothing more is traced.
	if _, err := ask(t, client.Net(), vip.String()); err != nil {
		t.Fatal(err)
	}
	c.Quiesce()
	if n := len(ft.Traces()); n != len(traces) {
		t.Errorf("%d traces after Stop, were %d", n, len(traces))
	}
	if c.flowTracers.Load() != nil {
		t.Error("a stopped tracer is still registered")
	}
}
