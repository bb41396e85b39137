package dns

import (
	"context"
	"encoding/binary"
	"testing"

	mdns "github.com/miekg/dns"
)

// FuzzServeDNS feeds arbitrary bytes to the server as a UDP or TCP query.
// It must never panic, must stay silent only for responses and runts, must
// answer FORMERR where the header or body is malformed, and every reply must
// parse, carry the query's ID and fit the client's UDP size.
func FuzzServeDNS(f *testing.F) {
	s := newTestServer(f, func(c *Config) {
		c.Pods = PodsInsecure
		up, err := NewZoneUpstream(upstreamZone)
		if err != nil {
			f.Fatal(err)
		}
		c.Upstream = up
	})
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"svc1.testns.svc.cluster.local.", mdns.TypeA},
		{"_http._tcp.hdls1.testns.svc.cluster.local.", mdns.TypeSRV},
		{"external.testns.svc.cluster.local.", mdns.TypeA},
		{"1.0.0.10.in-addr.arpa.", mdns.TypePTR},
		{"10-240-0-1.podns.pod.cluster.local.", mdns.TypeA},
		{"cluster.local.", mdns.TypeNS},
		{"dns-version.cluster.local.", mdns.TypeTXT},
		{"example.com.", mdns.TypeA},
	} {
		m := new(mdns.Msg)
		m.SetQuestion(q.name, q.qtype)
		f.Add(wire(m), false)
		m.SetEdns0(1232, true)
		f.Add(wire(m), true)
	}
	f.Add([]byte{0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0}, false)
	f.Add([]byte{0, 1, 0x28, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 'f', 'o', 'o', 0, 0, 1, 0, 1}, false)
	f.Add([]byte{0xff, 0xff}, false)

	f.Fuzz(func(t *testing.T, b []byte, tcp bool) {
		network := "udp"
		if tcp {
			network = "tcp"
		}
		out := s.HandleWire(context.Background(), b, network)
		if len(b) < 12 {
			if out != nil {
				t.Fatalf("reply to a %d-byte runt", len(b))
			}
			return
		}
		bits := binary.BigEndian.Uint16(b[2:])
		if bits&0x8000 != 0 { // QR: a response
			if out != nil {
				t.Fatal("replied to a response")
			}
			return
		}
		if out == nil {
			t.Fatal("no reply to a query")
		}
		resp := new(mdns.Msg)
		if err := resp.Unpack(out); err != nil {
			t.Fatalf("reply does not parse: %v", err)
		}
		if resp.Id != binary.BigEndian.Uint16(b) || !resp.Response {
			t.Fatalf("reply id %d QR=%v, query id %d", resp.Id, resp.Response, binary.BigEndian.Uint16(b))
		}
		opcode := int(bits>>11) & 0xF
		qd := binary.BigEndian.Uint16(b[4:])
		req := new(mdns.Msg)
		parseErr := req.Unpack(b)
		switch {
		case opcode != mdns.OpcodeQuery && opcode != mdns.OpcodeNotify:
			if resp.Rcode != mdns.RcodeNotImplemented {
				t.Fatalf("opcode %d: rcode %s, want NOTIMP", opcode, mdns.RcodeToString[resp.Rcode])
			}
		case qd != 1 || parseErr != nil:
			if resp.Rcode != mdns.RcodeFormatError {
				t.Fatalf("qdcount %d, parse error %v: rcode %s, want FORMERR", qd, parseErr, mdns.RcodeToString[resp.Rcode])
			}
		}
		if network == "udp" && parseErr == nil {
			limit := mdns.MinMsgSize
			if o := req.IsEdns0(); o != nil && int(o.UDPSize()) > limit {
				limit = int(o.UDPSize())
			}
			if len(out) > limit {
				t.Fatalf("UDP reply of %d bytes, client accepts %d", len(out), limit)
			}
		}
	})
}
