package proxy

// The behaviour changes the scenario helper models (a kube-proxy restart as a scenario
// step: restart_proxy).
func init() {
	registerChanges(
		Change{Name: "restart-keeps-udp-conntrack", Row: 25, Area: "conntrack cleanup",
			Version: 32, Ref: "kubernetes#127318 (issue kubernetes#122740)",
			Doc:      "A kube-proxy restart and UDP conntrack entries: before 1.32 the restarted kube-proxy sees every UDP service port with a serving endpoint as newly active and its first sync flushes the UDP entries to the service IPs and node ports, live flows included (RestartConntrackFilters); from 1.32 the conntrack reconciler clears only entries that match no serving endpoint, so a restart keeps live flows.",
			Modelled: ModelledYes, Test: "scenario.TestRestartProxyUDPConntrack"},
	)
}
