package dns

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	goruntime "runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"unicode"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"pgregory.net/rapid"
)

// TestLookupAsBefore: the lookup with its names built once in the index, records from
// slabs, name parsing without Split and a reply allocated in one piece answers every
// query with the same bytes as the lookup it replaced (oldlookup_test.go), on random
// clusters (ClusterIP, dual-stack, headless and ExternalName services; EndpointSlices
// or v1 Endpoints with hostnames, pod names, duplicate and not-ready addresses, sometimes
// more than maxLinearDedup of them), random configurations (an alias zone, a reverse
// zone, pod modes, endpoint_pod_names, TTLs, an upstream) and random queries (every
// name shape, random letter case, every zone, EDNS sizes that truncate, UDP and TCP).
func TestLookupAsBefore(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		objs := drawCluster(t)
		cfg := drawConfig(t)
		s, err := New(NewStaticSource(objs...), cfg)
		if err != nil {
			t.Fatal(err)
		}
		old := oldBuildIndex(s.src, s.cfg.EndpointPodNames, s.cfg.NSAddrs)
		old.serial = s.Serial()
		names := queryNames(objs, s.Zones())
		ctx := context.Background()
		for i, n := 0, rapid.IntRange(1, 30).Draw(t, "queries"); i < n; i++ {
			req, network := drawQuery(t, names)
			got, gotIdx := s.handle(ctx, req, network)
			want, wantIdx := oldHandle(s, old, ctx, req, network)
			gb, err1 := got.Pack()
			wb, err2 := want.Pack()
			if err1 != nil || err2 != nil || !bytes.Equal(gb, wb) || gotIdx != wantIdx {
				t.Fatalf("%s %s over %s: (from index %v, %v)\n%v\nwant (from index %v, %v)\n%v",
					req.Question[0].Name, mdns.TypeToString[req.Question[0].Qtype], network, gotIdx, err1, got, wantIdx, err2, want)
			}
		}
	})
}

var (
	lookupV4 = []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.1.0.5", "10.1.0.6"}
	lookupV6 = []string{"fd00::1", "fd00::2", "fd00::a:3"}
)

// drawCluster draws a small cluster whose names and addresses collide often.
func drawCluster(t *rapid.T) []runtime.Object {
	var objs []runtime.Object
	nss := []string{"ns1", "ns2", "default"}
	for i, n := 0, rapid.IntRange(0, 6).Draw(t, "services"); i < n; i++ {
		name := rapid.SampledFrom([]string{"a", "b", "web", "svc-x", "Mixed", "Web", "kube-dns"}).Draw(t, "name")
		ns := rapid.SampledFrom(append(nss, "kube-system", "Ns1")).Draw(t, "ns")
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		switch rapid.IntRange(0, 3).Draw(t, "kind") {
		case 0: // ClusterIP, one or two families
			svc.Spec.ClusterIPs = []string{rapid.SampledFrom(lookupV4).Draw(t, "cip")}
			if rapid.Bool().Draw(t, "dual") {
				svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, rapid.SampledFrom(lookupV6).Draw(t, "cip6"))
			}
		case 1:
			svc.Spec.ClusterIP = rapid.SampledFrom(lookupV6).Draw(t, "cip6")
		case 2:
			svc.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
		case 3:
			svc.Spec.Type = corev1.ServiceTypeExternalName
			svc.Spec.ExternalName = rapid.SampledFrom([]string{"example.com", "a.ns1.svc.cluster.local",
				"web.ns2.svc.alias.test.", "b.ns1.svc.Cluster.Local", "10.0.0.1", ""}).Draw(t, "target")
		}
		for j, np := 0, rapid.IntRange(0, 3).Draw(t, "ports"); j < np; j++ {
			svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
				Name:     rapid.SampledFrom([]string{"", "http", "DNS"}).Draw(t, "pname"),
				Protocol: rapid.SampledFrom([]corev1.Protocol{"", corev1.ProtocolTCP, corev1.ProtocolUDP}).Draw(t, "proto"),
				Port:     rapid.SampledFrom([]int32{53, 80, 8080}).Draw(t, "port"),
			})
		}
		objs = append(objs, svc)
		if rapid.IntRange(0, 3).Draw(t, "v1") == 0 {
			objs = append(objs, drawEndpoints(t, name, ns))
			continue
		}
		for j, ns2 := 0, rapid.IntRange(0, 2).Draw(t, "slices"); j < ns2; j++ {
			objs = append(objs, drawSlice(t, name, ns, j))
		}
	}
	for i, n := 0, rapid.IntRange(0, 3).Draw(t, "pods"); i < n; i++ {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: rapid.SampledFrom(nss).Draw(t, "podns")},
			Status:     corev1.PodStatus{PodIP: rapid.SampledFrom(append(lookupV4, lookupV6...)).Draw(t, "podip")},
		})
	}
	return objs
}

