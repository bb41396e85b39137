package service

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/alloc"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
)

func newStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := NewStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustCreate(t testing.TB, s *Store, obj runtime.Object) runtime.Object {
	t.Helper()
	out, err := s.Create(obj)
	if err != nil {
		t.Fatalf("create %s: %v", describe(obj), err)
	}
	return out
}

func mustService(t testing.TB, s *Store, svc *corev1.Service) *corev1.Service {
	t.Helper()
	return mustCreate(t, s, svc).(*corev1.Service)
}

// allocState summarises the allocators: used IPs and ports.
func allocState(s *Store) string {
	var b strings.Builder
	for _, a := range s.Allocators().ClusterIPs {
		fmt.Fprintf(&b, "%s:", a.CIDR())
		a.ForEach(func(ip netip.Addr) { fmt.Fprintf(&b, " %s", ip) })
		b.WriteString("\n")
	}
	b.WriteString("ports:")
	s.Allocators().NodePorts.ForEach(func(p int) { fmt.Fprintf(&b, " %d", p) })
	return b.String()
}

var (
	v4CIDR   = netip.MustParsePrefix("10.96.0.0/12")
	v6CIDR   = netip.MustParsePrefix("fd00:10:96::/112")
	dualCfg  = Config{ServiceCIDRs: []netip.Prefix{v4CIDR, v6CIDR}}
	dual6Cfg = Config{ServiceCIDRs: []netip.Prefix{v6CIDR, v4CIDR}}
)

func inCIDR(t testing.TB, ip string, p netip.Prefix) {
	t.Helper()
	a, err := netip.ParseAddr(ip)
	if err != nil || !p.Contains(a) {
		t.Errorf("IP %q not in %s", ip, p)
	}
}

