package scenario

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/alloc"
	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/dns"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"k8s.io/apimachinery/pkg/util/validation"
)

// plan is a checked scenario, ready to run under one proxy mode.
type plan struct {
	s         *Scenario
	cfg       cluster.Config
	mode      kubeproxy.Mode
	info      kubeproxy.ModeInfo // the mode's descriptor
	proxyOpts kubeproxy.Options
	version   string   // the kube-proxy version modelled ("1.35")
	notes     []string // what the version, mode and DNS choices mean for this run
	dns       string   // kube-dns, direct or off
	nodes     []string
	delays    map[string]time.Duration // per-node sync delays
	manifests *loaded
	applies   map[int]*loaded // apply steps' objects by step index
	// hostServices are host_services, checked.
	hostServices []hostService
}

// DefaultNodes are the nodes of a scenario that lists none.
var DefaultNodes = []string{"node-a", "node-b", "node-c"}

// prepare checks every field and loads the manifests. mode overrides cluster.proxy.mode
// when not empty. The phases follow the file's sections, and so do the errors.
func (s *Scenario) prepare(mode string) (*plan, error) {
	return s.prepareFor(Options{Mode: mode})
}

// prepareFor is prepare with the run's overrides: opts.Mode for cluster.proxy.mode and
// opts.Version for cluster.proxy.version (errors then name the field "mode" or "version").
func (s *Scenario) prepareFor(opts Options) (*plan, error) {
	mode := opts.Mode
	seed := s.Cluster.Seed
	if seed == 0 {
		seed = 1
	}
	pr := &preparer{s: s, c: &s.Cluster, version: opts.Version, p: &plan{
		s:       s,
		cfg:     cluster.Config{Seed: seed, ManualClock: true},
		delays:  map[string]time.Duration{},
		applies: map[int]*loaded{},
	}}
	pr.networks()
	pr.nodes()
	pr.externalHosts()
	pr.hostServices()
	pr.proxy(mode)
	pr.dns()
	pr.manifests()
	pr.steps()
	if len(pr.errs) > 0 {
		return nil, errors.Join(pr.errs...)
	}
	return pr.p, nil
}

// preparer builds a plan from a scenario, one phase per section, and collects the
// errors in the order it finds them.
type preparer struct {
	s         *Scenario
	c         *Cluster
	p         *plan
	externals []string // the names of cluster.external_hosts, from externalHosts
	version   string   // overrides cluster.proxy.version when not empty (--versions)
	// clusterProxyName is cluster.proxy.name once checked, every node's default.
	clusterProxyName string
	policyFlavour    string // cluster.node_settings.network_policy
	errs             []error
}

func (pr *preparer) fail(path, format string, args ...any) {
	pr.errs = append(pr.errs, pr.s.errorf(path, format, args...))
}

// add records err unless it is nil.
func (pr *preparer) add(err error) {
	if err != nil {
		pr.errs = append(pr.errs, err)
	}
}

