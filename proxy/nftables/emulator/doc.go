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
//	from Env.Pick, dynamic set updates on Env's clock, marks, NAT → ChainVerdict
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
