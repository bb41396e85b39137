// Package nftables is kube-proxy's nftables mode: it writes the transactions kube-proxy's
// nftables proxier writes, in the layout of the node's release (Config.Node.Version,
// kube-proxy 1.29-1.37, default 1.37; Config.Version overrides it), as
// sigs.k8s.io/knftables transactions whose text is nft -f
// input, and applies them through Interface (knftables.Fake, a real knftables.Interface,
// or the netsim adapter that hands tx.String() to the evaluator).
//
// The table, one per family ("table ip kube-proxy", "table ip6 kube-proxy"), in the
// 1.36+ layout:
//
//	base chains (priority)                    rules
//	filter-prerouting-pre-dnat (-110)  ─┐     ct state new jump firewall-check
//	filter-output-pre-dnat     (-110)  ─┘       └ vmap @firewall-ips → firewall-HASH-ns/svc/proto/port
//	nat-prerouting / nat-output (-100)        jump services
//	                                            ├ ClusterIP from outside the pods: mark for masquerade
//	                                            ├ ip daddr . l4proto . dport vmap @service-ips
//	                                            └ @nodeport-ips (or fib daddr type local) vmap @service-nodeports
//	                                                 → service-… / local-… (DNAT: one endpoint, or
//	                                                   numgen random mod N map { i : ip . port })
//	                                                 → external-… (masquerade or short-circuit, then
//	                                                   service-… / local-…)
//	                                                 → endpoint-… (ClientIP affinity only, with the
//	                                                   timed set affinity-…)
//	filter-input / -forward / -output (0)     ct state new jump service-endpoints-check,
//	                                          nodeport-endpoints-check (vmaps @no-endpoint-services,
//	                                          @no-endpoint-nodeports: drop or goto reject-chain),
//	                                          cluster-ips-check (reject unknown ports of
//	                                          @cluster-ips, drop the rest of the ServiceCIDRs)
//	nat-postrouting (100)                     jump masquerading: marked traffic, and DNATed
//	                                          connections in @hairpin-connections
//
// Per-service and per-endpoint names are kube-proxy's hashAndTruncate: the first 8
// characters of base32(SHA-256(readable)) + "-" + readable, readable being
// "ns/svc/proto/port" or "ns/svc/proto/port__IP/PORT" (IPv6 colons made dots), with
// prefixes service-, local-, external-, firewall-, endpoint-, affinity-.
//
// The flow of one sync:
//
//	[]*corev1.Service, []*discoveryv1.EndpointSlice
//	   │ proxy.ChangeTracker.Update               per node, per IP family
//	   ▼
//	proxy.SyncState
//	   │ full sync: table, base chains, jump rules, fixed chains and rules, sets, maps
//	   │ for each service port, in ServicePortName order:
//	   │   proxy.CategorizeEndpoints → cluster / local / reachable endpoints
//	   │   → set and map elements, diffed against the record (add, delete+add, delete)
//	   │   → its chains: add + flush + rules   (full sync, or if it changed)
//	   │ service chains nobody uses: flushed now, deleted a second later
//	   ▼
//	*knftables.Transaction ── Interface.Run ──▶ Fake / nft / evaluator
//	   then proxy.SyncState.StaleConntrackFilters → proxy.Conntrack.Delete
//
// Render is the pure function (objects → first full sync) for the CLI and tests;
// Proxier keeps state between syncs, reads the table back when its Interface is also a
// Lister (as kube-proxy does), and otherwise trusts its record of what it wrote.
//
// Differences from the iptables mode that come from kube-proxy itself: no localhost
// NodePorts (1.37's alpha gate only counts and rejects them), --nodeport-addresses
// defaults to "primary", traffic to unknown ports of ClusterIPs is rejected and to
// unallocated ServiceCIDR addresses dropped, no ct state invalid drop. The masquerade
// mark is written as kube-proxy prints it, %#08x (0x00004000); kube-proxy's tests
// configure "0x4000". Where kube-proxy's order is random (it walks a Go map) this package
// sorts: service ports by namespace/name/port/protocol, stale chains by name.
//
// Older layouts follow the switches of proxy/behaviour_nftables.go (NodeConfig.Has): up
// to 1.35 the mark-for-masquerade chain, an endpoint chain per endpoint marking its own
// traffic (hairpin) and the ClusterIP masquerade rule in each service chain; 1.30-1.33
// filter-prerouting, filter chains at dstnat-10 and filter-output-post-dnat; 1.29
// filter chains at dstnat-1, one endpoints-check chain, the forward chain's INVALID
// drop and no cluster-ips set; before 1.31 every sync is full and an unset
// --nodeport-addresses means every local address; before 1.33 no hourly full sync.
// The 1.29 firewall sets (firewall, firewall-allow) are written as the 1.30 firewall-ips
// map. Layouts 1.34/1.35 are held to kube-proxy's expected output (testdata/cases/overall-135.yaml).
package nftables
