package scenario

import (
	"context"
	"strings"
	"testing"
)

// The expectations of this file are the ones Kubernetes' sig-network Service e2e tests
// need (issue 22): result failed, expected rejections, HTTP answers, endpoint details,
// and the API-level steps.

const failedScenario = `cluster: {dns: off, nodes: [{name: node-a}, {name: node-b}]}
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: empty}, spec: {clusterIP: 10.96.0.50, selector: {app: none}, ports: [{port: 80}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-b, containers: [{name: c, image: i}]}}
steps:
  - name: no endpoints
    connect: {from: pod:default/client, to: service:default/empty:80}
    expect: {result: failed}
  - name: a port the service does not have
    connect: {from: pod:default/client, to: 10.96.0.50:8080}
    expect: {result: failed}
`

// TestResultFailed: result failed holds for connections that fail differently by mode
// (to a port a cluster IP does not serve: no rule in the iptables mode, so the packet
// is lost; the IPVS mode's kube-ipvs0 address answers with a reset; the nftables mode
// rejects), so one file passes under all three; it fails for a connection that is
// answered, and an exact result fails where the mode ends the attempt otherwise.
func TestResultFailed(t *testing.T) {
	want := map[string]string{"iptables": "dropped 1", "ipvs": "refused 1", "nftables": "refused 1"}
	for _, mode := range []string{"iptables", "ipvs", "nftables"} {
		rep := mustRun(t, mustParse(t, failedScenario), mode)
		if !rep.Passed {
			t.Fatalf("%s: %s", mode, reportText(rep))
		}
		if got := summaryCounts(step(t, rep, "a port the service does not have").Traffic.Results); got != want[mode] {
			t.Errorf("%s: got %s, want %s", mode, got, want[mode])
		}
	}
	exact := strings.Replace(failedScenario, "to: 10.96.0.50:8080}\n    expect: {result: failed}", "to: 10.96.0.50:8080}\n    expect: {result: refused}", 1)
	if rep := mustRun(t, mustParse(t, exact), "iptables"); rep.Passed || rep.Failed != 1 {
		t.Errorf("result refused held for a dropped connection: %s", reportText(rep))
	}
	answered := failedScenario + `  - {apply: [{apiVersion: v1, kind: Pod, metadata: {name: web-0, labels: {app: none}}, spec: {nodeName: node-a, containers: [{name: w, image: i, ports: [{containerPort: 80}]}]}}]}
  - name: answered
    connect: {from: pod:default/client, to: service:default/empty:80}
    expect: {result: failed}
`
	rep := mustRun(t, mustParse(t, answered), "iptables")
	st := step(t, rep, "answered")
	if rep.Passed || len(st.Expectations) != 1 || st.Expectations[0].OK || st.Expectations[0].Got != "connected 1" {
		t.Errorf("result failed held for an answered connection: %s", reportText(rep))
	}
}

const rejectScenario = `cluster: {dns: off, nodes: [{name: node-a}, {name: node-b}]}
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {type: NodePort, selector: {app: web}, ports: [{port: 80, nodePort: 30080}]}}
steps:
  - name: out of range
    apply:
      - {apiVersion: v1, kind: Service, metadata: {name: far}, spec: {type: NodePort, selector: {app: web}, ports: [{port: 80, nodePort: 40000}]}}
    expect: {rejected: "provided port is not in the valid range"}
  - name: collision
    apply:
      - {apiVersion: v1, kind: Service, metadata: {name: fine}, spec: {selector: {app: web}, ports: [{port: 80}]}}
      - {apiVersion: v1, kind: Service, metadata: {name: twin}, spec: {type: NodePort, selector: {app: web}, ports: [{port: 80, nodePort: 30080}]}}
    expect: {rejected: "provided port is already allocated"}
  - name: bad cluster IP
    apply:
      - {apiVersion: v1, kind: Service, metadata: {name: bad}, spec: {clusterIP: 10.96.0.500, selector: {app: web}, ports: [{port: 80}]}}
    expect: {rejected: "must be a valid IP address"}
  - name: not rejected
    apply:
      - {apiVersion: v1, kind: Service, metadata: {name: other}, spec: {type: NodePort, selector: {app: web}, ports: [{port: 80, nodePort: 30081}]}}
    expect: {rejected: "provided port is already allocated"}
  - name: another message
    apply:
      - {apiVersion: v1, kind: Service, metadata: {name: twin}, spec: {type: NodePort, selector: {app: web}, ports: [{port: 80, nodePort: 30080}]}}
    expect: {rejected: "not in the valid range"}
`

