package hostlink

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/clusterlab/clusterlab/netsim"
)

// dnsForwarder answers DNS on a real port by asking the cluster's DNS service from a
// place in the cluster: each UDP query is sent from there to SERVER:53 (through the
// node's datapath and kube-proxy, as a pod's would be) and the reply returned; each
// TCP connection is relayed to SERVER:53 over TCP.
type dnsForwarder struct {
	dial   Dialer
	server netip.AddrPort
	logf   func(string, ...any)
}

// serveUDP reads queries until pc is closed.
func (f *dnsForwarder) serveUDP(ctx context.Context, pc net.PacketConn, spawn func(func()) bool) {
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		q := append([]byte(nil), buf[:n]...)
		if !spawn(func() {
			if r, err := f.exchange(ctx, q); err == nil {
				pc.WriteTo(r, from)
			} else if ctx.Err() == nil {
				f.logf("dns: query from %s: %v", from, err)
			}
		}) {
			return
		}
	}
}

// exchange sends one query into the cluster over UDP and waits for the reply with its ID.
func (f *dnsForwarder) exchange(ctx context.Context, q []byte) ([]byte, error) {
	if len(q) < 12 {
		return nil, errors.New("a message shorter than a DNS header")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := f.dial(ctx, "udp", f.server.String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(q); err != nil {
		return nil, err
	}
	buf := make([]byte, 65535)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		if n >= 2 && buf[0] == q[0] && buf[1] == q[1] {
			return buf[:n], nil
		}
	}
}

// serveTCPConn relays one DNS-over-TCP connection to the server.
func (f *dnsForwarder) serveTCPConn(ctx context.Context, c net.Conn) {
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	out, err := f.dial(dctx, "tcp", f.server.String())
	cancel()
	if err != nil {
		f.logf("dns: tcp from %s: %v", c.RemoteAddr(), err)
		c.Close()
		return
	}
	netsim.Splice(c, out)
}
