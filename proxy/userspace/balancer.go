package userspace

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/clusterlab/clusterlab/proxy"
)

// Errors of Balancer.Next, as the userspace proxier's round robin names them.
var (
	ErrMissingService   = errors.New("missing service entry")
	ErrMissingEndpoints = errors.New("missing endpoints")
)

// Reason says how an endpoint was chosen.
type Reason string

// Reasons.
const (
	// ReasonRoundRobin: the next endpoint in the service's list.
	ReasonRoundRobin Reason = "round robin"
	// ReasonAffinity: the endpoint the client IP used last, within the ClientIP
	// affinity timeout.
	ReasonAffinity Reason = "affinity"
)

// Choice is one endpoint decision of the Balancer, with its reason.
type Choice struct {
	Endpoint string // "ip:port"
	Reason   Reason
	// Index and Of: round robin took the Index-th (from 0) of Of endpoints.
	Index, Of int
	// Age: affinity found the client's entry last used Age ago (TTL is the timeout).
	Age time.Duration
	TTL time.Duration
	// AffinityReset: the client's affinity entry was ignored because a dial to the
	// endpoint it named had just failed (the proxier's retry), or none was looked for.
	AffinityReset bool
}

func (c Choice) String() string {
	switch c.Reason {
	case ReasonAffinity:
		return fmt.Sprintf("affinity: client's endpoint, last used %v ago (timeout %v)", c.Age, c.TTL)
	case ReasonRoundRobin:
		s := fmt.Sprintf("round robin: %d of %d", c.Index+1, c.Of)
		if c.AffinityReset {
			s += " (affinity reset)"
		}
		return s
	}
	return string(c.Reason)
}

// Balancer is the userspace proxier's load balancer (kube-proxy's LoadBalancerRR):
// per service port a list of endpoints in a random order, a round-robin index into
// it, and with ClientIP session affinity a table of client IP → endpoint entries that
// expire when unused for the affinity timeout (whole seconds, as kube-proxy
// truncates). When the set of endpoints changes the list is shuffled again (from the
// seeded source) and the index starts over; affinity entries naming removed
// endpoints are dropped. It is safe for concurrent use.
type Balancer struct {
	mu       sync.Mutex
	clock    Clock
	rng      *rand.Rand
	services map[proxy.ServicePortName]*balancerState
}

type balancerState struct {
	endpoints []string
	index     int
	clientIP  bool
	ttl       time.Duration
	clients   map[netip.Addr]*affinityEntry
}

type affinityEntry struct {
	endpoint string
	lastUsed time.Time
}

// NewBalancer returns a Balancer on the clock, shuffling from the seed.
func NewBalancer(clock Clock, seed uint64) *Balancer {
	if clock == nil {
		clock = WallClock{}
	}
	return &Balancer{clock: clock, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), services: map[proxy.ServicePortName]*balancerState{}}
}

func (b *Balancer) stateLocked(name proxy.ServicePortName) *balancerState {
	st := b.services[name]
	if st == nil {
		st = &balancerState{ttl: proxy.DefaultStickyMaxAgeSeconds * time.Second, clients: map[netip.Addr]*affinityEntry{}}
		b.services[name] = st
	}
	return st
}

// SetService creates or updates a service port's entry: ClientIP affinity on or off
// and its timeout in seconds (0 means the API default, 3 hours).
func (b *Balancer) SetService(name proxy.ServicePortName, clientIP bool, ttlSeconds int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.stateLocked(name)
	if ttlSeconds <= 0 {
		ttlSeconds = proxy.DefaultStickyMaxAgeSeconds
	}
	st.clientIP = clientIP
	st.ttl = time.Duration(ttlSeconds) * time.Second
	if !clientIP {
		clear(st.clients)
	}
}

// DeleteService forgets a service port.
func (b *Balancer) DeleteService(name proxy.ServicePortName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.services, name)
}

// SetEndpoints sets a service port's endpoints ("ip:port"). If the set is unchanged
// nothing happens (order and index stay); otherwise affinity entries for endpoints that
// went away are dropped and the new list is shuffled with the index back at 0. It
// reports whether the set changed.
func (b *Balancer) SetEndpoints(name proxy.ServicePortName, endpoints []string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.stateLocked(name)
	if sameSet(st.endpoints, endpoints) {
		return false
	}
	keep := map[string]bool{}
	for _, e := range endpoints {
		keep[e] = true
	}
	for ip, a := range st.clients {
		if !keep[a.endpoint] {
			delete(st.clients, ip)
		}
	}
	list := slices.Clone(endpoints)
	sort.Strings(list) // shuffle from a canonical order, so the result depends on the seed only
	b.rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	st.endpoints = list
	st.index = 0
	if len(list) == 0 {
		clear(st.clients)
	}
	return true
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	sort.Strings(x)
	sort.Strings(y)
	return slices.Equal(x, y)
}

