package emulator

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// TestInterface programs the model the way kube-proxy's IPVS mode does.
func TestInterface(t *testing.T) {
	var iface ipvs.Interface = MustNew(Config{})
	vs := &ipvs.VirtualServer{Address: netip.MustParseAddr("10.96.0.10"), Protocol: "TCP", Port: 80, Scheduler: "rr",
		Flags: ipvs.FlagPersistent | ipvs.FlagHashed, Timeout: 10800}
	if err := iface.AddVirtualServer(vs); err != nil {
		t.Fatal(err)
	}
	if err := iface.AddVirtualServer(vs); !ipvs.IsExist(err) {
		t.Errorf("second add: %v, want ErrExist", err)
	}
	got, err := iface.GetVirtualServer(&ipvs.VirtualServer{Address: netip.MustParseAddr("10.96.0.10"), Protocol: "tcp", Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	want := &ipvs.VirtualServer{Address: netip.MustParseAddr("10.96.0.10"), Protocol: "TCP", Port: 80, Scheduler: "rr",
		Flags: ipvs.FlagPersistent, Timeout: 10800, Netmask: 32}
	if *got != *want {
		t.Errorf("GetVirtualServer = %+v, want %+v", *got, *want)
	}
	for _, ep := range []string{"10.244.1.5", "10.244.2.5", "10.244.3.5"} {
		if err := iface.AddRealServer(vs, &ipvs.RealServer{Address: netip.MustParseAddr(ep), Port: 8080, Weight: 1}); err != nil {
			t.Fatal(err)
		}
	}
	rss, err := iface.GetRealServers(vs)
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
	if err := iface.UpdateRealServer(vs, &ipvs.RealServer{Address: netip.MustParseAddr("10.244.2.5"), Port: 8080, Weight: 0}); err != nil {
		t.Fatal(err)
	}
	if err := iface.DeleteRealServer(vs, &ipvs.RealServer{Address: netip.MustParseAddr("10.244.2.5"), Port: 8080}); err != nil {
		t.Fatal(err)
	}
	if err := iface.DeleteRealServer(vs, &ipvs.RealServer{Address: netip.MustParseAddr("10.244.2.5"), Port: 8080}); !ipvs.IsNotFound(err) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
	if err := iface.UpdateRealServer(vs, &ipvs.RealServer{Address: netip.MustParseAddr("10.244.9.9"), Port: 8080, Weight: 1}); !ipvs.IsNotFound(err) {
		t.Errorf("update of a missing real server: %v", err)
	}
	if err := iface.AddRealServer(vs, &ipvs.RealServer{Address: netip.MustParseAddr("10.244.9.9"), Port: 8080, Weight: -1}); err == nil {
		t.Error("negative weight accepted")
	}
	// fwmark services, IPv6 through an unspecified address
	fw := &ipvs.VirtualServer{FWMark: 7, Address: netip.IPv6Unspecified(), Scheduler: "mh", Flags: ipvs.FlagSchedSH2}
	if err := iface.AddVirtualServer(fw); err != nil {
		t.Fatal(err)
	}
	if err := iface.AddRealServer(fw, &ipvs.RealServer{Address: netip.MustParseAddr("fd00::1"), Port: 0, Weight: 1, Forward: ipvs.DirectRoute}); err != nil {
		t.Fatal(err)
	}
	if err := iface.AddRealServer(fw, &ipvs.RealServer{Address: netip.MustParseAddr("10.0.0.1"), Port: 0, Weight: 1}); err == nil {
		t.Error("IPv4 masqueraded real server in an IPv6 service accepted")
	}
	all, err := iface.GetVirtualServers()
	if err != nil || len(all) != 2 || all[0].Port != 80 || all[1].FWMark != 7 || !all[1].Address.Is6() {
		t.Errorf("GetVirtualServers = %+v, %v", all, err)
	}
	all[0].Scheduler = "changed"
	if again, _ := iface.GetVirtualServer(vs); again.Scheduler != "rr" {
		t.Error("GetVirtualServers returned a shared value")
	}
	// scheduler change through Update
	vs2 := *vs
	vs2.Scheduler = "wlc"
	if err := iface.UpdateVirtualServer(&vs2); err != nil {
		t.Fatal(err)
	}
	if got, _ := iface.GetVirtualServer(vs); got.Scheduler != "wlc" {
		t.Errorf("scheduler after update: %s", got.Scheduler)
	}
	if err := iface.UpdateVirtualServer(&ipvs.VirtualServer{Address: netip.MustParseAddr("10.9.9.9"), Protocol: "TCP", Port: 1, Scheduler: "rr"}); !ipvs.IsNotFound(err) {
		t.Errorf("update of a missing service: %v", err)
	}
	if err := iface.AddVirtualServer(&ipvs.VirtualServer{Address: netip.MustParseAddr("10.9.9.9"), Protocol: "TCP", Port: 1, Scheduler: "nope"}); !ipvs.IsNotFound(err) {
		t.Errorf("unknown scheduler: %v", err)
	}
	if err := iface.AddVirtualServer(&ipvs.VirtualServer{Address: netip.MustParseAddr("10.9.9.9"), Protocol: "ICMP", Port: 1, Scheduler: "rr"}); err == nil {
		t.Error("ICMP service accepted")
	}
	if err := iface.ConfigureTimeouts(time.Hour, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := iface.ConfigureTimeouts(-1, 0, 0); err == nil {
		t.Error("negative timeout accepted")
	}
	if err := iface.DeleteVirtualServer(fw); err != nil {
		t.Fatal(err)
	}
	if err := iface.Flush(); err != nil {
		t.Fatal(err)
	}
	if all, _ := iface.GetVirtualServers(); len(all) != 0 {
		t.Errorf("after Flush: %v", all)
	}
}
