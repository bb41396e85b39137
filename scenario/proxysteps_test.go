package scenario

import (
	"context"
	"strings"
	"testing"
)

const restartScenario = `cluster: {dns: off, nodes: [{name: node-a}, {name: node-b}]}
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: stats}, spec: {selector: {app: stats}, ports: [{port: 8125, protocol: UDP}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: stats-0, labels: {app: stats}}, spec: {nodeName: node-a, containers: [{name: s, image: i, ports: [{containerPort: 8125, protocol: UDP}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-b, containers: [{name: c, image: i}]}}
steps:
  - connect: {from: pod:default/client, to: service:default/stats:8125, proto: udp, src_port: 5000}
    expect: {result: replied}
  - restart_proxy: node-b
  - name: the flow's entry
    check: {conntrack: {node: node-b, proto: udp, dst: service:default/stats:8125}}
`

// TestRestartProxyUDPConntrack: a kube-proxy restart flushes the live UDP flow to a
// service with endpoints before 1.32 (its first sync sees every UDP service as newly
// active); from 1.32 (the conntrack reconciler) the flow's entry stays.
func TestRestartProxyUDPConntrack(t *testing.T) {
	for _, tc := range []struct {
		version string
		entries int
		summary string
	}{
		{"1.31", 0, "kube-proxy 1.31 restarted on node-b: a full sync; its startup cleanup deleted 1 conntrack entries"},
		{"1.32", 1, "kube-proxy 1.32 restarted on node-b: a full sync; no conntrack cleanup of its own at startup"},
	} {
		rep, err := Run(context.Background(), mustParse(t, restartScenario), Options{Mode: "iptables", Version: tc.version})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Passed {
			t.Fatalf("%s", reportText(rep))
		}
		if st := step(t, rep, "restart kube-proxy on node-b"); st.Summary != tc.summary {
			t.Errorf("%s: restart: %q, want %q", tc.version, st.Summary, tc.summary)
		}
		if got := *step(t, rep, "the flow's entry").Count; got != tc.entries {
			t.Errorf("%s: %d entries after the restart, want %d", tc.version, got, tc.entries)
		}
	}
}

// TestSyncRulesOnlyThenCleanConntrack: rules_only updates the rules but keeps the stale
// UDP entry of a deleted backend, so the flow stays black-holed; clean_conntrack deletes
// it and the flow goes to the new backend. hold_conntrack does the same for the syncs
// that follow a change on their own.
func TestSyncRulesOnlyThenCleanConntrack(t *testing.T) {
	for _, tc := range []struct{ name, hold, sync string }{
		{"rules_only", "  - sync: {pause: node-b}\n", "  - sync: {rules_only: node-b}\n"},
		{"hold_conntrack", "  - sync: {hold_conntrack: all}\n", ""},
	} {
		text := strings.Split(restartScenario, "  - restart_proxy")[0] + tc.hold + `  - apply:
      - {apiVersion: v1, kind: Pod, metadata: {name: stats-1, labels: {app: stats}}, spec: {nodeName: node-a, containers: [{name: s, image: i, ports: [{containerPort: 8125, protocol: UDP}]}]}}
  - delete_pod: {pod: default/stats-0}
` + tc.sync + `  - name: stale
    connect: {from: pod:default/client, to: service:default/stats:8125, proto: udp, src_port: 5000}
    expect: {result: dropped}
  - name: new flows
    connect: {from: pod:default/client, to: service:default/stats:8125, proto: udp, src_port: 5001}
    expect: {result: replied, reaches: [default/stats-1]}
  - sync: {clean_conntrack: node-b}
  - name: recovered
    connect: {from: pod:default/client, to: service:default/stats:8125, proto: udp, src_port: 5000}
    expect: {result: replied, reaches: [default/stats-1]}
`
		rep := mustRun(t, mustParse(t, text), "iptables")
		if !rep.Passed {
			t.Fatalf("%s:\n%s", tc.name, reportText(rep))
		}
		clean := step(t, rep, "run kube-proxy's kept-back conntrack cleanup on node-b")
		if !strings.Contains(clean.Summary, "1 entries deleted") || !strings.Contains(strings.Join(clean.Details, "\n"), "node-b: -D -p udp --orig-dst 10.100.225.136 --reply-src 10.244.0.2") {
			t.Errorf("%s: clean_conntrack: %q %q", tc.name, clean.Summary, clean.Details)
		}
	}
}

// TestProxyStepErrors: the new steps name nodes that exist; a sync step does one thing.
func TestProxyStepErrors(t *testing.T) {
	_, err := Parse("test.yaml", []byte(strings.Split(restartScenario, "steps:")[0]+`steps:
  - restart_proxy: node-x
  - sync: {rules_only: node-a, clean_conntrack: node-a}
  - sync: {clean_conntrack: node-z}
`))
	for _, want := range []string{
		`test.yaml:7: steps[0].restart_proxy: no node "node-x" (the nodes are node-a, node-b, or "all")`,
		`test.yaml:8: steps[1].sync: want exactly one of pause, resume, now, delay, rules_only, hold_conntrack, clean_conntrack`,
		`test.yaml:9: steps[2].sync.clean_conntrack: no node "node-z"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
}
