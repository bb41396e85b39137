package proxy

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// The behaviour changes of the iptables mode's rule layout and sync (reference table
// rows 1-18). proxy/iptables reads them through NodeConfig.Has when it resolves its
// Config (proxy/iptables/config.go), so that the generator switches on named fields.
func init() {
	iptablesOnly := []string{"iptables"}
	registerChanges(
		Change{Name: "iptables-masquerade-clears-mark", Row: 1, Area: "iptables layout", Modes: iptablesOnly,
			Version: 19, Ref: "kubernetes#92035",
			Doc:      "KUBE-POSTROUTING: one rule `-m mark --mark 0x4000/0x4000 -j MASQUERADE` → `! --mark … -j RETURN`, `-j MARK --xor-mark 0x4000`, `-j MASQUERADE`: the masquerade mark is cleared before SNAT, so a re-encapsulated copy of the packet is not masqueraded again.",
			Modelled: ModelledYes, Test: "iptables.TestMasqueradeClearsMarkFrom119"},
		Change{Name: "iptables-svl-chain", Row: 3, Area: "iptables layout", Modes: iptablesOnly,
			Version: 24, Ref: "kubernetes#106497",
			Doc:      "A KUBE-SVL chain holds the local endpoints: internalTrafficPolicy Local sends cluster IP traffic to it (with no local endpoint: DROP in filter) and eTP=Local external traffic reaches it from KUBE-EXT. Before, internalTrafficPolicy Local (ServiceInternalTrafficPolicy gate on, eTP not Local) filtered the endpoints of KUBE-SVC itself for all of the port's traffic, so with no local endpoint the port had no endpoints and was REJECTed; with eTP=Local it was ignored; eTP=Local wrote the local endpoints' ladder into KUBE-XLB.",
			Modelled: ModelledPartly, Note: "the 1.22-1.23 endpoint filtering follows kube-proxy's FilterEndpoints of that era as recalled, not checked against the release's code; the ServiceInternalTrafficPolicy gate is only read for releases before 1.24",
			Test: "iptables.TestGolden/v1.23-itp"},
		Change{Name: "iptables-ext-chain", Row: 4, Area: "iptables layout", Modes: iptablesOnly,
			Version: 24, Ref: "kubernetes#109060",
			Doc:      "External destinations (LB IP, external IP, NodePort) jump to one KUBE-EXT chain (masquerade then KUBE-SVC for eTP=Cluster; pod short-circuit, LOCAL masquerade and KUBE-SVL for eTP=Local) instead of KUBE-XLB (eTP=Local) or KUBE-MARK-MASQ plus KUBE-SVC rules written in KUBE-SERVICES/KUBE-NODEPORTS/KUBE-FW (eTP=Cluster); the cluster IP's masquerade rule moves from KUBE-SERVICES into KUBE-SVC; a host process's connection to an external IP that is not a node address is DNATed (before, only traffic not from the node, or to a node address, was).",
			Modelled: ModelledPartly, Note: "before 1.24 the emulator does not evaluate the external IP jump's `-m physdev ! --physdev-is-in` (assumed not to match: traffic to an external IP that is not a node address is not DNATed, from outside either); the endpoint ladders' comments are today's (no kube-proxy golden output of 1.18-1.23 was available)",
			Test: "iptables.TestExternalIPFromTheNodeDNATedFrom124"},
		Change{Name: "iptables-proxy-firewall", Row: 5, Area: "iptables layout", Modes: iptablesOnly,
			Version: 25, Ref: "kubernetes#110289",
			Doc:      "LoadBalancer source ranges: KUBE-FW only exists when a Service has loadBalancerSourceRanges, and what it does not accept is dropped in filter KUBE-PROXY-FIREWALL (jumped from INPUT, OUTPUT, FORWARD) instead of being marked by KUBE-MARK-DROP (0x8000) and dropped in kubelet's KUBE-FIREWALL; before, every LB IP went through a KUBE-FW ending in `-j KUBE-MARK-DROP`.",
			Modelled: ModelledYes, Test: "iptables.TestGolden/v1.24-lb-source-ranges"},
		Change{Name: "iptables-etp-local-drop-in-filter", Row: 6, Area: "iptables layout", Modes: iptablesOnly,
			Version: 25, Ref: "KEP-3178",
			Doc:      "eTP=Local with no local endpoint: external traffic is dropped by `KUBE-EXTERNAL-SERVICES … has no local endpoints -j DROP` in filter instead of `-j KUBE-MARK-DROP` in the nat KUBE-XLB/KUBE-EXT chain.",
			Modelled: ModelledPartly, Note: "in 1.24 the model marks the packet at the end of KUBE-EXT; whether 1.24 did it there or in an otherwise empty KUBE-SVL is not verified (same mark, same drop)",
			Test: "iptables.TestETPLocalNoEndpointDropMovesToFilter"},
		Change{Name: "iptables-no-kubelet-mark-drop", Row: 7, Area: "iptables layout", Modes: iptablesOnly,
			Version: 25, Ref: "KEP-3178",
			Doc:      "kube-proxy stops using kubelet's KUBE-MARK-DROP (nat) and the marked-packet DROP of kubelet's KUBE-FIREWALL (filter); it writes its own KUBE-FIREWALL with only the localnet rule. Before 1.25 the model's proxier writes those kubelet chains itself, as that release's kubelet would have.",
			Modelled: ModelledPartly, Note: "kubelet's IPTablesOwnershipCleanup gate (kubelet no longer creating KUBE-MARK-DROP from 1.27) is not modelled: third-party rules jumping to KUBE-MARK-DROP are not",
			Test: "iptables.TestETPLocalNoEndpointDropMovesToFilter"},
		Change{Name: "iptables-localnet-martian-rule", Row: 8, Area: "iptables layout", Modes: iptablesOnly,
			Version: 19, Ref: "kubernetes#91569",
			Doc:      "filter KUBE-FIREWALL drops `-d 127.0.0.0/8 ! -s 127.0.0.0/8` that is not RELATED, ESTABLISHED or DNAT (CVE-2020-8558): kubelet's rule from 1.19 (written here by the proxier for releases before 1.25), kube-proxy's own copy (IPv4, localhost NodePorts on) from 1.25.",
			Modelled: ModelledYes, Test: "iptables.TestLocalnetMartianRuleFrom119"},
		Change{Name: "iptables-invalid-drop-needs-strict-tcp", Row: 9, Area: "iptables layout", Modes: iptablesOnly,
			Version: 29, Ref: "kubernetes#120412",
			Doc:      "`KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP` is only written when net.netfilter.nf_conntrack_tcp_be_liberal is 0 at start; before 1.29 it is written whatever the sysctl.",
			Modelled: ModelledYes, Test: "iptables.TestInvalidDropFollowsTCPLiberalFrom129"},
		Change{Name: "conntrack-sysctl-flags", Row: 10, Area: "sysctls", Modes: iptablesOnly,
			Version: 29, Ref: "kubernetes#120354",
			Doc:      "--conntrack-tcp-be-liberal, --conntrack-udp-timeout and --conntrack-udp-timeout-stream: kube-proxy sets those sysctls.",
			Modelled: ModelledNo, Note: "the node's nf_conntrack_tcp_be_liberal is a setting of the simulated node in every release; kube-proxy's flags that set it are not modelled"},
		Change{Name: "iptables-kube-forward-one-ctstate-rule", Row: 11, Area: "iptables layout", Modes: iptablesOnly,
			Version: 23, Ref: "kubernetes#97279",
			Doc:      "KUBE-FORWARD accepts RELATED,ESTABLISHED with one rule (\"kubernetes forwarding conntrack rule\"); before, with two identical rules (\"… pod source rule\", \"… pod destination rule\"), whose cluster-CIDR matches kubernetes#87748 had dropped.",
			Modelled: ModelledPartly, Note: "release from the PR's merge date (2021-11-11, before the 1.23 freeze); the cluster-CIDR-qualified rules of releases before kubernetes#87748 (release unverified) are not modelled",
			Test: "iptables.TestKubeForwardConntrackRulesMergedIn123"},
		Change{Name: "iptables-proxy-firewall-hooks", Row: 12, Area: "iptables layout", Modes: iptablesOnly,
			Version: 25, Ref: "kubernetes#110289",
			Doc:      "The filter hooks INPUT, OUTPUT and FORWARD jump to KUBE-PROXY-FIREWALL (--ctstate NEW); before 1.25 the chain and its jumps do not exist.",
			Modelled: ModelledYes,
			Test:     "iptables.TestGolden/v1.24-fresh-node"},
		Change{Name: "iptables-external-services-from-forward", Row: 12, Area: "iptables layout", Modes: iptablesOnly,
			Version: 20, Ref: "kubernetes#95252",
			Doc:      "FORWARD jumps to KUBE-EXTERNAL-SERVICES, which now also holds the load-balancer IPs' no-endpoint REJECTs, and INPUT no longer jumps to KUBE-SERVICES. Before, INPUT, FORWARD and OUTPUT jumped to KUBE-SERVICES and only INPUT to KUBE-EXTERNAL-SERVICES: a pod's packet to an external IP (not a node address) of a Service without endpoints was forwarded, not REJECTed.",
			Modelled: ModelledPartly, Note: "release inferred from the PR (under review October 2020, the 1.20 freeze was mid-November 2020): absent before 1.20 for sure, its presence in 1.20 not verified",
			Test: "iptables.TestExternalServicesFromForwardFrom120"},
		Change{Name: "iptables-healthcheck-nodeport-accept", Row: 12, Area: "iptables layout", Modes: iptablesOnly,
			Version: 21, Ref: "kubernetes#97824",
			Doc:      "filter KUBE-NODEPORTS (jumped from INPUT) ACCEPTs each health-check node port, so health checks pass where INPUT's policy is DROP; before, they depended on that policy.",
			Modelled: ModelledPartly, Note: "release inferred from the PR (under review February 2021, the 1.21 freeze was in March 2021): absent before 1.21 for sure, its presence in 1.21 not verified",
			Test: "iptables.TestHealthCheckNodePortAcceptFrom121"},
		Change{Name: "iptables-nodeport-tail-rule", Row: 13, Area: "iptables layout", Modes: iptablesOnly,
			Version: 25, Ref: "kubernetes proxier.go",
			Doc:      "The last nat KUBE-SERVICES rule: `--dst-type LOCAL [! -d 127.0.0.0/8] -j KUBE-NODEPORTS`, or one `-d <ip>` rule per --nodeport-addresses address; the `! -d 127.0.0.0/8` form needs --iptables-localhost-nodeports=false (1.25).",
			Modelled: ModelledPartly, Note: "follows the localhost flag (row 15); the per-address form is written in every release",
			Test: "iptables.TestLocalhostNodePortsFlagFrom125"},
		Change{Name: "iptables-route-localnet-when-needed", Row: 14, Area: "sysctls", Modes: iptablesOnly,
			Version: 24, Ref: "kubernetes#107684",
			Doc:      "route_localnet=1 only when --nodeport-addresses selects an IPv4 loopback address (before 1.24: always).",
			Modelled: ModelledYes, Test: "kubeproxy.TestRouteLocalnetWhenNeededFrom124"},
		Change{Name: "iptables-localhost-nodeports-flag", Row: 15, Area: "NodePort", Modes: iptablesOnly,
			Version: 25, Ref: "kubernetes#108250",
			Doc:      "--iptables-localhost-nodeports (default true): false stops NodePorts on 127.0.0.1 (no route_localnet, `! -d 127.0.0.0/8` on the NodePort jump). Before 1.25 the flag does not exist and is refused.",
			Modelled: ModelledYes, Test: "iptables.TestLocalhostNodePortsFlagFrom125"},
		Change{Name: "nodeport-addresses-primary", Row: 16, Area: "NodePort", Modes: iptablesOnly,
			Version: 30, Ref: "kubernetes#123105",
			Doc:      "--nodeport-addresses primary: NodePorts only on the node's primary IPs. Before 1.30 the value is refused (not a CIDR).",
			Modelled: ModelledYes, Test: "iptables.TestNodePortAddressesPrimaryFrom130"},
		Change{Name: "iptables-partial-restores", Row: 17, Area: "iptables sync", Modes: iptablesOnly,
			Gate: "MinimizeIPTablesRestore", Ref: "KEP-3453",
			Doc:      "A sync rewrites only the per-service chains of Services whose Service or EndpointSlices changed (the top-level chains always); without the gate every sync is a full restore of every chain.",
			Modelled: ModelledYes, Test: "iptables.TestPartialRestoresFollowTheGate"},
		Change{Name: "iptables-large-cluster-mode", Row: 18, Area: "iptables sync", Modes: iptablesOnly,
			Version: 26, Ref: "kubernetes#65755, proxier.go",
			Doc:      "Over 1000 endpoints: no per-endpoint comments, stale chains deleted at most once per sync period.",
			Modelled: ModelledPartly, Note: "the comment elision is kubernetes#65755 (2018, before every modelled release); the first release cleaning stale chains at most once per sync period is unverified (present in the 1.26 code read) and the model does so in every release",
			Test: "iptables.TestLargeClusterMode"},
		Change{Name: "iptables-nfacct-invalid-counter", Area: "iptables layout", Modes: iptablesOnly,
			Version: 30, Ref: "kubernetes#122812",
			Doc:      "The INVALID drop of KUBE-FORWARD counts its packets with `-m nfacct --nfacct-name ct_state_invalid_dropped_pkts` (metric kubeproxy_iptables_ct_state_invalid_dropped_packets_total).",
			Modelled: ModelledPartly, Note: "release from the PR's date (January 2024, before the 1.30 freeze); not in the reference table",
			Test: "iptables.TestNFAcctCountersFrom130And131"},
		Change{Name: "iptables-nfacct-localhost-counter", Area: "iptables layout", Modes: iptablesOnly,
			Version: 31, Ref: "kubernetes#125015",
			Doc:      "Localhost NodePort traffic gets its own KUBE-NODEPORTS rule (`-d 127.0.0.0/8 … -m nfacct --nfacct-name localhost_nps_accepted_pkts`) ahead of the NodePort's jump, counting what it accepts; before, the one jump took it uncounted.",
			Modelled: ModelledPartly, Note: "release from the PR's date (May 2024, before the 1.31 freeze); not in the reference table",
			Test: "iptables.TestNFAcctCountersFrom130And131"},
	)
}

