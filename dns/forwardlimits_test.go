package dns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// holdingUpstream is a real DNS server on 127.0.0.1 standing for the upstream: it
// answers the loop probe (and names under "now.") at once, with 192.0.2.1 for A
// queries, and holds every other query until release is closed. entered receives
// each held query's name as it arrives.
type holdingUpstream struct {
	addr    string
	entered chan string
	release chan struct{}
	once    sync.Once
}

// Release answers the held queries, and the later ones at once.
func (u *holdingUpstream) Release() { u.once.Do(func() { close(u.release) }) }

func startHoldingUpstream(t *testing.T) *holdingUpstream {
	t.Helper()
	u := &holdingUpstream{entered: make(chan string, 256), release: make(chan struct{})}
	t.Cleanup(u.Release)
	h := mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) {
		name := strings.ToLower(r.Question[0].Name)
		if !strings.HasSuffix(name, ".clusterlab-loop-probe.") && !strings.HasSuffix(name, ".now.") {
			u.entered <- name
			<-u.release
		}
		m := new(mdns.Msg)
		m.SetReply(r)
		if r.Question[0].Qtype == mdns.TypeA {
			rr, _ := mdns.NewRR(r.Question[0].Name + " 30 IN A 192.0.2.1")
			m.Answer = []mdns.RR{rr}
		}
		_ = w.WriteMsg(m)
	})
	u.addr, _ = listen(t, h)
	return u
}

// clientConn is a UDP socket of a client at ip (on loopback: 127.0.0.0/8 is all
// local on Linux).
func clientConn(t *testing.T, ip string) *mdns.Conn {
	t.Helper()
	pc, err := net.ListenPacket("udp", ip+":0")
	if err != nil {
		t.Skipf("cannot bind a client at %s: %v", ip, err)
	}
	t.Cleanup(func() { pc.Close() })
	return &mdns.Conn{Conn: &packetConnTo{PacketConn: pc}}
}

// packetConnTo makes a PacketConn a net.Conn towards one peer (set with to).
type packetConnTo struct {
	net.PacketConn
	peer net.Addr
}

func (c *packetConnTo) Read(b []byte) (int, error) {
	n, _, err := c.ReadFrom(b)
	return n, err
}
func (c *packetConnTo) Write(b []byte) (int, error) { return c.WriteTo(b, c.peer) }
func (c *packetConnTo) RemoteAddr() net.Addr        { return c.peer }

func sendTo(t *testing.T, c *mdns.Conn, server string, id uint16, name string) {
	t.Helper()
	ua, err := net.ResolveUDPAddr("udp", server)
	if err != nil {
		t.Fatal(err)
	}
	c.Conn.(*packetConnTo).peer = ua
	m := new(mdns.Msg)
	m.SetQuestion(name, mdns.TypeA)
	m.Id = id
	if err := c.WriteMsg(m); err != nil {
		t.Fatal(err)
	}
}

func readReply(t *testing.T, c *mdns.Conn) *mdns.Msg {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second)) // a guard, not a wait
	m, err := c.ReadMsg()
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	return m
}

