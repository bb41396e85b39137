package service

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"pgregory.net/rapid"
)

// renderSubsets prints subsets as "ports | ready | notReady" lines, in order.
func renderSubsets(subsets []corev1.EndpointSubset) []string {
	addrs := func(as []corev1.EndpointAddress) string {
		var out []string
		for _, a := range as {
			s := a.IP
			if a.TargetRef != nil {
				s += "@" + string(a.TargetRef.UID)
			}
			if a.Hostname != "" {
				s += "(" + a.Hostname + ")"
			}
			out = append(out, s)
		}
		return strings.Join(out, ",")
	}
	var out []string
	for _, ss := range subsets {
		var ports []string
		for _, p := range ss.Ports {
			ports = append(ports, fmt.Sprintf("%s/%s/%d", p.Name, p.Protocol, p.Port))
		}
		out = append(out, strings.Join(ports, ",")+" | "+addrs(ss.Addresses)+" | "+addrs(ss.NotReadyAddresses))
	}
	return out
}

func TestRepackSubsets(t *testing.T) {
	http, https := EndpointPort("http", 80, "TCP"), EndpointPort("https", 443, "TCP")
	dns := EndpointPort("dns", 53, "UDP")
	withUID := func(ip, uid string) corev1.EndpointAddress {
		return corev1.EndpointAddress{IP: ip, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: uid, UID: types.UID(uid)}}
	}
	tests := []struct {
		name    string
		subsets []corev1.EndpointSubset
		want    []string
	}{
		{"nothing", nil, nil},
		{"canonical already", NewEndpoints("a/b", Subset([]string{"10.0.0.1", "10.0.0.2"}, nil, http)).Subsets,
			[]string{"http/TCP/80 | 10.0.0.1,10.0.0.2 | "}},
		{"addresses sorted as strings", NewEndpoints("a/b", Subset([]string{"10.0.0.9", "10.0.0.10", "fd00::1"}, nil, http)).Subsets,
			[]string{"http/TCP/80 | 10.0.0.10,10.0.0.9,fd00::1 | "}},
		{"duplicate address once", NewEndpoints("a/b", Subset([]string{"10.0.0.1", "10.0.0.1"}, nil, http), Subset([]string{"10.0.0.1"}, nil, http)).Subsets,
			[]string{"http/TCP/80 | 10.0.0.1 | "}},
		{"not ready wins over ready", NewEndpoints("a/b", Subset([]string{"10.0.0.1", "10.0.0.2"}, []string{"10.0.0.1"}, http)).Subsets,
			[]string{"http/TCP/80 | 10.0.0.2 | 10.0.0.1"}},
		{"not ready wins in either order", NewEndpoints("a/b", Subset(nil, []string{"10.0.0.1"}, http), Subset([]string{"10.0.0.1"}, nil, http)).Subsets,
			[]string{"http/TCP/80 |  | 10.0.0.1"}},
		{"ports with the same addresses merge", NewEndpoints("a/b", Subset([]string{"10.0.0.1"}, nil, https), Subset([]string{"10.0.0.1"}, nil, http)).Subsets,
			[]string{"http/TCP/80,https/TCP/443 | 10.0.0.1 | "}},
		{"ports with different addresses split", NewEndpoints("a/b", Subset([]string{"10.0.0.1", "10.0.0.2"}, nil, http, dns), Subset([]string{"10.0.0.3"}, nil, dns)).Subsets,
			[]string{"dns/UDP/53 | 10.0.0.1,10.0.0.2,10.0.0.3 | ", "http/TCP/80 | 10.0.0.1,10.0.0.2 | "}},
		{"readiness per port", NewEndpoints("a/b", Subset([]string{"10.0.0.1"}, nil, http, https), Subset(nil, []string{"10.0.0.1"}, https)).Subsets,
			[]string{"http/TCP/80 | 10.0.0.1 | ", "https/TCP/443 |  | 10.0.0.1"}},
		{"port-less subset kept, first", NewEndpoints("a/b", Subset([]string{"10.0.0.2"}, nil, http), Subset([]string{"10.0.0.1"}, nil)).Subsets,
			[]string{" | 10.0.0.1 | ", "http/TCP/80 | 10.0.0.2 | "}},
		{"port-less subset with the same addresses merges", NewEndpoints("a/b", Subset([]string{"10.0.0.1"}, nil), Subset([]string{"10.0.0.1"}, nil, http)).Subsets,
			[]string{"http/TCP/80 | 10.0.0.1 | "}},
		{"same IP, different targets stay apart", []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{withUID("10.0.0.1", "u2"), withUID("10.0.0.1", "u1"), withUID("10.0.0.1", "u1")},
			Ports:     []corev1.EndpointPort{http}}},
			[]string{"http/TCP/80 | 10.0.0.1@u1,10.0.0.1@u2 | "}},
		{"first occurrence's fields kept", []corev1.EndpointSubset{
			{Addresses: []corev1.EndpointAddress{{IP: "10.0.0.1", Hostname: "first"}}, Ports: []corev1.EndpointPort{http}},
			{Addresses: []corev1.EndpointAddress{{IP: "10.0.0.1", Hostname: "second"}}, Ports: []corev1.EndpointPort{https}}},
			[]string{"http/TCP/80,https/TCP/443 | 10.0.0.1(first) | "}},
		{"subset without addresses drops its ports", NewEndpoints("a/b", Subset(nil, nil, https), Subset([]string{"10.0.0.1"}, nil, http)).Subsets,
			[]string{"http/TCP/80 | 10.0.0.1 | "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := make([]corev1.EndpointSubset, len(tt.subsets))
			for i := range tt.subsets {
				tt.subsets[i].DeepCopyInto(&in[i])
			}
			got := RepackSubsets(in)
			if r := renderSubsets(got); !slices.Equal(r, tt.want) {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(r, "\n  "), strings.Join(tt.want, "\n  "))
			}
			if !apiequality.Semantic.DeepEqual(in, tt.subsets) {
				t.Error("RepackSubsets modified its input")
			}
			if again := RepackSubsets(got); !apiequality.Semantic.DeepEqual(again, got) {
				t.Errorf("not idempotent:\n  %s", strings.Join(renderSubsets(again), "\n  "))
			}
		})
	}
}

