package dns

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// bigHeadless is a headless service "big" in namespace "default" with n
// ready endpoints 10.1.x.y.
func bigHeadless(n int) []runtime.Object {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "default"},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone},
	}
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "big-1", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "big"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for i := 0; i < n; i++ {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)}})
	}
	return []runtime.Object{svc, sl}
}

func TestTruncation(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Now = testClock()
	s, err := New(NewStaticSource(bigHeadless(100)...), cfg)
	if err != nil {
		t.Fatal(err)
	}
	udp, tcp := listen(t, s)
	q := func(edns uint16) *mdns.Msg {
		m := new(mdns.Msg)
		m.SetQuestion("big.default.svc.cluster.local.", mdns.TypeA)
		if edns > 0 {
			m.SetEdns0(edns, false)
		}
		return m
	}
	for _, tc := range []struct {
		name      string
		network   string
		edns      uint16
		wantTC    bool
		wantAll   bool
		wantOPT   uint16 // advertised size in the reply's OPT; 0 = no OPT
		sizeLimit int
	}{
		{"udp no edns", "udp", 0, true, false, 0, 512},
		{"udp edns 1232", "udp", 1232, true, false, 1232, 1232},
		{"udp edns 4096", "udp", 4096, false, true, 4096, 4096},
		{"udp edns below 512 counts as 512", "udp", 100, true, false, 512, 512},
		{"tcp no edns", "tcp", 0, false, true, 0, 65535},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := udp
			if tc.network == "tcp" {
				addr = tcp
			}
			resp := exchange(t, tc.network, addr, q(tc.edns))
			if resp.Truncated != tc.wantTC {
				t.Errorf("TC = %v, want %v", resp.Truncated, tc.wantTC)
			}
			if got := len(resp.Answer); tc.wantAll != (got == 100) || got == 0 {
				t.Errorf("%d answers, want all 100: %v (and never none)", got, tc.wantAll)
			}
			if !resp.Authoritative || resp.Rcode != mdns.RcodeSuccess {
				t.Errorf("AA=%v rcode=%s", resp.Authoritative, mdns.RcodeToString[resp.Rcode])
			}
			opt := resp.IsEdns0()
			switch {
			case tc.wantOPT == 0 && opt != nil:
				t.Errorf("OPT in reply to a query without one: %v", opt)
			case tc.wantOPT != 0 && (opt == nil || opt.UDPSize() != tc.wantOPT):
				t.Errorf("reply OPT %v, want UDP size %d", opt, tc.wantOPT)
			}
			resp.Compress = true
			packed, err := resp.Pack()
			if err != nil {
				t.Fatal(err)
			}
			if len(packed) > tc.sizeLimit {
				t.Errorf("reply is %d bytes, limit %d", len(packed), tc.sizeLimit)
			}
		})
	}
}

func TestEDNSDoBitEchoed(t *testing.T) {
	s := newTestServer(t, nil)
	m := new(mdns.Msg)
	m.SetQuestion("svc1.testns.svc.cluster.local.", mdns.TypeA)
	m.SetEdns0(1232, true)
	resp := direct(s, m, "udp")
	if o := resp.IsEdns0(); o == nil || !o.Do() || o.Version() != 0 {
		t.Fatalf("reply OPT %v: want version 0 with DO echoed", o)
	}
}

// wire packs m, panicking on error (test inputs are valid).
func wire(m *mdns.Msg) []byte {
	b, err := m.Pack()
	if err != nil {
		panic(err)
	}
	return b
}

func TestMalformedQueries(t *testing.T) {
	s := newTestServer(t, nil)
	base := func() *mdns.Msg {
		m := new(mdns.Msg)
		m.SetQuestion("svc1.testns.svc.cluster.local.", mdns.TypeA)
		m.Id = 4242
		return m
	}
	two := base()
	two.Question = append(two.Question, mdns.Question{Name: "svc6.testns.svc.cluster.local.", Qtype: mdns.TypeAAAA, Qclass: mdns.ClassINET})
	none := base()
	none.Question = nil
	update := base()
	update.Opcode = mdns.OpcodeUpdate
	status := base()
	status.Opcode = mdns.OpcodeStatus
	notify := base()
	notify.Opcode = mdns.OpcodeNotify
	response := base()
	response.Response = true
	withAnswers := base()
	withAnswers.Answer = []mdns.RR{
		&mdns.A{Hdr: mdns.RR_Header{Name: "a.", Rrtype: mdns.TypeA, Class: mdns.ClassINET}, A: []byte{1, 2, 3, 4}},
		&mdns.A{Hdr: mdns.RR_Header{Name: "b.", Rrtype: mdns.TypeA, Class: mdns.ClassINET}, A: []byte{1, 2, 3, 5}},
	}
	badVers := base()
	badVers.SetEdns0(1232, false)
	badVers.IsEdns0().SetVersion(1)
	twoOPT := base()
	twoOPT.SetEdns0(1232, false)
	twoOPT.Extra = append(twoOPT.Extra, &mdns.OPT{Hdr: mdns.RR_Header{Name: ".", Rrtype: mdns.TypeOPT, Class: 512}})
	chaos := base()
	chaos.Question[0].Qclass = mdns.ClassCHAOS
	axfr := base()
	axfr.Question[0].Qtype = mdns.TypeAXFR
	axfr.Question[0].Name = "cluster.local."

	truncatedBody := wire(base())
	truncatedBody = truncatedBody[:len(truncatedBody)-3]
	badLabel := wire(base())
	badLabel[12] = 0xC0 // a compression pointer ...
	badLabel[13] = 0xFF // ... past the end of the message

	for _, tc := range []struct {
		name    string
		in      []byte
		noReply bool
		rcode   int
	}{
		{"two questions", wire(two), false, mdns.RcodeFormatError},
		{"no question", wire(none), false, mdns.RcodeFormatError},
		{"opcode UPDATE", wire(update), false, mdns.RcodeNotImplemented},
		{"opcode STATUS", wire(status), false, mdns.RcodeNotImplemented},
		{"opcode NOTIFY", wire(notify), false, mdns.RcodeNotImplemented},
		{"a response", wire(response), true, 0},
		{"two answer records", wire(withAnswers), false, mdns.RcodeFormatError},
		{"EDNS version 1", wire(badVers), false, mdns.RcodeBadVers},
		{"two OPT records", wire(twoOPT), false, mdns.RcodeFormatError},
		{"class CHAOS", wire(chaos), false, mdns.RcodeRefused},
		{"AXFR", wire(axfr), false, mdns.RcodeRefused},
		{"body cut short", truncatedBody, false, mdns.RcodeFormatError},
		{"bad compression pointer", badLabel, false, mdns.RcodeFormatError},
		{"shorter than a header", []byte{1, 2, 3}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := s.HandleWire(context.Background(), tc.in, "udp")
			if tc.noReply {
				if out != nil {
					t.Fatalf("got a reply, want none")
				}
				return
			}
			resp := new(mdns.Msg)
			if err := resp.Unpack(out); err != nil {
				t.Fatalf("reply does not parse: %v", err)
			}
			if resp.Rcode != tc.rcode || !resp.Response {
				t.Errorf("rcode %s QR=%v, want %s", mdns.RcodeToString[resp.Rcode], resp.Response, mdns.RcodeToString[tc.rcode])
			}
			if resp.Id != 4242 {
				t.Errorf("id %d, want 4242", resp.Id)
			}
		})
	}
}

