package emulator

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

func (tm *testModel) pkt(proto uint8, src, dst string, flags uint8) Decision {
	tm.t.Helper()
	return tm.In(Packet{Protocol: proto, Src: netip.MustParseAddrPort(src), Dst: netip.MustParseAddrPort(dst), TCPFlags: flags})
}

func (tm *testModel) reply(proto uint8, src, dst string, flags uint8) Decision {
	tm.t.Helper()
	return tm.Out(Packet{Protocol: proto, Src: netip.MustParseAddrPort(src), Dst: netip.MustParseAddrPort(dst), TCPFlags: flags})
}

func (tm *testModel) stateOf(proto uint8, client, virtual string) string {
	e := tm.connEntry(proto, netip.MustParseAddrPort(client), netip.MustParseAddrPort(virtual))
	if e == nil {
		return "gone"
	}
	return e.State + " " + e.Expires.String()
}

const svcLabel = "TCP " + vip

func TestTCPStatesAndCounters(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		tm := newTM(t, Config{LegacyActiveConns: legacy}, svcLines("rr", "A")...)
		const c = "192.0.2.1:40000"
		d := tm.pkt(netfilter.ProtoTCP, c, vip, netfilter.TCPSyn)
		if d.Verdict != VerdictForward || letter(d.Dest) != "A" || !d.New || d.Via != ViaScheduler {
			t.Fatalf("SYN: %+v", d)
		}
		eq(t, "state after SYN", tm.stateOf(netfilter.ProtoTCP, c, vip), "SYN_RECV 1m0s")
		if legacy {
			eq(t, "legacy: SYN_RECV is inactive", tm.counters(svcLabel, "10.1.0.1:80"), "0/1/0")
		} else {
			eq(t, "since 4.8 SYN_RECV is active", tm.counters(svcLabel, "10.1.0.1:80"), "1/0/0")
		}
		r := tm.reply(netfilter.ProtoTCP, "10.1.0.1:80", c, netfilter.TCPSyn|netfilter.TCPAck)
		if r.Verdict != VerdictForward || r.Dest.String() != vip {
			t.Fatalf("SYN-ACK: %+v", r)
		}
		eq(t, "state after SYN-ACK", tm.stateOf(netfilter.ProtoTCP, c, vip), "SYN_RECV 1m0s")
		tm.pkt(netfilter.ProtoTCP, c, vip, netfilter.TCPAck)
		eq(t, "state after ACK", tm.stateOf(netfilter.ProtoTCP, c, vip), "ESTABLISHED 15m0s")
		eq(t, "established", tm.counters(svcLabel, "10.1.0.1:80"), "1/0/0")
		tm.advance(10 * time.Minute)
		tm.pkt(netfilter.ProtoTCP, c, vip, netfilter.TCPAck)
		eq(t, "a packet restarts the timer", tm.stateOf(netfilter.ProtoTCP, c, vip), "ESTABLISHED 15m0s")
		tm.pkt(netfilter.ProtoTCP, c, vip, netfilter.TCPFin|netfilter.TCPAck)
		eq(t, "client FIN", tm.stateOf(netfilter.ProtoTCP, c, vip), "CLOSE_WAIT 1m0s")
		eq(t, "CLOSE_WAIT is inactive", tm.counters(svcLabel, "10.1.0.1:80"), "0/1/0")
		tm.reply(netfilter.ProtoTCP, "10.1.0.1:80", c, netfilter.TCPFin|netfilter.TCPAck)
		eq(t, "server FIN", tm.stateOf(netfilter.ProtoTCP, c, vip), "TIME_WAIT 2m0s")
		tm.advance(2*time.Minute - time.Millisecond)
		eq(t, "TIME_WAIT before expiry", tm.counters(svcLabel, "10.1.0.1:80"), "0/1/0")
		tm.advance(time.Millisecond)
		eq(t, "entry expired", tm.stateOf(netfilter.ProtoTCP, c, vip), "gone")
		eq(t, "counters after expiry", tm.counters(svcLabel, "10.1.0.1:80"), "0/0/0")
	}
}

