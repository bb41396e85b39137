package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Two Services, one labelled service-proxy-name=my-proxy (its EndpointSlice too, as the
// EndpointSlice controller copies the label) and one labelled headless.
const proxyNameManifests = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec: {clusterIP: 10.96.0.20, ports: [{name: http, port: 80, targetPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: mesh, namespace: default, labels: {service.kubernetes.io/service-proxy-name: my-proxy}}
spec: {clusterIP: 10.96.0.21, ports: [{name: http, port: 80, targetPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: unproxied, namespace: default, labels: {service.kubernetes.io/headless: ""}}
spec: {clusterIP: 10.96.0.22, ports: [{name: http, port: 80, targetPort: 8080}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints: [{addresses: [10.244.1.5]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: mesh-1, namespace: default, labels: {kubernetes.io/service-name: mesh, service.kubernetes.io/service-proxy-name: my-proxy}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints: [{addresses: [10.244.1.6]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: unproxied-1, namespace: default, labels: {kubernetes.io/service-name: unproxied}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints: [{addresses: [10.244.1.7]}]
`

// `generate iptables|nftables` leave out what kube-proxy does not watch (the Service
// labelled service-proxy-name), and --service-proxy-name writes the named proxy's rules:
// only the Service labelled for it.
func TestGenerateServiceProxyName(t *testing.T) {
	f := filepath.Join(t.TempDir(), "m.yaml")
	if err := os.WriteFile(f, []byte(proxyNameManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	base := iptablesGenOptions{manifests: []string{f}, node: "worker-1", clusterCIDRs: []string{"10.244.0.0/16"}, masqueradeBit: 14, localhostNodePorts: true, family: "IPv4"}
	gens := map[string]func(iptablesGenOptions) (string, error){
		"iptables": func(o iptablesGenOptions) (string, error) {
			var out bytes.Buffer
			err := runIptablesGen(&out, &o)
			return out.String(), err
		},
		"nftables": func(o iptablesGenOptions) (string, error) {
			var out bytes.Buffer
			err := runNftablesGen(&out, &nftablesGenOptions{iptablesGenOptions: o, version: "1.37"})
			return out.String(), err
		},
	}
	for mode, gen := range gens {
		for _, c := range []struct {
			proxyName string
			want      []string
			notWant   []string
		}{
			// The current release proxies a Service with a cluster IP labelled headless
			// (only EndpointSlices are filtered on that label since 1.35).
			{"", []string{"10.96.0.20", "10.96.0.22"}, []string{"10.96.0.21", "default/mesh"}},
			{"my-proxy", []string{"10.96.0.21"}, []string{"10.96.0.20", "10.96.0.22", "default/web", "default/unproxied"}},
		} {
			o := base
			o.proxyName = c.proxyName
			out, err := gen(o)
			if err != nil {
				t.Fatalf("%s %q: %v", mode, c.proxyName, err)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("%s, proxy %q: no %s in:\n%s", mode, c.proxyName, w, out)
				}
			}
			for _, w := range c.notWant {
				if strings.Contains(out, w) {
					t.Errorf("%s, proxy %q: %s in:\n%s", mode, c.proxyName, w, out)
				}
			}
		}
		o := base
		o.proxyName = "my proxy"
		_, err := gen(o)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "proxyName") {
			t.Errorf("%s: a proxy name with a space: %v, want a usage error naming proxyName", mode, err)
		}
	}
}
