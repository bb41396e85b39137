// Package userspace is kube-proxy's original proxy mode (--proxy-mode=userspace,
// removed in Kubernetes 1.26): a process on the node that owns a socket per service
// port and relays every connection itself, with iptables rules whose only job is to
// send service traffic to those sockets.
//
// It does not care where it runs. Its sockets come from a Network (a simulated node's
// host network, netsim.Net; the process's own namespace, OSNetwork; a network
// namespace, package kernel's Netns), its rules go through proxy/iptables.Interface (the
// in-memory emulator, or the kernel through package kernel), and its time comes from a
// Clock (a simulation's virtual clock, or WallClock).
//
// # How a connection flows
//
//	client ── SYN to 10.96.0.80:80 ──▶ nat PREROUTING ─▶ KUBE-PORTALS-CONTAINER
//	                                      -d 10.96.0.80/32 --dport 80 -j REDIRECT --to-ports 40213
//	                                   (the node's own traffic: nat OUTPUT ─▶ KUBE-PORTALS-HOST,
//	                                      -j DNAT --to-destination NODE_IP:40213)
//	      ▼
//	proxy listener *:40213 (on the node) ── Accept
//	      │ Balancer.Next: ClientIP affinity entry within its timeout, else round robin
//	      │ dial the endpoint from the node; on failure the next endpoint (affinity
//	      │ reset), up to four attempts with timeouts 250ms, 500ms, 1s, 2s
//	      ▼
//	endpoint pod ◀── a new connection from the node's address: the client's address is
//	                 lost (the documented cost of this mode)
//	      bytes are spliced both ways (io.Copy; an end of stream passes on as a half close)
//
// UDP has no connections: the first datagram from a client address opens a session
// (an endpoint choice and a socket to it); later datagrams use it; replies are sent to
// the client from the listener's socket, so their source is the address the client's
// datagram was redirected to and conntrack makes it the service address again. A
// session ends after --udp-timeout (250ms) with no datagram either way.
//
// # The rules
//
// Sync writes the chains with one iptables-restore --noflush (RenderRules), after
// making sure the jump rules exist (JumpRules; one Save, then "-I"/"-A" only for
// missing ones):
//
//	nat PREROUTING  -I  -j KUBE-PORTALS-CONTAINER     cluster, external, LB IPs: REDIRECT
//	nat OUTPUT      -I  -j KUBE-PORTALS-HOST          the same for the node's own traffic: DNAT
//	nat PREROUTING  -A  -m addrtype --dst-type LOCAL -j KUBE-NODEPORT-CONTAINER   node ports
//	nat OUTPUT      -A  -m addrtype --dst-type LOCAL -j KUBE-NODEPORT-HOST
//	filter INPUT    -I  -j KUBE-NODEPORT-NON-LOCAL    accept NEW to node-port listeners
//
// Rule texts, the comment strings, the physdev match on external IPs, DNAT of host
// traffic to the node IP and the listen address handling follow kube-proxy's
// pkg/proxy/userspace/proxier.go. Node ports, and service addresses that are local,
// are also held open with a socket of their own, as the old proxier did.
//
// # What it decides, and where to see it
//
// A packet trace ends at the proxy listener; what happens behind it is in the
// proxier's Decision log (Decisions, or Config.OnDecision): per connection or UDP
// session, the listener, the client, each endpoint tried, why (round robin position,
// affinity entry age) and how the dial failed, and the source address the endpoint
// sees. Listeners lists the listeners without locking, for datapath handlers that
// annotate traces; Sessions the live UDP sessions; Balancer the endpoint order and
// affinity entries.
//
// # Where this differs from kube-proxy
//
// Endpoints come from EndpointSlices (ready endpoints only, as the old Endpoints
// object's addresses were); traffic policies and topology are ignored, as the old mode
// ignored them. Service ports are walked in order and endpoint lists shuffled from a
// seed, so runs repeat. A change of session affinity timeout replaces the listener
// (kube-proxy kept the old timeout). UDP conntrack entries are cleared for service
// ports whose listener went away (kube-proxy did so for deleted ones only). SCTP is
// not proxied.
package userspace
