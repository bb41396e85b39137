package service

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"pgregory.net/rapid"
)

// expectedEndpointLines recomputes, independently of the controller, what
// endpointLines should print for a service.
func expectedEndpointLines(s *Store, svc *corev1.Service) []string {
	if svc.Spec.Selector == nil || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	var out []string
	for _, fam := range svc.Spec.IPFamilies {
		at := discoveryv1.AddressType(fam)
		n := 0
		for _, pod := range s.ListPods() {
			if pod.Namespace != svc.Namespace {
				continue
			}
			match := true
			for k, v := range svc.Spec.Selector {
				if pod.Labels[k] != v {
					match = false
				}
			}
			if !match || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded || len(pod.Status.PodIPs) == 0 {
				continue
			}
			node, hasNode := s.GetNode(pod.Spec.NodeName)
			if !hasNode && s.Config().StrictNodes && !svc.Spec.PublishNotReadyAddresses {
				continue
			}
			var ports []string
			for _, sp := range svc.Spec.Ports {
				num := int32(0)
				if sp.TargetPort.Type == intstr.Int {
					num = sp.TargetPort.IntVal
				} else {
					for _, c := range pod.Spec.Containers {
						for _, cp := range c.Ports {
							if num == 0 && cp.Name == sp.TargetPort.StrVal && cp.Protocol == sp.Protocol {
								num = cp.ContainerPort
							}
						}
					}
				}
				if num != 0 {
					ports = append(ports, fmt.Sprintf("%s/%s/%d", sp.Name, sp.Protocol, num))
				}
			}
			serving := false
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					serving = true
				}
			}
			terminating := pod.DeletionTimestamp != nil
			ready := svc.Spec.PublishNotReadyAddresses || (serving && !terminating)
			for _, ip := range pod.Status.PodIPs {
				a := netip.MustParseAddr(ip.IP)
				if (at == discoveryv1.AddressTypeIPv6) != a.Is6() || a.IsLoopback() {
					continue
				}
				line := fmt.Sprintf("%s [%s] %s %s %s %s", at, strings.Join(ports, " "), a,
					boolStr("ready", &ready), boolStr("serving", &serving), boolStr("terminating", &terminating))
				if pod.Spec.NodeName != "" {
					line += " node=" + pod.Spec.NodeName
				}
				zone := ""
				if hasNode {
					zone = node.Labels[corev1.LabelTopologyZone]
				}
				if zone != "" {
					line += " zone=" + zone
				}
				if pod.Spec.Hostname != "" && pod.Spec.Subdomain == svc.Name {
					line += " hostname=" + pod.Spec.Hostname
				}
				line += " Pod=" + pod.Name
				if svc.Spec.TrafficDistribution != nil && ready && zone != "" {
					line += " hint-zone=" + zone
				}
				out = append(out, line)
				n++
			}
		}
		if n == 0 {
			out = append(out, fmt.Sprintf("%s [] (empty)", at))
		}
	}
	sort.Strings(out)
	return out
}

