package conformance

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proptest"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
	ipvsemu "github.com/clusterlab/clusterlab/proxy/ipvs/emulator"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"
)

// The kernel differential: a generated case runs in the simulation under kube-proxy's
// iptables mode (the emulator in netsim's datapath) and on a real kernel, in network
// namespaces that mirror the simulated cluster (kernel.Harness: the same node and pod
// addresses, the pods' echo servers on their containerPorts, external clients at the
// external hosts' addresses), each node's namespace programmed by the same iptables
// proxier through iptables-restore (or, with KernelOptions.Mode, both sides run
// kube-proxy's IPVS mode). Then every flow goes to the kernel with real sockets, and
// each kernel outcome must be one the simulation can give.

// KernelFits reports why a case cannot run on the kernel harness, or nil: the harness
// has one or two nodes, IPv4 only, and no faults.
func KernelFits(c *proptest.Case) error {
	switch {
	case len(c.Cluster.Nodes) > 2:
		return fmt.Errorf("%d nodes (the harness has at most 2)", len(c.Cluster.Nodes))
	case c.Cluster.DualStack:
		return errors.New("dual-stack (the differential is IPv4)")
	case c.Faulty():
		return errors.New("faults")
	}
	return nil
}

// KernelCases draws cases for CompareKernel: o with at most two nodes, IPv4 only and no
// steps, and always at least one Service with traffic to exercise (HasVIPWithEndpoint),
// so that no kernel case is spent on headless and ExternalName services alone.
func KernelCases(o proptest.Options) *rapid.Generator[*proptest.Case] {
	if o.MaxNodes <= 0 || o.MaxNodes > 2 {
		o.MaxNodes = 2
	}
	o.NoDualStack, o.NoSteps, o.Faults = true, true, false
	return proptest.Cases(o).Filter(HasVIPWithEndpoint)
}

// HasVIPWithEndpoint reports whether one of the case's Services has a cluster IP and a
// ready endpoint for one of its ports: a ready pod its selector picks that serves the
// port (a numeric targetPort, or a container port of the targetPort's name and
// protocol), or, for a selectorless Service, a ready endpoint in one of its hand-written
// EndpointSlices that has ports (and, under internalTrafficPolicy Local, names its
// node). Some connections to that cluster IP are then DNATed to an endpoint.
func HasVIPWithEndpoint(c *proptest.Case) bool {
	for _, svc := range c.Services {
		if svc.Spec.Type == corev1.ServiceTypeExternalName || svc.Spec.ClusterIP == corev1.ClusterIPNone || len(svc.Spec.Ports) == 0 {
			continue
		}
		// Under internalTrafficPolicy Local an endpoint is reached from its own node
		// (whose host network is always a source), which a hand-written one must name.
		local := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
		if svc.Spec.Selector == nil {
			for _, sl := range c.Slices {
				if sl.Namespace != svc.Namespace || sl.Labels[discoveryv1.LabelServiceName] != svc.Name || len(sl.Ports) == 0 {
					continue
				}
				for _, ep := range sl.Endpoints {
					if (ep.Conditions.Ready == nil || *ep.Conditions.Ready) && (!local || ep.NodeName != nil) {
						return true
					}
				}
			}
			continue
		}
		for _, pod := range c.Pods {
			if pod.Namespace != svc.Namespace || c.State(pod.Namespace+"/"+pod.Name) != proptest.PodReady ||
				!labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
				continue
			}
			for i := range svc.Spec.Ports {
				sp := svc.Spec.Ports[i]
				if sp.Protocol == "" {
					sp.Protocol = corev1.ProtocolTCP
				}
				if _, ok := service.FindPort(pod, &sp); ok {
					return true
				}
			}
		}
	}
	return false
}

// KernelMismatch is a kernel outcome the simulation cannot give.
type KernelMismatch struct {
	Flow Flow
	// Sim is the simulation's observation, Kernel what the kernel did.
	Sim    Observation
	Kernel Outcome
}

func (m KernelMismatch) String() string {
	return fmt.Sprintf("%s\n    simulation: %s\n    kernel: %s", m.Flow, m.Sim, m.Kernel)
}

