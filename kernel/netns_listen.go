package kernel

import (
	"context"
	"errors"
	"net"
)

// Sockets inside a namespace. A socket belongs to the network namespace of the thread
// that created it, for life; Do runs a function on a fresh OS thread locked into the
// namespace (see nsHandle.do), and Listen, ListenPacket and DialContext use it to make
// sockets there that ordinary goroutines then use. Together they satisfy the userspace
// proxier's Network (package proxy/userspace), so a real proxy can run inside a node
// namespace of a Harness.

var errNoNamespace = errors.New("kernel: Netns has no namespace handle (not made by a Harness)")

// Do runs fn on an OS thread inside the namespace and returns its error. Sockets fn
// creates stay in the namespace; fn must not start goroutines that expect to be in it.
func (n *Netns) Do(fn func() error) error {
	if n == nil || n.h == nil {
		return errNoNamespace
	}
	return n.h.do(fn)
}

// Listen is net.Listen inside the namespace.
func (n *Netns) Listen(network, address string) (net.Listener, error) {
	var ln net.Listener
	err := n.Do(func() error {
		var err error
		ln, err = net.Listen(network, address)
		return err
	})
	return ln, err
}

// ListenPacket is net.ListenPacket inside the namespace.
func (n *Netns) ListenPacket(network, address string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := n.Do(func() error {
		var err error
		pc, err = net.ListenPacket(network, address)
		return err
	})
	return pc, err
}

// DialContext is net.Dialer.DialContext from inside the namespace. The thread stays in
// the namespace for the whole dial (the connect happens there).
func (n *Netns) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}
