package alloc

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"
)

// parseServices reads one Service per line:
//
//	ns/name [ip=10.96.0.1] [ips=10.96.0.1,fd00::1] [np=30080/TCP,30080/UDP] [hc=30090]
//
// ip= sets spec.clusterIP, ips= spec.clusterIPs, np= spec.ports[].nodePort
// (protocol optional), hc= spec.healthCheckNodePort.
func parseServices(t testing.TB, text string) []*corev1.Service {
	t.Helper()
	var out []*corev1.Service
	for n, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		ns, name, ok := strings.Cut(f[0], "/")
		if !ok {
			t.Fatalf("line %d: %q: want ns/name first", n+1, line)
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "ip":
				svc.Spec.ClusterIP = v
			case "ips":
				svc.Spec.ClusterIPs = strings.Split(v, ",")
			case "np":
				for i, p := range strings.Split(v, ",") {
					num, proto, _ := strings.Cut(p, "/")
					port, err := strconv.Atoi(num)
					if err != nil {
						t.Fatalf("line %d: np %q: %v", n+1, p, err)
					}
					svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
						Name: fmt.Sprintf("p%d", i), Port: int32(80 + i), NodePort: int32(port), Protocol: corev1.Protocol(proto),
					})
				}
			case "hc":
				port, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("line %d: hc %q: %v", n+1, v, err)
				}
				svc.Spec.HealthCheckNodePort = int32(port)
			default:
				t.Fatalf("line %d: unknown key %q", n+1, k)
			}
		}
		out = append(out, svc)
	}
	return out
}

// markHeld allocates each space-separated IP or port directly.
func markHeld(t testing.TB, a *Allocators, held string) {
	t.Helper()
	for _, s := range strings.Fields(held) {
		var err error
		if p, perr := strconv.Atoi(s); perr == nil {
			err = a.NodePorts.Allocate(p)
		} else {
			ip := netip.MustParseAddr(s)
			err = a.ForIP(ip).Allocate(ip)
		}
		if err != nil {
			t.Fatalf("marking %s: %v", s, err)
		}
	}
}

