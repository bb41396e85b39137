// Package nodewalk walks a packet through everything a node's netfilter runs when the
// node has rules of both kinds: the tables of an iptables dump (iptables-legacy or
// iptables-nft: Calico, Docker, flannel) and the base chains of nftables tables
// (kube-proxy's nftables mode), at each hook in the kernel's priority order.
//
//	           Walk(Node, Input)
//	                  │  hook by hook: PREROUTING → routing → INPUT | FORWARD →
//	                  │  POSTROUTING; OUTPUT → routing → POSTROUTING [→ lo → INPUT]
//	                  ▼
//	units at the hook, by priority (iptables: raw -300, mangle -150, nat -100/+100,
//	filter 0, security 50; nft base chains at theirs; nft first on a tie)
//	    │                                        │
//	    ▼                                        ▼
//	iptables emulator: EvalTable           nftables emulator: RunChain
//	(one table's built-in chain)           (one base chain), ApplyNAT
//	    │                                        │
//	    └───────────── one packet state ─────────┘
//	 accept: on to the next unit; drop, reject: the end; NAT once per connection
//	 and direction (the first nat chain or table that binds wins, as nf_nat does)
//
// The walker owns the hook sequence, the routing decisions (local or not, the output
// interface, route_localnet martians), the conntrack binding of an established packet
// and the choice points: statistic (iptables) and numgen (nft) choices and assumptions
// for matches neither emulator models go through one recorder, so that an
// all-branches walk explores every combination once and its outcomes' probabilities
// sum to 1 (with assumptions, to 1 per assumed world). Each emulator only runs the one
// chain it is given on the packet it is given.
//
// An iptables-nft node shows its iptables tables in `nft list ruleset` too (table ip
// filter, table ip nat, ... with xt expressions): IPTablesNFTCopies finds them, and the
// caller skips them (Node.SkipNFT) when it has the iptables-save dump, the readable
// source of the same rules.
package nodewalk

// # What it does not model
//
// The order of an iptables-legacy table and an nft base chain of the same priority
// depends on which registered its hook last (that one runs first); the walk assumes
// the nft chain, kube-proxy's, came last. It does not hand packets to IPVS, does not
// know which lines a lenient iptables load skipped (may_differ), does not scan long
// iptables chains rule by rule (--every-rule), and does not merge outcomes that differ
// only in an assumption that does not decide them (the iptables walk does). Bridged
// traffic (br_netfilter), the arp, bridge and netdev families, and the kernel's
// implicit null NAT binding are outside it, as they are outside both emulators' walks.
