package service

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestNameDerivedClusterIPs: a Service without cluster IPs gets an address derived
// from its name, the same whatever other Services are there (unless one holds it),
// never a taken or given one, both families for PreferDualStack in a dual-stack
// cluster and a note for a family without a range; Services with addresses, headless
// and ExternalName ones are left as they are, and the objects given are not changed.
func TestNameDerivedClusterIPs(t *testing.T) {
	v4, v6 := netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:10:96::/112")
	web := NewService("default/web", Port("http", 80, 8080))
	alone, notes := NameDerivedClusterIPs([]runtime.Object{web}, []netip.Prefix{v4}, nil)
	ip := alone[0].(*corev1.Service).Spec.ClusterIP
	if !v4.Contains(netip.MustParseAddr(ip)) || len(notes) != 1 || !strings.Contains(notes[0], "service default/web has no clusterIP in the manifests: given "+ip) {
		t.Fatalf("alone: %s, notes %q", ip, notes)
	}
	if web.Spec.ClusterIP != "" {
		t.Error("the Service given was changed")
	}
	given := NewService("default/given", Port("http", 80, 8080), ClusterIP("10.96.0.50"))
	ext := NewService("default/ext", ExternalName("example.com"))
	others, _ := NameDerivedClusterIPs([]runtime.Object{NewService("zzz/other", Port("p", 1, 1)), given, ext, web}, []netip.Prefix{v4}, []netip.Addr{netip.MustParseAddr("10.96.0.10")})
	if got := others[3].(*corev1.Service).Spec.ClusterIP; got != ip {
		t.Errorf("with other Services: %s, alone %s", got, ip)
	}
	if others[1] != given || others[2] != ext {
		t.Error("a Service that needs no address was replaced")
	}
	// The address taken: the next draw.
	taken, _ := NameDerivedClusterIPs([]runtime.Object{web}, []netip.Prefix{v4}, []netip.Addr{netip.MustParseAddr(ip)})
	if got := taken[0].(*corev1.Service).Spec.ClusterIP; got == ip || got == "" {
		t.Errorf("with %s taken: %q", ip, got)
	}
	dual := NewService("default/dual", Port("http", 80, 8080))
	pol := corev1.IPFamilyPolicyPreferDualStack
	dual.Spec.IPFamilyPolicy = &pol
	d, _ := NameDerivedClusterIPs([]runtime.Object{dual}, []netip.Prefix{v4, v6}, nil)
	if s := d[0].(*corev1.Service).Spec; len(s.ClusterIPs) != 2 || len(s.IPFamilies) != 2 || s.IPFamilies[1] != corev1.IPv6Protocol {
		t.Errorf("PreferDualStack in a dual-stack cluster: %v %v", s.ClusterIPs, s.IPFamilies)
	}
	single, _ := NameDerivedClusterIPs([]runtime.Object{dual}, []netip.Prefix{v4}, nil)
	if s := single[0].(*corev1.Service).Spec; len(s.ClusterIPs) != 1 {
		t.Errorf("PreferDualStack in an IPv4 cluster: %v", s.ClusterIPs)
	}
	v6only := NewService("default/six", Port("http", 80, 8080))
	v6only.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	_, notes = NameDerivedClusterIPs([]runtime.Object{v6only}, []netip.Prefix{v4}, nil)
	if len(notes) != 1 || !strings.Contains(notes[0], "no IPv6 service range") {
		t.Errorf("IPv6 Service in an IPv4 cluster: %q", notes)
	}
}