func TestRepairCheckReports(t *testing.T) {
	tests := []struct {
		name     string
		cidrs    []string
		held     string
		services string
		want     string
	}{
		{
			name:  "consistent",
			cidrs: []string{"10.96.0.0/24", "fd00::/120"},
			held:  "10.96.0.1 10.96.0.10 fd00::10 30080 30090",
			services: `
default/kubernetes ip=10.96.0.1
kube-system/kube-dns ips=10.96.0.10,fd00::10
web/lb ip=None np=30080/TCP,30080/UDP hc=30090
web/headless ips=None
web/ext`,
			want: "ok\n",
		},
		{
			name:     "leaked",
			cidrs:    []string{"10.96.0.0/24"},
			held:     "10.96.0.1 10.96.0.77 30001 30080",
			services: `default/kubernetes ip=10.96.0.1 np=30080`,
			want: `the ClusterIP 10.96.0.77 may have leaked
the node port 30001 may have leaked
`,
		},
		{
			name:  "missing",
			cidrs: []string{"10.96.0.0/24", "fd00::/120"},
			held:  "10.96.0.1",
			services: `
default/kubernetes ip=10.96.0.1
web/a ips=10.96.0.20,fd00::20 np=30080/TCP,30443/TCP hc=30100`,
			want: `the ClusterIP 10.96.0.20 for service web/a is not allocated
the ClusterIP fd00::20 for service web/a is not allocated
the node port 30080 for service web/a is not allocated
the node port 30100 for service web/a is not allocated
the node port 30443 for service web/a is not allocated
`,
		},
		{
			name:  "duplicates",
			cidrs: []string{"10.96.0.0/24"},
			held:  "10.96.0.20 30080 30081 30082 30090",
			services: `
web/b ip=10.96.0.20 np=30080
web/a ip=10.96.0.20 np=30080
web/dns np=30081/TCP,30081/UDP,30081/UDP
web/hc-tcp np=30082/TCP hc=30082
web/hc-udp np=30090/UDP hc=30090`,
			want: `the ClusterIP 10.96.0.20 for services web/a, web/b was assigned to multiple services; please recreate
the node port 30080 for services web/a, web/b was assigned to multiple services; please recreate
the node port 30081 for services web/dns, web/dns was assigned to multiple services; please recreate
the node port 30082 for services web/hc-tcp, web/hc-tcp was assigned to multiple services; please recreate
`,
		},
		{
			name:  "out of range and invalid",
			cidrs: []string{"10.96.0.0/24"},
			held:  "",
			services: `
web/a ip=10.97.0.1
web/b ips=10.96.0.0
web/c ips=10.96.0.255
web/d ips=10.96.0.5,fd00::5
web/e ip=10.96.0.300
web/f np=80,30000,32768`,
			want: `the ClusterIP 10.96.0.300 for service web/e is not a valid IP; please recreate
the ClusterIP 10.96.0.0 for service web/b is not within the service CIDR 10.96.0.0/24; please recreate
the ClusterIP 10.96.0.5 for service web/d is not allocated
the ClusterIP 10.96.0.255 for service web/c is not within the service CIDR 10.96.0.0/24; please recreate
the ClusterIP 10.97.0.1 for service web/a is not within the service CIDR 10.96.0.0/24; please recreate
the ClusterIP fd00::5 for service web/d is not within any configured service CIDR; please recreate
the node port 80 for service web/f is not within the port range 30000-32767; please recreate
the node port 30000 for service web/f is not allocated
the node port 32768 for service web/f is not within the port range 30000-32767; please recreate
`,
		},
		{
			name:  "clusterIPs wins over clusterIP",
			cidrs: []string{"10.96.0.0/24"},
			held:  "10.96.0.7",
			services: `
web/a ip=10.96.0.9 ips=10.96.0.7`,
			want: "ok\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAllocs(t, "30000-32767", tc.cidrs...)
			markHeld(t, a, tc.held)
			before := state(a)
			r := NewRepairer(a)
			rep := r.Check(parseServices(t, tc.services))
			if got := rep.String(); got != tc.want {
				t.Errorf("report:\n%s\nwant:\n%s", got, tc.want)
			}
			if got := state(a); !slices.Equal(got, before) {
				t.Errorf("Check changed the allocators: %v → %v", before, got)
			}
			if rep.OK() != (tc.want == "ok\n") {
				t.Errorf("OK() = %v", rep.OK())
			}
		})
	}
}

func TestRepairFixesMissingAndFreesLeaksAfterThreePasses(t *testing.T) {
	a := newAllocs(t, "30000-32767", "10.96.0.0/24")
	markHeld(t, a, "10.96.0.1 10.96.0.50 10.96.0.51 30500 30501")
	svcs := parseServices(t, `
default/kubernetes ip=10.96.0.1
web/a ip=10.96.0.20 np=30080 hc=30081`)
	r := NewRepairer(a)

	rep := r.Repair(svcs)
	want := `the ClusterIP 10.96.0.20 for service web/a is not allocated; repairing
the ClusterIP 10.96.0.50 may have leaked: flagging for later clean up (pass 1)
the ClusterIP 10.96.0.51 may have leaked: flagging for later clean up (pass 1)
the node port 30080 for service web/a is not allocated; repairing
the node port 30081 for service web/a is not allocated; repairing
the node port 30500 may have leaked: flagging for later clean up (pass 1)
the node port 30501 may have leaked: flagging for later clean up (pass 1)
`
	if got := rep.String(); got != want {
		t.Fatalf("pass 1:\n%s\nwant:\n%s", got, want)
	}
	if got := state(a); !slices.Equal(got, []string{"10.96.0.1", "10.96.0.20", "10.96.0.50", "10.96.0.51", "30080", "30081", "30500", "30501"}) {
		t.Fatalf("after pass 1: %v", got)
	}

	// Between passes, an in-flight create turns out to own 10.96.0.51 and
	// 30501: their leak counters start again.
	svcs = append(svcs, parseServices(t, "web/late ip=10.96.0.51 np=30501")...)
	rep = r.Repair(svcs)
	want = `the ClusterIP 10.96.0.50 may have leaked: flagging for later clean up (pass 2)
the node port 30500 may have leaked: flagging for later clean up (pass 2)
`
	if got := rep.String(); got != want {
		t.Fatalf("pass 2:\n%s\nwant:\n%s", got, want)
	}

	// web/late is deleted without releasing (a crash): its values are
	// leaked from pass 1 again, while the older leaks are cleaned up.
	svcs = svcs[:2]
	rep = r.Repair(svcs)
	want = `the ClusterIP 10.96.0.50 appears to have leaked: cleaning up
the ClusterIP 10.96.0.51 may have leaked: flagging for later clean up (pass 1)
the node port 30500 appears to have leaked: cleaning up
the node port 30501 may have leaked: flagging for later clean up (pass 1)
`
	if got := rep.String(); got != want {
		t.Fatalf("pass 3:\n%s\nwant:\n%s", got, want)
	}
	if got := state(a); !slices.Equal(got, []string{"10.96.0.1", "10.96.0.20", "10.96.0.51", "30080", "30081", "30501"}) {
		t.Fatalf("after pass 3: %v", got)
	}
	if fixed := rep.Filter(Leaked, ResourceClusterIP); len(fixed) != 2 || !fixed[0].Fixed || fixed[1].Fixed || fixed[1].LeakCount != 1 {
		t.Errorf("Filter(Leaked, ClusterIP) = %+v", fixed)
	}
	r.Repair(svcs)
	r.Repair(svcs)
	if rep := r.Check(svcs); !rep.OK() {
		t.Fatalf("after five passes still:\n%s", rep)
	}
}

