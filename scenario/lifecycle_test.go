package scenario

import (
	"strings"
	"testing"
)

// TestProbesAndLifecycleScenario runs testdata/scenarios/probes-and-lifecycle.yaml and
// checks what its expectations cannot say: which pods the steps touched.
func TestProbesAndLifecycleScenario(t *testing.T) {
	s, err := Load("../testdata/scenarios/probes-and-lifecycle.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rep := mustRun(t, s, "iptables")
	var b strings.Builder
	rep.WriteText(&b)
	if !rep.Passed {
		t.Fatalf("scenario failed:\n%s", b.String())
	}
	fail := step(t, rep, "one pod fails")
	if len(fail.Details) != 1 || !strings.Contains(fail.Details[0], "replaces it with") {
		t.Errorf("set_phase Failed: details %q, want the ReplicaSet's replacement", fail.Details)
	}
	scale := step(t, rep, "scale down to one")
	if !strings.Contains(strings.Join(scale.Details, "\n"), "(grace 10s)") {
		t.Errorf("scale down: details %q, want the pods' 10 s grace period", scale.Details)
	}
}

// TestScaleDownPicksAsTheReplicaSetController: a scale-down deletes a not-ready pod
// before ready ones, then the newest, each with its grace period (the template's
// terminationGracePeriodSeconds, or 30 s), the endpoints terminating meanwhile.
func TestScaleDownPicksAsTheReplicaSetController(t *testing.T) {
	rep := mustRun(t, mustParse(t, `
manifests:
  - apiVersion: v1
    kind: Service
    metadata: {name: web}
    spec:
      selector: {app: web}
      ports: [{port: 80, targetPort: 8080}]
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web}
    spec:
      replicas: 4
      selector: {matchLabels: {app: web}}
      template:
        metadata: {labels: {app: web}}
        spec:
          containers: [{name: web, image: nginx, ports: [{containerPort: 8080}]}]
steps:
  - name: unready
    set_ready: {selector: app=web, count: 1, ready: false}
  - name: down
    scale: {deployment: default/web, replicas: 3}
  - name: during
    at: 29s
    check: {endpoints: {service: default/web}}
    expect: {count: 4, ready: 3, serving: 3, terminating: 1}
  - name: after
    at: 30s
    check: {endpoints: {service: default/web}}
    expect: {count: 3, ready: 3, terminating: 0}
`), "iptables")
	var b strings.Builder
	rep.WriteText(&b)
	if !rep.Passed {
		t.Fatalf("scenario failed:\n%s", b.String())
	}
	// The pod set_ready took out is not the newest (the last of the four created), which
	// deleting newest first would have picked.
	unready := strings.Fields(step(t, rep, "unready").Summary)[0]
	down := strings.Join(step(t, rep, "down").Details, "\n")
	if !strings.Contains(down, "deleted (") || !strings.HasSuffix(down, " "+unready+" (grace 30s)") {
		t.Errorf("scale down: %q; want only the unready %s deleted, with the default 30 s grace", down, unready)
	}
}

// TestFailedPodReplacedOnce: a Failed pod of a Deployment is replaced when it fails, not
// again when it is deleted (it no longer counts among the ReplicaSet's pods).
func TestFailedPodReplacedOnce(t *testing.T) {
	rep := mustRun(t, mustParse(t, `
manifests:
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web}
    spec:
      replicas: 2
      selector: {matchLabels: {app: web}}
      template:
        metadata: {labels: {app: web}}
        spec:
          containers: [{name: web, image: nginx, ports: [{containerPort: 8080}]}]
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}}
steps:
  - name: fail
    set_phase: {selector: app=web, count: 1, phase: Failed}
  - name: three pods, two endpoints
    check: {endpoints: {service: default/web}}
    expect: {count: 2, ready: 2}
  - name: delete every pod
    delete_pod: {selector: app=web}
  - name: two replacements
    check: {endpoints: {service: default/web}}
    expect: {count: 2, ready: 2}
`), "iptables")
	if !rep.Passed {
		var b strings.Builder
		rep.WriteText(&b)
		t.Fatalf("scenario failed:\n%s", b.String())
	}
	if d := step(t, rep, "delete every pod").Details; len(d) != 2 {
		t.Errorf("deleting the Failed pod and the two running ones made %d replacements, want 2: %q", len(d), d)
	}
}
