package dns

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/clusterlab/clusterlab/service"
)

// scriptedConn is the socket to an upstream whose replies are given: it records the
// query written, then reads the replies in turn (each a UDP datagram, cut to the
// reader's buffer as the kernel cuts it, or TCP messages each behind its length), and
// then times out. fixID rewrites a reply's ID to the query's (a reply to this query;
// otherwise the ID is the reply's own: a stray or forged one).
type scriptedConn struct {
	tcp     bool
	replies [][]byte
	fixID   []bool

	mu     sync.Mutex
	query  []byte
	stream *bytes.Reader // TCP: the framed replies, once the query is written
}

func (c *scriptedConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tcp && len(b) >= 2 {
		c.query = append([]byte(nil), b[2:]...)
	} else {
		c.query = append([]byte(nil), b...)
	}
	return len(b), nil
}

func (c *scriptedConn) reply(i int) []byte {
	r := append([]byte(nil), c.replies[i]...)
	if c.fixID[i] && len(r) >= 2 && len(c.query) >= 2 {
		copy(r, c.query[:2])
	}
	return r
}

func (c *scriptedConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.query == nil {
		return 0, os.ErrDeadlineExceeded
	}
	if c.tcp {
		if c.stream == nil {
			var all []byte
			for i := range c.replies {
				r := c.reply(i)
				if len(r) > 0xffff {
					r = r[:0xffff]
				}
				all = binary.BigEndian.AppendUint16(all, uint16(len(r)))
				all = append(all, r...)
			}
			c.stream = bytes.NewReader(all)
		}
		n, err := c.stream.Read(b)
		if err != nil {
			return 0, os.ErrDeadlineExceeded
		}
		return n, nil
	}
	if len(c.replies) == 0 {
		return 0, os.ErrDeadlineExceeded
	}
	r := c.reply(0)
	c.replies, c.fixID = c.replies[1:], c.fixID[1:]
	return copy(b, r), nil
}

func (c *scriptedConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, err := c.Read(b)
	return n, c.RemoteAddr(), err
}
func (c *scriptedConn) WriteTo(b []byte, _ net.Addr) (int, error) { return c.Write(b) }
func (c *scriptedConn) Close() error                              { return nil }
func (c *scriptedConn) LocalAddr() net.Addr {
	if c.tcp {
		return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	}
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
}
func (c *scriptedConn) RemoteAddr() net.Addr {
	if c.tcp {
		return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 53), Port: 53}
	}
	return &net.UDPAddr{IP: net.IPv4(192, 0, 2, 53), Port: 53}
}
func (c *scriptedConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptedConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptedConn) SetWriteDeadline(time.Time) error { return nil }

// tcpScriptedConn hides ReadFrom: miekg/dns takes a net.PacketConn for UDP.
type tcpScriptedConn struct{ c *scriptedConn }

func (t tcpScriptedConn) Read(b []byte) (int, error)         { return t.c.Read(b) }
func (t tcpScriptedConn) Write(b []byte) (int, error)        { return t.c.Write(b) }
func (t tcpScriptedConn) Close() error                       { return nil }
func (t tcpScriptedConn) LocalAddr() net.Addr                { return t.c.LocalAddr() }
func (t tcpScriptedConn) RemoteAddr() net.Addr               { return t.c.RemoteAddr() }
func (t tcpScriptedConn) SetDeadline(d time.Time) error      { return nil }
func (t tcpScriptedConn) SetReadDeadline(d time.Time) error  { return nil }
func (t tcpScriptedConn) SetWriteDeadline(d time.Time) error { return nil }

