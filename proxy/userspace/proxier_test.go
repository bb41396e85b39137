package userspace

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
)

// These tests run the proxier over the host's loopback with real sockets: backends
// are echo servers on 127.0.0.1, and the proxy listeners are bound to 127.0.0.1 too
// (loopbackNet), so clients connect to a listener directly instead of through rules.

// loopbackNet is OSNetwork with every unspecified listen address made 127.0.0.1, so
// that nothing listens beyond loopback.
type loopbackNet struct{ OSNetwork }

func (l *loopbackNet) fix(address string) string {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return address
	}
	if a, err := netip.ParseAddr(host); err == nil && a.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return address
}

func (l *loopbackNet) Listen(network, address string) (net.Listener, error) {
	return l.OSNetwork.Listen(network, l.fix(address))
}

func (l *loopbackNet) ListenPacket(network, address string) (net.PacketConn, error) {
	return l.OSNetwork.ListenPacket(network, l.fix(address))
}

// backend is an echo server: over TCP it writes "NAME CLIENT\n" on accept and closes;
// over UDP it answers each datagram with the same line.
type backend struct {
	name string
	addr netip.AddrPort
}

func tcpBackend(t *testing.T, name string) backend {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr())
			c.Close()
		}
	}()
	return backend{name, addrPortOf(ln.Addr())}
}

func udpBackend(t *testing.T, name string) backend {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(fmt.Sprintf("%s %s\n", name, from)), from)
		}
	}()
	return backend{name, addrPortOf(pc.LocalAddr())}
}

// deadPort returns a loopback port nothing listens on.
func deadPort(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ap := addrPortOf(ln.Addr())
	ln.Close()
	return ap
}

type answer struct {
	server string
	saw    netip.AddrPort
	err    error
}

func askTCP(addr netip.AddrPort) answer {
	c, err := net.DialTimeout("tcp4", addr.String(), 5*time.Second)
	if err != nil {
		return answer{err: err}
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return answer{err: err}
	}
	return parseAnswer(line)
}

func parseAnswer(line string) answer {
	f := strings.Fields(line)
	if len(f) != 2 {
		return answer{err: fmt.Errorf("bad answer %q", line)}
	}
	ap, err := netip.ParseAddrPort(f[1])
	return answer{server: f[0], saw: ap, err: err}
}

type env struct {
	t     *testing.T
	p     *Proxier
	clk   *fakeClock
	emu   *emulator.Emulator
	names map[netip.AddrPort]string
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	e := &env{t: t, clk: newFakeClock(), emu: emulator.New(emulator.IPv4), names: map[netip.AddrPort]string{}}
	if cfg.Network == nil {
		cfg.Network = &loopbackNet{}
	}
	cfg.Clock = e.clk
	cfg.IPTables = e.emu
	cfg.Node = proxy.NodeConfig{Name: "node-a", IPs: []netip.Addr{nodeIP}}
	cfg.Seed = 42
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	e.p = p
	return e
}

func (e *env) sync(svcs []*corev1.Service, slices []*discoveryv1.EndpointSlice) *SyncResult {
	e.t.Helper()
	res, err := e.p.Sync(context.Background(), svcs, slices)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, w := range res.Warnings {
		e.t.Errorf("sync warning: %v", w)
	}
	return res
}

func (e *env) listener(name proxy.ServicePortName) netip.AddrPort {
	e.t.Helper()
	for _, l := range e.p.Listeners() {
		if l.Service == name {
			return l.Addr
		}
	}
	e.t.Fatalf("no listener for %s in %+v", name, e.p.Listeners())
	return netip.AddrPort{}
}

func endpoints(bs ...backend) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.addr.String())
	}
	return out
}

