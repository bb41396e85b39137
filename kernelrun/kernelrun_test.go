package kernelrun_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/kernelrun"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/scenario"
)

func TestMain(m *testing.M) { os.Exit(kernel.RunTests(m)) }

// testPrefix starts the namespaces these tests make (distinct from the CLI's "clk" and
// every other package's).
const testPrefix = "clkrt"

// requireKernel skips a test where the kernel back end cannot run mode.
func requireKernel(t *testing.T, mode kubeproxy.Mode) {
	t.Helper()
	if err := kernelrun.Supported(mode, kernel.BackendNFT); err != nil {
		t.Skip("kernel back end unavailable: " + err.Error())
	}
}

// refusedSteps are, per scenario under testdata/scenarios (every example's scenario is
// one of them), the steps the kernel back end refuses and a word of why. Every other
// step must run on the kernel with the simulation's outcome, or differ only by a named
// by-design difference.
var refusedSteps = map[string]map[int]string{
	// all_branches follows every random branch of one packet: the simulation's.
	"clusterip-trace.yaml": {2: "all_branches"},
	// DNS packets held in flight together (chosen interleavings), and conntrack -S
	// counters, are the simulation's.
	"dns-insert-race.yaml": {1: "together", 2: "together", 3: "conntrack_stats", 4: "together", 6: "together", 7: "conntrack_stats"},
	// HTTP checks (the kernel's pods run echo servers) and kube-proxy's health-check
	// port (no kube-proxy process on the kernel nodes).
	"e2e-services.yaml": {4: "not HTTP", 6: "health-check", 7: "not HTTP"},
	// Traffic while NetworkPolicies exist: only the simulation enforces them.
	"networkpolicy-clusterip-ipblock.yaml": {1: "NetworkPolicy", 3: "NetworkPolicy", 5: "NetworkPolicy", 6: "NetworkPolicy", 8: "NetworkPolicy", 10: "NetworkPolicy"},
	"networkpolicy-dns-egress.yaml":        {1: "NetworkPolicy", 2: "NetworkPolicy", 4: "NetworkPolicy", 5: "NetworkPolicy"},
}

// TestScenariosOnBothBackends runs every scenario under testdata/scenarios in the
// simulation and on the kernel, and holds each difference to a named by-design one
// (kernelrun.Differences) and each refusal to the table above. A scenario whose mode
// this kernel cannot run (ipvs without ip_vs) is skipped with the reason.
func TestScenariosOnBothBackends(t *testing.T) {
	requireKernel(t, kubeproxy.IPTables)
	files, err := filepath.Glob("../testdata/scenarios/*.yaml")
	if err != nil || len(files) < 10 {
		t.Fatalf("scenarios: %v (%d files)", err, len(files))
	}
	known := map[string]bool{}
	for _, d := range kernelrun.Differences {
		known[d.Name] = true
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			t.Parallel()
			s, err := scenario.Load(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := kernelrun.Supported(kubeproxy.Mode(s.Cluster.Proxy.Mode), kernel.BackendNFT); err != nil {
				t.Skipf("%s mode not on this kernel: %v", s.Cluster.Proxy.Mode, err)
			}
			start := time.Now()
			cmp := runBoth(t, s)
			t.Logf("%s: %d steps, %d differences, %v", name, len(cmp.Reports[1].Steps), len(cmp.Differences), time.Since(start).Round(time.Millisecond))
			kern := cmp.Reports[1]
			want := refusedSteps[name]
			got := map[int]string{}
			for _, st := range kern.Steps {
				if st.Status == "refused" {
					got[st.Index] = st.Summary
					if !strings.HasPrefix(st.Summary, "refused on the kernel: ") || len(st.Summary) < 40 {
						t.Errorf("step %d refused without a reason: %q", st.Index, st.Summary)
					}
				}
			}
			for i, why := range want {
				if !strings.Contains(got[i], why) {
					t.Errorf("step %d: want it refused (%s), got %q", i, why, got[i])
				}
			}
			for i, msg := range got {
				if _, ok := want[i]; !ok {
					t.Errorf("step %d refused, not in the table: %s", i, msg)
				}
			}
			if kern.Refused != len(got) {
				t.Errorf("report counts %d refused steps, %d have the status", kern.Refused, len(got))
			}
			for _, d := range cmp.Differences {
				name, _, _ := strings.Cut(d.ByDesign, ":")
				if !known[name] {
					t.Errorf("step %d (%s) differs, and not by design:\n%s", d.Index, d.Title, cmp.DiffText())
					continue
				}
				if name == "refused-on-the-kernel" && want[d.Index] == "" {
					t.Errorf("step %d: %s", d.Index, d.ByDesign)
				}
				if name != "refused-on-the-kernel" && len(d.DatapathState) == 0 && kern.Steps[d.Index-1].Action != "dns" {
					t.Errorf("step %d differs but the kernel's state after it was not kept", d.Index)
				}
			}
			// Only refusals may fail the kernel run: every step it carried out held
			// its expectations as in the simulation.
			if cmp.Reports[0].Passed && !kern.Passed {
				for _, st := range kern.Steps {
					if st.Status != "ok" && st.Status != "refused" {
						t.Errorf("step %d (%s) %s on the kernel: %s %s", st.Index, st.Title, st.Status, st.Error, failed(st))
					}
				}
			}
			if t.Failed() {
				logKernelState(t, cmp)
			}
		})
	}
}

