package service

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/clusterlab/clusterlab/alloc"
	corev1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"
)

// checkAllocations asserts that no two live services share a cluster IP or a
// node port (a port number may appear in several ports of one service), and
// that the allocators hold exactly what the services use.
func checkAllocations(t *rapid.T, s *Store) {
	ipOwner := map[netip.Addr]string{}
	portOwner := map[int]string{}
	for _, svc := range s.ListServices() {
		key := ObjectKey(svc)
		if svc.Spec.Type != corev1.ServiceTypeExternalName && !IsHeadless(svc) {
			if len(svc.Spec.ClusterIPs) == 0 || svc.Spec.ClusterIPs[0] != svc.Spec.ClusterIP {
				t.Fatalf("%s: clusterIP %q clusterIPs %v", key, svc.Spec.ClusterIP, svc.Spec.ClusterIPs)
			}
		}
		if svc.Spec.Type == corev1.ServiceTypeExternalName && len(svc.Spec.ClusterIPs) > 0 {
			t.Fatalf("%s: ExternalName with IPs %v", key, svc.Spec.ClusterIPs)
		}
		for _, ip := range svc.Spec.ClusterIPs {
			if ip == corev1.ClusterIPNone {
				continue
			}
			a := netip.MustParseAddr(ip)
			if o, dup := ipOwner[a]; dup {
				t.Fatalf("cluster IP %s used by %s and %s", a, o, key)
			}
			ipOwner[a] = key
		}
		mine := map[int]bool{}
		for _, p := range svc.Spec.Ports {
			if p.NodePort != 0 {
				mine[int(p.NodePort)] = true
			}
		}
		if svc.Spec.HealthCheckNodePort != 0 {
			if mine[int(svc.Spec.HealthCheckNodePort)] {
				t.Fatalf("%s: healthCheckNodePort %d is also a nodePort", key, svc.Spec.HealthCheckNodePort)
			}
			mine[int(svc.Spec.HealthCheckNodePort)] = true
		}
		for p := range mine {
			if o, dup := portOwner[p]; dup {
				t.Fatalf("node port %d used by %s and %s", p, o, key)
			}
			portOwner[p] = key
		}
	}
	for _, a := range s.Allocators().ClusterIPs {
		a.ForEach(func(ip netip.Addr) {
			if _, ok := ipOwner[ip]; !ok {
				t.Fatalf("leaked cluster IP %s", ip)
			}
		})
	}
	for ip := range ipOwner {
		if a := s.Allocators().ForIP(ip); a == nil || !a.Has(ip) {
			t.Fatalf("cluster IP %s of %s not marked in the allocator", ip, ipOwner[ip])
		}
	}
	s.Allocators().NodePorts.ForEach(func(p int) {
		if _, ok := portOwner[p]; !ok {
			t.Fatalf("leaked node port %d", p)
		}
	})
	for p := range portOwner {
		if !s.Allocators().NodePorts.Has(p) {
			t.Fatalf("node port %d of %s not marked in the allocator", p, portOwner[p])
		}
	}
	// The allocator package's own repair pass agrees.
	if report := alloc.NewRepairer(s.Allocators()).Check(s.ListServices()); !report.OK() {
		t.Fatalf("repair check: %v", report)
	}
}

