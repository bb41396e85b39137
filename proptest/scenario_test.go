package proptest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/scenario"
	"github.com/clusterlab/clusterlab/service"
	corev1 "k8s.io/api/core/v1"
)

// keepsSourceEverywhere is a deliberately wrong invariant: "outside traffic to a
// NodePort keeps the client's address", which kube-proxy breaks on purpose under
// externalTrafficPolicy Cluster (it masquerades so that replies come back through the
// node).
var keepsSourceEverywhere = Checker{Name: "node-port-keeps-source", Check: func(w *World) error {
	var all Violations
	for _, v := range w.ServicePorts() {
		if v.Port.NodePort == 0 || !v.HasEndpoints() || v.V6() {
			continue
		}
		for _, ext := range w.ExternalSources() {
			for _, n := range w.Cluster.Nodes() {
				if !w.nodePortAllowed(n, n.IP()) {
					continue
				}
				err := w.CheckProbe(ProbeCheck{Invariant: "node-port-keeps-source", Service: &v,
					Probe:  netsim.Probe{From: ext.From, Proto: protoNum(v.Port.Protocol), Dst: addrPort(n.IP(), v.Port.NodePort), AllBranches: true},
					Expect: v.External(n.Name()), KeepsSource: ext.Addrs[0]})
				if vs, ok := err.(Violations); ok {
					all = append(all, vs...)
				}
			}
		}
	}
	return all.err()
}}

// scenarioIn returns the one scenario file a property wrote into dir.
func scenarioIn(t *testing.T, dir string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(files) != 1 {
		t.Fatalf("want one scenario file in %s, got %v", dir, files)
	}
	return files[0]
}

func runScenario(t *testing.T, path string) *scenario.Report {
	t.Helper()
	s, err := scenario.Load(path)
	if err != nil {
		data, _ := os.ReadFile(path)
		t.Fatalf("the counterexample does not load: %v\n%s", err, data)
	}
	rep, err := scenario.Run(context.Background(), s, scenario.Options{})
	if err != nil {
		t.Fatalf("the counterexample does not run: %v", err)
	}
	return rep
}

func reportText(rep *scenario.Report) string {
	var b bytes.Buffer
	rep.WriteText(&b)
	return b.String()
}

// TestCounterexampleReplays: a property with a deliberately wrong invariant fails; the
// shrunk counterexample it writes loads as a scenario file and, run under the same
// mode, fails on the expectation that encodes the invariant.
func TestCounterexampleReplays(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(ScenarioDirEnv, dir)
	out, failed := runRecorded(t, Property(Options{NoDualStack: true, NoSteps: true, Kinds: []ServiceKind{KindNodePort}},
		KubeProxy(kubeproxy.IPTables), "iptables", keepsSourceEverywhere), true)
	if !failed {
		t.Fatal("the wrong invariant held")
	}
	for _, w := range []string{"node-port-keeps-source: service default/svc-", "seen_source: client", "scenario written to"} {
		if !strings.Contains(out, w) {
			t.Errorf("the report lacks %q:\n%s", w, out)
		}
	}
	path := scenarioIn(t, dir)
	// The one file is the logged report's scenario: the final shrunk case, which rapid
	// reports (and logs) after every failing shrink step has written the file.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const head = "scenario (replay with `clusterlab run FILE`):\n"
	if last := out[strings.LastIndex(out, head)+len(head):]; !strings.HasPrefix(last, string(data)) {
		t.Errorf("the scenario file is not the last (shrunk) report's:\n%s", data)
	}
	rep := runScenario(t, path)
	text := reportText(rep)
	if rep.Passed {
		data, _ := os.ReadFile(path)
		t.Fatalf("the replay passed; it must fail where the property did:\n%s\n%s", data, text)
	}
	failedSeen := false
	for _, st := range rep.Steps {
		for _, e := range st.Expectations {
			if !e.OK && e.Field == "seen_source" {
				failedSeen = true
			}
		}
	}
	if !failedSeen {
		t.Errorf("the replay failed, but not on seen_source:\n%s", text)
	}
	t.Logf("replay:\n%s", text)
}

