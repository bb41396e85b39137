package emulator

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
)

// result runs one conn or packet line and returns its result.
func (tm *testModel) result(line string) ScriptResult {
	tm.t.Helper()
	rep := tm.do(line)
	if len(rep.Results) != 1 {
		tm.t.Fatalf("%s: %d results", line, len(rep.Results))
	}
	return rep.Results[0]
}

// outcome summarises a result: "drop(ct)", "drop", "accept" or "LETTER new|existing".
func outcome(r ScriptResult) string {
	switch {
	case r.ConntrackDrop:
		return "drop(ct)"
	case r.NoDestination:
		return r.Verdict
	case r.NewConnection:
		return letter(mustAddrPort(r.Destination)) + " new"
	default:
		return letter(mustAddrPort(r.Destination)) + " existing"
	}
}

func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

const ctClient = "192.0.2.1:1000"

// TestScriptConfirmedConntrack checks ct=confirmed on conn and packet lines against
// ip_vs_in() since Linux 5.9 for each conn_reuse_mode / expire_nodest_conn /
// expire_quiescent_template case the model implements: the packet that would reschedule
// (or, expire_nodest_conn, any packet of a removed server's entry) is dropped and the old
// entry expired when it has a confirmed conntrack entry, and the retransmission is
// scheduled; without ct=confirmed it is rescheduled at once.
func TestScriptConfirmedConntrack(t *testing.T) {
	closedB := []string{"conn tcp " + ctClient + " " + vip + " close"} // rr: B, TIME_WAIT
	estB := []string{"conn tcp " + ctClient + " " + vip}               // rr: B, ESTABLISHED
	weight0B := "-e -t " + vip + " -r 10.1.0.2:80 -m -w 0"
	removeB := "-d -t " + vip + " -r 10.1.0.2:80"
	syn := "packet tcp " + ctClient + " " + vip + " flags=SYN"
	ack := "packet tcp " + ctClient + " " + vip + " flags=ACK"
	conn := "conn tcp " + ctClient + " " + vip
	cases := []struct {
		name  string
		setup []string
		line  string // played with " ct=confirmed", then again without (the retransmission)
		with  string // outcome with ct=confirmed
		after string // outcome of the retransmission
		plain string // outcome without ct=confirmed on a fresh model
	}{
		{"conn_reuse_mode=1, TIME_WAIT", closedB, conn, "drop(ct)", "A new", "A new"},
		{"conn_reuse_mode=2, TIME_WAIT (any non-zero mode)", append([]string{"sysctl conn_reuse_mode=2"}, closedB...), conn, "drop(ct)", "A new", "A new"},
		{"conn_reuse_mode=0, TIME_WAIT: the old entry either way", append([]string{"sysctl conn_reuse_mode=0"}, closedB...), conn, "B existing", "B existing", "B existing"},
		{"conn_reuse_mode=1, ESTABLISHED is not reused", estB, syn, "B existing", "B existing", "B existing"},
		{"expire_nodest_conn=1, weight 0", append([]string{"sysctl expire_nodest_conn=1"}, append(estB, weight0B)...), syn, "drop(ct)", "A new", "A new"},
		{"expire_nodest_conn=1, weight 0, conn_reuse_mode=0", append([]string{"sysctl expire_nodest_conn=1", "sysctl conn_reuse_mode=0"}, append(estB, weight0B)...), syn, "drop(ct)", "A new", "A new"},
		{"expire_nodest_conn=0, weight 0: the old entry", append(estB, weight0B), syn, "B existing", "B existing", "B existing"},
		{"expire_nodest_conn=1, removed server, ACK", append([]string{"sysctl expire_nodest_conn=1"}, append(estB, removeB)...), ack, "drop(ct)", "accept", "accept"},
		{"expire_nodest_conn=1, removed server, SYN", append([]string{"sysctl expire_nodest_conn=1"}, append(estB, removeB)...), syn, "drop(ct)", "A new", "A new"},
		{"expire_nodest_conn=0, removed server: dropped either way", append(estB, removeB), ack, "drop", "drop", "drop"},
		{"persistent service, TIME_WAIT entry controlled by its template", append([]string{"-E -t " + vip + " -s rr -p 300"}, closedB...), conn, "B existing", "B existing", "B existing"},
		{"persistent, weight 0, expire_quiescent_template=0: the template keeps B",
			append([]string{"-E -t " + vip + " -s rr -p 300", "sysctl expire_nodest_conn=1"}, append(estB, weight0B)...), syn, "drop(ct)", "B new", "B new"},
		{"persistent, weight 0, expire_quiescent_template=1: rescheduled to A",
			append([]string{"-E -t " + vip + " -s rr -p 300", "sysctl expire_nodest_conn=1", "sysctl expire_quiescent_template=1"}, append(estB, weight0B)...), syn, "drop(ct)", "A new", "A new"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm := newTM(t, Config{}, append(append(svcLines("rr", "A", "B"), "sysctl conntrack=1"), c.setup...)...)
			r := tm.result(c.line + " ct=confirmed")
			eq(t, "with ct=confirmed", outcome(r), c.with)
			if r.Conntrack != "confirmed" {
				t.Errorf("conntrack = %q, want confirmed", r.Conntrack)
			}
			if c.with == "drop(ct)" {
				if r.Verdict != "drop" || !r.NoDestination || r.NewConnection {
					t.Errorf("dropped line: %+v", r)
				}
				eq(t, "old entry", tm.stateOf(netfilter.ProtoTCP, ctClient, vip), "gone")
			}
			tm.advance(1e9) // the client retransmits a second later
			eq(t, "retransmission", outcome(tm.result(c.line)), c.after)

			fresh := newTM(t, Config{}, append(append(svcLines("rr", "A", "B"), "sysctl conntrack=1"), c.setup...)...)
			p := fresh.result(c.line)
			eq(t, "without ct=confirmed", outcome(p), c.plain)
			if p.ConntrackDrop || p.Conntrack != "" {
				t.Errorf("without ct=confirmed: %+v", p)
			}
		})
	}
}

