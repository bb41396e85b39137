package alloc

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"
)

// tb is what helpers need of *testing.T and *rapid.T alike.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func newAllocs(t tb, ports string, cidrs ...string) *Allocators {
	t.Helper()
	var ps []netip.Prefix
	for _, c := range cidrs {
		ps = append(ps, netip.MustParsePrefix(c))
	}
	pr, err := ParsePortRange(ports)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAllocators(ps, pr, rand.New(rand.NewPCG(5, 6)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// state renders every allocator's held values, for comparisons.
func state(a *Allocators) []string {
	var out []string
	for _, ipa := range a.ClusterIPs {
		ipa.ForEach(func(ip netip.Addr) { out = append(out, ip.String()) })
	}
	if a.NodePorts != nil {
		a.NodePorts.ForEach(func(p int) { out = append(out, itoa(p)) })
	}
	return out
}

func itoa(p int) string { return strconv.Itoa(p) }

// mustAddr parses an IP literal of a test table.
var mustAddr = netip.MustParseAddr

func TestTxCreateCommitAndRevert(t *testing.T) {
	a := newAllocs(t, "30000-30100", "10.96.0.0/24", "fd00::/120")
	// Something held before, which no transaction may disturb.
	if err := a.ClusterIPs[0].Allocate(mustAddr("10.96.0.1")); err != nil {
		t.Fatal(err)
	}
	if err := a.NodePorts.Allocate(30080); err != nil {
		t.Fatal(err)
	}
	before := state(a)

	// A dual-stack NodePort service whose second port asks for a taken
	// node port: the whole creation fails and leaves nothing behind.
	tx := a.Begin()
	v4, err := tx.AllocateNextIP(corev1.IPv4Protocol)
	if err != nil || !a.ClusterIPs[0].Has(v4) {
		t.Fatalf("AllocateNextIP(IPv4) = %s, %v", v4, err)
	}
	if err := tx.AllocateIP(mustAddr("fd00::10")); err != nil {
		t.Fatalf("AllocateIP(fd00::10): %v", err)
	}
	p1, err := tx.AllocateNextPort()
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.AllocatePort(30080); err != ErrPortAllocated {
		t.Fatalf("AllocatePort(30080) = %v, want ErrPortAllocated", err)
	}
	if got := tx.AllocatedIPs(); !slices.Equal(got, []netip.Addr{v4, mustAddr("fd00::10")}) {
		t.Errorf("AllocatedIPs() = %v", got)
	}
	if got := tx.AllocatedPorts(); !slices.Equal(got, []int{p1}) {
		t.Errorf("AllocatedPorts() = %v", got)
	}
	tx.Revert()
	if got := state(a); !slices.Equal(got, before) {
		t.Fatalf("after Revert: %v, want %v", got, before)
	}
	tx.Revert() // idempotent

	// The same creation with a free port commits.
	tx = a.Begin()
	defer tx.Revert()
	v4, _ = tx.AllocateNextIP(corev1.IPv4Protocol)
	v6, _ := tx.AllocateNextIP(corev1.IPv6Protocol)
	if err := tx.AllocatePort(30081); err != nil {
		t.Fatal(err)
	}
	tx.Commit()
	tx.Commit() // idempotent
	for _, ip := range []netip.Addr{v4, v6} {
		if a.ForIP(ip) == nil || !a.ForIP(ip).Has(ip) {
			t.Errorf("%s not held after Commit", ip)
		}
	}
	if !a.NodePorts.Has(30081) {
		t.Error("30081 not held after Commit")
	}
}

func TestTxDeferredRelease(t *testing.T) {
	a := newAllocs(t, "30000-30100", "10.96.0.0/24")
	for _, p := range []int{30010, 30011} {
		_ = a.NodePorts.Allocate(p)
	}
	_ = a.ClusterIPs[0].Allocate(mustAddr("10.96.0.50"))

	// An update moves a nodePort 30010 → 30020 and drops the service's IP
	// (type change to ExternalName).
	tx := a.Begin()
	tx.ReleasePort(30010)
	tx.ReleasePort(30010) // listed once
	tx.ReleaseIP(mustAddr("10.96.0.50"))
	if err := tx.AllocatePort(30020); err != nil {
		t.Fatal(err)
	}
	// Until Commit the released values stay held: a concurrent request
	// cannot take them.
	other := a.Begin()
	if err := other.AllocatePort(30010); err != ErrPortAllocated {
		t.Fatalf("concurrent AllocatePort(30010) = %v, want ErrPortAllocated", err)
	}
	if err := other.AllocateIP(mustAddr("10.96.0.50")); err != ErrIPAllocated {
		t.Fatalf("concurrent AllocateIP = %v, want ErrIPAllocated", err)
	}
	other.Revert()
	if got := tx.PendingPortReleases(); !slices.Equal(got, []int{30010}) {
		t.Errorf("PendingPortReleases() = %v", got)
	}
	if got := tx.PendingIPReleases(); !slices.Equal(got, []netip.Addr{mustAddr("10.96.0.50")}) {
		t.Errorf("PendingIPReleases() = %v", got)
	}
	tx.Commit()
	if got := state(a); !slices.Equal(got, []string{"30011", "30020"}) {
		t.Fatalf("after Commit: %v", got)
	}

	// The same update reverted: nothing released, the new port freed.
	_ = a.NodePorts.Allocate(30010)
	tx = a.Begin()
	tx.ReleasePort(30010)
	_ = tx.AllocatePort(30030)
	tx.Revert()
	if got := state(a); !slices.Equal(got, []string{"30010", "30011", "30020"}) {
		t.Fatalf("after Revert: %v", got)
	}
}

func TestTxReclaimPendingRelease(t *testing.T) {
	a := newAllocs(t, "30000-30100", "10.96.0.0/24")
	_ = a.NodePorts.Allocate(30053)
	_ = a.ClusterIPs[0].Allocate(mustAddr("10.96.0.10"))

	// An update that drops nodePort 30053 from one port and requests it
	// on another: the value stays with the service.
	for _, commit := range []bool{true, false} {
		tx := a.Begin()
		tx.ReleasePort(30053)
		if err := tx.AllocatePort(30053); err != nil {
			t.Fatalf("re-allocating a pending release: %v", err)
		}
		tx.ReleaseIP(mustAddr("10.96.0.10"))
		if err := tx.AllocateIP(mustAddr("10.96.0.10")); err != nil {
			t.Fatalf("re-allocating a pending IP release: %v", err)
		}
		if len(tx.PendingPortReleases()) != 0 || len(tx.AllocatedPorts()) != 0 {
			t.Fatalf("reclaim left pending %v allocated %v", tx.PendingPortReleases(), tx.AllocatedPorts())
		}
		if commit {
			tx.Commit()
		} else {
			tx.Revert()
		}
		if !a.NodePorts.Has(30053) || !a.ClusterIPs[0].Has(mustAddr("10.96.0.10")) {
			t.Fatalf("commit=%v: reclaimed values lost", commit)
		}
	}

	// A value this Tx allocated, released and re-requested is still this
	// Tx's: Revert frees it.
	tx := a.Begin()
	_ = tx.AllocatePort(30060)
	tx.ReleasePort(30060)
	if err := tx.AllocatePort(30060); err != nil {
		t.Fatal(err)
	}
	tx.Revert()
	if a.NodePorts.Has(30060) {
		t.Fatal("Revert kept a value the Tx allocated")
	}

	// A pending release of a value nobody holds (a leaked-out nodePort)
	// followed by a request for it: the Tx marks it and cancels the
	// release, so the service holds it after Commit.
	tx = a.Begin()
	tx.ReleasePort(30070)
	if err := tx.AllocatePort(30070); err != nil {
		t.Fatal(err)
	}
	if len(tx.PendingPortReleases()) != 0 || !slices.Equal(tx.AllocatedPorts(), []int{30070}) {
		t.Fatalf("pending %v allocated %v", tx.PendingPortReleases(), tx.AllocatedPorts())
	}
	tx.Commit()
	if !a.NodePorts.Has(30070) {
		t.Fatal("30070 should be held after Commit")
	}
}

func TestTxErrors(t *testing.T) {
	a := newAllocs(t, "30000-30001", "10.96.0.0/30")
	tx := a.Begin()
	_, err := tx.AllocateNextIP(corev1.IPv6Protocol)
	if err == nil || err.Error() != "IPv6 is not configured on this cluster" || !IsFamilyNotConfigured(err) {
		t.Errorf("AllocateNextIP(IPv6) = %v", err)
	}
	if err := tx.AllocateIP(mustAddr("fd00::1")); err == nil || err.Error() != "IPv6 is not configured on this cluster" {
		t.Errorf("AllocateIP(fd00::1) = %v", err)
	}
	if err := tx.AllocateIP(mustAddr("10.96.0.3")); err == nil || err.Error() != "the provided IP (10.96.0.3) is not in the valid range. The range of valid IPs is 10.96.0.0/30" {
		t.Errorf("AllocateIP(10.96.0.3) = %v", err)
	}
	if err := tx.AllocateIP(netip.Addr{}); err == nil || IsFamilyNotConfigured(err) {
		t.Errorf("AllocateIP(zero) = %v", err)
	}
	if err := tx.AllocatePort(80); err == nil || err.Error() != "provided port is not in the valid range. The range of valid ports is 30000-30001" {
		t.Errorf("AllocatePort(80) = %v", err)
	}
	for i := 0; i < 2; i++ {
		if _, err := tx.AllocateNextIP(corev1.IPv4Protocol); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.AllocateNextPort(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.AllocateNextIP(corev1.IPv4Protocol); err != ErrFull {
		t.Errorf("AllocateNextIP on full = %v", err)
	}
	if _, err := tx.AllocateNextPort(); err != ErrFull {
		t.Errorf("AllocateNextPort on full = %v", err)
	}
	tx.Revert()
	if got := state(a); len(got) != 0 {
		t.Errorf("after Revert: %v", got)
	}

	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	mustPanic("AllocatePort after Revert", func() { _ = tx.AllocatePort(30000) })
	mustPanic("Commit after Revert", tx.Commit)
	done := a.Begin()
	done.Commit()
	mustPanic("ReleaseIP after Commit", func() { done.ReleaseIP(mustAddr("10.96.0.1")) })
	done.Revert() // no-op after Commit
}

func TestNewAllocators(t *testing.T) {
	a := newAllocs(t, "30000-32767", "fd00::/108", "10.96.0.0/12")
	if a.PrimaryFamily() != corev1.IPv6Protocol || !a.DualStack() {
		t.Errorf("PrimaryFamily()=%s DualStack()=%v", a.PrimaryFamily(), a.DualStack())
	}
	if a.ForFamily(corev1.IPv4Protocol).CIDR().String() != "10.96.0.0/12" || a.ForIP(mustAddr("::ffff:10.96.0.1")) != a.ClusterIPs[1] {
		t.Error("ForFamily/ForIP wrong")
	}
	if a.NodePorts.Range() != DefaultNodePortRange {
		t.Errorf("node ports %v", a.NodePorts.Range())
	}
	for _, tc := range []struct {
		cidrs []netip.Prefix
		ports PortRange
		want  string
	}{
		{nil, DefaultNodePortRange, "service CIDRs: want one or two, got 0"},
		{[]netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("10.1.0.0/24")}, DefaultNodePortRange,
			"service CIDRs 10.0.0.0/24 and 10.1.0.0/24: a dual-stack cluster needs one IPv4 and one IPv6 range"},
		{[]netip.Prefix{netip.MustParsePrefix("10.0.0.0/4")}, DefaultNodePortRange,
			"service CIDR 0: service CIDR 0.0.0.0/4 is too large: IPv4 prefixes must be /8 or longer"},
		{[]netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}, PortRange{}, "node port range: port range 0+0 is empty"},
	} {
		if _, err := NewAllocators(tc.cidrs, tc.ports, nil); err == nil || err.Error() != tc.want {
			t.Errorf("NewAllocators(%v, %v) = %v, want %q", tc.cidrs, tc.ports, err, tc.want)
		}
	}
	// Each allocator has its own stream: using one does not change what
	// another picks.
	x := newAllocs(t, "30000-32767", "10.96.0.0/16")
	y := newAllocs(t, "30000-32767", "10.96.0.0/16")
	for i := 0; i < 5; i++ {
		_, _ = x.ClusterIPs[0].AllocateNext()
	}
	px, _ := x.NodePorts.AllocateNext()
	py, _ := y.NodePorts.AllocateNext()
	if px != py {
		t.Errorf("node port stream depends on IP allocations: %d vs %d", px, py)
	}
}

// Any sequence of Tx operations over allocators with some prior state ends,
// after Revert, exactly in the prior state, and after Commit in the prior
// state plus what the Tx took minus what it released (a reclaimed value
// staying with its holder).
func TestPropTxCommitRevert(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, err := NewAllocators([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/27"), netip.MustParsePrefix("fd00::/123")},
			PortRange{Base: 30000, Size: rapid.IntRange(1, 40).Draw(t, "ports")}, rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 0)))
		if err != nil {
			t.Fatal(err)
		}
		v4, v6 := a.ClusterIPs[0], a.ClusterIPs[1]
		anyIP := rapid.Custom(func(t *rapid.T) netip.Addr {
			ipa := v4
			if rapid.Bool().Draw(t, "v6") {
				ipa = v6
			}
			return ipa.addr(rapid.IntRange(-1, ipa.Usable()).Draw(t, "i"))
		})
		anyPort := rapid.IntRange(29999, 30000+a.NodePorts.Usable())
		// Prior state.
		for _, ip := range rapid.SliceOfN(anyIP, 0, 20).Draw(t, "priorIPs") {
			_ = a.ForIP(ip).Allocate(ip)
		}
		for _, p := range rapid.SliceOfN(anyPort, 0, 20).Draw(t, "priorPorts") {
			_ = a.NodePorts.Allocate(p)
		}
		prior := state(a)

		// The model: held values, and the Tx's taken / pending sets.
		held := map[string]bool{}
		for _, s := range prior {
			held[s] = true
		}
		taken, pending := map[string]bool{}, map[string]bool{}
		usableIP := func(ip netip.Addr) bool { return a.ForIP(ip).usable(ip) }
		tx := a.Begin()
		for _, op := range rapid.SliceOfN(rapid.IntRange(0, 5), 0, 40).Draw(t, "ops") {
			switch op {
			case 0:
				ip := anyIP.Draw(t, "ip")
				k := ip.String()
				err := tx.AllocateIP(ip)
				switch {
				case !usableIP(ip):
					if !IsNotInRange(err) {
						t.Fatalf("AllocateIP(%s) = %v, want not in range", ip, err)
					}
				case held[k] && pending[k]:
					if err != nil {
						t.Fatalf("reclaim AllocateIP(%s) = %v", ip, err)
					}
					delete(pending, k)
				case held[k]:
					if err != ErrIPAllocated {
						t.Fatalf("AllocateIP(%s) held = %v", ip, err)
					}
				default:
					if err != nil {
						t.Fatalf("AllocateIP(%s) = %v", ip, err)
					}
					held[k], taken[k] = true, true
					delete(pending, k)
				}
			case 1:
				fam := corev1.IPv4Protocol
				if rapid.Bool().Draw(t, "nextV6") {
					fam = corev1.IPv6Protocol
				}
				ip, err := tx.AllocateNextIP(fam)
				if a.ForFamily(fam).Free() == 0 && err == ErrFull {
					continue
				}
				if err != nil || held[ip.String()] {
					t.Fatalf("AllocateNextIP(%s) = %s, %v (held=%v)", fam, ip, err, held[ip.String()])
				}
				held[ip.String()], taken[ip.String()] = true, true
				delete(pending, ip.String())
			case 2:
				ip := anyIP.Draw(t, "releaseIP")
				tx.ReleaseIP(ip)
				pending[ip.String()] = true
			case 3:
				p := anyPort.Draw(t, "port")
				k := itoa(p)
				err := tx.AllocatePort(p)
				switch {
				case !a.NodePorts.Range().Contains(p):
					if !IsNotInRange(err) {
						t.Fatalf("AllocatePort(%d) = %v", p, err)
					}
				case held[k] && pending[k]:
					if err != nil {
						t.Fatalf("reclaim AllocatePort(%d) = %v", p, err)
					}
					delete(pending, k)
				case held[k]:
					if err != ErrPortAllocated {
						t.Fatalf("AllocatePort(%d) held = %v", p, err)
					}
				default:
					if err != nil {
						t.Fatalf("AllocatePort(%d) = %v", p, err)
					}
					held[k], taken[k] = true, true
					delete(pending, k)
				}
			case 4:
				p, err := tx.AllocateNextPort()
				if err == ErrFull && a.NodePorts.Free() == 0 {
					continue
				}
				if err != nil || held[itoa(p)] {
					t.Fatalf("AllocateNextPort() = %d, %v", p, err)
				}
				held[itoa(p)], taken[itoa(p)] = true, true
				delete(pending, itoa(p))
			case 5:
				p := anyPort.Draw(t, "releasePort")
				tx.ReleasePort(p)
				pending[itoa(p)] = true
			}
			// Nothing is released before Commit.
			for _, s := range prior {
				if !slices.Contains(state(a), s) {
					t.Fatalf("%s released before Commit", s)
				}
			}
		}
		if rapid.Bool().Draw(t, "commit") {
			tx.Commit()
			for k := range pending {
				delete(held, k)
			}
			var want []string
			for _, s := range state(a) {
				if !held[s] {
					t.Fatalf("after Commit %s is held, model says free", s)
				}
				want = append(want, s)
			}
			if len(want) != len(held) {
				t.Fatalf("after Commit state %v, model %v", state(a), held)
			}
		} else {
			tx.Revert()
			if got := state(a); !slices.Equal(got, prior) {
				t.Fatalf("after Revert %v, want prior %v", got, prior)
			}
		}
	})
}