// KernelComparison is one case run in the simulation and on the kernel.
type KernelComparison struct {
	Case  *proptest.Case
	Flows int
	// Attempts counts kernel connections; Agreed those whose outcome the simulation
	// allows.
	Attempts, Agreed int
	// Redialled counts attempts that timed out where the simulation expects an answer
	// and were dialled again, alone, with a longer wait (a busy machine's timeouts).
	Redialled  int
	Mismatches []KernelMismatch
	// Skipped counts flows the harness cannot carry (load-balancer IPs: it has no
	// cloud load balancer).
	Skipped int
	World   *proptest.World
	Harness *kernel.Harness
	// Kernel is the release the simulation modelled (KernelOptions.Kernel).
	Kernel netfilter.KernelVersion
	// Mode is the kube-proxy mode both sides ran.
	Mode string
	// Took is where the time went: the simulation (building the world, observing the
	// flows), the kernel harness (namespaces, links, echo servers, kube-proxy's writes)
	// and the kernel's connections.
	Took struct{ Simulation, Harness, Connections time.Duration }

	nodeAddrs [][]netip.Addr // each harness node's addresses
	ipvs      []*kernel.IPVS // the IPVS mode's netlink handles, closed by Close
}

// Close stops the world and deletes the namespaces.
func (k *KernelComparison) Close() error {
	for _, v := range k.ipvs {
		v.Close()
	}
	k.ipvs = nil
	if k.World != nil {
		k.World.Close()
	}
	if k.Harness != nil {
		return k.Harness.Close()
	}
	return nil
}

// Summary renders the comparison in one line.
func (k *KernelComparison) Summary() string {
	s := fmt.Sprintf("kernel (Linux %s modelled) vs simulation (%s mode): %d flows (%d skipped), %d of %d connections agreed", k.Kernel, k.Mode, k.Flows, k.Skipped, k.Agreed, k.Attempts)
	if k.Redialled > 0 {
		s += fmt.Sprintf(" (%d timed out and dialled again alone)", k.Redialled)
	}
	if len(k.Mismatches) > 0 {
		s += fmt.Sprintf("; %d mismatches", len(k.Mismatches))
	}
	s += fmt.Sprintf("; took %v simulating, %v building the harness, %v connecting", k.Took.Simulation.Round(time.Millisecond),
		k.Took.Harness.Round(time.Millisecond), k.Took.Connections.Round(time.Millisecond))
	return s
}

// KernelAttempts is how many real connections each flow gets on the kernel.
var KernelAttempts = 2

// KernelOptions configure CompareKernel.
type KernelOptions struct {
	// Prefix starts the harness's namespace names (kernel.HarnessConfig.Prefix).
	Prefix string
	// KernelNode, if set, adjusts the kube-proxy flags of the kernel's nodes only: a
	// way to see a flag's effect on real traffic, and to check that the differential
	// notices when kernel and simulation are configured apart.
	KernelNode func(*proxy.NodeConfig)
	// Kernel is the Linux release the simulated nodes model (netsim.NodeSettings.Kernel);
	// the zero value means the running kernel's (RunningKernel), so the comparison
	// holds a kernel to its own release's model: the host's on the host, 6.1 in
	// package internal/vmtest's VM.
	Kernel netfilter.KernelVersion
	// Mode is the kube-proxy mode both sides run: "" or kubeproxy.IPTables (the
	// reference), or kubeproxy.IPVS (the kernel's nodes get kube-ipvs0, the ipsets, the
	// rules around IPVS and real IPVS virtual servers; KernelIPVSSupported says whether
	// this kernel can).
	Mode kubeproxy.Mode
}

// osReleasePath is the running kernel's release (what uname -r prints).
const osReleasePath = "/proc/sys/kernel/osrelease"

// RunningKernel is the running kernel's release as the model's KernelVersion.
func RunningKernel() (netfilter.KernelVersion, error) {
	b, err := os.ReadFile(osReleasePath)
	if err != nil {
		return netfilter.KernelVersion{}, fmt.Errorf("the running kernel's release: %w", err)
	}
	return netfilter.ParseKernelVersion(string(b))
}

