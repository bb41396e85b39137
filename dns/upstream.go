package dns

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
)

// Upstream answers what the cluster zones do not: names outside them, and
// ExternalName targets outside the cluster domain. network is the transport
// the client used ("udp" or "tcp"); an upstream may use it to pick its own.
type Upstream interface {
	Exchange(ctx context.Context, req *mdns.Msg, network string) (*mdns.Msg, error)
}

// UpstreamFunc adapts a function to Upstream (a simulated upstream in netsim,
// for example).
type UpstreamFunc func(ctx context.Context, req *mdns.Msg, network string) (*mdns.Msg, error)

// Exchange implements Upstream.
func (f UpstreamFunc) Exchange(ctx context.Context, req *mdns.Msg, network string) (*mdns.Msg, error) {
	return f(ctx, req, network)
}

// AddrUpstream forwards to a DNS server at Addr (host:port; a bare host gets
// port 53) over the client's transport, as CoreDNS's forward plugin does: a
// truncated UDP answer is passed on with TC set so that the client retries
// over TCP. Dial, when set, replaces the network dialer (a simulated network).
type AddrUpstream struct {
	Addr    string
	Timeout time.Duration // per exchange; default 2s
	Dial    func(ctx context.Context, network, address string) (net.Conn, error)
}

// NewUpstream returns an AddrUpstream for addr.
func NewUpstream(addr string) *AddrUpstream {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(strings.Trim(addr, "[]"), "53")
	}
	return &AddrUpstream{Addr: addr}
}

// Exchange implements Upstream.
func (u *AddrUpstream) Exchange(ctx context.Context, req *mdns.Msg, network string) (*mdns.Msg, error) {
	if network != "tcp" {
		network = "udp"
	}
	timeout := u.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var conn net.Conn
	var err error
	if u.Dial != nil {
		conn, err = u.Dial(ctx, network, u.Addr)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, network, u.Addr)
	}
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", u.Addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	co := &mdns.Conn{Conn: conn, UDPSize: mdns.DefaultMsgSize}
	// A fresh random ID upstream, not the client's (as CoreDNS's forward does): a
	// client does not choose the ID a forged reply would have to match.
	q := *req
	q.Id = mdns.Id()
	if err := co.WriteMsg(&q); err != nil {
		return nil, fmt.Errorf("upstream %s: %w", u.Addr, err)
	}
	for {
		resp, err := co.ReadMsg()
		if err != nil {
			return nil, fmt.Errorf("upstream %s: %w", u.Addr, err)
		}
		if resp.Id == q.Id { // a reply to another query (a late one) is skipped
			resp.Id = req.Id
			return resp, nil
		}
	}
}

// ZoneUpstream is an in-memory authoritative server for a set of records
// given as zone-file text: the simulated "rest of the internet" behind the
// cluster DNS. It answers exact matches, follows CNAMEs within its data,
// answers NODATA for a name that has other types and NXDOMAIN otherwise. It
// records every question it is asked.
type ZoneUpstream struct {
	mu      sync.Mutex
	rrs     map[string][]mdns.RR // lower-case owner → records
	queries []mdns.Question
	// Truncated makes every answer carry TC (to test TC propagation).
	Truncated bool
}

// NewZoneUpstream parses zone-file text (absolute owner names; $TTL and
// $ORIGIN allowed) into a ZoneUpstream.
func NewZoneUpstream(zoneText string) (*ZoneUpstream, error) {
	z := &ZoneUpstream{rrs: map[string][]mdns.RR{}}
	zp := mdns.NewZoneParser(strings.NewReader(zoneText), ".", "upstream")
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		key := strings.ToLower(rr.Header().Name)
		z.rrs[key] = append(z.rrs[key], rr)
	}
	if err := zp.Err(); err != nil {
		return nil, fmt.Errorf("upstream zone: %w", err)
	}
	return z, nil
}

// Queries returns the questions asked so far.
func (z *ZoneUpstream) Queries() []mdns.Question {
	z.mu.Lock()
	defer z.mu.Unlock()
	return append([]mdns.Question(nil), z.queries...)
}

// Exchange implements Upstream.
func (z *ZoneUpstream) Exchange(_ context.Context, req *mdns.Msg, _ string) (*mdns.Msg, error) {
	m := new(mdns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	m.Truncated = z.Truncated
	if len(req.Question) != 1 {
		m.Rcode = mdns.RcodeFormatError
		return m, nil
	}
	q := req.Question[0]
	z.mu.Lock()
	z.queries = append(z.queries, q)
	z.mu.Unlock()
	name := q.Name
	for hops := 0; hops < 8; hops++ {
		rrs, exists := z.rrs[strings.ToLower(name)]
		if !exists {
			if hops == 0 {
				m.Rcode = mdns.RcodeNameError
			}
			return m, nil
		}
		var cname *mdns.CNAME
		found := false
		for _, rr := range rrs {
			if rr.Header().Rrtype == q.Qtype {
				m.Answer = append(m.Answer, mdns.Copy(rr))
				found = true
			} else if c, ok := rr.(*mdns.CNAME); ok {
				cname = c
			}
		}
		if found || cname == nil {
			return m, nil
		}
		m.Answer = append(m.Answer, mdns.Copy(cname))
		name = cname.Target
	}
	return m, nil
}

var (
	_ Upstream = (*AddrUpstream)(nil)
	_ Upstream = (*ZoneUpstream)(nil)
	_ Upstream = UpstreamFunc(nil)
)
