package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateBadInput = flag.Bool("update-badinput", false, "rewrite docs/RELIABILITY.md's bad-input table from TestBadInputTable's rows")

// badInputRow is one bad input to the CLI: the arguments ({d} is a directory holding
// files, {repo} the repository's root), the message fragment the error must contain
// and the exit code.
type badInputRow struct {
	cmd   string // the command, as the doc's table names it
	input string // the input, as the doc's table shows it
	args  []string
	files map[string]string
	want  string
	exit  int
}

const svcYAML = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 10.96.0.5
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
`

// policyYAML is a web pod behind a Service and a client, for the policy commands.
const policyYAML = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default, labels: {app: web}}
spec: {containers: [{name: web, image: nginx, ports: [{containerPort: 8080}]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: default, labels: {app: client}}
spec: {containers: [{name: c, image: busybox}]}
`

// denyYAML is a NetworkPolicy isolating web for ingress.
const denyYAML = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-web, namespace: default}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: []
`

// scen is a scenario file: a Service, a Pod and the given steps (YAML list items).
func scen(extraManifests, steps string) string {
	return `name: bad
cluster:
  nodes: [{name: node-a}]
manifests:
  - apiVersion: v1
    kind: Service
    metadata: {name: web}
    spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}
  - apiVersion: v1
    kind: Pod
    metadata: {name: client}
    spec: {containers: [{name: c, image: busybox}]}
