// Package emulator is an in-memory nftables: the ruleset model, a parser for
// `nft list ruleset` text (with or without -a handles, in nft's normalised spelling or
// the spelling kube-proxy writes) and for `nft -f` scripts, a printer in nft's listing
// format, and an evaluator that runs packets through base chains with a rule-by-rule
// trace. Importers alias it nftemu.
//
// # Flow
//
//	nft list ruleset / nft -f text
//	   │ lex (words, quoted strings, { } ; , and "# handle N") → table blocks and
//	   │ add/create/insert/replace/delete/flush commands, applied to a copy-on-write
//	   │ transaction → validate (jump/goto targets, set and map references and their
//	   │ types, loops) → commit (bind names to objects) — all or nothing
//	   ▼
//	Ruleset: Table → Chain → Rule{[]Stmt}, Set{elements: hash + sorted intervals}
//	   │
//	   ▼
//	RunChain(env, base chain, packet): rules in order, jump/goto/return, verdict maps,
//	set lookups (a hash lookup; one-component intervals by binary search), numgen
//	from Env.Pick, dynamic set updates on Env's clock, marks, NAT → ChainVerdict;
//	an untraced packet first meets the outcome cache (outcache.go): keyed by the
//	fields earlier evaluations of the chain read, numgen and fib kept as decisions
//	   │
//	   ▼
//	Walk: a connection's first packet through the node's hooks (PREROUTING → INPUT |
//	FORWARD → POSTROUTING; OUTPUT → POSTROUTING [→ INPUT]), base chains of all
//	tables by priority, every numgen branch with its probability (clusterlab trace)
//
// # Semantics
//
// `accept` ends only the current base chain: later base chains (other priorities or
// tables) still run; drop and reject end the packet. A missed vmap or set lookup goes
// on with the next rule. NAT statements end their base chain (accept) with the
// translation; at a hook, nat chains run only until one translated, and (in a walk)
// only for the connection's first packet.
//
// # Kernel fidelity
//
// Checked against nft 1.0.6 on Linux 6.18 in throwaway network namespaces (the root
// tests re-check): a script is one transaction, and what the kernel or nft refuses is
// refused at its line with nothing applied — a rule or verdict-map element naming a
// chain or set not (yet) in the transaction, a jump loop, a lookup of a map as a set,
// vmap on a data map, key types that differ, create of an existing object, a map key
// added again with another value, overlapping intervals without auto-merge, NAT
// outside nat chains or at a hook it does not serve (through any jump path), a NAT port
// without a transport protocol match, deleting a chain or set still in use. The
// printer gives nft's listing (element order aside): symbolic priorities where nft
// prints them, normalised marks, anonymous interval sets merged, dependencies nft
// leaves out, dynamic elements' expiry on the evaluator's clock.
//
// # What it does not understand
//
// An expression or statement the emulator does not model (icmp type, limit, queue,
// meta skuid, ...) is kept as an UnknownStmt with its text, printed back and shown in
// traces. Terminal ones (queue, tproxy, synproxy, fwd) decide with verdict Unknown;
// others are undecidable matches: assumed not to match on a single path, or both ways
// by an all-branches walk (Env may implement Assumer). Tables of the arp, bridge and
// netdev families are kept and printed but never evaluated. Concatenated interval sets
// are scanned linearly (kube-proxy does not use them since 1.30).
package emulator
