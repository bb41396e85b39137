package hostlink

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
)

// TestListenUDPTCPPicksAgain: with port 0 a TCP port taken by someone else makes the
// forwarder pick another UDP port (the error CI saw with test packages in parallel);
// with a fixed port the error is returned at once, naming TCP.
func TestListenUDPTCPPicksAgain(t *testing.T) {
	var tried []string
	refuse := 2
	taken := 0 // real refusals: the host's TCP port of a picked UDP port in use by another program
	listen := func(network, address string) (net.Listener, error) {
		tried = append(tried, address)
		if len(tried) <= refuse {
			return nil, &net.OpError{Op: "listen", Net: network, Err: syscall.EADDRINUSE}
		}
		ln, err := net.Listen(network, address)
		if err != nil {
			taken++
		}
		return ln, err
	}
	pc, ln, bound, err := listenUDPTCP("127.0.0.1:0", listen)
	if err != nil {
		t.Fatalf("port 0 with two TCP ports taken: %v", err)
	}
	defer pc.Close()
	defer ln.Close()
	if len(tried) != 3+taken {
		t.Fatalf("TCP listens %v (%d refused by the host), want %d (two refused, then bound)", tried, taken, 3+taken)
	}
	if pc.LocalAddr().String() != bound.String() || ln.Addr().String() != bound.String() {
		t.Fatalf("UDP %s, TCP %s, reported %s: want one address", pc.LocalAddr(), ln.Addr(), bound)
	}
	// The refused tries' UDP sockets were closed: their ports can be bound again.
	for _, a := range tried[:2] {
		if a == bound.String() {
			continue // the kernel may hand the same port out again
		}
		c, err := net.ListenPacket("udp", a)
		if err != nil {
			t.Errorf("UDP %s of a refused try still bound: %v", a, err)
			continue
		}
		c.Close()
	}

	// A fixed port: no second pick.
	tried = nil
	refuse = 100
	probe, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fixed := probe.LocalAddr().String()
	probe.Close()
	if _, _, _, err := listenUDPTCP(fixed, listen); err == nil || !strings.Contains(err.Error(), "--dns (tcp)") || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("fixed port with TCP taken: err %v, want --dns (tcp): address in use", err)
	}
	if len(tried) != 1 {
		t.Fatalf("fixed port: %d TCP listens, want 1", len(tried))
	}

	// Port 0 and TCP always refused: give up after 21 picks.
	tried = nil
	if _, _, _, err := listenUDPTCP("127.0.0.1:0", listen); err == nil {
		t.Fatal("every TCP port refused: no error")
	}
	if len(tried) != 21 {
		t.Fatalf("gave up after %d picks, want 21", len(tried))
	}
}
