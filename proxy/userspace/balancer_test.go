package userspace

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"
)

var (
	web    = spn("default", "web", "http", corev1.ProtocolTCP)
	client = netip.MustParseAddr("10.244.1.5")
	other  = netip.MustParseAddr("10.244.2.9")
)

func next(t *testing.T, b *Balancer, from netip.Addr, reset bool) Choice {
	t.Helper()
	c, err := b.Next(web, from, reset)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestBalancerRoundRobin(t *testing.T) {
	b := NewBalancer(newFakeClock(), 1)
	if _, err := b.Next(web, client, false); !errors.Is(err, ErrMissingService) {
		t.Fatalf("unknown service: %v, want ErrMissingService", err)
	}
	b.SetService(web, false, 0)
	if _, err := b.Next(web, client, false); !errors.Is(err, ErrMissingEndpoints) {
		t.Fatalf("no endpoints: %v, want ErrMissingEndpoints", err)
	}
	eps := []string{"10.244.1.2:80", "10.244.2.2:80", "10.244.3.2:80"}
	if !b.SetEndpoints(web, eps) {
		t.Fatal("first endpoints: no change reported")
	}
	order := b.Endpoints(web)
	if !sameSet(order, eps) {
		t.Fatalf("order %v is not a permutation of %v", order, eps)
	}
	for i := 0; i < 7; i++ {
		c := next(t, b, client, false)
		if c.Endpoint != order[i%3] || c.Reason != ReasonRoundRobin || c.Index != i%3 || c.Of != 3 {
			t.Fatalf("connection %d: %+v, want %s by round robin (index %d)", i, c, order[i%3], i%3)
		}
	}
	// The same set in another order changes nothing: the index goes on.
	if b.SetEndpoints(web, []string{eps[2], eps[0], eps[1]}) {
		t.Error("same set reported as a change")
	}
	if c := next(t, b, client, false); c.Endpoint != order[1] {
		t.Errorf("after an unchanged update: %s, want %s (index kept)", c.Endpoint, order[1])
	}
	// A new set starts over at index 0 of a new shuffle.
	b.SetEndpoints(web, eps[:2])
	order = b.Endpoints(web)
	if c := next(t, b, client, false); c.Endpoint != order[0] || c.Index != 0 {
		t.Errorf("after a change: %+v, want index 0 (%s)", c, order[0])
	}
	b.SetEndpoints(web, nil)
	if _, err := b.Next(web, client, false); !errors.Is(err, ErrMissingEndpoints) {
		t.Errorf("endpoints removed: %v", err)
	}
}

func TestBalancerShuffleIsSeeded(t *testing.T) {
	eps := []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80", "10.0.0.6:80"}
	order := func(seed uint64, in []string) []string {
		b := NewBalancer(newFakeClock(), seed)
		b.SetService(web, false, 0)
		b.SetEndpoints(web, in)
		return b.Endpoints(web)
	}
	rev := slices.Clone(eps)
	slices.Reverse(rev)
	if a, b := order(7, eps), order(7, rev); !slices.Equal(a, b) {
		t.Errorf("same seed, input order differs: %v vs %v", a, b)
	}
	distinct := map[string]bool{}
	for seed := uint64(0); seed < 20; seed++ {
		distinct[strings.Join(order(seed, eps), ",")] = true
	}
	if len(distinct) < 10 {
		t.Errorf("20 seeds gave only %d orders: the list is not shuffled", len(distinct))
	}
}

func TestBalancerAffinity(t *testing.T) {
	clk := newFakeClock()
	b := NewBalancer(clk, 3)
	b.SetService(web, true, 10)
	eps := []string{"10.244.1.2:80", "10.244.2.2:80", "10.244.3.2:80"}
	b.SetEndpoints(web, eps)
	order := b.Endpoints(web)

	peek, err := b.Peek(web, client)
	first := next(t, b, client, false)
	if err != nil || peek != first {
		t.Fatalf("peek %+v, %v; next %+v", peek, err, first)
	}
	if first.Reason != ReasonRoundRobin || first.Endpoint != order[0] || first.TTL != 10*time.Second {
		t.Fatalf("first connection: %+v", first)
	}
	// Within the timeout the client keeps its endpoint, and each use refreshes it.
	for i := 0; i < 4; i++ {
		clk.Advance(9 * time.Second)
		c := next(t, b, client, false)
		if c.Reason != ReasonAffinity || c.Endpoint != first.Endpoint || c.Age != 9*time.Second {
			t.Fatalf("use %d, 9 s after the previous: %+v, want affinity to %s", i, c, first.Endpoint)
		}
	}
	// Another client goes round robin.
	if c := next(t, b, other, false); c.Reason != ReasonRoundRobin || c.Endpoint != order[1] {
		t.Fatalf("other client: %+v", c)
	}
	// kube-proxy compares whole seconds of idleness with the timeout: 9.999 s counts as 9.
	clk.Advance(9*time.Second + 999*time.Millisecond)
	if c := next(t, b, client, false); c.Reason != ReasonAffinity {
		t.Fatalf("9.999 s idle: %+v, want affinity", c)
	}
	clk.Advance(10 * time.Second)
	peek, _ = b.Peek(web, client)
	if again, _ := b.Peek(web, client); again != peek {
		t.Fatalf("peek changed state: %+v then %+v", peek, again)
	}
	c := next(t, b, client, false)
	if c != peek {
		t.Fatalf("peek %+v, next %+v", peek, c)
	}
	if c.Reason != ReasonRoundRobin || c.Endpoint != order[2] {
		t.Fatalf("10 s idle: %+v, want round robin to %s", c, order[2])
	}
	// The new endpoint is the client's from now on.
	if c2 := next(t, b, client, false); c2.Reason != ReasonAffinity || c2.Endpoint != order[2] {
		t.Fatalf("after expiry: %+v", c2)
	}
	// A reset (the proxier's retry after a failed dial) skips the entry and replaces it.
	r := next(t, b, client, true)
	if r.Reason != ReasonRoundRobin || !r.AffinityReset || r.Endpoint == order[2] {
		t.Fatalf("reset: %+v", r)
	}
	if c := next(t, b, client, false); c.Reason != ReasonAffinity || c.Endpoint != r.Endpoint {
		t.Fatalf("after reset: %+v, want affinity to %s", c, r.Endpoint)
	}
	// Removing the client's endpoint drops its entry.
	var keep []string
	for _, e := range eps {
		if e != r.Endpoint {
			keep = append(keep, e)
		}
	}
	b.SetEndpoints(web, keep)
	for _, a := range b.Affinity(web) {
		if a.Client == client {
			t.Fatalf("entry for a removed endpoint kept: %+v", a)
		}
	}
	// Stale entries go at cleanup.
	if len(b.Affinity(web)) == 0 {
		t.Fatal("other client's entry missing")
	}
	clk.Advance(11 * time.Second)
	b.CleanupStaleSessions()
	if got := b.Affinity(web); len(got) != 0 {
		t.Errorf("after cleanup: %+v", got)
	}
	// Turning affinity off forgets entries and goes round robin.
	next(t, b, client, false)
	b.SetService(web, false, 0)
	if got := b.Affinity(web); len(got) != 0 {
		t.Errorf("affinity off, entries kept: %+v", got)
	}
}

// Property: without affinity, any n consecutive choices over n endpoints visit each
// endpoint exactly once; with affinity and no time passing, a client always gets the
// endpoint of its first connection.
func TestBalancerProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(t, "endpoints")
		var eps []string
		for i := 0; i < n; i++ {
			eps = append(eps, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), 80).String())
		}
		clk := newFakeClock()
		b := NewBalancer(clk, rapid.Uint64().Draw(t, "seed"))
		b.SetService(web, false, 0)
		b.SetEndpoints(web, eps)
		skip := rapid.IntRange(0, 20).Draw(t, "skip")
		for i := 0; i < skip; i++ {
			b.Next(web, client, false)
		}
		seen := map[string]int{}
		for i := 0; i < n; i++ {
			c, _ := b.Next(web, client, false)
			seen[c.Endpoint]++
		}
		for _, e := range eps {
			if seen[e] != 1 {
				t.Fatalf("endpoint %s chosen %d times in %d consecutive choices", e, seen[e], n)
			}
		}
		b.SetService(web, true, rapid.IntRange(1, 100).Draw(t, "ttl"))
		clients := rapid.IntRange(1, 5).Draw(t, "clients")
		got := map[int]string{}
		for i := 0; i < 30; i++ {
			k := rapid.IntRange(0, clients-1).Draw(t, "client")
			ip := netip.AddrFrom4([4]byte{10, 1, 0, byte(k)})
			c, _ := b.Next(web, ip, false)
			if prev, ok := got[k]; ok && prev != c.Endpoint {
				t.Fatalf("client %v moved from %s to %s without time passing", ip, prev, c.Endpoint)
			}
			got[k] = c.Endpoint
		}
	})
}
