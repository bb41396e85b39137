package dns

import (
	"testing"

	mdns "github.com/miekg/dns"
)

var soa = soaLine("cluster.local.", 5)

// defaultCases run against the fixture with DefaultConfig (pods disabled, no
// upstream, reverse zones in-addr.arpa and ip6.arpa). Each row of the
// reference's NXDOMAIN/NODATA table (§2.7) is marked "§2.7".
var defaultCases = []dnsCase{
	// ClusterIP services: A/AAAA.
	{qname: "svc1.testns.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{"svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"}},
	// §2.7: a ClusterIP service with no endpoints still answers A.
	{qname: "svcempty.testns.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{"svcempty.testns.svc.cluster.local. 5 IN A 10.0.0.2"}},
	// §2.7: existing name, type absent (AAAA of a v4-only service) → NODATA.
	{qname: "svc1.testns.svc.cluster.local.", qtype: mdns.TypeAAAA, ns: []string{soa}},
	{qname: "svc6.testns.svc.cluster.local.", qtype: mdns.TypeAAAA,
		answer: []string{"svc6.testns.svc.cluster.local. 5 IN AAAA 1234:abcd::1"}},
	{qname: "svc6.testns.svc.cluster.local.", qtype: mdns.TypeA, ns: []string{soa}},
	{qname: "svc-dual-stack.testns.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{"svc-dual-stack.testns.svc.cluster.local. 5 IN A 10.0.0.3"}},
	{qname: "svc-dual-stack.testns.svc.cluster.local.", qtype: mdns.TypeAAAA,
		answer: []string{"svc-dual-stack.testns.svc.cluster.local. 5 IN AAAA 10::3"}},
	// §2.7: no such service → NXDOMAIN.
	{qname: "svc0.testns.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "svc0.testns.svc.cluster.local.", qtype: mdns.TypeAAAA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	// §2.7: a namespace that does not exist → NXDOMAIN.
	{qname: "svc1.nsnoexist.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "nsnoexist.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	// A namespace known only through its objects and a built-in one exist.
	{qname: "kube-system.svc.cluster.local.", qtype: mdns.TypeA, ns: []string{soa}},
	{qname: "kube-public.svc.cluster.local.", qtype: mdns.TypeA, ns: []string{soa}},
	{qname: "kube-dns.kube-system.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{"kube-dns.kube-system.svc.cluster.local. 5 IN A 10.96.0.10"}},

	// SRV on ClusterIP services.
	{qname: "svc1.testns.svc.cluster.local.", qtype: mdns.TypeSRV,
		answer: []string{"svc1.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc1.testns.svc.cluster.local."},
		extra:  []string{"svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"}},
	{qname: "_http._tcp.svc1.testns.svc.cluster.local.", qtype: mdns.TypeSRV,
		answer: []string{"_http._tcp.svc1.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc1.testns.svc.cluster.local."},
		extra:  []string{"svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"}},
	// Port and protocol labels match case-insensitively, underscores optional.
	{qname: "_HTTP._TCP.svc1.testns.svc.cluster.local.", qtype: mdns.TypeSRV,
		answer: []string{"_HTTP._TCP.svc1.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc1.testns.svc.cluster.local."},
		extra:  []string{"svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"}},
	{qname: "http.tcp.svc1.testns.svc.cluster.local.", qtype: mdns.TypeSRV,
		answer: []string{"http.tcp.svc1.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc1.testns.svc.cluster.local."},
		extra:  []string{"svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"}},
	// §2.7: SRV for a port name or protocol the service lacks → NXDOMAIN.
	{qname: "_https._tcp.svc1.testns.svc.cluster.local.", qtype: mdns.TypeSRV, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "_http._udp.svc1.testns.svc.cluster.local.", qtype: mdns.TypeSRV, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "_http._tcp.svc1.testns.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{"_http._tcp.svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"}},
	{qname: "svcempty.testns.svc.cluster.local.", qtype: mdns.TypeSRV,
		answer: []string{"svcempty.testns.svc.cluster.local. 5 IN SRV 0 100 80 svcempty.testns.svc.cluster.local."},
		extra:  []string{"svcempty.testns.svc.cluster.local. 5 IN A 10.0.0.2"}},
	// The bare service name lists every port; weights over both results.
	{qname: "multiport.testns.svc.cluster.local.", qtype: mdns.TypeSRV,
		answer: []string{
			"multiport.testns.svc.cluster.local. 5 IN SRV 0 50 80 multiport.testns.svc.cluster.local.",
			"multiport.testns.svc.cluster.local. 5 IN SRV 0 50 53 multiport.testns.svc.cluster.local.",
		},
		extra: []string{"multiport.testns.svc.cluster.local. 5 IN A 10.0.0.4"}},
	{qname: "_dns._udp.multiport.testns.svc.cluster.local.", qtype: mdns.TypeSRV,
		answer: []string{"_dns._udp.multiport.testns.svc.cluster.local. 5 IN SRV 0 100 53 multiport.testns.svc.cluster.local."},
		extra:  []string{"multiport.testns.svc.cluster.local. 5 IN A 10.0.0.4"}},
	{qname: "_dns._tcp.multiport.testns.svc.cluster.local.", qtype: mdns.TypeSRV, rcode: mdns.RcodeNameError, ns: []string{soa}},
	// Unnamed ports appear only on the bare name (NodePort is a ClusterIP too).
	{qname: "unnamed.testns.svc.cluster.local.", qtype: mdns.TypeSRV,
		answer: []string{"unnamed.testns.svc.cluster.local. 5 IN SRV 0 100 8080 unnamed.testns.svc.cluster.local."},
		extra:  []string{"unnamed.testns.svc.cluster.local. 5 IN A 10.0.0.5"}},
	{qname: "_http._tcp.unnamed.testns.svc.cluster.local.", qtype: mdns.TypeSRV, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "svc-dual-stack.testns.svc.cluster.local.", qtype: mdns.TypeSRV,
		answer: []string{"svc-dual-stack.testns.svc.cluster.local. 5 IN SRV 0 50 80 svc-dual-stack.testns.svc.cluster.local."},
		extra: []string{
			"svc-dual-stack.testns.svc.cluster.local. 5 IN A 10.0.0.3",
			"svc-dual-stack.testns.svc.cluster.local. 5 IN AAAA 10::3",
		}},
	{qname: "_http._tcp.svc6.testns.svc.cluster.local.", qtype: mdns.TypeSRV,
		answer: []string{"_http._tcp.svc6.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc6.testns.svc.cluster.local."},
		extra:  []string{"svc6.testns.svc.cluster.local. 5 IN AAAA 1234:abcd::1"}},

	// Headless services: one record per ready endpoint (not-ready and
	// terminating ones are left out).
	{qname: "hdls1.testns.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{
			"hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.2",
			"hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.3",
			"hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.4",
			"hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.5",
		}},
	{qname: "hdls1.testns.svc.cluster.local.", qtype: mdns.TypeAAAA,
		answer: []string{
			"hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::1",
			"hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::2",
		}},
	{qname: "172-0-0-2.hdls1.testns.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{"172-0-0-2.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.2"}},
	{qname: "dup-name.hdls1.testns.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{
			"dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.4",
			"dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.5",
		}},
	{qname: "5678-abcd--1.hdls1.testns.svc.cluster.local.", qtype: mdns.TypeAAAA,
		answer: []string{"5678-abcd--1.hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::1"}},
	{qname: "5678-abcd--1.hdls1.testns.svc.cluster.local.", qtype: mdns.TypeA, ns: []string{soa}},
	// §2.7: an unknown endpoint label (or a not-ready one) → NXDOMAIN.
	{qname: "bogusendpoint.hdls1.testns.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "not-ready.hdls1.testns.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "172-0-0-7.hdls1.testns.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "bogusendpoint.svc0.testns.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	// Six address results, five distinct (target, port): weight 16, all glue.
	{qname: "_http._tcp.hdls1.testns.svc.cluster.local.", qtype: mdns.TypeSRV,
		answer: []string{
			"_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 172-0-0-2.hdls1.testns.svc.cluster.local.",
			"_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 172-0-0-3.hdls1.testns.svc.cluster.local.",
			"_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 dup-name.hdls1.testns.svc.cluster.local.",
			"_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 5678-abcd--1.hdls1.testns.svc.cluster.local.",
			"_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 5678-abcd--2.hdls1.testns.svc.cluster.local.",
		},
		extra: []string{
			"172-0-0-2.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.2",
			"172-0-0-3.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.3",
			"dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.4",
			"dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.5",
			"5678-abcd--1.hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::1",
			"5678-abcd--2.hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::2",
		}},
	// Portless headless: addresses, no SRV (NODATA).
	{qname: "hdlsprtls.testns.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{"hdlsprtls.testns.svc.cluster.local. 5 IN A 172.0.0.20"}},
	{qname: "172-0-0-20.hdlsprtls.testns.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{"172-0-0-20.hdlsprtls.testns.svc.cluster.local. 5 IN A 172.0.0.20"}},
	{qname: "hdlsprtls.testns.svc.cluster.local.", qtype: mdns.TypeSRV, ns: []string{soa}},
	// §2.7: headless service with zero ready endpoints → NXDOMAIN.
	{qname: "hdlsnotready.testns.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "hdlsnotready.testns.svc.cluster.local.", qtype: mdns.TypeSRV, rcode: mdns.RcodeNameError, ns: []string{soa}},
	// StatefulSet-style hostnames; SRV carries the endpoint port.
	{qname: "web-0.web.testns.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{"web-0.web.testns.svc.cluster.local. 5 IN A 172.0.1.10"}},
	{qname: "_http._tcp.web.testns.svc.cluster.local.", qtype: mdns.TypeSRV,
		answer: []string{
			"_http._tcp.web.testns.svc.cluster.local. 5 IN SRV 0 50 8080 web-0.web.testns.svc.cluster.local.",
			"_http._tcp.web.testns.svc.cluster.local. 5 IN SRV 0 50 8080 web-1.web.testns.svc.cluster.local.",
		},
		extra: []string{
			"web-0.web.testns.svc.cluster.local. 5 IN A 172.0.1.10",
			"web-1.web.testns.svc.cluster.local. 5 IN A 172.0.1.11",
		}},
	// Endpoint names under a ClusterIP service (CoreDNS extension).
	{qname: "ep1a.svc1.testns.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{"ep1a.svc1.testns.svc.cluster.local. 5 IN A 172.0.0.1"}},
	// Legacy v1 Endpoints (no slice): ready addresses only.
	{qname: "legacy.testns.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{"legacy.testns.svc.cluster.local. 5 IN A 172.0.2.1"}},
	{qname: "_db._tcp.legacy.testns.svc.cluster.local.", qtype: mdns.TypeSRV,
		answer: []string{"_db._tcp.legacy.testns.svc.cluster.local. 5 IN SRV 0 100 5432 legacy-0.legacy.testns.svc.cluster.local."},
		extra:  []string{"legacy-0.legacy.testns.svc.cluster.local. 5 IN A 172.0.2.1"}},
	{qname: "legacy-1.legacy.testns.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},

	// ExternalName.
	{qname: "external.testns.svc.cluster.local.", qtype: mdns.TypeCNAME,
		answer: []string{"external.testns.svc.cluster.local. 5 IN CNAME ext.interwebs.test."}},
	// Without an upstream the out-of-zone target is not chased.
	{qname: "external.testns.svc.cluster.local.", qtype: mdns.TypeA,
		answer: []string{"external.testns.svc.cluster.local. 5 IN CNAME ext.interwebs.test."}},
	{qname: "external-to-service.testns.svc.cluster.local.", qtype: mdns.TypeA, cnameOrder: true,
		answer: []string{
			"external-to-service.testns.svc.cluster.local. 5 IN CNAME svc1.testns.svc.cluster.local.",
			"svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1",
		}},
	// The in-zone target has no AAAA: the CNAME is dropped too (CoreDNS).
	{qname: "external-to-service.testns.svc.cluster.local.", qtype: mdns.TypeAAAA, ns: []string{soa}},
	{qname: "external-to-nothing.testns.svc.cluster.local.", qtype: mdns.TypeA, ns: []string{soa}},
	{qname: "external-ip.testns.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "endpoint.external.testns.svc.cluster.local.", qtype: mdns.TypeCNAME, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "_http._tcp.external.testns.svc.cluster.local.", qtype: mdns.TypeSRV, rcode: mdns.RcodeNameError, ns: []string{soa}},
	// §2.7: SRV on an ExternalName → NODATA.
	{qname: "external.testns.svc.cluster.local.", qtype: mdns.TypeSRV, ns: []string{soa}},
	{qname: "svc1.testns.svc.cluster.local.", qtype: mdns.TypeCNAME, ns: []string{soa}},

	// dns-version.
	{qname: "dns-version.cluster.local.", qtype: mdns.TypeTXT,
		answer: []string{`dns-version.cluster.local. 28800 IN TXT "1.1.0"`}},
	{qname: "dns-version.cluster.local.", qtype: mdns.TypeA, ns: []string{soa}},
	// §2.7: TXT on a service → NODATA; on a missing name → NXDOMAIN.
	{qname: "svc1.testns.svc.cluster.local.", qtype: mdns.TypeTXT, ns: []string{soa}},
	{qname: "svc0.testns.svc.cluster.local.", qtype: mdns.TypeTXT, rcode: mdns.RcodeNameError, ns: []string{soa}},

	// The apex.
	{qname: "cluster.local.", qtype: mdns.TypeSOA, answer: []string{soa}},
	{qname: "cluster.local.", qtype: mdns.TypeNS,
		answer: []string{"cluster.local. 5 IN NS ns.dns.cluster.local."},
		extra:  []string{"ns.dns.cluster.local. 5 IN A 10.96.0.10"}},
	{qname: "ns.dns.cluster.local.", qtype: mdns.TypeA,
		answer: []string{"ns.dns.cluster.local. 5 IN A 10.96.0.10"}},
	{qname: "ns.dns.cluster.local.", qtype: mdns.TypeAAAA, ns: []string{soa}},
	// §2.7: <zone>, svc.<zone>, pod.<zone>, <existing-ns>.svc.<zone> → NODATA.
	{qname: "cluster.local.", qtype: mdns.TypeA, ns: []string{soa}},
	{qname: "svc.cluster.local.", qtype: mdns.TypeA, ns: []string{soa}},
	{qname: "pod.cluster.local.", qtype: mdns.TypeA, ns: []string{soa}},
	{qname: "testns.svc.cluster.local.", qtype: mdns.TypeA, ns: []string{soa}},
	{qname: "svc.cluster.local.", qtype: mdns.TypeNS, ns: []string{soa}},
	{qname: "testns.svc.cluster.local.", qtype: mdns.TypeNS, ns: []string{soa}},
	{qname: "foo.cluster.local.", qtype: mdns.TypeNS, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "foo.svc.cluster.local.", qtype: mdns.TypeNS, rcode: mdns.RcodeNameError, ns: []string{soa}},
	// §2.7: SOA on a non-apex name → NODATA (NXDOMAIN if the name is missing).
	{qname: "svc1.testns.svc.cluster.local.", qtype: mdns.TypeSOA, ns: []string{soa}},
	{qname: "svc0.testns.svc.cluster.local.", qtype: mdns.TypeSOA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	// §2.7: other qtypes decided by existence.
	{qname: "svc1.testns.svc.cluster.local.", qtype: mdns.TypeMX, ns: []string{soa}},
	{qname: "svc1.testns.svc.cluster.local.", qtype: mdns.TypeHINFO, ns: []string{soa}},
	{qname: "svc0.testns.svc.cluster.local.", qtype: mdns.TypeHINFO, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "hdls1.testns.svc.cluster.local.", qtype: mdns.TypeANY, ns: []string{soa}},
	// §2.7: a label below the zone other than svc/pod, or too many labels.
	{qname: "foo.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "svc1.testns.foo.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "a.b.c.svc1.testns.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	// What a pod's search list produces for an external name.
	{qname: "example.com.default.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "example.com.svc.cluster.local.", qtype: mdns.TypeAAAA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "example.com.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},

	// Owner names keep the query's spelling, the zone part included.
	{qname: "SVC1.TestNS.svc.Cluster.Local.", qtype: mdns.TypeA,
		answer: []string{"SVC1.TestNS.svc.Cluster.Local. 5 IN A 10.0.0.1"}},
	{qname: "svc0.testns.svc.CLUSTER.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError,
		ns: []string{soaLine("CLUSTER.local.", 5)}},
	{qname: "_http._tcp.SVC1.testns.svc.CLUSTER.local.", qtype: mdns.TypeSRV,
		answer: []string{"_http._tcp.SVC1.testns.svc.CLUSTER.local. 5 IN SRV 0 100 80 svc1.testns.svc.CLUSTER.local."},
		extra:  []string{"svc1.testns.svc.CLUSTER.local. 5 IN A 10.0.0.1"}},

	// §2.7: pods disabled → NXDOMAIN, also for the namespace.
	{qname: "10-240-0-1.podns.pod.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
	{qname: "podns.pod.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},

	// PTR: cluster IPs, endpoint IPs (IPv4 and IPv6 nibbles).
	{qname: "1.0.0.10.in-addr.arpa.", qtype: mdns.TypePTR,
		answer: []string{"1.0.0.10.in-addr.arpa. 5 IN PTR svc1.testns.svc.cluster.local."}},
	{qname: "10.0.96.10.in-addr.arpa.", qtype: mdns.TypePTR,
		answer: []string{"10.0.96.10.in-addr.arpa. 5 IN PTR kube-dns.kube-system.svc.cluster.local."}},
	{qname: "3.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.0.0.ip6.arpa.", qtype: mdns.TypePTR,
		answer: []string{"3.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.0.0.ip6.arpa. 5 IN PTR svc-dual-stack.testns.svc.cluster.local."}},
	{qname: "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.4.3.2.1.ip6.arpa.", qtype: mdns.TypePTR,
		answer: []string{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.4.3.2.1.ip6.arpa. 5 IN PTR svc6.testns.svc.cluster.local."}},
	{qname: "2.0.0.172.in-addr.arpa.", qtype: mdns.TypePTR,
		answer: []string{"2.0.0.172.in-addr.arpa. 5 IN PTR 172-0-0-2.hdls1.testns.svc.cluster.local."}},
	{qname: "4.0.0.172.in-addr.arpa.", qtype: mdns.TypePTR,
		answer: []string{"4.0.0.172.in-addr.arpa. 5 IN PTR dup-name.hdls1.testns.svc.cluster.local."}},
	{qname: "2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.8.7.6.5.ip6.arpa.", qtype: mdns.TypePTR,
		answer: []string{"2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.8.7.6.5.ip6.arpa. 5 IN PTR 5678-abcd--2.hdls1.testns.svc.cluster.local."}},
	{qname: "10.1.0.172.in-addr.arpa.", qtype: mdns.TypePTR,
		answer: []string{"10.1.0.172.in-addr.arpa. 5 IN PTR web-0.web.testns.svc.cluster.local."}},
	{qname: "1.0.0.172.in-addr.arpa.", qtype: mdns.TypePTR,
		answer: []string{"1.0.0.172.in-addr.arpa. 5 IN PTR ep1a.svc1.testns.svc.cluster.local."}},
	{qname: "1.2.0.172.in-addr.arpa.", qtype: mdns.TypePTR,
		answer: []string{"1.2.0.172.in-addr.arpa. 5 IN PTR legacy-0.legacy.testns.svc.cluster.local."}},
	// One IP behind two services: one PTR per service.
	{qname: "50.0.0.172.in-addr.arpa.", qtype: mdns.TypePTR,
		answer: []string{
			"50.0.0.172.in-addr.arpa. 5 IN PTR 172-0-0-50.shared-a.testns.svc.cluster.local.",
			"50.0.0.172.in-addr.arpa. 5 IN PTR 172-0-0-50.shared-b.testns.svc.cluster.local.",
		}},
	{qname: "6.0.0.172.in-addr.arpa.", qtype: mdns.TypePTR, rcode: mdns.RcodeNameError,
		ns: []string{soaLine("in-addr.arpa.", 5)}},
	{qname: "8.8.8.8.in-addr.arpa.", qtype: mdns.TypePTR, rcode: mdns.RcodeNameError,
		ns: []string{soaLine("in-addr.arpa.", 5)}},
	{qname: "0.10.in-addr.arpa.", qtype: mdns.TypePTR, rcode: mdns.RcodeNameError,
		ns: []string{soaLine("in-addr.arpa.", 5)}},
	{qname: "in-addr.arpa.", qtype: mdns.TypeSOA, answer: []string{soaLine("in-addr.arpa.", 5)}},
	{qname: "1.0.0.10.in-addr.arpa.", qtype: mdns.TypeA, ns: []string{soaLine("in-addr.arpa.", 5)}},
	{qname: "svc1.testns.svc.cluster.local.", qtype: mdns.TypePTR, ns: []string{soa}},
}

func TestServeDefaultConfig(t *testing.T) {
	s := newTestServer(t, nil)
	udp, tcp := listen(t, s)
	for i, c := range defaultCases {
		// Every case over UDP; every other one over TCP as well.
		check(t, c, exchange(t, "udp", udp, c.msg()))
		if i%2 == 0 {
			check(t, c, exchange(t, "tcp", tcp, c.msg()))
		}
	}
}

func TestServePodModes(t *testing.T) {
	for _, tc := range []struct {
		mode  PodMode
		cases []dnsCase
	}{
		{PodsInsecure, []dnsCase{
			{qname: "10-240-0-1.podns.pod.cluster.local.", qtype: mdns.TypeA,
				answer: []string{"10-240-0-1.podns.pod.cluster.local. 5 IN A 10.240.0.1"}},
			// Any IP in an existing namespace, no pod needed.
			{qname: "1-2-3-4.podns.pod.cluster.local.", qtype: mdns.TypeA,
				answer: []string{"1-2-3-4.podns.pod.cluster.local. 5 IN A 1.2.3.4"}},
			{qname: "1-2-3-4.testns.pod.cluster.local.", qtype: mdns.TypeA,
				answer: []string{"1-2-3-4.testns.pod.cluster.local. 5 IN A 1.2.3.4"}},
			{qname: "fd00--1.podns.pod.cluster.local.", qtype: mdns.TypeAAAA,
				answer: []string{"fd00--1.podns.pod.cluster.local. 5 IN AAAA fd00::1"}},
			{qname: "fd00--1.podns.pod.cluster.local.", qtype: mdns.TypeA, ns: []string{soa}},
			{qname: "1-2-3-4.nsnoexist.pod.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
			{qname: "blah.podns.pod.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
			{qname: "1-2-3.podns.pod.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
			{qname: "podns.pod.cluster.local.", qtype: mdns.TypeA, ns: []string{soa}},
			{qname: "nsnoexist.pod.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
			{qname: "pod.cluster.local.", qtype: mdns.TypeA, ns: []string{soa}},
		}},
		{PodsVerified, []dnsCase{
			{qname: "10-240-0-1.podns.pod.cluster.local.", qtype: mdns.TypeA,
				answer: []string{"10-240-0-1.podns.pod.cluster.local. 5 IN A 10.240.0.1"}},
			{qname: "fd00--1.podns.pod.cluster.local.", qtype: mdns.TypeAAAA,
				answer: []string{"fd00--1.podns.pod.cluster.local. 5 IN AAAA fd00::1"}},
			// §2.7: no such pod → NXDOMAIN (wrong namespace, unknown IP).
			{qname: "10-240-0-1.testns.pod.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
			{qname: "1-2-3-4.podns.pod.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError, ns: []string{soa}},
			{qname: "172-0-1-10.testns.pod.cluster.local.", qtype: mdns.TypeA,
				answer: []string{"172-0-1-10.testns.pod.cluster.local. 5 IN A 172.0.1.10"}},
			{qname: "podns.pod.cluster.local.", qtype: mdns.TypeA, ns: []string{soa}},
		}},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			s := newTestServer(t, func(c *Config) { c.Pods = tc.mode })
			udp, _ := listen(t, s)
			for _, c := range tc.cases {
				check(t, c, exchange(t, "udp", udp, c.msg()))
			}
		})
	}
}

func TestServeReverseZones(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.Zones = []string{"cluster.local", "0.10.in-addr.arpa"} })
	udp, _ := listen(t, s)
	rev := soaLine("0.10.in-addr.arpa.", 5)
	for _, c := range []dnsCase{
		{qname: "1.0.0.10.in-addr.arpa.", qtype: mdns.TypePTR,
			answer: []string{"1.0.0.10.in-addr.arpa. 5 IN PTR svc1.testns.svc.cluster.local."}},
		// The SOA of a reverse miss names the most specific zone.
		{qname: "99.0.10.in-addr.arpa.", qtype: mdns.TypePTR, rcode: mdns.RcodeNameError, ns: []string{rev}},
		{qname: "0.10.in-addr.arpa.", qtype: mdns.TypeSOA, answer: []string{rev}},
		{qname: "0.10.in-addr.arpa.", qtype: mdns.TypeNS,
			answer: []string{"0.10.in-addr.arpa. 5 IN NS ns.dns.0.10.in-addr.arpa."},
			extra:  []string{"ns.dns.0.10.in-addr.arpa. 5 IN A 10.96.0.10"}},
	} {
		check(t, c, exchange(t, "udp", udp, c.msg()))
	}
	// 172.0.0.2 is outside every served zone now: REFUSED, no upstream.
	m := new(mdns.Msg)
	m.SetQuestion("2.0.0.172.in-addr.arpa.", mdns.TypePTR)
	resp := exchange(t, "udp", udp, m)
	if resp.Rcode != mdns.RcodeRefused || resp.Authoritative || len(resp.Answer) != 0 {
		t.Errorf("out-of-zone PTR: got %s AA=%v answers=%d, want REFUSED, not authoritative, no answer",
			mdns.RcodeToString[resp.Rcode], resp.Authoritative, len(resp.Answer))
	}
}

func TestServeTTL(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.TTL = 600 })
	udp, _ := listen(t, s)
	for _, c := range []dnsCase{
		{qname: "svc1.testns.svc.cluster.local.", qtype: mdns.TypeA,
			answer: []string{"svc1.testns.svc.cluster.local. 600 IN A 10.0.0.1"}},
		// SOA TTL is capped at 300; its minimum field is the configured TTL.
		{qname: "svc0.testns.svc.cluster.local.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError,
			ns: []string{soaLine("cluster.local.", 600)}},
		{qname: "dns-version.cluster.local.", qtype: mdns.TypeTXT,
			answer: []string{`dns-version.cluster.local. 28800 IN TXT "1.1.0"`}},
	} {
		check(t, c, exchange(t, "udp", udp, c.msg()))
	}
}

func TestServeOtherForwardZone(t *testing.T) {
	// A second forward zone is served like the cluster domain; PTR targets
	// stay in the first.
	s := newTestServer(t, func(c *Config) { c.Zones = []string{"cluster.local", "example.internal"} })
	udp, _ := listen(t, s)
	for _, c := range []dnsCase{
		{qname: "svc1.testns.svc.example.internal.", qtype: mdns.TypeA,
			answer: []string{"svc1.testns.svc.example.internal. 5 IN A 10.0.0.1"}},
		{qname: "svc0.testns.svc.example.internal.", qtype: mdns.TypeA, rcode: mdns.RcodeNameError,
			ns: []string{soaLine("example.internal.", 5)}},
	} {
		check(t, c, exchange(t, "udp", udp, c.msg()))
	}
}
