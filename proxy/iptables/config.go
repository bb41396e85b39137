package iptables

import (
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/proxy"
)

// DefaultSyncPeriod is kube-proxy's --iptables-sync-period default. In large-cluster
// mode stale chains are deleted at most once per sync period.
const DefaultSyncPeriod = 30 * time.Second

// FullSyncPeriod is how often kube-proxy does a full sync even without a reason to.
const FullSyncPeriod = time.Hour

// Config configures one iptables-mode proxy (one IP family). The zero value of each
// field is what current kube-proxy does on a current host.
type Config struct {
	// Family is the IP family the proxy handles; "" means IPv4.
	Family corev1.IPFamily
	// Node is the node and its kube-proxy flags.
	Node proxy.NodeConfig
	// NoRandomFully leaves --random-fully off MASQUERADE (iptables older than 1.6.2).
	NoRandomFully bool
	// NoNFAcct: the nfacct counters could not be created, so no -m nfacct rules are
	// written (the localhost NodePort counting rule and the counter on the INVALID
	// drop). With counters, the kernel must have the nfacct objects
	// localhost_nps_accepted_pkts and ct_state_invalid_dropped_pkts, or the restore fails.
	NoNFAcct bool
	// ConntrackTCPBeLiberal: net.netfilter.nf_conntrack_tcp_be_liberal is non-zero, so
	// kube-proxy does not drop ctstate INVALID packets in KUBE-FORWARD.
	ConntrackTCPBeLiberal bool
	// SyncPeriod is --iptables-sync-period (default 30s).
	SyncPeriod time.Duration
	// Clock returns the current time; default time.Now. It only decides when full syncs
	// and large-cluster stale-chain cleanups are due.
	Clock func() time.Time
}

// resolved is a Config with defaults applied and everything derived from the node
// computed once.
type resolved struct {
	family      corev1.IPFamily
	isIPv6      bool
	nodeName    string
	nodeLabels  map[string]string
	primaryIP   netip.Addr // invalid if the node has none of the family
	mark        string     // "0x00004000"
	markMask    string     // "0x00004000/0x00004000"
	detector    proxy.LocalTrafficDetector
	ifNotLocal  []string // detector.IfNotLocal(), asked once (it allocates)
	masqAll     bool
	localhostNP bool // localhost NodePorts in effect (IPv4 only)
	matchAll    bool
	nodePortIPs []netip.Addr // when !matchAll
	randomFully bool
	nfacct      bool
	tcpLiberal  bool
	syncPeriod  time.Duration
	clock       func() time.Time
	layout      layout
	itpGate     bool // the ServiceInternalTrafficPolicy gate (what releases before 1.24 read)
}

// layout is what the node's kube-proxy release changes in the rules written: one field
// per behaviour change (proxy/behaviour_iptables.go), read once through NodeConfig.Has.
type layout struct {
	clearMark      bool // iptables-masquerade-clears-mark (1.19)
	svlChain       bool // iptables-svl-chain (1.24): eTP=Local reaches KUBE-SVL, not a ladder in KUBE-XLB
	extChain       bool // iptables-ext-chain (1.24): KUBE-EXT, not KUBE-XLB or inline rules
	proxyFirewall  bool // iptables-proxy-firewall (1.25): KUBE-FW only with ranges, drops in KUBE-PROXY-FIREWALL
	dropInFilter   bool // iptables-etp-local-drop-in-filter (1.25)
	kubeletChains  bool // !iptables-no-kubelet-mark-drop (before 1.25): kubelet's KUBE-MARK-DROP and KUBE-FIREWALL
	kubeletMartian bool // iptables-localnet-martian-rule (1.19) with kubelet's chains: its localnet rule
	partial        bool // iptables-partial-restores (MinimizeIPTablesRestore)
	oneCtRule      bool // iptables-kube-forward-one-ctstate-rule (1.23)
	// iptables-healthcheck-nodeport-accept (1.21): filter KUBE-NODEPORTS accepts
	// health-check node ports, jumped from INPUT.
	healthCheckAccept bool
	// iptables-external-services-from-forward (1.20): FORWARD jumps to
	// KUBE-EXTERNAL-SERVICES (and INPUT no longer to KUBE-SERVICES), which holds the
	// load-balancer IPs' REJECT rules.
	externalFromForward bool
	dropMark            string // kubelet's drop mark, "0x00008000"
	// iptables-nfacct-invalid-counter (1.30) and iptables-nfacct-localhost-counter
	// (1.31): the -m nfacct counters of the INVALID drop and of localhost NodePorts.
	invalidCounter, localhostCounter bool
}