func TestTCPNoEntry(t *testing.T) {
	tm := newTM(t, Config{}, svcLines("rr", "A")...)
	if d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1", vip, netfilter.TCPAck); d.Verdict != VerdictAccept {
		t.Errorf("ACK without an entry: %v, want accept", d.Verdict)
	}
	if d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1", vip, netfilter.TCPSyn|netfilter.TCPRst); d.Verdict != VerdictAccept {
		t.Errorf("RST: %v, want accept", d.Verdict)
	}
	if d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1", "10.0.0.1:81", netfilter.TCPSyn); d.Verdict != VerdictAccept {
		t.Errorf("SYN to a port without a service: %v, want accept", d.Verdict)
	}
	tm.do("sysctl sloppy_tcp=1")
	d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1", vip, netfilter.TCPAck)
	if d.Verdict != VerdictForward || !d.New {
		t.Fatalf("sloppy_tcp ACK: %+v", d)
	}
	eq(t, "sloppy ACK from NONE", tm.stateOf(netfilter.ProtoTCP, "192.0.2.1:1", vip), "ESTABLISHED 15m0s")
	// a TCP packet with none of SYN/FIN/ACK/RST moves the entry to CLOSE
	tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1", vip, 0)
	eq(t, "no flags", tm.stateOf(netfilter.ProtoTCP, "192.0.2.1:1", vip), "CLOSE 10s")
}

func TestSYNOnlyEntryExpires(t *testing.T) {
	tm := newTM(t, Config{}, svcLines("rr", "A")...)
	tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1", vip, netfilter.TCPSyn)
	tm.advance(59 * time.Second)
	eq(t, "at 59s", tm.counters(svcLabel, "10.1.0.1:80"), "1/0/0")
	tm.advance(time.Second)
	eq(t, "at 60s", tm.counters(svcLabel, "10.1.0.1:80"), "0/0/0")
}

