package netsim

import (
	"bytes"
	"testing"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// TestPayloadKeepsBytesAndBuffer: frame.payload hands netstack the frame's bytes, and a
// long frame's bytes after its head stay in the frame's own buffer even after the IP
// layer's pattern of a held header view and a second read of the header (which copies
// a shared view whole: buffer.PullUp's copy-on-write), so that a 64 KiB train is not
// cleared and copied again at every delivery.
func TestPayloadKeepsBytesAndBuffer(t *testing.T) {
	for _, size := range []int{20, 100, splitHeadAt, splitHeadAt + splitHeadMin - 1, splitHeadAt + splitHeadMin, 1500, 9000, 65535} {
		want := make([]byte, size)
		for i := range want {
			want[i] = byte(i*7 + i>>8)
		}
		if size >= header.IPv4MinimumSize {
			header.IPv4(want).Encode(&header.IPv4Fields{TotalLength: uint16(size), TTL: 64, Protocol: 6})
		}
		v := buffer.NewViewWithData(want)
		f := frame{b: v.AsSlice(), v: v}
		orig := f.b
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: f.payload()})
		if got := pkt.ToBuffer(); !bytes.Equal(got.Flatten(), want) {
			t.Fatalf("size %d: netstack got other bytes", size)
		}
		if size < header.IPv4MinimumSize {
			pkt.DecRef()
			continue
		}
		if _, ok := pkt.NetworkHeader().Consume(header.IPv4MinimumSize); !ok {
			t.Fatalf("size %d: no IPv4 header", size)
		}
		held := pkt.NetworkHeader().View() // as ipv4's parseAndValidate
		_ = pkt.NetworkHeader().Slice()    // as HandlePacket's second read
		off := 0
		inPlace := false
		for _, s := range pkt.AsSlices() {
			if off <= splitHeadAt && splitHeadAt < off+len(s) && &s[splitHeadAt-off] == &orig[splitHeadAt] {
				inPlace = true
			}
			off += len(s)
		}
		if long := size >= splitHeadAt+splitHeadMin; inPlace != long {
			t.Errorf("size %d: bytes after the head still in the frame's buffer: %v, want %v", size, inPlace, long)
		}
		if got := pkt.ToBuffer(); !bytes.Equal(got.Flatten(), want) {
			t.Fatalf("size %d: bytes changed after the header reads", size)
		}
		held.Release()
		pkt.DecRef()
	}
	// A frame whose bytes are not its view's (rewritten elsewhere) is copied.
	b := bytes.Repeat([]byte{9}, 2000)
	f := frame{b: b}
	p := f.payload()
	if !bytes.Equal(p.Flatten(), b) {
		t.Fatal("a plain frame's bytes changed")
	}
	p.Release()
}
