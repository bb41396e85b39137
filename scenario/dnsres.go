package scenario

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/dns"
	"github.com/clusterlab/clusterlab/netsim"
	corev1 "k8s.io/api/core/v1"
)

// kubeDNSAvailable reports whether this build can run kube-dns inside the simulation.
func kubeDNSAvailable() bool { return true }

// installKubeDNS runs cluster DNS inside the simulation: the kube-system/kube-dns
// Service at the tenth address of the service range, two CoreDNS-like pods behind it,
// and every pod's resolver pointed at it (package dns's InstallClusterDNS).
func installKubeDNS(c *cluster.Cluster) (*resolver, error) {
	cd, err := dns.InstallClusterDNS(c, dns.ClusterDNSOptions{})
	if err != nil {
		return nil, err
	}
	return &resolver{mode: "kube-dns", c: c, cd: cd, dnsIP: cd.ServiceIP().String()}, nil
}

// clusterDomain is the cluster domain every scenario uses.
const clusterDomain = "cluster.local"

// resolver answers a pod's name lookups: in "direct" mode the cluster DNS server code
// answers the pod's stub resolver in-process (no packets); in "kube-dns" mode the stub
// resolver talks to the kube-dns Service over the simulated network.
type resolver struct {
	mode  string
	c     *cluster.Cluster
	srv   *dns.Server     // direct mode
	cd    *dns.ClusterDNS // kube-dns mode
	dnsIP string          // the nameserver pods are given
	// dpDial, with a data path of its own DNS (Datapath.DNSDialer), dials a pod's
	// nameserver on the data path.
	dpDial func(from string) func(ctx context.Context, network, addr string) (net.Conn, error)
}

func newDirectResolver(c *cluster.Cluster) (*resolver, error) {
	cfg := dns.DefaultConfig()
	cfg.Now = c.Clock().Now
	cfg.Pods = dns.PodsInsecure
	srv, err := dns.New(c.Store(), cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster DNS: %w", err)
	}
	ip := "10.96.0.10"
	if cidrs := c.Config().ServiceCIDRs; len(cidrs) > 0 {
		ip = nthIP(cidrs[0].Addr(), 10).String()
	}
	r := &resolver{mode: "direct", c: c, srv: srv, dnsIP: ip}
	// Real sockets in pods resolve names the same way.
	c.OnPodStart(func(p *netsim.Pod, obj *corev1.Pod) {
		stub := r.stubFor(p, obj)
		p.Net().Resolver = func(ctx context.Context, host string) ([]netip.Addr, error) {
			res, err := stub.Lookup(ctx, host, dns.FamilyIPv4)
			if err != nil {
				return nil, err
			}
			return res.Addrs, nil
		}
	})
	return r, nil
}

func nthIP(a netip.Addr, n int) netip.Addr {
	for i := 0; i < n; i++ {
		a = a.Next()
	}
	return a
}

func (r *resolver) close() {
	if r != nil && r.srv != nil {
		r.srv.Close()
	}
}

// stubFor is the pod's stub resolver with the resolv.conf its kubelet writes.
func (r *resolver) stubFor(p *netsim.Pod, obj *corev1.Pod) *dns.Stub {
	conf, _ := dns.PodResolvConf(obj, dns.KubeletDNS{ClusterDNS: []string{r.dnsIP}, ClusterDomain: clusterDomain, NodeIPs: p.Node().IPs()})
	if r.mode == "direct" {
		return dns.NewStub(conf, func(ctx context.Context, network, _ string) (net.Conn, error) {
			return newMemConn(r.srv, network), nil
		})
	}
	if pr := r.cd.Resolver(p.Namespace(), p.Name()); pr != nil {
		return pr.Stub
	}
	return dns.NewStub(conf, p.Net().DialContext)
}

// podStub finds a running pod and its stub resolver.
func (r *resolver) podStub(from string) (*dns.Stub, error) {
	pl, err := parsePlace(from, true)
	if err != nil {
		return nil, err
	}
	ns, name, _ := strings.Cut(pl.name, "/")
	p := r.c.Pod(ns, name)
	obj, ok := r.c.Store().GetPod(ns, name)
	if p == nil || !ok {
		return nil, fmt.Errorf("no running pod %s", pl.name)
	}
	if r.dpDial != nil {
		if dial := r.dpDial(from); dial != nil {
			conf, _ := dns.PodResolvConf(obj, dns.KubeletDNS{ClusterDNS: []string{r.dnsIP}, ClusterDomain: clusterDomain, NodeIPs: p.Node().IPs()})
			return dns.NewStub(conf, dial), nil
		}
	}
	return r.stubFor(p, obj), nil
}

// lookup resolves a name to IPv4 addresses as the pod's resolver would (search list,
// ndots).
func (r *resolver) lookup(ctx context.Context, from, name string) (*dns.Result, error) {
	stub, err := r.podStub(from)
	if err != nil {
		return nil, err
	}
	return stub.Lookup(ctx, name, dns.FamilyIPv4)
}

