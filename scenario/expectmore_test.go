package scenario

import (
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netsim"
)

const bugReportScenario = `cluster: {dns: off, nodes: [{name: node-a}, {name: node-b}]}
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {type: LoadBalancer, externalTrafficPolicy: Local, selector: {app: web}, ports: [{port: 80}]}}
  - {apiVersion: v1, kind: Service, metadata: {name: empty}, spec: {selector: {app: none}, ports: [{port: 80}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-0, labels: {app: web}}, spec: {nodeName: node-a, containers: [{name: w, image: i, ports: [{containerPort: 80}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-1, labels: {app: web}}, spec: {nodeName: node-a, containers: [{name: w, image: i, ports: [{containerPort: 80}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-b, containers: [{name: c, image: i}]}}
steps:
  - name: every branch
    send: {from: pod:default/client, to: service:default/web:80, all_branches: true}
    expect: {probabilities: {default/web-0: 0.5, default/web-1: 0.5}, tolerance: 0.01}
  - name: no endpoints
    send: {from: pod:default/client, to: service:default/empty:80}
    expect: {result: refused, decided_by: {chain: filter/KUBE-SERVICES, rule: has no endpoints}}
  - name: first
    send: {from: pod:default/client, to: service:default/web:80, src_port: 4000}
    expect: {reaches: [default/web-1], decided_by: {chain: nat/KUBE-SEP-VPJCWIHGOZWNRC6B, rule: "DNAT --to-destination 10.244.0.3:80"}}
  - name: again
    send: {from: pod:default/client, to: service:default/web:80, src_port: 4000}
    expect: {decided_by: {conntrack: true}}
  - name: tuple
    check: {conntrack: {node: node-b, src: pod:default/client, src_port: 4000, dst: service:default/web:80}}
    expect: {present: true, nat_destination: pod:default/web-1:80}
  - name: no such tuple
    check: {conntrack: {node: node-b, src: pod:default/client, src_port: 4001}}
    expect: {present: false}
  - name: counters
    check: {conntrack_stats: {node: node-b}}
    expect: {counters: {insert_failed: 0, drop: 0, early_drop: 0}}
  - name: local
    check: {health_check: {service: default/web, node: node-a}}
    expect: {status: 200, local_endpoints: 2}
  - name: not local
    check: {health_check: {service: default/web, node: node-b}}
    expect: {status: 503, local_endpoints: 0}
`

// TestBugReportExpectations: probabilities over every branch, the decision point (a
// rule, an existing conntrack entry), a conntrack tuple and its NAT destination,
// conntrack -S counters and a health-check node port's answer, as a bug report states
// them, hold in the iptables mode; wrong values fail with what was seen.
func TestBugReportExpectations(t *testing.T) {
	rep := mustRun(t, mustParse(t, bugReportScenario), "iptables")
	if !rep.Passed {
		t.Fatalf("%s", reportText(rep))
	}
	wrong := strings.NewReplacer("default/web-0: 0.5, default/web-1: 0.5", "default/web-0: 1",
		"nat_destination: pod:default/web-1:80", "nat_destination: pod:default/web-0",
		"{conntrack: true}", "{chain: KUBE-SERVICES}", "status: 200", "status: 503", "insert_failed: 0,", "insert_failed: 1,").Replace(bugReportScenario)
	rep = mustRun(t, mustParse(t, wrong), "iptables")
	got := map[string]string{}
	for _, st := range rep.Steps {
		for _, e := range st.Expectations {
			if !e.OK {
				got[st.Title+" "+e.Field] = e.Got
			}
		}
	}
	for k, want := range map[string]string{
		"every branch probabilities":      "{default/web-0 0.5, default/web-1 0.5}",
		"tuple nat_destination":           "10.244.0.3:80",
		"local status":                    "200",
		"counters counters.insert_failed": "0",
	} {
		if got[k] != want {
			t.Errorf("%s: got %q, want %q", k, got[k], want)
		}
	}
	if g := got["again decided_by"]; !strings.HasPrefix(g, "the conntrack entry on node-b: entry #") || !strings.HasSuffix(g, ": tcp 10.244.1.2:4000 -> 10.106.83.202:80 [S] => tcp 10.244.1.2:4000 -> 10.244.0.3:80 [S]") {
		t.Errorf("again decided_by: got %q", g)
	}
	if len(got) != 5 {
		t.Errorf("failed expectations: %v", got)
	}
}

