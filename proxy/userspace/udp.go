package userspace

import (
	"errors"
	"net"
	"net/netip"
	"sort"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/proxy"
)

// udpSession relays one client's datagrams: the first datagram from a client address
// chooses an endpoint and opens a socket to it; later datagrams from the same address
// go through that socket, and what the endpoint sends back is written to the client
// from the proxy listener's socket (so its source is the address the client's
// datagram was redirected to, and conntrack turns it back into the service address).
// A session ends after the idle timeout without a datagram either way, or when the
// endpoint's socket fails (an ICMP port unreachable, say); the client's next datagram
// then makes a new choice.
type udpSession struct {
	s        *serviceProxy
	client   netip.AddrPort
	from     net.Addr
	backend  net.Conn
	endpoint string

	mu    sync.Mutex
	last  time.Time
	timer Timer
	ended bool
}

// Session is one UDP session.
type Session struct {
	Service  proxy.ServicePortName
	Client   netip.AddrPort
	Endpoint string
	// Source is the proxy's address toward the endpoint.
	Source     netip.AddrPort
	LastActive time.Time
}

// Sessions lists the live UDP sessions, by service port and client.
func (p *Proxier) Sessions() []Session {
	p.mu.Lock()
	var sps []*serviceProxy
	for _, s := range p.services {
		sps = append(sps, s)
	}
	p.mu.Unlock()
	var out []Session
	for _, s := range sps {
		s.mu.Lock()
		for _, u := range s.sessions {
			u.mu.Lock()
			out = append(out, Session{Service: s.name, Client: u.client, Endpoint: u.endpoint, Source: addrPortOf(u.backend.LocalAddr()), LastActive: u.last})
			u.mu.Unlock()
		}
		s.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Service != out[j].Service {
			return out[i].Service.Less(out[j].Service)
		}
		return out[i].Client.Compare(out[j].Client) < 0
	})
	return out
}

func (s *serviceProxy) serveUDP() {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			// A UDP socket also reports ICMP errors for datagrams it sent (replies to a
			// client that is gone): those leave it usable.
			if !s.alive.Load() || !transient(err) && !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EHOSTUNREACH) && !errors.Is(err, syscall.ENETUNREACH) {
				return
			}
			continue
		}
		u := s.session(from)
		if u == nil {
			continue
		}
		if _, err := u.backend.Write(buf[:n]); err == nil {
			u.touch()
		}
	}
}

// session returns the client's session, making one (and a Decision) for a new client.
// Only serveUDP calls it, so one client never gets two.
func (s *serviceProxy) session(from net.Addr) *udpSession {
	client := addrPortOf(from)
	s.mu.Lock()
	u := s.sessions[client]
	s.mu.Unlock()
	if u != nil {
		return u
	}
	p := s.p
	d := Decision{Time: p.clock.Now(), Service: s.name, Protocol: corev1.ProtocolUDP, ProxyPort: s.port, Listener: s.addr, Client: client}
	conn, err := s.connect(p.udpNet, client, &d)
	p.log.add(d)
	if err != nil {
		return nil
	}
	u = &udpSession{s: s, client: client, from: from, backend: conn, endpoint: d.Endpoint, last: p.clock.Now()}
	s.mu.Lock()
	if !s.alive.Load() {
		s.mu.Unlock()
		conn.Close()
		return nil
	}
	s.sessions[client] = u
	s.mu.Unlock()
	u.mu.Lock()
	u.timer = p.clock.AfterFunc(p.udpIdle, u.check)
	u.mu.Unlock()
	go u.relay()
	return u
}

func (u *udpSession) touch() {
	now := u.s.p.clock.Now()
	u.mu.Lock()
	u.last = now
	u.mu.Unlock()
}

// check ends the session if it has been idle for the timeout, or checks again when it
// would be.
func (u *udpSession) check() {
	p := u.s.p
	u.mu.Lock()
	if u.ended {
		u.mu.Unlock()
		return
	}
	if idle := p.clock.Now().Sub(u.last); idle < p.udpIdle {
		u.timer = p.clock.AfterFunc(p.udpIdle-idle, u.check)
		u.mu.Unlock()
		return
	}
	u.mu.Unlock()
	u.end()
}

// relay writes the endpoint's datagrams back to the client.
func (u *udpSession) relay() {
	buf := make([]byte, 64<<10)
	for {
		n, err := u.backend.Read(buf)
		if err != nil {
			break
		}
		u.touch()
		if _, err := u.s.pc.WriteTo(buf[:n], u.from); err != nil {
			break
		}
	}
	u.end()
}

func (u *udpSession) end() {
	u.mu.Lock()
	if u.ended {
		u.mu.Unlock()
		return
	}
	u.ended = true
	if u.timer != nil {
		u.timer.Stop()
	}
	u.mu.Unlock()
	u.backend.Close()
	s := u.s
	s.mu.Lock()
	if s.sessions[u.client] == u {
		delete(s.sessions, u.client)
	}
	s.mu.Unlock()
}
