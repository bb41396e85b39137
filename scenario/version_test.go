package scenario

import (
	"fmt"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// TestVersionChangesNodeHints: trafficDistribution PreferSameNode keeps traffic on the
// client's node from kube-proxy 1.34 (PreferSameTrafficDistribution beta) and not before,
// unless feature_gates turns the alpha gate on in 1.33.
func TestVersionChangesNodeHints(t *testing.T) {
	text := `cluster:
  dns: off
  nodes: [{name: node-a}, {name: node-b}]
  proxy: {version: "VERSION"}
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {trafficDistribution: PreferSameNode, selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-a, labels: {app: web}}, spec: {nodeName: node-a, containers: [{name: c, image: i, ports: [{containerPort: 8080}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-b, labels: {app: web}}, spec: {nodeName: node-b, containers: [{name: c, image: i, ports: [{containerPort: 8080}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-a, containers: [{name: c, image: i}]}}
steps:
  - name: from node-a
    connect: {from: pod:default/client, to: service:default/web:80, count: 20}
`
	for _, tc := range []struct {
		version  string
		backends int
		gates    string
	}{{"1.35", 1, ""}, {"1.34", 1, ""}, {"1.33", 2, ""}, {"1.28", 2, ""},
		{"1.33", 1, "PreferSameTrafficDistribution: true"}, {"1.35", 1, ""}} {
		src := strings.Replace(text, "VERSION", tc.version, 1)
		if tc.gates != "" {
			src = strings.Replace(src, "proxy: {version: \""+tc.version+"\"}", "proxy: {version: \""+tc.version+"\", feature_gates: {"+tc.gates+"}}", 1)
		}
		rep := mustRun(t, mustParse(t, src), "")
		b := rep.Steps[0].Traffic.Backends
		if len(b) != tc.backends || tc.backends == 1 && b["default/web-a"] != 20 {
			t.Errorf("kube-proxy %s %s: backends %v, want %d", tc.version, tc.gates, b, tc.backends)
		}
		if rep.Version != tc.version {
			t.Errorf("report says version %s, want %s", rep.Version, tc.version)
		}
	}
}

// The help's version notes come from the table: every mode with its releases.
func TestVersionNotesFromTheTable(t *testing.T) {
	notes := VersionNotes()
	for _, m := range kubeproxy.Registered() {
		want := fmt.Sprintf("%-10s %s-%s (default %s)", m.Mode, m.Versions.First, m.Versions.Last, m.Versions.Default)
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if !strings.Contains(notes, "removed in 1.26") || !strings.Contains(notes, "from 1.35: the IPVS mode is deprecated") {
		t.Errorf("removal and deprecation missing:\n%s", notes)
	}
}
