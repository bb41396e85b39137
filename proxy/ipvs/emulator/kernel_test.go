package emulator

import (
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// TestKernel59ConnReuse shows Linux 5.9's two IPVS changes (reference row 41, proxy
// change "ipvs-conn-reuse-unconfirmed-conntrack") as flows that differ between 5.4 and
// a current kernel, with kube-proxy's vs/conntrack=1: a client reusing the source port
// of a TIME_WAIT entry under conn_reuse_mode=1 waits for its SYN's retransmission (one
// second) before 5.9 and is rescheduled at once from 5.9; under conn_reuse_mode=0 the
// port sticks to the old server on both, and when that server is deleted
// (expire_nodest_conn=1) the SYN is dropped before 5.9 and rescheduled from 5.9; a
// deleted server's entries are flushed one jiffy later only from 5.9.
func TestKernel59ConnReuse(t *testing.T) {
	closedB := "conn tcp " + ctClient + " " + vip + " close" // rr: B, TIME_WAIT
	conn := "conn tcp " + ctClient + " " + vip
	removeB := "-d -t " + vip + " -r 10.1.0.2:80"
	cases := []struct {
		name          string
		setup         []string
		old, oldRetry string // Linux 5.4: the line's outcome, then (when dropped) the retransmission's a second later
		cur           string // a current kernel
	}{
		{"conn_reuse_mode=1, TIME_WAIT", []string{closedB}, "drop(ct)", "A new", "A new"},
		{"conn_reuse_mode=1, TIME_WAIT, vs/conntrack=0", []string{"sysctl conntrack=0", closedB}, "A new", "", "A new"},
		{"conn_reuse_mode=0, TIME_WAIT: the old server", []string{"sysctl conn_reuse_mode=0", closedB}, "B existing", "", "B existing"},
		{"conn_reuse_mode=0, TIME_WAIT, old server deleted", []string{"sysctl conn_reuse_mode=0", "sysctl expire_nodest_conn=1", closedB, removeB},
			"drop(ct)", "A new", "A new"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			setup := append(append(svcLines("rr", "A", "B"), "sysctl conntrack=1"), c.setup...)
			old := newTM(t, Config{Kernel: netfilter.KernelVersion{Major: 5, Minor: 4}}, setup...)
			eq(t, "Linux 5.4", outcome(old.result(conn)), c.old)
			if c.oldRetry != "" {
				old.advance(time.Second)
				eq(t, "Linux 5.4, the SYN's retransmission", outcome(old.result(conn)), c.oldRetry)
			}
			cur := newTM(t, Config{}, setup...)
			eq(t, "current kernel", outcome(cur.result(conn)), c.cur)
		})
	}
	t.Run("a deleted server's entries are flushed from 5.9 only", func(t *testing.T) {
		setup := append(svcLines("rr", "A", "B"), "sysctl conntrack=1", "sysctl expire_nodest_conn=1", conn, removeB)
		old := newTM(t, Config{Kernel: netfilter.KernelVersion{Major: 5, Minor: 4}}, setup...)
		cur := newTM(t, Config{}, setup...)
		old.advance(time.Second)
		cur.advance(time.Second)
		eq(t, "Linux 5.4", old.stateOf(netfilter.ProtoTCP, ctClient, vip), "ESTABLISHED 14m59s")
		eq(t, "current kernel", cur.stateOf(netfilter.ProtoTCP, ctClient, vip), "gone")
		ack := "packet tcp " + ctClient + " " + vip + " flags=ACK"
		eq(t, "Linux 5.4, the next ACK", outcome(old.result(ack)), "drop")
		eq(t, "Linux 5.4, the entry after it", old.stateOf(netfilter.ProtoTCP, ctClient, vip), "gone")
		eq(t, "current kernel, the next ACK", outcome(cur.result(ack)), "accept")
	})
}

// TestKernel59WeightZero: before 5.9 a SYN on the entry of a weight-0 (terminating) real
// server is rescheduled under expire_nodest_conn=1 only with a non-zero
// conn_reuse_mode, so with kube-proxy's conn_reuse_mode=0 a reused port sticks to the
// terminating server (kubernetes#81775).
func TestKernel59WeightZero(t *testing.T) {
	setup := append(svcLines("rr", "A", "B"), "sysctl conntrack=1", "sysctl expire_nodest_conn=1", "sysctl conn_reuse_mode=0",
		"conn tcp "+ctClient+" "+vip, "-e -t "+vip+" -r 10.1.0.2:80 -m -w 0")
	syn := "packet tcp " + ctClient + " " + vip + " flags=SYN"
	old := newTM(t, Config{Kernel: netfilter.KernelVersion{Major: 5, Minor: 4}}, setup...)
	eq(t, "Linux 5.4", outcome(old.result(syn)), "B existing")
	cur := newTM(t, Config{}, setup...)
	eq(t, "current kernel", outcome(cur.result(syn)), "A new")
}
