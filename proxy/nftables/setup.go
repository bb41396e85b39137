package nftables

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"
)

// baseChain is one of the chains hooked into netfilter, named "<type>-<hook>[-suffix]".
type baseChain struct {
	name     string
	typ      knftables.BaseChainType
	hook     knftables.BaseChainHook
	priority knftables.BaseChainPriority
}

// baseChains are the 1.34+ base chains, in kube-proxy's order.
var baseChains = []baseChain{
	{ChainFilterPreroutingPreDNAT, knftables.FilterType, knftables.PreroutingHook, knftables.DNATPriority + "-10"},
	{ChainFilterOutputPreDNAT, knftables.FilterType, knftables.OutputHook, knftables.DNATPriority + "-10"},
	{ChainFilterInput, knftables.FilterType, knftables.InputHook, knftables.FilterPriority},
	{ChainFilterForward, knftables.FilterType, knftables.ForwardHook, knftables.FilterPriority},
	{ChainFilterOutput, knftables.FilterType, knftables.OutputHook, knftables.FilterPriority},
	{ChainNATPrerouting, knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority},
	{ChainNATOutput, knftables.NATType, knftables.OutputHook, knftables.DNATPriority},
	{ChainNATPostrouting, knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority},
}

// baseChains130 are the 1.30-1.33 base chains (filter chains at dstnat-10,
// filter-output-post-dnat at dstnat+10).
var baseChains130 = []baseChain{
	{ChainFilterPrerouting, knftables.FilterType, knftables.PreroutingHook, knftables.DNATPriority + "-10"},
	{ChainFilterInput, knftables.FilterType, knftables.InputHook, knftables.DNATPriority + "-10"},
	{ChainFilterForward, knftables.FilterType, knftables.ForwardHook, knftables.DNATPriority + "-10"},
	{ChainFilterOutput, knftables.FilterType, knftables.OutputHook, knftables.DNATPriority + "-10"},
	{ChainFilterOutputPostDNAT, knftables.FilterType, knftables.OutputHook, knftables.DNATPriority + "+10"},
	{ChainNATPrerouting, knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority},
	{ChainNATOutput, knftables.NATType, knftables.OutputHook, knftables.DNATPriority},
	{ChainNATPostrouting, knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority},
}

// baseChains129 are the 1.29 base chains (filter chains at dstnat-1).
var baseChains129 = []baseChain{
	{ChainFilterInput, knftables.FilterType, knftables.InputHook, knftables.DNATPriority + "-1"},
	{ChainFilterForward, knftables.FilterType, knftables.ForwardHook, knftables.DNATPriority + "-1"},
	{ChainFilterOutput, knftables.FilterType, knftables.OutputHook, knftables.DNATPriority + "-1"},
	{ChainNATPrerouting, knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority},
	{ChainNATOutput, knftables.NATType, knftables.OutputHook, knftables.DNATPriority},
	{ChainNATPostrouting, knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority},
}

// JumpRule is a rule in a base chain jumping to one of kube-proxy's regular chains.
type JumpRule struct {
	Chain, Target string
	// Match precedes the jump ("ct state new" or nothing).
	Match string
}

// JumpRules are the 1.34+ base chains' rules, in the order kube-proxy adds them.
var JumpRules = []JumpRule{
	{ChainFilterInput, ChainNodePortEndpointsCheck, "ct state new"},
	{ChainFilterInput, ChainServiceEndpointsCheck, "ct state new"},
	{ChainFilterForward, ChainServiceEndpointsCheck, "ct state new"},
	{ChainFilterOutput, ChainServiceEndpointsCheck, "ct state new"},
	{ChainFilterPreroutingPreDNAT, ChainFirewallCheck, "ct state new"},
	{ChainFilterOutputPreDNAT, ChainFirewallCheck, "ct state new"},
	{ChainNATOutput, ChainServices, ""},
	{ChainNATPrerouting, ChainServices, ""},
	{ChainNATPostrouting, ChainMasquerading, ""},
	{ChainFilterForward, ChainClusterIPsCheck, "ct state new"},
	{ChainFilterOutput, ChainClusterIPsCheck, "ct state new"},
}

// JumpRules130 are the 1.30-1.33 base chains' rules.
var JumpRules130 = []JumpRule{
	{ChainFilterInput, ChainNodePortEndpointsCheck, "ct state new"},
	{ChainFilterInput, ChainServiceEndpointsCheck, "ct state new"},
	{ChainFilterForward, ChainServiceEndpointsCheck, "ct state new"},
	{ChainFilterOutput, ChainServiceEndpointsCheck, "ct state new"},
	{ChainFilterPrerouting, ChainFirewallCheck, "ct state new"},
	{ChainFilterOutput, ChainFirewallCheck, "ct state new"},
	{ChainNATOutput, ChainServices, ""},
	{ChainNATPrerouting, ChainServices, ""},
	{ChainNATPostrouting, ChainMasquerading, ""},
	{ChainFilterForward, ChainClusterIPsCheck, "ct state new"},
	{ChainFilterOutputPostDNAT, ChainClusterIPsCheck, "ct state new"},
}

