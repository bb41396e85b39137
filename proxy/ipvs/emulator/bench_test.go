package emulator

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// benchService builds a TCP service with n destinations (weights 1..4, varied counters,
// none idle) for the given scheduler.
func benchService(b *testing.B, sched string, n int) (*Model, *service) {
	b.Helper()
	m := MustNew(Config{Seed: 1})
	if err := m.Exec([]string{"-A", "-t", "10.0.0.1:80", "-s", sched}, nil); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		addr := fmt.Sprintf("10.1.%d.%d:8080", i/250, i%250+1)
		if err := m.Exec([]string{"-a", "-t", "10.0.0.1:80", "-r", addr, "-m", "-w", fmt.Sprint(1 + i%4)}, nil); err != nil {
			b.Fatal(err)
		}
	}
	s := m.services[svcKey{proto: netfilter.ProtoTCP, addr: netip.MustParseAddr("10.0.0.1"), port: 80}]
	for i, d := range s.dests {
		d.active = 1 + (i*7)%13 // no idle destination: nq scans the whole list
		d.inactive = (i * 11) % 29
	}
	return m, s
}

// BenchmarkSchedule measures scheduler decisions with 100 (and, for scale, 1000)
// destinations: one call of the scheduler per op, over 1024 different clients (and 1024
// destination addresses for the locality schedulers).
func BenchmarkSchedule(b *testing.B) {
	for _, name := range ipvs.Schedulers() {
		for _, n := range []int{100, 1000} {
			b.Run(fmt.Sprintf("%s/dests=%d", name, n), func(b *testing.B) { benchSchedule(b, name, n) })
		}
	}
}

func benchSchedule(b *testing.B, name string, n int) {
	m, s := benchService(b, name, n)
	ins := make([]schedInput, 1024)
	for i := range ins {
		ins[i] = schedInput{saddr: netip.AddrFrom4([4]byte{192, 0, byte(i >> 8), byte(i)}),
			daddr: netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)}), sport: uint16(1024 + i), proto: netfilter.ProtoTCP}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if s.sched.schedule(m, s, &ins[i&1023], false) == nil {
			b.Fatal("no destination")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkConnection measures whole TCP connections through the IPVS hooks: SYN,
// SYN-ACK, ACK, FIN, FIN-ACK, ACK (six packets) per op, rr over 100 destinations, the
// virtual clock moving 10 ms per connection so that TIME_WAIT entries expire as they do
// under a steady load of 100 connections/s.
func BenchmarkConnection(b *testing.B) {
	clock := NewManualClock()
	m := MustNew(Config{Clock: clock})
	_ = m.Exec([]string{"-A", "-t", "10.0.0.1:80", "-s", "rr"}, nil)
	for i := 0; i < 100; i++ {
		_ = m.Exec([]string{"-a", "-t", "10.0.0.1:80", "-r", fmt.Sprintf("10.1.0.%d:8080", i+1), "-m"}, nil)
	}
	vip := netip.MustParseAddrPort("10.0.0.1:80")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, byte(i >> 16), byte(i >> 8)}), uint16(1024+i&0x3fff))
		d := m.In(Packet{Protocol: netfilter.ProtoTCP, Src: c, Dst: vip, TCPFlags: netfilter.TCPSyn})
		m.Out(Packet{Protocol: netfilter.ProtoTCP, Src: d.Dest, Dst: c, TCPFlags: netfilter.TCPSyn | netfilter.TCPAck})
		m.In(Packet{Protocol: netfilter.ProtoTCP, Src: c, Dst: vip, TCPFlags: netfilter.TCPAck})
		m.In(Packet{Protocol: netfilter.ProtoTCP, Src: c, Dst: vip, TCPFlags: netfilter.TCPFin | netfilter.TCPAck})
		m.Out(Packet{Protocol: netfilter.ProtoTCP, Src: d.Dest, Dst: c, TCPFlags: netfilter.TCPFin | netfilter.TCPAck})
		m.In(Packet{Protocol: netfilter.ProtoTCP, Src: c, Dst: vip, TCPFlags: netfilter.TCPAck})
		clock.Advance(10 * time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conns/s")
}

// BenchmarkLoadDumpRealServers: loading an ipvsadm -Sn dump whose one virtual service
// has n real servers; the time per real server stays flat as n grows (it grew with n
// while each add scanned the list: issue 23).
func BenchmarkLoadDumpRealServers(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		var buf strings.Builder
		buf.WriteString("-A -t 10.96.0.1:80 -s rr\n")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&buf, "-a -t 10.96.0.1:80 -r 10.%d.%d.%d:8080 -m -w 1\n", (i>>16)&255, (i>>8)&255, i&255)
		}
		data := []byte(buf.String())
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, _, err := LoadDump(Config{}, data, "bench"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/real-server")
		})
	}
}
