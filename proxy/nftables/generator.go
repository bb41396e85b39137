package nftables

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"

	"github.com/clusterlab/clusterlab/proxy"
)

// svcInfo holds what the generator derives once per service port and reuses across
// syncs: kube-proxy's servicePortInfo names and the name bases of the endpoints.
type svcInfo struct {
	name    string // "ns/svc:port", cut to 128 bytes for comments (1.37)
	proto   string // "tcp"
	port    string // service port, decimal
	portNum int
	chains  ServiceChainNames
	epBases map[string]string // endpoint "ip:port" → EndpointNameBase
}

func (g *generator) info(n proxy.ServicePortName, sp *proxy.ServicePort) *svcInfo {
	if s := g.cache[n]; s != nil && s.portNum == sp.Port {
		return s
	}
	s := &svcInfo{
		name:    n.String(),
		proto:   strings.ToLower(string(n.Protocol)),
		port:    strconv.Itoa(sp.Port),
		portNum: sp.Port,
	}
	if g.r.node.Version.AtLeast(37) {
		s.name = truncateComment(s.name)
	}
	s.chains = ServiceChains(n, s.proto)
	g.cache[n] = s
	return s
}

// epBase returns the endpoint's name base, computed once.
func (s *svcInfo) epBase(n proxy.ServicePortName, ep *proxy.Endpoint) string {
	b, ok := s.epBases[ep.String()]
	if !ok {
		if s.epBases == nil {
			s.epBases = map[string]string{}
		}
		b = EndpointNameBase(n, s.proto, ep)
		s.epBases[ep.String()] = b
	}
	return b
}

// generator writes kube-proxy's nftables transactions for one family. It keeps the
// element records of the sets and maps it diffs against and the names it derived; one
// generator serves one Proxier (or one Render call).
type generator struct {
	r     *resolved
	cache map[proxy.ServicePortName]*svcInfo

	clusterIPs, serviceIPs, firewallIPs           *elemStore
	noEndpointServices, noEndpointNodePorts       *elemStore
	serviceNodePorts, hairpin, localhostNPRejects *elemStore

	buf []byte // scratch for rule text
}

func newGenerator(r *resolved) *generator {
	return &generator{
		r:                   r,
		cache:               map[proxy.ServicePortName]*svcInfo{},
		clusterIPs:          newElemStore(true, SetClusterIPs),
		serviceIPs:          newElemStore(false, MapServiceIPs),
		firewallIPs:         newElemStore(false, MapFirewallIPs),
		noEndpointServices:  newElemStore(false, MapNoEndpointServices),
		noEndpointNodePorts: newElemStore(false, MapNoEndpointNodePorts),
		serviceNodePorts:    newElemStore(false, MapServiceNodePorts),
		hairpin:             newElemStore(true, SetHairpinConnections),
		localhostNPRejects:  newElemStore(false, MapLocalhostNodePortReject),
	}
}

// stores returns the element stores in kube-proxy's order; the localhost NodePort map
// only with the 1.37 gate.
func (g *generator) stores() []*elemStore {
	s := []*elemStore{g.serviceIPs, g.firewallIPs, g.noEndpointServices, g.noEndpointNodePorts, g.serviceNodePorts}
	if g.r.layout130 {
		s = append([]*elemStore{g.clusterIPs}, s...)
	}
	if g.r.masq136 {
		s = append(s, g.hairpin)
	}
	if len(g.r.rejectProtocols) > 0 {
		s = append(s, g.localhostNPRejects)
	}
	return s
}

// syncOut collects what the per-service part of a sync uses: the chains and affinity
// sets in use (written or kept).
type syncOut struct {
	chains       chainSet
	affinitySets map[string]bool
	endpoints    int
}

// svcPlan is one service port's routing decision (kube-proxy's syncProxyRules locals).
type svcPlan struct {
	n    proxy.ServicePortName
	sp   *proxy.ServicePort
	info *svcInfo
	c    proxy.Categorized

	affinity                   bool
	usesCluster, usesLocal     bool
	usesExternal, usesFirewall bool
	internalChain              string
	externalPolicyChain        string
	hasInternal, hasExternal   bool
	// internalVerdict / externalVerdict: what the no-endpoint map says for traffic
	// with no endpoint to go to ("goto reject-chain" or "drop").
	internalVerdict, externalVerdict string
}

