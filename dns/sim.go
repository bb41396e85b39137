package dns

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Names of what InstallClusterDNS creates.
const (
	// AppName is the netsim app the DNS pods run (pod annotation clusterlab.io/app).
	AppName = "cluster-dns"
	// DNSLabel is the label (key=value) of the DNS pods and the kube-dns selector.
	DNSLabel = "k8s-app=kube-dns"
	// UpstreamHostName is the external host serving the simulated internet's DNS.
	UpstreamHostName = "upstream-dns"
	// WebHostName is the external host the default upstream zone's names point at;
	// it runs the built-in whoami server on TCP port 80.
	WebHostName = "example-web"
	// MetricsPort is the DNS pods' Prometheus port (CoreDNS's 9153).
	MetricsPort = 9153
)

// DefaultUpstreamZone is the simulated internet's zone; {web} stands for the
// web host's address.
const DefaultUpstreamZone = `$TTL 300
example.com.      IN A      {web}
www.example.com.  IN CNAME  example.com.
example.org.      IN A      {web}
`

// ClusterDNSOptions configure InstallClusterDNS. The zero value is a
// kubeadm-like cluster DNS: kube-system/kube-dns at 10.96.0.10, two DNS pods.
type ClusterDNSOptions struct {
	// ServiceIP is kube-dns's cluster IP (the kubelet's --cluster-dns). Default:
	// the tenth address of the store's first service CIDR (10.96.0.10).
	ServiceIP netip.Addr
	// Replicas is the number of DNS pods (default 2), placed round robin over
	// Nodes.
	Replicas int
	// Nodes the DNS pods are placed on, in turn. Default: every node.
	Nodes []string
	// NoMetrics leaves the metrics port (9153/TCP) out of the Service and the
	// pods.
	NoMetrics bool
	// Server configures each DNS pod's server. Nil means kubeadm's Corefile:
	// cluster.local, ttl 30, pods insecure, in-addr.arpa and ip6.arpa falling
	// through. Its Now defaults to the cluster's virtual clock; its Upstream,
	// when nil, forwards to the first nameserver of the pod's own resolv.conf
	// over the pod's network (CoreDNS's "forward . /etc/resolv.conf"; the DNS
	// pods have dnsPolicy Default, so that is the upstream host).
	Server *Config
	// UpstreamRecords is zone-file text (absolute names) added to
	// DefaultUpstreamZone on the upstream host.
	UpstreamRecords string
	// NodeResolvConf is every node's /etc/resolv.conf (the kubelet's
	// --resolv-conf, used by dnsPolicy Default and hostNetwork pods and by the
	// nodes themselves). Nil: "nameserver <upstream host>".
	NodeResolvConf *ResolvConf
	// StubTimeout, when set, replaces the resolv.conf timeout (glibc's 5 s)
	// of every resolver installed.
	StubTimeout time.Duration
	// ClockTimeouts runs every resolver's reply timeouts on the cluster's
	// virtual clock (Stub.After) instead of read deadlines on the wall clock,
	// so that Clock().Advance (or RunOnClock) ends them. Default off.
	ClockTimeouts bool
}

// ClusterDNS is the cluster DNS of a simulated cluster: the kube-dns Service,
// the DNS pods answering behind it, the upstream host, and every pod's
// resolver.
type ClusterDNS struct {
	c         *cluster.Cluster
	opts      ClusterDNSOptions
	serverCfg Config
	serviceIP netip.Addr
	domain    string
	nodeConf  ResolvConf
	upstream  *ZoneUpstream
	upHost    *netsim.ExternalHost
	webHost   *netsim.ExternalHost

	mu        sync.Mutex
	seq       int
	next      int // round-robin index into placement
	placement []string
	resolvers map[string]*PodResolver // pod key or "node:NAME"
	servers   map[*netsim.Pod]*dnsPod
	log       ring[ServerQuery]
	appErrs   []error
}

// dnsPod is one running DNS server.
type dnsPod struct {
	key     string
	srv     *Server
	metrics *metrics
}

