package scenario

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

//go:embed demo.yaml
var demoYAML []byte

// DemoYAML returns the text of the demonstration scenario.
func DemoYAML() []byte { return append([]byte(nil), demoYAML...) }

// DemoScenario returns the demonstration scenario of `clusterlab demo`.
func DemoScenario() (*Scenario, error) { return Parse("demo.yaml", demoYAML) }

// Demo is the outcome of `clusterlab demo`: the demonstration scenario run under every
// kube-proxy mode this build has, arranged in sections a person can read.
type Demo struct {
	Modes    []string      `json:"modes"`
	Nodes    []NodeInfo    `json:"nodes"`
	Service  ServiceInfo   `json:"service"`
	Backends []PodInfo     `json:"backends"`
	Client   PodInfo       `json:"client"`
	DNS      string        `json:"dns"`
	Traffic  []DemoTraffic `json:"traffic"` // one per mode
	// Trace is one packet's way through the first mode, condensed to what acted on it.
	Trace      DemoTrace     `json:"trace"`
	Delete     DemoDelete    `json:"delete"`
	NodePort   DemoNodePort  `json:"nodeport"`
	Comparison *Comparison   `json:"comparison"`
	Passed     bool          `json:"passed"`
	Failures   []DemoFailure `json:"failures,omitempty"`
	sections   []string      // rendered text
	reports    map[string]*Report
}

// DemoTraffic is what the client saw under one mode.
type DemoTraffic struct {
	Mode        string         `json:"mode"`
	Via         string         `json:"via"`
	VIP         map[string]int `json:"vip"`      // backend → connections to the VIP
	DNSName     map[string]int `json:"dns_name"` // backend → connections to my-service:80
	SeenSource  string         `json:"seen_source"`
	Resolved    string         `json:"resolved"`
	Probability []Branch       `json:"branches,omitempty"`
}

// DemoTrace is one packet's rule-by-rule way.
type DemoTrace struct {
	Mode  string   `json:"mode"`
	Lines []string `json:"lines"`
	Full  string   `json:"full"`
}

// DemoDelete is what happened when a backend was deleted.
type DemoDelete struct {
	Deleted     string                    `json:"deleted"`
	Replacement string                    `json:"replacement"`
	After       map[string]map[string]int `json:"after"` // mode → backend → connections
	Endpoints   []string                  `json:"endpoints"`
}

// DemoNodePort is the NodePort reached from outside.
type DemoNodePort struct {
	NodePort int    `json:"node_port"`
	Target   string `json:"target"`
	Client   string `json:"client"`
	// Backends is mode → the backends as text ("my-app-x 3, my-app-y 2"), kept for
	// programs that read it; BackendCounts has the same as numbers.
	Backends      map[string]string         `json:"backends"`
	BackendCounts map[string]map[string]int `json:"backend_counts"` // mode → backend (ns/name) → connections
	SeenSource    map[string]string         `json:"seen_source"`    // mode → what the backend saw
}

// DemoFailure is a step that did not go as the demonstration expects.
type DemoFailure struct {
	Mode  string `json:"mode"`
	Step  string `json:"step"`
	Error string `json:"error"`
}

// DemoModes lists the modes the demo runs: every mode this build has, in the table's
// order.
func DemoModes() []string { return kubeproxy.ModeNames() }