// TestDualStackScenarioReplays: a dual-stack case's scenario file names both families'
// CIDRs, and its replay gives every IPv6 cluster IP port the endpoints the case's own
// world gives it.
func TestDualStackScenarioReplays(t *testing.T) {
	var c *Case
	var w *World
	for seed := 0; seed < 500 && w == nil; seed++ {
		c = Cases(Options{NoSteps: true}).Example(seed)
		if !c.Cluster.DualStack {
			continue
		}
		cand, err := Build(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range cand.ServicePorts() {
			if v.V6() && v.ClusterIP.IsValid() && len(v.Internal(c.Cluster.Nodes[0].Name).Endpoints) > 0 {
				w = cand
				break
			}
		}
		if w == nil {
			cand.Close()
		}
	}
	if w == nil {
		t.Fatal("no dual-stack case with an IPv6 cluster IP and endpoints among 500 examples")
	}
	defer w.Close()
	s, err := w.Scenario(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Cluster.ServiceCIDR, ",") {
		t.Fatalf("service_cidr %q names one family", s.Cluster.ServiceCIDR)
	}
	node := c.Cluster.Nodes[0].Name
	for _, v := range w.ServicePorts() {
		if !v.V6() || !v.ClusterIP.IsValid() {
			continue
		}
		exp := v.Internal(node)
		if len(exp.Endpoints) == 0 {
			continue
		}
		var pods []string
		for _, e := range exp.Endpoints {
			if e.Pod != "" {
				pods = append(pods, e.Pod)
			}
		}
		if len(pods) == 0 {
			continue
		}
		s.Steps = append(s.Steps, scenario.Step{Name: "v6 " + v.Key(),
			Send:   &scenario.Traffic{From: "node:" + node, To: addrPort(v.ClusterIP, v.Port.Port).String(), Proto: strings.ToLower(string(protoOr(v.Port.Protocol))), AllBranches: true},
			Expect: &scenario.Expect{Reaches: pods}})
	}
	if len(s.Steps) == 0 || s.Steps[len(s.Steps)-1].Send == nil {
		t.Fatal("no IPv6 cluster IP port with endpoints on pods to send to")
	}
	data, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dual.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := runScenario(t, path)
	if !rep.Passed {
		t.Fatalf("the replay does not give the IPv6 endpoints:\n%s\n%s", data, reportText(rep))
	}
}

// TestScenarioLeavesOutStepsThatDidNothing: a case's step that found nothing to change
// (a service deleted twice, turned ExternalName after its deletion, a pod deleted
// twice or set ready after it was gone) changes nothing in the world, so its scenario
// leaves it out: written as it was drawn, it would fail the replay (the API server
// answers "not found") or change what the replay runs (an ExternalName service
// created anew).
func TestScenarioLeavesOutStepsThatDidNothing(t *testing.T) {
	var c *Case
	for seed := 0; seed < 200 && c == nil; seed++ {
		cand := Cases(Options{NoSteps: true, NoDualStack: true, Kinds: []ServiceKind{KindClusterIP}}).Example(seed)
		if len(cand.Services) > 0 && cand.Services[0].Spec.Selector != nil && len(backendPods(cand)) > 0 {
			c = cand
		}
	}
	if c == nil {
		t.Fatal("no case with a service and a backend pod among 200 examples")
	}
	svc := c.Services[0].Namespace + "/" + c.Services[0].Name
	pod := backendPods(c)[0]
	c.Steps = []Step{
		{Kind: StepDeleteService, Target: svc},
		{Kind: StepDeleteService, Target: svc},         // no such service
		{Kind: StepToExternalName, Target: svc},        // no such service
		{Kind: StepDeletePod, Target: pod},             //
		{Kind: StepDeletePod, Target: pod},             // no such pod
		{Kind: StepSetReady, Target: pod, Ready: true}, // no such pod
	}
	w, err := Build(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if len(w.Notes) != 4 {
		t.Errorf("notes %q: want one for each of the 4 steps that did nothing", w.Notes)
	}
	s, err := w.Scenario(nil)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, st := range s.Steps {
		steps = append(steps, st.Title())
	}
	if want := []string{"delete Service " + svc, "delete pod " + pod}; strings.Join(steps, "; ") != strings.Join(want, "; ") {
		t.Errorf("scenario steps %q, want %q", steps, want)
	}
	data, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "noops.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if rep := runScenario(t, path); !rep.Passed {
		t.Fatalf("the replay fails:\n%s\n%s", data, reportText(rep))
	}
}

// backendPods lists a case's pods that back services (those with labels), as steps
// target them.
func backendPods(c *Case) []string {
	var out []string
	for _, p := range c.Pods {
		if p.Labels != nil {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	return out
}

// TestAffinityReproductionReplays: under ClientIP affinity every connection of a client
// lands on one backend, so a reproduction that sends real attempts (to count the source
// the backend saw) cannot expect each of several endpoints to answer. The counterexample
// of a proxy that ignores externalTrafficPolicy Local on such a service, with two
// endpoints on a node, must replay clean under iptables, where the invariant holds (it
// failed "reaches ..., got {one of them}; nothing from the other"): through a node port,
// and through a load-balancer IP (vip mode: the nodes' rules, and their affinity,
// handle it).
func TestAffinityReproductionReplays(t *testing.T) {
	for _, kind := range []service.Option{service.NodePort(), service.LoadBalancer()} {
		c := &Case{Cluster: ClusterSpec{Nodes: []NodeSpec{{Name: "node-a"}, {Name: "node-b"}}, Seed: 1, LoadBalancerMode: "vip"}, Externals: Externals[:1]}
		c.Services = []*corev1.Service{service.NewService("default/web", service.Selector("app=web"), service.Port("", 80, 80),
			kind, service.ExternalTrafficPolicy(corev1.ServiceExternalTrafficPolicyLocal), service.ClientIPAffinity(10800))}
		b := NewAddresses(c.Cluster)
		for _, p := range []struct{ name, node string }{{"web-0", "node-a"}, {"web-1", "node-a"}, {"web-2", "node-b"}} {
			c.Pods = append(c.Pods, newPod(b, "default/"+p.name, p.node, map[string]string{"app": "web"}, []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}}))
		}
		c.Pods = append(c.Pods, newPod(b, "default/client", "node-b", nil, nil))
		ignoresETP := broken(stateless(mapServices(func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster })), false, false)
		w, err := Build(c, ignoresETP)
		if err != nil {
			t.Fatal(err)
		}
		w.Mode = "broken"
		verr := CheckExternalTrafficLocal(w)
		var vs Violations
		if !errors.As(verr, &vs) {
			w.Close()
			t.Fatalf("%s: the proxy that ignores externalTrafficPolicy Local broke nothing: %v", c.Summary(), verr)
		}
		data, err := w.ScenarioYAML(verr)
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "affinity.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if rep := runScenario(t, path); !rep.Passed {
			t.Errorf("%s: the counterexample fails under iptables, where the invariant holds:\n%s\n%s", c.Summary(), data, reportText(rep))
		}
	}
}

