package dns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

// kubeDNS is where pods' resolv.conf points; the tests' Dial maps it to the
// server on loopback, as the simulated network maps the service VIP.
const kubeDNS = "10.96.0.10"

// stubFor returns a stub for a ClusterFirst pod in namespace ns whose queries
// reach s (over real UDP/TCP on 127.0.0.1).
func stubFor(t *testing.T, s *Server, ns string, extraOptions ...string) *Stub {
	t.Helper()
	udp, tcp := listen(t, s)
	conf := ResolvConf{
		Nameservers: []string{kubeDNS},
		Searches:    []string{ns + ".svc.cluster.local", "svc.cluster.local", "cluster.local"},
		Options:     append([]string{"ndots:5"}, extraOptions...),
	}
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		if address != kubeDNS+":53" {
			return nil, errors.New("unexpected nameserver " + address)
		}
		target := udp
		if network == "tcp" {
			target = tcp
		}
		var d net.Dialer
		return d.DialContext(ctx, network, target)
	}
	st := NewStub(conf, dial)
	st.Timeout = 5 * time.Second
	return st
}

func logLines(log []QueryLog) string {
	var b strings.Builder
	for _, q := range log {
		b.WriteString(q.String() + "\n")
	}
	return b.String()
}

// trimLog turns an indented expectation into log lines.
func trimLog(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		b.WriteString(strings.TrimSpace(l) + "\n")
	}
	return b.String()
}

