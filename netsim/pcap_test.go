package netsim

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
)

// A capture is a classic pcap file as libpcap writes it (so Wireshark and tcpdump open
// it): the 24-byte header (magic a1b2c3d4 in host order, version 2.4, no time zone
// correction, the snap length, LINKTYPE_RAW), then records whose headers give a second,
// a microsecond under a million, a captured length within the snap length and equal to the
// packet's length, and whose data is one IP packet; the records fill the file exactly.
// When tcpdump is installed, it must read the file too.
func TestPcapFileFormat(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	client := startPod(t, c, "node-a", "default/client")
	vip := netip.MustParseAddrPort("10.96.0.90:80")
	attachDNAT(c, &staticDNAT{vip: vip, backends: []netip.AddrPort{netip.AddrPortFrom(web.IP(), 8080)}})
	var buf bytes.Buffer
	stop, err := c.Capture("node-a/eth0", &buf)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := ask(t, client.Net(), vip.String()); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	b := buf.Bytes()
	if len(b) < 24 {
		t.Fatalf("%d bytes", len(b))
	}
	le := binary.LittleEndian
	if le.Uint32(b[0:]) != 0xa1b2c3d4 || le.Uint16(b[4:]) != 2 || le.Uint16(b[6:]) != 4 || le.Uint32(b[8:]) != 0 || le.Uint32(b[12:]) != 0 || le.Uint32(b[16:]) != 262144 || le.Uint32(b[20:]) != 101 {
		t.Fatalf("pcap header % x", b[:24])
	}
	records := 0
	off := 24
	for off < len(b) {
		if off+16 > len(b) {
			t.Fatalf("record header at %d cut short", off)
		}
		usec, incl, orig := le.Uint32(b[off+4:]), le.Uint32(b[off+8:]), le.Uint32(b[off+12:])
		if usec >= 1e6 || incl > 262144 || incl != orig || off+16+int(incl) > len(b) {
			t.Fatalf("record %d at %d: usec %d, lengths %d/%d", records, off, usec, incl, orig)
		}
		pk, err := ParsePacket(b[off+16 : off+16+int(incl)])
		if err != nil || !pk.ChecksumsValid() || int(binary.BigEndian.Uint16(pk.Data[2:])) != len(pk.Data) {
			t.Fatalf("record %d is not one valid IPv4 packet: %v %v", records, pk, err)
		}
		records++
		off += 16 + int(incl)
	}
	if records < 10 {
		t.Fatalf("%d records for two HTTP exchanges", records)
	}
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Skip("tcpdump not installed: the file was checked against the format only")
	}
	f := filepath.Join(t.TempDir(), "eth0.pcap")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tcpdump, "-n", "-r", f).CombinedOutput()
	if err != nil {
		t.Fatalf("tcpdump -r: %v\n%s", err, out)
	}
	if lines := strings.Count(string(out), " IP "); lines != records || !strings.Contains(string(out), "link-type RAW") {
		t.Errorf("tcpdump read %d IP packets of %d:\n%s", lines, records, out)
	}
}

// TestCaptureUnknownPoint: a capture point that names no interface is an error naming
// what exists, not a capture that stays empty.
func TestCaptureUnknownPoint(t *testing.T) {
	c := newTestCluster(t, Config{Seed: 1, ManualClock: true, Nodes: []NodeConfig{{Name: "node-a"}}})
	startPod(t, c, "node-a", "default/web")
	var b bytes.Buffer
	for _, ok := range []string{"node-a/eth0", "node-a/cbr0", "node-a/lo", "pod/default/web"} {
		stop, err := c.Capture(ok, &b)
		if err != nil {
			t.Errorf("%s: %v", ok, err)
			continue
		}
		stop()
	}
	for point, want := range map[string]string{
		"node-a/eth9":      `capture point "node-a/eth9": node node-a has no interface "eth9" (it has cbr0, eth0, lo)`,
		"pod/default/nope": `capture point "pod/default/nope": no pod default/nope`,
		"external/laptop":  `capture point "external/laptop": no external host "laptop"`,
		"node-z/eth0":      `capture point "node-z/eth0": want NODE/IFACE`,
	} {
		if _, err := c.Capture(point, &b); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", point, err, want)
		}
	}
}

