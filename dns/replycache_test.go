package dns

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// rawExchangeNet sends one packed query over UDP or TCP (length-prefixed, one
// connection per query: miekg/dns's server closes a TCP connection after 128) and
// returns the reply's bytes.
func rawExchangeNet(t *testing.T, network, addr string, q []byte) []byte {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if network == "tcp" {
		q = append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)
	}
	if _, err := c.Write(q); err != nil {
		t.Fatal(err)
	}
	if network == "tcp" {
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := make([]byte, 65535)
	n, err := c.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// TestReplyCacheSameBytes: over real sockets (ServeDNS, where packed replies are
// cached), every query of a matrix gets, the first time and again, the very bytes Handle
// gives for it (packed with the query's ID): the question's spelling, RD, CD, EDNS0
// presence, size, DO and options, the transport and the client's right to recurse all
// as without a cache. Answers through the upstream are not cached: the upstream is
// asked on every repeat.
func TestReplyCacheSameBytes(t *testing.T) {
	var asked atomic.Int64
	up := UpstreamFunc(func(_ context.Context, req *mdns.Msg, _ string) (*mdns.Msg, error) {
		n := asked.Add(1)
		m := new(mdns.Msg)
		m.SetReply(req)
		if req.Question[0].Qtype == mdns.TypeA {
			rr, _ := mdns.NewRR(fmt.Sprintf("%s 30 IN A 192.0.2.%d", req.Question[0].Name, n%250+1))
			m.Answer = append(m.Answer, rr)
		}
		return m, nil
	})
	configs := []struct {
		name   string
		mutate func(*Config)
		big    bool // a headless service of 80 endpoints (bigHeadless: truncated over UDP)
	}{
		{"no upstream", nil, false},
		{"a reply larger than 512 bytes", nil, true},
		{"upstream, loopback may recurse", func(c *Config) {
			c.Upstream = up
			c.AllowRecursion = NewRecursionACL(netip.MustParsePrefix("127.0.0.0/8"))
		}, false},
		{"upstream, nobody may recurse", func(c *Config) {
			c.Upstream = up
			c.AllowRecursion = NewRecursionACL()
		}, false},
	}
	type query struct {
		name     string
		qtype    uint16
		upstream string // "": from the index; "recursion": through the upstream when the client may recurse; "chase": whenever there is one (ExternalName targets are answered to anyone)
	}
	var queries []query
	for _, q := range perfQueries {
		queries = append(queries, query{q.name, q.qtype, ""})
	}
	queries = append(queries,
		query{"SVC1.TestNS.svc.Cluster.Local.", mdns.TypeA, ""},
		query{"external.testns.svc.cluster.local.", mdns.TypeA, "chase"},
		query{"example.org.", mdns.TypeA, "recursion"},
		query{"4.3.2.1.in-addr.arpa.", mdns.TypePTR, "recursion"},
		query{"hdls1.testns.svc.cluster.local.", mdns.TypeANY, ""},
		query{"_http._tcp.web.testns.svc.cluster.local.", mdns.TypeSRV, ""},
		query{"nope.testns.svc.cluster.local.", mdns.TypeA, ""},
		query{"big.default.svc.cluster.local.", mdns.TypeA, ""},
	)
	type edns struct {
		on     bool
		size   uint16
		do     bool
		cookie bool
	}
	ednss := []edns{{}, {true, 1232, false, false}, {true, 4096, true, false}, {true, 4096, false, false}, {true, 100, false, false}, {true, 1232, false, true}}
	for _, cfg := range configs {
		t.Run(cfg.name, func(t *testing.T) {
			s := newTestServer(t, cfg.mutate)
			if cfg.big {
				var err error
				if s, err = New(NewStaticSource(bigHeadless(80)...), DefaultConfig()); err != nil {
					t.Fatal(err)
				}
			}
			udp, tcp := listen(t, s)
			addrs := map[string]string{"udp": udp, "tcp": tcp}
			recurse := cfg.name == "upstream, loopback may recurse"
			hasUpstream := cfg.mutate != nil
			ctx := withClient(context.Background(), netip.MustParseAddr("127.0.0.1"))
			id := uint16(0)
			for _, q := range queries {
				for _, e := range ednss {
					for _, bits := range []struct{ rd, cd bool }{{true, false}, {false, true}} {
						for _, network := range []string{"udp", "tcp"} {
							m := new(mdns.Msg)
							m.SetQuestion(q.name, q.qtype)
							m.RecursionDesired, m.CheckingDisabled = bits.rd, bits.cd
							if e.on {
								m.SetEdns0(e.size, e.do)
								if e.cookie {
									o := m.IsEdns0()
									o.Option = append(o.Option, &mdns.EDNS0_COOKIE{Code: mdns.EDNS0COOKIE, Cookie: "0102030405060708"})
								}
							}
							for try := 0; try < 2; try++ {
								id++
								m.Id = id
								wire, err := m.Pack()
								if err != nil {
									t.Fatal(err)
								}
								before := asked.Load()
								got := rawExchangeNet(t, network, addrs[network], wire)
								viaUpstream := q.upstream == "chase" && hasUpstream || q.upstream == "recursion" && recurse
								if viaUpstream && asked.Load() == before {
									t.Errorf("%s %s over %s (try %d): the upstream was not asked: a reply through the upstream was cached", q.name, mdns.TypeToString[q.qtype], network, try)
								}
								if viaUpstream {
									continue // the upstream's answer changes on each exchange
								}
								want, err := s.Handle(ctx, m.Copy(), network).Pack()
								if err != nil {
									t.Fatal(err)
								}
								if !bytes.Equal(got, want) {
									g := new(mdns.Msg)
									_ = g.Unpack(got)
									w := new(mdns.Msg)
									_ = w.Unpack(want)
									t.Fatalf("%s %s over %s, EDNS %+v, RD %v CD %v (try %d): got\n%v\nwant\n%v", q.name, mdns.TypeToString[q.qtype], network, e, bits.rd, bits.cd, try, g, w)
								}
							}
						}
					}
				}
			}
		})
	}
}

// TestReplyCacheFollowsChanges: a change to the Source rebuilds the index and with it
// the cache; the next query gets the new answer.
func TestReplyCacheFollowsChanges(t *testing.T) {
	svc := func(ip string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec:       corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
		}
	}
	src := NewStaticSource(svc("10.96.0.20"))
	s, err := New(src, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	udp, _ := listen(t, s)
	ask := func() string {
		m := new(mdns.Msg)
		m.SetQuestion("web.default.svc.cluster.local.", mdns.TypeA)
		r := exchange(t, "udp", udp, m)
		if len(r.Answer) != 1 {
			t.Fatalf("answer %v", r.Answer)
		}
		return r.Answer[0].(*mdns.A).A.String()
	}
	for i := 0; i < 2; i++ {
		if got := ask(); got != "10.96.0.20" {
			t.Fatalf("query %d: %s, want 10.96.0.20", i, got)
		}
	}
	src.Set(svc("10.96.0.21"))
	if got := ask(); got != "10.96.0.21" {
		t.Fatalf("after the change: %s, want 10.96.0.21 (a cached reply outlived its index)", got)
	}
}

// TestReplyCacheBounded: one index caches at most maxCachedReplies replies of at most
// maxCachedReplySize bytes; the rest are packed per query.
func TestReplyCacheBounded(t *testing.T) {
	var c replyCache
	for i := 0; i < int(maxCachedReplies)+10; i++ {
		c.put(replyKey{name: fmt.Sprintf("n%d.", i), qtype: mdns.TypeA}, []byte{1})
	}
	if n := c.n.Load(); n != maxCachedReplies {
		t.Fatalf("%d replies cached, want %d", n, maxCachedReplies)
	}
	if _, ok := c.get(replyKey{name: fmt.Sprintf("n%d.", maxCachedReplies+5), qtype: mdns.TypeA}); ok {
		t.Fatal("a reply past the bound was cached")
	}
	var d replyCache
	d.put(replyKey{name: "big."}, make([]byte, maxCachedReplySize+1))
	if _, ok := d.get(replyKey{name: "big."}); ok {
		t.Fatal("a reply larger than maxCachedReplySize was cached")
	}
}
