package difffuzz

import (
	"net/netip"
	"strings"
	"testing"
)

func TestCaseRoundTripAndErrors(t *testing.T) {
	c := &Case{Comment: []string{"why"}, Packet: Packet{Proto: "tcp", From: "client", Src: netip.MustParseAddrPort("10.244.0.2:1111"),
		Dst: netip.MustParseAddrPort("10.244.0.3:80")}, Kernel: "refused", Emulator: "refused", Expect: "same",
		Ruleset: "table ip a {\n}\n"}
	got, err := ParseCase("x.case", c.Format(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Format()) != string(c.Format()) {
		t.Errorf("round trip:\n%s\nwant\n%s", got.Format(), c.Format())
	}
	for _, bad := range []struct {
		text     string
		backends []string
		want     string
	}{
		{"backend: nft\n", nil, "x.case:1: backend \"nft\": this fuzzer has no backends"},
		{"backend: x\n", []string{"nft", "legacy"}, "x.case:1: backend \"x\": want nft or legacy"},
		{"packet: tcp from node 1.2.3.4:1 -> 1.2.3.4:2\npacket: tcp from node 1.2.3.4:1 -> 1.2.3.4:2\n", nil, "x.case:2: packet given twice"},
	} {
		if _, err := ParseCase("x.case", []byte(bad.text), bad.backends); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: error %v, want one containing %q", bad.text, err, bad.want)
		}
	}
	if err := c.Check("timeout"); err == nil {
		t.Error("Check: a prediction other than the kernel's passes an expect-same case")
	}
	c.Expect, c.Emulator = "differ: known", "timeout"
	if err := c.Check("timeout"); err != nil {
		t.Errorf("Check: the recorded prediction of an expect-differ case fails: %v", err)
	}
}

// TestExpect: a drop is EPERM for the node's own datagram on the send path only.
func TestExpect(t *testing.T) {
	node := Packet{Proto: "udp", From: "node", Src: netip.AddrPortFrom(Node, 1111), Dst: netip.AddrPortFrom(Srv1, 80)}
	dnat := "10.244.0.4:8080"
	for _, tc := range []struct {
		o    Prediction
		p    Packet
		want string
	}{
		{Prediction{Verdict: "DROP", SendPath: true}, node, "eperm"},
		{Prediction{Verdict: "DROP"}, node, "timeout"},
		{Prediction{Verdict: "REJECT", RejectWith: "icmp-host-unreachable"}, Packet{Proto: "tcp", From: "client"}, "unreachable"},
		{Prediction{Verdict: "ACCEPT", DNAT: &dnat}, node, "answered srv2 from 192.168.77.1"},
		{Prediction{Verdict: "ACCEPT"}, Packet{Proto: "tcp", From: "client", Src: netip.AddrPortFrom(Client, 1), Dst: netip.AddrPortFrom(Srv1, 9090)}, "refused"},
	} {
		if got := Expect(tc.o, tc.p); got != tc.want {
			t.Errorf("Expect(%+v, %s) = %q, want %q", tc.o, tc.p, got, tc.want)
		}
	}
}