func TestCreateServiceAllocates(t *testing.T) {
	web := func(opts ...Option) *corev1.Service {
		return NewService("default/web", append([]Option{Selector("app=web"), Port("http", 80, 8080)}, opts...)...)
	}
	tests := []struct {
		name  string
		cfg   Config
		svc   *corev1.Service
		check func(t *testing.T, svc *corev1.Service)
	}{
		{"single-stack default", Config{}, web(), func(t *testing.T, svc *corev1.Service) {
			inCIDR(t, svc.Spec.ClusterIP, v4CIDR)
			if !slices.Equal(svc.Spec.ClusterIPs, []string{svc.Spec.ClusterIP}) || !slices.Equal(svc.Spec.IPFamilies, []corev1.IPFamily{"IPv4"}) ||
				policyOf(svc) != "SingleStack" {
				t.Errorf("spec: %+v", svc.Spec)
			}
			// Dynamic allocations avoid the static band (10.96.0.1-10.96.1.0).
			if a := netip.MustParseAddr(svc.Spec.ClusterIP); a.Less(netip.MustParseAddr("10.96.1.1")) {
				t.Errorf("dynamic IP %s in the static band", a)
			}
		}},
		{"requested IP", Config{}, web(ClusterIP("10.96.0.10")), func(t *testing.T, svc *corev1.Service) {
			if svc.Spec.ClusterIP != "10.96.0.10" || !slices.Equal(svc.Spec.ClusterIPs, []string{"10.96.0.10"}) {
				t.Errorf("clusterIP %v", svc.Spec.ClusterIPs)
			}
		}},
		{"prefer dual-stack on a dual-stack cluster", dualCfg, web(DualStack()), func(t *testing.T, svc *corev1.Service) {
			if len(svc.Spec.ClusterIPs) != 2 || !slices.Equal(svc.Spec.IPFamilies, []corev1.IPFamily{"IPv4", "IPv6"}) {
				t.Fatalf("spec: %+v", svc.Spec)
			}
			inCIDR(t, svc.Spec.ClusterIPs[0], v4CIDR)
			inCIDR(t, svc.Spec.ClusterIPs[1], v6CIDR)
		}},
		{"prefer dual-stack on a single-stack cluster", Config{}, web(DualStack()), func(t *testing.T, svc *corev1.Service) {
			if len(svc.Spec.ClusterIPs) != 1 || policyOf(svc) != "PreferDualStack" {
				t.Errorf("spec: %+v", svc.Spec)
			}
		}},
		{"IPv6 primary cluster", dual6Cfg, web(), func(t *testing.T, svc *corev1.Service) {
			inCIDR(t, svc.Spec.ClusterIP, v6CIDR)
			if !slices.Equal(svc.Spec.IPFamilies, []corev1.IPFamily{"IPv6"}) {
				t.Errorf("families %v", svc.Spec.IPFamilies)
			}
		}},
		{"family from the requested IP", dualCfg, web(ClusterIP("fd00:10:96::20")), func(t *testing.T, svc *corev1.Service) {
			if !slices.Equal(svc.Spec.IPFamilies, []corev1.IPFamily{"IPv6"}) {
				t.Errorf("families %v", svc.Spec.IPFamilies)
			}
		}},
		{"explicit secondary family first", dualCfg, web(IPFamilies("IPv6", "IPv4"), IPFamilyPolicy("RequireDualStack")), func(t *testing.T, svc *corev1.Service) {
			inCIDR(t, svc.Spec.ClusterIPs[0], v6CIDR)
			inCIDR(t, svc.Spec.ClusterIPs[1], v4CIDR)
		}},
		{"headless with selector", Config{}, web(Headless()), func(t *testing.T, svc *corev1.Service) {
			if !slices.Equal(svc.Spec.ClusterIPs, []string{"None"}) || !slices.Equal(svc.Spec.IPFamilies, []corev1.IPFamily{"IPv4"}) || policyOf(svc) != "SingleStack" {
				t.Errorf("spec: %+v", svc.Spec)
			}
		}},
		{"headless selectorless is dual even on a single-stack cluster", Config{}, NewService("default/h", Headless()), func(t *testing.T, svc *corev1.Service) {
			if !slices.Equal(svc.Spec.IPFamilies, []corev1.IPFamily{"IPv4", "IPv6"}) || policyOf(svc) != "RequireDualStack" {
				t.Errorf("spec: %+v", svc.Spec)
			}
		}},
		{"externalName gets nothing", Config{}, NewService("default/x", ExternalName("x.example.com")), func(t *testing.T, svc *corev1.Service) {
			if svc.Spec.ClusterIP != "" || svc.Spec.IPFamilies != nil || svc.Spec.IPFamilyPolicy != nil {
				t.Errorf("spec: %+v", svc.Spec)
			}
		}},
		{"nodePort per port, TCP and UDP share", Config{}, NewService("default/dns", NodePort(), Port("dns-tcp", 53, 0), UDPPort("dns", 53, 0), Port("metrics", 9153, 0)),
			func(t *testing.T, svc *corev1.Service) {
				p := svc.Spec.Ports
				if p[0].NodePort == 0 || p[0].NodePort != p[1].NodePort || p[2].NodePort == 0 || p[2].NodePort == p[0].NodePort {
					t.Errorf("node ports %d %d %d", p[0].NodePort, p[1].NodePort, p[2].NodePort)
				}
				for _, x := range p {
					if x.NodePort < 30000 || x.NodePort > 32767 {
						t.Errorf("node port %d out of range", x.NodePort)
					}
				}
			}},
		{"requested nodePort is shared by the other protocol", Config{}, NewService("default/dns", NodePort(), UDPPort("dns", 53, 0), Port("dns-tcp", 53, 0), WithNodePort("dns-tcp", 30053)),
			func(t *testing.T, svc *corev1.Service) {
				if svc.Spec.Ports[0].NodePort != 30053 || svc.Spec.Ports[1].NodePort != 30053 {
					t.Errorf("ports %+v", svc.Spec.Ports)
				}
			}},
		{"LB without node ports keeps only requests", Config{}, web(LoadBalancer(), AllocateLoadBalancerNodePorts(false), Port("admin", 81, 0), WithNodePort("admin", 31081)),
			func(t *testing.T, svc *corev1.Service) {
				if svc.Spec.Ports[0].NodePort != 0 || svc.Spec.Ports[1].NodePort != 31081 {
					t.Errorf("ports %+v", svc.Spec.Ports)
				}
			}},
		{"LB local gets a health check port", Config{}, web(LoadBalancer(), ExternalTrafficPolicy("Local")), func(t *testing.T, svc *corev1.Service) {
			hc := svc.Spec.HealthCheckNodePort
			if hc < 30000 || hc > 32767 || hc == svc.Spec.Ports[0].NodePort {
				t.Errorf("healthCheckNodePort %d (nodePort %d)", hc, svc.Spec.Ports[0].NodePort)
			}
		}},
		{"LB local requested health check port", Config{}, web(LoadBalancer(), ExternalTrafficPolicy("Local"), HealthCheckNodePort(32000)), func(t *testing.T, svc *corev1.Service) {
			if svc.Spec.HealthCheckNodePort != 32000 {
				t.Errorf("healthCheckNodePort %d", svc.Spec.HealthCheckNodePort)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, tt.cfg)
			svc := mustService(t, s, tt.svc)
			tt.check(t, svc)
			if errs := ValidateService(svc); len(errs) != 0 {
				t.Errorf("stored service invalid: %v", errs)
			}
			got, _ := s.GetService(svc.Namespace, svc.Name)
			if got != svc {
				t.Error("Create did not return the stored object")
			}
		})
	}
}