// endpointFacts flattens subsets into "ip@uid port → ready" facts, applying
// the rule that not ready wins; what RepackSubsets must preserve.
func endpointFacts(subsets []corev1.EndpointSubset) map[string]bool {
	facts := map[string]bool{}
	note := func(a corev1.EndpointAddress, port string, ready bool) {
		k := a.IP
		if a.TargetRef != nil {
			k += "@" + string(a.TargetRef.UID)
		}
		k += " " + port
		if was, seen := facts[k]; !seen || was {
			facts[k] = ready
		}
	}
	for _, ss := range subsets {
		ports := []string{"-"}
		if len(ss.Ports) > 0 {
			ports = nil
			for _, p := range ss.Ports {
				ports = append(ports, fmt.Sprintf("%s/%s/%d", p.Name, p.Protocol, p.Port))
			}
		}
		for _, p := range ports {
			for _, a := range ss.Addresses {
				note(a, p, true)
			}
			for _, a := range ss.NotReadyAddresses {
				note(a, p, false)
			}
		}
	}
	return facts
}

// For any subsets, the repacked form says the same thing (every address,
// port and readiness, not ready winning), lists each port in one subset
// only and each address once per subset, and repacking it again changes
// nothing.
func TestPropRepackSubsets(t *testing.T) {
	genAddr := rapid.Custom(func(t *rapid.T) corev1.EndpointAddress {
		a := corev1.EndpointAddress{IP: rapid.SampledFrom([]string{"10.0.0.1", "10.0.0.2", "10.0.0.10", "fd00::1"}).Draw(t, "ip")}
		if rapid.IntRange(0, 3).Draw(t, "ref") == 0 {
			uid := rapid.SampledFrom([]string{"u1", "u2"}).Draw(t, "uid")
			a.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: uid, UID: types.UID(uid)}
		}
		return a
	})
	genPort := rapid.SampledFrom([]corev1.EndpointPort{
		EndpointPort("http", 80, "TCP"), EndpointPort("https", 443, "TCP"), EndpointPort("dns", 53, "UDP"), EndpointPort("dns", 53, "TCP"),
	})
	genSubset := rapid.Custom(func(t *rapid.T) corev1.EndpointSubset {
		return corev1.EndpointSubset{
			Addresses:         rapid.SliceOfN(genAddr, 0, 4).Draw(t, "ready"),
			NotReadyAddresses: rapid.SliceOfN(genAddr, 0, 2).Draw(t, "notReady"),
			Ports:             rapid.SliceOfNDistinct(genPort, 0, 3, func(p corev1.EndpointPort) string { return fmt.Sprint(p) }).Draw(t, "ports"),
		}
	})
	rapid.Check(t, func(t *rapid.T) {
		in := rapid.SliceOfN(genSubset, 0, 4).Draw(t, "subsets")
		got := RepackSubsets(in)
		want, have := endpointFacts(in), endpointFacts(got)
		// A port-less subset whose addresses are exactly those of a subset
		// with ports merges into it (as upstream's sentinel port does), so
		// a port-less fact only needs its address, as ready or not, to be
		// somewhere in the result.
		for k, ready := range want {
			if addr, ok := strings.CutSuffix(k, " -"); ok {
				delete(want, k)
				found := false
				for hk, hr := range have {
					if strings.HasPrefix(hk, addr+" ") && hr == ready {
						found = true
					}
				}
				if !found {
					t.Fatalf("port-less %s (ready %v) lost:\n%s", addr, ready, strings.Join(renderSubsets(got), "\n"))
				}
			}
		}
		for k := range have {
			if strings.HasSuffix(k, " -") {
				if _, ok := endpointFacts(in)[k]; !ok {
					t.Fatalf("port-less %s invented:\n%s", k, strings.Join(renderSubsets(got), "\n"))
				}
				delete(have, k)
			}
		}
		if !mapsEqual(have, want) {
			t.Fatalf("facts changed:\n in  %v\n out %v\n%s", sortedFacts(want), sortedFacts(have), strings.Join(renderSubsets(got), "\n"))
		}
		seenPorts := map[string]bool{}
		for _, ss := range got {
			if len(ss.Addresses)+len(ss.NotReadyAddresses) == 0 {
				t.Fatalf("empty subset: %v", renderSubsets(got))
			}
			for _, p := range ss.Ports {
				k := fmt.Sprint(p)
				if seenPorts[k] {
					t.Fatalf("port %s in two subsets: %v", k, renderSubsets(got))
				}
				seenPorts[k] = true
			}
			seenAddrs := map[string]bool{}
			for _, a := range append(append([]corev1.EndpointAddress{}, ss.Addresses...), ss.NotReadyAddresses...) {
				k := a.IP
				if a.TargetRef != nil {
					k += "@" + string(a.TargetRef.UID)
				}
				if seenAddrs[k] {
					t.Fatalf("address %s twice in a subset: %v", k, renderSubsets(got))
				}
				seenAddrs[k] = true
			}
		}
		if again := RepackSubsets(got); !apiequality.Semantic.DeepEqual(again, got) {
			t.Fatalf("not idempotent:\n%s\n--\n%s", strings.Join(renderSubsets(got), "\n"), strings.Join(renderSubsets(again), "\n"))
		}
	})
}

func mapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func sortedFacts(m map[string]bool) []string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s=%v", k, v))
	}
	sort.Strings(out)
	return out
}

// The store keeps Endpoints in the repacked form, as the API server does.
func TestStoreRepacksEndpoints(t *testing.T) {
	s := newStore(t, Config{})
	mustCreate(t, s, NewEndpoints("default/legacy",
		Subset([]string{"192.168.1.2", "192.168.1.1"}, nil, EndpointPort("https", 443, "TCP")),
		Subset([]string{"192.168.1.1", "192.168.1.2"}, []string{"192.168.1.2"}, EndpointPort("http", 80, "TCP"))))
	ep, _ := s.GetEndpoints("default", "legacy")
	want := []string{"http/TCP/80 | 192.168.1.1 | 192.168.1.2", "https/TCP/443 | 192.168.1.1,192.168.1.2 | "}
	if got := renderSubsets(ep.Subsets); !slices.Equal(got, want) {
		t.Errorf("stored\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	// Re-submitting the same content in another layout is a no-op.
	var events int
	s.Watch(func(Event) { events++ })
	same := NewEndpoints("default/legacy",
		Subset([]string{"192.168.1.1"}, []string{"192.168.1.2"}, EndpointPort("http", 80, "TCP")),
		Subset([]string{"192.168.1.2", "192.168.1.1"}, nil, EndpointPort("https", 443, "TCP")))
	if _, err := s.Update(same); err != nil {
		t.Fatal(err)
	}
	if events != 0 {
		t.Errorf("an update with the same content in another layout wrote %d events", events)
	}
}
