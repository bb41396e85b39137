package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"

	corev1 "k8s.io/api/core/v1"
)

// dnsProbe sends a UDP query-sized probe from the client pod to the kube-dns
// VIP and returns every outcome with its probability (AllBranches, a dry run)
// or the one outcome of a real exchange.
func dnsProbe(t *testing.T, c *cluster.Cluster, cd *ClusterDNS, from string, srcPort uint16, all bool) []netsim.ProbeResult {
	t.Helper()
	p := netsim.Probe{From: from, Proto: netfilter.ProtoUDP, Dst: netip.AddrPortFrom(cd.ServiceIP(), 53), SrcPort: srcPort}
	if all {
		p.AllBranches = true
	} else {
		p.Mode = netsim.ProbeConnect
	}
	rs, err := c.Probe(p)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// droppedAt reports whether a probe was lost on node for want of a neighbour
// with address ip (a dead pod's address).
func droppedAt(r netsim.ProbeResult, ip netip.Addr, node string) bool {
	return r.Result == netsim.ResultDropped && r.Node == node && strings.Contains(r.Reason, "ARP for "+ip.String()+" ")
}

func outcomes(rs []netsim.ProbeResult) string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%.2f %s", r.Probability, r.Outcome))
	}
	return strings.Join(out, "\n")
}

// TestClusterDNSPodDeleted: with two DNS pods, deleting one breaks half of the
// new flows from a node whose kube-proxy has not synced yet (the VIP still
// load-balances to the dead pod's address), and none once it has.
func TestClusterDNSPodDeleted(t *testing.T) {
	c := simCluster(t, nil, "node-a", "node-b", "node-c")
	cd := installDNS(t, c, ClusterDNSOptions{Nodes: []string{"node-a", "node-b"}})
	client := mustPod(t, c, service.NewPod("default/client", service.OnNode("node-c")))
	dead := c.Pod("kube-system", "coredns-0")
	deadIP := dead.IP()

	rs := dnsProbe(t, c, cd, "pod:default/client", 0, true)
	if len(rs) != 2 || rs[0].Pod == rs[1].Pod || rs[0].Result != netsim.ResultDelivered || rs[1].Result != netsim.ResultDelivered {
		t.Fatalf("before: want both DNS pods at 0.5:\n%s", outcomes(rs))
	}

	c.Node("node-c").PauseProxy()
	if err := c.DeletePod("kube-system", "coredns-0", 0); err != nil {
		t.Fatal(err)
	}
	rs = dnsProbe(t, c, cd, "pod:default/client", 0, true)
	var live, lost bool
	for _, r := range rs {
		live = live || r.Probability == 0.5 && r.Result == netsim.ResultDelivered && r.Pod == "kube-system/coredns-1" && r.SeenSrc.Addr() == client.IP()
		lost = lost || r.Probability == 0.5 && droppedAt(r, deadIP, "node-a")
	}
	if len(rs) != 2 || !live || !lost {
		t.Fatalf("node-c's proxy not synced: want half the flows to the live pod, half dropped at %s on node-a:\n%s", deadIP, outcomes(rs))
	}

	c.Node("node-c").ResumeProxy()
	rs = dnsProbe(t, c, cd, "pod:default/client", 0, true)
	if len(rs) != 1 || rs[0].Pod != "kube-system/coredns-1" || rs[0].Probability != 1 {
		t.Fatalf("after the sync: want every flow to coredns-1:\n%s", outcomes(rs))
	}
	cd.ResetLogs()
	for i := 0; i < 10; i++ {
		if _, err := client.Net().Resolver(simCtx(t), "kubernetes.default"); err != nil {
			t.Fatalf("lookup %d after the sync: %v", i, err)
		}
	}
	n := 0
	for _, q := range cd.ServerLog() {
		if q.Client.Addr() == client.IP() {
			n++
			if q.Server != "kube-system/coredns-1" {
				t.Errorf("answered by %s after the sync: %s", q.Server, q)
			}
		}
	}
	if n != 10*4 { // kubernetes.default: NXDOMAIN, then an answer; A and AAAA each
		t.Errorf("%d queries logged, want 40", n)
	}
}

