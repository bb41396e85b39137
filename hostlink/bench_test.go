package hostlink

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"

	"golang.org/x/net/proxy"

	"github.com/clusterlab/clusterlab/scenario"
)

const benchChunk = 64 << 10

// sink reads each connection to its end and answers with the byte count.
func sink(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			n, _ := io.Copy(io.Discard, c)
			binary.Write(c, binary.BigEndian, uint64(n))
		}()
	}
}

// bulk writes b.N chunks over c, half-closes, and checks the count the sink read.
func bulk(b *testing.B, c net.Conn) {
	buf := make([]byte, benchChunk)
	b.SetBytes(benchChunk)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	var n uint64
	if err := binary.Read(c, binary.BigEndian, &n); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if n != uint64(b.N)*benchChunk {
		b.Fatalf("the sink read %d bytes, want %d", n, b.N*benchChunk)
	}
	c.Close()
}

// startSink runs testdata/bench.yaml with the sink program in its pod.
func startSink(b *testing.B) (*scenario.Live, string) {
	s, err := scenario.Load("testdata/bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	live, err := scenario.Start(s, scenario.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(live.Close)
	n, err := live.Net("pod:default/sink")
	if err != nil {
		b.Fatal(err)
	}
	ln, err := n.Listen("tcp", ":9000")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go sink(ln)
	svc, _ := live.Cluster().Store().GetService("default", "sink")
	return live, svc.Spec.ClusterIP + ":9000"
}

// BenchmarkBulkTCP: bytes from a real socket to a program in a pod, through kube-proxy's
// iptables rules: kernel loopback (the reference), the SOCKS5 proxy, the HTTP proxy's
// CONNECT, and (root) the TUN device (tun_linux_test.go).
func BenchmarkBulkTCP(b *testing.B) {
	b.Run("kernel-loopback", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		go sink(ln)
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		bulk(b, c)
	})
	b.Run("socks5", func(b *testing.B) {
		live, target := startSink(b)
		k, err := Open(live, Config{SOCKS: "127.0.0.1:0"})
		if err != nil {
			b.Fatal(err)
		}
		defer k.Close()
		d, _ := proxy.SOCKS5("tcp", k.SOCKSAddr.String(), nil, proxy.Direct)
		c, err := d.Dial("tcp", target)
		if err != nil {
			b.Fatal(err)
		}
		bulk(b, c)
	})
	b.Run("http-connect", func(b *testing.B) {
		live, target := startSink(b)
		k, err := Open(live, Config{HTTPProxy: "127.0.0.1:0"})
		if err != nil {
			b.Fatal(err)
		}
		defer k.Close()
		c, err := net.Dial("tcp", k.HTTPAddr.String())
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		// The reply is exactly "HTTP/1.1 200 Connection established\r\n\r\n".
		reply := make([]byte, len("HTTP/1.1 200 Connection established\r\n\r\n"))
		if _, err := io.ReadFull(c, reply); err != nil || string(reply[9:12]) != "200" {
			b.Fatalf("CONNECT: %q %v", reply, err)
		}
		bulk(b, c)
	})
	b.Run("tun", benchTUN)
}