func drawSlice(t *rapid.T, svc, ns string, j int) *discoveryv1.EndpointSlice {
	v6 := rapid.IntRange(0, 3).Draw(t, "v6") == 0
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", svc, j), Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	pool := lookupV4
	if v6 {
		sl.AddressType, pool = discoveryv1.AddressTypeIPv6, lookupV6
	}
	for k, np := 0, rapid.IntRange(0, 2).Draw(t, "slports"); k < np; k++ {
		p := discoveryv1.EndpointPort{}
		if name := rapid.SampledFrom([]string{"", "http", "DNS", "-"}).Draw(t, "slpname"); name != "-" {
			p.Name = &name
		}
		if rapid.Bool().Draw(t, "slhasproto") {
			proto := rapid.SampledFrom([]corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}).Draw(t, "slproto")
			p.Protocol = &proto
		}
		if rapid.IntRange(0, 4).Draw(t, "slnoport") > 0 {
			port := rapid.SampledFrom([]int32{53, 80, 8080}).Draw(t, "slport")
			p.Port = &port
		}
		sl.Ports = append(sl.Ports, p)
	}
	// Sometimes more endpoints than maxLinearDedup, so that both ways of finding
	// duplicates run.
	n := rapid.SampledFrom([]int{0, 1, 2, 3, 6, maxLinearDedup + 3}).Draw(t, "endpoints")
	for k := 0; k < n; k++ {
		e := discoveryv1.Endpoint{Addresses: []string{rapid.SampledFrom(pool).Draw(t, "epip")}}
		switch rapid.IntRange(0, 2).Draw(t, "ephost") {
		case 1:
			h := rapid.SampledFrom([]string{"web-0", "Web-1", "host"}).Draw(t, "hostname")
			e.Hostname = &h
		case 2:
			e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: rapid.SampledFrom([]string{"pod-0", "Pod-1"}).Draw(t, "podname")}
		}
		switch rapid.IntRange(0, 4).Draw(t, "ready") {
		case 0:
			f := false
			e.Conditions.Ready = &f
		case 1:
			tr := true
			e.Conditions.Ready = &tr
		}
		sl.Endpoints = append(sl.Endpoints, e)
	}
	return sl
}

func drawEndpoints(t *rapid.T, svc, ns string) *corev1.Endpoints {
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: ns}}
	for i, n := 0, rapid.IntRange(0, 2).Draw(t, "subsets"); i < n; i++ {
		var ss corev1.EndpointSubset
		for k, np := 0, rapid.IntRange(0, 2).Draw(t, "ssports"); k < np; k++ {
			ss.Ports = append(ss.Ports, corev1.EndpointPort{
				Name:     rapid.SampledFrom([]string{"", "http"}).Draw(t, "sspname"),
				Protocol: rapid.SampledFrom([]corev1.Protocol{"", corev1.ProtocolUDP}).Draw(t, "ssproto"),
				Port:     rapid.SampledFrom([]int32{53, 80}).Draw(t, "ssport"),
			})
		}
		for k, na := 0, rapid.IntRange(0, 4).Draw(t, "ssaddrs"); k < na; k++ {
			a := corev1.EndpointAddress{IP: rapid.SampledFrom(append(lookupV4, lookupV6...)).Draw(t, "ssip")}
			if rapid.Bool().Draw(t, "sshost") {
				a.Hostname = "web-0"
			}
			ss.Addresses = append(ss.Addresses, a)
		}
		ep.Subsets = append(ep.Subsets, ss)
	}
	return ep
}