// JumpRules129 are the 1.29 base chains' rules (the forward chain's jump is added
// with the chain, see setup).
var JumpRules129 = []JumpRule{
	{ChainFilterInput, ChainEndpointsCheck, "ct state new"},
	{ChainFilterForward, ChainEndpointsCheck, "ct state new"},
	{ChainFilterOutput, ChainEndpointsCheck, "ct state new"},
	{ChainFilterInput, ChainFirewallCheck, "ct state new"},
	{ChainFilterForward, ChainFirewallCheck, "ct state new"},
	{ChainFilterOutput, ChainFirewallCheck, "ct state new"},
	{ChainNATOutput, ChainServices, ""},
	{ChainNATPrerouting, ChainServices, ""},
	{ChainNATPostrouting, ChainMasquerading, ""},
}

// layoutBase returns the base chains and jump rules of the release's layout.
func (r *resolved) layoutBase() ([]baseChain, []JumpRule) {
	switch {
	case r.preDNAT:
		return baseChains, JumpRules
	case r.layout130:
		return baseChains130, JumpRules130
	}
	return baseChains129, JumpRules129
}

// chainSet records the chains a transaction has created and flushed, so that each is
// flushed at most once (a second flush would lose rules already added).
type chainSet map[string]bool

// ensureChain adds "add chain" and "flush chain" for a chain not yet seen, unless
// skip (the chain is kept as it is, but still counts as in use).
func ensureChain(tx *knftables.Transaction, seen chainSet, name string, skip bool) {
	if seen[name] {
		return
	}
	seen[name] = true
	if skip {
		return
	}
	tx.Add(&knftables.Chain{Name: name})
	tx.Flush(&knftables.Chain{Name: name})
}

// setup writes what a full sync rewrites: the table, base chains with their jump
// rules, the fixed chains and rules, and the sets and maps (kube-proxy's setupNFTables).
// firstSync adds the one-time add+delete of every base chain, so that a base chain
// left by an older kube-proxy with another priority is recreated.
func (g *generator) setup(tx *knftables.Transaction, seen chainSet, firstSync bool) {
	r := g.r
	bases, jumps := r.layoutBase()
	tx.Add(&knftables.Table{Comment: ptr.To("rules for kube-proxy")})
	if firstSync {
		for _, bc := range bases {
			tx.Add(&knftables.Chain{Name: bc.name})
			tx.Delete(&knftables.Chain{Name: bc.name})
		}
	}
	for _, bc := range bases {
		c := &knftables.Chain{Name: bc.name, Type: ptr.To(bc.typ), Hook: ptr.To(bc.hook), Priority: ptr.To(bc.priority)}
		tx.Add(c)
		tx.Flush(c)
	}
	for _, j := range jumps {
		ensureChain(tx, seen, j.Target, false)
		tx.Add(&knftables.Rule{Chain: j.Chain, Rule: knftables.Concat(j.Match, "jump", j.Target)})
	}
	if r.invalidDrop {
		ensureChain(tx, seen, ChainForward, false)
		tx.Add(&knftables.Rule{Chain: ChainFilterForward, Rule: "jump " + ChainForward})
		tx.Add(&knftables.Rule{Chain: ChainForward, Rule: "ct state invalid drop"})
	}
	for _, c := range []string{ChainServices, ChainMasquerading} {
		ensureChain(tx, seen, c, false)
	}
	g.setupMasquerading(tx, seen)
	if r.layout130 {
		ensureChain(tx, seen, ChainClusterIPsCheck, false)
		tx.Add(&knftables.Set{Name: SetClusterIPs, Type: r.addrType, Comment: ptr.To("Active ClusterIPs")})
		tx.Add(&knftables.Rule{
			Chain: ChainClusterIPsCheck, Rule: knftables.Concat(r.ipX, "daddr @"+SetClusterIPs, "reject"),
			Comment: ptr.To("Reject traffic to invalid ports of ClusterIPs"),
		})
		if r.serviceCIDR != "" {
			tx.Add(&knftables.Rule{
				Chain: ChainClusterIPsCheck, Rule: knftables.Concat(r.ipX, "daddr {", r.serviceCIDR, "} drop"),
				Comment: ptr.To("Drop traffic to unallocated ClusterIPs"),
			})
		}
	}
	g.setupNodePortIPs(tx)
	g.setupNoEndpoints(tx)
	if r.node.Version.AtLeast(37) {
		g.setupLocalhostNodePorts(tx, seen)
	}
	g.setupDispatch(tx, seen)
}