func planService(n proxy.ServicePortName, sp *proxy.ServicePort, info *svcInfo, c proxy.Categorized) svcPlan {
	ch := &info.chains
	p := svcPlan{
		n: n, sp: sp, info: info, c: c,
		affinity:     sp.SessionAffinity == corev1.ServiceAffinityClientIP,
		usesCluster:  len(c.Cluster) > 0 && sp.UsesClusterEndpoints(),
		usesLocal:    len(c.Local) > 0 && sp.UsesLocalEndpoints(),
		usesExternal: c.HasAnyEndpoints && sp.ExternallyAccessible(),
		usesFirewall: len(sp.LoadBalancerVIPs) > 0 && len(sp.LoadBalancerSourceRanges) > 0,
	}
	p.internalChain, p.hasInternal = ch.Cluster, c.HasAnyEndpoints
	if sp.InternalPolicyLocal {
		p.internalChain = ch.Local
		p.hasInternal = p.hasInternal && len(c.Local) > 0
	}
	p.externalPolicyChain, p.hasExternal = ch.Cluster, c.HasAnyEndpoints
	if sp.ExternalPolicyLocal {
		p.externalPolicyChain = ch.Local
		p.hasExternal = p.hasExternal && len(c.Local) > 0
	}
	if !c.HasAnyEndpoints {
		p.internalVerdict = "goto " + ChainReject
		p.externalVerdict = p.internalVerdict
	} else {
		if !p.hasInternal {
			p.internalVerdict = "drop"
		}
		if !p.hasExternal {
			p.externalVerdict = "drop"
		}
	}
	return p
}

// services writes every service port's elements and, unless the sync is partial and
// the Service and its endpoints did not change, its chains. Service ports are taken in
// ServicePortName order (kube-proxy walks a map).
func (g *generator) services(tx *knftables.Transaction, st *proxy.SyncState, full bool, out *syncOut) {
	names := st.Services.SortedNames()
	next := make(map[proxy.ServicePortName]*svcInfo, len(names))
	defer func() { g.cache = next }()
	for _, n := range names {
		sp := st.Services[n]
		info := g.info(n, sp)
		next[n] = info
		c := proxy.CategorizeEndpoints(st.Endpoints[n], sp, g.r.nodeName, g.r.nodeLabels)
		out.endpoints += len(st.Endpoints[n])
		skip := !full && !st.Changed(n.NamespacedName)
		p := planService(n, sp, info, c)

		for _, ep := range c.AllReachable {
			if p.affinity || !g.r.masq136 {
				base := info.epBase(n, ep)
				ensureChain(tx, out.chains, PrefixEndpoint+base, skip)
			}
			if p.affinity {
				out.affinitySets[PrefixAffinity+info.epBase(n, ep)] = true
			}
			if ep.Local && g.r.masq136 {
				g.hairpin.ensure(tx, &knftables.Element{Set: SetHairpinConnections,
					Key: []string{ep.IPString(), ep.IPString(), info.proto, strconv.Itoa(ep.Port)}})
			}
		}
		if p.usesCluster {
			ensureChain(tx, out.chains, info.chains.Cluster, skip)
		}
		if p.usesLocal {
			ensureChain(tx, out.chains, info.chains.Local, skip)
		}
		if p.usesExternal {
			ensureChain(tx, out.chains, info.chains.External, skip)
		}
		g.serviceElements(tx, &p, out.chains, skip)
		if !skip {
			g.serviceChains(tx, &p)
		}
	}
}

// element returns an IP . proto . port element of a map with a verdict value.
func (p *svcPlan) element(m, ip, verdict string, comment bool) *knftables.Element {
	e := &knftables.Element{Map: m, Key: []string{ip, p.info.proto, p.info.port}, Value: []string{verdict}}
	if comment {
		e.Comment = &p.info.name
	}
	return e
}