// RunDemo runs the demonstration scenario under every mode this build has.
func RunDemo(ctx context.Context, opts Options) (*Demo, error) {
	s, err := DemoScenario()
	if err != nil {
		return nil, err
	}
	modes := DemoModes()
	cmp, err := RunModes(ctx, s, modes, opts)
	if err != nil {
		return nil, err
	}
	d := &Demo{Modes: modes, Comparison: cmp, Passed: cmp.Passed, reports: map[string]*Report{}}
	for i, m := range modes {
		d.reports[m] = cmp.Reports[i]
		for _, st := range cmp.Reports[i].Steps {
			if st.Status != "ok" {
				msg := st.Error
				for _, e := range st.Expectations {
					if !e.OK {
						msg = strings.TrimPrefix(msg+"; ", "; ") + fmt.Sprintf("expected %s %s, got %s", e.Field, e.Want, e.Got)
					}
				}
				d.Failures = append(d.Failures, DemoFailure{Mode: m, Step: st.Title, Error: msg})
			}
		}
	}
	first := cmp.Reports[0]
	d.Nodes = first.Nodes
	d.DNS = first.DNS
	for _, svc := range first.Services {
		if svc.Name == "default/my-service" {
			d.Service = svc
		}
	}
	for _, p := range first.Pods {
		switch {
		case p.Name == "default/client":
			d.Client = p
		case strings.HasPrefix(p.Name, "default/my-app-"):
			d.Backends = append(d.Backends, p)
		}
	}
	for _, m := range modes {
		rep := d.reports[m]
		t := DemoTraffic{Mode: m}
		if st := demoStep(rep, "requests to the VIP"); st != nil && st.Traffic != nil {
			t.VIP, t.Via = st.Traffic.Backends, st.Traffic.Via
			t.SeenSource = seenSummary(st.Traffic.SeenSources, st.Traffic.Client)
		}
		if st := demoStep(rep, "requests to the DNS name"); st != nil && st.Traffic != nil {
			t.DNSName, t.Resolved = st.Traffic.Backends, st.Traffic.Resolved
		}
		if st := demoStep(rep, "every branch of that packet"); st != nil && st.Traffic != nil {
			t.Probability = st.Traffic.Branches
		}
		d.Traffic = append(d.Traffic, t)
	}
	if st := demoStep(first, "one packet, rule by rule"); st != nil && st.Trace != nil {
		d.Trace = DemoTrace{Mode: modes[0], Lines: condenseTrace(st.Trace), Full: st.Trace.String()}
	}
	if st := demoStep(first, "delete a backend"); st != nil {
		d.Delete.Deleted = strings.TrimPrefix(strings.SplitN(st.Summary, " (", 2)[0], "deleted ")
		for _, det := range st.Details {
			if _, after, ok := strings.Cut(det, "replaces it with "); ok {
				d.Delete.Replacement = after
			}
		}
	}
	d.Delete.After = map[string]map[string]int{}
	for _, m := range modes {
		if st := demoStep(d.reports[m], "requests after the delete"); st != nil && st.Traffic != nil {
			d.Delete.After[m] = st.Traffic.Backends
		}
	}
	if st := demoStep(first, "endpoints after the delete"); st != nil {
		d.Delete.Endpoints = st.Details
	}
	d.NodePort = DemoNodePort{NodePort: 30007, Backends: map[string]string{}, BackendCounts: map[string]map[string]int{}, SeenSource: map[string]string{}}
	for _, m := range modes {
		st := demoStep(d.reports[m], "from outside through node-b")
		if st == nil || st.Traffic == nil {
			continue
		}
		d.NodePort.Target, d.NodePort.Client = st.Traffic.Dst, st.Traffic.Client
		d.NodePort.Backends[m] = countsText(shortNames(st.Traffic.Backends))
		counts := map[string]int{}
		for b, n := range st.Traffic.Backends {
			counts[b] = n
		}
		d.NodePort.BackendCounts[m] = counts
		d.NodePort.SeenSource[m] = seenSummary(st.Traffic.SeenSources, st.Traffic.Client)
	}
	return d, nil
}

func demoStep(rep *Report, title string) *StepResult {
	for i := range rep.Steps {
		if rep.Steps[i].Title == title {
			return &rep.Steps[i]
		}
	}
	return nil
}

// seenSummary says in words what source address the receivers saw.
func seenSummary(m map[string]int, client string) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		switch {
		case k == "client":
			parts = append(parts, "the client's own address "+client)
		case strings.HasPrefix(k, "node:"):
			parts = append(parts, "an address of "+strings.TrimPrefix(k, "node:"))
		default:
			parts = append(parts, k)
		}
	}
	if len(parts) == 0 {
		return "nothing answered"
	}
	return strings.Join(parts, ", ")
}

// shortNames drops the namespace and the ReplicaSet part of backend names.
func shortNames(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[shortPod(k)] += v
	}
	return out
}

