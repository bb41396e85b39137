package hostlink

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
)

func TestReadRequest(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want socksRequest
		err  string
	}{
		{in: []byte{5, 1, 0, 1, 10, 96, 0, 10, 0, 80}, want: socksRequest{cmd: 1, addr: netip.MustParseAddr("10.96.0.10"), port: 80}},
		{in: append(append([]byte{5, 1, 0, 3, 3}, "web"...), 0x1f, 0x90), want: socksRequest{cmd: 1, host: "web", port: 8080}},
		{in: append(append([]byte{5, 1, 0, 4}, netip.MustParseAddr("fd00::1").AsSlice()...), 0, 53), want: socksRequest{cmd: 1, addr: netip.MustParseAddr("fd00::1"), port: 53}},
		{in: []byte{4, 1, 0, 1, 10, 96, 0, 10, 0, 80}, err: "version 4"},
		{in: []byte{5, 1, 0, 9, 1, 2}, err: "unknown address type"},
		{in: []byte{5, 1, 0, 3, 0, 0, 80}, err: "empty domain name"},
		{in: append(append([]byte{5, 1, 0, 3, 4}, "a b."...), 0, 80), err: "has a byte 0x20"},
		{in: []byte{5, 1, 0, 1, 10, 96}, err: "unexpected EOF"},
	} {
		got, err := readRequest(bytes.NewReader(tc.in))
		if tc.err != "" {
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.err)) {
				t.Errorf("%v: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%v: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if !bytes.Equal(got.encode(), tc.in) {
			t.Errorf("%+v encodes as %v, want %v", got, got.encode(), tc.in)
		}
	}
	if _, err := readRequest(bytes.NewReader([]byte{5, 1, 0, 7})); !errors.Is(err, errSocksAtyp) {
		t.Errorf("address type 7: %v, want errSocksAtyp", err)
	}
}

func TestReadGreeting(t *testing.T) {
	for _, tc := range []struct {
		in     []byte
		noAuth bool
		err    bool
	}{
		{in: []byte{5, 1, 0}, noAuth: true},
		{in: []byte{5, 2, 2, 0}, noAuth: true},
		{in: []byte{5, 1, 2}},
		{in: []byte{5, 0}},
		{in: []byte{4, 1, 0}, err: true},
		{in: []byte{5, 3, 0}, err: true},
	} {
		noAuth, err := readGreeting(bytes.NewReader(tc.in))
		if (err != nil) != tc.err || noAuth != tc.noAuth {
			t.Errorf("%v: %v, %v; want noAuth %v, error %v", tc.in, noAuth, err, tc.noAuth, tc.err)
		}
	}
}

func TestSocksReply(t *testing.T) {
	if got, want := socksReply(repSucceeded, netip.MustParseAddrPort("203.0.113.1:4000")), []byte{5, 0, 0, 1, 203, 0, 113, 1, 0x0f, 0xa0}; !bytes.Equal(got, want) {
		t.Errorf("IPv4 reply %v, want %v", got, want)
	}
	if got := socksReply(repRefused, netip.AddrPort{}); !bytes.Equal(got, []byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0}) {
		t.Errorf("refused reply %v", got)
	}
	if got := socksReply(repSucceeded, netip.MustParseAddrPort("[fd00::1]:80")); len(got) != 22 || got[3] != atypIPv6 {
		t.Errorf("IPv6 reply %v", got)
	}
}

// FuzzReadRequest: any bytes give a request or an error, never a panic; a request read
// encodes back to the bytes it was read from (but RSV), and its target is not empty.
func FuzzReadRequest(f *testing.F) {
	f.Add([]byte{5, 1, 0, 1, 10, 96, 0, 10, 0, 80})
	f.Add(append(append([]byte{5, 1, 0, 3, 29}, "web.default.svc.cluster.local"...), 0, 80))
	f.Add(append(append([]byte{5, 1, 0, 4}, netip.MustParseAddr("fd00::1").AsSlice()...), 0, 53))
	f.Add([]byte{5, 2, 0, 3, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		req, err := readRequest(r)
		if err != nil {
			return
		}
		used := append([]byte(nil), b[:len(b)-r.Len()]...)
		used[2] = 0 // RSV: ignored, as most servers do
		if enc := req.encode(); !bytes.Equal(enc, used) {
			// An IPv4-mapped IPv6 address is read as IPv4: the only lossy case.
			if !(used[3] == atypIPv6 && req.addr.Is4()) {
				t.Fatalf("%v read as %+v, which encodes as %v", used, req, enc)
			}
		}
		if req.target() == "" {
			t.Fatalf("%+v: empty target", req)
		}
	})
}