func TestProxierTCPRoundRobinAndRetry(t *testing.T) {
	e := newEnv(t, Config{})
	b := []backend{tcpBackend(t, "b0"), tcpBackend(t, "b1"), tcpBackend(t, "b2")}
	byAddr := map[string]string{}
	for _, x := range b {
		byAddr[x.addr.String()] = x.name
	}
	svc := testService("default", "web", "10.96.0.80", "http", 80, corev1.ProtocolTCP, nil)
	webTCP := spn("default", "web", "http", corev1.ProtocolTCP)
	res := e.sync([]*corev1.Service{svc}, slicesFor("default", "web", "http", corev1.ProtocolTCP, endpoints(b...)...))
	if len(res.Opened) != 1 || res.Opened[0] != webTCP || res.JumpData == nil {
		t.Fatalf("first sync: opened %v, jumps %q", res.Opened, res.JumpData)
	}
	ln := e.listener(webTCP)
	// The rules point the service at the listener.
	saved, _ := e.emu.Save(context.Background(), "nat")
	want := fmt.Sprintf("-A KUBE-PORTALS-CONTAINER -d 10.96.0.80/32 -p tcp -m comment --comment \"default/web:http\" -m tcp --dport 80 -j REDIRECT --to-ports %d", ln.Port())
	if !strings.Contains(string(saved), want) {
		t.Errorf("emulator lacks %q:\n%s", want, saved)
	}

	order := e.p.Balancer().Endpoints(webTCP)
	for i := 0; i < 6; i++ {
		a := askTCP(ln)
		if a.err != nil {
			t.Fatalf("connection %d: %v", i, a.err)
		}
		if want := byAddr[order[i%3]]; a.server != want {
			t.Errorf("connection %d answered by %s, want %s (round robin over %v)", i, a.server, want, order)
		}
		if a.saw.Addr() != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("backend saw %v, want the proxy's address", a.saw)
		}
		d := e.p.Decisions()[i]
		if d.Endpoint != order[i%3] || d.Source != a.saw || d.Retries() != 0 || d.Attempts[0].Reason != ReasonRoundRobin {
			t.Errorf("decision %d: %s; backend saw %v", i, d, a.saw)
		}
		if d.Listener.Port() != ln.Port() || d.Client.Addr() != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("decision %d: listener %v client %v", i, d.Listener, d.Client)
		}
	}

	// A dead endpoint: each connection that draws it is retried on the next one.
	dead := deadPort(t)
	res = e.sync([]*corev1.Service{svc}, slicesFor("default", "web", "http", corev1.ProtocolTCP, append(endpoints(b...), dead.String())...))
	if len(res.Opened)+len(res.Closed) != 0 || res.JumpData != nil {
		t.Errorf("endpoint change reopened listeners or jumps: %+v", res)
	}
	before := len(e.p.Decisions())
	// Round robin over the new order, a dead turn taking the next endpoint too.
	order = e.p.Balancer().Endpoints(webTCP)
	wantRetries := 0
	for i, idx := 0, 0; i < 8; i++ {
		if order[idx] == dead.String() {
			wantRetries++
			idx = (idx + 1) % 4
		}
		idx = (idx + 1) % 4
	}
	retried := 0
	for i := 0; i < 8; i++ {
		a := askTCP(ln)
		if a.err != nil {
			t.Fatalf("connection %d with a dead endpoint: %v", i, a.err)
		}
		d := e.p.Decisions()[before+i]
		if d.Endpoint == dead.String() || byAddr[d.Endpoint] != a.server {
			t.Errorf("decision %s, answered by %s", d, a.server)
		}
		if d.Retries() > 0 {
			retried++
			first := d.Attempts[0]
			if first.Endpoint != dead.String() || !strings.Contains(first.Err, "refused") || d.Attempts[1].Reason != ReasonRoundRobin {
				t.Errorf("retry: %s", d)
			}
		}
	}
	if retried != wantRetries || retried == 0 {
		t.Errorf("%d of 8 connections retried, want %d (the dead endpoint's turns in %v)", retried, wantRetries, order)
	}
	if s := e.p.Decisions()[before].String(); !strings.Contains(s, "default/web:http") || !strings.Contains(s, "round robin") {
		t.Errorf("decision text: %s", s)
	}
}

func TestProxierAffinity(t *testing.T) {
	e := newEnv(t, Config{})
	b := []backend{tcpBackend(t, "b0"), tcpBackend(t, "b1"), tcpBackend(t, "b2")}
	webTCP := spn("default", "web", "http", corev1.ProtocolTCP)
	slices := slicesFor("default", "web", "http", corev1.ProtocolTCP, endpoints(b...)...)
	plain := testService("default", "web", "10.96.0.80", "http", 80, corev1.ProtocolTCP, nil)
	e.sync([]*corev1.Service{plain}, slices)
	oldLn := e.listener(webTCP)

	sticky := testService("default", "web", "10.96.0.80", "http", 80, corev1.ProtocolTCP, func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(int32(30))}}
	})
	res := e.sync([]*corev1.Service{sticky}, slices)
	if len(res.Closed) != 1 || len(res.Opened) != 1 {
		t.Fatalf("affinity change: %+v, want the listener replaced", res)
	}
	ln := e.listener(webTCP)
	if ln == oldLn {
		t.Fatal("same listener after a change")
	}
	if a := askTCP(oldLn); a.err == nil {
		t.Errorf("old listener still answers: %+v", a)
	}
	first := askTCP(ln)
	for i := 0; i < 4; i++ {
		e.clk.Advance(29 * time.Second)
		a := askTCP(ln)
		if a.err != nil || a.server != first.server {
			t.Fatalf("within the timeout: %+v, want %s", a, first.server)
		}
		ds := e.p.Decisions()
		if d := ds[len(ds)-1]; d.Attempts[0].Reason != ReasonAffinity {
			t.Errorf("decision: %s", d)
		}
	}
	e.clk.Advance(30 * time.Second)
	a := askTCP(ln)
	ds := e.p.Decisions()
	if d := ds[len(ds)-1]; a.server == first.server || d.Attempts[0].Reason != ReasonRoundRobin {
		t.Errorf("after the timeout: %s answered (%s), want the next endpoint by round robin", a.server, d)
	}
}

