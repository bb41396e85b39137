// Package iptables is kube-proxy's iptables mode: it generates, byte for byte, the
// iptables-restore input kube-proxy writes (its current layout: KUBE-SERVICES,
// KUBE-NODEPORTS, KUBE-SVC/SVL/EXT/FW/SEP-*, KUBE-MARK-MASQ, KUBE-POSTROUTING,
// KUBE-FORWARD, KUBE-PROXY-FIREWALL, KUBE-EXTERNAL-SERVICES, KUBE-FIREWALL) and applies
// it through Interface, which the in-memory emulator and the kernel adapter implement.
//
// The flow of one sync:
//
//	[]*corev1.Service, []*discoveryv1.EndpointSlice
//	   │ proxy.ChangeTracker.Update             per node, per IP family: ServicePort,
//	   ▼                                        Endpoint, what changed since last sync
//	proxy.SyncState
//	   │ for each service port, in ServicePortName order:
//	   │   proxy.CategorizeEndpoints → cluster / local / reachable endpoints
//	   │   → KUBE-SERVICES, KUBE-NODEPORTS, filter REJECT/DROP rules   (always)
//	   │   → KUBE-SVC/SVL/EXT/FW/SEP chains                (full sync, or if changed)
//	   ▼
//	restore text  "*filter … COMMIT\n*nat … COMMIT\n"   (plus -X for stale chains)
//	   │ Interface.Restore(--noflush --counters)
//	   ▼
//	emulator (proxy/iptables/emulator) or kernel (package kernel)
//	   then proxy.SyncState.StaleConntrackFilters → proxy.Conntrack.Delete
//
// Render is the pure function (objects → full-sync text) for the CLI and tests;
// Proxier keeps state between syncs and does partial syncs and stale-chain deletion as
// kube-proxy does since 1.26. The text kube-proxy writes on a partial sync still holds
// KUBE-SERVICES and the other top-level chains whole; the generator keeps, per service
// port, the lines it wrote into them and the chains it declared (generator.go:
// svcEntry), and a partial sync that follows the previous one in the change tracker's
// history computes only the Services the tracker reports changed, copying the other
// ports' lines (the same bytes; TestCachedSyncsMatchUncached compares it with the
// generator computing every port). The hook jump rules (PREROUTING → KUBE-SERVICES and so
// on) are not part of the restore text in kube-proxy; JumpRules lists them, Proxier
// inserts missing ones with a separate restore of "-I" lines on full syncs, and
// RenderOptions.IncludeJumps writes them into the text for a fresh node.
//
// ParseSave is the one lenient reader of iptables-save text the proxiers share (this
// Proxier, proxy/userspace and proxy/ipvs): which chains a node declares and which rules
// and jumps they hold, with counters, comments and other software's rules passed over;
// the emulator's parser is the full one, for evaluation.
//
// Older releases: Config.Node.Version (1.18 to the newest) selects the layout of that
// kube-proxy release through the behaviour changes of proxy/behaviour_iptables.go,
// resolved once into a layout (config.go): KUBE-POSTROUTING keeping the mark (1.18),
// KUBE-XLB and inline masquerade rules (before 1.24, generator_legacy.go), KUBE-FW for
// every load-balancer IP and KUBE-MARK-DROP with kubelet's chains written by the
// proxier (before 1.25), the INVALID drop whatever tcp_be_liberal (before 1.29), no
// nfacct counters, full restores without MinimizeIPTablesRestore; flags a release does
// not have are refused. testdata/generator/v1.*.yaml hold those layouts' golden files.
//
// Names and numbers are kube-proxy's: chain names are "KUBE-SVC-" etc. plus the first 16
// base32 characters of SHA-256(service port name + protocol [+ endpoint]);
// probabilities are 1/n printed with %0.10f; the masquerade mark is 1<<bit printed with
// %#08x (0x00004000). Where kube-proxy's order is random (it walks a Go map) this
// package sorts: services by namespace/name/port/protocol, stale chains by name.
package iptables
