package dns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mdns "github.com/miekg/dns"
)

// Forwarding loops and amplification (`dns serve --upstream`).
//
// An upstream that sends this server's own queries back to it (--upstream at its own
// address, or a forwarder that forwards here) would turn one query into an endless
// stream of exchanges, each with its socket. As CoreDNS's loop plugin does, Serve sends
// a probe for a random name to the upstream once it listens: if the probe comes back
// to the server, forwarding loops and Serve stops with an error saying so. And however
// the upstream behaves, at most MaxUpstreamInFlight exchanges are in flight, at most
// MaxUpstreamPerClient of them for one client address: a query beyond either cap gets
// SERVFAIL at once, and is counted (UpstreamStats). An exchange that outlives its
// context's deadline is answered SERVFAIL then, whether or not the upstream
// implementation honours the context (its slot stays taken until it returns).

// MaxUpstreamInFlight bounds the upstream exchanges `dns serve` has in flight.
const MaxUpstreamInFlight = 64

// MaxUpstreamPerClient bounds the upstream exchanges in flight for one client
// address, so that one client cannot take every slot.
const MaxUpstreamPerClient = 16

// errUpstreamBusy is a query refused because the upstream has enough in flight.
var errUpstreamBusy = errors.New("upstream: too many queries in flight")

// errClientBusy is a query refused because its client has enough in flight.
var errClientBusy = errors.New("upstream: too many queries in flight for this client")

// clientKey is the context key of the client's address (withClient).
type clientKey struct{}

// withClient returns ctx carrying the address of the client a query came from.
func withClient(ctx context.Context, a netip.Addr) context.Context {
	return context.WithValue(ctx, clientKey{}, a.Unmap())
}

// clientOf returns the address withClient stored, if any.
func clientOf(ctx context.Context) (netip.Addr, bool) {
	a, ok := ctx.Value(clientKey{}).(netip.Addr)
	return a, ok && a.IsValid()
}

// addrOfNet returns the IP of a net.Addr (UDP, TCP or anything printing host:port).
func addrOfNet(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.UDPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	case nil:
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// UpstreamStats counts the queries the caps answered SERVFAIL without asking the
// upstream, and the exchanges that ran out of time.
type UpstreamStats struct {
	Busy       uint64 // over MaxUpstreamInFlight
	ClientBusy uint64 // over MaxUpstreamPerClient
	TimedOut   uint64 // past their deadline
}

// limitedUpstream caps an upstream's exchanges in flight, in all and per client.
type limitedUpstream struct {
	next      Upstream
	slots     chan struct{}
	perClient int // 0: no per-client cap

	mu       sync.Mutex
	byClient map[netip.Addr]int

	busy, clientBusy, timedOut atomic.Uint64
}

func newLimitedUpstream(next Upstream, n int) *limitedUpstream {
	return &limitedUpstream{next: next, slots: make(chan struct{}, n), byClient: map[netip.Addr]int{}}
}

// Stats returns the counts so far.
func (l *limitedUpstream) Stats() UpstreamStats {
	return UpstreamStats{Busy: l.busy.Load(), ClientBusy: l.clientBusy.Load(), TimedOut: l.timedOut.Load()}
}

// take claims a slot for the client (an invalid address: no per-client claim).
func (l *limitedUpstream) take(client netip.Addr) error {
	if l.perClient > 0 && client.IsValid() {
		l.mu.Lock()
		if l.byClient[client] >= l.perClient {
			l.mu.Unlock()
			l.clientBusy.Add(1)
			return errClientBusy
		}
		l.byClient[client]++
		l.mu.Unlock()
	}
	select {
	case l.slots <- struct{}{}:
		return nil
	default:
		l.release(client, false)
		l.busy.Add(1)
		return errUpstreamBusy
	}
}

func (l *limitedUpstream) release(client netip.Addr, slot bool) {
	if slot {
		<-l.slots
	}
	if l.perClient > 0 && client.IsValid() {
		l.mu.Lock()
		if l.byClient[client]--; l.byClient[client] <= 0 {
			delete(l.byClient, client)
		}
		l.mu.Unlock()
	}
}

// Exchange implements Upstream.
func (l *limitedUpstream) Exchange(ctx context.Context, req *mdns.Msg, network string) (*mdns.Msg, error) {
	client, _ := clientOf(ctx)
	if err := l.take(client); err != nil {
		return nil, err
	}
	type result struct {
		m   *mdns.Msg
		err error
	}
	done := make(chan result, 1)
	go func() {
		m, err := l.next.Exchange(ctx, req, network)
		l.release(client, true) // before the result: the caller's next query finds the slot free
		done <- result{m, err}
	}()
	select {
	case r := <-done:
		return r.m, r.err
	case <-ctx.Done():
		l.timedOut.Add(1)
		return nil, fmt.Errorf("upstream: %w", ctx.Err())
	}
}

// loopGuard is the server's handler with the loop probe's detector in front: the probe
// name coming in means the upstream sends queries back here.
type loopGuard struct {
	next  mdns.Handler
	probe string // lower case, with the final dot
	seen  atomic.Bool
}

func newLoopGuard(next mdns.Handler) *loopGuard {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &loopGuard{next: next, probe: hex.EncodeToString(b) + ".clusterlab-loop-probe."}
}

// ServeDNS implements mdns.Handler.
func (g *loopGuard) ServeDNS(w mdns.ResponseWriter, r *mdns.Msg) {
	if len(r.Question) == 1 && strings.EqualFold(r.Question[0].Name, g.probe) {
		g.seen.Store(true)
		m := new(mdns.Msg)
		m.SetRcode(r, mdns.RcodeRefused)
		_ = w.WriteMsg(m)
		return
	}
	g.next.ServeDNS(w, r)
}

// checkLoop sends the probe to the upstream and reports a loop when it came back.
func (g *loopGuard) checkLoop(ctx context.Context, up Upstream, upstreamAddr string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	q := new(mdns.Msg)
	q.SetQuestion(g.probe, mdns.TypeHINFO)
	q.RecursionDesired = true
	_, _ = up.Exchange(ctx, q, "udp") // whatever the answer, or none: what matters is whether it came back
	if g.seen.Load() {
		return fmt.Errorf("--upstream %s sends this server's own queries back to it: a forwarding loop (the probe %s came back); point --upstream at a resolver that does not forward to this server", upstreamAddr, strings.TrimSuffix(g.probe, "."))
	}
	return nil
}
