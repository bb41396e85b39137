package service

import (
	"fmt"
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"
)

// servicesSelectingScan is servicesSelectingLocked by a scan of the namespace's
// Services, as it was before the svcBy index: the reference the index is tested against.
func (s *Store) servicesSelectingScan(ns string, a, b *corev1.Pod) []string {
	var out []string
	for name, o := range s.objs[KindService][ns] {
		svc := o.(*corev1.Service)
		if svc.Spec.Selector == nil {
			continue
		}
		if (a != nil && selects(svc.Spec.Selector, a.Labels)) || (b != nil && selects(svc.Spec.Selector, b.Labels)) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// TestPropServicesSelectingIndex: across creates, selector changes and deletes of
// Services (nil, empty and multi-key selectors), the Services the svcBy index finds for
// any pair of pods are those a scan of the namespace finds, also after the store is
// rolled back by a failed Apply (the index rebuilt).
func TestPropServicesSelectingIndex(t *testing.T) {
	keys, vals := []string{"app", "tier", "x"}, []string{"1", "2"}
	drawLabels := func(t *rapid.T, label string, allowNil bool) map[string]string {
		if allowNil && rapid.IntRange(0, 5).Draw(t, label+"Nil") == 0 {
			return nil
		}
		m := map[string]string{}
		for _, k := range keys {
			if v := rapid.IntRange(0, len(vals)).Draw(t, label+"-"+k); v < len(vals) {
				m[k] = vals[v]
			}
		}
		return m
	}
	rapid.Check(t, func(t *rapid.T) {
		s, err := NewStore(Config{})
		if err != nil {
			t.Fatal(err)
		}
		nss := []string{"default", "other"}
		if err := s.Apply(NewNamespace("other")); err != nil {
			t.Fatal(err)
		}
		check := func(when string) {
			for i := 0; i < 6; i++ {
				ns := rapid.SampledFrom(nss).Draw(t, "ns")
				var a, b *corev1.Pod
				if rapid.Bool().Draw(t, "hasA") {
					a = &corev1.Pod{}
					a.Labels = drawLabels(t, "a", true)
				}
				if rapid.Bool().Draw(t, "hasB") {
					b = &corev1.Pod{}
					b.Labels = drawLabels(t, "b", true)
				}
				if b != nil && rapid.Bool().Draw(t, "sameLabels") {
					a = &corev1.Pod{}
					a.Labels = b.Labels
				}
				s.mu.Lock()
				got, want := s.servicesSelectingLocked(ns, a, b), s.servicesSelectingScan(ns, a, b)
				s.mu.Unlock()
				if !slices.Equal(got, want) {
					t.Fatalf("%s: ns %s, pods %v %v: index %v, scan %v", when, ns, a, b, got, want)
				}
			}
		}
		steps := rapid.IntRange(1, 30).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			ns := rapid.SampledFrom(nss).Draw(t, "svcNS")
			name := fmt.Sprintf("svc-%d", rapid.IntRange(0, 5).Draw(t, "svc"))
			if rapid.IntRange(0, 3).Draw(t, "op") == 0 {
				err := s.Delete(KindService, ns, name)
				_ = err // deleting a Service that does not exist is fine here
			} else {
				svc := NewService(ns+"/"+name, Port("http", 80, 8080))
				svc.Spec.Selector = drawLabels(t, "sel", true)
				if err := s.Apply(svc); err != nil {
					t.Fatal(err)
				}
			}
			check(fmt.Sprintf("step %d", i))
		}
		// An Apply that fails part-way restores the store as it was (the index rebuilt).
		svc := NewService("default/svc-new", Port("http", 80, 8080))
		svc.Spec.Selector = drawLabels(t, "newSel", false)
		if err := s.Apply(svc, NewService("default/Not_A_Name", Port("http", 80, 8080))); err == nil {
			t.Fatal("an invalid Service applied")
		}
		check("after a failed Apply")
	})
}
