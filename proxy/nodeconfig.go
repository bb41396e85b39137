package proxy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// LocalMode is kube-proxy's --detect-local-mode: how it tells traffic from this
// cluster's pods apart from other traffic.
type LocalMode string

// Local traffic detection modes.
const (
	// LocalModeClusterCIDR: source inside --cluster-cidr (kube-proxy's default).
	LocalModeClusterCIDR LocalMode = "ClusterCIDR"
	// LocalModeNodeCIDR: source inside this node's spec.podCIDRs.
	LocalModeNodeCIDR LocalMode = "NodeCIDR"
	// LocalModeBridgeInterface: packet arrived on the named bridge.
	LocalModeBridgeInterface LocalMode = "BridgeInterface"
	// LocalModeInterfaceNamePrefix: packet arrived on an interface whose name starts
	// with the prefix.
	LocalModeInterfaceNamePrefix LocalMode = "InterfaceNamePrefix"
	// LocalModeNone: no detection; rules that need it are left out.
	LocalModeNone LocalMode = "None"
)

// NodePortAddressesPrimary is the --nodeport-addresses value meaning "only the node's
// primary IP of each family".
const NodePortAddressesPrimary = "primary"

// DefaultMasqueradeBit is kube-proxy's --iptables-masquerade-bit default (mark 0x4000).
const DefaultMasqueradeBit = 14

// NodeConfig describes the node a proxy runs on and the kube-proxy flags that shape its
// rules. The zero value of each field is kube-proxy's default.
type NodeConfig struct {
	// Name is the node name; endpoints whose nodeName equals it are local.
	Name string
	// Labels are the node's labels; topology.kubernetes.io/zone selects zone hints.
	Labels map[string]string
	// IPs are the node's primary IPs (at most one per family): the address a
	// LoadBalancer source range is checked against and what "primary" NodePort addresses
	// mean.
	IPs []netip.Addr
	// Addresses are every address assigned on the node's interfaces, loopback included;
	// --nodeport-addresses CIDRs select from them. If empty, IPs plus 127.0.0.1 and ::1.
	Addresses []netip.Addr
	// PodCIDRs are the node's spec.podCIDRs (for LocalModeNodeCIDR).
	PodCIDRs []netip.Prefix
	// ClusterCIDRs are --cluster-cidr (for LocalModeClusterCIDR).
	ClusterCIDRs []netip.Prefix
	// DetectLocalMode defaults to LocalModeClusterCIDR. A mode whose input is missing for
	// a family (no cluster CIDR of that family, say) gives no detector, as in kube-proxy.
	DetectLocalMode LocalMode
	// BridgeInterface is --detect-local-mode=BridgeInterface's --pod-bridge-interface.
	BridgeInterface string
	// InterfaceNamePrefix is --pod-interface-name-prefix.
	InterfaceNamePrefix string
	// NodePortAddresses is --nodeport-addresses: CIDRs of either family, or the single
	// value "primary". Empty means every local address.
	NodePortAddresses []string
	// MasqueradeAll is --masquerade-all: SNAT all traffic to cluster IPs.
	MasqueradeAll bool
	// MasqueradeBit is --iptables-masquerade-bit (0..31); nil means 14.
	MasqueradeBit *int
	// LocalhostNodePorts is --iptables-localhost-nodeports; nil means true. Only IPv4
	// NodePorts are ever reachable on localhost.
	LocalhostNodePorts *bool
	// IgnoreNodeHints turns the PreferSameTrafficDistribution feature gate off (it is on
	// in current releases): EndpointSlice node hints are then ignored. Same as
	// FeatureGates["PreferSameTrafficDistribution"] = false.
	IgnoreNodeHints bool
	// Version is the kube-proxy release whose behaviour to model (0: the newest,
	// NewestVersion): each behaviour change between releases is a Change that Has
	// answers for it, and feature gates take the release's defaults.
	Version Version
	// FeatureGates is --feature-gates: gates turned on or off against the release's
	// defaults (Gates lists those the model knows).
	FeatureGates map[string]bool
	// ConntrackBinaryMissing says the node's kube-proxy image lacks the conntrack tool:
	// releases before 1.32, which ran it to delete stale UDP entries, then delete none
	// (change conntrack-netlink).
	ConntrackBinaryMissing bool
	// ProxyName makes this node's proxy an alternative proxy of that name instead of
	// kube-proxy: it serves only the Services labelled
	// service.kubernetes.io/service-proxy-name=ProxyName, with kube-proxy's rules, and
	// ignores the unlabelled ones. "" is kube-proxy, which ignores every Service with
	// that label. Either way the service.kubernetes.io/headless label filters as it
	// does in the node's release (ServiceSelector, EndpointSliceSelector). kube-proxy has
	// no such flag: this is the proxy the label hands a Service to. Must be a label
	// value.
	ProxyName string
}

