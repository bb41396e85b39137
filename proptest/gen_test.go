package proptest

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"pgregory.net/rapid"

	"github.com/clusterlab/clusterlab/service"
)

// TestGeneratedObjectsAreValid: every object a case holds passes the API server's
// defaulting and validation (services with the allocations the API server made, as
// scenario files pin them), and a case builds into a running cluster without
// background errors.
func TestGeneratedObjectsAreValid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := Cases(Options{Faults: true}).Draw(t, "case")
		w, err := Build(c, nil)
		if err != nil {
			t.Fatalf("build: %v\ncase: %s", err, c.Summary())
		}
		defer w.Close()
		var objs []runtime.Object
		for _, s := range c.Services {
			objs = append(objs, w.pinned(s))
		}
		for _, p := range c.Pods {
			objs = append(objs, p.DeepCopy())
		}
		for _, s := range c.Slices {
			objs = append(objs, s.DeepCopy())
		}
		for _, o := range objs {
			service.Default(o)
			if errs := service.Validate(o); len(errs) > 0 {
				t.Fatalf("%s %s is invalid: %v", service.KindOf(o), service.ObjectKey(o), errs.ToAggregate())
			}
		}
	})
}