func TestRepairLeakPassesOneAndDuplicatesNotTouched(t *testing.T) {
	a := newAllocs(t, "30000-30100", "10.96.0.0/24")
	markHeld(t, a, "10.96.0.9 30050")
	r := NewRepairer(a)
	r.LeakPasses = 1
	svcs := parseServices(t, `
web/a ip=10.96.0.20 np=30010
web/b ip=10.96.0.20 np=30010
web/c ip=10.1.1.1 np=31000`)
	rep := r.Repair(svcs)
	// Sorted by value: 10.1.1.1 < 10.96.0.9 < 10.96.0.20.
	want := `the ClusterIP 10.1.1.1 for service web/c is not within the service CIDR 10.96.0.0/24; please recreate
the ClusterIP 10.96.0.9 appears to have leaked: cleaning up
the ClusterIP 10.96.0.20 for services web/a, web/b was assigned to multiple services; please recreate
the ClusterIP 10.96.0.20 for services web/a, web/b is not allocated; repairing
the node port 30010 for services web/a, web/b was assigned to multiple services; please recreate
the node port 30010 for services web/a, web/b is not allocated; repairing
the node port 30050 appears to have leaked: cleaning up
the node port 31000 for service web/c is not within the port range 30000-30100; please recreate
`
	if got := rep.String(); got != want {
		t.Fatalf("report:\n%s\nwant:\n%s", got, want)
	}
	if got := state(a); !slices.Equal(got, []string{"10.96.0.20", "30010"}) {
		t.Fatalf("state %v", got)
	}
	// Duplicates persist until a Service changes.
	if got := r.Repair(svcs).Filter(Duplicate, ResourceNodePort); len(got) != 1 || !slices.Equal(got[0].Services, []string{"web/a", "web/b"}) {
		t.Fatalf("second pass duplicates %+v", got)
	}
}

