package emulator

import (
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
)

// RunTable: one table at one hook, the verdict copied out with the deciding rule.
func TestRunTable(t *testing.T) {
	e := load(t, IPv4, `*nat
:KUBE-SEP-A - [0:0]
-A PREROUTING -d 10.96.0.1/32 -p tcp -m tcp --dport 80 -j KUBE-SEP-A
-A KUBE-SEP-A -p tcp -m tcp -j DNAT --to-destination 10.244.0.5:8080
COMMIT
*filter
-A INPUT -p tcp -m tcp --dport 22 -j REJECT --reject-with tcp-reset
-A INPUT -p tcp -m tcp --dport 23 -j DROP
COMMIT
`)
	env := &StaticEnv{}
	q := pkt("tcp 10.244.1.2:40000 10.96.0.1:80")
	v := e.RunTable(env, TableNAT, netfilter.Prerouting, q, nil)
	if !v.Decided() || !v.HasNAT || v.NAT.Kind != netfilter.DNAT || v.NAT.Dest() != "10.244.0.5:8080" || v.Reason != "nat/KUBE-SEP-A line 4" {
		t.Errorf("DNAT: %+v", v)
	}
	if q.Dst.String() != "10.244.0.5" || q.DstPort != 8080 || q.CT.Status&netfilter.StatusDstNAT == 0 {
		t.Errorf("the packet after DNAT: %s %v", q, q.CT.Status)
	}
	v = e.RunTable(env, TableFilter, netfilter.Input, pkt("tcp 10.244.1.2:40000 10.0.0.1:22"), nil)
	if v.Verdict != Reject || v.Reject != netfilter.RejectTCPReset || v.RejectWith != "tcp-reset" || v.Reason != "filter/INPUT line 7" {
		t.Errorf("REJECT: %+v", v)
	}
	v = e.RunTable(env, TableFilter, netfilter.Input, pkt("tcp 10.244.1.2:40000 10.0.0.1:23"), nil)
	if v.Verdict != Drop || v.Reason != "filter/INPUT line 8" {
		t.Errorf("DROP: %+v", v)
	}
	v = e.RunTable(env, TableFilter, netfilter.Input, pkt("tcp 10.244.1.2:40000 10.0.0.1:80"), nil)
	if v.Decided() || v.Reason != "" {
		t.Errorf("a packet no rule stops: %+v", v)
	}
	for _, tc := range []struct {
		table string
		hook  netfilter.Hook
		want  int
	}{
		{TableRaw, netfilter.Prerouting, netfilter.PriorityRaw}, {TableMangle, netfilter.Forward, netfilter.PriorityMangle},
		{TableNAT, netfilter.Prerouting, netfilter.PriorityNATDst}, {TableNAT, netfilter.Output, netfilter.PriorityNATDst},
		{TableNAT, netfilter.Input, netfilter.PriorityNATSrc}, {TableNAT, netfilter.Postrouting, netfilter.PriorityNATSrc},
		{TableFilter, netfilter.Input, netfilter.PriorityFilter}, {TableSecurity, netfilter.Output, netfilter.PrioritySecurity},
	} {
		if got := TablePriority(tc.table, tc.hook); got != tc.want {
			t.Errorf("TablePriority(%s, %s) = %d, want %d", tc.table, tc.hook, got, tc.want)
		}
	}
}
