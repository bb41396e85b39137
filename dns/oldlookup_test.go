package dns

// The lookup as it was before branch dns36 (commit 51c7efc: dns/zone.go, the reply's
// construction in dns/server.go, parseRequest and addrFromReverse in dns/names.go, buildIndex in
// dns/index.go), kept verbatim but for the names (old*) as the oracle of
// TestLookupAsBefore: names built per query with Split and concatenation, records one
// allocation each, PTR targets joined to the zone per query. Do not "fix" this copy.

import (
	"context"
	"net/netip"
	"sort"
	"strings"

	mdns "github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// lookup answers one question inside one of the server's zones, against one
// index snapshot.
type oldLookup struct {
	s         *Server
	idx       *index
	ctx       context.Context
	network   string
	zone      string // lower case FQDN
	zoneAsked string // the zone as the query spelled it
	forward   bool   // zone is a forward (cluster domain) zone, not a reverse one
	truncated bool   // an upstream answer used in this response was truncated
	upstream  bool   // the upstream was asked: the answer is not the index's alone (not cached)
}

func oldNewLookup(s *Server, ctx context.Context, idx *index, network, qname, zone string) *oldLookup {
	return &oldLookup{
		s: s, idx: idx, ctx: ctx, network: network,
		zone:      zone,
		zoneAsked: qname[len(qname)-len(zone):],
		forward:   !isReverseZone(zone),
	}
}

// run computes the answer and additional sections for (qname, qtype). The
// rcode is NOERROR (an empty answer then means NODATA), NXDOMAIN or REFUSED.
func (l *oldLookup) run(qname string, qtype uint16) (rcode int, answer, extra []mdns.RR) {
	lname := strings.ToLower(qname)
	var err error
	switch {
	case qtype == mdns.TypeAXFR || qtype == mdns.TypeIXFR:
		return mdns.RcodeRefused, nil, nil
	case !l.forward && qtype == mdns.TypePTR:
		answer, err = l.ptr(qname, lname)
	case !l.forward && qtype != mdns.TypeSOA && qtype != mdns.TypeNS:
		// A reverse zone holds PTR records only (and its apex SOA and NS).
		err = l.exists(lname)
	default:
		answer, extra, err = l.forwardZone(qname, lname, qtype)
	}
	if err != nil {
		return mdns.RcodeNameError, nil, nil
	}
	return mdns.RcodeSuccess, answer, extra
}

// forwardZone answers in the cluster domain (and at a reverse zone's apex).
func (l *oldLookup) forwardZone(qname, lname string, qtype uint16) (answer, extra []mdns.RR, err error) {
	switch qtype {
	case mdns.TypeA, mdns.TypeAAAA:
		answer, err = l.addresses(qname, lname, qtype, nil)
	case mdns.TypeTXT:
		if l.forward && lname == "dns-version."+l.zone {
			answer = []mdns.RR{&mdns.TXT{Hdr: l.hdr(qname, mdns.TypeTXT, schemaTTL), Txt: []string{SchemaVersion}}}
		} else {
			err = l.exists(lname)
		}
	case mdns.TypeCNAME:
		var items []item
		items, err = l.records(lname, qtype)
		if err == nil && len(items) > 0 && items[0].target != "" {
			answer = []mdns.RR{&mdns.CNAME{Hdr: l.hdr(qname, mdns.TypeCNAME, l.s.ttl), Target: items[0].target}}
		}
	case mdns.TypePTR:
		err = l.exists(lname)
	case mdns.TypeSRV:
		answer, extra, err = l.srv(qname, lname)
	case mdns.TypeSOA:
		if lname == l.zone {
			answer = []mdns.RR{l.soa()}
		} else {
			err = l.exists(lname)
		}
	case mdns.TypeNS:
		if lname == l.zone {
			answer, extra = l.ns()
		} else {
			err = l.exists(lname)
		}
	default:
		err = l.exists(lname)
	}
	return answer, extra, err
}

func (l *oldLookup) hdr(owner string, rrtype uint16, ttl uint32) mdns.RR_Header {
	return mdns.RR_Header{Name: owner, Rrtype: rrtype, Class: mdns.ClassINET, Ttl: ttl}
}

// soa is the zone's SOA record, as CoreDNS builds it: TTL min(ttl, 300),
// minimum TTL = the configured TTL, serial = the index's.
func (l *oldLookup) soa() *mdns.SOA {
	ttl := l.s.ttl
	if ttl > 300 {
		ttl = 300
	}
	return &mdns.SOA{
		Hdr:     l.hdr(l.zoneAsked, mdns.TypeSOA, ttl),
		Ns:      "ns.dns." + l.zoneAsked,
		Mbox:    "hostmaster." + l.zoneAsked,
		Serial:  l.idx.serial,
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  l.s.ttl,
	}
}

// ns is the apex NS record (ns.dns.<zone>) with its glue.
func (l *oldLookup) ns() (answer, extra []mdns.RR) {
	target := "ns.dns." + l.zoneAsked
	answer = []mdns.RR{&mdns.NS{Hdr: l.hdr(l.zoneAsked, mdns.TypeNS, l.s.ttl), Ns: target}}
	for _, ip := range l.idx.nsAddrs {
		extra = append(extra, l.addrRR(target, ip))
	}
	return answer, extra
}

func (l *oldLookup) addrRR(owner string, ip netip.Addr) mdns.RR {
	if ip.Is4() {
		return &mdns.A{Hdr: l.hdr(owner, mdns.TypeA, l.s.ttl), A: ip.AsSlice()}
	}
	return &mdns.AAAA{Hdr: l.hdr(owner, mdns.TypeAAAA, l.s.ttl), AAAA: ip.AsSlice()}
}

// exists reports (as a nil error) whether the lower-case name exists in the
// zone, whatever its types: the NODATA-or-NXDOMAIN decision.
func (l *oldLookup) exists(lname string) error {
	if !l.forward {
		if lname == l.zone {
			return nil
		}
		ip, ok := oldAddrFromReverse(lname)
		if !ok || len(l.idx.ptrs[ip]) == 0 {
			return errNameError
		}
		return nil
	}
	_, err := l.records(lname, mdns.TypeNone)
	return err
}

// records finds what a lower-case name in a forward zone stands for.
// errNameError means the name does not exist; (nil, nil) means it exists
// with nothing to list (apex, svc.<zone>, a namespace, ...).
func (l *oldLookup) records(lname string, qtype uint16) ([]item, error) {
	base := ""
	if lname != l.zone {
		base = strings.TrimSuffix(lname, "."+l.zone)
	}
	switch base {
	case "dns", "dns-version":
		return nil, nil
	case "ns.dns":
		if qtype != mdns.TypeA && qtype != mdns.TypeAAAA {
			return nil, nil
		}
		var items []item
		for _, ip := range l.idx.nsAddrs {
			items = append(items, item{addr: ip, port: noPort, name: lname})
		}
		return items, nil
	}
	r, err := oldParseRequest(base)
	if err != nil {
		return nil, err
	}
	if r.podOrSvc == "" {
		return nil, nil
	}
	if _, ok := l.idx.namespaces[r.namespace]; !ok {
		return nil, errNameError
	}
	if r.podOrSvc == "pod" {
		return l.findPod(r)
	}
	return l.findService(r)
}

func (l *oldLookup) findService(r request) ([]item, error) {
	if r.service == "" {
		return nil, nil // <ns>.svc.<zone>: an existing namespace, NODATA
	}
	rec := l.idx.services[r.namespace+"/"+r.service]
	if rec == nil {
		return nil, errNameError
	}
	svcName := rec.name + "." + rec.namespace + ".svc." + l.zoneAsked

	if rec.kind == kindExternalName {
		if r.endpoint != "" || r.portSet || rec.externalName == "" {
			return nil, errNameError
		}
		return []item{{target: rec.externalName, port: noPort, name: svcName}}, nil
	}

	// Headless services, and endpoint names under any service (CoreDNS).
	if rec.kind == kindHeadless || r.endpoint != "" {
		var items []item
		for _, ep := range rec.endpoints {
			if r.endpoint != "" && r.endpoint != ep.label {
				continue
			}
			for _, p := range ep.ports {
				if !matchPortProto(r.port, r.protocol, p) {
					continue
				}
				items = append(items, item{addr: ep.addr, port: p.port, name: ep.label + "." + svcName})
			}
		}
		if len(items) == 0 {
			return nil, errNameError
		}
		return items, nil
	}

	// A service with cluster IPs: one item per (matching port, cluster IP).
	var items []item
	if len(rec.ports) == 0 {
		if r.portSet {
			return nil, errNameError
		}
		for _, ip := range rec.clusterIPs {
			items = append(items, item{addr: ip, port: noPort, name: svcName})
		}
		return items, nil
	}
	found := false
	for _, p := range rec.ports {
		if !matchPortProto(r.port, r.protocol, p) {
			continue
		}
		found = true
		for _, ip := range rec.clusterIPs {
			items = append(items, item{addr: ip, port: p.port, name: svcName})
		}
	}
	if !found {
		return nil, errNameError
	}
	return items, nil
}

func (l *oldLookup) findPod(r request) ([]item, error) {
	mode := l.s.cfg.Pods
	if mode == PodsDisabled {
		return nil, errNameError
	}
	if r.service == "" {
		return nil, nil // <ns>.pod.<zone>
	}
	if r.endpoint != "" || r.portSet {
		return nil, errNameError
	}
	ip, ok := podIPFromLabel(r.service)
	if !ok {
		return nil, errNameError
	}
	if mode == PodsVerified && !containsString(l.idx.podNS[ip], r.namespace) {
		return nil, errNameError
	}
	return []item{{addr: ip, port: noPort}}, nil
}

// addresses answers A or AAAA for owner (lname is its lower case form),
// chasing ExternalName CNAMEs: inside the server's forward zones itself,
// outside through the upstream (whose answer is appended as it comes, TC
// noted). chain holds the CNAMEs already emitted, to stop loops.
func (l *oldLookup) addresses(owner, lname string, qtype uint16, chain []mdns.RR) ([]mdns.RR, error) {
	items, err := l.records(lname, qtype)
	if err != nil {
		return nil, err
	}
	var out []mdns.RR
	seen := map[netip.Addr]bool{}
	for _, it := range items {
		if it.target == "" {
			if it.addr.Is4() != (qtype == mdns.TypeA) || seen[it.addr] {
				continue
			}
			seen[it.addr] = true
			out = append(out, l.addrRR(owner, it.addr))
			continue
		}
		if strings.EqualFold(it.target, owner) || len(chain) > maxCNAMEChain {
			continue
		}
		cname := &mdns.CNAME{Hdr: l.hdr(owner, mdns.TypeCNAME, l.s.ttl), Target: it.target}
		if duplicateCNAME(cname, chain) {
			continue
		}
		ltarget := strings.ToLower(it.target)
		if zone := l.s.matchZone(ltarget); zone != "" && !isReverseZone(zone) {
			sub := l
			if zone != l.zone {
				sub = oldNewLookup(l.s, l.ctx, l.idx, l.network, it.target, zone)
			}
			next, err := sub.addresses(it.target, ltarget, qtype, append(chain, cname))
			l.truncated = l.truncated || sub.truncated
			l.upstream = l.upstream || sub.upstream
			if err == nil && len(next) > 0 {
				out = append(out, cname)
				out = append(out, next...)
			}
			continue
		}
		if l.s.cfg.Upstream == nil {
			out = append(out, cname)
			continue
		}
		l.upstream = true
		resp, err := l.s.askUpstream(l.ctx, it.target, qtype, l.network)
		if err != nil {
			continue
		}
		if resp.Truncated {
			l.truncated = true
		}
		out = append(out, cname)
		out = append(out, resp.Answer...)
	}
	return out, nil
}

// srv answers SRV: one record per distinct (target, port), weight
// floor(100/n) over all n address results (at least 1), priority 0, and one
// glue address per distinct (target, address). ExternalName results are left
// out (NODATA), as are portless endpoints.
func (l *oldLookup) srv(qname, lname string) (answer, extra []mdns.RR, err error) {
	items, err := l.records(lname, mdns.TypeSRV)
	if err != nil {
		return nil, nil, err
	}
	var addrs []item
	for _, it := range items {
		if it.target == "" {
			addrs = append(addrs, it)
		}
	}
	if len(addrs) == 0 {
		return nil, nil, nil
	}
	w := 100.0 / float64(100*len(addrs)) * 100
	weight := uint16(w)
	if weight == 0 {
		weight = 1
	}
	type srvKey struct {
		target string
		port   int32
	}
	type glueKey struct {
		target string
		addr   netip.Addr
	}
	seenSRV := map[srvKey]bool{}
	seenGlue := map[glueKey]bool{}
	for _, it := range addrs {
		if it.port == noPort {
			continue
		}
		if k := (srvKey{it.name, it.port}); !seenSRV[k] {
			seenSRV[k] = true
			answer = append(answer, &mdns.SRV{
				Hdr:      l.hdr(qname, mdns.TypeSRV, l.s.ttl),
				Priority: 0, Weight: weight, Port: uint16(it.port), Target: it.name,
			})
		}
		if k := (glueKey{it.name, it.addr}); !seenGlue[k] {
			seenGlue[k] = true
			extra = append(extra, l.addrRR(it.name, it.addr))
		}
	}
	return answer, extra, nil
}

// ptr answers PTR in a reverse zone: the service owning the cluster IP, or
// every endpoint name with that ready address; targets are in the primary
// (first) zone.
func (l *oldLookup) ptr(qname, lname string) ([]mdns.RR, error) {
	if lname == l.zone {
		return nil, nil
	}
	ip, ok := oldAddrFromReverse(lname)
	if !ok {
		return nil, errNameError
	}
	names := l.idx.ptrs[ip]
	if len(names) == 0 {
		return nil, errNameError
	}
	out := make([]mdns.RR, 0, len(names))
	for _, n := range names {
		out = append(out, &mdns.PTR{Hdr: l.hdr(qname, mdns.TypePTR, l.s.ttl), Ptr: n + "." + l.s.primary})
	}
	return out, nil
}

func oldHandle(s *Server, idx *index, ctx context.Context, req *mdns.Msg, network string) (*mdns.Msg, bool) {
	if req == nil || req.Response {
		return nil, false
	}
	if req.Opcode != mdns.OpcodeQuery {
		return oldFinish(s, req, errorReply(req, mdns.RcodeNotImplemented), network), false
	}
	if len(req.Question) != 1 || countOPT(req) > 1 {
		return oldFinish(s, req, errorReply(req, mdns.RcodeFormatError), network), false
	}
	if opt := req.IsEdns0(); opt != nil && opt.Version() != 0 {
		m := errorReply(req, mdns.RcodeBadVers)
		m.Question = req.Question
		m.SetEdns0(uint16(ednsSize(req)), false)
		return m, false
	}
	q := req.Question[0]
	if q.Qclass != mdns.ClassINET && q.Qclass != mdns.ClassANY {
		m := new(mdns.Msg)
		m.SetRcode(req, mdns.RcodeRefused)
		return oldFinish(s, req, m, network), false
	}
	if _, ok := mdns.IsDomainName(q.Name); !ok || !mdns.IsFqdn(q.Name) {
		return oldFinish(s, req, errorReply(req, mdns.RcodeFormatError), network), false
	}
	m, fromIndex := oldAnswer(s, idx, ctx, req, network)
	return oldFinish(s, req, m, network), fromIndex
}

func oldFinish(s *Server, req, m *mdns.Msg, network string) *mdns.Msg {
	var extra []mdns.RR
	for _, rr := range m.Extra {
		if rr.Header().Rrtype != mdns.TypeOPT {
			extra = append(extra, rr)
		}
	}
	m.Extra = extra
	if ro := req.IsEdns0(); ro != nil {
		o := &mdns.OPT{Hdr: mdns.RR_Header{Name: ".", Rrtype: mdns.TypeOPT}}
		o.SetUDPSize(uint16(ednsSize(req)))
		if ro.Do() {
			o.SetDo()
		}
		m.Extra = append(m.Extra, o)
	}
	size := mdns.MaxMsgSize
	if network != "tcp" {
		size = ednsSize(req)
	}
	m.Truncate(size)
	m.Compress = true
	return m
}

func oldAnswer(s *Server, idx *index, ctx context.Context, req *mdns.Msg, network string) (*mdns.Msg, bool) {
	q := req.Question[0]
	lname := strings.ToLower(q.Name)
	zone := s.matchZone(lname)
	if zone == "" {
		return s.forward(ctx, req, network), false
	}
	l := oldNewLookup(s, ctx, idx, network, q.Name, zone)
	rcode, answer, extra := l.run(q.Name, q.Qtype)
	if rcode == mdns.RcodeNameError && s.fall[zone] && s.cfg.Upstream != nil && s.recursionAllowed(ctx) {
		return s.forward(ctx, req, network), false
	}
	if rcode == mdns.RcodeNameError && !idx.synced {
		rcode = mdns.RcodeServerFailure
	}
	m := new(mdns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = s.cfg.Upstream != nil && s.recursionAllowed(ctx)
	m.Rcode = rcode
	m.Truncated = l.truncated
	m.Answer = answer
	m.Extra = extra
	if rcode != mdns.RcodeRefused && len(answer) == 0 {
		m.Ns = []mdns.RR{l.soa()}
	}
	return m, !l.upstream
}

func oldParseRequest(base string) (request, error) {
	var r request
	if base == "" || base == "svc" || base == "pod" {
		return r, nil
	}
	segs := strings.Split(base, ".")
	last := len(segs) - 1
	r.podOrSvc = segs[last]
	if r.podOrSvc != "svc" && r.podOrSvc != "pod" {
		return r, errNameError
	}
	last--
	r.namespace = segs[last]
	last--
	if last < 0 {
		return r, nil
	}
	r.service = segs[last]
	last--
	switch last {
	case -1:
	case 0:
		r.endpoint = segs[0]
	case 1:
		r.port = strings.TrimPrefix(segs[0], "_")
		r.protocol = strings.TrimPrefix(segs[1], "_")
		r.portSet = true
	default:
		return r, errNameError
	}
	return r, nil
}

func oldBuildIndex(src Source, endpointPodNames bool, fallbackNS []netip.Addr) *index {
	idx := &index{
		synced:     true,
		namespaces: map[string]struct{}{},
		services:   map[string]*svcRecord{},
		ptrs:       map[netip.Addr][]string{},
		podNS:      map[netip.Addr][]string{},
	}
	if sr, ok := src.(SyncReporter); ok {
		idx.synced = sr.HasSynced()
	}
	for _, ns := range builtinNamespaces {
		idx.namespaces[ns] = struct{}{}
	}
	for _, ns := range src.ListNamespaces() {
		if ns != nil && ns.Name != "" {
			idx.namespaces[strings.ToLower(ns.Name)] = struct{}{}
		}
	}

	svcs := src.ListServices()
	sort.Slice(svcs, func(i, j int) bool {
		if svcs[i].Namespace != svcs[j].Namespace {
			return svcs[i].Namespace < svcs[j].Namespace
		}
		return svcs[i].Name < svcs[j].Name
	})
	var ordered []*svcRecord
	for _, svc := range svcs {
		if svc == nil || svc.Name == "" {
			continue
		}
		rec := newSvcRecord(svc)
		key := svcKey(rec.namespace, rec.name)
		if _, dup := idx.services[key]; dup {
			continue
		}
		idx.services[key] = rec
		ordered = append(ordered, rec)
		idx.namespaces[strings.ToLower(rec.namespace)] = struct{}{}
	}

	// Endpoints: EndpointSlices first; v1 Endpoints only for services with no slice.
	hasSlice := map[string]bool{}
	for _, sl := range src.ListEndpointSlices() {
		if sl == nil {
			continue
		}
		idx.namespaces[strings.ToLower(sl.Namespace)] = struct{}{}
		svcName := sl.Labels[discoveryv1.LabelServiceName]
		if svcName == "" {
			continue
		}
		key := svcKey(sl.Namespace, svcName)
		hasSlice[key] = true
		rec := idx.services[key]
		if rec == nil {
			continue
		}
		rec.endpoints = append(rec.endpoints, sliceEndpoints(sl, endpointPodNames)...)
	}
	if el, ok := src.(EndpointsLister); ok {
		for _, ep := range el.ListEndpoints() {
			if ep == nil {
				continue
			}
			idx.namespaces[strings.ToLower(ep.Namespace)] = struct{}{}
			key := svcKey(ep.Namespace, ep.Name)
			if hasSlice[key] {
				continue
			}
			if rec := idx.services[key]; rec != nil {
				rec.endpoints = append(rec.endpoints, v1Endpoints(ep, endpointPodNames)...)
			}
		}
	}

	// Reverse records: cluster IPs first (first service in namespace/name
	// order wins), then ready endpoint addresses for IPs that are no cluster IP.
	clusterIP := map[netip.Addr]bool{}
	for _, rec := range ordered {
		if rec.kind != kindClusterIP {
			continue
		}
		for _, ip := range rec.clusterIPs {
			if clusterIP[ip] {
				continue
			}
			clusterIP[ip] = true
			idx.ptrs[ip] = []string{strings.ToLower(rec.name + "." + rec.namespace + ".svc")}
		}
	}
	for _, rec := range ordered {
		for _, ep := range rec.endpoints {
			if clusterIP[ep.addr] {
				continue
			}
			name := ep.label + "." + strings.ToLower(rec.name+"."+rec.namespace) + ".svc"
			if !containsString(idx.ptrs[ep.addr], name) {
				idx.ptrs[ep.addr] = append(idx.ptrs[ep.addr], name)
			}
		}
	}

	for _, pod := range src.ListPods() {
		if pod == nil {
			continue
		}
		ns := strings.ToLower(pod.Namespace)
		idx.namespaces[ns] = struct{}{}
		for _, ip := range podIPs(pod) {
			if !containsString(idx.podNS[ip], ns) {
				idx.podNS[ip] = append(idx.podNS[ip], ns)
			}
		}
	}

	if rec := idx.services[svcKey(dnsServiceNamespace, dnsServiceName)]; rec != nil && len(rec.clusterIPs) > 0 {
		idx.nsAddrs = rec.clusterIPs
	} else {
		idx.nsAddrs = fallbackNS
	}
	return idx
}

func oldAddrFromReverse(name string) (netip.Addr, bool) {
	switch {
	case strings.HasSuffix(name, "."+reverseV4):
		labels := strings.Split(strings.TrimSuffix(name, "."+reverseV4), ".")
		if len(labels) != 4 {
			return netip.Addr{}, false
		}
		ip, err := netip.ParseAddr(labels[3] + "." + labels[2] + "." + labels[1] + "." + labels[0])
		if err != nil {
			return netip.Addr{}, false
		}
		return ip, true
	case strings.HasSuffix(name, "."+reverseV6):
		labels := strings.Split(strings.TrimSuffix(name, "."+reverseV6), ".")
		if len(labels) != 32 {
			return netip.Addr{}, false
		}
		var b [16]byte
		for i, l := range labels {
			if len(l) != 1 {
				return netip.Addr{}, false
			}
			v, ok := hexNibble(l[0])
			if !ok {
				return netip.Addr{}, false
			}
			pos := 31 - i // labels run from the last nibble to the first
			if pos%2 == 0 {
				b[pos/2] |= v << 4
			} else {
				b[pos/2] |= v
			}
		}
		return netip.AddrFrom16(b), true
	}
	return netip.Addr{}, false
}
