package netfilter

import "fmt"

// Hook is a netfilter hook point.
//
//	──▶ PREROUTING ──▶ routing ──┬──▶ FORWARD ──────────────────▶ POSTROUTING ──▶ out
//	                             └──▶ INPUT ──▶ local stack             ▲
//	                                            OUTPUT ──▶ routing ─────┘
type Hook uint8

// The five hooks, in the order of NF_INET_*.
const (
	Prerouting Hook = iota
	Input
	Forward
	Output
	Postrouting
	// NumHooks is how many hooks there are: hooks index arrays of this size.
	NumHooks = int(Postrouting) + 1
)

var hookNames = [...]string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}

// String returns the hook's name as iptables spells its built-in chain.
func (h Hook) String() string {
	if int(h) < len(hookNames) {
		return hookNames[h]
	}
	return fmt.Sprintf("HOOK(%d)", uint8(h))
}

// ParseHook parses a hook name as iptables spells its built-in chains. Case matters, as
// in iptables: a chain named "input" is a user chain, not INPUT.
func ParseHook(s string) (Hook, bool) {
	for i, n := range hookNames {
		if n == s {
			return Hook(i), true
		}
	}
	return 0, false
}

// Priorities at a hook, as netfilter's NF_IP_PRI_* values: lower runs first.
const (
	PriorityRaw       = -300 // the raw table
	PriorityConntrack = -200 // conntrack's lookup (PREROUTING, OUTPUT)
	PriorityMangle    = -150 // the mangle table
	PriorityNATDst    = -100 // DNAT (PREROUTING, OUTPUT)
	PriorityFilter    = 0    // the filter table
	PrioritySecurity  = 50   // the security table
	PriorityNATSrc    = 100  // SNAT (INPUT, POSTROUTING)
)