// fixedPortStub is the client's stub resolver with every UDP socket bound to
// one source port, as a client that reuses its socket (or a port-pinned
// NodeLocal-less sidecar) does: the conntrack entry for that 4-tuple is reused
// as long as it lives.
func fixedPortStub(cd *ClusterDNS, pod *netsim.Pod, port uint16) *Stub {
	conf := cd.Resolver(pod.Namespace(), pod.Name()).Conf
	return NewStub(conf, func(ctx context.Context, network, addr string) (net.Conn, error) {
		if network == "udp" {
			return pod.Net().DialFrom(ctx, "udp", port, addr)
		}
		return pod.Net().DialContext(ctx, network, addr)
	})
}

// noConntrackProxy is kube-proxy's iptables mode with its conntrack cleanup
// failing, as on a node without the conntrack binary ("exec: conntrack:
// executable file not found in $PATH", logged and ignored by kube-proxy): the
// rules follow the endpoints, stale UDP entries stay.
type noConntrackProxy struct {
	n        *cluster.Node
	px       *iptables.Proxier
	mu       sync.Mutex
	warnings []error
}

type missingConntrack struct{}

func (missingConntrack) Delete(proxy.ConntrackFilter) (int, error) {
	return 0, errors.New(`exec: "conntrack": executable file not found in $PATH`)
}

func noConntrackFactory(proxies map[string]*noConntrackProxy) cluster.ProxyFactory {
	return func(n *cluster.Node) (cluster.Proxy, error) {
		emu := emulator.New(emulator.IPv4)
		px, err := iptables.NewProxier(emu, missingConntrack{}, iptables.Config{Family: corev1.IPv4Protocol, Node: kubeproxy.NodeConfigFor(n), Clock: n.Network().Clock().Now})
		if err != nil {
			return nil, err
		}
		kubeproxy.AttachEmulator(emu, n.Node, "kube-proxy IPv4")
		p := &noConntrackProxy{n: n, px: px}
		proxies[n.Name()] = p
		return p, nil
	}
}

func (p *noConntrackProxy) Sync() error {
	st := p.n.Cluster().Store()
	res, err := p.px.Sync(context.Background(), st.ListServices(), st.ListEndpointSlices())
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.warnings = append(p.warnings, res.Warnings...)
	p.mu.Unlock()
	return nil
}

func (p *noConntrackProxy) Warnings() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.warnings...)
}