func TestUDPEntries(t *testing.T) {
	tm := newTM(t, Config{}, "-A -u 10.0.0.53:53 -s rr", "-a -u 10.0.0.53:53 -r 10.1.0.1:53 -m", "-a -u 10.0.0.53:53 -r 10.1.0.2:53 -m")
	const svc = "UDP 10.0.0.53:53"
	d := tm.pkt(netfilter.ProtoUDP, "192.0.2.1:5000", "10.0.0.53:53", 0)
	eq(t, "first datagram", letter(d.Dest), "B")
	eq(t, "UDP entries are never active", tm.counters(svc, "10.1.0.2:53"), "0/1/0")
	tm.advance(200 * time.Second)
	d = tm.pkt(netfilter.ProtoUDP, "192.0.2.1:5000", "10.0.0.53:53", 0)
	eq(t, "same flow sticks", letter(d.Dest), "B")
	tm.advance(299 * time.Second)
	eq(t, "refreshed timer", tm.stateOf(netfilter.ProtoUDP, "192.0.2.1:5000", "10.0.0.53:53"), "UDP 1s")
	tm.advance(time.Second)
	eq(t, "expired", tm.counters(svc, "10.1.0.2:53"), "0/0/0")
	if err := tm.ConfigureTimeouts(0, 0, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	tm.pkt(netfilter.ProtoUDP, "192.0.2.1:5001", "10.0.0.53:53", 0)
	eq(t, "--set udp", tm.stateOf(netfilter.ProtoUDP, "192.0.2.1:5001", "10.0.0.53:53"), "UDP 10s")
	if tcp, fin, udp := tm.Timeouts(); tcp != 15*time.Minute || fin != 2*time.Minute || udp != 10*time.Second {
		t.Errorf("Timeouts() = %v %v %v", tcp, fin, udp)
	}
}

func TestOverloadThresholds(t *testing.T) {
	tm := newTM(t, Config{}, "-A -t "+vip+" -s rr", "-a -t "+vip+" -r 10.1.0.1:80 -m -x 2", "-a -t "+vip+" -r 10.1.0.2:80 -m")
	// list B A; rr: B A B A, but A overloads at 2 connections
	eq(t, "picks", tm.picks(4, vip), "B A B A")
	rs, _ := tm.GetRealServers(&ipvs.VirtualServer{Address: netip.MustParseAddr("10.0.0.1"), Protocol: "TCP", Port: 80})
	if !rs[1].Overloaded || rs[0].Overloaded {
		t.Fatalf("A should be overloaded at total 2 >= u_threshold 2: %+v %+v", rs[0], rs[1])
	}
	eq(t, "A skipped while overloaded", tm.picks(2, vip), "B B")
	// SYN_RECV entries expire after 60 s; A's two go together: total 0 -> cleared
	tm.advance(time.Minute)
	eq(t, "cleared after expiry", tm.picks(2, vip), "A B")

	// with -y: cleared only below the lower threshold; without: below 75% of the upper
	tm2 := newTM(t, Config{}, "-A -t "+vip+" -s rr", "-a -t "+vip+" -r 10.1.0.1:80 -m -x 4 -y 2")
	for i := 0; i < 4; i++ {
		tm2.syn("192.0.2.1", vip)
		tm2.advance(10 * time.Second)
	}
	eq(t, "overloaded at 4", tm2.picks(1, vip), "-")
	tm2.advance(20 * time.Second) // first entry expires (total 3): 3 < 2? no
	eq(t, "still overloaded at 3 (lower threshold 2)", tm2.picks(1, vip), "-")
	tm2.advance(20 * time.Second) // total 1 < 2
	eq(t, "cleared below the lower threshold", tm2.picks(1, vip), "A")

	tm3 := newTM(t, Config{}, "-A -t "+vip+" -s rr", "-a -t "+vip+" -r 10.1.0.1:80 -m -x 4")
	for i := 0; i < 4; i++ {
		tm3.syn("192.0.2.1", vip)
		tm3.advance(10 * time.Second)
	}
	tm3.advance(20 * time.Second) // total 3: 3*4 < 4*3? no
	eq(t, "3 of 4 is not below 75%", tm3.picks(1, vip), "-")
	tm3.advance(10 * time.Second) // total 2: 8 < 12
	eq(t, "2 of 4 is", tm3.picks(1, vip), "A")

	// editing the destination clears OVERLOAD if the upper threshold grows or goes
	tm4 := newTM(t, Config{}, "-A -t "+vip+" -s rr", "-a -t "+vip+" -r 10.1.0.1:80 -m -x 1")
	eq(t, "fills", tm4.picks(2, vip), "A -")
	tm4.do("-e -t " + vip + " -r 10.1.0.1:80 -m -x 1")
	eq(t, "same threshold: still overloaded", tm4.picks(1, vip), "-")
	tm4.do("-e -t " + vip + " -r 10.1.0.1:80 -m -x 5")
	eq(t, "higher threshold: cleared", tm4.picks(1, vip), "A")
}

func TestWeightZeroGraceful(t *testing.T) {
	tm := newTM(t, Config{}, svcLines("rr", "A", "B")...)
	tm.do("conn tcp 192.0.2.1:1000 " + vip) // B (head)
	tm.do("-e -t " + vip + " -r 10.1.0.2:80 -m -w 0")
	d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1000", vip, netfilter.TCPAck)
	if letter(d.Dest) != "B" || d.Via != ViaConnection {
		t.Errorf("existing flow to a quiesced server: %v via %v", letter(d.Dest), d.Via)
	}
	eq(t, "new connections avoid B", tm.picks(3, vip), "A A A")
	eq(t, "B keeps its connection", tm.counters(svcLabel, "10.1.0.2:80"), "1/0/0")
}

func TestDeleteDestination(t *testing.T) {
	t.Run("expire_nodest_conn=0 drops until timeout", func(t *testing.T) {
		tm := newTM(t, Config{}, svcLines("rr", "A", "B")...)
		tm.do("conn tcp 192.0.2.1:1000 "+vip, "-d -t "+vip+" -r 10.1.0.2:80")
		d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1000", vip, netfilter.TCPAck)
		if d.Verdict != VerdictDrop {
			t.Errorf("packet of a removed server's entry: %v, want drop", d.Verdict)
		}
		eq(t, "entry kept", tm.stateOf(netfilter.ProtoTCP, "192.0.2.1:1000", vip), "ESTABLISHED 15m0s")
		tm.do("-a -t " + vip + " -r 10.1.0.2:80 -m")
		eq(t, "resurrected from the trash with its counters", tm.counters(svcLabel, "10.1.0.2:80"), "1/0/0")
		if d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1000", vip, netfilter.TCPAck); d.Verdict != VerdictForward || letter(d.Dest) != "B" {
			t.Errorf("after re-add: %+v", d)
		}
		eq(t, "list order after resurrection (head)", tm.listOrder(svcLabel), "B A")
	})
	t.Run("expire_nodest_conn=1 flushes one jiffy later", func(t *testing.T) {
		tm := newTM(t, Config{}, svcLines("rr", "A", "B")...)
		tm.do("sysctl expire_nodest_conn=1", "conn tcp 192.0.2.1:1000 "+vip, "conn tcp 192.0.2.1:1001 "+vip)
		tm.do("-d -t " + vip + " -r 10.1.0.2:80")
		eq(t, "entry before the work runs", tm.stateOf(netfilter.ProtoTCP, "192.0.2.1:1000", vip), "ESTABLISHED 15m0s")
		tm.advance(4 * time.Millisecond) // HZ=250
		eq(t, "entry flushed", tm.stateOf(netfilter.ProtoTCP, "192.0.2.1:1000", vip), "gone")
		eq(t, "A's entry stays", tm.stateOf(netfilter.ProtoTCP, "192.0.2.1:1001", vip), "ESTABLISHED 14m59.996s")
		if d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1000", vip, netfilter.TCPAck); d.Verdict != VerdictAccept {
			t.Errorf("ACK of a flushed entry: %v", d.Verdict)
		}
	})
	t.Run("expire_nodest_conn=1 expires on the next packet and reschedules a SYN", func(t *testing.T) {
		tm := newTM(t, Config{}, svcLines("rr", "A", "B")...)
		tm.do("sysctl expire_nodest_conn=1", "conn tcp 192.0.2.1:1000 "+vip, "-d -t "+vip+" -r 10.1.0.2:80")
		d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1000", vip, netfilter.TCPSyn)
		if d.Verdict != VerdictForward || letter(d.Dest) != "A" || !d.New {
			t.Errorf("SYN on a removed server's tuple: %+v", d)
		}
	})
	t.Run("the trash frees an unused destination after 60-90 s", func(t *testing.T) {
		for _, c := range []struct {
			after time.Duration
			want  string
		}{{80 * time.Second, "7/0/0"}, {95 * time.Second, "0/0/0"}} {
			tm := newTM(t, Config{}, svcLines("rr", "A")...)
			tm.do("set -t "+vip+" -r 10.1.0.1:80 active=7", "-d -t "+vip+" -r 10.1.0.1:80")
			tm.advance(c.after)
			tm.do("-a -t " + vip + " -r 10.1.0.1:80 -m")
			eq(t, "re-added after "+c.after.String(), tm.counters(svcLabel, "10.1.0.1:80"), c.want)
		}
	})
	t.Run("a destination in use stays in the trash", func(t *testing.T) {
		tm := newTM(t, Config{}, svcLines("rr", "A")...)
		tm.do("conn tcp 192.0.2.1:1000 "+vip, "-d -t "+vip+" -r 10.1.0.1:80")
		tm.advance(10 * time.Minute)
		tm.do("-a -t " + vip + " -r 10.1.0.1:80 -m")
		eq(t, "resurrected", tm.counters(svcLabel, "10.1.0.1:80"), "1/0/0")
	})
}

