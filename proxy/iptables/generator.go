package iptables

import (
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/proxy"
)

// lineBuf accumulates iptables-restore lines the way kube-proxy's LineBuffer does:
// words joined by single spaces, one rule per line. A discarding buffer only counts
// lines (kube-proxy computes the chains of unchanged services in a partial sync and
// throws them away).
type lineBuf struct {
	b       []byte
	base    int // b[:base] is reserved space before the content (see finish)
	lines   int
	mid     bool
	discard bool
}

func (l *lineBuf) reset() { l.b, l.lines, l.mid = l.b[:l.base], 0, false }

// content returns what was written.
func (l *lineBuf) content() []byte { return l.b[l.base:] }

// w appends words.
func (l *lineBuf) w(words ...string) {
	if l.discard {
		return
	}
	for _, s := range words {
		if l.mid {
			l.b = append(l.b, ' ')
		}
		l.b = append(l.b, s...)
		l.mid = true
	}
}

// q appends one double-quoted word made of the parts (a multi-word comment).
func (l *lineBuf) q(parts ...string) {
	if l.discard {
		return
	}
	if l.mid {
		l.b = append(l.b, ' ')
	}
	l.b = append(l.b, '"')
	for _, s := range parts {
		l.b = append(l.b, s...)
	}
	l.b = append(l.b, '"')
	l.mid = true
}

// chain writes the line declaring a chain, ":CHAIN - [0:0]".
func (l *lineBuf) chain(name string) {
	if !l.discard {
		l.b = append(l.b, ':')
		l.b = append(l.b, name...)
		l.b = append(l.b, " - [0:0]\n"...)
	}
	l.lines++
}

// end finishes the line.
func (l *lineBuf) end() {
	if !l.discard {
		l.b = append(l.b, '\n')
	}
	l.mid = false
	l.lines++
}

// svcInfo holds what the generator derives once per service port and reuses across
// syncs: kube-proxy's servicePortInfo and the KUBE-SEP names of the endpoints it had
// chains for last time (sorted by endpoint string, as endpoint lists are).
type svcInfo struct {
	name    string // "ns/svc:port"
	proto   string // "tcp"
	chains  ServiceChainNames
	epStrs  []string // "ip:port", sorted
	epNames []string // KUBE-SEP-... of epStrs[i]
}

func newSvcInfo(n proxy.ServicePortName) *svcInfo {
	s := &svcInfo{name: n.String(), proto: strings.ToLower(string(n.Protocol))}
	s.chains = ServiceChains(s.name, s.proto)
	return s
}

// setEndpoints makes epStrs/epNames describe reach (sorted by string), reusing the
// names already computed.
func (s *svcInfo) setEndpoints(reach []*proxy.Endpoint) {
	if len(reach) == len(s.epStrs) {
		same := true
		for i, ep := range reach {
			if ep.String() != s.epStrs[i] {
				same = false
				break
			}
		}
		if same {
			return
		}
	}
	strs := make([]string, len(reach))
	names := make([]string, len(reach))
	j := 0
	var buf [128]byte
	for i, ep := range reach {
		str := ep.String()
		for j < len(s.epStrs) && s.epStrs[j] < str {
			j++
		}
		strs[i] = str
		if j < len(s.epStrs) && s.epStrs[j] == str {
			names[i] = s.epNames[j]
		} else {
			names[i] = string(hash16(buf[:0], PrefixEndpoint, s.name, s.proto, str))
		}
	}
	s.epStrs, s.epNames = strs, names
}

// chainsOf returns the KUBE-SEP name of each endpoint of eps, a sorted subset of the
// endpoints last given to setEndpoints, into out.
func (s *svcInfo) chainsOf(eps []*proxy.Endpoint, out []string) []string {
	out = out[:0]
	j := 0
	for _, ep := range eps {
		str := ep.String()
		for j < len(s.epStrs) && s.epStrs[j] != str {
			j++
		}
		if j == len(s.epStrs) {
			panic("iptables: endpoint " + str + " of " + s.name + " has no chain name")
		}
		out = append(out, s.epNames[j])
	}
	return out
}

