package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"
)

// Options configure a run.
type Options struct {
	// Mode overrides cluster.proxy.mode ("" keeps the scenario's).
	Mode string
	// Version overrides cluster.proxy.version ("" keeps the scenario's).
	Version string
	// Progress, when set, is called before each step (for a progress line).
	Progress func(step, total int, title string)
	// Datapath, when set, carries the traffic instead of the simulation (see
	// Datapath); Run starts it on the built cluster and closes it at the end.
	Datapath Datapath
	// DatapathState keeps the data path's state (Datapath.State) after each traffic
	// and check step in the step's result.
	DatapathState bool
}

// Run runs the scenario: it builds the cluster, applies the manifests, lets every proxy
// sync, and runs the steps in order on the virtual clock. The error is for scenarios
// that cannot run (a bad field, a manifest the API server rejects, a mode this build
// lacks: IsInputError tells those apart); a step that fails or cannot be carried out is
// recorded in the report (Status failed or error) and the run goes on.
func Run(ctx context.Context, s *Scenario, opts Options) (*Report, error) {
	p, err := s.prepareFor(opts)
	if err != nil {
		return nil, err
	}
	r, err := p.start()
	if err != nil {
		return nil, err
	}
	defer r.close()
	if dp := opts.Datapath; dp != nil {
		defer dp.Close()
		if err := r.startDatapath(ctx, dp); err != nil {
			return nil, err
		}
		r.keepState = opts.DatapathState
	}
	for i := range s.Steps {
		if err := ctx.Err(); err != nil {
			return r.rep, err
		}
		if opts.Progress != nil {
			opts.Progress(i+1, len(s.Steps), s.Steps[i].Title())
		}
		r.runStep(ctx, i)
	}
	r.rep.Passed = r.rep.Failed == 0
	return r.rep, nil
}

// runner is one run in progress.
type runner struct {
	p         *plan
	s         *Scenario
	c         *cluster.Cluster
	start     time.Time
	res       *resolver
	workloads map[string]*workload // "Deployment ns/name", "ReplicaSet ns/name"
	rep       *Report
	errSeen   int
	lastProbe []netsim.ProbeResult // Trace's outcomes
	// podIPs remembers every pod's last address (NS/NAME → IP), so that a step can
	// still name a pod after it is deleted: a stale conntrack entry's reply_src is the
	// address of a pod that is gone.
	podIPs map[string]netip.Addr
	// holding names the nodes whose kube-proxy conntrack cleanup waits
	// (sync: hold_conntrack) until clean_conntrack.
	holding map[string]bool
	// liveTraffic makes connect steps that do not say how use real sockets (netstack)
	// instead of probes (Session.LiveTraffic).
	liveTraffic bool
	// relay carries host_services' connections to the real servers (nil: none).
	relay *hostRelay
	// dp carries the traffic when it is not the simulation's (Options.Datapath);
	// keepState records its state after traffic and check steps.
	dp        Datapath
	keepState bool
}

func (p *plan) start() (*runner, error) {
	s := p.s
	cfg := p.cfg
	cfg.Proxy = kubeproxy.Factory(p.proxyOpts)
	c, err := cluster.New(cfg)
	if err != nil {
		return nil, &Error{File: s.File, Line: s.lineOf("cluster"), Field: "cluster", Msg: err.Error()}
	}
	r := &runner{p: p, s: s, c: c, start: c.Clock().Now(), workloads: map[string]*workload{}, podIPs: map[string]netip.Addr{}, holding: map[string]bool{}}
	ok := false
	defer func() {
		if !ok {
			r.close()
		}
	}()
	for name, d := range p.delays {
		c.Node(name).SetSyncDelay(d)
	}
	switch p.dns {
	case "direct":
		if r.res, err = newDirectResolver(c); err != nil {
			return nil, err
		}
	case "kube-dns":
		if r.res, err = installKubeDNS(c); err != nil {
			return nil, fmt.Errorf("kube-dns: %w", err)
		}
	}
	for i, h := range s.Cluster.ExternalHosts {
		var ip netip.Addr
		if h.IP != "" {
			ip = netip.MustParseAddr(h.IP)
		}
		if _, err := c.AddExternalHost(h.Name, ip); err != nil {
			f := fmt.Sprintf("cluster.external_hosts[%d]", i)
			return nil, s.errorf(f, "%v", err)
		}
	}
	if r.relay, err = p.startHostServices(c); err != nil {
		return nil, s.errorf("host_services", "%v", err)
	}
	objs := append([]runtime.Object(nil), p.manifests.objects...)
	for _, w := range p.manifests.workloads {
		w := w.clone()
		r.workloads[w.kind+" "+w.key()] = w
		for _, pod := range w.initial {
			objs = append(objs, pod)
		}
	}
	objs, notes := service.NameDerivedClusterIPs(objs, c.Config().ServiceCIDRs, clusterIPsInUse(c))
	p.notes = append(p.notes, derivedNote(notes)...)
	if err := c.Apply(objs...); err != nil {
		return nil, s.errorf("manifests", "the API server rejects the manifests: %v", err)
	}
	c.SyncProxies()
	if errs := c.Errors(); len(errs) > 0 {
		return nil, s.errorf("manifests", "starting the cluster: %v", errors.Join(errs...))
	}
	r.errSeen = len(c.Errors())
	r.rememberPods()
	r.rep = r.newReport()
	ok = true
	return r, nil
}