func shortPod(name string) string {
	name = strings.TrimPrefix(name, "default/")
	if i := strings.LastIndex(name, "-"); i > 0 && strings.HasPrefix(name, "my-app-") {
		return "my-app-…-" + name[i+1:]
	}
	return name
}

// condenseTrace keeps what acted on the packet: the hooks it went through, the rules that
// matched, conntrack's verdict, NAT, routing, links and the end.
func condenseTrace(t *netsim.Trace) []string {
	var out []string
	hasRules := len(t.Find(netsim.StepRule)) > 0
	for _, s := range t.Steps {
		switch s.Kind {
		case netsim.StepHook:
			out = append(out, fmt.Sprintf("[%s] %s  %s", s.Node, s.Hook, s.Packet))
		case netsim.StepRule:
			if s.Matched == nil || !*s.Matched {
				continue
			}
			rule := s.Rule
			if rule == "" {
				continue
			}
			line := fmt.Sprintf("    %s/%s: %s", s.Table, s.Chain, ruleTail(rule))
			if s.Verdict != "" {
				line += "  => " + s.Verdict
			}
			out = append(out, line)
		case netsim.StepConntrack:
			if strings.HasPrefix(s.Verdict, "NEW") {
				out = append(out, "    conntrack: a new connection")
			}
		case netsim.StepNAT:
			if strings.Contains(s.Detail, "=>") {
				out = append(out, "    "+s.Verdict+": "+s.Detail)
			}
		case netsim.StepRoute, netsim.StepLink, netsim.StepEnd, netsim.StepNote:
			out = append(out, "    "+strings.TrimSpace(s.String()))
		case netsim.StepHandler:
			// With rules shown, a rule-based handler's verdict repeats the rule.
			if !hasRules && s.Verdict != "" && !strings.HasPrefix(s.Verdict, "continue") && !strings.HasPrefix(s.Verdict, "CONTINUE") {
				out = append(out, "    "+strings.TrimSpace(s.String()))
			}
		}
	}
	return out
}

// ruleTail drops "-A CHAIN" and the comment match from a rule, leaving what it tests
// and does.
func ruleTail(rule string) string {
	f := strings.Fields(rule)
	if len(f) >= 2 && f[0] == "-A" {
		f = f[2:]
	}
	s := strings.Join(f, " ")
	for {
		i := strings.Index(s, "-m comment --comment ")
		if i < 0 {
			break
		}
		rest := s[i+len("-m comment --comment "):]
		end := 0
		if strings.HasPrefix(rest, "\"") {
			if j := strings.Index(rest[1:], "\""); j >= 0 {
				end = j + 2
			}
		} else if j := strings.IndexByte(rest, ' '); j >= 0 {
			end = j
		} else {
			end = len(rest)
		}
		s = strings.TrimSpace(s[:i] + rest[end:])
	}
	return strings.Join(strings.Fields(s), " ")
}

