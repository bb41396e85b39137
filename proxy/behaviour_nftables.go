package proxy

// The nftables mode's rule layouts by kube-proxy release (1.29-1.37), from the
// reference nftables.md §1-§4: each layout change is one switch that package
// proxy/nftables reads with NodeConfig.Has.
func init() { registerChanges(nftablesChanges()...) }

// Names of the nftables layout switches (read in proxy/nftables).
const (
	// ChangeNFTablesMode: the nftables mode exists (alpha 1.29, gate NFTablesProxyMode).
	ChangeNFTablesMode = "nftables-mode"
	// ChangeNFTLayout130: the 1.30 layout (filter-prerouting, filter chains at
	// dstnat-10, split endpoints checks, cluster-ips-check, firewall-ips map, no
	// forward chain).
	ChangeNFTLayout130 = "nftables-layout-1.30"
	// ChangeNFTNoInvalidDrop: the forward chain's "ct state invalid drop" is gone.
	ChangeNFTNoInvalidDrop = "nftables-no-ct-invalid-drop"
	// ChangeNFTPartialSync: syncs rewrite only the services that changed.
	ChangeNFTPartialSync = "nftables-partial-sync"
	// ChangeNFTNodePortPrimary: --nodeport-addresses defaults to "primary".
	ChangeNFTNodePortPrimary = "nftables-nodeport-addresses-primary"
	// ChangeNFTHourlyFullSync: a full sync at least hourly, reading the maps back.
	ChangeNFTHourlyFullSync = "nftables-hourly-full-sync"
	// ChangeNFTPreDNATChains: filter-prerouting-pre-dnat / filter-output-pre-dnat at
	// -110, filter-input/forward/output at 0, no filter-output-post-dnat.
	ChangeNFTPreDNATChains = "nftables-pre-dnat-chains"
	// ChangeNFTMasqueradeRedesign: no mark-for-masquerade chain, hairpin-connections
	// set, endpoint chains only for affinity.
	ChangeNFTMasqueradeRedesign = "nftables-masquerade-redesign"
	// ChangeNFTLocalhostNodePorts: the KubeProxyNFTablesLocalhostNodePorts gate.
	ChangeNFTLocalhostNodePorts = "nftables-localhost-nodeports"
)

