package kernel

import (
	corev1 "k8s.io/api/core/v1"

	"fmt"
	"os"
	"strings"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// The kube-proxy proxiers on a harness node, as the differential tests and the kernel
// back end of `clusterlab run` make them.

// NewIPTablesProxier returns kube-proxy's iptables proxier writing into node n's
// namespace (its IPTables), cleaning up conntrack through ct (nil: the node's
// Conntrack). The nfacct counters kube-proxy declares are created first; where the
// kernel has no nfacct the proxier runs without them (cfg.NoNFAcct).
func (h *Harness) NewIPTablesProxier(n *Node, ct proxy.Conntrack, cfg iptables.Config) (*iptables.Proxier, error) {
	if ct == nil {
		ct = n.Conntrack
	}
	for _, name := range []string{"localhost_nps_accepted_pkts", "ct_state_invalid_dropped_pkts"} {
		if EnsureNFAcct(n.Netns.Name, name) != nil {
			cfg.NoNFAcct = true
		}
	}
	return iptables.NewProxier(n.IPTables, ct, cfg)
}

// IPVSProxier is kube-proxy's IPVS proxier on a harness node and its IPVS handle.
type IPVSProxier struct {
	*ipvs.Proxier
	IPVS *IPVS
}

// Close closes the IPVS handle.
func (p *IPVSProxier) Close() { p.IPVS.Close() }

// NewIPVSProxier returns kube-proxy's IPVS proxier on node n, as kube-proxy runs on a
// real node: the kernel's IPVS in the node's namespace over netlink (NewIPVS), the
// ipsets, the iptables rules around IPVS, kube-ipvs0 and the sysctls (IPVSWriters),
// conntrack cleanup through ct (nil: the node's Conntrack), and the running kernel's
// release as cfg.KernelVersion when it is empty (what kube-proxy reads). The caller
// closes it.
func (h *Harness) NewIPVSProxier(n *Node, ct proxy.Conntrack, cfg ipvs.ProxierConfig) (*IPVSProxier, error) {
	v, err := NewIPVS(n.Netns.Name)
	if err != nil {
		return nil, err
	}
	w := h.IPVSWriters(n, v)
	if ct != nil {
		w.Conntrack = ct
	}
	if cfg.KernelVersion == "" {
		cfg.KernelVersion = RunningRelease()
	}
	px, err := ipvs.NewProxier(w, cfg)
	if err != nil {
		v.Close()
		return nil, fmt.Errorf("kube-proxy (ipvs) on %s: %w", n.Netns, err)
	}
	return &IPVSProxier{Proxier: px, IPVS: v}, nil
}

// RunningRelease is the running kernel's release (uname -r), "" when unreadable.
func RunningRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// AddContainerPorts adds the containers' ports to the pod's echo server ports, TCP or
// UDP by their protocol (SCTP has no echo server), leaving out those skip says (nil:
// none). TCPPorts and UDPPorts become non-nil, so that only these are served.
func (pc *PodConfig) AddContainerPorts(containers []corev1.Container, skip func(corev1.ContainerPort) bool) {
	if pc.TCPPorts == nil {
		pc.TCPPorts = []uint16{}
	}
	if pc.UDPPorts == nil {
		pc.UDPPorts = []uint16{}
	}
	for _, ct := range containers {
		for _, cp := range ct.Ports {
			if skip != nil && skip(cp) {
				continue
			}
			switch cp.Protocol {
			case corev1.ProtocolUDP:
				pc.UDPPorts = append(pc.UDPPorts, uint16(cp.ContainerPort))
			case corev1.ProtocolSCTP:
			default:
				pc.TCPPorts = append(pc.TCPPorts, uint16(cp.ContainerPort))
			}
		}
	}
}