func (r *runner) close() {
	for _, n := range r.c.Nodes() {
		kubeproxy.ForgetConntrackCleanup(n.Conntrack())
	}
	r.res.close()
	r.relay.close()
	r.c.Close()
}

func (w *workload) clone() *workload {
	c := *w
	c.pods = append([]string(nil), w.pods...)
	c.used = map[string]bool{}
	for k, v := range w.used {
		c.used[k] = v
	}
	return &c
}

func (r *runner) newReport() *Report {
	p := r.p
	rep := &Report{Name: r.s.Name, File: r.s.File, Mode: string(p.mode), Version: p.version, DNS: p.dns, Seed: p.cfg.Seed, Notes: p.notes}
	rep.Scheduler = p.info.Scheduler(p.proxyOpts)
	for _, n := range r.c.Nodes() {
		ni := NodeInfo{Name: n.Name(), IP: n.IP().String(), ProxyName: n.Config().ProxyName}
		if cidrs := n.PodCIDRs(); len(cidrs) > 0 {
			ni.PodCIDR = cidrs[0].String()
		}
		if obj, ok := r.c.Store().GetNode(n.Name()); ok {
			ni.Zone = obj.Labels[corev1.LabelTopologyZone]
		}
		rep.Nodes = append(rep.Nodes, ni)
	}
	for _, svc := range r.c.Store().ListServices() {
		rep.Services = append(rep.Services, serviceInfo(svc))
	}
	for _, pod := range r.c.Store().ListPods() {
		rep.Pods = append(rep.Pods, PodInfo{Name: pod.Namespace + "/" + pod.Name, Node: pod.Spec.NodeName, IP: pod.Status.PodIP})
	}
	return rep
}

func serviceInfo(svc *corev1.Service) ServiceInfo {
	si := ServiceInfo{Name: svc.Namespace + "/" + svc.Name, Type: string(svc.Spec.Type), ClusterIP: svc.Spec.ClusterIP}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		si.ClusterIP = svc.Spec.ExternalName
	}
	for _, sp := range svc.Spec.Ports {
		s := fmt.Sprintf("%d/%s -> %s", sp.Port, sp.Protocol, sp.TargetPort.String())
		if sp.Name != "" {
			s = sp.Name + " " + s
		}
		if sp.NodePort != 0 {
			s += fmt.Sprintf(", node port %d", sp.NodePort)
		}
		si.Ports = append(si.Ports, s)
	}
	return si
}

func (r *runner) elapsed() time.Duration { return r.c.Clock().Now().Sub(r.start) }

func fmtElapsed(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	return d.Round(time.Millisecond).String()
}

// runStep runs one step and records its result.
func (r *runner) runStep(ctx context.Context, i int) {
	st := &r.s.Steps[i]
	sp := fmt.Sprintf("steps[%d]", i)
	res := StepResult{Index: i + 1, Title: st.Title(), Action: st.Action(), Line: r.s.lineOf(sp), Status: "ok"}
	res.Time = fmtElapsed(r.elapsed())
	var dpNote string
	if r.dp != nil {
		var refused bool
		if refused, dpNote = r.datapathRefused(st, &res); refused {
			r.rep.Steps = append(r.rep.Steps, res)
			return
		}
	}
	if st.At != nil {
		target := st.At.D()
		now := r.elapsed()
		if target < now {
			// Only netstack traffic moves the clock on its own (while it waits).
			res.Status, res.Error = "error", fmt.Sprintf("at %s: the clock is already at %s (netstack traffic waited on the virtual clock before this step)", st.At, fmtElapsed(now))
			r.rep.Failed++
			r.rep.Steps = append(r.rep.Steps, res)
			return
		}
		r.c.Clock().Advance(target - now)
		res.Time = fmtElapsed(r.elapsed())
		if r.dp != nil {
			if n := r.dp.Advance(ctx, target-now); n != "" {
				res.Details = append(res.Details, n)
			}
		}
	}
	r.rememberPods()
	defer r.rememberPods()
	var err error
	switch {
	case st.Connect != nil:
		err = r.traffic(ctx, st, st.Connect, true, &res)
	case st.Send != nil:
		err = r.traffic(ctx, st, st.Send, false, &res)
	case st.DNS != nil:
		err = r.dnsStep(ctx, st, &res)
	case st.Check != nil:
		err = r.check(st, &res)
	case st.Apply != nil:
		err = r.apply(i, &res)
	case st.Delete != nil:
		err = r.delete(st.Delete, &res)
	case st.DeletePod != nil:
		err = r.deletePods(st.DeletePod, &res)
	case st.KillPod != nil:
		err = r.killPods(st.KillPod, &res)
	case st.SetReady != nil:
		err = r.setReady(st.SetReady, &res)
	case st.Scale != nil:
		err = r.scale(st.Scale, &res)
	case st.Evict != nil:
		err = r.evictPods(st.Evict, &res)
	case st.SetPhase != nil:
		err = r.setPhase(st.SetPhase, &res)
	case st.SetHealth != nil:
		err = r.setHealth(st.SetHealth, &res)
	case st.Advance != nil:
		r.c.Clock().Advance(st.Advance.D())
		res.Summary = "the clock is now at t=" + fmtElapsed(r.elapsed())
		if r.dp != nil {
			if n := r.dp.Advance(ctx, st.Advance.D()); n != "" {
				res.Details = append(res.Details, n)
			}
		}
	case st.Fault != nil:
		err = r.fault(st.Fault, &res)
	case st.Partition != nil:
		err = r.c.Partition(st.Partition...)
		res.Summary = "nodes in different groups cannot reach each other"
	case st.Heal:
		r.c.Heal()
		res.Summary = "the cluster network is whole again"
	case st.KillNode != "":
		err = r.c.KillNode(st.KillNode)
		res.Summary = "node " + st.KillNode + " is down with its pods; its objects stay in the API"
	case st.Sync != nil:
		err = r.sync(st.Sync, &res)
	case st.RestartProxy != "":
		err = r.restartProxy(st.RestartProxy, &res)
	case st.RestartAPIServer != nil:
		err = r.restartAPIServer(st, &res)
	case st.UpdateStatus != nil:
		err = r.updateStatus(st.UpdateStatus, &res)
	case st.NodeSettings != nil:
		r.forNodes(st.NodeSettings.Node, func(n *cluster.Node) {
			n.UpdateSettings(func(s *netsim.NodeSettings) { st.NodeSettings.NodeSettings.applyTo(s) })
			if f := st.NodeSettings.NodeSettings.NetworkPolicy; f != nil {
				_ = n.SetNetworkPolicy(*f) // checked when the file was loaded
			}
			n.Conntrack().SetSettings(n.Settings().Conntrack)
		})
		res.Summary = "settings changed on " + st.NodeSettings.Node
	}
	if r.dp != nil {
		err = r.datapathAfter(ctx, st, &res, dpNote, err)
	}
	if err != nil {
		res.Status = "error"
		res.Error = err.Error()
	}
	for _, e := range res.Expectations {
		if !e.OK && res.Status == "ok" {
			res.Status = "failed"
		}
	}
	if errs := r.c.Errors(); len(errs) > r.errSeen {
		for _, e := range errs[r.errSeen:] {
			res.Details = append(res.Details, "background: "+e.Error())
		}
		r.errSeen = len(errs)
	}
	if res.Status != "ok" {
		r.rep.Failed++
	}
	r.rep.Steps = append(r.rep.Steps, res)
}