// TestApplyRejected: an apply step can expect the API server's rejection (a node port
// out of range, one already allocated, an invalid clusterIP) with a part of its
// message; the run goes on, the store is unchanged (the valid Service applied with a
// colliding one is not there), and a rejection that does not happen, or comes with
// another message, fails the step with what happened.
func TestApplyRejected(t *testing.T) {
	r := mustStart(t, rejectScenario, "iptables")
	for i := range r.s.Steps {
		r.runStep(context.Background(), i)
	}
	rep := r.rep
	for _, title := range []string{"out of range", "collision", "bad cluster IP"} {
		st := step(t, rep, title)
		if st.Status != "ok" || len(st.Expectations) != 1 || !st.Expectations[0].OK {
			t.Errorf("%s: %s", title, reportText(rep))
		}
	}
	if got := step(t, rep, "collision").Expectations[0].Got; !strings.Contains(got, `spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated`) {
		t.Errorf("collision: the message reported is %q", got)
	}
	for _, name := range []string{"far", "fine", "twin", "bad"} {
		if _, ok := r.c.Store().GetService("default", name); ok {
			t.Errorf("service default/%s is in the store after a rejected apply", name)
		}
	}
	if st := step(t, rep, "not rejected"); st.Status != "failed" || st.Expectations[0].Got != "accepted" {
		t.Errorf("an accepted apply passed: %s", reportText(rep))
	}
	if _, ok := r.c.Store().GetService("default", "other"); !ok {
		t.Error("the accepted apply was not applied")
	}
	if st := step(t, rep, "another message"); st.Status != "failed" || !strings.Contains(st.Expectations[0].Got, "already allocated") {
		t.Errorf("a rejection with another message passed: %s", reportText(rep))
	}
}

// TestApplyLoadBalancerLocalWithoutHealthCheckPort: an apply step's LoadBalancer with
// externalTrafficPolicy Local and no healthCheckNodePort loads (its Services are
// allocated before they are validated, as by the API server) and the port it is given
// answers.
func TestApplyLoadBalancerLocalWithoutHealthCheckPort(t *testing.T) {
	rep := mustRun(t, mustParse(t, `cluster: {dns: off, nodes: [{name: node-a}, {name: node-b}]}
manifests:
  - {apiVersion: v1, kind: Pod, metadata: {name: web-0, labels: {app: web}}, spec: {nodeName: node-a, containers: [{name: w, image: i, ports: [{containerPort: 80}]}]}}
steps:
  - apply:
      - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {type: LoadBalancer, externalTrafficPolicy: Local, selector: {app: web}, ports: [{port: 80}]}}
  - check: {health_check: {service: default/web, node: node-a}}
    expect: {status: 200, local_endpoints: 1}
`), "iptables")
	if !rep.Passed {
		t.Fatal(reportText(rep))
	}
}

const endpointsScenario = `cluster: {dns: off, nodes: [{name: node-a}, {name: node-b}]}
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {selector: {app: web}, ports: [{port: 80, targetPort: http}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-0, labels: {app: web}}, spec: {nodeName: node-a, containers: [{name: w, image: i, ports: [{name: http, containerPort: 8080}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-1, labels: {app: web}}, spec: {nodeName: node-b, containers: [{name: w, image: i, ports: [{name: http, containerPort: 8080}]}]}}
steps:
  - delete_pod: {pod: default/web-1, grace: 30s}
  - name: one terminating
    check: {endpoints: {service: default/web}}
    expect:
      endpoints:
        - {address: pod:default/web-0, port: 8080, node: node-a, ready: true, serving: true, terminating: false}
        - {address: pod:default/web-1, port: 8080, node: node-b, ready: false, serving: true, terminating: true}
  - name: include by address
    check: {endpoints: {service: default/web}}
    expect:
      endpoints_include: [{address: 10.244.0.2, ready: true}]
`

