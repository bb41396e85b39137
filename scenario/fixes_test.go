package scenario

import (
	"strings"
	"testing"
)

// reportText is the report as text, for failure messages.
func reportText(rep *Report) string {
	var b strings.Builder
	rep.WriteText(&b)
	return b.String()
}

// The pods of the tests of this file: a client on node-b, web-0 on node-a.
const fixesManifests = `cluster: {dns: off, nodes: [{name: node-a}, {name: node-b}]%s}
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {type: LoadBalancer, externalTrafficPolicy: Local, selector: {app: web}, ports: [{port: 80, protocol: UDP}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-0, labels: {app: web}}, spec: {nodeName: node-a, containers: [{name: w, image: i, ports: [{containerPort: 80, protocol: UDP}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-b, containers: [{name: c, image: i}]}}
`

// TestLoadBalancerLocalWithoutHealthCheckPort: a LoadBalancer Service with
// externalTrafficPolicy Local and no healthCheckNodePort loads (the store allocates the
// port, as the API server does before it validates) and gets a health-check port.
func TestLoadBalancerLocalWithoutHealthCheckPort(t *testing.T) {
	r := mustStart(t, strings.Replace(fixesManifests, "%s", "", 1), "iptables")
	svc, ok := r.c.Store().GetService("default", "web")
	if !ok || svc.Spec.HealthCheckNodePort == 0 {
		t.Fatalf("service: %v, health-check node port %d", ok, svc.Spec.HealthCheckNodePort)
	}
	// A port outside the range is still the API server's error (its allocator's, as
	// kube-apiserver allocates before it validates).
	bad := strings.Replace(strings.Replace(fixesManifests, "%s", "", 1), "externalTrafficPolicy: Local,", "externalTrafficPolicy: Local, healthCheckNodePort: 70000,", 1)
	if _, err := Parse("test.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), "test.yaml:3: manifests[0]: ") || !strings.Contains(err.Error(), "failed to allocate requested HealthCheck NodePort 70000: provided port is not in the valid range") {
		t.Errorf("a bad healthCheckNodePort: %v", err)
	}
}

// TestReplySrcOfADeletedPod: reply_src: pod:NS/NAME names the address a deleted pod had,
// so that a check finds the stale UDP entry that still points at it (kube-proxy paused).
func TestReplySrcOfADeletedPod(t *testing.T) {
	s := mustParse(t, strings.Replace(fixesManifests, "%s", "", 1)+`steps:
  - connect: {from: pod:default/client, to: service:default/web:80, proto: udp, src_port: 5000}
    expect: {result: replied}
  - sync: {pause: node-b}
  - delete_pod: {pod: default/web-0}
  - name: stale
    check: {conntrack: {node: node-b, proto: udp, reply_src: pod:default/web-0}}
    expect: {count: 1}
`)
	rep := mustRun(t, s, "iptables")
	if !rep.Passed {
		t.Fatalf("%s", reportText(rep))
	}
	if st := step(t, rep, "stale"); !strings.Contains(strings.Join(st.Details, "\n"), "pod default/web-0 is gone; 10.244.0.2 was its address") {
		t.Errorf("details: %q", st.Details)
	}
}

// TestPodIPsRoundRobin: a pod started right after one was deleted gets the next address
// (host-local's round robin), unless cluster.pod_ip_allocation is lowest-free, which
// gives it the deleted pod's address; a bad value names the field.
func TestPodIPsRoundRobin(t *testing.T) {
	const steps = `steps:
  - delete_pod: {pod: default/web-0}
  - apply:
      - {apiVersion: v1, kind: Pod, metadata: {name: web-1, labels: {app: web}}, spec: {nodeName: node-a, containers: [{name: w, image: i}]}}
  - name: new pod
    connect: {from: pod:default/client, to: pod:default/web-1:80, proto: udp}
`
	for _, tc := range []struct{ setting, want string }{
		{"", "10.244.0.3"},
		{", pod_ip_allocation: round-robin", "10.244.0.3"},
		{", pod_ip_allocation: lowest-free", "10.244.0.2"},
	} {
		rep := mustRun(t, mustParse(t, strings.Replace(fixesManifests, "%s", tc.setting, 1)+steps), "iptables")
		if got := step(t, rep, "new pod").Traffic.Dst; got != tc.want+":80" {
			t.Errorf("%q: web-1 at %s, want %s", tc.setting, got, tc.want)
		}
	}
	_, err := Parse("test.yaml", []byte(strings.Replace(fixesManifests, "%s", ", pod_ip_allocation: lowest", 1)))
	if err == nil || !strings.Contains(err.Error(), `test.yaml:1: cluster.pod_ip_allocation: want round-robin or lowest-free, got "lowest"`) {
		t.Errorf("bad pod_ip_allocation: %v", err)
	}
}

// TestKubernetesServiceHasTheAPIServer: default/kubernetes has one endpoint, the first
// node's address on port 6443 (kind's control plane), and a connection to it connects
// to that node's host network.
func TestKubernetesServiceHasTheAPIServer(t *testing.T) {
	s := mustParse(t, strings.Replace(fixesManifests, "%s", "", 1)+`steps:
  - name: endpoints
    check: {endpoints: {service: default/kubernetes}}
    expect: {count: 1, ready: 1}
  - name: api
    connect: {from: pod:default/client, to: service:default/kubernetes:443}
    expect: {result: connected, reaches: [node:node-a]}
`)
	rep := mustRun(t, s, "iptables")
	if !rep.Passed {
		t.Fatalf("%s", reportText(rep))
	}
	if d := step(t, rep, "endpoints").Details; len(d) != 1 || d[0] != "172.18.0.2 (ready, serving)" {
		t.Errorf("endpoints: %q", d)
	}
}