// TestServePerClientUpstreamCap: one client cannot take every upstream slot. A
// client with MaxUpstreamPerClient queries held by a slow upstream gets SERVFAIL at
// once for more, counted on the log, while a client at another address still has
// its query forwarded. (Before the cap, the first client took all 64 slots.)
func TestServePerClientUpstreamCap(t *testing.T) {
	up := startHoldingUpstream(t)
	file := filepath.Join(t.TempDir(), "svc.yaml")
	writeFile(t, file, serveManifest)
	r := startServeWith(t, func(c *ServeConfig) {
		c.Upstream = up.addr
		c.UpstreamTimeout = time.Minute // the held queries must not time out
	}, file)

	const extra = 4
	a := clientConn(t, "127.0.0.1")
	for i := 0; i < MaxUpstreamPerClient+extra; i++ {
		sendTo(t, a, r.udp, uint16(100+i), "q"+string(rune('a'+i))+".example.")
	}
	for i := 0; i < MaxUpstreamPerClient; i++ {
		<-up.entered
	}
	for i := 0; i < extra; i++ {
		if m := readReply(t, a); m.Rcode != mdns.RcodeServerFailure {
			t.Fatalf("reply %d while the client has %d in flight: %s, want SERVFAIL", i, MaxUpstreamPerClient, mdns.RcodeToString[m.Rcode])
		}
	}
	b := clientConn(t, "127.0.0.2")
	sendTo(t, b, r.udp, 7, "other-client.example.")
	if got := <-up.entered; got != "other-client.example." {
		t.Fatalf("upstream got %q, want the other client's query", got)
	}
	select {
	case name := <-up.entered:
		t.Fatalf("the upstream got %q beyond the client's cap", name)
	default:
	}
	up.Release()
	for i := 0; i < MaxUpstreamPerClient; i++ {
		if m := readReply(t, a); m.Rcode != mdns.RcodeSuccess || len(m.Answer) != 1 {
			t.Fatalf("released reply: %v", m)
		}
	}
	if m := readReply(t, b); m.Rcode != mdns.RcodeSuccess {
		t.Fatalf("the other client: %v", m)
	}
	r.tick <- time.Now() // the log line comes with the next poll
	r.tick <- time.Now() // ... which has finished once this one is taken
	want := "upstream: SERVFAIL for 0 queries over the 64 in flight, 4 over the 16 in flight per client, 0 timed out"
	if log := r.log.String(); !strings.Contains(log, want) {
		t.Errorf("log %q lacks %q", log, want)
	}
}

// TestLimitedUpstreamPerClient: the per-client cap, on the limiter alone: counts per
// address, released when exchanges end, and counted when it refuses.
func TestLimitedUpstreamPerClient(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 8)
	slow := UpstreamFunc(func(ctx context.Context, req *mdns.Msg, _ string) (*mdns.Msg, error) {
		entered <- struct{}{}
		<-release
		return req, nil
	})
	l := newLimitedUpstream(slow, 3)
	l.perClient = 2
	a := withClient(context.Background(), netip.MustParseAddr("10.0.0.1"))
	b := withClient(context.Background(), netip.MustParseAddr("10.0.0.2"))
	var wg sync.WaitGroup
	for _, ctx := range []context.Context{a, a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = l.Exchange(ctx, new(mdns.Msg), "udp") }()
	}
	for i := 0; i < 3; i++ {
		<-entered
	}
	if _, err := l.Exchange(a, new(mdns.Msg), "udp"); !errors.Is(err, errClientBusy) {
		t.Errorf("a third for 10.0.0.1: %v, want errClientBusy", err)
	}
	c := withClient(context.Background(), netip.MustParseAddr("10.0.0.3"))
	if _, err := l.Exchange(c, new(mdns.Msg), "udp"); !errors.Is(err, errUpstreamBusy) {
		t.Errorf("a fourth in all: %v, want errUpstreamBusy", err)
	}
	close(release)
	wg.Wait()
	if _, err := l.Exchange(a, new(mdns.Msg), "udp"); err != nil {
		t.Errorf("after they ended: %v", err)
	}
	if got, want := l.Stats(), (UpstreamStats{Busy: 1, ClientBusy: 1}); got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
	if len(l.byClient) != 0 {
		t.Errorf("per-client counts left: %v", l.byClient)
	}
}

// TestForwardTimesOut: an upstream exchange is bounded by UpstreamTimeout even when
// the upstream never answers and ignores its context: the client gets SERVFAIL, the
// timeout is counted, and the slot comes back when the upstream finally returns.
func TestForwardTimesOut(t *testing.T) {
	stuck := make(chan struct{})
	returned := make(chan struct{})
	up := UpstreamFunc(func(context.Context, *mdns.Msg, string) (*mdns.Msg, error) {
		<-stuck // ignores ctx
		close(returned)
		return nil, errors.New("late")
	})
	l := newLimitedUpstream(up, 1)
	srv := newTestServer(t, func(c *Config) {
		c.Upstream = l
		c.UpstreamTimeout = 20 * time.Millisecond
	})
	done := make(chan *mdns.Msg, 1)
	go func() {
		m := new(mdns.Msg)
		m.SetQuestion("example.com.", mdns.TypeA)
		done <- srv.Handle(context.Background(), m, "udp")
	}()
	select {
	case m := <-done:
		if m.Rcode != mdns.RcodeServerFailure {
			t.Errorf("rcode %s, want SERVFAIL", mdns.RcodeToString[m.Rcode])
		}
	case <-time.After(30 * time.Second): // a guard: the deadline is 20ms
		t.Fatal("the exchange outlived its deadline")
	}
	if got := l.Stats().TimedOut; got != 1 {
		t.Errorf("timed out %d, want 1", got)
	}
	if _, err := l.Exchange(context.Background(), new(mdns.Msg), "udp"); !errors.Is(err, errUpstreamBusy) {
		t.Errorf("while the stuck exchange runs: %v, want its slot still taken", err)
	}
	close(stuck)
	<-returned
}

