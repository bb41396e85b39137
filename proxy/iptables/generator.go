package iptables

import (
	"maps"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

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

// line writes one whole line: the parts as they are (they carry their own spaces), then
// the newline. Nothing of the line may have been written with w or q before.
func (l *lineBuf) line(parts ...string) {
	if !l.discard {
		for _, s := range parts {
			l.b = append(l.b, s...)
		}
		l.b = append(l.b, '\n')
	}
	l.lines++
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

// appendBuf appends what o holds (whole lines) to l.
func (l *lineBuf) appendBuf(o *lineBuf) {
	l.b = append(l.b, o.content()...)
	l.lines += o.lines
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
	s := makeSvcInfo(n)
	return &s
}

// lowerProtocol is strings.ToLower of the protocol, without an allocation for the
// three protocols a Service port has.
func lowerProtocol(p corev1.Protocol) string {
	switch p {
	case corev1.ProtocolTCP:
		return "tcp"
	case corev1.ProtocolUDP:
		return "udp"
	case corev1.ProtocolSCTP:
		return "sctp"
	}
	return strings.ToLower(string(p))
}

func makeSvcInfo(n proxy.ServicePortName) svcInfo {
	s := svcInfo{name: n.String(), proto: lowerProtocol(n.Protocol)}
	s.chains = ServiceChains(s.name, s.proto)
	return s
}

// setEndpoints makes epStrs/epNames describe reach (sorted by string), reusing the
// names already computed. The two lists share one allocation, and so do the names
// computed anew.
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
	both := make([]string, 2*len(reach))
	strs, names := both[:len(reach):len(reach)], both[len(reach):]
	// First the names already known; fresh marks the endpoints that need one.
	const nameLen = len(PrefixEndpoint) + 16
	j, fresh := 0, 0
	for i, ep := range reach {
		str := ep.String()
		for j < len(s.epStrs) && s.epStrs[j] < str {
			j++
		}
		strs[i] = str
		if j < len(s.epStrs) && s.epStrs[j] == str {
			names[i] = s.epNames[j]
		} else {
			fresh++
		}
	}
	if fresh > 0 {
		var sb strings.Builder
		sb.Grow(fresh * nameLen)
		var buf [128]byte
		for i, str := range strs {
			if names[i] == "" {
				sb.Write(hash16(buf[:0], PrefixEndpoint, s.name, s.proto, str))
			}
		}
		all := sb.String()
		for i := range names {
			if names[i] == "" {
				names[i], all = all[:nameLen], all[nameLen:]
			}
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

	// entries is the last sync's view, sorted by name (see services); src and seq
	// name the change tracker's view it was built from, labels the node labels then.
	entries []*svcEntry
	spare   []*svcEntry // the list before entries (updateEntries reuses it)
	src     *proxy.ChangeTracker
	seq     uint64
	labels  map[string]string
	// noCache makes every sync compute every service port (tests compare the two);
	// noShard computes them all in the caller's goroutine (servicesSharded).
	noCache, noShard bool
	fresh            int        // the entries this sync computes (rebuildEntries, updateEntries)
	declared         chainKinds // the service port's own chains serviceChains declared (scratch)

	filterChains, filterRules lineBuf
	natChains, natRules       lineBuf
	skipChains, skipRules     lineBuf

	largeCluster bool
	// cleanupDue (set by the caller before services): a large cluster's stale-chain
	// cleanup is due this sync. trackActive: this sync looks for stale chains (every
	// sync below LargeClusterEndpointsThreshold endpoints, else when cleanupDue:
	// staleChains then compares the existing chains with the entries' chains); a
	// partial sync that does not skips the per-service chains of unchanged Services
	// altogether (it writes none of them).
	cleanupDue, trackActive bool
	numEndpoints            int
	out                     []byte
	sepNames                []string // scratch for endpointRules
	// shards are the generators that share a large sync's service ports with this
	// one (servicesSharded), kept for their buffers; sharded counts the syncs that
	// did (tests).
	shards  []*generator
	sharded int
}

func newGenerator(r *resolved) *generator {
	return &generator{
		r:          r,
		probs:      make(probabilities, 0, 1001),
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
	for _, c := range []string{ChainServices, ChainExternalServices, ChainForward} {
		g.filterChains.chain(c)
	}
	if r.layout.healthCheckAccept {
		g.filterChains.chain(ChainNodePorts)
	}
	if r.layout.proxyFirewall {
		g.filterChains.chain(ChainProxyFirewall)
	}
	for _, c := range []string{ChainServices, ChainNodePorts, ChainPostrouting, ChainMarkMasq} {
		g.natChains.chain(c)
	}
	nr := &g.natRules
	if r.layout.clearMark {
		nr.w("-A", ChainPostrouting, "-m", "mark", "!", "--mark", r.markMask, "-j", "RETURN")
		nr.end()
		nr.w("-A", ChainPostrouting, "-j", "MARK", "--xor-mark", r.mark)
		nr.end()
		nr.w("-A", ChainPostrouting, "-m", "comment", "--comment")
		nr.q("kubernetes service traffic requiring SNAT")
	} else {
		// Before 1.19 the mark stays on the masqueraded packet.
		nr.w("-A", ChainPostrouting, "-m", "comment", "--comment")
		nr.q("kubernetes service traffic requiring SNAT")
		nr.w("-m", "mark", "--mark", r.markMask)
	}
	nr.w("-j", "MASQUERADE")
	if r.randomFully {
		nr.w("--random-fully")
	}
	nr.end()
	nr.w("-A", ChainMarkMasq, "-j", "MARK", "--or-mark", r.mark)
	nr.end()

	if r.layout.kubeletChains {
		g.kubeletChains()
	} else if !r.isIPv6 && r.localhostNP {
		g.filterChains.chain(ChainKubeletFirewall)
		fr := &g.filterRules
		fr.w("-A", ChainKubeletFirewall, "-m", "comment", "--comment")
		fr.q("block incoming localnet connections")
		fr.w("-d", "127.0.0.0/8", "!", "-s", "127.0.0.0/8", "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT", "-j", "DROP")
		fr.end()
	}
}

// svcEntry is one service port of the last sync's view, in the generator's sorted
// list: its svcInfo, its endpoint count, and what its rules were the last time they
// were computed: the lines it wrote into the shared chains (nat: KUBE-SERVICES,
// KUBE-NODEPORTS; filter: KUBE-SERVICES, KUBE-EXTERNAL-SERVICES, KUBE-NODEPORTS,
// KUBE-PROXY-FIREWALL) and the per-service chains it declared (the kinds of its own
// chains, and a KUBE-SEP chain for each of info.epNames). These depend only on
// the service port, its endpoints and the node (resolved, fixed for a generator), so
// a partial sync reuses them for every Service the change tracker reports unchanged.
type svcEntry struct {
	name   proxy.ServicePortName
	info   *svcInfo
	numEps int
	fresh  bool // to be computed this sync
	nat    []byte
	filter []byte
	kinds  chainKinds
}

// chainKinds are the service port's own chains (svcInfo.chains) a sync declared, one
// bit each; its KUBE-SEP chains are always those of svcInfo.epNames.
type chainKinds uint8

const (
	kindEndpoint chainKinds = 0 // a KUBE-SEP chain: not a bit
	kindCluster  chainKinds = 1 << iota
	kindLocal
	kindExternal
	kindFirewall
	kindLegacyExternal
)

// declaredChains calls f with each chain the entry declared when it was last computed.
func (e *svcEntry) declaredChains(f func(string)) {
	ch := &e.info.chains
	for _, k := range [...]struct {
		kind chainKinds
		name string
	}{{kindCluster, ch.Cluster}, {kindLocal, ch.Local}, {kindExternal, ch.External}, {kindFirewall, ch.Firewall}, {kindLegacyExternal, ch.LegacyExternal}} {
		if e.kinds&k.kind != 0 {
			f(k.name)
		}
	}
	for _, sep := range e.info.epNames {
		f(sep)
	}
}

// services writes every service port's rules. In a partial sync (full false) the
// per-service chains of Services that did not change are not written.
//
// A partial sync that directly follows the generator's previous sync in the change
// tracker's history (proxy.SyncState.Source) computes only the service ports of the
// Services the tracker reports changed; every other service port's shared-chain lines
// are copied from its entry. A full sync, a Render, a sync after one the generator did
// not see (an error before generation) or after the node's labels changed, and every
// sync with noCache set computes every service port (the reference path the property
// tests compare against).
func (g *generator) services(st *proxy.SyncState, full bool) {
	src, seq := st.Source()
	incremental := !full && !g.noCache && src != nil && src == g.src && seq == g.seq+1 &&
		maps.Equal(g.labels, g.r.nodeLabels)
	if incremental {
		g.updateEntries(st)
	} else {
		g.rebuildEntries(st)
	}
	g.src, g.seq = src, seq
	g.labels = maps.Clone(g.r.nodeLabels)
	g.reserve()

	if n := g.shardCount(); n > 1 {
		g.servicesSharded(st, full, n)
		return
	}
	for _, e := range g.entries {
		g.entry(st, e, full)
	}
}

// entry writes one service port's rules into the generator's buffers: a fresh entry
// computed, another copied.
func (g *generator) entry(st *proxy.SyncState, e *svcEntry, full bool) {
	nr, fr := &g.natRules, &g.filterRules
	if !e.fresh {
		nr.b = append(nr.b, e.nat...)
		fr.b = append(fr.b, e.filter...)
		return
	}
	e.fresh = false
	name, info := e.name, e.info
	sp := st.Services[name]
	c := proxy.CategorizeEndpoints(st.Endpoints[name], sp, g.r.nodeName, g.r.nodeLabels)
	if sp.InternalPolicyLocal && !g.r.layout.svlChain {
		sp, c = g.legacyInternalPolicy(st.Endpoints[name], sp, c)
	}
	info.setEndpoints(c.AllReachable)
	p := planService(info, sp, c)
	g.planRelease(&p)

	// The rules of the shared chains, in kube-proxy's order.
	n0, f0 := len(nr.b), len(fr.b)
	g.clusterIPRule(&p)
	g.externalIPRules(&p)
	g.loadBalancerRules(&p)
	g.nodePortRules(&p)
	g.healthCheckRule(&p)
	e.nat = append(e.nat[:0], nr.b[n0:]...)
	e.filter = append(e.filter[:0], fr.b[f0:]...)

	// The per-service chains: not written for unchanged Services in a partial
	// sync (computed only to note the chains they declare, for the stale-chain
	// cleanup now or later).
	nc, pr := &g.natChains, nr
	if !full && !st.Changed(name.NamespacedName) {
		nc, pr = &g.skipChains, &g.skipRules
	}
	g.declared = 0
	g.serviceChains(nc, pr, &p)
	e.kinds = g.declared
}

// shardMinFresh is the least number of service ports to compute that other
// goroutines share (a first sync of a large cluster). A variable for tests.
var shardMinFresh = 4096

// shardCount returns the number of goroutines to share this sync's service ports
// among: one but for a sync that computes many on a machine with more than one CPU.
func (g *generator) shardCount() int {
	procs := runtime.GOMAXPROCS(0)
	if procs < 2 || g.noShard || g.fresh < shardMinFresh {
		return 1
	}
	return min(procs, 8, g.fresh/max(shardMinFresh/2, 1))
}

// servicesSharded writes the entries as entry does, n goroutines each taking a run of
// them into buffers of its own (a shard generator's), appended in order: the same
// bytes. Everything a service port's rules depend on is its entry's, the sync state
// (read only) and the node's resolved configuration (read only); the scratch
// (declared, sepNames, probs) is each shard's.
func (g *generator) servicesSharded(st *proxy.SyncState, full bool, n int) {
	g.sharded++
	for len(g.shards) < n-1 {
		g.shards = append(g.shards, &generator{skipChains: lineBuf{discard: true}, skipRules: lineBuf{discard: true}})
	}
	per := (len(g.entries) + n - 1) / n
	var wg sync.WaitGroup
	for i, sh := range g.shards[:n-1] {
		sh.r, sh.largeCluster, sh.trackActive = g.r, g.largeCluster, g.trackActive
		if len(sh.probs) < len(g.probs) {
			sh.probs = slices.Clone(g.probs)
		}
		for _, b := range []*lineBuf{&sh.filterChains, &sh.filterRules, &sh.natChains, &sh.natRules, &sh.skipChains, &sh.skipRules} {
			b.reset()
		}
		entries := g.entries[min((i+1)*per, len(g.entries)):min((i+2)*per, len(g.entries))]
		// Room for the run's rules as reserve sizes the whole (no growth by doubling).
		eps := 0
		for _, e := range entries {
			eps += e.numEps
		}
		sh.natRules.b = slices.Grow(sh.natRules.b, 300*eps+600*len(entries))
		sh.natChains.b = slices.Grow(sh.natChains.b, 36*(eps+2*len(entries)))
		sh.filterRules.b = slices.Grow(sh.filterRules.b, 64*len(entries))
		wg.Go(func() {
			for _, e := range entries {
				sh.entry(st, e, full)
			}
		})
	}
	for _, e := range g.entries[:min(per, len(g.entries))] {
		g.entry(st, e, full)
	}
	wg.Wait()
	for _, sh := range g.shards[:n-1] {
		g.filterChains.appendBuf(&sh.filterChains)
		g.filterRules.appendBuf(&sh.filterRules)
		g.natChains.appendBuf(&sh.natChains)
		g.natRules.appendBuf(&sh.natRules)
		g.skipChains.appendBuf(&sh.skipChains)
		g.skipRules.appendBuf(&sh.skipRules)
	}
}

// rebuildEntries makes every service port of the view a fresh entry, in
// ServicePortName order, keeping the entries (their svcInfo, KUBE-SEP names and
// buffers) of the ports the previous list had.
func (g *generator) rebuildEntries(st *proxy.SyncState) {
	names := st.Services.SortedNames()
	old := g.entries
	out := slices.Grow(g.spare[:0], len(names))
	clear(out[:cap(out)])
	// The ports the previous list does not have get their entry and svcInfo from one
	// slab, counted first (a first sync: one allocation instead of 20,000).
	type newEntry struct {
		e    svcEntry
		info svcInfo
	}
	var slab []newEntry
	for pass := 0; pass < 2; pass++ {
		j, n := 0, 0
		for _, name := range names {
			for j < len(old) && old[j].name.Less(name) {
				j++
			}
			if j < len(old) && old[j].name == name {
				if pass == 1 {
					out = append(out, old[j])
				}
				continue
			}
			if pass == 1 {
				ne := &slab[n]
				ne.info = makeSvcInfo(name)
				ne.e = svcEntry{name: name, info: &ne.info}
				out = append(out, &ne.e)
			}
			n++
		}
		if pass == 0 {
			slab = make([]newEntry, n)
		}
	}
	for _, e := range out {
		e.numEps, e.fresh = len(st.Endpoints[e.name]), true
	}
	g.entries, g.spare, g.fresh = out, old, len(out)
}

// updateEntries replaces the entries of the Services the change tracker reports
// changed (service ports or endpoints) by fresh ones for their current ports; the
// entries of each Service are contiguous in the sorted list.
func (g *generator) updateEntries(st *proxy.SyncState) {
	changed := make([]types.NamespacedName, 0, len(st.ServicesChanged)+len(st.EndpointsChanged))
	for nn := range st.ServicesChanged {
		changed = append(changed, nn)
	}
	for nn := range st.EndpointsChanged {
		if !st.ServicesChanged[nn] {
			changed = append(changed, nn)
		}
	}
	g.fresh = 0
	if len(changed) == 0 {
		return
	}
	slices.SortFunc(changed, compareNN)
	old := g.entries
	// The list before last is free: build into it.
	out := slices.Grow(g.spare[:0], len(old)+len(changed))
	clear(out[:cap(out)])
	i := 0
	for _, nn := range changed {
		lo := i + sort.Search(len(old)-i, func(k int) bool { return compareNN(old[i+k].name.NamespacedName, nn) >= 0 })
		out = append(out, old[i:lo]...)
		hi := lo
		for hi < len(old) && old[hi].name.NamespacedName == nn {
			hi++
		}
		for _, name := range st.ServicePortsOf(nn) {
			var info *svcInfo
			for _, e := range old[lo:hi] {
				if e.name == name {
					info = e.info
				}
			}
			if info == nil {
				info = newSvcInfo(name)
			}
			out = append(out, &svcEntry{name: name, info: info, numEps: len(st.Endpoints[name]), fresh: true})
			g.fresh++
		}
		i = hi
	}
	g.entries, g.spare = append(out, old[i:]...), old
}

// compareNN orders Services as ServicePortName.Less orders their ports.
func compareNN(a, b types.NamespacedName) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// reserve counts the sync's endpoints (more than LargeClusterEndpointsThreshold drops
// the comments of the endpoint rules) and sizes the buffers for this many rules up
// front (about 300 bytes of rules per endpoint and 600 per service port) instead of
// growing them by copying. The nat rules buffer keeps room in front for everything that
// precedes them in the output (filter section, nat chain lines: about 36 bytes per chain
// and 200 bytes of filter rules per service port), so finish need not copy the rules.
func (g *generator) reserve() {
	total := 0
	for _, e := range g.entries {
		total += e.numEps
	}
	nSvc := len(g.entries)
	g.numEndpoints = total
	g.largeCluster = total > LargeClusterEndpointsThreshold
	g.trackActive = !g.largeCluster || g.cleanupDue
	head := 36*(total+4*nSvc+16) + 200*nSvc + 8192
	est := 300*total + 600*nSvc + 1024
	if nr := &g.natRules; nr.base < head || cap(nr.b)-len(nr.b) < est {
		b := make([]byte, head, head+len(nr.content())+est)
		nr.b, nr.base = append(b, nr.content()...), head
	}
	g.natChains.b = slices.Grow(g.natChains.b, 36*(total+2*nSvc)) // ":KUBE-SEP-<16> - [0:0]\n" is 35 bytes
	g.filterRules.b = slices.Grow(g.filterRules.b, 64*nSvc)
}

// svcPlan is what one service port's rules are written from: its names, its endpoints
// by category, which of its chains exist and where its traffic goes. planService
// derives it; each step of services writes one kind of rule from it.
type svcPlan struct {
	sp   *proxy.ServicePort
	info *svcInfo
	c    proxy.Categorized

	name, proto     string // "ns/svc:port", "tcp"
	port, clusterIP string

	usesClusterChain bool // KUBE-SVC: there are cluster endpoints and a policy uses them
	usesLocalChain   bool // KUBE-SVL: the same for local endpoints
	usesExtChain     bool // KUBE-EXT: there are endpoints and the port is reachable from outside
	usesFW           bool // KUBE-FW: there are endpoints, load-balancer IPs and source ranges

	// internalChain takes cluster IP traffic (KUBE-SVC, or KUBE-SVL for the Local
	// internal policy) when hasInternal; externalPolicyChain is KUBE-EXT's last jump
	// (the same for the external policy) when hasExternal.
	internalChain, externalPolicyChain string
	hasInternal, hasExternal           bool
	// lbChain takes load-balancer IP traffic: KUBE-FW with source ranges, else KUBE-EXT.
	lbChain string
	// extDest is where external destinations go: KUBE-EXT, or before 1.24 KUBE-XLB
	// (eTP=Local) or KUBE-SVC after a KUBE-MARK-MASQ rule (inlineMasq).
	extDest    string
	inlineMasq bool
	usesXLB    bool // KUBE-XLB (before 1.24)
	// extNatDrop: external traffic with no local endpoint is marked by KUBE-MARK-DROP
	// in nat (before 1.25) instead of dropped in filter.
	extNatDrop bool

	// What the filter table does with traffic there is nothing to DNAT it to: REJECT
	// or DROP, and the comment's end saying why; for cluster IP (int) and external
	// (ext) traffic.
	intTarget, intWhy, extTarget, extWhy string
}

// planService derives a service port's plan from its categorized endpoints.
func planService(info *svcInfo, sp *proxy.ServicePort, c proxy.Categorized) svcPlan {
	ch := &info.chains
	p := svcPlan{
		sp: sp, info: info, c: c,
		name: info.name, proto: info.proto,
		port: strconv.Itoa(sp.Port), clusterIP: sp.ClusterIP.String(),
		usesClusterChain: len(c.Cluster) > 0 && sp.UsesClusterEndpoints(),
		usesLocalChain:   len(c.Local) > 0 && sp.UsesLocalEndpoints(),
		usesExtChain:     c.HasAnyEndpoints && sp.ExternallyAccessible(),
		usesFW:           c.HasAnyEndpoints && len(sp.LoadBalancerVIPs) > 0 && len(sp.LoadBalancerSourceRanges) > 0,
	}

	p.internalChain, p.hasInternal = ch.Cluster, c.HasAnyEndpoints
	if sp.InternalPolicyLocal {
		p.internalChain = ch.Local
		if len(c.Local) == 0 {
			p.hasInternal = false
		}
	}
	p.externalPolicyChain, p.hasExternal = ch.Cluster, c.HasAnyEndpoints
	if sp.ExternalPolicyLocal {
		p.externalPolicyChain = ch.Local
		if len(c.Local) == 0 {
			p.hasExternal = false
		}
	}
	p.lbChain = ch.External
	if p.usesFW {
		p.lbChain = ch.Firewall
	}
	p.extDest, p.extNatDrop = ch.External, false

	if !c.HasAnyEndpoints {
		p.intTarget, p.intWhy = "REJECT", " has no endpoints"
		p.extTarget, p.extWhy = p.intTarget, p.intWhy
	} else {
		if !p.hasInternal {
			p.intTarget, p.intWhy = "DROP", " has no local endpoints"
		}
		if !p.hasExternal {
			p.extTarget, p.extWhy = "DROP", " has no local endpoints"
		}
	}
	return p
}

// planRelease adjusts a service port's plan to the node's kube-proxy release
// (generator_legacy.go writes the rules that only older releases have).
func (g *generator) planRelease(p *svcPlan) {
	l, sp, c, ch := &g.r.layout, p.sp, p.c, &p.info.chains
	if !l.proxyFirewall {
		// Every load-balancer IP went through KUBE-FW, ending in KUBE-MARK-DROP.
		p.usesFW = c.HasAnyEndpoints && len(sp.LoadBalancerVIPs) > 0
		if p.usesFW {
			p.lbChain = ch.Firewall
		}
	}
	if !l.dropInFilter && c.HasAnyEndpoints && !p.hasExternal {
		// No local endpoint: KUBE-MARK-DROP in nat, nothing in filter.
		p.extTarget, p.extNatDrop = "", true
	}
	if !l.svlChain && !sp.InternalPolicyLocal {
		p.usesLocalChain = false
	}
	if !l.extChain {
		p.usesExtChain = false
		p.usesXLB = c.HasAnyEndpoints && sp.ExternalPolicyLocal && sp.ExternallyAccessible()
		p.extDest = ch.Cluster
		p.inlineMasq = true
		if sp.ExternalPolicyLocal {
			p.extDest, p.inlineMasq = ch.LegacyExternal, false
		}
		if !p.usesFW {
			p.lbChain = p.extDest
		}
	}
}

// vipRule writes a rule of chain for traffic to dst at the service's port:
//
//	-A CHAIN -m comment --comment "ns/svc:port WHY" -m PROTO -p PROTO -d DST --dport PORT -j TARGET
func (p *svcPlan) vipRule(b *lineBuf, chain, why, dst, target string) {
	b.line("-A ", chain, ` -m comment --comment "`, p.name, why, `" -m `, p.proto, " -p ", p.proto, " -d ", dst, " --dport ", p.port, " -j ", target)
}

// clusterIPRule writes the cluster IP's rule: a jump to the internal-policy chain in
// nat KUBE-SERVICES, or, with no endpoint for that policy, a REJECT or DROP in filter
// KUBE-SERVICES.
func (g *generator) clusterIPRule(p *svcPlan) {
	if p.hasInternal {
		if !g.r.layout.extChain {
			g.clusterIPMasqRule(&g.natRules, p, ChainServices)
		}
		p.vipRule(&g.natRules, ChainServices, " cluster IP", p.clusterIP, p.internalChain)
	} else {
		p.vipRule(&g.filterRules, ChainServices, p.intWhy, p.clusterIP, p.intTarget)
	}
}

// externalIPRules writes each external IP's rules: a jump to KUBE-EXT in nat
// KUBE-SERVICES if the service has endpoints, and a REJECT or DROP in filter
// KUBE-EXTERNAL-SERVICES if external traffic has none to go to.
func (g *generator) externalIPRules(p *svcPlan) {
	for _, ip := range p.sp.ExternalIPs {
		ips := ip.String()
		if p.c.HasAnyEndpoints && !g.r.layout.extChain {
			g.legacyExternalIPRules(p, ips)
		} else if p.c.HasAnyEndpoints {
			p.vipRule(&g.natRules, ChainServices, " external IP", ips, p.extDest)
		}
		if p.extTarget != "" {
			p.vipRule(&g.filterRules, ChainExternalServices, p.extWhy, ips, p.extTarget)
		}
	}
}

// loadBalancerRules writes each load-balancer IP's rules: a jump to KUBE-FW or KUBE-EXT
// in nat KUBE-SERVICES if the service has endpoints, and with source ranges the DROP in
// filter KUBE-PROXY-FIREWALL of what KUBE-FW did not accept; then, if external traffic
// has no endpoint to go to, a REJECT or DROP per IP in filter KUBE-EXTERNAL-SERVICES.
func (g *generator) loadBalancerRules(p *svcPlan) {
	fr := &g.filterRules
	for _, ip := range p.sp.LoadBalancerVIPs {
		ips := ip.String()
		if p.c.HasAnyEndpoints {
			p.vipRule(&g.natRules, ChainServices, " loadbalancer IP", ips, p.lbChain)
		}
		if p.usesFW && g.r.layout.proxyFirewall {
			fr.w("-A", ChainProxyFirewall, "-m", "comment", "--comment")
			fr.q(p.name, " traffic not accepted by ", p.info.chains.Firewall)
			fr.w("-m", p.proto, "-p", p.proto, "-d", ips, "--dport", p.port, "-j", "DROP")
			fr.end()
		}
	}
	if p.extTarget != "" {
		// Before 1.20 these were in KUBE-SERVICES (jumped from INPUT then).
		chain := ChainExternalServices
		if !g.r.layout.externalFromForward {
			chain = ChainServices
		}
		for _, ip := range p.sp.LoadBalancerVIPs {
			p.vipRule(fr, chain, p.extWhy, ip.String(), p.extTarget)
		}
	}
}

// nodePortRules writes the node port's rules: if the service has endpoints, jumps to
// KUBE-EXT in nat KUBE-NODEPORTS (NodePorts are not subject to
// loadBalancerSourceRanges), the first one for localhost with its nfacct counter where
// localhost node ports and nfacct are on; if external traffic has no endpoint to go to,
// a REJECT or DROP of local-destination traffic in filter KUBE-EXTERNAL-SERVICES.
func (g *generator) nodePortRules(p *svcPlan) {
	if p.sp.NodePort == 0 {
		return
	}
	r, nr, fr := g.r, &g.natRules, &g.filterRules
	np, proto, extChain := strconv.Itoa(p.sp.NodePort), p.proto, p.extDest
	if p.c.HasAnyEndpoints {
		g.legacyNodePortMasq(p, np)
		if r.localhostNP && !r.isIPv6 && r.nfacct && r.layout.localhostCounter {
			nr.w("-A", ChainNodePorts, "-m", "comment", "--comment", p.name, "-m", proto, "-p", proto,
				"-d", "127.0.0.0/8", "--dport", np, "-m", "nfacct", "--nfacct-name", NFAcctLocalhostNodePorts, "-j", extChain)
			nr.end()
		}
		nr.w("-A", ChainNodePorts, "-m", "comment", "--comment", p.name, "-m", proto, "-p", proto, "--dport", np, "-j", extChain)
		nr.end()
	}
	if p.extTarget != "" {
		fr.w("-A", ChainExternalServices, "-m", "comment", "--comment")
		fr.q(p.name, p.extWhy)
		fr.w("-m", "addrtype", "--dst-type", "LOCAL", "-m", proto, "-p", proto, "--dport", np, "-j", p.extTarget)
		fr.end()
	}
}

// healthCheckRule accepts the health-check node port in filter KUBE-NODEPORTS, whether
// or not there are local endpoints.
func (g *generator) healthCheckRule(p *svcPlan) {
	if p.sp.HealthCheckNodePort == 0 || !g.r.layout.healthCheckAccept {
		return
	}
	fr := &g.filterRules
	fr.w("-A", ChainNodePorts, "-m", "comment", "--comment")
	fr.q(p.name, " health check node port")
	fr.w("-m", "tcp", "-p", "tcp", "--dport", strconv.Itoa(p.sp.HealthCheckNodePort), "-j", "ACCEPT")
	fr.end()
}

// serviceChains writes the service port's own nat chains, their declarations into nc
// and their rules into nr: the masquerade rule of the internal-policy chain, then
// KUBE-EXT, KUBE-FW, KUBE-SVC, KUBE-SVL and a KUBE-SEP per reachable endpoint.
func (g *generator) serviceChains(nc, nr *lineBuf, p *svcPlan) {
	if p.hasInternal && g.r.layout.extChain {
		g.clusterIPMasqRule(nr, p, p.internalChain)
	}
	if p.usesExtChain {
		g.externalChain(nc, nr, p)
	}
	if p.usesXLB {
		g.legacyExternalChain(nc, nr, p)
	}
	if p.usesFW {
		g.firewallChain(nc, nr, p)
	}
	ch := &p.info.chains
	if p.usesClusterChain {
		g.declare(nc, ch.Cluster, kindCluster)
		g.endpointRules(nr, p.info, p.sp, ch.Cluster, p.c.Cluster)
	}
	if p.usesLocalChain {
		g.declare(nc, ch.Local, kindLocal)
		g.endpointRules(nr, p.info, p.sp, ch.Local, p.c.Local)
	}
	g.endpointChains(nc, nr, p)
}

// declare writes the line declaring a per-service chain and notes that this sync
// writes it (it is not stale: see staleChains). A KUBE-SEP chain (kindEndpoint) needs
// no note: every one of svcInfo.epNames is declared.
func (g *generator) declare(nc *lineBuf, chain string, kind chainKinds) {
	nc.chain(chain)
	g.declared |= kind
}

// clusterIPMasqRule writes the masquerade rule for cluster IP traffic into chain (the
// internal-policy chain; KUBE-SERVICES before 1.24): all of it with masqueradeAll,
// else, with a local-traffic detector, traffic from outside the cluster (it may bounce
// to another node).
func (g *generator) clusterIPMasqRule(nr *lineBuf, p *svcPlan, chain string) {
	r := g.r
	if r.masqAll {
		p.vipRule(nr, chain, " cluster IP", p.clusterIP, ChainMarkMasq)
	} else if r.detector.IsImplemented() {
		nr.w("-A", chain, "-m", "comment", "--comment")
		nr.q(p.name, " cluster IP")
		nr.w("-m", p.proto, "-p", p.proto, "-d", p.clusterIP, "--dport", p.port)
		nr.w(r.ifNotLocal...)
		nr.w("-j", ChainMarkMasq)
		nr.end()
	}
}

// externalChain writes KUBE-EXT: with the Cluster external policy it masquerades all
// traffic; with Local, pod traffic goes to KUBE-SVC (with a local-traffic detector)
// and traffic from the node itself is masqueraded and goes to KUBE-SVC; then, if the
// external policy has endpoints, a jump to its chain.
func (g *generator) externalChain(nc, nr *lineBuf, p *svcPlan) {
	extChain, clusterChain := p.info.chains.External, p.info.chains.Cluster
	g.declare(nc, extChain, kindExternal)
	if !p.sp.ExternalPolicyLocal {
		nr.w("-A", extChain, "-m", "comment", "--comment")
		nr.q("masquerade traffic for ", p.name, " external destinations")
		nr.w("-j", ChainMarkMasq)
		nr.end()
	} else {
		if g.r.detector.IsImplemented() {
			// Pod traffic to an external address is short-circuited to all
			// endpoints, as if it went out to the load balancer and came back.
			nr.w("-A", extChain, "-m", "comment", "--comment")
			nr.q("pod traffic for ", p.name, " external destinations")
			nr.w(g.r.detector.IfLocal()...)
			nr.w("-j", clusterChain)
			nr.end()
		}
		nr.w("-A", extChain, "-m", "comment", "--comment")
		nr.q("masquerade LOCAL traffic for ", p.name, " external destinations")
		nr.w("-m", "addrtype", "--src-type", "LOCAL", "-j", ChainMarkMasq)
		nr.end()
		nr.w("-A", extChain, "-m", "comment", "--comment")
		nr.q("route LOCAL traffic for ", p.name, " external destinations")
		nr.w("-m", "addrtype", "--src-type", "LOCAL", "-j", clusterChain)
		nr.end()
	}
	if p.hasExternal {
		nr.w("-A", extChain, "-j", p.externalPolicyChain)
		nr.end()
	} else if p.extNatDrop {
		g.markDropRule(nr, extChain, p)
	}
}

// firewallChain writes KUBE-FW: a jump to KUBE-EXT per allowed source range, and, when
// a range holds the node's primary IP, from each load-balancer IP (a node reaching its
// own LB VIP often arrives with the VIP as source); then a rule with only a comment:
// what falls through is dropped by KUBE-PROXY-FIREWALL.
func (g *generator) firewallChain(nc, nr *lineBuf, p *svcPlan) {
	fwChain, extChain := p.info.chains.Firewall, p.extDest
	g.declare(nc, fwChain, kindFirewall)
	if p.inlineMasq {
		nr.w("-A", fwChain, "-m", "comment", "--comment")
		nr.q(p.name, " loadbalancer IP")
		nr.w("-j", ChainMarkMasq)
		nr.end()
	}
	if len(p.sp.LoadBalancerSourceRanges) == 0 {
		// Only before 1.25: KUBE-FW for every load-balancer IP.
		nr.w("-A", fwChain, "-m", "comment", "--comment")
		nr.q(p.name, " loadbalancer IP")
		nr.w("-j", extChain)
		nr.end()
	}
	allowFromNode := false
	for _, cidr := range p.sp.LoadBalancerSourceRanges {
		nr.w("-A", fwChain, "-m", "comment", "--comment")
		nr.q(p.name, " loadbalancer IP")
		nr.w("-s", cidr.String(), "-j", extChain)
		nr.end()
		if g.r.primaryIP.IsValid() && cidr.Contains(g.r.primaryIP) {
			allowFromNode = true
		}
	}
	if allowFromNode {
		for _, ip := range p.sp.LoadBalancerVIPs {
			nr.w("-A", fwChain, "-m", "comment", "--comment")
			nr.q(p.name, " loadbalancer IP")
			nr.w("-s", ip.String(), "-j", extChain)
			nr.end()
		}
	}
	if !g.r.layout.proxyFirewall {
		// What no rule took is marked for kubelet's KUBE-FIREWALL to drop.
		nr.w("-A", fwChain, "-m", "comment", "--comment")
		nr.q(p.name, " loadbalancer IP")
		nr.w("-j", ChainMarkDrop)
		nr.end()
		return
	}
	nr.w("-A", fwChain, "-m", "comment", "--comment")
	nr.q("other traffic to ", p.name, " will be dropped by KUBE-PROXY-FIREWALL")
	nr.end()
}

// endpointChains writes a KUBE-SEP chain per reachable endpoint: mark hairpin traffic
// (a pod reaching itself through the Service) for masquerade, then DNAT to the
// endpoint, with ClientIP affinity recording the client in the chain's recent list.
// Each rule is written as one line of pre-joined words (what w would write).
func (g *generator) endpointChains(nc, nr *lineBuf, p *svcPlan) {
	proto := p.proto
	// " -m comment --comment NAME", left out in a large cluster.
	cm, name := " -m comment --comment ", p.name
	if g.largeCluster {
		cm, name = "", ""
	}
	affinity := p.sp.SessionAffinity == corev1.ServiceAffinityClientIP
	for i, ep := range p.c.AllReachable {
		epStr := ep.String()
		sep := p.info.epNames[i]
		g.declare(nc, sep, kindEndpoint)
		nr.line("-A ", sep, cm, name, " -s ", ep.IPString(), " -j "+ChainMarkMasq)
		if affinity {
			nr.line("-A ", sep, cm, name, " -m recent --name ", sep, " --set -m ", proto, " -p ", proto, " -j DNAT --to-destination ", epStr)
		} else {
			nr.line("-A ", sep, cm, name, " -m ", proto, " -p ", proto, " -j DNAT --to-destination ", epStr)
		}
	}
}

// endpointRules writes a KUBE-SVC/KUBE-SVL chain: the ClientIP affinity checks, then
// the probability ladder (1/n, 1/(n-1), ... , the last rule unconditional). Each rule
// is written as one line of pre-joined words (what w and q would write).
func (g *generator) endpointRules(nr *lineBuf, info *svcInfo, sp *proxy.ServicePort, chain string, eps []*proxy.Endpoint) {
	g.sepNames = info.chainsOf(eps, g.sepNames)
	// ` -m comment --comment "NAME -> EP"`, left out in a large cluster.
	cm, name, arrow, cmEnd := ` -m comment --comment "`, info.name, " -> ", `"`
	if g.largeCluster {
		cm, name, arrow, cmEnd = "", "", "", ""
	}
	if sp.SessionAffinity == corev1.ServiceAffinityClientIP {
		seconds := strconv.Itoa(sp.StickyMaxAgeSeconds)
		for i, ep := range eps {
			epStr := ep.String()
			if g.largeCluster {
				epStr = ""
			}
			sep := g.sepNames[i]
			nr.line("-A ", chain, cm, name, arrow, epStr, cmEnd, " -m recent --name ", sep, " --rcheck --seconds ", seconds, " --reap -j ", sep)
		}
	}
	n := len(eps)
	for i, ep := range eps {
		epStr := ep.String()
		if g.largeCluster {
			epStr = ""
		}
		if i < n-1 {
			nr.line("-A ", chain, cm, name, arrow, epStr, cmEnd, " -m statistic --mode random --probability ", g.probs.get(n-i), " -j ", g.sepNames[i])
		} else {
			nr.line("-A ", chain, cm, name, arrow, epStr, cmEnd, " -j ", g.sepNames[i])
		}
	}
}

// staleChains returns the kube-proxy service chains among existing that this sync
// does not write (or would not write, for unchanged Services), sorted: the candidates
// among existing, less every chain an entry of this sync declared. A first sync finds
// no candidate and looks at no entry.
func (g *generator) staleChains(existing []string) []string {
	var cand map[string]bool
	for _, c := range existing {
		// Releases before 1.24 delete their KUBE-XLB chains too; later ones leave them.
		legacy := !g.r.layout.extChain && strings.HasPrefix(c, PrefixLegacyExternal)
		if IsServiceChain(c) || legacy {
			if cand == nil {
				cand = make(map[string]bool, len(existing))
			}
			cand[c] = true
		}
	}
	if len(cand) == 0 {
		return nil
	}
	drop := func(c string) { delete(cand, c) }
	for _, e := range g.entries {
		e.declaredChains(drop)
	}
	if len(cand) == 0 {
		return nil
	}
	out := make([]string, 0, len(cand))
	for c := range cand {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
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
		if r.nfacct && r.layout.invalidCounter {
			fr.w("-m", "nfacct", "--nfacct-name", NFAcctInvalidCTDropped)
		}
		fr.w("-j", "DROP")
		fr.end()
	}
	fr.w("-A", ChainForward, "-m", "comment", "--comment")
	fr.q("kubernetes forwarding rules")
	fr.w("-m", "mark", "--mark", r.markMask, "-j", "ACCEPT")
	fr.end()
	if r.layout.oneCtRule {
		fr.w("-A", ChainForward, "-m", "comment", "--comment")
		fr.q("kubernetes forwarding conntrack rule")
		fr.w("-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT")
		fr.end()
	} else {
		g.legacyForwardRules()
	}

	// Everything before the nat rules: without jumps, written straight into the room
	// left before the rules.
	nat := &g.natRules
	if !jumps {
		n := len("*filter\n") + len(g.filterChains.b) + len(g.filterRules.b) + len("COMMIT\n*nat\n") + len(g.natChains.b)
		if n <= nat.base {
			start := nat.base - n
			hdr := nat.b[start:start]
			hdr = append(hdr, "*filter\n"...)
			hdr = append(hdr, g.filterChains.b...)
			hdr = append(hdr, g.filterRules.b...)
			hdr = append(hdr, "COMMIT\n*nat\n"...)
			hdr = append(hdr, g.natChains.b...)
			if len(hdr) != n {
				panic("iptables: header length")
			}
			nat.b = append(nat.b, "COMMIT\n"...)
			return nat.b[start:]
		}
	}
	hdr := g.out[:0]
	hdr = append(hdr, "*filter\n"...)
	hdr = append(hdr, g.filterChains.b...)
	if jumps {
		if !r.layout.kubeletChains && (r.isIPv6 || !r.localhostNP) {
			hdr = append(hdr, chainLine(ChainKubeletFirewall)+"\n"...)
		}
		hdr = appendJumps(hdr, TableFilter, r.jumpRules())
	}
	hdr = append(hdr, g.filterRules.b...)
	hdr = append(hdr, "COMMIT\n*nat\n"...)
	hdr = append(hdr, g.natChains.b...)
	if jumps {
		hdr = appendJumps(hdr, TableNAT, r.jumpRules())
	}
	g.out = hdr
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
