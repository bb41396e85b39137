package service

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// renderSlices prints slices compactly, for golden files.
func renderSlices(sls []*discoveryv1.EndpointSlice) string {
	var b strings.Builder
	for _, sl := range sls {
		var lbls []string
		for k, v := range sl.Labels {
			lbls = append(lbls, k+"="+v)
		}
		sort.Strings(lbls)
		owner := ""
		for _, o := range sl.OwnerReferences {
			owner += fmt.Sprintf(" owner=%s/%s", o.Kind, o.Name)
		}
		fmt.Fprintf(&b, "%s/%s %s%s\n  labels: %s\n  ports:", sl.Namespace, sl.Name, sl.AddressType, owner, strings.Join(lbls, " "))
		if sl.Ports == nil {
			b.WriteString(" (nil)")
		}
		for _, p := range sl.Ports {
			fmt.Fprintf(&b, " %s/%s/%d", derefStr(p.Name), derefProto(p.Protocol), derefInt(p.Port))
		}
		b.WriteString("\n")
		for _, e := range sl.Endpoints {
			fmt.Fprintf(&b, "  %s\n", renderEndpoint(e))
		}
	}
	return b.String()
}

func boolStr(name string, p *bool) string {
	switch {
	case p == nil:
		return name + "=nil"
	case *p:
		return name
	}
	return "!" + name
}

func renderEndpoint(e discoveryv1.Endpoint) string {
	s := strings.Join(e.Addresses, ",") + " " + boolStr("ready", e.Conditions.Ready) + " " +
		boolStr("serving", e.Conditions.Serving) + " " + boolStr("terminating", e.Conditions.Terminating)
	if e.NodeName != nil {
		s += " node=" + *e.NodeName
	}
	if e.Zone != nil {
		s += " zone=" + *e.Zone
	}
	if e.Hostname != nil {
		s += " hostname=" + *e.Hostname
	}
	if e.TargetRef != nil {
		s += " " + e.TargetRef.Kind + "=" + e.TargetRef.Name
	}
	if e.Hints != nil {
		for _, z := range e.Hints.ForZones {
			s += " hint-zone=" + z.Name
		}
		for _, n := range e.Hints.ForNodes {
			s += " hint-node=" + n.Name
		}
	}
	return s
}

// endpointLines lists a service's endpoints as "type ports | endpoint",
// sorted, without slice names.
func endpointLines(s *Store, ns, svc string) []string {
	var out []string
	for _, sl := range s.EndpointSlicesFor(ns, svc) {
		var ports []string
		for _, p := range sl.Ports {
			ports = append(ports, fmt.Sprintf("%s/%s/%d", derefStr(p.Name), derefProto(p.Protocol), derefInt(p.Port)))
		}
		if len(sl.Endpoints) == 0 {
			out = append(out, fmt.Sprintf("%s [%s] (empty)", sl.AddressType, strings.Join(ports, " ")))
		}
		for _, e := range sl.Endpoints {
			out = append(out, fmt.Sprintf("%s [%s] %s", sl.AddressType, strings.Join(ports, " "), renderEndpoint(e)))
		}
	}
	sort.Strings(out)
	return out
}

