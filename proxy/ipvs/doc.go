// Package ipvs is kube-proxy's IPVS mode: the Proxier that turns Services and
// EndpointSlices into virtual servers, ipsets and iptables rules, and the interfaces it
// writes them through. The in-memory kernel IPVS it writes to in the simulator is
// package proxy/ipvs/emulator, as proxy/iptables/emulator is for proxy/iptables.
//
// # Layout
//
//	proxy/ipvs                 the proxier (this package)
//	  Interface, VirtualServer, RealServer, the flags and forwarding methods, the
//	  errnos (ErrNotFound, ...), Schedulers: the vocabulary of kube-proxy's ipvs util
//	  Interface; Proxier and its Sync; graceful termination; the ipsets and the
//	  iptables rules of the mode; IPSets, Netlink and Sysctl, the other writers, with
//	  FakeNetlink, FakeSysctl and ExecIPSets (ipset on a real host)
//	        ▲ imports (Interface and its types)
//	proxy/ipvs/emulator        the kernel IPVS in memory: Model implements Interface;
//	  schedulers, connection table, ipvsadm's face, dumps, scripts
//
//	            Proxier.Sync ── Interface ──┬─ emulator.Model   (netsim, tests, clusterlab ipvs)
//	                                        └─ kernel.IPVS      (generic netlink, a real host)
//
// The graph goes one way: the emulator imports this package for the interface it
// implements and nothing imports the emulator but its users (proxy/kubeproxy, the CLI,
// tests). The tests here that run the proxier against the Model are therefore in the
// external package ipvs_test (export_test.go lends them vsString and rsString).
//
// # The proxier
//
// Proxier is kube-proxy's IPVS-mode proxier (pkg/proxy/ipvs/proxier.go) for one IP
// family. Each Sync takes the complete lists of Services and EndpointSlices and
// reconciles, through small interfaces, everything the mode programs on a node:
//
//	Services, EndpointSlices ──▶ proxy.ChangeTracker ──▶ per service port, in order:
//	   │ CategorizeEndpoints (cluster / local endpoints, eTP Local falling back to
//	   │ cluster endpoints when the node has none, as kube-proxy does)
//	   ├─▶ Interface (emulator.Model, or package kernel's netlink IPVS):
//	   │     virtual servers for the ClusterIP, each externalIP, each LoadBalancer
//	   │     ingress IP and each node IP × NodePort; scheduler --ipvs-scheduler,
//	   │     ClientIP affinity as persistence (-p timeout), mh-port with mh; real servers
//	   │     weight 1; endpoints that went away terminated gracefully (weight 0 while
//	   │     TCP connections remain, deleted by GracefulCheck once they are gone, UDP and
//	   │     SCTP at once); stale virtual servers deleted (not in --ipvs-exclude-cidrs)
//	   ├─▶ Netlink: the VIPs bound to kube-ipvs0 (external and LB IPs only when not
//	   │     already node addresses), stale ones unbound
//	   ├─▶ IPSets (ipset restore; proxy/iptables/emulator or ExecIPSets): KUBE-CLUSTER-IP,
//	   │     KUBE-LOOP-BACK, KUBE-NODE-PORT-*, KUBE-EXTERNAL-IP(-LOCAL),
//	   │     KUBE-LOAD-BALANCER(-LOCAL, -FW, -SOURCE-IP, -SOURCE-CIDR),
//	   │     KUBE-HEALTH-CHECK-NODE-PORT, KUBE-IPVS-IPS (KUBE-6-* for IPv6): created with
//	   │     -exist, entries diffed against ipset save
//	   ├─▶ proxy/iptables.Interface: the jump rules ensured, then one iptables-restore
//	   │     --noflush of KUBE-SERVICES, KUBE-POSTROUTING, KUBE-MARK-MASQ,
//	   │     KUBE-NODE-PORT, KUBE-LOAD-BALANCER (nat) and KUBE-FORWARD, KUBE-NODE-PORT,
//	   │     KUBE-PROXY-FIREWALL, KUBE-SOURCE-RANGES-FIREWALL, KUBE-IPVS-FILTER,
//	   │     KUBE-IPVS-OUT-FILTER (filter), all matching the sets
//	   └─▶ proxy.Conntrack: stale UDP entries cleared
//
// NewProxier sets the sysctls the mode needs through a Sysctl writer
// (KubeProxySysctlsFor: vs/conntrack=1, expire_nodest_conn=1,
// expire_quiescent_template=1, conn_reuse_mode=0 on kernels 4.1 to 5.8 — before 1.22
// on every kernel from 4.1 —, ip_forward=1, and the strict-ARP pair);
// emulator.ApplySysctls maps them onto a Model's sysctls. The node's release
// (ProxierConfig.Node.Version) also decides the local-policy fallback to the cluster's
// endpoints (from 1.24); proxy/behaviour_ipvs.go lists the IPVS changes.
// Services without endpoints get a virtual server without real servers: IPVS itself
// refuses their connections (ICMP port unreachable), so the mode writes no REJECT rules.
// Sync's steps are named methods in that order (ensureChains, newSyncRun, servicePort
// with one method per kind of address, writeSetsAndRules, unbindStale,
// deleteStaleVirtualServers, cleanConntrack); iptables.ParseSave reads what the node
// already has. The golden
// states of testdata/ipvsmode and a differential test against a kernel in a network
// namespace hold the output to kube-proxy's tests and to the real tools. Package
// proxy/kubeproxy runs the mode on a simulated cluster, an emulator.Model in each node's datapath.
package ipvs
