package kubeproxy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
)

// Mode names a kube-proxy proxy mode.
type Mode string

// The modes this package registers (see ModeInfo: a mode is known by its descriptor, not
// by these names).
const (
	IPTables  Mode = "iptables"
	IPVS      Mode = "ipvs"
	Userspace Mode = "userspace"
)

// ModeInfo describes a proxy mode: how to build it on a node, and everything the rest
// of clusterlab needs to know about it — the scenario runner, the demo, the property kit
// and the conformance suite, the CLI's flags, help and completion, and kernel check all
// loop over the registered descriptors, and none of them names a mode. Adding a mode is
// its package (a rule writer, the in-memory model it writes to, a kernel adapter) and
// one descriptor passed to Register.
type ModeInfo struct {
	// Mode is the mode's name, as kube-proxy's --proxy-mode spells it.
	Mode Mode
	// Summary says in a line what the mode does (help texts).
	Summary string
	// Order places the mode in lists: the demo shows modes in this order.
	Order int
	// Reference marks the mode the others are held to: kube-proxy's default, whose
	// behaviour the property kit's invariants describe. One mode has it.
	Reference bool
	// New builds the mode's proxy on a node from the node's kube-proxy flags (filled in
	// and validated by Factory). It registers the proxy's handlers on the node.
	New func(n *cluster.Node, opts Options, cfg proxy.NodeConfig) (cluster.Proxy, error)
	// Families are the IP families the mode serves; a node with an address of another
	// family cannot run it.
	Families []corev1.IPFamily
	// Settings are the node's kernel settings the mode needs with the node's flags
	// (kube-proxy's iptables mode sets route_localnet for localhost node ports); Factory
	// applies them before New. nil: none.
	Settings func(cfg proxy.NodeConfig, s *netsim.NodeSettings)
	// ConfigType is the type of the mode's own flags in Options.ModeConfig (IPVSConfig,
	// UserspaceConfig), nil when it has none.
	ConfigType any
	// Schedulers are the values Options.Scheduler takes (--ipvs-scheduler), the first
	// the default; empty when the mode has no scheduler.
	Schedulers []string
	// Versions are the kube-proxy releases the mode is modelled in.
	Versions Versions
	// NodeHints: the mode reads EndpointSlice hints (topology-aware routing), which
	// kube-proxy before 1.34 reads without the node hints (PreferSameNode).
	NodeHints bool
	// Semantics are the behaviours in which the mode legitimately differs from the
	// reference mode; the property kit holds the mode to them.
	Semantics Semantics
	// Differences are the mode's by-design differences from the reference mode that the
	// conformance suite can explain a mismatch with (it holds the predicate of each).
	Differences []Difference
	// Demo explains, in a few lines, how the mode spreads the demo's connections and
	// what source address the backends see.
	Demo []string
	// KernelNeeds names what a real kernel must offer to run the mode, as kernel check
	// reports it: "iptables", "ipvs", "ipset", "conntrack".
	KernelNeeds []string
}

// Versions are the kube-proxy releases a mode is modelled in, as "1.MINOR".
type Versions struct {
	// First and Last bound the releases modelled.
	First, Last string
	// Default is the release a scenario that names none gets.
	Default string
	// Removed is the release that removed the mode ("" if it has not been).
	Removed string
	// Deprecated is the first release that deprecates the mode, with its note.
	Deprecated, DeprecationNote string
}

// Difference is a by-design difference of a mode from the reference mode.
type Difference struct {
	// Name identifies it ("ipvs-no-localhost-nodeports").
	Name string
	// Doc says what differs and why.
	Doc string
}

