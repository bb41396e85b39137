package netsim

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// offloadRun is one lockstep transfer through a ClusterIP (static DNAT) from a client
// pod on node-a to a server pod on node-b: the client writes each message whole, the
// server reads it and answers one byte, the client waits for that byte before the next
// message. What the run saw:
type offloadRun struct {
	received    []byte // what the server read, in order
	hookSizes   []int  // TCP payload sizes of client→server data packets at node-b's FORWARD hook
	hookPackets uint64 // client→server packets at that hook, data or not (a rule's packet counter)
	hookBytes   int    // their IP lengths summed (a rule's byte counter)
	ctPackets   uint64 // node-b's conntrack counters of the flow, original direction
	ctBytes     uint64
	capSizes    []int    // TCP payload sizes of client→server data packets in the server pod's capture
	firstSizes  []int    // the same without retransmissions (a sequence number seen before)
	firstPSH    []bool   // whether each of those carries PSH
	maxIPLen    int      // the largest packet in the capture, either direction
	badCsum     int      // captured packets whose checksums do not verify
	segsIn      uint64   // TCP segments the server's netstack received
	trusted     uint64   // segments the server pod's GRO took as checked (frame.sumsOK)
	csumErrs    uint64   // TCP checksum errors the server's netstack counted
	lost        uint64   // packets node-a's uplink lost
	ctEntries   []string // every conntrack entry of node-b, rendered
}

var offloadMessages = []int{1, 100, 1448, 1449, 2896, 3000, 20000, 65536, 65537, 200000, 7}

