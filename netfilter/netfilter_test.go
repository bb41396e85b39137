package netfilter

import (
	"net/netip"
	"testing"
)

func TestHookNames(t *testing.T) {
	for h := Prerouting; int(h) < NumHooks; h++ {
		got, ok := ParseHook(h.String())
		if !ok || got != h {
			t.Errorf("ParseHook(%q) = %v, %v", h.String(), got, ok)
		}
	}
	if _, ok := ParseHook("postrouting"); ok {
		t.Error("a user chain named postrouting parsed as the hook")
	}
	if _, ok := ParseHook("PREROUTE"); ok {
		t.Error("a wrong name parsed")
	}
	if Hook(9).String() != "HOOK(9)" {
		t.Errorf("unknown hook: %s", Hook(9))
	}
}

func TestCtStateAndStatus(t *testing.T) {
	var zero CtState
	if zero != CtNew || zero.String() != "NEW" || CtUntracked.String() != "UNTRACKED" {
		t.Errorf("zero state %s, untracked %s", zero, CtUntracked)
	}
	if s := (StatusSeenReply | StatusAssured | StatusDstNAT).String(); s != "SEEN_REPLY,ASSURED,DST_NAT" {
		t.Errorf("status string %q", s)
	}
	tu := Tuple{Proto: ProtoTCP, Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.96.0.1"), SrcPort: 1234, DstPort: 80}
	if tu.Invert().Invert() != tu || tu.Invert().Src != tu.Dst || tu.String() != "src=10.0.0.1 dst=10.96.0.1 sport=1234 dport=80" {
		t.Errorf("tuple %s / %s", tu, tu.Invert())
	}
}

func TestRejectWith(t *testing.T) {
	for _, tc := range []struct {
		name     string
		want     RejectWith
		v4t, v4c uint8
		v6t, v6c uint8
	}{
		{"icmp-port-unreachable", RejectPortUnreachable, 3, 3, 1, 4},
		{"icmp6-port-unreachable", RejectPortUnreachable, 3, 3, 1, 4},
		{"icmp-net-unreachable", RejectNetUnreachable, 3, 0, 1, 0},
		{"icmp6-no-route", RejectNetUnreachable, 3, 0, 1, 0},
		{"icmp-host-unreachable", RejectHostUnreachable, 3, 1, 1, 3},
		{"icmp-proto-unreachable", RejectProtoUnreachable, 3, 2, 1, 4},
		{"icmp-net-prohibited", RejectNetProhibited, 3, 9, 1, 1},
		{"icmp-host-prohibited", RejectHostProhibited, 3, 10, 1, 1},
		{"icmp-admin-prohibited", RejectAdminProhibited, 3, 13, 1, 1},
		{"icmp6-adm-prohibited", RejectAdminProhibited, 3, 13, 1, 1},
		{"tcp-reset", RejectTCPReset, 3, 3, 1, 4},
	} {
		r, ok := RejectWithName(tc.name)
		if !ok || r != tc.want {
			t.Errorf("%s: %v %v", tc.name, r, ok)
		}
		if typ, code := r.ICMPTypeCode(false); typ != tc.v4t || code != tc.v4c {
			t.Errorf("%s: ICMP %d/%d", tc.name, typ, code)
		}
		if typ, code := r.ICMPTypeCode(true); typ != tc.v6t || code != tc.v6c {
			t.Errorf("%s: ICMPv6 %d/%d", tc.name, typ, code)
		}
	}
	if _, ok := RejectWithName("icmp-bogus"); ok {
		t.Error("a wrong name parsed")
	}
}

func TestNATKind(t *testing.T) {
	for _, k := range []NATKind{DNAT, Redirect, SNAT, Masquerade} {
		got, ok := ParseNATKind(k.String())
		if !ok || got != k {
			t.Errorf("%s: %v %v", k, got, ok)
		}
	}
	if !SNAT.Source() || !Masquerade.Source() || DNAT.Source() || Redirect.Source() {
		t.Error("Source")
	}
	if _, ok := ParseNATKind(""); ok {
		t.Error("the empty name parsed")
	}
	if NATKind(0).String() != "NAT?" {
		t.Errorf("zero kind %s", NATKind(0))
	}
}

func TestKernelVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want KernelVersion
		bad  bool
	}{
		{in: "5.4", want: KernelVersion{5, 4}},
		{in: "4.19.0-26-amd64", want: KernelVersion{4, 19}},
		{in: "6.6.8+", want: KernelVersion{6, 6}},
		{in: "5", bad: true},
		{in: "five.four", bad: true},
		{in: "1.2", bad: true},
	} {
		got, err := ParseKernelVersion(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ParseKernelVersion(%q) = %v, %v", tc.in, got, err)
		}
	}
	v59 := MustParseKernelVersion("5.9")
	if (KernelVersion{5, 8}).AtLeast(v59) || !(KernelVersion{5, 9}).AtLeast(v59) || !(KernelVersion{6, 0}).AtLeast(v59) || (KernelVersion{4, 19}).AtLeast(v59) {
		t.Error("AtLeast 5.9 wrong")
	}
	if !(KernelVersion{}).AtLeast(v59) || (KernelVersion{}).String() != "current" || v59.String() != "5.9" {
		t.Error("the zero KernelVersion is not a current kernel")
	}
}
