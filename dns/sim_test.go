package dns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/service"
)

// simCluster is a cluster running kube-proxy's iptables mode (or proxy) on the
// given nodes.
func simCluster(t *testing.T, proxy cluster.ProxyFactory, nodes ...string) *cluster.Cluster {
	t.Helper()
	if proxy == nil {
		proxy = kubeproxy.Factory(kubeproxy.Options{Mode: kubeproxy.IPTables})
	}
	var ncs []cluster.NodeConfig
	for _, n := range nodes {
		ncs = append(ncs, cluster.NodeConfig{Name: n})
	}
	c, err := cluster.New(cluster.Config{Seed: 7, Nodes: ncs, Proxy: proxy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func installDNS(t *testing.T, c *cluster.Cluster, opts ClusterDNSOptions) *ClusterDNS {
	t.Helper()
	cd, err := InstallClusterDNS(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	return cd
}

func mustPod(t *testing.T, c *cluster.Cluster, pod *corev1.Pod) *netsim.Pod {
	t.Helper()
	p, err := c.CreatePod(pod)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustApply(t *testing.T, c *cluster.Cluster, objs ...*corev1.Service) {
	t.Helper()
	for _, o := range objs {
		if err := c.Apply(o); err != nil {
			t.Fatal(err)
		}
	}
}

func simCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// whoamiOver dials address from a pod's network (names resolved by its
// resolver) and returns who answered.
func whoamiOver(t *testing.T, n *netsim.Net, address string) netsim.Whoami {
	t.Helper()
	conn, err := n.DialContext(simCtx(t), "tcp", address)
	if err != nil {
		t.Fatalf("dial %s: %v", address, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintln(conn, "hi")
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("read from %s: %v", address, err)
	}
	w, err := netsim.ParseWhoami(line)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func httpWhoami(t *testing.T, n *netsim.Net, url string) netsim.Whoami {
	t.Helper()
	resp, err := n.HTTPClient().Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	w, err := netsim.ParseWhoami(string(body))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// lastLookup returns the queries of the resolver's last lookup.
func lastLookup(t *testing.T, r *PodResolver) Lookup {
	t.Helper()
	lks := r.Lookups()
	if len(lks) == 0 {
		t.Fatalf("%s: no lookups", r.Pod)
	}
	return lks[len(lks)-1]
}

func addrStrings(as []netip.Addr) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	sort.Strings(out)
	return out
}

// TestClusterDNSNames resolves every kind of name from a pod through the
// kube-dns Service of a three-node cluster running the iptables mode: the
// search-list walk each needs (the stub's query log), the answer, and a
// connection made with the name.
func TestClusterDNSNames(t *testing.T) {
	c := simCluster(t, nil, "node-a", "node-b", "node-c")
	cd := installDNS(t, c, ClusterDNSOptions{})
	if got, want := cd.Pods(), []string{"kube-system/coredns-0", "kube-system/coredns-1"}; !slices.Equal(got, want) {
		t.Fatalf("DNS pods %v, want %v", got, want)
	}
	dnsNodes := map[string]bool{}
	for _, k := range cd.Pods() {
		ns, name, _ := strings.Cut(k, "/")
		dnsNodes[c.Pod(ns, name).Node().Name()] = true
	}
	if len(dnsNodes) != 2 {
		t.Errorf("the two DNS pods share a node: %v", dnsNodes)
	}
	svc, ok := c.Store().GetService("kube-system", "kube-dns")
	if !ok || svc.Spec.ClusterIP != "10.96.0.10" {
		t.Fatalf("kube-dns service: %v", svc)
	}

	mustApply(t, c,
		service.NewService("default/my-service", service.Selector("app=web"), service.Port("http", 80, 8080)),
		service.NewService("other-ns/my-service", service.Selector("app=web"), service.Port("http", 80, 8080)),
		service.NewService("default/db", service.Headless(), service.Selector("app=db"), service.Port("pg", 5432, 5432)),
		service.NewService("default/ext", service.ExternalName("www.example.com")),
	)
	web := mustPod(t, c, service.NewPod("default/web-0", service.Labels("app=web"), service.ContainerPort("http", 8080, corev1.ProtocolTCP), service.OnNode("node-a")))
	mustPod(t, c, service.NewPod("other-ns/web-0", service.Labels("app=web"), service.ContainerPort("http", 8080, corev1.ProtocolTCP), service.OnNode("node-b")))
	var db []*netsim.Pod
	for i := 0; i < 2; i++ {
		db = append(db, mustPod(t, c, service.NewPod(fmt.Sprintf("default/db-%d", i), service.Labels("app=db"),
			service.Hostname(fmt.Sprintf("db-%d", i)), service.Subdomain("db"), service.ContainerPort("pg", 5432, corev1.ProtocolTCP))))
	}
	client := mustPod(t, c, service.NewPod("default/client", service.OnNode("node-c")))
	r := cd.Resolver("default", "client")

	conf, ok := cd.ResolvConf("default", "client")
	if want := "search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"; !ok || conf != want {
		t.Errorf("client resolv.conf:\n%s\nwant:\n%s", conf, want)
	}

	myService, _ := c.Store().GetService("default", "my-service")
	webIP := cd.WebHost().IP().String()
	for _, tc := range []struct {
		name  string
		addrs []string
		log   string
	}{
		{name: "my-service", addrs: []string{myService.Spec.ClusterIP}, log: `
			A my-service.default.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers
			AAAA my-service.default.svc.cluster.local. @10.96.0.10:53/udp NODATA`},
		{name: "my-service.other-ns", log: `
			A my-service.other-ns.default.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			AAAA my-service.other-ns.default.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			A my-service.other-ns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers
			AAAA my-service.other-ns.svc.cluster.local. @10.96.0.10:53/udp NODATA`},
		{name: "db-1.db", addrs: []string{db[1].IP().String()}, log: `
			A db-1.db.default.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers
			AAAA db-1.db.default.svc.cluster.local. @10.96.0.10:53/udp NODATA`},
		{name: "db", addrs: addrStrings([]netip.Addr{db[0].IP(), db[1].IP()}), log: `
			A db.default.svc.cluster.local. @10.96.0.10:53/udp NOERROR 2 answers
			AAAA db.default.svc.cluster.local. @10.96.0.10:53/udp NODATA`},
		// The ExternalName's CNAME, chased by the DNS pod through the upstream host:
		// www.example.com CNAME example.com, example.com A.
		{name: "ext", addrs: []string{webIP}, log: `
			A ext.default.svc.cluster.local. @10.96.0.10:53/udp NOERROR 3 answers
			AAAA ext.default.svc.cluster.local. @10.96.0.10:53/udp NOERROR 2 answers`},
		// Three NXDOMAINs from the cluster zone, then the upstream's answer.
		{name: "example.com", addrs: []string{webIP}, log: `
			A example.com.default.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			AAAA example.com.default.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			A example.com.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			AAAA example.com.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			A example.com.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			AAAA example.com.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			A example.com. @10.96.0.10:53/udp NOERROR 1 answers
			AAAA example.com. @10.96.0.10:53/udp NODATA`},
		{name: "no-such-service", log: `
			A no-such-service.default.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			AAAA no-such-service.default.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			A no-such-service.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			AAAA no-such-service.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			A no-such-service.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			AAAA no-such-service.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			A no-such-service. @10.96.0.10:53/udp NXDOMAIN
			AAAA no-such-service. @10.96.0.10:53/udp NXDOMAIN`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs, err := client.Net().Resolver(simCtx(t), tc.name)
			lk := lastLookup(t, r)
			if got, want := logLines(lk.Queries), trimLog(tc.log); got != want {
				t.Errorf("query log:\n%s\nwant:\n%s", got, want)
			}
			if tc.name == "no-such-service" {
				if err == nil || !strings.Contains(err.Error(), "no such host") {
					t.Errorf("lookup: %v, %v; want no such host", addrs, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.addrs != nil && !slices.Equal(addrStrings(addrs), tc.addrs) {
				t.Errorf("addresses %v, want %v", addrStrings(addrs), tc.addrs)
			}
		})
	}

	// An answer too big for 512 bytes: TC over UDP, then the same question over
	// TCP through the VIP's dns-tcp port.
	var big []string
	for i := 1; i <= 40; i++ {
		big = append(big, fmt.Sprintf("10.250.0.%d", i))
	}
	if err := c.Apply(service.NewService("default/big", service.Headless(), service.Port("p", 80, 80)),
		service.NewEndpointSlice("default/big-1", service.ForService("big"), service.SlicePort("p", 80, corev1.ProtocolTCP), service.ReadyAddresses(big...))); err != nil {
		t.Fatal(err)
	}
	addrs, err := client.Net().Resolver(simCtx(t), "big")
	if err != nil || len(addrs) != 40 {
		t.Errorf("big: %d addresses, %v", len(addrs), err)
	}
	if got, want := logLines(lastLookup(t, r).Queries), trimLog(`
		A big.default.svc.cluster.local. @10.96.0.10:53/udp NOERROR 29 answers TC
		AAAA big.default.svc.cluster.local. @10.96.0.10:53/udp NODATA
		A big.default.svc.cluster.local. @10.96.0.10:53/tcp NOERROR 40 answers`); got != want {
		t.Errorf("big: query log:\n%s\nwant:\n%s", got, want)
	}

	// Go's own resolver for code in the pod: the pod's search list, its
	// queries over the pod's network, its lookups recorded.
	goAddrs, err := r.NetResolver().LookupHost(simCtx(t), "my-service.default.svc.cluster.local.")
	if err != nil || !slices.Equal(goAddrs, []string{myService.Spec.ClusterIP}) {
		t.Errorf("Go resolver: %v %v", goAddrs, err)
	}
	goAddrs, err = r.NetResolver().LookupHost(simCtx(t), "my-service")
	if err != nil || !slices.Equal(goAddrs, []string{myService.Spec.ClusterIP}) {
		t.Errorf("Go resolver, short name: %v %v", goAddrs, err)
	}
	if lk := lastLookup(t, r); lk.Name != "my-service" || lk.FQDN != "my-service.default.svc.cluster.local." || lk.Source != "dns" || len(lk.Queries) != 2 {
		t.Errorf("Go resolver's lookup of my-service recorded as %+v", lk)
	}

	// Names used for connections: the pod's Net resolves them, the traffic goes
	// through the Service VIPs.
	if w := whoamiOver(t, client.Net(), "my-service:80"); w.Pod != "default/web-0" || !strings.HasPrefix(w.Client, client.IP().String()+":") {
		t.Errorf("my-service:80 reached %+v", w)
	}
	if w := httpWhoami(t, client.Net(), "http://my-service.other-ns/path"); w.Pod != "other-ns/web-0" || w.Msg != "/path" {
		t.Errorf("http://my-service.other-ns/path reached %+v", w)
	}
	if w := whoamiOver(t, client.Net(), "db-0.db:5432"); w.Pod != "default/db-0" {
		t.Errorf("db-0.db:5432 reached %+v", w)
	}
	if w := httpWhoami(t, client.Net(), "http://example.com/"); w.Node != "external:"+WebHostName {
		t.Errorf("http://example.com/ reached %+v", w)
	}
	if w := httpWhoami(t, client.Net(), "http://ext/"); w.Node != "external:"+WebHostName {
		t.Errorf("http://ext/ (ExternalName) reached %+v", w)
	}

	// The upstream host was asked only the names outside the cluster zone, by
	// the DNS pods (over the network; their traffic leaving the cluster is
	// masqueraded behind their nodes' addresses, as a CNI does).
	dnsIPs := map[netip.Addr]string{}
	for _, k := range cd.Pods() {
		ns, name, _ := strings.Cut(k, "/")
		p := c.Pod(ns, name)
		dnsIPs[p.Node().IP()] = k
	}
	upstreamNames := map[string]bool{}
	clientSeen := 0
	for _, q := range cd.ServerLog() {
		switch {
		case q.Server == "external:"+UpstreamHostName:
			upstreamNames[q.Name] = true
			if _, ok := dnsIPs[q.Client.Addr()]; !ok {
				t.Errorf("upstream asked by %s, not a DNS pod: %s", q.Client, q)
			}
		case q.Client.Addr() == client.IP():
			clientSeen++
		}
	}
	for name := range upstreamNames {
		if strings.HasSuffix(name, ".cluster.local.") {
			t.Errorf("the upstream was asked a cluster name: %s", name)
		}
	}
	for _, want := range []string{"example.com.", "www.example.com.", "no-such-service."} {
		if !upstreamNames[want] {
			t.Errorf("the upstream was not asked %s (asked %v)", want, upstreamNames)
		}
	}
	if clientSeen == 0 {
		t.Errorf("no DNS pod saw the client's own address (%s): %v", client.IP(), cd.ServerLog())
	}

	// PTR and TCP, as dig @10.96.0.10 would ask them from the client.
	for _, tc := range []struct {
		network, name string
		qtype         uint16
		rcode         int
		answer        string
	}{
		{"udp", ReverseName(db[0].IP()), mdns.TypePTR, mdns.RcodeSuccess, "db-0.db.default.svc.cluster.local."},
		{"udp", ReverseName(web.IP()), mdns.TypePTR, mdns.RcodeSuccess, strings.ReplaceAll(web.IP().String(), ".", "-") + ".my-service.default.svc.cluster.local."},
		{"udp", ReverseName(netip.MustParseAddr(myService.Spec.ClusterIP)), mdns.TypePTR, mdns.RcodeSuccess, "my-service.default.svc.cluster.local."},
		// A pod behind no service has no PTR: the reverse zone falls through to the
		// upstream, which has none either.
		{"udp", ReverseName(client.IP()), mdns.TypePTR, mdns.RcodeNameError, ""},
		{"tcp", "my-service.default.svc.cluster.local.", mdns.TypeA, mdns.RcodeSuccess, myService.Spec.ClusterIP},
		{"tcp", "kube-dns.kube-system.svc.cluster.local.", mdns.TypeA, mdns.RcodeSuccess, "10.96.0.10"},
	} {
		resp, err := cd.Query(simCtx(t), client.Net(), tc.network, tc.name, tc.qtype)
		if err != nil {
			t.Errorf("%s %s/%s: %v", mdns.TypeToString[tc.qtype], tc.name, tc.network, err)
			continue
		}
		var got []string
		for _, rr := range resp.Answer {
			switch v := rr.(type) {
			case *mdns.PTR:
				got = append(got, v.Ptr)
			case *mdns.A:
				got = append(got, v.A.String())
			}
		}
		want := []string(nil)
		if tc.answer != "" {
			want = []string{tc.answer}
		}
		if resp.Rcode != tc.rcode || !slices.Equal(got, want) {
			t.Errorf("%s %s/%s: %s %v, want %s %v", mdns.TypeToString[tc.qtype], tc.name, tc.network, mdns.RcodeToString[resp.Rcode], got, mdns.RcodeToString[tc.rcode], want)
		}
	}
	tcpSeen := false
	for _, q := range cd.ServerLog() {
		if q.Network == "tcp" && q.Client.Addr() == client.IP() && q.Name == "kube-dns.kube-system.svc.cluster.local." {
			tcpSeen = true
		}
	}
	if !tcpSeen {
		t.Errorf("no DNS pod logged the TCP query from %s", client.IP())
	}

	// The hosts file answers first: the pod's own FQDN and localhost send no query.
	dbr := cd.Resolver("default", "db-0")
	if want := fmt.Sprintf("%s\tdb-0.db.default.svc.cluster.local\tdb-0\n", db[0].IP()); !strings.HasSuffix(dbr.Hosts(), want) {
		t.Errorf("db-0's /etc/hosts:\n%s\nwant it to end with %q", dbr.Hosts(), want)
	}
	for _, name := range []string{"localhost", "db-0.db.default.svc.cluster.local", "DB-0"} {
		addrs, err := db[0].Net().Resolver(simCtx(t), name)
		lk := lastLookup(t, dbr)
		if err != nil || lk.Source != "files" || len(lk.Queries) != 0 || len(addrs) == 0 {
			t.Errorf("%s from db-0: %v %v (source %q, %d queries)", name, addrs, err, lk.Source, len(lk.Queries))
		}
	}

	// Metrics, through the Service's metrics port by name.
	resp, err := client.Net().HTTPClient().Get(fmt.Sprintf("http://kube-dns.kube-system:%d/metrics", MetricsPort))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `coredns_dns_requests_total{server="dns://:53",zone=".",proto="udp",family="1",type="A"}`) ||
		!strings.Contains(string(body), `coredns_dns_responses_total{server="dns://:53",zone=".",rcode="NXDOMAIN"}`) {
		t.Errorf("metrics:\n%s", body)
	}
	total := 0
	for _, k := range cd.Pods() {
		ns, name, _ := strings.Cut(k, "/")
		text, ok := cd.Metrics(ns, name)
		if !ok {
			t.Errorf("no metrics for %s", k)
		}
		for _, line := range strings.Split(text, "\n") {
			var n int
			if strings.HasPrefix(line, "coredns_dns_requests_total{") {
				fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%d", &n)
				total += n
			}
		}
	}
	logged := 0
	for _, q := range cd.ServerLog() {
		if strings.HasPrefix(q.Server, "kube-system/") {
			logged++
		}
	}
	if total != logged {
		t.Errorf("the DNS pods' request counters sum to %d, their logs hold %d queries", total, logged)
	}
	if errs := c.Errors(); len(errs) > 0 {
		t.Errorf("background errors: %v", errs)
	}
}

// TestClusterDNSPolicies: what each dnsPolicy gives a pod (resolv.conf) and
// where its names are resolved: hostNetwork pods and the DNS pods themselves
// use the node's resolv.conf (the upstream host), ClusterFirstWithHostNet
// the cluster DNS from the node's network, None only the pod's dnsConfig.
// Pods running before the install get resolvers too.
func TestClusterDNSPolicies(t *testing.T) {
	c := simCluster(t, nil, "node-a", "node-b")
	early := mustPod(t, c, service.NewPod("default/early", service.OnNode("node-b")))
	cd := installDNS(t, c, ClusterDNSOptions{Replicas: 1})
	up := cd.UpstreamHost().IP().String()
	nodeConf := "nameserver " + up + "\n"

	hostPod := service.NewPod("default/host", service.HostNetwork(), service.OnNode("node-b"))
	withHostNet := service.NewPod("default/host-cf", service.HostNetwork(), service.OnNode("node-b"))
	withHostNet.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	none := service.NewPod("default/custom", service.OnNode("node-b"))
	none.Spec.DNSPolicy = corev1.DNSNone
	two := "2"
	none.Spec.DNSConfig = &corev1.PodDNSConfig{
		Nameservers: []string{"10.96.0.10"},
		Searches:    []string{"svc.cluster.local"},
		Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: &two}},
	}
	for _, p := range []*corev1.Pod{hostPod, withHostNet, none} {
		mustPod(t, c, p)
	}
	for _, tc := range []struct{ pod, conf string }{
		{"default/early", "search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"},
		{"default/host", nodeConf},
		{"default/host-cf", "search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"},
		{"default/custom", "search svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:2\n"},
		{"kube-system/coredns-0", nodeConf},
	} {
		ns, name, _ := strings.Cut(tc.pod, "/")
		if got, ok := cd.ResolvConf(ns, name); !ok || got != tc.conf {
			t.Errorf("%s resolv.conf:\n%s\nwant:\n%s", tc.pod, got, tc.conf)
		}
	}
	if got := cd.NodeResolver("node-b").ResolvConf(); got != nodeConf {
		t.Errorf("node-b resolv.conf %q, want %q", got, nodeConf)
	}

	// The pod that started first resolves cluster names.
	if w := httpWhoami(t, early.Net(), "http://example.com/"); w.Node != "external:"+WebHostName {
		t.Errorf("early pod reached %+v", w)
	}

	// A hostNetwork pod's Net is its node's: names go straight to the upstream
	// host, which knows no cluster names.
	host := c.Pod("default", "host")
	if host.Net() != c.Node("node-b").HostNet() {
		t.Fatal("a hostNetwork pod should share its node's network")
	}
	nr := cd.NodeResolver("node-b")
	if _, err := host.Net().Resolver(simCtx(t), "example.com"); err != nil {
		t.Fatal(err)
	}
	if got, want := logLines(lastLookup(t, nr).Queries), trimLog(`
		A example.com. @`+up+`:53/udp NOERROR 1 answers
		AAAA example.com. @`+up+`:53/udp NODATA`); got != want {
		t.Errorf("node's lookup of example.com:\n%s\nwant:\n%s", got, want)
	}
	if _, err := host.Net().Resolver(simCtx(t), "kubernetes.default"); err == nil || !strings.Contains(err.Error(), "no such host") {
		t.Errorf("a cluster name from the host network: %v, want no such host", err)
	}

	// ClusterFirstWithHostNet: the cluster DNS, reached from the node's own
	// network through the VIP (kube-proxy's OUTPUT rules).
	addrs, err := cd.Resolver("default", "host-cf").Resolve(simCtx(t), "kubernetes.default")
	if err != nil || len(addrs) != 1 || addrs[0].String() != "10.96.0.1" {
		t.Errorf("kubernetes.default from a ClusterFirstWithHostNet pod: %v %v", addrs, err)
	}
	// The DNS pod sees one of node-b's own addresses. (Which one is netsim's
	// host-stack source selection: for a 10.x destination it picks the bridge
	// address 10.244.1.1, where Linux would take eth0's 172.18.0.3.)
	nodeB := c.Node("node-b")
	seen := false
	for _, q := range cd.ServerLog() {
		a := q.Client.Addr()
		seen = seen || q.Server == "kube-system/coredns-0" && !a.IsLoopback() && nodeB.IsLocalAddr(a) && q.Name == "kubernetes.default.svc.cluster.local."
	}
	if !seen {
		t.Errorf("no DNS pod query came from node-b's addresses: %v", cd.ServerLog())
	}

	// dnsPolicy None with ndots:2 and one search domain.
	custom := cd.Resolver("default", "custom")
	if _, err := c.Pod("default", "custom").Net().Resolver(simCtx(t), "kubernetes.default"); err != nil {
		t.Fatal(err)
	}
	if got, want := logLines(lastLookup(t, custom).Queries), trimLog(`
		A kubernetes.default.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers
		AAAA kubernetes.default.svc.cluster.local. @10.96.0.10:53/udp NODATA`); got != want {
		t.Errorf("custom pod's lookup:\n%s\nwant:\n%s", got, want)
	}
	// A lookup failure reads like Go's.
	_, err = c.Pod("default", "custom").Net().Dial("tcp", "nope.invalid:80")
	var le *LookupError
	if err == nil || !strings.Contains(err.Error(), "lookup nope.invalid on 10.96.0.10:53: no such host") || !errors.As(err, &le) || le.Kind != HostNotFound {
		t.Errorf("dial nope.invalid: %v", err)
	}
}

// TestInstallClusterDNSBadOptions: bad options are refused before anything is
// created; a second install is refused.
func TestInstallClusterDNSBadOptions(t *testing.T) {
	c := simCluster(t, nil, "node-a")
	for _, tc := range []struct {
		opts ClusterDNSOptions
		want string
	}{
		{ClusterDNSOptions{Replicas: -1}, "replicas -1"},
		{ClusterDNSOptions{Nodes: []string{"node-z"}}, `nodes: no node "node-z"`},
		{ClusterDNSOptions{UpstreamRecords: "bad.example. IN A not-an-ip\n"}, "upstream records"},
		{ClusterDNSOptions{Server: &Config{Zones: []string{"cluster.local"}, TTL: 4000}}, "ttl 4000"},
	} {
		_, err := InstallClusterDNS(c, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", tc.opts, err, tc.want)
		}
	}
	if _, ok := c.Store().GetService("kube-system", "kube-dns"); ok || c.ExternalHost(UpstreamHostName) != nil || len(c.Pods()) != 0 {
		t.Fatalf("a refused install left objects behind: pods %v", c.Pods())
	}
	installDNS(t, c, ClusterDNSOptions{Replicas: 1})
	if _, err := InstallClusterDNS(c, ClusterDNSOptions{}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second install: %v", err)
	}
}

// TestClusterDNSEveryMode: names resolve through the kube-dns VIP under every
// kube-proxy mode this build has.
func TestClusterDNSEveryMode(t *testing.T) {
	for _, m := range kubeproxy.Modes() {
		t.Run(string(m), func(t *testing.T) {
			c := simCluster(t, kubeproxy.Factory(kubeproxy.Options{Mode: m}), "node-a", "node-b")
			cd := installDNS(t, c, ClusterDNSOptions{})
			client := mustPod(t, c, service.NewPod("default/client", service.OnNode("node-b")))
			for name, want := range map[string]string{"kubernetes": "10.96.0.1", "kube-dns.kube-system": "10.96.0.10", "example.com": cd.WebHost().IP().String()} {
				addrs, err := client.Net().Resolver(simCtx(t), name)
				if err != nil || len(addrs) != 1 || addrs[0].String() != want {
					t.Errorf("%s: %v %v, want %s", name, addrs, err, want)
				}
			}
			if w := httpWhoami(t, client.Net(), "http://example.com/"); w.Node != "external:"+WebHostName {
				t.Errorf("http://example.com/ reached %+v", w)
			}
		})
	}
}