` + extraManifests + `steps:
` + steps
}

const okStep = "  - name: s\n    connect: {from: pod:default/client, to: web:80}\n    expect: {result: connected}\n"

// svcWith is a manifest of the Service web with spec lines replaced.
func svcWith(spec string) string {
	return "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec:\n" + spec
}

// badManifests are manifest files each with one validation error, run through every
// command that reads manifests.
var badManifests = []struct{ input, file, want string }{
	{"`port: 70000`", svcWith("  ports: [{port: 70000}]\n"), "spec.ports[0].port: Invalid value: 70000"},
	{"`port: 0`", svcWith("  ports: [{port: 0}]\n"), "spec.ports[0].port"},
	{"`protocol: TCPX`", svcWith("  ports: [{port: 80, protocol: TCPX}]\n"), "spec.ports[0].protocol"},
	{"`type: Sideways`", svcWith("  type: Sideways\n  ports: [{port: 80}]\n"), "spec.type"},
	{"`clusterIP: 10.96.0.999`", svcWith("  clusterIP: 10.96.0.999\n  ports: [{port: 80}]\n"), "spec.clusterIP"},
	{"`sessionAffinity: Sticky`", svcWith("  sessionAffinity: Sticky\n  ports: [{port: 80}]\n"), "spec.sessionAffinity"},
	{"`externalTrafficPolicy: Nowhere` on a NodePort", svcWith("  type: NodePort\n  externalTrafficPolicy: Nowhere\n  ports: [{port: 80}]\n"), "spec.externalTrafficPolicy"},
	{"`nodePort: 99999`", svcWith("  type: NodePort\n  ports: [{port: 80, nodePort: 99999}]\n"), "nodePort"},
	{"two ports without names", svcWith("  ports: [{port: 80}, {port: 81}]\n"), "name: Required value"},
	{"a name `Web_1`", "apiVersion: v1\nkind: Service\nmetadata: {name: Web_1}\nspec: {ports: [{port: 80}]}\n", "metadata.name: Invalid value: \"Web_1\""},
	{"no name", "apiVersion: v1\nkind: Service\nmetadata: {namespace: default}\nspec: {ports: [{port: 80}]}\n", "metadata.name"},
	{"an unknown field", svcWith("  portz: [{port: 80}]\n"), `unknown field "spec.portz"`},
	{"a file of NUL bytes", "\x00\x00\x00", "control characters are not allowed"},
	{"invalid YAML (a tab indent)", "apiVersion: v1\nkind: Service\nmetadata:\n\tname: web\n", "invalid YAML"},
	{"no `kind`", "apiVersion: v1\nmetadata: {name: web}\n", "kind"},
	{"a Service defined twice", svcYAML + "---\n" + svcYAML, "is defined twice"},
	{"two Services on one clusterIP", svcYAML + "---\n" + strings.Replace(svcYAML, "name: web", "name: other", 1), "provided IP is already allocated"},
}

func badInputRows() []badInputRow {
	dump := "{repo}/testdata/iptables/normalise/kube.rules"
	rows := []badInputRow{
		// The root and every command's flags.
		{cmd: "clusterlab", input: "an unknown command `nosuch`", args: []string{"nosuch"}, want: `unknown command "nosuch"`, exit: 2},
		{cmd: "clusterlab", input: "an unknown flag `--nosuch`", args: []string{"--nosuch"}, want: "unknown flag: --nosuch", exit: 2},
		{cmd: "ui", input: "`--listen 0.0.0.0:0` without `--allow-remote`", args: []string{"ui", "--listen", "0.0.0.0:0"}, want: "--allow-remote", exit: 2},
		{cmd: "ui", input: "`--listen 8080` (no host)", args: []string{"ui", "--listen", "8080"}, want: "--listen", exit: 2},
		{cmd: "ui", input: "a missing file", args: []string{"ui", "{d}/nope.yaml"}, want: "nope.yaml", exit: 2},
		{cmd: "ui", input: "a scenario that does not parse", args: []string{"ui", "{d}/s.yaml"}, files: map[string]string{"s.yaml": "cluster:\n  nodes: 3\n"}, want: "s.yaml:2", exit: 2},
		{cmd: "ui", input: "two scenarios", args: []string{"ui", "{d}/a.yaml", "{d}/b.yaml"}, want: "", exit: 2},
		// policy explain and matrix.
		{cmd: "policy explain", input: "no `--manifests`", args: []string{"policy", "explain", "--from", "pod:default/a", "--to", "pod:default/b:80"}, want: "--manifests", exit: 2},
		{cmd: "policy explain", input: "no `--from`", args: []string{"policy", "explain", "--manifests", "{d}/m.yaml", "--to", "pod:default/b:80"}, files: map[string]string{"m.yaml": policyYAML}, want: "--from", exit: 2},
		{cmd: "policy explain", input: "`--from host:10.0.0.1`", args: []string{"policy", "explain", "--manifests", "{d}/m.yaml", "--from", "host:10.0.0.1", "--to", "pod:default/web:8080"}, files: map[string]string{"m.yaml": policyYAML}, want: "want pod:NS/NAME or ip:ADDR", exit: 2},
		{cmd: "policy explain", input: "`--to service:default/web` (no port)", args: []string{"policy", "explain", "--manifests", "{d}/m.yaml", "--from", "pod:default/client", "--to", "service:default/web"}, files: map[string]string{"m.yaml": policyYAML}, want: "want service:NS/NAME:PORT", exit: 2},
		{cmd: "policy explain", input: "`--to service:default/nosuch:80`", args: []string{"policy", "explain", "--manifests", "{d}/m.yaml", "--from", "pod:default/client", "--to", "service:default/nosuch:80"}, files: map[string]string{"m.yaml": policyYAML}, want: "no Service default/nosuch", exit: 2},
		{cmd: "policy explain", input: "`--from pod:default/nosuch`", args: []string{"policy", "explain", "--manifests", "{d}/m.yaml", "--from", "pod:default/nosuch", "--to", "service:default/web:80"}, files: map[string]string{"m.yaml": policyYAML}, want: "no running pod default/nosuch", exit: 2},
		{cmd: "policy explain", input: "`--proto icmp`", args: []string{"policy", "explain", "--manifests", "{d}/m.yaml", "--from", "pod:default/client", "--to", "service:default/web:80", "--proto", "icmp"}, files: map[string]string{"m.yaml": policyYAML}, want: "want tcp, udp or sctp", exit: 2},
		{cmd: "policy explain", input: "`--network-policy weave`", args: []string{"policy", "explain", "--manifests", "{d}/m.yaml", "--from", "pod:default/client", "--to", "service:default/web:80", "--network-policy", "weave"}, files: map[string]string{"m.yaml": policyYAML}, want: "want calico or cilium", exit: 2},
		{cmd: "policy explain", input: "`-o xml`", args: []string{"policy", "explain", "--manifests", "{d}/m.yaml", "--from", "pod:default/client", "--to", "service:default/web:80", "-o", "xml"}, files: map[string]string{"m.yaml": policyYAML}, want: "xml", exit: 2},
		{cmd: "policy matrix", input: "no `--port`", args: []string{"policy", "matrix", "--manifests", "{d}/m.yaml"}, files: map[string]string{"m.yaml": policyYAML}, want: "--port", exit: 2},
		{cmd: "policy matrix", input: "`--port 70000`", args: []string{"policy", "matrix", "--manifests", "{d}/m.yaml", "--port", "70000"}, files: map[string]string{"m.yaml": policyYAML}, want: "want 1-65535", exit: 2},
		{cmd: "policy matrix", input: "a missing `--diff` file", args: []string{"policy", "matrix", "--manifests", "{d}/m.yaml", "--port", "8080", "--diff", "{d}/nope.yaml"}, files: map[string]string{"m.yaml": policyYAML}, want: "nope.yaml", exit: 2},
		{cmd: "policy matrix", input: "a NetworkPolicy whose ipBlock is no CIDR", args: []string{"policy", "matrix", "--manifests", "{d}/m.yaml", "--port", "8080"}, files: map[string]string{"m.yaml": policyYAML + "---\n" + strings.Replace(denyYAML, "ingress: []", "ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/33}}]}]", 1)}, want: "m.yaml:", exit: 2},
		{cmd: "policy matrix", input: "a NetworkPolicy in `--diff` with `protocol: ICMP`", args: []string{"policy", "matrix", "--manifests", "{d}/m.yaml", "--port", "8080", "--diff", "{d}/d.yaml"}, files: map[string]string{"m.yaml": policyYAML, "d.yaml": strings.Replace(denyYAML, "ingress: []", "ingress: [{ports: [{protocol: ICMP}]}]", 1)}, want: "d.yaml", exit: 2},
		{cmd: "run", input: "`node_settings: {network_policy: weave}`", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": strings.Replace(scen("", okStep), "  nodes: [{name: node-a}]\n", "  nodes: [{name: node-a}]\n  node_settings: {network_policy: weave}\n", 1)}, want: "cluster.node_settings.network_policy", exit: 2},
		{cmd: "run", input: "no scenario", args: []string{"run"}, want: "", exit: 2},
		{cmd: "run", input: "a missing file", args: []string{"run", "{d}/nope.yaml"}, want: "nope.yaml", exit: 2},
		{cmd: "run", input: "an unknown flag", args: []string{"run", "--nosuch", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "unknown flag: --nosuch", exit: 2},
		{cmd: "run", input: "`--mode nosuch`", args: []string{"run", "--mode", "nosuch", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "nosuch", exit: 2},
		{cmd: "run", input: "`--modes iptables,nosuch`", args: []string{"run", "--modes", "iptables,nosuch", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "nosuch", exit: 2},
		{cmd: "run", input: "`--backend nosuch`", args: []string{"run", "--backend", "nosuch", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "--backend \"nosuch\": want sim, kernel or both", exit: 2},
		{cmd: "run", input: "`--kernel-iptables nosuch`", args: []string{"run", "--backend", "kernel", "--kernel-iptables", "nosuch", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "--kernel-iptables \"nosuch\": want nft or legacy", exit: 2},
		{cmd: "run", input: "`--keep` without `--backend both`", args: []string{"run", "--keep", "{d}/kept", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "--keep: only with --backend both", exit: 2},
		{cmd: "run", input: "`--backend kernel` with `--modes`", args: []string{"run", "--backend", "kernel", "--modes", "iptables,ipvs", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "give one", exit: 2},
		{cmd: "run", input: "`--versions 9.99`", args: []string{"run", "--versions", "9.99", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "9.99", exit: 2},
		{cmd: "run", input: "`--versions abc`", args: []string{"run", "--versions", "abc", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "abc", exit: 2},
		{cmd: "run", input: "`-o xml`", args: []string{"run", "-o", "xml", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "xml", exit: 2},
		{cmd: "run", input: "`--mode` and `--modes` together", args: []string{"run", "--mode", "iptables", "--modes", "ipvs", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "--mode", exit: 2},

		// Scenario files.
		{cmd: "run", input: "scenario: an empty file", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": ""}, want: "s.yaml", exit: 2},
		{cmd: "run", input: "scenario: invalid YAML", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": "name: [x\n"}, want: "s.yaml", exit: 2},
		{cmd: "run", input: "scenario: an unknown top-level field", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": "nme: x\n" + scen("", okStep)}, want: "nme", exit: 2},
		{cmd: "run", input: "scenario: a step with no action", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", "  - name: nothing\n")}, want: "s.yaml:", exit: 2},
		{cmd: "run", input: "scenario: an unknown step `teleport`", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", "  - name: t\n    teleport: {to: web}\n")}, want: "teleport", exit: 2},
		{cmd: "run", input: "scenario: two actions in one step", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", "  - name: t\n    connect: {from: pod:default/client, to: web:80}\n    advance: 1s\n")}, want: "s.yaml:", exit: 2},
		{cmd: "run", input: "scenario: `connect.to: nodeport:x/y@@z`", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", "  - name: t\n    connect: {from: pod:default/client, to: \"nodeport:x/y@@z\"}\n")}, want: "s.yaml:", exit: 2},
		{cmd: "run", input: "scenario: `connect.from: planet:mars`", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", "  - name: t\n    connect: {from: \"planet:mars\", to: web:80}\n")}, want: "planet", exit: 2},
		{cmd: "run", input: "scenario: `connect.to: web:99999`", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", "  - name: t\n    connect: {from: pod:default/client, to: \"web:99999\"}\n")}, want: "99999", exit: 2},
		{cmd: "run", input: "scenario: `connect.count: -1`", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", "  - name: t\n    connect: {from: pod:default/client, to: web:80, count: -1}\n")}, want: "count", exit: 2},
		{cmd: "run", input: "scenario: `expect.result: maybe`", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", "  - name: t\n    connect: {from: pod:default/client, to: web:80}\n    expect: {result: maybe}\n")}, want: "maybe", exit: 2},
		{cmd: "run", input: "scenario: `advance: 1000000h` (past a hundred years)", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", "  - name: t\n    advance: 1000000h\n")}, want: "advance", exit: 2},
		{cmd: "run", input: "scenario: `advance: -5s`", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", "  - name: t\n    advance: -5s\n")}, want: "advance", exit: 2},
		{cmd: "run", input: "scenario: `advance: soon`", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", "  - name: t\n    advance: soon\n")}, want: "soon", exit: 2},
		{cmd: "run", input: "scenario: `cluster.proxy.mode: nosuch`", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": strings.Replace(scen("", okStep), "nodes: [{name: node-a}]", "nodes: [{name: node-a}]\n  proxy: {mode: nosuch}", 1)}, want: "nosuch", exit: 2},
		{cmd: "run", input: "scenario: a node named twice", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": strings.Replace(scen("", okStep), "nodes: [{name: node-a}]", "nodes: [{name: node-a}, {name: node-a}]", 1)}, want: "node-a", exit: 2},
		{cmd: "run", input: "scenario: a node without a name", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": strings.Replace(scen("", okStep), "nodes: [{name: node-a}]", "nodes: [{zone: a}]", 1)}, want: "s.yaml:", exit: 2},
		{cmd: "run", input: "scenario: a Deployment with `replicas: -1`", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("  - apiVersion: apps/v1\n    kind: Deployment\n    metadata: {name: d}\n    spec: {replicas: -1, selector: {matchLabels: {app: d}}, template: {metadata: {labels: {app: d}}, spec: {containers: [{name: c, image: x}]}}}\n", okStep)}, want: "replicas", exit: 2},
		{cmd: "run", input: "scenario: an unknown kind `Gizmo`", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("  - apiVersion: v1\n    kind: Gizmo\n    metadata: {name: g}\n", okStep)}, want: "Gizmo", exit: 2},
		{cmd: "run", input: "scenario: a step `at` before the previous one", args: []string{"run", "{d}/s.yaml"}, files: map[string]string{"s.yaml": scen("", "  - name: a\n    at: 10s\n    advance: 1s\n  - name: b\n    at: 5s\n    advance: 1s\n")}, want: "s.yaml:", exit: 2},

		// trace over a dump.
		{cmd: "trace", input: "no source of rules", args: []string{"trace", "--src", "10.0.0.1", "--dst", "10.0.0.2"}, want: "", exit: 2},
		{cmd: "trace --iptables-save", input: "a missing file", args: []string{"trace", "--iptables-save", "{d}/nope", "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80"}, want: "nope", exit: 2},
		{cmd: "trace --iptables-save", input: "a dump that does not parse", args: []string{"trace", "--iptables-save", "{d}/d", "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80"}, files: map[string]string{"d": "*filter\n-A INPUT -j\nCOMMIT\n"}, want: "d:2", exit: 2},
		{cmd: "trace --iptables-save", input: "a jump loop", args: []string{"trace", "--iptables-save", "{d}/d", "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80"}, files: map[string]string{"d": "*filter\n:A - [0:0]\n:B - [0:0]\n-A A -j B\n-A B -j A\nCOMMIT\n"}, want: "loop", exit: 2},
		{cmd: "trace --iptables-save", input: "no `--src`", args: []string{"trace", "--iptables-save", dump, "--dst", "10.0.0.2", "--dport", "80"}, want: "--src", exit: 2},
		{cmd: "trace --iptables-save", input: "`--src 10.0.0.300`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.300", "--dst", "10.0.0.2", "--dport", "80"}, want: "10.0.0.300", exit: 2},
		{cmd: "trace --iptables-save", input: "`--dst nowhere`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "nowhere", "--dport", "80"}, want: "nowhere", exit: 2},
		{cmd: "trace --iptables-save", input: "an IPv6 `--src` with an IPv4 `--dst`", args: []string{"trace", "--iptables-save", dump, "--src", "fd00::1", "--dst", "10.0.0.2", "--dport", "80"}, want: "", exit: 2},
		{cmd: "trace --iptables-save", input: "`--proto gre`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--proto", "gre"}, want: "gre", exit: 2},
		{cmd: "trace --iptables-save", input: "`--dport 70000`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "70000"}, want: "70000", exit: 2},
		{cmd: "trace --iptables-save", input: "`--sport -1`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--sport", "-1"}, want: "-1", exit: 2},
		{cmd: "trace --iptables-save", input: "`--from mars`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--from", "mars"}, want: "mars", exit: 2},
		{cmd: "trace --iptables-save", input: "`--ctstate BOGUS`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--ctstate", "BOGUS"}, want: "BOGUS", exit: 2},
		{cmd: "trace --iptables-save", input: "`--icmp-type nosuch`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--proto", "icmp", "--icmp-type", "nosuch"}, want: "nosuch", exit: 2},
		{cmd: "trace --iptables-save", input: "`--icmp-type` with `--proto tcp`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--icmp-type", "echo-reply"}, want: "icmp", exit: 2},
		{cmd: "trace --iptables-save", input: "`--icmp-code 300`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--proto", "icmp", "--icmp-code", "300"}, want: "300", exit: 2},
		{cmd: "trace --iptables-save", input: "`--iface-addr eth0` (no address)", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--iface-addr", "eth0"}, want: "eth0", exit: 2},
		{cmd: "trace --iptables-save", input: "`--iface-addr eth0=x`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--iface-addr", "eth0=x"}, want: "eth0=x", exit: 2},
		{cmd: "trace --iptables-save", input: "`--local-ips 1.2.3`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--local-ips", "1.2.3"}, want: "1.2.3", exit: 2},
		{cmd: "trace --iptables-save", input: "`--hairpin sometimes`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--hairpin", "sometimes"}, want: "sometimes", exit: 2},
		{cmd: "trace --iptables-save", input: "`--route-localnet=maybe`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--route-localnet=maybe"}, want: "maybe", exit: 2},
		{cmd: "trace --iptables-save", input: "`--seed -1`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--seed", "-1"}, want: "-1", exit: 2},
		{cmd: "trace --iptables-save", input: "`-o xml`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "-o", "xml"}, want: "xml", exit: 2},
		{cmd: "trace --iptables-save", input: "`--ipsets` that do not parse", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--ipsets", "{d}/s"}, files: map[string]string{"s": "create\n"}, want: "s:1", exit: 2},
		{cmd: "trace --iptables-save", input: "`--ipvs-save` that does not parse", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--ipvs-save", "{d}/v"}, files: map[string]string{"v": "-A -t nowhere\n"}, want: "v:1", exit: 2},
		{cmd: "trace --iptables-save", input: "`--conntrack` that does not parse", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--conntrack", "{d}/c", "--ctstate", "ESTABLISHED"}, files: map[string]string{"c": "tcp 6 garbage\n"}, want: "c", exit: 2},
		{cmd: "trace --iptables-save", input: "`--manifests` with a bad manifest", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--manifests", "{d}/m.yaml"}, files: map[string]string{"m.yaml": svcWith("  ports: [{port: 70000}]\n")}, want: "m.yaml:", exit: 2},
		{cmd: "trace --iptables-save", input: "scenario-only `--svg`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--svg", "{d}/out.svg"}, want: "--svg", exit: 2},
		{cmd: "trace --iptables-save", input: "scenario-only `--pcap`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--pcap", "{d}/out.pcap"}, want: "--pcap", exit: 2},
		{cmd: "trace --iptables-save", input: "scenario-only `--to`", args: []string{"trace", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80", "--to", "web:80"}, want: "--to", exit: 2},
		{cmd: "trace --nft-ruleset", input: "a missing file", args: []string{"trace", "--nft-ruleset", "{d}/nope", "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80"}, want: "nope", exit: 2},
		{cmd: "trace --nft-ruleset", input: "a ruleset that does not parse", args: []string{"trace", "--nft-ruleset", "{d}/r.nft", "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80"}, files: map[string]string{"r.nft": "table ip t {\n\tchain c {\n\t\ttcp dport 80 accept\n"}, want: "r.nft", exit: 2},
		{cmd: "trace --nft-ruleset", input: "a jump loop", args: []string{"trace", "--nft-ruleset", "{d}/r.nft", "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80"}, files: map[string]string{"r.nft": "table ip t {\n\tchain a {\n\t\tjump b\n\t}\n\tchain b {\n\t\tjump a\n\t}\n}\n"}, want: "loop", exit: 2},
		{cmd: "trace --nft-ruleset", input: "JSON that does not parse", args: []string{"trace", "--nft-ruleset", "{d}/r.json", "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80"}, files: map[string]string{"r.json": `{"nftables": [{"rule": 5}]}`}, want: "r.json", exit: 2},
		{cmd: "trace --nft-ruleset", input: "`--dport 70000`", args: []string{"trace", "--nft-ruleset", "{d}/r.nft", "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "70000"}, files: map[string]string{"r.nft": "table ip t {\n}\n"}, want: "70000", exit: 2},
		{cmd: "trace --node", input: "a missing bundle", args: []string{"trace", "--node", "{d}/nope", "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80"}, want: "nope", exit: 2},
		{cmd: "trace --node", input: "a tarball that is not one", args: []string{"trace", "--node", "{d}/b.tar.gz", "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80"}, files: map[string]string{"b.tar.gz": "not gzip"}, want: "b.tar.gz", exit: 2},
		{cmd: "trace --node", input: "an empty directory", args: []string{"trace", "--node", "{d}/bundle", "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80"}, files: map[string]string{"bundle/README": "x"}, want: "bundle", exit: 2},
		{cmd: "trace --node", input: "with `--iptables-save` too", args: []string{"trace", "--node", "{d}/bundle", "--iptables-save", dump, "--src", "10.0.0.1", "--dst", "10.0.0.2", "--dport", "80"}, files: map[string]string{"bundle/README": "x"}, want: "", exit: 2},

		// trace over a scenario.
		{cmd: "trace SCENARIO", input: "a missing scenario", args: []string{"trace", "{d}/nope.yaml", "--from", "pod:default/client", "--to", "web:80"}, want: "nope.yaml", exit: 2},
		{cmd: "trace SCENARIO", input: "no `--to`", args: []string{"trace", "{d}/s.yaml", "--from", "pod:default/client"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "--to", exit: 2},
		{cmd: "trace SCENARIO", input: "`--to nodeport:x/y@@z`", args: []string{"trace", "{d}/s.yaml", "--from", "pod:default/client", "--to", "nodeport:x/y@@z"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "nodeport:x/y@@z", exit: 2},
		{cmd: "trace SCENARIO", input: "`--to node:@\\x8b`", args: []string{"trace", "{d}/s.yaml", "--from", "pod:default/client", "--to", "node:@\x8b"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: `a port is required`, exit: 2},
		{cmd: "trace SCENARIO", input: "`--from planet:mars`", args: []string{"trace", "{d}/s.yaml", "--from", "planet:mars", "--to", "web:80"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "planet", exit: 2},
		{cmd: "trace SCENARIO", input: "`--from pod:default/nobody`", args: []string{"trace", "{d}/s.yaml", "--from", "pod:default/nobody", "--to", "web:80"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "--from: no running pod default/nobody", exit: 2},
		{cmd: "trace SCENARIO", input: "`--to service:default/nosuch:80`", args: []string{"trace", "{d}/s.yaml", "--from", "pod:default/client", "--to", "service:default/nosuch:80"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "--to: no service default/nosuch", exit: 2},
		{cmd: "trace SCENARIO", input: "`--to web:99999`", args: []string{"trace", "{d}/s.yaml", "--from", "pod:default/client", "--to", "web:99999"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "99999", exit: 2},
		{cmd: "trace SCENARIO", input: "`--port 70000`", args: []string{"trace", "{d}/s.yaml", "--from", "pod:default/client", "--to", "web", "--port", "70000"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: `--port: 70000: want a port in 1-65535`, exit: 2},
		{cmd: "trace SCENARIO", input: "`--mode nosuch`", args: []string{"trace", "{d}/s.yaml", "--from", "pod:default/client", "--to", "web:80", "--mode", "nosuch"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "nosuch", exit: 2},
		{cmd: "trace SCENARIO", input: "`--after-step 5` of 1", args: []string{"trace", "{d}/s.yaml", "--from", "pod:default/client", "--to", "web:80", "--after-step", "5"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "5", exit: 2},
		{cmd: "trace SCENARIO", input: "`--after-step -1`", args: []string{"trace", "{d}/s.yaml", "--from", "pod:default/client", "--to", "web:80", "--after-step", "-1"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "-1", exit: 2},
		{cmd: "trace SCENARIO", input: "dump-only `--src`", args: []string{"trace", "{d}/s.yaml", "--from", "pod:default/client", "--to", "web:80", "--src", "10.0.0.1"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "--src", exit: 2},
		{cmd: "trace SCENARIO", input: "a scenario with a bad step", args: []string{"trace", "{d}/s.yaml", "--from", "pod:default/client", "--to", "web:80"}, files: map[string]string{"s.yaml": scen("", "  - name: t\n    advance: soon\n")}, want: "soon", exit: 2},
		{cmd: "trace SCENARIO", input: "two scenarios", args: []string{"trace", "{d}/s.yaml", "{d}/s.yaml", "--from", "pod:default/client", "--to", "web:80"}, files: map[string]string{"s.yaml": scen("", okStep)}, want: "", exit: 2},

		// generate.
		{cmd: "generate iptables", input: "no `--node`", args: []string{"generate", "iptables", "-f", "{d}/svc.yaml"}, files: map[string]string{"svc.yaml": svcYAML}, want: "--node is required", exit: 2},
		{cmd: "generate iptables", input: "no manifests", args: []string{"generate", "iptables", "--node", "n"}, want: "", exit: 2},
		{cmd: "generate iptables", input: "a missing manifest", args: []string{"generate", "iptables", "--node", "n", "-f", "{d}/nope.yaml"}, want: "nope.yaml", exit: 2},
		{cmd: "generate iptables", input: "`--family IPv5`", args: []string{"generate", "iptables", "--node", "n", "-f", "{d}/svc.yaml", "--family", "IPv5"}, files: map[string]string{"svc.yaml": svcYAML}, want: "IPv5", exit: 2},
		{cmd: "generate iptables", input: "`--detect-local-mode Psychic`", args: []string{"generate", "iptables", "--node", "n", "-f", "{d}/svc.yaml", "--detect-local-mode", "Psychic"}, files: map[string]string{"svc.yaml": svcYAML}, want: "Psychic", exit: 2},
		{cmd: "generate iptables", input: "`--detect-local-mode BridgeInterface` without `--pod-bridge-interface`", args: []string{"generate", "iptables", "--node", "n", "-f", "{d}/svc.yaml", "--detect-local-mode", "BridgeInterface"}, files: map[string]string{"svc.yaml": svcYAML}, want: "bridgeInterface: required", exit: 2},
		{cmd: "generate iptables", input: "`--iptables-masquerade-bit 40`", args: []string{"generate", "iptables", "--node", "n", "-f", "{d}/svc.yaml", "--iptables-masquerade-bit", "40"}, files: map[string]string{"svc.yaml": svcYAML}, want: "40", exit: 2},
		{cmd: "generate iptables", input: "`--node-ip 10.0.0`", args: []string{"generate", "iptables", "--node", "n", "-f", "{d}/svc.yaml", "--node-ip", "10.0.0"}, files: map[string]string{"svc.yaml": svcYAML}, want: "10.0.0", exit: 2},
		{cmd: "generate iptables", input: "two IPv4 `--node-ip`", args: []string{"generate", "iptables", "--node", "n", "-f", "{d}/svc.yaml", "--node-ip", "10.0.0.1,10.0.0.2"}, files: map[string]string{"svc.yaml": svcYAML}, want: "second IPv4 address", exit: 2},
		{cmd: "generate iptables", input: "`--cluster-cidr 10.244.0.0/99`", args: []string{"generate", "iptables", "--node", "n", "-f", "{d}/svc.yaml", "--cluster-cidr", "10.244.0.0/99"}, files: map[string]string{"svc.yaml": svcYAML}, want: "10.244.0.0/99", exit: 2},
		{cmd: "generate iptables", input: "`--nodeport-addresses nowhere`", args: []string{"generate", "iptables", "--node", "n", "-f", "{d}/svc.yaml", "--nodeport-addresses", "nowhere"}, files: map[string]string{"svc.yaml": svcYAML}, want: "nowhere", exit: 2},
		{cmd: "generate iptables", input: "`--pod-cidr x`", args: []string{"generate", "iptables", "--node", "n", "-f", "{d}/svc.yaml", "--detect-local-mode", "NodeCIDR", "--pod-cidr", "x"}, files: map[string]string{"svc.yaml": svcYAML}, want: "x", exit: 2},
		{cmd: "generate iptables", input: "`--node-addresses 1.2.3.4.5`", args: []string{"generate", "iptables", "--node", "n", "-f", "{d}/svc.yaml", "--node-addresses", "1.2.3.4.5"}, files: map[string]string{"svc.yaml": svcYAML}, want: "1.2.3.4.5", exit: 2},
		{cmd: "generate iptables", input: "an argument", args: []string{"generate", "iptables", "--node", "n", "-f", "{d}/svc.yaml", "extra"}, files: map[string]string{"svc.yaml": svcYAML}, want: "extra", exit: 2},
		{cmd: "generate nftables", input: "`--kube-proxy-version 1.2`", args: []string{"generate", "nftables", "--node", "n", "-f", "{d}/svc.yaml", "--kube-proxy-version", "1.2"}, files: map[string]string{"svc.yaml": svcYAML}, want: "1.2", exit: 2},
		{cmd: "generate nftables", input: "`--nftables-masquerade-bit -1`", args: []string{"generate", "nftables", "--node", "n", "-f", "{d}/svc.yaml", "--nftables-masquerade-bit", "-1"}, files: map[string]string{"svc.yaml": svcYAML}, want: "-1", exit: 2},
		{cmd: "generate nftables", input: "`--service-cidr 10.96.0.0`", args: []string{"generate", "nftables", "--node", "n", "-f", "{d}/svc.yaml", "--service-cidr", "10.96.0.0"}, files: map[string]string{"svc.yaml": svcYAML}, want: "10.96.0.0", exit: 2},
		{cmd: "generate nftables", input: "`--family IPv5`", args: []string{"generate", "nftables", "--node", "n", "-f", "{d}/svc.yaml", "--family", "IPv5"}, files: map[string]string{"svc.yaml": svcYAML}, want: "IPv5", exit: 2},
		{cmd: "generate nftables", input: "`--detect-local-mode Psychic`", args: []string{"generate", "nftables", "--node", "n", "-f", "{d}/svc.yaml", "--detect-local-mode", "Psychic"}, files: map[string]string{"svc.yaml": svcYAML}, want: "Psychic", exit: 2},
		{cmd: "generate", input: "an unknown mode `ebpf`", args: []string{"generate", "ebpf"}, want: "ebpf", exit: 2},

		// ipvs.
		{cmd: "ipvs", input: "a missing `--restore`", args: []string{"ipvs", "--restore", "{d}/nope"}, want: "nope", exit: 2},
		{cmd: "ipvs", input: "a `--restore` dump that does not parse", args: []string{"ipvs", "--restore", "{d}/d"}, files: map[string]string{"d": "-A -t 10.0.0.1:80 -s nosuchsched\n"}, want: "d:1", exit: 2},
		{cmd: "ipvs", input: "a `--restore` real server before its service", args: []string{"ipvs", "--restore", "{d}/d"}, files: map[string]string{"d": "-a -t 10.0.0.1:80 -r 10.1.0.1:80 -m -w 1\n"}, want: "d:1", exit: 2},
		{cmd: "ipvs", input: "a `--script` with an unknown command", args: []string{"ipvs", "--script", "{d}/s"}, files: map[string]string{"s": "frobnicate\n"}, want: "s:1", exit: 2},
		{cmd: "ipvs", input: "a `--script` `sleep soon`", args: []string{"ipvs", "--script", "{d}/s"}, files: map[string]string{"s": "sleep soon\n"}, want: "s:1", exit: 2},
		{cmd: "ipvs", input: "`--kernel abc`", args: []string{"ipvs", "--kernel", "abc", "--script", "{d}/s"}, files: map[string]string{"s": "\n"}, want: "abc", exit: 2},
		{cmd: "ipvs", input: "`-o xml`", args: []string{"ipvs", "-o", "xml", "--script", "{d}/s"}, files: map[string]string{"s": "\n"}, want: "xml", exit: 2},

		// dns serve.
		{cmd: "dns serve", input: "`--listen :99999`", args: []string{"dns", "serve", "--manifests", "{d}/svc.yaml", "--listen", ":99999"}, files: map[string]string{"svc.yaml": svcYAML}, want: `want a number from 0 to 65535`, exit: 2},
		{cmd: "dns serve", input: "`--listen localhost` (no port)", args: []string{"dns", "serve", "--manifests", "{d}/svc.yaml", "--listen", "localhost"}, files: map[string]string{"svc.yaml": svcYAML}, want: "--listen", exit: 2},
		{cmd: "dns serve", input: "`--allow-recursion 10.0.0/8`", args: []string{"dns", "serve", "--manifests", "{d}/svc.yaml", "--upstream", "127.0.0.1:1", "--allow-recursion", "10.0.0/8"}, files: map[string]string{"svc.yaml": svcYAML}, want: "not a network", exit: 2},
		{cmd: "dns serve", input: "`--pods sometimes`", args: []string{"dns", "serve", "--manifests", "{d}/svc.yaml", "--pods", "sometimes"}, files: map[string]string{"svc.yaml": svcYAML}, want: `pod mode "sometimes"`, exit: 2},
		{cmd: "dns serve", input: "`--ttl 99999`", args: []string{"dns", "serve", "--manifests", "{d}/svc.yaml", "--ttl", "99999"}, files: map[string]string{"svc.yaml": svcYAML}, want: "99999", exit: 2},
		{cmd: "dns serve", input: "`--zone bad..zone`", args: []string{"dns", "serve", "--manifests", "{d}/svc.yaml", "--zone", "bad..zone"}, files: map[string]string{"svc.yaml": svcYAML}, want: "bad..zone", exit: 2},
		{cmd: "dns serve", input: "no `--manifests`", args: []string{"dns", "serve"}, want: "manifests", exit: 2},
		{cmd: "dns serve", input: "a missing manifest", args: []string{"dns", "serve", "--manifests", "{d}/nope.yaml"}, want: "nope.yaml", exit: 2},
		{cmd: "dns serve", input: "`--upstream 127.0.0.1:99999`", args: []string{"dns", "serve", "--manifests", "{d}/svc.yaml", "--upstream", "127.0.0.1:99999"}, files: map[string]string{"svc.yaml": svcYAML}, want: "99999", exit: 2},
		{cmd: "dns serve", input: "an argument", args: []string{"dns", "serve", "--manifests", "{d}/svc.yaml", "extra"}, files: map[string]string{"svc.yaml": svcYAML}, want: "extra", exit: 2},

		// collect, demo, kernel.
		{cmd: "collect", input: "an argument", args: []string{"collect", "extra"}, want: "extra", exit: 2},
		{cmd: "demo", input: "an argument", args: []string{"demo", "extra"}, want: "extra", exit: 2},
		{cmd: "demo", input: "`-o xml`", args: []string{"demo", "-o", "xml"}, want: "xml", exit: 2},
		{cmd: "kernel check", input: "`-o xml`", args: []string{"kernel", "check", "-o", "xml"}, want: "xml", exit: 2},
		{cmd: "kernel harness", input: "`--pods 0`", args: []string{"kernel", "harness", "--pods", "0"}, want: "--pods 0: want 1 to 200", exit: 2},
		{cmd: "kernel harness", input: "`--topology mesh`", args: []string{"kernel", "harness", "--topology", "mesh"}, want: `--topology "mesh"`, exit: 2},
		{cmd: "kernel harness", input: "`--backend ebpf`", args: []string{"kernel", "harness", "--backend", "ebpf"}, want: `--backend "ebpf"`, exit: 2},
		{cmd: "kernel", input: "an unknown subcommand", args: []string{"kernel", "nosuch"}, want: "nosuch", exit: 2},
	}
	// Every manifest validation error, through every command that reads manifests.
	for _, m := range badManifests {
		files := map[string]string{"m.yaml": m.file}
		rows = append(rows,
			badInputRow{cmd: "generate iptables", input: "manifest: " + m.input, args: []string{"generate", "iptables", "--node", "n", "-f", "{d}/m.yaml"}, files: files, want: m.want, exit: 2},
			badInputRow{cmd: "generate nftables", input: "manifest: " + m.input, args: []string{"generate", "nftables", "--node", "n", "-f", "{d}/m.yaml"}, files: files, want: m.want, exit: 2},
			badInputRow{cmd: "dns serve", input: "manifest: " + m.input, args: []string{"dns", "serve", "--listen", "127.0.0.1:0", "--manifests", "{d}/m.yaml"}, files: files, want: m.want, exit: 2},
			badInputRow{cmd: "policy matrix", input: "manifest: " + m.input, args: []string{"policy", "matrix", "--port", "80", "--manifests", "{d}/m.yaml"}, files: files, want: m.want, exit: 2},
		)
		if !strings.Contains(m.input, "NUL") && !strings.Contains(m.input, "tab indent") {
			// In a scenario, as a list item of manifests.
			item := "  - " + strings.ReplaceAll(strings.TrimSuffix(m.file, "\n"), "\n", "\n    ") + "\n"
			if strings.Contains(m.file, "---") {
				parts := strings.Split(m.file, "---\n")
				item = ""
				for _, p := range parts {
					item += "  - " + strings.ReplaceAll(strings.TrimSuffix(p, "\n"), "\n", "\n    ") + "\n"
				}
			}
			rows = append(rows, badInputRow{cmd: "run", input: "scenario manifest: " + m.input, args: []string{"run", "{d}/s.yaml"},
				files: map[string]string{"s.yaml": strings.Replace(scen(item, okStep), "  - apiVersion: v1\n    kind: Service\n    metadata: {name: web}\n    spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}\n", "", 1)}, want: m.want, exit: 2})
		}
	}
	return rows
}

// TestBadInputTable runs each bad input through the real CLI: it must fail with its
// exit code and a message holding the fragment, print nothing on stdout and write no
// file. -update-badinput writes the table into docs/RELIABILITY.md; a stale table
// fails.
func TestBadInputTable(t *testing.T) {
	rows := badInputRows()
	discover := os.Getenv("CLUSTERLAB_BADINPUT_DISCOVER") != ""
	msgs := make([]string, len(rows))
	for i, r := range rows {
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
			dir := t.TempDir()
			for name, text := range r.files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			args := make([]string, len(r.args))
			for j, a := range r.args {
				args[j] = strings.NewReplacer("{d}", dir, "{repo}", "../..").Replace(a)
			}
			before := listDir(t, dir)
			stdout, _, err := runCmd(t, args...)
			code := exitCode(err)
			msg := ""
			if err != nil {
				msg = strings.ReplaceAll(err.Error(), dir+"/", "")
				msg = strings.ReplaceAll(msg, dir, "DIR")
			}
			msgs[i] = msg
			if discover {
				t.Logf("ROW %d %s | %s | exit %d | %s", i, r.cmd, r.input, code, msg)
				return
			}
			if code != r.exit {
				t.Errorf("%s %s: exit %d (%v), want %d", r.cmd, r.input, code, err, r.exit)
			}
			if !strings.Contains(msg, r.want) {
				t.Errorf("%s %s: message %q lacks %q", r.cmd, r.input, msg, r.want)
			}
			if stdout != "" {
				t.Errorf("%s %s: wrote on stdout: %.200q", r.cmd, r.input, stdout)
			}
			if after := listDir(t, dir); after != before {
				t.Errorf("%s %s: files written: %s", r.cmd, r.input, after)
			}
		})
	}
	if discover || t.Failed() {
		return
	}
	checkBadInputDoc(t, rows, msgs)
}

func listDir(t *testing.T, dir string) string {
	t.Helper()
	var names []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != dir {
			names = append(names, strings.TrimPrefix(p, dir))
		}
		return nil
	})
	return strings.Join(names, " ")
}

const (
	badInputBegin = "<!-- bad-input table: generated by go test ./cmd/clusterlab -run TestBadInputTable -update-badinput; do not edit -->\n"
	badInputEnd   = "<!-- end of the bad-input table -->\n"
)

// badInputMarkdown renders the rows and the messages they gave as the doc's table.
func badInputMarkdown(rows []badInputRow, msgs []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Generated from `TestBadInputTable` (cmd/clusterlab), which runs each row through the CLI\non every `go test`: the exit code, the message (abridged to 160 bytes), nothing on stdout,\nno file written. Count: %d.\n\n", len(rows))
	b.WriteString("| command | input | message | exit |\n|---|---|---|---|\n")
	for i, r := range rows {
		m := msgs[i]
		if len(m) > 160 {
			m = m[:160] + " ..."
		}
		m = strings.ToValidUTF8(m, "?")
		m = strings.NewReplacer("|", "\\|", "`", "'", "\n", " ").Replace(m)
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %d |\n", r.cmd, strings.ReplaceAll(r.input, "|", "\\|"), m, r.exit)
	}
	return b.String()
}

func checkBadInputDoc(t *testing.T, rows []badInputRow, msgs []string) {
	const path = "../../docs/RELIABILITY.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, badInputBegin), strings.Index(s, badInputEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no bad-input table markers (%q ... %q)", path, badInputBegin, badInputEnd)
	}
	want := s[:i+len(badInputBegin)] + badInputMarkdown(rows, msgs) + s[j:]
	if *updateBadInput {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want != s {
		t.Errorf("%s's bad-input table is not what the rows give: run go test ./cmd/clusterlab -run TestBadInputTable -update-badinput", path)
	}
}