func TestRepairWithoutNodePortAllocator(t *testing.T) {
	a := newAllocs(t, "30000-30100", "10.96.0.0/24")
	a.NodePorts = nil
	rep := NewRepairer(a).Check(parseServices(t, "web/a np=30010"))
	if got, want := rep.String(), "the node port 30010 for service web/a is not within any configured node port range; please recreate\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestNodePortsOf(t *testing.T) {
	tests := []struct {
		svc  string
		want []int
	}{
		{"a/a", nil},
		{"a/a np=30080", []int{30080}},
		{"a/a np=30080/TCP,30080/UDP", []int{30080}},
		{"a/a np=30080/UDP,30080/UDP", []int{30080, 30080}}, // same protocol twice: counted twice
		{"a/a np=30080/TCP,30080/UDP,30080/TCP", []int{30080, 30080}},
		{"a/a np=30080/TCP,30080/UDP,30080/SCTP", []int{30080}},
		{"a/a np=30080,0,30081", []int{30080, 30081}},
		{"a/a np=30080 hc=30090", []int{30080, 30090}},
		{"a/a np=30080/TCP hc=30080", []int{30080, 30080}},
		{"a/a np=30080 hc=30080", []int{30080, 30080}}, // empty protocol means TCP
		{"a/a np=30080/UDP hc=30080", []int{30080}},
		{"a/a np=30080/SCTP,30080/TCP hc=30080", []int{30080, 30080}},
	}
	for _, tc := range tests {
		if got := NodePortsOf(parseServices(t, tc.svc)[0]); !slices.Equal(got, tc.want) {
			t.Errorf("NodePortsOf(%s) = %v, want %v", tc.svc, got, tc.want)
		}
	}
	for _, tc := range []struct {
		svc  string
		want []string
	}{
		{"a/a", nil},
		{"a/a ip=None", nil},
		{"a/a ip=10.0.0.1", []string{"10.0.0.1"}},
		{"a/a ip=10.0.0.1 ips=10.0.0.1,fd00::1", []string{"10.0.0.1", "fd00::1"}},
		{"a/a ips=None", nil},
	} {
		if got := ClusterIPsOf(parseServices(t, tc.svc)[0]); !slices.Equal(got, tc.want) {
			t.Errorf("ClusterIPsOf(%s) = %v, want %v", tc.svc, got, tc.want)
		}
	}
}

// After one Repair pass with LeakPasses = 1 the allocators hold exactly the
// in-range values the services claim, and a Check finds no leak or missing
// value.
func TestPropRepairConverges(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := newAllocs(t, "30000-30040", "10.0.0.0/27", "fd00::/123")
		v4, v6 := a.ClusterIPs[0], a.ClusterIPs[1]
		ipGen := rapid.Custom(func(t *rapid.T) netip.Addr {
			ipa := v4
			if rapid.Bool().Draw(t, "v6") {
				ipa = v6
			}
			return ipa.addr(rapid.IntRange(-1, ipa.Usable()).Draw(t, "i"))
		})
		portGen := rapid.IntRange(29998, 30042)
		for _, ip := range rapid.SliceOfN(ipGen, 0, 30).Draw(t, "heldIPs") {
			_ = a.ForIP(ip).Allocate(ip)
		}
		for _, p := range rapid.SliceOfN(portGen, 0, 30).Draw(t, "heldPorts") {
			_ = a.NodePorts.Allocate(p)
		}
		n := rapid.IntRange(0, 12).Draw(t, "services")
		var svcs []*corev1.Service
		wantHeld := map[string]bool{}
		for i := 0; i < n; i++ {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("s%02d", i)}}
			for _, ip := range rapid.SliceOfN(ipGen, 0, 2).Draw(t, "ips") {
				svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, ip.String())
				if a.ForIP(ip).usable(ip) {
					wantHeld[ip.String()] = true
				}
			}
			for j, p := range rapid.SliceOfN(portGen, 0, 3).Draw(t, "ports") {
				proto := rapid.SampledFrom([]corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}).Draw(t, "proto")
				svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Port: int32(j + 1), NodePort: int32(p), Protocol: proto})
				if a.NodePorts.Range().Contains(p) {
					wantHeld[itoa(p)] = true
				}
			}
			svcs = append(svcs, svc)
		}
		r := NewRepairer(a)
		r.LeakPasses = 1
		first := r.Repair(svcs)
		for _, p := range first.Problems {
			if (p.Kind == Leaked || p.Kind == Missing) && !p.Fixed {
				t.Fatalf("unfixed %s", p)
			}
		}
		got := state(a)
		if len(got) != len(wantHeld) {
			t.Fatalf("after Repair %v, want %v", got, wantHeld)
		}
		for _, s := range got {
			if !wantHeld[s] {
				t.Fatalf("after Repair %s is held but unclaimed", s)
			}
		}
		for _, p := range r.Check(svcs).Problems {
			if p.Kind == Leaked || p.Kind == Missing {
				t.Fatalf("second pass still finds %s", p)
			}
		}
	})
}