// Endpoints returns a service port's endpoints in their round-robin order.
func (b *Balancer) Endpoints(name proxy.ServicePortName) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if st := b.services[name]; st != nil {
		return slices.Clone(st.endpoints)
	}
	return nil
}

// HasEndpoints reports whether a service port has endpoints.
func (b *Balancer) HasEndpoints(name proxy.ServicePortName) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.services[name]
	return st != nil && len(st.endpoints) > 0
}

// Next chooses the endpoint for a new connection from client. With ClientIP affinity
// and resetAffinity false, a client whose entry was used less than the timeout ago
// (in whole seconds) gets its endpoint again and the entry's time is refreshed.
// Otherwise round robin takes the next endpoint, and with affinity the client's entry
// is set to it. resetAffinity is the proxier's retry after a failed dial: it skips the
// entry, so the next endpoint is tried and becomes the client's.
func (b *Balancer) Next(name proxy.ServicePortName, client netip.Addr, resetAffinity bool) (Choice, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.services[name]
	if st == nil {
		return Choice{}, ErrMissingService
	}
	if len(st.endpoints) == 0 {
		return Choice{}, ErrMissingEndpoints
	}
	now := b.clock.Now()
	client = client.Unmap()
	if st.clientIP && !resetAffinity {
		if a := st.clients[client]; a != nil {
			age := now.Sub(a.lastUsed)
			if time.Duration(int64(age.Seconds()))*time.Second < st.ttl {
				a.lastUsed = now
				return Choice{Endpoint: a.endpoint, Reason: ReasonAffinity, Age: age, TTL: st.ttl}, nil
			}
		}
	}
	c := Choice{Endpoint: st.endpoints[st.index], Reason: ReasonRoundRobin, Index: st.index, Of: len(st.endpoints), AffinityReset: st.clientIP && resetAffinity}
	st.index = (st.index + 1) % len(st.endpoints)
	if st.clientIP {
		st.clients[client] = &affinityEntry{endpoint: c.Endpoint, lastUsed: now}
		c.TTL = st.ttl
	}
	return c, nil
}

// Peek returns what Next would choose for a new connection from client now, changing
// nothing (for traces).
func (b *Balancer) Peek(name proxy.ServicePortName, client netip.Addr) (Choice, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.services[name]
	if st == nil {
		return Choice{}, ErrMissingService
	}
	if len(st.endpoints) == 0 {
		return Choice{}, ErrMissingEndpoints
	}
	if st.clientIP {
		if a := st.clients[client.Unmap()]; a != nil {
			age := b.clock.Now().Sub(a.lastUsed)
			if time.Duration(int64(age.Seconds()))*time.Second < st.ttl {
				return Choice{Endpoint: a.endpoint, Reason: ReasonAffinity, Age: age, TTL: st.ttl}, nil
			}
		}
	}
	c := Choice{Endpoint: st.endpoints[st.index], Reason: ReasonRoundRobin, Index: st.index, Of: len(st.endpoints)}
	if st.clientIP {
		c.TTL = st.ttl
	}
	return c, nil
}

// CleanupStaleSessions drops affinity entries unused for the timeout (kube-proxy does
// this on every sync).
func (b *Balancer) CleanupStaleSessions() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	for _, st := range b.services {
		for ip, a := range st.clients {
			if time.Duration(int64(now.Sub(a.lastUsed).Seconds()))*time.Second >= st.ttl {
				delete(st.clients, ip)
			}
		}
	}
}

// AffinityEntry is one ClientIP affinity entry.
type AffinityEntry struct {
	Client   netip.Addr
	Endpoint string
	LastUsed time.Time
}

// Affinity lists a service port's affinity entries, by client address.
func (b *Balancer) Affinity(name proxy.ServicePortName) []AffinityEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.services[name]
	if st == nil {
		return nil
	}
	var out []AffinityEntry
	for ip, a := range st.clients {
		out = append(out, AffinityEntry{Client: ip, Endpoint: a.endpoint, LastUsed: a.lastUsed})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Client.Less(out[j].Client) })
	return out
}