// TestAddrUpstreamTimesOut: the real-socket upstream gives up at its Timeout when
// the server is silent.
func TestAddrUpstreamTimesOut(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0") // reads nothing, answers nothing
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	u := NewUpstream(pc.LocalAddr().String())
	u.Timeout = 50 * time.Millisecond
	m := new(mdns.Msg)
	m.SetQuestion("example.com.", mdns.TypeA)
	start := time.Now()
	_, err = u.Exchange(context.Background(), m, "udp")
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("exchange with a silent server: %v, want a timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v with a 50ms timeout", d)
	}
}

// TestServeAllowRecursion: names outside the zones are forwarded only for clients in
// AllowRecursion; others get REFUSED, and cluster names are answered to anyone.
func TestServeAllowRecursion(t *testing.T) {
	up := startHoldingUpstream(t)
	file := filepath.Join(t.TempDir(), "svc.yaml")
	writeFile(t, file, serveManifest)
	r := startServeWith(t, func(c *ServeConfig) {
		c.Upstream = up.addr
		c.AllowRecursion = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
	}, file)
	ask := func(ip, name string) *mdns.Msg {
		c := clientConn(t, ip)
		sendTo(t, c, r.udp, 1, name)
		return readReply(t, c)
	}
	if m := ask("127.0.0.1", "x.now."); m.Rcode != mdns.RcodeRefused || m.RecursionAvailable {
		t.Errorf("outside name from 127.0.0.1 (not allowed): %s RA=%v, want REFUSED", mdns.RcodeToString[m.Rcode], m.RecursionAvailable)
	}
	if m := ask("127.0.0.1", "my-service.default.svc.cluster.local."); m.Rcode != mdns.RcodeSuccess || len(m.Answer) != 1 {
		t.Errorf("cluster name from 127.0.0.1: %v, want its answer", m)
	}
	if m := ask("127.0.0.1", "9.9.9.10.in-addr.arpa."); m.Rcode != mdns.RcodeNameError {
		t.Errorf("reverse name from 127.0.0.1: %s, want NXDOMAIN (no fallthrough to the upstream)", mdns.RcodeToString[m.Rcode])
	}
	if m := ask("127.0.0.2", "x.now."); m.Rcode != mdns.RcodeSuccess || len(m.Answer) != 1 {
		t.Errorf("outside name from 127.0.0.2 (allowed): %v, want the upstream's answer", m)
	}
}

// TestDefaultRecursionACL: loopback and the Nodes' pod CIDRs, else the default one.
func TestDefaultRecursionACL(t *testing.T) {
	node := func(name string, cidrs ...string) runtime.Object {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if len(cidrs) == 1 && strings.HasPrefix(cidrs[0], "single:") {
			n.Spec.PodCIDR = strings.TrimPrefix(cidrs[0], "single:")
		} else {
			n.Spec.PodCIDRs = cidrs
		}
		return n
	}
	for _, tc := range []struct {
		objs []runtime.Object
		want string
	}{
		{nil, "127.0.0.0/8,::1/128,10.244.0.0/16"},
		{[]runtime.Object{node("a")}, "127.0.0.0/8,::1/128,10.244.0.0/16"},
		{[]runtime.Object{node("a", "10.1.0.0/24", "fd00:1::/64"), node("b", "10.1.1.0/24"), node("c", "single:10.1.2.0/24"), node("d", "10.1.1.0/24")},
			"127.0.0.0/8,::1/128,10.1.0.0/24,fd00:1::/64,10.1.1.0/24,10.1.2.0/24"},
	} {
		if got := NewRecursionACL(defaultRecursionACL(tc.objs)...).String(); got != tc.want {
			t.Errorf("%d objects: %s, want %s", len(tc.objs), got, tc.want)
		}
	}
}