// serviceElements ensures the service port's set and map elements: its cluster IP,
// dispatch entries for the cluster IP, external IPs, load-balancer IPs and NodePort,
// firewall entries, and the no-endpoint verdicts; and, in kube-proxy's place in the
// transaction, its firewall chain.
func (g *generator) serviceElements(tx *knftables.Transaction, p *svcPlan, chains chainSet, skip bool) {
	sp, info := p.sp, p.info
	cip := sp.ClusterIP.String()
	if g.r.layout130 {
		g.clusterIPs.ensure(tx, &knftables.Element{Set: SetClusterIPs, Key: []string{cip}})
	}
	if p.hasInternal {
		g.serviceIPs.ensure(tx, p.element(MapServiceIPs, cip, "goto "+p.internalChain, false))
	} else {
		g.noEndpointServices.ensure(tx, p.element(MapNoEndpointServices, cip, p.internalVerdict, true))
	}
	ext := "goto " + info.chains.External
	for _, ip := range sp.ExternalIPs {
		if p.c.HasAnyEndpoints {
			g.serviceIPs.ensure(tx, p.element(MapServiceIPs, ip.String(), ext, false))
		}
		if !p.hasExternal {
			g.noEndpointServices.ensure(tx, p.element(MapNoEndpointServices, ip.String(), p.externalVerdict, true))
		}
	}
	if p.usesFirewall {
		ensureChain(tx, chains, info.chains.Firewall, skip)
	}
	for _, ip := range sp.LoadBalancerVIPs {
		if p.c.HasAnyEndpoints {
			g.serviceIPs.ensure(tx, p.element(MapServiceIPs, ip.String(), ext, false))
		}
		if p.usesFirewall {
			g.firewallIPs.ensure(tx, p.element(MapFirewallIPs, ip.String(), "goto "+info.chains.Firewall, false))
		}
	}
	if !p.hasExternal {
		for _, ip := range sp.LoadBalancerVIPs {
			g.noEndpointServices.ensure(tx, p.element(MapNoEndpointServices, ip.String(), p.externalVerdict, true))
		}
	}
	if sp.NodePort == 0 {
		return
	}
	np := strconv.Itoa(sp.NodePort)
	if g.rejectsLocalhost(sp.Protocol) {
		g.localhostNPRejects.ensure(tx, &knftables.Element{Map: MapLocalhostNodePortReject, Key: []string{info.proto, np},
			Value: []string{"goto " + LocalhostNodePortRejectChain(info.proto)}})
	}
	if p.c.HasAnyEndpoints {
		g.serviceNodePorts.ensure(tx, &knftables.Element{Map: MapServiceNodePorts, Key: []string{info.proto, np}, Value: []string{ext}})
	}
	if !p.hasExternal {
		g.noEndpointNodePorts.ensure(tx, &knftables.Element{Map: MapNoEndpointNodePorts, Key: []string{info.proto, np},
			Value: []string{p.externalVerdict}, Comment: &info.name})
	}
}

func (g *generator) rejectsLocalhost(proto corev1.Protocol) bool {
	for _, p := range g.r.rejectProtocols {
		if p == proto {
			return true
		}
	}
	return false
}

// serviceChains writes the rules of the service port's chains: external, firewall,
// affinity sets, then the cluster/local chains and (affinity) the endpoint chains.
func (g *generator) serviceChains(tx *knftables.Transaction, p *svcPlan) {
	r, sp, ch := g.r, p.sp, &p.info.chains
	if p.usesExternal {
		g.externalChain(tx, p)
	}
	if p.usesFirewall {
		var sources []string
		allowFromNode := false
		for _, cidr := range sp.LoadBalancerSourceRanges {
			if len(sources) > 0 {
				sources = append(sources, ",")
			}
			sources = append(sources, cidr.String())
			if r.nodeIP.IsValid() && cidr.Contains(r.nodeIP) {
				allowFromNode = true
			}
		}
		if allowFromNode {
			for _, ip := range sp.LoadBalancerVIPs {
				sources = append(sources, ",", ip.String())
			}
		}
		tx.Add(&knftables.Rule{Chain: ch.Firewall, Rule: knftables.Concat(r.ipX, "saddr != {", sources, "} drop")})
	}
	if p.affinity {
		for _, ep := range p.c.AllReachable {
			tx.Add(g.affinitySet(PrefixAffinity+p.info.epBase(p.n, ep), sp.StickyMaxAgeSeconds))
		}
	}
	if !p.affinity && r.masq136 {
		if p.usesCluster {
			g.endpointDNATs(tx, p, ch.Cluster, p.c.Cluster)
		}
		if p.usesLocal {
			g.endpointDNATs(tx, p, ch.Local, p.c.Local)
		}
		return
	}
	if p.usesCluster {
		g.endpointJumps(tx, p, ch.Cluster, p.c.Cluster)
	}
	if p.usesLocal {
		g.endpointJumps(tx, p, ch.Local, p.c.Local)
	}
	for _, ep := range p.c.AllReachable {
		base := p.info.epBase(p.n, ep)
		if !r.masq136 {
			tx.Add(&knftables.Rule{Chain: PrefixEndpoint + base, Rule: knftables.Concat(
				r.ipX, "saddr", ep.IPString(), "jump", ChainMarkForMasquerade)})
		}
		if p.affinity {
			tx.Add(&knftables.Rule{Chain: PrefixEndpoint + base, Rule: knftables.Concat(
				"update @"+PrefixAffinity+base, "{", r.ipX, "saddr }")})
		}
		tx.Add(&knftables.Rule{Chain: PrefixEndpoint + base, Rule: knftables.Concat(
			"meta l4proto", p.info.proto, "dnat to", ep.String())})
	}
}

