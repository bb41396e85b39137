package dns

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/clusterlab/clusterlab/service"
)

// PodMode selects how <dashed-ip>.<ns>.pod.<zone> names are answered
// (CoreDNS's `pods` option).
type PodMode int

const (
	// PodsDisabled answers NXDOMAIN for every pod name (CoreDNS's default).
	PodsDisabled PodMode = iota
	// PodsInsecure answers any name that parses as an IP in an existing
	// namespace, without looking for the pod (kube-dns's behaviour).
	PodsInsecure
	// PodsVerified answers only when a pod with that IP exists in that
	// namespace.
	PodsVerified
)

// String returns the mode as the CLI spells it.
func (m PodMode) String() string {
	switch m {
	case PodsDisabled:
		return "disabled"
	case PodsInsecure:
		return "insecure"
	case PodsVerified:
		return "verified"
	}
	return fmt.Sprintf("PodMode(%d)", int(m))
}

// ParsePodMode parses "disabled", "insecure" or "verified".
func ParsePodMode(s string) (PodMode, error) {
	for _, m := range []PodMode{PodsDisabled, PodsInsecure, PodsVerified} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("pod mode %q: want disabled, insecure or verified", s)
}

// DefaultTTL is the TTL of synthesised records unless configured (CoreDNS's).
const DefaultTTL = 5

// Config configures a Server. Start from DefaultConfig: the zero TTL is a
// real TTL of 0.
type Config struct {
	// Zones served. The first is the cluster domain (cluster.local when Zones
	// is empty); further ones are reverse zones served for PTR, such as
	// 0.10.in-addr.arpa (a further forward zone is served as an alias of the
	// cluster domain). Without any reverse zone, in-addr.arpa and ip6.arpa
	// are served, falling through to the upstream on NXDOMAIN as in the
	// default kube-dns Corefile.
	Zones []string
	// TTL of synthesised records, seconds (CoreDNS allows 0–3600).
	TTL uint32
	// Pods selects how pod names are answered.
	Pods PodMode
	// Upstream answers names outside the zones and ExternalName targets
	// outside the cluster domain. Nil: out-of-zone queries are REFUSED (as
	// CoreDNS does for a name no server block serves) and out-of-zone
	// ExternalName CNAMEs are returned unchased.
	Upstream Upstream
	// Fallthrough lists zones whose NXDOMAIN answers are instead forwarded to
	// the upstream (CoreDNS `fallthrough`). Nil means the default reverse
	// zones when those are in use, none otherwise.
	Fallthrough []string
	// NSAddrs are the addresses given for ns.dns.<zone> when the Source has
	// no kube-system/kube-dns service with a cluster IP.
	NSAddrs []netip.Addr
	// EndpointPodNames labels endpoints without a hostname by their pod's
	// name instead of their dashed IP (CoreDNS endpoint_pod_names).
	EndpointPodNames bool
	// AllowRecursion, when set, limits forwarding to the upstream (names outside
	// the zones, and the fallthrough of NXDOMAIN in reverse zones) to clients it
	// allows; the others get REFUSED, as from CoreDNS's acl plugin or BIND's
	// allow-recursion. Names in the zones (ExternalName targets included) are
	// answered to anyone. Nil: every client may recurse. A query without a
	// client address (Handle called directly) is not limited.
	AllowRecursion *RecursionACL
	// UpstreamTimeout bounds one upstream exchange; default 2s.
	UpstreamTimeout time.Duration
	// Now is the clock for the SOA serial (the time of the last change);
	// default time.Now.
	Now func() time.Time
}

// DefaultConfig is cluster.local, TTL 5, pods disabled, no upstream.
func DefaultConfig() Config {
	return Config{Zones: []string{"cluster.local"}, TTL: DefaultTTL}
}

// Server is the cluster DNS: a miekg/dns Handler answering from a Source.
// It holds no socket; run it under a dns.Server on any transport, or call
// Handle / HandleWire directly (the simulated network does).
type Server struct {
	cfg     Config
	src     Source
	ttl     uint32
	zones   []string // lower-case FQDNs
	primary string   // the cluster domain, lower-case FQDN
	// The SOA's names in the cluster domain as spelled in lower case:
	// "ns.dns." and "hostmaster." + primary.
	primaryNS, primaryMbox string
	fall                   map[string]bool

	cur        atomic.Pointer[index]
	gen        atomic.Uint64 // bumped by every Invalidate
	built      atomic.Uint64 // the gen the current index was built at (or after)
	mu         sync.Mutex    // serialises rebuilds
	lastSerial uint32
	cancel     []func()
}

