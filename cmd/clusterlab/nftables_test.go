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
