// Package netsim is clusterlab's virtual cluster network: nodes, pods and external hosts
// with real TCP/UDP stacks (gVisor netstack), joined by a datapath written in plain Go
// that behaves like a Linux node's: netfilter-style hooks, conntrack with NAT, routing,
// a pod bridge, and the kernel settings that change outcomes.
//
// netsim is a pure network: it knows nothing of Kubernetes. Package cluster builds a
// Kubernetes cluster on it (the API server, kubelets, a cloud load balancer, a proxy per
// node); proxy modes are handlers at a node's hooks; a load balancer is a Middlebox on
// the fabric. Every package of clusterlab that plugs into the datapath does so through
// the exported API below.
//
// # The pieces
//
//	Network ── fabric (the cluster network: node IPs and pod CIDRs routed to their nodes,
//	   │                external hosts, middleboxes, externalIPs)
//	   ├── Node: a small Linux router
//	   │     interfaces lo, eth0 (uplink), cbr0 (pod bridge; one port per pod)
//	   │     datapath: hooks + handlers, Conntrack, routing, NodeSettings
//	   │     host stack (netstack): the node's own sockets, hostNetwork pods
//	   ├── Pod: its own netstack (eth0 on the node's bridge, lo); apps use Pod.Net()
//	   └── ExternalHost: a netstack on the external network
//
// Every pod, node host network and external host has a Net (Dial, Listen, ListenPacket)
// that behaves like package net, so standard Go code runs inside the simulation. A
// container port can run the built-in whoami server (Pod.Serve), which answers with the
// pod's name and the client address it saw, so tests see which backend answered and
// whether the source was masqueraded.
//
// # A packet's way through a node
//
//	from a pod, another node          ┌──────────────────────────────────────────┐
//	or the external network           │                                          ▼
//	  ──▶ PREROUTING ──▶ routing ──┬──▶ FORWARD ─────────────────────────▶ POSTROUTING ──▶ out
//	      (conntrack,   decision   │                                          ▲
//	       DNAT)        (after     └──▶ INPUT ──▶ the node's own stack        │
//	                     DNAT)          (SNAT)    (hostNetwork pods,          │
//	                                               NodePort listeners)        │
//	                                                   │                      │
//	                                                   ▼                      │
//	                                    OUTPUT ──▶ routing ───────────────────┘
//	                                    (conntrack, DNAT)                 (SNAT, MASQUERADE,
//	                                                                       conntrack confirm)
//
// At each hook (netfilter.Hook) the registered handlers run in priority order (lowest
// first), with the datapath's own steps at the kernel's priorities (netfilter.Priority*).
//
// A packet from a pod enters its node on the bridge (cbr0); one from another node or an
// external host enters on eth0; one from the node's own stack starts at OUTPUT.
//
//  1. PREROUTING. Handlers below PriorityConntrack run first (the raw table). Then
//     conntrack looks the packet up: an existing entry (which direction, which state) or a
//     new, unconfirmed one. Then the NAT step (PriorityNATDst): for a connection's first
//     packet the NAT handlers run (a proxy mode's DNAT); a binding, or a null binding,
//     is recorded on the entry; every packet is then rewritten as its entry says. Other
//     handlers run at their priorities around these steps.
//  2. Routing, after DNAT. Local addresses (node IPs, the bridge address, loopback, VIPs
//     bound to a dummy interface) go to INPUT; pod IPs of this node out the bridge;
//     everything else out eth0 into the cluster network. Martians (loopback addresses on
//     other interfaces without route_localnet), rp_filter and ip_forward apply here.
//  3. INPUT for local traffic: handlers, SNAT, conntrack confirmation, then the node's
//     host stack. Or FORWARD (TTL decremented) and then POSTROUTING: handlers, the SNAT
//     step (MASQUERADE picks the output interface's address and a source port the way
//     the kernel does), conntrack confirmation, and out: to a pod's bridge port (dropped
//     when it is the port the packet came in on and hairpin mode is off), or to eth0.
//
// A locally generated packet runs OUTPUT (conntrack, DNAT, handlers), is routed, and runs
// POSTROUTING; to a local address it loops back through lo into PREROUTING and INPUT,
// keeping its conntrack entry, as in Linux.
//
// Handlers return Continue, Drop, Reject (an ICMP unreachable or a TCP RST is built and
// sent back through the node's OUTPUT path, attached to the connection so that NAT is
// undone on its way), NAT (NAT handlers only), Reroute or Stolen. Replies and ICMP errors
// are un-NATed from the conntrack entry (ICMP errors' quoted packets too), and checksums
// are updated incrementally.
//
// # Goroutines and buffers
//
// A packet leaves a netstack once, copied into a pooled buffer of its exact size; the
// datapath reads and rewrites it in place, and the netstack that receives it takes the
// buffer over without copying. Packets from a node's pods and its own stack wait in the
// node's input queue for its datapath goroutine; that goroutine carries each packet
// through the node, over the cluster network and at once through the receiving node (under
// that node's lock) into the receiving stack, so a pod-to-pod hop across nodes costs one
// goroutine hand-off. Config.Replay instead queues every packet and delivers them one at a
// time (see Network.Run).
//
// # Segmentation offload
//
// Pods' netstacks use TCP segmentation offload as a Linux host with GSO and GRO on its
// veth does, invisibly to the datapath: the sending TCP hands the pod's link segments of
// up to 64 KiB and the link cuts each into the MSS-sized packets TCP sends without
// offload (headers, PSH and checksums as TCP makes them), and TCP segments a node's datapath goroutine delivers into a pod during
// one batch of its queue are merged by gVisor's GRO after every hook, fault and capture
// has seen them one by one, then handed up when the batch ends. Rules, counters,
// conntrack, link faults and pcap see the MTU-sized segments either way; only the
// receiving TCP's ACKs are fewer (one per merged segment). Faulty links, replay mode and
// non-TCP packets bypass GRO. Config.NoOffload turns both off (gro.go).
//
// Trains (train.go): where every handler on a node's forwarding hooks is a TrainHandler
// (the iptables emulator's, the nftables evaluator's and IPVS's are), a pod's link hands a GSO packet on uncut and nodes pass
// it through their hooks once for all its segments, with the counters, conntrack
// entries and rewrites its segments would have given; it is cut into those segments at
// a node's entry whenever something cannot answer for all of them, before anything
// observes single segments (captures, traces, faults); the receiving pod takes it
// whole, as the segment GRO would have merged. Config.NoTrains cuts every GSO packet
// at the link.
//
// # Time, randomness, determinism
//
// One virtual Clock drives conntrack timeouts, link latency and every netstack's timers;
// by default it follows the wall clock and Advance jumps it forward (skip a 30 s UDP
// timeout instantly); with Config.ManualClock it moves only through Advance. All
// randomness comes from the seed: each node draws its handlers' choice points
// (Context.Chance, Context.Pick) and NAT port choices from its own seeded source, links
// their faults from theirs, netstacks their ISNs and ephemeral ports from theirs.
//
// Probes (Network.Probe) inject a synthetic packet or a whole exchange (a TCP handshake,
// a UDP request and reply) through the same datapath code, synchronously and without
// apps: their outcomes are a pure function of the seed, the state and the probe. With
// AllBranches a probe follows every outcome of every choice point and reports each with
// its probability, changing nothing. A probe adds up the configured latency (and jitter,
// drawn from the link's seeded source) of the links it crosses; an answer that comes
// later than Probe.Timeout (default 1 s, the kernel's first SYN retransmission) is
// ResultTimedOut. Real netstack traffic is concurrent, so tests check
// its outcomes (who answered, what source it saw, conntrack contents), not its bytes.
//
// A Middlebox (AttachMiddlebox) owns addresses on the fabric and forwards what is sent to
// them to a node, possibly rewritten; a FabricNAT (SetFabricNAT) rewrites what nodes send
// back. Probes and real traffic cross them alike. An external host made with
// AddExternalHostWith can watch its own packets through the network (a prober that wants
// to know at once that its request was dropped).
//
// Traces record every hook, handler verdict, rule, conntrack lookup, NAT, route and the
// end, as text or JSON, for probes, for any packet injected with Network.Inject, and for
// live netstack packets that match a Network.TraceFlows filter (off by default). Every
// handler a packet meets leaves a step: a plain CONTINUE too, unless the handler traced
// steps of its own (an iptables emulator's rules, notes).
// Network.Capture writes pcap files (libpcap format, raw IP) per interface, which
// Wireshark and tcpdump open.
package netsim