func TestStubSearchWalk(t *testing.T) {
	up := newUpstream(t)
	s := newTestServer(t, func(c *Config) { c.Upstream = up })
	for _, tc := range []struct {
		name   string
		ns     string
		lookup string
		fam    Family
		addrs  []string
		errK   ErrorKind
		log    string
	}{
		{name: "short name: first try", ns: "testns", lookup: "svc1", addrs: []string{"10.0.0.1"},
			log: `A svc1.testns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers
			      AAAA svc1.testns.svc.cluster.local. @10.96.0.10:53/udp NODATA`},
		{name: "dns-q01: svc.ns from another namespace: second try", ns: "default", lookup: "svc1.testns", addrs: []string{"10.0.0.1"},
			log: `A svc1.testns.default.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      AAAA svc1.testns.default.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      A svc1.testns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers
			      AAAA svc1.testns.svc.cluster.local. @10.96.0.10:53/udp NODATA`},
		{name: "svc.ns.svc: third try", ns: "default", lookup: "svc1.testns.svc", addrs: []string{"10.0.0.1"},
			log: `A svc1.testns.svc.default.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      AAAA svc1.testns.svc.default.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      A svc1.testns.svc.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      AAAA svc1.testns.svc.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      A svc1.testns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers
			      AAAA svc1.testns.svc.cluster.local. @10.96.0.10:53/udp NODATA`},
		{name: "dns-q02: full name with 4 dots < ndots: fourth try", ns: "default", lookup: "svc1.testns.svc.cluster.local", addrs: []string{"10.0.0.1"},
			log: `A svc1.testns.svc.cluster.local.default.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      AAAA svc1.testns.svc.cluster.local.default.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      A svc1.testns.svc.cluster.local.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      AAAA svc1.testns.svc.cluster.local.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      A svc1.testns.svc.cluster.local.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      AAAA svc1.testns.svc.cluster.local.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      A svc1.testns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers
			      AAAA svc1.testns.svc.cluster.local. @10.96.0.10:53/udp NODATA`},
		{name: "trailing dot: one try", ns: "default", lookup: "svc1.testns.svc.cluster.local.", addrs: []string{"10.0.0.1"},
			log: `A svc1.testns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers
			      AAAA svc1.testns.svc.cluster.local. @10.96.0.10:53/udp NODATA`},
		{name: "external name: three NXDOMAINs, then the name (8 queries)", ns: "default", lookup: "example.com", addrs: []string{"93.184.215.14"},
			log: `A example.com.default.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      AAAA example.com.default.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      A example.com.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      AAAA example.com.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      A example.com.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      AAAA example.com.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      A example.com. @10.96.0.10:53/udp NOERROR 1 answers
			      AAAA example.com. @10.96.0.10:53/udp NODATA`},
		{name: "dual-stack: both families", ns: "testns", lookup: "svc-dual-stack", addrs: []string{"10.0.0.3", "10::3"},
			log: `A svc-dual-stack.testns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers
			      AAAA svc-dual-stack.testns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers`},
		{name: "IPv4 only asks A only", ns: "testns", lookup: "svc1", fam: FamilyIPv4, addrs: []string{"10.0.0.1"},
			log: `A svc1.testns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers`},
		{name: "NODATA is remembered past later NXDOMAINs", ns: "testns", lookup: "external-to-nothing", errK: NoData,
			log: `A external-to-nothing.testns.svc.cluster.local. @10.96.0.10:53/udp NODATA
			      AAAA external-to-nothing.testns.svc.cluster.local. @10.96.0.10:53/udp NODATA
			      A external-to-nothing.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      AAAA external-to-nothing.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      A external-to-nothing.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      AAAA external-to-nothing.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      A external-to-nothing. @10.96.0.10:53/udp NXDOMAIN
			      AAAA external-to-nothing. @10.96.0.10:53/udp NXDOMAIN`},
		{name: "nothing anywhere: HOST_NOT_FOUND", ns: "testns", lookup: "nosuch", errK: HostNotFound,
			log: `A nosuch.testns.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      AAAA nosuch.testns.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      A nosuch.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      AAAA nosuch.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      A nosuch.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      AAAA nosuch.cluster.local. @10.96.0.10:53/udp NXDOMAIN
			      A nosuch. @10.96.0.10:53/udp NXDOMAIN
			      AAAA nosuch. @10.96.0.10:53/udp NXDOMAIN`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := stubFor(t, s, tc.ns)
			res, err := st.Lookup(context.Background(), tc.lookup, tc.fam)
			if got, want := logLines(res.Log), trimLog(tc.log); got != want {
				t.Errorf("query log:\n%s\nwant:\n%s", got, want)
			}
			if tc.errK != 0 {
				var le *LookupError
				if !errors.As(err, &le) || le.Kind != tc.errK {
					t.Fatalf("err %v, want %s", err, tc.errK)
				}
				if !IsNotFound(err) {
					t.Errorf("IsNotFound(%v) = false", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range res.Addrs {
				got = append(got, a.String())
			}
			if !reflect.DeepEqual(got, tc.addrs) {
				t.Errorf("addresses %v, want %v", got, tc.addrs)
			}
		})
	}
}

func TestStubSearchList(t *testing.T) {
	st := NewStub(ResolvConf{Searches: []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"}, Options: []string{"ndots:5"}}, nil)
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"svc1", []string{"svc1.default.svc.cluster.local.", "svc1.svc.cluster.local.", "svc1.cluster.local.", "svc1."}},
		{"a.b.c.d.e.f", []string{"a.b.c.d.e.f.", "a.b.c.d.e.f.default.svc.cluster.local.", "a.b.c.d.e.f.svc.cluster.local.", "a.b.c.d.e.f.cluster.local."}},
		{"x.", []string{"x."}},
	} {
		if got := st.SearchList(tc.name); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SearchList(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
	// The kubelet's "search ." (Default without a node resolv.conf) puts the
	// bare name on the list, so it is not tried again at the end.
	st.Conf.Searches = []string{"."}
	if got := st.SearchList("host"); !reflect.DeepEqual(got, []string{"host."}) {
		t.Errorf("search .: %v", got)
	}
}

// TestStubServfail: glibc keeps walking after SERVFAIL and reports TRY_AGAIN.
func TestStubServfail(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Now = testClock()
	s, err := New(unsyncedSource{loadFixture(t, fixturePath)}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := stubFor(t, s, "testns", "attempts:1")
	res, err := st.Lookup(context.Background(), "nosuch", FamilyIPv4)
	var le *LookupError
	if !errors.As(err, &le) || le.Kind != TryAgain {
		t.Fatalf("err %v, want TRY_AGAIN", err)
	}
	want := trimLog(`A nosuch.testns.svc.cluster.local. @10.96.0.10:53/udp SERVFAIL
		A nosuch.svc.cluster.local. @10.96.0.10:53/udp SERVFAIL
		A nosuch.cluster.local. @10.96.0.10:53/udp SERVFAIL
		A nosuch. @10.96.0.10:53/udp REFUSED`)
	if got := logLines(res.Log); got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
}

// TestStubRefusedStopsSearch: a REFUSED reply ends the search list (after
// the as-is try, which comes first here); the error is the as-is try's.
func TestStubRefusedStopsSearch(t *testing.T) {
	s := newTestServer(t, nil) // no upstream: out-of-zone names are REFUSED
	st := stubFor(t, s, "testns", "attempts:1", "ndots:1")
	res, err := st.Lookup(context.Background(), "example.com", FamilyIPv4)
	var le *LookupError
	if !errors.As(err, &le) || le.Kind != NoRecovery {
		t.Fatalf("err %v, want NO_RECOVERY", err)
	}
	want := trimLog(`A example.com. @10.96.0.10:53/udp REFUSED
		A example.com.testns.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
		A example.com.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
		A example.com.cluster.local. @10.96.0.10:53/udp NXDOMAIN`)
	if got := logLines(res.Log); got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
}

// TestStubTCPRetry: a truncated UDP answer is asked again over TCP.
func TestStubTCPRetry(t *testing.T) {
	cfg := DefaultConfig()
	s, err := New(NewStaticSource(bigHeadless(100)...), cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := stubFor(t, s, "default")
	res, err := st.Lookup(context.Background(), "big", FamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Addrs) != 100 {
		t.Errorf("%d addresses, want 100", len(res.Addrs))
	}
	want := trimLog(`A big.default.svc.cluster.local. @10.96.0.10:53/udp NOERROR 29 answers TC
		A big.default.svc.cluster.local. @10.96.0.10:53/tcp NOERROR 100 answers`)
	if got := logLines(res.Log); got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
}

// TestStubSequentialOptions: single-request asks A, waits, then AAAA.
func TestStubSequentialOptions(t *testing.T) {
	s := newTestServer(t, nil)
	for _, opt := range []string{"single-request", "single-request-reopen"} {
		st := stubFor(t, s, "testns", opt)
		res, err := st.LookupHost(context.Background(), "svc-dual-stack")
		if err != nil {
			t.Fatalf("%s: %v", opt, err)
		}
		if len(res.Addrs) != 2 || len(res.Log) != 2 {
			t.Errorf("%s: addrs %v log %v", opt, res.Addrs, res.Log)
		}
	}
}

// TestStubNoReply: a nameserver that never answers gives TRY_AGAIN after
// attempts × nameservers tries, each logged with its error.
func TestStubNoReply(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	st := NewStub(ResolvConf{Nameservers: []string{pc.LocalAddr().String()}, Options: []string{"attempts:2"}}, nil)
	st.Timeout = 50 * time.Millisecond
	res, err := st.Lookup(context.Background(), "svc1.testns.svc.cluster.local.", FamilyIPv4)
	var le *LookupError
	if !errors.As(err, &le) || le.Kind != TryAgain {
		t.Fatalf("err %v, want TRY_AGAIN", err)
	}
	if len(res.Log) != 2 || res.Log[0].Err == nil || res.Log[0].Rcode != -1 {
		t.Errorf("log %v: want two timed-out queries", res.Log)
	}
}

// TestNetResolver: Go's resolver answered by the stub, FQDNs and the stub's own LookupNetIP.
func TestNetResolver(t *testing.T) {
	s := newTestServer(t, nil)
	st := stubFor(t, s, "testns")
	r := st.NetResolver()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", "svc-dual-stack.testns.svc.cluster.local.")
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.Addr]bool{netip.MustParseAddr("10.0.0.3"): true, netip.MustParseAddr("10::3"): true}
	if len(addrs) != 2 || !want[addrs[0].Unmap()] || !want[addrs[1].Unmap()] {
		t.Errorf("Go resolver: %v", addrs)
	}
	_, err = r.LookupNetIP(ctx, "ip", "svc0.testns.svc.cluster.local.")
	var de *net.DNSError
	if !errors.As(err, &de) || !de.IsNotFound {
		t.Errorf("Go resolver on a missing name: %v, want not found", err)
	}
	cname, srvs, err := r.LookupSRV(ctx, "http", "tcp", "web.testns.svc.cluster.local.")
	if err != nil || cname != "_http._tcp.web.testns.svc.cluster.local." || len(srvs) != 2 || srvs[0].Port != 8080 {
		t.Errorf("Go resolver SRV: %q %v %v", cname, srvs, err)
	}
	// The stub's own LookupNetIP applies the pod's search list.
	got, err := st.LookupNetIP(ctx, "ip4", "svc1")
	if err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("10.0.0.1") {
		t.Errorf("stub LookupNetIP: %v %v", got, err)
	}
}
