package kernel

import (
	"slices"
	"strings"
	"testing"
)

const snmpSample = `Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards InDelivers OutRequests OutDiscards OutNoRoutes
Ip: 1 64 12 0 0 0 0 2 10 9 0 0
Icmp: InMsgs InErrors InCsumErrors InDestUnreachs OutMsgs OutDestUnreachs
Icmp: 1 0 0 1 0 0
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens CurrEstab
Tcp: 1 200 120000 -1 3 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors
Udp: 2 1 0 3 0
`

func TestNonzeroCounters(t *testing.T) {
	got, err := NonzeroCounters(snmpSample)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Ip.InReceives=12", "Ip.InDiscards=2", "Ip.InDelivers=10", "Ip.OutRequests=9",
		"Icmp.InMsgs=1", "Icmp.InDestUnreachs=1", "Tcp.ActiveOpens=3",
		"Udp.InDatagrams=2", "Udp.NoPorts=1", "Udp.OutDatagrams=3"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if got, err := NonzeroCounters(""); err != nil || got != nil {
		t.Errorf("empty: %v, %v", got, err)
	}
	for _, bad := range []struct{ text, want string }{
		{"Ip: A B\n", "line 1"},
		{"Ip: A B\nIcmp: 1 2\n", "not one group's"},
		{"Ip: A B\nIp: 1\n", "line 2: group Ip has 2 names and 1 values"},
		{"Ip: A B\nIp: 1 x\n", `line 2: Ip.B: "x" is not a number`},
		{"Ip A\nIp 1\n", "not one group's"},
	} {
		if _, err := NonzeroCounters(bad.text); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want an error with %q", bad.text, err, bad.want)
		}
	}
}

func FuzzNonzeroCounters(f *testing.F) {
	f.Add(snmpSample)
	f.Add("Ip: A\nIp: 1\n")
	f.Fuzz(func(t *testing.T, text string) {
		cs, err := NonzeroCounters(text)
		if err != nil {
			return
		}
		for _, c := range cs {
			name, v, ok := strings.Cut(c, "=")
			if !ok || v == "0" || !strings.Contains(name, ".") || counterSettings[name] {
				t.Fatalf("%q gave %q", text, c)
			}
		}
	})
}
