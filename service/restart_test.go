package service

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/alloc"
)

// TestRestartAPIServer: a restart with the same ranges changes nothing; with a new
// --service-cluster-ip-range and --service-node-port-range the startup repair pass
// rebuilds the allocators from the stored Services: Services outside the new ranges
// keep their values and are reported (OutOfRange, "please recreate"), values in use
// inside the new ranges are marked so new Services never get them, and new Services
// get values from the new ranges. A restart that would change the IP families is an
// error and changes nothing.
func TestRestartAPIServer(t *testing.T) {
	s := newStore(t, Config{Seed: 1, ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/24")}, NodePortRange: alloc.PortRange{Base: 30000, Size: 100}})
	oldSvc := NewService("default/old", Port("http", 80, 8080), ClusterIP("10.96.0.10"), NodePort())
	oldSvc.Spec.Ports[0].NodePort = 30010
	mustService(t, s, oldSvc)
	keptSvc := NewService("default/kept", Port("http", 80, 8080), ClusterIP("10.96.0.200"), NodePort())
	keptSvc.Spec.Ports[0].NodePort = 30060
	kept := mustService(t, s, keptSvc)

	if rep, err := s.RestartAPIServer(nil, alloc.PortRange{}); err != nil || !rep.OK() {
		t.Fatalf("restart as before: %v %v", rep, err)
	}
	if !s.Allocators().ClusterIPs[0].Has(netip.MustParseAddr("10.96.0.10")) {
		t.Fatal("the allocation did not survive a restart with the same range")
	}

	newCIDR := netip.MustParsePrefix("10.96.0.128/25") // keeps 10.96.0.200, not 10.96.0.10
	rep, err := s.RestartAPIServer([]netip.Prefix{newCIDR}, alloc.PortRange{Base: 30050, Size: 100})
	if err != nil {
		t.Fatal(err)
	}
	text := rep.String()
	for _, want := range []string{
		"the ClusterIP 10.96.0.10 for service default/old is not within the service CIDR 10.96.0.128/25; please recreate",
		"the node port 30010 for service default/old is not within the port range 30050-30149; please recreate",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("repair report:\n%swant %q", text, want)
		}
	}
	if strings.Contains(text, "default/kept") {
		t.Errorf("default/kept fits the new range, yet:\n%s", text)
	}
	if cfg := s.Config(); cfg.ServiceCIDRs[0] != newCIDR || cfg.NodePortRange.Base != 30050 {
		t.Errorf("config after the restart: %v %v", cfg.ServiceCIDRs, cfg.NodePortRange)
	}
	a := s.Allocators().ClusterIPs[0]
	if !a.Has(netip.MustParseAddr(kept.Spec.ClusterIP)) {
		t.Error("the kept Service's IP is not marked in the new allocator")
	}
	if got, _ := s.GetService("default", "old"); got.Spec.ClusterIP != "10.96.0.10" {
		t.Errorf("default/old's clusterIP %s, want it kept", got.Spec.ClusterIP)
	}
	// New Services get values from the new ranges, never one in use.
	for i := 0; i < 20; i++ {
		svc := mustService(t, s, NewService("default/new-"+string(rune('a'+i)), Port("http", 80, 8080), NodePort()))
		ip := netip.MustParseAddr(svc.Spec.ClusterIP)
		if !newCIDR.Contains(ip) || ip == netip.MustParseAddr(kept.Spec.ClusterIP) {
			t.Errorf("new service got %s", ip)
		}
		if p := svc.Spec.Ports[0].NodePort; p < 30050 || p >= 30150 || p == 30060 {
			t.Errorf("new service got node port %d", p)
		}
	}
	// An explicit request for a value outside the new range is refused as by the API server.
	if _, err := s.Create(NewService("default/outside", Port("http", 80, 8080), ClusterIP("10.96.0.11"))); err == nil || !strings.Contains(err.Error(), "range") {
		t.Errorf("clusterIP outside the new range: %v", err)
	}

	before := s.Config()
	if _, err := s.RestartAPIServer([]netip.Prefix{netip.MustParsePrefix("fd00::/112")}, alloc.PortRange{}); err == nil || !strings.Contains(err.Error(), "cannot change the service IP families") {
		t.Errorf("family change: %v", err)
	}
	if after := s.Config(); after.ServiceCIDRs[0] != before.ServiceCIDRs[0] {
		t.Error("a refused restart changed the configuration")
	}
}
