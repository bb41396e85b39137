package nftables

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"

	"github.com/clusterlab/clusterlab/proxy"
)

const (
	longNS   = "very-long-namespace-name-abcdefghijklmnopqrstuvwxyz0123456789xx"
	longSvc  = "very-long-service-name-why-would-you-even-do-this-i-mean-really"
	longPort = "port-443-providing-the-hypertext-transmission-protocol-with-tls"
)

// Name vectors from kube-proxy v1.37.2's Test_servicePortChainNameBase and
// Test_servicePortEndpointChainNameBase.
func TestNameBases(t *testing.T) {
	spn := func(ns, name, port string) proxy.ServicePortName {
		return proxy.ServicePortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: port}
	}
	for _, tc := range []struct {
		spn         proxy.ServicePortName
		proto, want string
	}{
		{spn("testing", "service", "http"), "tcp", "P4ZYZVCF-testing/service/tcp/http"},
		{spn("testing", "service", "https"), "tcp", "LZBRENCP-testing/service/tcp/https"},
		{spn(longNS, longSvc, longPort), "sctp", "KR6NACJP-" + longNS + "/" + longSvc + "/sctp/" + longPort},
		{spn("ns1", "svc1", "p80"), "tcp", "ULMVA6XW-ns1/svc1/tcp/p80"},
	} {
		if got := ServiceNameBase(tc.spn, tc.proto); got != tc.want {
			t.Errorf("ServiceNameBase(%v, %s) = %q, want %q", tc.spn, tc.proto, got, tc.want)
		}
	}
	long := longNS + "/" + longSvc + "/sctp/" + longPort
	for _, tc := range []struct {
		spn         proxy.ServicePortName
		proto, ip   string
		port        int
		want        string
		wantTrimmed bool
	}{
		{spn("testing", "service", "http"), "tcp", "10.180.0.1", 80, "JO2XBXZR-testing/service/tcp/http__10.180.0.1/80", false},
		{spn("testing", "service", "http"), "tcp", "10.180.0.2", 80, "5S6H3H22-testing/service/tcp/http__10.180.0.2/80", false},
		{spn("testing", "service", "http"), "tcp", "fd80:abcd:12::a1b2:c3d4:e5f6:9999", 80, "U7E2ET36-testing/service/tcp/http__fd80.abcd.12..a1b2.c3d4.e5f6.9999/80", false},
		{spn(longNS, longSvc, longPort), "sctp", "1234:5678:9abc:def0::abc:1234", 443, "5YS7AFEA-" + long + "__1234.5678.9abc.def0..abc.1234/443", false},
		{spn(longNS, longSvc, longPort), "sctp", "1234:5678:9abc:def0::abcd:1234:5678", 443, "CI6C53Q3-" + long + "__1234.5678.9abc.def0..abcd.1234...", true},
		{spn(longNS, longSvc, longPort), "sctp", "1234:5678:9abc:def0::abcd:1234:8765", 443, "2FLXFK6X-" + long + "__1234.5678.9abc.def0..abcd.1234...", true},
	} {
		// kube-proxy's vectors pass the address text as written ("12::a1b2" for a
		// single zero group), which real endpoints never have; EndpointNameBase
		// hashes the address as Go prints it.
		got := endpointNameBase(tc.spn, tc.proto, tc.ip, strconv.Itoa(tc.port))
		if got != tc.want {
			t.Errorf("endpointNameBase(%v, %s, %s) = %q, want %q", tc.spn, tc.proto, tc.ip, got, tc.want)
		}
		ep := proxy.NewEndpoint(netip.MustParseAddr(tc.ip), tc.port)
		if ep.IPString() == tc.ip {
			if got := EndpointNameBase(tc.spn, tc.proto, ep); got != tc.want {
				t.Errorf("EndpointNameBase(%s) = %q, want %q", ep, got, tc.want)
			}
		}
		if tc.wantTrimmed && len(PrefixAffinity+got) > knftables.NameLengthMax {
			t.Errorf("%q is longer than nftables allows", PrefixAffinity+got)
		}
	}
}