// modelKernel makes every node of w model Linux kv.
func modelKernel(w *proptest.World, kv netfilter.KernelVersion) {
	for _, n := range w.Cluster.Nodes() {
		n.UpdateSettings(func(s *netsim.NodeSettings) { s.Kernel = kv })
	}
}

// KernelIPVSSupported says why CompareKernel cannot run the IPVS mode here, or nil: it
// needs the kernel's IPVS (kernel.CheckIPVS) and the ipset tool, besides what the
// iptables mode needs.
func KernelIPVSSupported() error {
	if err := kernel.CheckIPVS(); err != nil {
		return err
	}
	if !kernel.HaveTool("ipset") {
		return errors.New("the ipset tool is not installed")
	}
	return nil
}

// CompareKernel runs a case (see KernelFits) in the simulation under the iptables mode
// (or o.Mode) and on a real kernel (root, iptables-nft, network namespaces; for the
// IPVS mode the kernel's IPVS and ipset too) and holds every kernel outcome to the
// simulation's possible outcomes for the flow. The caller closes the comparison, which
// deletes the namespaces.
func CompareKernel(ctx context.Context, c *proptest.Case, o KernelOptions) (*KernelComparison, error) {
	if err := KernelFits(c); err != nil {
		return nil, fmt.Errorf("conformance: the case does not fit the kernel harness: %w", err)
	}
	mode := Reference
	switch o.Mode {
	case "", kubeproxy.Mode(Reference.Name):
	case kubeproxy.IPVS:
		mode = KubeProxyMode(kubeproxy.IPVS)
	default:
		return nil, fmt.Errorf("conformance: KernelOptions.Mode %q: the kernel differential runs the iptables and ipvs modes", o.Mode)
	}
	start := time.Now()
	w, err := proptest.Build(c, mode.Proxy)
	if err != nil {
		return nil, err
	}
	w.Mode, w.Semantics = mode.Name, mode.Semantics
	kv := o.Kernel
	if kv.IsZero() {
		if kv, err = RunningKernel(); err != nil {
			w.Close()
			return nil, fmt.Errorf("conformance: %w", err)
		}
	}
	modelKernel(w, kv)
	k := &KernelComparison{Case: c, World: w, Kernel: kv, Mode: mode.Name}
	k.Took.Simulation = time.Since(start)
	keep := k.flows()
	if len(keep) == 0 {
		return k, nil // nothing to send: no namespaces needed
	}
	start = time.Now()
	if err := k.build(ctx, o); err != nil {
		k.Close()
		return nil, err
	}
	k.Took.Harness = time.Since(start)
	if err := k.run(keep); err != nil {
		k.Close()
		return nil, err
	}
	return k, nil
}