// NodeHints reports whether kube-proxy reads EndpointSlice node hints
// (trafficDistribution PreferSameNode): the PreferSameTrafficDistribution gate.
func (c *NodeConfig) NodeHints() bool {
	return c.GateEnabled("PreferSameTrafficDistribution") // false with IgnoreNodeHints too
}

// Validate checks the fields that can be wrong on their own.
func (c *NodeConfig) Validate() error {
	var errs []error
	if err := c.Version.CheckModelled(); err != nil {
		errs = append(errs, fmt.Errorf("node config: version: %w", err))
	} else {
		errs = append(errs, c.validateGates()...)
	}
	if err := c.validateProxyName(); err != nil {
		errs = append(errs, err)
	}
	if c.MasqueradeBit != nil && (*c.MasqueradeBit < 0 || *c.MasqueradeBit > 31) {
		errs = append(errs, fmt.Errorf("node config: masqueradeBit: %d is not in 0..31", *c.MasqueradeBit))
	}
	switch c.DetectLocalMode {
	case "", LocalModeClusterCIDR, LocalModeNodeCIDR, LocalModeNone:
	case LocalModeBridgeInterface:
		if c.BridgeInterface == "" {
			errs = append(errs, errors.New("node config: bridgeInterface: required by detectLocalMode BridgeInterface"))
		}
	case LocalModeInterfaceNamePrefix:
		if c.InterfaceNamePrefix == "" {
			errs = append(errs, errors.New("node config: interfaceNamePrefix: required by detectLocalMode InterfaceNamePrefix"))
		}
	default:
		errs = append(errs, fmt.Errorf("node config: detectLocalMode: unknown mode %q", c.DetectLocalMode))
	}
	if len(c.NodePortAddresses) != 1 || c.NodePortAddresses[0] != NodePortAddressesPrimary {
		for i, s := range c.NodePortAddresses {
			if _, ok := ParseCIDRSloppy(s); !ok {
				errs = append(errs, fmt.Errorf("node config: nodePortAddresses[%d]: invalid CIDR %q (or use %q alone)", i, s, NodePortAddressesPrimary))
			}
		}
	}
	seen := map[corev1.IPFamily]bool{}
	for i, ip := range c.IPs {
		if !ip.IsValid() {
			errs = append(errs, fmt.Errorf("node config: ips[%d]: not a valid address", i))
			continue
		}
		f := familyOf(ip)
		if seen[f] {
			errs = append(errs, fmt.Errorf("node config: ips[%d]: second %s address %s; list at most one per family", i, f, ip))
		}
		seen[f] = true
	}
	return errors.Join(errs...)
}

// Zone returns the node's topology.kubernetes.io/zone label.
func (c *NodeConfig) Zone() string { return c.Labels[corev1.LabelTopologyZone] }

// MasqueradeMark returns 1 << MasqueradeBit.
func (c *NodeConfig) MasqueradeMark() uint32 {
	bit := DefaultMasqueradeBit
	if c.MasqueradeBit != nil {
		bit = *c.MasqueradeBit
	}
	return 1 << uint(bit)
}

// LocalhostNodePortsEnabled returns --iptables-localhost-nodeports (default true).
func (c *NodeConfig) LocalhostNodePortsEnabled() bool {
	return c.LocalhostNodePorts == nil || *c.LocalhostNodePorts
}