// setupMasquerading writes the masquerading chain's rules: 1.36+ the inline mark test
// and the hairpin-connections set; up to 1.35 the mark-for-masquerade chain and three
// rules.
func (g *generator) setupMasquerading(tx *knftables.Transaction, seen chainSet) {
	r := g.r
	if !r.masq136 {
		ensureChain(tx, seen, ChainMarkForMasquerade, false)
		tx.Add(&knftables.Rule{Chain: ChainMarkForMasquerade, Rule: "mark set mark or " + r.mark})
		tx.Add(&knftables.Rule{Chain: ChainMasquerading, Rule: knftables.Concat("mark and", r.mark, "== 0 return")})
		tx.Add(&knftables.Rule{Chain: ChainMasquerading, Rule: knftables.Concat("mark set mark xor", r.mark)})
		tx.Add(&knftables.Rule{Chain: ChainMasquerading, Rule: "masquerade fully-random"})
		return
	}
	tx.Add(&knftables.Set{
		Name: SetHairpinConnections, Type: r.addrType + " . " + r.addrType + " . inet_proto . inet_service",
		Comment: ptr.To("service hairpin connections"),
	})
	tx.Add(&knftables.Rule{Chain: ChainMasquerading, Rule: knftables.Concat(
		"mark and", r.mark, "!= 0 mark set mark xor", r.mark, "masquerade fully-random")})
	tx.Add(&knftables.Rule{Chain: ChainMasquerading, Rule: knftables.Concat(
		"ct status dnat", r.ipX, "saddr .", r.ipX, "daddr . meta l4proto . th dport @"+SetHairpinConnections,
		"masquerade fully-random")})
}

// setupNodePortIPs fills nodeport-ips, or deletes it when every local address takes
// NodePort traffic ("add" first so that the delete cannot fail).
func (g *generator) setupNodePortIPs(tx *knftables.Transaction) {
	r := g.r
	tx.Add(&knftables.Set{Name: SetNodePortIPs, Type: r.addrType, Comment: ptr.To("IPs that accept NodePort traffic")})
	if r.matchAll {
		tx.Delete(&knftables.Set{Name: SetNodePortIPs})
		return
	}
	tx.Flush(&knftables.Set{Name: SetNodePortIPs})
	for _, ip := range r.nodePortIPs {
		tx.Add(&knftables.Element{Set: SetNodePortIPs, Key: []string{ip.String()}})
	}
}

// setupNoEndpoints writes the no-endpoint maps, reject-chain and the check rules.
func (g *generator) setupNoEndpoints(tx *knftables.Transaction) {
	r := g.r
	tx.Add(&knftables.Map{
		Name: MapNoEndpointServices, Type: r.addrType + " . inet_proto . inet_service : verdict",
		Comment: ptr.To("vmap to drop or reject packets to services with no endpoints"),
	})
	tx.Add(&knftables.Map{
		Name: MapNoEndpointNodePorts, Type: "inet_proto . inet_service : verdict",
		Comment: ptr.To("vmap to drop or reject packets to service nodeports with no endpoints"),
	})
	tx.Add(&knftables.Chain{Name: ChainReject, Comment: ptr.To("helper for @no-endpoint-services / @no-endpoint-nodeports")})
	tx.Flush(&knftables.Chain{Name: ChainReject})
	tx.Add(&knftables.Rule{Chain: ChainReject, Rule: "reject"})
	svcCheck, npCheck := ChainServiceEndpointsCheck, ChainNodePortEndpointsCheck
	if !r.layout130 {
		svcCheck, npCheck = ChainEndpointsCheck, ChainEndpointsCheck
	}
	tx.Add(&knftables.Rule{Chain: svcCheck, Rule: knftables.Concat(
		r.ipX, "daddr . meta l4proto . th dport vmap @"+MapNoEndpointServices)})
	if r.matchAll {
		tx.Add(&knftables.Rule{Chain: npCheck, Rule: knftables.Concat(
			r.ipX, "daddr !=", r.loopback, "meta l4proto . th dport vmap @"+MapNoEndpointNodePorts)})
	} else {
		tx.Add(&knftables.Rule{Chain: npCheck, Rule: knftables.Concat(
			r.ipX, "daddr @"+SetNodePortIPs, "meta l4proto . th dport vmap @"+MapNoEndpointNodePorts)})
	}
}

// allRejectProtocols are the protocols with localhost NodePort reject objects.
var allRejectProtocols = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}