func drawConfig(t *rapid.T) Config {
	cfg := DefaultConfig()
	cfg.Now = testClock()
	cfg.Zones = rapid.SampledFrom([][]string{
		{"cluster.local"}, {"cluster.local", "alias.test"}, {"cluster.local", "0.10.in-addr.arpa"}, {"Example.Org."},
	}).Draw(t, "zones")
	cfg.Pods = PodMode(rapid.IntRange(0, 2).Draw(t, "pods"))
	cfg.EndpointPodNames = rapid.Bool().Draw(t, "podnames")
	cfg.TTL = rapid.SampledFrom([]uint32{0, 5, 400}).Draw(t, "ttl")
	if rapid.Bool().Draw(t, "nsaddrs") {
		cfg.NSAddrs = []netip.Addr{netip.MustParseAddr("10.0.0.10"), netip.MustParseAddr("fd00::10")}
	}
	if rapid.Bool().Draw(t, "upstream") {
		// A fixed upstream: one A record for any name, TC on names with a 't'.
		cfg.Upstream = UpstreamFunc(func(_ context.Context, req *mdns.Msg, _ string) (*mdns.Msg, error) {
			m := new(mdns.Msg)
			m.SetReply(req)
			m.Truncated = strings.Contains(req.Question[0].Name, "t")
			m.Answer = []mdns.RR{&mdns.A{Hdr: mdns.RR_Header{Name: req.Question[0].Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 30}, A: net.IPv4(192, 0, 2, 1).To4()}}
			return m, nil
		})
	}
	return cfg
}

// queryNames lists names worth asking: the services' names (bases), names under them
// (endpoints, ports), the reverse names of the addresses and others in and outside
// the zones, four lists in one.
func queryNames(objs []runtime.Object, zones []string) [4][]string {
	var out [4][]string
	labels := []string{"web-0", "web-1", "host", "pod-0", "pod-1", "10-0-0-1", "fd00--1", "x"}
	for _, ip := range append(lookupV4, append(lookupV6, "10.0.0.10", "fd00::10")...) {
		out[3] = append(out[3], ReverseName(netip.MustParseAddr(ip)))
		labels = append(labels, endpointLabel("", "", netip.MustParseAddr(ip), false))
	}
	out[2] = append(out[2], "0.10.in-addr.arpa.", "10.in-addr.arpa.", "in-addr.arpa.", "example.com.", "a.b.ip6.arpa.")
	for _, z := range zones {
		out[2] = append(out[2], z, "svc."+z, "pod."+z, "dns-version."+z, "ns.dns."+z, "dns."+z, "ns1.svc."+z, "nope.svc."+z, "a.b.c.d.e.svc."+z)
		for _, l := range labels {
			out[2] = append(out[2], l+".ns1.pod."+z, l+".default.pod."+z)
		}
	}
	for _, o := range objs {
		svc, ok := o.(*corev1.Service)
		if !ok {
			continue
		}
		for _, z := range zones {
			base := svc.Name + "." + svc.Namespace + ".svc." + z
			out[0] = append(out[0], base)
			out[1] = append(out[1], "_http._tcp."+base, "http.tcp."+base, "_dns._udp."+base, "_x._tcp."+base, "a.b.c."+base)
			for _, l := range labels {
				out[1] = append(out[1], l+"."+base)
			}
		}
	}
	return out
}

