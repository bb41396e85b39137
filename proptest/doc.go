// Package proptest is a property-testing kit for Kubernetes Service networking: rapid
// (pgregory.net/rapid) generators of small, valid clusters, Services, pods, EndpointSlices,
// traffic and faults; a runner that builds them on clusterlab's simulated network
// (package cluster, on netsim) with a proxy of your choice; invariant checkers that probe the
// network and say exactly what broke; and a printer that turns a shrunk counterexample
// into a scenario file `clusterlab run` replays.
//
// # The loop
//
//	Cases(Options) ──draw──▶ *Case (ClusterSpec, Services, Pods, hand-written slices,
//	                            │      external hosts, Steps: changes and faults)
//	                            │ Build(case, proxyFor)
//	                            ▼
//	  *World: a cluster.Cluster running the proxy (kube-proxy's iptables mode by default),
//	          objects created through its API server, pods started by its kubelet
//	                            │ CheckAll(world) / Check(world, checkers...)
//	                            ▼
//	  probes (netsim.Network.Probe; AllBranches where the question is "every outcome")
//	  against an oracle computed from the store's EndpointSlices (oracle.go)
//	                            │ Violations: invariant, service port, probe, expected,
//	                            ▼ got, trace, and how to reproduce it
//	  Report(t, world, err): the case, the violations, a scenario file (World.Scenario)
//
// Property wraps the loop for rapid.Check:
//
//	func TestMyProxy(t *testing.T) {
//		rapid.Check(t, proptest.Property(proptest.Options{}, proptest.KubeProxy(kubeproxy.IPTables), "iptables"))
//	}
//
// or write the property yourself, drawing parts and checking what matters to you:
//
//	rapid.Check(t, func(t *rapid.T) {
//		c := proptest.Cases(proptest.Options{Kinds: []proptest.ServiceKind{proptest.KindNodePort}}).Draw(t, "case")
//		w := proptest.MustBuild(t, c, myProxy)
//		defer w.Close()
//		if err := proptest.Check(w, proptest.Checkers[1:3]...); err != nil {
//			proptest.Report(t, w, err)
//		}
//	})
//
// A proxy is anything that makes a cluster.ProxyFactory from a case's ClusterSpec
// (ProxyFor): kube-proxy's modes through KubeProxy, or your own handlers on each node.
// The package's example runs the loop on one drawn case without rapid.Check, and
// examples/property is a whole program built on the kit.
//
// # What is generated
//
// Clusters of one to three nodes in zones, single- or dual-stack, with a drawn
// --nodeport-addresses and load-balancer mode. Services of every kind (ClusterIP,
// NodePort, LoadBalancer, headless, ExternalName) with one or two TCP/UDP ports (named
// when there are two), targetPorts defaulted, numeric or named, ClientIP affinity,
// internal and external traffic policies, externalIPs, loadBalancerSourceRanges and IP
// family policies; selectors of their own or shared with an earlier service, or none (a
// selectorless service whose EndpointSlices are written by hand: one or two per family,
// with drawn ready/serving/terminating conditions and node names). Pods behind them on
// any node, with named container ports (now and then missing one, as real pods do),
// ready, not ready, or terminating; client pods; external hosts inside and outside the
// source ranges. Then steps: pods deleted or flipping readiness, services deleted or
// turned ExternalName, the clock advanced, and, with Options.Faults, partitions, dead
// nodes, paused proxies and lossy links; with Options.NoHairpin, nodes whose bridge has
// hairpin mode off (a misconfiguration the invariants catch). Everything is valid by construction (a test
// runs service.Validate over it) and small by default; shrinking goes toward one node,
// one ClusterIP service on 80/TCP, no pods.
//
// Pod addresses are chosen by the generator (host 10+k of the node's pod range, kept by
// the simulated kubelet), so hand-written slices can name them and scenario files
// replay them.
//
// # The invariants
//
// Checkers lists them in the order CheckAll runs them:
//
//   - no-vip-for-headless-and-external-name: headless and ExternalName services get no
//     VIP, their pods are reached untranslated, and an address a service gave up
//     answers nothing.
//   - cluster-ip-reachability: every pod and node reaches every cluster IP port with
//     endpoints and lands on an endpoint kube-proxy would choose (ready; serving
//     terminating when none is ready; the node's own under internalTrafficPolicy Local),
//     each of them with some probability (all branches followed).
//   - no-endpoints-refused: a service port without endpoints is refused as kube-proxy's
//     REJECT rules refuse it.
//   - node-port-addresses: a NodePort answers on every node address --nodeport-addresses
//     allows (and 127.0.0.1 where localhost NodePorts apply), and on no other.
//   - external-traffic-policy-local: outside traffic keeps its source address and lands
//     on the node it entered, or is dropped there.
//   - load-balancer-source-ranges: sources outside loadBalancerSourceRanges never reach
//     the endpoints through the load-balancer IP; sources inside do.
//   - client-ip-affinity: a client's connections stay on one backend within the timeout
//     (virtual clock) and are free again after it.
//   - deleted-pod-unreachable: after a pod is deleted and the proxies sync (and clean
//     conntrack), no new connection, nor a UDP datagram reusing an old flow's source
//     port, reaches the pod's address; the named exception is StaleUDPException.
//
// Each violation says which invariant, which service port, which probe (source,
// protocol, destination), what was expected (the endpoints, with pod, node and
// condition), what the probe showed (every branch with its probability) and the
// rule-by-rule trace of the offending outcome. Semantics hold what proxy modes may
// legitimately do differently (IPTablesSemantics by default).
//
// # Counterexamples as scenario files
//
// World.Scenario writes the case as a scenario (package scenario): the cluster, the
// objects with this run's cluster IPs, node ports and load-balancer IPs pinned, the
// steps, and each violation's reproduction: the same traffic, with expectations that
// hold exactly when the invariant does (reaches, not_reaches, result, seen_source,
// backends). `clusterlab run FILE` then fails where the property failed. Report logs
// the file and, when $PROPTEST_SCENARIO_DIR is set, writes it there as
// proptest-<mode>.yaml, overwritten at each report, so that a failing property leaves
// one file: the final shrunk counterexample (rapid reports that case last). A dual-stack case
// names both families' CIDRs in the file.
//
// # Across modes and against the kernel
//
// Package proptest/conformance runs the same cases under kube-proxy's iptables, IPVS
// and userspace modes and on a real kernel, and holds every outcome to the iptables
// mode's, naming the differences that are by design. The userspace mode terminates
// connections (Semantics.Terminates), which probes cannot follow; World.Dial makes real
// connections through it, moving the manual clock only while the simulation is idle.
//
// Determinism: a case fixes the simulation's seed, probes are synchronous, and the
// clock is virtual (Build makes a manual clock), so a case's outcome is a pure function
// of the case and the proxy; rapid's -rapid.seed reproduces a run.
//
// # NetworkPolicy
//
// PolicyCases draws NetworkPolicy cases (namespaces x, y, z; pods with app labels a, b,
// c, each behind a Service of its own; policies of every v1 feature) and
// CheckPolicyReachability holds the datapath to netpol.Reference: every ordered pair of
// pods, on each pod port, to the pod's IP and through its ClusterIP, is delivered exactly
// when the direct evaluation of the semantics allows it (policy.go). PolicyModes are the
// modes it holds for: those that do not terminate connections on the node.
package proptest