// networks checks the cluster's address ranges, its load-balancer mode and its node
// port range.
func (pr *preparer) networks() {
	c, cfg := pr.c, &pr.p.cfg
	cfg.NodeCIDRs = pr.cidrs("node_cidr", c.NodeCIDR)
	cfg.ClusterCIDRs = pr.cidrs("pod_cidr", c.PodCIDR)
	cfg.ServiceCIDRs = pr.cidrs("service_cidr", c.ServiceCIDR)
	if n, pc, sc := cfg.NodeCIDRs, cfg.ClusterCIDRs, cfg.ServiceCIDRs; len(n) == 2 || len(pc) == 2 || len(sc) == 2 {
		if familiesOf(n) != familiesOf(pc) || familiesOf(n) != familiesOf(sc) {
			pr.fail("cluster.node_cidr", "a dual-stack cluster names both families, in the same order, in node_cidr, pod_cidr and service_cidr (got %s; %s; %s)",
				orDefault(familiesOf(n)), orDefault(familiesOf(pc)), orDefault(familiesOf(sc)))
		}
	}
	cfg.ExternalCIDR = pr.prefix("external_cidr", c.ExternalCIDR)
	cfg.LoadBalancerCIDR = pr.prefix("load_balancer_cidr", c.LoadBalancerCIDR)
	switch c.LoadBalancerMode {
	case "", "nodeport", "vip":
		cfg.LoadBalancerMode = c.LoadBalancerMode
	default:
		pr.fail("cluster.load_balancer_mode", "want nodeport or vip, got %q", c.LoadBalancerMode)
	}
	switch c.PodIPAllocation {
	case "", "round-robin":
	case "lowest-free":
		cfg.LowestFreePodIP = true
	default:
		pr.fail("cluster.pod_ip_allocation", "want round-robin or lowest-free, got %q", c.PodIPAllocation)
	}
	if c.NodePortRange != "" {
		if r, err := parsePortRange(c.NodePortRange); err != nil {
			pr.fail("cluster.node_port_range", "%v", err)
		} else {
			cfg.NodePortRange = r
		}
	}
}

// parsePortRange parses a node port range, FIRST-LAST.
func parsePortRange(v string) (alloc.PortRange, error) {
	lo, hi, ok := strings.Cut(v, "-")
	a, err1 := strconv.Atoi(strings.TrimSpace(lo))
	b, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if !ok || err1 != nil || err2 != nil || a < 1 || b > 65535 || a > b {
		return alloc.PortRange{}, fmt.Errorf("want FIRST-LAST such as 30000-32767, got %q", v)
	}
	return alloc.PortRange{Base: a, Size: b - a + 1}, nil
}

// prefix parses the CIDR of cluster.field; "" is none.
func (pr *preparer) prefix(field, v string) netip.Prefix {
	if v == "" {
		return netip.Prefix{}
	}
	pf, err := netip.ParsePrefix(v)
	if err != nil {
		pr.fail("cluster."+field, "want a CIDR such as 10.0.0.0/16, got %q", v)
		return netip.Prefix{}
	}
	return pf.Masked()
}

// cidrs parses node_cidr, pod_cidr or service_cidr: one CIDR, or two of different
// families separated by a comma for a dual-stack cluster (as kube-apiserver's
// --service-cluster-ip-range and kube-proxy's --cluster-cidr do), the first family
// primary. All three name the same families.
func (pr *preparer) cidrs(field, v string) []netip.Prefix {
	out, err := parseCIDRs(field, v)
	if err != nil {
		pr.fail("cluster."+field, "%v", err)
		return nil
	}
	return out
}

// parseCIDRs parses one CIDR, or two of different families separated by a comma
// (field names the setting in the message); "" is none.
func parseCIDRs(field, v string) ([]netip.Prefix, error) {
	if v == "" {
		return nil, nil
	}
	parts := strings.Split(v, ",")
	if len(parts) > 2 {
		return nil, fmt.Errorf("want one CIDR or two of different families separated by a comma, got %q", v)
	}
	var out []netip.Prefix
	for _, part := range parts {
		part = strings.TrimSpace(part)
		pf, err := netip.ParsePrefix(part)
		if err != nil {
			return nil, fmt.Errorf("want a CIDR such as 10.0.0.0/16, got %q", part)
		}
		out = append(out, pf.Masked())
	}
	if len(out) == 2 && out[0].Addr().Is4() == out[1].Addr().Is4() {
		return nil, fmt.Errorf("the two CIDRs of a dual-stack %s must be one IPv4 and one IPv6, got %q", field, v)
	}
	return out, nil
}

// familiesOf names the families of prefixes in order: "IPv4,IPv6".
func familiesOf(ps []netip.Prefix) string {
	var fs []string
	for _, pf := range ps {
		if pf.Addr().Is4() {
			fs = append(fs, "IPv4")
		} else {
			fs = append(fs, "IPv6")
		}
	}
	return strings.Join(fs, ",")
}