func drawQuery(t *rapid.T, names [4][]string) (*mdns.Msg, string) {
	list := names[2]
	if k := rapid.IntRange(0, 3).Draw(t, "kind of name"); len(names[k]) > 0 {
		list = names[k]
	}
	name := rapid.SampledFrom(list).Draw(t, "qname")
	if rapid.Bool().Draw(t, "recase") { // the same name in another letter case
		b := []rune(name)
		for i := range b {
			if rapid.IntRange(0, 3).Draw(t, "flip") == 0 {
				if unicode.IsUpper(b[i]) {
					b[i] = unicode.ToLower(b[i])
				} else {
					b[i] = unicode.ToUpper(b[i])
				}
			}
		}
		name = string(b)
	}
	qtype := rapid.SampledFrom([]uint16{mdns.TypeA, mdns.TypeA, mdns.TypeA, mdns.TypeAAAA, mdns.TypeAAAA, mdns.TypeSRV, mdns.TypeSRV, mdns.TypeSRV, mdns.TypePTR, mdns.TypePTR, mdns.TypePTR, mdns.TypeTXT,
		mdns.TypeCNAME, mdns.TypeSOA, mdns.TypeNS, mdns.TypeMX, mdns.TypeANY, mdns.TypeAXFR}).Draw(t, "qtype")
	m := new(mdns.Msg)
	m.SetQuestion(name, qtype)
	m.Id = 7
	m.RecursionDesired = rapid.Bool().Draw(t, "rd")
	m.CheckingDisabled = rapid.Bool().Draw(t, "cd")
	m.Question[0].Qclass = rapid.SampledFrom([]uint16{mdns.ClassINET, mdns.ClassANY}).Draw(t, "qclass")
	if size := rapid.SampledFrom([]uint16{0, 512, 600, 1232, 4096}).Draw(t, "edns"); size > 0 {
		m.SetEdns0(size, rapid.Bool().Draw(t, "do"))
	}
	return m, rapid.SampledFrom([]string{"udp", "tcp"}).Draw(t, "network")
}

// TestParseRequestAsBefore: parseRequest, which takes labels from the right without
// splitting, parses every name as the Split-based one did; trimZone cuts the zone off a
// name as strings.TrimSuffix(name, "."+zone) did.
func TestParseRequestAsBefore(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		labels := rapid.SliceOfN(rapid.SampledFrom([]string{"", "a", "_http", "_tcp", "tcp", "svc", "pod", "x_y", "a.b"}), 0, 7).Draw(t, "labels")
		base := strings.Join(labels, ".")
		want, wantErr := oldParseRequest(base)
		var got request
		gotErr := parseRequest(base, &got)
		if got != want || gotErr != wantErr {
			t.Fatalf("parseRequest(%q) = %+v, %v; want %+v, %v", base, got, gotErr, want, wantErr)
		}
		zone := rapid.SampledFrom([]string{"", "a", "svc", "b.svc", "cluster.local."}).Draw(t, "zone")
		if got, want := trimZone(base, zone), strings.TrimSuffix(base, "."+zone); got != want {
			t.Fatalf("trimZone(%q, %q) = %q, want %q", base, zone, got, want)
		}
	})
}

// TestAddrFromReverseAsBefore: addrFromReverse, which reads the labels in place,
// gives the address the Split-and-ParseAddr one gave for every name, including labels
// with leading zeros, values over 255, colons and empty labels.
func TestAddrFromReverseAsBefore(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		labels := rapid.SliceOfN(rapid.SampledFrom([]string{"", "0", "00", "01", "1", "9", "10", "99", "255", "256",
			"1000", "a", "f", "F", "g", "ab", "a:b::1", "::ffff:1", "%1", "1%2"}), 0, 33).Draw(t, "labels")
		suffixes := []string{".in-addr.arpa.", ".ip6.arpa.", "in-addr.arpa.", ".arpa."}
		switch rapid.IntRange(0, 3).Draw(t, "shape") {
		case 2: // 4 labels that netip.ParseAddr may read as IPv6 (the last label comes first)
			labels = labels[:0]
			for i := 0; i < 3; i++ {
				labels = append(labels, rapid.SampledFrom([]string{"1", "20", "1%2"}).Draw(t, "v6ish octet"))
			}
			labels = append(labels, rapid.SampledFrom([]string{"1", "a:b::1", "::ffff:1", "1%2", "fd00:"}).Draw(t, "v6ish"))
			suffixes = []string{".in-addr.arpa."}
		case 0: // 32 nibbles, as under ip6.arpa (a bad one: garble below)
			labels = labels[:0]
			for i := 0; i < 32; i++ {
				labels = append(labels, rapid.SampledFrom([]string{"0", "1", "a", "F", "9"}).Draw(t, "nibble"))
			}
			suffixes = []string{".ip6.arpa.", ".ip6.arpa.", ".ip6.arpa.", ".in-addr.arpa."}
		case 1: // 4 numbers, as under in-addr.arpa
			labels = labels[:0]
			for i := 0; i < 4; i++ {
				labels = append(labels, rapid.SampledFrom([]string{"0", "00", "01", "1", "7", "10", "99", "200", "255", "256", "999"}).Draw(t, "octet"))
			}
			suffixes = []string{".in-addr.arpa.", ".in-addr.arpa.", ".in-addr.arpa.", ".ip6.arpa."}
		}
		rest := []byte(strings.Join(labels, "."))
		if len(rest) > 0 && rapid.Bool().Draw(t, "garble") { // one character replaced
			rest[rapid.IntRange(0, len(rest)-1).Draw(t, "at")] = rapid.SampledFrom([]byte("x0.:g")).Draw(t, "by")
		}
		name := string(rest) + rapid.SampledFrom(suffixes).Draw(t, "suffix")
		gotIP, gotOK := addrFromReverse(name)
		wantIP, wantOK := oldAddrFromReverse(name)
		if wantOK && wantIP.Is6() && strings.HasSuffix(name, ".in-addr.arpa.") {
			// The old lookup read "1.20.1.a:b::1" under in-addr.arpa as an IPv6
			// address; no name under in-addr.arpa names one.
			wantIP, wantOK = netip.Addr{}, false
		}
		if gotIP != wantIP || gotOK != wantOK {
			t.Fatalf("addrFromReverse(%q) = %v, %v; want %v, %v", name, gotIP, gotOK, wantIP, wantOK)
		}
	})
}