func TestConnReuse(t *testing.T) {
	closed := func(tm *testModel) {
		tm.do("conn tcp 192.0.2.1:1000 " + vip + " close") // B, TIME_WAIT
	}
	t.Run("conn_reuse_mode=1 reschedules a SYN on a TIME_WAIT entry", func(t *testing.T) {
		tm := newTM(t, Config{}, svcLines("rr", "A", "B")...)
		closed(tm)
		d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1000", vip, netfilter.TCPSyn)
		if letter(d.Dest) != "A" || !d.New {
			t.Errorf("reused tuple: %+v", d)
		}
		eq(t, "the old entry expired", tm.counters(svcLabel, "10.1.0.2:80"), "0/0/0")
	})
	t.Run("conn_reuse_mode=0 keeps the old destination", func(t *testing.T) {
		tm := newTM(t, Config{}, svcLines("rr", "A", "B")...)
		tm.do("sysctl conn_reuse_mode=0")
		closed(tm)
		d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1000", vip, netfilter.TCPSyn)
		if letter(d.Dest) != "B" || d.New {
			t.Errorf("reused tuple: %+v", d)
		}
		eq(t, "TIME_WAIT + SYN", tm.stateOf(netfilter.ProtoTCP, "192.0.2.1:1000", vip), "SYN_RECV 1m0s")
	})
	t.Run("a SYN of a confirmed conntrack flow is dropped, its retransmission rescheduled", func(t *testing.T) {
		tm := newTM(t, Config{}, svcLines("rr", "A", "B")...)
		closed(tm)
		d := tm.In(Packet{Protocol: netfilter.ProtoTCP, Src: netip.MustParseAddrPort("192.0.2.1:1000"), Dst: netip.MustParseAddrPort(vip),
			TCPFlags: netfilter.TCPSyn, ConfirmedConntrack: true})
		if d.Verdict != VerdictDrop {
			t.Errorf("SYN with an old conntrack: %v", d.Verdict)
		}
		d = tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1000", vip, netfilter.TCPSyn) // the retransmission
		if letter(d.Dest) != "A" || !d.New {
			t.Errorf("retransmitted SYN: %+v", d)
		}
	})
	t.Run("ESTABLISHED entries are not reused", func(t *testing.T) {
		tm := newTM(t, Config{}, svcLines("rr", "A", "B")...)
		tm.do("conn tcp 192.0.2.1:1000 " + vip)
		d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1000", vip, netfilter.TCPSyn)
		if letter(d.Dest) != "B" || d.New {
			t.Errorf("SYN on an established entry: %+v", d)
		}
	})
	t.Run("expire_nodest_conn reschedules a SYN on a weight-0 destination's entry", func(t *testing.T) {
		tm := newTM(t, Config{}, svcLines("rr", "A", "B")...)
		tm.do("sysctl expire_nodest_conn=1", "conn tcp 192.0.2.1:1000 "+vip, "-e -t "+vip+" -r 10.1.0.2:80 -m -w 0")
		d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1000", vip, netfilter.TCPSyn)
		if letter(d.Dest) != "A" || !d.New {
			t.Errorf("SYN: %+v", d)
		}
	})
}