// generator writes kube-proxy's restore input. One generator serves one Proxier (or one
// Render call); its buffers and caches are reused across syncs.
type generator struct {
	r     *resolved
	probs probabilities
	cache map[proxy.ServicePortName]*svcInfo

	filterChains, filterRules lineBuf
	natChains, natRules       lineBuf
	skipChains, skipRules     lineBuf

	active       map[string]bool // nat chains this sync writes or would write
	largeCluster bool
	numEndpoints int
	out          []byte
	sepNames     []string // scratch for endpointRules
}

func newGenerator(r *resolved) *generator {
	return &generator{
		r:          r,
		probs:      make(probabilities, 0, 1001),
		cache:      map[proxy.ServicePortName]*svcInfo{},
		skipChains: lineBuf{discard: true},
		skipRules:  lineBuf{discard: true},
	}
}

// begin resets the buffers and writes the top-level chains and fixed rules.
func (g *generator) begin() {
	r := g.r
	for _, b := range []*lineBuf{&g.filterChains, &g.filterRules, &g.natChains, &g.natRules, &g.skipChains, &g.skipRules} {
		b.reset()
	}
	for _, c := range []string{ChainServices, ChainExternalServices, ChainForward, ChainNodePorts, ChainProxyFirewall} {
		g.filterChains.chain(c)
	}
	for _, c := range []string{ChainServices, ChainNodePorts, ChainPostrouting, ChainMarkMasq} {
		g.natChains.chain(c)
	}
	nr := &g.natRules
	nr.w("-A", ChainPostrouting, "-m", "mark", "!", "--mark", r.markMask, "-j", "RETURN")
	nr.end()
	nr.w("-A", ChainPostrouting, "-j", "MARK", "--xor-mark", r.mark)
	nr.end()
	nr.w("-A", ChainPostrouting, "-m", "comment", "--comment")
	nr.q("kubernetes service traffic requiring SNAT")
	nr.w("-j", "MASQUERADE")
	if r.randomFully {
		nr.w("--random-fully")
	}
	nr.end()
	nr.w("-A", ChainMarkMasq, "-j", "MARK", "--or-mark", r.mark)
	nr.end()

	if !r.isIPv6 && r.localhostNP {
		g.filterChains.chain(ChainKubeletFirewall)
		fr := &g.filterRules
		fr.w("-A", ChainKubeletFirewall, "-m", "comment", "--comment")
		fr.q("block incoming localnet connections")
		fr.w("-d", "127.0.0.0/8", "!", "-s", "127.0.0.0/8", "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT", "-j", "DROP")
		fr.end()
	}
}