func runOffload(t *testing.T, noOffload bool, faults LinkFaults) offloadRun {
	t.Helper()
	cfg := Config{Seed: 3, NoOffload: noOffload, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}}}
	c := newTestCluster(t, cfg)
	server, err := c.StartPod("node-b", "default", "server", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	client, err := c.StartPod("node-a", "default", "client", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	backend := netip.AddrPortFrom(server.IP(), 8080)
	vip := netip.MustParseAddrPort("10.96.0.7:80")
	attachDNAT(c, &staticDNAT{vip: vip, backends: []netip.AddrPort{backend}})

	var run offloadRun
	var mu sync.Mutex
	c.Node("node-b").AddHandler(HandlerSpec{Name: "count", Hook: netfilter.Forward, Priority: 0, Handler: HandlerFunc(func(ctx *Context, p *Packet) Verdict {
		if p.Proto == netfilter.ProtoTCP && p.Dst == backend.Addr() && p.DstPort == backend.Port() {
			mu.Lock()
			run.hookBytes += len(p.Data)
			run.hookPackets++
			if n := len(p.Payload()); n > 0 {
				run.hookSizes = append(run.hookSizes, n)
			}
			mu.Unlock()
		}
		return VerdictContinue
	})})
	var capBuf bytes.Buffer
	stopCap, err := c.Capture("pod/default/server", &capBuf)
	if err != nil {
		t.Fatal(err)
	}
	c.Node("node-a").Uplink().SetFaults(faults)

	ln, err := server.Net().Listen("tcp", ":8080")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	total := 0
	for _, m := range offloadMessages {
		total += m
	}
	done := make(chan error, 1)
	release := make(chan struct{}) // the server closes only after the counters are read
	defer close(release)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer func() { <-release; s.Close() }()
		s.SetDeadline(time.Now().Add(60 * time.Second))
		for _, m := range offloadMessages {
			buf := make([]byte, m)
			if _, err := io.ReadFull(s, buf); err != nil {
				done <- err
				return
			}
			run.received = append(run.received, buf...)
			if _, err := s.Write([]byte{1}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	cl, err := client.Net().Dial("tcp", vip.String())
	if err != nil {
		t.Fatal(err)
	}
	cl.SetDeadline(time.Now().Add(60 * time.Second))
	want := offloadPayload(total)
	off := 0
	for _, m := range offloadMessages {
		if _, err := cl.Write(want[off : off+m]); err != nil {
			t.Fatal(err)
		}
		off += m
		if _, err := io.ReadFull(cl, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(run.received, want) {
		t.Fatalf("server read %d bytes, not the %d sent", len(run.received), len(want))
	}
	c.Quiesce() // the last ACKs through, before the counters are read
	stopCap()
	mu.Lock()
	defer mu.Unlock()
	run.capSizes, run.firstSizes, run.firstPSH, run.maxIPLen, run.badCsum = captureSizes(t, capBuf.Bytes(), backend)
	run.segsIn = server.stack.Load().s.Stats().TCP.ValidSegmentsReceived.Value()
	run.csumErrs = server.stack.Load().s.Stats().TCP.ChecksumErrors.Value()
	if gs := server.stack.Load().link.groState.Load(); gs != nil {
		gs.mu.Lock()
		run.trusted = gs.trusted
		gs.mu.Unlock()
	}
	_, run.lost = c.Node("node-a").Uplink().Counters()
	for _, e := range c.Node("node-b").Conntrack().Entries() {
		s := fmt.Sprint(e.Orig, e.Reply, e.Status, e.TCPState)
		if e.Orig.Dst == backend.Addr() && e.Orig.DstPort == backend.Port() {
			run.ctPackets, run.ctBytes = e.Packets[0], e.Bytes[0]
		}
		run.ctEntries = append(run.ctEntries, s)
	}
	slices.Sort(run.ctEntries)
	cl.Close()
	return run
}

func offloadPayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// captureSizes reads a pcap: the payload sizes of data packets to dst, in order, with
// and without the ones whose sequence number came before (retransmissions: a timer may
// fire on either path when the machine is slow), the largest IP packet and the number of
// packets whose checksums fail.
func captureSizes(t *testing.T, b []byte, dst netip.AddrPort) (sizes, first []int, psh []bool, maxLen, bad int) {
	t.Helper()
	le := binary.LittleEndian
	seen := map[uint32]bool{}
	for off := 24; off < len(b); {
		n := int(le.Uint32(b[off+8:]))
		pk, err := ParsePacket(b[off+16 : off+16+n])
		if err != nil {
			t.Fatal(err)
		}
		maxLen = max(maxLen, len(pk.Data))
		if !pk.ChecksumsValid() {
			bad++
		}
		if pk.Proto == netfilter.ProtoTCP && pk.Dst == dst.Addr() && pk.DstPort == dst.Port() && len(pk.Payload()) > 0 {
			sizes = append(sizes, len(pk.Payload()))
			if seq := binary.BigEndian.Uint32(pk.Data[pk.l4off+4:]); !seen[seq] {
				seen[seq] = true
				first = append(first, len(pk.Payload()))
				psh = append(psh, pk.TCPFlags&0x08 != 0)
			}
		}
		off += 16 + n
	}
	return sizes, first, psh, maxLen, bad
}

// Segmentation offload changes nothing the datapath or a capture sees. The same transfer
// runs with offload on and off (Config.NoOffload); in both, the server reads the bytes
// sent; no captured packet exceeds the MTU or carries more than the MSS (the same MSS);
// every checksum verifies; the capture at the server pod holds exactly the packets node-b's
// FORWARD hook saw, in order, and conntrack's original-direction counters count exactly
// those packets and bytes (so a rule counter counts segments, not merged packets); the
// conntrack entry ends in the same state; and each message of up to 20,000 bytes leaves
// as the same segments (full MSS, then the remainder; retransmissions aside) in both runs. (Longer messages
// depend on window and ACK timing, which vary between runs on either path.) And offload
// did act: the server's netstack took the stream in fewer, merged segments than the
// capture shows, where without offload it took at least one per packet.
func TestOffloadObservablySame(t *testing.T) {
	on := runOffload(t, false, LinkFaults{})
	off := runOffload(t, true, LinkFaults{})
	mss := slices.Max(off.capSizes)
	if got := slices.Max(on.capSizes); got != mss {
		t.Errorf("largest segment %d bytes with offload, %d without", got, mss)
	}
	var want []int
	var wantPSH []bool // PSH on a message's last segment only, as without offload
	for _, m := range offloadMessages {
		if m > 20000 {
			break
		}
		for ; m > mss; m -= mss {
			want = append(want, mss)
			wantPSH = append(wantPSH, false)
		}
		want = append(want, m)
		wantPSH = append(wantPSH, true)
	}
	for name, r := range map[string]offloadRun{"offload": on, "no offload": off} {
		if r.maxIPLen > 1500 || r.badCsum != 0 {
			t.Errorf("%s: largest captured packet %d bytes (MTU 1500), %d with bad checksums", name, r.maxIPLen, r.badCsum)
		}
		if !slices.Equal(r.hookSizes, r.capSizes) {
			t.Errorf("%s: the capture's segments are not the hook's:\n%v\n%v", name, r.hookSizes, r.capSizes)
		}
		if r.ctPackets != r.hookPackets || r.ctBytes != uint64(r.hookBytes) {
			t.Errorf("%s: conntrack counted %d packets, %d bytes; the hook %d, %d", name, r.ctPackets, r.ctBytes, r.hookPackets, r.hookBytes)
		}
		if len(r.firstSizes) < len(want) || !slices.Equal(r.firstSizes[:len(want)], want) {
			t.Errorf("%s: the first messages left as\n%v\nnot as\n%v", name, r.firstSizes[:min(len(want), len(r.firstSizes))], want)
		} else if !slices.Equal(r.firstPSH[:len(want)], wantPSH) {
			t.Errorf("%s: PSH on the first messages' segments\n%v\nnot\n%v", name, r.firstPSH[:len(want)], wantPSH)
		}
	}
	if !slices.Equal(on.ctEntries, off.ctEntries) {
		t.Errorf("conntrack differs:\n on  %v\n off %v", on.ctEntries, off.ctEntries)
	}
	data := uint64(len(on.capSizes))
	if on.segsIn >= data {
		t.Errorf("with offload the server's stack received %d segments for %d data packets: nothing merged", on.segsIn, data)
	}
	// The segments the client's link cut reach the server's GRO with their checksums
	// known right (through node-a's DNAT and both nodes' TTL updates), so GRO does not
	// sum them again (pure ACKs too: TCP hands the link every packet of a GSO
	// connection with a partial checksum); never more than node-b forwarded.
	if on.trusted < data || on.trusted > on.hookPackets || off.trusted != 0 || on.csumErrs != 0 || off.csumErrs != 0 {
		t.Errorf("segments taken as checked by the server's GRO: %d (data packets %d, all %d) with offload, %d without; checksum errors %d and %d", on.trusted, data, on.hookPackets, off.trusted, on.csumErrs, off.csumErrs)
	}
	if off.segsIn < uint64(len(off.capSizes)) {
		t.Errorf("without offload the server's stack received %d segments for %d data packets", off.segsIn, len(off.capSizes))
	}
	t.Logf("MSS %d; data packets %d and %d; server netstack segments: %d with offload, %d without", mss, data, len(off.capSizes), on.segsIn, off.segsIn)
}

// Faults act on each MTU-sized segment with offload as without: a lossy uplink loses
// single segments (the capture shows retransmitted MSS-sized segments, never a merged
// one), and the stream still arrives whole.
func TestOffloadFaultsPerSegment(t *testing.T) {
	if testing.Short() {
		t.Skip("retransmissions take wall time")
	}
	for _, noOffload := range []bool{false, true} {
		r := runOffload(t, noOffload, LinkFaults{Loss: 0.02})
		if r.lost == 0 {
			t.Errorf("no offload %v: the lossy uplink lost nothing", noOffload)
		}
		if r.maxIPLen > 1500 || r.badCsum != 0 || slices.Max(r.capSizes) > 1448 {
			t.Errorf("no offload %v: largest packet %d, largest segment %d, %d bad checksums", noOffload, r.maxIPLen, slices.Max(r.capSizes), r.badCsum)
		}
		// Lost segments were sent again: more data packets than without loss.
		sum := 0
		for _, s := range r.capSizes {
			sum += s
		}
		if sum < len(r.received) {
			t.Errorf("no offload %v: %d payload bytes captured for %d delivered", noOffload, sum, len(r.received))
		}
	}
}

// segment cuts an IPv4 and an IPv6 TCP packet of 10,000 payload bytes handed over with
// GSO options into MSS-sized packets: valid checksums (from a partial one), IP lengths,
// sequence numbers advancing by the payload, PSH on the last only, the options on each,
// and the payload in order; a packet within the MSS keeps its size and gets its checksum.
func TestLinkSegmentsGSOPackets(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		const mss, size = 1408, 10000
		opts := []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2} // NOP NOP timestamps
		payload := offloadPayload(size)
		var pkt []byte
		l3 := 20
		if v6 {
			l3 = 40
			pkt = make([]byte, 40)
			pkt[0] = 0x60
			binary.BigEndian.PutUint16(pkt[4:], uint16(32+size))
			pkt[6], pkt[7] = 6, 64
			copy(pkt[8:], netip.MustParseAddr("fd00::1").AsSlice())
			copy(pkt[24:], netip.MustParseAddr("fd00::2").AsSlice())
		} else {
			pkt = make([]byte, 20)
			pkt[0] = 0x45
			binary.BigEndian.PutUint16(pkt[2:], uint16(20+32+size))
			pkt[6], pkt[8], pkt[9] = 0x40, 64, 6
			copy(pkt[12:], netip.MustParseAddr("10.0.0.1").AsSlice())
			copy(pkt[16:], netip.MustParseAddr("10.0.0.2").AsSlice())
		}
		tcp := make([]byte, 32)
		binary.BigEndian.PutUint16(tcp[0:], 1000)
		binary.BigEndian.PutUint16(tcp[2:], 80)
		binary.BigEndian.PutUint32(tcp[4:], 0xfffff000) // wraps inside the packet
		binary.BigEndian.PutUint32(tcp[8:], 77)
		tcp[12], tcp[13] = 8<<4, 0x18 // ACK|PSH
		binary.BigEndian.PutUint16(tcp[14:], 500)
		binary.BigEndian.PutUint16(tcp[16:], 0x1234) // a partial checksum to be replaced
		copy(tcp[20:], opts)
		pkt = append(append(pkt, tcp...), payload...)
		if !v6 {
			ip := pkt[:20]
			binary.BigEndian.PutUint16(ip[10:], 0)
		}
		var got []*Packet
		l := &stackLink{out: func(f frame) {
			pk, err := ParsePacket(append([]byte(nil), f.b...))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, pk)
		}}
		run := func(b []byte) {
			v := buffer.NewView(len(b))
			v.Write(b)
			l.segment(v, stack.GSO{Type: stack.GSOTCPv4, NeedsCsum: true, MSS: mss})
		}
		run(pkt)
		if len(got) != (size+mss-1)/mss {
			t.Fatalf("v6 %v: %d packets", v6, len(got))
		}
		var joined []byte
		for i, pk := range got {
			n := len(pk.Payload())
			last := i == len(got)-1
			if !pk.ChecksumsValid() || (!last && n != mss) || len(pk.Data) != l3+32+n {
				t.Fatalf("v6 %v packet %d: %d payload bytes of %d, checksums valid %v", v6, i, n, len(pk.Data), pk.ChecksumsValid())
			}
			h := pk.Data[l3:]
			if seq := binary.BigEndian.Uint32(h[4:]); seq != 0xfffff000+uint32(i*mss) {
				t.Errorf("v6 %v packet %d: seq %#x", v6, i, seq)
			}
			if psh := h[13]&0x08 != 0; psh != last || h[13]&0x10 == 0 {
				t.Errorf("v6 %v packet %d: flags %#x", v6, i, h[13])
			}
			if !bytes.Equal(h[20:32], opts) || binary.BigEndian.Uint32(h[8:]) != 77 {
				t.Errorf("v6 %v packet %d: options or ACK changed", v6, i)
			}
			joined = append(joined, pk.Payload()...)
		}
		if !bytes.Equal(joined, payload) {
			t.Errorf("v6 %v: payload not carried in order", v6)
		}
		// Within the MSS: one packet, its checksum completed.
		got = nil
		small := append([]byte(nil), pkt[:l3+32+100]...)
		if v6 {
			binary.BigEndian.PutUint16(small[4:], 32+100)
		} else {
			binary.BigEndian.PutUint16(small[2:], uint16(l3+32+100))
			ip := header.IPv4(small)
			ip.SetChecksum(0)
			ip.SetChecksum(^ip.CalculateChecksum())
		}
		run(small)
		if len(got) != 1 || len(got[0].Data) != len(small) || !got[0].ChecksumsValid() || got[0].Data[l3+13] != 0x18 {
			t.Errorf("v6 %v: a packet within the MSS came out as %d packets", v6, len(got))
		}
	}
}

// A pod's connection to its own address never reaches the link (netstack loops it back
// inside the stack), yet its TCP was set up for GSO: 3 MiB still arrive intact (a looped
// super-packet with a partial checksum must not be dropped).
func TestOffloadSelfConnection(t *testing.T) {
	c := newTestCluster(t, Config{Seed: 1, Nodes: []NodeConfig{{Name: "node-a"}}})
	p := startPod(t, c, "node-a", "default/self")
	ln, err := p.Net().Listen("tcp", ":9000")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	want := offloadPayload(3 << 20)
	got := make(chan []byte, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		s.SetDeadline(time.Now().Add(30 * time.Second))
		b, _ := io.ReadAll(s)
		got <- b
		s.Close()
	}()
	cl, err := p.Net().Dial("tcp", netip.AddrPortFrom(p.IP(), 9000).String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Write(want); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("got %d bytes of %d", len(b), len(want))
	}
}
