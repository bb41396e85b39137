package emulator

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/clusterlab/clusterlab/netfilter"
)

func statsOf(t *testing.T, m *Model, svc string) ServiceStats {
	t.Helper()
	for _, s := range m.Traffic() {
		if s.Service == svc {
			return s
		}
	}
	t.Fatalf("no service %s in %+v", svc, m.Traffic())
	return ServiceStats{}
}

// TestTrafficStats: connections count once per scheduled entry (not per template, not
// per packet of an existing entry); packets and bytes per direction with the packet's
// IP length; nothing while the entry's real server is out of its service; -Z zeroes.
func TestTrafficStats(t *testing.T) {
	tm := newTM(t, Config{},
		"-A -u 10.96.0.9:53 -s rr -p 60",
		"-a -u 10.96.0.9:53 -r 10.1.0.1:53 -m",
		"-a -u 10.96.0.9:53 -r 10.1.0.2:53 -m",
		"conn udp 10.0.0.1:1000 10.96.0.9:53", // B; template made
		"conn udp 10.0.0.1:1000 10.96.0.9:53", // the same entry
		"conn udp 10.0.0.1:1001 10.96.0.9:53", // B by the template: a connection
		"conn udp 10.0.0.2:1000 10.96.0.9:53", // A
	)
	const ip = 28 + ConnPayload
	want := ServiceStats{Service: "UDP 10.96.0.9:53",
		Stats: TrafficStats{Conns: 3, InPkts: 4, OutPkts: 4, InBytes: 4 * ip, OutBytes: 4 * ip},
		Destinations: []DestStats{
			{"10.1.0.2:53", TrafficStats{Conns: 2, InPkts: 3, OutPkts: 3, InBytes: 3 * ip, OutBytes: 3 * ip}},
			{"10.1.0.1:53", TrafficStats{Conns: 1, InPkts: 1, OutPkts: 1, InBytes: ip, OutBytes: ip}},
		}}
	if d := cmp.Diff(want, statsOf(t, tm.Model, "UDP 10.96.0.9:53")); d != "" {
		t.Errorf("after the datagrams (-want +got):\n%s", d)
	}
	// A reply of an entry whose real server was removed passes (the entry lives,
	// expire_nodest_conn=0) but is not counted, as ip_vs_out_stats needs AVAILABLE.
	tm.do("-d -u 10.96.0.9:53 -r 10.1.0.1:53")
	d := tm.Out(Packet{Protocol: netfilter.ProtoUDP, Src: netip.MustParseAddrPort("10.1.0.1:53"),
		Dst: netip.MustParseAddrPort("10.0.0.2:1000"), Len: 100})
	if d.Verdict != VerdictForward {
		t.Fatalf("reply of the removed server's entry: %+v", d)
	}
	if got := statsOf(t, tm.Model, "UDP 10.96.0.9:53").Stats; got.OutPkts != 4 || got.OutBytes != 4*ip {
		t.Errorf("a removed server's reply was counted: %+v", got)
	}
	var out strings.Builder
	if err := tm.Exec([]string{"-L", "-n", "--stats"}, &out); err != nil {
		t.Fatal(err)
	}
	wantOut := "IP Virtual Server version 1.2.1 (size=4096)\n" +
		"Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes\n" +
		"  -> RemoteAddress:Port\n" +
		"UDP  10.96.0.9:53                        3        4        4      368      368\n" +
		"  -> 10.1.0.2:53                         2        3        3      276      276\n"
	if out.String() != wantOut {
		t.Errorf("ipvsadm -Ln --stats:\n%s\nwant:\n%s", out.String(), wantOut)
	}
	tm.do("-Z")
	if got := statsOf(t, tm.Model, "UDP 10.96.0.9:53"); got.Stats != (TrafficStats{}) || got.Destinations[0].Stats != (TrafficStats{}) {
		t.Errorf("after -Z: %+v", got)
	}
}

func TestLargeNum(t *testing.T) {
	for _, c := range []struct {
		n     uint64
		exact bool
		want  string
	}{
		{0, false, "        0"}, {99999999, false, " 99999999"}, {123456789, false, "  123456K"},
		{1234567890, false, "    1234M"}, {1234567890123, false, "    1234G"}, {1234567890123456, false, "    1234T"},
		{1234567890, true, " 1234567890"}, {5, true, "        5"},
	} {
		if got := largeNum(c.n, c.exact); got != c.want {
			t.Errorf("largeNum(%d, %v) = %q, want %q", c.n, c.exact, got, c.want)
		}
	}
}

// TestServerClose: conn ... server-close leaves the entry in FIN_WAIT with --set's
// tcpfin timeout, and a later close on the tuple ends in TIME_WAIT through the same
// real server.
func TestServerClose(t *testing.T) {
	tm := newTM(t, Config{}, "--set 0 7 0", "-A -t 10.96.0.9:80 -s rr", "-a -t 10.96.0.9:80 -r 10.1.0.1:80 -m",
		"-a -t 10.96.0.9:80 -r 10.1.0.2:80 -m")
	rep := tm.do("conn tcp 10.0.0.1:1000 10.96.0.9:80 server-close")
	if r := rep.Results[0]; r.State != "FIN_WAIT" || r.Expires != "7s" || r.Destination != "10.1.0.2:80" {
		t.Errorf("server-close: %+v", r)
	}
	rep = tm.do("conn tcp 10.0.0.1:1000 10.96.0.9:80 close")
	if r := rep.Results[0]; r.State != "TIME_WAIT" || r.Destination != "10.1.0.2:80" || r.NewConnection {
		t.Errorf("close after server-close: %+v", r)
	}
	for _, bad := range []string{"conn udp 10.0.0.1:1 10.96.0.9:80 server-close", "conn tcp 10.0.0.1:1 10.96.0.9:80 close server-close"} {
		if _, err := tm.Run([]byte(bad), "bad", tm.clock); err == nil || !strings.Contains(err.Error(), "server-close") {
			t.Errorf("%q: %v, want an error naming server-close", bad, err)
		}
	}
}
