package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/clusterlab/clusterlab/netsim"
)

// wireHandler answers one DNS message in wire format (nil: no reply).
type wireHandler func(ctx context.Context, b []byte, network string) []byte

// tcpIdleTimeout is how long a DNS-over-TCP connection may stay idle between
// queries (miekg/dns's default idle timeout).
const tcpIdleTimeout = 8 * time.Second

// serveWire runs a DNS server on a simulated network: UDP sockets (one per
// address family the owner has) and a TCP listener on port, each query
// answered by h on its own goroutine (a forwarded query may wait on the
// network), TCP framed with the two-byte length prefix. onQuery, when set,
// sees every query and its reply. stop closes the sockets and waits for the
// read loops to end.
func serveWire(n *netsim.Net, port uint16, h wireHandler, onQuery func(client netip.AddrPort, network string, req, resp []byte)) (stop func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg      sync.WaitGroup
		closers []io.Closer
	)
	fail := func(err error) (func(), error) {
		cancel()
		for _, c := range closers {
			c.Close()
		}
		wg.Wait()
		return nil, err
	}
	var v4, v6 bool
	for _, a := range n.Addrs() {
		v4 = v4 || a.Is4()
		v6 = v6 || a.Is6() && !a.Is4In6()
	}
	var udpNets []string
	if v4 {
		udpNets = append(udpNets, "udp4")
	}
	if v6 {
		udpNets = append(udpNets, "udp6")
	}
	for _, network := range udpNets {
		pc, err := n.ListenPacket(network, fmt.Sprintf(":%d", port))
		if err != nil {
			return fail(fmt.Errorf("dns server on %s: %w", n.Name(), err))
		}
		closers = append(closers, pc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 65535)
			for {
				k, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				req := append([]byte(nil), buf[:k]...)
				go func() {
					resp := h(ctx, req, "udp")
					// Logged before the reply leaves, so a client that has its
					// answer finds the query in the log.
					if onQuery != nil {
						onQuery(addrPortOf(from), "udp", req, resp)
					}
					if resp != nil {
						_, _ = pc.WriteTo(resp, from)
					}
				}()
			}
		}()
	}
	ln, err := n.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return fail(fmt.Errorf("dns server on %s: %w", n.Name(), err))
	}
	closers = append(closers, ln)
	var connMu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			connMu.Lock()
			conns[c] = true
			connMu.Unlock()
			go func() {
				defer func() {
					connMu.Lock()
					delete(conns, c)
					connMu.Unlock()
					c.Close()
				}()
				serveTCPConn(ctx, c, h, onQuery)
			}()
		}
	}()
	return func() {
		cancel()
		for _, c := range closers {
			c.Close()
		}
		connMu.Lock()
		for c := range conns {
			c.Close()
		}
		connMu.Unlock()
		wg.Wait()
	}, nil
}