// TestLookupStackDepth: every query of the benchmark mix is answered, without the
// reply cache, within the 4 KiB stack that miekg/dns's fresh goroutine per UDP packet
// has once unpacking the query grew it, so the lookup costs no second stack copy
// (about 3 µs a query on the Intel Xeon VM; docs/PERFORMANCE.md, "## dns"). The check
// runs in a child process started with GODEBUG=adaptivestackstart=0 (goroutines start
// at 2 KiB) under debug.SetMaxStack(4096), where a growth to 8 KiB is fatal.
func TestLookupStackDepth(t *testing.T) {
	if lim := os.Getenv("CLUSTERLAB_DNS_STACK_CHILD"); lim != "" {
		stackChild(t, lim)
		return
	}
	if testing.Short() {
		t.Skip("starts child processes")
	}
	if raceEnabled || goruntime.GOARCH != "amd64" {
		// Frame sizes are the compiler's: measured for amd64 without instrumentation.
		t.Skip("stack frames measured on amd64 without the race detector")
	}
	for i := range perfQueries {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestLookupStackDepth$", "-test.count", "1")
		cmd.Env = append(os.Environ(), "GODEBUG=adaptivestackstart=0", "CLUSTERLAB_DNS_STACK_CHILD=4096", "CLUSTERLAB_DNS_STACK_QUERY="+strconv.Itoa(i))
		out, err := cmd.CombinedOutput()
		if err != nil {
			first, _, _ := strings.Cut(string(out), "\n\n")
			t.Errorf("%s %s: the server's goroutine needed more than 4 KiB of stack: %v\n%s", perfQueries[i].name, mdns.TypeToString[perfQueries[i].qtype], err, first)
		}
	}
}

// stackChild is TestLookupStackDepth's child: it serves the fixture without the reply
// cache, warms every goroutine on both sides of the socket with the whole mix, then
// sends one query with the stack limit in force.
func stackChild(t *testing.T, lim string) {
	limit, err := strconv.Atoi(lim)
	if err != nil {
		t.Fatal(err)
	}
	q, err := strconv.Atoi(os.Getenv("CLUSTERLAB_DNS_STACK_QUERY"))
	if err != nil {
		t.Fatal(err)
	}
	defer func(n int32) { maxCachedReplies = n }(maxCachedReplies)
	maxCachedReplies = 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ours := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ServeConfig{Manifests: []string{fixturePath}, Listen: "127.0.0.1:0", TTL: DefaultTTL,
			OnListen: func(udp, _ net.Addr) { ours <- udp.String() }})
	}()
	var addr string
	select {
	case addr = <-ours:
	case err := <-done:
		t.Fatal(err)
	}
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wires := perfWires()
	buf := make([]byte, 4096)
	exchange := func(w []byte) {
		if _, err := c.Write(w); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range wires {
		exchange(w)
	}
	prev := debug.SetMaxStack(limit)
	exchange(wires[q])
	debug.SetMaxStack(prev)
}

