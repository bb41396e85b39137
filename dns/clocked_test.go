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