func TestCreateServiceErrors(t *testing.T) {
	web := func(opts ...Option) *corev1.Service {
		return NewService("default/web", append([]Option{Selector("app=web"), Port("http", 80, 8080)}, opts...)...)
	}
	small := Config{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/30")}, NodePortRange: alloc.PortRange{Base: 30000, Size: 2}}
	tests := []struct {
		name    string
		cfg     Config
		before  []runtime.Object
		svc     *corev1.Service
		want    string
		invalid bool
	}{
		{"requested IP out of range", Config{}, nil, web(ClusterIP("10.200.0.1")),
			`Service "web" is invalid: spec.clusterIPs: Invalid value: ["10.200.0.1"]: failed to allocate IP 10.200.0.1: the provided IP (10.200.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/12`, true},
		{"requested IP taken", Config{}, []runtime.Object{NewService("default/dns", Port("dns", 53, 0), ClusterIP("10.96.0.10"))}, web(ClusterIP("10.96.0.10")),
			`Service "web" is invalid: spec.clusterIPs: Invalid value: ["10.96.0.10"]: failed to allocate IP 10.96.0.10: provided IP is already allocated`, true},
		{"network address", Config{}, nil, web(ClusterIP("10.96.0.0")),
			`Service "web" is invalid: spec.clusterIPs: Invalid value: ["10.96.0.0"]: failed to allocate IP 10.96.0.0: the provided IP (10.96.0.0) is not in the valid range. The range of valid IPs is 10.96.0.0/12`, true},
		{"range full", small, []runtime.Object{NewService("default/a", Port("", 80, 0)), NewService("default/b", Port("", 80, 0))}, web(),
			`Internal error occurred: failed to allocate a serviceIP: range is full`, false},
		{"node ports full", small, []runtime.Object{NewService("default/a", NodePort(), Port("a", 80, 0), Port("b", 81, 0))}, web(NodePort()),
			`Internal error occurred: failed to allocate a nodePort: range is full`, false},
		{"require dual-stack on single-stack", Config{}, nil, web(IPFamilyPolicy("RequireDualStack")),
			`Service "web" is invalid: spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services`, true},
		{"family not configured", Config{}, nil, web(IPFamilies("IPv6")),
			`Service "web" is invalid: spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this cluster`, true},
		{"IP of a family not configured", Config{}, nil, web(ClusterIP("fd00::1")),
			`Service "web" is invalid: spec.clusterIPs[0]: Invalid value: ["fd00::1"]: IPv6 is not configured on this cluster`, true},
		{"single stack with two IPs", dualCfg, nil, web(ClusterIP("10.96.0.5", "fd00:10:96::5"), IPFamilyPolicy("SingleStack")),
			`Service "web" is invalid: spec.ipFamilyPolicy: Invalid value: "SingleStack": must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified`, true},
		{"node port out of range", Config{}, nil, web(NodePort(), WithNodePort("http", 29999)),
			`Service "web" is invalid: spec.ports[0].nodePort: Invalid value: 29999: provided port is not in the valid range. The range of valid ports is 30000-32767`, true},
		{"node port taken", Config{}, []runtime.Object{NewService("default/a", NodePort(), Port("x", 80, 0), WithNodePort("x", 30080))}, web(NodePort(), WithNodePort("http", 30080)),
			`Service "web" is invalid: spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated`, true},
		{"health check port taken", Config{}, []runtime.Object{NewService("default/a", NodePort(), Port("x", 80, 0), WithNodePort("x", 30080))},
			web(LoadBalancer(), ExternalTrafficPolicy("Local"), HealthCheckNodePort(30080)),
			`Internal error occurred: failed to allocate requested HealthCheck NodePort 30080: provided port is already allocated`, false},
		{"allocation error wins over validation", Config{}, []runtime.Object{NewService("default/dns", Port("dns", 53, 0), ClusterIP("10.96.0.10"))},
			web(ClusterIP("10.96.0.10"), Port("", 0, 0)),
			`Service "web" is invalid: spec.clusterIPs: Invalid value: ["10.96.0.10"]: failed to allocate IP 10.96.0.10: provided IP is already allocated`, true},
		{"validation after allocation", Config{}, nil, web(NodePort(), ClientIPAffinity(90000)),
			`Service "web" is invalid: spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 90000: must be greater than 0 and less than 86400`, true},
		{"already exists", Config{}, []runtime.Object{NewService("default/web", Port("", 80, 0))}, web(),
			`services "web" already exists`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, tt.cfg)
			for _, o := range tt.before {
				mustCreate(t, s, o)
			}
			before := allocState(s)
			var events []Event
			s.Watch(func(e Event) { events = append(events, e) })
			_, err := s.Create(tt.svc)
			if err == nil {
				t.Fatal("no error")
			}
			if tt.want != "" && err.Error() != tt.want {
				t.Errorf("error:\n got %s\nwant %s", err, tt.want)
			}
			if apierrors.IsInvalid(err) != tt.invalid {
				t.Errorf("IsInvalid = %v", apierrors.IsInvalid(err))
			}
			if after := allocState(s); after != before {
				t.Errorf("failed create changed the allocators:\nbefore %s\nafter  %s", before, after)
			}
			if len(events) != 0 {
				t.Errorf("failed create sent events: %v", events)
			}
		})
	}
}

