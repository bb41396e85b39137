package netsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"

	"github.com/clusterlab/clusterlab/netfilter"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// Net is the network a program inside the simulation sees: a pod's, a node's host
// network, or an external host's. It offers what package net offers (Dial, Listen,
// ListenPacket) over the owner's gVisor netstack, so standard code (net/http, TLS, DNS
// clients) runs unchanged:
//
//	srv := &http.Server{Handler: h}
//	ln, _ := pod.Net().Listen("tcp", ":8080")
//	go srv.Serve(ln)
//	resp, _ := client.Net().HTTPClient().Get("http://10.96.0.10/")
//
// Errors carry errno values as the kernel's do: errors.Is(err, syscall.ECONNREFUSED)
// holds for a refused connection. Deadlines on connections run on the wall clock (a
// gVisor limitation); use contexts and the simulation's probes to reason about time.
// Once the owner is gone (the network closed, the pod dead), its connections are
// aborted and Dial, Listen and ListenPacket fail with net.ErrClosed.
type Net struct {
	name    string
	s       *stack.Stack
	sockets *socketGate // the stack's: no new sockets once it closes
	addrs   []netip.Addr

	mu     sync.Mutex
	listen map[listenKey]int
	// srcFor picks the source address of a connection the program does not bind, as
	// the kernel's routes would (nil: netstack's choice). Node host networks have one:
	// netstack ignores IPv6 source hints, and a destination bound locally (a VIP on
	// kube-ipvs0) takes itself as the source under Linux.
	srcFor func(dst netip.Addr) netip.Addr
	// Resolver resolves names for Dial; nil means only IP literals work. The DNS
	// package installs one that walks the pod's resolv.conf search list.
	Resolver func(ctx context.Context, host string) ([]netip.Addr, error)
}

type listenKey struct {
	proto uint8
	port  uint16
}

func newNet(name string, st *netStack, addrs []netip.Addr) *Net {
	return &Net{name: name, s: st.s, sockets: &st.sockets, addrs: addrs, listen: map[listenKey]int{}}
}

// Name names the owner ("pod default/web-1", "node node-a", "external client").
func (n *Net) Name() string { return n.name }

// Addrs returns the owner's addresses.
func (n *Net) Addrs() []netip.Addr { return append([]netip.Addr(nil), n.addrs...) }

// Listening reports whether something listens on the protocol and port (any address).
func (n *Net) Listening(proto uint8, port uint16) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.listen[listenKey{proto, port}] > 0
}

func (n *Net) track(proto uint8, port uint16, delta int) {
	n.mu.Lock()
	n.listen[listenKey{proto, port}] += delta
	if n.listen[listenKey{proto, port}] <= 0 {
		delete(n.listen, listenKey{proto, port})
	}
	n.mu.Unlock()
}

// Dial connects to address on the named network ("tcp", "tcp4", "tcp6", "udp", "udp4",
// "udp6").
func (n *Net) Dial(network, address string) (net.Conn, error) {
	return n.DialContext(context.Background(), network, address)
}

// DialContext is Dial with a context.
func (n *Net) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return n.dial(ctx, network, 0, address)
}

// DialFrom is DialContext with a fixed local port (0: ephemeral), for reproducing a flow
// with a known source port.
func (n *Net) DialFrom(ctx context.Context, network string, localPort uint16, address string) (net.Conn, error) {
	return n.dial(ctx, network, localPort, address)
}

func (n *Net) resolve(ctx context.Context, network, address string) (netip.AddrPort, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad port %q", portStr)
	}
	if host == "" {
		return netip.AddrPort{}, fmt.Errorf("missing host in address %q", address)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(a.Unmap(), uint16(port)), nil
	}
	if n.Resolver == nil {
		return netip.AddrPort{}, &net.DNSError{Err: "no resolver in " + n.name, Name: host, IsNotFound: true}
	}
	addrs, err := n.Resolver(ctx, host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	want4 := network == "tcp4" || network == "udp4"
	want6 := network == "tcp6" || network == "udp6"
	for _, a := range addrs {
		if want4 && !a.Is4() || want6 && !a.Is6() {
			continue
		}
		return netip.AddrPortFrom(a, uint16(port)), nil
	}
	return netip.AddrPort{}, &net.DNSError{Err: "no suitable address", Name: host, IsNotFound: true}
}

func protoNumber(a netip.Addr) tcpip.NetworkProtocolNumber {
	if a.Is4() {
		return ipv4.ProtocolNumber
	}
	return ipv6.ProtocolNumber
}

