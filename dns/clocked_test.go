package dns

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"
)

// dropNthOfFlow drops the nth UDP packet to port 53 of each client socket
// (source address and port) on a node, as a conntrack insert race would
// drop the second query of a back-to-back pair. It returns the number of
// packets dropped.
func dropNthOfFlow(t *testing.T, n *netsim.Node, nth int) func() int {
	var mu sync.Mutex
	seen := map[netip.AddrPort]int{}
	dropped := 0
	remove := n.AddHandler(netsim.HandlerSpec{Name: "drop-nth", Hook: netfilter.Prerouting, Priority: -1000,
		Handler: netsim.HandlerFunc(func(_ *netsim.Context, p *netsim.Packet) netsim.Verdict {
			if p.Proto != 17 || p.DstPort != 53 {
				return netsim.Verdict{}
			}
			mu.Lock()
			defer mu.Unlock()
			k := netip.AddrPortFrom(p.Src, p.SrcPort)
			seen[k]++
			if seen[k] == nth {
				dropped++
				return netsim.Verdict{Kind: netsim.Drop}
			}
			return netsim.Verdict{}
		})})
	t.Cleanup(remove)
	return func() int { mu.Lock(); defer mu.Unlock(); return dropped }
}

// TestLookupOnClockLostSecondQuery: the stub sends A and AAAA back to back
// from one socket; the AAAA query is lost on the way. The round ends at the
// 5 s timeout of virtual time with the A reply in, and glibc's fallback asks
// both again one at a time on the same socket (same source port), which
// the DNS pod answers. Under single-request-reopen each query has a socket
// of its own, nothing is lost and nothing waits; under use-vc the queries go
// over TCP on one connection.
func TestLookupOnClockLostSecondQuery(t *testing.T) {
	cases := []struct {
		name    string
		options []string
		waited  time.Duration
		queries []string // type/network of each query, in order
		ports   int      // distinct source ports
		dropped int
	}{
		{"parallel", nil, 5 * time.Second, []string{"A/udp ok", "AAAA/udp lost", "A/udp ok", "AAAA/udp ok"}, 1, 1},
		{"timeout:2", []string{"timeout:2"}, 2 * time.Second, []string{"A/udp ok", "AAAA/udp lost", "A/udp ok", "AAAA/udp ok"}, 1, 1},
		// Already sequential: the fallback goes to single-request-reopen, a new
		// socket for the retry's A and another for its AAAA.
		{"single-request", []string{"single-request"}, 5 * time.Second, []string{"A/udp ok", "AAAA/udp lost", "A/udp ok", "AAAA/udp ok"}, 3, 1},
		{"single-request-reopen", []string{"single-request-reopen"}, 0, []string{"A/udp ok", "AAAA/udp ok"}, 2, 0},
		{"use-vc", []string{"use-vc"}, 0, []string{"A/tcp ok", "AAAA/tcp ok"}, 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := simCluster(t, nil, "node-a", "node-b")
			cd := installDNS(t, c, ClusterDNSOptions{})
			mustApply(t, c, service.NewService("default/my-service", service.Selector("app=web"), service.Port("http", 80, 8080)))
			pod := service.NewPod("default/client", service.OnNode("node-a"))
			if len(tc.options) > 0 {
				pod.Spec.DNSConfig = &corev1.PodDNSConfig{}
				for _, o := range tc.options {
					name, val, _ := strings.Cut(o, ":")
					opt := corev1.PodDNSConfigOption{Name: name}
					if val != "" {
						opt.Value = &val
					}
					pod.Spec.DNSConfig.Options = append(pod.Spec.DNSConfig.Options, opt)
				}
			}
			mustPod(t, c, pod)
			dropped := dropNthOfFlow(t, c.Node("node-a").Node, 2)
			pr := cd.Resolver("default", "client")
			stub := NewStub(pr.Conf, pr.Stub.Dial)
			start := c.Clock().Now()
			res, err := LookupOnClock(simCtx(t), c, stub, "my-service.default.svc.cluster.local.", FamilyAny)
			if err != nil {
				t.Fatalf("lookup: %v\n%s", err, logLines(res.Log))
			}
			if len(res.Addrs) != 1 {
				t.Errorf("addresses %v, want the ClusterIP", res.Addrs)
			}
			if res.Waited != tc.waited {
				t.Errorf("waited %v, want %v\n%s", res.Waited, tc.waited, logLines(res.Log))
			}
			if el := c.Clock().Since(start); el < tc.waited {
				t.Errorf("virtual time moved %v, want at least %v", el, tc.waited)
			}
			var got []string
			ports := map[netip.AddrPort]bool{}
			for _, q := range res.Log {
				s := "ok"
				if q.Rcode < 0 {
					s = "lost"
				}
				got = append(got, mdns.TypeToString[q.Type]+"/"+q.Network+" "+s)
				if !q.Local.IsValid() || q.Local.Addr() != c.Pod("default", "client").IP() {
					t.Errorf("query %v from %v, want the pod's address", q, q.Local)
				}
				ports[q.Local] = true
			}
			if !slices.Equal(got, tc.queries) {
				t.Errorf("queries %v, want %v", got, tc.queries)
			}
			if len(ports) != tc.ports {
				t.Errorf("source ports %v, want %d", ports, tc.ports)
			}
			if d := dropped(); d != tc.dropped {
				t.Errorf("dropped %d queries, want %d", d, tc.dropped)
			}
		})
	}
}