func TestControllerGoldenShop(t *testing.T) {
	ms, err := LoadPaths(filepath.Join(manifestsDir, "shop.yaml"), filepath.Join(manifestsDir, "selectorless-slices.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, Config{MasterService: true})
	if err := s.ApplyManifests(ms); err != nil {
		t.Fatal(err)
	}
	golden(t, "controller/shop.golden", renderSlices(s.ListEndpointSlices()))

	// Names are a function of the state: a second store agrees.
	s2 := newStore(t, Config{MasterService: true, Seed: 99})
	if err := s2.ApplyManifests(ms); err != nil {
		t.Fatal(err)
	}
	if a, b := renderSlices(s.ListEndpointSlices()), renderSlices(s2.ListEndpointSlices()); a != b {
		t.Errorf("slice names depend on the seed:\n%s\n%s", a, b)
	}
}

func TestControllerEndpoints(t *testing.T) {
	web := func(opts ...Option) *corev1.Service {
		return NewService("default/web", append([]Option{Selector("app=web"), NamedPort("http", 80, "http")}, opts...)...)
	}
	pod := func(name string, opts ...Option) *corev1.Pod {
		return NewPod("default/"+name, append([]Option{Labels("app=web"), ContainerPort("http", 8080, "TCP"), OnNode("node-a")}, opts...)...)
	}
	nodes := []runtime.Object{NewNode("node-a", Zone("zone-a")), NewNode("node-b", Zone("zone-b"))}
	tests := []struct {
		name string
		cfg  Config
		objs []runtime.Object
		want []string
	}{
		{"ready pod", Config{}, []runtime.Object{web(), pod("p1", PodIP("10.244.0.1"), Ready(true))},
			[]string{"IPv4 [http/TCP/8080] 10.244.0.1 ready serving !terminating node=node-a zone=zone-a Pod=p1"}},
		{"not ready", Config{}, []runtime.Object{web(), pod("p1", PodIP("10.244.0.1"), Ready(false))},
			[]string{"IPv4 [http/TCP/8080] 10.244.0.1 !ready !serving !terminating node=node-a zone=zone-a Pod=p1"}},
		{"terminating", Config{}, []runtime.Object{web(), pod("p1", PodIP("10.244.0.1"), Ready(true), Deleting(DefaultEpoch))},
			[]string{"IPv4 [http/TCP/8080] 10.244.0.1 !ready serving terminating node=node-a zone=zone-a Pod=p1"}},
		{"publishNotReadyAddresses", Config{}, []runtime.Object{web(PublishNotReadyAddresses()),
			pod("p1", PodIP("10.244.0.1")), pod("p2", PodIP("10.244.0.2"), Ready(true), Deleting(DefaultEpoch))},
			[]string{
				"IPv4 [http/TCP/8080] 10.244.0.1 ready !serving !terminating node=node-a zone=zone-a Pod=p1",
				"IPv4 [http/TCP/8080] 10.244.0.2 ready serving terminating node=node-a zone=zone-a Pod=p2",
			}},
		{"no IP, failed and succeeded pods are left out", Config{}, []runtime.Object{web(), pod("p1", Ready(true)),
			pod("p2", PodIP("10.244.0.2"), Phase(corev1.PodFailed)), pod("p3", PodIP("10.244.0.3"), Phase(corev1.PodSucceeded))},
			[]string{"IPv4 [] (empty)"}},
		{"selector mismatch", Config{}, []runtime.Object{web(), NewPod("default/x", Labels("app=other"), PodIP("10.244.0.9"))},
			[]string{"IPv4 [] (empty)"}},
		{"named port resolved per pod", Config{}, []runtime.Object{web(Port("metrics", 9090, 0)),
			pod("p1", PodIP("10.244.0.1"), Ready(true)),
			NewPod("default/p2", Labels("app=web"), ContainerPort("http", 8081, "TCP"), PodIP("10.244.0.2"), Ready(true)),
			NewPod("default/p3", Labels("app=web"), ContainerPort("web", 8082, "TCP"), PodIP("10.244.0.3"), Ready(true)),
			NewPod("default/p4", Labels("app=web"), ContainerPort("http", 8080, "UDP"), PodIP("10.244.0.4"), Ready(true))},
			[]string{
				"IPv4 [http/TCP/8080 metrics/TCP/9090] 10.244.0.1 ready serving !terminating node=node-a zone=zone-a Pod=p1",
				"IPv4 [http/TCP/8081 metrics/TCP/9090] 10.244.0.2 ready serving !terminating Pod=p2",
				"IPv4 [metrics/TCP/9090] 10.244.0.3 ready serving !terminating Pod=p3",
				"IPv4 [metrics/TCP/9090] 10.244.0.4 ready serving !terminating Pod=p4",
			}},
		{"sidecar port", Config{}, []runtime.Object{web(), func() *corev1.Pod {
			p := NewPod("default/p1", Labels("app=web"), PodIP("10.244.0.1"), Ready(true))
			always := corev1.ContainerRestartPolicyAlways
			p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "envoy", RestartPolicy: &always,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 15001, Protocol: "TCP"}}}}
			return p
		}()}, []string{"IPv4 [http/TCP/15001] 10.244.0.1 ready serving !terminating Pod=p1"}},
		{"headless hostname and subdomain", Config{}, []runtime.Object{
			NewService("default/db", Headless(), Selector("app=db"), Port("pg", 5432, 0)),
			NewPod("default/db-0", Labels("app=db"), Hostname("db-0"), Subdomain("db"), PodIP("10.244.0.7"), Ready(true)),
			NewPod("default/db-1", Labels("app=db"), Hostname("db-1"), Subdomain("other"), PodIP("10.244.0.8"), Ready(true))},
			nil /* checked below */},
		{"zone only when the node has one", Config{}, []runtime.Object{web(), pod("p1", PodIP("10.244.0.1"), Ready(true), OnNode("node-z"))},
			[]string{"IPv4 [http/TCP/8080] 10.244.0.1 ready serving !terminating node=node-z Pod=p1"}},
		{"strict nodes leave out pods on unknown nodes", Config{StrictNodes: true}, []runtime.Object{web(),
			pod("p1", PodIP("10.244.0.1"), Ready(true), OnNode("node-z")), pod("p2", PodIP("10.244.0.2"), Ready(true))},
			[]string{"IPv4 [http/TCP/8080] 10.244.0.2 ready serving !terminating node=node-a zone=zone-a Pod=p2"}},
		{"dual-stack", dualCfg, []runtime.Object{web(DualStack()),
			pod("p1", PodIP("10.244.0.1", "fd00:10:244::1"), Ready(true)), pod("p2", PodIP("10.244.0.2"), Ready(true))},
			[]string{
				"IPv4 [http/TCP/8080] 10.244.0.1 ready serving !terminating node=node-a zone=zone-a Pod=p1",
				"IPv4 [http/TCP/8080] 10.244.0.2 ready serving !terminating node=node-a zone=zone-a Pod=p2",
				"IPv6 [http/TCP/8080] fd00:10:244::1 ready serving !terminating node=node-a zone=zone-a Pod=p1",
			}},
		{"special addresses are not endpoints", Config{}, []runtime.Object{web(), pod("p1", PodIP("127.0.0.1"), Ready(true))},
			[]string{"IPv4 [] (empty)"}},
		{"prefer close hints", Config{}, []runtime.Object{web(TrafficDistribution("PreferClose")),
			pod("p1", PodIP("10.244.0.1"), Ready(true)), pod("p2", PodIP("10.244.0.2"), Ready(false), OnNode("node-b"))},
			[]string{
				"IPv4 [http/TCP/8080] 10.244.0.1 ready serving !terminating node=node-a zone=zone-a Pod=p1 hint-zone=zone-a",
				"IPv4 [http/TCP/8080] 10.244.0.2 !ready !serving !terminating node=node-b zone=zone-b Pod=p2",
			}},
		{"prefer same node hints", Config{}, []runtime.Object{web(TrafficDistribution("PreferSameNode")), pod("p1", PodIP("10.244.0.1"), Ready(true))},
			[]string{"IPv4 [http/TCP/8080] 10.244.0.1 ready serving !terminating node=node-a zone=zone-a Pod=p1 hint-zone=zone-a hint-node=node-a"}},
		{"no selector, no controller slices", Config{}, []runtime.Object{NewService("default/web", Port("http", 80, 0)), pod("p1", PodIP("10.244.0.1"), Ready(true))}, nil},
		{"externalName, no slices", Config{}, []runtime.Object{NewService("default/web", ExternalName("x.example.com")), pod("p1", PodIP("10.244.0.1"), Ready(true))}, nil},
		{"empty selector selects every pod", Config{}, []runtime.Object{NewService("default/web", Port("http", 80, 0),
			func(o runtime.Object) { o.(*corev1.Service).Spec.Selector = map[string]string{} }),
			NewPod("default/any", PodIP("10.244.0.1"), Ready(true))},
			[]string{"IPv4 [http/TCP/80] 10.244.0.1 ready serving !terminating Pod=any"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, tt.cfg)
			if err := s.Apply(append(append([]runtime.Object{}, nodes...), tt.objs...)...); err != nil {
				t.Fatal(err)
			}
			if tt.name == "headless hostname and subdomain" {
				sls := s.EndpointSlicesFor("default", "db")
				if len(sls) != 1 || sls[0].Labels[corev1.IsHeadlessService] != "" {
					t.Fatalf("headless slices: %s", renderSlices(sls))
				}
				if _, ok := sls[0].Labels[corev1.IsHeadlessService]; !ok {
					t.Error("no headless label")
				}
				got := endpointLines(s, "default", "db")
				want := []string{
					"IPv4 [pg/TCP/5432] 10.244.0.7 ready serving !terminating hostname=db-0 Pod=db-0",
					"IPv4 [pg/TCP/5432] 10.244.0.8 ready serving !terminating Pod=db-1",
				}
				if !slices.Equal(got, want) {
					t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
				}
				return
			}
			got := endpointLines(s, "default", "web")
			if !slices.Equal(got, tt.want) {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

func TestControllerSliceShape(t *testing.T) {
	s := newStore(t, Config{MaxEndpointsPerSlice: 2})
	mustCreate(t, s, NewService("default/web", Selector("app=web"), Port("http", 80, 8080), Labels("team=a,kubernetes.io/service-name=spoof")))
	svc, _ := s.GetService("default", "web")
	for i := 1; i <= 5; i++ {
		mustCreate(t, s, NewPod(fmt.Sprintf("default/p%d", i), Labels("app=web"), PodIP(fmt.Sprintf("10.244.0.%d", i)), Ready(true)))
	}
	sls := s.EndpointSlicesFor("default", "web")
	if len(sls) != 3 {
		t.Fatalf("%d slices for 5 endpoints at 2 per slice:\n%s", len(sls), renderSlices(sls))
	}
	total := 0
	for _, sl := range sls {
		total += len(sl.Endpoints)
		if len(sl.Endpoints) > 2 {
			t.Errorf("%s has %d endpoints", sl.Name, len(sl.Endpoints))
		}
		if !strings.HasPrefix(sl.Name, "web-") || len(sl.Name) != len("web-")+5 || sl.GenerateName != "web-" {
			t.Errorf("name %q generateName %q", sl.Name, sl.GenerateName)
		}
		if sl.Labels["team"] != "a" || sl.Labels[discoveryv1.LabelServiceName] != "web" || sl.Labels[discoveryv1.LabelManagedBy] != EndpointSliceControllerName {
			t.Errorf("labels %v", sl.Labels)
		}
		if _, headless := sl.Labels[corev1.IsHeadlessService]; headless {
			t.Error("headless label on a ClusterIP service's slice")
		}
		o := sl.OwnerReferences
		if len(o) != 1 || o[0].Kind != "Service" || o[0].UID != svc.UID || !*o[0].Controller {
			t.Errorf("owner %+v", o)
		}
		if errs := ValidateEndpointSlice(sl); len(errs) != 0 {
			t.Errorf("controller slice invalid: %v", errs)
		}
	}
	if total != 5 {
		t.Errorf("%d endpoints", total)
	}

	// A placeholder has empty, non-nil ports and endpoints.
	mustCreate(t, s, NewService("default/none", Selector("app=none"), Port("http", 80, 0)))
	ph := s.EndpointSlicesFor("default", "none")
	if len(ph) != 1 || ph[0].Ports == nil || len(ph[0].Ports) != 0 || ph[0].Endpoints == nil || len(ph[0].Endpoints) != 0 {
		t.Errorf("placeholder: %+v", ph)
	}
}

func TestControllerReactsToChanges(t *testing.T) {
	s := newStore(t, Config{})
	mustCreate(t, s, NewNode("node-a", Zone("zone-a")))
	mustCreate(t, s, NewService("default/web", Selector("app=web"), Port("http", 80, 8080)))
	p := mustCreate(t, s, NewPod("default/p1", Labels("app=web"), OnNode("node-a"))).(*corev1.Pod)
	if got := endpointLines(s, "default", "web"); !slices.Equal(got, []string{"IPv4 [] (empty)"}) {
		t.Fatalf("before IP: %v", got)
	}
	// The network gives the pod an IP, the kubelet marks it ready.
	st := p.DeepCopy()
	st.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}}
	SetPodReady(st, true)
	if _, err := s.UpdateStatus(st); err != nil {
		t.Fatal(err)
	}
	want := "IPv4 [http/TCP/8080] 10.244.0.5 ready serving !terminating node=node-a zone=zone-a Pod=p1"
	if got := endpointLines(s, "default", "web"); !slices.Equal(got, []string{want}) {
		t.Fatalf("after status: %v", got)
	}
	// Node zone change.
	n, _ := s.GetNode("node-a")
	n2 := n.DeepCopy()
	n2.Labels[corev1.LabelTopologyZone] = "zone-q"
	if _, err := s.Update(n2); err != nil {
		t.Fatal(err)
	}
	if got := endpointLines(s, "default", "web"); !strings.Contains(got[0], "zone=zone-q") {
		t.Errorf("after zone change: %v", got)
	}
	// Relabel the pod out of the selector.
	p2, _ := s.GetPod("default", "p1")
	p3 := p2.DeepCopy()
	p3.Labels = map[string]string{"app": "other"}
	if _, err := s.Update(p3); err != nil {
		t.Fatal(err)
	}
	if got := endpointLines(s, "default", "web"); !slices.Equal(got, []string{"IPv4 [] (empty)"}) {
		t.Errorf("after relabel: %v", got)
	}
	// Change the selector to follow it.
	svc, _ := s.GetService("default", "web")
	svc2 := svc.DeepCopy()
	svc2.Spec.Selector = map[string]string{"app": "other"}
	if _, err := s.Update(svc2); err != nil {
		t.Fatal(err)
	}
	if got := endpointLines(s, "default", "web"); len(got) != 1 || !strings.Contains(got[0], "10.244.0.5") {
		t.Errorf("after selector change: %v", got)
	}
	// A client deleting or editing a managed slice sees it put back.
	sl := s.EndpointSlicesFor("default", "web")[0]
	if err := s.Delete(KindEndpointSlice, "default", sl.Name); err != nil {
		t.Fatal(err)
	}
	if got := s.EndpointSlicesFor("default", "web"); len(got) != 1 || got[0].Name != sl.Name || len(got[0].Endpoints) != 1 {
		t.Errorf("after deleting the slice: %s", renderSlices(got))
	}
	edited := s.EndpointSlicesFor("default", "web")[0].DeepCopy()
	edited.Endpoints = nil
	if _, err := s.Update(edited); err != nil {
		t.Fatal(err)
	}
	if got := s.EndpointSlicesFor("default", "web"); len(got[0].Endpoints) != 1 {
		t.Errorf("after editing the slice: %s", renderSlices(got))
	}
	// Deleting the service deletes its slices.
	if err := s.Delete(KindService, "default", "web"); err != nil {
		t.Fatal(err)
	}
	if got := s.EndpointSlicesFor("default", "web"); len(got) != 0 {
		t.Errorf("slices outlive their service: %s", renderSlices(got))
	}
}