// logKernelState logs the kernel state kept for each differing step: each node's
// conntrack table and its namespaces' packet counters. A failing comparison calls it.
//
// These tests once ran a scenario again when the kernel lost UDP attempts the
// simulation answered: CI saw one or two of three attempts from a fixed source port
// "dropped" now and then. The cause was the harness's, not the kernel's: the attempt's
// bind of the port failed with EADDRINUSE while a fork elsewhere in the process still
// held the previous attempt's socket (kernel.whilePortInUse now waits for the port;
// kernel's TestFixedPortDialWaitsForThePort). A loss now fails the test.
func logKernelState(t *testing.T, cmp *scenario.Comparison) {
	t.Helper()
	for _, d := range cmp.Differences {
		for _, st := range d.DatapathState {
			t.Logf("step %d, %s: conntrack:\n%s\ncounters:\n%s", d.Index, st.Node, st.Conntrack, st.Counters)
		}
	}
}

func failed(st scenario.StepResult) string {
	var out []string
	for _, e := range st.Expectations {
		if !e.OK {
			out = append(out, e.Field+": want "+e.Want+", got "+e.Got)
		}
	}
	return strings.Join(out, "; ")
}

// runBoth runs s in the simulation and on the kernel and compares them.
func runBoth(t *testing.T, s *scenario.Scenario) *scenario.Comparison {
	return runBothMode(t, s, "")
}

// runBothMode is runBoth under a kube-proxy mode ("" the scenario's).
func runBothMode(t *testing.T, s *scenario.Scenario, mode string) *scenario.Comparison {
	return runBothWith(t, s, mode, kernelrun.Options{Prefix: testPrefix})
}

// testTimeout is the tests' wait for each answer on the kernel.
const testTimeout = 1500 * time.Millisecond