// rememberPods records the address of every pod that has one (see runner.podIPs).
func (r *runner) rememberPods() {
	for _, p := range r.c.Store().ListPods() {
		if ip, err := netip.ParseAddr(p.Status.PodIP); err == nil {
			r.podIPs[p.Namespace+"/"+p.Name] = ip
		}
	}
}

func (r *runner) forNodes(name string, f func(n *cluster.Node)) {
	for _, n := range r.c.Nodes() {
		if name == "all" || n.Name() == name {
			f(n)
		}
	}
}

// ---- resolving names of things ----

func splitKey(key string) (string, string) {
	ns, n, ok := strings.Cut(key, "/")
	if !ok {
		return "default", key
	}
	return ns, n
}

// servicePort finds a service port by number or name.
func (r *runner) servicePort(key, port string) (*corev1.Service, *corev1.ServicePort, error) {
	ns, n := splitKey(key)
	svc, ok := r.c.Store().GetService(ns, n)
	if !ok {
		return nil, nil, fmt.Errorf("no service %s/%s", ns, n)
	}
	if len(svc.Spec.Ports) == 0 {
		return svc, nil, fmt.Errorf("service %s/%s has no ports", ns, n)
	}
	if port == "" {
		return svc, &svc.Spec.Ports[0], nil
	}
	num, numErr := strconv.Atoi(port)
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		if sp.Name == port || numErr == nil && int(sp.Port) == num {
			return svc, sp, nil
		}
	}
	return svc, nil, fmt.Errorf("service %s/%s has no port %q", ns, n, port)
}

