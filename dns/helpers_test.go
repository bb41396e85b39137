package dns

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/clusterlab/clusterlab/service"
)

// fixedNow is the test clock: the SOA serial of a fresh server is its Unix time.
var fixedNow = time.Unix(1700000000, 0)

const fixedSerial = 1700000000

func testClock() func() time.Time { return func() time.Time { return fixedNow } }

const fixturePath = "../testdata/dns/cluster.yaml"

// loadFixture returns a StaticSource with the objects of a manifest file.
func loadFixture(t testing.TB, path string) *StaticSource {
	t.Helper()
	ms, err := service.LoadPaths(path)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	return NewStaticSource(service.Objects(ms)...)
}

// newTestServer builds a server on the fixture with the test clock; mutate
// adjusts the config first.
func newTestServer(t testing.TB, mutate func(*Config)) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Now = testClock()
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(loadFixture(t, fixturePath), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// listen runs h on 127.0.0.1 over UDP and TCP on ephemeral ports and returns
// the two addresses; the servers stop when the test ends.
func listen(t testing.TB, h mdns.Handler) (udpAddr, tcpAddr string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pc.Close()
		t.Fatal(err)
	}
	udp := &mdns.Server{PacketConn: pc, Handler: h}
	tcp := &mdns.Server{Listener: ln, Handler: h}
	for _, srv := range []*mdns.Server{udp, tcp} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func(srv *mdns.Server) { _ = srv.ActivateAndServe() }(srv)
		<-started
	}
	t.Cleanup(func() {
		_ = udp.Shutdown()
		_ = tcp.Shutdown()
	})
	return pc.LocalAddr().String(), ln.Addr().String()
}

// exchange sends m over network to addr with a real client.
func exchange(t testing.TB, network, addr string, m *mdns.Msg) *mdns.Msg {
	t.Helper()
	c := &mdns.Client{Net: network, Timeout: 5 * time.Second, UDPSize: 65535}
	resp, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s exchange %s %s: %v", network, m.Question[0].Name, mdns.TypeToString[m.Question[0].Qtype], err)
	}
	return resp
}

// dnsCase is one query with its expected reply, records written as zone-file
// lines and compared order-insensitively.
type dnsCase struct {
	qname  string
	qtype  uint16
	rcode  int
	answer []string
	ns     []string
	extra  []string
	tc     bool
	// cnameFirst lists CNAME owners that must precede their targets.
	cnameOrder bool
}

func (c dnsCase) msg() *mdns.Msg {
	m := new(mdns.Msg)
	m.SetQuestion(c.qname, c.qtype)
	return m
}

func (c dnsCase) String() string {
	return fmt.Sprintf("%s/%s", c.qname, mdns.TypeToString[c.qtype])
}

// canon parses zone-file lines and prints them canonically.
func canon(t testing.TB, lines []string) []string {
	t.Helper()
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		rr, err := mdns.NewRR(l)
		if err != nil {
			t.Fatalf("bad expected record %q: %v", l, err)
		}
		out = append(out, rr.String())
	}
	sort.Strings(out)
	return out
}

func rrStrings(rrs []mdns.RR) []string {
	var out []string
	for _, rr := range rrs {
		if rr.Header().Rrtype == mdns.TypeOPT {
			continue
		}
		out = append(out, rr.String())
	}
	sort.Strings(out)
	return out
}

// check compares resp with c; every reply must also be authoritative.
func check(t testing.TB, c dnsCase, resp *mdns.Msg) {
	t.Helper()
	var errs []string
	if resp.Rcode != c.rcode {
		errs = append(errs, fmt.Sprintf("rcode %s, want %s", mdns.RcodeToString[resp.Rcode], mdns.RcodeToString[c.rcode]))
	}
	if !resp.Authoritative {
		errs = append(errs, "AA not set")
	}
	if resp.Truncated != c.tc {
		errs = append(errs, fmt.Sprintf("TC %v, want %v", resp.Truncated, c.tc))
	}
	if len(resp.Question) != 1 || resp.Question[0].Name != c.qname {
		errs = append(errs, fmt.Sprintf("question %v, want %s", resp.Question, c.qname))
	}
	for _, sec := range []struct {
		name      string
		got, want []string
	}{
		{"answer", rrStrings(resp.Answer), canon(t, c.answer)},
		{"authority", rrStrings(resp.Ns), canon(t, c.ns)},
		{"additional", rrStrings(resp.Extra), canon(t, c.extra)},
	} {
		if strings.Join(sec.got, "\n") != strings.Join(sec.want, "\n") {
			errs = append(errs, fmt.Sprintf("%s section:\n got:\n  %s\n want:\n  %s", sec.name,
				strings.Join(sec.got, "\n  "), strings.Join(sec.want, "\n  ")))
		}
	}
	if c.cnameOrder {
		if err := cnameBeforeTarget(resp.Answer); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		t.Errorf("%s:\n%s", c, strings.Join(errs, "\n"))
	}
}

// cnameBeforeTarget checks that every CNAME comes before the records owned by
// its target.
func cnameBeforeTarget(rrs []mdns.RR) error {
	for i, rr := range rrs {
		c, ok := rr.(*mdns.CNAME)
		if !ok {
			continue
		}
		for j := 0; j < i; j++ {
			if strings.EqualFold(rrs[j].Header().Name, c.Target) {
				return fmt.Errorf("record %q precedes the CNAME %q pointing at it", rrs[j], c)
			}
		}
	}
	return nil
}

// soaLine is the negative-answer SOA for zone with the fixture's serial.
func soaLine(zone string, ttl uint32) string {
	return fmt.Sprintf("%s %d IN SOA ns.dns.%s hostmaster.%s %d 7200 1800 86400 %d", zone, min(ttl, 300), zone, zone, fixedSerial, ttl)
}

// direct asks s without a network, through Handle.
func direct(s *Server, m *mdns.Msg, network string) *mdns.Msg {
	return s.Handle(context.Background(), m, network)
}
