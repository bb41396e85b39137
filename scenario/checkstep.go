package scenario

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// stepCheck validates the action of one step: steps[i], at path sp. Its validators
// append to errs in the order the fields are checked.
type stepCheck struct {
	s         *Scenario
	p         *plan
	st        *Step
	i         int
	sp        string
	nodes     map[string]bool // p.nodes as a set
	externals []string        // the names of cluster.external_hosts
	errs      *[]error
}

// stepValidators holds one validator per action (a step's YAML key). advance and heal
// have none: their values are checked when the file is decoded.
var stepValidators = map[string]func(*stepCheck){
	"connect":           (*stepCheck).traffic,
	"send":              (*stepCheck).traffic,
	"dns":               (*stepCheck).dns,
	"check":             (*stepCheck).check,
	"apply":             (*stepCheck).apply,
	"delete":            (*stepCheck).delete,
	"delete_pod":        (*stepCheck).deletePod,
	"kill_pod":          (*stepCheck).killPod,
	"set_ready":         (*stepCheck).setReady,
	"scale":             (*stepCheck).scale,
	"evict":             (*stepCheck).evict,
	"set_phase":         (*stepCheck).setPhase,
	"set_health":        (*stepCheck).setHealth,
	"fault":             (*stepCheck).fault,
	"partition":         (*stepCheck).partition,
	"kill_node":         (*stepCheck).killNode,
	"sync":              (*stepCheck).sync,
	"restart_proxy":     func(c *stepCheck) { c.node("restart_proxy", c.st.RestartProxy, true) },
	"restart_apiserver": (*stepCheck).restartAPIServer,
	"node_settings":     (*stepCheck).nodeSettings,
	"update_status":     (*stepCheck).updateStatus,
}

// checkStep validates a step that has exactly one action, with that action's validator.
func (s *Scenario) checkStep(p *plan, st *Step, i int, sp string, nodes map[string]bool, externals []string, errs *[]error) {
	if validate := stepValidators[st.Action()]; validate != nil {
		validate(&stepCheck{s: s, p: p, st: st, i: i, sp: sp, nodes: nodes, externals: externals, errs: errs})
	}
}

// fail records an error about the field f of the step.
func (c *stepCheck) fail(f, format string, args ...any) {
	*c.errs = append(*c.errs, c.s.errorf(c.sp+"."+f, format, args...))
}

// place checks a source or a link: pod:NS/NAME, node:NAME (a node of the cluster) or
// external:NAME (one of cluster.external_hosts).
func (c *stepCheck) place(f, v string) {
	pl, err := parsePlace(v, false)
	if err != nil {
		c.fail(f, "%v", err)
		return
	}
	switch pl.kind {
	case "node":
		if !c.nodes[pl.name] {
			c.fail(f, "no node %q (the nodes are %s)", pl.name, strings.Join(c.p.nodes, ", "))
		}
	case "external":
		if !slices.Contains(c.externals, pl.name) {
			c.fail(f, "no external host %q: add it under cluster.external_hosts", pl.name)
		}
	}
}

// node checks a node name, or "all" where allOK.
func (c *stepCheck) node(f, v string, allOK bool) {
	if v == "all" && allOK {
		return
	}
	if !c.nodes[v] {
		c.fail(f, "no node %q (the nodes are %s%s)", v, strings.Join(c.p.nodes, ", "), map[bool]string{true: `, or "all"`}[allOK])
	}
}

// target checks a destination, the nodes it names, and that a DNS name has DNS to ask.
func (c *stepCheck) target(f, v string, portOptional bool) {
	t, err := parseTarget(v, portOptional)
	if err != nil {
		c.fail(f, "%v", err)
		return
	}
	if t.kind == "nodeport" {
		c.node(f, t.node, false)
	}
	if t.kind == "node" {
		c.node(f, t.host, false)
	}
	if t.kind == "name" && c.p.dns == "off" {
		c.fail(f, "%q is a DNS name, but cluster.dns is off", v)
	}
}