func fullAddr(ap netip.AddrPort) tcpip.FullAddress {
	return tcpip.FullAddress{Addr: addrOf(ap.Addr()), Port: ap.Port()}
}

// source is the address a connection to dst leaves from when the program does not say
// (invalid: netstack picks).
func (n *Net) source(dst netip.Addr) netip.Addr {
	if n.srcFor == nil {
		return netip.Addr{}
	}
	return n.srcFor(dst.Unmap())
}

func (n *Net) dial(ctx context.Context, network string, localPort uint16, address string) (net.Conn, error) {
	ap, err := n.resolve(ctx, network, address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	switch network {
	case "tcp", "tcp4", "tcp6":
		return n.dialTCP(ctx, network, localPort, ap)
	case "udp", "udp4", "udp6":
		var laddr *tcpip.FullAddress
		if src := n.source(ap.Addr()); localPort != 0 || src.IsValid() {
			laddr = &tcpip.FullAddress{Port: localPort}
			if src.IsValid() {
				laddr.Addr = addrOf(src)
			}
		}
		raddr := fullAddr(ap)
		if !n.sockets.enter() {
			return nil, &net.OpError{Op: "dial", Net: network, Addr: net.UDPAddrFromAddrPort(ap), Err: net.ErrClosed}
		}
		c, err := gonet.DialUDP(n.s, laddr, &raddr, protoNumber(ap.Addr()))
		n.sockets.leave()
		if err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Addr: net.UDPAddrFromAddrPort(ap), Err: err}
		}
		return c, nil
	}
	return nil, &net.OpError{Op: "dial", Net: network, Err: net.UnknownNetworkError(network)}
}

func (n *Net) dialTCP(ctx context.Context, network string, localPort uint16, ap netip.AddrPort) (net.Conn, error) {
	var wq waiter.Queue
	entry, notify := waiter.NewChannelEntry(waiter.WritableEvents)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	ep, terr, err := n.startTCP(&wq, network, localPort, ap)
	if err != nil {
		return nil, err
	}
	if _, ok := terr.(*tcpip.ErrConnectStarted); ok {
		select {
		case <-ctx.Done():
			ep.Close()
			return nil, &net.OpError{Op: "dial", Net: network, Addr: net.TCPAddrFromAddrPort(ap), Err: ctx.Err()}
		case <-notify:
		}
		terr = ep.LastError()
	}
	if terr != nil {
		ep.Close()
		return nil, opError("dial", network, ap, "connect", terr)
	}
	return newTCPConn(gonet.NewTCPConn(&wq, ep)), nil
}

// startTCP opens a TCP socket, binds it when asked (or when the owner picks sources),
// and starts connecting it: the SYN is on its way when it returns, and the handshake
// goes on in netstack (terr says how it began). It fails with net.ErrClosed once the
// stack is closing.
func (n *Net) startTCP(wq *waiter.Queue, network string, localPort uint16, ap netip.AddrPort) (ep tcpip.Endpoint, terr tcpip.Error, err error) {
	if !n.sockets.enter() {
		return nil, nil, &net.OpError{Op: "dial", Net: network, Addr: net.TCPAddrFromAddrPort(ap), Err: net.ErrClosed}
	}
	defer n.sockets.leave()
	ep, terr = n.s.NewEndpoint(tcp.ProtocolNumber, protoNumber(ap.Addr()), wq)
	if terr != nil {
		return nil, nil, &net.OpError{Op: "dial", Net: network, Err: errors.New(terr.String())}
	}
	if src := n.source(ap.Addr()); localPort != 0 || src.IsValid() {
		local := tcpip.FullAddress{Port: localPort}
		if src.IsValid() {
			local.Addr = addrOf(src)
		}
		if terr := ep.Bind(local); terr != nil {
			ep.Close()
			return nil, nil, opError("dial", network, ap, "bind", terr)
		}
	}
	return ep, ep.Connect(fullAddr(ap)), nil
}

func opError(op, network string, ap netip.AddrPort, syscallName string, e tcpip.Error) error {
	var addr net.Addr = net.TCPAddrFromAddrPort(ap)
	return &net.OpError{Op: op, Net: network, Addr: addr, Err: os.NewSyscallError(syscallName, errnoOf(e))}
}

