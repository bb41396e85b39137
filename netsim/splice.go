package netsim

import (
	"io"
	"net"
)

// Splice joins two connections (a simulated one and a real one, say): it copies a to b
// and b to a until both directions end, passing each end of
// stream on as a half-close where the connection has one (CloseWrite), and closes both.
func Splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
			cw.CloseWrite()
		} else {
			dst.Close()
			src.Close()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
	a.Close()
	b.Close()
}
