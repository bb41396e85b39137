package kernel

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/clusterlab/clusterlab/internal/vmtest"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
	"github.com/clusterlab/clusterlab/proxy/ipvs/emulator"
)

// TestIPVSAdapterVM exercises the IPVS adapter on a real IPVS (the host kernel has none):
// in a VM booting Debian's kernel (package internal/vmtest), a sequence of
// ipvs.Interface calls creates, edits, lists and deletes virtual servers and real
// servers, repeats some (an apply done twice is refused, not doubled) and asks for what
// is not there; the kernel's answer to each call (its error, as the ipvs package's errno
// class) and its listing afterwards must be the model's (package
// proxy/ipvs/emulator), and nothing is left behind.
func TestIPVSAdapterVM(t *testing.T) {
	k := vmtest.Require(t)
	calls := adapterCalls()
	plan := vmtest.Plan{Cases: []vmtest.Case{{Name: "adapter", Kind: vmtest.KindIPVSCalls, Calls: calls}}}
	b, err := vmtest.Run(context.Background(), k, plan, vmtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel %s, boot %v", b.Booted.Release, b.Elapsed.Round(1e8))
	if b.Retried != "" {
		t.Logf("booted twice: the first kernel died before the agent ran:\n%s", b.Retried)
	}
	model, err := emulator.New(emulator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	got := b.CaseResults("adapter")
	if len(got) != len(calls)+1 {
		t.Fatalf("%d results for %d calls (a call stopped the agent?): %+v", len(got), len(calls), got)
	}
	for i, c := range calls {
		r := got[i]
		werr := c.Do(model)
		if want := vmtest.ErrClass(werr); r.ErrClass != want {
			t.Errorf("call %d %s: kernel error %q (%s), model %q (%v)", i, c, r.ErrClass, r.Err, want, werr)
		}
		want, err := vmtest.Listing(model)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(comparable(want), comparable(r.Listing)); d != "" {
			t.Errorf("after call %d %s, listing (-model +kernel):\n%s", i, c, d)
		}
	}
	done := got[len(got)-1]
	if !done.Done || done.Fatal != "" || len(done.Leftover) > 0 {
		t.Errorf("case end: fatal %q, left behind %q", done.Fatal, done.Leftover)
	}
}

// comparable drops what only one side reports: moby/ipvs does not read the kernel's
// persistent-connection count, so the adapter's PersistConn is always 0.
func comparable(l []vmtest.Service) []vmtest.Service {
	out := []vmtest.Service{}
	for _, s := range l {
		s.Destinations = append([]vmtest.RealServer{}, s.Destinations...)
		for i := range s.Destinations {
			s.Destinations[i].PersistConn = 0
		}
		out = append(out, s)
	}
	return out
}

func adapterCalls() []vmtest.Call {
	tcp := &vmtest.VirtualServer{Address: "10.96.0.10", Protocol: "TCP", Port: 80, Scheduler: "rr"}
	tcpWRR := &vmtest.VirtualServer{Address: "10.96.0.10", Protocol: "TCP", Port: 80, Scheduler: "wrr",
		Flags: uint32(ipvs.FlagPersistent), Timeout: 300, Netmask: 32}
	udp := &vmtest.VirtualServer{Address: "10.96.0.10", Protocol: "UDP", Port: 53, Scheduler: "sh",
		Flags: uint32(ipvs.FlagPersistent | ipvs.FlagSchedSH1 | ipvs.FlagSchedSH2), Timeout: 10800, Netmask: 24}
	fwm := &vmtest.VirtualServer{FWMark: 7, Scheduler: "lblc"}
	v6 := &vmtest.VirtualServer{Address: "fd00::10", Protocol: "TCP", Port: 443, Scheduler: "mh", Flags: uint32(ipvs.FlagSchedSH2)}
	sctp := &vmtest.VirtualServer{Address: "10.96.0.11", Protocol: "SCTP", Port: 9, Scheduler: "lc"}
	missing := &vmtest.VirtualServer{Address: "10.96.0.99", Protocol: "TCP", Port: 80, Scheduler: "rr"}
	rs := func(a string, port uint16, w int) *vmtest.RealServer {
		return &vmtest.RealServer{Address: a, Port: port, Weight: w}
	}
	call := func(m string, vs *vmtest.VirtualServer, r *vmtest.RealServer) vmtest.Call {
		return vmtest.Call{Method: m, VS: vs, RS: r}
	}
	thresholds := rs("10.244.0.3", 8080, 2)
	thresholds.UpperThreshold, thresholds.LowerThreshold = 10, 5
	badThresholds := rs("10.244.0.5", 8080, 1)
	badThresholds.UpperThreshold, badThresholds.LowerThreshold = 3, 5
	dr := rs("10.244.0.4", 80, 1)
	dr.Forward = uint32(ipvs.DirectRoute)
	return []vmtest.Call{
		call("AddVirtualServer", tcp, nil),
		call("AddVirtualServer", tcp, nil), // applied twice: refused, one service
		call("AddVirtualServer", udp, nil),
		call("AddVirtualServer", fwm, nil),
		call("AddVirtualServer", v6, nil),
		call("AddVirtualServer", sctp, nil),
		call("AddVirtualServer", &vmtest.VirtualServer{Address: "10.96.0.12", Protocol: "TCP", Port: 80, Scheduler: "nope"}, nil),
		call("UpdateVirtualServer", tcpWRR, nil),
		call("UpdateVirtualServer", tcpWRR, nil), // the same edit again changes nothing
		call("UpdateVirtualServer", missing, nil),
		call("GetVirtualServer", missing, nil),
		call("GetVirtualServer", udp, nil),
		call("AddRealServer", tcpWRR, rs("10.244.0.2", 8080, 1)),
		call("AddRealServer", tcpWRR, thresholds),
		call("AddRealServer", tcpWRR, rs("10.244.0.2", 8080, 1)), // twice: refused
		call("AddRealServer", tcpWRR, rs("10.244.0.6", 8080, -1)),
		call("AddRealServer", tcpWRR, badThresholds),
		call("AddRealServer", missing, rs("10.244.0.2", 8080, 1)),
		call("AddRealServer", udp, rs("10.244.0.7", 5353, 3)),
		call("AddRealServer", fwm, dr),
		call("AddRealServer", v6, rs("fd00:244::2", 8443, 1)),
		call("AddRealServer", sctp, rs("10.244.0.8", 9, 1)),
		call("UpdateRealServer", tcpWRR, rs("10.244.0.2", 8080, 0)), // graceful termination
		call("UpdateRealServer", tcpWRR, rs("10.244.0.9", 8080, 1)),
		call("DeleteRealServer", tcpWRR, thresholds),
		call("DeleteRealServer", tcpWRR, thresholds),
		call("DeleteRealServer", missing, thresholds),
		{Method: "ConfigureTimeouts", Times: &vmtest.TimeoutsConfig{TCP: 900, TCPFin: 120, UDP: 300}},
		call("DeleteVirtualServer", udp, nil),
		call("DeleteVirtualServer", udp, nil),
		call("DeleteVirtualServer", fwm, nil),
		call("Flush", nil, nil),
		call("DeleteVirtualServer", tcpWRR, nil),
		call("Flush", nil, nil),
	}
}
