package proptest

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/scenario"
)

// MaxReproduced bounds how many violations a scenario reproduces.
const MaxReproduced = 3

// Scenario writes the world's case as a scenario file that `clusterlab run` replays:
// the cluster (seed, nodes, --nodeport-addresses, the load balancer's mode, external
// hosts, proxy mode, hairpin mode when off), the objects as they were created (with the
// cluster IPs, node ports and load-balancer IPs this run allocated pinned, so the replay
// sees the same addresses), the terminations and the case's steps (but those that
// changed nothing in this run: a service or pod already gone), and then, for the first
// violations in err, the traffic that showed them with expectations that hold when the
// invariant does. A run of the scenario fails where the invariant failed.
//
// A dual-stack case names both families' CIDRs ("IPv4,IPv6").
func (w *World) Scenario(err error) (*scenario.Scenario, error) {
	c := w.Case
	cidrs := func(v4, v6 netip.Prefix) string {
		if c.Cluster.DualStack {
			return v4.String() + "," + v6.String()
		}
		return v4.String()
	}
	mode := w.Mode
	if _, ok := kubeproxy.Lookup(kubeproxy.Mode(mode)); !ok {
		mode = "" // a proxy of the caller's own: the scenario runs the reference mode
	}
	s := &scenario.Scenario{
		Name: "proptest counterexample",
		Cluster: scenario.Cluster{
			Seed:             c.Cluster.Seed,
			NodeCIDR:         cidrs(NodeCIDR4, NodeCIDR6),
			PodCIDR:          cidrs(ClusterCIDR4, ClusterCIDR6),
			ServiceCIDR:      cidrs(ServiceCIDR4, ServiceCIDR6),
			ExternalCIDR:     ExternalCIDR.String(),
			LoadBalancerMode: c.Cluster.LoadBalancerMode,
			DNS:              "off",
			Proxy:            scenario.Proxy{Mode: mode, NodePortAddresses: c.Cluster.NodePortAddresses},
		},
	}
	if c.Cluster.NoHairpin {
		off := false
		s.Cluster.NodeSettings = &scenario.NodeSettings{Hairpin: &off}
	}
	if s.Cluster.Seed == 0 {
		s.Description += "(the case's seed 0 replays as seed 1)\n"
	}
	for _, n := range c.Cluster.Nodes {
		s.Cluster.Nodes = append(s.Cluster.Nodes, scenario.Node{Name: n.Name, Zone: n.Zone})
	}
	for _, e := range c.Externals {
		s.Cluster.ExternalHosts = append(s.Cluster.ExternalHosts, scenario.ExternalHost{Name: e.Name, IP: e.IP.String()})
	}
	var vs Violations
	errors.As(err, &vs)
	if len(vs) > 0 {
		s.Name = "proptest counterexample: " + strings.Join(vs.Invariants(), ", ")
	}
	s.Description += "Found by package proptest"
	if w.Mode != "" {
		s.Description += " with the " + w.Mode + " proxy"
		if mode == "" {
			s.Description += " (not a mode scenario files know: this file replays under iptables, where the expectations should hold)"
		}
	}
	s.Description += ".\nCase: " + c.Summary() + "\n"
	for i, st := range c.Steps {
		if w.idle[i] {
			s.Description += fmt.Sprintf("Step %d (%s) changed nothing in this run and is left out.\n", i+1, st)
		}
	}
	if err != nil {
		s.Description += "\n" + stripTraces(err.Error()) + "\n"
	}

	// Manifests: services as allocated, pods, hand-written slices.
	for _, svc := range c.Services {
		m, err := scenario.InlineObject(w.pinned(svc))
		if err != nil {
			return nil, err
		}
		s.Manifests = append(s.Manifests, m)
	}
	for _, p := range c.Pods {
		pod := p.DeepCopy()
		pod.Status = corev1.PodStatus{PodIPs: pod.Status.PodIPs, PodIP: pod.Status.PodIP}
		if st := c.State(p.Namespace + "/" + p.Name); st == PodNotReady || st == PodTerminatingNotReady {
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[cluster.AnnotationReady] = "false"
		}
		m, err := scenario.InlineObject(pod)
		if err != nil {
			return nil, err
		}
		s.Manifests = append(s.Manifests, m)
	}
	for _, sl := range c.Slices {
		m, err := scenario.InlineObject(sl)
		if err != nil {
			return nil, err
		}
		s.Manifests = append(s.Manifests, m)
	}

	// Terminations and the case's steps.
	for _, p := range c.Pods {
		key := p.Namespace + "/" + p.Name
		if st := c.State(key); st == PodTerminating || st == PodTerminatingNotReady {
			s.Steps = append(s.Steps, scenario.Step{Name: "terminate " + key, DeletePod: &scenario.PodAction{Pod: key, Grace: scenario.Duration(TerminationGrace)}})
		}
	}
	for i, st := range c.Steps {
		if w.idle[i] {
			// It found nothing to change (the note says why): replayed, it would fail
			// ("not found") or change what this run did not (an ExternalName service
			// created anew).
			continue
		}
		ss, err := w.scenarioStep(st)
		if err != nil {
			return nil, err
		}
		s.Steps = append(s.Steps, ss)
	}

	// The violations, reproduced: those that only send packets first, then at most one
	// that changes the world (connections that fill affinity tables, the clock, pod
	// deletions), so that no reproduction disturbs another. Of the sends, those that
	// follow every branch of a packet (dry runs, which change nothing) come before those
	// that make real attempts: a real attempt fills the affinity table that would narrow
	// a later dry run's branches.
	var quiet, loud []*Violation
	for _, v := range vs {
		if mutates(v.Repro) {
			loud = append(loud, v)
		} else {
			quiet = append(quiet, v)
		}
	}
	if len(quiet) > MaxReproduced {
		quiet = quiet[:MaxReproduced]
	}
	if len(loud) > 1 {
		loud = loud[:1]
	}
	add := func(v *Violation, j int) {
		a := v.Repro[j]
		ss := scenarioAction(a)
		if j == len(v.Repro)-1 || a.Expect != nil {
			ss.Name = fmt.Sprintf("%s: %s", v.Invariant, trafficTitle(a))
		}
		s.Steps = append(s.Steps, ss)
	}
	for _, dry := range []bool{true, false} {
		for _, v := range quiet {
			for j, a := range v.Repro {
				if a.AllBranches == dry {
					add(v, j)
				}
			}
		}
	}
	for _, v := range loud {
		for j := range v.Repro {
			add(v, j)
		}
	}
	return s, nil
}

