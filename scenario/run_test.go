package scenario

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

func mustParse(t *testing.T, text string) *Scenario {
	t.Helper()
	s, err := Parse("test.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mustStart parses a scenario and builds its cluster under mode, without running a
// step; the cluster is closed when the test ends.
func mustStart(t *testing.T, text, mode string) *runner {
	t.Helper()
	p, err := mustParse(t, text).prepare(mode)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	return r
}

func mustRun(t *testing.T, s *Scenario, mode string) *Report {
	t.Helper()
	rep, err := Run(context.Background(), s, Options{Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func step(t *testing.T, rep *Report, title string) *StepResult {
	t.Helper()
	for i := range rep.Steps {
		if rep.Steps[i].Title == title {
			return &rep.Steps[i]
		}
	}
	t.Fatalf("no step %q", title)
	return nil
}

// TestDemoScenarioIPTables: the demo's facts under the iptables mode.
func TestDemoScenarioIPTables(t *testing.T) {
	s, err := Load("demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rep := mustRun(t, s, "iptables")
	if !rep.Passed {
		var b strings.Builder
		rep.WriteText(&b)
		t.Fatalf("demo scenario failed:\n%s", b.String())
	}
	vip := step(t, rep, "requests to the VIP")
	if vip.Traffic.Results["connected"] != 90 || len(vip.Traffic.Backends) != 3 || vip.Traffic.SeenSources["client"] != 90 {
		t.Errorf("vip: %+v", vip.Traffic)
	}
	// The deleted pod is terminating: it keeps its endpoint but gets no new connections.
	del := step(t, rep, "delete a backend")
	m := regexp.MustCompile(`deleted (default/my-app-\S+)`).FindStringSubmatch(del.Summary)
	if m == nil {
		t.Fatalf("delete summary %q", del.Summary)
	}
	after := step(t, rep, "requests after the delete")
	if after.Traffic.Backends[m[1]] != 0 {
		t.Errorf("the terminating pod %s still got new connections: %v", m[1], after.Traffic.Backends)
	}
	if len(after.Traffic.Backends) != 3 {
		t.Errorf("after the delete (and the ReplicaSet's replacement) want 3 backends, got %v", after.Traffic.Backends)
	}
	ep := step(t, rep, "endpoints after the delete")
	if *ep.Count != 4 || *ep.Ready != 3 || !strings.Contains(strings.Join(ep.Details, "\n"), m[1]) {
		t.Errorf("endpoints: %d/%d %v", *ep.Count, *ep.Ready, ep.Details)
	}
	out := step(t, rep, "from outside through node-b")
	for cls := range out.Traffic.SeenSources {
		if cls != "node:node-b" {
			t.Errorf("NodePort from outside (eTP Cluster) through node-b: backend saw %s, want node-b's address", cls)
		}
	}
	tr := step(t, rep, "one packet, rule by rule")
	if tr.Trace == nil || !strings.Contains(tr.Trace.String(), "KUBE-SEP-") {
		t.Errorf("trace step has no rule-level trace")
	}
}

// TestDeploymentExpansion: Deployments become kubectl-like pods, deterministically from
// the seed, with the pod-template-hash label; scale and delete keep the count.
func TestDeploymentExpansion(t *testing.T) {
	text := `cluster: {seed: 3, dns: off}
manifests:
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web}
    spec:
      replicas: 2
      selector: {matchLabels: {app: web}}
      template:
        metadata: {labels: {app: web}}
        spec: {containers: [{name: c, image: i, ports: [{containerPort: 8080}]}]}
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}}
steps:
  - name: scale up
    scale: {deployment: default/web, replicas: 4}
  - name: count
    check: {endpoints: {service: default/web}}
    expect: {count: 4, ready: 4}
  - name: delete one
    delete_pod: {selector: app=web, count: 1}
  - name: still four
    check: {endpoints: {service: default/web}}
    expect: {count: 4, ready: 4}
  - name: scale down
    scale: {deployment: default/web, replicas: 1}
  - name: three terminating for the default 30s grace period
    check: {endpoints: {service: default/web}}
    expect: {count: 4, ready: 1, terminating: 3}
  - name: one
    at: 30s
    check: {endpoints: {service: default/web}}
    expect: {count: 1}
`
	s := mustParse(t, text)
	rep := mustRun(t, s, "")
	if !rep.Passed {
		var b strings.Builder
		rep.WriteText(&b)
		t.Fatalf("failed:\n%s", b.String())
	}
	var names []string
	nameRE := regexp.MustCompile(`^default/web-[bcdfghjklmnpqrstvwxz2456789]{6,10}-[bcdfghjklmnpqrstvwxz2456789]{5}$`)
	for _, p := range rep.Pods {
		if !nameRE.MatchString(p.Name) {
			t.Errorf("pod name %q is not kubectl-like (web-<hash>-<5>)", p.Name)
		}
		names = append(names, p.Name)
	}
	if len(names) != 2 {
		t.Fatalf("pods %v", names)
	}
	again := mustRun(t, mustParse(t, text), "")
	for i := range again.Pods {
		if again.Pods[i].Name != rep.Pods[i].Name {
			t.Errorf("names differ run to run: %s vs %s", again.Pods[i].Name, rep.Pods[i].Name)
		}
	}
	other := mustRun(t, mustParse(t, strings.Replace(text, "seed: 3", "seed: 4", 1)), "")
	if other.Pods[0].Name == rep.Pods[0].Name {
		t.Errorf("another seed gave the same name %s", other.Pods[0].Name)
	}
	if !strings.Contains(step(t, rep, "delete one").Details[0], "replaces it with") {
		t.Errorf("no replacement: %v", step(t, rep, "delete one").Details)
	}
}

// TestDualStackScenario: node_cidr, pod_cidr and service_cidr with an IPv4 and an IPv6
// CIDR make a dual-stack cluster: a PreferDualStack service gets a cluster IP of each
// family and answers on both.
func TestDualStackScenario(t *testing.T) {
	text := `cluster:
  dns: off
  node_cidr: 172.18.0.0/16,fc00:f853:ccd:e793::/64
  pod_cidr: 10.244.0.0/16,fd00:10:244::/56
  service_cidr: 10.96.0.0/12,fd00:10:96::/112
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {ipFamilyPolicy: PreferDualStack, clusterIP: 10.96.0.80, clusterIPs: [10.96.0.80, "fd00:10:96::80"], selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web, labels: {app: web}}, spec: {nodeName: node-b, containers: [{name: c, image: i, ports: [{containerPort: 8080}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-a, containers: [{name: c, image: i}]}}
steps:
  - name: IPv4
    connect: {from: pod:default/client, to: "10.96.0.80:80"}
    expect: {result: ok, reaches: [default/web], seen_source: client}
  - name: IPv6
    connect: {from: pod:default/client, to: "[fd00:10:96::80]:80"}
    expect: {result: ok, reaches: [default/web], seen_source: client}
`
	rep := mustRun(t, mustParse(t, text), "")
	if !rep.Passed {
		var b strings.Builder
		rep.WriteText(&b)
		t.Fatalf("failed:\n%s", b.String())
	}
}

// TestRunModesDiffer: the userspace mode's backends see the node's address, iptables'
// the client's; the comparison names that fact.
func TestRunModesDiffer(t *testing.T) {
	if _, ok := kubeproxy.Lookup("userspace"); !ok {
		t.Skip("userspace mode not in this build")
	}
	s := mustParse(t, `cluster: {dns: off}
manifests:
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-a, containers: [{name: c, image: i}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-0, labels: {app: web}}, spec: {nodeName: node-b, containers: [{name: c, image: i, ports: [{containerPort: 8080}]}]}}
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}}
steps:
  - name: to the VIP
    connect: {from: pod:default/client, to: service:default/web:80, count: 10}
    expect: {result: connected, seen_source: client}
`)
	cmp, err := RunModes(context.Background(), s, []string{"iptables", "userspace"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cmp.Passed || !cmp.Reports[0].Passed || cmp.Reports[1].Passed {
		t.Errorf("want iptables to pass and userspace to fail the seen_source expectation")
	}
	if len(cmp.Differences) != 1 {
		t.Fatalf("differences: %+v", cmp.Differences)
	}
	var seen *Fact
	for i, f := range cmp.Differences[0].Facts {
		if f.Name == "seen_source" {
			seen = &cmp.Differences[0].Facts[i]
		}
	}
	if seen == nil || seen.ByMode["iptables"] != "client" || seen.ByMode["userspace"] != "node:node-a" {
		t.Errorf("seen_source fact: %+v", seen)
	}
	if !strings.Contains(cmp.DiffText(), "seen source: iptables: client | userspace: node:node-a") {
		t.Errorf("diff text:\n%s", cmp.DiffText())
	}
}

// TestSeenSourceFromANode: a node's own connection reaches the backend from the node's
// address, which is the client's own address and an address of that node: seen_source
// client, node and node:NAME all hold, not-client and another node's name do not.
func TestSeenSourceFromANode(t *testing.T) {
	s := mustParse(t, `cluster:
  nodes: [{name: node-a}, {name: node-b}]
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web, labels: {app: web}}, spec: {nodeName: node-b, containers: [{name: c, image: i, ports: [{containerPort: 8080}]}]}}
steps:
  - {name: node:node-a, connect: {from: node:node-a, to: "service:default/web:80", count: 3}, expect: {seen_source: "node:node-a"}}
  - {name: node, connect: {from: node:node-a, to: "service:default/web:80"}, expect: {seen_source: node}}
  - {name: client, connect: {from: node:node-a, to: "service:default/web:80"}, expect: {seen_source: client}}
  - {name: not-client, connect: {from: node:node-a, to: "service:default/web:80"}, expect: {seen_source: not-client}}
  - {name: node:node-b, connect: {from: node:node-a, to: "service:default/web:80"}, expect: {seen_source: "node:node-b"}}
`)
	for _, mode := range []string{"iptables", "ipvs", "userspace"} {
		rep := mustRun(t, s, mode)
		for title, want := range map[string]bool{"node:node-a": true, "node": true, "client": true, "not-client": false, "node:node-b": false} {
			st := step(t, rep, title)
			if len(st.Expectations) != 1 || st.Expectations[0].OK != want || st.Traffic.Results["connected"] == 0 {
				t.Errorf("%s: seen_source %s: %+v (traffic %+v), want ok=%v", mode, title, st.Expectations, st.Traffic, want)
			}
		}
	}
}

// TestDeploymentAliasExpansionRefused: a Deployment whose aliases would expand a small
// file into tens of MB of JSON (many aliases of one long string) is refused with the
// alias's line, as service.Load refuses it, instead of being converted.
func TestDeploymentAliasExpansionRefused(t *testing.T) {
	long := strings.Repeat("x", 10000)
	var b strings.Builder
	b.WriteString("cluster: {seed: 3, dns: off}\nmanifests:\n  - apiVersion: apps/v1\n    kind: Deployment\n")
	b.WriteString("    metadata: {name: web, annotations: {s: &s " + long + "}}\n")
	b.WriteString("    spec:\n      replicas: 1\n      selector: {matchLabels: {app: web}}\n")
	b.WriteString("      template:\n        metadata:\n          labels: {app: web}\n          annotations:\n")
	b.WriteString("            l1: &l1 [" + strings.TrimSuffix(strings.Repeat("*s, ", 30), ", ") + "]\n")
	b.WriteString("            l2: [" + strings.TrimSuffix(strings.Repeat("*l1, ", 200), ", ") + "]\n") // line 14
	b.WriteString("        spec: {containers: [{name: c, image: i}]}\n")
	_, err := Parse("bomb.yaml", []byte(b.String()))
	if err == nil {
		t.Fatal("a Deployment expanding to 60 MB of JSON was accepted")
	}
	var se *Error
	if !errors.As(err, &se) || se.Line != 14 || !strings.Contains(err.Error(), "alias *l1") || !strings.Contains(err.Error(), "refusing to expand") {
		t.Fatalf("want an error at bomb.yaml:14 naming alias *l1, got %v", err)
	}
}