// build makes the harness that mirrors the world and programs each node.
func (k *KernelComparison) build(ctx context.Context, o KernelOptions) error {
	w, c := k.World, k.Case
	cfg := kernel.HarnessConfig{Prefix: o.Prefix, SecondNode: len(c.Cluster.Nodes) == 2,
		NodeNetwork: netip.PrefixFrom(proptest.NodeCIDR4.Addr(), 24), ClusterCIDR: proptest.ClusterCIDR4,
		Timeout: 500 * time.Millisecond, PodPorts: []uint16{}}
	for i := range c.Cluster.Nodes {
		cfg.NodeIPs = append(cfg.NodeIPs, c.Cluster.NodeIPs(i)[0])
	}
	for _, e := range c.Externals {
		cfg.ExternalAddrs = append(cfg.ExternalAddrs, e.IP)
	}
	for _, p := range w.Cluster.Pods() {
		obj, ok := w.Cluster.Store().GetPod(p.Namespace(), p.Name())
		if !ok || p.HostNetwork() {
			continue
		}
		pc := kernel.PodConfig{Name: p.Key(), Node: c.Cluster.NodeIndex(p.Node().Name()), IP: p.IP(),
			TCPPorts: []uint16{}, UDPPorts: []uint16{}}
		pc.AddContainerPorts(obj.Spec.Containers, nil)
		cfg.Pods = append(cfg.Pods, pc)
	}
	h, err := kernel.NewHarness(cfg)
	if err != nil {
		return fmt.Errorf("conformance: harness: %w", err)
	}
	k.Harness = h
	services := w.Cluster.Store().ListServices()
	var slices []*discoveryv1.EndpointSlice
	slices = append(slices, w.Cluster.Store().ListEndpointSlices()...)
	for _, n := range h.Nodes {
		sim := w.Cluster.Nodes()[n.Index]
		nc := kubeproxy.NodeConfigFor(sim)
		c.Cluster.KubeProxyFlags(&nc)
		local, err := h.LocalAddrs(n.Netns)
		if err != nil {
			return err
		}
		k.nodeAddrs = append(k.nodeAddrs, local)
		nc.Addresses = nil
		for _, a := range local {
			if a.Is4() {
				nc.Addresses = append(nc.Addresses, a)
			}
		}
		nc.BridgeInterface = "cbr0"
		if o.KernelNode != nil {
			o.KernelNode(&nc)
		}
		if k.Mode == string(kubeproxy.IPVS) {
			if err := k.programIPVS(ctx, n, nc, services, slices); err != nil {
				return fmt.Errorf("conformance: kube-proxy (ipvs) for %s: %w", sim.Name(), err)
			}
			continue
		}
		px, err := h.NewIPTablesProxier(n, nil, iptables.Config{Node: nc})
		if err != nil {
			return fmt.Errorf("conformance: kube-proxy for %s: %w", sim.Name(), err)
		}
		if _, err := px.Sync(ctx, services, slices); err != nil {
			return fmt.Errorf("conformance: kube-proxy sync into %s: %w", n.Netns, err)
		}
	}
	if k.Mode == string(kubeproxy.IPVS) {
		// The virtual addresses on kube-ipvs0 are the node's own now: a backend that
		// sees one saw the node.
		for i, n := range h.Nodes {
			local, err := h.LocalAddrs(n.Netns)
			if err != nil {
				return err
			}
			k.nodeAddrs[i] = local
		}
	}
	return nil
}

// programIPVS runs kube-proxy's IPVS proxier on a harness node, as kube-proxy does on a
// real one: the sysctls it sets at start-up (vs/conntrack, expire_nodest_conn,
// expire_quiescent_template, ip_forward) in the node's namespace, kube-ipvs0 with every
// service address bound, the ipsets (ipset restore), the iptables rules around IPVS
// (iptables-restore) and a virtual server per service address with its real servers
// (generic netlink). The kernel's release is the proxier's kernel version, as
// kube-proxy reads it.
func (k *KernelComparison) programIPVS(ctx context.Context, n *kernel.Node, nc proxy.NodeConfig, services []*corev1.Service, slices []*discoveryv1.EndpointSlice) error {
	px, err := k.Harness.NewIPVSProxier(n, nil, ipvs.ProxierConfig{Family: corev1.IPv4Protocol, Node: nc})
	if err != nil {
		return err
	}
	k.ipvs = append(k.ipvs, px.IPVS)
	res, err := px.Sync(ctx, services, slices)
	if err != nil {
		return fmt.Errorf("sync into %s: %w", n.Netns, err)
	}
	if len(res.Warnings) > 0 {
		return fmt.Errorf("sync into %s: %w", n.Netns, errors.Join(res.Warnings...))
	}
	return nil
}

// kernelParallel is how many kernel connections are in flight at once. Connections are
// independent: a flow's possible outcomes are taken before any connection pins a
// client under affinity, so the order they run in does not matter.
const kernelParallel = 16

// kernelRedialTimeout is the wait of a second look at an attempt that timed out.
const kernelRedialTimeout = 3 * time.Second

// flows returns the flows the harness can carry and counts the others.
func (k *KernelComparison) flows() []Flow {
	all := Flows(k.World)
	k.Flows = len(all)
	var keep []Flow
	for _, f := range all {
		if f.Kind == KindLoadBalancer {
			k.Skipped++
			continue
		}
		keep = append(keep, f)
	}
	return keep
}

