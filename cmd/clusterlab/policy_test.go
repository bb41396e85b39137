package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const policyManifests = "../../testdata/policy/web.yaml"

// TestPolicyExplainContract: the JSON of policy explain is the contract other tools
// read: allowed, reason, policies [{namespace, name, direction, rule}].
func TestPolicyExplainContract(t *testing.T) {
	type ref struct {
		Namespace, Name, Direction, Rule string
	}
	type answer struct {
		Allowed  *bool
		Reason   *string
		Policies []ref
		Backends []struct {
			Pod     string
			Allowed bool
		}
	}
	explain := func(from string) answer {
		t.Helper()
		out, _, err := runCmd(t, "policy", "explain", "--manifests", policyManifests, "--from", from, "--to", "service:shop/web:80", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var a answer
		if err := json.Unmarshal([]byte(out), &a); err != nil || a.Allowed == nil || a.Reason == nil || a.Policies == nil {
			t.Fatalf("not the contract's JSON (%v):\n%s", err, out)
		}
		return a
	}
	a := explain("pod:shop/client")
	if !*a.Allowed || len(a.Backends) != 2 {
		t.Fatalf("client: allowed %v, %d backends, want allowed through both:\n%+v", *a.Allowed, len(a.Backends), a)
	}
	for _, p := range a.Policies {
		if p != (ref{"shop", "web-allow-client", "ingress", "rule 0: from: [podSelector: {app: client}] ports: [TCP/http]"}) {
			t.Errorf("client: policy %+v, want web-allow-client's ingress rule 0", p)
		}
	}
	a = explain("pod:default/stranger")
	if *a.Allowed || !strings.Contains(*a.Reason, "denied to 2 of the 2 backends") || !strings.Contains(*a.Reason, "is isolated for ingress (policies: shop/web-allow-client); no rule allows it") {
		t.Errorf("stranger: allowed %v, reason %q", *a.Allowed, *a.Reason)
	}
	if len(a.Policies) == 0 || a.Policies[0].Name != "web-allow-client" || a.Policies[0].Rule != "" {
		t.Errorf("stranger: policies %+v, want web-allow-client with no rule", a.Policies)
	}
}

// TestPolicyMatrix: the matrix in the upstream e2e style, its JSON, and --diff.
func TestPolicyMatrix(t *testing.T) {
	out, _, err := runCmd(t, "policy", "matrix", "--manifests", policyManifests, "--port", "8080")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "-\tdefault/stranger\tshop/client\tshop/web-") {
		t.Fatalf("matrix:\n%s", out)
	}
	// Rows: stranger, client, web, web; columns the same. Only the client reaches web.
	want := []string{"default/stranger\t.\t.\tX\tX", "shop/client\t.\t.\t.\t."}
	for i, w := range want {
		if lines[i+1] != w {
			t.Errorf("row %d %q, want %q", i+1, lines[i+1], w)
		}
	}
	out, _, err = runCmd(t, "policy", "matrix", "--manifests", policyManifests, "--port", "8080", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var cells []struct {
		From, To, Protocol string
		Port               int
		Allowed            bool
	}
	if err := json.Unmarshal([]byte(out), &cells); err != nil || len(cells) != 16 {
		t.Fatalf("matrix JSON (%v), %d cells:\n%s", err, len(cells), out)
	}
	for _, c := range cells {
		wantAllowed := !(c.From == "default/stranger" && strings.HasPrefix(c.To, "shop/web-"))
		if strings.HasPrefix(c.From, "shop/web-") && strings.HasPrefix(c.To, "shop/web-") && c.From != c.To {
			wantAllowed = false
		}
		if c.Allowed != wantAllowed || c.Port != 8080 || c.Protocol != "tcp" {
			t.Errorf("cell %+v: want allowed %v", c, wantAllowed)
		}
	}
	other := filepath.Join(t.TempDir(), "other.yaml")
	os.WriteFile(other, []byte(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-allow-shop, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{namespaceSelector: {matchLabels: {team: shop}}}]}]
`), 0o644)
	out, _, err = runCmd(t, "policy", "matrix", "--manifests", policyManifests, "--port", "8080", "--diff", other)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "2 cells change:") || strings.Count(out, ": X => .") != 2 {
		t.Errorf("diff: want the two web pods now reaching each other:\n%s", out)
	}
}

// TestTraceShowsPolicy: clusterlab trace of a scenario shows the NetworkPolicy decision
// and its drop; -o json carries it as a structured decision.
func TestTraceShowsPolicy(t *testing.T) {
	args := []string{"trace", "../../testdata/scenarios/networkpolicy-clusterip-ipblock.yaml", "--from", "pod:default/client", "--to", "service:default/web:80"}
	out, _, err := runCmd(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"outcome: dropped (dropped by NetworkPolicy at POSTROUTING: pod default/client is isolated for egress (policies: default/client-egress-to-clusterip); no rule allows it",
		"note NetworkPolicy: DENY (pod default/client is isolated for egress",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
	out, _, err = runCmd(t, append(args, "-o", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"decision": {`) || !strings.Contains(out, `"selecting": [`) || !strings.Contains(out, `"direction": "egress"`) {
		t.Errorf("trace JSON lacks the structured decision:\n%.2000s", out)
	}
}
