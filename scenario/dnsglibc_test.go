package scenario

import (
	"strings"
	"testing"
)

const glibcDNSScenario = `cluster:
  nodes: [{name: node-a}, {name: node-b}]
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {clusterIP: 10.96.1.80, selector: {app: web}, ports: [{name: http, port: 80, targetPort: 8080}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-b, labels: {app: web}}, spec: {nodeName: node-b, containers: [{name: c, image: i, ports: [{containerPort: 8080}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-a, containers: [{name: c, image: i}]}}
steps:
  - name: A and AAAA back to back
    dns: {from: pod:default/client, name: web, type: both}
    expect: {rcode: NOERROR, answers: {A: [service:default/web], AAAA: []}, delay: {at_most: 0s}}
  - name: reopen
    dns: {from: pod:default/client, name: web.default.svc.cluster.local., type: both, options: [single-request-reopen]}
    expect: {rcode: NOERROR, answer: [10.96.1.80], delay: {at_most: 0s}}
  - name: over TCP
    dns: {from: pod:default/client, name: web.default.svc.cluster.local., type: both, options: [use-vc]}
    expect: {rcode: NOERROR, answers: {A: [10.96.1.80]}}
  - fault: {link: pod:default/client, loss: 100%}
  - name: every query lost
    dns: {from: pod:default/client, name: web.default.svc.cluster.local., type: both, options: [timeout:1, attempts:3]}
    expect: {rcode: SERVFAIL, delay: {min: 3s, at_most: 3s}}
  - name: A only, default timeout and attempts
    dns: {from: pod:default/client, name: web.default.svc.cluster.local., options: [single-request]}
    expect: {rcode: SERVFAIL, delay: {min: 10s, at_most: 10s}}
  - fault: {link: pod:default/client}
  - name: back
    dns: {from: pod:default/client, name: web, type: both, options: [timeout:2]}
    expect: {rcode: NOERROR, answers: {A: [10.96.1.80]}, delay: {at_most: 0s}}
`

// sourcePorts returns the source ports of a dns step's queries ("... from IP:PORT").
func sourcePorts(t *testing.T, st *StepResult) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, q := range st.DNS.Queries {
		_, from, ok := strings.Cut(q, " from ")
		if !ok {
			t.Fatalf("query %q without its source", q)
		}
		out[from]++
	}
	return out
}

// TestDNSStepGlibc: type both and resolv.conf options in dns steps: A and AAAA from
// one socket, from two under single-request-reopen, over TCP under use-vc; with every
// query lost, timeouts and attempts on the virtual clock (3 x 1 s; 2 x 5 s by default).
func TestDNSStepGlibc(t *testing.T) {
	s := mustParse(t, glibcDNSScenario)
	rep := mustRun(t, s, "iptables")
	var b strings.Builder
	rep.WriteText(&b)
	for _, st := range rep.Steps {
		if st.Status != "ok" {
			t.Errorf("step %q: %s\n%s", st.Title, st.Status, b.String())
		}
	}
	both := step(t, rep, "A and AAAA back to back")
	if p := sourcePorts(t, both); len(p) != 1 {
		t.Errorf("back to back: queries from %v, want one socket", p)
	}
	if bt := both.DNS.ByType; len(bt) != 2 || !bt[0].Answered || !bt[1].Answered || bt[1].Rcode != "NOERROR" || len(bt[1].Answers) != 0 {
		t.Errorf("by type %+v, want A and AAAA answered, AAAA NOERROR without data", bt)
	}
	if p := sourcePorts(t, step(t, rep, "reopen")); len(p) != 2 {
		t.Errorf("single-request-reopen: queries from %v, want two sockets", p)
	}
	for _, q := range step(t, rep, "over TCP").DNS.Queries {
		if !strings.Contains(q, "/tcp ") {
			t.Errorf("use-vc query %q, want TCP", q)
		}
	}
	lost := step(t, rep, "every query lost")
	if n := len(lost.DNS.Queries); n != 6 {
		t.Errorf("lost: %d queries, want 6 (A and AAAA, 3 attempts): %v", n, lost.DNS.Queries)
	}
	for _, bt := range lost.DNS.ByType {
		if bt.Answered {
			t.Errorf("lost: %s answered", bt.Type)
		}
	}
	if got := step(t, rep, "A only, default timeout and attempts").DNS.Delay; got != "10s" {
		t.Errorf("A only: delay %s, want 10s", got)
	}
}
