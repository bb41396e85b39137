// Package dns is clusterlab's cluster DNS: a server that answers per the
// Kubernetes DNS-Based Service Discovery specification (schema 1.1.0), using
// CoreDNS's kubernetes-plugin conventions where the specification is silent,
// plus the client side a pod sees: the resolv.conf the kubelet writes for it
// and a stub resolver that walks its search list as glibc does.
//
// # Server data flow
//
//	Source (service store, StaticSource)      Invalidate() / change callback
//	  ListServices, ListEndpointSlices,  ─────────────────┐ marks the index stale
//	  ListPods, ListNamespaces                            v
//	        │                                   rebuild on the next query:
//	        └──────────── buildIndex ─────────> index (immutable snapshot, read
//	                                             lock-free; new SOA serial; a
//	                                             query finding it stale waits
//	                                             for the rebuild in progress)
//	query ─> Handle / ServeDNS / HandleWire
//	  1. transport rules: QR set → no reply; opcode ≠ QUERY → NOTIMP;
//	     question count ≠ 1, several OPTs, bad name → FORMERR; EDNS version
//	     ≠ 0 → BADVERS; class not IN/ANY → REFUSED
//	  2. zone match: the most specific served zone; none → upstream
//	     (REFUSED without one, SERVFAIL when it fails)
//	  3. name parsing (parseRequest, right to left below the zone):
//	     [_port._proto. | endpoint.] service . namespace . svc|pod . zone
//	     reverse zones: d.c.b.a.in-addr.arpa / 32 nibbles under ip6.arpa
//	  4. record synthesis from the index: items (address + port + owner,
//	     or an ExternalName target) → A/AAAA (dedup by address, CNAME chased
//	     in the zone or through the upstream, TC propagated), SRV (weight
//	     floor(100/n), dedup by target+port, glue per target+address), PTR,
//	     TXT dns-version, SOA/NS at the apex
//	  5. response rules: AA on every zone answer; an empty answer is NODATA
//	     or NXDOMAIN (errNameError) with the zone's SOA in the authority
//	     section (TTL min(ttl, 300)); NXDOMAIN becomes SERVFAIL while the
//	     Source has not synced, or is forwarded in fallthrough zones; owner
//	     names keep the query's spelling; the OPT record is echoed and UDP
//	     replies are truncated (TC) to 512 bytes or the EDNS0 buffer size
//
// ServeDNS keeps the packed replies that came from the index alone (replyCache,
// hanging off the index, so a rebuild empties it) and answers a repeated query
// with a copy whose ID is patched: no lookup, no records built, no packing. The
// key is everything else such a reply depends on (question as spelled, RD, CD,
// EDNS0 size and DO, transport, the client's right to recurse); replies through
// the upstream and error replies are never cached.
//
// The server owns no socket: it is a miekg/dns Handler (ServeDNS), so it runs
// under a dns.Server on UDP or TCP, and Handle/HandleWire answer a message
// directly, which is how the simulated network (netsim) runs it behind the
// kube-dns Service.
//
// The transport rules of step 1 are miekg/dns's default accept function,
// which CoreDNS serves with, plus CoreDNS's BADVERS; HandleWire applies them
// itself so that a simulated socket behaves like a real one.
//
// # The pod side
//
//	pod spec + kubelet flags ──PodResolvConf──> ResolvConf (String(): resolv.conf text)
//	ResolvConf + Dial ──NewStub──> Stub
//	  Lookup(name): SearchList order (trailing dot: as is; ≥ ndots dots: as is
//	  first; else each search domain, then as is), A and AAAA back to back on
//	  one UDP socket per name (single-request options: one at a time; and
//	  glibc's fallback: a timeout with one reply of the two switches the stub
//	  to single-request, then to single-request-reopen, asking again each
//	  time, and the switch stays for later lookups), TC →
//	  TCP, next nameserver after no reply or SERVFAIL/REFUSED/NOTIMP; the
//	  walk goes on after NXDOMAIN, NODATA and SERVFAIL and reports glibc's
//	  h_errno (HOST_NOT_FOUND, NO_DATA, TRY_AGAIN, NO_RECOVERY); every query
//	  sent is in the Result's log.
//	  NetResolver(): a GoResolver (a Go *net.Resolver) for code in the pod
//	  that resolves through the same Stub and search list (it dials nothing:
//	  each question Go asks is answered by the stub's walk; its lookup
//	  methods carry the caller's spelling, so an absolute name is asked
//	  once; goresolver.go).
//
// # Inside the simulation
//
// InstallClusterDNS(cluster, ClusterDNSOptions) gives a simulated cluster (package cluster) the
// cluster DNS a kubeadm cluster has, so that DNS traffic takes the same
// paths, and meets the same proxy-mode and conntrack behaviour, as any other
// service traffic:
//
//	pod Net().Dial("tcp", "my-service:80")
//	  └─ PodResolver (installed by the kubelet's pod-start hook): /etc/hosts,
//	     then the Stub walking the pod's resolv.conf (PodResolvConf)
//	       └─ UDP/TCP from the pod to kube-system/kube-dns 10.96.0.10:53
//	            └─ the node's proxy mode (DNAT, conntrack) ─> a coredns-N pod
//	                 (app AppName: Server.HandleWire on its own UDP and TCP
//	                 sockets, reading the cluster's service.Store; metrics on 9153)
//	                   └─ names outside the zone: forwarded over the network to
//	                      the external host "upstream-dns" (a ZoneUpstream; the
//	                      DNS pods have dnsPolicy Default, and the nodes'
//	                      resolv.conf names that host), whose names point at the
//	                      external host "example-web"
//
// The upstream host sees the DNS pods' nodes' addresses: pod traffic leaving the
// cluster network is masqueraded, as most CNIs do (netsim's EgressMasquerade
// node setting). hostNetwork pods share their node's network and resolver (the
// node's resolv.conf). Every resolver keeps its lookups with the queries the stub
// sent (ClusterDNS.Resolver(ns, name).Queries()); ServerLog lists what the
// DNS pods and the upstream host answered and the client address each saw.
// AddPod adds a DNS pod (a new name, a new address, as a ReplicaSet would);
// deleting one through the cluster stops its server with the pod. The tests
// show the search-list walks through the iptables mode, a DNS pod lost
// behind a lagging kube-proxy, and the stale-UDP-conntrack failure (a client
// pinned to one source port keeps reaching a replaced DNS pod's dead address
// until kube-proxy deletes the entry, or, without that cleanup, until the
// client goes quiet for the UDP stream timeout).
//
// `clusterlab dns serve` is Serve: manifests → StaticSource → Server on UDP
// and TCP, the files polled by content hash and reloaded (a failed reload
// keeps the previous data). Every object is validated as the API server
// would on create (service.Validate on a defaulted copy; errors name file,
// line and field, and fail the start-up or the reload as a whole), without
// the checks that need a cluster's configuration: cluster IPs in the
// manifests are served as they are, inside any range or none; hand-written manifests are first completed as a cluster would
// complete them (a Service without a clusterIP gets a stable one from
// 10.96.0.0/12, a selector Service without EndpointSlices gets the
// controller's slices for the manifests' Pods), and the log says so.
//
// # Decisions where CoreDNS is silent or inconsistent
//
//   - Names outside every served zone go to Config.Upstream; without one
//     they are REFUSED (what CoreDNS answers for a zone no server block
//     serves). With the default reverse zones (in-addr.arpa, ip6.arpa),
//     reverse misses fall through to the upstream, as in kube-dns's Corefile.
//   - NXDOMAIN vs NODATA is decided by whether the name exists, for every
//     query type: CoreDNS answers NODATA for any TXT query and for SOA on
//     any name; here a missing name is NXDOMAIN whatever the type, and a
//     PTR name that exists answers NODATA to A. dns-version.<zone>,
//     ns.dns.<zone> and dns.<zone> exist.
//   - A pod name with extra labels (x.1-2-3-4.ns.pod.<zone>) is NXDOMAIN.
//   - A ClusterIP service without ports still answers A/AAAA (CoreDNS says
//     NXDOMAIN; validation rejects such services anyway).
//   - An ExternalName that looks like an IP address gives no CNAME: NXDOMAIN
//     (as CoreDNS).
//   - Namespaces exist when a Namespace object, or any object in them, is in
//     the Source, and default, kube-system, kube-public and kube-node-lease
//     always do.
//   - ns.dns.<zone> points at the kube-system/kube-dns service's cluster IPs,
//     else at Config.NSAddrs.
//   - Zone transfers (AXFR/IXFR) are REFUSED.
package dns