func TestPersistence(t *testing.T) {
	tm := newTM(t, Config{}, append(svcLines("rr", "A", "B"), "-E -t "+vip+" -s rr -p 300")...)
	tm.do("conn tcp 192.0.2.1:1000 " + vip)
	eq(t, "template and connection", tm.counters(svcLabel, "10.1.0.2:80"), "1/0/1")
	eq(t, "same client, other port: template", tm.syn("192.0.2.1", vip), "B")
	d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:2000", vip, netfilter.TCPSyn)
	if d.Via != ViaTemplate {
		t.Errorf("via %v, want template", d.Via)
	}
	eq(t, "other client: scheduler", tm.syn("192.0.2.2", vip), "A")
	eq(t, "the scheduler only ran twice", tm.syn("192.0.2.3", vip), "B")
	listing := tm.ConnListing()
	if !strings.Contains(listing, "TCP 05:00  ASSURED     192.0.2.1:0        10.0.0.1:80        10.1.0.2:80") {
		t.Errorf("template missing from -Lnc:\n%s", listing)
	}

	// the template outlives its connections by its timeout, re-armed in 60 s steps
	// while it still controls entries
	tm2 := newTM(t, Config{}, append(svcLines("rr", "A", "B"), "-E -t "+vip+" -s rr -p 100")...)
	tm2.do("conn tcp 192.0.2.1:1000 " + vip) // B at t=0; template due at 100
	tm2.advance(30 * time.Second)
	tm2.do("conn tcp 192.0.2.1:1000 " + vip + " close") // TIME_WAIT until 150
	tm2.advance(70 * time.Second)                       // t=100: the template still controls it: re-armed to 160, timeout now 60 s
	eq(t, "template re-armed", tm2.counters(svcLabel, "10.1.0.2:80"), "0/1/1")
	tm2.advance(55 * time.Second) // t=155
	eq(t, "connection gone, template lives", tm2.counters(svcLabel, "10.1.0.2:80"), "0/0/1")
	eq(t, "template still sends the client to B", tm2.syn("192.0.2.1", vip), "B") // template due at 215
	tm2.advance(110 * time.Second)                                                // t=265: at 215 it controlled the SYN_RECV entry: re-armed to 275
	eq(t, "template kept by its entry", tm2.counters(svcLabel, "10.1.0.2:80"), "0/0/1")
	tm2.advance(10 * time.Second) // t=275
	eq(t, "all gone", tm2.counters(svcLabel, "10.1.0.2:80"), "0/0/0")
	eq(t, "new template from the scheduler", tm2.syn("192.0.2.1", vip), "A")
}