// services writes every service port's rules. In a partial sync (full false) the
// per-service chains of Services that did not change are computed but not written.
func (g *generator) services(st *proxy.SyncState, full bool) {
	r := g.r
	names := st.Services.SortedNames()

	total := 0
	for _, n := range names {
		total += len(st.Endpoints[n])
	}
	g.numEndpoints = total
	g.largeCluster = total > LargeClusterEndpointsThreshold
	// Size the buffers for this many rules up front (about 300 bytes of rules per
	// endpoint and 600 per service port) instead of growing them by copying. The nat
	// rules buffer keeps room in front for everything that precedes them in the
	// output (filter section, nat chain lines: about 36 bytes per chain and 200 bytes
	// of filter rules per service port), so finish need not copy the rules.
	head := 36*(total+4*len(names)+16) + 200*len(names) + 8192
	est := 300*total + 600*len(names) + 1024
	if nr := &g.natRules; nr.base < head || cap(nr.b)-len(nr.b) < est {
		b := make([]byte, head, head+len(nr.content())+est)
		nr.b, nr.base = append(b, nr.content()...), head
	}
	g.natChains.b = slices.Grow(g.natChains.b, 32*(total+2*len(names)))
	g.filterRules.b = slices.Grow(g.filterRules.b, 64*len(names))
	g.active = make(map[string]bool, total+2*len(names))

	next := make(map[proxy.ServicePortName]*svcInfo, len(names))
	fr := &g.filterRules
	for _, name := range names {
		sp := st.Services[name]
		info := g.cache[name]
		if info == nil {
			info = newSvcInfo(name)
		}
		next[name] = info
		eps := st.Endpoints[name]
		c := proxy.CategorizeEndpoints(eps, sp, r.nodeName, r.nodeLabels)
		info.setEndpoints(c.AllReachable)
		proto, svcName := info.proto, info.name
		clusterChain, localChain := info.chains.Cluster, info.chains.Local
		usesClusterChain := len(c.Cluster) > 0 && sp.UsesClusterEndpoints()
		usesLocalChain := len(c.Local) > 0 && sp.UsesLocalEndpoints()

		internalChain, hasInternal := clusterChain, c.HasAnyEndpoints
		if sp.InternalPolicyLocal {
			internalChain = localChain
			if len(c.Local) == 0 {
				hasInternal = false
			}
		}
		externalPolicyChain, hasExternal := clusterChain, c.HasAnyEndpoints
		if sp.ExternalPolicyLocal {
			externalPolicyChain = localChain
			if len(c.Local) == 0 {
				hasExternal = false
			}
		}
		extChain := info.chains.External
		usesExtChain := c.HasAnyEndpoints && sp.ExternallyAccessible()
		lbChain, fwChain := extChain, info.chains.Firewall
		usesFW := c.HasAnyEndpoints && len(sp.LoadBalancerVIPs) > 0 && len(sp.LoadBalancerSourceRanges) > 0
		if usesFW {
			lbChain = fwChain
		}

		// What the filter table does with traffic there is nothing to DNAT it to.
		var intTarget, extTarget, intWhy, extWhy string
		if !c.HasAnyEndpoints {
			intTarget, intWhy = "REJECT", " has no endpoints"
			extTarget, extWhy = intTarget, intWhy
		} else {
			if !hasInternal {
				intTarget, intWhy = "DROP", " has no local endpoints"
			}
			if !hasExternal {
				extTarget, extWhy = "DROP", " has no local endpoints"
			}
		}

		port := strconv.Itoa(sp.Port)
		cip := sp.ClusterIP.String()

		// Cluster IP.
		if hasInternal {
			g.natRules.w("-A", ChainServices, "-m", "comment", "--comment")
			g.natRules.q(svcName, " cluster IP")
			g.natRules.w("-m", proto, "-p", proto, "-d", cip, "--dport", port, "-j", internalChain)
			g.natRules.end()
		} else {
			fr.w("-A", ChainServices, "-m", "comment", "--comment")
			fr.q(svcName, intWhy)
			fr.w("-m", proto, "-p", proto, "-d", cip, "--dport", port, "-j", intTarget)
			fr.end()
		}

		// External IPs.
		for _, ip := range sp.ExternalIPs {
			ips := ip.String()
			if c.HasAnyEndpoints {
				g.natRules.w("-A", ChainServices, "-m", "comment", "--comment")
				g.natRules.q(svcName, " external IP")
				g.natRules.w("-m", proto, "-p", proto, "-d", ips, "--dport", port, "-j", extChain)
				g.natRules.end()
			}
			if !hasExternal {
				fr.w("-A", ChainExternalServices, "-m", "comment", "--comment")
				fr.q(svcName, extWhy)
				fr.w("-m", proto, "-p", proto, "-d", ips, "--dport", port, "-j", extTarget)
				fr.end()
			}
		}

		// LoadBalancer VIPs.
		for _, ip := range sp.LoadBalancerVIPs {
			ips := ip.String()
			if c.HasAnyEndpoints {
				g.natRules.w("-A", ChainServices, "-m", "comment", "--comment")
				g.natRules.q(svcName, " loadbalancer IP")
				g.natRules.w("-m", proto, "-p", proto, "-d", ips, "--dport", port, "-j", lbChain)
				g.natRules.end()
			}
			if usesFW {
				fr.w("-A", ChainProxyFirewall, "-m", "comment", "--comment")
				fr.q(svcName, " traffic not accepted by ", fwChain)
				fr.w("-m", proto, "-p", proto, "-d", ips, "--dport", port, "-j", "DROP")
				fr.end()
			}
		}
		if !hasExternal {
			for _, ip := range sp.LoadBalancerVIPs {
				fr.w("-A", ChainExternalServices, "-m", "comment", "--comment")
				fr.q(svcName, extWhy)
				fr.w("-m", proto, "-p", proto, "-d", ip.String(), "--dport", port, "-j", extTarget)
				fr.end()
			}
		}

		// NodePort.
		if sp.NodePort != 0 {
			np := strconv.Itoa(sp.NodePort)
			if c.HasAnyEndpoints {
				// NodePorts are not subject to loadBalancerSourceRanges.
				if r.localhostNP && !r.isIPv6 && r.nfacct {
					g.natRules.w("-A", ChainNodePorts, "-m", "comment", "--comment", svcName, "-m", proto, "-p", proto,
						"-d", "127.0.0.0/8", "--dport", np, "-m", "nfacct", "--nfacct-name", NFAcctLocalhostNodePorts, "-j", extChain)
					g.natRules.end()
				}
				g.natRules.w("-A", ChainNodePorts, "-m", "comment", "--comment", svcName, "-m", proto, "-p", proto, "--dport", np, "-j", extChain)
				g.natRules.end()
			}
			if !hasExternal {
				fr.w("-A", ChainExternalServices, "-m", "comment", "--comment")
				fr.q(svcName, extWhy)
				fr.w("-m", "addrtype", "--dst-type", "LOCAL", "-m", proto, "-p", proto, "--dport", np, "-j", extTarget)
				fr.end()
			}
		}

		// Health-check node port: accepted whether or not there are local endpoints.
		if sp.HealthCheckNodePort != 0 {
			fr.w("-A", ChainNodePorts, "-m", "comment", "--comment")
			fr.q(svcName, " health check node port")
			fr.w("-m", "tcp", "-p", "tcp", "--dport", strconv.Itoa(sp.HealthCheckNodePort), "-j", "ACCEPT")
			fr.end()
		}

		// The per-service chains: skipped for unchanged Services in a partial sync.
		nc, nr := &g.natChains, &g.natRules
		if !full && !st.Changed(name.NamespacedName) {
			nc, nr = &g.skipChains, &g.skipRules
		}

		if hasInternal {
			if r.masqAll {
				nr.w("-A", internalChain, "-m", "comment", "--comment")
				nr.q(svcName, " cluster IP")
				nr.w("-m", proto, "-p", proto, "-d", cip, "--dport", port, "-j", ChainMarkMasq)
				nr.end()
			} else if r.detector.IsImplemented() {
				// Masquerade off-cluster traffic to the VIP (it may bounce to another node).
				nr.w("-A", internalChain, "-m", "comment", "--comment")
				nr.q(svcName, " cluster IP")
				nr.w("-m", proto, "-p", proto, "-d", cip, "--dport", port)
				nr.w(r.detector.IfNotLocal()...)
				nr.w("-j", ChainMarkMasq)
				nr.end()
			}
		}

		if usesExtChain {
			nc.chain(extChain)
			g.active[extChain] = true
			if !sp.ExternalPolicyLocal {
				nr.w("-A", extChain, "-m", "comment", "--comment")
				nr.q("masquerade traffic for ", svcName, " external destinations")
				nr.w("-j", ChainMarkMasq)
				nr.end()
			} else {
				if r.detector.IsImplemented() {
					// Pod traffic to an external address is short-circuited to all
					// endpoints, as if it went out to the load balancer and came back.
					nr.w("-A", extChain, "-m", "comment", "--comment")
					nr.q("pod traffic for ", svcName, " external destinations")
					nr.w(r.detector.IfLocal()...)
					nr.w("-j", clusterChain)
					nr.end()
				}
				nr.w("-A", extChain, "-m", "comment", "--comment")
				nr.q("masquerade LOCAL traffic for ", svcName, " external destinations")
				nr.w("-m", "addrtype", "--src-type", "LOCAL", "-j", ChainMarkMasq)
				nr.end()
				nr.w("-A", extChain, "-m", "comment", "--comment")
				nr.q("route LOCAL traffic for ", svcName, " external destinations")
				nr.w("-m", "addrtype", "--src-type", "LOCAL", "-j", clusterChain)
				nr.end()
			}
			if hasExternal {
				nr.w("-A", extChain, "-j", externalPolicyChain)
				nr.end()
			}
		}

		if usesFW {
			nc.chain(fwChain)
			g.active[fwChain] = true
			allowFromNode := false
			for _, cidr := range sp.LoadBalancerSourceRanges {
				nr.w("-A", fwChain, "-m", "comment", "--comment")
				nr.q(svcName, " loadbalancer IP")
				nr.w("-s", cidr.String(), "-j", extChain)
				nr.end()
				if r.primaryIP.IsValid() && cidr.Contains(r.primaryIP) {
					allowFromNode = true
				}
			}
			// A node reaching its own LB VIP often arrives with the VIP as source.
			if allowFromNode {
				for _, ip := range sp.LoadBalancerVIPs {
					nr.w("-A", fwChain, "-m", "comment", "--comment")
					nr.q(svcName, " loadbalancer IP")
					nr.w("-s", ip.String(), "-j", extChain)
					nr.end()
				}
			}
			nr.w("-A", fwChain, "-m", "comment", "--comment")
			nr.q("other traffic to ", svcName, " will be dropped by KUBE-PROXY-FIREWALL")
			nr.end()
		}

		if usesClusterChain {
			nc.chain(clusterChain)
			g.active[clusterChain] = true
			g.endpointRules(nr, info, sp, clusterChain, c.Cluster)
		}
		if usesLocalChain {
			nc.chain(localChain)
			g.active[localChain] = true
			g.endpointRules(nr, info, sp, localChain, c.Local)
		}

		for i, ep := range c.AllReachable {
			epStr := ep.String()
			sep := info.epNames[i]
			nc.chain(sep)
			g.active[sep] = true
			// Hairpin: a pod reaching itself through the Service is masqueraded.
			nr.w("-A", sep)
			if !g.largeCluster {
				nr.w("-m", "comment", "--comment", svcName)
			}
			nr.w("-s", ep.IPString(), "-j", ChainMarkMasq)
			nr.end()
			nr.w("-A", sep)
			if !g.largeCluster {
				nr.w("-m", "comment", "--comment", svcName)
			}
			if sp.SessionAffinity == corev1.ServiceAffinityClientIP {
				nr.w("-m", "recent", "--name", sep, "--set")
			}
			nr.w("-m", proto, "-p", proto, "-j", "DNAT", "--to-destination", epStr)
			nr.end()
		}
	}
	g.cache = next
}