// Semantics are the behaviours in which proxy modes legitimately differ; the property
// kit's checkers hold a mode to its Semantics.
type Semantics struct {
	// Name labels the semantics in messages.
	Name string
	// LocalhostNodePorts: NodePorts answer on 127.0.0.1 from the node itself (iptables
	// mode with --iptables-localhost-nodeports, IPv4 only).
	LocalhostNodePorts bool
	// AffinityExpires: once the ClientIP timeout has passed since a client's last
	// connection, its next one may go to any backend (iptables' recent match). IPVS
	// keeps a persistence template while connections that use it live.
	AffinityExpires bool
	// NoLocalEndpoints is what a connection gets where a traffic policy of Local leaves
	// no endpoint on the node: "dropped" (iptables' DROP; the default), "refused", or
	// "cluster": the cluster's endpoints are used instead (IPVS gives the virtual server
	// the cluster endpoints then, kubernetes#97081, so that pods on the node still get
	// through).
	NoLocalEndpoints string
	// Branches: every endpoint a new connection may go to is a branch of a probe
	// (iptables' random statistic rules), so coverage is checked on one probe. IPVS's
	// default scheduler (rr) decides without a random choice.
	Branches bool
	// NoEndpoints is what a connection to a service port without endpoints gets:
	// "refused" (the default).
	NoEndpoints string
	// ShortCircuit: traffic from a pod to a service's external IP goes to the cluster
	// endpoints whatever the external traffic policy (iptables' "pod traffic for ...
	// external destinations" rule). IPVS applies the policy to pods too.
	ShortCircuit bool
	// Terminates: the proxy terminates connections on the node and opens its own to
	// the backend (userspace), so a probe ends at its listener and the backend sees the
	// node as the client: traffic is observed with real connections.
	Terminates bool
}

var (
	modesMu sync.RWMutex
	modes   = map[Mode]ModeInfo{}
)

// Register adds a mode's descriptor. It panics on a descriptor without a name or a
// constructor, on a second descriptor of the same name, and on a second reference mode:
// those are programming errors.
func Register(m ModeInfo) {
	modesMu.Lock()
	defer modesMu.Unlock()
	switch {
	case m.Mode == "" || m.New == nil || len(m.Families) == 0:
		panic(fmt.Sprintf("kubeproxy: Register: mode %q needs a name, a constructor and its families", m.Mode))
	case modes[m.Mode].Mode != "":
		panic(fmt.Sprintf("kubeproxy: Register: mode %q registered twice", m.Mode))
	}
	if m.Reference {
		for _, o := range modes {
			if o.Reference {
				panic(fmt.Sprintf("kubeproxy: Register: %s and %s are both the reference mode", o.Mode, m.Mode))
			}
		}
	}
	if m.Semantics.Name == "" {
		m.Semantics.Name = string(m.Mode)
	}
	modes[m.Mode] = m
}

// Lookup returns the descriptor of a mode.
func Lookup(m Mode) (ModeInfo, bool) {
	modesMu.RLock()
	defer modesMu.RUnlock()
	info, ok := modes[m]
	return info, ok
}

// Registered returns every registered descriptor, in Order.
func Registered() []ModeInfo {
	modesMu.RLock()
	out := make([]ModeInfo, 0, len(modes))
	for _, m := range modes {
		out = append(out, m)
	}
	modesMu.RUnlock()
	slices.SortFunc(out, func(a, b ModeInfo) int {
		if a.Order != b.Order {
			return a.Order - b.Order
		}
		return strings.Compare(string(a.Mode), string(b.Mode))
	})
	return out
}

// Modes lists the registered modes, in Order.
func Modes() []Mode {
	var out []Mode
	for _, m := range Registered() {
		out = append(out, m.Mode)
	}
	return out
}

// ModeNames lists the registered modes' names, in Order ("iptables, ipvs, ..." for
// messages and help).
func ModeNames() []string {
	var out []string
	for _, m := range Registered() {
		out = append(out, string(m.Mode))
	}
	return out
}

// Reference returns the reference mode's descriptor: the default mode, the one the
// others are compared with.
func Reference() ModeInfo {
	for _, m := range Registered() {
		if m.Reference {
			return m
		}
	}
	panic("kubeproxy: no reference mode registered")
}

