// Package kubeproxy runs kube-proxy's proxy modes on clusterlab's simulated cluster, and
// holds the table of modes: one ModeInfo per mode (constructor, families, node
// settings, flags, versions, semantics, by-design differences, demo text, kernel needs),
// registered from the mode's own file (iptables.go, ipvs.go, nftables.go, userspace.go). The CLI, the
// demo, the scenario runner, the property kit and the conformance suite loop over
// Registered; none of them names a mode.
//
// A mode joins pieces that are built and tested on their own: the shared proxy view
// (package proxy), the mode's rule writer (proxy/iptables's Proxier, proxy/ipvs's
// Proxier, proxy/nftables's Proxier, proxy/userspace's Proxier) and the models that
// evaluate what it writes (the iptables emulator with its ipsets, the IPVS emulator, the
// nftables evaluator, the userspace proxy's listeners on the node's host network),
// attached to the cluster node's netsim datapath (emulator_netsim.go runs an iptables
// emulator's tables as a node's, nftables_netsim.go an nftables evaluator's base
// chains). The iptables
// mode, for example:
//
//	service store ──▶ cluster (Proxy.Sync on every change, after the node's delay)
//	                     │
//	                     ▼
//	   services, slices ──▶ iptables.Proxier ──▶ emulator.Emulator
//	                             │ (restore text)        │ AttachEmulator: a handler per
//	                             ▼                       ▼ table and hook of the node
//	                   netsim conntrack cleanup   packets of the node
//
// health.go runs kube-proxy's health servers in every mode (each healthCheckNodePort,
// which the simulated cloud load balancer checks over the network, and /healthz on
// 10256). Use Factory as a cluster.Config's Proxy:
//
//	c, err := cluster.New(cluster.Config{Nodes: ..., Proxy: kubeproxy.Factory(kubeproxy.Options{Mode: kubeproxy.IPTables})})
package kubeproxy

import (
	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	corev1 "k8s.io/api/core/v1"
)

// Options configure the proxies of every node.
type Options struct {
	Mode Mode
	// Scheduler is the IPVS scheduler (--ipvs-scheduler; default rr).
	Scheduler string
	// Node adjusts each node's kube-proxy flags (detect-local mode, --nodeport-addresses,
	// --masquerade-all, ...) after they are filled in from the node: nil keeps
	// kube-proxy's defaults.
	Node func(*proxy.NodeConfig)
	// Seed seeds randomness the mode owns itself (IPVS twos); default the cluster's.
	Seed uint64
	// ModeConfig holds the mode's own flags: an IPVSConfig for the IPVS mode, a
	// UserspaceConfig for the userspace mode (ModeInfo.ConfigType). nil takes the
	// mode's defaults; another mode's flags are an error.
	ModeConfig any
	// ShareRules shares kube-proxy's rules between nodes whose rules are the same
	// (iptables mode; see iptables_share.go for when they are and what differs): one
	// generation a change for all of them, and one copy of the rules in memory, instead
	// of one a node. Other modes ignore it.
	ShareRules bool

	share *shareRegistry // the groups of the nodes a Factory built, with ShareRules
}

// NodeConfigFor fills a node's kube-proxy view of itself from the simulated node: name,
// labels (from its Node object), IPs, every local address, pod CIDRs, the cluster
// CIDRs as --cluster-cidr, and the node's proxy name (cluster.NodeConfig.ProxyName).
func NodeConfigFor(n *cluster.Node) proxy.NodeConfig {
	c := n.Cluster()
	cfg := proxy.NodeConfig{
		Name:            n.Name(),
		IPs:             n.IPs(),
		PodCIDRs:        n.PodCIDRs(),
		ClusterCIDRs:    c.Config().ClusterCIDRs,
		DetectLocalMode: proxy.LocalModeClusterCIDR,
		BridgeInterface: "cbr0",
		ProxyName:       n.Config().ProxyName,
	}
	if obj, ok := c.Store().GetNode(n.Name()); ok {
		cfg.Labels = obj.Labels
	}
	for _, i := range n.Interfaces() {
		for _, p := range i.Addrs {
			cfg.Addresses = append(cfg.Addresses, p.Addr())
		}
	}
	return cfg
}

// Conntrack adapts a netsim conntrack table to proxy.Conntrack for one family.
type Conntrack struct {
	T      *netsim.Conntrack
	Family corev1.IPFamily
}

// Delete implements proxy.Conntrack.
func (c Conntrack) Delete(f proxy.ConntrackFilter) (int, error) {
	if c.held(f) { // see HoldConntrackCleanup
		return 0, nil
	}
	cf := netsim.CtFilter{Proto: f.Protocol, OrigSrc: f.OrigSrc, OrigDst: f.OrigDst, OrigDstPort: f.OrigDstPort, ReplySrc: f.ReplySrc, ReplySrcPort: f.ReplySrcPort}
	v6 := c.Family == corev1.IPv6Protocol
	n := 0
	for _, e := range c.T.List(cf) {
		if e.Orig.Src.Is6() != v6 {
			continue
		}
		one := netsim.CtFilter{Proto: e.Orig.Proto, OrigSrc: e.Orig.Src, OrigDst: e.Orig.Dst, OrigSrcPort: e.Orig.SrcPort, OrigDstPort: e.Orig.DstPort}
		n += c.T.Delete(one)
	}
	return n, nil
}
