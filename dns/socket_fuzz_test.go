package dns

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// FuzzServeSocket: `dns serve`'s server on real loopback UDP and TCP sockets is fed
// fuzzed bytes — a garbage datagram (or one padded out to the largest UDP payload),
// a TCP stream as it comes (length prefixes cut or lying), a TCP message behind a
// length prefix that promises more than follows, or a prefix alone, cut after one
// byte — and afterwards still answers a valid query for a Service, over UDP and TCP,
// correctly. A reply it sends to the garbage is a well-formed DNS message with the
// query's ID. A 10 s watchdog per input turns a hang into a failure.
func FuzzServeSocket(f *testing.F) {
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte(serveManifest), 0o644); err != nil {
		f.Fatal(err)
	}
	listening := make(chan [2]string, 1)
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		done <- Serve(ctx, ServeConfig{Manifests: []string{dir}, Listen: "127.0.0.1:0", TTL: 5, Tick: make(chan time.Time),
			OnListen: func(u, t net.Addr) { listening <- [2]string{u.String(), t.String()} }})
	}()
	var addrs [2]string
	select {
	case addrs = <-listening:
	case err := <-done:
		f.Fatalf("Serve: %v", err)
	}
	f.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			f.Errorf("Serve returned %v after cancel", err)
		}
	})
	udpAddr, tcpAddr := addrs[0], addrs[1]

	q := new(mdns.Msg)
	q.SetQuestion("my-service.default.svc.cluster.local.", mdns.TypeA)
	valid, _ := q.Pack()
	f.Add(valid, uint8(0))
	f.Add(valid, uint8(1))
	f.Add(valid, uint8(2))
	f.Add([]byte{}, uint8(0))
	f.Add([]byte{0, 1, 0x81}, uint8(0))
	f.Add(append([]byte{0xff, 0xff}, valid...), uint8(1))
	f.Add(append(binary.BigEndian.AppendUint16(nil, uint16(len(valid))), valid[:len(valid)-3]...), uint8(1))
	f.Add(valid[:12], uint8(3))
	f.Add(valid, uint8(4))
	edns := new(mdns.Msg)
	edns.SetQuestion("x.default.svc.cluster.local.", mdns.TypeANY)
	edns.SetEdns0(65535, true)
	b, _ := edns.Pack()
	f.Add(b, uint8(0))

	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		watchdog := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("dns serve's sockets hang on %q mode %d", data, mode)) })
		defer watchdog.Stop()
		switch mode % 5 {
		case 0, 4: // a datagram; mode 4 pads it to the largest UDP payload
			if mode%5 == 4 {
				data = append(data[:len(data):len(data)], make([]byte, 65507-min(len(data), 65507))...)[:65507]
			}
			if len(data) > 65507 {
				data = data[:65507]
			}
			c, err := net.Dial("udp", udpAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(data); err != nil {
				t.Fatalf("write: %v", err)
			}
			// A reply, when there is one, answers the query it came from.
			_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			buf := make([]byte, 65535)
			if n, err := c.Read(buf); err == nil {
				r := new(mdns.Msg)
				if err := r.Unpack(buf[:n]); err != nil {
					t.Fatalf("the reply to %q does not unpack: %v", data, err)
				}
				if len(data) < 2 || r.Id != binary.BigEndian.Uint16(data) || !r.Response {
					t.Fatalf("a reply (id %d, response %v) to a datagram of %d bytes", r.Id, r.Response, len(data))
				}
			}
		default:
			c, err := net.Dial("tcp", tcpAddr)
			if err != nil {
				t.Fatal(err)
			}
			var stream []byte
			switch mode % 5 {
			case 1: // the bytes as they come: prefixes cut, lying or several messages
				stream = data
			case 2: // a prefix promising more than follows
				stream = append(binary.BigEndian.AppendUint16(nil, uint16(min(len(data)+1+int(mode)/5, 0xffff))), data...)
			case 3: // one byte of a prefix
				stream = []byte{byte(len(data))}
			}
			_, _ = c.Write(stream) // the server may have closed on an early error
			c.Close()
		}
		for _, network := range []string{"udp", "tcp"} {
			addr := udpAddr
			if network == "tcp" {
				addr = tcpAddr
			}
			cl := &mdns.Client{Net: network, Timeout: 5 * time.Second}
			resp, _, err := cl.Exchange(q, addr)
			if err != nil {
				t.Fatalf("after %q (mode %d): %s query: %v", data, mode, network, err)
			}
			if resp.Rcode != mdns.RcodeSuccess || len(resp.Answer) != 1 {
				t.Fatalf("after %q (mode %d): %s answer %v", data, mode, network, resp)
			}
			if a, ok := resp.Answer[0].(*mdns.A); !ok || a.A.String() != "10.96.7.7" {
				t.Fatalf("after %q (mode %d): %s answer %v, want 10.96.7.7", data, mode, network, resp.Answer[0])
			}
		}
	})
}