// nodes checks cluster.nodes (DefaultNodes when there are none) and the settings every
// node starts from.
func (pr *preparer) nodes() {
	c, p := pr.c, pr.p
	base := netsim.DefaultNodeSettings()
	if c.NodeSettings != nil {
		pr.add(c.NodeSettings.check(pr.s, "cluster.node_settings"))
		c.NodeSettings.applyTo(&base)
		pr.policyFlavour = c.NodeSettings.policyFlavour("")
	}
	if pr.proxyName("cluster.proxy.name", c.Proxy.Name) {
		pr.clusterProxyName = c.Proxy.Name
	}
	if len(c.Nodes) == 0 {
		for _, n := range DefaultNodes {
			st := base
			p.cfg.Nodes = append(p.cfg.Nodes, cluster.NodeConfig{Name: n, Settings: &st, ProxyName: pr.clusterProxyName, NetworkPolicy: pr.policyFlavour})
			p.nodes = append(p.nodes, n)
		}
	}
	for i, n := range c.Nodes {
		pr.node(fmt.Sprintf("cluster.nodes[%d]", i), n, base)
	}
}

// node checks one entry of cluster.nodes, at path fp, and adds it to the plan.
func (pr *preparer) node(fp string, n Node, base netsim.NodeSettings) {
	p := pr.p
	if n.Name == "" {
		pr.fail(fp+".name", "required")
	} else if msgs := validation.IsDNS1123Subdomain(n.Name); len(msgs) > 0 {
		pr.fail(fp+".name", "%q: %s", n.Name, strings.Join(msgs, "; "))
	} else if slices.Contains(p.nodes, n.Name) {
		pr.fail(fp+".name", "node %q is listed twice", n.Name)
	}
	for k, v := range n.Labels {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			pr.fail(fp+".labels."+k, "%s", strings.Join(msgs, "; "))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			pr.fail(fp+".labels."+k, "%s", strings.Join(msgs, "; "))
		}
	}
	st := base
	if n.Settings != nil {
		pr.add(n.Settings.check(pr.s, fp+".settings"))
		n.Settings.applyTo(&st)
	}
	if n.SyncDelay != nil {
		p.delays[n.Name] = n.SyncDelay.D()
	}
	proxyName := pr.clusterProxyName
	if n.ProxyName != nil && pr.proxyName(fp+".proxy_name", *n.ProxyName) {
		proxyName = *n.ProxyName
	}
	p.cfg.Nodes = append(p.cfg.Nodes, cluster.NodeConfig{Name: n.Name, Zone: n.Zone, Labels: n.Labels, Settings: &st, ProxyName: proxyName,
		NetworkPolicy: n.Settings.policyFlavour(pr.policyFlavour)})
	p.nodes = append(p.nodes, n.Name)
}

// proxyName checks a proxy name (cluster.proxy.name, cluster.nodes[i].proxy_name): the
// value of the service.kubernetes.io/service-proxy-name label it serves, so a label
// value. It reports whether the name is good.
func (pr *preparer) proxyName(path, name string) bool {
	if msgs := validation.IsValidLabelValue(name); len(msgs) > 0 {
		pr.fail(path, "%q is not a label value (the proxy serves the Services labelled %s: NAME): %s", name, proxy.LabelServiceProxyName, strings.Join(msgs, "; "))
		return false
	}
	return true
}

// externalHosts checks cluster.external_hosts and keeps their names for the steps.
func (pr *preparer) externalHosts() {
	c := pr.c
	dnsHosts := c.DNS == "kube-dns" || c.DNS == "" && kubeDNSAvailable()
	for i, h := range c.ExternalHosts {
		fp := fmt.Sprintf("cluster.external_hosts[%d]", i)
		if h.Name == "" {
			pr.fail(fp+".name", "required")
		} else if slices.Contains(pr.externals, h.Name) {
			pr.fail(fp+".name", "external host %q is listed twice", h.Name)
		} else if dnsHosts && (h.Name == dns.UpstreamHostName || h.Name == dns.WebHostName) {
			pr.fail(fp+".name", "%q is the name of a host kube-dns adds (the simulated internet's DNS server and web host)", h.Name)
		}
		pr.externals = append(pr.externals, h.Name)
		if h.IP != "" {
			if _, err := netip.ParseAddr(h.IP); err != nil {
				pr.fail(fp+".ip", "want an IP address, got %q", h.IP)
			}
		}
	}
}

