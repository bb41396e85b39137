package dns

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/service"
)

// badServeManifests are objects the API server rejects: dns serve must
// reject them too, with the file, the line of the field and the field path
// (the same validation as service.LoadPaths + Store.ApplyManifests).
var badServeManifests = []struct {
	name, text string
	line       string // "file:line" suffix expected
	field      string // field path and message expected
}{
	{"duplicate port name", `apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 10.96.7.7
  ports:
  - {name: http, port: 80}
  - {name: http, port: 81}
`, ":8 ", `spec.ports[1].name: Duplicate value: "http"`},
	{"port out of range", `apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 10.96.7.7
  ports:
  - name: http
    port: 70000
`, ":8 ", "spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive"},
	{"bad externalName", `apiVersion: v1
kind: Service
metadata: {name: ext}
spec:
  type: ExternalName
  externalName: "not a name!"
`, ":6 ", "spec.externalName: Invalid value: \"not a name!\""},
	{"loopback endpoint", `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc12
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints:
- addresses: [10.244.1.7]
- addresses: [127.0.0.1]
ports: [{name: http, port: 8080, protocol: TCP}]
`, ":9 ", "endpoints[1].addresses[0]: Invalid value: \"127.0.0.1\": may not be in the loopback range"},
	{"headless NodePort", `apiVersion: v1
kind: Service
metadata: {name: np}
spec:
  type: NodePort
  clusterIP: None
  ports: [{port: 80}]
`, ":6 ", "spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for NodePort services"},
	{"loopback Endpoints in a List item", `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Endpoints
  metadata: {name: legacy, namespace: testns}
  subsets:
  - addresses:
    - ip: 127.0.0.2
    ports: [{port: 80}]
`, ":9 ", "subsets[0].addresses[0].ip: Invalid value: \"127.0.0.2\": may not be in the loopback range"},
	{"pod without containers", `apiVersion: v1
kind: Pod
metadata: {name: p}
spec: {}
status: {podIP: 10.244.0.9}
`, ":4 ", "spec.containers: Required value"},
}

func TestServeLoadValidates(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range badServeManifests {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			writeFile(t, file, tc.text)
			_, _, err := loadObjects([]string{file})
			if err == nil {
				t.Fatal("loaded without an error")
			}
			var me *service.ManifestError
			if !errors.As(err, &me) {
				t.Errorf("error %v is not a ManifestError", err)
			}
			if msg := err.Error(); !strings.Contains(msg, file+tc.line) || !strings.Contains(msg, tc.field) {
				t.Errorf("error\n  %v\nwant %q and %q", msg, file+tc.line, tc.field)
			}
			// The API server's path says the same.
			ms, lerr := service.LoadPaths(file)
			if lerr != nil {
				t.Fatal(lerr)
			}
			st, serr := service.NewStore(service.Config{})
			if serr != nil {
				t.Fatal(serr)
			}
			if aerr := st.ApplyManifests(ms); aerr == nil || !strings.Contains(aerr.Error(), tc.field) {
				t.Errorf("Store.ApplyManifests: %v, want %q as well", aerr, tc.field)
			}
			// At start-up: an input error (the CLI exits 2), nothing served.
			serr = Serve(context.Background(), ServeConfig{Manifests: []string{file}, Listen: "127.0.0.1:0"})
			if serr == nil || !IsInputError(serr) || !strings.Contains(serr.Error(), tc.field) {
				t.Errorf("Serve: %v, want an input error with %q", serr, tc.field)
			}
		})
	}
}

// All problems are reported, each at its own line, not only the first.
func TestServeLoadValidatesEveryObject(t *testing.T) {
	file := filepath.Join(t.TempDir(), "two.yaml")
	writeFile(t, file, badServeManifests[0].text+"---\n"+badServeManifests[1].text)
	_, _, err := loadObjects([]string{file})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{file + ":8 (document 1", file + ":16 (document 2 from line 10", "Duplicate value", "70000"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\nwant %q", err, want)
		}
	}
}

// What validation would reject only because no cluster allocated it, and a
// real `kubectl get -o yaml` dump, still load: cluster IPs outside any
// service CIDR, node ports outside any range, a hand-written LoadBalancer with
// externalTrafficPolicy Local and no healthCheckNodePort, objects without a
// namespace, clusterIP without clusterIPs.
func TestServeLoadAcceptsDumpsAndHandWritten(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ok.yaml")
	writeFile(t, file, `apiVersion: v1
kind: Service
metadata: {name: far}
spec:
  clusterIP: 192.168.77.7
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: lb}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  clusterIP: 172.31.0.9
  ports: [{port: 443, nodePort: 5}]
status:
  loadBalancer:
    ingress: [{ip: 203.0.113.9}]
`)
	objs, _, err := loadObjects([]string{file})
	if err != nil {
		t.Fatal(err)
	}
	if got := allocated(t, objs); len(got) != 2 || strings.Join(got["default/far"], ",") != "192.168.77.7" || strings.Join(got["default/lb"], ",") != "172.31.0.9" {
		t.Errorf("cluster IPs %v, want the given ones", got)
	}
	dump := filepath.Join("..", "testdata", "manifests", "kubectl-get-all.yaml")
	objs, _, err = loadObjects([]string{dump})
	if err != nil {
		t.Fatalf("kubectl dump: %v", err)
	}
	if len(objs) == 0 {
		t.Fatal("kubectl dump: no objects")
	}
	if _, _, err := loadObjects([]string{filepath.Join("..", "testdata", "dns", "cluster.yaml"), filepath.Join("..", "testdata", "dns", "my-service.yaml")}); err != nil {
		t.Errorf("testdata/dns: %v", err)
	}
}

// A reload with an invalid object keeps the previous data and logs the
// errors with file, line and field, as a reload of broken YAML does.
func TestServeReloadRejectsInvalid(t *testing.T) {
	file := filepath.Join(t.TempDir(), "svc.yaml")
	writeFile(t, file, serveManifest)
	r := startServe(t, file)
	writeFile(t, file, strings.Replace(serveManifest, "10.96.7.7", "10.96.8.8", 1)+"---\n"+badServeManifests[0].text)
	err := r.reload(t)
	if err == nil || !strings.Contains(err.Error(), file+":15 ") || !strings.Contains(err.Error(), `spec.ports[1].name: Duplicate value: "http"`) {
		t.Fatalf("reload: %v, want the duplicate port name at svc.yaml:15", err)
	}
	if log := r.log.String(); !strings.Contains(log, "reload failed, still serving the previous data: "+file+":15 ") {
		t.Errorf("log: %q", log)
	}
	if got := r.a(t, "my-service.default.svc.cluster.local."); len(got) != 1 || got[0] != "10.96.7.7" {
		t.Fatalf("after a rejected reload: %v, want the previous 10.96.7.7", got)
	}
}