// TestScriptConfirmedConntrackOutput checks the text and JSON of a dropped reused SYN and
// that ct=confirmed on a new tuple changes nothing.
func TestScriptConfirmedConntrackOutput(t *testing.T) {
	script := strings.Join(append(svcLines("rr", "A", "B"),
		"sysctl conntrack=1",
		"conn tcp "+ctClient+" "+vip+" ct=confirmed", // new tuple: scheduled (B)
		"conn tcp "+ctClient+" "+vip+" close",
		"conn tcp "+ctClient+" "+vip+" ct=confirmed", // reused: dropped
		"sleep 1",
		"conn tcp "+ctClient+" "+vip, // retransmission: A
		"conn sctp 192.0.2.1:2000 "+vip+" close",
		"conn sctp 192.0.2.1:2000 "+vip+" ct=confirmed",
	), "\n")
	script = strings.Replace(script, "-A -t "+vip+" -s rr", "-A -t "+vip+" -s rr\n-A --sctp-service "+vip+" -s rr\n-a --sctp-service "+vip+" -r 10.1.0.3:80 -m", 1)
	rep, err := RunScript(ScriptInput{Script: []byte(script), ScriptName: "ct.script"})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(text.String()), "\n")
	want := []string{
		"conn tcp 192.0.2.1:1000 -> 10.0.0.1:80 ct=confirmed: 10.1.0.2:80 [TCP 10.0.0.1:80 rr, new connection via scheduler, ESTABLISHED]",
		"conn tcp 192.0.2.1:1000 -> 10.0.0.1:80 close: 10.1.0.2:80 [TCP 10.0.0.1:80 rr, existing connection, TIME_WAIT]",
		"conn tcp 192.0.2.1:1000 -> 10.0.0.1:80 ct=confirmed: no destination [TCP 10.0.0.1:80 rr, dropped: reused connection with conntrack, kernel expires the old entry; retransmit to reschedule (SYN reusing the tuple of an entry in TIME_WAIT, conn_reuse_mode=1)]",
		"conn tcp 192.0.2.1:1000 -> 10.0.0.1:80: 10.1.0.1:80 [TCP 10.0.0.1:80 rr, new connection via scheduler, ESTABLISHED]",
	}
	if len(lines) != 6 {
		t.Fatalf("%d lines:\n%s", len(lines), text.String())
	}
	for i, w := range want {
		eq(t, "text line", lines[i], w)
	}
	if !strings.Contains(lines[5], "ct=confirmed: no destination [SCTP 10.0.0.1:80 rr, dropped: reused connection with conntrack, kernel expires the old entry; retransmit to reschedule (INIT reusing the tuple of an entry in CLOSED, conn_reuse_mode=1)]") {
		t.Errorf("SCTP INIT on a CLOSED entry: %s", lines[5])
	}

	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(js.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Results) != 6 {
		t.Fatalf("%d results", len(out.Results))
	}
	drop := out.Results[2]
	if drop["conntrack"] != "confirmed" || drop["conntrack_drop"] != true || drop["verdict"] != "drop" ||
		drop["no_destination"] != true || drop["line"] != float64(9) || drop["file"] != "ct.script" ||
		!strings.HasPrefix(drop["reason"].(string), "reused connection with conntrack, kernel expires the old entry; retransmit to reschedule") {
		t.Errorf("dropped line in JSON: %v", drop)
	}
	if r := out.Results[0]; r["conntrack"] != "confirmed" || r["conntrack_drop"] != nil || r["verdict"] != "forward" {
		t.Errorf("new tuple with ct=confirmed in JSON: %v", r)
	}
	if r := out.Results[3]; r["conntrack"] != nil || r["conntrack_drop"] != nil || r["new_connection"] != true {
		t.Errorf("retransmission in JSON: %v", r)
	}
}

// TestScriptConfirmedConntrackBadInput: bad ct= tokens are errors naming file and line.
func TestScriptConfirmedConntrackBadInput(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{"conn tcp 192.0.2.1:1 10.0.0.1:80 ct=bogus", `bad.script:3: conn: ct=bogus: want ct=confirmed`},
		{"conn tcp 192.0.2.1:1 10.0.0.1:80 ct=", `bad.script:3: conn: ct=: want ct=confirmed`},
		{"packet tcp 192.0.2.1:1 10.0.0.1:80 flags=SYN ct=new", `bad.script:3: packet: ct=new: want ct=confirmed`},
		{"packet tcp 10.1.0.1:80 192.0.2.1:1 reply ct=confirmed", `bad.script:3: packet: ct=confirmed applies to packets from the client`},
		{"sched tcp 192.0.2.1:1 10.0.0.1:80 ct=confirmed", `bad.script:3: sched: ct=confirmed: sched asks the scheduler only`},
	} {
		script := "-A -t 10.0.0.1:80 -s rr\n# comment\n" + c.line + "\n"
		_, err := RunScript(ScriptInput{Script: []byte(script), ScriptName: "bad.script"})
		var le *LineError
		if err == nil || !asLineError(err, &le) || le.Line != 3 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a line error containing %q", c.line, err, c.want)
		}
	}
}
