package dns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// timers is a virtual clock for Stub.After: time moves only when the test
// says the network has gone quiet.
type timers struct {
	mu      sync.Mutex
	now     time.Duration
	pending []timer
	fired   int // advances that fired a timer
}

type timer struct {
	at time.Duration
	ch chan time.Time
}

func (c *timers) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.pending = append(c.pending, timer{at: c.now + d, ch: ch})
	return ch
}

// advance moves the clock to the latest timer set (the round the stub waits
// in; the stub does not stop the timers of rounds that ended with all their
// replies) and fires every timer due.
func (c *timers) advance() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		return
	}
	c.now = max(c.now, c.pending[len(c.pending)-1].at)
	c.fired++
	keep := c.pending[:0]
	for _, t := range c.pending {
		if t.at <= c.now {
			t.ch <- fixedNow.Add(c.now)
			continue
		}
		keep = append(keep, t)
	}
	c.pending = keep
}

func (c *timers) advances() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fired
}

// heardQuery is one query the racy server received.
type heardQuery struct {
	Port        int    // the client's source port
	Type        string // A or AAAA
	Outstanding bool   // an A query from that port was still unanswered
	Dropped     bool
}

// racyServer is a DNS server on 127.0.0.1 behind the conntrack insert race
// of a real node: it answers A and AAAA queries, but an AAAA query that
// arrives while an A query from the same source port is outstanding is lost
// (the second packet of the pair lost its conntrack insert). To make "while
// outstanding" deterministic the server holds each A reply until the client
// has sent everything it sends before waiting (its conn reports each read),
// and when the client waits for a reply the server will never send, it
// advances the clock so that the stub's timeout fires.
type racyServer struct {
	t     *testing.T
	pc    net.PacketConn
	clock *timers
	ev    chan any
	stop  chan struct{}
	done  chan struct{}

	ports map[int]*portState // owned by the loop
	// lose decides whether an AAAA query is lost; nil: when an A query from
	// its port is outstanding (the race).
	lose func(st *portState, outstanding bool) bool

	mu    sync.Mutex
	heard []heardQuery
}

type portState struct {
	received, sent int
	held           *mdns.Msg // the A reply being held
	heldTo         net.Addr
	sawA           bool        // an A query came from this port
	wait           *clientWait // the client's latest read
	advancedFor    *clientWait
}

// clientWait: the client at port starts a read, having written and read so
// many datagrams on that socket.
type clientWait struct{ port, written, read int }

type datagram struct {
	from net.Addr
	msg  *mdns.Msg
}

func newRacyServer(t *testing.T, clock *timers, lose func(st *portState, outstanding bool) bool) *racyServer {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &racyServer{t: t, pc: pc, clock: clock, ev: make(chan any), stop: make(chan struct{}), done: make(chan struct{}), ports: map[int]*portState{}, lose: lose}
	go s.read()
	go s.loop()
	t.Cleanup(func() {
		close(s.stop)
		pc.Close()
		<-s.done
	})
	return s
}

func (s *racyServer) read() {
	buf := make([]byte, 65535)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		m := new(mdns.Msg)
		if m.Unpack(buf[:n]) != nil || len(m.Question) != 1 {
			continue
		}
		select {
		case s.ev <- datagram{from, m}:
		case <-s.stop:
			return
		}
	}
}

func (s *racyServer) loop() {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		case ev := <-s.ev:
			switch ev := ev.(type) {
			case datagram:
				s.query(ev)
			case *clientWait:
				st := s.port(ev.port)
				st.wait = ev
				s.progress(st)
			}
		}
	}
}

func (s *racyServer) port(p int) *portState {
	st := s.ports[p]
	if st == nil {
		st = &portState{}
		s.ports[p] = st
	}
	return st
}

func (s *racyServer) query(d datagram) {
	port := d.from.(*net.UDPAddr).Port
	st := s.port(port)
	st.received++
	q := d.msg.Question[0]
	h := heardQuery{Port: port, Type: mdns.TypeToString[q.Qtype], Outstanding: st.held != nil}
	r := new(mdns.Msg)
	r.SetReply(d.msg)
	r.Authoritative = true
	hdr := mdns.RR_Header{Name: q.Name, Class: mdns.ClassINET, Ttl: 30}
	switch q.Qtype {
	case mdns.TypeA:
		hdr.Rrtype = mdns.TypeA
		r.Answer = append(r.Answer, &mdns.A{Hdr: hdr, A: net.IPv4(10, 0, 0, 3)})
		st.held, st.heldTo, st.sawA = r, d.from, true
	case mdns.TypeAAAA:
		h.Dropped = h.Outstanding
		if s.lose != nil {
			h.Dropped = s.lose(st, h.Outstanding)
		}
	}
	// Logged before any reply goes out: the lookup may end with that reply.
	s.mu.Lock()
	s.heard = append(s.heard, h)
	s.mu.Unlock()
	if q.Qtype == mdns.TypeAAAA && !h.Dropped {
		hdr.Rrtype = mdns.TypeAAAA
		r.Answer = append(r.Answer, &mdns.AAAA{Hdr: hdr, AAAA: net.ParseIP("10::3")})
		s.reply(st, r, d.from)
	}
	s.progress(st)
}