// pods checks which pods a pod action picks: a name or pattern, or a label selector.
func (c *stepCheck) pods(f string, a *PodAction) {
	switch {
	case a.Pod == "" && a.Selector == "":
		c.fail(f, "want pod: NAMESPACE/NAME (or a pattern such as default/web-*) or selector: LABELS")
	case a.Pod != "" && a.Selector != "":
		c.fail(f, "pod and selector: give one")
	case a.Selector != "":
		if _, err := labels.Parse(a.Selector); err != nil {
			c.fail(f+".selector", "%v", err)
		}
	default:
		if _, err := path.Match(a.Pod, ""); err != nil {
			c.fail(f+".pod", "bad pattern %q", a.Pod)
		}
	}
	if a.Count < 0 {
		c.fail(f+".count", "want zero (all) or more, got %d", a.Count)
	}
}

// traffic validates a connect or send step.
func (c *stepCheck) traffic() {
	st := c.st
	t, f := st.Connect, "connect"
	if t == nil {
		t, f = st.Send, "send"
	}
	c.place(f+".from", t.From)
	c.target(f+".to", t.To, false)
	if tg, err := parseTarget(t.To, false); err == nil && tg.kind == "name" && !strings.HasPrefix(t.From, "pod:") {
		c.fail(f+".to", "%q is a DNS name: only pods resolve cluster names (use service:NS/NAME:PORT from nodes and external hosts)", t.To)
	}
	proto := strings.ToLower(t.Proto)
	switch proto {
	case "", "tcp", "udp":
	case "icmp":
		if t.Via == "netstack" {
			c.fail(f+".proto", "icmp traffic needs via: probe (echo requests are probes)")
		}
	case "sctp":
		if t.Via == "netstack" {
			c.fail(f+".proto", "sctp traffic needs via: probe (netstack has no SCTP sockets)")
		}
	default:
		c.fail(f+".proto", "want tcp, udp, sctp or icmp, got %q", t.Proto)
	}
	if t.Count < 0 || t.Count > 100000 {
		c.fail(f+".count", "want 1-100000, got %d", t.Count)
	}
	if t.SrcPort < 0 || t.SrcPort > 65535 {
		c.fail(f+".src_port", "want 1-65535, got %d", t.SrcPort)
	}
	if t.AllBranches {
		c.allBranches(f, t)
	}
	if t.Packet != nil {
		c.crafted(f, t)
	}
	if t.HTTP != nil {
		c.httpGet(f, t)
	}
	c.ctStateExpect()
	switch t.Via {
	case "", "probe":
	case "netstack":
		if st.Send != nil {
			c.fail(f+".via", "send steps are single synthetic packets: via probe only")
		}
		if t.Trace {
			c.fail(f+".trace", "traces come from probes: remove trace or use via: probe")
		}
	default:
		c.fail(f+".via", "want probe or netstack, got %q", t.Via)
	}
}

// allBranches checks what all_branches does not combine with.
func (c *stepCheck) allBranches(f string, t *Traffic) {
	if c.st.Connect != nil {
		c.fail(f+".all_branches", "every branch is followed for single packets: use a send step")
	}
	if t.Via == "netstack" {
		c.fail(f+".all_branches", "branches are followed by probes: remove via: netstack")
	}
	if e := c.st.Expect; e != nil && (e.Spread != nil || e.MinSuccess != nil) {
		c.fail("expect", "with all_branches each outcome counts once: spread and min_success do not apply")
	}
}

// dns validates a dns step.
func (c *stepCheck) dns() {
	q := c.st.DNS
	if c.p.dns == "off" {
		c.fail("dns", "cluster.dns is off")
	}
	if _, err := parsePlace(q.From, true); err != nil {
		c.fail("dns.from", "%v", err)
	}
	if q.Name == "" || !validDNSName(q.Name) {
		c.fail("dns.name", "want a DNS name, got %q", q.Name)
	}
	if q.Type != "" && !slices.Contains(dnsTypes, strings.ToUpper(q.Type)) && !strings.EqualFold(q.Type, "both") {
		c.fail("dns.type", "want one of %s or both, got %q", strings.Join(dnsTypes, ", "), q.Type)
	}
	if len(q.Options) > 0 && q.Type != "" && !slices.Contains([]string{"A", "AAAA", "BOTH"}, strings.ToUpper(q.Type)) {
		c.fail("dns.options", "resolv.conf options go with types A, AAAA and both, not %s", q.Type)
	}
	for i, o := range q.Options {
		if err := checkResolvOption(o); err != nil {
			c.fail(fmt.Sprintf("dns.options[%d]", i), "%v", err)
		}
	}
	if tg := q.Together; tg != nil {
		if !strings.EqualFold(q.Type, "both") && len(q.Options) == 0 {
			c.fail("dns.together", "packets in flight together go with type both or options (the stub resolver's A and AAAA)")
		}
		if c.p.dns == "direct" {
			c.fail("dns.together", "cluster.dns is direct: the queries cross no node (use kube-dns)")
		}
		if tg.Count < 0 || tg.Count > 8 {
			c.fail("dns.together.count", "want 1 to 8 packets, got %d", tg.Count)
		}
		if tg.Window != nil && *tg.Window <= 0 {
			c.fail("dns.together.window", "want a positive duration, got %s", tg.Window)
		}
		if tg.Random && len(tg.Steps) > 0 {
			c.fail("dns.together.steps", "steps and random exclude each other")
		}
		if !tg.Random && tg.Seed != 0 {
			c.fail("dns.together.seed", "seed goes with random: true")
		}
		count := tg.Count
		if count == 0 {
			count = 2
		}
		for i, p := range tg.Steps {
			if p < 0 || p >= count {
				c.fail(fmt.Sprintf("dns.together.steps[%d]", i), "want a packet from 0 to %d, got %d", count-1, p)
			}
		}
	}
}