func TestUpdateService(t *testing.T) {
	s := newStore(t, dualCfg)
	var events []Event
	s.Watch(func(e Event) {
		if e.Kind == KindService {
			events = append(events, e)
		}
	})
	svc := mustService(t, s, NewService("default/web", Selector("app=web"), Port("http", 80, 8080)))
	ip := svc.Spec.ClusterIP

	// Re-submitting the original object (no clusterIP, no RV) changes nothing.
	same, err := s.Update(NewService("default/web", Selector("app=web"), Port("http", 80, 8080)))
	if err != nil {
		t.Fatal(err)
	}
	if same != svc || len(events) != 1 {
		t.Fatalf("no-op update wrote: %d events", len(events))
	}

	// ClusterIP → NodePort allocates, NodePort → ClusterIP releases.
	np := svc.DeepCopy()
	np.Spec.Type = corev1.ServiceTypeNodePort
	out, err := s.Update(np)
	if err != nil {
		t.Fatal(err)
	}
	port := out.(*corev1.Service).Spec.Ports[0].NodePort
	if port == 0 || !s.Allocators().NodePorts.Has(int(port)) || out.(*corev1.Service).Spec.ExternalTrafficPolicy != "Cluster" {
		t.Fatalf("no node port after type change: %+v", out.(*corev1.Service).Spec)
	}
	back := NewService("default/web", Selector("app=web"), Port("http", 80, 8080))
	out, err = s.Update(back)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*corev1.Service); got.Spec.Ports[0].NodePort != 0 || got.Spec.ExternalTrafficPolicy != "" || got.Spec.ClusterIP != ip {
		t.Fatalf("after NodePort → ClusterIP: %+v", got.Spec)
	}
	if s.Allocators().NodePorts.Has(int(port)) {
		t.Error("node port not released")
	}

	// The primary cluster IP cannot change.
	moved := out.DeepCopyObject().(*corev1.Service)
	moved.Spec.ClusterIP, moved.Spec.ClusterIPs = "10.96.0.77", []string{"10.96.0.77"}
	_, err = s.Update(moved)
	if err == nil || !strings.Contains(err.Error(), `spec.clusterIPs[0]: Invalid value: ["10.96.0.77"]: may not change once set`) {
		t.Errorf("moving the IP: %v", err)
	}
	if s.Allocators().ForFamily("IPv4").Has(netip.MustParseAddr("10.96.0.77")) {
		t.Error("failed update kept an allocation")
	}

	// Upgrade to dual-stack allocates the secondary, downgrade releases it.
	up := out.DeepCopyObject().(*corev1.Service)
	pol := corev1.IPFamilyPolicyPreferDualStack
	up.Spec.IPFamilyPolicy = &pol
	out, err = s.Update(up)
	if err != nil {
		t.Fatal(err)
	}
	dual := out.(*corev1.Service)
	if len(dual.Spec.ClusterIPs) != 2 || dual.Spec.ClusterIPs[0] != ip {
		t.Fatalf("upgrade: %v", dual.Spec.ClusterIPs)
	}
	v6 := netip.MustParseAddr(dual.Spec.ClusterIPs[1])
	inCIDR(t, v6.String(), v6CIDR)
	down := dual.DeepCopy()
	single := corev1.IPFamilyPolicySingleStack
	down.Spec.IPFamilyPolicy = &single
	out, err = s.Update(down)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*corev1.Service).Spec; len(got.ClusterIPs) != 1 || len(got.IPFamilies) != 1 {
		t.Fatalf("downgrade: %+v", got)
	}
	if s.Allocators().ForFamily("IPv6").Has(v6) {
		t.Error("secondary IP not released")
	}

	// To ExternalName releases the IP; back allocates a new one.
	ext := NewService("default/web", ExternalName("web.example.com"))
	if _, err := s.Update(ext); err != nil {
		t.Fatal(err)
	}
	if s.Allocators().ForFamily("IPv4").Has(netip.MustParseAddr(ip)) {
		t.Error("IP kept after → ExternalName")
	}
	got, _ := s.GetService("default", "web")
	if got.Spec.ClusterIP != "" || got.Spec.IPFamilies != nil || got.Spec.IPFamilyPolicy != nil || got.Spec.InternalTrafficPolicy != nil {
		t.Errorf("ExternalName spec: %+v", got.Spec)
	}
	out, err = s.Update(NewService("default/web", Selector("app=web"), Port("http", 80, 8080)))
	if err != nil {
		t.Fatal(err)
	}
	inCIDR(t, out.(*corev1.Service).Spec.ClusterIP, v4CIDR)

	// Stale resourceVersion.
	stale := svc.DeepCopy()
	if _, err := s.Update(stale); !apierrors.IsConflict(err) {
		t.Errorf("stale update: %v", err)
	}
	if _, err := s.Update(NewService("default/nope", Port("", 80, 0))); !apierrors.IsNotFound(err) {
		t.Errorf("update of a missing service: %v", err)
	}
}