func (s *racyServer) reply(st *portState, r *mdns.Msg, to net.Addr) {
	b, err := r.Pack()
	if err != nil {
		s.t.Error(err)
		return
	}
	if _, err := s.pc.WriteTo(b, to); err != nil {
		s.t.Error(err)
	}
	st.sent++
}

// progress releases a held A reply once every datagram the waiting client
// sent has arrived, and advances the clock when the client waits for a reply
// that will not come (everything it sent arrived, everything sent to it was
// read, nothing is held).
func (s *racyServer) progress(st *portState) {
	w := st.wait
	if w == nil || st.received < w.written {
		return
	}
	if st.held != nil {
		s.reply(st, st.held, st.heldTo)
		st.held = nil
	}
	if st.sent == w.read && st.advancedFor != w {
		st.advancedFor = w
		s.clock.advance()
	}
}

func (s *racyServer) waiting(w *clientWait) {
	select {
	case s.ev <- w:
	case <-s.stop:
	}
}

func (s *racyServer) log() []heardQuery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]heardQuery(nil), s.heard...)
}

// watchedConn is the stub's UDP socket, telling the server when it reads.
type watchedConn struct {
	*net.UDPConn
	srv           *racyServer
	written, read int
}

func (c *watchedConn) Write(b []byte) (int, error) {
	n, err := c.UDPConn.Write(b)
	if err == nil {
		c.written++
	}
	return n, err
}

func (c *watchedConn) Read(b []byte) (int, error) {
	c.srv.waiting(&clientWait{port: c.LocalAddr().(*net.UDPAddr).Port, written: c.written, read: c.read})
	n, err := c.UDPConn.Read(b)
	if err == nil {
		c.read++
	}
	return n, err
}

func racyStub(t *testing.T, clock *timers, srv *racyServer) *Stub {
	st := NewStub(ResolvConf{Nameservers: []string{kubeDNS}, Options: []string{"attempts:1"}},
		func(ctx context.Context, network, address string) (net.Conn, error) {
			if network != "udp" || address != kubeDNS+":53" {
				return nil, errors.New("unexpected dial " + network + " " + address)
			}
			c, err := net.DialUDP("udp", nil, srv.pc.LocalAddr().(*net.UDPAddr))
			if err != nil {
				return nil, err
			}
			return &watchedConn{UDPConn: c, srv: srv}, nil
		})
	st.Timeout = 5 * time.Second
	st.After = clock.After
	return st
}

// TestStubSingleRequestFallback: glibc's send_dg fallback. The A and AAAA
// queries go back to back; the server loses the AAAA (it arrived while the A
// was outstanding); after the timeout with one reply of two the stub
// switches to single-request (RES_SNGLKUP) and asks both again, one at a
// time, on the same socket, and gets both. The next lookup starts in
// single-request mode: no parallel pair, no timeout.
func TestStubSingleRequestFallback(t *testing.T) {
	clock := &timers{}
	srv := newRacyServer(t, clock, nil)
	st := racyStub(t, clock, srv)
	const name = "svc-dual-stack.testns.svc.cluster.local."
	want := []netip.Addr{netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10::3")}

	res, err := st.LookupHost(context.Background(), name)
	if err != nil {
		t.Fatalf("first lookup: %v\n%s", err, logLines(res.Log))
	}
	if !reflect.DeepEqual(res.Addrs, want) {
		t.Errorf("first lookup: %v, want %v", res.Addrs, want)
	}
	if n := clock.advances(); n != 1 {
		t.Errorf("first lookup waited out %d timeouts, want 1", n)
	}
	if got, want := logLines(res.Log), trimLog(`
		A svc-dual-stack.testns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers
		AAAA svc-dual-stack.testns.svc.cluster.local. @10.96.0.10:53/udp error: i/o timeout
		A svc-dual-stack.testns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers
		AAAA svc-dual-stack.testns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers`); !equalIgnoringOpError(got, want) {
		t.Errorf("first lookup's queries:\n%s\nwant:\n%s", got, want)
	}
	heard := srv.log()
	if len(heard) != 4 {
		t.Fatalf("server heard %v, want 4 queries", heard)
	}
	p := heard[0].Port
	wantHeard := []heardQuery{
		{Port: p, Type: "A"},
		{Port: p, Type: "AAAA", Outstanding: true, Dropped: true}, // sent in parallel
		{Port: p, Type: "A"},    // the retry on the same socket
		{Port: p, Type: "AAAA"}, // after the A reply: single-request
	}
	if !reflect.DeepEqual(heard, wantHeard) {
		t.Errorf("server heard:\n%+v\nwant:\n%+v", heard, wantHeard)
	}
	if single, reopen := st.SingleRequest(); !single || reopen {
		t.Errorf("after the fallback: single-request %v, reopen %v; want single-request only", single, reopen)
	}

	// The switch sticks: the next lookup is sequential from the start.
	res, err = st.LookupHost(context.Background(), name)
	if err != nil {
		t.Fatalf("second lookup: %v\n%s", err, logLines(res.Log))
	}
	if !reflect.DeepEqual(res.Addrs, want) {
		t.Errorf("second lookup: %v, want %v", res.Addrs, want)
	}
	if n := clock.advances(); n != 1 {
		t.Errorf("second lookup waited out %d timeouts, want none", n-1)
	}
	if got, want := logLines(res.Log), trimLog(`
		A svc-dual-stack.testns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers
		AAAA svc-dual-stack.testns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers`); got != want {
		t.Errorf("second lookup's queries:\n%s\nwant:\n%s", got, want)
	}
	heard = srv.log()[4:]
	if len(heard) != 2 {
		t.Fatalf("server heard %v in the second lookup, want 2 queries", heard)
	}
	q := heard[0].Port
	if want := []heardQuery{{Port: q, Type: "A"}, {Port: q, Type: "AAAA"}}; !reflect.DeepEqual(heard, want) {
		t.Errorf("second lookup: server heard %+v, want %+v", heard, want)
	}
}

// equalIgnoringOpError compares log lines, an error line matching when the
// wanted error text ends it ("read udp 127.0.0.1:x->...: i/o timeout").
func equalIgnoringOpError(got, want string) bool {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		if g[i] == w[i] {
			continue
		}
		const marker = "error: "
		gi, wi := strings.Index(g[i], marker), strings.Index(w[i], marker)
		if gi < 0 || wi < 0 || g[i][:gi] != w[i][:wi] || !strings.HasSuffix(g[i], w[i][wi+len(marker):]) {
			return false
		}
	}
	return true
}

