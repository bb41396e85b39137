package dns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// TestNetResolverSearchList: Go code given the stub's net.Resolver resolves short
// names as the pod does, with the pod's search list and ndots, for every lookup Go
// offers.
func TestNetResolverSearchList(t *testing.T) {
	s := newTestServer(t, nil)
	r := stubFor(t, s, "testns").NetResolver()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if addrs, err := r.LookupHost(ctx, "svc1"); err != nil || !slices.Equal(addrs, []string{"10.0.0.1"}) {
		t.Errorf("LookupHost svc1: %v %v, want [10.0.0.1]", addrs, err)
	}
	ips, err := r.LookupNetIP(ctx, "ip", "svc-dual-stack")
	if err != nil || len(ips) != 2 || !slices.Contains(ips, netip.MustParseAddr("10.0.0.3")) || !slices.Contains(ips, netip.MustParseAddr("10::3")) {
		t.Errorf("LookupNetIP svc-dual-stack: %v %v, want 10.0.0.3 and 10::3", ips, err)
	}
	if ips, err := r.LookupNetIP(ctx, "ip6", "svc6"); err != nil || len(ips) != 1 || ips[0] != netip.MustParseAddr("1234:abcd::1") {
		t.Errorf("LookupNetIP ip6 svc6: %v %v", ips, err)
	}
	// One dot: the search list first, so svc1.testns is found as svc1.testns.svc.cluster.local.
	if addrs, err := r.LookupHost(ctx, "svc1.testns"); err != nil || !slices.Equal(addrs, []string{"10.0.0.1"}) {
		t.Errorf("LookupHost svc1.testns: %v %v", addrs, err)
	}
	// The canonical name is the FQDN the walk found, as getaddrinfo's AI_CANONNAME.
	if cname, err := r.LookupCNAME(ctx, "svc1"); err != nil || cname != "svc1.testns.svc.cluster.local." {
		t.Errorf("LookupCNAME svc1: %q %v", cname, err)
	}
	cname, srvs, err := r.LookupSRV(ctx, "http", "tcp", "web")
	if err != nil || cname != "_http._tcp.web.testns.svc.cluster.local." || len(srvs) != 2 || srvs[0].Port != 8080 {
		t.Errorf("LookupSRV http tcp web: %q %v %v", cname, srvs, err)
	}
	if names, err := r.LookupAddr(ctx, "10.0.0.1"); err != nil || !slices.Equal(names, []string{"svc1.testns.svc.cluster.local."}) {
		t.Errorf("LookupAddr 10.0.0.1: %v %v", names, err)
	}
	if txt, err := r.LookupTXT(ctx, "dns-version.cluster.local"); err != nil || !slices.Equal(txt, []string{SchemaVersion}) {
		t.Errorf("LookupTXT dns-version: %v %v", txt, err)
	}
	// A trailing dot still works (walked as a relative name: the same answer).
	if addrs, err := r.LookupHost(ctx, "svc1.testns.svc.cluster.local."); err != nil || !slices.Equal(addrs, []string{"10.0.0.1"}) {
		t.Errorf("LookupHost FQDN: %v %v", addrs, err)
	}
	// Not found: Go's own error, IsNotFound. (A single label would end with the name
	// as is, outside the zone: REFUSED by a server without upstream, NO_RECOVERY.)
	_, err = r.LookupHost(ctx, "svc0.testns.svc.cluster.local")
	var de *net.DNSError
	if !errors.As(err, &de) || !de.IsNotFound {
		t.Errorf("LookupHost svc0: %v, want not found", err)
	}
	// A NODATA for the asked family is not found either.
	_, err = r.LookupNetIP(ctx, "ip6", "svc1")
	if !errors.As(err, &de) || !de.IsNotFound {
		t.Errorf("LookupNetIP ip6 svc1: %v, want not found", err)
	}
}

// recordingAnswerer is a goAnswerer on st whose address walks and other walks are
// logged, with this process's search domains given explicitly.
func recordingAnswerer(st *Stub, foreign ...string) (*goAnswerer, func() []QueryLog) {
	var mu sync.Mutex
	var log []QueryLog
	a := &goAnswerer{
		stub: st,
		addrs: func(ctx context.Context, name string) (string, []netip.Addr, error) {
			res, err := st.Lookup(ctx, name, FamilyAny)
			mu.Lock()
			log = append(log, res.Log...)
			mu.Unlock()
			return res.Name, res.Addrs, err
		},
		record: func(_ string, _ uint16, _ string, l []QueryLog, _ error) {
			mu.Lock()
			log = append(log, l...)
			mu.Unlock()
		},
	}
	newGoResolver(a)
	a.foreign = foreign
	return a, func() []QueryLog {
		mu.Lock()
		defer mu.Unlock()
		out := log
		log = nil
		return out
	}
}

