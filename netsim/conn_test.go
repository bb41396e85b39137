package netsim

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestPodConnKeepsTCPConnMethods: a pod's TCP connections, dialed and accepted, on
// goroutines made for them (whose first Read or Write makes room on their stack), carry
// the bytes both ways and keep what a *net.TCPConn offers that programs rely on:
// half-close both ways (CloseWrite, CloseRead), deadlines, and the addresses.
func TestPodConnKeepsTCPConnMethods(t *testing.T) {
	c := newTestCluster(t, Config{Seed: 3, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}})
	server := startPod(t, c, "node-b", "default/server")
	client := startPod(t, c, "node-a", "default/client")
	ln, err := server.Net().Listen("tcp", ":7000")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type halfCloser interface {
		CloseWrite() error
		CloseRead() error
	}
	got := make(chan error, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		done := make(chan error, 1)
		go func() { // a goroutine of its own, as a server's handler
			defer s.Close()
			done <- func() error {
				if ra := s.RemoteAddr().(*net.TCPAddr); ra.AddrPort().Addr() != client.IP() {
					return errors.New("server: remote address " + ra.String() + ", want the client's")
				}
				msg, err := io.ReadAll(s) // to the client's FIN (its CloseWrite)
				if err != nil || string(msg) != "ping" {
					return errors.New("server read " + string(msg) + ": " + errString(err))
				}
				if _, err := s.Write([]byte("pong")); err != nil {
					return err
				}
				hc, ok := s.(halfCloser)
				if !ok {
					return errors.New("accepted conn has no CloseWrite/CloseRead")
				}
				return hc.CloseWrite()
			}()
		}()
		got <- <-done
	}()
	ctx := ctxT(t)
	cc, err := client.Net().DialContext(ctx, "tcp", netip.AddrPortFrom(server.IP(), 7000).String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if la := cc.LocalAddr().(*net.TCPAddr); la.AddrPort().Addr() != client.IP() {
		t.Errorf("dialed conn's local address %v, want the client's %v", la, client.IP())
	}
	hc, ok := cc.(halfCloser)
	if !ok {
		t.Fatalf("dialed conn %T has no CloseWrite/CloseRead", cc)
	}
	clientErr := make(chan error, 1)
	var reply []byte
	go func() { // the client's exchange on a fresh goroutine too
		if _, err := cc.Write([]byte("ping")); err != nil {
			clientErr <- err
			return
		}
		if err := hc.CloseWrite(); err != nil {
			clientErr <- err
			return
		}
		var err error
		reply, err = io.ReadAll(cc) // to the server's FIN
		clientErr <- err
	}()
	if err := <-clientErr; err != nil {
		t.Fatal("client:", err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if string(reply) != "pong" {
		t.Fatalf("client read %q, want pong", reply)
	}
	// A deadline already past ends a Read at once with a timeout.
	if err := cc.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	var ne net.Error
	if _, err := cc.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("read past the deadline: %v, want a timeout", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
