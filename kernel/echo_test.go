package kernel

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// TestFixedPortDialWaitsForThePort: a dial from a fixed source port whose previous
// socket is still open (as it is in a forked child of this process until the child
// execs) waits for the port instead of failing the attempt with EADDRINUSE. Loopback
// only, no root: the holder is a socket of the test's own bound to the port, closed a
// moment after the dial starts.
func TestFixedPortDialWaitsForThePort(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		tcp.Close()
		t.Fatal(err)
	}
	s := &echoServer{name: "lo", tcp: tcp, udp: udp}
	s.wg.Add(2)
	go s.serveTCP()
	go s.serveUDP()
	defer s.close()

	for _, proto := range []string{"udp", "tcp"} {
		t.Run(proto, func(t *testing.T) {
			var holder interface{ Close() error }
			var port uint16
			if proto == "udp" {
				pc, err := net.ListenPacket("udp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				holder, port = pc, pc.LocalAddr().(*net.UDPAddr).AddrPort().Port()
			} else {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				holder, port = ln, ln.Addr().(*net.TCPAddr).AddrPort().Port()
			}
			src := netip.AddrPortFrom(lo, port)
			dst := netip.MustParseAddrPort(s.udp.LocalAddr().String())
			if proto == "tcp" {
				dst = netip.MustParseAddrPort(s.tcp.Addr().String())
			}
			// The port is taken: a plain bind fails as the retried one first does.
			var d net.Dialer
			if proto == "udp" {
				d.LocalAddr = net.UDPAddrFromAddrPort(src)
			} else {
				d.LocalAddr = net.TCPAddrFromAddrPort(src)
			}
			if c, err := d.Dial(proto, dst.String()); !errors.Is(err, syscall.EADDRINUSE) {
				if c != nil {
					c.Close()
				}
				holder.Close()
				t.Fatalf("bind to the held port: %v, want EADDRINUSE", err)
			}
			released := make(chan struct{})
			time.AfterFunc(20*time.Millisecond, func() {
				holder.Close()
				close(released)
			})
			res := dialEcho(proto, src, dst, 5*time.Second)
			<-released
			if res.Outcome != Answered || res.Local != src || res.Source != src {
				t.Fatalf("dial from %v while the port was held: %+v, want answered from %v", src, res, src)
			}
		})
	}

	// The retry is for a fixed port only, and ends at the deadline.
	held, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	src := held.LocalAddr().(*net.UDPAddr).AddrPort()
	n := 0
	err = whilePortInUse(src, time.Now().Add(30*time.Millisecond), func() error { n++; return syscall.EADDRINUSE })
	if !errors.Is(err, syscall.EADDRINUSE) || n < 2 {
		t.Errorf("held port until the deadline: %v after %d binds, want EADDRINUSE after several", err, n)
	}
	n = 0
	err = whilePortInUse(netip.AddrPortFrom(lo, 0), time.Now().Add(time.Second), func() error { n++; return syscall.EADDRINUSE })
	if !errors.Is(err, syscall.EADDRINUSE) || n != 1 {
		t.Errorf("any port: %v after %d binds, want EADDRINUSE after one", err, n)
	}
	n = 0
	err = whilePortInUse(src, time.Now().Add(time.Second), func() error { n++; return syscall.EADDRNOTAVAIL })
	if !errors.Is(err, syscall.EADDRNOTAVAIL) || n != 1 {
		t.Errorf("another error: %v after %d binds, want it after one", err, n)
	}
}
