package dns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
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
// the upstream behaves, at most MaxUpstreamInFlight exchanges are in flight: a query
// beyond gets SERVFAIL at once.

// MaxUpstreamInFlight bounds the upstream exchanges `dns serve` has in flight.
const MaxUpstreamInFlight = 64

// errUpstreamBusy is a query refused because the upstream has enough in flight.
var errUpstreamBusy = errors.New("upstream: too many queries in flight")

// limitedUpstream caps an upstream's exchanges in flight.
type limitedUpstream struct {
	next  Upstream
	slots chan struct{}
}

func newLimitedUpstream(next Upstream, n int) *limitedUpstream {
	return &limitedUpstream{next: next, slots: make(chan struct{}, n)}
}

// Exchange implements Upstream.
func (l *limitedUpstream) Exchange(ctx context.Context, req *mdns.Msg, network string) (*mdns.Msg, error) {
	select {
	case l.slots <- struct{}{}:
	default:
		return nil, errUpstreamBusy
	}
	defer func() { <-l.slots }()
	return l.next.Exchange(ctx, req, network)
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
