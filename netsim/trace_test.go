package netsim

import (
	"net/netip"
	"strings"
	"testing"
)

// Every handler a traced packet meets leaves a step: a plain CONTINUE too, unless the
// handler traced steps of its own; NAT handlers of a connection's first packet as well.
func TestTraceRecordsEveryHandler(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	startPod(t, c, "node-a", "default/client")
	web := startPod(t, c, "node-b", "default/web", 80)
	for _, n := range c.Nodes() {
		n.AddHandler(HandlerSpec{Name: "quiet", Hook: Forward, Priority: PriorityFilter, Handler: HandlerFunc(func(*Context, *Packet) Verdict { return VerdictContinue })})
		n.AddHandler(HandlerSpec{Name: "chatty", Hook: Forward, Priority: PriorityFilter + 1, Handler: HandlerFunc(func(ctx *Context, _ *Packet) Verdict {
			ctx.Tracef("chatty looked")
			return VerdictContinue
		})})
	}
	attachDNAT(c, &staticDNAT{vip: netip.MustParseAddrPort("10.96.0.10:80"), backends: []netip.AddrPort{netip.AddrPortFrom(web.IP(), 80)}})
	r, err := c.ProbeOne(Probe{From: "pod:default/client", Proto: ProtoTCP, Dst: netip.AddrPortFrom(web.IP(), 80), Trace: true})
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
	r, _ = c.ProbeOne(Probe{From: "pod:default/client", Proto: ProtoTCP, Dst: netip.MustParseAddrPort("10.96.0.10:80"), Trace: true})
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
