package nftables

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/proxy"
)

// TableName is the name of kube-proxy's table in each family ("table ip kube-proxy",
// "table ip6 kube-proxy").
const TableName = "kube-proxy"

// FullSyncPeriod is how often kube-proxy does a full sync even without a reason to.
const FullSyncPeriod = time.Hour

// StaleChainDelay is how long a service chain that is no longer used stays (flushed)
// before it is deleted: kernels before 6.2 notice only a little later that a deleted
// map element no longer references a chain.
const StaleChainDelay = time.Second

// Version names a kube-proxy minor release whose nftables layout is written, "1.37".
// Config.Version overrides the node's release (proxy.NodeConfig.Version) when set.
type Version string

// Layouts this package writes; the differences between them are the behaviour changes
// of proxy/behaviour_nftables.go, switched by the node's release.
const (
	// Version129: the alpha layout (filter chains at -101, endpoints-check, forward
	// chain with the INVALID drop, firewall sets, a full rewrite every sync).
	Version129 Version = "1.29"
	// Version130: filter-prerouting, filter chains at dstnat-10, cluster-ips-check,
	// firewall-ips verdict map (the layout up to 1.33).
	Version130 Version = "1.30"
	// Version131: partial syncs; --nodeport-addresses defaults to primary.
	Version131 Version = "1.31"
	// Version132: as 1.31.
	Version132 Version = "1.32"
	// Version133: GA; hourly full syncs that read the maps back.
	Version133 Version = "1.33"
	// Version134: filter-prerouting-pre-dnat / filter-output-pre-dnat at -110, the
	// other filter chains at 0.
	Version134 Version = "1.34"
	// Version135: as 1.34.
	Version135 Version = "1.35"
	// Version136: masquerade marks written inline, hairpin-connections set, endpoint
	// chains only for ClientIP affinity, direct numgen DNAT maps.
	Version136 Version = "1.36"
	// Version137: 1.36 plus the KubeProxyNFTablesLocalhostNodePorts objects (created
	// and deleted when the gate is off) and element comments cut to 128 bytes.
	Version137 Version = "1.37"
	// DefaultVersion is the newest layout.
	DefaultVersion = Version137
)

// Versions lists the layouts this package writes, oldest first.
var Versions = []Version{Version129, Version130, Version131, Version132, Version133, Version134, Version135, Version136, Version137}

// Config configures one nftables-mode proxy (one IP family). The zero value of each
// field is what current kube-proxy does on a current host.
type Config struct {
	// Family is the IP family the proxy handles; "" means IPv4.
	Family corev1.IPFamily
	// Node is the node and its kube-proxy flags. An empty Node.NodePortAddresses means
	// "primary" in this mode (kube-proxy's default for nftables since 1.31), not every
	// local address as in the iptables mode.
	Node proxy.NodeConfig
	// Version is the kube-proxy minor release whose layout is written; "" means the
	// node's release (Node.Version, itself the newest release when zero). It overrides
	// Node.Version for every switch of the mode. Other values than Versions are refused.
	Version Version
	// ServiceCIDRs are the cluster's ServiceCIDRs (from ServiceCIDR objects or
	// --service-cluster-ip-range); those of the family get the "Drop traffic to
	// unallocated ClusterIPs" rule. None: no such rule.
	ServiceCIDRs []netip.Prefix
	// LocalhostNodePorts is the alpha feature gate KubeProxyNFTablesLocalhostNodePorts
	// (1.37, default off): NodePort traffic to 127.0.0.1 / ::1 is counted and rejected
	// for every protocol, or for UDP and SCTP only when --nodeport-addresses names a
	// loopback CIDR (kube-proxy then serves TCP with a userspace proxy, which is not
	// modelled here).
	LocalhostNodePorts bool
	// Clock returns the current time; default time.Now. It decides when full syncs are
	// due and when stale chains are old enough to delete.
	Clock func() time.Time
}

// resolved is a Config with defaults applied and everything derived from the node
// computed once.
type resolved struct {
	version Version
	node    proxy.NodeConfig // with the release written; its Has switches decide the layout

	// The layout switches (proxy/behaviour_nftables.go), read once.
	layout130, invalidDrop, preDNAT, masq136 bool
	partialSyncs, hourlyFullSync             bool
	family                                   corev1.IPFamily
	isIPv6                                   bool
	ipX                                      string // "ip" or "ip6"
	addrType                                 string // "ipv4_addr" or "ipv6_addr"
	loopback                                 string // "127.0.0.0/8" or "::1"

	nodeName    string
	nodeLabels  map[string]string
	nodeIP      netip.Addr // invalid if the node has none of the family
	masqRule    string     // "mark set mark or 0x00004000"
	mark        string     // "0x00004000"
	detector    proxy.LocalTrafficDetector
	ifLocal     string // "ip saddr 10.0.0.0/8", "" without a detector
	ifNotLocal  string
	masqAll     bool
	matchAll    bool
	nodePortIPs []netip.Addr // when !matchAll, loopback left out
	serviceCIDR string       // "172.30.0.0/16, ..." joined with ","; "" for none

	// rejectProtocols are the protocols whose localhost NodePort traffic is counted and
	// rejected (LocalhostNodePorts), in kube-proxy's order.
	rejectProtocols []corev1.Protocol
	clock           func() time.Time
}