// SemanticsOf returns the semantics of a mode by name; a mode this package does not know
// (a proxy of your own) is held to the reference mode's.
func SemanticsOf(mode string) Semantics {
	if m, ok := Lookup(Mode(mode)); ok {
		return m.Semantics
	}
	return Reference().Semantics
}

// Scheduler returns the scheduler the mode runs with opts (the default when opts names
// none), or "" when the mode has no scheduler.
func (m ModeInfo) Scheduler(opts Options) string {
	if len(m.Schedulers) == 0 {
		return ""
	}
	if opts.Scheduler != "" {
		return opts.Scheduler
	}
	return m.Schedulers[0]
}

// Minor parses a kube-proxy release ("1.31", "v1.31.2") into its minor number.
func Minor(v string) (int, error) {
	s := strings.TrimPrefix(strings.TrimSpace(v), "v")
	major, rest, ok := strings.Cut(s, ".")
	if !ok || major != "1" {
		return 0, fmt.Errorf("want a version such as 1.31, got %q", v)
	}
	minorStr, _, _ := strings.Cut(rest, ".")
	minor, err := strconv.Atoi(minorStr)
	if err != nil || minor < 0 {
		return 0, fmt.Errorf("want a version such as 1.31, got %q", v)
	}
	return minor, nil
}

// Factory returns the cluster.ProxyFactory of a mode (Options.Mode; the reference mode
// when empty): for each node it fills in the node's kube-proxy flags (NodeConfigFor,
// then Options.Node), validates them and builds the mode with its descriptor's New.
func Factory(opts Options) cluster.ProxyFactory {
	if opts.ShareRules && opts.share == nil {
		opts.share = &shareRegistry{}
	}
	return func(n *cluster.Node) (cluster.Proxy, error) {
		mode := opts.Mode
		if mode == "" {
			mode = Reference().Mode
		}
		info, ok := Lookup(mode)
		if !ok {
			return nil, fmt.Errorf("kube-proxy mode %q is not available (have %s)", mode, strings.Join(ModeNames(), ", "))
		}
		return info.build(n, opts)
	}
}

// build builds the mode's proxy on a node: the node's kube-proxy flags (NodeConfigFor,
// then Options.Node), validated, the node's families checked against the mode's, the
// settings the mode needs applied, then New.
func (info ModeInfo) build(n *cluster.Node, opts Options) (cluster.Proxy, error) {
	if err := info.checkOptions(opts); err != nil {
		return nil, fmt.Errorf("kube-proxy on %s: %w", n.Name(), err)
	}
	cfg := NodeConfigFor(n)
	if opts.Node != nil {
		opts.Node(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kube-proxy on %s: %w", n.Name(), err)
	}
	for _, ip := range n.IPs() {
		fam := corev1.IPv4Protocol
		if ip.Is6() {
			fam = corev1.IPv6Protocol
		}
		if !slices.Contains(info.Families, fam) {
			return nil, fmt.Errorf("kube-proxy on %s: the %s mode does not serve %s (node address %s)", n.Name(), info.Mode, fam, ip)
		}
	}
	if info.Settings != nil {
		n.UpdateSettings(func(s *netsim.NodeSettings) { info.Settings(cfg, s) })
	}
	opts.Mode = info.Mode
	return info.New(n, opts, cfg)
}

// checkOptions refuses another mode's own flags (Options.ModeConfig). A scheduler is
// ignored by modes without one, as kube-proxy ignores --ipvs-scheduler outside the IPVS
// mode; its value is the mode's to check.
func (m ModeInfo) checkOptions(opts Options) error {
	if opts.ModeConfig != nil && (m.ConfigType == nil || fmt.Sprintf("%T", opts.ModeConfig) != fmt.Sprintf("%T", m.ConfigType)) {
		return fmt.Errorf("the %s mode does not take %T", m.Mode, opts.ModeConfig)
	}
	return nil
}