// TestClusterDNSStaleUDPConntrack reproduces the classic stale-UDP-conntrack
// failure of cluster DNS: one DNS pod, a client reusing its UDP source port;
// the DNS pod is replaced by one with a new IP. The client's conntrack entry
// still DNATs the VIP to the dead IP. kube-proxy's iptables mode deletes
// entries whose reply source is a removed UDP endpoint when it syncs; until
// then (its sync lag, here a paused proxy) every query on that port is lost.
// A kube-proxy whose cleanup fails fixes its rules (new ports work) but the
// pinned port stays broken for as long as the client keeps retrying, and
// heals only when it goes quiet for the UDP stream timeout (120 s).
func TestClusterDNSStaleUDPConntrack(t *testing.T) {
	const pinned = 40053
	name := "kubernetes.default.svc.cluster.local." // one name, one try: failures are quick
	for _, cleanup := range []bool{true, false} {
		t.Run(fmt.Sprintf("cleanup=%v", cleanup), func(t *testing.T) {
			var proxies map[string]*noConntrackProxy
			var factory cluster.ProxyFactory
			if !cleanup {
				proxies = map[string]*noConntrackProxy{}
				factory = noConntrackFactory(proxies)
			}
			c := simCluster(t, factory, "node-a", "node-b")
			cd := installDNS(t, c, ClusterDNSOptions{Replicas: 1, Nodes: []string{"node-a"}})
			client := mustPod(t, c, service.NewPod("default/client", service.OnNode("node-b")))
			nodeB := c.Node("node-b")
			oldIP := c.Pod("kube-system", "coredns-0").IP()
			stub := fixedPortStub(cd, client, pinned)
			lookup := func(timeout time.Duration) (*Result, error) {
				stub.Timeout = timeout
				return stub.Lookup(simCtx(t), name, FamilyAny)
			}
			pinnedEntries := func() []netsim.Conn {
				return nodeB.Conntrack().List(netsim.CtFilter{Proto: netfilter.ProtoUDP, OrigSrc: client.IP(), OrigSrcPort: pinned})
			}

			// 1. The pinned port's flow is DNATed to coredns-0.
			if res, err := lookup(5 * time.Second); err != nil {
				t.Fatalf("first lookup: %v\n%s", err, logLines(res.Log))
			}
			if es := pinnedEntries(); len(es) != 1 || es[0].Reply.Src != oldIP || !es[0].Has(netfilter.StatusAssured) {
				t.Fatalf("conntrack on node-b: %v, want one assured entry replying from %s", es, oldIP)
			}

			// 2. The DNS pod is replaced while node-b's kube-proxy lags.
			nodeB.PauseProxy()
			if err := c.DeletePod("kube-system", "coredns-0", 0); err != nil {
				t.Fatal(err)
			}
			newPod, err := cd.AddPod("node-b")
			if err != nil {
				t.Fatal(err)
			}
			if newPod.IP() == oldIP {
				t.Fatalf("the new DNS pod reuses %s; the test needs a new address", oldIP)
			}

			// 3. The window: the pinned port follows its conntrack entry, new ports
			// follow node-b's stale rules; both end at the dead address.
			res, err := lookup(200 * time.Millisecond)
			if le := (*LookupError)(nil); !errors.As(err, &le) || le.Kind != TryAgain {
				t.Fatalf("lookup in the window: %v, want TRY_AGAIN (no reply)\n%s", err, logLines(res.Log))
			}
			for _, q := range res.Log {
				if q.Err == nil || q.Network != "udp" {
					t.Errorf("query in the window got a reply: %s", q)
				}
			}
			for _, port := range []uint16{pinned, 40054} {
				rs := dnsProbe(t, c, cd, "pod:default/client", port, false)
				if !droppedAt(rs[0], oldIP, "node-a") {
					t.Errorf("probe from port %d in the window: %s, want dropped at %s on node-a", port, rs[0].Outcome, oldIP)
				}
			}

			// 4. kube-proxy syncs: rules point at the new pod; a new port works.
			nodeB.ResumeProxy()
			rs := dnsProbe(t, c, cd, "pod:default/client", 40055, false)
			if rs[0].Result != netsim.ResultReplied || rs[0].Pod != newPod.Key() {
				t.Errorf("probe from a new port after the sync: %s, want replied by %s", rs[0].Outcome, newPod.Key())
			}
			if cleanup {
				// The stale entries (reply source = the removed endpoint) are gone, so
				// the pinned port reaches the new pod at once.
				if es := pinnedEntries(); len(es) != 0 {
					t.Errorf("kube-proxy left %v", es)
				}
				cd.ResetLogs()
				if res, err := lookup(5 * time.Second); err != nil {
					t.Fatalf("pinned port after the cleanup: %v\n%s", err, logLines(res.Log))
				}
				if es := pinnedEntries(); len(es) != 1 || es[0].Reply.Src != newPod.IP() {
					t.Errorf("conntrack after the lookup: %v, want one entry replying from %s", es, newPod.IP())
				}
				for _, q := range cd.ServerLog() {
					if q.Server != newPod.Key() || q.Client != netip.AddrPortFrom(client.IP(), pinned) {
						t.Errorf("query answered by %s from %s, want %s from port %d", q.Server, q.Client, newPod.Key(), pinned)
					}
				}
				return
			}

			// Without the cleanup the pinned port stays on the dead address.
			var warned bool
			for _, w := range proxies["node-b"].Warnings() {
				warned = warned || strings.Contains(w.Error(), "conntrack delete -D -p udp") && strings.Contains(w.Error(), "--reply-src "+oldIP.String())
			}
			if !warned {
				t.Errorf("node-b's kube-proxy did not report the failed cleanup for %s: %v", oldIP, proxies["node-b"].Warnings())
			}
			before := pinnedEntries()
			if len(before) != 1 || before[0].Reply.Src != oldIP {
				t.Fatalf("conntrack after the sync: %v, want the stale entry to %s", before, oldIP)
			}
			if rs := dnsProbe(t, c, cd, "pod:default/client", pinned, false); !droppedAt(rs[0], oldIP, "node-a") {
				t.Errorf("pinned-port probe after the sync: %s, want dropped at %s", rs[0].Outcome, oldIP)
			}
			if _, err := lookup(200 * time.Millisecond); err == nil {
				t.Fatal("the pinned port resolved through a stale conntrack entry")
			}
			after := pinnedEntries()
			if len(after) != 1 || !after[0].Expires.After(before[0].Expires) {
				t.Errorf("the retries did not keep the stale entry alive: before %v, after %v", before, after)
			}
			// The client goes quiet for the UDP stream timeout: the entry expires.
			c.Clock().Advance(121 * time.Second)
			if es := pinnedEntries(); len(es) != 0 {
				t.Errorf("entry still there after 121 s: %v", es)
			}
			if res, err := lookup(5 * time.Second); err != nil {
				t.Fatalf("pinned port after the entry expired: %v\n%s", err, logLines(res.Log))
			}
			if es := pinnedEntries(); len(es) != 1 || es[0].Reply.Src != newPod.IP() {
				t.Errorf("conntrack after the expiry: %v, want one entry replying from %s", es, newPod.IP())
			}
		})
	}
}

