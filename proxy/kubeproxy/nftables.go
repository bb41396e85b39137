package kubeproxy

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/nftables"
	nftemu "github.com/clusterlab/clusterlab/proxy/nftables/emulator"
)

// NFTables is kube-proxy's nftables mode.
const NFTables Mode = "nftables"

// kube-proxy's nftables mode: proxy/nftables's Proxier per IP family writing its
// transactions (the `nft -f` text kube-proxy hands the kernel) into one nftables
// evaluator per node, whose base chains run as handlers at the node's hooks.
func init() {
	Register(ModeInfo{
		Mode:    NFTables,
		Summary: "kube-proxy's nftables mode: verdict maps dispatch to per-service chains, numgen random picks the endpoint, DNAT in the client's node",
		Order:   3,
		New: func(n *cluster.Node, _ Options, cfg proxy.NodeConfig) (cluster.Proxy, error) {
			return newNFTablesProxy(n, cfg)
		},
		Families:  []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		Versions:  Versions{First: "1.29", Last: "1.37", Default: "1.37"},
		NodeHints: true,
		Semantics: Semantics{AffinityExpires: true, Branches: true, ShortCircuit: true},
		Differences: []Difference{
			{Name: "nftables-no-localhost-nodeports", Doc: "The nftables mode does not serve node ports on 127.0.0.1 (it never sets " +
				"route_localnet, and its node-port rules skip loopback addresses), so a " +
				"connection from the node to 127.0.0.1:NODEPORT finds no listener; the iptables " +
				"mode DNATs it."},
			{Name: "nftables-rejects-other-ports-of-cluster-ips", Doc: "Its cluster-ips-check chain rejects new connections to a ClusterIP on a " +
				"port no service has (\"Reject traffic to invalid ports of ClusterIPs\"); the " +
				"iptables mode has no rule for such a port, so the packet is routed on and lost."},
			{Name: "nftables-node-ports-closed-outside-nodeport-addresses", Doc: "A node port without (local) endpoints: the iptables mode's KUBE-EXTERNAL-SERVICES " +
				"rules drop or reject it on every local address (addrtype LOCAL, whatever " +
				"--nodeport-addresses says); the nftables mode's node-port rules look only at " +
				"the addresses in @nodeport-ips (--nodeport-addresses, \"primary\" by default: " +
				"the node's primary address of each family), so elsewhere the port is simply closed."},
			{Name: "nftables-hairpin-needs-a-local-endpoint", Doc: "A pod reaching itself through its service: since kube-proxy 1.36 the nftables " +
				"mode masquerades hairpin traffic through its hairpin-connections set, which lists " +
				"only the node's own endpoints; an endpoint whose EndpointSlice names another node " +
				"(or none) gets its own packets unmasqueraded, answers itself directly, and the " +
				"answer never comes back from the service address. The iptables mode masquerades " +
				"every endpoint's traffic to itself (KUBE-SEP-* -s ENDPOINT -j KUBE-MARK-MASQ)."},
		},
		Demo: []string{
			"each new connection draws its backend with numgen random mod N from a verdict map,",
			"so the counts vary around an even share; the packet is DNATed in the client's node",
			"and the backend sees the client's own address.",
		},
		KernelNeeds: []string{"nftables", "conntrack"},
	})
}

// nftablesProxy is kube-proxy's nftables mode on one node: a Proxier per IP family of
// the node, each writing its family's kube-proxy table into the node's one nftables
// evaluator (the kernel has one nftables ruleset, whatever wrote it).
type nftablesProxy struct {
	n    *cluster.Node
	emu  *nftemu.Emulator
	att  *NFTAttachment
	fams []*nftablesFamily
	hs   *healthServer
}

type nftablesFamily struct {
	family corev1.IPFamily
	px     *nftables.Proxier
}

func newNFTablesProxy(n *cluster.Node, cfg proxy.NodeConfig) (*nftablesProxy, error) {
	p := &nftablesProxy{n: n, emu: nftemu.New()}
	p.att = AttachNFT(p.emu, n.Node, "kube-proxy")
	seen := map[corev1.IPFamily]bool{}
	for _, ip := range n.IPs() {
		fam, kfam := corev1.IPv4Protocol, knftables.IPv4Family
		if ip.Is6() {
			fam, kfam = corev1.IPv6Protocol, knftables.IPv6Family
		}
		if seen[fam] {
			continue
		}
		seen[fam] = true
		var cidrs []netip.Prefix
		for _, c := range n.Cluster().Config().ServiceCIDRs {
			if c.Addr().Is6() == ip.Is6() {
				cidrs = append(cidrs, c)
			}
		}
		clock := n.Cluster().Clock()
		run := NewNFTRunner(p.emu, p.att, kfam, nftables.TableName)
		px, err := nftables.NewProxier(run, Conntrack{T: n.Conntrack(), Family: fam},
			nftables.Config{Family: fam, Node: cfg, ServiceCIDRs: cidrs, Clock: clock.Now})
		if err != nil {
			p.att.Detach()
			return nil, fmt.Errorf("kube-proxy (nftables) on %s: %w", n.Name(), err)
		}
		p.fams = append(p.fams, &nftablesFamily{family: fam, px: px})
	}
	p.hs = newHealthServer(n)
	return p, nil
}

// Sync implements cluster.Proxy: the rules of each family, then the health servers.
func (p *nftablesProxy) Sync() error {
	st := p.n.Cluster().Store()
	svcs, slices := st.ListServices(), st.ListEndpointSlices()
	var states []*proxy.SyncState
	for _, f := range p.fams {
		if _, err := f.px.Sync(context.Background(), svcs, slices); err != nil {
			return err
		}
		states = append(states, f.px.State())
	}
	return p.hs.sync(healthState(states...))
}

// ServesHealthCheckNodePorts implements cluster.HealthCheckServer.
func (p *nftablesProxy) ServesHealthCheckNodePorts() bool { return true }

// NFTEmulator returns the nftables evaluator of a node running the nftables mode (both
// families' tables are in it), or nil.
func NFTEmulator(n *cluster.Node) *nftemu.Emulator {
	if p, ok := n.Proxy().(*nftablesProxy); ok {
		return p.emu
	}
	return nil
}