// proxy checks the kube-proxy mode (mode, when set, overrides cluster.proxy.mode), its
// scheduler, version and flags, and sets the proxy options of the plan.
func (pr *preparer) proxy(mode string) {
	px, p := pr.c.Proxy, pr.p
	p.cfg.SyncDelay = px.SyncDelay.D()
	m := px.Mode
	modePath := "cluster.proxy.mode"
	if mode != "" {
		m, modePath = mode, "mode"
	}
	if m == "" {
		m = string(kubeproxy.Reference().Mode)
	}
	p.mode = kubeproxy.Mode(m)
	info, ok := kubeproxy.Lookup(p.mode)
	if !ok {
		pr.fail(modePath, "unknown kube-proxy mode %q: this build has %s", m, modeList())
	}
	p.info = info
	pr.scheduler(px.Scheduler)
	p.proxyOpts = kubeproxy.Options{Mode: p.mode, Scheduler: px.Scheduler, Seed: p.cfg.Seed}
	if nodeMods := pr.nodeConfigMods(); len(nodeMods) > 0 {
		p.proxyOpts.Node = func(nc *proxy.NodeConfig) {
			for _, f := range nodeMods {
				f(nc)
			}
		}
	}
}

// nodeConfigMods checks the version and the flags of cluster.proxy and returns what
// they change in each node's kube-proxy configuration; it adds the version's notes to
// the plan.
func (pr *preparer) nodeConfigMods() []func(*proxy.NodeConfig) {
	px, p := pr.c.Proxy, pr.p
	var nodeMods []func(*proxy.NodeConfig)
	if p.info.Mode != "" { // an unknown mode has failed already, and has no releases
		v, vpath := px.Version, "cluster.proxy.version"
		if pr.version != "" {
			v, vpath = pr.version, "version"
		}
		ver, vnotes, mods, verr := versionBehaviour(v, p.info, px.FeatureGates)
		if verr != nil {
			pr.fail(vpath, "%v", verr)
		}
		p.version, p.notes = ver, append(p.notes, vnotes...)
		nodeMods = append(nodeMods, mods...)
		if len(px.FeatureGates) > 0 && verr == nil {
			pr.featureGates(ver, px.FeatureGates)
			gates := maps.Clone(px.FeatureGates)
			nodeMods = append(nodeMods, func(nc *proxy.NodeConfig) { nc.FeatureGates = gates })
		}
	}
	if px.MasqueradeAll {
		nodeMods = append(nodeMods, func(nc *proxy.NodeConfig) { nc.MasqueradeAll = true })
	}
	if len(px.NodePortAddresses) > 0 {
		pr.nodePortAddresses(px.NodePortAddresses)
		addrs := slices.Clone(px.NodePortAddresses)
		nodeMods = append(nodeMods, func(nc *proxy.NodeConfig) { nc.NodePortAddresses = addrs })
	}
	switch lm := proxy.LocalMode(px.DetectLocalMode); lm {
	case "":
	case proxy.LocalModeClusterCIDR, proxy.LocalModeNodeCIDR, proxy.LocalModeBridgeInterface, proxy.LocalModeInterfaceNamePrefix:
		nodeMods = append(nodeMods, func(nc *proxy.NodeConfig) {
			nc.DetectLocalMode = lm
			if lm == proxy.LocalModeInterfaceNamePrefix {
				nc.InterfaceNamePrefix = "veth"
			}
		})
	default:
		pr.fail("cluster.proxy.detect_local_mode", "want ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix, got %q", px.DetectLocalMode)
	}
	if px.LocalhostNodePorts != nil {
		v := *px.LocalhostNodePorts
		nodeMods = append(nodeMods, func(nc *proxy.NodeConfig) { nc.LocalhostNodePorts = &v })
	}
	return nodeMods
}

