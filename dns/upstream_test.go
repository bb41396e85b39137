package dns

import (
	"context"
	"errors"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

const upstreamZone = `
ext.interwebs.test.   300 IN A     1.2.3.4
ext.interwebs.test.   300 IN AAAA  2001:db8::4
example.com.          120 IN A     93.184.215.14
www.example.com.      120 IN CNAME example.com.
8.8.8.8.in-addr.arpa. 600 IN PTR   dns.google.
`

func newUpstream(t *testing.T) *ZoneUpstream {
	t.Helper()
	z, err := NewZoneUpstream(upstreamZone)
	if err != nil {
		t.Fatal(err)
	}
	return z
}

func TestExternalNameChasedUpstream(t *testing.T) {
	up := newUpstream(t)
	s := newTestServer(t, func(c *Config) { c.Upstream = up })
	udp, tcp := listen(t, s)
	for _, c := range []dnsCase{
		// The upstream's records keep their TTL; the CNAME comes first.
		{qname: "external.testns.svc.cluster.local.", qtype: mdns.TypeA, cnameOrder: true,
			answer: []string{
				"external.testns.svc.cluster.local. 5 IN CNAME ext.interwebs.test.",
				"ext.interwebs.test. 300 IN A 1.2.3.4",
			}},
		{qname: "external.testns.svc.cluster.local.", qtype: mdns.TypeAAAA, cnameOrder: true,
			answer: []string{
				"external.testns.svc.cluster.local. 5 IN CNAME ext.interwebs.test.",
				"ext.interwebs.test. 300 IN AAAA 2001:db8::4",
			}},
		// Cluster-domain misses stay authoritative NXDOMAIN: only the default
		// reverse zones fall through to the upstream.
		{qname: "svc1.testns.svc.cluster.local.", qtype: mdns.TypeA,
			answer: []string{"svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"}},
		{qname: "svc0.testns.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	} {
		check(t, c, exchange(t, "udp", udp, c.msg()))
		check(t, c, exchange(t, "tcp", tcp, c.msg()))
	}
	asked := up.Queries()
	if len(asked) != 4 || asked[0].Name != "ext.interwebs.test." {
		t.Errorf("upstream asked %v, want ext.interwebs.test. A/AAAA over UDP and TCP", asked)
	}
}

func TestUpstreamTruncationPropagates(t *testing.T) {
	up := newUpstream(t)
	up.Truncated = true
	s := newTestServer(t, func(c *Config) { c.Upstream = up })
	check(t, dnsCase{qname: "external.testns.svc.cluster.local.", qtype: mdns.TypeA, tc: true,
		answer: []string{
			"external.testns.svc.cluster.local. 5 IN CNAME ext.interwebs.test.",
			"ext.interwebs.test. 300 IN A 1.2.3.4",
		}}, direct(s, dnsCase{qname: "external.testns.svc.cluster.local.", qtype: mdns.TypeA}.msg(), "udp"))
}

func TestForwarding(t *testing.T) {
	up := newUpstream(t)
	s := newTestServer(t, func(c *Config) { c.Upstream = up })
	udp, _ := listen(t, s)
	ask := func(name string, qtype uint16) *mdns.Msg {
		m := new(mdns.Msg)
		m.SetQuestion(name, qtype)
		return exchange(t, "udp", udp, m)
	}
	resp := ask("www.example.com.", mdns.TypeA)
	if got, want := rrStrings(resp.Answer), canon(t, []string{
		"www.example.com. 120 IN CNAME example.com.",
		"example.com. 120 IN A 93.184.215.14",
	}); !sameLines(join(got), join(want)) || resp.Rcode != mdns.RcodeSuccess {
		t.Errorf("forwarded answer %v rcode %s, want %v", got, mdns.RcodeToString[resp.Rcode], want)
	}
	if resp.Authoritative || !resp.RecursionAvailable {
		t.Errorf("forwarded reply AA=%v RA=%v, want the upstream's flags (AA=0, RA=1)", resp.Authoritative, resp.RecursionAvailable)
	}
	if resp := ask("nothing.example.com.", mdns.TypeA); resp.Rcode != mdns.RcodeNameError {
		t.Errorf("forwarded miss: %s, want NXDOMAIN", mdns.RcodeToString[resp.Rcode])
	}
	// A reverse miss in the default in-addr.arpa falls through to the upstream.
	resp = ask("8.8.8.8.in-addr.arpa.", mdns.TypePTR)
	if got := rrStrings(resp.Answer); len(got) != 1 || got[0] != "8.8.8.8.in-addr.arpa.\t600\tIN\tPTR\tdns.google." {
		t.Errorf("reverse fallthrough: %v", got)
	}
	// A zone answer says recursion is available once an upstream exists.
	if resp := ask("svc1.testns.svc.cluster.local.", mdns.TypeA); !resp.RecursionAvailable || !resp.Authoritative {
		t.Errorf("zone answer AA=%v RA=%v, want both", resp.Authoritative, resp.RecursionAvailable)
	}
}

func TestUpstreamFailure(t *testing.T) {
	failing := UpstreamFunc(func(context.Context, *mdns.Msg, string) (*mdns.Msg, error) {
		return nil, errors.New("unreachable")
	})
	s := newTestServer(t, func(c *Config) { c.Upstream = failing })
	m := new(mdns.Msg)
	m.SetQuestion("example.com.", mdns.TypeA)
	if resp := direct(s, m, "udp"); resp.Rcode != mdns.RcodeServerFailure {
		t.Errorf("failing upstream: %s, want SERVFAIL", mdns.RcodeToString[resp.Rcode])
	}
	// An ExternalName whose upstream lookup fails loses its CNAME (CoreDNS).
	check(t, dnsCase{qname: "external.testns.svc.cluster.local.", qtype: mdns.TypeA, ns: []string{soa}},
		direct(s, dnsCase{qname: "external.testns.svc.cluster.local.", qtype: mdns.TypeA}.msg(), "udp"))
}

// TestAddrUpstream forwards through a real socket to a second server.
func TestAddrUpstream(t *testing.T) {
	upUDP, upTCP := listen(t, mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) {
		resp, _ := newUpstream(t).Exchange(context.Background(), r, "")
		_ = w.WriteMsg(resp)
	}))
	if upUDP == upTCP {
		t.Skip("needs distinct ports") // never: both are ephemeral
	}
	s := newTestServer(t, func(c *Config) { c.Upstream = NewUpstream(upUDP) })
	m := new(mdns.Msg)
	m.SetQuestion("example.com.", mdns.TypeA)
	resp := direct(s, m, "udp")
	if got := rrStrings(resp.Answer); len(got) != 1 || got[0] != "example.com.\t120\tIN\tA\t93.184.215.14" {
		t.Errorf("forwarded over UDP: %v (%s)", got, mdns.RcodeToString[resp.Rcode])
	}
}

