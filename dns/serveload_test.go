package dns

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// kubectlAll is what `kubectl get all,endpointslices -o yaml` prints: a List mixing
// kinds dns serve reads with kinds it does not.
const kubectlAll = `apiVersion: v1
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: web
  spec:
    selector: {matchLabels: {app: web}}
    template:
      metadata: {labels: {app: web}}
      spec: {containers: [{name: c, image: x}]}
- apiVersion: v1
  kind: Service
  metadata:
    name: web
    namespace: default
  spec:
    clusterIP: 10.96.5.5
    clusterIPs: [10.96.5.5]
    ports: [{name: http, port: 80, protocol: TCP}]
- apiVersion: apps/v1
  kind: ReplicaSet
  metadata:
    name: web-abc
  spec:
    selector: {matchLabels: {app: web}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: web-xyz
    namespace: default
    labels: {kubernetes.io/service-name: web}
  addressType: IPv4
  endpoints: [{addresses: [10.244.1.7]}]
  ports: [{name: http, port: 8080, protocol: TCP}]
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: last
  # a comment inside the last item
kind: List
metadata:
  resourceVersion: ""
`

func TestLoadManifestsSkipsOtherKinds(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	list := write("all.yaml", kubectlAll)
	docs := write("docs.yaml", `apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {a: b}
---
apiVersion: v1
kind: Service
metadata: {name: db}
spec: {clusterIP: 10.96.6.6, ports: [{port: 5432}]}
--- {apiVersion: apps/v1, kind: StatefulSet, metadata: {name: db}}
---
apiVersion: networking.k8s.io/v1
kind: IngressList
items: []
`)
	json := write("all.json", `{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds"}},
  {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "j", "namespace": "default"}, "spec": {"clusterIP": "10.96.7.7", "ports": [{"port": 80}]}}
]}
{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}
`)
	ms, skipped, err := loadManifests([]string{list, docs, json})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.String())
	}
	if len(ms) != 4 {
		t.Errorf("loaded %d objects, want the 3 services and the slice:\n%s", len(ms), strings.Join(got, "\n"))
	}
	want := map[string]int{"Deployment": 2, "ReplicaSet": 1, "ConfigMap": 1, "StatefulSet": 1, "IngressList": 1, "DaemonSet": 1, "Secret": 1}
	for k, n := range want {
		if skipped[k] != n {
			t.Errorf("skipped %v, want %v", skipped, want)
			break
		}
	}
	if len(skipped) != len(want) {
		t.Errorf("skipped %v, want %v", skipped, want)
	}
	if note := skippedNote(skipped); note != "skipped objects of kinds dns serve does not read: 1 ConfigMap, 1 DaemonSet, 2 Deployment, 1 IngressList, 1 ReplicaSet, 1 Secret, 1 StatefulSet" {
		t.Errorf("note %q", note)
	}
	// Objects keep their places: lines and document numbers as in the file.
	for _, m := range ms {
		if svc, ok := m.Object.(*corev1.Service); ok && svc.Name == "db" {
			if s := m.String(); !strings.Contains(s, "docs.yaml:6") {
				t.Errorf("db is at %s, want docs.yaml:6", s)
			}
		}
	}

	// Errors in what is served still name the file and the line; an unknown
	// field in a skipped kind is no error.
	bad := write("bad.yaml", `apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec: {bogus: 1}
---
apiVersion: v1
kind: Service
metadata: {name: why}
spec: {ports: [{port: 80, colour: red}]}
`)
	_, _, err = loadManifests([]string{bad})
	if err == nil || !strings.Contains(err.Error(), "bad.yaml:9") || !strings.Contains(err.Error(), "colour") || strings.Contains(err.Error(), "bogus") {
		t.Errorf("error %v: want the Service's unknown field at bad.yaml:9 only", err)
	}
}