// TestStubSingleRequestReopenFallback: the next steps of glibc's fallback.
// When single-request also ends with one reply of two, the stub switches to
// single-request-reopen (RES_SNGLKUPREOP) and asks again, the AAAA from a
// new socket; when that too ends with one reply, that reply is the answer.
func TestStubSingleRequestReopenFallback(t *testing.T) {
	const name = "svc-dual-stack.testns.svc.cluster.local."
	a, aaaa := netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10::3")
	for _, tc := range []struct {
		name     string
		lose     func(st *portState, outstanding bool) bool
		timeouts int
		addrs    []netip.Addr
		// heard: the ports as letters in order of appearance, * for a lost query
		heard string
	}{
		// A NAT that loses an AAAA from any socket that sent an A (a stale
		// entry for the socket's flow): only a new socket gets it through.
		{name: "AAAA lost on the A's socket", lose: func(st *portState, _ bool) bool { return st.sawA },
			timeouts: 2, addrs: []netip.Addr{a, aaaa}, heard: "A@a AAAA@a* A@a AAAA@a* A@b AAAA@c"},
		{name: "AAAA always lost", lose: func(*portState, bool) bool { return true },
			timeouts: 3, addrs: []netip.Addr{a}, heard: "A@a AAAA@a* A@a AAAA@a* A@b AAAA@c*"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &timers{}
			srv := newRacyServer(t, clock, tc.lose)
			st := racyStub(t, clock, srv)
			res, err := st.LookupHost(context.Background(), name)
			if err != nil {
				t.Fatalf("lookup: %v\n%s", err, logLines(res.Log))
			}
			if !reflect.DeepEqual(res.Addrs, tc.addrs) {
				t.Errorf("addresses %v, want %v", res.Addrs, tc.addrs)
			}
			if n := clock.advances(); n != tc.timeouts {
				t.Errorf("waited out %d timeouts, want %d", n, tc.timeouts)
			}
			if len(res.Log) != 6 {
				t.Errorf("stub sent %d queries, want 6:\n%s", len(res.Log), logLines(res.Log))
			}
			if got := heardString(srv.log()); got != tc.heard {
				t.Errorf("server heard %s, want %s", got, tc.heard)
			}
			if single, reopen := st.SingleRequest(); !single || !reopen {
				t.Errorf("after the fallback: single-request %v, reopen %v; want both", single, reopen)
			}

			// The next lookup starts with single-request-reopen.
			before := len(srv.log())
			res, err = st.LookupHost(context.Background(), name)
			if err != nil {
				t.Fatalf("second lookup: %v\n%s", err, logLines(res.Log))
			}
			if !reflect.DeepEqual(res.Addrs, tc.addrs) {
				t.Errorf("second lookup: %v, want %v", res.Addrs, tc.addrs)
			}
			want := "A@a AAAA@b"
			if len(tc.addrs) == 1 {
				want = "A@a AAAA@b*"
			}
			if got := heardString(srv.log()[before:]); got != want {
				t.Errorf("second lookup: server heard %s, want %s", got, want)
			}
		})
	}
}

// heardString writes the queries with their ports as letters a, b, ... in
// order of appearance, a lost one marked *.
func heardString(heard []heardQuery) string {
	names := map[int]string{}
	var out []string
	for _, h := range heard {
		if _, ok := names[h.Port]; !ok {
			names[h.Port] = string(rune('a' + len(names)))
		}
		s := h.Type + "@" + names[h.Port]
		if h.Dropped {
			s += "*"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}