// TestPodResolverClockTimeouts: with ClusterDNSOptions.ClockTimeouts the pod's
// own resolver (what its Dial and HTTP clients use) waits for lost replies on
// the virtual clock: the lost AAAA query costs 5 s of virtual time and the
// retry answers; the fallback to single-request is kept for the next lookup,
// which sends A and AAAA one at a time and loses nothing.
func TestPodResolverClockTimeouts(t *testing.T) {
	c := simCluster(t, nil, "node-a", "node-b")
	cd := installDNS(t, c, ClusterDNSOptions{ClockTimeouts: true})
	mustApply(t, c, service.NewService("default/my-service", service.Selector("app=web"), service.Port("http", 80, 8080)))
	mustPod(t, c, service.NewPod("default/client", service.OnNode("node-a")))
	dropNthOfFlow(t, c.Node("node-a").Node, 2)
	pr := cd.Resolver("default", "client")
	resolve := func() Lookup {
		t.Helper()
		var err error
		RunOnClock(simCtx(t), c, 5*time.Second, func() { _, err = pr.Resolve(simCtx(t), "my-service") })
		if err != nil {
			t.Fatalf("resolve: %v", err)
		}
		lks := pr.Lookups()
		return lks[len(lks)-1]
	}
	start := c.Clock().Now()
	first := resolve()
	if first.Waited != 5*time.Second || len(first.Queries) != 4 || first.Queries[1].Rcode != -1 {
		t.Errorf("first lookup waited %v, queries\n%s\nwant 5s, the AAAA lost and both asked again", first.Waited, logLines(first.Queries))
	}
	if el := c.Clock().Since(start); el < 5*time.Second {
		t.Errorf("virtual time moved %v, want at least 5s", el)
	}
	if single, reopen := pr.Stub.SingleRequest(); !single || reopen {
		t.Errorf("after the fallback single-request %v, reopen %v; want single-request learnt", single, reopen)
	}
	// The second packet of the next socket is its AAAA query again, sent after
	// the A reply: lost too, then single-request-reopen.
	second := resolve()
	if second.Waited != 5*time.Second {
		t.Errorf("second lookup waited %v\n%s", second.Waited, logLines(second.Queries))
	}
	if _, reopen := pr.Stub.SingleRequest(); !reopen {
		t.Errorf("after the second fallback, want single-request-reopen learnt")
	}
	third := resolve()
	if third.Waited != 0 || len(third.Queries) != 2 || third.Queries[0].Local == third.Queries[1].Local {
		t.Errorf("third lookup waited %v, queries\n%s\nwant no wait, A and AAAA from two sockets", third.Waited, logLines(third.Queries))
	}
}
