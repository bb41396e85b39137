package userspace

import (
	"context"
	"net"
	"time"
)

// Network is where the proxier's sockets live: its proxy listeners, the sockets that
// hold NodePorts, and its connections to endpoints. A simulated node's host network
// (netsim.Net) satisfies it; OSNetwork is package net (the host's own namespace), and
// package kernel's Netns makes the sockets inside a network namespace.
type Network interface {
	// Listen listens for TCP ("tcp4", "tcp6") on address ("ip:port"; port 0 picks one).
	Listen(network, address string) (net.Listener, error)
	// ListenPacket opens a UDP socket ("udp4", "udp6") on address.
	ListenPacket(network, address string) (net.PacketConn, error)
	// DialContext connects to an endpoint ("tcp4", "udp4", ... and "ip:port").
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// OSNetwork is the process's own network namespace through package net.
type OSNetwork struct {
	// Dialer makes the connections to endpoints; the zero value is net.Dialer's default.
	Dialer net.Dialer
}

// Listen implements Network.
func (o *OSNetwork) Listen(network, address string) (net.Listener, error) {
	return net.Listen(network, address)
}

// ListenPacket implements Network.
func (o *OSNetwork) ListenPacket(network, address string) (net.PacketConn, error) {
	return net.ListenPacket(network, address)
}

// DialContext implements Network.
func (o *OSNetwork) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return o.Dialer.DialContext(ctx, network, address)
}

var _ Network = (*OSNetwork)(nil)

// Clock is the proxier's time: the ClientIP affinity timeout, UDP session idle
// timeouts and the endpoint dial timeouts all run on it, so a simulation can move them
// with its virtual clock.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not happened yet, and reports whether it did.
	Stop() bool
}

// WallClock is the wall clock (package time).
type WallClock struct{}

// Now implements Clock.
func (WallClock) Now() time.Time { return time.Now() }

// AfterFunc implements Clock.
func (WallClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

var _ Clock = WallClock{}