func TestPersistenceNetmaskAndQuiesce(t *testing.T) {
	tm := newTM(t, Config{}, append(svcLines("rr", "A", "B"), "-E -t "+vip+" -s rr -p 300 -M 255.255.255.0")...)
	eq(t, "first client", tm.syn("192.0.2.1", vip), "B")
	eq(t, "same /24", tm.syn("192.0.2.200", vip), "B")
	eq(t, "other /24", tm.syn("192.0.3.1", vip), "A")
	tm.do("-e -t " + vip + " -r 10.1.0.2:80 -m -w 0")
	eq(t, "weight 0: the template still sends new connections (expire_quiescent_template=0)", tm.syn("192.0.2.9", vip), "B")
	tm.do("sysctl expire_quiescent_template=1")
	eq(t, "expire_quiescent_template=1: template invalid, rescheduled", tm.syn("192.0.2.9", vip), "A")
	eq(t, "the new template sticks", tm.syn("192.0.2.10", vip), "A")
	if !strings.Contains(tm.ConnListing(), "192.0.2.0:0        10.0.0.1:65535     10.1.0.2:65535") {
		t.Errorf("neutered template not listed:\n%s", tm.ConnListing())
	}
}

func TestFwmarkPersistenceAndPortZero(t *testing.T) {
	tm := newTM(t, Config{}, "-A -f 7 -s rr -p 60", "-a -f 7 -r 10.1.0.1:0 -m", "-a -f 7 -r 10.1.0.2:0 -m")
	d := tm.In(Packet{Protocol: netfilter.ProtoTCP, Src: netip.MustParseAddrPort("192.0.2.1:1"), Dst: netip.MustParseAddrPort("203.0.113.5:443"), TCPFlags: netfilter.TCPSyn, Mark: 7})
	if d.Dest.String() != "10.1.0.2:443" {
		t.Errorf("fwmark persistent: dest %v, want 10.1.0.2:443 (the packet's port)", d.Dest)
	}
	d = tm.In(Packet{Protocol: netfilter.ProtoTCP, Src: netip.MustParseAddrPort("192.0.2.1:2"), Dst: netip.MustParseAddrPort("203.0.113.9:80"), TCPFlags: netfilter.TCPSyn, Mark: 7})
	if d.Dest.String() != "10.1.0.2:80" || d.Via != ViaTemplate {
		t.Errorf("fwmark template covers every address and port of the mark: %+v", d)
	}
	if !strings.Contains(tm.ConnListing(), "IP  01:00  NONE        192.0.2.1:0        0.0.0.7:0          10.1.0.2:0") {
		t.Errorf("fwmark template:\n%s", tm.ConnListing())
	}
	if d := tm.In(Packet{Protocol: netfilter.ProtoTCP, Src: netip.MustParseAddrPort("192.0.2.1:3"), Dst: netip.MustParseAddrPort("203.0.113.9:80"), TCPFlags: netfilter.TCPSyn}); d.Verdict != VerdictAccept {
		t.Errorf("unmarked packet: %v", d.Verdict)
	}

	tz := newTM(t, Config{}, "-A -t 10.0.0.2 -s rr -p", "-a -t 10.0.0.2 -r 10.1.0.1 -m", "-a -t 10.0.0.2 -r 10.1.0.2 -m")
	d = tz.pkt(netfilter.ProtoTCP, "192.0.2.1:1", "10.0.0.2:8443", netfilter.TCPSyn)
	if d.Dest.String() != "10.1.0.2:8443" {
		t.Errorf("port-zero service: %v", d.Dest)
	}
	d = tz.pkt(netfilter.ProtoTCP, "192.0.2.1:2", "10.0.0.2:22", netfilter.TCPSyn)
	if d.Dest.String() != "10.1.0.2:22" || d.Via != ViaTemplate {
		t.Errorf("port-zero template: %+v", d)
	}
	if err := tz.Exec([]string{"-A", "-t", "10.0.0.3", "-s", "rr"}, nil); err == nil || !strings.Contains(err.Error(), "Zero port specified for non-persistent service") {
		t.Errorf("non-persistent port-zero service: %v", err)
	}
}