// TestEndpointExpectations: a check endpoints step compares the Service's endpoints
// with a list (exactly, or at least): pod or address, the slice's port (a named target
// port resolved), node, and the ready, serving and terminating conditions of a pod in
// its grace period; a wrong condition, a wrong port, a missing or an unexpected
// endpoint fails with what the slices hold.
func TestEndpointExpectations(t *testing.T) {
	rep := mustRun(t, mustParse(t, endpointsScenario), "iptables")
	if !rep.Passed {
		t.Fatal(reportText(rep))
	}
	for _, tc := range []struct{ name, from, to, got string }{
		{"condition", "node: node-b, ready: false", "node: node-b, ready: true", "missing: pod:default/web-1 port 8080 on node-b ready=true serving=true terminating=true"},
		{"port", "{address: pod:default/web-0, port: 8080", "{address: pod:default/web-0, port: 80", "missing: pod:default/web-0 port 80"},
		{"not listed", "        - {address: pod:default/web-1, port: 8080, node: node-b, ready: false, serving: true, terminating: true}\n", "", "not expected: 10.244.1.2 pod:default/web-1 port 8080 on node-b ready=false serving=true terminating=true"},
		{"not there", "[{address: 10.244.0.2, ready: true}]", "[{address: 10.244.0.2, ready: true}, {address: pod:default/web-2}]", "missing: pod:default/web-2"},
	} {
		text := strings.Replace(endpointsScenario, tc.from, tc.to, 1)
		if text == endpointsScenario {
			t.Fatalf("%s: no change", tc.name)
		}
		rep := mustRun(t, mustParse(t, text), "iptables")
		var got []string
		for _, st := range rep.Steps {
			for _, e := range st.Expectations {
				if !e.OK {
					got = append(got, e.Got)
				}
			}
		}
		if len(got) != 1 || !strings.Contains(got[0], tc.got) {
			t.Errorf("%s: failed expectations %q, want one with %q", tc.name, got, tc.got)
		}
	}
}

const httpScenario = `cluster:
  dns: off
  nodes: [{name: node-a}, {name: node-b}]
  external_hosts: [{name: laptop}]
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {type: LoadBalancer, externalTrafficPolicy: Local, healthCheckNodePort: 32000, selector: {app: web}, ports: [{port: 80}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-0, labels: {app: web}}, spec: {nodeName: node-a, containers: [{name: w, image: i, ports: [{containerPort: 80}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-b, containers: [{name: c, image: i}]}}
steps:
  - name: local endpoint
    connect: {from: external:laptop, to: "node:node-a:32000", http: {path: /}}
    expect: {result: connected, status: 200, body: '"localEndpoints": 1'}
  - name: no local endpoint
    connect: {from: external:laptop, to: "node:node-b:32000", http: {}}
    expect: {status: 503, body: '"localEndpoints": 0'}
  - name: healthz
    connect: {from: external:laptop, to: "node:node-a:10256", http: {path: /healthz}}
    expect: {status: 200, body: lastUpdated}
  - name: whoami
    connect: {from: pod:default/client, to: service:default/web:80, http: {path: /hello, host: web.example}, count: 2}
    expect: {status: 200, body: default/web-0, reaches: [default/web-0]}
`

// TestHTTPExpectations: a connect step with http makes HTTP GETs over real sockets and
// expects their status and a part of their body: kube-proxy's health-check node port
// (200 with a local endpoint, 503 without), its /healthz on 10256, and a pod's whoami
// server behind a Service; a wrong status or body fails with what was answered.
func TestHTTPExpectations(t *testing.T) {
	rep := mustRun(t, mustParse(t, httpScenario), "iptables")
	if !rep.Passed {
		t.Fatal(reportText(rep))
	}
	wrong := strings.NewReplacer("status: 503", "status: 200", "body: lastUpdated", "body: nope").Replace(httpScenario)
	rep = mustRun(t, mustParse(t, wrong), "iptables")
	got := map[string]string{}
	for _, st := range rep.Steps {
		for _, e := range st.Expectations {
			if !e.OK {
				got[st.Title+" "+e.Field] = e.Got
			}
		}
	}
	if len(got) != 2 || got["no local endpoint status"] != "HTTP 503 1" || !strings.HasPrefix(got["healthz body"], `0 of 1; other bodies: "{\"lastUpdated\"`) {
		t.Errorf("failed expectations: %q\n%s", got, reportText(rep))
	}
}

