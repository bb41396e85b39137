// Package ipvs is a userspace model of the Linux IP Virtual Server (net/netfilter/ipvs)
// exact enough that the same sequence of events picks the same real servers as a kernel
// (4.18 or later) would, and the ipvsadm face to drive and show it.
//
// # How a packet flows
//
//	packet (Model.In)
//	   │
//	   ▼
//	connection table ── hit ──► conn_reuse_mode / expire_nodest_conn checks ──► forward
//	   │ miss                                                (existing entry: no scheduling)
//	   ▼
//	may it start a connection? (TCP SYN, SCTP INIT, any UDP; sloppy_tcp/sctp)
//	   │ yes                                               no ──► VerdictAccept
//	   ▼
//	virtual service: fwmark first, then protocol+VIP+port, FTP, port zero
//	   │
//	   ▼
//	persistent? ── template for (client & netmask, VIP, port) valid ──► its destination
//	   │ no template                                       (timer restarted; the scheduler
//	   ▼                                                    is not asked)
//	scheduler: walks the service's destinations in kernel list order
//	   │ (rr wrr lc wlc sed nq dh sh mh lblc lblcr fo ovf twos)
//	   ▼
//	new connection entry (and template) bound to the destination:
//	InActConn+1 (PersistConn+1 for a template), OVERLOAD if -x is reached
//	   │
//	   ▼
//	protocol state machine (TCP, UDP, SCTP tables of the kernel) moves the entry between
//	ActiveConn and InActConn and sets its timeout; the timer restarts on every packet
//
// Replies of masqueraded connections go through Model.Out, which finds the entry by the
// real server's address and moves its state in the OUTPUT direction.
//
// # The pieces
//
// Services hold their destinations in kernel list order: every add (ipvsadm -a,
// AddRealServer) puts the destination at the head, as list_add_rcu does, so ties go to
// the most recently added server, and ipvsadm -Ln --nosort shows that order (plain -Ln
// sorts). Each destination has its weight and last non-zero weight (mh), forwarding
// method, thresholds, its ActiveConn/InActConn/PersistConn counters and its AVAILABLE and
// OVERLOAD flags. A removed destination waits in the trash while connection entries or
// lblc/lblcr cache entries refer to it; re-adding it resurrects it with its counters.
//
// The schedulers are ports of ip_vs_*.c: the same hooks (rr moves its cursor on delete
// only, wrr resets on every change, dh/sh/mh rebuild their tables), the same overhead
// formulas (active*256+inactive; active+1 for sed/nq), 64-bit signed cross
// multiplication, hash_32 multiply-shift for dh/sh/lblc/lblcr, the 64-bit hsiphash and
// the 4093-slot Maglev table of mh (CONFIG_IP_VS_MH_TAB_INDEX=12; Config.MHTableIndex
// picks another prime), and the lblc/lblcr caches with their 60 s garbage collection.
// twos draws from a PCG seeded by Config.Seed. Schedule asks a scheduler without
// changing anything.
//
// The connection table keys entries by protocol and client address and port, with
// persistence templates (client network, VIP, port; fwmark templates use protocol IP and
// the mark as address) controlling the entries they created. Timeouts are the kernel's
// (TCP per state, UDP 300 s, SCTP per state; ConfigureTimeouts is ipvsadm --set), and a
// template that still controls entries is re-armed in 60 s steps.
//
// Time comes from an injected Clock (netsim.Clock, or a ManualClock). The model sets no
// timers: connection expiry, template expiry, the schedulers' garbage collection, the
// trash timer and the expire_nodest_conn work item are events in the model's own queue,
// run in deadline order (ties in the order they were set) when a method is next called.
//
// Model implements Interface, the kube-proxy view of IPVS, so the kube-proxy IPVS mode
// can program it exactly as it programs a kernel through package kernel; the datapath
// calls In and Out per packet. The ipvsadm face (ParseCommand, Exec, LoadDump, Listing,
// Rules, ConnListing) reads and writes ipvsadm's formats, and RunScript runs the scripts
// of clusterlab ipvs.
//
// # kube-proxy's IPVS mode
//
// Proxier is kube-proxy's IPVS-mode proxier (pkg/proxy/ipvs/proxier.go) for one IP
// family. Each Sync takes the complete lists of Services and EndpointSlices and
// reconciles, through small interfaces, everything the mode programs on a node:
//
//	Services, EndpointSlices ──▶ proxy.ChangeTracker ──▶ per service port, in order:
//	   │ CategorizeEndpoints (cluster / local endpoints, eTP Local falling back to
//	   │ cluster endpoints when the node has none, as kube-proxy does)
//	   ├─▶ Interface (the Model, or package kernel's netlink IPVS):
//	   │     virtual servers for the ClusterIP, each externalIP, each LoadBalancer
//	   │     ingress IP and each node IP × NodePort; scheduler --ipvs-scheduler,
//	   │     ClientIP affinity as persistence (-p timeout), mh-port with mh; real servers
//	   │     weight 1; endpoints that went away terminated gracefully (weight 0 while
//	   │     TCP connections remain, deleted by GracefulCheck once they are gone, UDP and
//	   │     SCTP at once); stale virtual servers deleted (not in --ipvs-exclude-cidrs)
//	   ├─▶ Netlink: the VIPs bound to kube-ipvs0 (external and LB IPs only when not
//	   │     already node addresses), stale ones unbound
//	   ├─▶ IPSets (ipset restore; the emulator or ExecIPSets): KUBE-CLUSTER-IP,
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
// (KubeProxySysctlSettings: vs/conntrack=1, expire_nodest_conn=1,
// expire_quiescent_template=1, conn_reuse_mode=0 on kernels 4.1 to 5.8, ip_forward=1,
// and the strict-ARP pair); ApplySysctls maps them onto a Model's Sysctls. Services
// without endpoints get a virtual server without real servers: IPVS itself refuses their
// connections (ICMP port unreachable), so the mode writes no REJECT rules. The golden
// states of testdata/ipvsmode and a differential test against a kernel in a network
// namespace hold the output to kube-proxy's tests and to the real tools. Package
// proxy/kubeproxy runs the mode on netsim, the Model in each node's datapath.
//
// # Not modelled
//
// The FTP application helper (its data connections are not created), persistence
// engines (--pe sip), the connection sync daemon, traffic statistics (--stats, --rate),
// ICMP errors for IPVS connections, the secure_tcp state table, 32-bit kernels (whose
// hsiphash differs), host and service name resolution (listings are numeric).
package ipvs