// runBothWith is runBothMode with the kernel back end's options.
func runBothWith(t *testing.T, s *scenario.Scenario, mode string, o kernelrun.Options) *scenario.Comparison {
	if o.Timeout == 0 {
		// CI runs these beside every other package on two cores (load 8-12), so each
		// answer gets three times DefaultTimeout. (It was 3 s for a while: an attempt
		// of version-regression counted dropped at 500 ms and at 1.5 s. Most likely
		// those were not late answers but failed binds of the fixed source port,
		// reported at once as drops: the symptom reproduced here under load; see
		// logKernelState.) Expected drops cost this much each
		// (about 11 in this package: 99 s at 1.5 s, 115 s at 3 s).
		o.Timeout = testTimeout
	}
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sim, err := scenario.Run(ctx, s, scenario.Options{Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	dp := kernelrun.New(o)
	kern, err := scenario.Run(ctx, s, scenario.Options{Mode: mode, Datapath: dp, DatapathState: true})
	if cerr := dp.Close(); cerr != nil {
		t.Errorf("close: %v", cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range dp.Namespaces() {
		if _, err := os.Stat(filepath.Join("/run/netns", n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %s left after Close", n)
		}
	}
	if kern.Backend != "kernel" || len(kern.Steps) != len(sim.Steps) {
		t.Fatalf("kernel report: backend %q, %d steps (simulation %d)", kern.Backend, len(kern.Steps), len(sim.Steps))
	}
	return scenario.CompareBackends(sim, kern, kernelrun.Explain(sim, kern))
}

// twoNodes is a client on node-a and a Service web with one pod on node-b.
const twoNodes = `
cluster:
  nodes: [{name: node-a}, {name: node-b}]
manifests:
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-a, containers: [{name: c, image: busybox}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web, labels: {app: web}}, spec: {nodeName: node-b, containers: [{name: w, image: nginx, ports: [{containerPort: 8080}]}]}}
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}}
`

// TestDifferenceIsReported: a scenario whose step the kernel refuses midway (a
// partition) shows the refusal and the later step that differs because of it, with the
// kernel's rules and conntrack kept for that step.
func TestDifferenceIsReported(t *testing.T) {
	requireKernel(t, kubeproxy.IPTables)
	s, err := scenario.Parse("inline.yaml", []byte(twoNodes+`steps:
  - connect: {from: pod:default/client, to: web:80, count: 3}
    expect: {result: connected}
  - partition: [[node-a], [node-b]]
  - connect: {from: pod:default/client, to: web:80, count: 3}
    expect: {result: dropped}
`))
	if err != nil {
		t.Fatal(err)
	}
	cmp := runBoth(t, s)
	if len(cmp.Differences) != 2 {
		t.Fatalf("want 2 differences, got:\n%s", cmp.DiffText())
	}
	d0, d1 := cmp.Differences[0], cmp.Differences[1]
	if d0.Index != 2 || !strings.HasPrefix(d0.ByDesign, "refused-on-the-kernel: partitions") {
		t.Errorf("first difference: step %d, %q", d0.Index, d0.ByDesign)
	}
	if d1.Index != 3 || !strings.HasPrefix(d1.ByDesign, "after-a-refused-step: step 2") {
		t.Errorf("second difference: step %d, %q", d1.Index, d1.ByDesign)
	}
	var results string
	for _, f := range d1.Facts {
		if f.Name == "results" {
			results = f.Value("sim") + " | " + f.Value("kernel")
		}
	}
	if results != "dropped 3 | connected 3" {
		t.Errorf("step 3 results sim | kernel: %q\n%s", results, cmp.DiffText())
	}
	if len(d1.DatapathState) != 2 {
		t.Fatalf("kernel state kept for %d nodes", len(d1.DatapathState))
	}
	st := d1.DatapathState[0]
	if !strings.Contains(st.Rules, "KUBE-SERVICES") || !strings.Contains(st.Conntrack, "dport=80") {
		t.Errorf("node-a's state: rules\n%s\nconntrack\n%s", st.Rules, st.Conntrack)
	}
	// The namespaces' packet counters: the node's own and its pods', each a line.
	counters := map[string]string{}
	for _, n := range d1.DatapathState {
		for _, l := range strings.Split(strings.TrimSpace(n.Counters), "\n") {
			label, cs, _ := strings.Cut(l, ": ")
			counters[n.Node+" "+label] = " " + cs + " "
		}
	}
	for key, want := range map[string]string{"node-a node": "Ip.ForwDatagrams", "node-b node": "Ip.ForwDatagrams",
		"node-a pod default/client": "Tcp.ActiveOpens", "node-b pod default/web": "Tcp.PassiveOpens"} {
		// At least the 6 connections of steps 1 and 3 (more if a busy machine made the
		// harness dial again).
		_, v, _ := strings.Cut(counters[key], " "+want+"=")
		v, _, _ = strings.Cut(v, " ")
		if n, err := strconv.Atoi(v); err != nil || n < 6 {
			t.Errorf("counters of %s: %q, want %s of 6 or more (all: %v)", key, counters[key], want, counters)
		}
	}
	names := []string{}
	for _, n := range d1.DatapathState {
		names = append(names, n.Node)
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "node-a,node-b" {
		t.Errorf("nodes: %v", names)
	}
}

// TestDNSOnTheKernel: a pod's lookup goes from its namespace to the kube-dns Service
// address, through its node's kube-proxy rules (the conntrack entry is there, DNATed to
// a CoreDNS pod), to the cluster DNS server in a CoreDNS pod's namespace; and a name in
// a connect step resolves the same way.
func TestDNSOnTheKernel(t *testing.T) {
	requireKernel(t, kubeproxy.IPTables)
	s, err := scenario.Parse("inline.yaml", []byte(twoNodes+`steps:
  - dns: {from: pod:default/client, name: web}
    expect: {rcode: NOERROR, answer: [service:default/web]}
  - dns: {from: pod:default/client, name: nosuch}
    expect: {rcode: NXDOMAIN}
  - check: {conntrack: {node: node-a, proto: udp, dst: "service:kube-system/kube-dns:53"}}
    expect: {present: true}
  - connect: {from: pod:default/client, to: "web.default:80"}
    expect: {result: connected, reaches: [default/web]}
`))
	if err != nil {
		t.Fatal(err)
	}
	cmp := runBoth(t, s)
	if len(cmp.Differences) > 0 {
		t.Errorf("differences:\n%s", cmp.DiffText())
	}
	kern := cmp.Reports[1]
	if !kern.Passed {
		for _, st := range kern.Steps {
			t.Logf("[%d] %s %s %s %s", st.Index, st.Status, st.Summary, st.Details, failed(st))
		}
		t.Fatal("the kernel run failed")
	}
	ct := kern.Steps[2]
	if ct.Count == nil || *ct.Count < 1 || !strings.Contains(strings.Join(ct.Details, "\n"), "dport=53") {
		t.Errorf("no DNS conntrack entry on node-a: %v %v", ct.Count, ct.Details)
	}
	for _, det := range kern.Steps[0].Details {
		if strings.Contains(det, "simulation") {
			t.Errorf("the lookup says it was answered by the simulation: %s", det)
		}
	}
}

// TestNFTablesModeOnBothBackends: scenarios under kube-proxy's nftables mode (the
// kernel's nodes programmed through nft) agree with the simulation step by step: the
// ClusterIP spread, session affinity, the stale UDP entry, NodePort Local.
func TestNFTablesModeOnBothBackends(t *testing.T) {
	requireKernel(t, kubeproxy.NFTables)
	for _, name := range []string{"quickstart", "session-affinity", "stale-udp-conntrack", "nodeport-local"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, err := scenario.Load("../testdata/scenarios/" + name + ".yaml")
			if err != nil {
				t.Fatal(err)
			}
			cmp := runBothMode(t, s, string(kubeproxy.NFTables))
			if cmp.Reports[1].Mode != string(kubeproxy.NFTables) {
				t.Fatalf("kernel run in mode %q", cmp.Reports[1].Mode)
			}
			if !cmp.Passed || len(notRandomDraws(cmp)) > 0 {
				t.Errorf("nftables mode: the back ends differ:\n%s", cmp.DiffText())
				logKernelState(t, cmp)
			}
		})
	}
}

// TestLegacyIPTables: the iptables mode through iptables-legacy agrees too, and the
// kernel state kept is iptables-legacy-save's.
func TestLegacyIPTables(t *testing.T) {
	if err := kernelrun.Supported(kubeproxy.IPTables, kernel.BackendLegacy); err != nil {
		t.Skip("kernel back end with iptables-legacy unavailable: " + err.Error())
	}
	s, err := scenario.Load("../testdata/scenarios/stale-udp-conntrack.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cmp := runBothWith(t, s, "", kernelrun.Options{Prefix: testPrefix, Backend: kernel.BackendLegacy})
	if !cmp.Passed || len(notRandomDraws(cmp)) > 0 {
		t.Errorf("iptables-legacy: the back ends differ:\n%s", cmp.DiffText())
	}
}

// TestNodeSettingsOnTheKernel: a node_settings step reaches the kernel: with the
// bridge's hairpin mode off a pod cannot reach itself through its Service (dropped on
// both back ends), on again it can.
func TestNodeSettingsOnTheKernel(t *testing.T) {
	requireKernel(t, kubeproxy.IPTables)
	s, err := scenario.Parse("inline.yaml", []byte(`
cluster:
  nodes: [{name: node-a}]
manifests:
  - {apiVersion: v1, kind: Pod, metadata: {name: web, labels: {app: web}}, spec: {nodeName: node-a, containers: [{name: w, image: nginx, ports: [{containerPort: 8080}]}]}}
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}}
steps:
  - connect: {from: pod:default/web, to: web:80, count: 2}
    expect: {result: connected, seen_source: not-client}
  - node_settings: {node: node-a, hairpin: false}
  - connect: {from: pod:default/web, to: web:80, count: 2}
    expect: {result: dropped}
  - node_settings: {node: node-a, hairpin: true}
  - connect: {from: pod:default/web, to: web:80, count: 2}
    expect: {result: connected}
`))
	if err != nil {
		t.Fatal(err)
	}
	cmp := runBoth(t, s)
	if !cmp.Passed || len(notRandomDraws(cmp)) > 0 {
		t.Errorf("hairpin: the back ends differ or fail:\n%s", cmp.DiffText())
	}
}

// notRandomDraws are the comparison's differences other than "random-draws": with both
// runs passing, which backends a few attempts happened to reach (the kernel's random
// draw against the simulation's seeded one) is no disagreement; ten draws over three
// backends miss one about one run in twenty.
func notRandomDraws(cmp *scenario.Comparison) []scenario.StepDifference {
	var out []scenario.StepDifference
	for _, d := range cmp.Differences {
		if !strings.HasPrefix(d.ByDesign, "random-draws:") {
			out = append(out, d)
		}
	}
	return out
}
