package dns

import (
	"context"
	"net"
	"net/netip"
	"testing"

	mdns "github.com/miekg/dns"
)

// An upstream reply that miekg/dns unpacks leniently but packs into bytes that no
// longer parse (an SOA whose rdata ended before its names: FuzzUpstreamReply's find)
// counts as no reply: a forwarded query gets SERVFAIL, an ExternalName's answer stops
// at what the server knows itself; either way the client gets a reply that parses. A
// well-formed reply still passes.
func TestUpstreamReplyThatDoesNotEncode(t *testing.T) {
	bad := true
	up := UpstreamFunc(func(_ context.Context, req *mdns.Msg, _ string) (*mdns.Msg, error) {
		m := new(mdns.Msg)
		m.SetReply(req)
		name := req.Question[0].Name
		m.Answer = []mdns.RR{&mdns.A{Hdr: mdns.RR_Header{Name: name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 30}, A: net.IPv4(192, 0, 2, 1).To4()}}
		if bad {
			// What miekg/dns makes of "\x00\x06<class><ttl>\x00\x00" at a message's end.
			m.Answer = append(m.Answer, &mdns.SOA{Hdr: mdns.RR_Header{Name: ".", Rrtype: mdns.TypeSOA, Class: mdns.ClassINET, Ttl: 30}})
		}
		return m, nil
	})
	s := newTestServer(t, func(c *Config) { c.Upstream = up })
	ctx := withClient(context.Background(), netip.MustParseAddr("10.244.0.9"))
	ask := func(name string) *mdns.Msg {
		t.Helper()
		q := new(mdns.Msg)
		q.SetQuestion(name, mdns.TypeA)
		wire, err := q.Pack()
		if err != nil {
			t.Fatal(err)
		}
		out := s.HandleWire(ctx, wire, "udp")
		resp := new(mdns.Msg)
		if err := resp.Unpack(out); err != nil {
			t.Fatalf("%s: the reply does not parse: %v", name, err)
		}
		return resp
	}
	hasA := func(m *mdns.Msg) bool {
		for _, rr := range m.Answer {
			if a, ok := rr.(*mdns.A); ok && a.A.Equal(net.IPv4(192, 0, 2, 1)) {
				return true
			}
		}
		return false
	}
	if r := ask("example.com."); r.Rcode != mdns.RcodeServerFailure || hasA(r) {
		t.Errorf("forwarded, malformed upstream reply: %s with %v, want SERVFAIL", mdns.RcodeToString[r.Rcode], r.Answer)
	}
	if r := ask("external.testns.svc.cluster.local."); hasA(r) {
		t.Errorf("ExternalName, malformed upstream reply: %v, want no upstream records", r.Answer)
	}
	bad = false
	if r := ask("example.com."); r.Rcode != mdns.RcodeSuccess || !hasA(r) {
		t.Errorf("forwarded, good upstream reply: %s with %v", mdns.RcodeToString[r.Rcode], r.Answer)
	}
	if r := ask("external.testns.svc.cluster.local."); !hasA(r) {
		t.Errorf("ExternalName, good upstream reply: %v, want the upstream's A", r.Answer)
	}
}