// clusterIPMasquerade returns, up to 1.35, the internal chain's first rule marking
// ClusterIP traffic from outside the cluster (every ClusterIP packet with
// --masquerade-all), or "" (no detector; 1.36+ marks in the services chain). 1.30-1.33
// also match the service port.
func (g *generator) clusterIPMasquerade(p *svcPlan) string {
	r := g.r
	if r.masq136 || (!r.masqAll && r.ifNotLocal == "") {
		return ""
	}
	match := []string{r.ipX, "daddr", p.sp.ClusterIP.String()}
	if !r.preDNAT {
		match = append(match, p.info.proto, "dport", p.info.port)
	}
	if !r.masqAll {
		match = append(match, r.ifNotLocal)
	}
	return knftables.Concat(match, "jump", ChainMarkForMasquerade)
}

// externalChain writes external-…: masquerade and go to the cluster chain
// (externalTrafficPolicy Cluster), or short-circuit pod and host traffic and go to the
// local chain (Local).
func (g *generator) externalChain(tx *knftables.Transaction, p *svcPlan) {
	r, ch := g.r, &p.info.chains
	if !p.sp.ExternalPolicyLocal && !r.masq136 {
		tx.Add(&knftables.Rule{Chain: ch.External, Rule: r.masqRule})
	} else if !p.sp.ExternalPolicyLocal {
		tx.Add(&knftables.Rule{Chain: ch.External, Rule: r.masqRule, Comment: ptr.To("masquerade")})
	} else {
		if r.ifLocal != "" {
			tx.Add(&knftables.Rule{Chain: ch.External, Rule: knftables.Concat(r.ifLocal, "goto", ch.Cluster),
				Comment: ptr.To("short-circuit pod traffic")})
		}
		tx.Add(&knftables.Rule{Chain: ch.External, Rule: knftables.Concat("fib saddr type local", r.masqRule),
			Comment: ptr.To("masquerade local traffic")})
		tx.Add(&knftables.Rule{Chain: ch.External, Rule: knftables.Concat("fib saddr type local goto", ch.Cluster),
			Comment: ptr.To("short-circuit local traffic")})
	}
	if p.hasExternal {
		tx.Add(&knftables.Rule{Chain: ch.External, Rule: "goto " + p.externalPolicyChain})
	}
}

// endpointDNATs writes a service chain without affinity: one DNAT, to the endpoint or
// through a numgen map over the endpoints. The rule text is built in one buffer (this
// is the bulk of a large ruleset).
func (g *generator) endpointDNATs(tx *knftables.Transaction, p *svcPlan, chain string, eps []*proxy.Endpoint) {
	b := append(g.buf[:0], "meta l4proto "...)
	b = append(b, p.info.proto...)
	if len(eps) == 1 {
		b = append(b, " dnat to "...)
		b = append(b, eps[0].String()...)
	} else {
		b = append(b, " dnat "...)
		b = append(b, g.r.ipX...)
		b = append(b, " addr . port to numgen random mod "...)
		b = strconv.AppendInt(b, int64(len(eps)), 10)
		b = append(b, " map { "...)
		for i, ep := range eps {
			if i > 0 {
				b = append(b, " , "...)
			}
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, " : "...)
			b = append(b, ep.IPString()...)
			b = append(b, " . "...)
			b = strconv.AppendInt(b, int64(ep.Port), 10)
		}
		b = append(b, " }"...)
	}
	g.buf = b
	tx.Add(&knftables.Rule{Chain: chain, Rule: string(b)})
}

// endpointJumps writes a service chain that goes through endpoint chains (ClientIP
// affinity, or every service up to 1.35): up to 1.35 the ClusterIP masquerade rule of
// the internal chain, with affinity one rule per endpoint sending a known client to its
// endpoint chain, then a numgen vmap over the chains.
func (g *generator) endpointJumps(tx *knftables.Transaction, p *svcPlan, chain string, eps []*proxy.Endpoint) {
	if chain == p.internalChain && p.hasInternal {
		if m := g.clusterIPMasquerade(p); m != "" {
			tx.Add(&knftables.Rule{Chain: chain, Rule: m})
		}
	}
	if p.affinity {
		for _, ep := range eps {
			base := p.info.epBase(p.n, ep)
			tx.Add(&knftables.Rule{Chain: chain, Rule: knftables.Concat(
				g.r.ipX, "saddr @"+PrefixAffinity+base, "goto", PrefixEndpoint+base)})
		}
	}
	var b strings.Builder
	for i, ep := range eps {
		base := p.info.epBase(p.n, ep)
		if i > 0 {
			b.WriteString(" , ")
		}
		b.WriteString(strconv.Itoa(i))
		b.WriteString(" : goto ")
		b.WriteString(PrefixEndpoint + base)
	}
	tx.Add(&knftables.Rule{Chain: chain, Rule: knftables.Concat(
		"numgen random mod", len(eps), "vmap {", b.String(), "}")})
}
