package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// `clusterlab generate nftables` on the small cluster manifest of the iptables test
// (node taken from its Node object) against a golden file;
// bad input exits with code 2 (a usageError).
func TestGenerateNftables(t *testing.T) {
	const golden = "../../testdata/generator/cli/cluster-nftables.golden"
	o := &nftablesGenOptions{
		iptablesGenOptions: iptablesGenOptions{
			manifests: []string{"../../testdata/generator/cli/cluster.yaml"}, node: "worker-1",
			clusterCIDRs: []string{"10.244.0.0/16"}, masqueradeBit: 14, family: "IPv4",
		},
		serviceCIDRs: []string{"10.96.0.0/12"},
		version:      "1.37",
	}
	var out bytes.Buffer
	if err := runNftablesGen(&out, o); err != nil {
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
	// The Node object made 10.244.1.5 local (hairpin element) and gave the node IP
	// that nodeport-ips holds ("primary").
	for _, s := range []string{
		"add element ip kube-proxy hairpin-connections { 10.244.1.5 . 10.244.1.5 . tcp . 8080 }",
		"add element ip kube-proxy nodeport-ips {",
		"ip daddr { 10.96.0.0/12 } drop",
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q", s)
		}
	}
	for _, bad := range []func(*nftablesGenOptions){
		func(o *nftablesGenOptions) { o.manifests = nil },
		func(o *nftablesGenOptions) { o.family = "IPv5" },
		func(o *nftablesGenOptions) { o.nodeIPs = []string{"300.1.1.1"} },
		func(o *nftablesGenOptions) { o.detectLocalMode = "Bogus" },
		func(o *nftablesGenOptions) { o.manifests = []string{"no/such/file.yaml"} },
		func(o *nftablesGenOptions) { o.nodePortAddresses = []string{"10.0.0.0/33"} },
		func(o *nftablesGenOptions) { o.serviceCIDRs = []string{"10.96.0.0"} },
		func(o *nftablesGenOptions) { o.version = "1.28" },
		func(o *nftablesGenOptions) { o.masqueradeBit = 32 },
	} {
		oo := *o
		bad(&oo)
		err := runNftablesGen(&bytes.Buffer{}, &oo)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%+v: want a usage error, got %v", oo, err)
		}
	}
}

// A Service whose "ns/name:port" is over nft's 128-byte comment limit: the 1.36 layout
// writes the comment whole, as kube-proxy 1.36 did, and generate says that nft refuses
// it; 1.37 cuts it and says nothing (issue 23: the real-tool check found it).
func TestGenerateNftablesWarnsOfOverlongComments(t *testing.T) {
	dir := t.TempDir()
	manifest := `apiVersion: v1
kind: Service
metadata:
  namespace: loft-acme-platform-services-team-dev-v-shared-workloads-ns-001
  name: my-api-svc-x-my-api-namespace-x-acme-shared-vcluster--a1b2c3d4e
spec:
  clusterIP: 10.96.0.77
  ports: [{name: http, port: 80}]
`
	if err := os.WriteFile(dir+"/svc.yaml", []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"1.36", "1.37"} {
		var out, stderr bytes.Buffer
		o := &nftablesGenOptions{
			iptablesGenOptions: iptablesGenOptions{manifests: []string{dir + "/svc.yaml"}, node: "worker-1",
				nodeIPs: []string{"192.168.0.2"}, masqueradeBit: 14, family: "IPv4", stderr: &stderr},
			version: v,
		}
		if err := runNftablesGen(&out, o); err != nil {
			t.Fatal(err)
		}
		warned := strings.Contains(stderr.String(), "comments over 128 bytes, which nft refuses") &&
			strings.Contains(stderr.String(), "my-api-svc-x-my-api-namespace-x-acme-shared-vcluster--a1b2c3d4e:http")
		if warned != (v == "1.36") {
			t.Errorf("layout %s: stderr %q; want a warning only for 1.36", v, stderr.String())
		}
	}
}
