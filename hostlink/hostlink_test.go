package hostlink

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"golang.org/x/net/proxy"

	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/scenario"
)

// startLive runs testdata/web.yaml in mode and opens DNS, SOCKS5 and the HTTP proxy
// from `from` on loopback ports the kernel picks.
func startLive(t *testing.T, file, mode, from string) (*scenario.Live, *Link) {
	t.Helper()
	s, err := scenario.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	live, err := scenario.Start(s, scenario.Options{Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(live.Close)
	var log strings.Builder
	k, err := Open(live, Config{From: from, DNS: "127.0.0.1:0", SOCKS: "127.0.0.1:0", HTTPProxy: "127.0.0.1:0", Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		k.Close()
		if t.Failed() {
			t.Logf("log:\n%s", log.String())
		}
	})
	return live, k
}

// whoamiGet sends GET / over c (a tunnel to the web Service) and parses the answer.
func whoamiGet(c net.Conn, host string) (netsim.Whoami, error) {
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return netsim.Whoami{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return netsim.Whoami{}, err
	}
	return netsim.ParseWhoami(string(body))
}

func httpWhoami(client *http.Client, u string) (netsim.Whoami, error) {
	resp, err := client.Get(u)
	if err != nil {
		return netsim.Whoami{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return netsim.Whoami{}, err
	}
	if resp.StatusCode != 200 {
		return netsim.Whoami{}, fmt.Errorf("status %s: %s", resp.Status, body)
	}
	return netsim.ParseWhoami(string(body))
}

// checkSeen checks who answered and the source address it saw: the client pod's own
// address when the connection starts at the pod (no masquerade for a pod's traffic to a
// ClusterIP), a node's address when it starts at the external host (kube-proxy
// masquerades traffic from outside the cluster CIDR) or in the userspace mode (the
// node's proxy opens the connection to the backend).
func checkSeen(t *testing.T, live *scenario.Live, mode, from string, w netsim.Whoami) {
	t.Helper()
	if !strings.HasPrefix(w.Pod, "default/web-") {
		t.Errorf("answered by %q, want a default/web-* pod", w.Pod)
	}
	ap, err := netip.ParseAddrPort(w.Client)
	if err != nil {
		t.Fatalf("client %q: %v", w.Client, err)
	}
	c := live.Cluster()
	if from == "pod:default/client" && mode != "userspace" {
		if want := c.Pod("default", "client").IP(); ap.Addr() != want {
			t.Errorf("the backend saw %s, want the client pod's %s (not masqueraded)", ap.Addr(), want)
		}
		return
	}
	for _, n := range c.Nodes() {
		if n.IsLocalAddr(ap.Addr()) {
			return
		}
	}
	t.Errorf("the backend saw %s, want a node's address (masqueraded)", ap.Addr())
}

func TestProxiesReachServices(t *testing.T) {
	for _, mode := range scenario.AvailableModes() {
		for _, from := range []string{"", "pod:default/client"} {
			t.Run(mode+"/"+strings.ReplaceAll(from, "/", "_"), func(t *testing.T) {
				live, k := startLive(t, "testdata/web.yaml", mode, from)
				if from == "" && k.From() != "external:local" {
					t.Errorf("From() = %q, want external:local", k.From())
				}
				from := k.From()
				clusterIP := live.Cluster().Store()
				svc, ok := clusterIP.GetService("default", "web")
				if !ok {
					t.Fatal("no Service default/web")
				}
				vip := svc.Spec.ClusterIP

				// SOCKS5 with golang.org/x/net/proxy: names go to the proxy unresolved
				// (as curl --socks5-hostname), addresses as IPv4.
				d, err := proxy.SOCKS5("tcp", k.SOCKSAddr.String(), nil, proxy.Direct)
				if err != nil {
					t.Fatal(err)
				}
				sc := &http.Client{Transport: &http.Transport{DialContext: d.(proxy.ContextDialer).DialContext}, Timeout: 30 * time.Second}
				for _, u := range []string{"http://web.default.svc.cluster.local/", "http://web/", "http://" + vip + "/"} {
					w, err := httpWhoami(sc, u)
					if err != nil {
						t.Fatalf("socks5 %s: %v", u, err)
					}
					checkSeen(t, live, mode, from, w)
				}
				// No rule for port 81: refused (IPVS: the VIP is local and nothing listens)
				// or dropped (iptables, nftables); either way no connection.
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				if _, err := d.(proxy.ContextDialer).DialContext(ctx, "tcp", vip+":81"); err == nil {
					t.Errorf("socks5 to %s:81 (no such port) connected", vip)
				}
				if _, err := d.(proxy.ContextDialer).DialContext(context.Background(), "tcp", "nosuch.default.svc.cluster.local:80"); err == nil {
					t.Errorf("socks5 to a name that does not resolve connected")
				}

				// The HTTP proxy: a plain request with an absolute URI, and CONNECT.
				pu, _ := url.Parse("http://" + k.HTTPAddr.String())
				hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 30 * time.Second}
				w, err := httpWhoami(hc, "http://web.default.svc.cluster.local/")
				if err != nil {
					t.Fatalf("http proxy GET: %v", err)
				}
				checkSeen(t, live, mode, from, w)
				c, err := net.Dial("tcp", k.HTTPAddr.String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				fmt.Fprintf(c, "CONNECT %s:80 HTTP/1.1\r\nHost: %s:80\r\n\r\n", vip, vip)
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("CONNECT: %v %v", resp, err)
				}
				w, err = whoamiGet(readerConn{c, br}, vip)
				if err != nil {
					t.Fatalf("through CONNECT: %v", err)
				}
				checkSeen(t, live, mode, from, w)

				// DNS on the port, over UDP and TCP, answered by the in-cluster kube-dns.
				for _, network := range []string{"udp", "tcp"} {
					m := new(mdns.Msg)
					m.SetQuestion("web.default.svc.cluster.local.", mdns.TypeA)
					cl := &mdns.Client{Net: network, Timeout: 20 * time.Second}
					r, _, err := cl.Exchange(m, k.DNSAddr.String())
					if err != nil {
						t.Fatalf("dns over %s: %v", network, err)
					}
					if len(r.Answer) != 1 || r.Answer[0].(*mdns.A).A.String() != vip {
						t.Errorf("dns over %s: %v, want one A %s", network, r.Answer, vip)
					}
				}
			})
		}
	}
}

// readerConn reads through a bufio.Reader that may hold bytes already read.
type readerConn struct {
	net.Conn
	r *bufio.Reader
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }
