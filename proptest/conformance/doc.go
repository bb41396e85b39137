// Package conformance is clusterlab's cross-mode conformance suite: the same generated
// cases (package proptest) run under every kube-proxy mode and on a real kernel, and
// their outcomes are held to the reference, kube-proxy's iptables mode.
//
// # Across modes
//
//	proptest.Case ──Build──▶ one World per mode (iptables, ipvs, userspace), same seed,
//	                         same objects, same allocated addresses (checked)
//	        │ Flows(reference world): every pod and node → every cluster IP port (and an
//	        │ unused port of each cluster IP); pods → external IPs; external hosts → every
//	        │ node port on every node and every load-balancer IP; nodes → 127.0.0.1:NODEPORT
//	        ▼
//	reference: every branch of each flow's first packet (an all-branches probe, taken
//	           before any attempt pins a client under affinity) + Attempts connect probes
//	other modes: Attempts connect probes (IPVS), or real connections (userspace, whose
//	           listener a probe cannot see past: proptest.World.Dial)
//	        │ each attempt's outcome: answered (by which backend, seeing which source:
//	        ▼ the client, a node, other), refused, dropped, closed
//	Mismatch: an outcome the reference cannot give ──Explain──▶ Differences
//
// An outcome matches when the reference allows its class and, for an answer, the same
// backend seeing the source the same way. A mismatch that a by-design difference
// explains is counted under its name (Comparison.Named); the others are Unexplained and
// fail the suite. Differences lists each difference with the facts behind it: the IPVS
// mode rejecting other ports of service IPs (KUBE-IPVS-FILTER), having no localhost
// node ports, falling back to cluster endpoints where a Local policy finds none
// (kubernetes#97081), applying externalTrafficPolicy to pods, leaving node ports outside
// --nodeport-addresses closed, masquerading hairpin traffic only for local endpoints
// (KUBE-LOOP-BACK), and pinning ClientIP affinity per virtual server; the userspace mode
// never rejecting, hiding endpoint failures behind its own connection, its backends
// seeing the node instead of the client, using ready endpoints only, ignoring traffic
// policies, not redirecting pods' external-IP traffic, serving node ports on every
// address, and answering a UDP client on 127.0.0.1 from the wrong address.
// TestByDesignDifferences shows each on a small case.
//
// ClientIP affinity is held across flows: where the reference keeps a client on one
// endpoint over the flows of an affinity scope (AffinityScopes: the client's flows to
// one service port's cluster IP, external IPs and node ports whose endpoints the same
// node's rules pick among the same endpoints, since iptables' recent lists are per
// service port and node), a mode that answers two of them from different endpoints
// gives a Mismatch with its Scope set, counted besides the per-flow ones. IPVS pins per
// virtual server (ipvs-affinity-per-virtual-server). What the comparison does not hold
// modes to: which endpoint a random or round-robin choice picks (any endpoint the
// reference can reach will do), and stickiness within one flow (proptest's
// client-ip-affinity invariant checks each mode's own).
//
// Property wraps Compare for rapid; a failure logs the case, the mismatches and a
// scenario file (Comparison.Scenario) that `clusterlab run --modes iptables,MODE FILE`
// replays, printing the steps whose outcomes differ; rapid shrinks the case and prints
// the seed. It compares with CompareConfirmed, which runs a case with mismatches again:
// a difference of the modes comes back on every run (the simulation is deterministic),
// one that does not came from timing in the harness (a quiescence wait that ended
// while a goroutine still had work, then a manual clock moved) and is logged as
// unconfirmed rather than failed.
//
// # Against the kernel
//
// CompareKernel runs a case (one or two nodes, IPv4) in the simulation under the
// iptables mode and in network namespaces that mirror it (package kernel's Harness:
// the nodes' and pods' addresses, the pods' echo servers on their containerPorts per
// protocol, the external hosts' addresses), each node namespace programmed by the same
// iptables proxier through iptables-restore. Every flow (but load-balancer IPs: the
// harness has no cloud load balancer) goes to the kernel as real TCP or UDP
// connections, and each kernel outcome — which pod answered, the source it saw,
// refused, timed out — must be one the simulation can give for that flow.
//
// With KernelOptions.Mode kubeproxy.IPVS both sides run kube-proxy's IPVS mode: the
// simulation with the IPVS model in each node's datapath, and each harness node
// programmed by the same IPVS proxier through package kernel's writers
// (Harness.IPVSWriters): the sysctls the mode sets (vs/conntrack, expire_nodest_conn,
// expire_quiescent_template, ip_forward) in the node's namespace, kube-ipvs0 (a dummy
// interface) holding every service address, the ipsets (`ipset restore`), the iptables
// rules around IPVS (iptables-restore) and a real virtual server per service address
// with its real servers (generic netlink). Which real server the kernel's rr picks
// first depends on every connection before, so the simulation's possible outcomes of a
// flow are one attempt per real server of the virtual server it reaches (rr picks each
// in turn), with the attempt's connections and then its persistence template expired in
// the entry node's IPVS model between attempts under ClientIP affinity. The kernel
// needs IPVS (KernelIPVSSupported): this CI host's has none, so TestKernelAgreesIPVS
// skips there and TestKernelAgreesIPVSVM runs it in a VM on Debian's 6.1 kernel
// (package internal/vmtest's go-test runner). No disagreement has been found (25
// generated cases from four seeds, 1584 real connections, on Linux 6.1.0-56): no IPVS
// difference between kernel and simulation is named.
//
// # In CI
//
// TestModesAgree runs DefaultCases generated cases (-rapid.checks=N for more,
// -rapid.seed=S for others), TestKernelAgrees six on the kernel (-kernel-cases=N; it
// needs root and iptables-nft and skips without them), TestKernelAgreesIPVSVM one in
// the IPVS mode in the VM (-kernel-ipvs-vm-cases=N, -kernel-ipvs-vm-seed=S), drawn by KernelCases so that each
// has a Service with a cluster IP and a ready endpoint (HasVIPWithEndpoint). A failure prints the seed and
// the shrunk case's scenario file.
package conformance
