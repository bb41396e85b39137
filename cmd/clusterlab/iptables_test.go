package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateCLI = flag.Bool("update-generate", false, "rewrite the golden file of TestGenerateIptables")

// `clusterlab generate iptables` on a small cluster manifest (node taken from its Node
// object) against a golden file; bad input exits with code 2 (a usageError).
func TestGenerateIptables(t *testing.T) {
	const golden = "../../testdata/generator/cli/cluster.golden"
	o := &iptablesGenOptions{
		manifests: []string{"../../testdata/generator/cli/cluster.yaml"}, node: "worker-1",
		clusterCIDRs: []string{"10.244.0.0/16"}, masqueradeBit: 14, localhostNodePorts: true, family: "IPv4",
	}
	var out bytes.Buffer
	if err := runIptablesGen(&out, o); err != nil {
		t.Fatal(err)
	}
	if *updateCLI {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, out.Bytes()) {
		t.Errorf("output differs from %s:\n%s", golden, out.String())
	}
	// The Node object made 10.244.2.7 remote and 10.244.1.5 local: the zone label and
	// node IP came from it.
	if !strings.Contains(out.String(), `"default/web:http -> 10.244.1.5:8080"`) {
		t.Error("endpoint comment missing")
	}

	for _, bad := range []func(*iptablesGenOptions){
		func(o *iptablesGenOptions) { o.manifests = nil },
		func(o *iptablesGenOptions) { o.family = "IPv5" },
		func(o *iptablesGenOptions) { o.nodeIPs = []string{"300.1.1.1"} },
		func(o *iptablesGenOptions) { o.detectLocalMode = "Bogus" },
		func(o *iptablesGenOptions) { o.manifests = []string{"no/such/file.yaml"} },
	} {
		oo := *o
		bad(&oo)
		err := runIptablesGen(&bytes.Buffer{}, &oo)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%+v: want a usage error, got %v", oo, err)
		}
	}
}

// TestGenerateDefaultsNamespace: a Service (and EndpointSlice) without a namespace is
// in "default", as the API server stores it: the rules' comments say default/web, not
// /web.
func TestGenerateDefaultsNamespace(t *testing.T) {
	file := filepath.Join(t.TempDir(), "svc.yaml")
	if err := os.WriteFile(file, []byte("apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {clusterIP: 10.96.0.5, selector: {app: web}, ports: [{name: http, port: 80}]}\n---\n"+
		"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\nendpoints: [{addresses: [10.244.1.5]}]\nports: [{name: http, port: 8080, protocol: TCP}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"iptables", "nftables"} {
		out, _, err := runCmd(t, "generate", mode, "--node", "node-a", "-f", file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "default/web") || strings.Contains(out, `"/web`) || strings.Contains(out, "-/web") || !strings.Contains(out, "10.244.1.5") {
			t.Errorf("generate %s:\n%s\nwant default/web and its endpoint 10.244.1.5", mode, out)
		}
	}
}