// run sends every flow to the kernel and compares.
func (k *KernelComparison) run(keep []Flow) error {
	w, h := k.World, k.Harness
	start := time.Now()
	obs := make([]Observation, len(keep))
	for i, f := range keep {
		o, err := observeBranches(w, f)
		if err != nil {
			return err
		}
		obs[i] = o
	}
	for i, f := range keep {
		if k.Mode == string(kubeproxy.IPVS) {
			if err := observeIPVSAttempts(w, f, &obs[i]); err != nil {
				return err
			}
			continue
		}
		if err := observeAttempts(w, f, Attempts, &obs[i]); err != nil {
			return err
		}
	}
	k.Took.Simulation += time.Since(start)
	start = time.Now()
	defer func() { k.Took.Connections = time.Since(start) }()
	type job struct{ flow, attempt int }
	results := make([][]Outcome, len(keep))
	var jobs []job
	for i := range keep {
		results[i] = make([]Outcome, KernelAttempts)
		for a := 0; a < KernelAttempts; a++ {
			jobs = append(jobs, job{i, a})
		}
	}
	srcs := make([]*kernel.Netns, len(keep))
	addrs := make([]netip.AddrPort, len(keep))
	for i, f := range keep {
		ns, src, err := k.source(f)
		if err != nil {
			return err
		}
		srcs[i], addrs[i] = ns, src
	}
	var wg sync.WaitGroup
	next := make(chan job)
	for n := 0; n < kernelParallel; n++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				f := keep[j.flow]
				res := h.DialFrom(srcs[j.flow], netsim.ProtoName(f.Proto), addrs[j.flow], f.Dst)
				results[j.flow][j.attempt] = k.outcome(f, res)
			}
		}()
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
	// A kernel attempt that timed out where the simulation says the flow is answered
	// may be the machine's load, not the rules: 16 dials in parallel on a busy 2-core
	// machine can miss the harness's 500 ms. Such an attempt is dialled again, alone,
	// with a longer wait, and only its second result counts (an answer then is one the
	// rules gave: a dropped packet stays dropped however long one waits).
	for i, f := range keep {
		for a, got := range results[i] {
			if got.Class != Dropped || kernelAllowed(obs[i], got) {
				continue
			}
			k.Redialled++
			res := h.DialFromTimeout(srcs[i], netsim.ProtoName(f.Proto), addrs[i], f.Dst, kernelRedialTimeout)
			results[i][a] = k.outcome(f, res)
		}
	}
	for i, f := range keep {
		var first *KernelMismatch
		for _, got := range results[i] {
			k.Attempts++
			if kernelAllowed(obs[i], got) {
				k.Agreed++
				continue
			}
			if first == nil {
				first = &KernelMismatch{Flow: f, Sim: obs[i], Kernel: got}
			}
		}
		if first != nil {
			k.Mismatches = append(k.Mismatches, *first)
		}
	}
	return nil
}

// kernelAllowed: a kernel outcome the simulation allows. A send the kernel refuses
// with EPERM (netfilter dropped or rejected the node's own packet in OUTPUT) is either.
func kernelAllowed(o Observation, got Outcome) bool {
	if got.Class == "local-error" {
		return o.HasClass(Dropped) || o.HasClass(Refused)
	}
	return o.has(got, false)
}

// source returns the namespace and address a flow leaves from.
func (k *KernelComparison) source(f Flow) (*kernel.Netns, netip.AddrPort, error) {
	h := k.Harness
	kind, name, _ := strings.Cut(f.From, ":")
	switch kind {
	case "pod":
		if p := h.Pod(name); p != nil {
			return p.Netns, netip.AddrPort{}, nil
		}
	case "node":
		if i := k.Case.Cluster.NodeIndex(name); i >= 0 && i < len(h.Nodes) {
			return h.Nodes[i].Netns, netip.AddrPort{}, nil
		}
	case "external":
		return h.External, netip.AddrPortFrom(f.Client, 0), nil
	}
	return nil, netip.AddrPort{}, fmt.Errorf("conformance: no harness source for %s", f.From)
}