// resolveLayout reads the release's behaviour changes.
func resolveLayout(n *proxy.NodeConfig) layout {
	l := layout{
		clearMark:     n.Has("iptables-masquerade-clears-mark"),
		svlChain:      n.Has("iptables-svl-chain"),
		extChain:      n.Has("iptables-ext-chain"),
		proxyFirewall: n.Has("iptables-proxy-firewall"),
		dropInFilter:  n.Has("iptables-etp-local-drop-in-filter"),
		kubeletChains: !n.Has("iptables-no-kubelet-mark-drop"),
		partial:       n.Has("iptables-partial-restores"),
		oneCtRule:     n.Has("iptables-kube-forward-one-ctstate-rule"),

		healthCheckAccept:   n.Has("iptables-healthcheck-nodeport-accept"),
		externalFromForward: n.Has("iptables-external-services-from-forward"),
		invalidCounter:      n.Has("iptables-nfacct-invalid-counter"),
		localhostCounter:    n.Has("iptables-nfacct-localhost-counter"),
		// kubelet's --iptables-drop-bit default is 15.
		dropMark: fmt.Sprintf("%#08x", uint32(1)<<15),
	}
	l.kubeletMartian = l.kubeletChains && n.Has("iptables-localnet-martian-rule")
	return l
}

func resolve(c Config) (*resolved, error) {
	if err := c.Node.Validate(); err != nil {
		return nil, err
	}
	if err := c.Node.CheckIPTablesFlags(); err != nil {
		return nil, fmt.Errorf("iptables config: %w", err)
	}
	family := c.Family
	switch family {
	case "":
		family = corev1.IPv4Protocol
	case corev1.IPv4Protocol, corev1.IPv6Protocol:
	default:
		return nil, fmt.Errorf("iptables config: family: %q is neither IPv4 nor IPv6", c.Family)
	}
	npa, err := c.Node.ResolveNodePortAddresses(family)
	if err != nil {
		return nil, err
	}
	r := &resolved{
		family:      family,
		isIPv6:      family == corev1.IPv6Protocol,
		nodeName:    c.Node.Name,
		nodeLabels:  c.Node.Labels,
		detector:    c.Node.NewLocalTrafficDetector(family),
		masqAll:     c.Node.MasqueradeAll,
		matchAll:    npa.MatchAll(),
		randomFully: !c.NoRandomFully,
		nfacct:      !c.NoNFAcct,
		// Before 1.29 kube-proxy wrote the INVALID drop whatever the sysctl.
		tcpLiberal: c.ConntrackTCPBeLiberal && c.Node.Has("iptables-invalid-drop-needs-strict-tcp"),
		syncPeriod: c.SyncPeriod,
		clock:      c.Clock,
		layout:     resolveLayout(&c.Node),
		itpGate:    c.Node.GateEnabled("ServiceInternalTrafficPolicy"),
	}
	r.ifNotLocal = r.detector.IfNotLocal()
	if ip, ok := c.Node.PrimaryIP(family); ok {
		r.primaryIP = ip
	}
	// kube-proxy formats the mark with %#08x: 0x00004000.
	r.mark = fmt.Sprintf("%#08x", c.Node.MasqueradeMark())
	r.markMask = r.mark + "/" + r.mark
	// Localhost NodePorts: IPv4 only, on unless disabled, and only if the NodePort
	// addresses include 127.0.0.0/8.
	r.localhostNP = !r.isIPv6 && c.Node.LocalhostNodePortsEnabled() && npa.ContainsIPv4Loopback()
	if !r.matchAll {
		r.nodePortIPs = npa.NodeIPs(c.Node.LocalAddresses())
	}
	if r.syncPeriod <= 0 {
		r.syncPeriod = DefaultSyncPeriod
	}
	if r.clock == nil {
		r.clock = time.Now
	}
	return r, nil
}