// FuzzUpstreamReply sends a query for an outside name through the forwarding path
// (Server.HandleWire → forward → the in-flight caps → AddrUpstream over a socket) to an
// upstream whose replies are the fuzzer's: malformed, with mismatched IDs, truncated,
// oversized, over UDP or TCP. The client always gets a well-formed reply to its own
// query (its ID, QR set, its question, within its UDP size); SERVFAIL unless a reply
// carried the query's ID; and the caps' slots are all given back.
func FuzzUpstreamReply(f *testing.F) {
	good := func(id uint16, rcode int, n int, tc bool) []byte {
		m := new(mdns.Msg)
		m.SetQuestion("example.com.", mdns.TypeA)
		m.Id, m.Response, m.Rcode, m.Truncated = id, true, rcode, tc
		for i := 0; i < n; i++ {
			rr, _ := mdns.NewRR("example.com. 30 IN A 192.0.2." + string(rune('0'+i%10)))
			m.Answer = append(m.Answer, rr)
		}
		b, _ := m.Pack()
		return b
	}
	f.Add(good(1, 0, 1, false), []byte(nil), true, false, false, uint16(mdns.TypeA))
	f.Add(good(1, 0, 1, false), good(2, 0, 1, false), false, true, false, uint16(mdns.TypeA)) // a stray first
	f.Add(good(1, 3, 0, false), []byte(nil), true, false, true, uint16(mdns.TypeAAAA))
	f.Add(good(1, 0, 300, false), []byte(nil), true, false, false, uint16(mdns.TypeA)) // oversized for UDP
	f.Add(good(1, 0, 3, true), []byte(nil), true, false, false, uint16(mdns.TypeA))    // truncated
	f.Add([]byte{0, 1, 0x81}, good(1, 0, 1, false), true, true, false, uint16(mdns.TypeA))
	f.Add([]byte{}, []byte{}, false, false, true, uint16(mdns.TypeTXT))
	f.Fuzz(func(t *testing.T, r1, r2 []byte, fix1, fix2, tcp bool, qtype uint16) {
		watchdog := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("forwarding hangs on %q %q %v %v %v %d", r1, r2, fix1, fix2, tcp, qtype)) })
		defer watchdog.Stop()
		conn := &scriptedConn{tcp: tcp, replies: [][]byte{r1, r2}, fixID: []bool{fix1, fix2}}
		up := NewUpstream("192.0.2.53:53")
		up.Dial = func(context.Context, string, string) (net.Conn, error) {
			if tcp {
				return tcpScriptedConn{conn}, nil
			}
			return conn, nil
		}
		lim := newLimitedUpstream(up, 4)
		lim.perClient = 2
		srv, err := New(NewStaticSource(), Config{Zones: []string{"cluster.local"}, TTL: 5, Upstream: lim, UpstreamTimeout: time.Minute, Now: testClock()})
		if err != nil {
			t.Fatal(err)
		}
		q := new(mdns.Msg)
		q.SetQuestion("example.com.", qtype)
		q.Id = 4242
		wire, err := q.Pack()
		if err != nil {
			t.Skip()
		}
		network := "udp"
		if tcp {
			network = "tcp"
		}
		ctx := withClient(context.Background(), netip.MustParseAddr("10.244.0.9"))
		out := srv.HandleWire(ctx, wire, network)
		if out == nil {
			t.Fatal("no reply")
		}
		if !tcp && len(out) > mdns.MinMsgSize {
			t.Fatalf("a %d-byte UDP reply to a client without EDNS0", len(out))
		}
		resp := new(mdns.Msg)
		if err := resp.Unpack(out); err != nil {
			t.Fatalf("the reply does not parse: %v", err)
		}
		if resp.Id != q.Id || !resp.Response {
			t.Fatalf("reply id %d response %v, want %d and a response", resp.Id, resp.Response, q.Id)
		}
		if len(resp.Question) > 0 && (len(resp.Question) != 1 || resp.Question[0] != q.Question[0]) {
			t.Fatalf("reply question %v, want %v", resp.Question, q.Question)
		}
		if !fix1 && !fix2 && resp.Rcode != mdns.RcodeServerFailure {
			t.Fatalf("no reply had the query's ID, yet rcode %s", mdns.RcodeToString[resp.Rcode])
		}
		if len(lim.slots) != 0 || len(lim.byClient) != 0 {
			t.Fatalf("slots left taken: %d, per client %v", len(lim.slots), lim.byClient)
		}
	})
}

