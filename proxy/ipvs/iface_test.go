package ipvs

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestInterface programs the model the way kube-proxy's IPVS mode does.
func TestInterface(t *testing.T) {
	var ipvs Interface = MustNew(Config{})
	vs := &VirtualServer{Address: netip.MustParseAddr("10.96.0.10"), Protocol: "TCP", Port: 80, Scheduler: "rr",
		Flags: FlagPersistent | FlagHashed, Timeout: 10800}
	if err := ipvs.AddVirtualServer(vs); err != nil {
		t.Fatal(err)
	}
	if err := ipvs.AddVirtualServer(vs); !IsExist(err) {
		t.Errorf("second add: %v, want ErrExist", err)
	}
	got, err := ipvs.GetVirtualServer(&VirtualServer{Address: netip.MustParseAddr("10.96.0.10"), Protocol: "tcp", Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	want := &VirtualServer{Address: netip.MustParseAddr("10.96.0.10"), Protocol: "TCP", Port: 80, Scheduler: "rr",
		Flags: FlagPersistent, Timeout: 10800, Netmask: 32}
	if *got != *want {
		t.Errorf("GetVirtualServer = %+v, want %+v", *got, *want)
	}
	for _, ep := range []string{"10.244.1.5", "10.244.2.5", "10.244.3.5"} {
		if err := ipvs.AddRealServer(vs, &RealServer{Address: netip.MustParseAddr(ep), Port: 8080, Weight: 1}); err != nil {
			t.Fatal(err)
		}
	}
	rss, err := ipvs.GetRealServers(vs)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, rs := range rss {
		order = append(order, rs.Address.String())
	}
	if d := cmp.Diff([]string{"10.244.3.5", "10.244.2.5", "10.244.1.5"}, order); d != "" {
		t.Errorf("real servers come in kernel list order (-want +got):\n%s", d)
	}
	// graceful termination: weight 0, then delete
	if err := ipvs.UpdateRealServer(vs, &RealServer{Address: netip.MustParseAddr("10.244.2.5"), Port: 8080, Weight: 0}); err != nil {
		t.Fatal(err)
	}
	if err := ipvs.DeleteRealServer(vs, &RealServer{Address: netip.MustParseAddr("10.244.2.5"), Port: 8080}); err != nil {
		t.Fatal(err)
	}
	if err := ipvs.DeleteRealServer(vs, &RealServer{Address: netip.MustParseAddr("10.244.2.5"), Port: 8080}); !IsNotFound(err) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
	if err := ipvs.UpdateRealServer(vs, &RealServer{Address: netip.MustParseAddr("10.244.9.9"), Port: 8080, Weight: 1}); !IsNotFound(err) {
		t.Errorf("update of a missing real server: %v", err)
	}
	if err := ipvs.AddRealServer(vs, &RealServer{Address: netip.MustParseAddr("10.244.9.9"), Port: 8080, Weight: -1}); err == nil {
		t.Error("negative weight accepted")
	}
	// fwmark services, IPv6 through an unspecified address
	fw := &VirtualServer{FWMark: 7, Address: netip.IPv6Unspecified(), Scheduler: "mh", Flags: FlagSchedSH2}
	if err := ipvs.AddVirtualServer(fw); err != nil {
		t.Fatal(err)
	}
	if err := ipvs.AddRealServer(fw, &RealServer{Address: netip.MustParseAddr("fd00::1"), Port: 0, Weight: 1, Forward: DirectRoute}); err != nil {
		t.Fatal(err)
	}
	if err := ipvs.AddRealServer(fw, &RealServer{Address: netip.MustParseAddr("10.0.0.1"), Port: 0, Weight: 1}); err == nil {
		t.Error("IPv4 masqueraded real server in an IPv6 service accepted")
	}
	all, err := ipvs.GetVirtualServers()
	if err != nil || len(all) != 2 || all[0].Port != 80 || all[1].FWMark != 7 || !all[1].Address.Is6() {
		t.Errorf("GetVirtualServers = %+v, %v", all, err)
	}
	all[0].Scheduler = "changed"
	if again, _ := ipvs.GetVirtualServer(vs); again.Scheduler != "rr" {
		t.Error("GetVirtualServers returned a shared value")
	}
	// scheduler change through Update
	vs2 := *vs
	vs2.Scheduler = "wlc"
	if err := ipvs.UpdateVirtualServer(&vs2); err != nil {
		t.Fatal(err)
	}
	if got, _ := ipvs.GetVirtualServer(vs); got.Scheduler != "wlc" {
		t.Errorf("scheduler after update: %s", got.Scheduler)
	}
	if err := ipvs.UpdateVirtualServer(&VirtualServer{Address: netip.MustParseAddr("10.9.9.9"), Protocol: "TCP", Port: 1, Scheduler: "rr"}); !IsNotFound(err) {
		t.Errorf("update of a missing service: %v", err)
	}
	if err := ipvs.AddVirtualServer(&VirtualServer{Address: netip.MustParseAddr("10.9.9.9"), Protocol: "TCP", Port: 1, Scheduler: "nope"}); !IsNotFound(err) {
		t.Errorf("unknown scheduler: %v", err)
	}
	if err := ipvs.AddVirtualServer(&VirtualServer{Address: netip.MustParseAddr("10.9.9.9"), Protocol: "ICMP", Port: 1, Scheduler: "rr"}); err == nil {
		t.Error("ICMP service accepted")
	}
	if err := ipvs.ConfigureTimeouts(time.Hour, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := ipvs.ConfigureTimeouts(-1, 0, 0); err == nil {
		t.Error("negative timeout accepted")
	}
	if err := ipvs.DeleteVirtualServer(fw); err != nil {
		t.Fatal(err)
	}
	if err := ipvs.Flush(); err != nil {
		t.Fatal(err)
	}
	if all, _ := ipvs.GetVirtualServers(); len(all) != 0 {
		t.Errorf("after Flush: %v", all)
	}
}
