package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"

	mdns "github.com/miekg/dns"
)

// A Go *net.Resolver cannot be given a resolv.conf: it walks the search list
// of this process's /etc/resolv.conf and asks each name in turn over
// connections from its Dial. So the resolver NetResolver returns dials no
// network at all: its connections lead to goAnswerer, which answers each
// question Go sends by running the pod's stub (search-list walk, nameservers,
// transports) on it. Go sends every name with a trailing dot, so the name
// as the program spelled it travels beside the question: GoResolver's lookup
// methods put it in the context (callerName), which Go hands to Dial. A name
// the program gave with a trailing dot is asked once, as is, as glibc does
// (res_nsearch tries an absolute name only as is); a relative name is walked
// through the pod's search list; every other name Go makes up (its
// expansions with this process's own search domains) is answered NXDOMAIN
// without a query, so that the pod's lookups do not depend on the machine the
// simulation runs on. Without the caller's spelling (the embedded
// *net.Resolver used directly, e.g. by a net.Dialer) the name Go sends is
// walked as a relative name and Go's expansions with this process's search
// domains are recognised by their suffix.

// GoResolver is a *net.Resolver that resolves as a pod does (Stub.NetResolver,
// PodResolver.NetResolver). Its lookup methods are net.Resolver's, with the
// name as the caller spelled it carried to the stub, so that an absolute name
// ("my-service.default.svc.cluster.local.") is asked once and a relative one
// walks the search list. The embedded *net.Resolver can be given to code that
// wants one (a net.Dialer's Resolver); it cannot tell the stub whether a name
// had a trailing dot, so it walks every name as a relative one.
type GoResolver struct {
	*net.Resolver
}

// callerName is the name a GoResolver lookup was given, carried in the
// context to goAnswerer.
type callerName struct {
	fqdn     string // the name with one trailing dot, as Go sends it
	absolute bool   // the caller wrote the trailing dot
	reverse  bool   // LookupAddr: Go builds the absolute PTR name itself
}

type callerNameKey struct{}

func withCaller(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, callerNameKey{}, callerName{
		fqdn: strings.TrimSuffix(name, ".") + ".", absolute: strings.HasSuffix(name, "."),
	})
}

// LookupHost is net.Resolver.LookupHost with the caller's spelling kept.
func (r *GoResolver) LookupHost(ctx context.Context, host string) ([]string, error) {
	return r.Resolver.LookupHost(withCaller(ctx, host), host)
}

// LookupIPAddr is net.Resolver.LookupIPAddr with the caller's spelling kept.
func (r *GoResolver) LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error) {
	return r.Resolver.LookupIPAddr(withCaller(ctx, host), host)
}

// LookupIP is net.Resolver.LookupIP with the caller's spelling kept.
func (r *GoResolver) LookupIP(ctx context.Context, network, host string) ([]net.IP, error) {
	return r.Resolver.LookupIP(withCaller(ctx, host), network, host)
}

// LookupNetIP is net.Resolver.LookupNetIP with the caller's spelling kept.
func (r *GoResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return r.Resolver.LookupNetIP(withCaller(ctx, host), network, host)
}

// LookupCNAME is net.Resolver.LookupCNAME with the caller's spelling kept.
func (r *GoResolver) LookupCNAME(ctx context.Context, host string) (string, error) {
	return r.Resolver.LookupCNAME(withCaller(ctx, host), host)
}

// LookupSRV is net.Resolver.LookupSRV with the caller's spelling kept (the
// name asked is _service._proto.name, or name when both are empty, as Go
// builds it).
func (r *GoResolver) LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error) {
	target := name
	if service != "" || proto != "" {
		target = "_" + service + "._" + proto + "." + name
	}
	return r.Resolver.LookupSRV(withCaller(ctx, target), service, proto, name)
}

// LookupMX is net.Resolver.LookupMX with the caller's spelling kept.
func (r *GoResolver) LookupMX(ctx context.Context, name string) ([]*net.MX, error) {
	return r.Resolver.LookupMX(withCaller(ctx, name), name)
}

// LookupNS is net.Resolver.LookupNS with the caller's spelling kept.
func (r *GoResolver) LookupNS(ctx context.Context, name string) ([]*net.NS, error) {
	return r.Resolver.LookupNS(withCaller(ctx, name), name)
}

// LookupTXT is net.Resolver.LookupTXT with the caller's spelling kept.
func (r *GoResolver) LookupTXT(ctx context.Context, name string) ([]string, error) {
	return r.Resolver.LookupTXT(withCaller(ctx, name), name)
}

// LookupAddr is net.Resolver.LookupAddr; the reverse name Go asks is
// absolute, so it is asked once.
func (r *GoResolver) LookupAddr(ctx context.Context, addr string) ([]string, error) {
	return r.Resolver.LookupAddr(context.WithValue(ctx, callerNameKey{}, callerName{reverse: true}), addr)
}