func TestUpdateServicePorts(t *testing.T) {
	s := newStore(t, Config{})
	svc := mustService(t, s, NewService("default/web", NodePort(), Port("http", 80, 0), Port("https", 443, 0)))
	httpNP, httpsNP := svc.Spec.Ports[0].NodePort, svc.Spec.Ports[1].NodePort

	// Drop https, request a specific node port for a new port.
	next := NewService("default/web", NodePort(), Port("http", 80, 0), Port("admin", 8080, 0), WithNodePort("admin", 31111))
	out, err := s.Update(next)
	if err != nil {
		t.Fatal(err)
	}
	p := out.(*corev1.Service).Spec.Ports
	if p[0].NodePort != httpNP || p[1].NodePort != 31111 {
		t.Errorf("ports %+v", p)
	}
	if s.Allocators().NodePorts.Has(int(httpsNP)) || !s.Allocators().NodePorts.Has(31111) {
		t.Errorf("allocator: %s", allocState(s))
	}

	// LB + Local gets a health check port; Cluster releases it.
	lb := out.DeepCopyObject().(*corev1.Service)
	lb.Spec.Type, lb.Spec.ExternalTrafficPolicy = corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal
	out, err = s.Update(lb)
	if err != nil {
		t.Fatal(err)
	}
	hc := out.(*corev1.Service).Spec.HealthCheckNodePort
	if hc == 0 || !s.Allocators().NodePorts.Has(int(hc)) {
		t.Fatalf("no health check port: %+v", out.(*corev1.Service).Spec)
	}
	cl := out.DeepCopyObject().(*corev1.Service)
	cl.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	out, err = s.Update(cl)
	if err != nil {
		t.Fatal(err)
	}
	if out.(*corev1.Service).Spec.HealthCheckNodePort != 0 || s.Allocators().NodePorts.Has(int(hc)) {
		t.Errorf("health check port kept: %+v", out.(*corev1.Service).Spec)
	}

	// Delete releases everything.
	ip := netip.MustParseAddr(out.(*corev1.Service).Spec.ClusterIP)
	if err := s.Delete(KindService, "default", "web"); err != nil {
		t.Fatal(err)
	}
	if s.Allocators().ForIP(ip).Has(ip) || s.Allocators().NodePorts.Used() != 0 {
		t.Errorf("after delete: %s", allocState(s))
	}
	if err := s.Delete(KindService, "default", "web"); !apierrors.IsNotFound(err) {
		t.Errorf("second delete: %v", err)
	}
}

func TestMasterService(t *testing.T) {
	s := newStore(t, Config{MasterService: true, APIServerAddress: netip.MustParseAddr("192.168.0.1")})
	svc, ok := s.GetService("default", "kubernetes")
	if !ok {
		t.Fatal("no default/kubernetes")
	}
	if svc.Spec.ClusterIP != "10.96.0.1" || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].Name != "https" || svc.Spec.Ports[0].TargetPort.IntValue() != 6443 {
		t.Errorf("master service: %+v", svc.Spec)
	}
	sl, ok := s.GetEndpointSlice("default", "kubernetes")
	if !ok || sl.Endpoints[0].Addresses[0] != "192.168.0.1" || *sl.Ports[0].Port != 6443 {
		t.Errorf("master slice: %+v", sl)
	}
	if ep, ok := s.GetEndpoints("default", "kubernetes"); !ok || ep.Labels[discoveryv1.LabelSkipMirror] != "true" {
		t.Errorf("master endpoints: %+v", ep)
	}
	if got := len(s.EndpointSlicesFor("default", "kubernetes")); got != 1 {
		t.Errorf("%d slices for default/kubernetes (mirrored as well?)", got)
	}
}

func TestNamespaces(t *testing.T) {
	s := newStore(t, Config{})
	var names []string
	for _, ns := range s.ListNamespaces() {
		names = append(names, ns.Name)
	}
	if !slices.Equal(names, []string{"default", "kube-system"}) {
		t.Errorf("initial namespaces %v", names)
	}
	var events []string
	s.Watch(func(e Event) { events = append(events, e.String()) })
	mustCreate(t, s, NewService("shop/web", Selector("app=web"), Port("http", 80, 0)))
	if _, ok := s.GetNamespace("shop"); !ok {
		t.Fatal("namespace not auto-created")
	}
	if !strings.HasPrefix(events[0], "Added Namespace shop") || !strings.HasPrefix(events[1], "Added Service shop/web") {
		t.Errorf("events %v", events)
	}
	mustCreate(t, s, NewPod("shop/web-1", Labels("app=web"), PodIP("10.244.0.5"), Ready(true)))
	// Deleting the namespace deletes its contents and releases the IP.
	svc, _ := s.GetService("shop", "web")
	ip := netip.MustParseAddr(svc.Spec.ClusterIP)
	events = nil
	if err := s.Delete(KindNamespace, "", "shop"); err != nil {
		t.Fatal(err)
	}
	if len(s.ListPods())+len(s.ListServices())+len(s.ListEndpointSlices()) != 0 || s.Allocators().ForIP(ip).Has(ip) {
		t.Errorf("namespace contents remain: %v", events)
	}
	if last := events[len(events)-1]; !strings.HasPrefix(last, "Deleted Namespace shop") {
		t.Errorf("last event %q", last)
	}
	if err := s.Delete(KindNamespace, "", "default"); !apierrors.IsForbidden(err) {
		t.Errorf("deleting default: %v", err)
	}

	strict := newStore(t, Config{StrictNamespaces: true})
	_, err := strict.Create(NewService("shop/web", Port("", 80, 0)))
	if err == nil || err.Error() != `namespaces "shop" not found` {
		t.Errorf("strict namespaces: %v", err)
	}
	mustCreate(t, strict, NewNamespace("shop"))
	mustCreate(t, strict, NewService("shop/web", Port("", 80, 0)))
	// Objects without a namespace land in "default".
	if o := mustCreate(t, strict, NewPod("p")); objectMeta(o).Namespace != "default" {
		t.Errorf("namespace %q", objectMeta(o).Namespace)
	}
}