// TestGoAnswerer: what the pod's DNS server sees when Go code resolves through the
// net.Resolver: one A+AAAA walk per name (the A and AAAA questions share it), none
// for the names Go makes up from this process's search domains.
func TestGoAnswerer(t *testing.T) {
	s := newTestServer(t, nil)
	st := stubFor(t, s, "testns")
	a, log := recordingAnswerer(st, "corp.example")
	ctx := context.Background()
	ask := func(name string, qtype uint16) *mdns.Msg {
		m := new(mdns.Msg)
		m.SetQuestion(name, qtype)
		return a.answer(ctx, m)
	}

	// Go's expansion of "svc1" with this process's search domain: NXDOMAIN, no query.
	if r := ask("svc1.corp.example.", mdns.TypeA); r.Rcode != mdns.RcodeNameError || len(log()) != 0 {
		t.Errorf("svc1.corp.example.: rcode %s, want NXDOMAIN without a query", mdns.RcodeToString[r.Rcode])
	}
	// Then "svc1." as is: the pod's walk, a CNAME to the FQDN it found.
	var wg sync.WaitGroup
	replies := make([]*mdns.Msg, 2)
	for i, qt := range []uint16{mdns.TypeA, mdns.TypeAAAA} { // concurrently, as Go asks them
		wg.Add(1)
		go func() { defer wg.Done(); replies[i] = ask("svc1.", qt) }()
	}
	wg.Wait()
	check(t, dnsCase{qname: "svc1.", qtype: mdns.TypeA, answer: []string{
		"svc1. 0 IN CNAME svc1.testns.svc.cluster.local.",
		"svc1.testns.svc.cluster.local. 0 IN A 10.0.0.1",
	}}, withAA(replies[0]))
	check(t, dnsCase{qname: "svc1.", qtype: mdns.TypeAAAA, answer: []string{
		"svc1. 0 IN CNAME svc1.testns.svc.cluster.local.",
	}}, withAA(replies[1]))
	if got, want := logLines(log()), trimLog(`
		A svc1.testns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers
		AAAA svc1.testns.svc.cluster.local. @10.96.0.10:53/udp NODATA`); got != want {
		t.Errorf("one walk for the A and AAAA questions; log:\n%s\nwant:\n%s", got, want)
	}
	// The next lookup of the same name walks again.
	ask("svc1.", mdns.TypeA)
	if n := len(log()); n != 2 {
		t.Errorf("a new lookup of svc1 sent %d queries, want 2", n)
	}
	// A name of the pod's world under a search domain this process shares is no
	// expansion of Go's: with cluster.local in both lists it is walked.
	a2, log2 := recordingAnswerer(st)
	a2.foreign = nil
	m := new(mdns.Msg)
	m.SetQuestion("svc1.testns.svc.cluster.local.", mdns.TypeA)
	if r := a2.answer(ctx, m); r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("FQDN: %v", r)
	}
	if got, want := logLines(log2()), trimLog(`
		A svc1.testns.svc.cluster.local.testns.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
		AAAA svc1.testns.svc.cluster.local.testns.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
		A svc1.testns.svc.cluster.local.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
		AAAA svc1.testns.svc.cluster.local.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN
		A svc1.testns.svc.cluster.local.cluster.local. @10.96.0.10:53/udp NXDOMAIN
		AAAA svc1.testns.svc.cluster.local.cluster.local. @10.96.0.10:53/udp NXDOMAIN
		A svc1.testns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 1 answers
		AAAA svc1.testns.svc.cluster.local. @10.96.0.10:53/udp NODATA`); got != want {
		t.Errorf("FQDN walk (4 dots < ndots 5, as glibc):\n%s\nwant:\n%s", got, want)
	}
	if !a.isForeign("x.corp.example.") || a.isForeign("svc1.testns.svc.cluster.local.") || a2.isForeign("x.corp.example.") {
		t.Errorf("isForeign")
	}
	// Other types walk the search list with their own type.
	if r := ask("_http._tcp.web.", mdns.TypeSRV); r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 3 {
		t.Errorf("SRV: %v", r)
	}
	if got, want := logLines(log()), trimLog(`
		SRV _http._tcp.web.testns.svc.cluster.local. @10.96.0.10:53/udp NOERROR 2 answers`); got != want {
		t.Errorf("SRV log:\n%s\nwant:\n%s", got, want)
	}
	if r := ask("nothing.cluster.local.", mdns.TypeTXT); r.Rcode != mdns.RcodeNameError {
		t.Errorf("TXT on a missing name: %s, want NXDOMAIN", mdns.RcodeToString[r.Rcode])
	}
}

// withAA marks a reply authoritative so that check (which insists on AA, as every
// cluster DNS reply has it) compares the rest; Go's resolver needs RA, not AA.
func withAA(m *mdns.Msg) *mdns.Msg {
	if !m.RecursionAvailable {
		m.Rcode = mdns.RcodeRefused // make the check fail loudly
	}
	m.Authoritative = true
	return m
}
