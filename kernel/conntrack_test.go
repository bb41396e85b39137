package kernel

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

func mustAddr(s string) netip.Addr     { return netip.MustParseAddr(s) }
func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestParseConntrack(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []ConntrackEntry
	}{
		{"tcp established dnat", "ipv4     2 tcp      6 431999 ESTABLISHED src=192.168.77.100 dst=10.96.0.10 sport=40000 dport=80 src=10.244.0.2 dst=192.168.77.100 sport=8080 dport=40000 [ASSURED] mark=0 use=1\n",
			[]ConntrackEntry{{Family: IPv4, Protocol: 6, ProtoName: "tcp", Timeout: 431999 * time.Second, State: "ESTABLISHED",
				Orig:   ConntrackTuple{Src: mustAddr("192.168.77.100"), Dst: mustAddr("10.96.0.10"), SrcPort: 40000, DstPort: 80},
				Reply:  ConntrackTuple{Src: mustAddr("10.244.0.2"), Dst: mustAddr("192.168.77.100"), SrcPort: 8080, DstPort: 40000},
				Status: StatusAssured, Use: 1}}},
		{"udp unreplied masqueraded, zone, connection id", "ipv4     2 udp      17 29 src=10.244.0.2 dst=10.96.0.10 sport=5000 dport=53 [UNREPLIED] src=10.244.0.3 dst=10.244.0.1 sport=53 dport=61000 mark=0x4000 zone=3 use=2 id=320935232\n",
			[]ConntrackEntry{{Family: IPv4, Protocol: 17, ProtoName: "udp", Timeout: 29 * time.Second,
				Orig:   ConntrackTuple{Src: mustAddr("10.244.0.2"), Dst: mustAddr("10.96.0.10"), SrcPort: 5000, DstPort: 53},
				Reply:  ConntrackTuple{Src: mustAddr("10.244.0.3"), Dst: mustAddr("10.244.0.1"), SrcPort: 53, DstPort: 61000},
				Status: StatusUnreplied, Mark: 0x4000, Zone: 3, Use: 2, Extra: []string{"id=320935232"}}}},
		{"plain output, icmp", "icmp     1 29 src=10.0.0.1 dst=10.0.0.2 type=8 code=0 id=77 src=10.0.0.2 dst=10.0.0.1 type=0 code=0 id=77 mark=0 use=1\n",
			[]ConntrackEntry{{Family: IPv4, Protocol: 1, ProtoName: "icmp", Timeout: 29 * time.Second,
				Orig:  ConntrackTuple{Src: mustAddr("10.0.0.1"), Dst: mustAddr("10.0.0.2"), ICMPType: 8, ICMPID: 77},
				Reply: ConntrackTuple{Src: mustAddr("10.0.0.2"), Dst: mustAddr("10.0.0.1"), ICMPID: 77},
				Use:   1}}},
		{"ipv6 sctp, offload, unknown flag, two lines and summary", "ipv6     10 sctp     132 5 ESTABLISHED src=fd00::1 dst=fd00::10 sport=1 dport=2 src=fd00::2 dst=fd00::1 sport=2 dport=1 [ASSURED] [OFFLOAD] [NEW_FLAG] mark=0 use=1\n" +
			"ipv4     2 unknown  47 599 src=1.1.1.1 dst=2.2.2.2 src=2.2.2.2 dst=1.1.1.1 mark=0 use=1\n" +
			"conntrack v1.4.7 (conntrack-tools): 2 flow entries have been shown.\n",
			[]ConntrackEntry{
				{Family: IPv6, Protocol: 132, ProtoName: "sctp", Timeout: 5 * time.Second, State: "ESTABLISHED",
					Orig:   ConntrackTuple{Src: mustAddr("fd00::1"), Dst: mustAddr("fd00::10"), SrcPort: 1, DstPort: 2},
					Reply:  ConntrackTuple{Src: mustAddr("fd00::2"), Dst: mustAddr("fd00::1"), SrcPort: 2, DstPort: 1},
					Status: StatusAssured | StatusOffload, Use: 1, Extra: []string{"[NEW_FLAG]"}},
				{Family: IPv4, Protocol: 47, ProtoName: "unknown", Timeout: 599 * time.Second,
					Orig:  ConntrackTuple{Src: mustAddr("1.1.1.1"), Dst: mustAddr("2.2.2.2")},
					Reply: ConntrackTuple{Src: mustAddr("2.2.2.2"), Dst: mustAddr("1.1.1.1")}, Use: 1},
			}},
		{"empty", "\n\n", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseConntrack([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	e := ConntrackEntry{Orig: ConntrackTuple{Src: mustAddr("1.1.1.1"), Dst: mustAddr("10.96.0.1"), SrcPort: 5, DstPort: 80},
		Reply: ConntrackTuple{Src: mustAddr("10.244.0.2"), Dst: mustAddr("10.244.0.1"), SrcPort: 8080, DstPort: 7}}
	if !e.DNATed() || !e.SNATed() {
		t.Errorf("%v: want DNATed and SNATed", e)
	}
}

func TestParseConntrackErrors(t *testing.T) {
	good := "ipv4 2 udp 17 29 src=1.1.1.1 dst=2.2.2.2 sport=1 dport=2 src=2.2.2.2 dst=1.1.1.1 sport=2 dport=1 mark=0 use=1\n"
	cases := []struct{ in, want string }{
		{good + "ipv4 2 udp 17 x src=1.1.1.1\n", "line 2: timeout"},
		{"ipv4 2 udp\n", "line 1: too few fields"},
		{"udp 17 29 src=1.1.1.1 dst=2.2.2.2\n", "line 1: want an original and a reply tuple, found 1"},
		{"udp 17 29 src=1.1.1.999 dst=2.2.2.2 src=2.2.2.2 dst=1.1.1.1\n", "line 1: src"},
		{"udp 17 29 src=1.1.1.1 dst=2.2.2.2 sport=70000 src=2.2.2.2 dst=1.1.1.1\n", "line 1: sport"},
		{"udp 17 29 src=1.1.1.1 dst=2.2.2.2 src=2.2.2.2 dst=1.1.1.1 src=3.3.3.3\n", "more than two tuples"},
		{"udp 17 29 src=1.1.1.1 dst=2.2.2.2 src=2.2.2.2 dst=1.1.1.1 garbage\n", `unexpected token "garbage"`},
		{"udp 17 29 src=1.1.1.1 src=2.2.2.2 dst=1.1.1.1\n", "tuple without dst"},
		{"ipv4 2 udp 17 29 src=fd00::1 dst=fd00::2 src=fd00::2 dst=fd00::1\n", "is not IPv4"},
		{"udp 17 29 src=1.1.1.1 dst=2.2.2.2 src=2.2.2.2 dst=1.1.1.1 mark=x\n", "mark"},
		{"udp 17 29 src=1.1.1.1 dst=2.2.2.2 [UNREPLIED src=2.2.2.2 dst=1.1.1.1\n", "bad status token"},
	}
	for _, tc := range cases {
		_, err := ParseConntrack([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConntrack(%q) = %v; want an error containing %q", tc.in, err, tc.want)
		}
	}
}

func FuzzParseConntrack(f *testing.F) {
	for _, s := range []string{
		"ipv4     2 tcp      6 431999 ESTABLISHED src=192.168.77.100 dst=10.96.0.10 sport=40000 dport=80 src=10.244.0.2 dst=192.168.77.100 sport=8080 dport=40000 [ASSURED] mark=0 use=1\n",
		"icmp     1 29 src=10.0.0.1 dst=10.0.0.2 type=8 code=0 id=77 src=10.0.0.2 dst=10.0.0.1 type=0 code=0 id=77 mark=0 use=1\n",
		"ipv6 10 udp 17 3 src=fd00::1 dst=fd00::2 sport=1 dport=2 [UNREPLIED] src=fd00::2 dst=fd00::1 sport=2 dport=1 mark=0 zone=1 use=1 id=9\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := ParseConntrack(b)
		if err != nil {
			return
		}
		for _, e := range entries {
			// Every entry the parser accepts has both tuples with addresses of one family.
			if !e.Orig.Src.IsValid() || !e.Orig.Dst.IsValid() || !e.Reply.Src.IsValid() || !e.Reply.Dst.IsValid() {
				t.Fatalf("entry with missing addresses: %+v", e)
			}
			if e.Family != IPv4 && e.Family != IPv6 {
				t.Fatalf("entry without family: %+v", e)
			}
			for _, a := range []netip.Addr{e.Orig.Src, e.Orig.Dst, e.Reply.Src, e.Reply.Dst} {
				if a.Is4() != (e.Family == IPv4) {
					t.Fatalf("entry mixing families: %+v", e)
				}
			}
			_ = e.String()
		}
	})
}

// renderConntrack writes an entry the way `conntrack -L -o extended` prints it.
func renderConntrack(e ConntrackEntry) string {
	var b strings.Builder
	fam, famNum := "ipv4", 2
	if e.Family == IPv6 {
		fam, famNum = "ipv6", 10
	}
	fmt.Fprintf(&b, "%-8s %d %-8s %d %d ", fam, famNum, e.ProtoName, e.Protocol, int(e.Timeout/time.Second))
	if e.State != "" {
		b.WriteString(e.State + " ")
	}
	tuple := func(t ConntrackTuple) {
		fmt.Fprintf(&b, "src=%s dst=%s ", t.Src, t.Dst)
		switch e.Protocol {
		case 1, 58:
			fmt.Fprintf(&b, "type=%d code=%d id=%d ", t.ICMPType, t.ICMPCode, t.ICMPID)
		default:
			fmt.Fprintf(&b, "sport=%d dport=%d ", t.SrcPort, t.DstPort)
		}
	}
	tuple(e.Orig)
	if e.Status&StatusUnreplied != 0 {
		b.WriteString("[UNREPLIED] ")
	}
	tuple(e.Reply)
	for _, s := range []struct {
		f ConntrackStatus
		n string
	}{{StatusAssured, "[ASSURED] "}, {StatusOffload, "[OFFLOAD] "}, {StatusHWOffload, "[HW_OFFLOAD] "}} {
		if e.Status&s.f != 0 {
			b.WriteString(s.n)
		}
	}
	fmt.Fprintf(&b, "mark=%d ", e.Mark)
	if e.Zone != 0 {
		fmt.Fprintf(&b, "zone=%d ", e.Zone)
	}
	fmt.Fprintf(&b, "use=%d\n", e.Use)
	return b.String()
}

func TestParseConntrackProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v6 := rapid.Bool().Draw(t, "v6")
		addr := func(label string) netip.Addr {
			if v6 {
				var b [16]byte
				copy(b[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, label))
				return netip.AddrFrom16(b)
			}
			var b [4]byte
			copy(b[:], rapid.SliceOfN(rapid.Byte(), 4, 4).Draw(t, label))
			return netip.AddrFrom4(b)
		}
		e := ConntrackEntry{Family: IPv4, Timeout: time.Duration(rapid.Uint32().Draw(t, "timeout")) * time.Second,
			Mark: rapid.Uint32().Draw(t, "mark"), Zone: rapid.Uint16().Draw(t, "zone"), Use: rapid.Uint32().Draw(t, "use")}
		if v6 {
			e.Family = IPv6
		}
		protos := []struct {
			num   uint8
			name  string
			state string
		}{{6, "tcp", "ESTABLISHED"}, {6, "tcp", "TIME_WAIT"}, {17, "udp", ""}, {132, "sctp", "COOKIE_WAIT"}, {1, "icmp", ""}, {47, "unknown", ""}}
		p := rapid.SampledFrom(protos).Draw(t, "proto")
		if p.num == 1 && v6 {
			p.num, p.name = 58, "icmpv6"
		}
		e.Protocol, e.ProtoName, e.State = p.num, p.name, p.state
		tuple := func(label string) ConntrackTuple {
			tu := ConntrackTuple{Src: addr(label + ".src"), Dst: addr(label + ".dst")}
			switch p.num {
			case 1, 58:
				tu.ICMPType, tu.ICMPCode, tu.ICMPID = rapid.Uint8().Draw(t, label+".type"), rapid.Uint8().Draw(t, label+".code"), rapid.Uint16().Draw(t, label+".id")
			case 47:
			default:
				tu.SrcPort, tu.DstPort = rapid.Uint16().Draw(t, label+".sport"), rapid.Uint16().Draw(t, label+".dport")
			}
			return tu
		}
		e.Orig, e.Reply = tuple("orig"), tuple("reply")
		e.Status = ConntrackStatus(rapid.IntRange(0, 15).Draw(t, "status"))
		line := renderConntrack(e)
		if p.num == 47 {
			// "unknown" protocols print no ports; the renderer printed zero ports.
			line = strings.ReplaceAll(line, "sport=0 dport=0 ", "")
		}
		got, err := ParseConntrack([]byte(line))
		if err != nil {
			t.Fatalf("parse %q: %v", line, err)
		}
		if len(got) != 1 || !cmp.Equal(got[0], e, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })) {
			t.Fatalf("line %q\nparsed %+v\nwant   %+v", line, got, e)
		}
	})
}