// maxServerLog bounds the server query log (the oldest entries go first).
const maxServerLog = 8192

// InstallClusterDNS sets up cluster DNS in c, as kubeadm's CoreDNS addon and
// the kubelet's --cluster-dns would:
//
//   - an external host "upstream-dns" serving the simulated internet
//     (DefaultUpstreamZone plus opts.UpstreamRecords) on port 53, and the
//     host "example-web" those names point at (whoami on TCP port 80);
//   - every node's resolv.conf naming the upstream host;
//   - the app AppName, and the kube-system/kube-dns Service (ports dns 53/UDP,
//     dns-tcp 53/TCP, metrics 9153/TCP) selecting k8s-app=kube-dns;
//   - opts.Replicas DNS pods kube-system/coredns-N (dnsPolicy Default) running
//     the server over UDP and TCP on their own network, reading c's store;
//   - a resolver for every pod the kubelet starts from now on (and for those
//     already running): its resolv.conf from PodResolvConf, its /etc/hosts, a
//     Stub dialling from the pod's network; non-hostNetwork pods get it as
//     their Net's Resolver, so Dial("tcp", "my-service:80") and HTTP clients
//     resolve through the kube-dns Service VIP, i.e. through the proxy mode.
//     hostNetwork pods share their node's network and so its resolver (the
//     node's resolv.conf): a ClusterFirstWithHostNet pod's own resolver is
//     available from Resolver but is not what its Net uses.
//
// The cluster must not be in replay mode (the servers are goroutines reading
// sockets). Call it once per cluster.
func InstallClusterDNS(c *cluster.Cluster, opts ClusterDNSOptions) (*ClusterDNS, error) {
	if c.Config().Replay {
		return nil, fmt.Errorf("cluster dns: a replay-mode cluster cannot run servers")
	}
	st := c.Store()
	if _, exists := st.GetService(metav1NamespaceSystem, "kube-dns"); exists {
		return nil, fmt.Errorf("cluster dns: service kube-system/kube-dns already exists")
	}
	cd := &ClusterDNS{c: c, opts: opts, resolvers: map[string]*PodResolver{}, servers: map[*netsim.Pod]*dnsPod{}, log: ring[ServerQuery]{cap: maxServerLog}}
	if opts.Server != nil {
		cd.serverCfg = *opts.Server
	} else {
		cd.serverCfg = Config{Zones: []string{"cluster.local"}, TTL: 30, Pods: PodsInsecure}
	}
	if cd.serverCfg.Now == nil {
		cd.serverCfg.Now = c.Clock().Now
	}
	// Validate the server configuration once, before anything is created.
	probe, err := New(NewStaticSource(), cd.serverCfg)
	if err != nil {
		return nil, fmt.Errorf("cluster dns: %w", err)
	}
	cd.domain = strings.TrimSuffix(probe.Zones()[0], ".")
	probe.Close()

	cd.serviceIP = opts.ServiceIP
	if !cd.serviceIP.IsValid() {
		cidrs := st.Config().ServiceCIDRs
		if len(cidrs) == 0 {
			return nil, fmt.Errorf("cluster dns: the store has no service CIDR to take the DNS service IP from")
		}
		cd.serviceIP = cidrs[0].Masked().Addr()
		for i := 0; i < 10; i++ {
			cd.serviceIP = cd.serviceIP.Next()
		}
	}
	if opts.Replicas < 0 {
		return nil, fmt.Errorf("cluster dns: replicas %d: must not be negative", opts.Replicas)
	}
	if opts.Replicas == 0 {
		opts.Replicas = 2
		cd.opts.Replicas = 2
	}
	cd.placement = opts.Nodes
	if len(cd.placement) == 0 {
		for _, n := range c.Nodes() {
			cd.placement = append(cd.placement, n.Name())
		}
	}
	for _, name := range cd.placement {
		if c.Node(name) == nil {
			return nil, fmt.Errorf("cluster dns: nodes: no node %q", name)
		}
	}

	// Everything is checked before anything is created.
	if _, err := NewZoneUpstream(strings.ReplaceAll(DefaultUpstreamZone, "{web}", "192.0.2.1") + opts.UpstreamRecords); err != nil {
		return nil, fmt.Errorf("cluster dns: upstream records: %w", err)
	}
	for _, name := range []string{UpstreamHostName, WebHostName} {
		if c.ExternalHost(name) != nil {
			return nil, fmt.Errorf("cluster dns: external host %q already exists", name)
		}
	}

	// The simulated internet.
	if err := cd.startUpstream(); err != nil {
		return nil, err
	}
	if opts.NodeResolvConf != nil {
		cd.nodeConf = *opts.NodeResolvConf
	} else {
		cd.nodeConf = ResolvConf{Nameservers: []string{cd.upHost.IP().String()}}
	}
	for _, n := range c.Nodes() {
		cd.nodeResolver(n.Node)
	}

	// The kubelet side: resolvers for every pod, the DNS app.
	c.RegisterApp(AppName, cd.runDNSPod)
	c.OnPodStart(cd.podStarted)
	for _, p := range c.Pods() {
		if obj, ok := st.GetPod(p.Namespace(), p.Name()); ok {
			cd.podStarted(p, obj)
		}
	}

	// The addon's objects.
	if err := c.Apply(cd.serviceObject()); err != nil {
		return nil, fmt.Errorf("cluster dns: %w", err)
	}
	for i := 0; i < opts.Replicas; i++ {
		if _, err := cd.AddPod(""); err != nil {
			return nil, err
		}
	}
	return cd, nil
}

