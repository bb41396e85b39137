package kubeproxy

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
)

// kube-proxy's iptables mode: proxy/iptables's Proxier writing iptables-restore input
// into an iptables emulator per IP family, whose tables run as handlers at the node's
// hooks (nat as NAT handlers, at netfilter's priorities).
func init() {
	Register(ModeInfo{
		Mode:      IPTables,
		Summary:   "kube-proxy's iptables mode: KUBE-SERVICES, KUBE-SVC and KUBE-SEP chains DNAT in the client's node",
		Order:     1,
		Reference: true,
		New: func(n *cluster.Node, opts Options, cfg proxy.NodeConfig) (cluster.Proxy, error) {
			return newIPTablesProxy(n, cfg, opts.share)
		},
		Families: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		Settings: func(cfg proxy.NodeConfig, s *netsim.NodeSettings) {
			// kube-proxy sets route_localnet for localhost NodePorts: from 1.24 only when
			// --nodeport-addresses selects an IPv4 loopback address (an empty list
			// selects all), before that always (iptables-route-localnet-when-needed).
			if cfg.IPTablesSetsRouteLocalnet() {
				s.RouteLocalnet = true
			}
		},
		Versions:  Versions{First: "1.18", Last: "1.37", Default: "1.37"},
		NodeHints: true,
		Semantics: Semantics{LocalhostNodePorts: true, AffinityExpires: true, Branches: true, ShortCircuit: true},
		Demo: []string{
			"each new connection draws its backend at random (statistic --mode random",
			"--probability 1/3, then 1/2, then the rest), so the counts vary around an even share;",
			"the packet is DNATed in the client's node and the backend sees the client's own address.",
		},
		KernelNeeds: []string{"iptables", "conntrack"},
	})
}

// iptablesProxy is kube-proxy's iptables mode on one node: a Proxier per IP family of
// the node, writing into emulators attached to the node's datapath.
type iptablesProxy struct {
	n    *cluster.Node
	fams []*iptablesFamily
	hs   *healthServer
}

type iptablesFamily struct {
	family corev1.IPFamily
	emu    *emulator.Emulator
	px     *iptables.Proxier // nil while the family syncs through its group
	ct     proxy.Conntrack

	// Shared rulesets (iptables_share.go): the group while the node is in it, the
	// node's flags, the round it last synced, and whether it must leave at its next sync.
	g     *shareGroup
	cfg   proxy.NodeConfig
	icfg  iptables.Config
	last  *shareRound
	leave bool
	// Under the group's lock (lock): the version the node holds, and whether its
	// emulator runs compiled chains.
	lock     *sync.Mutex
	rs       *emulator.Ruleset
	compiled bool
}

// forceFullSync makes the family's next sync full, out of its group if in one.
func (f *iptablesFamily) forceFullSync() {
	if f.g != nil {
		f.leave = true
		return
	}
	f.px.ForceFullSync()
}

func newIPTablesProxy(n *cluster.Node, cfg proxy.NodeConfig, share *shareRegistry) (*iptablesProxy, error) {
	p := &iptablesProxy{n: n}
	seen := map[corev1.IPFamily]bool{}
	for _, ip := range n.IPs() {
		fam, efam := corev1.IPv4Protocol, emulator.IPv4
		if ip.Is6() {
			fam, efam = corev1.IPv6Protocol, emulator.IPv6
		}
		if seen[fam] {
			continue
		}
		seen[fam] = true
		emu := emulator.New(efam)
		clock := n.Cluster().Clock()
		// kube-proxy reads nf_conntrack_tcp_be_liberal at start: with it set, it does
		// not drop ctstate INVALID packets in KUBE-FORWARD.
		ct := Conntrack{T: n.Conntrack(), Family: fam}
		icfg := iptables.Config{Family: fam, Node: cfg, Clock: clock.Now,
			ConntrackTCPBeLiberal: n.Settings().Conntrack.TCPBeLiberal}
		f := &iptablesFamily{family: fam, emu: emu, ct: ct, cfg: cfg, icfg: icfg}
		if share != nil {
			if err := f.joinGroup(share, n, cfg, icfg); err != nil {
				return nil, fmt.Errorf("kube-proxy (iptables) on %s: %w", n.Name(), err)
			}
			attachEmulator(emu, f.lock, f.evalMode, &f.g.pkt, n.Node, "kube-proxy "+string(fam))
		} else {
			px, err := iptables.NewProxier(emu, ct, icfg)
			if err != nil {
				return nil, fmt.Errorf("kube-proxy (iptables) on %s: %w", n.Name(), err)
			}
			f.px = px
			AttachEmulator(emu, n.Node, "kube-proxy "+string(fam))
		}
		p.fams = append(p.fams, f)
	}
	p.hs = newHealthServer(n)
	return p, nil
}

// Sync implements cluster.Proxy: the rules of each family, then the health servers.
func (p *iptablesProxy) Sync() error {
	st := p.n.Cluster().Store()
	var svcs []*corev1.Service
	var slices []*discoveryv1.EndpointSlice
	listed := false
	var states []*proxy.SyncState
	for _, f := range p.fams {
		if f.g != nil && !f.leave {
			in, err := f.syncShared(p.n)
			if err != nil {
				return err
			}
			if in {
				states = append(states, f.last.state)
				continue
			}
		}
		if f.g != nil {
			if err := f.leaveGroup(); err != nil {
				return err
			}
			f.px.ForceFullSync() // a restart's full sync, or the first of its own
		}
		if !listed { // a group's members sync without listing the store
			svcs, slices, listed = st.ListServices(), st.ListEndpointSlices(), true
		}
		if _, err := f.px.Sync(context.Background(), svcs, slices); err != nil {
			return err
		}
		states = append(states, f.px.State())
	}
	ports, local, node := healthState(states...)
	if node != nil && len(p.fams) > 0 {
		node = &p.fams[0].cfg // a group's state is its leader's: the node is this one
	}
	return p.hs.sync(ports, local, node)
}

// ServesHealthCheckNodePorts implements cluster.HealthCheckServer.
func (p *iptablesProxy) ServesHealthCheckNodePorts() bool { return true }

// Emulator returns the node's emulator for a family (for traces and iptables-save).
func (p *iptablesProxy) Emulator(family corev1.IPFamily) *emulator.Emulator {
	for _, f := range p.fams {
		if f.family == family {
			return f.emu
		}
	}
	return nil
}

// Emulator returns the iptables emulator of a node running the iptables mode, for the
// primary family of addr (IPv4 when addr is invalid).
func Emulator(n *cluster.Node, addr netip.Addr) *emulator.Emulator {
	p, ok := n.Proxy().(*iptablesProxy)
	if !ok {
		return nil
	}
	fam := corev1.IPv4Protocol
	if addr.Is6() {
		fam = corev1.IPv6Protocol
	}
	return p.Emulator(fam)
}