func TestProxierNoEndpointsAndRemoval(t *testing.T) {
	e := newEnv(t, Config{})
	empty := spn("default", "empty", "http", corev1.ProtocolTCP)
	svc := testService("default", "empty", "10.96.0.81", "http", 80, corev1.ProtocolTCP, nil)
	e.sync([]*corev1.Service{svc}, nil)
	ln := e.listener(empty)
	// The listener accepts and closes at once: no endpoint to send the client to.
	c, err := net.Dial("tcp4", ln.String())
	if err != nil {
		t.Fatalf("connect to a service without endpoints: %v (the proxy accepts first)", err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	n, err := io.Copy(io.Discard, c)
	c.Close()
	if n != 0 || err != nil {
		t.Errorf("read %d bytes, %v; want EOF at once", n, err)
	}
	ds := e.p.Decisions()
	if len(ds) != 1 || ds[0].Endpoint != "" || ds[0].Err != ErrMissingEndpoints.Error() {
		t.Errorf("decisions: %v", ds)
	}
	res := e.sync(nil, nil)
	if len(res.Closed) != 1 {
		t.Errorf("removal: %+v", res)
	}
	if _, err := net.Dial("tcp4", ln.String()); err == nil {
		t.Error("listener of a removed service still accepts")
	}
	if len(e.p.Listeners()) != 0 {
		t.Errorf("listeners: %+v", e.p.Listeners())
	}
	if rules := string(e.p.Rules()); strings.Contains(rules, "default/empty") {
		t.Errorf("rules of a removed service:\n%s", rules)
	}
}

// udpAsk sends msg from conn and reads one reply.
func udpAsk(t *testing.T, c net.Conn) answer {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("q")); err != nil {
		return answer{err: err}
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return answer{err: err}
	}
	return parseAnswer(string(buf[:n]))
}

func TestProxierUDPSessions(t *testing.T) {
	e := newEnv(t, Config{UDPIdleTimeout: time.Second})
	b := []backend{udpBackend(t, "u0"), udpBackend(t, "u1")}
	byAddr := map[string]string{b[0].addr.String(): "u0", b[1].addr.String(): "u1"}
	dns := spn("kube-system", "dns", "dns", corev1.ProtocolUDP)
	svc := testService("kube-system", "dns", "10.96.0.10", "dns", 53, corev1.ProtocolUDP, nil)
	e.sync([]*corev1.Service{svc}, slicesFor("kube-system", "dns", "dns", corev1.ProtocolUDP, endpoints(b...)...))
	ln := e.listener(dns)
	order := e.p.Balancer().Endpoints(dns)

	// A connected UDP socket only takes datagrams from the listener's address, so an
	// answer proves the reply came from the proxy socket.
	c, err := net.Dial("udp4", ln.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first := udpAsk(t, c)
	if first.err != nil || first.server != byAddr[order[0]] || first.saw.Addr() != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("first datagram: %+v, want %s", first, byAddr[order[0]])
	}
	sess := e.p.Sessions()
	if len(sess) != 1 || sess[0].Endpoint != order[0] || sess[0].Source != first.saw || sess[0].Client != addrPortOf(c.LocalAddr()) {
		t.Fatalf("sessions: %+v", sess)
	}
	// Activity keeps the session: same backend, same source port, no new decision.
	for i := 0; i < 3; i++ {
		e.clk.Advance(900 * time.Millisecond)
		a := udpAsk(t, c)
		if a.err != nil || a.server != first.server || a.saw != first.saw {
			t.Fatalf("datagram %d within the idle timeout: %+v, want %+v", i, a, first)
		}
	}
	if n := len(e.p.Decisions()); n != 1 {
		t.Errorf("%d decisions for one session", n)
	}
	// Idle for the timeout: the session ends, the next datagram makes a new choice.
	e.clk.Advance(time.Second)
	if s := e.p.Sessions(); len(s) != 0 {
		t.Fatalf("sessions after the idle timeout: %+v", s)
	}
	if e.clk.pending() != 0 {
		t.Errorf("%d timers left after the session ended", e.clk.pending())
	}
	a := udpAsk(t, c)
	if a.err != nil || a.server != byAddr[order[1]] {
		t.Fatalf("after the timeout: %+v, want %s (round robin)", a, byAddr[order[1]])
	}
	if ds := e.p.Decisions(); len(ds) != 2 || ds[1].Protocol != corev1.ProtocolUDP || ds[1].Endpoint != order[1] {
		t.Errorf("decisions: %v", ds)
	}
	// Removing the service ends its sessions.
	e.sync(nil, nil)
	if s := e.p.Sessions(); len(s) != 0 {
		t.Errorf("sessions of a removed service: %+v", s)
	}
}

func TestProxierNodePortsAndPortRange(t *testing.T) {
	base := 47100
	e := newEnv(t, Config{PortRange: PortRange{Base: base, Size: 50}})
	svc := testService("default", "web", "10.96.0.80", "http", 80, corev1.ProtocolTCP, func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 0 // filled below with a free port
	})
	np := deadPort(t).Port()
	svc.Spec.Ports[0].NodePort = int32(np)
	udp := testService("default", "dns", "10.96.0.10", "dns", 53, corev1.ProtocolUDP, nil)
	e.sync([]*corev1.Service{svc, udp}, nil)
	for _, l := range e.p.Listeners() {
		if int(l.Port) < base || int(l.Port) >= base+50 {
			t.Errorf("listener %+v outside the range", l)
		}
	}
	// The node port is held open (on loopback here) so nothing else takes it.
	if _, err := net.Listen("tcp4", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), np).String()); err == nil {
		t.Error("node port not held")
	}
	rules := string(e.p.Rules())
	port := e.listener(spn("default", "web", "http", corev1.ProtocolTCP)).Port()
	for _, want := range []string{
		fmt.Sprintf("-A KUBE-NODEPORT-CONTAINER -p tcp -m comment --comment \"default/web:http\" -m tcp --dport %d -j REDIRECT --to-ports %d", np, port),
		fmt.Sprintf("-A KUBE-NODEPORT-HOST -p tcp -m comment --comment \"default/web:http\" -m tcp --dport %d -j DNAT --to-destination 172.18.0.2:%d", np, port),
		fmt.Sprintf("-A KUBE-NODEPORT-NON-LOCAL -p tcp -m comment --comment \"default/web:http\" -m tcp --dport %d -m state --state NEW -j ACCEPT", port),
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("rules lack %q:\n%s", want, rules)
		}
	}
	e.sync(nil, nil)
	ln, err := net.Listen("tcp4", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), np).String())
	if err != nil {
		t.Errorf("node port still held after the service went: %v", err)
	} else {
		ln.Close()
	}
}

