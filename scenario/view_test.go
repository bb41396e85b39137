package scenario

import (
	"context"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netsim"
)

// TestSessionView: the demo's cluster as the ui's map shows it (pods with labels,
// my-service with its three backends), and its steps run one at a time with the state
// after each (the delete step leaves 4 endpoints, 3 ready).
func TestSessionView(t *testing.T) {
	s, err := DemoScenario()
	if err != nil {
		t.Fatal(err)
	}
	ss, err := Open(s, "")
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	v := ss.View()
	if len(v.Nodes) != 3 || len(v.External) != 1 || v.External[0].Name != "laptop" || v.External[0].IP == "" || len(v.Steps) != len(s.Steps) {
		t.Fatalf("view: nodes %v, external %v, %d steps", v.Nodes, v.External, len(v.Steps))
	}
	var svc *ServiceView
	for i := range v.Services {
		if v.Services[i].Name == "my-service" {
			svc = &v.Services[i]
		}
	}
	if svc == nil || svc.ClusterIP == "" || len(svc.Backends) != 3 || len(svc.Ports) != 1 || svc.Ports[0].Port != 80 || svc.Ports[0].TargetPort != "9376" {
		t.Fatalf("my-service: %+v", svc)
	}
	labelled := 0
	for _, p := range v.Pods {
		if p.Labels["app"] == "MyApp" {
			labelled++
			if !strings.HasPrefix(p.Name, "my-app-") || p.IP == "" {
				t.Errorf("pod %+v", p)
			}
		}
	}
	if labelled != 3 {
		t.Errorf("%d pods labelled app=MyApp, want 3", labelled)
	}
	var states []StepState
	for !ss.Done() {
		st, err := ss.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, st)
	}
	if len(states) != len(s.Steps) {
		t.Fatalf("%d states", len(states))
	}
	if _, err := ss.Step(context.Background()); err == nil {
		t.Error("a step past the last runs")
	}
	del := states[6] // endpoints after the delete
	if eps := del.Endpoints["default/my-service"]; len(eps) != 4 || del.Result.Status != "ok" {
		t.Errorf("after the delete: %s, endpoints %v", del.Result.Status, eps)
	}
	if states[0].ConntrackTotal["node-a"] == 0 || len(states[0].Conntrack["node-a"]) == 0 {
		t.Errorf("no conntrack entries on node-a after 90 connections: %v", states[0].ConntrackTotal)
	}
	if v := ss.View(); v.AfterStep != len(s.Steps) || v.Services[0].Type == "" {
		t.Errorf("view after the steps: %+v", v)
	}
}

// TestTraceReply: the answer of a packet to the VIP comes back from the backend and is
// un-DNATed on the client's node, so that the client sees it from the VIP.
func TestTraceReply(t *testing.T) {
	s, err := DemoScenario()
	if err != nil {
		t.Fatal(err)
	}
	for _, all := range []bool{false, true} {
		res, err := Trace(context.Background(), s, TraceOptions{From: "pod:default/client", To: "service:default/my-service:80", Reply: true, AllBranches: all})
		if err != nil {
			t.Fatal(err)
		}
		rp := res.Reply
		if rp == nil || rp.Outcome == nil || !strings.HasPrefix(rp.From, "pod:default/my-app-") {
			t.Fatalf("all=%v: reply %+v", all, rp)
		}
		o := rp.Outcome
		if o.Result != netsim.ResultDelivered || o.Pod != "default/client" || o.SeenSrc.String() != res.Dst {
			t.Errorf("all=%v: the answer %s, want it delivered to the client from %s", all, o.Outcome.String(), res.Dst)
		}
		var text strings.Builder
		if err := res.WriteText(&text); err != nil || !strings.Contains(text.String(), "un-DNAT") {
			t.Errorf("all=%v: the text shows no un-DNAT: %v", all, err)
		}
		svg := string(res.VerticalSVG())
		if !strings.Contains(svg, "un-DNAT") || strings.Count(svg, `class="end ok"`) != len(res.Outcomes)+1 {
			t.Errorf("all=%v: the SVG has %d ends for %d outcomes and the answer", all, strings.Count(svg, `class="end ok"`), len(res.Outcomes))
		}
	}
}

// TestSessionIPVS: in the IPVS mode the state after a step has each node's IPVS
// connection table: the client's 90 connections to my-service on node-a.
func TestSessionIPVS(t *testing.T) {
	s, err := DemoScenario()
	if err != nil {
		t.Fatal(err)
	}
	ss, err := Open(s, "ipvs")
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	st, err := ss.Step(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rows := st.IPVS["node-a"]
	if st.IPVSTotal["node-a"] < 90 || len(rows) != MaxStateLines || !strings.HasPrefix(rows[0], "TCP ") || !strings.Contains(rows[0], ":9376") {
		t.Errorf("node-a's IPVS table: %d entries, %q", st.IPVSTotal["node-a"], rows[:min(2, len(rows))])
	}
	if st, err := func() (StepState, error) {
		ss2, _ := Open(s, "iptables")
		defer ss2.Close()
		return ss2.Step(context.Background())
	}(); err != nil || st.IPVS != nil {
		t.Errorf("the iptables mode has an IPVS table: %v %v", st.IPVS, err)
	}
}
