package scenario

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// TestServiceProxyNameEveryMode: testdata/scenarios/service-proxy-name.yaml passes
// under every mode whose default release is 1.35 or later (iptables, IPVS, nftables): a
// Service labelled service-proxy-name is dead to kube-proxy (dropped, as a deleted
// Service's cluster IP: the node has no rule and no route for it; the nftables mode
// drops it as an unallocated address of the ServiceCIDRs) while its
// EndpointSlice and DNS name are there; node-c's proxy named my-proxy serves it and not
// the unlabelled one; removing the label moves it back to kube-proxy; a Service with a
// cluster IP labelled headless is proxied by kube-proxy (TestHeadlessLabelByVersion has
// the releases before, and the userspace mode).
func TestServiceProxyNameEveryMode(t *testing.T) {
	ran := 0
	for _, m := range kubeproxy.Registered() {
		def, err := proxy.ParseVersion(m.Versions.Default)
		if err != nil {
			t.Fatalf("%s: default release %q: %v", m.Mode, m.Versions.Default, err)
		}
		if !def.AtLeast(35) {
			continue // the headless steps are of 1.35 and later
		}
		ran++
		t.Run(string(m.Mode), func(t *testing.T) {
			s, err := Load("../testdata/scenarios/service-proxy-name.yaml")
			if err != nil {
				t.Fatal(err)
			}
			rep := mustRun(t, s, string(m.Mode))
			if !rep.Passed {
				var b strings.Builder
				rep.WriteText(&b)
				t.Fatalf("failed:\n%s", b.String())
			}
			if got := rep.Nodes[2].ProxyName; got != "my-proxy" {
				t.Errorf("node-c's proxy name in the report %q", got)
			}
			// A cluster IP no proxy serves goes where a deleted Service's goes.
			for _, title := range []string{
				"the Service labelled service-proxy-name is dead on a kube-proxy node",
				"and not the unlabelled Service",
				"and not by my-proxy, as it is not labelled for it",
			} {
				tr := step(t, rep, title).Traffic
				ip := strings.TrimSuffix(tr.Dst, ":80")
				want := "no route to " + ip + " in the cluster network"
				if m.Mode == kubeproxy.NFTables {
					// The nftables mode drops traffic to addresses of the ServiceCIDRs
					// that are not cluster IPs it knows: a deleted Service's too.
					want = "dropped by kube-proxy ip kube-proxy filter-forward at FORWARD: ip kube-proxy cluster-ips-check handle 15"
				}
				if len(tr.Reasons) != 1 || tr.Reasons[want] != 1 {
					t.Errorf("%s: reasons %v, want %q", title, tr.Reasons, want)
				}
			}
		})
	}
	if ran < 3 {
		t.Errorf("ran under %d modes, want iptables, IPVS and nftables at least", ran)
	}
}

// TestHeadlessLabelByVersion: a Service with a cluster IP labelled
// service.kubernetes.io/headless is dead to kube-proxy before 1.35 (its Service watch
// filtered the label) and proxied from 1.35 (only EndpointSlices are filtered, and the
// controller strips the label from this Service's slice), in every mode that has the
// release; its EndpointSlice and DNS name are there either way.
func TestHeadlessLabelByVersion(t *testing.T) {
	const text = `
cluster:
  proxy:
    version: "%s"
  nodes: [{name: node-a}, {name: node-b}]
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: unproxied, labels: {service.kubernetes.io/headless: ""}}, spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-0, labels: {app: web}}, spec: {nodeName: node-b, containers: [{name: w, image: whoami, ports: [{containerPort: 8080}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-a, containers: [{name: c, image: busybox}]}}
steps:
  - {name: connect, connect: {from: pod:default/client, to: "service:default/unproxied:80"}, expect: {result: %s}}
  - {name: slice, check: {endpoints: {service: default/unproxied}}, expect: {count: 1, ready: 1}}
  - {name: dns, dns: {from: pod:default/client, name: unproxied}, expect: {rcode: NOERROR, answer: [service:default/unproxied]}}
`
	for _, m := range kubeproxy.Registered() {
		first, _ := proxy.ParseVersion(m.Versions.First)
		last, _ := proxy.ParseVersion(m.Versions.Last)
		for _, c := range []struct {
			version proxy.Version
			result  string
		}{{34, "dropped"}, {35, "connected"}, {25, "dropped"}} {
			if c.version < first || c.version > last {
				continue
			}
			t.Run(fmt.Sprintf("%s/%s", m.Mode, c.version), func(t *testing.T) {
				rep := mustRun(t, mustParse(t, fmt.Sprintf(text, c.version, c.result)), string(m.Mode))
				if !rep.Passed {
					var b strings.Builder
					rep.WriteText(&b)
					t.Errorf("failed:\n%s", b.String())
				}
			})
		}
	}
}

