package proxy

import (
	"fmt"

	"github.com/clusterlab/clusterlab/netfilter"
)

// The behaviour changes of the IPVS mode and of the kernel's IPVS under it (reference
// rows 35-42). Kernel changes (Change.Kernel set) are decided by the node's kernel
// release through KernelHas, kube-proxy changes by NodeConfig.Has. Rows 37-39 came
// before 1.18: every release modelled has them (Version OldestVersion).
func init() {
	registerChanges(
		Change{Name: "ipvs-local-policy-falls-back-to-cluster", Row: 35, Area: "IPVS", Modes: []string{"ipvs"},
			Version: 24, Ref: "kubernetes#97081",
			Doc: "A virtual server of a service with externalTrafficPolicy (or internalTrafficPolicy) Local on a node without a local ready endpoint gets " +
				"the cluster's endpoints, so the node's pods still reach the service; before, its real-server list was empty and every connection was refused.",
			Modelled: ModelledYes, Test: "ipvs.TestLocalPolicyFallbackByVersion"},
		Change{Name: "ipvs-conn-reuse-mode-left-on-5.9", Row: 36, Area: "IPVS", Modes: []string{"ipvs"},
			Version: 22, Ref: "kubernetes#102122",
			Doc: "kube-proxy sets net.ipv4.vs.conn_reuse_mode=0 only on kernels 4.1 to 5.8 and leaves it at 1 on 5.9 and later; before, it set 0 on every kernel " +
				"that has the knob (4.1 and later, kubernetes#88541), so a client reusing a source port kept its old (possibly terminating) real server.",
			Modelled: ModelledYes, Test: "ipvs.TestConnReuseModeByVersion"},
		Change{Name: "ipvs-expire-sysctls", Row: 37, Area: "IPVS", Modes: []string{"ipvs"},
			Version: OldestVersion, Ref: "kubernetes#71834",
			Doc: "kube-proxy sets net.ipv4.vs.expire_nodest_conn=1, expire_quiescent_template=1 and conntrack=1 (before 1.18 already, so in every release modelled): " +
				"a packet on the entry of a deleted real server expires it instead of being black-holed until the entry times out, and ClientIP affinity to a weight-0 " +
				"server is rescheduled.",
			Modelled: ModelledYes, Note: "every release modelled has it; a node's ipvs settings can turn the sysctls off to show the difference",
			Test: "ipvs.TestExpireSysctlsFlow"},
		Change{Name: "ipvs-strict-arp", Row: 38, Area: "IPVS", Modes: []string{"ipvs"},
			Version: OldestVersion, Ref: "kubernetes#91812",
			Doc:      "--ipvs-strict-arp sets net.ipv4.conf.all.arp_ignore=1 and arp_announce=2 so that the addresses bound to kube-ipvs0 are not answered in ARP (present before 1.18).",
			Modelled: ModelledPartly, Note: "the sysctls are written; netsim has no ARP, so the neighbour answers are not simulated",
			Test: "ipvs.TestKubeProxySysctlSettings"},
		Change{Name: "ipvs-graceful-termination", Row: 39, Area: "IPVS", Modes: []string{"ipvs"},
			Version: OldestVersion, Ref: "kubernetes#71515",
			Doc:      "A removed endpoint's real server is set to weight 0 and deleted once it has no connections (UDP at once); its established connections go on, new ones avoid it (before 1.18 already).",
			Modelled: ModelledYes, Note: "every release modelled has it", Test: "ipvs.TestProxierGracefulTermination"},
		Change{Name: "ipvs-no-kube-mark-drop", Row: 40, Area: "IPVS", Modes: []string{"ipvs"},
			Version: 25, Ref: "kubernetes#110628",
			Doc: "The IPVS mode's loadBalancerSourceRanges firewall drops a disallowed source directly (filter KUBE-SOURCE-RANGES-FIREWALL -j DROP); before, " +
				"its nat KUBE-FIREWALL chain jumped to kubelet's KUBE-MARK-DROP and kubelet's filter KUBE-FIREWALL dropped the marked packet.",
			Modelled: ModelledNo, Note: "the outcome (dropped) is the same; the layout before 1.25 (nat KUBE-FIREWALL, the 0x8000 mark) needs kubelet's KUBE-MARK-DROP and filter KUBE-FIREWALL chains, which the model does not write"},
		Change{Name: "ipvs-conn-reuse-unconfirmed-conntrack", Row: 41, Area: "kernel (IPVS)", Modes: []string{"ipvs"},
			Kernel: "5.9", Ref: "kubernetes#93297",
			Doc: "Before Linux 5.9, with vs/conntrack=1 a SYN that reuses the tuple of a TIME_WAIT entry under conn_reuse_mode=1 (or of a deleted server's entry under " +
				"expire_nodest_conn=1) is dropped while the old entry expires, so the connection waits for the SYN's retransmission (1 s); with conn_reuse_mode=0 " +
				"the port sticks to the old (possibly deleted) real server. From 5.9 only a packet of a confirmed conntrack entry is dropped: the reused port is " +
				"rescheduled at once, and the entries of a deleted server are flushed by a work item one jiffy later.",
			Modelled: ModelledYes, Note: "a SYN on the entry of a weight-0 server is rescheduled under expire_nodest_conn=1 whatever conn_reuse_mode from 5.9 " +
				"in the model (a later kernel patch, release not verified, took that check out of conn_reuse_mode's); before 5.9 it needs conn_reuse_mode≠0",
			Test: "emulator.TestKernel59ConnReuse"},
		Change{Name: "conntrack-udp-clash-insert", Row: 42, Area: "kernel (conntrack)",
			Kernel: "5.6",
			Doc: "Before Linux 5.6, two UDP packets of one new flow processed in parallel (glibc's A and AAAA queries on one socket) that got different DNAT " +
				"results race on conntrack insertion and the loser is dropped (insert_failed, the 5 s DNS timeout); from 5.6 the clashing entry is inserted.",
			Modelled: ModelledYes, Note: "netsim's conntrack confirms an entry at the end of POSTROUTING/INPUT and resolves a clash as nf_ct_resolve_clash: " +
				"a UDP entry with the same NAT result is merged on every release; with another result it is dropped before 5.6 (insert_failed, drop) and " +
				"inserted by its reply tuple only for 1 s from 5.6 (clash_resolve); packets in flight together through a node: netsim.Node.SendTogether",
			Test: "netsim.TestConntrackUDPClashInsert"},
	)
}

// KernelHas reports whether a node running Linux k has the new behaviour of the named
// kernel change (one with Change.Kernel set): k is that release or later; the zero
// KernelVersion is a current kernel. It panics on a name no kernel change has (a
// programming error).
func KernelHas(name string, k netfilter.KernelVersion) bool {
	ch, ok := LookupChange(name)
	if !ok || ch.Kernel == "" {
		panic(fmt.Sprintf("proxy: no kernel behaviour change named %q", name))
	}
	return k.AtLeast(netfilter.MustParseKernelVersion(ch.Kernel))
}
