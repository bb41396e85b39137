package proxy

// The behaviour changes of the shared proxy code that the endpoint-selection, conntrack
// cleanup and health helpers model: stale UDP conntrack cleanup (rows 19-26 of the
// reference table), endpoint selection by feature gate (rows 27-30), LoadBalancer ipMode
// (row 32) and kube-proxy's health answers (rows 33-34).
func init() {
	registerChanges(conntrackChanges()...)
	registerChanges(selectionChanges()...)
	registerChanges(healthChanges()...)
}

// Names of the conntrack cleanup switches (read in stale.go and changes.go).
const (
	chUDPEventCleanup       = "udp-conntrack-event-cleanup"
	chUDPNodePortFlush      = "udp-conntrack-nodeport-flush"
	chUDPActiveCountsAny    = "udp-conntrack-0n-counts-any-endpoint"
	chUDPActiveCountsReady  = "udp-conntrack-0n-counts-ready-again"
	chUDPTrackerRefactor    = "udp-conntrack-tracker-refactor"
	chUDPSharedCleanup      = "udp-conntrack-shared-cleanup"
	chConntrackNetlink      = "conntrack-netlink"
	chUDPReconciler         = "udp-conntrack-reconciler"
	chUDPReconcilerFixes    = "udp-conntrack-reconciler-fixes"
	chTerminatingFallback   = "terminating-endpoints-fallback"
	chTerminatingAllPolicy  = "terminating-fallback-every-policy"
	chInternalTrafficPolicy = "internal-traffic-policy"
	chTopologyHints         = "topology-aware-hints"
	chTopologyModeAnnot     = "topology-mode-annotation"
	chTrafficDistribution   = "traffic-distribution-hints"
	chLBIPModeProxy         = "lb-ipmode-proxy"
	// ChangeHCProxyHealth and ChangeHealthzDraining are read by the health servers of
	// package kubeproxy.
	ChangeHCProxyHealth   = "hc-includes-proxy-health"
	ChangeHealthzDraining = "healthz-node-draining"
)

func conntrackChanges() []Change {
	const area = "conntrack cleanup"
	return []Change{
		{Name: chUDPEventCleanup, Row: 19, Area: area, Version: OldestVersion, Ref: "kubernetes#71573, kubernetes#48370",
			Doc:      "Baseline (era 1): after a successful sync, UDP entries DNATed to a removed endpoint are deleted (cluster IP, external IPs, LB IPs and the NodePort); when a UDP service port goes from 0 to N serving endpoints or is deleted, every entry to its cluster, external and LB IPs and port is flushed (the \"black hole\" entries a client made while it had none).",
			Modelled: ModelledYes, Note: "whether LB IPs were flushed in this era is unverified; the model flushes them",
			Test: "proxy.TestStaleUDPCleanupEras"},
		{Name: chUDPNodePortFlush, Row: 20, Area: area, Version: 21, Ref: "kubernetes#98305",
			Doc:      "A UDP service port going from 0 to N serving endpoints also flushes the entries to its NodePort (any address); before, a client's NodePort black-hole entry survived while the client kept sending.",
			Modelled: ModelledYes, Test: "proxy.TestStaleUDPCleanupEras"},
		{Name: chUDPActiveCountsAny, Row: 21, Area: area, Version: 22, Ref: "kubernetes#106163",
			Doc:      "1.22 regression: the 0 to N test counts every endpoint of the slice, not only serving ones, so the flush happens when a not-ready endpoint appears (before it has rules) and not when it becomes ready: a black-hole entry made in between survives.",
			Modelled: ModelledYes, Test: "proxy.TestUDPZeroToNReadinessRegression"},
		{Name: chUDPActiveCountsReady, Row: 21, Area: area, Version: 23, Ref: "kubernetes#106163",
			Doc:      "Fix of the 1.22 regression: the 0 to N test counts serving endpoints again (the patch backports to 1.22 are not modelled).",
			Modelled: ModelledYes, Test: "proxy.TestUDPZeroToNReadinessRegression"},
		{Name: chUDPTrackerRefactor, Row: 22, Area: area, Version: 27, Ref: "kubernetes#115299",
			Doc:      "Refactor of the stale-entry bookkeeping (DeletedUDPEndpoints, NewlyActiveUDPServices); no visible change intended.",
			Modelled: ModelledYes, Note: "no visible change: the model cleans alike before and after (the eras test covers 1.26-1.28)",
			Test: "proxy.TestStaleUDPCleanupEras"},
		{Name: chUDPSharedCleanup, Row: 23, Area: area, Version: 28, Ref: "kubernetes#116104",
			Doc:      "The cleanup moves to shared code (pkg/proxy/conntrack) used by the iptables, IPVS and later nftables proxiers.",
			Modelled: ModelledYes, Note: "no visible change in the model, whose modes share one cleanup at every release (whether IPVS before 1.28 cleaned otherwise is unverified)",
			Test: "proxy.TestStaleUDPCleanupEras"},
		{Name: chConntrackNetlink, Row: 24, Area: area, Version: 32, Ref: "kubernetes#126847",
			Doc:      "Deletions go through netlink; before, kube-proxy ran the conntrack binary and, on a node whose image lacked it (NodeConfig.ConntrackBinaryMissing), cleaned no UDP entry at all.",
			Modelled: ModelledYes, Test: "proxy.TestConntrackBinaryMissing"},
		{Name: chUDPReconciler, Row: 25, Area: area, Version: 32, Ref: "kubernetes#127318, kubernetes#139628",
			Doc:      "A reconciler replaces the event-based deletion: UDP flows to a service port whose reply source is not one of its serving endpoints are deleted, but service ports with zero serving endpoints and deleted services are skipped, so after a UDP service is scaled to 0 a one-way client keeps its entry to the dead pod for as long as it keeps sending (regression #139628).",
			Modelled: ModelledPartly, Note: "modelled by its effect on each sync's changes (stale endpoints of services left with none and deleted service ports are not cleaned); not modelled: that it lists every flow, so a restart deletes only mismatching flows (the model still flushes the services that became active) and flows missed by events are found",
			Test: "proxy.TestStaleUDPCleanupEras"},
		{Name: chUDPReconcilerFixes, Row: 26, Area: area, Version: 36, Ref: "kubernetes#139629, kubernetes#141371",
			Doc:      "The reconciler also cleans service ports with zero serving endpoints and deleted services: the scale-to-0 scenario of #139628 recovers.",
			Modelled: ModelledPartly, Note: "release unverified (merged 2026; 1.36 assumed)",
			Test: "kubeproxy.TestStaleUDPScaleToZeroEveryMode"},
	}
}