// endpointRules writes a KUBE-SVC/KUBE-SVL chain: the ClientIP affinity checks, then
// the probability ladder (1/n, 1/(n-1), ... , the last rule unconditional).
func (g *generator) endpointRules(nr *lineBuf, info *svcInfo, sp *proxy.ServicePort, chain string, eps []*proxy.Endpoint) {
	g.sepNames = info.chainsOf(eps, g.sepNames)
	if sp.SessionAffinity == corev1.ServiceAffinityClientIP {
		seconds := strconv.Itoa(sp.StickyMaxAgeSeconds)
		for i, ep := range eps {
			epStr := ep.String()
			sep := g.sepNames[i]
			nr.w("-A", chain)
			if !g.largeCluster {
				nr.w("-m", "comment", "--comment")
				nr.q(info.name, " -> ", epStr)
			}
			nr.w("-m", "recent", "--name", sep, "--rcheck", "--seconds", seconds, "--reap", "-j", sep)
			nr.end()
		}
	}
	n := len(eps)
	for i, ep := range eps {
		epStr := ep.String()
		nr.w("-A", chain)
		if !g.largeCluster {
			nr.w("-m", "comment", "--comment")
			nr.q(info.name, " -> ", epStr)
		}
		if i < n-1 {
			nr.w("-m", "statistic", "--mode", "random", "--probability", g.probs.get(n-i))
		}
		nr.w("-j", g.sepNames[i])
		nr.end()
	}
}