// PrimaryIP returns the node IP of the family, if any.
func (c *NodeConfig) PrimaryIP(family corev1.IPFamily) (netip.Addr, bool) {
	for _, ip := range c.IPs {
		if familyOf(ip) == family {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// LocalAddresses returns Addresses, or IPs plus the loopback addresses if Addresses is
// empty.
func (c *NodeConfig) LocalAddresses() []netip.Addr {
	if len(c.Addresses) > 0 {
		return c.Addresses
	}
	out := append([]netip.Addr{}, c.IPs...)
	return append(out, netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback())
}

// LocalTrafficDetector tells whether a packet comes from this cluster's pods (kube-proxy's
// pkg/proxy/util LocalTrafficDetector). Its iptables arguments are what the iptables
// mode writes; Mode and Value let other modes render the same test.
type LocalTrafficDetector struct {
	// Mode is the detection mode; LocalModeNone means not implemented.
	Mode LocalMode
	// Value is the CIDR (ClusterCIDR, NodeCIDR modes), bridge name or interface prefix.
	Value  string
	prefix netip.Prefix
}

// IsImplemented reports whether the detector can tell local traffic at all.
func (d LocalTrafficDetector) IsImplemented() bool { return d.Mode != LocalModeNone && d.Mode != "" }

// IfLocal returns the iptables arguments matching local traffic ("-s 10.0.0.0/8",
// "-i cbr0", "-i veth+").
func (d LocalTrafficDetector) IfLocal() []string {
	switch d.Mode {
	case LocalModeClusterCIDR, LocalModeNodeCIDR:
		return []string{"-s", d.Value}
	case LocalModeBridgeInterface:
		return []string{"-i", d.Value}
	case LocalModeInterfaceNamePrefix:
		return []string{"-i", d.Value + "+"}
	}
	return nil
}

// IfNotLocal returns the negated arguments ("! -s 10.0.0.0/8", ...).
func (d LocalTrafficDetector) IfNotLocal() []string {
	if a := d.IfLocal(); a != nil {
		return append([]string{"!"}, a...)
	}
	return nil
}

// IsLocal evaluates the detector for a packet with source src that arrived on inIface
// ("" for locally generated packets), for proxy modes that decide in code.
func (d LocalTrafficDetector) IsLocal(src netip.Addr, inIface string) bool {
	switch d.Mode {
	case LocalModeClusterCIDR, LocalModeNodeCIDR:
		return d.prefix.Contains(src)
	case LocalModeBridgeInterface:
		return inIface == d.Value
	case LocalModeInterfaceNamePrefix:
		return strings.HasPrefix(inIface, d.Value)
	}
	return false
}

// NewLocalTrafficDetector returns the detector for the family. A CIDR mode without a CIDR
// of the family gives a detector that is not implemented, as in kube-proxy.
func (c *NodeConfig) NewLocalTrafficDetector(family corev1.IPFamily) LocalTrafficDetector {
	pick := func(cidrs []netip.Prefix, mode LocalMode) LocalTrafficDetector {
		for _, p := range cidrs {
			if familyOf(p.Addr()) == family {
				return LocalTrafficDetector{Mode: mode, Value: p.String(), prefix: p}
			}
		}
		return LocalTrafficDetector{Mode: LocalModeNone}
	}
	switch c.DetectLocalMode {
	case "", LocalModeClusterCIDR:
		return pick(c.ClusterCIDRs, LocalModeClusterCIDR)
	case LocalModeNodeCIDR:
		return pick(c.PodCIDRs, LocalModeNodeCIDR)
	case LocalModeBridgeInterface:
		return LocalTrafficDetector{Mode: LocalModeBridgeInterface, Value: c.BridgeInterface}
	case LocalModeInterfaceNamePrefix:
		return LocalTrafficDetector{Mode: LocalModeInterfaceNamePrefix, Value: c.InterfaceNamePrefix}
	}
	return LocalTrafficDetector{Mode: LocalModeNone}
}

// NodePortAddresses is --nodeport-addresses resolved for one family (kube-proxy's
// pkg/proxy/util NodePortAddresses).
type NodePortAddresses struct {
	cidrs                []netip.Prefix
	matchAll             bool
	containsIPv4Loopback bool
}

// ResolveNodePortAddresses resolves --nodeport-addresses for the family: the CIDRs of that
// family, or 0.0.0.0/0 (::/0) if there are none; "primary" means the node's primary IP
// of the family (if it is not a loopback address).
func (c *NodeConfig) ResolveNodePortAddresses(family corev1.IPFamily) (*NodePortAddresses, error) {
	specs := c.NodePortAddresses
	if len(specs) == 1 && specs[0] == NodePortAddressesPrimary {
		specs = nil
		if ip, ok := c.PrimaryIP(family); ok && !ip.IsLoopback() {
			specs = []string{netip.PrefixFrom(ip, ip.BitLen()).String()}
		}
	}
	npa := &NodePortAddresses{}
	for i, s := range specs {
		p, ok := ParseCIDRSloppy(s)
		if !ok {
			return nil, fmt.Errorf("node config: nodePortAddresses[%d]: invalid CIDR %q", i, s)
		}
		if familyOf(p.Addr()) == family {
			npa.cidrs = append(npa.cidrs, p)
		}
	}
	if len(npa.cidrs) == 0 {
		if family == corev1.IPv4Protocol {
			npa.cidrs = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
		} else {
			npa.cidrs = []netip.Prefix{netip.MustParsePrefix("::/0")}
		}
	}
	loop := netip.MustParseAddr("127.0.0.0")
	for i, p := range npa.cidrs {
		if p.Addr().Is4() && (p.Addr().IsLoopback() || p.Contains(loop)) {
			npa.containsIPv4Loopback = true
		}
		if p.Bits() == 0 {
			npa.cidrs = npa.cidrs[i : i+1]
			npa.matchAll = true
			break
		}
	}
	return npa, nil
}

// MatchAll reports whether every local address takes NodePort traffic.
func (n *NodePortAddresses) MatchAll() bool { return n.matchAll }

// ContainsIPv4Loopback reports whether 127.0.0.0/8 addresses are included.
func (n *NodePortAddresses) ContainsIPv4Loopback() bool { return n.containsIPv4Loopback }

// CIDRs returns the resolved CIDRs.
func (n *NodePortAddresses) CIDRs() []netip.Prefix { return n.cidrs }

// NodeIPs returns the local addresses inside the CIDRs, deduplicated and sorted.
func (n *NodePortAddresses) NodeIPs(local []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range local {
		for _, p := range n.cidrs {
			if p.Contains(a) {
				out = append(out, a)
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out)
}