// goAnswerer answers Go resolver questions with a Stub.
type goAnswerer struct {
	stub *Stub
	// addrs resolves a name to addresses as getaddrinfo would (default: the
	// stub's A+AAAA walk); fqdn is the name that answered.
	addrs func(ctx context.Context, name string) (fqdn string, addrs []netip.Addr, err error)
	// record, when set, is told about the walks for other types.
	record func(name string, qtype uint16, fqdn string, log []QueryLog, err error)
	// foreign are this process's search domains (lower case, no dots at the
	// ends) that are not the pod's own.
	foreign []string
	// pod are the pod's search domains, lower case.
	pod []string

	mu     sync.Mutex
	shared map[string]*sharedLookup
}

// sharedLookup is one A+AAAA walk shared by the A and the AAAA question Go
// asks for a name (getaddrinfo asks both in one walk).
type sharedLookup struct {
	done   chan struct{}
	fqdn   string
	addrs  []netip.Addr
	kind   ErrorKind // 0: success
	served map[uint16]bool
}

func newGoResolver(a *goAnswerer) *GoResolver {
	s := a.stub
	if a.addrs == nil {
		a.addrs = func(ctx context.Context, name string) (string, []netip.Addr, error) {
			res, err := s.Lookup(ctx, name, FamilyAny)
			return res.Name, res.Addrs, err
		}
	}
	for _, d := range s.Conf.Searches {
		if d = strings.Trim(strings.ToLower(d), "."); d != "" {
			a.pod = append(a.pod, d)
		}
	}
	for _, d := range processSearchDomains() {
		if d = strings.Trim(strings.ToLower(d), "."); d != "" && !containsString(a.pod, d) {
			a.foreign = append(a.foreign, d)
		}
	}
	return &GoResolver{&net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			client, server := net.Pipe()
			go a.serve(ctx, server)
			return client, nil
		},
	}}
}

// processSearchDomains is the search list Go's resolver uses in this process:
// the last search or domain line of /etc/resolv.conf, else the domain of the
// host name.
func processSearchDomains() []string {
	if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		var list []string
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			switch f[0] {
			case "search":
				list = f[1:]
			case "domain":
				list = f[1:2]
			}
		}
		return list
	}
	if h, err := os.Hostname(); err == nil {
		if i := strings.IndexByte(h, '.'); i >= 0 && i < len(h)-1 {
			return []string{h[i+1:]}
		}
	}
	return nil
}

