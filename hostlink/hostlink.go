// Package hostlink opens a running simulated cluster (scenario.Live) to real programs
// on this machine, as `clusterlab up` does:
//
//	curl, a browser, a driver ──▶ SOCKS5 (RFC 1928) ─┐
//	curl -x, https_proxy ───────▶ HTTP proxy ────────┼─▶ Dialer: a place's netsim.Net
//	dig, resolvectl ────────────▶ DNS on a port ─────┘     (default: the external host
//	                                                         "local", routing the service
//	                                                         network through a node)
//	                                                              │ TCP/UDP in netstack
//	                                                              ▼
//	                                        the node's datapath: kube-proxy's rules,
//	                                        conntrack, masquerade ──▶ a pod's server
//
// Every connection a proxy makes starts at a place in the cluster (Config.From: a pod,
// a node's host network, or an external host), so the proxy mode decides where it goes
// and what source address the backend sees, exactly as for simulated clients; names are
// resolved with the place's resolver (curl --socks5-hostname, or a host name in an HTTP
// request). The DNS port relays queries from the same place to the cluster's kube-dns
// Service. Everything listens on loopback by default; Close stops it all and closes
// every connection.
package hostlink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/clusterlab/clusterlab/scenario"
)

// DefaultHostName is the external host that stands for this machine when Config.From
// is empty.
const DefaultHostName = "local"

// Config says what Open opens. Empty addresses are not opened.
type Config struct {
	// From is where proxied connections start: pod:NAMESPACE/NAME, node:NAME or
	// external:NAME. Empty: external:local, a host Open adds (see scenario.Live.AddHost).
	From string
	// Via is the node the added host routes the service network through (default the
	// first node).
	Via string
	// DNS is the address (IP:PORT) the cluster DNS is served on.
	DNS string
	// SOCKS is the address of the SOCKS5 proxy.
	SOCKS string
	// HTTPProxy is the address of the HTTP proxy (CONNECT and absolute-URI requests).
	HTTPProxy string
	// Log receives a line per failed connection or query; nil: none.
	Log io.Writer
}

// Link is what Open opened.
type Link struct {
	live   *scenario.Live
	from   string
	ctx    context.Context
	cancel context.CancelFunc
	logf   func(string, ...any)

	mu      sync.Mutex
	closing bool
	closers []io.Closer
	conns   map[net.Conn]bool
	wg      sync.WaitGroup

	opened []string
	dnsSrv netip.AddrPort
	// DNSAddr, SOCKSAddr and HTTPAddr are the addresses bound (a port 0 chosen).
	DNSAddr, SOCKSAddr, HTTPAddr netip.AddrPort
}

// Open opens what cfg asks for on l.
func Open(l *scenario.Live, cfg Config) (k *Link, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	k = &Link{live: l, ctx: ctx, cancel: cancel, conns: map[net.Conn]bool{}, logf: func(string, ...any) {}}
	if cfg.Log != nil {
		var mu sync.Mutex
		k.logf = func(format string, args ...any) {
			mu.Lock()
			fmt.Fprintf(cfg.Log, format+"\n", args...)
			mu.Unlock()
		}
	}
	link := k
	defer func() {
		if err != nil {
			link.Close() // k is nil here: the error returns set it
			k = nil
		}
	}()
	k.from = cfg.From
	if k.from == "" {
		if _, err := l.AddHost(scenario.HostConfig{Name: DefaultHostName, Via: cfg.Via}); err != nil {
			return nil, fmt.Errorf("adding the host %s: %w", DefaultHostName, err)
		}
		k.from = "external:" + DefaultHostName
	}
	n, err := l.Net(k.from)
	if err != nil {
		return nil, fmt.Errorf("--from %s: %w", k.from, err)
	}
	dial := Dialer(n.DialContext)
	if cfg.DNS != "" {
		if err := k.openDNS(cfg.DNS, dial); err != nil {
			return nil, err
		}
	}
	if cfg.SOCKS != "" {
		ln, err := net.Listen("tcp", cfg.SOCKS)
		if err != nil {
			return nil, fmt.Errorf("--socks: %w", err)
		}
		k.SOCKSAddr = k.addListener(ln)
		k.acceptLoop(ln, func(c net.Conn) { serveSOCKS(ctx, c, dial, k.logf) })
		k.opened = append(k.opened, fmt.Sprintf("SOCKS5 proxy on %s, connections from %s:  curl --socks5-hostname %s http://SERVICE.NAMESPACE.svc.cluster.local/", k.SOCKSAddr, k.from, k.SOCKSAddr))
	}
	if cfg.HTTPProxy != "" {
		ln, err := net.Listen("tcp", cfg.HTTPProxy)
		if err != nil {
			return nil, fmt.Errorf("--http-proxy: %w", err)
		}
		k.HTTPAddr = k.addListener(ln)
		hp := newHTTPProxy(dial, k.logf, k.trackConn)
		srv := &http.Server{Handler: hp, ReadHeaderTimeout: 30 * time.Second, ErrorLog: nil}
		k.mu.Lock()
		k.closers = append(k.closers, closerFunc(func() error {
			hp.rp.Transport.(*http.Transport).CloseIdleConnections()
			return srv.Close()
		}))
		k.mu.Unlock()
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			srv.Serve(ln)
		}()
		k.opened = append(k.opened, fmt.Sprintf("HTTP proxy on %s, connections from %s:  curl -x http://%s http://SERVICE.NAMESPACE.svc.cluster.local/", k.HTTPAddr, k.from, k.HTTPAddr))
	}
	return k, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// From is the place proxied connections start from.
