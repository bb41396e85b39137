package scenario

import (
	"context"
	"strings"
	"testing"
)

const policyScenario = `name: policy
cluster:
  nodes: [{name: node-a}, {name: node-b}]
  dns: off
manifests:
  - apiVersion: v1
    kind: Pod
    metadata: {name: web, labels: {app: web}}
    spec: {nodeName: node-b, containers: [{name: web, image: nginx, ports: [{name: http, containerPort: 8080}]}]}
  - apiVersion: v1
    kind: Pod
    metadata: {name: client, labels: {app: client}}
    spec: {nodeName: node-a, containers: [{name: c, image: busybox}]}
  - apiVersion: networking.k8s.io/v1
    kind: NetworkPolicy
    metadata: {name: web-from-client}
    spec:
      podSelector: {matchLabels: {app: web}}
      ingress: [{from: [{podSelector: {matchLabels: {app: client}}}], ports: [{port: http}]}]
steps:
`

// TestPolicyDecidedBy: decided_by network_policy holds for the policy that decided and
// fails, saying what decided, for another; its reasons kind is the policy's; a delete
// step lifts the isolation.
func TestPolicyDecidedBy(t *testing.T) {
	steps := `  - connect: {from: pod:default/client, to: "pod:default/web:8080"}
    expect: {result: connected, decided_by: {network_policy: default/web-from-client, rule: "ports: [TCP/http]"}}
  - connect: {from: pod:default/client, to: "pod:default/web:8080"}
    expect: {decided_by: {network_policy: default/other}}
  - connect: {from: pod:default/client, to: "pod:default/web:8080"}
    expect: {decided_by: {network_policy: default/web-from-client, rule: "rule 1"}}
  - connect: {from: node:node-b, to: "pod:default/web:8080"}
    expect: {result: connected}
  - connect: {from: node:node-a, to: "pod:default/web:8080"}
    expect: {result: dropped, decided_by: {network_policy: default/web-from-client}}
  - delete: [{kind: NetworkPolicy, name: default/web-from-client}]
  - connect: {from: node:node-a, to: "pod:default/web:8080"}
    expect: {result: connected}
`
	s, err := Parse("policy.yaml", []byte(policyScenario+steps))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ok", "failed", "failed", "ok", "ok", "ok", "ok"}
	for i, st := range rep.Steps {
		if st.Status != want[i] {
			var b strings.Builder
			rep.WriteText(&b)
			t.Fatalf("step %d: %s, want %s\n%s", i+1, st.Status, want[i], b.String())
		}
	}
	if got := rep.Steps[1].Expectations[0].Got; !strings.Contains(got, "pod default/web ingress allowed by default/web-from-client ingress rule 0") {
		t.Errorf("a failed decided_by says %q, not what decided", got)
	}
	if k := ReasonKind("dropped by NetworkPolicy at POSTROUTING: pod default/web is isolated for ingress"); k != "NetworkPolicy dropped it" {
		t.Errorf("ReasonKind of a policy drop: %q", k)
	}
}

func TestPolicyDecidedByChecked(t *testing.T) {
	for _, tc := range []struct{ step, want string }{
		{`  - connect: {from: pod:default/client, to: "pod:default/web:8080"}
    expect: {decided_by: {network_policy: web-from-client}}
`, "decided_by.network_policy: want NAMESPACE/NAME"},
		{`  - connect: {from: pod:default/client, to: "pod:default/web:8080"}
    expect: {decided_by: {network_policy: default/web-from-client, line: 3}}
`, "decided_by.line: a NetworkPolicy rule is named by rule"},
		{`  - node_settings: {node: all, network_policy: flannel}
`, "network_policy: want calico or cilium"},
	} {
		_, err := Parse("policy.yaml", []byte(policyScenario+tc.step))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.step, err, tc.want)
		}
	}
}