func selectionChanges() []Change {
	const area = "endpoint selection"
	return []Change{
		{Name: chTerminatingFallback, Row: 27, Area: area, Gate: "ProxyTerminatingEndpoints", Ref: "KEP-1669",
			Doc:      "With no ready endpoint in the traffic policy's scope, serving terminating endpoints are used; before, terminating endpoints are never used (a service whose pods all terminate REJECTs).",
			Modelled: ModelledYes, Test: "kubeproxy.TestTerminatingFallbackByVersion"},
		{Name: chTerminatingAllPolicy, Row: 27, Area: area, Version: 24, Gate: "ProxyTerminatingEndpoints", Ref: "KEP-1669",
			Doc:      "The terminating fallback applies to every traffic policy; in 1.22-1.23 (gate turned on) only to the node-local endpoint set (externalTrafficPolicy Local).",
			Modelled: ModelledPartly, Note: "in 1.22-1.23 the model applies the fallback to the whole local set, internalTrafficPolicy Local included",
			Test: "kubeproxy.TestTerminatingFallbackByVersion"},
		{Name: chInternalTrafficPolicy, Row: 28, Area: area, Gate: "ServiceInternalTrafficPolicy", Ref: "KEP-2086",
			Doc:      "internalTrafficPolicy Local sends cluster-IP traffic only to endpoints on the client's node; when there is none it is rejected as a service without endpoints until 1.23 and dropped from 1.24 (kubernetes#106497, the KUBE-SVL layout); with the gate off the field is ignored (every endpoint).",
			Modelled: ModelledYes, Test: "kubeproxy.TestInternalTrafficPolicyByVersion"},
		{Name: chTopologyHints, Row: 29, Area: area, Gate: "TopologyAwareHints", Ref: "KEP-2433",
			Doc:      "Zone hints: for a Service annotated service.kubernetes.io/topology-aware-hints: Auto, when every ready endpoint has a zone hint and one names the node's zone, only endpoints hinted for that zone are used; with the gate off (or its beta off by default in 1.23) hints are ignored.",
			Modelled: ModelledYes, Test: "kubeproxy.TestTopologyHintsByVersion"},
		{Name: chTopologyModeAnnot, Row: 29, Area: area, Version: 27, Ref: "KEP-2433",
			Doc:      "The annotation service.kubernetes.io/topology-mode (preferred) opts a Service in as topology-aware-hints did; before it is ignored.",
			Modelled: ModelledYes, Test: "kubeproxy.TestTopologyHintsByVersion"},
		{Name: chTrafficDistribution, Row: 30, Area: area, Gate: "ServiceTrafficDistribution", Ref: "KEP-4444",
			Doc:      "Zone hints are honoured whether or not the Service carries the topology annotation (trafficDistribution makes the controller write them); before, hints without the annotation are ignored.",
			Modelled: ModelledYes, Test: "kubeproxy.TestTopologyHintsByVersion"},
		{Name: chLBIPModeProxy, Row: 32, Area: "load balancer", Gate: "LoadBalancerIPMode", Ref: "KEP-1860",
			Doc:      "A LoadBalancer ingress IP with ipMode Proxy gets no rules on the node, so in-cluster traffic to it goes to the load balancer; with the gate off ipMode is ignored and the IP is DNATed locally as a VIP.",
			Modelled: ModelledYes, Test: "kubeproxy.TestLoadBalancerIPModeByVersion"},
	}
}

func healthChanges() []Change {
	const area = "health check"
	return []Change{
		{Name: ChangeHCProxyHealth, Row: 33, Area: area, Version: 26, Ref: "kubernetes#111661",
			Doc:      "The healthCheckNodePort answer of an externalTrafficPolicy Local service also needs a healthy proxy (no update waiting longer than the health timeout), and its body says serviceProxyHealthy; before, a node with a local ready endpoint answered 200 however stale its rules were.",
			Modelled: ModelledYes, Test: "kubeproxy.TestHealthCheckProxyHealthByVersion"},
		{Name: ChangeHealthzDraining, Row: 34, Area: area, Gate: "KubeProxyDrainingTerminatingNodes", Ref: "KEP-3836",
			Doc:      "/healthz also fails (503, nodeEligible false) for a node being deleted or tainted ToBeDeletedByClusterAutoscaler, and /livez answers what /healthz did; before, /healthz ignores the node's state and /livez does not exist (404).",
			Modelled: ModelledPartly, Note: "whether 1.28-1.29 with the alpha gate off already fail on the taint is unverified; the model follows the gate",
			Test: "kubeproxy.TestHealthzDrainingByVersion"},
	}
}
