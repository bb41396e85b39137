package userspace

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/proxy"
)

// Decision is what the proxier did with one client connection (TCP) or one new UDP
// session: which listener it arrived on, each endpoint it tried and why, and the
// endpoint that took it. A datapath trace ends at the proxy listener (the splice
// between the two sockets is inside the proxy), so these records are the rest of the
// story.
type Decision struct {
	Seq      uint64 // 1, 2, ... per proxier
	Time     time.Time
	Service  proxy.ServicePortName
	Protocol corev1.Protocol
	// ProxyPort is the listener's port; Listener the address the client reached (the
	// REDIRECT target for TCP; the socket's own, usually wildcard, address for UDP).
	ProxyPort uint16
	Listener  netip.AddrPort
	Client    netip.AddrPort
	// Attempts are the endpoint choices in order: the first by round robin or
	// affinity, each further one a retry after a failed dial.
	Attempts []Attempt
	// Endpoint took the connection ("" if none did); Source is the proxy's address
	// toward it, which is what the endpoint sees as the client.
	Endpoint string
	Source   netip.AddrPort
	// Err says why no endpoint took the connection.
	Err string
}

// Attempt is one endpoint choice and its dial.
type Attempt struct {
	Choice
	Timeout time.Duration
	Err     string // "" when the dial succeeded
}

// Retries is the number of attempts after the first.
func (d Decision) Retries() int {
	if len(d.Attempts) == 0 {
		return 0
	}
	return len(d.Attempts) - 1
}

func (d Decision) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s %s from %v via listener %v:", d.Seq, strings.ToLower(string(d.Protocol)), d.Service, d.Client, d.Listener)
	for i, a := range d.Attempts {
		if i > 0 {
			b.WriteString(";")
		}
		what := "try"
		if i > 0 {
			what = "retry"
		}
		fmt.Fprintf(&b, " %s %s (%s)", what, a.Endpoint, a.Choice)
		if a.Err != "" {
			fmt.Fprintf(&b, " failed: %s", a.Err)
		}
	}
	if d.Endpoint != "" {
		fmt.Fprintf(&b, " → %s, seen from %v", d.Endpoint, d.Source)
	} else {
		fmt.Fprintf(&b, " → no endpoint: %s", d.Err)
	}
	return b.String()
}

// decisionLog keeps the newest decisions in a ring.
type decisionLog struct {
	mu   sync.Mutex
	seq  uint64
	ring []Decision
	next int
	full bool
	on   func(Decision)
}

func newDecisionLog(size int, on func(Decision)) *decisionLog {
	return &decisionLog{ring: make([]Decision, size), on: on}
}

func (l *decisionLog) add(d Decision) {
	l.mu.Lock()
	l.seq++
	d.Seq = l.seq
	if len(l.ring) > 0 {
		l.ring[l.next] = d
		l.next = (l.next + 1) % len(l.ring)
		if l.next == 0 {
			l.full = true
		}
	}
	on := l.on
	l.mu.Unlock()
	if on != nil {
		on(d)
	}
}

func (l *decisionLog) list() []Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Decision
	if l.full {
		out = append(out, l.ring[l.next:]...)
	}
	return append(out, l.ring[:l.next]...)
}