// outcome turns a kernel result into the suite's outcome.
func (k *KernelComparison) outcome(f Flow, r kernel.Result) Outcome {
	switch r.Outcome {
	case kernel.Answered:
		return Outcome{Class: Answered, Backend: r.Server, Seen: k.seen(f, r.Source.Addr())}
	case kernel.Refused:
		return Outcome{Class: Refused, Reason: fmt.Sprint(r.Err)}
	case kernel.TimedOut, kernel.Unreachable:
		return Outcome{Class: Dropped, Reason: fmt.Sprint(r.Err)}
	}
	if errors.Is(r.Err, syscall.EPERM) {
		return Outcome{Class: "local-error", Reason: "EPERM: netfilter dropped the node's own packet"}
	}
	return Outcome{Class: "error", Reason: fmt.Sprint(r.Err)}
}

// seen classifies a source address a kernel echo server saw.
func (k *KernelComparison) seen(f Flow, a netip.Addr) string {
	a = a.Unmap()
	if a == f.Client {
		return SeenClient
	}
	for i, local := range k.nodeAddrs {
		for _, l := range local {
			if l == a {
				if nodeSource(f) && k.Case.Cluster.NodeIndex(strings.TrimPrefix(f.From, "node:")) == i {
					return SeenClient
				}
				return SeenNode
			}
		}
	}
	return SeenOther
}

// observeIPVSAttempts takes the IPVS world's possible outcomes of a flow: where the
// kernel's scheduler (rr) will start is not the simulation's business (its cursor
// depends on every connection before), so the flow gets as many attempts as the virtual
// server it reaches has real servers (at least Attempts), which under rr picks each of
// them in turn. With ClientIP affinity (IPVS persistence) the attempt's connection
// entries and then the persistence template they held are expired in the entry node's
// IPVS model between attempts (as their timers would), so that each attempt is
// scheduled afresh instead of following the template. Nothing else in the world moves:
// the virtual clock stays (moving it on by the template's life would also end
// terminating pods and cost seconds a flow).
func observeIPVSAttempts(w *proptest.World, f Flow, o *Observation) error {
	attempts := Attempts
	entry := f.EntryNode
	if entry == "" {
		entry = f.Node
	}
	var model *ipvsemu.Model
	if n := w.Cluster.Node(entry); n != nil {
		model = kubeproxy.IPVSModel(n)
	}
	if model != nil {
		vs := &ipvs.VirtualServer{Address: f.Dst.Addr(), Port: f.Dst.Port(), Protocol: strings.ToUpper(netsim.ProtoName(f.Proto))}
		if rs, err := model.GetRealServers(vs); err == nil && len(rs) > attempts {
			attempts = len(rs)
		}
	}
	for i := 0; i < attempts; i++ {
		if i > 0 && f.View.Affinity() > 0 && model != nil {
			if err := expireIPVSEntries(model, f); err != nil {
				return err
			}
		}
		if err := observeAttempts(w, f, 1, o); err != nil {
			return err
		}
	}
	return nil
}

// expireIPVSEntries expires a flow's IPVS connection entries (its client to its
// destination over its protocol: a TCP and a UDP port of one number have a virtual
// server and templates each), then the persistence templates they held (a template outlives its
// timer while it controls connections), and checks that no template is left.
func expireIPVSEntries(m *ipvsemu.Model, f Flow) error {
	proto := strings.ToUpper(netsim.ProtoName(f.Proto))
	mine := func(e ipvsemu.ConnEntry) bool {
		return e.Protocol == proto && e.Client.Addr() == f.Client && e.Virtual == f.Dst
	}
	for _, template := range []bool{false, true} {
		for _, e := range m.Connections() {
			switch {
			case !mine(e) || e.Template != template:
			case template:
				m.ExpireTemplate(f.Proto, e.Client.Addr(), e.Virtual)
			default:
				m.ExpireConnection(f.Proto, e.Client, e.Virtual)
			}
		}
	}
	for _, e := range m.Connections() {
		if mine(e) && e.Template {
			return fmt.Errorf("conformance: %s: the IPVS model's persistence template %s -> %s outlived its expiry (it controls %d connections)", f, e.Client, e.Dest, e.Controls)
		}
	}
	return nil
}