// errnoOf maps a netstack error to the errno the kernel would report.
func errnoOf(e tcpip.Error) error {
	switch e.(type) {
	case *tcpip.ErrConnectionRefused:
		return syscall.ECONNREFUSED
	case *tcpip.ErrTimeout:
		return syscall.ETIMEDOUT
	case *tcpip.ErrNetworkUnreachable:
		return syscall.ENETUNREACH
	case *tcpip.ErrHostUnreachable:
		return syscall.EHOSTUNREACH
	case *tcpip.ErrConnectionReset:
		return syscall.ECONNRESET
	case *tcpip.ErrConnectionAborted:
		return syscall.ECONNABORTED
	case *tcpip.ErrPortInUse:
		return syscall.EADDRINUSE
	case *tcpip.ErrBadLocalAddress:
		return syscall.EADDRNOTAVAIL
	case *tcpip.ErrAborted:
		return syscall.ECONNABORTED
	}
	return errors.New(e.String())
}

func parseListenAddr(network, address string) (netip.AddrPort, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad port %q", portStr)
	}
	var a netip.Addr
	if host != "" {
		if a, err = netip.ParseAddr(host); err != nil {
			return netip.AddrPort{}, fmt.Errorf("listen address must be an IP: %q", host)
		}
	}
	return netip.AddrPortFrom(a, uint16(port)), nil
}

// Listen listens for TCP connections ("tcp", "tcp4", "tcp6"; address ":port" or
// "ip:port").
func (n *Net) Listen(network, address string) (net.Listener, error) {
	ap, err := parseListenAddr(network, address)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	if !n.sockets.enter() {
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.ErrClosed}
	}
	defer n.sockets.leave()
	var lns []*gonet.TCPListener
	for _, proto := range n.listenProtos(network, ap.Addr()) {
		fa := tcpip.FullAddress{Port: ap.Port()}
		if ap.Addr().IsValid() && !ap.Addr().IsUnspecified() {
			fa.Addr = addrOf(ap.Addr())
		}
		if len(lns) > 0 && fa.Port == 0 {
			fa.Port = uint16(lns[0].Addr().(*net.TCPAddr).Port)
		}
		ln, err := listenTCP(n.s, fa, proto, len(lns) > 0 || network == "tcp6")
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, &net.OpError{Op: "listen", Net: network, Err: err}
		}
		lns = append(lns, ln)
	}
	port := uint16(lns[0].Addr().(*net.TCPAddr).Port)
	n.track(netfilter.ProtoTCP, port, 1)
	if len(lns) == 1 {
		return &trackedListener{Listener: lns[0], n: n, port: port}, nil
	}
	return newMultiListener(lns, n, port), nil
}

// listenProtos is the network protocols a listen covers: a wildcard "tcp" listen covers
// each family the owner has an address of, like a dual-stack socket.
func (n *Net) listenProtos(network string, a netip.Addr) []tcpip.NetworkProtocolNumber {
	switch {
	case a.IsValid() && !a.IsUnspecified():
		return []tcpip.NetworkProtocolNumber{protoNumber(a)}
	case network == "tcp4" || network == "udp4" || a.Is4():
		return []tcpip.NetworkProtocolNumber{ipv4.ProtocolNumber}
	case network == "tcp6" || network == "udp6":
		return []tcpip.NetworkProtocolNumber{ipv6.ProtocolNumber}
	}
	var v4, v6 bool
	for _, x := range n.addrs {
		v4 = v4 || x.Is4()
		v6 = v6 || x.Is6()
	}
	switch {
	case v4 && v6:
		return []tcpip.NetworkProtocolNumber{ipv4.ProtocolNumber, ipv6.ProtocolNumber}
	case v6:
		return []tcpip.NetworkProtocolNumber{ipv6.ProtocolNumber}
	}
	return []tcpip.NetworkProtocolNumber{ipv4.ProtocolNumber}
}

// listenTCP is gonet.ListenTCP with IPV6_V6ONLY set on IPv6 sockets when v6only is true,
// so an IPv4 and an IPv6 wildcard listener can share a port.
func listenTCP(s *stack.Stack, fa tcpip.FullAddress, proto tcpip.NetworkProtocolNumber, v6only bool) (*gonet.TCPListener, error) {
	var wq waiter.Queue
	ep, err := s.NewEndpoint(tcp.ProtocolNumber, proto, &wq)
	if err != nil {
		return nil, errors.New(err.String())
	}
	if proto == ipv6.ProtocolNumber {
		ep.SocketOptions().SetV6Only(v6only)
	}
	if err := ep.Bind(fa); err != nil {
		ep.Close()
		return nil, &net.OpError{Op: "bind", Net: "tcp", Addr: &net.TCPAddr{Port: int(fa.Port)}, Err: os.NewSyscallError("bind", errnoOf(err))}
	}
	if err := ep.Listen(4096); err != nil {
		ep.Close()
		return nil, &net.OpError{Op: "listen", Net: "tcp", Err: errors.New(err.String())}
	}
	return gonet.NewTCPListener(s, &wq, ep), nil
}