func TestWatchOrderAndNesting(t *testing.T) {
	s := newStore(t, Config{})
	var log []string
	// A "kubelet" that gives every new pod an IP and readiness when it is Added.
	next := 1
	s.Watch(func(e Event) {
		log = append(log, "kubelet: "+e.String())
		if e.Type == Added && e.Kind == KindPod {
			p := e.New.(*corev1.Pod).DeepCopy()
			p.Status.PodIP, p.Status.PodIPs = "", []corev1.PodIP{{IP: fmt.Sprintf("10.244.0.%d", next)}}
			next++
			SetPodReady(p, true)
			if _, err := s.UpdateStatus(p); err != nil {
				t.Error(err)
			}
			log = append(log, "kubelet: status set")
		}
	})
	cancel2 := s.Watch(func(e Event) { log = append(log, "second: "+e.String()) })
	mustCreate(t, s, NewService("default/web", Selector("app=web"), Port("http", 80, 0)))
	mustCreate(t, s, NewPod("default/web-1", Labels("app=web")))
	cancel2()
	mustCreate(t, s, NewPod("default/other", Labels("app=other")))

	want := []string{
		"kubelet: Added Service default/web rv=3",
		"second: Added Service default/web rv=3",
		"kubelet: Added EndpointSlice default/web-",
		"second: Added EndpointSlice default/web-",
		"kubelet: Added Pod default/web-1 rv=5",
		"kubelet: status set", // the nested change is queued, not delivered re-entrantly
		"second: Added Pod default/web-1 rv=5",
		"kubelet: Modified Pod default/web-1 rv=6",
		"second: Modified Pod default/web-1 rv=6",
		"kubelet: Added EndpointSlice default/web-",
		"second: Added EndpointSlice default/web-",
		"kubelet: Deleted EndpointSlice default/web-",
		"second: Deleted EndpointSlice default/web-",
		"kubelet: Added Pod default/other rv=",
		"kubelet: status set",
		"kubelet: Modified Pod default/other rv=",
	}
	if len(log) != len(want) {
		t.Fatalf("got %d lines:\n%s", len(log), strings.Join(log, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(log[i], want[i]) {
			t.Errorf("line %d: got %q, want prefix %q", i, log[i], want[i])
		}
	}
	// Resource versions increase in delivery order.
	var last uint64
	s2 := newStore(t, Config{})
	s2.Watch(func(e Event) {
		if e.ResourceVersion <= last {
			t.Errorf("rv %d after %d", e.ResourceVersion, last)
		}
		last = e.ResourceVersion
	})
	mustCreate(t, s2, NewService("default/a", Selector("app=a"), Port("", 80, 0)))
	mustCreate(t, s2, NewPod("default/a-1", Labels("app=a"), PodIP("10.244.0.9")))
}

func TestWatchWithReplay(t *testing.T) {
	s := newStore(t, Config{MasterService: true})
	mustCreate(t, s, NewNode("node-a"))
	mustCreate(t, s, NewPod("default/p", PodIP("10.244.0.1")))
	var got []string
	var inner func()
	cancel := s.WatchWithReplay(func(e Event) {
		got = append(got, e.String())
		if inner == nil {
			// Changes made during the replay come after it.
			inner = func() {}
			mustCreate(t, s, NewNamespace("late"))
		}
	})
	defer cancel()
	want := []string{
		"Added Namespace default", "Added Namespace kube-system",
		"Added Node node-a", "Added Service default/kubernetes", "Added Pod default/p",
		"Added Namespace late",
	}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("%d: %q, want %q", i, got[i], want[i])
		}
	}
}

func TestApplyAllOrNothing(t *testing.T) {
	s := newStore(t, Config{})
	mustCreate(t, s, NewService("default/existing", Selector("app=x"), Port("http", 80, 0), ClusterIP("10.96.0.50")))
	before := allocState(s)
	beforeSvcs := len(s.ListServices())
	var events []Event
	s.Watch(func(e Event) { events = append(events, e) })
	err := s.Apply(
		NewService("default/a", Selector("app=a"), Port("http", 80, 0)),
		NewService("default/b", NodePort(), Port("http", 80, 0)),
		NewPod("default/a-1", Labels("app=a"), PodIP("10.244.0.3"), Ready(true)),
		NewService("default/c", Port("http", 80, 0), ClusterIP("10.96.0.50")), // conflicts
	)
	if err == nil || !strings.Contains(err.Error(), `apply: object 3 (Service "default/c"): Service "c" is invalid: spec.clusterIPs`) {
		t.Fatalf("error: %v", err)
	}
	if len(events) != 0 || allocState(s) != before || len(s.ListServices()) != beforeSvcs || len(s.ListPods()) != 0 || len(s.ListEndpointSlices()) != 1 {
		t.Errorf("failed apply left traces: %d events, %d services, %d pods\n%s", len(events), len(s.ListServices()), len(s.ListPods()), allocState(s))
	}
	// After the rollback the store works on: same objects apply cleanly, and
	// an apply of an existing object updates it.
	if err := s.Apply(NewService("default/a", Selector("app=a"), Port("http", 80, 0)), NewPod("default/a-1", Labels("app=a"), PodIP("10.244.0.3"), Ready(true))); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(NewService("default/a", Selector("app=a"), Port("http", 80, 0), Port("https", 443, 0))); err != nil {
		t.Fatal(err)
	}
	a, _ := s.GetService("default", "a")
	if len(a.Spec.Ports) != 2 {
		t.Errorf("apply did not update: %+v", a.Spec.Ports)
	}
	if p, _ := s.GetPod("default", "a-1"); !IsPodReady(p) {
		t.Error("applied pod status lost")
	}
}