// nodePortAddresses checks cluster.proxy.nodeport_addresses: CIDRs, or "primary" alone.
func (pr *preparer) nodePortAddresses(as []string) {
	for i, a := range as {
		if a == "primary" {
			if len(as) > 1 {
				pr.fail(fmt.Sprintf("cluster.proxy.nodeport_addresses[%d]", i), "\"primary\" must be the only value")
			}
			continue
		}
		if _, err := netip.ParsePrefix(a); err != nil {
			pr.fail(fmt.Sprintf("cluster.proxy.nodeport_addresses[%d]", i), "want a CIDR or \"primary\", got %q", a)
		}
	}
}

// featureGates checks cluster.proxy.feature_gates against the release as kube-proxy's
// --feature-gates does (known, present in the release, not turned off once GA).
func (pr *preparer) featureGates(ver string, fg map[string]bool) {
	v, err := proxy.ParseVersion(ver)
	if err != nil {
		return // the version's own error is reported already
	}
	names := slices.Sorted(maps.Keys(fg))
	for _, n := range names {
		nc := proxy.NodeConfig{Version: v, FeatureGates: map[string]bool{n: fg[n]}}
		if err := nc.Validate(); err != nil {
			pr.fail("cluster.proxy.feature_gates."+n, "%s", strings.TrimPrefix(err.Error(), "node config: featureGates: "))
		}
	}
}

// dns picks how the run answers DNS: kube-dns inside the simulation, direct or off.
func (pr *preparer) dns() {
	c, p := pr.c, pr.p
	switch c.DNS {
	case "":
		if kubeDNSAvailable() {
			p.dns = "kube-dns"
		} else {
			p.dns = "direct"
			p.notes = append(p.notes, "dns: names are answered in-process by the cluster DNS server code (direct); kube-dns inside the simulation is not in this build")
		}
	case "kube-dns":
		if !kubeDNSAvailable() {
			pr.fail("cluster.dns", "kube-dns inside the simulation is not available in this build; use dns: direct (the DNS server answers each pod's resolver in-process) or off")
		}
		p.dns = c.DNS
	case "direct", "off":
		p.dns = c.DNS
	default:
		pr.fail("cluster.dns", "want kube-dns, direct or off, got %q", c.DNS)
	}
}

// manifests loads the scenario's manifests.
func (pr *preparer) manifests() {
	pr.p.manifests = newDryRun(pr.p.cfg, pr.p.dns == "kube-dns")
	pr.add(pr.s.loadManifests(pr.s.Manifests, "manifests", pr.p.cfg.Seed, pr.p.manifests))
	pr.p.manifests.apiServer = nil // its work is done
	switch e := pr.c.Endpoints; e {
	case "", "keep", "derive":
		pr.p.notes = append(pr.p.notes, standIns(pr.p.manifests, e, pr.p.nodes)...)
	default:
		pr.fail("cluster.endpoints", "want keep or derive, got %q", e)
	}
}

// maxVirtualTime bounds a run's virtual clock (a hundred years): far past any
// timeout, far from time.Duration's overflow.
const maxVirtualTime = 100 * 365 * 24 * time.Hour