// TestServeOpenForwarderWarning: --upstream on an address that is not loopback
// warns, naming the networks allowed to recurse; on loopback it does not.
func TestServeOpenForwarderWarning(t *testing.T) {
	up := startHoldingUpstream(t)
	file := filepath.Join(t.TempDir(), "svc.yaml")
	writeFile(t, file, serveManifest)
	for _, tc := range []struct {
		listen string
		want   bool
	}{{"0.0.0.0:0", true}, {"127.0.0.1:0", false}} {
		warn := &syncBuffer{}
		startServeWith(t, func(c *ServeConfig) {
			c.Listen = tc.listen
			c.Upstream = up.addr
			c.Warn = warn
		}, file)
		got := warn.String()
		if tc.want != strings.Contains(got, "open forwarder") || tc.want && !strings.Contains(got, "127.0.0.0/8,::1/128,10.244.0.0/16 (--allow-recursion)") {
			t.Errorf("--listen %s: warnings %q", tc.listen, got)
		}
	}
	for listen, want := range map[string]bool{"127.0.0.1:53": true, "[::1]:53": true, "localhost:53": true, ":53": false, "0.0.0.0:53": false, "192.0.2.1:53": false, "[::ffff:127.0.0.1]:53": true} {
		if got := loopbackListen(listen); got != want {
			t.Errorf("loopbackListen(%s) = %v", listen, got)
		}
	}
}

// TestParseAllowRecursion: networks and addresses, comma-separated or repeated; a
// bad one names the flag and the value, escaped.
func TestParseAllowRecursion(t *testing.T) {
	got, err := ParseAllowRecursion([]string{"10.1.2.3/8, 192.0.2.7", "fd00::/8"})
	if err != nil || NewRecursionACL(got...).String() != "10.0.0.0/8,192.0.2.7/32,fd00::/8" {
		t.Errorf("got %v, %v", got, err)
	}
	if got, err := ParseAllowRecursion([]string{""}); err != nil || got == nil || len(got) != 0 {
		t.Errorf("empty: %v, %v: want an empty, non-nil list (nobody)", got, err)
	}
	for _, bad := range []string{"10.0.0/8", "10.0.0.0/33", "fe80::1%eth0", "a\x00b"} {
		_, err := ParseAllowRecursion([]string{bad})
		if err == nil || !strings.HasPrefix(err.Error(), "--allow-recursion ") || strings.ContainsRune(err.Error(), 0) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// TestServeDeletedManifestLoggedOnce: a manifest deleted under dns serve is logged
// once, not at every poll, and again when something changes.
func TestServeDeletedManifestLoggedOnce(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "svc.yaml")
	writeFile(t, file, serveManifest)
	r := startServe(t, file)
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := r.reload(t); err == nil {
		t.Fatal("reload of a deleted file succeeded")
	}
	for i := 0; i < 5; i++ {
		r.tick <- time.Now()
	}
	writeFile(t, file, strings.Replace(serveManifest, "10.96.7.7", "10.96.8.8", 1))
	if err := r.reload(t); err != nil {
		t.Fatalf("reload after the file came back: %v", err)
	}
	if n := strings.Count(r.log.String(), "reload failed"); n != 1 {
		t.Errorf("%d reload failures logged, want 1: %s", n, r.log.String())
	}
	if got := r.a(t, "my-service.default.svc.cluster.local."); len(got) != 1 || got[0] != "10.96.8.8" {
		t.Errorf("after the file came back: %v", got)
	}
	// Gone again, then a second file is named that does not exist either: a different
	// state, logged again.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := r.reload(t); err == nil {
		t.Fatal("reload of a deleted file succeeded")
	}
	r.tick <- time.Now()
	if n := strings.Count(r.log.String(), "reload failed"); n != 2 {
		t.Errorf("%d reload failures logged, want 2", n)
	}
	select {
	case err := <-r.reloads:
		t.Errorf("a reload attempt for an unchanged state: %v", err)
	default:
	}
}

// TestSkippedNoteEscapes: a kind from the input with a control byte is escaped on the
// log, not written raw.
func TestSkippedNoteEscapes(t *testing.T) {
	got := skippedNote(map[string]int{"Dep\x00loyment": 1, "ConfigMap": 2})
	if want := `skipped objects of kinds dns serve does not read: 2 ConfigMap, 1 "Dep\x00loyment"`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
