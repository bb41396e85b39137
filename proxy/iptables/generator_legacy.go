package iptables

import "github.com/clusterlab/clusterlab/proxy"

// The rules only kube-proxy releases before the current layout write: the KUBE-XLB
// chain (before 1.24), the inline masquerade of external traffic (before 1.24),
// KUBE-MARK-DROP jumps (before 1.25) and kubelet's chains those jumps rely on. Each is
// switched by a field of layout, resolved from the node's release
// (proxy/behaviour_iptables.go).

// kubeletChains writes the chains kubelet created before kube-proxy 1.25 stopped
// relying on them (KEP-3178), as that release's kubelet would have: nat KUBE-MARK-DROP
// (mark 0x8000) and filter KUBE-FIREWALL dropping what carries the mark, with, from
// 1.19 and for IPv4, kubelet's rule blocking localnet connections (CVE-2020-8558).
// The simulated node has no kubelet writing iptables, so the proxier writes them; the
// jumps from INPUT and OUTPUT to KUBE-FIREWALL are among the proxier's jump rules.
func (g *generator) kubeletChains() {
	r := g.r
	g.natChains.chain(ChainMarkDrop)
	nr := &g.natRules
	nr.w("-A", ChainMarkDrop, "-j", "MARK", "--or-mark", r.layout.dropMark)
	nr.end()

	g.filterChains.chain(ChainKubeletFirewall)
	fr := &g.filterRules
	fr.w("-A", ChainKubeletFirewall, "-m", "comment", "--comment")
	fr.q("kubernetes firewall for dropping marked packets")
	fr.w("-m", "mark", "--mark", r.layout.dropMark+"/"+r.layout.dropMark, "-j", "DROP")
	fr.end()
	if r.layout.kubeletMartian && !r.isIPv6 {
		fr.w("-A", ChainKubeletFirewall, "-m", "comment", "--comment")
		fr.q("block incoming localnet connections")
		fr.w("-d", "127.0.0.0/8", "!", "-s", "127.0.0.0/8", "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT", "-j", "DROP")
		fr.end()
	}
}

// markDropRule writes, before 1.25, the last rule of an eTP=Local chain (KUBE-XLB,
// KUBE-EXT) of a service port with no local endpoint: the packet is marked for
// kubelet's KUBE-FIREWALL to drop.
func (g *generator) markDropRule(nr *lineBuf, chain string, p *svcPlan) {
	nr.w("-A", chain, "-m", "comment", "--comment")
	nr.q(p.name, " has no local endpoints")
	nr.w("-j", ChainMarkDrop)
	nr.end()
}

// legacyNodePortMasq writes, before 1.24, the KUBE-NODEPORTS masquerade rule that
// precedes the jump: all NodePort traffic for eTP=Cluster; for eTP=Local, traffic from
// the loopback range ("fix localhost martian source error"), in both families.
func (g *generator) legacyNodePortMasq(p *svcPlan, np string) {
	r, nr, proto := g.r, &g.natRules, p.proto
	if r.layout.extChain {
		return
	}
	nr.w("-A", ChainNodePorts, "-m", "comment", "--comment", p.name, "-m", proto, "-p", proto, "--dport", np)
	if !p.inlineMasq {
		loopback := "127.0.0.0/8"
		if r.isIPv6 {
			loopback = "::1/128"
		}
		nr.w("-s", loopback)
	}
	nr.w("-j", ChainMarkMasq)
	nr.end()
}