// TestDecidedByIPVSTemplate: with ClientIP affinity in the IPVS mode, a client's second
// connection (another source port) goes where the persistence template says, without
// the scheduler; a rule of a chain is then not what decided.
func TestDecidedByIPVSTemplate(t *testing.T) {
	text := strings.Replace(bugReportScenario, "spec: {type: LoadBalancer, externalTrafficPolicy: Local,", "spec: {type: LoadBalancer, externalTrafficPolicy: Local, sessionAffinity: ClientIP,", 1)
	text = text[:strings.Index(text, "steps:")] + `steps:
  - name: first
    connect: {from: pod:default/client, to: service:default/web:80, src_port: 4000}
  - name: second
    connect: {from: pod:default/client, to: service:default/web:80, src_port: 4001}
    expect: {decided_by: {ipvs_template: true}}
  - name: not a rule
    connect: {from: pod:default/client, to: service:default/web:80, src_port: 4002}
    expect: {decided_by: {chain: KUBE-SERVICES}}
`
	rep := mustRun(t, mustParse(t, text), "ipvs")
	if st := step(t, rep, "second"); st.Status != "ok" {
		t.Errorf("second: %+v", st.Expectations)
	}
	if st := step(t, rep, "not a rule"); st.Status != "failed" || !strings.HasPrefix(st.Expectations[0].Got, "IPVS on node-b: persistence template of 10.244.1.2 sent it to") {
		t.Errorf("not a rule: %s %+v", st.Status, st.Expectations)
	}
}

// TestDecisionOfPolicy: a packet dropped by a chain's policy is decided by the policy.
func TestDecisionOfPolicy(t *testing.T) {
	yes := true
	tr := &netsim.Trace{Steps: []netsim.TraceStep{
		{Kind: netsim.StepHook, Node: "n", Hook: "FORWARD"},
		{Kind: netsim.StepRule, Node: "n", Handler: "f", Table: "filter", Chain: "FORWARD", Line: 3, Rule: "-A FORWARD -j KUBE-FORWARD", Matched: &yes, Verdict: "jump KUBE-FORWARD"},
		{Kind: netsim.StepRule, Node: "n", Handler: "f", Table: "filter", Chain: "FORWARD", Rule: "policy DROP", Verdict: "DROP"},
		{Kind: netsim.StepHandler, Node: "n", Handler: "f", Verdict: "DROP"},
		{Kind: netsim.StepEnd, Node: "n", Verdict: "DROP", Detail: "dropped by f at FORWARD"},
	}}
	for _, tc := range []struct {
		want DecisionPoint
		ok   bool
	}{
		{DecisionPoint{Policy: "filter/FORWARD"}, true},
		{DecisionPoint{Policy: "FORWARD"}, true},
		{DecisionPoint{Policy: "nat/FORWARD"}, false},
		{DecisionPoint{Chain: "FORWARD", Line: 3}, false},
	} {
		if e := checkDecision(&tc.want, tr); e.OK != tc.ok || e.Got != "the policy of filter/FORWARD on n: DROP" {
			t.Errorf("%+v: %+v", tc.want, e)
		}
	}
	route := &netsim.Trace{Steps: []netsim.TraceStep{{Kind: netsim.StepEnd, Node: "n", Verdict: "DROP", Detail: "no route to 10.1.1.1"}}}
	if d := decisionOf(route); d.kind != "routing" || d.text != "on n: no route to 10.1.1.1" {
		t.Errorf("routing: %+v", d)
	}
}

// TestMoreExpectErrors: the new expectations and checks are refused where they do not
// apply, with the file, the line and the field.
func TestMoreExpectErrors(t *testing.T) {
	head := bugReportScenario[:strings.Index(bugReportScenario, "steps:")]
	_, err := Parse("test.yaml", []byte(head+`steps:
  - send: {from: pod:default/client, to: service:default/web:80}
    expect: {probabilities: {default/web-0: 1.5}, tolerance: 0.1}
  - connect: {from: pod:default/client, to: service:default/web:80, via: netstack}
    expect: {decided_by: {rule: x, conntrack: true, policy: FORWARD}}
  - check: {conntrack: {node: node-a, src: "pod:a:b"}}
    expect: {counters: {drop: 0}, nat_destination: "nowhere:"}
  - check: {conntrack_stats: {node: node-a}}
    expect: {counters: {insert_fail: 1}, count: 1, status: 200}
  - check: {health_check: {service: web, node: all}}
    expect: {present: true}
`))
	for _, want := range []string{
		`test.yaml:10: steps[0].expect.probabilities: only send steps with all_branches: true have probabilities`,
		`steps[0].expect.probabilities.default/web-0: want a probability between 0 and 1, got 1.5`,
		`test.yaml:12: steps[1].expect.decided_by: decided_by reads a probe's trace: not with via: netstack`,
		`steps[1].expect.decided_by: want one of chain (with rule or line), policy, conntrack, ipvs_template`,
		`steps[1].expect.decided_by.chain: rule and line name a rule of a chain: give its chain`,
		`steps[2].check.conntrack.src: want an IP, pod:NS/NAME or node:NAME, got "pod:a:b"`,
		`steps[2].expect.counters: only check conntrack_stats steps have counters`,
		`steps[2].expect.nat_destination: want an IP, IP:PORT or pod:NS/NAME[:PORT]`,
		`steps[3].expect.counters.insert_fail: unknown counter: want found, invalid, insert, insert_failed, drop, early_drop, clash_resolve`,
		`steps[3].expect.count: a conntrack_stats step has counters, not count`,
		`steps[3].expect.status: only check health_check steps have status`,
		`steps[4].check.health_check.service: want NAMESPACE/NAME, got "web"`,
		`steps[4].check.health_check.node: no node "all"`,
		`steps[4].expect.present: only check conntrack steps have present`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in:\n%v", want, err)
		}
	}
}
