package kernel

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The echo protocol: a TCP server writes one line "NAME SRC\n" as soon as it accepts a
// connection (NAME is the server's name, SRC the client address:port it saw) and
// closes; a UDP server answers every datagram with the same line. So a client learns
// which pod answered and whether the source was NATed, in one round trip.

// echoServer is a TCP listener and a UDP socket created inside a namespace.
type echoServer struct {
	name string
	ns   *Netns
	tcp  net.Listener
	udp  net.PacketConn
	wg   sync.WaitGroup
}

// Serve starts a TCP and a UDP echo server inside ns, bound to bind, answering with
// name. The sockets are made on a thread inside the namespace and served from ordinary
// goroutines (a socket stays in the namespace it was created in). Bind to a specific
// address in a namespace with several addresses (a node) when UDP replies must come
// from the address the client sent to; a wildcard UDP server answers from whatever
// address routing picks. Servers stop at Close.
func (h *Harness) Serve(ns *Netns, name string, bind netip.AddrPort) error {
	return h.serve(ns, name, bind, true, true)
}

// ServeProto is Serve for one protocol ("tcp" or "udp"): the other stays closed, so
// it is refused as a port nothing listens on.
func (h *Harness) ServeProto(ns *Netns, name, proto string, bind netip.AddrPort) error {
	switch proto {
	case "tcp":
		return h.serve(ns, name, bind, true, false)
	case "udp":
		return h.serve(ns, name, bind, false, true)
	}
	return fmt.Errorf("serve %s: protocol %q: want tcp or udp", name, proto)
}