func TestHandWrittenSlicesAreLeftAlone(t *testing.T) {
	ms, err := LoadPaths(filepath.Join(manifestsDir, "selectorless-slices.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, Config{})
	if err := s.ApplyManifests(ms); err != nil {
		t.Fatal(err)
	}
	before := renderSlices(s.EndpointSlicesFor("default", "external-db"))
	mustCreate(t, s, NewPod("default/p", Labels("app=x"), PodIP("10.244.0.3")))
	svc, _ := s.GetService("default", "external-db")
	svc2 := svc.DeepCopy()
	svc2.Labels = map[string]string{"x": "y"}
	if _, err := s.Update(svc2); err != nil {
		t.Fatal(err)
	}
	if after := renderSlices(s.EndpointSlicesFor("default", "external-db")); after != before || !strings.Contains(after, "192.168.60.4") {
		t.Errorf("hand-written slice changed:\n%s\n%s", before, after)
	}
}

func TestMirroring(t *testing.T) {
	s := newStore(t, dualCfg)
	mustCreate(t, s, NewService("default/legacy", Port("http", 80, 8000)))
	ep := NewEndpoints("default/legacy", Labels("team=a"), Annotation("note", "x"), Annotation(corev1.LastAppliedConfigAnnotation, "{}"),
		Subset([]string{"192.168.50.10", "fd00::10"}, []string{"192.168.50.11"}, EndpointPort("http", 8000, "TCP")))
	ep.Subsets[0].Addresses[0].Hostname = "a"
	mustCreate(t, s, ep)
	sls := s.EndpointSlicesFor("default", "legacy")
	golden(t, "controller/mirror.golden", renderSlices(sls))
	for _, sl := range sls {
		if sl.Labels["team"] != "a" || sl.Labels[discoveryv1.LabelManagedBy] != MirroringControllerName ||
			sl.Annotations["note"] != "x" || sl.Annotations[corev1.LastAppliedConfigAnnotation] != "" || sl.OwnerReferences[0].Kind != "Endpoints" {
			t.Errorf("mirrored metadata: %+v", sl.ObjectMeta)
		}
	}
	// Changing the Endpoints updates the mirror.
	e, _ := s.GetEndpoints("default", "legacy")
	e2 := e.DeepCopy()
	e2.Subsets[0].Addresses = e2.Subsets[0].Addresses[:1]
	if _, err := s.Update(e2); err != nil {
		t.Fatal(err)
	}
	if got := endpointLines(s, "default", "legacy"); len(got) != 2 {
		t.Errorf("after update: %v", got)
	}
	// A selector stops mirroring (the EndpointSlice controller takes over).
	svc, _ := s.GetService("default", "legacy")
	svc2 := svc.DeepCopy()
	svc2.Spec.Selector = map[string]string{"app": "legacy"}
	if _, err := s.Update(svc2); err != nil {
		t.Fatal(err)
	}
	for _, sl := range s.EndpointSlicesFor("default", "legacy") {
		if sl.Labels[discoveryv1.LabelManagedBy] != EndpointSliceControllerName {
			t.Errorf("mirrored slice left: %s", sl.Name)
		}
	}
	// Back to selectorless: mirrored again; deleting the service deletes
	// the Endpoints and so the mirror.
	svc3, _ := s.GetService("default", "legacy")
	svc4 := svc3.DeepCopy()
	svc4.Spec.Selector = nil
	if _, err := s.Update(svc4); err != nil {
		t.Fatal(err)
	}
	if got := endpointLines(s, "default", "legacy"); len(got) != 2 {
		t.Errorf("mirror not restored: %v", got)
	}
	if err := s.Delete(KindService, "default", "legacy"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.GetEndpoints("default", "legacy"); ok || len(s.EndpointSlicesFor("default", "legacy")) != 0 {
		t.Error("endpoints or mirrored slices outlive the service")
	}

	// skip-mirror, and Endpoints without a service, are not mirrored.
	mustCreate(t, s, NewService("default/skip", Port("http", 80, 0)))
	mustCreate(t, s, NewEndpoints("default/skip", Labels(discoveryv1.LabelSkipMirror+"=true"), Subset([]string{"192.168.1.1"}, nil, EndpointPort("http", 80, "TCP"))))
	mustCreate(t, s, NewEndpoints("default/orphan", Subset([]string{"192.168.1.2"}, nil, EndpointPort("http", 80, "TCP"))))
	if n := len(s.EndpointSlicesFor("default", "skip")) + len(s.EndpointSlicesFor("default", "orphan")); n != 0 {
		t.Errorf("%d unexpected mirrored slices", n)
	}
	// A service created after its Endpoints starts the mirror.
	mustCreate(t, s, NewService("default/orphan", Port("http", 80, 0)))
	if got := endpointLines(s, "default", "orphan"); len(got) != 1 {
		t.Errorf("late service: %v", got)
	}
}

func TestDisabledControllerKeepsDumpSlices(t *testing.T) {
	ms, err := LoadPaths(filepath.Join(manifestsDir, "kubectl-get-all.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, Config{DisableEndpointsController: true})
	if err := s.ApplyManifests(ms); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sl := range s.ListEndpointSlices() {
		names = append(names, sl.Namespace+"/"+sl.Name)
	}
	want := []string{"default/kubernetes", "kube-system/kube-dns-hq2vd", "shop/web-x7k9p"}
	if !slices.Equal(names, want) {
		t.Errorf("slices %v, want the dump's %v", names, want)
	}
	// With the controller on, the dump's controller-managed slices are
	// replaced by the store's own, computed from the dump's pods.
	s2 := newStore(t, Config{})
	if err := s2.ApplyManifests(ms); err != nil {
		t.Fatal(err)
	}
	got := endpointLines(s2, "shop", "web")
	wantWeb := []string{
		"IPv4 [http/TCP/8080] 10.244.0.12 !ready serving terminating node=node-a zone=zone-a Pod=web-6d4cf56db6-t8qwz",
		"IPv4 [http/TCP/8080] 10.244.1.7 ready serving !terminating node=node-b zone=zone-b Pod=web-6d4cf56db6-9m2hx",
	}
	if !slices.Equal(got, wantWeb) {
		t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(wantWeb, "\n  "))
	}
}

// The mirroring controller's own rules: a subset is one slice per family of
// up to 1000 endpoints (not chunked like the EndpointSlice controller's),
// subsets are repacked first, ExternalName services and leader-election
// Endpoints are not mirrored.
func TestMirroringSliceShape(t *testing.T) {
	ips := func(n int) []string {
		var out []string
		for i := 0; i < n; i++ {
			out = append(out, fmt.Sprintf("10.1.%d.%d", i/250, i%250+1))
		}
		return out
	}
	mirrored := func(s *Store, name string) []*discoveryv1.EndpointSlice {
		var out []*discoveryv1.EndpointSlice
		for _, sl := range s.EndpointSlicesFor("default", name) {
			if sl.Labels[discoveryv1.LabelManagedBy] == MirroringControllerName {
				out = append(out, sl)
			}
		}
		return out
	}
	s := newStore(t, Config{}) // MaxEndpointsPerSlice 100 is the EndpointSlice controller's
	for _, tc := range []struct {
		name      string
		n         int
		endpoints int
	}{{"big", 150, 150}, {"huge", 1005, MaxMirroredEndpointsPerSubset}} {
		mustCreate(t, s, NewService("default/"+tc.name, Port("http", 80, 0)))
		mustCreate(t, s, NewEndpoints("default/"+tc.name, Subset(ips(tc.n), nil, EndpointPort("http", 80, "TCP"))))
		sls := mirrored(s, tc.name)
		if len(sls) != 1 || len(sls[0].Endpoints) != tc.endpoints {
			t.Fatalf("%s: %d addresses → %d slices (%v endpoints), want one of %d", tc.name, tc.n, len(sls), func() []int {
				var n []int
				for _, sl := range sls {
					n = append(n, len(sl.Endpoints))
				}
				return n
			}(), tc.endpoints)
		}
		if errs := ValidateEndpointSlice(sls[0]); len(errs) != 0 {
			t.Errorf("%s: mirrored slice invalid: %v", tc.name, errs[0])
		}
	}

	// Repacked first: one address listed twice (ready and not) is one not
	// ready endpoint; ports offered by the same addresses share a slice.
	mustCreate(t, s, NewService("default/packed", Port("http", 80, 0), Port("https", 443, 0)))
	mustCreate(t, s, NewEndpoints("default/packed",
		Subset([]string{"192.168.1.1", "192.168.1.2"}, nil, EndpointPort("https", 443, "TCP")),
		Subset([]string{"192.168.1.2", "192.168.1.1"}, []string{"192.168.1.2"}, EndpointPort("https", 443, "TCP")),
		Subset([]string{"192.168.1.1"}, []string{"192.168.1.2"}, EndpointPort("http", 80, "TCP"))))
	got := endpointLines(s, "default", "packed")
	want := []string{
		"IPv4 [http/TCP/80 https/TCP/443] 192.168.1.1 ready serving=nil terminating=nil",
		"IPv4 [http/TCP/80 https/TCP/443] 192.168.1.2 !ready serving=nil terminating=nil",
	}
	if !slices.Equal(got, want) {
		t.Errorf("packed:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	// ExternalName services are not mirrored; becoming one drops the mirror.
	mustCreate(t, s, NewService("default/ext", ExternalName("db.example.com")))
	mustCreate(t, s, NewEndpoints("default/ext", Subset([]string{"192.168.2.1"}, nil, EndpointPort("http", 80, "TCP"))))
	if sls := mirrored(s, "ext"); len(sls) != 0 {
		t.Errorf("ExternalName service mirrored: %s", renderSlices(sls))
	}
	if _, err := s.Update(NewService("default/big", ExternalName("db.example.com"))); err != nil {
		t.Fatal(err)
	}
	if sls := mirrored(s, "big"); len(sls) != 0 {
		t.Errorf("mirror kept after the service became ExternalName: %d slices", len(sls))
	}

	// A leader-election lock is not mirrored.
	mustCreate(t, s, NewService("default/lock", Port("http", 80, 0)))
	mustCreate(t, s, NewEndpoints("default/lock", Annotation("control-plane.alpha.kubernetes.io/leader", `{"holderIdentity":"a"}`),
		Subset([]string{"192.168.3.1"}, nil, EndpointPort("http", 80, "TCP"))))
	if sls := mirrored(s, "lock"); len(sls) != 0 {
		t.Errorf("leader-election Endpoints mirrored: %s", renderSlices(sls))
	}
}
