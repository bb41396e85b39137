// Package emulator is the in-memory kernel IPVS: a userspace model of the Linux IP
// Virtual Server (net/netfilter/ipvs) exact enough that the same sequence of events
// picks the same real servers as a kernel (4.18 or later) would, and the ipvsadm face
// to drive and show it. It is what kube-proxy's IPVS mode (package proxy/ipvs) writes
// to in the simulator, as proxy/iptables/emulator is for proxy/iptables.
//
// # Layout
//
//	proxy/ipvs            Interface, VirtualServer, RealServer, ServiceFlags,
//	  (the proxier)       ForwardMethod, the errnos (ErrExist, ErrNotFound, ErrInvalid,
//	        ▲             ErrRange), Schedulers; the Proxier that writes through them
//	        │ imports the interface's types
//	proxy/ipvs/emulator   Model (implements ipvs.Interface; In and Out per packet),
//	  (this package)      Config, Clock, Sysctls; schedulers (sched*.go); connection
//	                      table and protocol states (conn.go, proto.go); timers
//	                      (events.go); ipvsadm's command line (ipvsadm.go), listings
//	                      and dumps (dump.go), scripts (script.go)
//
// The dependency goes one way, as for iptables: this package imports proxy/ipvs for
// the interface it implements (the kernel adapter, package kernel, implements it too)
// and that interface's error values; proxy/ipvs does not import this package. Users
// that run the mode on the model (proxy/kubeproxy, `clusterlab ipvs`, the proxier's
// tests) import both; a file that also imports the iptables emulator names this one
// ipvsemu.
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
// The kernel release (Config.Kernel, SetKernel; zero: a current one) decides Linux 5.9's
// changes (proxy change "ipvs-conn-reuse-unconfirmed-conntrack"): before 5.9 a SYN that
// would reschedule a reused tuple is dropped whenever its entry uses conntrack, a packet
// on a removed server's entry is always dropped, no work item flushes those entries, and
// the weight-0 reschedule needs a non-zero conn_reuse_mode. Pick schedules as a new
// connection's first packet without adding an entry (the script's pick line).
//
// # Checked against a kernel
//
// TestSchedulersAgainstKernelVM runs the same scripts on the model and on a real IPVS
// (Debian's 6.1 kernel booted under QEMU by package internal/vmtest): every scheduler
// the kernel has, real TCP and UDP connections, weights changed, servers quiesced,
// deleted with connections and re-added, upper thresholds, persistence; each
// connection's real server, each listing (list order, weights, active and inactive
// counts) and the connection table (ipvsadm -Lnc without the expiry: states, templates,
// clients, real servers) agree. One difference it found is a kernel fix rather than a release: an
// edit of a real server recomputes OVERLOAD from its connections and new thresholds
// (ip_vs_dest_update_overload; a Fixes: patch that stable releases took, Debian's
// 6.1.0-56 among them, 6.1.0-48 not), where older builds only cleared it on an edit;
// the model does what the fix does, and Config.LegacyThresholdEdit gives the old
// behaviour (TestThresholdEditUpdatesOverload; the VM differential sets it for Debian
// 6.1.0-N before 56).
//
// The same boot runs the connection-handling cases (vm_conn_test.go): a client tuple
// reused under conn_reuse_mode 0 and 1 with expire_nodest_conn 0 and 1 after its real
// server was removed or quiesced, graceful termination with weight 0,
// expire_quiescent_template with persistence templates, ipvsadm --set's TCP, FIN_WAIT
// and UDP timeouts really waited for in the guest while the model's clock advances as
// much, and ipvsadm -Ln --stats; the connection table is compared after each step, its
// expiry column within the guest's measured lead over the model's clock. The model
// agreed everywhere; the kernel's answers are kept in testdata/kernel, and
// TestConnHandlingKernelRecord holds the model to them on every run, without a VM. ApplyTo gives a parsed ipvsadm command to any
// ipvs.Interface, which is how the kernel side runs the scripts' ipvsadm lines.
//
// Model implements ipvs.Interface, the kube-proxy view of IPVS, so the kube-proxy IPVS
// mode can program it exactly as it programs a kernel through package kernel; the
// datapath calls In and Out per packet. The ipvsadm face (ParseCommand, Exec,
// LoadDump, Listing, Rules, ConnListing) reads and writes ipvsadm's formats, and
// RunScript runs the scripts of clusterlab ipvs.
//
// # Not modelled
//
// The FTP application helper (its data connections are not created), persistence
// engines (--pe sip), the connection sync daemon, the rate estimator (--rate; the
// counters of --stats are kept, see stats.go), ICMP errors for IPVS connections, the secure_tcp state table, 32-bit kernels (whose
// hsiphash differs), host and service name resolution (listings are numeric).
package emulator