func nftablesChanges() []Change {
	const area = "nftables layout"
	modes := []string{"nftables"}
	return []Change{
		{Name: ChangeNFTablesMode, Row: 43, Area: "mode availability", Modes: modes, Version: 29, Gate: "NFTablesProxyMode", Ref: "KEP-3866",
			Doc:      "kube-proxy's nftables mode: alpha in 1.29 (the NFTablesProxyMode gate, off by default in 1.29-1.30), beta and on by default in 1.31, GA in 1.33. A scenario choosing the mode on 1.29-1.30 must turn the gate on.",
			Modelled: ModelledYes, Test: "scenario.TestNFTablesModeNeedsGateBefore131"},
		{Name: ChangeNFTLayout130, Row: 43, Area: area, Modes: modes, Version: 30, Ref: "KEP-3866",
			Doc: "1.29: filter-input/forward/output at priority -101 jump to one endpoints-check chain and to firewall-check, which looks LoadBalancer source ranges up in the sets firewall / firewall-allow; there is no cluster-ips set. " +
				"1.30: filter-prerouting (-110), filter-input/forward/output at dstnat-10 and filter-output-post-dnat (-90); service-endpoints-check and nodeport-endpoints-check; the cluster-ips set and cluster-ips-check (rejecting other ports of a ClusterIP, dropping unallocated ServiceCIDR addresses); firewall-ips verdict map to per-service firewall chains.",
			Modelled: ModelledPartly, Note: "the 1.29 firewall sets are written as the 1.30 firewall-ips map and per-service chains (same verdicts); no stored upstream expected output for 1.29-1.33 to hold the layouts to",
			Test: "kubeproxy.TestNFTablesClusterIPOtherPortFrom130"},
		{Name: ChangeNFTNoInvalidDrop, Row: 43, Area: area, Modes: modes, Version: 30, Ref: "KEP-3866",
			Doc:      "1.29 jumps from filter-forward to a forward chain with \"ct state invalid drop\" (left out with nf_conntrack_tcp_be_liberal=1); from 1.30 the nftables mode has no INVALID drop (use --conntrack-tcp-be-liberal).",
			Modelled: ModelledPartly, Note: "the rule is written and dumped; the tracer and netsim evaluator follow only new connections, so an INVALID packet's drop is shown on the ruleset only",
			Test: "nftables.TestLayout129ForwardDropsInvalid"},
		{Name: ChangeNFTPartialSync, Row: 43, Area: area, Modes: modes, Version: 31, Ref: "KEP-3866",
			Doc:      "Before 1.31 every sync rewrote the whole table; from 1.31 a sync rewrites only the chains of services whose Service or EndpointSlices changed (full syncs at startup, after an error or a forced one).",
			Modelled: ModelledYes, Test: "nftables.TestPartialSyncsFrom131"},
		{Name: ChangeNFTNodePortPrimary, Row: 43, Area: area, Modes: modes, Version: 31, Ref: "kubernetes#122724",
			Doc:      "In the nftables mode an unset --nodeport-addresses means every local address before 1.31 (fib daddr type local) and the node's primary IPs (the nodeport-ips set) from 1.31.",
			Modelled: ModelledYes, Test: "nftables.TestNodePortPrimaryFrom131"},
		{Name: ChangeNFTHourlyFullSync, Row: 43, Area: area, Modes: modes, Version: 33, Ref: "KEP-3866",
			Doc:      "From 1.33 a full sync is forced at least hourly, and a full sync reads the map elements back and diffs them instead of flushing the maps (1.31-1.32 flushed and re-added every element on a full sync).",
			Modelled: ModelledPartly, Note: "the hourly full sync is switched; the read-back versus flush difference is not (both end in the same table)",
			Test: "nftables.TestHourlyFullSyncFrom133"},
		{Name: ChangeNFTPreDNATChains, Row: 43, Area: area, Modes: modes, Version: 34, Ref: "KEP-3866",
			Doc:      "1.30-1.33: filter-prerouting, and filter-input/forward/output at dstnat-10 (-110), filter-output-post-dnat at -90. 1.34: filter-prerouting-pre-dnat and filter-output-pre-dnat at -110 run only the firewall; filter-input/forward/output move to priority filter (0), after DNAT, so host-originated traffic meets the no-endpoint maps after DNAT.",
			Modelled: ModelledYes, Test: "kubeproxy.TestNFTablesHostToLocalPolicyExternalIPFrom134"},
		{Name: ChangeNFTMasqueradeRedesign, Row: 43, Area: area, Modes: modes, Version: 36, Ref: "KEP-3866",
			Doc: "Up to 1.35 every endpoint has a chain whose first rule marks the endpoint's own traffic for masquerade (ip saddr EP jump mark-for-masquerade), so hairpin is masqueraded for any endpoint, local or not; the service chain marks ClusterIP traffic from outside the cluster. " +
				"From 1.36 the mark-for-masquerade chain is gone (inline mark), ClusterIP masquerade is one rule in services, hairpin is masqueraded through the hairpin-connections set of local endpoints only, and endpoint chains exist only for ClientIP affinity (direct numgen DNAT maps).",
			Modelled: ModelledYes, Test: "kubeproxy.TestNFTablesHairpinRemoteEndpointBefore136"},
		{Name: ChangeNFTLocalhostNodePorts, Row: 43, Area: area, Modes: modes, Version: 37, Gate: "KubeProxyNFTablesLocalhostNodePorts", Ref: "KEP-6032",
			Doc:      "1.37 alpha gate: NodePort traffic to 127.0.0.1 / ::1 is counted and rejected (localhost-nodeport-reject-ports map and chains); before, and with the gate off, it matches no rule.",
			Modelled: ModelledPartly, Note: "the userspace TCP proxy for an explicit loopback --nodeport-addresses is not modelled",
			Test: "nftables.TestLocalhostNodePortsGate"},
	}
}