// JSON returns the demo as indented JSON.
func (d *Demo) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteText writes the demo for people, section by section.
func (d *Demo) WriteText(w io.Writer) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("clusterlab demo: Kubernetes Service networking in a simulated cluster")
	p("")
	p("A 3-node cluster runs in this process, with kube-proxy on every node. On it runs the")
	p("example from the Kubernetes Services docs: three pods labelled app=MyApp serve TCP port")
	p("9376, and the Service my-service gives them one virtual IP on port 80. Everything below")
	p("is computed, packet by packet, under each kube-proxy mode this build has: %s.", strings.Join(d.Modes, ", "))
	p("")

	p("1. The cluster")
	for _, n := range d.Nodes {
		p("   node %-7s %-11s pods %s", n.Name, n.IP, n.PodCIDR)
	}
	p("   service my-service  %s %s  port %s", d.Service.Type, d.Service.ClusterIP, strings.Join(d.Service.Ports, "; "))
	for _, bk := range d.Backends {
		p("   backend %-36s %-11s on %s", strings.TrimPrefix(bk.Name, "default/"), bk.IP, bk.Node)
	}
	p("   client  %-36s %-11s on %s", "client", d.Client.IP, d.Client.Node)
	switch d.DNS {
	case "kube-dns":
		p("   kube-dns at 10.96.0.10 answers names; the client's resolv.conf points at it.")
	case "direct":
		p("   Names are answered in-process by the cluster DNS server code (kube-dns is not in this build).")
	}
	p("")

	p("2. Requests to the VIP and to the DNS name")
	p("   The client opens 90 TCP connections to %s:80 and 30 to my-service:80. Each", d.Service.ClusterIP)
	p("   line counts the connections each backend answered.")
	for _, t := range d.Traffic {
		p("   %-9s VIP: %s", t.Mode, countsText(shortNames(t.VIP)))
		p("   %-9s DNS: %s", "", countsText(shortNames(t.DNSName)))
		p("   %-9s the backends saw the source as %s", "", t.SeenSource)
	}
	if len(d.Traffic) > 0 && d.Traffic[0].Resolved != "" {
		p("   (%s)", d.Traffic[0].Resolved)
	}
	for _, t := range d.Traffic {
		if info, ok := kubeproxy.Lookup(kubeproxy.Mode(t.Mode)); ok && len(info.Demo) > 0 {
			p("   %s: %s", t.Mode, info.Demo[0])
			for _, l := range info.Demo[1:] {
				p("   %s", l)
			}
		}
	}
	if len(d.Traffic) > 0 && len(d.Traffic[0].Probability) > 0 {
		p("   Following every branch of one new packet under %s gives each backend's probability:", d.Traffic[0].Mode)
		for _, br := range d.Traffic[0].Probability {
			p("     p=%.4f  %s", br.Probability, shortOutcome(br))
		}
	}
	p("")

	p("3. One packet, rule by rule (%s mode)", d.Trace.Mode)
	p("   The client's first SYN to the VIP, through the rules that acted on it (rules that did")
	p("   not match are left out; `clusterlab trace` shows them all, and draws the path):")
	for _, l := range d.Trace.Lines {
		p("   %s", l)
	}
	p("")

	p("4. A backend deleted: traffic moves on")
	p("   kubectl delete pod %s (grace period 30s). The pod keeps running while it", strings.TrimPrefix(d.Delete.Deleted, "default/"))
	p("   terminates, but its endpoint turns terminating (not ready), every kube-proxy drops it")
	p("   from new connections, and the ReplicaSet starts %s.", d.Delete.Replacement)
	p("   EndpointSlice of my-service now:")
	for _, e := range d.Delete.Endpoints {
		p("     %s", e)
	}
	p("   The next 60 connections:")
	for _, m := range d.Modes {
		p("   %-9s %s", m, countsText(shortNames(d.Delete.After[m])))
	}
	p("")

	p("5. A NodePort from outside")
	p("   my-service becomes type NodePort with nodePort 30007 (kubectl apply). A laptop outside")
	p("   the cluster (%s) connects 30 times to node-b at %s.", d.NodePort.Client, d.NodePort.Target)
	for _, m := range d.Modes {
		p("   %-9s answered by %s", m, d.NodePort.Backends[m])
		p("   %-9s the backends saw the source as %s", "", d.NodePort.SeenSource[m])
	}
	p("   With externalTrafficPolicy: Cluster a NodePort may forward to a pod on another node,")
	p("   so the node masquerades the packet: the pod sees the node's address, not the laptop's.")
	p("   (externalTrafficPolicy: Local keeps the client's address and only serves local pods:")
	p("   see examples/nodeport-local.)")
	p("")

	if len(d.Failures) > 0 {
		p("Some steps did not go as the demonstration expects:")
		for _, f := range d.Failures {
			p("   %s: %s: %s", f.Mode, f.Step, f.Error)
		}
		p("")
	}
	p("Next:")
	p("   clusterlab run testdata/scenarios/quickstart.yaml      a scenario file, step by step")
	p("   clusterlab run --modes %s testdata/scenarios/session-affinity.yaml", strings.Join(d.Modes, ","))
	p("   clusterlab trace testdata/scenarios/clusterip-trace.yaml --from pod:default/client --to my-service:80 --svg path.svg")
	p("   go run ./examples/quickstart                           the library in 30 lines")
	_, err := io.WriteString(w, b.String())
	return err
}

func shortOutcome(b Branch) string {
	if b.Pod != "" {
		return "to " + shortPod(b.Pod)
	}
	return b.Outcome
}