// steps checks each step: one action, times that do not go back, expectations only
// where the action has results, and the action's own fields.
func (pr *preparer) steps() {
	s := pr.s
	nodes := nodeSet(pr.p.nodes)
	var clock time.Duration
	for i := range s.Steps {
		st := &s.Steps[i]
		sp := fmt.Sprintf("steps[%d]", i)
		acts := st.actions()
		switch len(acts) {
		case 0:
			pr.fail(sp, "no action: want one of connect, send, dns, check, apply, delete, delete_pod, kill_pod, set_ready, scale, evict, set_phase, set_health, advance, fault, partition, heal, kill_node, sync, restart_proxy, restart_apiserver, node_settings, update_status")
			continue
		case 1:
		default:
			pr.fail(sp, "one action per step, got %s", strings.Join(acts, " and "))
			continue
		}
		if st.At != nil && st.At.D() > maxVirtualTime {
			pr.fail(sp+".at", "%s is past the longest virtual time a run takes (%s)", st.At, Duration(maxVirtualTime))
		} else if st.At != nil {
			if st.At.D() < clock {
				pr.fail(sp+".at", "%s is earlier than the time the steps before reach (%s)", st.At, Duration(clock))
			}
			clock = st.At.D()
		}
		if st.Advance != nil {
			if st.Advance.D() > maxVirtualTime-clock {
				pr.fail(sp+".advance", "the virtual clock would pass %s (it is at %s): want a shorter advance", Duration(maxVirtualTime), Duration(clock))
			} else {
				clock += st.Advance.D()
			}
		}
		if st.Expect != nil {
			switch acts[0] {
			case "connect", "send", "dns", "check", "apply", "restart_apiserver":
				s.checkExpect(st, sp, &pr.errs)
			default:
				pr.fail(sp+".expect", "only connect, send, dns, check, apply and restart_apiserver steps have expectations (this is %s)", acts[0])
			}
		}
		s.checkStep(pr.p, st, i, sp, nodes, pr.externals, &pr.errs)
	}
}

func nodeSet(nodes []string) map[string]bool {
	m := map[string]bool{}
	for _, n := range nodes {
		m[n] = true
	}
	return m
}

// scheduler checks cluster.proxy.scheduler: one of the mode's schedulers, or, for a mode
// without any (the scenario may run under several modes), of a mode that has them.
func (pr *preparer) scheduler(sched string) {
	if sched == "" {
		return
	}
	modes := []kubeproxy.ModeInfo{pr.p.info}
	if len(pr.p.info.Schedulers) == 0 {
		modes = kubeproxy.Registered()
	}
	for _, m := range modes {
		if len(m.Schedulers) == 0 {
			continue
		}
		if !slices.Contains(m.Schedulers, sched) {
			pr.fail("cluster.proxy.scheduler", "unknown %s scheduler %q: want one of %s", strings.ToUpper(string(m.Mode)), sched, strings.Join(m.Schedulers, ", "))
		}
		return
	}
}

func modeList() string { return strings.Join(AvailableModes(), ", ") }

// AvailableModes lists the kube-proxy modes this build has, in the table's order.
func AvailableModes() []string { return kubeproxy.ModeNames() }

func (ns *NodeSettings) check(s *Scenario, path string) error {
	var errs []error
	if ns.RPFilter != nil && (*ns.RPFilter < 0 || *ns.RPFilter > 2) {
		errs = append(errs, s.errorf(path+".rp_filter", "want 0 (off), 1 (strict) or 2 (loose), got %d", *ns.RPFilter))
	}
	if ns.NetworkPolicy != nil {
		if err := cluster.CheckPolicyFlavour(*ns.NetworkPolicy); err != nil {
			errs = append(errs, s.errorf(path+".network_policy", "want calico or cilium, got %q", *ns.NetworkPolicy))
		}
	}
	if ns.Kernel != nil {
		if _, err := netfilter.ParseKernelVersion(ns.Kernel.Version); err != nil {
			errs = append(errs, s.errorf(path+".kernel.version", "%v", err))
		}
	}
	if v := ns.IPVS; v != nil {
		for _, x := range []struct {
			name string
			v    *int
			max  int
		}{
			{"conn_reuse_mode", v.ConnReuseMode, 2},
			{"expire_nodest_conn", v.ExpireNodestConn, 1},
			{"expire_quiescent_template", v.ExpireQuiescentTemplate, 1},
			{"conntrack", v.Conntrack, 1},
		} {
			if x.v != nil && (*x.v < 0 || *x.v > x.max) {
				errs = append(errs, s.errorf(path+".ipvs."+x.name, "want 0 to %d, got %d", x.max, *x.v))
			}
		}
	}
	return errors.Join(errs...)
}