// setupLocalhostNodePorts writes the 1.37 localhost NodePort reject map, chains and
// counters for the rejected protocols, and adds and deletes those of the others (and
// the map, with the gate off) so that no leftover stays.
func (g *generator) setupLocalhostNodePorts(tx *knftables.Transaction, seen chainSet) {
	r := g.r
	tx.Add(&knftables.Map{
		Name: MapLocalhostNodePortReject, Type: "inet_proto . inet_service : verdict",
		Comment: ptr.To("localhost NodePorts rejected by kube-proxy"),
	})
	rejected := map[corev1.Protocol]bool{}
	if len(r.rejectProtocols) > 0 {
		for _, p := range r.rejectProtocols {
			rejected[p] = true
			lp := strings.ToLower(string(p))
			counter := LocalhostNodePortRejectCounter(lp)
			tx.Add(&knftables.Counter{Name: counter})
			chain := LocalhostNodePortRejectChain(lp)
			ensureChain(tx, seen, chain, false)
			tx.Add(&knftables.Rule{Chain: chain, Rule: knftables.Concat("counter name", `"`+counter+`"`, "reject")})
		}
		tx.Add(&knftables.Rule{Chain: ChainNodePortEndpointsCheck, Rule: knftables.Concat(
			r.ipX, "daddr", r.loopback, "meta l4proto . th dport vmap @"+MapLocalhostNodePortReject)})
	} else {
		tx.Delete(&knftables.Map{Name: MapLocalhostNodePortReject})
	}
	for _, p := range allRejectProtocols {
		if rejected[p] {
			continue
		}
		lp := strings.ToLower(string(p))
		tx.Add(&knftables.Chain{Name: LocalhostNodePortRejectChain(lp)})
		tx.Delete(&knftables.Chain{Name: LocalhostNodePortRejectChain(lp)})
		tx.Add(&knftables.Counter{Name: LocalhostNodePortRejectCounter(lp)})
		tx.Delete(&knftables.Counter{Name: LocalhostNodePortRejectCounter(lp)})
	}
}

// setupDispatch writes the firewall map and check, and the service dispatch maps and
// the services chain's rules.
func (g *generator) setupDispatch(tx *knftables.Transaction, seen chainSet) {
	r := g.r
	tx.Add(&knftables.Map{
		Name: MapFirewallIPs, Type: r.addrType + " . inet_proto . inet_service : verdict",
		Comment: ptr.To("destinations that are subject to LoadBalancerSourceRanges"),
	})
	ensureChain(tx, seen, ChainFirewallCheck, false)
	tx.Add(&knftables.Rule{Chain: ChainFirewallCheck, Rule: knftables.Concat(
		r.ipX, "daddr . meta l4proto . th dport vmap @"+MapFirewallIPs)})

	tx.Add(&knftables.Map{
		Name: MapServiceIPs, Type: r.addrType + " . inet_proto . inet_service : verdict",
		Comment: ptr.To("ClusterIP, ExternalIP and LoadBalancer IP traffic"),
	})
	tx.Add(&knftables.Map{Name: MapServiceNodePorts, Type: "inet_proto . inet_service : verdict", Comment: ptr.To("NodePort traffic")})

	if !r.masq136 {
		// Up to 1.35 the service chains mark ClusterIP traffic themselves.
	} else if r.masqAll {
		tx.Add(&knftables.Rule{
			Chain: ChainServices, Rule: knftables.Concat(r.ipX, "daddr @"+SetClusterIPs, r.masqRule),
			Comment: ptr.To("masquerade all clusterIP traffic"),
		})
	} else if r.ifNotLocal != "" {
		tx.Add(&knftables.Rule{
			Chain: ChainServices, Rule: knftables.Concat(r.ipX, "daddr @"+SetClusterIPs, r.ifNotLocal, r.masqRule),
			Comment: ptr.To("masquerade clusterIP traffic from outside cluster"),
		})
	}
	tx.Add(&knftables.Rule{Chain: ChainServices, Rule: knftables.Concat(
		r.ipX, "daddr . meta l4proto . th dport vmap @"+MapServiceIPs)})
	if r.matchAll {
		tx.Add(&knftables.Rule{Chain: ChainServices, Rule: knftables.Concat(
			"fib daddr type local", r.ipX, "daddr !=", r.loopback, "meta l4proto . th dport vmap @"+MapServiceNodePorts)})
	} else {
		tx.Add(&knftables.Rule{Chain: ChainServices, Rule: knftables.Concat(
			r.ipX, "daddr @"+SetNodePortIPs, "meta l4proto . th dport vmap @"+MapServiceNodePorts)})
	}
}

// affinitySet returns an endpoint's ClientIP affinity set.
func (g *generator) affinitySet(name string, timeoutSeconds int) *knftables.Set {
	return &knftables.Set{
		Name:    name,
		Type:    g.r.addrType,
		Flags:   []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
		Timeout: ptr.To(time.Duration(timeoutSeconds) * time.Second),
	}
}
