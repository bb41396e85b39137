package service

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func readFixture(b *testing.B, name string) []byte {
	b.Helper()
	data, err := os.ReadFile(filepath.Join(manifestsDir, name))
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkLoadKubectlDump: Load of the 18-object kubectl dump (strict
// decoding plus the YAML position tree).
func BenchmarkLoadKubectlDump(b *testing.B) {
	data := readFixture(b, "kubectl-get-all.yaml")
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load("dump.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadKubectlDumpAnchor: the same file through sigs.k8s.io/yaml
// into a List and encoding/json per item (no strictness, no positions) —
// what a plain client does.
func BenchmarkLoadKubectlDumpAnchor(b *testing.B) {
	data := readFixture(b, "kubectl-get-all.yaml")
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var l corev1.List
		if err := yaml.Unmarshal(data, &l); err != nil {
			b.Fatal(err)
		}
		for _, it := range l.Items {
			var tm struct{ Kind string }
			_ = json.Unmarshal(it.Raw, &tm)
			obj := kinds[tm.Kind].newObj()
			if err := json.Unmarshal(it.Raw, obj); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkValidateService(b *testing.B) {
	svc := NewService("default/web", LoadBalancer(), Selector("app=web"), Port("http", 80, 8080), UDPPort("dns", 53, 0),
		ExternalTrafficPolicy("Local"), ClientIPAffinity(0), ExternalIPs("203.0.113.5"))
	DefaultService(svc)
	allocated(svc)
	b.ReportAllocs()
	for b.Loop() {
		if errs := ValidateService(svc); len(errs) != 0 {
			b.Fatal(errs)
		}
	}
}

// BenchmarkCreateService: one Service create (default, allocate clusterIP
// and a node port, validate, controller placeholder slice) in a store that
// grows by one service per iteration.
func BenchmarkCreateService(b *testing.B) {
	s := newStore(b, Config{})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.Create(NewService(fmt.Sprintf("default/svc-%d", i), Selector(fmt.Sprintf("app=%d", i)), Port("http", 80, 8080))); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkPodReadinessFlip: one pod status update (ready ↔ not ready) in a
// service of n pods, including the controller's resync of that service.
func BenchmarkPodReadinessFlip(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			s := newStore(b, Config{})
			mustCreate(b, s, NewService("default/web", Selector("app=web"), NamedPort("http", 80, "http")))
			for i := 0; i < n; i++ {
				mustCreate(b, s, NewPod(fmt.Sprintf("default/web-%d", i), Labels("app=web"), ContainerPort("http", 8080, "TCP"),
					PodIP(fmt.Sprintf("10.244.%d.%d", i/250, i%250+1)), Ready(true)))
			}
			b.ReportAllocs()
			ready := false
			for b.Loop() {
				p, _ := s.GetPod("default", "web-0")
				st := p.DeepCopy()
				SetPodReady(st, ready)
				ready = !ready
				if _, err := s.UpdateStatus(st); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkApplyDump: a fresh store (with the master service) and
// ApplyManifests of the kubectl dump.
func BenchmarkApplyDump(b *testing.B) {
	ms, err := Load("dump.yaml", readFixture(b, "kubectl-get-all.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		s := newStore(b, Config{MasterService: true})
		if err := s.ApplyManifests(ms); err != nil {
			b.Fatal(err)
		}
	}
}