type trackedListener struct {
	net.Listener
	n    *Net
	port uint16
	once sync.Once
}

// Accept waits for the next connection.
func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newTCPConn(c.(*gonet.TCPConn)), nil
}

func (l *trackedListener) Close() error {
	l.once.Do(func() { l.n.track(netfilter.ProtoTCP, l.port, -1) })
	return l.Listener.Close()
}

// multiListener merges the IPv4 and IPv6 listeners of a wildcard listen.
type multiListener struct {
	lns    []*gonet.TCPListener
	n      *Net
	port   uint16
	conns  chan net.Conn
	errs   chan error
	closed chan struct{}
	once   sync.Once
}

func newMultiListener(lns []*gonet.TCPListener, n *Net, port uint16) *multiListener {
	m := &multiListener{lns: lns, n: n, port: port, conns: make(chan net.Conn), errs: make(chan error, len(lns)), closed: make(chan struct{})}
	for _, l := range lns {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					select {
					case m.errs <- err:
					case <-m.closed:
					}
					return
				}
				select {
				case m.conns <- newTCPConn(c.(*gonet.TCPConn)):
				case <-m.closed:
					c.Close()
					return
				}
			}
		}()
	}
	return m
}

func (m *multiListener) Accept() (net.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case err := <-m.errs:
		return nil, err
	case <-m.closed:
		return nil, net.ErrClosed
	}
}

func (m *multiListener) Close() error {
	m.once.Do(func() {
		close(m.closed)
		m.n.track(netfilter.ProtoTCP, m.port, -1)
		for _, l := range m.lns {
			l.Close()
		}
	})
	return nil
}

func (m *multiListener) Addr() net.Addr { return m.lns[0].Addr() }

// ListenPacket opens a UDP socket ("udp", "udp4", "udp6"; address ":port" or "ip:port").
func (n *Net) ListenPacket(network, address string) (net.PacketConn, error) {
	ap, err := parseListenAddr(network, address)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	protos := n.listenProtos(network, ap.Addr())
	fa := tcpip.FullAddress{Port: ap.Port()}
	if ap.Addr().IsValid() && !ap.Addr().IsUnspecified() {
		fa.Addr = addrOf(ap.Addr())
	}
	// A wildcard UDP socket in netstack is per family; listen on the first (IPv4 unless
	// the address says otherwise) — dual-stack UDP servers open two sockets.
	if !n.sockets.enter() {
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.ErrClosed}
	}
	c, err := listenUDP(n.s, fa, protos[0], network == "udp6")
	n.sockets.leave()
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
	n.track(netfilter.ProtoUDP, port, 1)
	return &trackedPacketConn{UDPConn: c, n: n, port: port}, nil
}

type trackedPacketConn struct {
	*gonet.UDPConn
	n    *Net
	port uint16
	once sync.Once
}

func (c *trackedPacketConn) Close() error {
	c.once.Do(func() { c.n.track(netfilter.ProtoUDP, c.port, -1) })
	return c.UDPConn.Close()
}

// HTTPClient returns an HTTP client whose connections are made from this network.
func (n *Net) HTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: n.DialContext, DisableKeepAlives: true}}
}

// udpNetworks lists "udp4" and/or "udp6" for the families the network has addresses of.
func (n *Net) udpNetworks() []string {
	var v4, v6 bool
	for _, a := range n.addrs {
		v4 = v4 || a.Is4()
		v6 = v6 || a.Is6()
	}
	var out []string
	if v4 || !v6 {
		out = append(out, "udp4")
	}
	if v6 {
		out = append(out, "udp6")
	}
	return out
}

// listenUDP is gonet.DialUDP for a listening socket, with IPV6_V6ONLY set on IPv6 sockets
// when v6only is true (so IPv4 and IPv6 sockets can share a port).
func listenUDP(s *stack.Stack, fa tcpip.FullAddress, proto tcpip.NetworkProtocolNumber, v6only bool) (*gonet.UDPConn, error) {
	var wq waiter.Queue
	ep, err := s.NewEndpoint(udp.ProtocolNumber, proto, &wq)
	if err != nil {
		return nil, errors.New(err.String())
	}
	if proto == ipv6.ProtocolNumber {
		ep.SocketOptions().SetV6Only(v6only)
	}
	if err := ep.Bind(fa); err != nil {
		ep.Close()
		return nil, os.NewSyscallError("bind", errnoOf(err))
	}
	return gonet.NewUDPConn(&wq, ep), nil
}
