package dns

import (
	"context"
	"net/netip"
	"strings"

	mdns "github.com/miekg/dns"
)

// SchemaVersion is the Kubernetes DNS specification version served as the
// dns-version TXT record.
const SchemaVersion = "1.1.0"

// schemaTTL is the fixed TTL of the dns-version TXT record (CoreDNS's).
const schemaTTL = 28800

// maxCNAMEChain bounds ExternalName chasing inside the zone (CoreDNS: 8).
const maxCNAMEChain = 7

// item is one result of a name lookup before it becomes records: an address
// (with the port it was found under) or an ExternalName target.
type item struct {
	addr   netip.Addr
	target string // CNAME target (FQDN) of an ExternalName service; addr is invalid
	port   int32
	name   string // the FQDN the item lives at: SRV target and glue owner
}

// lookup answers one question inside one of the server's zones, against one
// index snapshot.
type lookup struct {
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

func (s *Server) newLookup(ctx context.Context, idx *index, network, qname, zone string) lookup {
	return lookup{
		s: s, idx: idx, ctx: ctx, network: network,
		zone:      zone,
		zoneAsked: qname[len(qname)-len(zone):],
		forward:   !isReverseZone(zone),
	}
}

// run computes the answer and additional sections for (qname, qtype). The
// rcode is NOERROR (an empty answer then means NODATA), NXDOMAIN or REFUSED.
func (l *lookup) run(qname string, qtype uint16) (rcode int, answer, extra []mdns.RR) {
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
func (l *lookup) forwardZone(qname, lname string, qtype uint16) (answer, extra []mdns.RR, err error) {
	switch qtype {
	case mdns.TypeA, mdns.TypeAAAA:
		answer, err = l.addresses(qname, lname, qtype, nil)
		return answer, nil, err
	case mdns.TypeSRV:
		return l.srv(qname, lname)
	}
	return l.otherTypes(qname, lname, qtype)
}

// otherTypes is forwardZone for the types other than A, AAAA and SRV.
func (l *lookup) otherTypes(qname, lname string, qtype uint16) (answer, extra []mdns.RR, err error) {
	switch qtype {
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

func (l *lookup) hdr(owner string, rrtype uint16, ttl uint32) mdns.RR_Header {
	return mdns.RR_Header{Name: owner, Rrtype: rrtype, Class: mdns.ClassINET, Ttl: ttl}
}

// soa is the zone's SOA record, as CoreDNS builds it: TTL min(ttl, 300),
// minimum TTL = the configured TTL, serial = the index's.
func (l *lookup) soa() *mdns.SOA {
	soa := new(mdns.SOA)
	l.fillSOA(soa)
	return soa
}

// fillSOA writes the zone's SOA record into soa (see soa).
func (l *lookup) fillSOA(soa *mdns.SOA) {
	ttl := l.s.ttl
	if ttl > 300 {
		ttl = 300
	}
	ns, mbox := l.s.primaryNS, l.s.primaryMbox
	if l.zoneAsked != l.s.primary {
		ns, mbox = "ns.dns."+l.zoneAsked, "hostmaster."+l.zoneAsked
	}
	*soa = mdns.SOA{
		Hdr:     l.hdr(l.zoneAsked, mdns.TypeSOA, ttl),
		Ns:      ns,
		Mbox:    mbox,
		Serial:  l.idx.serial,
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  l.s.ttl,
	}
}

// ns is the apex NS record (ns.dns.<zone>) with its glue.
func (l *lookup) ns() (answer, extra []mdns.RR) {
	target := "ns.dns." + l.zoneAsked
	answer = []mdns.RR{&mdns.NS{Hdr: l.hdr(l.zoneAsked, mdns.TypeNS, l.s.ttl), Ns: target}}
	for _, ip := range l.idx.nsAddrs {
		extra = append(extra, l.addrRR(target, ip))
	}
	return answer, extra
}

func (l *lookup) addrRR(owner string, ip netip.Addr) mdns.RR {
	if ip.Is4() {
		return &mdns.A{Hdr: l.hdr(owner, mdns.TypeA, l.s.ttl), A: ip.AsSlice()}
	}
	return &mdns.AAAA{Hdr: l.hdr(owner, mdns.TypeAAAA, l.s.ttl), AAAA: ip.AsSlice()}
}

// exists reports (as a nil error) whether the lower-case name exists in the
// zone, whatever its types: the NODATA-or-NXDOMAIN decision.
func (l *lookup) exists(lname string) error {
	if !l.forward {
		if lname == l.zone {
			return nil
		}
		ip, ok := addrFromReverse(lname)
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
//
// It runs on every query below the cluster domain, under miekg/dns's fresh
// goroutine per UDP packet: its frames (and those of the functions that call it)
// are kept small so that the lookup fits the goroutine's stack without growing it
// (TestLookupStackDepth).
func (l *lookup) records(lname string, qtype uint16) ([]item, error) {
	base := ""
	if lname != l.zone {
		base = trimZone(lname, l.zone)
	}
	switch base {
	case "dns", "dns-version":
		return nil, nil
	case "ns.dns":
		return l.nsItems(lname, qtype), nil
	}
	var r request
	if err := parseRequest(base, &r); err != nil {
		return nil, err
	}
	if r.podOrSvc == "" {
		return nil, nil
	}
	if _, ok := l.idx.namespaces[r.namespace]; !ok {
		return nil, errNameError
	}
	if r.podOrSvc == "pod" {
		return l.findPod(&r)
	}
	return l.findService(&r)
}

// trimZone is strings.TrimSuffix(name, "."+zone) without building "."+zone.
func trimZone(name, zone string) string {
	n := len(name) - len(zone) - 1
	if n >= 0 && name[n] == '.' && name[n+1:] == zone {
		return name[:n]
	}
	return name
}

// nsItems are the addresses of ns.dns.<zone>.
func (l *lookup) nsItems(lname string, qtype uint16) []item {
	if qtype != mdns.TypeA && qtype != mdns.TypeAAAA {
		return nil
	}
	var items []item
	for _, ip := range l.idx.nsAddrs {
		items = append(items, item{addr: ip, port: noPort, name: lname})
	}
	return items
}

func (l *lookup) findService(r *request) ([]item, error) {
	if r.service == "" {
		return nil, nil // <ns>.svc.<zone>: an existing namespace, NODATA
	}
	rec := l.idx.services[r.namespace+"/"+r.service]
	if rec == nil {
		return nil, errNameError
	}
	// Names under the cluster domain spelled in lower case are the index's; any
	// other spelling of the zone (or an alias zone) is echoed as asked.
	inPrimary := l.zoneAsked == l.s.primary
	svcName := rec.fqdn
	if !inPrimary {
		svcName = rec.name + "." + rec.namespace + ".svc." + l.zoneAsked
	}

	if rec.kind == kindExternalName {
		if r.endpoint != "" || r.portSet || rec.externalName == "" {
			return nil, errNameError
		}
		return externalNameItem(rec, svcName), nil
	}

	// Headless services, and endpoint names under any service (CoreDNS).
	if rec.kind == kindHeadless || r.endpoint != "" {
		return endpointItems(r, rec, svcName, inPrimary)
	}
	return clusterIPItems(r, rec, svcName)
}

// endpointItems are the items of a headless service's name, or of one of a service's
// endpoint names: one per (matching endpoint, matching port).
func endpointItems(r *request, rec *svcRecord, svcName string, inPrimary bool) ([]item, error) {
	n := 0
	for i := range rec.endpoints {
		ep := &rec.endpoints[i]
		if r.endpoint == "" || r.endpoint == ep.label {
			n += matchingPorts(r, ep.ports)
		}
	}
	if n == 0 {
		return nil, errNameError
	}
	items := make([]item, 0, n)
	for i := range rec.endpoints {
		ep := &rec.endpoints[i]
		if r.endpoint != "" && r.endpoint != ep.label {
			continue
		}
		name := ep.fqdn
		if !inPrimary {
			name = ep.label + "." + svcName
		}
		for _, p := range ep.ports {
			if matchPortProto(r.port, r.protocol, p) {
				items = append(items, item{addr: ep.addr, port: p.port, name: name})
			}
		}
	}
	return items, nil
}

// clusterIPItems are the items of a service with cluster IPs: one per (matching
// port, cluster IP).
func clusterIPItems(r *request, rec *svcRecord, svcName string) ([]item, error) {
	if len(rec.ports) == 0 {
		if r.portSet {
			return nil, errNameError
		}
		items := make([]item, 0, len(rec.clusterIPs))
		for _, ip := range rec.clusterIPs {
			items = append(items, item{addr: ip, port: noPort, name: svcName})
		}
		return items, nil
	}
	n := matchingPorts(r, rec.ports)
	if n == 0 {
		return nil, errNameError
	}
	items := make([]item, 0, n*len(rec.clusterIPs))
	for _, p := range rec.ports {
		if matchPortProto(r.port, r.protocol, p) {
			for _, ip := range rec.clusterIPs {
				items = append(items, item{addr: ip, port: p.port, name: svcName})
			}
		}
	}
	return items, nil
}

// externalNameItem is the one item of an ExternalName service's name.
func externalNameItem(rec *svcRecord, svcName string) []item {
	return []item{{target: rec.externalName, port: noPort, name: svcName}}
}

// matchingPorts counts the ports the request's port and protocol match.
func matchingPorts(r *request, ports []portInfo) int {
	n := 0
	for _, p := range ports {
		if matchPortProto(r.port, r.protocol, p) {
			n++
		}
	}
	return n
}

func (l *lookup) findPod(r *request) ([]item, error) {
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
func (l *lookup) addresses(owner, lname string, qtype uint16, chain []mdns.RR) ([]mdns.RR, error) {
	items, err := l.records(lname, qtype)
	if err != nil {
		return nil, err
	}
	return l.addressRRs(owner, items, qtype, chain), nil
}

// addressRRs is the answer of addresses from the items the name stands for (a
// function of its own so that its frame is not on the stack while records runs).
func (l *lookup) addressRRs(owner string, items []item, qtype uint16, chain []mdns.RR) []mdns.RR {
	want4 := qtype == mdns.TypeA
	n := 0
	for _, it := range items {
		if it.target != "" || it.addr.Is4() == want4 {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]mdns.RR, 0, n)
	var slab addrSlab
	if want4 {
		slab = newAddrSlab(n, 0)
	} else {
		slab = newAddrSlab(0, n)
	}
	// Each address once (an endpoint is listed once per port): for a few items a
	// look at the earlier ones, for many a set.
	var seen map[netip.Addr]struct{}
	if len(items) > maxLinearDedup {
		seen = make(map[netip.Addr]struct{}, len(items))
	}
	for i, it := range items {
		if it.target != "" {
			out = l.follow(owner, it.target, qtype, chain, out)
			continue
		}
		if it.addr.Is4() != want4 {
			continue
		}
		if seen != nil {
			if _, dup := seen[it.addr]; dup {
				continue
			}
			seen[it.addr] = struct{}{}
		} else if addrBefore(items[:i], it.addr) {
			continue
		}
		out = append(out, slab.rr(owner, l.s.ttl, it.addr))
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// maxLinearDedup is the number of items up to which duplicates are found by looking
// at the earlier items rather than through a map.
const maxLinearDedup = 16

// addrBefore reports whether an address item in items has addr.
func addrBefore(items []item, addr netip.Addr) bool {
	for _, it := range items {
		if it.target == "" && it.addr == addr {
			return true
		}
	}
	return false
}

// follow appends to out the CNAME owner → target of an ExternalName service and
// what the target resolves to (see addresses).
func (l *lookup) follow(owner, target string, qtype uint16, chain, out []mdns.RR) []mdns.RR {
	if strings.EqualFold(target, owner) || len(chain) > maxCNAMEChain {
		return out
	}
	cname := &mdns.CNAME{Hdr: l.hdr(owner, mdns.TypeCNAME, l.s.ttl), Target: target}
	if duplicateCNAME(cname, chain) {
		return out
	}
	ltarget := strings.ToLower(target)
	if zone := l.s.matchZone(ltarget); zone != "" && !isReverseZone(zone) {
		sub := l
		if zone != l.zone {
			other := l.s.newLookup(l.ctx, l.idx, l.network, target, zone)
			sub = &other
		}
		next, err := sub.addresses(target, ltarget, qtype, append(chain, cname))
		l.truncated = l.truncated || sub.truncated
		l.upstream = l.upstream || sub.upstream
		if err == nil && len(next) > 0 {
			out = append(out, cname)
			out = append(out, next...)
		}
		return out
	}
	if l.s.cfg.Upstream == nil {
		return append(out, cname)
	}
	l.upstream = true
	resp, err := l.s.askUpstream(l.ctx, target, qtype, l.network)
	if err != nil {
		return out
	}
	if resp.Truncated {
		l.truncated = true
	}
	out = append(out, cname)
	return append(out, resp.Answer...)
}

// addrSlab hands out the A and AAAA records of one answer from two allocations (one
// per family, each record beside the bytes of its address) rather than two per record.
type addrSlab struct {
	a    []aRec
	aaaa []aaaaRec
}

type aRec struct {
	rr mdns.A
	ip [4]byte
}

type aaaaRec struct {
	rr mdns.AAAA
	ip [16]byte
}

// newAddrSlab makes room for n4 A and n6 AAAA records (more still work: a full slab
// grows, and records handed out before stay valid).
func newAddrSlab(n4, n6 int) addrSlab {
	var sl addrSlab
	if n4 > 0 {
		sl.a = make([]aRec, 0, n4)
	}
	if n6 > 0 {
		sl.aaaa = make([]aaaaRec, 0, n6)
	}
	return sl
}

// rr is the A or AAAA record owner → ip, as addrRR builds it.
func (sl *addrSlab) rr(owner string, ttl uint32, ip netip.Addr) mdns.RR {
	if ip.Is4() {
		sl.a = append(sl.a, aRec{ip: ip.As4()})
		r := &sl.a[len(sl.a)-1]
		r.rr = mdns.A{Hdr: mdns.RR_Header{Name: owner, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: ttl}, A: r.ip[:]}
		return &r.rr
	}
	sl.aaaa = append(sl.aaaa, aaaaRec{ip: ip.As16()})
	r := &sl.aaaa[len(sl.aaaa)-1]
	r.rr = mdns.AAAA{Hdr: mdns.RR_Header{Name: owner, Rrtype: mdns.TypeAAAA, Class: mdns.ClassINET, Ttl: ttl}, AAAA: r.ip[:]}
	return &r.rr
}

func duplicateCNAME(c *mdns.CNAME, chain []mdns.RR) bool {
	for _, rr := range chain {
		if p, ok := rr.(*mdns.CNAME); ok && strings.EqualFold(p.Hdr.Name, c.Hdr.Name) && strings.EqualFold(p.Target, c.Target) {
			return true
		}
	}
	return false
}

// srv answers SRV: one record per distinct (target, port), weight
// floor(100/n) over all n address results (at least 1), priority 0, and one
// glue address per distinct (target, address). ExternalName results are left
// out (NODATA), as are portless endpoints.
func (l *lookup) srv(qname, lname string) (answer, extra []mdns.RR, err error) {
	items, err := l.records(lname, mdns.TypeSRV)
	if err != nil {
		return nil, nil, err
	}
	answer, extra = l.srvRRs(qname, items)
	return answer, extra, nil
}

// srvRRs is the answer and glue of srv from the items the name stands for.
func (l *lookup) srvRRs(qname string, items []item) (answer, extra []mdns.RR) {
	nAddr, n4, n6 := 0, 0, 0
	for _, it := range items {
		switch {
		case it.target != "":
		case it.port == noPort:
			nAddr++
		case it.addr.Is4():
			nAddr++
			n4++
		default:
			nAddr++
			n6++
		}
	}
	if n4+n6 == 0 {
		return nil, nil
	}
	w := 100.0 / float64(100*nAddr) * 100
	weight := uint16(w)
	if weight == 0 {
		weight = 1
	}
	srvs := make([]mdns.SRV, 0, n4+n6)
	answer = make([]mdns.RR, 0, n4+n6)
	extra = make([]mdns.RR, 0, n4+n6)
	glue := newAddrSlab(n4, n6)
	var seen *srvSeen
	if n4+n6 > maxLinearDedup {
		seen = newSRVSeen(n4 + n6)
	}
	for i, it := range items {
		if it.target != "" || it.port == noPort {
			continue
		}
		if !seen.srvBefore(items[:i], it) {
			srvs = append(srvs, mdns.SRV{
				Hdr:      l.hdr(qname, mdns.TypeSRV, l.s.ttl),
				Priority: 0, Weight: weight, Port: uint16(it.port), Target: it.name,
			})
			answer = append(answer, &srvs[len(srvs)-1])
		}
		if !seen.glueBefore(items[:i], it) {
			extra = append(extra, glue.rr(it.name, l.s.ttl, it.addr))
		}
	}
	return answer, extra
}

// srvSeen finds the SRV records and glue already given when there are many items;
// a nil *srvSeen looks at the earlier items instead.
type srvSeen struct {
	srv  map[srvKey]struct{}
	glue map[glueKey]struct{}
}

type srvKey struct {
	target string
	port   int32
}

type glueKey struct {
	target string
	addr   netip.Addr
}

func newSRVSeen(n int) *srvSeen {
	return &srvSeen{srv: make(map[srvKey]struct{}, n), glue: make(map[glueKey]struct{}, n)}
}

// srvBefore reports whether the SRV record of it (its target and port) was given for
// an earlier item (before: the items before it), and notes it.
func (s *srvSeen) srvBefore(before []item, it item) bool {
	if s != nil {
		k := srvKey{it.name, it.port}
		if _, ok := s.srv[k]; ok {
			return true
		}
		s.srv[k] = struct{}{}
		return false
	}
	for _, b := range before {
		if b.target == "" && b.port != noPort && b.port == it.port && b.name == it.name {
			return true
		}
	}
	return false
}

// glueBefore is srvBefore for the glue record (target, address).
func (s *srvSeen) glueBefore(before []item, it item) bool {
	if s != nil {
		k := glueKey{it.name, it.addr}
		if _, ok := s.glue[k]; ok {
			return true
		}
		s.glue[k] = struct{}{}
		return false
	}
	for _, b := range before {
		if b.target == "" && b.port != noPort && b.addr == it.addr && b.name == it.name {
			return true
		}
	}
	return false
}

// ptr answers PTR in a reverse zone: the service owning the cluster IP, or
// every endpoint name with that ready address; targets are in the primary
// (first) zone.
func (l *lookup) ptr(qname, lname string) ([]mdns.RR, error) {
	if lname == l.zone {
		return nil, nil
	}
	ip, ok := addrFromReverse(lname)
	if !ok {
		return nil, errNameError
	}
	names := l.idx.ptrs[ip]
	if len(names) == 0 {
		return nil, errNameError
	}
	out := make([]mdns.RR, len(names))
	ptrs := make([]mdns.PTR, len(names))
	for i, n := range names {
		ptrs[i] = mdns.PTR{Hdr: l.hdr(qname, mdns.TypePTR, l.s.ttl), Ptr: n} // n: an FQDN in the primary zone
		out[i] = &ptrs[i]
	}
	return out, nil
}
