package dns

import (
	"net"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// udpPair is a client mdns.Conn connected to a server socket on loopback, and a reply
// the server sends to it.
func udpPair(t *testing.T) (client *mdns.Conn, reply func(id uint16)) {
	t.Helper()
	srv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Skipf("no loopback UDP here: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	c, err := net.DialUDP("udp", nil, srv.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &mdns.Conn{Conn: c, UDPSize: mdns.MinMsgSize}, func(id uint16) {
		m := new(mdns.Msg)
		m.SetQuestion("a.example.", mdns.TypeA)
		m.Id, m.Response = id, true
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.WriteToUDP(b, c.LocalAddr().(*net.UDPAddr)); err != nil {
			t.Fatal(err)
		}
	}
}

// firedTimer is a round whose virtual timeout has already fired.
func firedTimer() *replyTimer {
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return &replyTimer{fired: ch}
}

// TestReplyTimerQueuedReplyWins: when a round's virtual timeout fires with a reply
// already queued on the socket, the read returns the reply, not the timeout. The clock
// moves to a timeout only when the simulation is quiet, so such a reply arrived before
// the deadline (as in glibc, whose poll returns it). Before the fix the read's wake-up
// raced the deadline (a select over both), and a lookup whose answer was there waited
// a whole timeout now and then (examples/dns-insert-race under load). Loopback UDP is
// delivered by the time WriteToUDP returns, so the reply is queued before each read.
func TestReplyTimerQueuedReplyWins(t *testing.T) {
	conn, reply := udpPair(t)
	for i := range 200 {
		id := uint16(i + 1)
		reply(id)
		m, err := firedTimer().read(conn)
		if err != nil {
			t.Fatalf("round %d: reply queued when the timeout fired, read: %v", i, err)
		}
		if m.Id != id {
			t.Fatalf("round %d: read reply id %d, want %d", i, m.Id, id)
		}
	}
}

// TestReplyTimerExpiredRound: once a round has expired, a read returns at once with the
// timeout when nothing is queued, and a reply queued since (the second of a pair that
// arrived before the deadline) is still read.
func TestReplyTimerExpiredRound(t *testing.T) {
	conn, reply := udpPair(t)
	rt := firedTimer()
	if _, err := rt.read(conn); !isTimeout(err) {
		t.Fatalf("nothing queued, timeout fired: read error %v, want a timeout", err)
	}
	if !rt.expired {
		t.Fatal("the round is not marked expired after its timeout")
	}
	if _, err := rt.read(conn); !isTimeout(err) {
		t.Fatalf("expired round, nothing queued: read error %v, want a timeout", err)
	}
	reply(7)
	m, err := rt.read(conn)
	if err != nil || m.Id != 7 {
		t.Fatalf("expired round with a reply queued: read %v, %v; want the reply (id 7)", m, err)
	}
}
