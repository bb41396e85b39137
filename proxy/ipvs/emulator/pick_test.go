package emulator

import (
	"fmt"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
)

// pickSeq runs n lines "KIND tcp 192.0.2.1:PORT vip" from fresh ports and returns the
// destinations' letters.
func (tm *testModel) pickSeq(kind string, n int) string {
	tm.t.Helper()
	var out []string
	for i := 0; i < n; i++ {
		tm.port++
		r := tm.result(fmt.Sprintf("%s tcp 192.0.2.1:%d %s", kind, tm.port, vip))
		if r.NoDestination {
			out = append(out, "-")
			continue
		}
		out = append(out, letter(mustAddrPort(r.Destination)))
	}
	return strings.Join(out, " ")
}

// TestScriptPick holds pick lines to the decisions of new connections: a sequence of
// picks is the sequence conn lines would get (the cursors, weights and hashes move the
// same way), while no connection entry is made; sched stays a dry run.
func TestScriptPick(t *testing.T) {
	for _, sched := range []string{"rr", "wrr", "sh", "dh", "mh"} {
		t.Run(sched, func(t *testing.T) {
			setup := svcLines(sched, "A:1", "B:2", "C:3")
			picks := newTM(t, Config{}, setup...)
			conns := newTM(t, Config{}, setup...)
			got, want := picks.pickSeq("pick", 9), conns.pickSeq("conn", 9)
			eq(t, "picks as conns", got, want)
			if n := len(picks.Connections()); n != 0 {
				t.Errorf("picks made %d connection entries", n)
			}
			for _, d := range []string{"10.1.0.1:80", "10.1.0.2:80", "10.1.0.3:80"} {
				eq(t, "counters of "+d, picks.counters(svcLabel, d), "0/0/0")
			}
		})
	}
	t.Run("sched does not move the rr cursor, pick does", func(t *testing.T) {
		tm := newTM(t, Config{}, svcLines("rr", "A", "B")...)
		eq(t, "sched, sched", tm.pickSeq("sched", 2), "B B")
		eq(t, "pick, pick, sched", tm.pickSeq("pick", 2)+" "+tm.pickSeq("sched", 1), "B A B")
	})
	t.Run("twos draws advance", func(t *testing.T) {
		picks := newTM(t, Config{}, svcLines("twos", "A:1", "B:2", "C:3", "D:4")...)
		conns := newTM(t, Config{}, svcLines("twos", "A:1", "B:2", "C:3", "D:4")...)
		// with no connection entries the loads stay zero: compare picks with conns that
		// are closed and expired at once (UDP expires on close)
		var got, want []string
		for i := 0; i < 8; i++ {
			r := picks.result(fmt.Sprintf("pick udp 192.0.2.1:%d %s", 2000+i, vip))
			got = append(got, r.Destination)
			c := conns.result(fmt.Sprintf("conn udp 192.0.2.1:%d %s close", 2000+i, vip))
			want = append(want, c.Destination)
		}
		eq(t, "twos picks as closed conns", strings.Join(got, " "), strings.Join(want, " "))
	})
	t.Run("a pick makes the persistence template", func(t *testing.T) {
		tm := newTM(t, Config{}, append(svcLines("rr", "A", "B"), "-E -t "+vip+" -s rr -p 300")...)
		r := tm.result("pick tcp 192.0.2.1:1000 " + vip)
		eq(t, "picked", letter(mustAddrPort(r.Destination))+" via "+r.Via, "B via scheduler")
		cs := tm.Connections()
		if len(cs) != 1 || !cs[0].Template || cs[0].Controls != 0 {
			t.Fatalf("entries after a pick: %+v", cs)
		}
		eq(t, "B's counters", tm.counters(svcLabel, "10.1.0.2:80"), "0/0/1")
		eq(t, "a connection from another port follows the template", tm.pickSeq("conn", 1), "B")
		r = tm.result("pick tcp 192.0.2.1:1001 " + vip)
		eq(t, "a second pick", letter(mustAddrPort(r.Destination))+" via "+r.Via, "B via template")
	})
	t.Run("no destination", func(t *testing.T) {
		tm := newTM(t, Config{}, "-A -t "+vip+" -s rr")
		r := tm.result("pick tcp 192.0.2.1:1000 " + vip)
		if !r.NoDestination || r.Verdict != "reject" {
			t.Errorf("pick on an empty service: %+v", r)
		}
	})
	t.Run("text and bad input", func(t *testing.T) {
		tm := newTM(t, Config{}, svcLines("rr", "A", "B")...)
		rep := tm.do("pick tcp 192.0.2.1:1000 "+vip+" mark=7", "pick udp 192.0.2.1:1000 "+vip)
		var b strings.Builder
		if err := rep.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		eq(t, "text", b.String(), "pick tcp 192.0.2.1:1000 -> 10.0.0.1:80 mark=7: 10.1.0.2:80 [TCP 10.0.0.1:80 rr, picked via scheduler, no entry]\n"+
			"pick udp 192.0.2.1:1000 -> 10.0.0.1:80: no destination [accept]\n")
		for line, want := range map[string]string{
			"pick tcp 192.0.2.1:1000 " + vip + " ct=confirmed": "pick asks the scheduler only",
			"pick tcp 192.0.2.1:1000 " + vip + " close":        `pick: unexpected "close"`,
			"pick tcp 192.0.2.1:1000":                          "want pick tcp|udp",
			"kernel five":                                      "kernel: kernel version",
		} {
			_, err := tm.Run([]byte(line), "x.script", tm.clock)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "x.script:1") {
				t.Errorf("%s: error %v, want one naming x.script:1 and %q", line, err, want)
			}
		}
	})
}

// TestScriptConnOnClosedEntry: a conn line on the tuple of an entry in TIME_WAIT is a new
// connection whose SYN meets that entry, with close as without: rescheduled under
// conn_reuse_mode=1 (at once from Linux 5.9, after the SYN's retransmission before it,
// vs/conntrack=1), kept on the old server under conn_reuse_mode=0.
func TestScriptConnOnClosedEntry(t *testing.T) {
	closeLine := "conn tcp " + ctClient + " " + vip + " close"
	for _, c := range []struct {
		name   string
		setup  []string
		kernel string
		want   string // outcome of the second conn ... close line
		state  string // the entry afterwards
	}{
		{"conn_reuse_mode=1", nil, "", "A new", "TIME_WAIT"},
		{"conn_reuse_mode=0", []string{"sysctl conn_reuse_mode=0"}, "", "B existing", "TIME_WAIT"},
		{"conn_reuse_mode=1, Linux 5.4, vs/conntrack=1", []string{"sysctl conntrack=1"}, "5.4", "drop(ct)", "gone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			setup := append(svcLines("rr", "A", "B"), c.setup...)
			if c.kernel != "" {
				setup = append(setup, "kernel "+c.kernel)
			}
			tm := newTM(t, Config{}, append(setup, closeLine)...)
			r := tm.result(closeLine)
			eq(t, "second conn ... close", outcome(r), c.want)
			st := tm.stateOf(netfilter.ProtoTCP, ctClient, vip)
			eq(t, "entry", strings.Fields(st)[0], c.state)
		})
	}
}
