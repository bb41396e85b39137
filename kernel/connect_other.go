//go:build !linux

package kernel

import (
	"net"
	"net/netip"
	"time"
)

func connectTCP(src, dst netip.AddrPort, timeout time.Duration) (net.Conn, Result) {
	d := net.Dialer{Timeout: timeout}
	if src.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(src)
	}
	c, err := d.Dial("tcp", dst.String())
	if err != nil {
		return nil, classify(Result{}, err)
	}
	return c, Result{}
}
