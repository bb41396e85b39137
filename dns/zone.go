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

func (s *Server) newLookup(ctx context.Context, idx *index, network, qname, zone string) *lookup {
	return &lookup{
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

func (l *lookup) hdr(owner string, rrtype uint16, ttl uint32) mdns.RR_Header {
	return mdns.RR_Header{Name: owner, Rrtype: rrtype, Class: mdns.ClassINET, Ttl: ttl}
}

// soa is the zone's SOA record, as CoreDNS builds it: TTL min(ttl, 300),
// minimum TTL = the configured TTL, serial = the index's.
func (l *lookup) soa() *mdns.SOA {
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
func (l *lookup) records(lname string, qtype uint16) ([]item, error) {
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
	r, err := parseRequest(base)
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

func (l *lookup) findService(r request) ([]item, error) {
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

func (l *lookup) findPod(r request) ([]item, error) {
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
				sub = l.s.newLookup(l.ctx, l.idx, l.network, it.target, zone)
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
	out := make([]mdns.RR, 0, len(names))
	for _, n := range names {
		out = append(out, &mdns.PTR{Hdr: l.hdr(qname, mdns.TypePTR, l.s.ttl), Ptr: n + "." + l.s.primary})
	}
	return out, nil
}