const metav1NamespaceSystem = "kube-system"

// startUpstream starts the web host and the upstream DNS host.
func (cd *ClusterDNS) startUpstream() error {
	web, err := cd.c.AddExternalHost(WebHostName, netip.Addr{})
	if err != nil {
		return fmt.Errorf("cluster dns: %w", err)
	}
	if _, err := netsim.ServeWhoami(web.Net(), "", "external:"+WebHostName, netfilter.ProtoTCP, 80); err != nil {
		return fmt.Errorf("cluster dns: web host: %w", err)
	}
	cd.webHost = web
	zone := strings.ReplaceAll(DefaultUpstreamZone, "{web}", web.IP().String()) + cd.opts.UpstreamRecords
	z, err := NewZoneUpstream(zone)
	if err != nil {
		return fmt.Errorf("cluster dns: upstream records: %w", err)
	}
	cd.upstream = z
	up, err := cd.c.AddExternalHost(UpstreamHostName, netip.Addr{})
	if err != nil {
		return fmt.Errorf("cluster dns: %w", err)
	}
	server := "external:" + UpstreamHostName
	if _, err := serveWire(up.Net(), 53, upstreamWire(z), func(client netip.AddrPort, network string, req, resp []byte) {
		cd.logQuery(newServerQuery(cd.c.Clock().Now(), server, client, network, req, resp))
	}); err != nil {
		return fmt.Errorf("cluster dns: upstream host: %w", err)
	}
	cd.upHost = up
	return nil
}

func (cd *ClusterDNS) serviceObject() *corev1.Service {
	opts := []service.Option{
		service.Labels(DNSLabel + ",kubernetes.io/name=CoreDNS"),
		service.Selector(DNSLabel),
		service.ClusterIP(cd.serviceIP.String()),
		service.UDPPort("dns", 53, 53),
		service.ProtocolPort("dns-tcp", corev1.ProtocolTCP, 53, 53),
	}
	if !cd.opts.NoMetrics {
		opts = append(opts, service.ProtocolPort("metrics", corev1.ProtocolTCP, MetricsPort, MetricsPort))
	}
	svc := service.NewService(metav1NamespaceSystem+"/kube-dns", opts...)
	for i := range svc.Spec.Ports {
		svc.Spec.Ports[i].TargetPort = intstr.FromInt32(svc.Spec.Ports[i].Port)
	}
	return svc
}