// mutates reports whether a reproduction changes the world (anything but sending
// packets).
func mutates(as []Action) bool {
	for _, a := range as {
		if a.Kind != "send" {
			return true
		}
	}
	return false
}

var traceRE = regexp.MustCompile(`(?m)^  trace:\n(    .*\n?)*`)

// stripTraces drops the trace blocks of a violation message (scenario descriptions
// stay readable; `clusterlab run` traces on its own).
func stripTraces(s string) string { return traceRE.ReplaceAllString(s, "") }

func trafficTitle(a Action) string {
	switch a.Kind {
	case "advance":
		return "advance " + a.Duration.String()
	case "delete-pod":
		return "delete " + strings.Join(a.Pods, ", ")
	case "sync":
		return "sync every proxy"
	}
	return fmt.Sprintf("%s %s -> %s/%s", a.Kind, a.From, a.To, netsim.ProtoName(a.Proto))
}

// pinned returns a service as created, with this run's allocations written into the
// spec: cluster IPs, node ports, the health-check node port, the load-balancer IP.
func (w *World) pinned(svc *corev1.Service) runtime.Object {
	out := svc.DeepCopy()
	if alloc, ok := w.created[svc.Namespace+"/"+svc.Name]; ok {
		if out.Spec.ClusterIP != corev1.ClusterIPNone && out.Spec.Type != corev1.ServiceTypeExternalName {
			out.Spec.ClusterIP, out.Spec.ClusterIPs = alloc.Spec.ClusterIP, alloc.Spec.ClusterIPs
			out.Spec.IPFamilies = alloc.Spec.IPFamilies
		}
		for i := range out.Spec.Ports {
			if out.Spec.Ports[i].TargetPort.String() == "0" {
				out.Spec.Ports[i].TargetPort = intstr.FromInt32(out.Spec.Ports[i].Port)
			}
			if i < len(alloc.Spec.Ports) {
				out.Spec.Ports[i].NodePort = alloc.Spec.Ports[i].NodePort
			}
		}
		out.Spec.HealthCheckNodePort = alloc.Spec.HealthCheckNodePort
		for _, ing := range alloc.Status.LoadBalancer.Ingress {
			if ing.IP != "" {
				out.Spec.LoadBalancerIP = ing.IP
				break
			}
		}
	}
	out.Status = corev1.ServiceStatus{}
	return out
}