func (h *Harness) serve(ns *Netns, name string, bind netip.AddrPort, tcp, udp bool) error {
	if strings.ContainsAny(name, " \n") || name == "" {
		return fmt.Errorf("serve: bad name %q", name)
	}
	s := &echoServer{name: name, ns: ns}
	err := ns.h.do(func() error {
		var err error
		if tcp {
			if s.tcp, err = net.Listen("tcp", bind.String()); err != nil {
				return err
			}
		}
		if udp {
			if s.udp, err = net.ListenPacket("udp", bind.String()); err != nil {
				if s.tcp != nil {
					s.tcp.Close()
				}
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("serve %s on %v in %s: %w", name, bind, ns, err)
	}
	if s.tcp != nil {
		s.wg.Add(1)
		go s.serveTCP()
	}
	if s.udp != nil {
		s.wg.Add(1)
		go s.serveUDP()
	}
	h.mu.Lock()
	h.servers = append(h.servers, s)
	h.mu.Unlock()
	return nil
}

func (s *echoServer) serveTCP() {
	defer s.wg.Done()
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go func() {
			defer c.Close()
			_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "%s %s\n", s.name, c.RemoteAddr())
		}()
	}
}

func (s *echoServer) serveUDP() {
	defer s.wg.Done()
	buf := make([]byte, 2048)
	for {
		_, from, err := s.udp.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		_, _ = s.udp.WriteTo([]byte(fmt.Sprintf("%s %s\n", s.name, from)), from)
	}
}

func (s *echoServer) close() {
	if s.tcp != nil {
		s.tcp.Close()
	}
	if s.udp != nil {
		s.udp.Close()
	}
	s.wg.Wait()
}

// Outcome is how a client operation ended.
type Outcome int

// Outcomes.
const (
	// Answered: a server answered; Result.Server and Result.Source say who and what
	// source address it saw.
	Answered Outcome = iota
	// Refused: connection refused (a TCP RST or an ICMP port unreachable, e.g. from
	// REJECT or from a closed port).
	Refused
	// TimedOut: no answer within the timeout (e.g. DROP).
	TimedOut
	// Unreachable: ICMP host/network unreachable, administratively prohibited, or no
	// route.
	Unreachable
	// Failed: anything else (see Result.Err).
	Failed
)

func (o Outcome) String() string {
	switch o {
	case Answered:
		return "answered"
	case Refused:
		return "refused"
	case TimedOut:
		return "timeout"
	case Unreachable:
		return "unreachable"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result is what one client operation saw.
type Result struct {
	Outcome Outcome
	Server  string         // the answering server's name (Answered only)
	Source  netip.AddrPort // the client address the server saw (Answered only)
	Local   netip.AddrPort // the client's own address, when the socket got one
	Err     error          // the underlying error (not Answered)
}

func (r Result) String() string {
	if r.Outcome == Answered {
		return fmt.Sprintf("%s saw %v", r.Server, r.Source)
	}
	if r.Err != nil {
		return fmt.Sprintf("%v (%v)", r.Outcome, r.Err)
	}
	return r.Outcome.String()
}

// Dial connects from inside ns to dst over proto ("tcp" or "udp") and reports who
// answered. Each step waits at most the harness Timeout, so a dropped packet costs about
// that much and no more; nothing sleeps otherwise.
func (h *Harness) Dial(ns *Netns, proto string, dst netip.AddrPort) Result {
	return h.DialFrom(ns, proto, netip.AddrPort{}, dst)
}

// DialFrom is Dial with the client bound to src (an address of ns, port 0 for any).
// A TCP client on a fixed port closes with a reset instead of a FIN, so that the same
// port can dial the same destination again at once (no TIME_WAIT in the way).
func (h *Harness) DialFrom(ns *Netns, proto string, src, dst netip.AddrPort) Result {
	return h.DialFromTimeout(ns, proto, src, dst, h.cfg.Timeout)
}

// DialFromTimeout is DialFrom waiting at most timeout at each step instead of the
// harness Timeout: for a second look at a flow that timed out on a busy machine.
func (h *Harness) DialFromTimeout(ns *Netns, proto string, src, dst netip.AddrPort, timeout time.Duration) Result {
	var res Result
	err := ns.h.do(func() error {
		res = dialEcho(proto, src, dst, timeout)
		return nil
	})
	if err != nil {
		return Result{Outcome: Failed, Err: err}
	}
	return res
}

// DialN makes n Dials from ns to dst, at most parallel at a time, and returns the
// results in order.
func (h *Harness) DialN(ns *Netns, proto string, dst netip.AddrPort, n, parallel int) []Result {
	if parallel < 1 {
		parallel = 1
	}
	out := make([]Result, n)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			out[i] = h.Dial(ns, proto, dst)
			<-sem
		}()
	}
	wg.Wait()
	return out
}

func dialEcho(proto string, src, dst netip.AddrPort, timeout time.Duration) Result {
	var local net.Addr
	if src.IsValid() {
		switch proto {
		case "tcp":
			local = net.TCPAddrFromAddrPort(src)
		case "udp":
			local = net.UDPAddrFromAddrPort(src)
		}
	}
	d := net.Dialer{Timeout: timeout, LocalAddr: local}
	var c net.Conn
	var err error
	switch proto {
	case "tcp":
		var res Result
		c, res = connectTCP(src, dst, timeout)
		if c == nil {
			return res
		}
	case "udp":
		err = whilePortInUse(src, time.Now().Add(timeout), func() error {
			c, err = d.Dial(proto, dst.String())
			return err
		})
		if err != nil {
			return classify(Result{}, err)
		}
	default:
		return Result{Outcome: Failed, Err: fmt.Errorf("dial: protocol %q: want tcp or udp", proto)}
	}
	defer c.Close()
	res := Result{}
	if la, ok := c.LocalAddr().(interface{ AddrPort() netip.AddrPort }); ok {
		res.Local = la.AddrPort()
	}
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return classify(res, err)
	}
	if proto == "udp" {
		if _, err := c.Write([]byte("hello\n")); err != nil {
			return classify(res, err)
		}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return classify(res, err)
	}
	name, src2, ok := strings.Cut(strings.TrimSpace(line), " ")
	if !ok {
		res.Outcome, res.Err = Failed, fmt.Errorf("bad echo answer %q", line)
		return res
	}
	ap, err := netip.ParseAddrPort(src2)
	if err != nil {
		res.Outcome, res.Err = Failed, fmt.Errorf("bad echo answer %q: %w", line, err)
		return res
	}
	res.Outcome, res.Server, res.Source = Answered, name, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	return res
}

// whilePortInUse calls bind, and calls it again while it fails with EADDRINUSE, src
// has a fixed port and the deadline has not passed (the last error is returned).
//
// An attempt from a fixed source port closes its socket before the next one binds the
// port again, but a socket can outlive its close for a moment: a fork in another
// goroutine of this process (the harness runs ip, iptables-restore, nft and conntrack
// while other tests' pods send) copies every open descriptor into the child, which
// holds them until it execs and its close-on-exec descriptors go. A bind in that
// window fails with EADDRINUSE: under load, a scenario's three UDP attempts from port
// 5000 lost one or two that way, "dropped" on the kernel (the CI flake of
// stale-udp-conntrack and version-regression). The port is free again once the child
// has exec'd, so the bind is retried, every millisecond or so, until the attempt's
// deadline.
func whilePortInUse(src netip.AddrPort, deadline time.Time, bind func() error) error {
	wait := 500 * time.Microsecond
	for {
		err := bind()
		if err == nil || src.Port() == 0 || !errors.Is(err, syscall.EADDRINUSE) || !time.Now().Add(wait).Before(deadline) {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, 10*time.Millisecond)
	}
}

func classify(res Result, err error) Result {
	res.Err = err
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		res.Outcome = Refused
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		res.Outcome = TimedOut
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EACCES):
		res.Outcome = Unreachable
	default:
		res.Outcome = Failed
	}
	return res
}
