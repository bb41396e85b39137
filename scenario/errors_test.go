package scenario

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadErrors: bad scenarios are rejected with the file, the line and the field.
func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "bad-svc.yaml"), []byte("apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports:\n    - port: 0\n"), 0o644)
	cases := []struct {
		name, yaml string
		want       []string // substrings of the error, in order
	}{
		{"unknown top-level field", "name: x\nstepz: []\n", []string{"bad.yaml:2: stepz: unknown field (did you mean steps?)"}},
		{"wrong type", "steps:\n  - connect:\n      from: pod:default/c\n      to: 10.0.0.1:80\n      count: ten\n", []string{`bad.yaml:5: steps[0].connect.count: want a whole number, got "ten"`}},
		{"no action", "steps:\n  - name: nothing\n", []string{"bad.yaml:2: steps[0]: no action"}},
		{"two actions", "steps:\n  - advance: 1s\n    heal: true\n", []string{"bad.yaml:2: steps[0]: one action per step, got advance and heal"}},
		{"bad duration", "steps:\n  - advance: 5 minutes\n", []string{`bad.yaml:2: steps[0].advance: want a duration such as 30s`}},
		{"bad target", "steps:\n  - connect:\n      from: pod:default/c\n      to: 10.0.0.1\n", []string{"bad.yaml:4: steps[0].connect.to:", "a port is required"}},
		{"name from a node", "steps:\n  - connect:\n      from: node:node-a\n      to: web:80\n", []string{"bad.yaml:4: steps[0].connect.to:", "only pods resolve cluster names"}},
		{"unknown node", "steps:\n  - kill_node: node-z\n", []string{`bad.yaml:2: steps[0].kill_node: no node "node-z" (the nodes are node-a, node-b, node-c)`}},
		{"unknown mode", "cluster:\n  proxy:\n    mode: ebpf\n", []string{`bad.yaml:3: cluster.proxy.mode: unknown kube-proxy mode "ebpf"`}},
		{"userspace too new", "cluster:\n  proxy:\n    mode: userspace\n    version: \"1.30\"\n", []string{"bad.yaml:4: cluster.proxy.version: 1.30: the userspace proxy mode was removed in kube-proxy 1.26"}},
		{"iptables too old", "cluster:\n  proxy:\n    version: \"1.17\"\n", []string{"bad.yaml:3: cluster.proxy.version: 1.17: kube-proxy before 1.18 is not modelled"}},
		{"unknown feature gate", "cluster:\n  proxy:\n    feature_gates:\n      NoSuchGate: true\n", []string{`bad.yaml:4: cluster.proxy.feature_gates.NoSuchGate: unknown feature gate "NoSuchGate"`}},
		{"locked feature gate", "cluster:\n  proxy:\n    version: \"1.30\"\n    feature_gates:\n      ProxyTerminatingEndpoints: false\n", []string{"bad.yaml:5: cluster.proxy.feature_gates.ProxyTerminatingEndpoints: cannot set feature gate ProxyTerminatingEndpoints to false, feature is locked to true (GA in 1.28)"}},
		{"feature gate not in the release", "cluster:\n  proxy:\n    version: \"1.30\"\n    feature_gates:\n      PreferSameTrafficDistribution: true\n", []string{"bad.yaml:5: cluster.proxy.feature_gates.PreferSameTrafficDistribution: PreferSameTrafficDistribution does not exist in kube-proxy 1.30 (alpha in 1.33)"}},
		{"bad proxy name", "cluster:\n  proxy:\n    name: my proxy\n", []string{`bad.yaml:3: cluster.proxy.name: "my proxy" is not a label value (the proxy serves the Services labelled service.kubernetes.io/service-proxy-name: NAME)`}},
		{"bad node proxy name", "cluster:\n  nodes:\n    - name: node-a\n    - name: node-b\n      proxy_name: -alt\n", []string{`bad.yaml:5: cluster.nodes[1].proxy_name: "-alt" is not a label value`}},
		{"bad scheduler", "cluster:\n  proxy:\n    scheduler: fastest\n", []string{`bad.yaml:3: cluster.proxy.scheduler: unknown IPVS scheduler "fastest"`}},
		{"expect on the wrong step", "steps:\n  - advance: 1s\n    expect:\n      count: 1\n", []string{"bad.yaml:3: steps[0].expect: only connect, send, dns, check, apply and restart_apiserver steps have expectations"}},
		{"expectation of another step kind", "steps:\n  - dns:\n      from: pod:default/c\n      name: web\n    expect:\n      backends: 3\n", []string{"bad.yaml:6: steps[0].expect.backends: only connect and send steps have backends"}},
		{"bad resolv.conf option", "steps:\n  - dns:\n      from: pod:default/c\n      name: web\n      type: both\n      options: [timeout:x, single-request-open]\n", []string{"steps[0].dns.options[0]: want timeout:N", "steps[0].dns.options[1]: want single-request,"}},
		{"answers without type both", "steps:\n  - dns:\n      from: pod:default/c\n      name: web\n    expect:\n      answers: {A: [10.0.0.1]}\n      delay: {min: 5s}\n", []string{"steps[0].expect.answers: only dns (type both or options) steps have answers", "steps[0].expect.delay: only dns (type both or options) steps have delay"}},
		{"time going back", "steps:\n  - advance: 10s\n  - at: 5s\n    heal: true\n", []string{"bad.yaml:3: steps[1].at: 5s is earlier than the time the steps before reach (10s)"}},
		{"inline manifest invalid", "manifests:\n  - apiVersion: v1\n    kind: Service\n    metadata:\n      name: web\n    spec:\n      ports:\n        - port: 70000\n", []string{`bad.yaml:8: manifests[0]: Service "default/web": spec.ports[0].port: Invalid value: 70000`}},
		{"inline unknown field", "manifests:\n  - apiVersion: v1\n    kind: Pod\n    metadata:\n      name: p\n    spec:\n      containerz: []\n", []string{"bad.yaml:7: manifests[0]:", "containerz"}},
		{"manifest file invalid", "manifests:\n  - path: bad-svc.yaml\n", []string{"bad.yaml:2: manifests[0].path: ", "bad-svc.yaml:7", "spec.ports[0].port"}},
		{"manifest file missing", "manifests:\n  - path: nope.yaml\n", []string{"bad.yaml:2: manifests[0].path: ", "nope.yaml: no such file or directory"}},
		{"deployment selector mismatch", "manifests:\n  - apiVersion: apps/v1\n    kind: Deployment\n    metadata: {name: web}\n    spec:\n      selector: {matchLabels: {app: web}}\n      template:\n        metadata: {labels: {app: other}}\n        spec: {containers: [{name: c, image: i}]}\n", []string{"bad.yaml:8: manifests[0]: Deployment \"default/web\": spec.template.metadata.labels: Invalid value: `selector` does not match template `labels`"}},
		{"deployment bad container", "manifests:\n  - apiVersion: apps/v1\n    kind: Deployment\n    metadata: {name: web}\n    spec:\n      selector: {matchLabels: {app: web}}\n      template:\n        metadata: {labels: {app: web}}\n        spec:\n          containers:\n            - name: c\n              image: i\n              ports:\n                - containerPort: 0\n", []string{"bad.yaml:14: manifests[0]: Deployment \"default/web\": pod template: spec.template.spec.containers[0].ports[0].containerPort"}},
		{"duplicate object", "manifests:\n  - {apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: c, image: i}]}}\n  - {apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: c, image: i}]}}\n", []string{`bad.yaml:3: manifests[1]: Pod "default/p": metadata.name: Pod "default/p" is defined twice (first at bad.yaml:2): the API server refuses the second create: pods "p" already exists`}},
		{"two services on one cluster IP", "manifests:\n  - {apiVersion: v1, kind: Service, metadata: {name: a}, spec: {clusterIP: 10.96.0.50, ports: [{port: 80}]}}\n  - apiVersion: v1\n    kind: Service\n    metadata: {name: b, namespace: default}\n    spec:\n      clusterIP: 10.96.0.50\n      ports: [{port: 80}]\n", []string{`bad.yaml:7: manifests[1]: Service "default/b": spec.clusterIP: Invalid value: "10.96.0.50": provided IP is already allocated (to Service "default/a" at bad.yaml:2)`}},
		{"multi-line flow object", "manifests:\n  - {apiVersion: v1, kind: Service,\n     metadata: {name: a},\n     spec: {ports: [{port: 70000}]}}\n", []string{`bad.yaml:4: manifests[0]: Service "default/a": spec.ports[0].port: Invalid value: 70000`}},
		{"name with a NUL", "manifests:\n  - {apiVersion: v1, kind: Pod, metadata: {name: \"p\\0\"}, spec: {containers: [{name: c, image: i}]}}\n", []string{`bad.yaml:2: manifests[0]: Pod "default/p\x00": metadata.name: Invalid value: "p\x00"`}},
		{"two documents", "name: a\n---\nname: b\n", []string{"bad.yaml:3: a scenario file holds one YAML document"}},
		{"yaml syntax", "steps:\n  - advance: [1s\n", []string{"bad.yaml:", "invalid YAML"}},
		{"empty", "", []string{"bad.yaml: the file is empty"}},
		{"dns off but a name", "cluster:\n  dns: off\nsteps:\n  - connect:\n      from: pod:default/c\n      to: web:80\n", []string{"steps[0].connect.to:", "cluster.dns is off"}},
		{"three CIDRs", "cluster:\n  pod_cidr: 10.244.0.0/16,fd00:10:244::/56,10.0.0.0/8\n", []string{"bad.yaml:2: cluster.pod_cidr: want one CIDR or two of different families"}},
		{"two CIDRs of one family", "cluster:\n  service_cidr: 10.96.0.0/12,10.112.0.0/12\n", []string{"bad.yaml:2: cluster.service_cidr: the two CIDRs of a dual-stack service_cidr must be one IPv4 and one IPv6"}},
		{"dual-stack pods only", "cluster:\n  pod_cidr: 10.244.0.0/16,fd00:10:244::/56\n", []string{"cluster.node_cidr: a dual-stack cluster names both families, in the same order, in node_cidr, pod_cidr and service_cidr (got the IPv4 default; IPv4,IPv6; the IPv4 default)"}},
		{"node port taken by another manifest", "manifests:\n  - {apiVersion: v1, kind: Service, metadata: {name: a}, spec: {type: NodePort, ports: [{port: 80, nodePort: 30080}]}}\n  - {apiVersion: v1, kind: Service, metadata: {name: b}, spec: {type: NodePort, ports: [{port: 80, nodePort: 30080}]}}\n", []string{`bad.yaml:3: manifests[1]: Service "default/b": spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated`}},
		{"node port outside the cluster's range", "cluster:\n  node_port_range: 30000-30999\nsteps:\n  - apply:\n      - apiVersion: v1\n        kind: Service\n        metadata: {name: a}\n        spec:\n          type: NodePort\n          ports: [{port: 80, nodePort: 31000}]\n", []string{`bad.yaml:10: steps[0].apply[0]: Service "default/a": spec.ports[0].nodePort: Invalid value: 31000: provided port is not in the valid range. The range of valid ports is 30000-30999`}},
		{"cluster IP outside the service CIDR", "manifests:\n  - apiVersion: v1\n    kind: Service\n    metadata: {name: a}\n    spec:\n      clusterIP: 10.0.0.10\n      ports: [{port: 80}]\n", []string{`bad.yaml:5: manifests[0]: Service "default/a": spec.clusterIPs: Invalid value: ["10.0.0.10"]: failed to allocate IP 10.0.0.10: the provided IP (10.0.0.10) is not in the valid range. The range of valid IPs is 10.96.0.0/12`}},
		{"endpoint expectations", "steps:\n  - check: {endpoints: {service: default/web}}\n    expect:\n      endpoints: [{address: web-0, port: 70000}]\n  - dns: {from: pod:default/c, name: web}\n    expect:\n      endpoints_include: [{address: 10.0.0.1}]\n", []string{`bad.yaml:4: steps[0].expect.endpoints[0].address: want an IP or pod:NAMESPACE/NAME, got "web-0"`, "bad.yaml:4: steps[0].expect.endpoints[0].port: want 1-65535, got 70000", "bad.yaml:7: steps[1].expect.endpoints_include: only check endpoints steps have endpoints_include"}},
		{"http misused", "steps:\n  - connect: {from: pod:default/c, to: 10.0.0.1:80, proto: udp, via: probe, http: {path: healthz}}\n  - send: {from: pod:default/c, to: 10.0.0.1:80, http: {}}\n  - connect: {from: pod:default/c, to: 10.0.0.1:80}\n    expect: {status: 200, body: ok}\n", []string{"bad.yaml:2: steps[0].connect.http: HTTP goes over tcp, not udp", "bad.yaml:2: steps[0].connect.http: HTTP needs real sockets", `bad.yaml:2: steps[0].connect.http.path: want an absolute path such as /healthz, got "healthz"`, "bad.yaml:3: steps[1].send.http: HTTP requests go over connections: use a connect step", "bad.yaml:5: steps[2].expect.status: only check health_check steps have status (and connect steps with http)", "bad.yaml:5: steps[2].expect.body: only connect steps with http have body"}},
		{"api steps", "steps:\n  - delete: [{kind: Node, selector: a=b}, {kind: Service, name: default/x, selector: \"a in (\"}, {kind: Pod, namespace: x}]\n  - update_status: {service: web, load_balancer_ingress: [1.2.3.4/Direct, nope]}\n  - update_status: {service: default/web}\n", []string{
			`bad.yaml:2: steps[0].delete[0].kind: a delete by selector deletes Services, Pods, Endpoints, EndpointSlices or NetworkPolicies, got "Node"`, "bad.yaml:2: steps[0].delete[1]: name and selector: give one", "bad.yaml:2: steps[0].delete[1].selector: ", "bad.yaml:2: steps[0].delete[2].selector: namespace goes with selector",
			`bad.yaml:3: steps[1].update_status.service: want NAMESPACE/NAME, got "web"`, `bad.yaml:3: steps[1].update_status.load_balancer_ingress[0]: ipMode "Direct": want VIP or Proxy`, `bad.yaml:3: steps[1].update_status.load_balancer_ingress[1]: want IP or IP/VIP or IP/Proxy, got "nope"`,
			"bad.yaml:4: steps[2].update_status: want load_balancer_ingress: [IP, ...]"}},
		{"the cluster DNS service's address", "manifests:\n  - apiVersion: v1\n    kind: Service\n    metadata: {name: a}\n    spec:\n      clusterIP: 10.96.0.10\n      ports: [{port: 80}]\n", []string{`bad.yaml:5: manifests[0]: Service "default/a": spec.clusterIPs: Invalid value: ["10.96.0.10"]: failed to allocate IP 10.96.0.10: provided IP is already allocated`}},
		{"rejected on a connect step", "steps:\n  - connect:\n      from: pod:default/c\n      to: 10.0.0.1:80\n    expect:\n      rejected: already allocated\n", []string{"bad.yaml:6: steps[0].expect.rejected: only apply steps have rejected"}},
		{"rejected apply with a deployment", "steps:\n  - apply:\n      - {apiVersion: apps/v1, kind: Deployment, metadata: {name: web}, spec: {selector: {matchLabels: {app: web}}, template: {metadata: {labels: {app: web}}, spec: {containers: [{name: c, image: i}]}}}}\n    expect: {rejected: invalid}\n", []string{"bad.yaml:2: steps[0].apply: an apply that expects a rejection is applied all or nothing"}},
		{"count on an apply step", "steps:\n  - apply:\n      - {apiVersion: v1, kind: Namespace, metadata: {name: x}}\n    expect: {count: 1}\n", []string{"steps[0].expect.count: only check steps have count"}},
		{"percent too big", "steps:\n  - fault:\n      link: node:node-a\n      loss: 150%\n", []string{"bad.yaml:4: steps[0].fault.loss: want a probability between 0 and 1"}},
		{"probe invalid", "manifests:\n  - apiVersion: v1\n    kind: Pod\n    metadata: {name: p}\n    spec:\n      containers:\n        - name: c\n          image: i\n          livenessProbe:\n            tcpSocket: {port: 80}\n            successThreshold: 2\n", []string{`bad.yaml:11: manifests[0]: Pod "default/p": spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1`}},
		{"evict with a grace", "steps:\n  - evict:\n      pod: default/web-0\n      grace: 5s\n", []string{"bad.yaml:4: steps[0].evict.grace: an eviction uses each pod's terminationGracePeriodSeconds"}},
		{"evict nothing", "steps:\n  - evict: {count: 1}\n", []string{"bad.yaml:2: steps[0].evict: want pod: NAMESPACE/NAME"}},
		{"set_phase Running", "steps:\n  - set_phase:\n      pod: default/web-0\n      phase: Running\n", []string{`bad.yaml:4: steps[0].set_phase.phase: want Succeeded or Failed, got "Running"`}},
		{"set_health status", "steps:\n  - set_health:\n      selector: app=web\n      http_status: 42\n", []string{"bad.yaml:4: steps[0].set_health.http_status: want an HTTP status (100-599), got 42"}},
		{"set_health nothing", "steps:\n  - set_health:\n      selector: app=web\n", []string{"bad.yaml:2: steps[0].set_health: want http_status (200 healthy, 500 failing) or listening"}},
		{"set_health listening typo", "steps:\n  - set_health:\n      selector: app=web\n      listening: nope\n", []string{"bad.yaml:4: steps[0].set_health.listening:"}},
		{"serving on a connect", "steps:\n  - connect:\n      from: pod:default/c\n      to: 10.0.0.1:80\n    expect:\n      serving: 1\n", []string{"steps[0].expect.serving: only check endpoints steps have serving"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(filepath.Join(dir, "bad.yaml"), []byte(tc.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			if !IsInputError(err) {
				t.Errorf("%v is not an input error", err)
			}
			msg := strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")
			rest := msg
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("error\n  %s\ndoes not contain (in order)\n  %s", msg, w)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

// TestLoadGoodFiles: every scenario under testdata/scenarios loads.
func TestLoadScenarioFiles(t *testing.T) {
	files, _ := filepath.Glob("../testdata/scenarios/*.yaml")
	files = append(files, "demo.yaml")
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestYAMLSyntaxErrors: a syntax error names the line that breaks the YAML (not the
// start of its block, nor the end of the file), the last field before it, and a hint.
func TestYAMLSyntaxErrors(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       string // the whole message
	}{
		{"indentation in the cluster",
			"name: x\ncluster:\n  seed: 1\n  nodes:\n    - name: node-a\n   zone: z\n  proxy:\n    mode: iptables\n",
			"bad.yaml:6: cluster.nodes[0].name: invalid YAML: did not find expected key (check the indentation of this line against the lines above it)"},
		{"indentation in a step",
			"name: x\nsteps:\n  - advance: 1s\n  - connect:\n      from: pod:default/c\n     to: web:80\n      count: 3\n",
			"bad.yaml:6: steps[1].connect.from: invalid YAML: did not find expected key (check the indentation of this line against the lines above it)"},
		{"indented too deep in a step",
			"name: x\nsteps:\n  - advance: 1s\n  - connect:\n      from: pod:default/c\n        to: web:80\n",
			"bad.yaml:6: steps[1].connect.from: invalid YAML: mapping values are not allowed in this context (check the indentation of this line against the lines above it)"},
		{"indentation in an inline manifest",
			"manifests:\n  - apiVersion: v1\n    kind: Service\n    metadata:\n      name: web\n    spec:\n      ports:\n        - port: 80\n       targetPort: 8080\nsteps: []\n",
			"bad.yaml:9: manifests[0].spec.ports[0].port: invalid YAML: did not find expected key (check the indentation of this line against the lines above it)"},
		{"a tab",
			"name: x\ncluster:\n  seed: 1\n  nodes:\n\t- name: a\n",
			"bad.yaml:5: cluster.nodes: invalid YAML: found character that cannot start any token (a tab: YAML indents with spaces only)"},
		{"an unclosed quote",
			"name: x\nsteps:\n  - connect:\n      from: 'pod:default/c\n      to: web:80\n      count: 3\n",
			"bad.yaml:4: steps[0].connect.from: invalid YAML: found unexpected end of stream (a quote, [ or { opened on this line is not closed)"},
		{"an unclosed quote on the first line",
			"name: \"x\ncluster:\n  seed: 1\nsteps: []\n",
			"bad.yaml:1: name: invalid YAML: found unexpected end of stream (a quote, [ or { opened on this line is not closed)"},
		{"an unclosed flow list",
			"steps:\n  - advance: [1s\n  - heal: true\n",
			"bad.yaml:2: steps[0].advance: invalid YAML: did not find expected ',' or ']' (a quote, [ or { opened on this line is not closed)"},
		{"a stray list item in a mapping",
			"name: x\ncluster:\n  seed: 1\n- advance: 1s\nsteps: []\n",
			"bad.yaml:4: cluster.seed: invalid YAML: did not find expected key (check the indentation of this line against the lines above it)"},
		{"a key among list items",
			"name: x\nsteps:\n  - advance: 1s\n  connect: {}\n",
			"bad.yaml:4: steps[0].advance: invalid YAML: did not find expected '-' indicator (check the indentation of this line against the lines above it)"},
		{"a flow list over several lines before the culprit",
			"cluster:\n  nodes: [{name: a},\n    {name: b}]\n  seed: 1\n   proxy: {}\n",
			"bad.yaml:5: cluster.seed: invalid YAML: mapping values are not allowed in this context (check the indentation of this line against the lines above it)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			if !IsInputError(err) {
				t.Errorf("%v is not an input error", err)
			}
			if err.Error() != tc.want {
				t.Errorf("error\n  %s\nwant\n  %s", err, tc.want)
			}
		})
	}
}

// TestClockOverflowRefused: an advance (or an at) that would take the virtual clock past
// a hundred years is an error naming the step, not a clock that wraps to a negative
// time.
func TestClockOverflowRefused(t *testing.T) {
	_, err := Parse("t.yaml", []byte("cluster: {dns: off, nodes: [{name: node-a}]}\nsteps:\n  - advance: 500000h\n  - advance: 500000h\n  - at: 900000h\n    advance: 1s\n"))
	for _, want := range []string{
		"t.yaml:4: steps[1].advance: the virtual clock would pass 876000h0m0s (it is at 500000h0m0s)",
		"t.yaml:5: steps[2].at: 900000h0m0s is past the longest virtual time a run takes (876000h0m0s)",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
}
