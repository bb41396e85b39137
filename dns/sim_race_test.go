package dns

import (
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"
)

// raceLab is a cluster for the conntrack insert race of glibc's parallel A and AAAA
// queries: kube-dns (two CoreDNS pods, on node-b and node-c) behind kube-proxy's
// iptables rules, and a client pod on node-a, whose kernel is the one under test. The
// clock is manual: the resolver's 5 s timeout and the node's hold window pass on it
// only.
type raceLab struct {
	c      *cluster.Cluster
	cd     *ClusterDNS
	node   *netsim.Node
	client *netsim.Pod
}

func newRaceLab(t *testing.T, k netfilter.KernelVersion) *raceLab {
	t.Helper()
	c, err := cluster.New(cluster.Config{Seed: 7, ManualClock: true,
		Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}},
		Proxy: kubeproxy.Factory(kubeproxy.Options{Mode: kubeproxy.IPTables})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cd := installDNS(t, c, ClusterDNSOptions{})
	mustApply(t, c, service.NewService("default/my-service", service.Selector("app=web"), service.Port("http", 80, 8080)))
	client := mustPod(t, c, service.NewPod("default/client", service.OnNode("node-a")))
	n := c.Node("node-a").Node
	n.UpdateSettings(func(s *netsim.NodeSettings) { s.Kernel = k })
	return &raceLab{c: c, cd: cd, node: n, client: client}
}

// raceLookup is one getaddrinfo of my-service by a new process in the client pod
// (a fresh resolver state) with resolv.conf options added, while node-a holds the
// pod's DNS packets so that the first two are in flight together in il's order.
type raceLookup struct {
	res     *Result
	flights []netsim.FlightResult
	stats   netsim.CtStats // the change in node-a's conntrack counters
}

func (l *raceLab) lookup(t *testing.T, il netsim.Interleaving, options ...string) raceLookup {
	t.Helper()
	pr := l.cd.Resolver("default", "client")
	conf := pr.Conf
	conf.Options = append(append([]string(nil), conf.Options...), options...)
	stub := NewStub(conf, pr.Stub.Dial)
	ip := l.client.IP()
	g := l.node.HoldTogether(netsim.Together{
		Match: func(p *netsim.Packet) bool {
			return p.Proto == netfilter.ProtoUDP && p.DstPort == 53 && p.Src == ip
		},
		Interleaving: il,
	})
	before := l.node.Conntrack().Stats()
	res, err := LookupOnClock(simCtx(t), l.c, stub, "my-service.default.svc.cluster.local.", FamilyAny)
	if err != nil {
		t.Fatalf("lookup: %v\n%s", err, logLines(res.Log))
	}
	if len(res.Addrs) != 1 {
		t.Fatalf("addresses %v, want my-service's ClusterIP", res.Addrs)
	}
	select {
	case <-g.Done():
	default:
		t.Fatal("the node still holds packets after the lookup")
	}
	fl, _, _ := g.Results()
	after := l.node.Conntrack().Stats()
	return raceLookup{res: res, flights: fl, stats: netsim.CtStats{
		Insert:       after.Insert - before.Insert,
		InsertFailed: after.InsertFailed - before.InsertFailed,
		Drop:         after.Drop - before.Drop,
		ClashResolve: after.ClashResolve - before.ClashResolve,
	}}
}

// destinations returns where the packets held together left for (after DNAT), and
// how many were dropped.
func (r raceLookup) destinations() (map[string]bool, int) {
	dst, dropped := map[string]bool{}, 0
	for _, f := range r.flights {
		if f.Dropped() {
			dropped++
			continue
		}
		dst[f.Packet[strings.Index(f.Packet, ">"):]] = true
	}
	return dst, dropped
}

