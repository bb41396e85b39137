package dns

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"time"

	mdns "github.com/miekg/dns"
)

// waitedKey carries a lookup's Result.Waited through the exchanges.
type waitedKey struct{}

// addWaited adds one reply timeout to the lookup's Result.Waited.
func (s *Stub) addWaited(ctx context.Context) {
	if p, ok := ctx.Value(waitedKey{}).(*time.Duration); ok {
		*p += s.timeout()
	}
}

// localAddr is the local end of conn (zero when unknown).
func localAddr(conn *mdns.Conn) netip.AddrPort {
	if conn == nil || conn.Conn == nil {
		return netip.AddrPort{}
	}
	var ap netip.AddrPort
	switch a := conn.LocalAddr().(type) {
	case *net.UDPAddr:
		ap = a.AddrPort()
	case *net.TCPAddr:
		ap = a.AddrPort()
	case nil:
		return netip.AddrPort{}
	default:
		var err error
		if ap, err = netip.ParseAddrPort(a.String()); err != nil {
			return netip.AddrPort{}
		}
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// exchangeVC asks the questions over one TCP connection, as glibc's send_vc
// does under options use-vc: every question written on the connection, then
// the replies read (matched by ID) within one timeout. replies[i] is nil when
// qtypes[i] got no reply.
func (s *Stub) exchangeVC(ctx context.Context, addr, fqdn string, qtypes []uint16, log *[]QueryLog) []*mdns.Msg {
	replies := make([]*mdns.Msg, len(qtypes))
	entries := make([]QueryLog, len(qtypes))
	for i, qt := range qtypes {
		entries[i] = QueryLog{Name: fqdn, Type: qt, Server: addr, Network: "tcp", Rcode: -1}
	}
	defer func() { *log = append(*log, entries...) }()
	fail := func(err error) []*mdns.Msg {
		for i := range entries {
			if replies[i] == nil && entries[i].Err == nil {
				entries[i].Err = err
			}
		}
		return replies
	}
	c, err := s.dial(ctx, "tcp", addr)
	if err != nil {
		return fail(err)
	}
	conn := &mdns.Conn{Conn: c}
	defer conn.Close()
	local := localAddr(conn)
	pending := map[uint16]int{}
	for i, qt := range qtypes {
		entries[i].Local = local
		q := s.query(fqdn, qt)
		if err := conn.WriteMsg(q); err != nil {
			return fail(err)
		}
		pending[q.Id] = i
	}
	timer := s.newReplyTimer()
	for len(pending) > 0 {
		r, err := timer.read(conn)
		if err != nil {
			if isTimeout(err) {
				s.addWaited(ctx)
			}
			return fail(err)
		}
		i, ok := pending[r.Id]
		if !ok || len(r.Question) != 1 || !strings.EqualFold(r.Question[0].Name, fqdn) || r.Question[0].Qtype != qtypes[i] {
			continue
		}
		delete(pending, r.Id)
		replies[i] = r
		entries[i].Rcode, entries[i].Answers, entries[i].TC = r.Rcode, len(r.Answer), r.Truncated
	}
	return replies
}