// check validates a check step: one of conntrack, endpoints, conntrack_stats or
// health_check.
func (c *stepCheck) check() {
	ck := c.st.Check
	n := 0
	for _, set := range []bool{ck.Conntrack != nil, ck.Endpoints != nil, ck.ConntrackStats != nil, ck.HealthCheck != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		c.fail("check", "one check per step: conntrack, endpoints, conntrack_stats or health_check")
		return
	}
	switch {
	case ck.Conntrack != nil:
		c.conntrack(ck.Conntrack)
	case ck.Endpoints != nil:
		if ns, n, ok := strings.Cut(ck.Endpoints.Service, "/"); !ok || ns == "" || n == "" {
			c.fail("check.endpoints.service", "want NAMESPACE/NAME, got %q", ck.Endpoints.Service)
		}
	case ck.ConntrackStats != nil:
		c.node("check.conntrack_stats.node", ck.ConntrackStats.Node, true)
	case ck.HealthCheck != nil:
		if ns, n, ok := strings.Cut(ck.HealthCheck.Service, "/"); !ok || ns == "" || n == "" {
			c.fail("check.health_check.service", "want NAMESPACE/NAME, got %q", ck.HealthCheck.Service)
		}
		c.node("check.health_check.node", ck.HealthCheck.Node, false)
	default:
		c.fail("check", "want conntrack:, endpoints:, conntrack_stats: or health_check:")
	}
}

// conntrack validates a check of a node's conntrack table.
func (c *stepCheck) conntrack(ct *ConntrackCheck) {
	c.node("check.conntrack.node", ct.Node, true)
	switch strings.ToLower(ct.Proto) {
	case "", "tcp", "udp", "sctp", "icmp":
	default:
		c.fail("check.conntrack.proto", "want tcp, udp, sctp or icmp, got %q", ct.Proto)
	}
	if ct.Dst != "" {
		c.target("check.conntrack.dst", ct.Dst, true)
		if t, err := parseTarget(ct.Dst, true); err == nil && t.kind == "name" {
			c.fail("check.conntrack.dst", "names are not resolved here: use an IP, service:NS/NAME:PORT, nodeport:... or pod:...")
		}
	}
	if ct.ReplySrc != "" {
		if _, err := parseTarget(ct.ReplySrc, true); err != nil {
			c.fail("check.conntrack.reply_src", "%v", err)
		}
	}
	if ct.Src != "" {
		if _, err := parseAddrRef(ct.Src); err != nil {
			c.fail("check.conntrack.src", "%v", err)
		}
	}
	if ct.SrcPort < 0 || ct.SrcPort > 65535 {
		c.fail("check.conntrack.src_port", "want 1-65535, got %d", ct.SrcPort)
	}
}

