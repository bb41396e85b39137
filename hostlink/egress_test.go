package hostlink

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/scenario"
)

const egressScenario = `name: a real server behind a simulated Service
cluster:
  nodes: [{name: node-a}, {name: node-b}]
host_services:
  - name: api
    address: 192.0.2.10:8080
    target: %s
manifests:
  - apiVersion: v1
    kind: Service
    metadata: {name: api}
    spec:
      ports: [{name: http, port: 80, targetPort: 8080}]
  - apiVersion: discovery.k8s.io/v1
    kind: EndpointSlice
    metadata:
      name: api-1
      labels: {kubernetes.io/service-name: api}
    addressType: IPv4
    endpoints: [{addresses: [192.0.2.10]}]
    ports: [{name: http, port: 8080, protocol: TCP}]
  - apiVersion: v1
    kind: Pod
    metadata: {name: client-a}
    spec: {nodeName: node-a, containers: [{name: c, image: busybox}]}
  - apiVersion: v1
    kind: Pod
    metadata: {name: client-b}
    spec: {nodeName: node-b, containers: [{name: c, image: busybox}]}
`

// A real net/http server on loopback, behind a simulated Service (no selector, an
// EndpointSlice naming a host_services address), answers pods on every node under every
// mode; another port of that address is refused.
func TestHostServicesEgress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "real server: %s %s", r.Method, r.URL.Path)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "egress.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(egressScenario, ln.Addr())), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range scenario.AvailableModes() {
		t.Run(mode, func(t *testing.T) {
			s, err := scenario.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			live, err := scenario.Start(s, scenario.Options{Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			defer live.Close()
			if got := live.HostServices(); len(got) != 1 || got[0] != "api: 192.0.2.10:8080 -> "+ln.Addr().String() {
				t.Errorf("HostServices() = %q", got)
			}
			for _, pod := range []string{"client-a", "client-b"} {
				n, err := live.Net("pod:default/" + pod)
				if err != nil {
					t.Fatal(err)
				}
				hc := n.HTTPClient()
				hc.Timeout = 20 * time.Second
				for _, u := range []string{"http://api.default.svc.cluster.local/x", "http://192.0.2.10:8080/y"} {
					resp, err := hc.Get(u)
					if err != nil {
						t.Fatalf("%s: GET %s: %v", pod, u, err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					path := u[strings.LastIndex(u, "/"):]
					if want := "real server: GET " + path; string(body) != want {
						t.Errorf("%s: GET %s: %q, want %q", pod, u, body, want)
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				c, err := n.DialContext(ctx, "tcp", "192.0.2.10:9999")
				cancel()
				if err == nil {
					c.Close()
					t.Errorf("%s: 192.0.2.10:9999 (not listed) connected", pod)
				}
			}
		})
	}
}