// IPTablesSetsRouteLocalnet reports whether kube-proxy's iptables mode sets
// net.ipv4.conf.all.route_localnet=1 on the node: never with
// --iptables-localhost-nodeports=false; before 1.24 always otherwise; from 1.24
// (kubernetes#107684, iptables-route-localnet-when-needed) only when
// --nodeport-addresses selects an IPv4 loopback address (an empty list selects all).
// The iptables mode's descriptor sets the simulated node's sysctl from it.
func (c *NodeConfig) IPTablesSetsRouteLocalnet() bool {
	if !c.LocalhostNodePortsEnabled() {
		return false
	}
	if !c.Has("iptables-route-localnet-when-needed") {
		return true
	}
	npa, err := c.ResolveNodePortAddresses(corev1.IPv4Protocol)
	return err == nil && npa.ContainsIPv4Loopback()
}

// CheckIPTablesFlags refuses the flags of the iptables mode that the node's kube-proxy
// release does not have: --iptables-localhost-nodeports before 1.25
// (iptables-localhost-nodeports-flag) and --nodeport-addresses=primary before 1.30
// (nodeport-addresses-primary). The error names the NodeConfig field.
func (c *NodeConfig) CheckIPTablesFlags() error {
	v := c.Version.Resolved()
	if c.LocalhostNodePorts != nil && !c.Has("iptables-localhost-nodeports-flag") {
		return fmt.Errorf("localhostNodePorts: kube-proxy %s has no --iptables-localhost-nodeports (added in 1.25)", v)
	}
	if len(c.NodePortAddresses) == 1 && c.NodePortAddresses[0] == NodePortAddressesPrimary && !c.Has("nodeport-addresses-primary") {
		return fmt.Errorf("nodePortAddresses: kube-proxy %s does not know --nodeport-addresses=%s (added in 1.30)", v, NodePortAddressesPrimary)
	}
	return nil
}