// apply loads an apply step's manifests, which the run applies at that step.
func (c *stepCheck) apply() {
	l := newDryRun(c.p.cfg, false) // on its own: the state of the run at the step is not known here
	if len(c.st.Apply) == 0 {
		c.fail("apply", "want at least one manifest")
	}
	// A rejection the step expects comes from the API server when the step runs: its
	// Services are not validated now.
	l.rejectionExpected = c.st.Expect != nil && c.st.Expect.Rejected != ""
	if err := c.s.loadManifests(c.st.Apply, c.sp+".apply", c.p.cfg.Seed, l); err != nil {
		*c.errs = append(*c.errs, err)
	}
	l.apiServer = nil // its work is done
	if l.rejectionExpected && len(l.workloads) > 0 {
		c.fail("apply", "an apply that expects a rejection is applied all or nothing: Deployments and ReplicaSets (whose pods are created one by one) go in an apply step of their own")
	}
	c.p.applies[c.i] = l
}

// delete validates the objects a delete step names.
func (c *stepCheck) delete() {
	for j, r := range c.st.Delete {
		f := fmt.Sprintf("delete[%d]", j)
		if r.Selector != "" || r.Namespace != "" {
			c.deleteCollection(f, r)
			continue
		}
		switch r.Kind {
		case "Service", "Pod", "Endpoints", "EndpointSlice", "Deployment", "ReplicaSet", "NetworkPolicy":
			if ns, n, ok := strings.Cut(r.Name, "/"); !ok || ns == "" || n == "" {
				c.fail(f+".name", "want NAMESPACE/NAME, got %q", r.Name)
			}
		case "Namespace", "Node":
			if r.Name == "" || strings.Contains(r.Name, "/") {
				c.fail(f+".name", "want a %s name, got %q", r.Kind, r.Name)
			}
		default:
			c.fail(f+".kind", "want Service, Pod, Endpoints, EndpointSlice, NetworkPolicy, Deployment, ReplicaSet, Namespace or Node, got %q", r.Kind)
		}
	}
}

func (c *stepCheck) deletePod() { c.pods("delete_pod", c.st.DeletePod) }

func (c *stepCheck) killPod() {
	c.pods("kill_pod", c.st.KillPod)
	if c.st.KillPod.Grace != 0 {
		c.fail("kill_pod.grace", "a killed pod dies at once; grace belongs to delete_pod")
	}
}

func (c *stepCheck) setReady() { c.pods("set_ready", &c.st.SetReady.PodAction) }

func (c *stepCheck) evict() {
	c.pods("evict", c.st.Evict)
	if c.st.Evict.Grace != 0 {
		c.fail("evict.grace", "an eviction uses each pod's terminationGracePeriodSeconds; grace belongs to delete_pod")
	}
}

func (c *stepCheck) setPhase() {
	a := c.st.SetPhase
	c.pods("set_phase", &a.PodAction)
	if a.Grace != 0 {
		c.fail("set_phase.grace", "a pod that ends its run has no grace period; grace belongs to delete_pod")
	}
	if a.Phase != "Succeeded" && a.Phase != "Failed" {
		c.fail("set_phase.phase", "want Succeeded or Failed, got %q", a.Phase)
	}
}

func (c *stepCheck) setHealth() {
	a := c.st.SetHealth
	c.pods("set_health", &a.PodAction)
	if a.Grace != 0 {
		c.fail("set_health.grace", "grace belongs to delete_pod")
	}
	if a.HTTPStatus != 0 && (a.HTTPStatus < 100 || a.HTTPStatus > 599) {
		c.fail("set_health.http_status", "want an HTTP status (100-599), got %d", a.HTTPStatus)
	}
	if a.HTTPStatus == 0 && a.Listening == nil {
		c.fail("set_health", "want http_status (200 healthy, 500 failing) or listening (true or false)")
	}
}

func (c *stepCheck) scale() {
	sc := c.st.Scale
	if (sc.Deployment == "") == (sc.ReplicaSet == "") {
		c.fail("scale", "want deployment: NS/NAME or replicaset: NS/NAME (one of them)")
	}
	if sc.Replicas < 0 || sc.Replicas > 1000 {
		c.fail("scale.replicas", "want 0-1000, got %d", sc.Replicas)
	}
}

func (c *stepCheck) fault() {
	f := c.st.Fault
	c.place("fault.link", f.Link)
	for _, x := range []struct {
		name string
		v    float64
	}{{"loss", f.Loss}, {"duplicate", f.Duplicate}, {"reorder", f.Reorder}} {
		if x.v < 0 || x.v > 1 {
			c.fail("fault."+x.name, "want a probability between 0 and 1 (or a percentage), got %v", x.v)
		}
	}
}