// Across any sequence of creates, updates and deletes (some failing), no two
// live services share a cluster IP or a node port, nothing leaks, and a
// failed request leaves the allocators as they were.
func TestPropAllocationsStayConsistent(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := rapid.SampledFrom([]Config{
			{},
			dualCfg,
			{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/28")}, NodePortRange: alloc.PortRange{Base: 30000, Size: 20}},
		}).Draw(t, "cfg")
		cfg.Seed = rapid.Uint64().Draw(t, "seed")
		s, err := NewStore(cfg)
		if err != nil {
			t.Fatal(err)
		}
		steps := rapid.IntRange(1, 25).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			before := allocState(s)
			var err error
			op := rapid.SampledFrom([]string{"create", "create", "update", "delete"}).Draw(t, "op")
			switch op {
			case "create":
				svc := genService(t, svcShape{requests: true})
				if rapid.IntRange(0, 5).Draw(t, "dualStack") == 0 {
					p := corev1.IPFamilyPolicyPreferDualStack
					svc.Spec.IPFamilyPolicy = &p
				}
				_, err = s.Create(svc)
			case "update":
				svcs := s.ListServices()
				if len(svcs) == 0 {
					continue
				}
				old := rapid.SampledFrom(svcs).Draw(t, "target")
				next := genService(t, svcShape{requests: true})
				next.Namespace, next.Name = old.Namespace, old.Name
				if rapid.Bool().Draw(t, "keepIPs") && next.Spec.Type != corev1.ServiceTypeExternalName && !IsHeadless(next) {
					next.Spec.ClusterIP, next.Spec.ClusterIPs = old.Spec.ClusterIP, old.Spec.ClusterIPs
					next.Spec.IPFamilies, next.Spec.IPFamilyPolicy = old.Spec.IPFamilies, old.Spec.IPFamilyPolicy
				}
				_, err = s.Update(next)
			case "delete":
				svcs := s.ListServices()
				if len(svcs) == 0 {
					continue
				}
				old := rapid.SampledFrom(svcs).Draw(t, "target")
				err = s.Delete(KindService, old.Namespace, old.Name)
			}
			if err != nil {
				t.Logf("%s: %v", op, err)
				if after := allocState(s); after != before {
					t.Fatalf("failed %s changed the allocators:\nbefore %s\nafter  %s", op, before, after)
				}
			}
			checkAllocations(t, s)
		}
	})
}

// A service whose creation fails for any reason leaves nothing allocated
// and nothing stored.
func TestPropFailedCreateLeavesNothing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, err := NewStore(Config{Seed: rapid.Uint64().Draw(t, "seed")})
		if err != nil {
			t.Fatal(err)
		}
		// Some existing services to collide with.
		for i := 0; i < 3; i++ {
			svc := genService(t, svcShape{requests: true})
			svc.Name = fmt.Sprintf("existing-%d", i)
			_, _ = s.Create(svc)
		}
		before := allocState(s)
		n := len(s.ListServices())
		svc := genService(t, svcShape{requests: true})
		if b := rapid.SampledFrom(breakers).Draw(t, "breaker"); rapid.Bool().Draw(t, "break") {
			b.apply(t, svc)
		} else if existing := s.ListServices(); len(existing) > 0 {
			// Collide on an allocated value instead: a cluster IP, or a node
			// port (after the cluster IP has been allocated, so that the
			// rollback has something to undo).
			victim := rapid.SampledFrom(existing).Draw(t, "victim")
			var taken []int32
			for _, p := range victim.Spec.Ports {
				if p.NodePort != 0 {
					taken = append(taken, p.NodePort)
				}
			}
			if victim.Spec.HealthCheckNodePort != 0 {
				taken = append(taken, victim.Spec.HealthCheckNodePort)
			}
			switch {
			case len(taken) > 0 && len(svc.Spec.Ports) > 0 &&
				(svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer) && rapid.Bool().Draw(t, "portCollision"):
				i := rapid.IntRange(0, len(svc.Spec.Ports)-1).Draw(t, "port")
				svc.Spec.Ports[i].NodePort = rapid.SampledFrom(taken).Draw(t, "takenPort")
			case HasClusterIP(victim) && HasClusterIP(svc):
				svc.Spec.ClusterIP, svc.Spec.ClusterIPs = victim.Spec.ClusterIP, []string{victim.Spec.ClusterIP}
			}
		}
		if _, err := s.Create(svc); err == nil {
			t.Skip("the request was valid")
		}
		if after := allocState(s); after != before || len(s.ListServices()) != n {
			t.Fatalf("failed create left traces:\nbefore %s\nafter  %s", before, after)
		}
		checkAllocations(t, s)
	})
}
