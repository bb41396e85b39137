// Package kernel is clusterlab's kernel-backed adapter: real implementations of the
// interfaces the proxy modes write through, and a network-namespace harness that builds
// a small real cluster node for differential tests against the emulators.
//
// # Adapters
//
// Each adapter implements a proxy interface by driving the kernel inside a named
// network namespace (/run/netns/NAME), or in the caller's own when given
// HostNamespace. None acts on the caller's own by default: an empty namespace is an
// error (ErrNoNamespace) and the adapter runs nothing:
//
//	proxy/iptables.Interface ── IPTables  ── iptables-{nft,legacy}-restore / -save, ip6tables-*
//	NewTransaction + Run     ── NFTables  ── nft -f - / nft list ruleset (sigs.k8s.io/knftables)
//	proxy/ipvs.Interface     ── IPVS      ── generic netlink "IPVS" family (github.com/moby/ipvs)
//	proxy.Conntrack          ── Conntrack ── conntrack -D / -L -o extended (conntrack-tools)
//	(kube-proxy's nfacct)    ── EnsureNFAcct, ListNFAcct ── nfnetlink_acct
//
// IPTables.Restore feeds the generator's iptables-restore text on stdin to
// `iptables-restore -w 5 [--noflush] [--counters]` (-W 100000 too on the legacy backend;
// wait flags gated on the tool's version as kube-proxy gates them). The tool applies a
// whole input or nothing; a failure is a *RestoreError with the input line the tool
// named and its stderr. Save runs `iptables-save -t TABLE` per table. The backend is
// chosen explicitly or detected as kube-proxy's iptables wrapper does (DetectBackend).
// EnsureChain, EnsureRule (-C, then -I or -A) and DeleteRule are the helpers kube-proxy
// uses for its hook jump rules outside the restore path.
//
// NFTables has the two methods of knftables.Interface that kube-proxy's nftables
// proxier writes through, NewTransaction and Run, so the generator that fills
// knftables' Fake programs a kernel unchanged. knftables itself cannot run nft in a
// namespace (its exec seam is unexported), so NFTables builds transactions with
// knftables and feeds their text, byte for byte what knftables would feed nft, to
// `ip netns exec NAME nft -f -`; nft applies all of it or nothing, and a failure is an
// *NFTError with the input line nft named and its stderr (IsNFTNotFound and
// IsNFTExists classify it as knftables would). ApplyScript takes any nft input,
// ListRuleset and ListTable print `nft [-a] [-j] list ...` for the parser, and
// DeleteTable removes one table as kube-proxy's cleanup does. An NFTables never runs
// in the caller's own namespace unless given HostNamespace (see below). It needs nft
// >= 1.0.1, what knftables accepts (Debian bookworm's nftables package is 1.0.6);
// `clusterlab kernel check` reports that and kube-proxy's other startup check, a
// kernel >= 5.13 (features "nft" and "nftables").
//
// Conntrack.Delete turns a proxy.ConntrackFilter into conntrack options and treats
// "0 flow entries have been deleted" (exit status 1) as success; List parses
// `conntrack -L -o extended` into ConntrackEntry values for tests.
//
// EnsureNFAcct creates the accounting objects that kube-proxy's `-m nfacct` rules
// need before iptables-restore accepts them (there is no nfacct tool on Debian by
// default); ListNFAcct reads their counters.
//
// IPVS translates VirtualServer/RealServer to and from the library's Service and
// Destination (the IPv4 persistence netmask is a network-order mask, the IPv6 one a
// prefix length). moby/ipvs does not notice a kernel without IPVS, so CheckIPVS
// resolves the generic-netlink family itself, and NewIPVS returns an
// *IPVSUnsupportedError (errors.Is ErrIPVSUnsupported, wrapping the netlink ENOENT) when
// it is missing. Nothing falls back:
// the caller picks the userspace model or another mode.
//
// For kube-proxy's IPVS mode on a harness node, Harness.IPVSWriters gathers the rest of
// what the IPVS proxier writes besides IPVS: the ipsets (proxy/ipvs.ExecIPSets, `ipset
// restore` in the namespace), the node's IPTables and Conntrack, IPVSNetlink (the dummy
// interface kube-ipvs0 and its addresses with `ip link`/`ip addr` in the namespace;
// an address already bound is success, one not there to unbind matches
// ipvs.ErrNotFound) and NetnsSysctl (the mode's sysctls, written under /proc/sys from a
// thread in the namespace and read back; one the kernel lacks, net/ipv4/vs/* without
// IPVS, is an error naming it).
//
// # The exec seam
//
// Every external tool runs through an unexported runner. Commands for a namespace are
// prefixed with `ip netns exec NAME` rather than run after setns(2), so every command
// line is one a person can paste to reproduce it, and the unit tests check exact
// command lines and stdin against a recording fake, without root.
//
// # The harness
//
// NewHarness builds, from a HarnessConfig, namespaces and links like this (defaults):
//
//	         external ns                      node0 ns (the "host" under test)              pod ns
//	┌──────────────────────────┐ veth  ┌───────────────────────────────────┐ veth  ┌────────────────┐
//	│ fab0 bridge              ├─n0────┤eth0 192.168.77.1/24               │       │ eth0           │
//	│  192.168.77.100/24       │  eth0 │ default via 192.168.77.100        ├veth0──┤ 10.244.0.2/24  │
//	│ 10.96.0.0/12 and         │       │ cbr0 10.244.0.1/24, hairpin ports ├veth1┐ │ default via    │
//	│ 203.0.113.0/24 via .1    │       │ ip_forward, route_localnet,       │     │ │  10.244.0.1    │
//	│ (no forwarding: a sink)  │       │ bridge-nf-call-iptables=1,        │     │ └────────────────┘
//	│                          │       │ rp_filter=0, IPTables, Conntrack  │     └─ pod1 10.244.0.3 ...
//	│                          ├─n1──┐ └───────────────────────────────────┘
//	└──────────────────────────┘     └─eth0 node1 ns (SecondNode): 192.168.77.2, cbr0 10.244.1.1/24,
//	                                     its pods 10.244.1.x; the nodes route each other's pod /24
//
// In TopologyRouted (chosen automatically when the node namespace has no bridge
// netfilter) there is no cbr0: each pod has a /32 and routes via 10.244.0.1, which sits
// on every host-side veth, and the node routes each pod /32 to its veth, so every pod
// packet crosses the node's IP stack and iptables. With a bridge but no br_netfilter,
// pod-to-pod traffic on one bridge would skip iptables (and a pod reaching a Service
// whose endpoint shares its bridge would get replies that were never un-DNATed), which
// is why TopologyBridge refuses to build without it.
//
// Each pod runs TCP and UDP echo servers (PodPorts, default 8080) that answer with the
// pod's name and the source address they saw. Their sockets are created on an OS thread
// locked into the pod's namespace (setns, checked through /proc/thread-self, the thread
// discarded afterwards) and then served from ordinary goroutines: a socket stays in the
// namespace it was made in. This is in-process, so there is no re-executed test binary,
// no TestMain hook for callers and no child process to reap. Clients work the same way:
// Harness.Dial from any namespace returns which pod answered and the source it saw, or
// Refused, TimedOut or Unreachable, each step bounded by HarnessConfig.Timeout (1 s).
// TCP clients read ICMP errors from the socket error queue (IP_RECVERR), so a REJECT
// is reported as refused at once even when its ICMP error arrives while connect(2)
// still holds the socket lock, which the kernel otherwise keeps only as a soft error
// until the SYN retransmission a second later.
//
// With HarnessConfig.IPv6 the harness is dual-stack: fd00:77::/64 beside the node
// network, a /64 per node out of fd00:10:244::/56 for pods, IPv6 routes mirroring the
// IPv4 ones, duplicate address detection off so addresses work at once, and per node an
// ip6tables adapter (IPTables6) and an IPv6 conntrack adapter (Conntrack6).
//
// With HarnessConfig.NFTables each node also gets NFTables adapters for table ip
// kube-proxy (and ip6 kube-proxy with IPv6), and route_localnet stays 0 as on a node of
// kube-proxy's nftables mode, which never sets it (no localhost NodePorts).
//
// # Differential tests
//
// A differential test programs a harness node and a model with the same ruleset,
// makes many real connections and checks that every kernel outcome is one of the
// model's and that the spread fits its probabilities. Harness.DialSpread makes the
// connections and counts them per answering server (a Spread); Spread.ChiSquare and
// ChiSquareCritical (p = 1e-4) do the statistics:
//
//	h, err := kernel.NewHarness(kernel.HarnessConfig{NFTables: true,
//		Pods: []kernel.PodConfig{{Name: "client"}, {Name: "ep1"}, {Name: "ep2"}}})
//	...
//	err = h.NFTables.Run(ctx, tx)              // the generator's transaction
//	s := h.DialSpread(h.Pod("client").Netns, "tcp", vip, 300, 8)
//	chi, df, err := s.ChiSquare(map[string]float64{"ep1": 0.5, "ep2": 0.5})
//	if err != nil || chi > kernel.ChiSquareCritical(df) { /* kernel and model disagree */ }
//
// TestNFTablesHarnessSmoke does this with a hand-written kube-proxy-style ruleset.
//
// The node namespaces get the sysctls a kube-proxy node has, plus ICMP redirects and
// ICMP rate limits off so that every REJECTed connection is refused rather than
// sometimes timing out. Nothing is changed in the caller's own namespace beyond the
// files under /run/netns: links are created directly inside the harness namespaces.
// Namespace names are PREFIX<pid>-<n>-<role>; NewHarness deletes leftovers of a
// crashed run (names with this prefix whose pid is gone), never anything else. Close
// deletes every namespace it made, also after a partial build. A process that is
// killed leaves none either: RunTests (a TestMain body) deletes them on SIGINT, SIGTERM
// and SIGHUP, and a reaper process deletes them after SIGKILL or a `go test -timeout`
// expiry (cleanup.go).
//
// Tests that need root skip through RequireHarness, RequireRoot, RequireTools and
// RequireIPVS.
package kernel