// query asks one question of another type: the names of the pod's search list in order
// (a name with a trailing dot or enough dots as written first), until an answer that is
// not NXDOMAIN.
func (r *resolver) query(ctx context.Context, from, name string, qtype uint16) (*mdns.Msg, string, []string, error) {
	stub, err := r.podStub(from)
	if err != nil {
		return nil, "", nil, err
	}
	var log []string
	var last *mdns.Msg
	var lastName string
	for _, fqdn := range stub.SearchList(name) {
		q := new(mdns.Msg)
		q.SetQuestion(mdns.Fqdn(fqdn), qtype)
		resp, err := r.exchange(ctx, stub, q)
		if err != nil {
			log = append(log, fmt.Sprintf("%s %s: %v", mdns.TypeToString[qtype], fqdn, err))
			return nil, fqdn, log, err
		}
		log = append(log, fmt.Sprintf("%s %s: %s, %d answers", mdns.TypeToString[qtype], mdns.Fqdn(fqdn), mdns.RcodeToString[resp.Rcode], len(resp.Answer)))
		last, lastName = resp, mdns.Fqdn(fqdn)
		if resp.Rcode != mdns.RcodeNameError {
			break
		}
	}
	if last == nil {
		return nil, "", log, errors.New("no name to ask")
	}
	return last, lastName, log, nil
}

// exchange sends one query to the pod's first nameserver over UDP.
func (r *resolver) exchange(ctx context.Context, stub *dns.Stub, q *mdns.Msg) (*mdns.Msg, error) {
	addr := net.JoinHostPort(r.dnsIP, "53")
	if len(stub.Conf.Nameservers) > 0 {
		addr = net.JoinHostPort(stub.Conf.Nameservers[0], "53")
	}
	c, err := stub.Dial(ctx, "udp", addr)
	if err != nil {
		return nil, err
	}
	conn := &mdns.Conn{Conn: c, UDPSize: mdns.MinMsgSize}
	defer conn.Close()
	q.Id = mdns.Id()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := conn.WriteMsg(q); err != nil {
		return nil, err
	}
	for {
		resp, err := conn.ReadMsg()
		if err != nil {
			return nil, err
		}
		if resp.Id == q.Id {
			return resp, nil
		}
	}
}

// memConn is a connection to the DNS server in-process: UDP datagrams (it is a
// net.PacketConn, as miekg/dns expects of UDP) or a TCP stream of length-prefixed
// messages.
type memConn struct {
	srv     *dns.Server
	network string

	mu       sync.Mutex
	cond     *sync.Cond
	replies  [][]byte
	in       []byte // TCP bytes written, not yet a whole message
	out      []byte // TCP bytes of replies not yet read
	closed   bool
	deadline time.Time
}

func newMemConn(srv *dns.Server, network string) net.Conn {
	m := &memConn{srv: srv, network: network}
	m.cond = sync.NewCond(&m.mu)
	if strings.HasPrefix(network, "udp") {
		return &memPacketConn{m}
	}
	return m
}

// memPacketConn is the UDP face of memConn.
type memPacketConn struct{ *memConn }

func (m *memPacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, err := m.Read(b)
	return n, m.RemoteAddr(), err
}

func (m *memPacketConn) WriteTo(b []byte, _ net.Addr) (int, error) { return m.Write(b) }

func (m *memConn) Write(b []byte) (int, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return 0, net.ErrClosed
	}
	m.mu.Unlock()
	if strings.HasPrefix(m.network, "udp") {
		if r := m.srv.HandleWire(context.Background(), append([]byte(nil), b...), "udp"); r != nil {
			m.push(r)
		}
		return len(b), nil
	}
	m.mu.Lock()
	m.in = append(m.in, b...)
	var msgs [][]byte
	for len(m.in) >= 2 {
		l := int(binary.BigEndian.Uint16(m.in))
		if len(m.in) < 2+l {
			break
		}
		msgs = append(msgs, append([]byte(nil), m.in[2:2+l]...))
		m.in = m.in[2+l:]
	}
	m.mu.Unlock()
	for _, msg := range msgs {
		if r := m.srv.HandleWire(context.Background(), msg, "tcp"); r != nil {
			framed := make([]byte, 2+len(r))
			binary.BigEndian.PutUint16(framed, uint16(len(r)))
			copy(framed[2:], r)
			m.push(framed)
		}
	}
	return len(b), nil
}

func (m *memConn) push(r []byte) {
	m.mu.Lock()
	m.replies = append(m.replies, r)
	m.cond.Broadcast()
	m.mu.Unlock()
}

func (m *memConn) Read(b []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	udp := strings.HasPrefix(m.network, "udp")
	for {
		if !udp && len(m.out) > 0 {
			n := copy(b, m.out)
			m.out = m.out[n:]
			return n, nil
		}
		if len(m.replies) > 0 {
			r := m.replies[0]
			m.replies = m.replies[1:]
			if udp {
				return copy(b, r), nil
			}
			m.out = r
			continue
		}
		if m.closed {
			return 0, net.ErrClosed
		}
		if !m.deadline.IsZero() && !time.Now().Before(m.deadline) {
			return 0, os.ErrDeadlineExceeded
		}
		// Nothing will arrive unless a write comes: wait for it or the deadline.
		if !m.deadline.IsZero() {
			t := time.AfterFunc(time.Until(m.deadline), func() {
				m.mu.Lock()
				m.cond.Broadcast()
				m.mu.Unlock()
			})
			m.cond.Wait()
			t.Stop()
		} else {
			m.cond.Wait()
		}
	}
}

func (m *memConn) Close() error {
	m.mu.Lock()
	m.closed = true
	m.cond.Broadcast()
	m.mu.Unlock()
	return nil
}

var memAddr = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 53), Port: 53}

func (m *memConn) LocalAddr() net.Addr  { return memAddr }
func (m *memConn) RemoteAddr() net.Addr { return memAddr }
func (m *memConn) SetDeadline(t time.Time) error {
	return m.SetReadDeadline(t)
}
func (m *memConn) SetReadDeadline(t time.Time) error {
	m.mu.Lock()
	m.deadline = t
	m.cond.Broadcast()
	m.mu.Unlock()
	return nil
}
func (m *memConn) SetWriteDeadline(time.Time) error { return nil }