// TestMalformedOverSocket checks the same rules under a real miekg/dns server.
func TestMalformedOverSocket(t *testing.T) {
	s := newTestServer(t, nil)
	udp, _ := listen(t, s)
	m := new(mdns.Msg)
	m.SetQuestion("svc1.testns.svc.cluster.local.", mdns.TypeA)
	m.Question = append(m.Question, m.Question[0])
	if resp := exchange(t, "udp", udp, m); resp.Rcode != mdns.RcodeFormatError {
		t.Errorf("two questions: rcode %s, want FORMERR", mdns.RcodeToString[resp.Rcode])
	}
	m = new(mdns.Msg)
	m.SetQuestion("svc1.testns.svc.cluster.local.", mdns.TypeA)
	m.Opcode = mdns.OpcodeUpdate
	if resp := exchange(t, "udp", udp, m); resp.Rcode != mdns.RcodeNotImplemented {
		t.Errorf("UPDATE: rcode %s, want NOTIMP", mdns.RcodeToString[resp.Rcode])
	}
}

func TestOutOfZoneWithoutUpstream(t *testing.T) {
	s := newTestServer(t, nil)
	udp, _ := listen(t, s)
	m := new(mdns.Msg)
	m.SetQuestion("example.com.", mdns.TypeA)
	resp := exchange(t, "udp", udp, m)
	if resp.Rcode != mdns.RcodeRefused || resp.Authoritative || len(resp.Answer)+len(resp.Ns) != 0 {
		t.Errorf("got %s AA=%v, want a bare REFUSED", mdns.RcodeToString[resp.Rcode], resp.Authoritative)
	}
}

func TestDig(t *testing.T) {
	dig, err := exec.LookPath("dig")
	if err != nil {
		t.Skip("dig not installed (Debian package dnsutils)")
	}
	s := newTestServer(t, nil)
	udp, tcp := listen(t, s)
	run := func(addr string, args ...string) string {
		host, port, _ := strings.Cut(addr, ":")
		cmdArgs := append([]string{"@" + host, "-p", port, "+time=5", "+tries=1"}, args...)
		out, err := exec.Command(dig, cmdArgs...).CombinedOutput()
		if err != nil {
			t.Fatalf("dig %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run(udp, "+short", "svc1.testns.svc.cluster.local"); got != "10.0.0.1" {
		t.Errorf("dig +short A: %q, want 10.0.0.1", got)
	}
	if got := run(tcp, "+tcp", "+short", "SRV", "_http._tcp.web.testns.svc.cluster.local"); !sameLines(got,
		"0 50 8080 web-0.web.testns.svc.cluster.local.\n0 50 8080 web-1.web.testns.svc.cluster.local.") {
		t.Errorf("dig +tcp SRV: %q", got)
	}
	if got := run(udp, "+short", "-x", "10.0.0.1"); got != "svc1.testns.svc.cluster.local." {
		t.Errorf("dig -x: %q", got)
	}
	full := run(udp, "svc0.testns.svc.cluster.local")
	for _, want := range []string{"status: NXDOMAIN", "flags: qr aa rd", "cluster.local.\t\t5\tIN\tSOA\tns.dns.cluster.local. hostmaster.cluster.local."} {
		if !strings.Contains(full, want) {
			t.Errorf("dig NXDOMAIN output lacks %q:\n%s", want, full)
		}
	}
	// dig retries over TCP by itself after a truncated UDP reply.
	s2, err := New(NewStaticSource(bigHeadless(100)...), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	udp2, _ := listen(t, s2)
	out := run(udp2, "+noedns", "+ignore", "big.default.svc.cluster.local")
	if !strings.Contains(out, " tc ") && !strings.Contains(out, "flags: qr tc") {
		t.Errorf("dig +ignore on a 100-address answer: no TC flag:\n%s", out)
	}
}

func sameLines(got, want string) bool {
	g := strings.Split(got, "\n")
	w := strings.Split(want, "\n")
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}