// TestLookupAsBeforeLarge: the same comparison as TestLookupAsBefore on a headless
// service with more endpoints than maxLinearDedup and than the additional section
// finish allocates with the OPT record, each endpoint listed twice (two slices) and
// under two ports, asked A, SRV and PTR with and without EDNS0, over UDP and TCP.
func TestLookupAsBeforeLarge(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "ns1"},
		Spec: corev1.ServiceSpec{ClusterIPs: []string{corev1.ClusterIPNone}}}
	objs := []runtime.Object{svc}
	for j := 0; j < 2; j++ {
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", j), Namespace: "ns1", Labels: map[string]string{discoveryv1.LabelServiceName: "big"}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		for _, name := range []string{"http", "dns"} {
			port := int32(80)
			sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: &name, Port: &port})
		}
		for k := 0; k < 2*maxLinearDedup; k++ {
			host := fmt.Sprintf("h-%d", k%(maxLinearDedup+3))
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.2.0.%d", k+1)}, Hostname: &host})
		}
		objs = append(objs, sl)
	}
	s, err := New(NewStaticSource(objs...), Config{Zones: []string{"cluster.local"}, TTL: 5, Now: testClock()})
	if err != nil {
		t.Fatal(err)
	}
	old := oldBuildIndex(s.src, false, nil)
	old.serial = s.Serial()
	ctx := context.Background()
	n := 0
	for _, name := range []string{"big.ns1.svc.cluster.local.", "_http._tcp.big.ns1.svc.cluster.local.", "h-3.big.ns1.svc.cluster.local.", "BIG.ns1.svc.cluster.local.", "2.0.2.10.in-addr.arpa."} {
		for _, qtype := range []uint16{mdns.TypeA, mdns.TypeSRV, mdns.TypePTR} {
			for _, size := range []uint16{0, 512, 4096} {
				for _, network := range []string{"udp", "tcp"} {
					req := new(mdns.Msg)
					req.SetQuestion(name, qtype)
					if size > 0 {
						req.SetEdns0(size, false)
					}
					got, _ := s.handle(ctx, req, network)
					want, _ := oldHandle(s, old, ctx, req, network)
					gb, err1 := got.Pack()
					wb, err2 := want.Pack()
					if err1 != nil || err2 != nil || !bytes.Equal(gb, wb) {
						t.Fatalf("%s %s EDNS %d over %s: %v, %v\n%v\nwant\n%v", name, mdns.TypeToString[qtype], size, network, err1, err2, got, want)
					}
					if len(got.Extra) > len(optBox{}.extra) {
						n++
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no reply had a larger additional section than optBox holds")
	}
}

// TestAddrFromReverseNames: full reverse names give their address; anything else,
// including a name under in-addr.arpa whose labels read as an IPv6 address with an
// embedded IPv4 one, gives none.
func TestAddrFromReverseNames(t *testing.T) {
	for name, want := range map[string]string{
		"10.0.96.10.in-addr.arpa.":      "10.96.0.10",
		"1.20.1.a:b::1.in-addr.arpa.":   "",
		"1.20.1.::ffff:1.in-addr.arpa.": "",
		"0.96.10.in-addr.arpa.":         "",
		"01.0.96.10.in-addr.arpa.":      "",
		"256.0.96.10.in-addr.arpa.":     "",
		"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.": "fd00::1",
		"1.0.0.ip6.arpa.": "",
	} {
		got, ok := addrFromReverse(name)
		if want == "" {
			if ok {
				t.Errorf("addrFromReverse(%q) = %v, want none", name, got)
			}
			continue
		}
		if !ok || got != netip.MustParseAddr(want) {
			t.Errorf("addrFromReverse(%q) = %v, %v; want %s", name, got, ok, want)
		}
	}
}
