// Package emulator is an in-memory iptables: the ruleset model, the iptables-save parser
// and dumper, iptables-restore semantics, and an evaluator that runs packets through the
// rules with the state the kernel keeps beside them, recording a rule-by-rule trace.
//
// # Flow
//
//	iptables-save / iptables-restore text
//	   │ tokenize (iptables-restore's quoting) → rule spec parser (generic options,
//	   │ match modules and targets, implicit -m tcp/udp, unknown modules kept verbatim)
//	   │ → restore semantics (*table, :CHAIN lines, -A/-I/-R/-D/-N/-X/-F/-Z/-P/-E, COMMIT,
//	   │   --noflush), applied to a copy; validated at the end (jumps to missing chains,
//	   │   busy chains, loops, NAT/REJECT outside their hooks) — all or nothing
//	   ▼
//	Ruleset (model: Table → Chain → Rule{*Spec{header fields, []Match, Target}, counters, line})
//	   │ Save: the kernel's normalised spelling (iptables v1.8.9 nf_tables), so that
//	   │ parse → save → parse is stable and a kernel dump saves back unchanged
//	   ▼
//	evaluation at a hook: raw → mangle → nat → filter → security (nat last in INPUT and
//	POSTROUTING; nat only for a connection's first packet), each table from its built-in
//	chain: rules in order, jumps, gotos, RETURN, policies. Long chains (KUBE-SERVICES)
//	are indexed by destination address and by (protocol, port): the candidates are
//	merged in rule order so first-match semantics are exact, and per-packet cost does
//	not grow with the number of services.
//	   │
//	   ▼
//	verdict (ACCEPT, DROP, REJECT with its type, UNKNOWN) + NAT action + marks + Trace
//
// Emulator wraps a Ruleset with that state and implements proxy/iptables.Interface
// (Restore/Save) as a state-based fake. Walk follows a connection's first packet through
// a node's hooks (PREROUTING → INPUT, or FORWARD → POSTROUTING; OUTPUT → POSTROUTING
// [→ INPUT]) for `clusterlab trace`; with all branches it enumerates every outcome of
// every statistic choice point with its probability (merging identical outcomes) and
// renders the paths as a tree.
//
// # Kernel fidelity
//
// What the emulator models, as the kernel does: -s/-d/-i/-o/-p/-f with negation and
// interface wildcards; tcp, udp, sctp ports and TCP flags; icmp and icmp6 types;
// multiport; addrtype (through Env.AddrType; IPv4 gives an address one type, as
// inet_dev_addr_type does, while IPv6 follows match_type6: each of MULTICAST, UNICAST
// and UNSPEC in the mask is a condition on the address's bits, so a local unicast
// address is both UNICAST and LOCAL, and LOCAL/ANYCAST/UNREACHABLE come from
// Env.AddrType as the route lookup, and BROADCAST, BLACKHOLE, PROHIBIT and the types
// after it are refused for IPv6 as the kernel's checkentry does; with
// --limit-iface-in/out an address is
// LOCAL only when it is on the packet's input/output interface, loopback on "lo", as
// the kernel's lookup restricted to the device answers, and the limits are refused in
// chains reached from hooks without that device, as addrtype's checkentry does); comment; statistic
// (random: the kernel's fixed-point probability round(P·2^31)/2^31 as a choice point;
// nth: a counter per rule, reset when the rule is replaced); recent (xt_recent: lists
// per name with ip_list_tot entries (default 100) evicted least-recently-updated first,
// a ring of time stamps per entry sized as kernels since 4.11 size it (32, or the next
// power of two of the largest --hitcount of the list's rules; the list is flushed when
// a new rule needs more), --set/--rcheck/--update/--remove, --seconds, --hitcount,
// --reap (the oldest entry only), --rttl, --rsource/--rdest, --mask (the list's mask is
// the first rule's); a list is freed when no rule names it); conntrack (--ctstate with the SNAT/DNAT virtual
// states, --ctproto, --ctorig/repl src/dst and ports, --ctstatus, --ctexpire, --ctdir);
// state; mark and connmark; set (ipsets: see IPSets); nfacct (a named counter);
// iprange; ipvs (xt_ipvs: --ipvs, --vproto, --vaddr, --vport, --vdir, --vmethod,
// --vportctl, decided from the IPVS state a caller gives through SetIPVSLookup —
// kube-proxy's IPVS mode on netsim does — and undecidable without it; printed as
// written). Targets: ACCEPT, DROP, RETURN, jumps and gotos, REJECT (default
// icmp-port-unreachable / icmp6-port-unreachable), DNAT, SNAT, MASQUERADE, REDIRECT
// (address and port ranges; --random, --random-fully, --persistent), MARK and CONNMARK
// (all forms, saved as --set-xmark), LOG (a no-op shown in traces), NOTRACK and CT
// --notrack (the packet becomes untracked).
//
// # What it does not understand
//
// A match module the emulator does not model (physdev, limit, mac, owner, ...) is kept
// verbatim, printed back verbatim and shown in traces. It is undecidable: a single-path
// evaluation assumes it does NOT match (so the rule is skipped, conservatively), and the
// trace says so; an all-branches walk follows both assumptions and lists, per outcome,
// the assumptions it rests on (its probability is then conditional on them). Options the
// emulator parses but does not model (tcp --tcp-option, sctp --chunk-types, set
// counter conditions, a set that was not loaded) make the match undecidable the same
// way. Extension targets it does not model are kept verbatim too: pass-through ones
// (NFLOG, TCPMSS, CT, CHECKSUM, ...) are stepped over; others (NFQUEUE, TPROXY, ...) end
// the evaluation with verdict UNKNOWN. Options of unknown modules and targets are not
// re-ordered, so their saved form equals the kernel's only if the input had its order.
//
// # Restore semantics
//
// Without --noflush every table in the input is replaced (its built-in policies reset to
// ACCEPT unless set, as the nf_tables backend does). With --noflush a ":CHAIN - [0:0]"
// line creates or flushes a user chain; a built-in chain line only sets the policy ("-"
// keeps it). A chain is deleted (-X) only when empty and unreferenced. A rule may jump
// only to a chain that exists at that line. Unlike the real tool, which commits table by
// table, an input applies whole or not at all. Errors are *ParseError values naming the
// input, the line and the option.
//
// A --noflush restore costs what it changes, not the size of the table: the new table
// version shares every chain it does not change with the version before (copy on
// write; earlier versions stay as they were), and validates only what it changed when
// the version before was validated — new jumps searched for loops, hooks pushed along
// new jumps, changed rules checked against a per-chain superset of the hooks that reach
// them, and the whole table validated when that check fails, so it refuses exactly what
// a whole-table validation refuses. A long chain rewritten whole (kube-proxy's
// KUBE-SERVICES, on every sync) reuses the parsed rules of lines equal to those its
// version before was built from, as new rules (the new line as their origin, counters
// at zero).
//
// # Walks, traces and the JSON outcome list
//
// Walk (and `clusterlab trace`) follows the first packet of a connection: it enters at
// PREROUTING, or at OUTPUT when it comes from the node; after nat PREROUTING a local
// destination (Env.AddrType LOCAL) goes to INPUT, any other through FORWARD and
// POSTROUTING; after OUTPUT it goes through POSTROUTING and, for a local destination,
// back in over loopback (PREROUTING without nat, INPUT). A MASQUERADE or SNAT on the way
// marks the outcome masqueraded. A walk is a dry run: no recent list, counter or nth
// counter changes. With AllBranches every statistic choice point is followed both ways
// (depth first, re-running the walk with a forced prefix of choices); each path is an
// Outcome with the product of its choices' probabilities; outcomes identical in
// everything observable are merged (probabilities summed, Paths counted). Text renders
// the paths as a tree (shared steps once, a branch per alternative, like ovn-trace);
// JSON renders the merged outcomes as an array of objects with these fields:
//
//	probability       the outcome's probability (conditional on its assumptions)
//	verdict           ACCEPT (left the node), LOCAL (delivered locally), DROP, REJECT,
//	                  UNKNOWN (a target the emulator does not model decided)
//	reject_with       the REJECT type (REJECT only)
//	decided_by        "rule" or "policy": for DROP/REJECT/UNKNOWN what ended the walk; for
//	                  ACCEPT/LOCAL the last rule of a raw/mangle/filter/security table that
//	                  accepted, else the last filter chain policy; "routing" (a martian,
//	                  WalkInput.RouteLocalnet) or "bridge" (WalkInput.Bridge: a frame back
//	                  out a hairpin-off port, or one iptables never sees)
//	decision          {hook, table, chain, line, rule} or {hook, table, chain, policy}, or
//	                  null (no filter table involved)
//	dnat_destination  "ip:port" of a DNAT/REDIRECT, or null
//	masqueraded       a MASQUERADE or SNAT translated the source
//	snat_source       SNAT's source ("ip" or "ip:ports"); null for MASQUERADE
//	mark              the final packet mark, hex
//	packet            the final packet, after translations
//	hooks             the hooks passed, in order
//	matched_rules     [{hook, table, chain, line, rule}]: the rules that matched
//	assumptions       [{hook, table, chain, line, rule, match, assumed_match}], if any
//	paths             the number of merged paths
//	bridge            {bridge, in_port, out_port, path, hairpin, bridge_nf_call_iptables,
//	                  reason, reply}: a pod's packet whose destination is on its own
//	                  bridge (bridge.go), if any
//
// # In a datapath
//
// The emulator imports no datapath. RunTable evaluates one table at one hook for a
// packet a datapath hands it (TablesAt lists the tables of a hook, TablePriority their
// netfilter priorities) and returns a TableVerdict that refers to nothing of the
// emulator's; proxy/kubeproxy's AttachEmulator runs the tables as a netsim node's, one
// handler per table and hook, the nat tables as NAT handlers (netsim calls them only for
// a connection's first packet and applies the binding to later packets), mapping
// netsim's packet and conntrack entry to Packet, its Context to Env (virtual clock,
// seeded choice points, the node's addresses, dry runs of probes) and the emulator's
// rule steps into the netsim trace.
//
// # Traces and line numbers
//
// A rule remembers the text and line it was loaded from (Rule.File, Rule.Line); traces
// show that line, so a trace of a dump loaded from a file points into the file. Rules
// skipped by a chain index are not listed (a step says how many were skipped), unless
// WalkInput.EveryRule asks for a rule-by-rule scan.
package emulator