// TestClusterDNSBackToBackQueriesShareConntrack: the stub sends A and AAAA
// back to back from one UDP socket, as glibc does. On a real node the
// second packet can race the first through conntrack (both NEW on two CPUs,
// DNATed to different kube-dns endpoints, the second losing the insert and
// being dropped: the reason for options single-request-reopen and use-vc).
// By default netsim takes one packet at a time through a node, from its
// conntrack step to its confirmation, so the second packet always finds the
// first's confirmed entry and follows it to the same DNS pod: the insert race
// happens only when a test asks for it (Node.HoldTogether, see
// TestClusterDNSParallelQueriesInsertRace). This test pins the default down (every A/AAAA pair reaches one
// DNS pod from one client port, over many lookups that spread over both
// pods), and shows single-request-reopen's separate sockets: each query is a
// connection of its own, free to reach either pod.
func TestClusterDNSBackToBackQueriesShareConntrack(t *testing.T) {
	c := simCluster(t, nil, "node-a", "node-b", "node-c")
	cd := installDNS(t, c, ClusterDNSOptions{})
	mustApply(t, c, service.NewService("default/my-service", service.Selector("app=web"), service.Port("http", 80, 8080)))
	mustPod(t, c, service.NewPod("default/plain", service.OnNode("node-c")))
	reopenPod := service.NewPod("default/reopen", service.OnNode("node-c"))
	reopenPod.Spec.DNSConfig = &corev1.PodDNSConfig{Options: []corev1.PodDNSConfigOption{{Name: "single-request-reopen"}}}
	mustPod(t, c, reopenPod)

	// byClient runs n lookups of an FQDN (one A+AAAA exchange each) and
	// returns the queries the DNS pods received, by client address and port.
	byClient := func(pod string, n int) map[netip.AddrPort][]ServerQuery {
		t.Helper()
		cd.ResetLogs()
		r := cd.Resolver("default", pod)
		for i := 0; i < n; i++ {
			if _, err := r.NetResolver().LookupHost(simCtx(t), "my-service.default.svc.cluster.local."); err != nil {
				t.Fatalf("%s: lookup %d: %v", pod, i, err)
			}
		}
		out := map[netip.AddrPort][]ServerQuery{}
		total := 0
		for _, q := range cd.ServerLog() {
			if strings.HasPrefix(q.Server, "kube-system/") {
				out[q.Client] = append(out[q.Client], q)
				total++
			}
		}
		if total != 2*n {
			t.Fatalf("%s: %d queries at the DNS pods, want %d: %v", pod, total, 2*n, cd.ServerLog())
		}
		return out
	}

	const n = 24
	servers := map[string]bool{}
	plain := byClient("plain", n)
	if len(plain) != n {
		t.Errorf("plain: queries from %d client ports, want %d (one socket a lookup)", len(plain), n)
	}
	for client, qs := range plain {
		servers[qs[0].Server] = true
		if len(qs) != 2 || qs[0].Type == qs[1].Type || qs[0].Server != qs[1].Server {
			t.Errorf("back-to-back A and AAAA from %s: %v, want both at one DNS pod", client, qs)
		}
	}
	if len(servers) != 2 {
		t.Errorf("%d lookups reached the DNS pods %v, want both (the proxy's random choice per connection)", n, servers)
	}

	reopen := byClient("reopen", n)
	if len(reopen) != 2*n {
		t.Errorf("single-request-reopen: queries from %d client ports, want %d (a socket a query)", len(reopen), 2*n)
	}
	servers = map[string]bool{}
	for _, qs := range reopen {
		servers[qs[0].Server] = true
	}
	if len(servers) != 2 {
		t.Errorf("single-request-reopen: the queries reached %v, want both DNS pods", servers)
	}
}