func (k *Link) From() string { return k.from }

// Opened describes what is open, a line each, with how to use it.
func (k *Link) Opened() []string { return append([]string(nil), k.opened...) }

func (k *Link) openDNS(addr string, dial Dialer) error {
	mode, server := k.live.DNS()
	if mode != "kube-dns" {
		k.opened = append(k.opened, fmt.Sprintf("DNS not served: the scenario's cluster DNS is %s (kube-dns is what can be asked over the network); the proxies still resolve names", mode))
		return nil
	}
	k.dnsSrv = netip.AddrPortFrom(server, 53)
	f := &dnsForwarder{dial: dial, server: k.dnsSrv, logf: k.logf}
	pc, ln, bound, err := listenUDPTCP(addr, net.Listen)
	if err != nil {
		return err
	}
	k.mu.Lock()
	k.closers = append(k.closers, pc)
	k.mu.Unlock()
	k.addListener(ln)
	k.DNSAddr = bound
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		f.serveUDP(k.ctx, pc, k.spawn)
	}()
	k.acceptLoop(ln, func(c net.Conn) { f.serveTCPConn(k.ctx, c) })
	line := fmt.Sprintf("DNS on %s (udp, tcp), asking kube-dns at %s from %s:  dig @%s -p %d my-service.default.svc.cluster.local", bound, k.dnsSrv, k.from, bound.Addr(), bound.Port())
	if bound.Port() == 53 {
		line += fmt.Sprintf("; resolv.conf: nameserver %s + search default.svc.cluster.local svc.cluster.local cluster.local", bound.Addr())
	} else {
		line += fmt.Sprintf("; with systemd-resolved: resolvectl dns IFACE %s && resolvectl domain IFACE ~cluster.local (resolv.conf takes only port 53: --dns %s:53)", bound, bound.Addr())
	}
	k.opened = append(k.opened, line)
	return nil
}

// addListener registers ln for Close and returns its address.
func (k *Link) addListener(ln net.Listener) netip.AddrPort {
	k.mu.Lock()
	k.closers = append(k.closers, ln)
	k.mu.Unlock()
	a, _ := netip.ParseAddrPort(ln.Addr().String())
	return a
}

// acceptLoop serves each connection ln accepts on its own goroutine.
func (k *Link) acceptLoop(ln net.Listener, serve func(net.Conn)) {
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					continue
				}
				return
			}
			done := k.trackConn(c)
			if done == nil {
				return
			}
			if !k.spawn(func() { defer done(); serve(c) }) {
				done()
				return
			}
		}
	}()
}

// trackConn registers a connection for Close; its func unregisters it. nil: closing.
func (k *Link) trackConn(c net.Conn) func() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closing {
		c.Close()
		return func() {}
	}
	k.conns[c] = true
	return func() {
		k.mu.Lock()
		delete(k.conns, c)
		k.mu.Unlock()
	}
}

// spawn runs f on a goroutine Close waits for; false once closing.
func (k *Link) spawn(f func()) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closing {
		return false
	}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		f()
	}()
	return true
}

// Close closes every listener and connection and waits for the goroutines to end.
func (k *Link) Close() {
	k.mu.Lock()
	k.closing = true
	k.cancel()
	for _, c := range k.closers {
		c.Close()
	}
	for c := range k.conns {
		c.Close()
	}
	k.mu.Unlock()
	k.wg.Wait()
}

// listenUDPTCP binds UDP and TCP on one address (the DNS forwarder serves both). With
// port 0 the kernel picks the UDP port, and the same TCP port can be taken by someone
// else (another test package binding port 0 at the same time): pick again, up to 20
// times. listenTCP is net.Listen (a parameter so a test can refuse ports).
func listenUDPTCP(addr string, listenTCP func(network, address string) (net.Listener, error)) (net.PacketConn, net.Listener, netip.AddrPort, error) {
	_, port, _ := net.SplitHostPort(addr)
	for try := 0; ; try++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, netip.AddrPort{}, fmt.Errorf("--dns: %w", err)
		}
		bound, _ := netip.ParseAddrPort(pc.LocalAddr().String())
		ln, err := listenTCP("tcp", bound.String())
		if err == nil {
			return pc, ln, bound, nil
		}
		pc.Close()
		if port != "0" || try == 20 {
			return nil, nil, netip.AddrPort{}, fmt.Errorf("--dns (tcp): %w", err)
		}
	}
}
