//go:build linux

package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// connectTCP opens a TCP connection from the calling thread's namespace and reports an
// ICMP error for the SYN as soon as it arrives.
//
// Go's dialer cannot do the second part. In a harness the ICMP error that REJECT sends
// back can arrive while connect(2) itself still holds the socket lock (everything runs
// in the softirq raised by the SYN's own transmission); the kernel then records it only
// as a "soft" error, and the connection fails at the first SYN retransmission, one
// second later: IPv6 TCP to a REJECTed address looked like a timeout. So the socket
// gets IP_RECVERR / IPV6_RECVERR, which queues every ICMP error on the socket's error
// queue whatever the lock state, and a non-blocking connect is polled: POLLOUT with no
// error is a connection; SO_ERROR or a queued ICMP error ends it with that errno.
//
// On success the socket is handed to the net package; on failure c is nil and res says
// why.
func connectTCP(src, dst netip.AddrPort, timeout time.Duration) (c net.Conn, res Result) {
	deadline := time.Now().Add(timeout)
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	v6 := dst.Addr().Is6()
	family := unix.AF_INET
	if v6 {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, Result{Outcome: Failed, Err: fmt.Errorf("socket: %w", err)}
	}
	defer func() {
		if c == nil {
			unix.Close(fd)
		}
	}()
	if v6 {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVERR, 1)
	} else {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVERR, 1)
	}
	if err != nil {
		return nil, Result{Outcome: Failed, Err: fmt.Errorf("setsockopt RECVERR: %w", err)}
	}
	if src.Port() != 0 {
		// A client on a fixed port closes with a reset (linger 0) rather than a FIN,
		// so that no TIME_WAIT of this connection, on either side, refuses the next
		// dial from the same port to the same destination.
		if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0}); err != nil {
			return nil, Result{Outcome: Failed, Err: fmt.Errorf("setsockopt SO_LINGER: %w", err)}
		}
	}
	if src.IsValid() {
		sa := sockaddr(netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), v6)
		if err := whilePortInUse(src, deadline, func() error { return unix.Bind(fd, sa) }); err != nil {
			return nil, Result{Outcome: Failed, Err: fmt.Errorf("bind %v: %w", src, err)}
		}
	}
	local := func() netip.AddrPort {
		sa, err := unix.Getsockname(fd)
		if err != nil {
			return netip.AddrPort{}
		}
		switch sa := sa.(type) {
		case *unix.SockaddrInet4:
			return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
		case *unix.SockaddrInet6:
			return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
		}
		return netip.AddrPort{}
	}
	fail := func(err error) (net.Conn, Result) {
		return nil, classify(Result{Local: local()}, &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(dst), Err: os.NewSyscallError("connect", err)})
	}
	err = unix.Connect(fd, sockaddr(dst, v6))
	if err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return fail(err)
	}
	for err != nil {
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil, Result{Outcome: TimedOut, Local: local(), Err: fmt.Errorf("dial tcp %v: connect: %w", dst, os.ErrDeadlineExceeded)}
		}
		ms := int(wait / time.Millisecond)
		if ms == 0 {
			ms = 1
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, perr := unix.Poll(fds, ms)
		if perr != nil {
			if errors.Is(perr, unix.EINTR) {
				continue
			}
			return fail(perr)
		}
		if n == 0 {
			continue // the deadline check above ends the loop
		}
		soErr, gerr := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if gerr != nil {
			return fail(gerr)
		}
		if soErr != 0 {
			return fail(syscall.Errno(soErr))
		}
		if fds[0].Revents&unix.POLLERR != 0 {
			if qerr := icmpQueuedError(fd); qerr != nil {
				return fail(qerr)
			}
		}
		if fds[0].Revents&unix.POLLOUT != 0 {
			if _, perr := unix.Getpeername(fd); perr == nil {
				err = nil
			}
		}
	}
	f := os.NewFile(uintptr(fd), "tcp")
	conn, ferr := net.FileConn(f) // duplicates the descriptor
	f.Close()
	fd = -1
	if ferr != nil {
		return nil, Result{Outcome: Failed, Err: ferr}
	}
	return conn, Result{}
}

// icmpQueuedError reads the socket's error queue and returns the errno of the first
// ICMP error on it, or nil.
func icmpQueuedError(fd int) error {
	buf := make([]byte, 512)
	oob := make([]byte, 512)
	for {
		_, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		if err != nil {
			return nil // empty queue (EAGAIN) or nothing usable
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			isErr := (m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_RECVERR) ||
				(m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_RECVERR)
			if isErr && len(m.Data) >= 4 {
				if e := binary.NativeEndian.Uint32(m.Data[:4]); e != 0 {
					return syscall.Errno(e)
				}
			}
		}
	}
}

func sockaddr(ap netip.AddrPort, v6 bool) unix.Sockaddr {
	if v6 {
		return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	}
	return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
}
