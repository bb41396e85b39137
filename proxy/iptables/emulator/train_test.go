package emulator

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator/emutest"
)

// A train's answer is its segments' answers: on kube-proxy's filter FORWARD (and INPUT
// and OUTPUT), 300 fixed-seed trains of 2-45 segments, established and new, with and
// without PSH on the last, marked and not (two source ports, FORWARD four times in five), are given by PeekTrain and CommitTrain on one
// emulator and by RunTable segment by segment on its twin. Whenever PeekTrain answers,
// the verdict and the packet's marks are the segments' and the counters (rules and
// policies, packets and bytes) stay equal; when it does not, the twin runs the
// segments instead, so the two stay in step; PeekTrain alone changes no counter. Some
// trains must be answered and some refused (a cold cache, a ctstate that differs).
func TestPeekTrainSameAsSegments(t *testing.T) {
	// kube-proxy's rules, and in front of FORWARD's a rule that counts PSH segments
	// alone and one that marks them for one source port (so that the train's two
	// shapes' answers differ: refused).
	dump := string(emutest.KubeDump(20, 3))
	at := strings.Index(dump, "\n-A FORWARD")
	data := []byte(dump[:at] + "\n-A FORWARD -p tcp --tcp-flags PSH PSH\n-A FORWARD -p tcp --sport 40001 --tcp-flags PSH PSH -j MARK --set-xmark 0x1/0x1" + dump[at:])
	es := loadedTwins(t, data)
	es[1].FlowCache(false) // the twin traverses every segment
	env := NewStaticEnv(1)
	r := rand.New(rand.NewPCG(37, 24))
	var st TrainStash
	answered, refused := 0, 0
	hooks := []netfilter.Hook{netfilter.Forward, netfilter.Input, netfilter.Output}
	for i := range 300 {
		seg := Packet{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.1.2.3"),
			SrcPort: uint16(40000 + r.IntN(2)), DstPort: 80, TCPFlags: netfilter.TCPAck, TTL: 63, InIface: "eth0", OutIface: "veth1",
			CT: Conntrack{State: netfilter.CtEstablished, Status: netfilter.StatusConfirmed | netfilter.StatusSeenReply}}
		switch r.IntN(12) {
		case 0, 1:
			seg.CT.State = netfilter.CtNew
		case 2:
			seg.CT.State = netfilter.CtInvalid // KUBE-FORWARD drops it
		}
		if r.IntN(8) == 0 {
			seg.Mark = 0x4000 // kube-proxy's masquerade mark
		}
		h := netfilter.Forward
		if r.IntN(5) == 0 {
			h = hooks[r.IntN(len(hooks))]
		}
		n := 2 + r.IntN(44)
		mid, last := seg, seg
		mid.Len = 52 + 1448
		last.Len = 52 + 1 + r.IntN(1448)
		if r.IntN(2) == 0 {
			last.TCPFlags |= netfilter.TCPPsh
		}
		before := string(es[0].SaveCounters("filter"))
		m := mid
		v, ok := es[0].PeekTrain(TableFilter, h, TrainShape{P: &m, N: n - 1}, TrainShape{P: &last, N: 1}, &st)
		if after := string(es[0].SaveCounters("filter")); after != before {
			t.Fatalf("train %d: PeekTrain changed counters", i)
		}
		// The twin, segment by segment.
		var segV TableVerdict
		var segMark uint32
		for j := range n {
			p := mid
			if j == n-1 {
				p = last
			}
			segV = es[1].RunTable(env, TableFilter, h, &p, nil)
			segMark = p.Mark
		}
		if !ok {
			refused++
			for j := range n { // what the datapath does then: the segments one by one
				p := mid
				if j == n-1 {
					p = last
				}
				es[0].RunTable(env, TableFilter, h, &p, nil)
			}
		} else {
			answered++
			es[0].CommitTrain(&st)
			if v != segV || m.Mark != segMark {
				t.Fatalf("train %d: PeekTrain %+v mark %#x, segments %+v mark %#x", i, v, m.Mark, segV, segMark)
			}
		}
		if a, b := string(es[0].SaveCounters("filter")), string(es[1].SaveCounters("filter")); a != b {
			t.Fatalf("train %d of %d segments at %s (answered %v): counters differ:\ntrain:\n%s\nsegments:\n%s", i, n, h, ok, a, b)
		}
	}
	t.Logf("%d trains answered, %d refused", answered, refused)
	if answered < 100 || refused == 0 {
		t.Fatalf("%d trains answered, %d refused: the test exercised too little", answered, refused)
	}
}