// TestClusterDNSParallelQueriesInsertRace reproduces the 5-second DNS timeouts of
// Kubernetes nodes before Linux 5.6. The client's stub sends A and AAAA back to back
// from one socket; node-a has both between PREROUTING (where each gets an unconfirmed
// conntrack entry and kube-proxy's DNAT picks a CoreDNS pod for it) and confirmation at
// once. When the two picks differ, Linux 5.4 drops the second at confirmation
// (insert_failed +1): the AAAA query is lost, the resolver waits its 5 s timeout and
// asks again one query at a time. When the picks agree the entries are identical and
// the clash is resolved (merged). On a 5.6+ kernel the clash with different picks is
// resolved too and nothing waits; with single-request-reopen the second query is sent
// only after the first's reply, so the two are never in flight together.
func TestClusterDNSParallelQueriesInsertRace(t *testing.T) {
	together := netsim.Interleaving{Steps: []int{0, 1, 0, 1}}
	kernel54 := netfilter.KernelVersion{Major: 5, Minor: 4}

	t.Run("5.4", func(t *testing.T) {
		l := newRaceLab(t, kernel54)
		var lost, merged int
		for i := 0; i < 40 && (lost == 0 || merged == 0); i++ {
			r := l.lookup(t, together)
			dst, dropped := r.destinations()
			if len(r.flights) != 2 {
				t.Fatalf("lookup %d: %d packets held together, want the A and AAAA queries: %+v", i, len(r.flights), r.flights)
			}
			switch {
			case dropped == 1:
				lost++
				if !r.flights[1].Dropped() || !strings.Contains(r.flights[1].Reason, "clash") {
					t.Errorf("lookup %d: the AAAA query should be lost at confirmation: %+v", i, r.flights)
				}
				if r.stats.InsertFailed != 1 || r.stats.Drop != 1 || r.stats.Insert != 1 {
					t.Errorf("lookup %d: conntrack -S changed by %s, want insert=1 insert_failed=1 drop=1", i, r.stats)
				}
				if r.res.Waited != 5*time.Second {
					t.Errorf("lookup %d: the resolver waited %v, want its 5 s timeout\n%s", i, r.res.Waited, logLines(r.res.Log))
				}
				if len(r.res.Log) != 4 || r.res.Log[1].Rcode != -1 || r.res.Log[0].Local != r.res.Log[2].Local {
					t.Errorf("lookup %d: queries\n%s\nwant A answered, AAAA lost, then both again from the same socket", i, logLines(r.res.Log))
				}
			case dropped == 0 && len(dst) == 1:
				merged++
				if r.stats.ClashResolve != 1 || r.stats.InsertFailed != 0 || r.res.Waited != 0 {
					t.Errorf("lookup %d: same CoreDNS pod for both: conntrack -S changed by %s, waited %v; want the clash merged, no wait", i, r.stats, r.res.Waited)
				}
			default:
				t.Errorf("lookup %d: %d dropped, destinations %v: a 5.4 node cannot send the two to different pods", i, dropped, dst)
			}
		}
		t.Logf("%d lookups lost the AAAA query, %d had both merged", lost, merged)
		if lost == 0 || merged == 0 {
			t.Errorf("%d lookups lost a query, %d had both queries merged; want both cases among 40 (one CoreDNS pick in two)", lost, merged)
		}
	})

	t.Run("5.6", func(t *testing.T) {
		l := newRaceLab(t, netfilter.KernelVersion{Major: 5, Minor: 6})
		split := 0
		for i := 0; i < 40 && split == 0; i++ {
			r := l.lookup(t, together)
			dst, dropped := r.destinations()
			if dropped != 0 || r.res.Waited != 0 || r.stats.InsertFailed != 0 || r.stats.ClashResolve != 1 {
				t.Fatalf("lookup %d: dropped %d, waited %v, conntrack -S changed by %s; want nothing lost, the clash resolved", i, dropped, r.res.Waited, r.stats)
			}
			if len(dst) == 2 {
				split++
			}
		}
		if split == 0 {
			t.Error("no lookup sent its two queries to different CoreDNS pods")
		}
	})

	t.Run("5.4 single-request-reopen", func(t *testing.T) {
		l := newRaceLab(t, kernel54)
		for i := 0; i < 20; i++ {
			r := l.lookup(t, together, "single-request-reopen")
			if len(r.flights) != 1 || r.stats.InsertFailed != 0 || r.res.Waited != 0 {
				t.Fatalf("lookup %d: %d packets in flight together, conntrack -S changed by %s, waited %v; want the A query alone, nothing lost", i, len(r.flights), r.stats, r.res.Waited)
			}
			if len(r.res.Log) != 2 || r.res.Log[0].Local == r.res.Log[1].Local {
				t.Fatalf("lookup %d: queries\n%s\nwant A and AAAA from two sockets", i, logLines(r.res.Log))
			}
		}
	})
}

// TestClusterDNSInsertRaceRate: with the interleaving and kube-proxy's CoreDNS pick both
// at random, a 5.4 node loses one query of a parallel A/AAAA pair with the probability
// the all-branches enumeration of the two packets gives (one interleaving in two has
// both past NAT before either confirms, and one pick in two differs: 1/4), and the rate
// of lookups that wait 5 s under seeded random interleavings is close to it.
func TestClusterDNSInsertRaceRate(t *testing.T) {
	l := newRaceLab(t, netfilter.KernelVersion{Major: 5, Minor: 4})
	vip := netip.AddrPortFrom(l.cd.ServiceIP(), 53)
	src := netip.AddrPortFrom(l.client.IP(), 40000)
	branches, err := netsim.SendTogetherBranches(func() (*netsim.Node, []netsim.InFlight) {
		l.node.Conntrack().Flush()
		return l.node, []netsim.InFlight{
			{Data: netsim.BuildUDP(src, vip, []byte("A")), Pod: l.client},
			{Data: netsim.BuildUDP(src, vip, []byte("AAAA")), Pod: l.client},
		}
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	l.node.Conntrack().Flush()
	var total, loss float64
	for _, b := range branches {
		total += b.Prob
		for _, r := range b.Results {
			if r.Dropped() {
				loss += b.Prob
				break
			}
		}
	}
	if math.Abs(total-1) > 1e-9 || math.Abs(loss-0.25) > 1e-9 {
		t.Fatalf("all branches: total probability %v, loss %v; want 1 and 1/4\n%+v", total, loss, branches)
	}

	const n = 120
	waited := 0
	for seed := uint64(1); seed <= n; seed++ {
		r := l.lookup(t, netsim.Interleaving{Random: true, Seed: seed})
		_, dropped := r.destinations()
		if (dropped == 1) != (r.res.Waited == 5*time.Second) || uint64(dropped) != r.stats.InsertFailed {
			t.Fatalf("seed %d: dropped %d, insert_failed +%d, waited %v: a lost query and a 5 s wait go together", seed, dropped, r.stats.InsertFailed, r.res.Waited)
		}
		waited += dropped
	}
	rate := float64(waited) / n
	// Four standard deviations of a binomial rate over n lookups.
	if tol := 4 * math.Sqrt(loss*(1-loss)/n); math.Abs(rate-loss) > tol {
		t.Errorf("%d of %d lookups waited 5 s (%.3f), want %.3f ± %.3f", waited, n, rate, loss, tol)
	}
	t.Logf("%d of %d lookups waited 5 s (%.3f); all branches: %.3f", waited, n, rate, loss)
}