func serveTCPConn(ctx context.Context, c net.Conn, h wireHandler, onQuery func(netip.AddrPort, string, []byte, []byte)) {
	var lenBuf [2]byte
	for {
		_ = c.SetReadDeadline(time.Now().Add(tcpIdleTimeout))
		if _, err := io.ReadFull(c, lenBuf[:]); err != nil {
			return
		}
		req := make([]byte, binary.BigEndian.Uint16(lenBuf[:]))
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		resp := h(ctx, req, "tcp")
		if onQuery != nil {
			onQuery(addrPortOf(c.RemoteAddr()), "tcp", req, resp)
		}
		if resp == nil {
			continue
		}
		out := make([]byte, 2+len(resp))
		binary.BigEndian.PutUint16(out, uint16(len(resp)))
		copy(out[2:], resp)
		_ = c.SetWriteDeadline(time.Now().Add(tcpIdleTimeout))
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

func addrPortOf(a net.Addr) netip.AddrPort {
	switch v := a.(type) {
	case *net.UDPAddr:
		return v.AddrPort()
	case *net.TCPAddr:
		return v.AddrPort()
	}
	if a == nil {
		return netip.AddrPort{}
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

// upstreamWire answers wire-format queries from an Upstream (the simulated
// internet's DNS server), truncating UDP replies to the client's size.
func upstreamWire(u Upstream) wireHandler {
	return func(ctx context.Context, b []byte, network string) []byte {
		req := new(mdns.Msg)
		if err := req.Unpack(b); err != nil {
			if len(b) < 12 {
				return nil
			}
			m := new(mdns.Msg)
			m.Id = binary.BigEndian.Uint16(b)
			m.Response = true
			m.Rcode = mdns.RcodeFormatError
			out, _ := m.Pack()
			return out
		}
		if req.Response {
			return nil
		}
		resp, err := u.Exchange(ctx, req, network)
		if err != nil || resp == nil {
			resp = new(mdns.Msg)
			resp.SetRcode(req, mdns.RcodeServerFailure)
		}
		if network == "udp" {
			size := mdns.MinMsgSize
			if opt := req.IsEdns0(); opt != nil && int(opt.UDPSize()) > size {
				size = int(opt.UDPSize())
			}
			resp.Truncate(size)
		}
		out, err := resp.Pack()
		if err != nil {
			return nil
		}
		return out
	}
}

// ServerQuery is one query a DNS pod (or the upstream server) answered, as
// its own log would show it.
type ServerQuery struct {
	At      time.Time      // virtual time
	Server  string         // the DNS pod "kube-system/coredns-0", or "external:upstream-dns"
	Client  netip.AddrPort // the source the server saw
	Network string         // udp or tcp
	Name    string
	Type    uint16
	Rcode   int // -1: no reply sent
	Answers int
}

// String is "kube-system/coredns-0 <- 10.244.2.2:40053/udp A my-service.default.svc.cluster.local. NOERROR 1".
func (q ServerQuery) String() string {
	rc := "no reply"
	if q.Rcode >= 0 {
		rc = mdns.RcodeToString[q.Rcode]
		if q.Rcode == mdns.RcodeSuccess && q.Answers == 0 {
			rc = "NODATA"
		}
	}
	return fmt.Sprintf("%s <- %s/%s %s %s %s %d", q.Server, q.Client, q.Network, mdns.TypeToString[q.Type], q.Name, rc, q.Answers)
}

func newServerQuery(at time.Time, server string, client netip.AddrPort, network string, req, resp []byte) ServerQuery {
	q := ServerQuery{At: at, Server: server, Client: client, Network: network, Rcode: -1}
	var m mdns.Msg
	if err := m.Unpack(req); err == nil && len(m.Question) > 0 {
		q.Name, q.Type = m.Question[0].Name, m.Question[0].Qtype
	}
	if resp != nil {
		var r mdns.Msg
		if err := r.Unpack(resp); err == nil {
			q.Rcode, q.Answers = r.Rcode, len(r.Answer)
		} else if len(resp) >= 4 {
			q.Rcode = int(binary.BigEndian.Uint16(resp[2:]) & 0xF)
		}
	}
	return q
}

// metrics counts what a DNS pod answered, for its Prometheus endpoint.
type metrics struct {
	mu        sync.Mutex
	requests  map[[3]string]uint64 // proto, family, type
	responses map[string]uint64    // rcode
}

func newMetrics() *metrics {
	return &metrics{requests: map[[3]string]uint64{}, responses: map[string]uint64{}}
}

func (m *metrics) observe(q ServerQuery) {
	fam := "1"
	if q.Client.Addr().Is6() && !q.Client.Addr().Is4In6() {
		fam = "2"
	}
	typ := mdns.TypeToString[q.Type]
	if typ == "" {
		typ = "other"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[[3]string{q.Network, fam, typ}]++
	if q.Rcode >= 0 {
		m.responses[mdns.RcodeToString[q.Rcode]]++
	}
}

// text renders the counters in Prometheus's text format, with the names and
// a subset of the labels CoreDNS's prometheus plugin uses (server and zone
// are those of kube-dns's single ".:53" server block).
func (m *metrics) text() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var lines []string
	for k, v := range m.requests {
		lines = append(lines, fmt.Sprintf("coredns_dns_requests_total{server=\"dns://:53\",zone=\".\",proto=%q,family=%q,type=%q} %d", k[0], k[1], k[2], v))
	}
	sort.Strings(lines)
	var b strings.Builder
	b.WriteString("# HELP coredns_dns_requests_total Counter of DNS requests made per zone, protocol and family.\n")
	b.WriteString("# TYPE coredns_dns_requests_total counter\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	lines = lines[:0]
	for rc, v := range m.responses {
		lines = append(lines, fmt.Sprintf("coredns_dns_responses_total{server=\"dns://:53\",zone=\".\",rcode=%q} %d", rc, v))
	}
	sort.Strings(lines)
	b.WriteString("# HELP coredns_dns_responses_total Counter of response status codes.\n")
	b.WriteString("# TYPE coredns_dns_responses_total counter\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return b.String()
}

var errNoNameserver = errors.New("no nameserver")

// ring keeps the last cap items appended, in order.
type ring[T any] struct {
	items []T
	start int // index of the oldest item once full
	cap   int
}

func (r *ring[T]) add(v T) {
	if len(r.items) < r.cap {
		r.items = append(r.items, v)
		return
	}
	r.items[r.start] = v
	r.start = (r.start + 1) % r.cap
}

func (r *ring[T]) list() []T {
	out := make([]T, 0, len(r.items))
	out = append(out, r.items[r.start:]...)
	return append(out, r.items[:r.start]...)
}

func (r *ring[T]) reset() { r.items, r.start = nil, 0 }
