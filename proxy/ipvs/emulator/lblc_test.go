package emulator

import (
	"net/netip"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// synTo sends a marked SYN from a fresh port of 192.0.2.1 to daddr and returns the
// destination letter.
func (tm *testModel) synTo(daddr string, mark uint32) string {
	tm.t.Helper()
	tm.port++
	d := tm.In(Packet{Protocol: netfilter.ProtoTCP, Src: netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), tm.port),
		Dst: netip.MustParseAddrPort(daddr), TCPFlags: netfilter.TCPSyn, Mark: mark})
	if d.Verdict != VerdictForward {
		return "-"
	}
	return letter(d.Dest)
}

func TestLBLC(t *testing.T) {
	tm := newTM(t, Config{}, "-A -f 1 -s lblc", "-a -f 1 -r 10.1.0.1:80 -m -w 2", "-a -f 1 -r 10.1.0.2:80 -m -w 2")
	const x, y = "198.51.100.10:80", "198.51.100.20:80"
	eq(t, "first packet to X: wlc seeds B (list B A)", tm.synTo(x, 1), "B")
	eq(t, "first packet to Y: wlc prefers idle A", tm.synTo(y, 1), "A")
	eq(t, "X is cached on B", tm.ask("192.0.2.7:9", x, 1), "B")
	tm.do("set -f 1 -r 10.1.0.2:80 active=3")
	eq(t, "B over its weight but no dest under half load: B kept", tm.ask("192.0.2.7:9", x, 1), "B")
	tm.do("-e -f 1 -r 10.1.0.1:80 -m -w 3")
	eq(t, "A now under half load: B is lblc-overloaded, wlc picks A", tm.ask("192.0.2.7:9", x, 1), "A")
	tm.do("-e -f 1 -r 10.1.0.1:80 -m -w 2", "set -f 1 -r 10.1.0.2:80 overloaded=yes")
	eq(t, "the OVERLOAD flag is not checked for a cached dest", tm.ask("192.0.2.7:9", x, 1), "B")
	eq(t, "but wlc skips it for a new address", tm.ask("192.0.2.7:9", "198.51.100.30:80", 1), "A")
	tm.do("set -f 1 -r 10.1.0.2:80 overloaded=no", "-e -f 1 -r 10.1.0.2:80 -m -w 0")
	eq(t, "weight 0 on the cached dest: wlc", tm.ask("192.0.2.7:9", x, 1), "A")
	tm.do("-e -f 1 -r 10.1.0.2:80 -m -w 2", "-d -f 1 -r 10.1.0.2:80")
	eq(t, "deleted cached dest: wlc", tm.ask("192.0.2.7:9", x, 1), "A")
	tm.do("-a -f 1 -r 10.1.0.2:80 -m -w 2")
	eq(t, "re-added from the trash: the cache entry is valid again", tm.ask("192.0.2.7:9", x, 1), "B")
}

func TestLBLCExpiry(t *testing.T) {
	tm := newTM(t, Config{}, "-A -f 1 -s lblc", "-a -f 1 -r 10.1.0.1:80 -m -w 100", "-a -f 1 -r 10.1.0.2:80 -m -w 1")
	const x = "198.51.100.10:80"
	eq(t, "X on B", tm.synTo(x, 1), "B")
	tm.do("sleep 120", "set -f 1 -r 10.1.0.2:80 inactive=1") // the SYN_RECV entry has expired
	eq(t, "wlc would now pick A", tm.ask("192.0.2.7:9", "198.51.100.99:80", 1), "A")
	eq(t, "cached", tm.ask("192.0.2.7:9", x, 1), "B")
	tm.advance(24*time.Hour - 2*time.Minute - time.Second)
	eq(t, "entry unused for just under 24h survives", tm.ask("192.0.2.7:9", x, 1), "B")
	tm.advance(time.Second)
	eq(t, "the full check at 24h removes it", tm.ask("192.0.2.7:9", x, 1), "A")

	// a real lookup refreshes lastuse
	tm2 := newTM(t, Config{}, "-A -f 1 -s lblc", "-a -f 1 -r 10.1.0.1:80 -m -w 100", "-a -f 1 -r 10.1.0.2:80 -m -w 1")
	eq(t, "X on B", tm2.synTo(x, 1), "B")
	tm2.do("sleep 120", "set -f 1 -r 10.1.0.2:80 inactive=1")
	tm2.advance(12*time.Hour - 2*time.Minute)
	eq(t, "used at 12h", tm2.synTo(x, 1), "B")
	tm2.advance(24*time.Hour - time.Second)
	eq(t, "alive until 36h", tm2.ask("192.0.2.7:9", x, 1), "B")
	tm2.advance(time.Second)
	eq(t, "removed at 36h", tm2.ask("192.0.2.7:9", x, 1), "A")
}

func (tm *testModel) lblcrSet(mark uint32, daddr string) string {
	tm.Model.mu.Lock()
	defer tm.Model.mu.Unlock()
	s := tm.services[svcKey{fwmark: mark}]
	e := s.sched.(*lblcrSched).get(false, netip.MustParseAddrPort(daddr).Addr())
	if e == nil {
		return "none"
	}
	out := ""
	for _, d := range e.set {
		out += letter(d.addrPort())
	}
	return out
}

func TestLBLCR(t *testing.T) {
	tm := newTM(t, Config{}, "-A -f 1 -s lblcr", "-a -f 1 -r 10.1.0.1:80 -m -w 1", "-a -f 1 -r 10.1.0.2:80 -m -w 1")
	const x = "198.51.100.10:80"
	eq(t, "first: wlc picks B", tm.synTo(x, 1), "B")
	eq(t, "set", tm.lblcrSet(1, x), "B")
	tm.do("set -f 1 -r 10.1.0.2:80 active=2")
	eq(t, "set member overloaded: wlc adds A at the head", tm.synTo(x, 1), "A")
	eq(t, "set", tm.lblcrSet(1, x), "AB")
	eq(t, "least loaded member", tm.ask("192.0.2.7:9", x, 1), "A")
	tm.do("sleep 120") // the SYN_RECV entries expire: A 0, B 1 (set)
	tm.advance(12 * time.Hour)
	eq(t, "use at 12h keeps the entry (no change of the set)", tm.synTo(x, 1), "A")
	eq(t, "set", tm.lblcrSet(1, x), "AB")
	tm.advance(12*time.Hour - time.Minute) // now > lastmod + 24h
	eq(t, "after 24h without change the most loaded member (B) is dropped", tm.synTo(x, 1), "A")
	eq(t, "set", tm.lblcrSet(1, x), "A")
	tm.do("-e -f 1 -r 10.1.0.1:80 -m -w 0")
	eq(t, "no usable member: wlc, B added", tm.synTo(x, 1), "B")
	eq(t, "set", tm.lblcrSet(1, x), "BA")
}