// TestAddrUpstreamRandomizesID: the query sent upstream carries an ID of its own, not
// the client's, and the reply goes back with the client's.
func TestAddrUpstreamRandomizesID(t *testing.T) {
	var mu sync.Mutex
	var seen []uint16
	addr, _ := listen(t, mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) {
		mu.Lock()
		seen = append(seen, r.Id)
		mu.Unlock()
		m := new(mdns.Msg)
		m.SetReply(r)
		_ = w.WriteMsg(m)
	}))
	u := NewUpstream(addr)
	for i := 0; i < 3; i++ {
		q := new(mdns.Msg)
		q.SetQuestion("example.com.", mdns.TypeA)
		q.Id = 4242
		resp, err := u.Exchange(context.Background(), q, "udp")
		if err != nil || resp.Id != 4242 {
			t.Fatalf("exchange: %v, %v: want the reply with the client's ID", resp, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	same := 0
	for _, id := range seen {
		if id == 4242 {
			same++
		}
	}
	if len(seen) != 3 || same == 3 { // all three equal by chance: 1 in 2^48
		t.Errorf("upstream saw IDs %v, want fresh ones, not the client's 4242", seen)
	}
}

// FuzzServeReload reloads dns serve's manifest set with one file's contents fuzzed (the
// other stays: my-service at 10.96.7.7): a reload that fails changes nothing (the same
// objects, the same answers, the same serial, the same recursion ACL) and says why
// with the input's bytes escaped; one that succeeds serves exactly what it loaded,
// my-service still answered, and nothing half-applied.
func FuzzServeReload(f *testing.F) {
	second := "apiVersion: v1\nkind: Service\nmetadata: {name: second}\nspec: {clusterIP: 10.96.9.9, ports: [{port: 53, protocol: UDP}]}\n"
	f.Add([]byte(second))
	f.Add([]byte(second + "---\napiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec: {podCIDRs: [10.1.0.0/24]}\n"))
	f.Add([]byte(strings.Replace(second, "10.96.9.9", "10.96.7.7", 1)))           // my-service's address
	f.Add([]byte(strings.Replace(second, "name: second", "name: my-service", 1))) // defined twice
	f.Add([]byte("{apiVersion: v1, kind: Service, metadata: {name: x}, spec: {ports: [{port: 70000}]}}\n"))
	f.Add([]byte(`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p\u0000"}}`))
	f.Add([]byte("apiVersion: v1\nkind: List\nitems:\n- {apiVersion: apps/v1, kind: Deployment, metadata: {name: d}}\n- {apiVersion: v1, kind: Namespace, metadata: {name: ns1}}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte{0xff, 0xfe, 0})
	dir := f.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	if err := os.WriteFile(a, []byte(serveManifest), 0o644); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		watchdog := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("reload hangs on %q", data)) })
		defer watchdog.Stop()
		if err := os.WriteFile(b, []byte(second), 0o644); err != nil {
			t.Fatal(err)
		}
		objs, _, err := loadObjects([]string{a, b})
		if err != nil {
			t.Fatal(err)
		}
		src := NewStaticSource(objs...)
		srv, err := New(src, Config{Zones: []string{"cluster.local"}, TTL: 5, Now: testClock()})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		acl := NewRecursionACL(defaultRecursionACL(objs)...)
		ask := func(name string, qtype uint16) string {
			m := new(mdns.Msg)
			m.SetQuestion(name, qtype)
			m.Id = 1
			r := srv.Handle(context.Background(), m, "udp")
			r.Id = 0
			return r.String()
		}
		queries := []struct {
			name  string
			qtype uint16
		}{{"my-service.default.svc.cluster.local.", mdns.TypeA}, {"second.default.svc.cluster.local.", mdns.TypeA}, {"_dns._udp.second.default.svc.cluster.local.", mdns.TypeSRV}, {"7.7.96.10.in-addr.arpa.", mdns.TypePTR}}
		var before []string
		for _, q := range queries {
			before = append(before, ask(q.name, q.qtype))
		}
		serial, aclBefore := srv.Serial(), acl.String()

		if err := os.WriteFile(b, data, 0o644); err != nil {
			t.Fatal(err)
		}
		got, _, err := reload([]string{a, b}, src, acl)
		if err != nil {
			if !noRawControlBytes(err.Error()) {
				t.Fatalf("reload error with a raw control byte: %q", err)
			}
			for i, q := range queries {
				if now := ask(q.name, q.qtype); now != before[i] {
					t.Fatalf("a failed reload (%v) changed the answer for %s:\n%s\nwas\n%s", err, q.name, now, before[i])
				}
			}
			if srv.Serial() != serial || acl.String() != aclBefore || len(src.ListServices()) != 2 {
				t.Fatalf("a failed reload changed the serial, ACL or objects")
			}
			return
		}
		if l, s := strings.Join(objNames(got), ","), strings.Join(srcObjects(src), ","); l != s {
			t.Fatalf("served %s, loaded %s", s, l)
		}
		if now := ask(queries[0].name, queries[0].qtype); !strings.Contains(now, "10.96.7.7") {
			t.Fatalf("my-service after a reload:\n%s", now)
		}
	})
}

// srcObjects lists what a StaticSource serves, in its own order by kind.
func srcObjects(s *StaticSource) []string {
	var out []string
	for _, o := range s.ListServices() {
		out = append(out, "Service "+o.Namespace+"/"+o.Name)
	}
	for _, o := range s.ListPods() {
		out = append(out, "Pod "+o.Namespace+"/"+o.Name)
	}
	sort.Strings(out)
	return out
}

// objNames lists the Services and Pods of objs as srcObjects does.
func objNames(objs []runtime.Object) []string {
	var out []string
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Service:
			out = append(out, "Service "+service.NamespaceOrDefault(o.Namespace)+"/"+o.Name)
		case *corev1.Pod:
			out = append(out, "Pod "+service.NamespaceOrDefault(o.Namespace)+"/"+o.Name)
		}
	}
	sort.Strings(out)
	return out
}

// noRawControlBytes: what came from the input is escaped in messages.
func noRawControlBytes(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
			return false
		}
	}
	return true
}
