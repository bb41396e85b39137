package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/dns"
	"github.com/clusterlab/clusterlab/service"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestSameClusterIPEverywhere: a Service the manifests give no clusterIP gets the same
// address from generate, run and dns serve (they share service.NameDerivedClusterIPs),
// and each says so; generate writes its rules instead of none.
func TestSameClusterIPEverywhere(t *testing.T) {
	dir := t.TempDir()
	manifests := filepath.Join(dir, "app.yaml")
	if err := os.WriteFile(manifests, []byte(`apiVersion: v1
kind: Service
metadata: {name: shop, namespace: default}
spec: {selector: {app: shop}, ports: [{port: 80, targetPort: 8080}]}
---
apiVersion: v1
kind: Pod
metadata: {name: shop-0, labels: {app: shop}}
spec: {nodeName: node-a, containers: [{name: c, image: i, ports: [{containerPort: 8080}]}]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	gen, genErr, err := runCmd(t, "generate", "iptables", "--manifests", manifests, "--node", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`-A KUBE-SERVICES .*default/shop.* -d (10\.[0-9.]+) `).FindStringSubmatch(gen)
	if m == nil {
		t.Fatalf("generate wrote no rule for default/shop:\n%s", gen)
	}
	ip := m[1]
	if !strings.Contains(genErr, "service default/shop has no clusterIP in the manifests: given "+ip) {
		t.Errorf("generate's stderr: %q", genErr)
	}
	// dns serve fills its manifests with the same function over its ranges.
	ms, err := service.LoadPaths(manifests)
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for _, m := range ms {
		objs = append(objs, m.Object)
	}
	filled, _ := service.NameDerivedClusterIPs(objs, []netip.Prefix{dns.ServeServiceCIDRv4, dns.ServeServiceCIDRv6}, nil)
	if got := filled[0].(*corev1.Service).Spec.ClusterIP; got != ip {
		t.Errorf("dns serve's address %s, generate's %s", got, ip)
	}
	scenario := filepath.Join(dir, "s.yaml")
	if err := os.WriteFile(scenario, []byte("cluster: {dns: off, nodes: [{name: node-a}]}\nmanifests: [{path: app.yaml}]\nsteps:\n  - connect: {from: node:node-a, to: \""+ip+":80\"}\n    expect: {result: connected}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCmd(t, "run", scenario)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "service default/shop: ClusterIP "+ip) || !strings.Contains(out, "default/shop without a clusterIP in the manifests: the address derived from the name") {
		t.Errorf("run:\n%s", out)
	}
}

// TestUsageErrors: a command missing a required flag says so, and an unparsable target
// is a usage error (exit 2), not a failure of the run.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"generate", "iptables", "--manifests", "../../testdata/dns/my-service.yaml"}, "--node is required"},
		{[]string{"generate", "nftables", "--manifests", "../../testdata/dns/my-service.yaml"}, "--node is required"},
		{[]string{"trace", demoFile, "--from", "pod:default/client", "--to", "nodeport:x/y@@z"}, `node "@z"`},
	} {
		_, _, err := runCmd(t, tc.args...)
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v (exit %d), want exit 2 with %q", tc.args, err, exitCode(err), tc.want)
		}
	}
}

// TestGenerateValidates: generate reads its manifests through the API server's
// validation, as dns serve and run do: a Service port out of range is an error naming
// the file, line and field (exit 2), not a rule iptables-restore would refuse.
func TestGenerateValidates(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  selector: {app: web}\n  ports:\n    - {protocol: TCP, port: 70000, targetPort: 8080}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"iptables", "nftables"} {
		_, _, err := runCmd(t, "generate", mode, "--manifests", bad, "--node", "n1")
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), bad+":7") || !strings.Contains(err.Error(), "spec.ports[0].port: Invalid value: 70000") {
			t.Errorf("%s: %v", mode, err)
		}
	}
}

// TestGenerateDerivesEndpointsFromPods: generate takes manifests as dns serve and run
// do: a selector Service whose EndpointSlices are not in the files gets those the
// controller would write for the files' Pods (said on stderr), while a Service whose
// slices are there keeps them even when its Pods are absent.
func TestGenerateDerivesEndpointsFromPods(t *testing.T) {
	dir := t.TempDir()
	manifests := filepath.Join(dir, "app.yaml")
	if err := os.WriteFile(manifests, []byte(`apiVersion: v1
kind: Service
metadata: {name: shop, namespace: default}
spec: {clusterIP: 10.96.0.80, selector: {app: shop}, ports: [{port: 80, targetPort: 8080}]}
---
apiVersion: v1
kind: Pod
metadata: {name: shop-0, namespace: default, labels: {app: shop}}
spec: {nodeName: node-a, containers: [{name: c, image: i, ports: [{containerPort: 8080}]}]}
status:
  phase: Running
  podIP: 10.244.0.7
  podIPs: [{ip: 10.244.0.7}]
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Service
metadata: {name: cart, namespace: default}
spec: {clusterIP: 10.96.0.81, selector: {app: cart}, ports: [{port: 80, targetPort: 9090}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: cart-abc, namespace: default, labels: {kubernetes.io/service-name: cart}}
addressType: IPv4
ports: [{name: "", port: 9090, protocol: TCP}]
endpoints: [{addresses: [10.244.1.9], conditions: {ready: true}, nodeName: node-b}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"iptables", "nftables"} {
		gen, genErr, err := runCmd(t, "generate", mode, "--manifests", manifests, "--node", "node-a")
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		for _, want := range []string{"10.244.0.7:8080", "10.244.1.9:9090"} {
			if !strings.Contains(gen, want) {
				t.Errorf("%s: no DNAT to %s in\n%s", mode, want, gen)
			}
		}
		if !strings.Contains(genErr, "service default/shop has no EndpointSlice in the manifests: 1 endpoints derived from the pods") {
			t.Errorf("%s: stderr %q does not say shop's endpoints were derived", mode, genErr)
		}
		if strings.Contains(genErr, "default/cart") {
			t.Errorf("%s: stderr %q speaks of cart, whose slice is in the files", mode, genErr)
		}
	}
}

// TestGenerateLocalDetectorWithoutCIDR: --detect-local-mode NodeCIDR for a node with no
// pod CIDR (none given, and its Node in the files has none) generates what kube-proxy
// does then (no local-traffic rules: its detector is a no-op) and says so on stderr; the
// node's spec.podCIDRs silence it, as does --pod-cidr.
func TestGenerateLocalDetectorWithoutCIDR(t *testing.T) {
	files := "../../testdata/generator/cli/cluster.yaml" // worker-1 has podCIDRs 10.244.1.0/24
	const warning = "--detect-local-mode NodeCIDR without an IPv4 pod CIDR"
	for _, mode := range []string{"iptables", "nftables"} {
		gen, stderr, err := runCmd(t, "generate", mode, "-f", files, "--node", "worker-9", "--node-ip", "192.168.0.9", "--detect-local-mode", "NodeCIDR")
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if !strings.Contains(stderr, warning) {
			t.Errorf("%s: a node without a pod CIDR: stderr %q lacks the warning", mode, stderr)
		}
		if strings.Contains(gen, "10.244.1.0/24") {
			t.Errorf("%s: worker-9 has no pod CIDR, yet the ruleset names worker-1's", mode)
		}
		gen, stderr, err = runCmd(t, "generate", mode, "-f", files, "--node", "worker-1", "--detect-local-mode", "NodeCIDR")
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if strings.Contains(stderr, warning) {
			t.Errorf("%s: worker-1 has spec.podCIDRs, yet stderr warns: %q", mode, stderr)
		}
		if !strings.Contains(gen, "10.244.1.0/24") {
			t.Errorf("%s: worker-1's pod CIDR 10.244.1.0/24 is not in its local-traffic rules", mode)
		}
	}
}