// TestClusterProxyName: cluster.proxy.name names every node's proxy; a node's
// proxy_name overrides it, "" back to kube-proxy; in every mode, a Service kube-proxy
// does not watch is dead the way a deleted Service is.
func TestClusterProxyName(t *testing.T) {
	s := mustParse(t, `
cluster:
  proxy:
    name: my-proxy
  nodes:
    - name: node-a
    - name: node-b
      proxy_name: ""
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}}
  - {apiVersion: v1, kind: Service, metadata: {name: mesh, labels: {service.kubernetes.io/service-proxy-name: my-proxy}}, spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-0, labels: {app: web}}, spec: {nodeName: node-b, containers: [{name: w, image: whoami, ports: [{containerPort: 8080}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client-a}, spec: {nodeName: node-a, containers: [{name: c, image: busybox}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client-b}, spec: {nodeName: node-b, containers: [{name: c, image: busybox}]}}
steps:
  - {name: a mesh, connect: {from: pod:default/client-a, to: "service:default/mesh:80"}, expect: {result: connected}}
  - {name: a web, connect: {from: pod:default/client-a, to: "service:default/web:80"}, expect: {result: dropped}}
  - {name: b mesh, connect: {from: pod:default/client-b, to: "service:default/mesh:80"}, expect: {result: dropped}}
  - {name: b web, connect: {from: pod:default/client-b, to: "service:default/web:80"}, expect: {result: connected}}
  - {delete: [{kind: Service, name: default/web}]}
  - {name: b web deleted, connect: {from: pod:default/client-b, to: "10.106.83.202:80"}, expect: {result: dropped}}
`)
	for _, m := range kubeproxy.Registered() {
		t.Run(string(m.Mode), func(t *testing.T) {
			rep := mustRun(t, s, string(m.Mode))
			if !rep.Passed {
				var b strings.Builder
				rep.WriteText(&b)
				t.Fatalf("failed:\n%s", b.String())
			}
			// A Service kube-proxy does not watch is dead the way a deleted one is.
			if a, del := step(t, rep, "a web").Traffic, step(t, rep, "b web deleted").Traffic; a.Dst != del.Dst || !maps.Equal(a.Reasons, del.Reasons) {
				t.Errorf("unwatched Service %s: %v; deleted Service %s: %v", a.Dst, a.Reasons, del.Dst, del.Reasons)
			}
			if rep.Nodes[0].ProxyName != "my-proxy" || rep.Nodes[1].ProxyName != "" {
				t.Errorf("proxy names %q, %q; want my-proxy, kube-proxy's", rep.Nodes[0].ProxyName, rep.Nodes[1].ProxyName)
			}
			var b strings.Builder
			rep.WriteText(&b)
			if !strings.Contains(b.String(), "node-a 172.18.0.2 (pods 10.244.0.0/24, proxy my-proxy)") {
				t.Errorf("the report does not name node-a's proxy:\n%s", b.String())
			}
		})
	}
}