// AddPod creates one more DNS pod, kube-system/coredns-N with the next N, on
// node (""; the next node in turn), and returns it running. A ReplicaSet
// replacing a deleted pod does the same: a new name, possibly another node,
// and a new IP.
func (cd *ClusterDNS) AddPod(node string) (*netsim.Pod, error) {
	cd.mu.Lock()
	if node == "" {
		node = cd.placement[cd.next%len(cd.placement)]
		cd.next++
	}
	var name string
	for {
		name = fmt.Sprintf("coredns-%d", cd.seq)
		cd.seq++
		if _, taken := cd.c.Store().GetPod(metav1NamespaceSystem, name); !taken {
			break
		}
	}
	nErrs := len(cd.appErrs)
	cd.mu.Unlock()
	opts := []service.Option{
		service.Labels(DNSLabel),
		service.Annotation(cluster.AnnotationApp, AppName),
		service.ContainerPort("dns", 53, corev1.ProtocolUDP),
		service.ContainerPort("dns-tcp", 53, corev1.ProtocolTCP),
	}
	if !cd.opts.NoMetrics {
		opts = append(opts, service.ContainerPort("metrics", MetricsPort, corev1.ProtocolTCP))
	}
	opts = append(opts, service.OnNode(node))
	pod := service.NewPod(metav1NamespaceSystem+"/"+name, opts...)
	pod.Spec.Containers[0].Name = "coredns"
	pod.Spec.Containers[0].Image = "registry.k8s.io/coredns/coredns:v1.11.3"
	pod.Spec.DNSPolicy = corev1.DNSDefault
	p, err := cd.c.CreatePod(pod)
	if err != nil {
		return nil, fmt.Errorf("cluster dns: pod %s: %w", name, err)
	}
	cd.mu.Lock()
	errs := append([]error(nil), cd.appErrs[nErrs:]...)
	cd.mu.Unlock()
	if len(errs) > 0 {
		return p, fmt.Errorf("cluster dns: pod %s: %w", name, errs[0])
	}
	return p, nil
}