type unsyncedSource struct{ *StaticSource }

func (unsyncedSource) HasSynced() bool { return false }

func TestNotSynced(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Now = testClock()
	s, err := New(unsyncedSource{loadFixture(t, fixturePath)}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []dnsCase{
		{qname: "svc0.testns.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeServerFailure, ns: []string{soa}},
		{qname: "svc1.testns.svc.cluster.local.", qtype: mdns.TypeA,
			answer: []string{"svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"}},
		{qname: "svc1.testns.svc.cluster.local.", qtype: mdns.TypeAAAA, ns: []string{soa}},
	} {
		check(t, c, direct(s, c.msg(), "udp"))
	}
}

// TestInvalidate: a change to the source shows in the next answer, with a
// higher serial.
func TestInvalidate(t *testing.T) {
	src := loadFixture(t, fixturePath)
	now := fixedNow
	cfg := DefaultConfig()
	cfg.Now = func() time.Time { return now }
	s, err := New(src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	q := dnsCase{qname: "svc1.testns.svc.cluster.local.", qtype: mdns.TypeA}
	if resp := direct(s, q.msg(), "udp"); len(resp.Answer) != 1 {
		t.Fatalf("before: %v", resp.Answer)
	}
	serial := s.Serial()
	// Same clock second: the serial still goes up.
	src.Set(bigHeadless(3)...)
	if got := s.Serial(); got != serial+1 {
		t.Errorf("serial after change %d, want %d", got, serial+1)
	}
	check(t, dnsCase{qname: q.qname, qtype: mdns.TypeA, rcode: mdns.RcodeNameError,
		ns: []string{"cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1700000001 7200 1800 86400 5"}},
		direct(s, q.msg(), "udp"))
	now = now.Add(time.Hour)
	s.Invalidate()
	if got := s.Serial(); got != uint32(now.Unix()) {
		t.Errorf("serial after an hour %d, want %d", got, now.Unix())
	}
	if resp := direct(s, dnsCase{qname: "big.default.svc.cluster.local.", qtype: mdns.TypeA}.msg(), "udp"); len(resp.Answer) != 3 {
		t.Errorf("new data: %v", resp.Answer)
	}
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += "\n"
		}
		out += x
	}
	return out
}