func TestOnePacketScheduling(t *testing.T) {
	tm := newTM(t, Config{}, "-A -u 10.0.0.53:53 -s rr -o", "-a -u 10.0.0.53:53 -r 10.1.0.1:53 -m", "-a -u 10.0.0.53:53 -r 10.1.0.2:53 -m")
	var got []string
	for i := 0; i < 4; i++ {
		d := tm.pkt(netfilter.ProtoUDP, "192.0.2.1:5000", "10.0.0.53:53", 0)
		got = append(got, letter(d.Dest))
	}
	eq(t, "each datagram scheduled", strings.Join(got, " "), "B A B A")
	eq(t, "no entry left", tm.counters("UDP 10.0.0.53:53", "10.1.0.1:53"), "0/0/0")
	if len(tm.Connections()) != 0 {
		t.Errorf("one-packet entries stayed: %v", tm.Connections())
	}
	if err := tm.Exec([]string{"-A", "-t", "10.0.0.54:53", "-o"}, nil); err == nil || !strings.Contains(err.Error(), "only for UDP") {
		t.Errorf("TCP ops: %v", err)
	}
}

func TestNoDestinationAndBypass(t *testing.T) {
	tm := newTM(t, Config{}, "-A -t "+vip+" -s rr", "-A -f 3 -s rr")
	if d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1", vip, netfilter.TCPSyn); d.Verdict != VerdictReject {
		t.Errorf("empty service: %v, want reject (ICMP port unreachable)", d.Verdict)
	}
	tm.do("sysctl cache_bypass=1")
	d := tm.In(Packet{Protocol: netfilter.ProtoTCP, Src: netip.MustParseAddrPort("192.0.2.1:1"), Dst: netip.MustParseAddrPort("203.0.113.1:80"), TCPFlags: netfilter.TCPSyn, Mark: 3})
	if d.Verdict != VerdictBypass || d.Dest.String() != "203.0.113.1:80" {
		t.Errorf("cache bypass: %+v", d)
	}
	d = tm.In(Packet{Protocol: netfilter.ProtoTCP, Src: netip.MustParseAddrPort("192.0.2.1:1"), Dst: netip.MustParseAddrPort("203.0.113.1:80"), TCPFlags: netfilter.TCPAck, Mark: 3})
	if d.Verdict != VerdictBypass || d.Via != ViaConnection {
		t.Errorf("bypass entry: %+v", d)
	}
}

func TestSCTP(t *testing.T) {
	tm := newTM(t, Config{}, "-A --sctp-service 10.0.0.9:3868 -s rr", "-a --sctp-service 10.0.0.9:3868 -r 10.1.0.1:3868 -m")
	const c, v = "192.0.2.1:5000", "10.0.0.9:3868"
	in := func(chunk uint8) {
		tm.In(Packet{Protocol: netfilter.ProtoSCTP, Src: netip.MustParseAddrPort(c), Dst: netip.MustParseAddrPort(v), SCTPChunk: chunk})
	}
	out := func(chunk uint8) {
		tm.Out(Packet{Protocol: netfilter.ProtoSCTP, Src: netip.MustParseAddrPort("10.1.0.1:3868"), Dst: netip.MustParseAddrPort(c), SCTPChunk: chunk})
	}
	in(SCTPData)
	eq(t, "DATA without an entry creates nothing", tm.stateOf(netfilter.ProtoSCTP, c, v), "gone")
	in(SCTPInit)
	eq(t, "INIT", tm.stateOf(netfilter.ProtoSCTP, c, v), "INIT1 4s")
	out(SCTPInitAck)
	eq(t, "INIT-ACK", tm.stateOf(netfilter.ProtoSCTP, c, v), "C-SENT 1m1s")
	in(SCTPCookieEcho)
	eq(t, "COOKIE-ECHO", tm.stateOf(netfilter.ProtoSCTP, c, v), "C-REPLIED 1m1s")
	eq(t, "not yet active", tm.counters("SCTP 10.0.0.9:3868", "10.1.0.1:3868"), "0/1/0")
	out(SCTPCookieAck)
	eq(t, "COOKIE-ACK", tm.stateOf(netfilter.ProtoSCTP, c, v), "ESTABLISHED 15m0s")
	eq(t, "active", tm.counters("SCTP 10.0.0.9:3868", "10.1.0.1:3868"), "1/0/0")
	in(SCTPShutdown)
	out(SCTPShutdownAck)
	in(SCTPShutdownComplete)
	eq(t, "closed", tm.stateOf(netfilter.ProtoSCTP, c, v), "CLOSED 1m1s")
	eq(t, "inactive", tm.counters("SCTP 10.0.0.9:3868", "10.1.0.1:3868"), "0/1/0")
}