// policyFlavour is the NetworkPolicy flavour the settings name, or def.
func (ns *NodeSettings) policyFlavour(def string) string {
	if ns == nil || ns.NetworkPolicy == nil {
		return def
	}
	return *ns.NetworkPolicy
}

func (ns *NodeSettings) applyTo(st *netsim.NodeSettings) {
	if ns == nil {
		return
	}
	if ns.Hairpin != nil {
		st.Hairpin = *ns.Hairpin
	}
	if ns.RouteLocalnet != nil {
		st.RouteLocalnet = *ns.RouteLocalnet
	}
	if ns.IPForward != nil {
		st.IPForward = *ns.IPForward
	}
	if ns.RPFilter != nil {
		st.RPFilter = *ns.RPFilter
	}
	if ns.TCPBeLiberal != nil {
		st.Conntrack.TCPBeLiberal = *ns.TCPBeLiberal
	}
	if ns.UDPTimeout != nil {
		st.Conntrack.UDPTimeout = ns.UDPTimeout.D()
	}
	if ns.UDPStreamTimeout != nil {
		st.Conntrack.UDPStream = ns.UDPStreamTimeout.D()
	}
	if ns.Kernel != nil {
		if k, err := netfilter.ParseKernelVersion(ns.Kernel.Version); err == nil { // check reported a bad one
			st.Kernel = k
		}
	}
	if v := ns.IPVS; v != nil {
		set := func(dst *netsim.Sysctl, x *int) {
			if x != nil {
				*dst = netsim.SetTo(*x)
			}
		}
		set(&st.IPVS.ConnReuseMode, v.ConnReuseMode)
		set(&st.IPVS.ExpireNodestConn, v.ExpireNodestConn)
		set(&st.IPVS.ExpireQuiescentTemplate, v.ExpireQuiescentTemplate)
		set(&st.IPVS.Conntrack, v.Conntrack)
	}
}

var resultNames = []string{"ok", "connected", "replied", "delivered", "refused", "dropped", "failed"}