// resolveTarget turns a destination into an address. from is the source (for names).
func (r *runner) resolveTarget(ctx context.Context, t target, from string) (netip.AddrPort, string, error) {
	switch t.kind {
	case "addr":
		return t.addr, "", nil
	case "name":
		if r.res == nil {
			return netip.AddrPort{}, "", fmt.Errorf("%s is a DNS name, but the scenario has no DNS", t.host)
		}
		res, err := r.res.lookup(ctx, from, t.host)
		if err != nil {
			return netip.AddrPort{}, "", fmt.Errorf("resolving %s from %s: %w", t.host, from, err)
		}
		if len(res.Addrs) == 0 {
			return netip.AddrPort{}, "", fmt.Errorf("resolving %s from %s: no addresses", t.host, from)
		}
		port, _ := strconv.Atoi(t.port)
		how := fmt.Sprintf("%s resolved to %s (%s) by %s's resolver", t.host, res.Addrs[0], strings.TrimSuffix(res.Name, "."), from)
		if r.res.mode == "direct" {
			how += ", answered in-process"
		} else {
			how += ", asking kube-dns at " + r.res.dnsIP
		}
		return netip.AddrPortFrom(res.Addrs[0], uint16(port)), how, nil
	case "service":
		svc, sp, err := r.servicePort(t.host, t.port)
		if err != nil {
			return netip.AddrPort{}, "", err
		}
		ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
		if err != nil {
			return netip.AddrPort{}, "", fmt.Errorf("service %s has no cluster IP (%q)", t.host, svc.Spec.ClusterIP)
		}
		return netip.AddrPortFrom(ip, uint16(sp.Port)), fmt.Sprintf("service %s has cluster IP %s", t.host, ip), nil
	case "nodeport":
		_, sp, err := r.servicePort(t.host, t.port)
		if err != nil {
			return netip.AddrPort{}, "", err
		}
		if sp.NodePort == 0 {
			return netip.AddrPort{}, "", fmt.Errorf("service %s port %d has no node port", t.host, sp.Port)
		}
		n := r.c.Node(t.node)
		if n == nil {
			return netip.AddrPort{}, "", fmt.Errorf("no node %q", t.node)
		}
		return netip.AddrPortFrom(n.IP(), uint16(sp.NodePort)), fmt.Sprintf("node port %d of %s on %s (%s)", sp.NodePort, t.host, t.node, n.IP()), nil
	case "loadbalancer":
		_, sp, err := r.servicePort(t.host, t.port)
		if err != nil {
			return netip.AddrPort{}, "", err
		}
		ns, n := splitKey(t.host)
		ip, ok := r.c.LoadBalancerIP(ns, n)
		if !ok {
			return netip.AddrPort{}, "", fmt.Errorf("service %s has no load-balancer IP", t.host)
		}
		return netip.AddrPortFrom(ip, uint16(sp.Port)), fmt.Sprintf("load balancer of %s at %s", t.host, ip), nil
	case "pod":
		ns, n := splitKey(t.host)
		port, _ := strconv.Atoi(t.port)
		pod, ok := r.c.Store().GetPod(ns, n)
		if !ok || pod.Status.PodIP == "" {
			if ip, was := r.podIPs[ns+"/"+n]; was && !ok {
				return netip.AddrPortFrom(ip, uint16(port)), fmt.Sprintf("pod %s/%s is gone; %s was its address", ns, n, ip), nil
			}
			return netip.AddrPort{}, "", fmt.Errorf("no pod %s with an IP", t.host)
		}
		return netip.AddrPortFrom(netip.MustParseAddr(pod.Status.PodIP), uint16(port)), "", nil
	case "node":
		n := r.c.Node(t.host)
		if n == nil {
			return netip.AddrPort{}, "", fmt.Errorf("no node %q", t.host)
		}
		port, _ := strconv.Atoi(t.port)
		return netip.AddrPortFrom(n.IP(), uint16(port)), "", nil
	}
	return netip.AddrPort{}, "", fmt.Errorf("unknown destination kind %q", t.kind)
}