func (w *World) scenarioStep(st Step) (scenario.Step, error) {
	switch st.Kind {
	case StepDeletePod:
		return scenario.Step{DeletePod: &scenario.PodAction{Pod: st.Target, Grace: scenario.Duration(st.Grace)}}, nil
	case StepSetReady:
		return scenario.Step{SetReady: &scenario.SetReady{PodAction: scenario.PodAction{Pod: st.Target}, Ready: st.Ready}}, nil
	case StepDeleteService:
		return scenario.Step{Delete: []scenario.ObjectRef{{Kind: "Service", Name: st.Target}}}, nil
	case StepToExternalName:
		svc := w.created[st.Target]
		if svc == nil {
			return scenario.Step{}, fmt.Errorf("proptest: step %s: the service was not created", st)
		}
		n := toExternalName(svc)
		n.ResourceVersion, n.UID, n.CreationTimestamp = "", "", metav1.Time{}
		m, err := scenario.InlineObject(n)
		if err != nil {
			return scenario.Step{}, err
		}
		return scenario.Step{Name: st.String(), Apply: []scenario.Manifest{m}}, nil
	case StepAdvance:
		d := scenario.Duration(st.Duration)
		return scenario.Step{Advance: &d}, nil
	case StepPartition:
		return scenario.Step{Partition: st.Groups}, nil
	case StepKillNode:
		return scenario.Step{KillNode: st.Target}, nil
	case StepPauseProxy:
		return scenario.Step{Sync: &scenario.Sync{Pause: st.Target}}, nil
	case StepLinkLoss:
		return scenario.Step{Fault: &scenario.Fault{Link: "node:" + st.Target, Loss: st.Loss}}, nil
	}
	return scenario.Step{}, fmt.Errorf("proptest: step kind %q has no scenario form", st.Kind)
}

func scenarioAction(a Action) scenario.Step {
	switch a.Kind {
	case "advance":
		d := scenario.Duration(a.Duration)
		return scenario.Step{Advance: &d}
	case "delete-pod":
		pods := append([]string(nil), a.Pods...)
		sort.Strings(pods)
		if len(pods) == 1 {
			return scenario.Step{DeletePod: &scenario.PodAction{Pod: pods[0]}}
		}
		var refs []scenario.ObjectRef
		for _, p := range pods {
			refs = append(refs, scenario.ObjectRef{Kind: "Pod", Name: p})
		}
		return scenario.Step{Delete: refs}
	case "sync":
		return scenario.Step{Sync: &scenario.Sync{Now: true}}
	}
	t := &scenario.Traffic{From: a.From, To: a.To, Proto: netsim.ProtoName(a.Proto), Count: a.Count, SrcPort: int(a.SrcPort), AllBranches: a.AllBranches}
	if t.Count == 1 {
		t.Count = 0
	}
	if t.Proto == "tcp" {
		t.Proto = ""
	}
	st := scenario.Step{}
	if a.Kind == "connect" {
		st.Connect = t
	} else {
		st.Send = t
	}
	if e := a.Expect; e != nil {
		st.Expect = &scenario.Expect{Result: e.Result, Reaches: e.Reaches, NotReaches: e.NotReaches, SeenSource: e.SeenSource}
		if e.Result == "delivered" && a.Kind == "connect" {
			st.Expect.Result = "ok"
		}
		if e.Backends > 0 {
			b := e.Backends
			st.Expect.Backends = &b
		}
	}
	return st
}

// ScenarioYAML renders the world's scenario (see Scenario) as YAML.
func (w *World) ScenarioYAML(err error) ([]byte, error) {
	s, serr := w.Scenario(err)
	if serr != nil {
		return nil, serr
	}
	return s.Marshal()
}

// ScenarioDirEnv names the environment variable that, when set to a directory, makes
// Report write the counterexample's scenario file there: one file per mode label
// (proptest-<mode>.yaml), overwritten by each report, so that it ends up holding the
// final shrunk case.
const ScenarioDirEnv = "PROPTEST_SCENARIO_DIR"

// writeScenario writes data to dir/proptest-<label>.yaml (replacing an earlier one: a
// shrinking property reports many times, and its last report is the smallest case) and
// returns the path.
func writeScenario(dir, label string, data []byte) (string, error) {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, label)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "proptest-"+name+".yaml")
	return path, os.WriteFile(path, data, 0o644)
}