func (s *Scenario) checkExpect(st *Step, sp string, errs *[]error) {
	e := st.Expect
	ep := sp + ".expect"
	fail := func(f, format string, args ...any) {
		*errs = append(*errs, s.errorf(ep+"."+f, format, args...))
	}
	traffic := st.Connect != nil || st.Send != nil
	only := func(f string, set bool, ok bool, what string) {
		if set && !ok {
			fail(f, "only %s steps have %s", what, f)
		}
	}
	only("result", e.Result != "", traffic, "connect and send")
	only("min_success", e.MinSuccess != nil, traffic, "connect and send")
	only("reaches", e.Reaches != nil, traffic, "connect and send")
	only("not_reaches", e.NotReaches != nil, traffic, "connect and send")
	only("backends", e.Backends != nil, traffic, "connect and send")
	only("spread", e.Spread != nil, traffic, "connect and send")
	only("seen_source", e.SeenSource != "", traffic, "connect and send")
	only("rcode", e.Rcode != "", st.DNS != nil, "dns")
	only("answer", e.Answer != nil, st.DNS != nil, "dns")
	glibc := st.DNS != nil && (strings.EqualFold(st.DNS.Type, "both") || len(st.DNS.Options) > 0)
	only("answers", e.Answers != nil, glibc, "dns (type both or options)")
	only("delay", e.Delay != nil, glibc, "dns (type both or options)")
	for k := range e.Answers {
		if t := strings.ToUpper(k); t != "A" && t != "AAAA" {
			fail("answers."+k, "want A or AAAA, got %q", k)
		}
	}
	if d := e.Delay; d != nil && d.Min != nil && d.AtMost != nil && *d.Min > *d.AtMost {
		fail("delay", "min %s is over at_most %s", d.Min, d.AtMost)
	}
	only("count", e.Count != nil, st.Check != nil, "check")
	only("repair", e.Repair != nil, st.RestartAPIServer != nil, "restart_apiserver")
	only("ready", e.Ready != nil, st.Check != nil && st.Check.Endpoints != nil, "check endpoints")
	only("rejected", e.Rejected != "", st.Apply != nil, "apply")
	checkEndpointExpects(st, fail)
	only("serving", e.Serving != nil, st.Check != nil && st.Check.Endpoints != nil, "check endpoints")
	only("terminating", e.Terminating != nil, st.Check != nil && st.Check.Endpoints != nil, "check endpoints")
	only("ctstate", e.CtState != nil, st.Send != nil && st.Send.Packet != nil, "send (with a crafted packet)")
	only("answered_with", e.AnsweredWith != "", st.Send != nil && st.Send.Packet != nil && st.Send.Packet.Deliver, "send (with a crafted packet, deliver: true)")
	if e.AnsweredWith != "" {
		if _, err := answerName(e.AnsweredWith); err != nil {
			fail("answered_with", "%v", err)
		}
	}
	if e.Result != "" && !slices.Contains(resultNames, e.Result) {
		fail("result", "want one of %s, got %q", strings.Join(resultNames, ", "), e.Result)
	}
	if st.Send != nil && (e.Result == "connected" || e.Result == "replied") {
		fail("result", "a send step sends single packets: want delivered, refused, dropped, failed or ok, got %q", e.Result)
	}
	if st.Connect != nil && e.Result == "delivered" {
		fail("result", "a connect step completes exchanges: want connected, replied, refused, dropped, failed or ok, got %q", e.Result)
	}
	if e.MinSuccess != nil && (*e.MinSuccess < 0 || *e.MinSuccess > 1) {
		fail("min_success", "want a fraction between 0 and 1 (or a percentage), got %v", *e.MinSuccess)
	}
	for i, r := range append(slices.Clone(e.Reaches), e.NotReaches...) {
		f := fmt.Sprintf("reaches[%d]", i)
		if i >= len(e.Reaches) {
			f = fmt.Sprintf("not_reaches[%d]", i-len(e.Reaches))
		}
		if _, err := path.Match(strings.TrimPrefix(r, "pod:"), ""); err != nil || r == "" {
			fail(f, "want a pod NAMESPACE/NAME or a pattern such as default/web-*, got %q", r)
		}
	}
	if e.Backends != nil && *e.Backends < 0 {
		fail("backends", "want zero or more, got %d", *e.Backends)
	}
	if e.Spread != nil && (*e.Spread <= 0 || *e.Spread > 1) {
		fail("spread", "want a tolerance between 0 and 1 (0.25: each backend within ±25%% of an even share), got %v", *e.Spread)
	}
	if e.SeenSource != "" {
		switch {
		case e.SeenSource == "client", e.SeenSource == "not-client", e.SeenSource == "node", strings.HasPrefix(e.SeenSource, "node:"):
		default:
			if _, err := netip.ParseAddr(e.SeenSource); err != nil {
				fail("seen_source", "want client, not-client, node, node:NAME or an IP address, got %q", e.SeenSource)
			}
		}
	}
	if e.Rcode != "" && rcodeOf(e.Rcode) < 0 {
		fail("rcode", "want NOERROR, NXDOMAIN, SERVFAIL, REFUSED, FORMERR or NOTIMP, got %q", e.Rcode)
	}
	if e.Count != nil && *e.Count < 0 {
		fail("count", "want zero or more, got %d", *e.Count)
	}
	s.checkMoreExpect(st, ep, fail)
}

var rcodes = []string{"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED"}

func rcodeOf(s string) int { return slices.Index(rcodes, strings.ToUpper(s)) }

var dnsTypes = []string{"A", "AAAA", "SRV", "PTR", "TXT", "CNAME", "NS", "SOA"}

func orDefault(families string) string {
	if families == "" {
		return "the IPv4 default"
	}
	return families
}