// New returns a server answering from src. If src can report changes
// (StaticSource.OnChange, or service.Store's Watch), the server subscribes and
// rebuilds its index lazily on the next query after a change; otherwise call
// Invalidate after changing the data.
func New(src Source, cfg Config) (*Server, error) {
	if src == nil {
		return nil, fmt.Errorf("dns: nil source")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TTL > 3600 {
		return nil, fmt.Errorf("dns: ttl %d: must be between 0 and 3600", cfg.TTL)
	}
	if cfg.Pods < PodsDisabled || cfg.Pods > PodsVerified {
		return nil, fmt.Errorf("dns: invalid pod mode %d", int(cfg.Pods))
	}
	s := &Server{cfg: cfg, src: src, ttl: cfg.TTL, fall: map[string]bool{}}
	zones := cfg.Zones
	if len(zones) == 0 {
		zones = []string{"cluster.local"}
	}
	haveReverse := false
	for i, z := range zones {
		nz, err := normalizeZone(z)
		if err != nil {
			return nil, err
		}
		if i == 0 && isReverseZone(nz) {
			return nil, fmt.Errorf("dns: zone %q: the first zone is the cluster domain and cannot be a reverse zone", z)
		}
		for _, prev := range s.zones {
			if prev == nz {
				return nil, fmt.Errorf("dns: zone %q given twice", z)
			}
		}
		haveReverse = haveReverse || isReverseZone(nz)
		s.zones = append(s.zones, nz)
	}
	s.primary = s.zones[0]
	s.primaryNS, s.primaryMbox = "ns.dns."+s.primary, "hostmaster."+s.primary
	if !haveReverse {
		s.zones = append(s.zones, reverseV4, reverseV6)
		if cfg.Fallthrough == nil {
			s.fall[reverseV4], s.fall[reverseV6] = true, true
		}
	}
	for _, z := range cfg.Fallthrough {
		nz, err := normalizeZone(z)
		if err != nil {
			return nil, fmt.Errorf("dns: fallthrough: %w", err)
		}
		s.fall[nz] = true
	}
	s.gen.Store(1)
	s.rebuild()
	switch w := src.(type) {
	case interface{ OnChange(func()) }:
		w.OnChange(s.Invalidate)
	case interface {
		Watch(func(service.Event)) (cancel func())
	}:
		s.cancel = append(s.cancel, w.Watch(func(service.Event) { s.Invalidate() }))
	}
	return s, nil
}

func normalizeZone(z string) (string, error) {
	nz := strings.ToLower(mdns.Fqdn(strings.TrimSpace(z)))
	if nz == "." {
		return "", fmt.Errorf("dns: zone %q: the root zone cannot be served", z)
	}
	if _, ok := mdns.IsDomainName(nz); !ok {
		return "", fmt.Errorf("dns: zone %q: not a domain name", z)
	}
	return nz, nil
}

// Zones returns the served zones, lower-case FQDNs, cluster domain first.
func (s *Server) Zones() []string { return append([]string(nil), s.zones...) }

// Close stops following the source's change notifications.
func (s *Server) Close() {
	for _, c := range s.cancel {
		c()
	}
	s.cancel = nil
}

// Invalidate marks the index stale: the next query rebuilds it from the
// Source and bumps the SOA serial. Safe to call from any goroutine, also from
// inside a store's change callback (it does not call back into the Source).
func (s *Server) Invalidate() { s.gen.Add(1) }

// Serial returns the current SOA serial (after rebuilding if stale).
func (s *Server) Serial() uint32 { return s.index().serial }

func (s *Server) index() *index {
	if s.built.Load() != s.gen.Load() {
		s.rebuild()
	}
	return s.cur.Load()
}

// rebuild builds the index if it is stale. A query that finds it stale waits
// here for the rebuild in progress rather than answering from the old index,
// so an answer never predates a change that was notified before the query
// arrived.
func (s *Server) rebuild() {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.gen.Load()
	if s.built.Load() == g {
		return
	}
	idx := buildIndex(s.src, s.primary, s.cfg.EndpointPodNames, s.cfg.NSAddrs)
	serial := uint32(s.cfg.Now().Unix())
	if serial <= s.lastSerial {
		serial = s.lastSerial + 1
	}
	s.lastSerial = serial
	idx.serial = serial
	s.cur.Store(idx)
	s.built.Store(g)
}

// matchZone returns the most specific served zone containing the lower-case
// FQDN name, or "".
func (s *Server) matchZone(lname string) string {
	best := ""
	for _, z := range s.zones {
		if len(z) > len(best) && inZone(lname, z) {
			best = z
		}
	}
	return best
}

// ServeDNS implements mdns.Handler. Under a mdns.Server the default accept
// function has already answered FORMERR/NOTIMP for malformed headers.
//
// Replies that depend only on the query and the index are kept packed, per index
// (see replyCache), and sent again with the query's ID: no lookup, no records built,
// no packing. A rebuilt index starts with an empty cache.
func (s *Server) ServeDNS(w mdns.ResponseWriter, r *mdns.Msg) {
	network := "udp"
	if a := w.LocalAddr(); a != nil && strings.HasPrefix(a.Network(), "tcp") {
		network = "tcp"
	}
	client := addrOfNet(w.RemoteAddr())
	idx := s.index()
	key, cacheable := s.replyKey(r, network, client)
	if cacheable {
		if b, ok := idx.replies.get(key); ok {
			writeWithID(w, b, r.Id)
			return
		}
	}
	ctx := context.Background()
	if client.IsValid() && (s.cfg.AllowRecursion != nil || s.cfg.Upstream != nil) {
		ctx = withClient(ctx, client) // for the recursion ACL and the per-client upstream cap (nothing else reads it)
	}
	resp, fromIndex := s.handle(ctx, r, network)
	if resp == nil {
		return
	}
	if cacheable && fromIndex {
		if b, err := resp.Pack(); err == nil {
			idx.replies.put(key, b)
			_, _ = w.Write(b)
			return
		}
	}
	_ = w.WriteMsg(resp)
}

// Handle answers one parsed request that arrived over network ("udp" or
// "tcp"). It returns nil when no reply is due (the message is a response).
// The reply carries an OPT record when the request did, and for UDP fits the
// client's size (512 bytes, or the EDNS0 buffer size), with TC set when
// records had to be dropped.
func (s *Server) Handle(ctx context.Context, req *mdns.Msg, network string) *mdns.Msg {
	m, _ := s.handle(ctx, req, network)
	return m
}

// handle is Handle, also saying whether the reply came from the index alone (no
// upstream asked), so that the same query answered from the same index gets it again.
func (s *Server) handle(ctx context.Context, req *mdns.Msg, network string) (*mdns.Msg, bool) {
	if req == nil || req.Response {
		return nil, false
	}
	if req.Opcode != mdns.OpcodeQuery {
		return s.finish(req, errorReply(req, mdns.RcodeNotImplemented), network), false
	}
	if len(req.Question) != 1 || countOPT(req) > 1 {
		return s.finish(req, errorReply(req, mdns.RcodeFormatError), network), false
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
		return s.finish(req, m, network), false
	}
	if _, ok := mdns.IsDomainName(q.Name); !ok || !mdns.IsFqdn(q.Name) {
		return s.finish(req, errorReply(req, mdns.RcodeFormatError), network), false
	}
	m, fromIndex := s.answer(ctx, req, network)
	return s.finish(req, m, network), fromIndex
}

// errorReply is a bare reply with rcode and no question (what miekg/dns's
// server sends for messages it rejects).
func errorReply(req *mdns.Msg, rcode int) *mdns.Msg {
	m := new(mdns.Msg)
	m.Id = req.Id
	m.Response = true
	m.Opcode = req.Opcode
	m.RecursionDesired = req.RecursionDesired
	m.CheckingDisabled = req.CheckingDisabled
	m.Rcode = rcode
	return m
}

func countOPT(m *mdns.Msg) int {
	n := 0
	for _, rr := range m.Extra {
		if rr.Header().Rrtype == mdns.TypeOPT {
			n++
		}
	}
	return n
}

// ednsSize is the largest UDP reply the client accepts.
func ednsSize(req *mdns.Msg) int {
	if opt := req.IsEdns0(); opt != nil && int(opt.UDPSize()) > mdns.MinMsgSize {
		return int(opt.UDPSize())
	}
	return mdns.MinMsgSize
}

// finish applies the transport rules to a reply: echo OPT (or drop one the
// client did not ask for), then truncate to the client's size.
func (s *Server) finish(req, m *mdns.Msg, network string) *mdns.Msg {
	ro := req.IsEdns0()
	n := 0
	for _, rr := range m.Extra {
		if rr.Header().Rrtype != mdns.TypeOPT {
			n++
		}
	}
	var extra []mdns.RR // nil when there is nothing to add, as before
	var o *mdns.OPT
	switch {
	case ro != nil && n < len(optBox{}.extra):
		// The OPT record and the additional section in one allocation.
		box := new(optBox)
		extra, o = box.extra[:0:n+1], &box.opt
	case n > 0 || ro != nil:
		extra = make([]mdns.RR, 0, n+1)
		if ro != nil {
			o = new(mdns.OPT)
		}
	}
	for _, rr := range m.Extra {
		if rr.Header().Rrtype != mdns.TypeOPT {
			extra = append(extra, rr)
		}
	}
	m.Extra = extra
	if ro != nil {
		o.Hdr = mdns.RR_Header{Name: ".", Rrtype: mdns.TypeOPT}
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

// optBox holds a reply's OPT record and an additional section of up to 8 records.
type optBox struct {
	opt   mdns.OPT
	extra [8]mdns.RR
}

// answer produces the reply for a well-formed single-question query, and whether it
// came from the index alone (false when the upstream was asked).
func (s *Server) answer(ctx context.Context, req *mdns.Msg, network string) (*mdns.Msg, bool) {
	q := req.Question[0]
	lname := strings.ToLower(q.Name)
	zone := s.matchZone(lname)
	if zone == "" {
		return s.forward(ctx, req, network), false
	}
	idx := s.index()
	l := s.newLookup(ctx, idx, network, q.Name, zone)
	rcode, answer, extra := l.run(q.Name, q.Qtype)
	return s.indexReply(ctx, req, &l, rcode, answer, extra)
}

// indexReply is answer's reply from what the lookup l found (a function of its own so
// that its frame is not on the stack while the lookup runs).
func (s *Server) indexReply(ctx context.Context, req *mdns.Msg, l *lookup, rcode int, answer, extra []mdns.RR) (*mdns.Msg, bool) {
	if rcode == mdns.RcodeNameError && s.fall[l.zone] && s.cfg.Upstream != nil && s.recursionAllowed(ctx) {
		return s.forward(ctx, req, l.network), false
	}
	if rcode == mdns.RcodeNameError && !l.idx.synced {
		rcode = mdns.RcodeServerFailure
	}
	// The reply, its question and its authority section in one allocation.
	box := new(replyBox)
	m := &box.msg
	m.Id = req.Id // what SetReply sets, with the question in box
	m.Response = true
	m.Opcode = req.Opcode
	if m.Opcode == mdns.OpcodeQuery {
		m.RecursionDesired = req.RecursionDesired
		m.CheckingDisabled = req.CheckingDisabled
	}
	box.question[0] = req.Question[0]
	m.Question = box.question[:]
	m.Authoritative = true
	m.RecursionAvailable = s.cfg.Upstream != nil && s.recursionAllowed(ctx)
	m.Rcode = rcode
	m.Truncated = l.truncated
	m.Answer = answer
	m.Extra = extra
	if rcode != mdns.RcodeRefused && len(answer) == 0 {
		l.fillSOA(&box.soa)
		box.ns[0] = &box.soa
		m.Ns = box.ns[:]
	}
	return m, !l.upstream
}

// replyBox holds a reply from the index with the parts every reply has, allocated together.
type replyBox struct {
	msg      mdns.Msg
	question [1]mdns.Question
	ns       [1]mdns.RR
	soa      mdns.SOA
}

// forward sends an out-of-zone query to the upstream: REFUSED without one or
// for a client the recursion ACL does not allow, SERVFAIL when it fails.
func (s *Server) forward(ctx context.Context, req *mdns.Msg, network string) *mdns.Msg {
	if s.cfg.Upstream == nil || !s.recursionAllowed(ctx) {
		m := new(mdns.Msg)
		m.SetRcode(req, mdns.RcodeRefused)
		return m
	}
	ctx, cancel := context.WithTimeout(ctx, s.upstreamTimeout())
	defer cancel()
	resp, err := s.cfg.Upstream.Exchange(ctx, req.Copy(), network)
	if err != nil || resp == nil {
		m := new(mdns.Msg)
		m.SetRcode(req, mdns.RcodeServerFailure)
		m.RecursionAvailable = true
		return m
	}
	resp = resp.Copy()
	resp.Id = req.Id
	resp.Response = true
	resp.Question = req.Question
	if !usableUpstreamReply(resp) {
		m := new(mdns.Msg)
		m.SetRcode(req, mdns.RcodeServerFailure)
		m.RecursionAvailable = true
		return m
	}
	return resp
}

// usableUpstreamReply drops from resp (a copy of an upstream's reply) what may not be
// passed on and reports whether the rest encodes into bytes that parse; a reply that
// does not counts as no reply. TSIG is hop by hop (RFC 8945): the upstream's
// signature is not ours to pass on, and miekg/dns packs a malformed one it unpacked
// into bytes that no longer parse. It unpacks other malformed records as leniently
// and packs them as badly: an SOA whose rdata ends before its names has them empty,
// and packs them as nothing under a length that counts the twenty bytes of numbers
// (both found by FuzzUpstreamReply).
func usableUpstreamReply(resp *mdns.Msg) bool {
	resp.Answer, resp.Ns, resp.Extra = withoutTSIG(resp.Answer), withoutTSIG(resp.Ns), withoutTSIG(resp.Extra)
	b, err := resp.Pack()
	return err == nil && new(mdns.Msg).Unpack(b) == nil
}

// withoutTSIG drops TSIG records from a section.
func withoutTSIG(rrs []mdns.RR) []mdns.RR {
	out := rrs[:0]
	for _, rr := range rrs {
		if rr.Header().Rrtype != mdns.TypeTSIG {
			out = append(out, rr)
		}
	}
	return out
}

func (s *Server) upstreamTimeout() time.Duration {
	if s.cfg.UpstreamTimeout > 0 {
		return s.cfg.UpstreamTimeout
	}
	return 2 * time.Second
}

// askUpstream resolves an out-of-zone ExternalName target.
func (s *Server) askUpstream(ctx context.Context, name string, qtype uint16, network string) (*mdns.Msg, error) {
	m := new(mdns.Msg)
	m.SetQuestion(name, qtype)
	m.SetEdns0(mdns.DefaultMsgSize, false)
	ctx, cancel := context.WithTimeout(ctx, s.upstreamTimeout())
	defer cancel()
	resp, err := s.cfg.Upstream.Exchange(ctx, m, network)
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return nil, fmt.Errorf("upstream: empty reply")
	}
	// Its answer records go into ours.
	if resp = resp.Copy(); !usableUpstreamReply(resp) {
		return nil, fmt.Errorf("upstream: a reply that does not encode into one that parses")
	}
	return resp, nil
}

// HandleWire answers one DNS message in wire format, as a server socket
// would: nil means send nothing (the input is too short to have a header, or
// is itself a response). It applies miekg/dns's default accept rules
// (FORMERR for a question count other than one or too many records in the
// other sections, NOTIMP for opcodes other than QUERY/NOTIFY) and FORMERR
// for a body that does not parse, then Handle.
func (s *Server) HandleWire(ctx context.Context, b []byte, network string) []byte {
	if len(b) < 12 {
		return nil
	}
	h := mdns.Header{
		Id:      binary.BigEndian.Uint16(b[0:]),
		Bits:    binary.BigEndian.Uint16(b[2:]),
		Qdcount: binary.BigEndian.Uint16(b[4:]),
		Ancount: binary.BigEndian.Uint16(b[6:]),
		Nscount: binary.BigEndian.Uint16(b[8:]),
		Arcount: binary.BigEndian.Uint16(b[10:]),
	}
	hdrOnly := &mdns.Msg{MsgHdr: mdns.MsgHdr{
		Id:               h.Id,
		Opcode:           int(h.Bits>>11) & 0xF,
		RecursionDesired: h.Bits&(1<<8) != 0,
		CheckingDisabled: h.Bits&(1<<4) != 0,
	}}
	var resp *mdns.Msg
	switch mdns.DefaultMsgAcceptFunc(h) {
	case mdns.MsgIgnore:
		return nil
	case mdns.MsgReject:
		resp = errorReply(hdrOnly, mdns.RcodeFormatError)
	case mdns.MsgRejectNotImplemented:
		resp = errorReply(hdrOnly, mdns.RcodeNotImplemented)
	default:
		req := new(mdns.Msg)
		if err := req.Unpack(b); err != nil {
			resp = errorReply(hdrOnly, mdns.RcodeFormatError)
		} else if resp = s.Handle(ctx, req, network); resp == nil {
			return nil
		}
	}
	out, err := resp.Pack()
	if err != nil {
		// A reply we built but cannot encode is a bug in the reply, not in
		// the query; answer SERVFAIL rather than nothing.
		fail := errorReply(hdrOnly, mdns.RcodeServerFailure)
		if out, err = fail.Pack(); err != nil {
			return nil
		}
	}
	return out
}