func resolve(c Config) (*resolved, error) {
	node := c.Node
	if c.Version != "" {
		v, err := proxy.ParseVersion(string(c.Version))
		if err != nil || !slices.Contains(Versions, c.Version) {
			return nil, fmt.Errorf("nftables config: version: kube-proxy %q's layout is not implemented (have %s)", c.Version, versionList())
		}
		node.Version = v
	}
	version := Version(node.Version.Resolved().String())
	if !slices.Contains(Versions, version) {
		return nil, fmt.Errorf("nftables config: version: kube-proxy %s has no nftables mode (have %s)", version, versionList())
	}
	if err := node.Validate(); err != nil {
		return nil, err
	}
	family := c.Family
	switch family {
	case "":
		family = corev1.IPv4Protocol
	case corev1.IPv4Protocol, corev1.IPv6Protocol:
	default:
		return nil, fmt.Errorf("nftables config: family: %q is neither IPv4 nor IPv6", c.Family)
	}
	localhostNodePorts := c.LocalhostNodePorts || node.Has(proxy.ChangeNFTLocalhostNodePorts)
	if c.LocalhostNodePorts && !node.Version.AtLeast(37) {
		return nil, fmt.Errorf("nftables config: localhostNodePorts: the KubeProxyNFTablesLocalhostNodePorts gate exists from kube-proxy 1.37, not %s", version)
	}
	if len(node.NodePortAddresses) == 0 && node.Has(proxy.ChangeNFTNodePortPrimary) {
		node.NodePortAddresses = []string{proxy.NodePortAddressesPrimary}
	}
	npa, err := node.ResolveNodePortAddresses(family)
	if err != nil {
		return nil, err
	}
	r := &resolved{
		version:    version,
		node:       node,
		family:     family,
		isIPv6:     family == corev1.IPv6Protocol,
		ipX:        "ip",
		addrType:   "ipv4_addr",
		loopback:   "127.0.0.0/8",
		nodeName:   node.Name,
		nodeLabels: node.Labels,
		detector:   node.NewLocalTrafficDetector(family),
		masqAll:    node.MasqueradeAll,
		matchAll:   npa.MatchAll(),
		clock:      c.Clock,
	}
	if r.isIPv6 {
		r.ipX, r.addrType, r.loopback = "ip6", "ipv6_addr", "::1"
	}
	if ip, ok := node.PrimaryIP(family); ok {
		r.nodeIP = ip
	}
	// kube-proxy formats the mark with %#08x: 0x00004000.
	r.mark = fmt.Sprintf("%#08x", node.MasqueradeMark())
	r.masqRule = "mark set mark or " + r.mark
	r.layout130 = node.Has(proxy.ChangeNFTLayout130)
	r.invalidDrop = !node.Has(proxy.ChangeNFTNoInvalidDrop)
	r.preDNAT = node.Has(proxy.ChangeNFTPreDNATChains)
	r.masq136 = node.Has(proxy.ChangeNFTMasqueradeRedesign)
	r.partialSyncs = node.Has(proxy.ChangeNFTPartialSync)
	r.hourlyFullSync = node.Has(proxy.ChangeNFTHourlyFullSync)
	if !r.masq136 {
		r.masqRule = "jump " + ChainMarkForMasquerade
	}
	r.ifLocal, r.ifNotLocal = detectorNFT(r.detector, r.ipX)
	if !r.matchAll {
		for _, ip := range npa.NodeIPs(node.LocalAddresses()) {
			if !ip.IsLoopback() {
				r.nodePortIPs = append(r.nodePortIPs, ip)
			}
		}
	}
	var cidrs []string
	for _, p := range c.ServiceCIDRs {
		if p.Addr().Is6() == r.isIPv6 {
			cidrs = append(cidrs, p.Masked().String())
		}
	}
	r.serviceCIDR = strings.Join(cidrs, ",")
	if localhostNodePorts {
		r.rejectProtocols = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}
		if explicitLoopback(node.NodePortAddresses, r.isIPv6) {
			r.rejectProtocols = r.rejectProtocols[1:]
		}
	}
	if r.clock == nil {
		r.clock = time.Now
	}
	return r, nil
}

// explicitLoopback reports whether --nodeport-addresses names a CIDR of the family
// inside the loopback range (127.0.0.0/8 or ::1/128), as opposed to a catch-all CIDR
// that merely contains it; wherever it stands in the list (kube-proxy's
// ContainsExplicitLoopback).
func explicitLoopback(specs []string, isIPv6 bool) bool {
	for _, s := range specs {
		p, ok := proxy.ParseCIDRSloppy(s)
		if ok && p.Addr().Is6() == isIPv6 && p.Addr().IsLoopback() && (isIPv6 || p.Bits() >= 8) {
			return true
		}
	}
	return false
}

// detectorNFT renders the local-traffic detector as nft matches, as kube-proxy's
// IfLocalNFT / IfNotLocalNFT do.
func detectorNFT(d proxy.LocalTrafficDetector, ipX string) (ifLocal, ifNotLocal string) {
	switch d.Mode {
	case proxy.LocalModeClusterCIDR, proxy.LocalModeNodeCIDR:
		return ipX + " saddr " + d.Value, ipX + " saddr != " + d.Value
	case proxy.LocalModeBridgeInterface:
		return "iifname " + d.Value, "iifname != " + d.Value
	case proxy.LocalModeInterfaceNamePrefix:
		return "iifname " + d.Value + "*", "iifname != " + d.Value + "*"
	}
	return "", ""
}

func versionList() string {
	s := make([]string, len(Versions))
	for i, v := range Versions {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}