func TestNewErrors(t *testing.T) {
	node := proxy.NodeConfig{Name: "n", IPs: []netip.Addr{nodeIP}}
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no network", Config{Node: node}, "nil Network"},
		{"loopback", Config{Node: node, Network: &OSNetwork{}, ListenIP: netip.MustParseAddr("127.0.0.1")}, "cannot proxy on localhost"},
		{"family", Config{Node: node, Network: &OSNetwork{}, ListenIP: netip.MustParseAddr("fd00::1")}, "is not IPv4"},
		{"bad family", Config{Node: node, Network: &OSNetwork{}, Family: "IPv5"}, "neither IPv4 nor IPv6"},
		{"no host IP", Config{Node: proxy.NodeConfig{Name: "n"}, Network: &OSNetwork{}, Family: corev1.IPv6Protocol}, "no IPv6 address"},
		{"port range", Config{Node: node, Network: &OSNetwork{}, PortRange: PortRange{Base: 65500, Size: 100}}, "not within 1-65535"},
	}
	for _, tc := range cases {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := New(Config{Node: node, Network: &OSNetwork{}, ListenIP: netip.MustParseAddr("127.0.0.1")}); !errors.Is(err, ErrProxyOnLocalhost) {
		t.Errorf("loopback: %v is not ErrProxyOnLocalhost", err)
	}
}

// Concurrent clients all get answers and every decision is recorded once.
func TestProxierConcurrentClients(t *testing.T) {
	e := newEnv(t, Config{})
	b := []backend{tcpBackend(t, "b0"), tcpBackend(t, "b1")}
	webTCP := spn("default", "web", "http", corev1.ProtocolTCP)
	e.sync([]*corev1.Service{testService("default", "web", "10.96.0.80", "http", 80, corev1.ProtocolTCP, nil)},
		slicesFor("default", "web", "http", corev1.ProtocolTCP, endpoints(b...)...))
	ln := e.listener(webTCP)
	var wg sync.WaitGroup
	var mu sync.Mutex
	count := map[string]int{}
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := askTCP(ln)
			mu.Lock()
			defer mu.Unlock()
			if a.err != nil {
				t.Error(a.err)
				return
			}
			count[a.server]++
		}()
	}
	wg.Wait()
	if count["b0"] != 20 || count["b1"] != 20 {
		t.Errorf("40 concurrent clients: %v, want 20 each", count)
	}
	ds := e.p.Decisions()
	if len(ds) != 40 || ds[39].Seq != 40 {
		t.Errorf("%d decisions", len(ds))
	}
}