// TestPcapNG: CaptureNG writes one pcapng file for several capture points: a section
// header, an interface per point named after it with nanosecond timestamps, and each
// packet as an enhanced packet block naming the interface it crossed; the virtual
// clock's time, never decreasing. A DNATed exchange shows the client's packet on the
// client node's bridge (to the VIP) and on its uplink (to the pod).
func TestPcapNG(t *testing.T) {
	c := newTestCluster(t, threeNodes())
	web := startPod(t, c, "node-b", "default/web", 8080)
	client := startPod(t, c, "node-a", "default/client")
	vip := netip.MustParseAddrPort("10.96.0.90:80")
	attachDNAT(c, &staticDNAT{vip: vip, backends: []netip.AddrPort{netip.AddrPortFrom(web.IP(), 8080)}})
	var buf bytes.Buffer
	points := []string{"node-a/cbr0", "node-a/eth0", "pod/default/web"}
	stop, err := c.CaptureNG(points, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ask(t, client.Net(), vip.String()); err != nil {
		t.Fatal(err)
	}
	stop()
	b := buf.Bytes()
	le := binary.LittleEndian
	var names []string
	perIface := map[uint32][]*Packet{}
	var last uint64
	for off := 0; off < len(b); {
		if off+12 > len(b) {
			t.Fatalf("block at %d cut short", off)
		}
		typ, total := le.Uint32(b[off:]), int(le.Uint32(b[off+4:]))
		if total < 12 || total%4 != 0 || off+total > len(b) || int(le.Uint32(b[off+total-4:])) != total {
			t.Fatalf("block at %d: type %#x length %d", off, typ, total)
		}
		body := b[off+8 : off+total-4]
		switch typ {
		case 0x0A0D0D0A:
			if off != 0 || le.Uint32(body) != 0x1A2B3C4D || le.Uint16(body[4:]) != 1 {
				t.Fatalf("section header % x", body[:8])
			}
		case 1:
			if le.Uint16(body) != 101 {
				t.Errorf("interface link type %d, want 101 (raw IP)", le.Uint16(body))
			}
			var name string
			res := -1
			for o := 8; o+4 <= len(body); {
				code, l := le.Uint16(body[o:]), int(le.Uint16(body[o+2:]))
				v := body[o+4 : o+4+l]
				switch code {
				case 2:
					name = string(v)
				case 9:
					res = int(v[0])
				}
				o += 4 + (l+3)/4*4
				if code == 0 {
					break
				}
			}
			if res != 9 {
				t.Errorf("interface %q: if_tsresol %d, want 9 (ns)", name, res)
			}
			names = append(names, name)
		case 6:
			id, ts := le.Uint32(body), uint64(le.Uint32(body[4:]))<<32|uint64(le.Uint32(body[8:]))
			capl, origl := int(le.Uint32(body[12:])), int(le.Uint32(body[16:]))
			if int(id) >= len(names) || capl != origl || 20+capl > len(body) {
				t.Fatalf("packet block: interface %d, lengths %d/%d", id, capl, origl)
			}
			if ts < last {
				t.Errorf("timestamp %d after %d", ts, last)
			}
			last = ts
			pk, err := ParsePacket(append([]byte(nil), body[20:20+capl]...))
			if err != nil {
				t.Fatalf("packet on %s: %v", names[id], err)
			}
			perIface[id] = append(perIface[id], pk)
		default:
			t.Fatalf("unexpected block type %#x", typ)
		}
		off += total
	}
	if !slices.Equal(names, points) {
		t.Fatalf("interfaces %q, want %q", names, points)
	}
	for i := range points {
		if len(perIface[uint32(i)]) == 0 {
			t.Errorf("no packet on %s", points[i])
		}
	}
	if first := perIface[0][0]; first.Dst != vip.Addr() || first.TCPFlags != netfilter.TCPSyn {
		t.Errorf("first packet on node-a/cbr0: %v, want the SYN to the VIP", first)
	}
	if first := perIface[1][0]; first.Dst != web.IP() {
		t.Errorf("first packet on node-a/eth0: %v, want it DNATed to the pod", first)
	}
	if _, err := c.CaptureNG([]string{"node-a/eth0", "node-a/nope"}, &buf); err == nil {
		t.Error("a point that does not exist: no error")
	}
}