// Pods returns the DNS pods in the store (namespace/name, sorted).
func (cd *ClusterDNS) Pods() []string {
	var out []string
	for _, p := range cd.c.Store().ListPods() {
		if p.Namespace == metav1NamespaceSystem && p.Labels["k8s-app"] == "kube-dns" {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	sort.Strings(out)
	return out
}

// runDNSPod is the app: the DNS server on the pod's port 53 (UDP and TCP) and
// the metrics server.
func (cd *ClusterDNS) runDNSPod(p *netsim.Pod, obj *corev1.Pod) (stop func(), err error) {
	defer func() {
		if err != nil {
			cd.mu.Lock()
			cd.appErrs = append(cd.appErrs, err)
			cd.mu.Unlock()
		}
	}()
	cfg := cd.serverCfg
	if cfg.Upstream == nil {
		conf, _ := PodResolvConf(obj, cd.kubeletDNS(p.Node()))
		if len(conf.Nameservers) == 0 {
			return nil, fmt.Errorf("dns pod %s: resolv.conf has no nameserver to forward to: %w", p.Key(), errNoNameserver)
		}
		cfg.Upstream = &AddrUpstream{Addr: nameserverAddr(conf.Nameservers[0]), Dial: p.Net().DialContext}
	}
	srv, err := New(cd.c.Store(), cfg)
	if err != nil {
		return nil, fmt.Errorf("dns pod %s: %w", p.Key(), err)
	}
	dp := &dnsPod{key: p.Key(), srv: srv, metrics: newMetrics()}
	stopDNS, err := serveWire(p.Net(), 53, srv.HandleWire, func(client netip.AddrPort, network string, req, resp []byte) {
		q := newServerQuery(cd.c.Clock().Now(), dp.key, client, network, req, resp)
		dp.metrics.observe(q)
		cd.logQuery(q)
	})
	if err != nil {
		srv.Close()
		return nil, err
	}
	stopMetrics := func() {}
	if !cd.opts.NoMetrics {
		ln, err := p.Net().Listen("tcp", fmt.Sprintf(":%d", MetricsPort))
		if err != nil {
			stopDNS()
			srv.Close()
			return nil, fmt.Errorf("dns pod %s: metrics: %w", p.Key(), err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			fmt.Fprint(w, dp.metrics.text())
		})
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		stopMetrics = func() { hs.Close() }
	}
	cd.mu.Lock()
	cd.servers[p] = dp
	cd.mu.Unlock()
	return func() {
		cd.mu.Lock()
		delete(cd.servers, p)
		cd.mu.Unlock()
		stopMetrics()
		stopDNS()
		srv.Close()
	}, nil
}

func (cd *ClusterDNS) logQuery(q ServerQuery) {
	cd.mu.Lock()
	defer cd.mu.Unlock()
	cd.log.add(q)
}

// ServerLog returns the queries the DNS pods and the upstream host answered,
// in the order they finished.
func (cd *ClusterDNS) ServerLog() []ServerQuery {
	cd.mu.Lock()
	defer cd.mu.Unlock()
	return cd.log.list()
}

// ResetLogs clears the server log and every resolver's lookups.
func (cd *ClusterDNS) ResetLogs() {
	cd.mu.Lock()
	cd.log.reset()
	rs := make([]*PodResolver, 0, len(cd.resolvers))
	for _, r := range cd.resolvers {
		rs = append(rs, r)
	}
	cd.mu.Unlock()
	for _, r := range rs {
		r.Reset()
	}
}

// kubeletDNS is the kubelet's DNS settings on node n.
func (cd *ClusterDNS) kubeletDNS(n *netsim.Node) KubeletDNS {
	host := cd.nodeConf
	return KubeletDNS{
		ClusterDNS:     []string{cd.serviceIP.String()},
		ClusterDomain:  cd.domain,
		HostResolvConf: &host,
		NodeIPs:        n.IPs(),
	}
}

func (cd *ClusterDNS) newResolver(key string, conf ResolvConf, warnings []string, hosts []hostsEntry, dial func(context.Context, string, string) (net.Conn, error)) *PodResolver {
	stub := NewStub(conf, dial)
	stub.Timeout = cd.opts.StubTimeout
	if cd.opts.ClockTimeouts {
		stub.After = clockAfter(cd.c.Clock())
	}
	return &PodResolver{Pod: key, Conf: conf, Warnings: warnings, Stub: stub, hosts: hosts, now: cd.c.Clock().Now, lookups: ring[Lookup]{cap: maxLookups}}
}

// nodeResolver gives node n's own network a resolver from the node's
// resolv.conf (once).
func (cd *ClusterDNS) nodeResolver(n *netsim.Node) *PodResolver {
	key := "node:" + n.Name()
	cd.mu.Lock()
	r := cd.resolvers[key]
	cd.mu.Unlock()
	if r != nil {
		return r
	}
	r = cd.newResolver(key, cd.nodeConf, nil, podHosts(nil, nil, true, ""), n.HostNet().DialContext)
	cd.mu.Lock()
	if prev := cd.resolvers[key]; prev != nil {
		cd.mu.Unlock()
		return prev
	}
	cd.resolvers[key] = r
	cd.mu.Unlock()
	n.HostNet().Resolver = r.Resolve
	return r
}

// podStarted is the kubelet's pod-start hook: the pod's resolv.conf, hosts
// file and resolver.
func (cd *ClusterDNS) podStarted(p *netsim.Pod, obj *corev1.Pod) {
	cd.nodeResolver(p.Node())
	conf, warnings := PodResolvConf(obj, cd.kubeletDNS(p.Node()))
	r := cd.newResolver(p.Key(), conf, warnings, podHosts(obj, p.IPs(), p.HostNetwork(), cd.domain), p.Net().DialContext)
	cd.mu.Lock()
	cd.resolvers[p.Key()] = r
	cd.mu.Unlock()
	if !p.HostNetwork() {
		p.Net().Resolver = r.Resolve
	}
}

// Resolver returns the resolver of the pod namespace/name as last started,
// or nil.
func (cd *ClusterDNS) Resolver(namespace, name string) *PodResolver {
	cd.mu.Lock()
	defer cd.mu.Unlock()
	return cd.resolvers[namespace+"/"+name]
}

// NodeResolver returns node name's own resolver (its resolv.conf), or nil.
func (cd *ClusterDNS) NodeResolver(name string) *PodResolver {
	cd.mu.Lock()
	defer cd.mu.Unlock()
	return cd.resolvers["node:"+name]
}

// ResolvConf returns the /etc/resolv.conf text of pod namespace/name.
func (cd *ClusterDNS) ResolvConf(namespace, name string) (string, bool) {
	r := cd.Resolver(namespace, name)
	if r == nil {
		return "", false
	}
	return r.ResolvConf(), true
}

// ServiceIP returns kube-dns's cluster IP.
func (cd *ClusterDNS) ServiceIP() netip.Addr { return cd.serviceIP }

// Domain returns the cluster domain.
func (cd *ClusterDNS) Domain() string { return cd.domain }

// NodeResolvConf returns the nodes' resolv.conf.
func (cd *ClusterDNS) NodeResolvConf() ResolvConf { return cd.nodeConf }

// Upstream returns the upstream host's records and the questions it was asked.
func (cd *ClusterDNS) Upstream() *ZoneUpstream { return cd.upstream }

// UpstreamHost returns the external host serving the upstream zone.
func (cd *ClusterDNS) UpstreamHost() *netsim.ExternalHost { return cd.upHost }

// WebHost returns the external host the default upstream names point at.
func (cd *ClusterDNS) WebHost() *netsim.ExternalHost { return cd.webHost }

// Metrics returns the Prometheus text of the running DNS pod namespace/name
// (what its port 9153 serves), and whether it runs.
func (cd *ClusterDNS) Metrics(namespace, name string) (string, bool) {
	cd.mu.Lock()
	defer cd.mu.Unlock()
	for _, dp := range cd.servers {
		if dp.key == namespace+"/"+name {
			return dp.metrics.text(), true
		}
	}
	return "", false
}

// Query asks one question from a network inside the simulation (a pod's,
// a node's or an external host's) to the kube-dns service address over
// network ("udp" or "tcp"), as dig @10.96.0.10 would: no search list, one
// try, and the reply as it came.
func (cd *ClusterDNS) Query(ctx context.Context, from *netsim.Net, network, name string, qtype uint16) (*mdns.Msg, error) {
	return Exchange(ctx, from, network, netip.AddrPortFrom(cd.serviceIP, 53), name, qtype)
}

// Exchange asks one question of the DNS server at server from a simulated
// network. Without a deadline on ctx it gives up after 5 s.
func Exchange(ctx context.Context, from *netsim.Net, network string, server netip.AddrPort, name string, qtype uint16) (*mdns.Msg, error) {
	if network != "tcp" {
		network = "udp"
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	c, err := from.DialContext(ctx, network, server.String())
	if err != nil {
		return nil, fmt.Errorf("dns query %s %s: %w", mdns.TypeToString[qtype], name, err)
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	co := &mdns.Conn{Conn: c, UDPSize: mdns.DefaultMsgSize}
	m := new(mdns.Msg)
	m.SetQuestion(mdns.Fqdn(name), qtype)
	if err := co.WriteMsg(m); err != nil {
		return nil, fmt.Errorf("dns query %s %s: %w", mdns.TypeToString[qtype], name, err)
	}
	for {
		r, err := co.ReadMsg()
		if err != nil {
			return nil, fmt.Errorf("dns query %s %s @%s/%s: %w", mdns.TypeToString[qtype], name, server, network, err)
		}
		if r.Id == m.Id {
			return r, nil
		}
	}
}
