package hostlink

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/clusterlab/clusterlab/netsim"
)

// Dialer opens a connection from a place in the simulated cluster; it resolves names
// with that place's resolver (netsim.Net.DialContext is one).
type Dialer func(ctx context.Context, network, address string) (net.Conn, error)

// SOCKS5 constants (RFC 1928).
const (
	socksVersion   = 5
	methodNoAuth   = 0x00
	methodNone     = 0xff
	cmdConnect     = 0x01
	atypIPv4       = 0x01
	atypDomain     = 0x03
	atypIPv6       = 0x04
	repSucceeded   = 0x00
	repFailure     = 0x01
	repNetUnreach  = 0x03
	repHostUnreach = 0x04
	repRefused     = 0x05
	repCmdUnsup    = 0x07
	repAtypUnsup   = 0x08
)

// socksRequest is a SOCKS5 request: a command and a destination, an IP address or a
// domain name (resolved by the server: what curl's --socks5-hostname asks for).
type socksRequest struct {
	cmd  byte
	addr netip.Addr // for IPv4 and IPv6 destinations
	host string     // for domain-name destinations
	port uint16
}

// target is the request's destination as host:port.
func (r socksRequest) target() string {
	if r.host != "" {
		return net.JoinHostPort(r.host, strconv.Itoa(int(r.port)))
	}
	return netip.AddrPortFrom(r.addr, r.port).String()
}

// errSocksAtyp is a request whose address type is unknown (reply 0x08).
var errSocksAtyp = errors.New("socks5: unknown address type")

// readGreeting reads the client's version/method-selection message and reports
// whether it offers "no authentication required".
func readGreeting(r io.Reader) (noAuth bool, err error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return false, fmt.Errorf("socks5 greeting: %w", err)
	}
	if hdr[0] != socksVersion {
		return false, fmt.Errorf("socks5 greeting: version %d, want 5", hdr[0])
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(r, methods); err != nil {
		return false, fmt.Errorf("socks5 greeting: %w", err)
	}
	for _, m := range methods {
		if m == methodNoAuth {
			return true, nil
		}
	}
	return false, nil
}

// readRequest reads a SOCKS5 request (VER CMD RSV ATYP DST.ADDR DST.PORT).
func readRequest(r io.Reader) (socksRequest, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return socksRequest{}, fmt.Errorf("socks5 request: %w", err)
	}
	if hdr[0] != socksVersion {
		return socksRequest{}, fmt.Errorf("socks5 request: version %d, want 5", hdr[0])
	}
	req := socksRequest{cmd: hdr[1]}
	switch hdr[3] {
	case atypIPv4:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return socksRequest{}, fmt.Errorf("socks5 request: %w", err)
		}
		req.addr = netip.AddrFrom4(b)
	case atypIPv6:
		var b [16]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return socksRequest{}, fmt.Errorf("socks5 request: %w", err)
		}
		req.addr = netip.AddrFrom16(b).Unmap()
	case atypDomain:
		var l [1]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return socksRequest{}, fmt.Errorf("socks5 request: %w", err)
		}
		name := make([]byte, l[0])
		if _, err := io.ReadFull(r, name); err != nil {
			return socksRequest{}, fmt.Errorf("socks5 request: %w", err)
		}
		if len(name) == 0 {
			return socksRequest{}, errors.New("socks5 request: empty domain name")
		}
		for _, c := range name {
			if c <= ' ' || c >= 0x7f || c == ':' || c == '/' {
				return socksRequest{}, fmt.Errorf("socks5 request: domain name %q has a byte 0x%02x", name, c)
			}
		}
		req.host = string(name)
	default:
		return socksRequest{}, errSocksAtyp
	}
	var p [2]byte
	if _, err := io.ReadFull(r, p[:]); err != nil {
		return socksRequest{}, fmt.Errorf("socks5 request: %w", err)
	}
	req.port = binary.BigEndian.Uint16(p[:])
	return req, nil
}

// encode writes the request as a client sends it (for tests and the fuzz target).
func (r socksRequest) encode() []byte {
	b := []byte{socksVersion, r.cmd, 0}
	switch {
	case r.host != "":
		b = append(b, atypDomain, byte(len(r.host)))
		b = append(b, r.host...)
	case r.addr.Is4():
		b = append(b, atypIPv4)
		b = append(b, r.addr.AsSlice()...)
	default:
		b = append(b, atypIPv6)
		b = append(b, r.addr.AsSlice()...)
	}
	return binary.BigEndian.AppendUint16(b, r.port)
}

// socksReply is the server's reply: a code and the bound address.
func socksReply(rep byte, bound netip.AddrPort) []byte {
	a := bound.Addr()
	if !a.IsValid() {
		a = netip.IPv4Unspecified()
	}
	b := []byte{socksVersion, rep, 0}
	if a.Is4() || a.Is4In6() {
		b = append(b, atypIPv4)
		a4 := a.Unmap().As4()
		b = append(b, a4[:]...)
	} else {
		b = append(b, atypIPv6)
		a16 := a.As16()
		b = append(b, a16[:]...)
	}
	return binary.BigEndian.AppendUint16(b, bound.Port())
}

// replyCode maps a dial error to a SOCKS5 reply code.
func replyCode(err error) byte {
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return repRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return repNetUnreach
	case errors.Is(err, syscall.EHOSTUNREACH), errors.As(err, &dnsErr), errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return repHostUnreach
	}
	return repFailure
}

// dialTimeout bounds a proxy's connection attempt into the cluster (a SYN to a
// blackholed address is retried for about two minutes by TCP itself).
const dialTimeout = 10 * time.Second

// serveSOCKS handles one SOCKS5 client connection: no-auth negotiation, a CONNECT
// request, a dial from the place, the reply, then the two connections spliced.
func serveSOCKS(ctx context.Context, c net.Conn, dial Dialer, logf func(string, ...any)) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	noAuth, err := readGreeting(br)
	if err != nil {
		logf("socks %s: %v", c.RemoteAddr(), err)
		return
	}
	if !noAuth {
		c.Write([]byte{socksVersion, methodNone})
		logf("socks %s: the client offers no method without authentication", c.RemoteAddr())
		return
	}
	if _, err := c.Write([]byte{socksVersion, methodNoAuth}); err != nil {
		return
	}
	req, err := readRequest(br)
	if errors.Is(err, errSocksAtyp) {
		c.Write(socksReply(repAtypUnsup, netip.AddrPort{}))
		return
	}
	if err != nil {
		logf("socks %s: %v", c.RemoteAddr(), err)
		return
	}
	if req.cmd != cmdConnect {
		c.Write(socksReply(repCmdUnsup, netip.AddrPort{}))
		logf("socks %s: command %d is not supported (only CONNECT)", c.RemoteAddr(), req.cmd)
		return
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	out, err := dial(dctx, "tcp", req.target())
	cancel()
	if err != nil {
		c.Write(socksReply(replyCode(err), netip.AddrPort{}))
		logf("socks %s: connect %s: %v", c.RemoteAddr(), req.target(), err)
		return
	}
	bound, _ := netip.ParseAddrPort(out.LocalAddr().String())
	if _, err := c.Write(socksReply(repSucceeded, bound)); err != nil {
		out.Close()
		return
	}
	c.SetDeadline(time.Time{})
	netsim.Splice(bufferedConn{c, br}, out)
}

// bufferedConn reads through the bufio.Reader that parsed the handshake (a client may
// send data right behind its request), writing and closing as the connection does.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b bufferedConn) CloseWrite() error {
	if cw, ok := b.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return b.Conn.Close()
}