const apiStepsScenario = `cluster: {dns: off, nodes: [{name: node-a}, {name: node-b}]}
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: e2e-a, labels: {test: e2e}}, spec: {selector: {app: web}, ports: [{port: 80}]}}
  - {apiVersion: v1, kind: Service, metadata: {name: e2e-b, labels: {test: e2e}}, spec: {selector: {app: web}, ports: [{port: 80}]}}
  - {apiVersion: v1, kind: Service, metadata: {name: e2e-c, namespace: other, labels: {test: e2e}}, spec: {selector: {app: web}, ports: [{port: 80}]}}
  - {apiVersion: v1, kind: Service, metadata: {name: keep, labels: {test: other}}, spec: {selector: {app: web}, ports: [{port: 80}]}}
  - {apiVersion: v1, kind: Service, metadata: {name: classy}, spec: {type: LoadBalancer, loadBalancerClass: example.com/fake, selector: {app: web}, ports: [{port: 80}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-0, labels: {app: web}}, spec: {nodeName: node-a, containers: [{name: w, image: i, ports: [{containerPort: 80}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-b, containers: [{name: c, image: i}]}}
steps:
  - name: delete by label
    delete: [{kind: Service, selector: test=e2e}]
  - name: no ingress yet
    connect: {from: pod:default/client, to: 198.51.100.77:80}
    expect: {result: failed}
  - name: set the ingress
    update_status: {service: default/classy, load_balancer_ingress: [198.51.100.77]}
  - name: ingress
    connect: {from: pod:default/client, to: 198.51.100.77:80}
    expect: {reaches: [default/web-0]}
`

// TestAPISteps: delete by label selector deletes the matching Services of one
// namespace only (with their EndpointSlices), leaving the others; update_status sets
// the load-balancer ingress of a Service no cloud controller serves (a
// loadBalancerClass), and kube-proxy then serves the address.
func TestAPISteps(t *testing.T) {
	r := mustStart(t, apiStepsScenario, "iptables")
	for i := range r.s.Steps {
		r.runStep(context.Background(), i)
	}
	if r.rep.Failed != 0 {
		t.Fatal(reportText(r.rep))
	}
	st := r.c.Store()
	for _, k := range []string{"default/e2e-a", "default/e2e-b"} {
		ns, n := splitKey(k)
		if _, ok := st.GetService(ns, n); ok {
			t.Errorf("%s is still there", k)
		}
		if len(st.EndpointSlicesFor(ns, n)) != 0 {
			t.Errorf("%s's slices are still there", k)
		}
	}
	for _, k := range []string{"other/e2e-c", "default/keep"} {
		ns, n := splitKey(k)
		if _, ok := st.GetService(ns, n); !ok {
			t.Errorf("%s was deleted", k)
		}
	}
	if got := step(t, r.rep, "delete by label").Summary; got != "deleted Service default/e2e-a, Service default/e2e-b" {
		t.Errorf("summary %q", got)
	}
	svc, _ := st.GetService("default", "classy")
	if ing := svc.Status.LoadBalancer.Ingress; len(ing) != 1 || ing[0].IP != "198.51.100.77" {
		t.Errorf("ingress %v", ing)
	}
}

// TestE2EServicesFile: testdata/scenarios/e2e-services.yaml, Kubernetes' Service e2e
// tests written with these expectations, passes under iptables, IPVS and nftables.
func TestE2EServicesFile(t *testing.T) {
	for _, mode := range []string{"iptables", "ipvs", "nftables"} {
		s, err := Load("../testdata/scenarios/e2e-services.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if rep := mustRun(t, s, mode); !rep.Passed {
			t.Errorf("%s: %s", mode, reportText(rep))
		}
	}
}