// partition checks that the groups name nodes (or "external"), each in one group.
func (c *stepCheck) partition() {
	seen := map[string]bool{}
	for j, g := range c.st.Partition {
		for k, n := range g {
			f := fmt.Sprintf("partition[%d][%d]", j, k)
			if n != "external" && !c.nodes[n] {
				c.fail(f, "no node %q (the nodes are %s, or \"external\")", n, strings.Join(c.p.nodes, ", "))
			}
			if seen[n] {
				c.fail(f, "%q is in two groups", n)
			}
			seen[n] = true
		}
	}
}

func (c *stepCheck) killNode() { c.node("kill_node", c.st.KillNode, false) }

// sync checks that a sync step does one thing, on nodes that exist.
func (c *stepCheck) sync() {
	sy := c.st.Sync
	n := 0
	for _, set := range []bool{sy.Pause != "", sy.Resume != "", sy.Now, sy.Delay != nil, sy.RulesOnly != "", sy.HoldConntrack != "", sy.CleanConntrack != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		c.fail("sync", "want exactly one of pause, resume, now, delay, rules_only, hold_conntrack, clean_conntrack")
	}
	for _, fv := range [][2]string{{"rules_only", sy.RulesOnly}, {"hold_conntrack", sy.HoldConntrack}, {"clean_conntrack", sy.CleanConntrack}} {
		if fv[1] != "" {
			c.node("sync."+fv[0], fv[1], true)
		}
	}
	if sy.Pause != "" {
		c.node("sync.pause", sy.Pause, true)
	}
	if sy.Resume != "" {
		c.node("sync.resume", sy.Resume, true)
	}
	if sy.Delay != nil {
		c.node("sync.delay.node", sy.Delay.Node, true)
	}
}

func (c *stepCheck) nodeSettings() {
	c.node("node_settings.node", c.st.NodeSettings.Node, true)
	if err := c.st.NodeSettings.NodeSettings.check(c.s, c.sp+".node_settings"); err != nil {
		*c.errs = append(*c.errs, err)
	}
}

// httpGet validates a connect step's http: TCP connections from real sockets.
func (c *stepCheck) httpGet(f string, t *Traffic) {
	if c.st.Send != nil {
		c.fail(f+".http", "HTTP requests go over connections: use a connect step")
	}
	if p := strings.ToLower(t.Proto); p != "" && p != "tcp" {
		c.fail(f+".http", "HTTP goes over tcp, not %s", t.Proto)
	}
	if t.Via == "probe" {
		c.fail(f+".http", "HTTP needs real sockets: remove via: probe (http implies via: netstack)")
	}
	if p := t.HTTP.Path; p != "" && (!strings.HasPrefix(p, "/") || strings.ContainsAny(p, " \r\n")) {
		c.fail(f+".http.path", "want an absolute path such as /healthz, got %q", p)
	}
	if strings.ContainsAny(t.HTTP.Host, " \r\n") {
		c.fail(f+".http.host", "want a host name, got %q", t.HTTP.Host)
	}
}

// deleteCollection validates a delete by label selector.
func (c *stepCheck) deleteCollection(f string, r ObjectRef) {
	switch r.Kind {
	case "Service", "Pod", "Endpoints", "EndpointSlice", "NetworkPolicy":
	default:
		c.fail(f+".kind", "a delete by selector deletes Services, Pods, Endpoints, EndpointSlices or NetworkPolicies, got %q", r.Kind)
	}
	if r.Name != "" {
		c.fail(f, "name and selector: give one")
	}
	if r.Selector == "" {
		c.fail(f+".selector", "namespace goes with selector (a label selector such as app=web)")
	} else if _, err := labels.Parse(r.Selector); err != nil {
		c.fail(f+".selector", "%v", err)
	}
}

// updateStatus validates an update_status step.
func (c *stepCheck) updateStatus() {
	u := c.st.UpdateStatus
	if ns, n, ok := strings.Cut(u.Service, "/"); !ok || ns == "" || n == "" {
		c.fail("update_status.service", "want NAMESPACE/NAME, got %q", u.Service)
	}
	if u.LoadBalancerIngress == nil {
		c.fail("update_status", "want load_balancer_ingress: [IP, ...] (an empty list clears it)")
	}
	for i, v := range u.LoadBalancerIngress {
		if _, err := parseIngress(v); err != nil {
			c.fail(fmt.Sprintf("update_status.load_balancer_ingress[%d]", i), "%v", err)
		}
	}
}