func TestServiceDeletionKeepsConnections(t *testing.T) {
	tm := newTM(t, Config{}, svcLines("rr", "A")...)
	tm.do("conn tcp 192.0.2.1:1000 "+vip, "-D -t "+vip)
	if d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1000", vip, netfilter.TCPAck); d.Verdict != VerdictDrop {
		t.Errorf("packet of a deleted service's connection: %v", d.Verdict)
	}
	tm.do(svcLines("rr")...)
	tm.do("-a -t " + vip + " -r 10.1.0.1:80 -m")
	eq(t, "the destination comes back from the trash", tm.counters(svcLabel, "10.1.0.1:80"), "1/0/0")
	if d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1000", vip, netfilter.TCPAck); d.Verdict != VerdictForward {
		t.Errorf("after re-creation: %v", d.Verdict)
	}
}

func TestLocalOutReply(t *testing.T) {
	tm := newTM(t, Config{}, svcLines("rr", "A")...)
	if d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1000", vip, netfilter.TCPSyn); letter(d.Dest) != "A" {
		t.Fatalf("setup: %+v", d)
	}
	// a service that would match the reply's destination
	tm.do("-A -t 192.0.2.1:1000 -s rr", "-a -t 192.0.2.1:1000 -r 10.1.0.3:80 -m")
	reply := Packet{Protocol: netfilter.ProtoTCP, Src: netip.MustParseAddrPort(vip), Dst: netip.MustParseAddrPort("192.0.2.1:1000"), TCPFlags: netfilter.TCPSyn | netfilter.TCPAck}
	local := reply
	local.LocalOut = true
	if r := tm.In(local); r.Verdict != VerdictAccept {
		t.Errorf("locally generated reply of an existing connection: %v, want accept", r.Verdict)
	}
	if r := tm.In(reply); r.Verdict != VerdictForward || letter(r.Dest) != "C" {
		t.Errorf("the same packet from outside is scheduled: %+v", r)
	}
}

// ExpireTemplate ends a persistence template now: one that still controls a
// connection is re-armed, as the kernel's timer would be; once its connections are
// gone (ExpireConnection) it goes, and the client's next connection is scheduled.
func TestExpireTemplate(t *testing.T) {
	tm := newTM(t, Config{}, append(svcLines("rr", "A", "B"), "-E -t "+vip+" -s rr -p 300")...)
	client := netip.MustParseAddr("192.0.2.1")
	eq(t, "first pick", tm.syn("192.0.2.1", vip), "B")
	if !tm.ExpireTemplate(netfilter.ProtoTCP, client, netip.MustParseAddrPort(vip)) {
		t.Fatal("no template to expire")
	}
	eq(t, "the template controls a connection: it stays", tm.syn("192.0.2.1", vip), "B")
	for _, e := range tm.Connections() {
		if !e.Template && e.Client.Addr() == client {
			tm.ExpireConnection(netfilter.ProtoTCP, e.Client, e.Virtual)
		}
	}
	if !tm.ExpireTemplate(netfilter.ProtoTCP, client, netip.MustParseAddrPort(vip)) {
		t.Fatal("no template to expire")
	}
	for _, e := range tm.Connections() {
		if e.Template {
			t.Errorf("template left: %+v", e)
		}
	}
	eq(t, "scheduled afresh", tm.syn("192.0.2.1", vip), "A")
	if tm.ExpireTemplate(netfilter.ProtoTCP, netip.MustParseAddr("192.0.2.9"), netip.MustParseAddrPort(vip)) {
		t.Error("a template for a client that has none")
	}
}