// staleChains returns the kube-proxy service chains among existing that this sync
// does not write (or would not write, for unchanged Services), sorted.
func (g *generator) staleChains(existing []string) []string {
	var out []string
	for _, c := range existing {
		if !g.active[c] && IsServiceChain(c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// deleteChains flushes and deletes chains (a chain line, then -X).
func (g *generator) deleteChains(chains []string) {
	for _, c := range chains {
		g.natChains.chain(c)
		g.natRules.w("-X", c)
		g.natRules.end()
	}
}

// finish writes the rules that follow all services and assembles the restore input.
// With jumps, the hook jump rules are written too (for loading a fresh node).
func (g *generator) finish(jumps bool) []byte {
	r := g.r
	nr, fr := &g.natRules, &g.filterRules
	// The NodePort tail rule must be the last rule of nat KUBE-SERVICES.
	if r.matchAll {
		nr.w("-A", ChainServices, "-m", "comment", "--comment")
		nr.q("kubernetes service nodeports; NOTE: this must be the last rule in this chain")
		nr.w("-m", "addrtype", "--dst-type", "LOCAL")
		if r.isIPv6 {
			nr.w("!", "-d", "::1/128")
		} else if !r.localhostNP {
			nr.w("!", "-d", "127.0.0.0/8")
		}
		nr.w("-j", ChainNodePorts)
		nr.end()
	} else {
		for _, ip := range r.nodePortIPs {
			if ip.IsLoopback() && (r.isIPv6 || !r.localhostNP) {
				continue
			}
			nr.w("-A", ChainServices, "-m", "comment", "--comment")
			nr.q("kubernetes service nodeports; NOTE: this must be the last rule in this chain")
			nr.w("-d", ip.String(), "-j", ChainNodePorts)
			nr.end()
		}
	}

	if !r.tcpLiberal {
		fr.w("-A", ChainForward, "-m", "conntrack", "--ctstate", "INVALID")
		if r.nfacct {
			fr.w("-m", "nfacct", "--nfacct-name", NFAcctInvalidCTDropped)
		}
		fr.w("-j", "DROP")
		fr.end()
	}
	fr.w("-A", ChainForward, "-m", "comment", "--comment")
	fr.q("kubernetes forwarding rules")
	fr.w("-m", "mark", "--mark", r.markMask, "-j", "ACCEPT")
	fr.end()
	fr.w("-A", ChainForward, "-m", "comment", "--comment")
	fr.q("kubernetes forwarding conntrack rule")
	fr.w("-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT")
	fr.end()

	// Everything before the nat rules.
	hdr := g.out[:0]
	hdr = append(hdr, "*filter\n"...)
	hdr = append(hdr, g.filterChains.b...)
	if jumps {
		if r.isIPv6 || !r.localhostNP {
			hdr = append(hdr, chainLine(ChainKubeletFirewall)+"\n"...)
		}
		hdr = appendJumps(hdr, TableFilter)
	}
	hdr = append(hdr, g.filterRules.b...)
	hdr = append(hdr, "COMMIT\n*nat\n"...)
	hdr = append(hdr, g.natChains.b...)
	if jumps {
		hdr = appendJumps(hdr, TableNAT)
	}
	g.out = hdr
	nat := &g.natRules
	if len(hdr) <= nat.base {
		// Put the header in the room left before the rules: no copy of the rules.
		start := nat.base - len(hdr)
		copy(nat.b[start:nat.base], hdr)
		nat.b = append(nat.b, "COMMIT\n"...)
		return nat.b[start:]
	}
	out := make([]byte, 0, len(hdr)+len(nat.content())+8)
	out = append(out, hdr...)
	out = append(out, nat.content()...)
	return append(out, "COMMIT\n"...)
}