// legacyExternalChain writes KUBE-XLB (before 1.24), the eTP=Local chain of every
// external destination: pod traffic short-circuited to KUBE-SVC (with a local-traffic
// detector), traffic from the node itself masqueraded and sent to KUBE-SVC, the rest to
// the local endpoints (a probability ladder written into KUBE-XLB itself, a jump to
// KUBE-SVL from 1.24) or, with none, marked for KUBE-FIREWALL to drop.
func (g *generator) legacyExternalChain(nc, nr *lineBuf, p *svcPlan) {
	xlb, clusterChain := p.info.chains.LegacyExternal, p.info.chains.Cluster
	g.declare(nc, xlb, kindLegacyExternal)
	if g.r.detector.IsImplemented() {
		nr.w("-A", xlb, "-m", "comment", "--comment")
		nr.q("Redirect pods trying to reach external loadbalancer VIP to clusterIP")
		nr.w(g.r.detector.IfLocal()...)
		nr.w("-j", clusterChain)
		nr.end()
	}
	nr.w("-A", xlb, "-m", "comment", "--comment")
	nr.q("masquerade LOCAL traffic for ", p.name, " LB IP")
	nr.w("-m", "addrtype", "--src-type", "LOCAL", "-j", ChainMarkMasq)
	nr.end()
	nr.w("-A", xlb, "-m", "comment", "--comment")
	nr.q("route LOCAL traffic for ", p.name, " LB IP to service chain")
	nr.w("-m", "addrtype", "--src-type", "LOCAL", "-j", clusterChain)
	nr.end()
	switch {
	case len(p.c.Local) == 0:
		if p.extNatDrop {
			g.markDropRule(nr, xlb, p)
		}
	case g.r.layout.svlChain:
		nr.w("-A", xlb, "-j", p.info.chains.Local)
		nr.end()
	default:
		g.endpointRules(nr, p.info, p.sp, xlb, p.c.Local)
	}
}

// legacyInternalPolicy is internalTrafficPolicy Local before kube-proxy 1.24
// (kubernetes#106497 changed it): no KUBE-SVL chain; the service port's endpoints were
// filtered to this node's for all of its traffic (cluster IP and external
// destinations alike), so with none on this node the port had "no endpoints" and was
// REJECTed; and the policy was ignored when externalTrafficPolicy was Local, or when
// the ServiceInternalTrafficPolicy gate was off (before 1.22 by default). It returns a
// copy of sp with the Cluster internal policy and the endpoints its chains use.
func (g *generator) legacyInternalPolicy(eps []*proxy.Endpoint, sp *proxy.ServicePort, c proxy.Categorized) (*proxy.ServicePort, proxy.Categorized) {
	cp := *sp
	cp.InternalPolicyLocal = false
	all := proxy.CategorizeEndpoints(eps, &cp, g.r.nodeName, g.r.nodeLabels)
	if sp.ExternalPolicyLocal || !g.r.itpGate {
		return &cp, all
	}
	all.Cluster, all.AllReachable, all.HasAnyEndpoints = c.Local, c.Local, len(c.Local) > 0
	return &cp, all
}

// legacyForwardRules writes KUBE-FORWARD's RELATED,ESTABLISHED accept rules before
// kube-proxy 1.23 (kubernetes#97279 merged them): two rules, identical but for their
// comments since kubernetes#87748 dropped their cluster-CIDR matches.
func (g *generator) legacyForwardRules() {
	fr := &g.filterRules
	for _, which := range []string{"source", "destination"} {
		fr.w("-A", ChainForward, "-m", "comment", "--comment")
		fr.q("kubernetes forwarding conntrack pod ", which, " rule")
		fr.w("-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT")
		fr.end()
	}
}

// legacyExternalIPRules writes an external IP's nat rules before 1.24: for eTP=Cluster
// a KUBE-MARK-MASQ rule, then the jump (to KUBE-SVC, or KUBE-XLB for eTP=Local) for
// traffic neither from a bridge port (a pod on a bridge) nor from the node itself, and
// the jump for an external IP that is a node address. The emulator does not evaluate
// -m physdev (a single-path evaluation assumes it does not match, an all-branches one
// follows both ways, and traces say so).
func (g *generator) legacyExternalIPRules(p *svcPlan, ip string) {
	nr := &g.natRules
	if p.inlineMasq {
		p.vipRule(nr, ChainServices, " external IP", ip, ChainMarkMasq)
	}
	for _, m := range [][]string{{"-m", "physdev", "!", "--physdev-is-in", "-m", "addrtype", "!", "--src-type", "LOCAL"}, {"-m", "addrtype", "--dst-type", "LOCAL"}} {
		nr.w("-A", ChainServices, "-m", "comment", "--comment")
		nr.q(p.name, " external IP")
		nr.w("-m", p.proto, "-p", p.proto, "-d", ip, "--dport", p.port)
		nr.w(m...)
		nr.w("-j", p.extDest)
		nr.end()
	}
}
