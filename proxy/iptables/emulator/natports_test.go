package emulator

import (
	"context"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/proxy/iptables"

	"github.com/clusterlab/clusterlab/netfilter"
)

// TestNATPortProtosAsNeedProto checks natPortProtos, which returns early for an accepted
// protocol, against the check it shortcuts (needProto with the module name built on
// every call), over every protocol state and each NAT target that calls it: the same
// acceptance and the same error text.
func TestNATPortProtosAsNeedProto(t *testing.T) {
	for _, what := range []string{"DNAT", "SNAT", "MASQUERADE", "REDIRECT"} {
		for _, set := range []bool{false, true} {
			for _, neg := range []bool{false, true} {
				for num := 0; num < 256; num++ {
					rc := &ruleCtx{proto: ProtoSpec{Set: set, Num: uint8(num), Neg: neg}}
					got := natPortProtos(rc, what)
					want := needProto(rc, what+" with ports", netfilter.ProtoTCP, netfilter.ProtoUDP, netfilter.ProtoSCTP, netfilter.ProtoDCCP)
					if (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
						t.Fatalf("%s, proto %+v: natPortProtos = %v, needProto = %v", what, rc.proto, got, want)
					}
				}
			}
		}
	}
}

// TestNATPortProtosRestore runs the check through a restore: a DNAT with a port is
// accepted after -p tcp and refused, with needProto's text, after -p icmp or ! -p tcp.
func TestNATPortProtosRestore(t *testing.T) {
	for _, c := range []struct{ spec, err string }{
		{"-p tcp -j DNAT --to-destination 10.0.0.1:80", ""},
		{"-p udp -j DNAT --to-destination 10.0.0.1:80", ""},
		{"-p sctp -j DNAT --to-destination 10.0.0.1:80", ""},
		{"-p icmp -j DNAT --to-destination 10.0.0.1:80", "DNAT with ports needs -p tcp or -p udp or -p sctp or -p dccp"},
		{"! -p tcp -j DNAT --to-destination 10.0.0.1:80", "DNAT with ports needs -p tcp or -p udp or -p sctp or -p dccp"},
		{"-j DNAT --to-destination 10.0.0.1:80", "DNAT with ports needs -p tcp or -p udp or -p sctp or -p dccp"},
		{"-j DNAT --to-destination 10.0.0.1", ""},
	} {
		e := New(IPv4)
		err := e.Restore(context.Background(), []byte("*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING "+c.spec+"\nCOMMIT\n"), iptables.RestoreOptions{})
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.spec, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: error %v, want one containing %q", c.spec, err, c.err)
		}
	}
}

// TestNATPortProtosNoAlloc: the accepted case allocates nothing (it built and leaked
// the module name once per DNAT rule with a port: ~100,000 allocations a full sync of
// 10,000 Services).
func TestNATPortProtosNoAlloc(t *testing.T) {
	rc := &ruleCtx{proto: ProtoSpec{Set: true, Num: netfilter.ProtoTCP}}
	what := "DNAT"
	if n := testing.AllocsPerRun(100, func() { _ = natPortProtos(rc, what) }); n != 0 {
		t.Fatalf("natPortProtos with -p tcp: %v allocations, want 0", n)
	}
}
