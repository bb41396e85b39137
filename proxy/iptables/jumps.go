package iptables

import (
	"strings"
)

// JumpRule is one rule kube-proxy ensures in a built-in chain, jumping to one of its
// own chains. kube-proxy installs these with "iptables -C" / "iptables -I" (insert at
// the top if absent) on every full sync, not in its restore input.
type JumpRule struct {
	Table  string   // "filter" or "nat"
	Chain  string   // built-in chain: INPUT, FORWARD, OUTPUT, PREROUTING, POSTROUTING
	Target string   // the kube-proxy chain jumped to
	Match  []string // extra match arguments before the comment
	// Comment is the rule's comment ("" for none).
	Comment string
}

// Spec returns the rule as it appears after "-A CHAIN" in iptables-save output and in
// restore input: matches, the quoted comment, the jump.
func (j JumpRule) Spec() string {
	var b strings.Builder
	for _, m := range j.Match {
		b.WriteString(m)
		b.WriteByte(' ')
	}
	if j.Comment != "" {
		b.WriteString(`-m comment --comment "`)
		b.WriteString(j.Comment)
		b.WriteString(`" `)
	}
	b.WriteString("-j ")
	b.WriteString(j.Target)
	return b.String()
}

// Args returns the rule as an iptables argument list (the comment one argument,
// unquoted), as kube-proxy passes it to "iptables -I".
func (j JumpRule) Args() []string {
	args := append([]string{}, j.Match...)
	if j.Comment != "" {
		args = append(args, "-m", "comment", "--comment", j.Comment)
	}
	return append(args, "-j", j.Target)
}

var ctNew = []string{"-m", "conntrack", "--ctstate", "NEW"}

// jumpRules is kube-proxy's iptablesJumpChains followed by its copy of kubelet's
// KUBE-FIREWALL jumps, in the order it ensures them.
var jumpRules = []JumpRule{
	{TableFilter, "INPUT", ChainExternalServices, ctNew, "kubernetes externally-visible service portals"},
	{TableFilter, "FORWARD", ChainExternalServices, ctNew, "kubernetes externally-visible service portals"},
	{TableFilter, "INPUT", ChainNodePorts, nil, "kubernetes health check service ports"},
	{TableFilter, "FORWARD", ChainServices, ctNew, "kubernetes service portals"},
	{TableFilter, "OUTPUT", ChainServices, ctNew, "kubernetes service portals"},
	{TableFilter, "FORWARD", ChainForward, nil, "kubernetes forwarding rules"},
	{TableFilter, "INPUT", ChainProxyFirewall, ctNew, "kubernetes load balancer firewall"},
	{TableFilter, "OUTPUT", ChainProxyFirewall, ctNew, "kubernetes load balancer firewall"},
	{TableFilter, "FORWARD", ChainProxyFirewall, ctNew, "kubernetes load balancer firewall"},
	{TableNAT, "OUTPUT", ChainServices, nil, "kubernetes service portals"},
	{TableNAT, "PREROUTING", ChainServices, nil, "kubernetes service portals"},
	{TableNAT, "POSTROUTING", ChainPostrouting, nil, "kubernetes postrouting rules"},
	{TableFilter, "INPUT", ChainKubeletFirewall, nil, ""},
	{TableFilter, "OUTPUT", ChainKubeletFirewall, nil, ""},
}

// JumpRules returns the jump rules in the order kube-proxy ensures them. Since each
// missing one is inserted at the top of its chain, on a fresh node the last one ends up
// first; InstalledOrder gives that final order.
func JumpRules() []JumpRule {
	out := make([]JumpRule, len(jumpRules))
	copy(out, jumpRules)
	return out
}

// InstalledOrder returns the jump rules in the order they stand in their chains on a
// node where none existed before: reversed, per chain, from the ensure order.
func InstalledOrder() []JumpRule {
	out := make([]JumpRule, 0, len(jumpRules))
	for i := len(jumpRules) - 1; i >= 0; i-- {
		out = append(out, jumpRules[i])
	}
	return out
}

// hookChains are the built-in chains of each table, in the kernel's order.
var hookChains = map[string][]string{
	TableFilter: {"INPUT", "FORWARD", "OUTPUT"},
	TableNAT:    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
}

// jumpRules returns the jump rules of the node's release, in ensure order: without the
// KUBE-PROXY-FIREWALL jumps before 1.25, without the filter KUBE-NODEPORTS jump before
// 1.21, and before 1.20 with INPUT → KUBE-SERVICES instead of FORWARD →
// KUBE-EXTERNAL-SERVICES.
func (r *resolved) jumpRules() []JumpRule {
	l := &r.layout
	if l.proxyFirewall && l.healthCheckAccept && l.externalFromForward {
		return jumpRules
	}
	out := make([]JumpRule, 0, len(jumpRules)+1)
	for _, j := range jumpRules {
		switch {
		case j.Target == ChainProxyFirewall && !l.proxyFirewall:
		case j.Table == TableFilter && j.Target == ChainNodePorts && !l.healthCheckAccept:
		case j.Chain == "FORWARD" && j.Target == ChainExternalServices && !l.externalFromForward:
		default:
			out = append(out, j)
		}
		if j.Table == TableFilter && j.Chain == "OUTPUT" && j.Target == ChainServices && !l.externalFromForward {
			out = append(out, JumpRule{TableFilter, "INPUT", ChainServices, ctNew, "kubernetes service portals"})
		}
	}
	return out
}

// appendJumps appends "-A CHAIN spec" lines for one table of rules (in ensure order):
// chain by chain, each in installed order.
func appendJumps(out []byte, table string, rules []JumpRule) []byte {
	for _, chain := range hookChains[table] {
		for i := len(rules) - 1; i >= 0; i-- {
			j := rules[i]
			if j.Table == table && j.Chain == chain {
				out = append(out, "-A "+j.Chain+" "+j.Spec()+"\n"...)
			}
		}
	}
	return out
}