// serve answers the DNS-over-TCP-framed messages Go writes on conn (a
// net.Pipe is not a PacketConn, so Go frames its messages as over TCP).
func (a *goAnswerer) serve(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	var lenBuf [2]byte
	for {
		if _, err := io.ReadFull(conn, lenBuf[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(lenBuf[:]))
		if _, err := io.ReadFull(conn, msg); err != nil {
			return
		}
		req := new(mdns.Msg)
		var resp *mdns.Msg
		if err := req.Unpack(msg); err != nil || len(req.Question) != 1 {
			resp = new(mdns.Msg)
			resp.SetRcodeFormatError(req)
		} else {
			resp = a.answer(ctx, req)
		}
		out, err := resp.Pack()
		if err != nil {
			return
		}
		binary.BigEndian.PutUint16(lenBuf[:], uint16(len(out)))
		if _, err := conn.Write(append(lenBuf[:], out...)); err != nil {
			return
		}
	}
}

// isForeign reports whether the lower-case FQDN is one of Go's expansions
// with this process's search domains rather than a name of the pod's world.
func (a *goAnswerer) isForeign(lname string) bool {
	for _, d := range a.pod {
		if strings.HasSuffix(lname, "."+d+".") {
			return false
		}
	}
	for _, d := range a.foreign {
		if strings.HasSuffix(lname, "."+d+".") {
			return true
		}
	}
	return false
}

func rcodeFor(k ErrorKind) int {
	switch k {
	case HostNotFound:
		return mdns.RcodeNameError
	case NoData:
		return mdns.RcodeSuccess
	case TryAgain:
		return mdns.RcodeServerFailure
	}
	return mdns.RcodeRefused
}

// answer is the reply to one question: the pod's walk for its name, with a
// CNAME from the name Go asked to the FQDN that answered.
func (a *goAnswerer) answer(ctx context.Context, req *mdns.Msg) *mdns.Msg {
	q := req.Question[0]
	m := new(mdns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	lname := strings.ToLower(q.Name)
	name := strings.TrimSuffix(q.Name, ".")
	foreign := a.isForeign(lname)
	if cn, ok := ctx.Value(callerNameKey{}).(callerName); ok {
		switch {
		case cn.reverse:
			name, foreign = q.Name, false // asked as is
		case !strings.EqualFold(q.Name, cn.fqdn):
			foreign = true // one of Go's expansions of the caller's name
		case cn.absolute:
			name, foreign = q.Name, false // the stub asks it once, as is
		default:
			foreign = false // the relative name: the pod's walk
		}
	}
	if name == "" || foreign || q.Qclass != mdns.ClassINET {
		m.Rcode = mdns.RcodeNameError
		return m
	}
	alias := func(fqdn string) {
		if !strings.EqualFold(fqdn, q.Name) {
			m.Answer = append(m.Answer, &mdns.CNAME{Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeCNAME, Class: mdns.ClassINET}, Target: fqdn})
		}
	}
	switch q.Qtype {
	case mdns.TypeA, mdns.TypeAAAA:
		sl := a.addresses(ctx, name, q.Qtype)
		if sl == nil {
			m.Rcode = mdns.RcodeServerFailure
			return m
		}
		if sl.kind != 0 {
			m.Rcode = rcodeFor(sl.kind)
			return m
		}
		alias(sl.fqdn)
		for _, ip := range sl.addrs {
			hdr := mdns.RR_Header{Name: sl.fqdn, Class: mdns.ClassINET}
			switch {
			case ip.Is4() && q.Qtype == mdns.TypeA:
				hdr.Rrtype = mdns.TypeA
				m.Answer = append(m.Answer, &mdns.A{Hdr: hdr, A: ip.AsSlice()})
			case !ip.Is4() && q.Qtype == mdns.TypeAAAA:
				hdr.Rrtype = mdns.TypeAAAA
				m.Answer = append(m.Answer, &mdns.AAAA{Hdr: hdr, AAAA: ip.AsSlice()})
			}
		}
	default:
		var log []QueryLog
		var reply *mdns.Msg
		fqdn, _, kind := a.stub.walk(name, func(fqdn string) tryResult {
			tr, r := a.stub.tryType(ctx, fqdn, q.Qtype, &log)
			if tr.ok {
				reply = r
			}
			return tr
		})
		if a.record != nil {
			var err error
			if fqdn == "" {
				err = &LookupError{Name: name, Kind: kind}
			}
			a.record(name, q.Qtype, fqdn, log, err)
		}
		if fqdn == "" {
			m.Rcode = rcodeFor(kind)
			return m
		}
		alias(fqdn)
		m.Answer = append(m.Answer, reply.Answer...)
		m.Extra = append(m.Extra, reply.Extra...)
		m.Extra = filterOPT(m.Extra)
	}
	return m
}

func filterOPT(rrs []mdns.RR) []mdns.RR {
	out := rrs[:0]
	for _, rr := range rrs {
		if rr.Header().Rrtype != mdns.TypeOPT {
			out = append(out, rr)
		}
	}
	return out
}

// addresses runs, or joins, the A+AAAA walk for name: the A and the AAAA
// question of one Go lookup share one walk. A question of a type the current
// walk for the name has already answered starts a new walk; only the latest
// walk is kept. nil means ctx ended first.
func (a *goAnswerer) addresses(ctx context.Context, name string, qtype uint16) *sharedLookup {
	key := strings.ToLower(name)
	a.mu.Lock()
	if sl := a.shared[key]; sl != nil && !sl.served[qtype] {
		sl.served[qtype] = true
		if len(sl.served) == 2 {
			delete(a.shared, key)
		}
		a.mu.Unlock()
		select {
		case <-sl.done:
			return sl
		case <-ctx.Done():
			return nil
		}
	}
	sl := &sharedLookup{done: make(chan struct{}), served: map[uint16]bool{qtype: true}}
	a.shared = map[string]*sharedLookup{key: sl}
	a.mu.Unlock()
	defer close(sl.done)

	fqdn, addrs, err := a.addrs(ctx, name)
	if err != nil {
		sl.kind = TryAgain
		var le *LookupError
		if errors.As(err, &le) {
			sl.kind = le.Kind
		}
		return sl
	}
	sl.fqdn, sl.addrs = mdns.Fqdn(fqdn), addrs
	return sl
}

// tryType asks one question of any type for one FQDN, classified as tryName
// classifies an address question; the reply is returned on success.
func (s *Stub) tryType(ctx context.Context, fqdn string, qtype uint16, log *[]QueryLog) (tryResult, *mdns.Msg) {
	if _, ok := mdns.IsDomainName(fqdn); !ok || len(fqdn) > 254 {
		return tryResult{kind: NoRecovery}, nil
	}
	r := s.send(ctx, fqdn, []uint16{qtype}, log)[0]
	switch {
	case r == nil:
		return tryResult{kind: TryAgain}, nil
	case r.Rcode == mdns.RcodeSuccess && len(r.Answer) > 0:
		return tryResult{ok: true}, r
	case r.Rcode == mdns.RcodeSuccess:
		return tryResult{kind: NoData}, nil
	case r.Rcode == mdns.RcodeNameError:
		return tryResult{kind: HostNotFound}, nil
	case r.Rcode == mdns.RcodeServerFailure:
		return tryResult{kind: TryAgain, servfail: true}, nil
	}
	return tryResult{kind: NoRecovery}, nil
}
