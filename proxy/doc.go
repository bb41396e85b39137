// Package proxy is what every proxy mode (iptables, IPVS, userspace, later nftables)
// shares: kube-proxy's view of Services and EndpointSlices for one node and one IP
// family, the endpoint selection rules, the node's kube-proxy flags, and the change
// tracking a mode syncs from. It follows kube-proxy's pkg/proxy (serviceport.go,
// endpointslicecache.go, topology.go, servicechangetracker.go, util/nodeport_addresses.go,
// util/localdetector.go) and depends on nothing but the Kubernetes API types, so any
// mode, the simulator and the kernel adapter can use it.
//
// Data flows one way:
//
//	[]*corev1.Service, []*discoveryv1.EndpointSlice      (complete lists, each sync)
//	        │  ChangeTracker.Update(services, slices)      one node, one IP family
//	        ▼
//	SyncState{Services: ServicePortMap, Endpoints: EndpointsMap, what changed}
//	        │  per service port:
//	        │  CategorizeEndpoints(endpoints, servicePort, node, labels)
//	        ▼
//	Categorized{Cluster, Local, AllReachable, HasAnyEndpoints}
//	        │  a mode turns these into its ruleset (proxy/iptables: restore text;
//	        │  proxy/ipvs: virtual servers) and writes it through its Interface
//	        ▼
//	SyncState.StaleConntrackFilters() → CleanStaleConntrack(Conntrack, filters)
//
// ServicePort is one Service port with only the addresses of the family (cluster IP,
// external IPs, LoadBalancer VIPs, source ranges) and its policies resolved; Endpoint is
// one EndpointSlice entry (addresses[0] only) with kube-proxy's defaults for unset
// conditions (ready and serving true, terminating false) and Local set for this node.
// Entries for the same ip:port across slices collapse into one.
//
// NodeConfig carries the flags that change rules: --detect-local-mode and its CIDRs or
// interfaces (LocalTrafficDetector), --nodeport-addresses (NodePortAddresses),
// --masquerade-all, --iptables-masquerade-bit, --iptables-localhost-nodeports.
//
// Before anything is built, the objects the node's proxy does not watch are left out,
// as kube-proxy's informers leave them out (labelfilter.go): Services labelled
// service.kubernetes.io/service-proxy-name (handed to another proxy), EndpointSlices
// labelled service.kubernetes.io/headless, and before 1.35 both kinds with either label.
// NodeConfig.ProxyName makes the proxy that other one: it sees only the Services
// labelled with its name.
//
// ChangeTracker keeps the previous view so a mode can do partial syncs: it reports which
// Services' service ports or EndpointSlices changed, and the UDP state that went stale
// (deleted UDP service ports, endpoints that stopped serving, UDP services that got
// their first endpoint), from which StaleConntrackFilters derives the conntrack entries
// kube-proxy clears, as the node's release cleaned them (NodeConfig.Version: the
// cleanup eras of behaviour_selection.go). The release and its feature gates also decide,
// when the tracker builds a service port, which endpoints CategorizeEndpoints may pick
// (terminating fallback, internalTrafficPolicy, zone hints) and whether ipMode Proxy
// ingress IPs are left alone. Objects passed to it are treated as immutable, as informer caches
// treat them: a changed object must be a new object. An Update's work grows with what
// changed (entries compared with the previous lists by index, only differing objects
// parsed); its view's maps are the tracker's own, changed in place by the next Update.
// NewSyncState builds a view once,
// without tracking.
//
// Orders are deterministic where kube-proxy's are not: service ports are walked in
// ServicePortName.Less order, endpoints in string order.
package proxy