// checkSlices compares every service's slices with the recomputation and
// checks their shape.
func checkSlices(t *rapid.T, s *Store) {
	svcs := map[string]*corev1.Service{}
	for _, svc := range s.ListServices() {
		svcs[ObjectKey(svc)] = svc
		got := endpointLines(s, svc.Namespace, svc.Name)
		want := expectedEndpointLines(s, svc)
		if !slices.Equal(got, want) {
			t.Fatalf("%s:\ngot\n  %s\nwant\n  %s", ObjectKey(svc), strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}
	max := s.Config().MaxEndpointsPerSlice
	for _, sl := range s.ListEndpointSlices() {
		if sl.Labels[discoveryv1.LabelManagedBy] != EndpointSliceControllerName {
			continue
		}
		svc, ok := svcs[sl.Namespace+"/"+sl.Labels[discoveryv1.LabelServiceName]]
		if !ok {
			t.Fatalf("slice %s/%s outlives its service", sl.Namespace, sl.Name)
		}
		if len(sl.Endpoints) > max {
			t.Fatalf("slice %s has %d endpoints (max %d)", sl.Name, len(sl.Endpoints), max)
		}
		if sl.OwnerReferences[0].UID != svc.UID {
			t.Fatalf("slice %s owned by %s, service uid %s", sl.Name, sl.OwnerReferences[0].UID, svc.UID)
		}
		if errs := ValidateEndpointSlice(sl); len(errs) != 0 {
			t.Fatalf("slice %s invalid: %v", sl.Name, errs)
		}
	}
}

var (
	genPodName  = rapid.SampledFrom([]string{"p0", "p1", "p2", "p3", "p4", "p5"})
	genSvcName  = rapid.SampledFrom([]string{"a", "b", "c"})
	genApp      = rapid.SampledFrom([]string{"app=a", "app=b", "app=a,tier=x", "tier=x"})
	genNodeName = rapid.SampledFrom([]string{"node-a", "node-b", "node-x"})
)

func genControllerService(t *rapid.T, dual bool) *corev1.Service {
	name := genSvcName.Draw(t, "svc")
	opts := []Option{}
	switch rapid.IntRange(0, 8).Draw(t, "selector") {
	case 0: // none
	case 1:
		opts = append(opts, func(o runtime.Object) { o.(*corev1.Service).Spec.Selector = map[string]string{} })
	default:
		opts = append(opts, Selector(genApp.Draw(t, "app")))
	}
	n := rapid.IntRange(1, 2).Draw(t, "ports")
	for i := 0; i < n; i++ {
		pname := []string{"http", "metrics"}[i]
		proto := rapid.SampledFrom([]corev1.Protocol{"TCP", "TCP", "UDP"}).Draw(t, "proto")
		if rapid.Bool().Draw(t, "namedTarget") {
			opts = append(opts, ServicePort(corev1.ServicePort{Name: pname, Protocol: proto, Port: int32(80 + i), TargetPort: intstr.FromString(pname)}))
		} else {
			opts = append(opts, ProtocolPort(pname, proto, int32(80+i), int32(rapid.IntRange(8000, 8003).Draw(t, "target"))))
		}
	}
	if rapid.IntRange(0, 3).Draw(t, "headless") == 0 {
		opts = append(opts, Headless())
	}
	if dual && rapid.Bool().Draw(t, "dual") {
		opts = append(opts, DualStack())
	}
	if rapid.IntRange(0, 3).Draw(t, "pnr") == 0 {
		opts = append(opts, PublishNotReadyAddresses())
	}
	if rapid.IntRange(0, 4).Draw(t, "td") == 0 {
		opts = append(opts, TrafficDistribution("PreferClose"))
	}
	if rapid.IntRange(0, 8).Draw(t, "extName") == 0 {
		return NewService("default/"+name, ExternalName("x.example.com"))
	}
	return NewService("default/"+name, opts...)
}

func genPodIPs(t *rapid.T, dual bool) []string {
	switch rapid.IntRange(0, 6).Draw(t, "ips") {
	case 0:
		return nil
	case 1:
		if dual {
			i := rapid.IntRange(1, 50).Draw(t, "ip")
			return []string{fmt.Sprintf("10.244.0.%d", i), fmt.Sprintf("fd00:10:244::%x", i)}
		}
	}
	return []string{fmt.Sprintf("10.244.0.%d", rapid.IntRange(1, 50).Draw(t, "ip"))}
}

func genControllerPod(t *rapid.T, dual bool) *corev1.Pod {
	opts := []Option{Labels(genApp.Draw(t, "app")), OnNode(genNodeName.Draw(t, "node"))}
	for _, pname := range []string{"http", "metrics"} {
		if rapid.IntRange(0, 3).Draw(t, "hasPort") > 0 {
			opts = append(opts, ContainerPort(pname, int32(rapid.IntRange(9000, 9002).Draw(t, "cport")), rapid.SampledFrom([]corev1.Protocol{"TCP", "UDP"}).Draw(t, "cproto")))
		}
	}
	if ips := genPodIPs(t, dual); ips != nil {
		opts = append(opts, PodIP(ips...))
	}
	opts = append(opts, Ready(rapid.Bool().Draw(t, "ready")))
	if rapid.IntRange(0, 5).Draw(t, "failed") == 0 {
		opts = append(opts, Phase(corev1.PodFailed))
	}
	if rapid.IntRange(0, 3).Draw(t, "hostname") == 0 {
		opts = append(opts, Hostname("h-"+genPodName.Draw(t, "h")), Subdomain(genSvcName.Draw(t, "subdomain")))
	}
	return NewPod("default/"+genPodName.Draw(t, "pod"), opts...)
}

// The EndpointSlice controller's slices always equal a direct recomputation
// from the pods, nodes and services, across any sequence of changes.
func TestPropSlicesMatchPods(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		dual := rapid.Bool().Draw(t, "dualCluster")
		cfg := Config{MaxEndpointsPerSlice: rapid.IntRange(1, 4).Draw(t, "max"), StrictNodes: rapid.Bool().Draw(t, "strictNodes")}
		if dual {
			cfg.ServiceCIDRs = dualCfg.ServiceCIDRs
		}
		now := DefaultEpoch
		cfg.Now = func() time.Time { return now }
		s, err := NewStore(cfg)
		if err != nil {
			t.Fatal(err)
		}
		steps := rapid.IntRange(5, 40).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			op := rapid.SampledFrom([]string{"svc", "svc", "svc-del", "pod", "pod", "pod", "pod", "pod-del", "pod-term", "pod-status", "pod-status", "pod-labels", "node", "node-del"}).Draw(t, "op")
			var err error
			switch op {
			case "svc":
				svc := genControllerService(t, dual)
				if _, ok := s.GetService(svc.Namespace, svc.Name); ok {
					_, err = s.Update(svc)
				} else {
					_, err = s.Create(svc)
				}
			case "svc-del":
				err = s.Delete(KindService, "default", genSvcName.Draw(t, "svc"))
			case "pod":
				p := genControllerPod(t, dual)
				if old, ok := s.GetPod(p.Namespace, p.Name); ok {
					err = s.Delete(KindPod, old.Namespace, old.Name)
				}
				if err == nil {
					_, err = s.Create(p)
				}
			case "pod-del":
				err = s.Delete(KindPod, "default", genPodName.Draw(t, "pod"))
			case "pod-term":
				err = s.DeletePod("default", genPodName.Draw(t, "pod"), time.Duration(rapid.IntRange(0, 30).Draw(t, "grace"))*time.Second)
			case "pod-status":
				p, ok := s.GetPod("default", genPodName.Draw(t, "pod"))
				if !ok {
					continue
				}
				st := p.DeepCopy()
				st.Status.PodIP, st.Status.PodIPs = "", nil
				for _, ip := range genPodIPs(t, dual) {
					st.Status.PodIPs = append(st.Status.PodIPs, corev1.PodIP{IP: ip})
				}
				SetPodReady(st, rapid.Bool().Draw(t, "ready"))
				_, err = s.UpdateStatus(st)
			case "pod-labels":
				p, ok := s.GetPod("default", genPodName.Draw(t, "pod"))
				if !ok {
					continue
				}
				l := p.DeepCopy()
				l.Labels = parseLabels(genApp.Draw(t, "app"))
				_, err = s.Update(l)
			case "node":
				name := genNodeName.Draw(t, "node")
				n := NewNode(name, Zone(rapid.SampledFrom([]string{"zone-a", "zone-b"}).Draw(t, "zone")))
				if _, ok := s.GetNode(name); ok {
					_, err = s.Update(n)
				} else {
					_, err = s.Create(n)
				}
			case "node-del":
				err = s.Delete(KindNode, "", genNodeName.Draw(t, "node"))
			}
			if err != nil {
				t.Logf("%s: %v", op, err)
			}
			now = now.Add(time.Second)
			checkSlices(t, s)
		}
	})
}

// A node deletion or creation changes endpoints only with StrictNodes; the
// property above covers it, this pins the simplest case.
func TestStrictNodesFollowNodeLifecycle(t *testing.T) {
	s := newStore(t, Config{StrictNodes: true})
	mustCreate(t, s, NewService("default/web", Selector("app=web"), Port("http", 80, 0)))
	mustCreate(t, s, NewPod("default/p", Labels("app=web"), OnNode("node-a"), PodIP("10.244.0.1"), Ready(true)))
	if got := endpointLines(s, "default", "web"); !slices.Equal(got, []string{"IPv4 [] (empty)"}) {
		t.Fatalf("without node: %v", got)
	}
	mustCreate(t, s, NewNode("node-a"))
	if got := endpointLines(s, "default", "web"); len(got) != 1 || !strings.Contains(got[0], "10.244.0.1") {
		t.Fatalf("with node: %v", got)
	}
	if err := s.Delete(KindNode, "", "node-a"); err != nil {
		t.Fatal(err)
	}
	if got := endpointLines(s, "default", "web"); !slices.Equal(got, []string{"IPv4 [] (empty)"}) {
		t.Fatalf("after node delete: %v", got)
	}
}