func TestApplyManifestsPositions(t *testing.T) {
	text := "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\nspec:\n  ports:\n  - port: 80\n---\n" +
		"apiVersion: v1\nkind: Service\nmetadata:\n  name: b\nspec:\n  type: NodePort\n  ports:\n  - port: 80\n    nodePort: 29000\n"
	ms, err := Load("svcs.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, Config{})
	err = s.ApplyManifests(ms)
	want := `svcs.yaml:17 (document 2 from line 9, Service "default/b"): spec.ports[0].nodePort: Invalid value: 29000: provided port is not in the valid range. The range of valid ports is 30000-32767`
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
	var me *ManifestError
	if !errors.As(err, &me) || me.Field != "spec.ports[0].nodePort" || !apierrors.IsInvalid(err) {
		t.Errorf("error details: %+v", me)
	}
	if _, ok := s.GetService("default", "a"); ok {
		t.Error("first document applied despite the error")
	}
}

func TestDeletePodGracefully(t *testing.T) {
	now := DefaultEpoch
	s := newStore(t, Config{Now: func() time.Time { return now }})
	mustCreate(t, s, NewService("default/web", Selector("app=web"), Port("http", 80, 0)))
	mustCreate(t, s, NewPod("default/web-1", Labels("app=web"), PodIP("10.244.0.5"), Ready(true)))
	if err := s.DeletePod("default", "web-1", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	p, ok := s.GetPod("default", "web-1")
	if !ok || p.DeletionTimestamp == nil || !p.DeletionTimestamp.Time.Equal(now.Add(30*time.Second)) || *p.DeletionGracePeriodSeconds != 30 {
		t.Fatalf("terminating pod: %+v", p)
	}
	ep := s.EndpointSlicesFor("default", "web")[0].Endpoints[0]
	if *ep.Conditions.Ready || !*ep.Conditions.Serving || !*ep.Conditions.Terminating {
		t.Errorf("terminating endpoint conditions: %+v", ep.Conditions)
	}
	// A longer grace does not move the deadline; a shorter one does.
	now = now.Add(time.Second)
	_ = s.DeletePod("default", "web-1", time.Minute)
	if p2, _ := s.GetPod("default", "web-1"); p2 != p {
		t.Error("longer grace rewrote the pod")
	}
	if err := s.DeletePod("default", "web-1", 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.GetPod("default", "web-1"); ok {
		t.Error("pod still there")
	}
	if sl := s.EndpointSlicesFor("default", "web"); len(sl) != 1 || len(sl[0].Endpoints) != 0 {
		t.Errorf("slices after delete: %+v", sl)
	}
}

func TestUpdateStatus(t *testing.T) {
	s := newStore(t, Config{})
	mustCreate(t, s, NewService("default/lb", LoadBalancer(), Selector("app=x"), Port("http", 80, 0)))
	lb, _ := s.GetService("default", "lb")
	st := lb.DeepCopy()
	st.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.10"}}
	st.Spec.Ports[0].Port = 81 // ignored by UpdateStatus
	out, err := s.UpdateStatus(st)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Service)
	if got.Spec.Ports[0].Port != 80 || got.Status.LoadBalancer.Ingress[0].IP != "203.0.113.10" || *got.Status.LoadBalancer.Ingress[0].IPMode != corev1.LoadBalancerIPModeVIP {
		t.Errorf("status update: %+v", got)
	}
	bad := got.DeepCopy()
	bad.Status.LoadBalancer.Ingress[0].IP = "not-an-ip"
	if _, err := s.UpdateStatus(bad); !apierrors.IsInvalid(err) {
		t.Errorf("bad ingress IP: %v", err)
	}
	// Update ignores status.
	spec := got.DeepCopy()
	spec.Status.LoadBalancer.Ingress = nil
	spec.Labels = map[string]string{"x": "y"}
	out, err = s.Update(spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.(*corev1.Service).Status.LoadBalancer.Ingress) != 1 {
		t.Error("Update cleared status")
	}
	if _, err := s.UpdateStatus(NewEndpoints("default/lb")); err == nil {
		t.Error("UpdateStatus of Endpoints accepted")
	}
}

func TestEndpointAddressMayNotBeAClusterIP(t *testing.T) {
	s := newStore(t, Config{})
	mustCreate(t, s, NewService("default/dns", Port("dns", 53, 0), ClusterIP("10.96.0.10")))
	mustCreate(t, s, NewService("default/legacy", Port("http", 80, 0)))
	_, err := s.Create(NewEndpoints("default/legacy", Subset([]string{"10.96.0.10"}, nil, EndpointPort("http", 80, "TCP"))))
	want := `Endpoints "legacy" is invalid: subsets[0].addresses[0].ip: Invalid value: "10.96.0.10": may not be the cluster IP of Service "default/dns"`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	_, err = s.Create(NewEndpointSlice("default/legacy-1", ForService("legacy"), SlicePort("http", 80, "TCP"), ReadyAddresses("10.96.0.10")))
	if !apierrors.IsInvalid(err) {
		t.Errorf("slice: %v", err)
	}
	// Any other address in the range is fine.
	mustCreate(t, s, NewEndpoints("default/legacy", Subset([]string{"10.96.0.11"}, nil, EndpointPort("http", 80, "TCP"))))
}

func TestGenerateNameAndUIDsAreDeterministic(t *testing.T) {
	run := func() []string {
		s := newStore(t, Config{Seed: 7})
		p := NewPod("default/x")
		p.Name, p.GenerateName = "", "web-"
		o := mustCreate(t, s, p)
		svc := mustService(t, s, NewService("default/web", Port("", 80, 0)))
		return []string{objectMeta(o).Name, string(objectMeta(o).UID), svc.Spec.ClusterIP}
	}
	a, b := run(), run()
	if !slices.Equal(a, b) || !strings.HasPrefix(a[0], "web-") || len(a[0]) != len("web-")+5 {
		t.Errorf("runs differ or bad name: %v %v", a, b)
	}
}

func TestWatchSurvivesAPanickingCallback(t *testing.T) {
	s := newStore(t, Config{})
	var seen []string
	boom := true
	s.Watch(func(e Event) {
		if boom {
			boom = false
			panic("watcher bug")
		}
		seen = append(seen, e.String())
	})
	func() {
		defer func() { _ = recover() }()
		mustCreate(t, s, NewNamespace("a"))
	}()
	mustCreate(t, s, NewNamespace("b"))
	if len(seen) != 1 || !strings.HasPrefix(seen[0], "Added Namespace b") {
		t.Errorf("after a panic: %v", seen)
	}
}

// Concurrent writers: every event is delivered exactly once, in commit order.
func TestConcurrentWriters(t *testing.T) {
	s := newStore(t, Config{})
	mustCreate(t, s, NewService("default/web", Selector("app=web"), Port("http", 80, 0)))
	var mu = make(chan struct{}, 1)
	var rvs []uint64
	s.Watch(func(e Event) {
		mu <- struct{}{}
		rvs = append(rvs, e.ResourceVersion)
		<-mu
	})
	done := make(chan error)
	for g := 0; g < 4; g++ {
		go func(g int) {
			var err error
			for i := 0; i < 25 && err == nil; i++ {
				_, err = s.Create(NewPod(fmt.Sprintf("default/p-%d-%d", g, i), Labels("app=web"), PodIP(fmt.Sprintf("10.244.%d.%d", g, i+1)), Ready(true)))
			}
			done <- err
		}(g)
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	s.publish() // drain anything a racing writer left queued
	if !slices.IsSorted(rvs) || len(rvs) == 0 || int(rvs[len(rvs)-1]-rvs[0])+1 != len(rvs) {
		t.Fatalf("%d events, first %d last %d, sorted %v", len(rvs), rvs[0], rvs[len(rvs)-1], slices.IsSorted(rvs))
	}
	if n := len(endpointLines(s, "default", "web")); n != 100 {
		t.Errorf("%d endpoints, want 100", n)
	}
}

// A requested cluster IP in a non-canonical IPv6 spelling is accepted (the
// API server only warns) and takes the same address as its canonical form.
func TestNonCanonicalRequestedClusterIP(t *testing.T) {
	s := newStore(t, dual6Cfg)
	svc := mustService(t, s, NewService("default/a", Port("http", 80, 0), ClusterIP("FD00:10:96:0::0005")))
	if !slices.Equal(svc.Spec.IPFamilies, []corev1.IPFamily{"IPv6"}) ||
		!s.Allocators().ForFamily("IPv6").Has(netip.MustParseAddr("fd00:10:96::5")) {
		t.Fatalf("spec %+v, allocator %s", svc.Spec, allocState(s))
	}
	_, err := s.Create(NewService("default/b", Port("http", 80, 0), ClusterIP("fd00:10:96::5")))
	if want := `Service "b" is invalid: spec.clusterIPs: Invalid value: ["fd00:10:96::5"]: failed to allocate IP fd00:10:96::5: provided IP is already allocated`; err == nil || err.Error() != want {
		t.Errorf("second service: %v\nwant %s", err, want)
	}
	if err := s.Delete(KindService, "default", "a"); err != nil {
		t.Fatal(err)
	}
	if s.Allocators().ForFamily("IPv6").Used() != 0 {
		t.Errorf("after delete: %s", allocState(s))
	}
}