// kube-proxy v1.37.2's TestEndpointDNATRules: the service chain's single rule.
func TestEndpointDNATRules(t *testing.T) {
	for _, tc := range []struct {
		family corev1.IPFamily
		svcIP  string
		epIPs  []string
		want   string
	}{
		{corev1.IPv4Protocol, "172.30.0.41", []string{"10.180.0.1"}, "meta l4proto tcp dnat to 10.180.0.1:80"},
		{corev1.IPv6Protocol, "fd00:172:30::41", []string{"fd00:10:180::1"}, "meta l4proto tcp dnat to [fd00:10:180::1]:80"},
		{corev1.IPv4Protocol, "172.30.0.41", []string{"10.180.0.1", "10.180.0.2"},
			"meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.180.0.1 . 80 , 1 : 10.180.0.2 . 80 }"},
		{corev1.IPv6Protocol, "fd00:172:30::41", []string{"fd00:10:180::1", "fd00:10:180::2"},
			"meta l4proto tcp dnat ip6 addr . port to numgen random mod 2 map { 0 : fd00:10:180::1 . 80 , 1 : fd00:10:180::2 . 80 }"},
	} {
		fake := newFake(tc.family)
		p, err := NewProxier(fake, nil, upstreamConfig(tc.family))
		if err != nil {
			t.Fatal(err)
		}
		svcs := []*corev1.Service{makeService("ns1", "svc1", tc.svcIP, "p80", 80)}
		eps := []*discoveryv1.EndpointSlice{makeSlice("ns1", "svc1", "p80", 80, tc.epIPs...)}
		if _, err := p.Sync(context.Background(), svcs, eps); err != nil {
			t.Fatal(err)
		}
		rules, err := fake.ListRules(context.Background(), "service-ULMVA6XW-ns1/svc1/tcp/p80")
		if err != nil {
			t.Fatal(err)
		}
		if len(rules) != 1 || rules[0].Rule != tc.want {
			t.Errorf("%v: rules %v, want [%q]", tc.epIPs, rules, tc.want)
		}
	}
}

// kube-proxy v1.37.2's TestSyncProxyRulesTruncatesNoEndpointServiceComment: element
// comments are cut to 128 bytes (1.37), and left whole in the 1.36 layout.
func TestCommentTruncated(t *testing.T) {
	const (
		ns   = "loft-acme-platform-services-team-dev-v-shared-workloads-ns-001"
		name = "my-api-svc-x-my-api-namespace-x-acme-shared-vcluster--a1b2c3d4e"
	)
	full := ns + "/" + name + ":http"
	want := "loft-acme-platform-services-team-dev-v-shared-workloads-ns-001/my-api-svc-x-my-api-namespace-x-acme-shared-vcluster--a1b2c3d4e:h"
	for _, v := range []Version{Version137, Version136} {
		fake := newFake(corev1.IPv4Protocol)
		cfg := upstreamConfig(corev1.IPv4Protocol)
		cfg.Version = v
		p, err := NewProxier(fake, nil, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Sync(context.Background(), []*corev1.Service{makeService(ns, name, "172.30.0.47", "http", 80)}, nil); err != nil {
			t.Fatal(err)
		}
		e := fake.Table.Maps[MapNoEndpointServices].FindElement("172.30.0.47", "tcp", "80")
		wantV := want
		if v == Version136 {
			wantV = full
		}
		if e == nil || e.Comment == nil || *e.Comment != wantV {
			t.Errorf("%s: element %+v, want comment %q", v, e, wantV)
		}
		if v == Version137 && strings.Contains(fake.Dump(), full) {
			t.Errorf("%s: untruncated comment in the table", v)
		}
	}
}

// TestVersions: unknown layouts are refused with a clear error; the localhost NodePort
// gate needs 1.37.
func TestVersions(t *testing.T) {
	cfg := upstreamConfig(corev1.IPv4Protocol)
	cfg.Version = "1.28"
	_, err := NewProxier(newFake(corev1.IPv4Protocol), nil, cfg)
	if err == nil || !strings.Contains(err.Error(), `version: kube-proxy "1.28"'s layout is not implemented (have 1.29, 1.30, 1.31, 1.32, 1.33, 1.34, 1.35, 1.36, 1.37)`) {
		t.Errorf("version 1.28: %v", err)
	}
	cfg.Version = ""
	cfg.Node.Version = 28
	if _, err := NewProxier(newFake(corev1.IPv4Protocol), nil, cfg); err == nil || !strings.Contains(err.Error(), "kube-proxy 1.28 has no nftables mode") {
		t.Errorf("node version 1.28: %v", err)
	}
	cfg.Node.Version = 0
	cfg.Version = Version136
	cfg.LocalhostNodePorts = true
	if _, err := Render(nil, nil, cfg); err == nil || !strings.Contains(err.Error(), "localhostNodePorts") {
		t.Errorf("1.36 with the localhost gate: %v", err)
	}
	cfg = upstreamConfig("IPv5")
	if _, err := Render(nil, nil, cfg); err == nil || !strings.Contains(err.Error(), `family: "IPv5"`) {
		t.Errorf("family IPv5: %v", err)
	}
}