// clientAddr is the address a source sends from (for the family of dst).
func (r *runner) clientAddr(from string, dst netip.Addr) (netip.Addr, error) {
	pl, err := parsePlace(from, false)
	if err != nil {
		return netip.Addr{}, err
	}
	var addrs []netip.Addr
	switch pl.kind {
	case "pod":
		ns, n := splitKey(pl.name)
		p := r.c.Pod(ns, n)
		if p == nil {
			return netip.Addr{}, fmt.Errorf("no running pod %s", pl.name)
		}
		addrs = p.IPs()
	case "node":
		n := r.c.Node(pl.name)
		if n == nil {
			return netip.Addr{}, fmt.Errorf("no node %q", pl.name)
		}
		addrs = n.IPs()
	case "external":
		h := r.c.ExternalHost(pl.name)
		if h == nil {
			return netip.Addr{}, fmt.Errorf("no external host %q", pl.name)
		}
		addrs = []netip.Addr{h.IP()}
	}
	if dst.IsLoopback() {
		return netip.MustParseAddr("127.0.0.1"), nil
	}
	for _, a := range addrs {
		if a.Is4() == dst.Is4() {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%s has no address of %s's family", from, dst)
}

// netOf is the network stack of a source.
func (r *runner) netOf(from string) (*netsim.Net, error) {
	pl, err := parsePlace(from, false)
	if err != nil {
		return nil, err
	}
	switch pl.kind {
	case "pod":
		ns, n := splitKey(pl.name)
		if p := r.c.Pod(ns, n); p != nil {
			return p.Net(), nil
		}
		return nil, fmt.Errorf("no running pod %s", pl.name)
	case "node":
		if n := r.c.Node(pl.name); n != nil {
			return n.HostNet(), nil
		}
	case "external":
		if h := r.c.ExternalHost(pl.name); h != nil {
			return h.Net(), nil
		}
	}
	return nil, fmt.Errorf("no %s", from)
}

// classify names the source address a receiver saw.
func (r *runner) classify(seen, client netip.Addr) string {
	switch {
	case !seen.IsValid():
		return "unknown"
	case seen == client:
		return "client"
	}
	for _, n := range r.c.Nodes() {
		if n.IsLocalAddr(seen) {
			return "node:" + n.Name()
		}
	}
	for _, p := range r.c.Pods() {
		for _, a := range p.IPs() {
			if a == seen {
				return "pod:" + p.Key()
			}
		}
	}
	return seen.String()
}

// nodeOf returns "node:NAME" for an address of a node, "" for any other.
func (r *runner) nodeOf(a netip.Addr) string {
	for _, n := range r.c.Nodes() {
		if a.IsValid() && n.IsLocalAddr(a) {
			return "node:" + n.Name()
		}
	}
	return ""
}

// matchPods selects pods in the store for a PodAction, sorted by name.
func (r *runner) matchPods(a *PodAction) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	pods := r.c.Store().ListPods()
	sort.Slice(pods, func(i, j int) bool {
		return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name
	})
	if a.Selector != "" {
		sel, err := labels.Parse(a.Selector)
		if err != nil {
			return nil, err
		}
		ns := a.Namespace
		if ns == "" {
			ns = "default"
		}
		for _, p := range pods {
			if p.Namespace == ns && sel.Matches(labels.Set(p.Labels)) && p.DeletionTimestamp == nil {
				out = append(out, p)
			}
		}
	} else {
		pat := a.Pod
		if !strings.Contains(pat, "/") {
			pat = "default/" + pat
		}
		for _, p := range pods {
			if ok, _ := path.Match(pat, p.Namespace+"/"+p.Name); ok && (p.DeletionTimestamp == nil || !strings.ContainsAny(pat, "*?[")) {
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no pod matches %s", a.describe())
	}
	if a.Count > 0 && len(out) > a.Count {
		out = out[:a.Count]
	}
	return out, nil
}

func podNames(pods []*corev1.Pod) string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	return strings.Join(names, ", ")
}

// ownerOf returns the workload that owns a pod, if any.
func (r *runner) ownerOf(pod *corev1.Pod) *workload {
	for _, ref := range pod.OwnerReferences {
		if ref.Kind != "ReplicaSet" {
			continue
		}
		for _, w := range r.workloads {
			if w.namespace == pod.Namespace && w.rsName == ref.Name {
				return w
			}
		}
	}
	return nil
}

// ---- actions ----

func (r *runner) deletePods(a *PodAction, res *StepResult) error {
	pods, err := r.matchPods(a)
	if err != nil {
		return err
	}
	var notes []string
	for _, p := range pods {
		if err := r.c.DeletePod(p.Namespace, p.Name, a.Grace.D()); err != nil {
			return fmt.Errorf("delete pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		note, err := r.replaceOwned(p)
		if err != nil {
			return err
		}
		if note != "" {
			notes = append(notes, note)
		}
	}
	res.Summary = "deleted " + podNames(pods)
	if a.Grace > 0 {
		res.Summary += fmt.Sprintf(" (terminating for %s: endpoints stay, serving but not ready)", a.Grace)
	}
	res.Details = append(res.Details, notes...)
	return nil
}

func (r *runner) describePod(ns, name string) string {
	if p, ok := r.c.Store().GetPod(ns, name); ok {
		return fmt.Sprintf("%s/%s (%s on %s)", ns, name, p.Status.PodIP, p.Spec.NodeName)
	}
	return ns + "/" + name
}

func removeString(list []string, s string) []string {
	var out []string
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

func (r *runner) killPods(a *PodAction, res *StepResult) error {
	pods, err := r.matchPods(a)
	if err != nil {
		return err
	}
	for _, p := range pods {
		r.c.StopPod(p.Namespace, p.Name)
	}
	res.Summary = "killed " + podNames(pods) + ": their network is gone, the API still lists them ready"
	return nil
}

func (r *runner) setReady(a *SetReady, res *StepResult) error {
	pods, err := r.matchPods(&a.PodAction)
	if err != nil {
		return err
	}
	for _, p := range pods {
		if err := r.c.SetPodReady(p.Namespace, p.Name, a.Ready); err != nil {
			return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	res.Summary = fmt.Sprintf("%s now ready=%v", podNames(pods), a.Ready)
	return nil
}

func (r *runner) scale(sc *Scale, res *StepResult) error {
	key, kind := sc.Deployment, "Deployment"
	if key == "" {
		key, kind = sc.ReplicaSet, "ReplicaSet"
	}
	ns, n := splitKey(key)
	w := r.workloads[kind+" "+ns+"/"+n]
	if w == nil {
		return fmt.Errorf("no %s %s/%s among the scenario's workloads", kind, ns, n)
	}
	var added, removed []string
	for len(w.pods) < sc.Replicas {
		pod := w.newPod()
		if _, err := r.c.CreatePod(pod); err != nil {
			return fmt.Errorf("scale %s: %w", key, err)
		}
		added = append(added, r.describePod(ns, pod.Name))
	}
	if extra := len(w.pods) - sc.Replicas; extra > 0 {
		for _, name := range r.podsToDelete(w, extra) {
			grace := cluster.DefaultTerminationGracePeriod
			if p, ok := r.c.Store().GetPod(ns, name); ok {
				grace = cluster.TerminationGracePeriod(p)
			}
			w.pods = removeString(w.pods, name)
			if err := r.c.DeletePod(ns, name, grace); err != nil {
				return fmt.Errorf("scale %s: %w", key, err)
			}
			removed = append(removed, fmt.Sprintf("%s/%s (grace %s)", ns, name, grace))
		}
	}
	w.replicas = sc.Replicas
	res.Summary = fmt.Sprintf("%s %s/%s has %d replicas", kind, ns, n, sc.Replicas)
	if len(added) > 0 {
		res.Details = append(res.Details, "created "+strings.Join(added, ", "))
	}
	if len(removed) > 0 {
		res.Details = append(res.Details, "deleted (as the ReplicaSet controller ranks them: not ready, then cheapest, most restarted, newest first) "+strings.Join(removed, ", "))
	}
	return nil
}

func (r *runner) apply(i int, res *StepResult) error {
	l := r.p.applies[i]
	if e := r.s.Steps[i].Expect; e != nil && e.Rejected != "" {
		return r.applyRejected(l, e.Rejected, res)
	}
	if len(l.objects) > 0 {
		objs, notes := service.NameDerivedClusterIPs(r.keepClusterIPs(l.objects), r.c.Config().ServiceCIDRs, clusterIPsInUse(r.c))
		res.Details = append(res.Details, derivedNote(notes)...)
		if err := r.c.Apply(objs...); err != nil {
			return fmt.Errorf("the API server rejects it: %w", err)
		}
	}
	var names []string
	for _, o := range l.objects {
		names = append(names, service.KindOf(o)+" "+service.ObjectKey(o))
	}
	for _, nw := range l.workloads {
		key := nw.kind + " " + nw.key()
		names = append(names, key)
		old := r.workloads[key]
		switch {
		case old == nil:
			w := nw.clone()
			for _, pod := range w.initial {
				if _, err := r.c.CreatePod(pod.DeepCopy()); err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
			}
			r.workloads[key] = w
		case old.rsName == nw.rsName:
			sc := &Scale{Replicas: nw.replicas}
			if nw.kind == "Deployment" {
				sc.Deployment = nw.key()
			} else {
				sc.ReplicaSet = nw.key()
			}
			var sr StepResult
			if err := r.scale(sc, &sr); err != nil {
				return err
			}
			res.Details = append(res.Details, sr.Details...)
		default:
			// A new template: the new ReplicaSet's pods replace the old ones at once.
			for _, pn := range old.pods {
				if err := r.c.DeletePod(old.namespace, pn, 0); err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
			}
			w := nw.clone()
			for _, pod := range w.initial {
				if _, err := r.c.CreatePod(pod.DeepCopy()); err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
			}
			r.workloads[key] = w
			res.Details = append(res.Details, fmt.Sprintf("%s rolled out: ReplicaSet %s replaces %s", key, w.rsName, old.rsName))
		}
	}
	res.Summary = "applied " + strings.Join(names, ", ")
	for _, o := range l.objects {
		if svc, ok := o.(*corev1.Service); ok {
			if cur, ok := r.c.Store().GetService(svc.Namespace, svc.Name); ok {
				si := serviceInfo(cur)
				res.Details = append(res.Details, fmt.Sprintf("service %s: %s %s, %s", si.Name, si.Type, si.ClusterIP, strings.Join(si.Ports, "; ")))
			}
		}
	}
	return nil
}

func (r *runner) delete(refs []ObjectRef, res *StepResult) error {
	var names []string
	for _, ref := range refs {
		if ref.Selector != "" {
			deleted, err := r.deleteCollection(ref)
			if err != nil {
				return err
			}
			names = append(names, deleted...)
			continue
		}
		ns, n := splitKey(ref.Name)
		switch ref.Kind {
		case "Deployment", "ReplicaSet":
			key := ref.Kind + " " + ns + "/" + n
			w := r.workloads[key]
			if w == nil {
				return fmt.Errorf("no %s %s/%s", ref.Kind, ns, n)
			}
			for _, pn := range w.pods {
				if err := r.c.DeletePod(ns, pn, 0); err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
			}
			delete(r.workloads, key)
		case "Namespace", "Node":
			if err := r.c.Store().Delete(ref.Kind, "", ref.Name); err != nil {
				return err
			}
		default:
			if err := r.c.Store().Delete(ref.Kind, ns, n); err != nil {
				return err
			}
		}
		names = append(names, ref.Kind+" "+ref.Name)
	}
	res.Summary = "deleted " + strings.Join(names, ", ")
	return nil
}

func (r *runner) fault(f *Fault, res *StepResult) error {
	pl, err := parsePlace(f.Link, false)
	if err != nil {
		return err
	}
	var link *netsim.Link
	switch pl.kind {
	case "pod":
		ns, n := splitKey(pl.name)
		p := r.c.Pod(ns, n)
		if p == nil {
			return fmt.Errorf("no running pod %s", pl.name)
		}
		link = p.Link()
	case "node":
		link = r.c.Node(pl.name).Uplink()
	case "external":
		link = r.c.ExternalHost(pl.name).Link()
	}
	if link == nil {
		return fmt.Errorf("%s has no link of its own", f.Link)
	}
	lf := netsim.LinkFaults{Loss: f.Loss, Latency: f.Latency.D(), Jitter: f.Jitter.D(), Duplicate: f.Duplicate, Reorder: f.Reorder}
	link.SetFaults(lf)
	var parts []string
	if f.Loss > 0 {
		parts = append(parts, fmt.Sprintf("loss %.0f%%", f.Loss*100))
	}
	if f.Latency > 0 {
		parts = append(parts, "latency "+f.Latency.String())
	}
	if f.Jitter > 0 {
		parts = append(parts, "jitter "+f.Jitter.String())
	}
	if f.Duplicate > 0 {
		parts = append(parts, fmt.Sprintf("duplicate %.0f%%", f.Duplicate*100))
	}
	if f.Reorder > 0 {
		parts = append(parts, fmt.Sprintf("reorder %.0f%%", f.Reorder*100))
	}
	if len(parts) == 0 {
		res.Summary = "link " + link.Name() + " has no faults now"
	} else {
		res.Summary = "link " + link.Name() + ": " + strings.Join(parts, ", ")
	}
	return nil
}

func (r *runner) sync(sy *Sync, res *StepResult) error {
	if r.syncConntrack(sy, res) {
		return nil
	}
	switch {
	case sy.Pause != "":
		r.forNodes(sy.Pause, (*cluster.Node).PauseProxy)
		res.Summary = "kube-proxy on " + sy.Pause + " stops syncing: its rules stay as they are"
	case sy.Resume != "":
		r.forNodes(sy.Resume, (*cluster.Node).ResumeProxy)
		res.Summary = "kube-proxy on " + sy.Resume + " syncs again"
	case sy.Now:
		r.c.SyncProxies()
		res.Summary = "every proxy synced"
	case sy.Delay != nil:
		d := sy.Delay.Duration.D()
		r.forNodes(sy.Delay.Node, func(n *cluster.Node) { n.SetSyncDelay(d) })
		res.Summary = fmt.Sprintf("kube-proxy on %s syncs %s after a change", sy.Delay.Node, sy.Delay.Duration)
	}
	return nil
}

func (r *runner) check(st *Step, res *StepResult) error {
	switch {
	case st.Check.Conntrack != nil:
		return r.checkConntrack(st.Check.Conntrack, st.Expect, res)
	case st.Check.Endpoints != nil:
		return r.checkEndpoints(st.Check.Endpoints, st.Expect, res)
	case st.Check.ConntrackStats != nil:
		return r.checkConntrackStats(st.Check.ConntrackStats, st.Expect, res)
	case st.Check.HealthCheck != nil:
		return r.checkHealth(st.Check.HealthCheck, st.Expect, res)
	}
	return nil
}

func (r *runner) checkConntrack(ct *ConntrackCheck, e *Expect, res *StepResult) error {
	var f netsim.CtFilter
	if ct.Proto != "" {
		p, err := netsim.ParseProto(strings.ToLower(ct.Proto))
		if err != nil {
			return err
		}
		f.Proto = p
	}
	if ct.Dst != "" {
		t, err := parseTarget(ct.Dst, true)
		if err != nil {
			return err
		}
		ap, _, err := r.resolveTarget(context.Background(), t, "")
		if err != nil {
			return err
		}
		f.OrigDst, f.OrigDstPort = ap.Addr(), ap.Port()
		if t.port == "" && t.kind != "nodeport" {
			f.OrigDstPort = 0 // no port: any port
		}
	}
	if ct.ReplySrc != "" {
		t, err := parseTarget(ct.ReplySrc, true)
		if err != nil {
			return err
		}
		ap, how, err := r.resolveTarget(context.Background(), t, "")
		if err != nil {
			return err
		}
		if how != "" && t.kind == "pod" {
			res.Details = append(res.Details, how)
		}
		f.ReplySrc, f.ReplySrcPort = ap.Addr(), ap.Port()
		if t.port == "" && t.kind != "nodeport" {
			f.ReplySrcPort = 0
		}
	}
	if ct.Src != "" {
		t, err := parseAddrRef(ct.Src)
		if err != nil {
			return err
		}
		ap, _, err := r.resolveTarget(context.Background(), t, "")
		if err != nil {
			return err
		}
		f.OrigSrc = ap.Addr()
	}
	f.OrigSrcPort = uint16(ct.SrcPort)
	count := 0
	var lines []string
	var entries []netsim.Conn
	if r.dp != nil {
		var err error
		if entries, lines, err = r.datapathConntrack(ct.Node, f); err != nil {
			return err
		}
		count = len(entries)
	}
	r.forNodes(ct.Node, func(n *cluster.Node) {
		if r.dp != nil {
			return
		}
		for _, c := range n.Conntrack().List(f) {
			entries = append(entries, c)
			count++
			if len(lines) < 10 {
				lines = append(lines, n.Name()+": "+c.String())
			}
		}
	})
	res.Count = &count
	res.Summary = fmt.Sprintf("%d conntrack entries", count)
	res.Details = append(res.Details, lines...)
	if count > len(lines) {
		res.Details = append(res.Details, fmt.Sprintf("(and %d more)", count-len(lines)))
	}
	if e != nil && e.Count != nil {
		res.Expectations = append(res.Expectations, Expectation{Field: "count", Want: strconv.Itoa(*e.Count), Got: strconv.Itoa(count), OK: count == *e.Count})
	}
	return r.checkConntrackMore(e, entries, res)
}

func (r *runner) checkEndpoints(ec *EndpointsCheck, e *Expect, res *StepResult) error {
	ns, n := splitKey(ec.Service)
	if _, ok := r.c.Store().GetService(ns, n); !ok {
		return fmt.Errorf("no service %s/%s", ns, n)
	}
	seen := map[string]bool{}
	total, ready, serving, terminating := 0, 0, 0, 0
	var lines []string
	for _, sl := range r.c.Store().EndpointSlicesFor(ns, n) {
		for _, ep := range sl.Endpoints {
			if len(ep.Addresses) == 0 || seen[ep.Addresses[0]] {
				continue
			}
			seen[ep.Addresses[0]] = true
			total++
			isReady := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			if isReady {
				ready++
			}
			if ep.Conditions.Serving == nil && isReady || ep.Conditions.Serving != nil && *ep.Conditions.Serving {
				serving++
			}
			if ep.Conditions.Terminating != nil && *ep.Conditions.Terminating {
				terminating++
			}
			lines = append(lines, endpointLine(ep, isReady))
		}
	}
	sort.Strings(lines)
	res.Count, res.Ready = &total, &ready
	res.Summary = fmt.Sprintf("%d endpoints, %d ready", total, ready)
	res.Details = append(res.Details, lines...)
	if e != nil && e.Count != nil {
		res.Expectations = append(res.Expectations, Expectation{Field: "count", Want: strconv.Itoa(*e.Count), Got: strconv.Itoa(total), OK: total == *e.Count})
	}
	if e != nil && e.Ready != nil {
		res.Expectations = append(res.Expectations, Expectation{Field: "ready", Want: strconv.Itoa(*e.Ready), Got: strconv.Itoa(ready), OK: ready == *e.Ready})
	}
	res.Expectations = append(res.Expectations, endpointExpectations(e, seenEndpoints(r.c.Store().EndpointSlicesFor(ns, n)))...)
	if e != nil && e.Serving != nil {
		res.Expectations = append(res.Expectations, Expectation{Field: "serving", Want: strconv.Itoa(*e.Serving), Got: strconv.Itoa(serving), OK: serving == *e.Serving})
	}
	if e != nil && e.Terminating != nil {
		res.Expectations = append(res.Expectations, Expectation{Field: "terminating", Want: strconv.Itoa(*e.Terminating), Got: strconv.Itoa(terminating), OK: terminating == *e.Terminating})
	}
	return nil
}

func endpointLine(ep discoveryv1.Endpoint, ready bool) string {
	s := ep.Addresses[0]
	if ep.TargetRef != nil {
		s += " " + ep.TargetRef.Namespace + "/" + ep.TargetRef.Name
	}
	var conds []string
	if ready {
		conds = append(conds, "ready")
	}
	if ep.Conditions.Serving == nil || *ep.Conditions.Serving {
		conds = append(conds, "serving")
	}
	if ep.Conditions.Terminating != nil && *ep.Conditions.Terminating {
		conds = append(conds, "terminating")
	}
	if len(conds) == 0 {
		conds = append(conds, "not ready")
	}
	return s + " (" + strings.Join(conds, ", ") + ")"
}

// applyRejected runs an apply step that expects the API server to reject its objects
// with a message containing want. The store applies all or nothing, so a rejection
// leaves it as it was.
func (r *runner) applyRejected(l *loaded, want string, res *StepResult) error {
	var names []string
	for _, o := range l.objects {
		names = append(names, service.KindOf(o)+" "+service.ObjectKey(o))
	}
	err := r.c.Apply(l.objects...)
	exp := Expectation{Field: "rejected", Want: strconv.Quote(want)}
	if err == nil {
		res.Summary = "applied " + strings.Join(names, ", ") + ": the API server accepted it"
		exp.Got = "accepted"
	} else {
		res.Summary = "the API server rejects " + strings.Join(names, ", ") + "; nothing was applied"
		res.Details = append(res.Details, err.Error())
		exp.Got = err.Error()
		exp.OK = strings.Contains(err.Error(), want)
	}
	res.Expectations = append(res.Expectations, exp)
	return nil
}

// clusterIPsInUse are the cluster IPs of the Services in the cluster's API server.
func clusterIPsInUse(c *cluster.Cluster) []netip.Addr {
	var out []netip.Addr
	for _, svc := range c.Store().ListServices() {
		for _, s := range svc.Spec.ClusterIPs {
			if a, err := netip.ParseAddr(s); err == nil {
				out = append(out, a)
			}
		}
	}
	return out
}

// derivedNote says in one line which Services got name-derived cluster IPs (the
// services' lines show the addresses), and passes other notes on.
func derivedNote(notes []string) []string {
	var names, other []string
	for _, n := range notes {
		if rest, ok := strings.CutPrefix(n, "service "); ok && strings.Contains(n, "(derived from its name") {
			name, _, _ := strings.Cut(rest, " ")
			names = append(names, name)
			continue
		}
		other = append(other, n)
	}
	if len(names) > 0 {
		other = append([]string{fmt.Sprintf("%s without a clusterIP in the manifests: the address derived from the name, as every clusterlab command (run, trace, generate, dns serve) gives it", strings.Join(names, ", "))}, other...)
	}
	return other
}

// keepClusterIPs gives each Service of objs that is already in the cluster and names
// no cluster IP the one it has, as kubectl apply keeps a field the manifest leaves
// out (a copy; the others as they are).
func (r *runner) keepClusterIPs(objs []runtime.Object) []runtime.Object {
	out := make([]runtime.Object, len(objs))
	for i, o := range objs {
		out[i] = o
		svc, ok := o.(*corev1.Service)
		if !ok || !service.NeedsClusterIP(svc) {
			continue
		}
		old, ok := r.c.Store().GetService(service.NamespaceOrDefault(svc.Namespace), svc.Name)
		if !ok || len(old.Spec.ClusterIPs) == 0 {
			continue
		}
		c := svc.DeepCopy()
		c.Spec.ClusterIP, c.Spec.ClusterIPs = old.Spec.ClusterIP, append([]string(nil), old.Spec.ClusterIPs...)
		if len(c.Spec.IPFamilies) == 0 {
			c.Spec.IPFamilies = append([]corev1.IPFamily(nil), old.Spec.IPFamilies...)
		}
		out[i] = c
	}
	return out
}