// TestScenarioDryRunsFirst: a counterexample's reproductions that follow every branch of
// a packet (dry runs) come before those that make real attempts, whichever violation
// they belong to: a real attempt fills the ClientIP affinity table, which would narrow
// a later dry run's branches to the one backend the attempt chose.
func TestScenarioDryRunsFirst(t *testing.T) {
	c := &Case{Cluster: ClusterSpec{Nodes: []NodeSpec{{Name: "node-a"}}, Seed: 1}}
	w, err := Build(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	send := func(to string, all bool) Action {
		return Action{Kind: "send", From: "external:ext-a", Proto: 6, To: to, AllBranches: all, Count: 40, Expect: &Want{SeenSource: "client"}}
	}
	vs := Violations{
		{Invariant: "a", Repro: []Action{send("172.18.0.2:30001", false)}},
		{Invariant: "b", Repro: []Action{send("172.18.0.2:30002", true), send("172.18.0.2:30002", false)}},
		{Invariant: "c", Repro: []Action{send("172.18.0.2:30003", true)}},
	}
	s, err := w.Scenario(vs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range s.Steps {
		got = append(got, fmt.Sprintf("%s all=%v", st.Send.To, st.Send.AllBranches))
	}
	want := []string{"172.18.0.2:30002 all=true", "172.18.0.2:30003 all=true", "172.18.0.2:30001 all=false", "172.18.0.2:30002 all=false"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("steps %q, want %q", got, want)
	}
}

// TestDeletedPodReproductionReplays: the reproduction of a deleted-pod violation asks
// where the flow's next packet lands, as the invariant does, not whether a backend
// answers it: an endpoint that is left may not listen on the port (generated pods now
// and then lack a container port), and a connection to it is refused. Here the only
// endpoint left is a terminating pod that serves nothing on 5353/UDP; the counterexample
// of a proxy that never cleans conntrack must replay clean under iptables (it failed
// "reaches: {default/web-1}, got {}", the datagram refused).
func TestDeletedPodReproductionReplays(t *testing.T) {
	c := &Case{Cluster: ClusterSpec{Nodes: []NodeSpec{{Name: "node-a"}}, Seed: 1}}
	c.Services = []*corev1.Service{service.NewService("default/web", service.Selector("app=web"), service.UDPPort("", 53, 5353))}
	b := NewAddresses(c.Cluster)
	udp := []corev1.ContainerPort{{ContainerPort: 5353, Protocol: corev1.ProtocolUDP}}
	c.Pods = []*corev1.Pod{
		newPod(b, "default/web-0", "node-a", map[string]string{"app": "web"}, udp),
		newPod(b, "default/web-1", "node-a", map[string]string{"app": "web"}, nil), // serves nothing
		newPod(b, "default/client", "node-a", nil, nil),
	}
	c.PodStates = map[string]PodState{"default/web-1": PodTerminating}
	w, err := Build(c, broken(nil, false, true))
	if err != nil {
		t.Fatal(err)
	}
	w.Mode = "broken"
	verr := CheckDeletedPods(w)
	var vs Violations
	if !errors.As(verr, &vs) {
		w.Close()
		t.Fatalf("the proxy that never cleans conntrack broke nothing: %v", verr)
	}
	data, err := w.ScenarioYAML(verr)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "deleted.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if rep := runScenario(t, path); !rep.Passed {
		t.Fatalf("the counterexample fails under iptables, where the invariant holds:\n%s\n%s", data, reportText(rep))
	}
}

// TestSourceRangesPerServiceHealthCheck is the case issue 23 reported from a random
// seed: two nodes; a LoadBalancer Service with externalTrafficPolicy Local and
// loadBalancerSourceRanges holding the client, ports http:80→8080 and dns:443→dns-srv
// (a named port only the pod on node-a has); its pod on node-b (serving 8080 only) is
// terminating; a client in the allowed range sends to the load-balancer IP on 443. A
// cloud load balancer health-checks a node per Service (kube-proxy's
// healthCheckNodePort answers 200 while the node has a serving local endpoint of any
// port), so it may hand the 443 traffic to node-b, whose rules drop it (no local
// endpoint for that port): reality drops there, and the invariants must allow it, not
// report a violation. Kept as a regression test under every mode that probes.
func TestSourceRangesPerServiceHealthCheck(t *testing.T) {
	for _, lbMode := range []string{"nodeport", "vip"} {
		c := &Case{Cluster: ClusterSpec{Nodes: []NodeSpec{{Name: "node-a"}, {Name: "node-b"}}, Seed: 1, LoadBalancerMode: lbMode}, Externals: Externals[:1]}
		c.Services = []*corev1.Service{service.NewService("default/svc", service.Selector("app=svc"),
			service.Port("http", 80, 8080), service.NamedPort("dns", 443, "dns-srv"), service.LoadBalancer(),
			service.ExternalTrafficPolicy(corev1.ServiceExternalTrafficPolicyLocal),
			service.LoadBalancerSourceRanges(Externals[0].IP.String()+"/32"))}
		b := NewAddresses(c.Cluster)
		c.Pods = []*corev1.Pod{
			newPod(b, "default/svc-0", "node-a", map[string]string{"app": "svc"}, []corev1.ContainerPort{
				{Name: "web", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {Name: "dns-srv", ContainerPort: 5353, Protocol: corev1.ProtocolTCP}}),
			newPod(b, "default/svc-1", "node-b", map[string]string{"app": "svc"}, []corev1.ContainerPort{
				{Name: "web", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}),
			newPod(b, "default/client", "node-a", nil, nil),
		}
		// The pod on node-b starts terminating after everything is up: the load
		// balancer has seen node-b healthy, and checks follow at once.
		c.Steps = []Step{{Kind: StepDeletePod, Target: "default/svc-1", Grace: TerminationGrace}}
		w, err := Build(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		w.Mode = "iptables"
		// The reported situation: the allowed client's packet to 443 reaches node-b,
		// which has no endpoint of that port, and is dropped there.
		droppedAtB := false
		for _, v := range w.ServicePorts() {
			if v.Port.Port != 443 {
				continue
			}
			for _, a := range append(append([]netip.Addr(nil), v.LoadBalancerIPs...), v.ProxiedLoadBalancerIPs...) {
				rs, err := w.Cluster.Probe(netsim.Probe{From: "external:ext-a", Proto: netfilter.ProtoTCP, Dst: netip.AddrPortFrom(a, 443), AllBranches: true, Mode: netsim.ProbePacket})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rs {
					droppedAtB = droppedAtB || r.Result == netsim.ResultDropped && strings.Contains(r.Outcome.String(), "at node-b")
				}
			}
		}
		if !droppedAtB {
			t.Errorf("load balancer mode %s: no branch of the allowed client's packet to 443 is dropped at node-b: the case no longer shows what was reported", lbMode)
		}
		err = Check(w, Checkers...)
		w.Close()
		if err != nil {
			t.Errorf("%s (load balancer mode %s): %v", c.Summary(), lbMode, err)
		}
	}
}
